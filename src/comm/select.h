/* How the communicator picks a transport for each pair of ranks (sender -> receiver), best first as
 * NCCL does: the facts about a pair are gathered at creation (src/comm/comm.c: device UUIDs and
 * handle capabilities of every rank, node and process, device-group peer features, the dma-buf
 * negotiation), and these pure functions turn them into a choice with its reason. Kept apart so
 * that tests can feed them facts that this machine's devices cannot produce. */
#ifndef DCP_COMM_SELECT_H
#define DCP_COMM_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/comm.h"
#include "dcpvk/vk.h"

typedef enum dcp_dmabuf_verdict {
    DCP_DMABUF_UNTRIED = 0, /* not a candidate (same physical device, other node, ...) */
    DCP_DMABUF_REFUSED = 1, /* export or import refused (why says which) */
    DCP_DMABUF_SLOWER = 2,  /* imported, but the probe found host memory faster */
    DCP_DMABUF_OK = 3,      /* imported and faster than host memory */
} dcp_dmabuf_verdict;

/* What is known about one pair, sender s -> receiver d (the receiver's memory is what is shared). */
typedef struct dcp_comm_pair_facts {
    int self;            /* s == d */
    int same_node;       /* one node (MPI_COMM_TYPE_SHARED) */
    int same_proc;       /* one process */
    int multi_proc;      /* the communicator spans processes (its host memory is shared memory) */
    int devgroup_ok;     /* s may copy into d's memory through a device-group peer view */
    int same_physical;   /* equal device and driver UUIDs */
    int opaque_ok;       /* d exports and s imports opaque-fd buffer memory */
    int host_ok;         /* both import host memory (VK_EXT_external_memory_host) */
    dcp_dmabuf_verdict dmabuf;
    char devgroup_why[192];  /* why not, when !devgroup_ok */
    char dmabuf_why[256];    /* the negotiation's outcome (refusal, or the probe's figures) */
} dcp_comm_pair_facts;

/* The transport of one pair: `forced` (DCP_TRANSPORT_AUTO: best available) applies to pairs inside
 * a node; pairs across nodes always use mpi. A forced transport the pair cannot use fails with
 * DCP_ERR_UNSUPPORTED and a message naming it and why (why holds it too). On success *out is
 * the transport (DCP_TRANSPORT_SELF for a rank's own block under auto) and why its reason. */
dcp_status dcp_comm_choose_pair(const dcp_comm_pair_facts *f, dcp_transport forced, dcp_transport *out, char *why,
                                size_t why_cap);

/* The dma-buf probe's verdict: dma-buf is used only when copying into it (dmabuf_ns for the probe's
 * bytes) beats the host-memory path (host_ns: into host memory and out again on the receiver).
 * Writes the figures into why. */
dcp_dmabuf_verdict dcp_comm_dmabuf_probe_verdict(double dmabuf_ns, double host_ns, uint64_t bytes, char *why,
                                                 size_t why_cap);

/* The dma-buf negotiation for sender `importer` -> receiver `exporter`, two devices of this process:
 * export a probe buffer, import it (vkGetMemoryFdPropertiesKHR), time the probe. *verdict and why
 * say how it went (a refusal is a verdict, not an error; errors are for host memory running out). */
dcp_status dcp_comm_dmabuf_negotiate(dcp_device *exporter, dcp_device *importer, dcp_dmabuf_verdict *verdict,
                                     char *why, size_t why_cap);

#endif
