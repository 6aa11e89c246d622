/* What each transport is, and how the communicator picks one for each pair of ranks (sender ->
 * receiver), best first as NCCL does: the facts about a pair are gathered at creation
 * (src/comm/comm.c: device UUIDs and handle capabilities of every rank, node and process,
 * device-group peer features, the dma-buf negotiation), and these pure functions turn them into a
 * choice with its reason. Kept apart so that tests can feed them facts that this machine's devices
 * cannot produce. */
#ifndef DCP_COMM_SELECT_H
#define DCP_COMM_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/comm.h"
#include "dcpvk/vk.h"

/* ---- what each transport is ---------------------------------------------------------------- */

/* Where the sender's put area lives (the memory its recordings write outgoing blocks into). */
typedef enum dcp_put_home {
    DCP_PUT_ANYWHERE = 0, /* wherever the sender's other pairs need it (a rank's own block) */
    DCP_PUT_DEVICE = 1,   /* a device-local buffer of the sender */
    DCP_PUT_HOST = 2,     /* a host-visible buffer of the sender: the host reads it */
    DCP_PUT_SEGMENT = 3,  /* the node's shared host segment, imported into every device */
} dcp_put_home;

/* Who copies a block into the receiver's inbox (when the receiver does not read it in place). */
typedef enum dcp_copier {
    DCP_COPIER_NONE = 0,         /* nobody (auto, mixed: not a pair's transport) */
    DCP_COPIER_SENDER_GPU = 1,   /* the sender's GPU, at the end of its round (push) */
    DCP_COPIER_RECEIVER_GPU = 2, /* the receiver's GPU out of the segment, at the start of its next round (pull) */
    DCP_COPIER_HOST = 3,         /* the host (memcpy) between the rounds, in one process */
    DCP_COPIER_NET = 4,          /* the host packs, MPI moves, the host unpacks, between the rounds */
} dcp_copier;

/* How a DCP_COPIER_SENDER_GPU sender reaches the receiver's inbox. */
typedef enum dcp_reach {
    DCP_REACH_NONE = 0,      /* it does not write the receiver's memory */
    DCP_REACH_OWN = 1,       /* the inbox is on the sender's own device (a rank's own block) */
    DCP_REACH_PEER_VIEW = 2, /* a device-group peer-bound view of the inbox (device masks) */
    DCP_REACH_FD = 3,        /* the inbox exported as `handle`, imported by the sender (over a Unix socket
                                between processes): another VkDevice's memory, so queue-family ownership
                                is released by the writer and acquired by the reader */
} dcp_reach;

/* One transport's row: the only place that says where its memory lives and who copies (docs/
 * design.md section 8 shows the same table). The communicator consults rows, never the kind. */
typedef struct dcp_transport_info {
    const char *name;  /* dcp_transport_name */
    uint8_t forcible;  /* may be asked for (dcp_comm_config.transport, $DCP_VK_TRANSPORT) */
    uint8_t put;       /* dcp_put_home */
    uint8_t in_place;  /* the receiver may read the block where it was put: when the sender's put area
                          is in the segment and every pair into the receiver may, it has no inbox */
    uint8_t copier;    /* dcp_copier: otherwise, who copies it into the inbox */
    uint8_t reach;     /* dcp_reach */
    uint32_t handle;   /* DCP_HANDLE_* the inbox is exported as (DCP_REACH_FD), else 0 */
} dcp_transport_info;

/* The row of t (a valid dcp_transport; anything else gets a row that is not forcible and copies
 * nothing, named "unknown"). Thread-safe (a constant table). */
const dcp_transport_info *dcp_transport_info_of(dcp_transport t);
/* The host copies the blocks (staging, mpi): the exchange ends a round. */
static inline int dcp_transport_host_copies(const dcp_transport_info *x)
{
    return x->copier == DCP_COPIER_HOST || x->copier == DCP_COPIER_NET;
}

/* The transport a communicator forces on the pairs inside a node: `asked` (config), or under auto
 * $DCP_VK_TRANSPORT when set; DCP_TRANSPORT_AUTO: the best for each pair. A transport that cannot
 * be asked for fails with DCP_ERR_INVALID_ARGUMENT. */
dcp_status dcp_comm_forced_transport(dcp_transport asked, dcp_transport *out);

/* ---- the choice ----------------------------------------------------------------------------- */

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

/* Whether the pair's dma-buf negotiation should run (f without the dma-buf fields): inside a node,
 * between different devices under auto, or wherever dma-buf is forced. */
int dcp_comm_dmabuf_wanted(const dcp_comm_pair_facts *f, dcp_transport forced);

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
