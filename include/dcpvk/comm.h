/* Communicator of a DCP (or TP) group: collectives on device buffers, shaped like NCCL.
 *
 * A communicator spans `size` ranks, one device each. This process holds `local_count` of them:
 * group ranks [first_rank, first_rank + local_count). In one process (dcp_comm_init_local) it holds
 * them all; under MPI (dcp_comm_init_mpi) each process holds the same number of consecutive ranks.
 * Collectives take one buffer per local rank: send[i] and recv[i] belong to local rank i's device.
 *
 * Transports (docs/design.md section 8), chosen per pair of ranks (sender -> receiver), best first:
 *   devgroup  one device-group VkDevice over both devices (DCP_VK_DEVICE_GROUPS): the sender copies
 *             into the receiver's memory through a peer view (device masks);
 *   peer      the same physical device (equal device and driver UUIDs), in one process or across
 *             the processes of a node: the receiver's buffer is exported as an opaque fd (passed over
 *             a Unix socket between processes) and imported by the sender, which copies into it;
 *   dmabuf    different devices in one process: the same with a dma-buf, used only when the sender
 *             imports it (vkGetMemoryFdPropertiesKHR) and a start-up probe finds it faster than host
 *             memory; otherwise the pair falls back, and its reason says why;
 *   hostmem   host memory imported into both devices (VK_EXT_external_memory_host): one allocation
 *             in a process, one POSIX shared-memory segment across the processes of a node. Senders
 *             write their blocks there, receivers read them in place. Works across vendors;
 *   staging   mapped host-visible buffers and memcpy (in one process; always works);
 *   mpi       host-visible staging and MPI between processes: every pair across nodes, and the host
 *             path between processes of a node.
 * Every transport moves the same bytes in the same order. Reductions (sum) are done in rank order
 * with f32 accumulation, so every transport gives bitwise the same result.
 *
 * Synchronous: call after the work that writes send has completed (dcp_cmd_wait); on return every
 * recv holds the result and the communicator's own device work has completed. In-place rule: send
 * and recv may overlap in any way (all of send is read before any of recv is written).
 * Not thread-safe: one thread per communicator. */
#ifndef DCPVK_COMM_H
#define DCPVK_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/dtype.h"
#include "dcpvk/export.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_comm dcp_comm;

typedef enum dcp_transport {
    DCP_TRANSPORT_AUTO = 0,     /* $DCP_VK_TRANSPORT if set, else the best for each pair */
    DCP_TRANSPORT_DEVGROUP = 1,
    DCP_TRANSPORT_HOSTMEM = 2,
    DCP_TRANSPORT_STAGING = 3,
    DCP_TRANSPORT_MPI = 4,      /* forced: the host path (staging in a process, MPI between processes) */
    DCP_TRANSPORT_PEER = 5,
    DCP_TRANSPORT_DMABUF = 6,
    DCP_TRANSPORT_MIXED = 7,    /* only from dcp_comm_transport: the pairs use different transports */
    DCP_TRANSPORT_SELF = 8,     /* only from the queries: a rank's own block under auto (read in place,
                                   or copied locally into its inbox) */
} dcp_transport;

typedef enum dcp_red_op {
    DCP_RED_SUM = 0,
} dcp_red_op;

typedef struct dcp_comm_config {
    /* Transport of the pairs inside a node (default AUTO: $DCP_VK_TRANSPORT = auto | devgroup | peer
     * | dmabuf | hostmem | staging | mpi, else the best for each pair). A forced transport that a
     * pair cannot use fails with DCP_ERR_UNSUPPORTED naming the pair and why. Pairs across nodes
     * always use mpi. */
    dcp_transport transport;
    /* Initial capacity of one message block in bytes (default 64 KiB; grows on demand). */
    uint64_t block_bytes;
} dcp_comm_config;

#define DCP_COMM_CONFIG_DEFAULT {.transport = DCP_TRANSPORT_AUTO, .block_bytes = 65536}

/* A position in a device buffer: bytes from the start. */
typedef struct dcp_comm_buf {
    dcp_buffer *buffer;
    uint64_t offset;
} dcp_comm_buf;

/* All `count` ranks in this process: devices[i] is rank i (devices may repeat the same physical
 * device; they must be distinct dcp_devices). Destroy with dcp_comm_destroy before the devices. */
DCP_API dcp_status dcp_comm_init_local(dcp_device *const *devices, int count, const dcp_comm_config *config,
                                       dcp_comm **out);
/* Collective over MPI_COMM_WORLD: every process passes local_count devices (the same number
 * everywhere); process p holds ranks [p * local_count, (p + 1) * local_count). MPI must be
 * initialised (dcp_mpi_init). DCP_ERR_UNSUPPORTED when built without MPI. */
DCP_API dcp_status dcp_comm_init_mpi(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                                     dcp_comm **out);
/* Sub-communicator (e.g. one DCP group of a TP group spread over processes). Collective over
 * MPI_COMM_WORLD: every process calls it at the same point (MPI_Comm_split). The processes that
 * pass the same color >= 0 form one communicator, ordered by world rank; each passes local_count
 * devices (the same number within a communicator), so the process that is the p-th of its color
 * holds ranks [p * local_count, (p + 1) * local_count) of it. color < 0: this process joins none
 * (DCP_OK, *out NULL). A communicator of one process uses the in-process transport of config;
 * otherwise the transport is mpi. The communicator owns the MPI sub-communicator and frees it in
 * dcp_comm_destroy (before dcp_mpi_finalize). DCP_ERR_UNSUPPORTED when built without MPI. */
DCP_API dcp_status dcp_comm_init_mpi_split(dcp_device *const *devices, int local_count, int color,
                                           const dcp_comm_config *config, dcp_comm **out);
DCP_API void dcp_comm_destroy(dcp_comm *comm);

DCP_API int dcp_comm_size(const dcp_comm *comm);
DCP_API int dcp_comm_local_count(const dcp_comm *comm);
DCP_API int dcp_comm_first_rank(const dcp_comm *comm);
DCP_API dcp_device *dcp_comm_device(const dcp_comm *comm, int local);
/* The transport of every pair of distinct ranks when they all use the same one, else
 * DCP_TRANSPORT_MIXED; for a communicator of one rank, how its own block moves (the forced
 * transport, or DCP_TRANSPORT_SELF under auto). */
DCP_API dcp_transport dcp_comm_transport(const dcp_comm *comm);
/* The transport rank src's blocks take to rank dst (0 <= src, dst < size; src == dst: how a rank's
 * own block moves), and why it was chosen (a sentence naming what was checked). */
DCP_API dcp_transport dcp_comm_pair_transport(const dcp_comm *comm, int src, int dst);
DCP_API const char *dcp_comm_pair_reason(const dcp_comm *comm, int src, int dst);
/* Writes a summary of the pairs' transports into buf (cap bytes, NUL-terminated, one line per
 * transport and reason: "peer, 12 pairs: same physical device ..."); returns buf. */
DCP_API const char *dcp_comm_describe(const dcp_comm *comm, char *buf, size_t cap);
/* Bytes local rank i has sent to other ranks since creation or the last reset (logical message
 * bytes; its own block is not counted). */
DCP_API uint64_t dcp_comm_bytes_sent(const dcp_comm *comm, int local);
DCP_API void dcp_comm_reset_stats(dcp_comm *comm);

/* "auto", "devgroup", "hostmem", "staging", "mpi", "peer", "dmabuf", "mixed", "self". */
DCP_API const char *dcp_transport_name(dcp_transport t);
/* Parses a transport name; DCP_ERR_INVALID_ARGUMENT lists the allowed names. */
DCP_API dcp_status dcp_transport_parse(const char *name, dcp_transport *out);

/* send [count] -> recv [size][count]: block n is rank n's send. */
DCP_API dcp_status dcp_comm_all_gather(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                                       dcp_dtype dtype, dcp_comm *comm);
/* send [size][count] -> recv [count] = op over ranks n of rank n's send block `rank`. */
DCP_API dcp_status dcp_comm_reduce_scatter(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                                           dcp_dtype dtype, dcp_red_op op, dcp_comm *comm);
/* send [size][count] -> recv [size][count]: recv block n = rank n's send block `rank`. */
DCP_API dcp_status dcp_comm_all_to_all(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                                       dcp_dtype dtype, dcp_comm *comm);
/* send [count] -> recv [count] = op over all ranks' send. */
DCP_API dcp_status dcp_comm_all_reduce(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                                       dcp_dtype dtype, dcp_red_op op, dcp_comm *comm);

/* Whether a step over comm's ranks can run its rounds with the ranks waiting on each other on the
 * GPU (no pair exchanges through the host, every pair shares a timeline semaphore) instead of the
 * host waiting between rounds; why receives a sentence saying why not, or how ([cap] bytes,
 * NUL-terminated; NULL or cap 0: none). The same on every process of comm. Thread-safe for a
 * communicator not in use by another thread. */
DCP_API bool dcp_comm_gpu_rounds(const dcp_comm *comm, char *why, size_t cap);

/* MPI helpers for apps and tests, so that only the transport includes mpi.h. dcp_mpi_init calls
 * MPI_Init (once) and returns this process's rank and the world size; DCP_ERR_UNSUPPORTED when
 * built without MPI. It sets MPI_ERRORS_RETURN on MPI_COMM_WORLD (inherited by the communicators
 * split from it), so that an MPI failure (a process that died) comes back as DCP_ERR_MPI with
 * MPI's message instead of ending the process inside the library. dcp_mpi_finalize calls
 * MPI_Finalize; dcp_mpi_barrier MPI_Barrier. */
DCP_API dcp_status dcp_mpi_init(int *argc, char ***argv, int *rank, int *size);
DCP_API void dcp_mpi_finalize(void);
DCP_API void dcp_mpi_barrier(void);
/* Max over processes of a double (timings); identity without MPI. */
DCP_API double dcp_mpi_max(double x);
/* MPI_Bcast over MPI_COMM_WORLD of `bytes` bytes at data from process root (apps: the sampled
 * token of rank 0, so that every process feeds the same one). DCP_OK without MPI running;
 * DCP_ERR_UNSUPPORTED never (a no-op when built without MPI). */
DCP_API dcp_status dcp_mpi_bcast(void *data, uint64_t bytes, int root);
/* dcp_mpi_bcast for a wait that may be long (a server's followers waiting for the next step): a
 * process whose data has not come yet sleeps sleep_us microseconds between checks instead of
 * spinning in MPI (MPICH polls at full speed). Every process of the broadcast calls this variant. */
DCP_API dcp_status dcp_mpi_bcast_idle(void *data, uint64_t bytes, int root, uint32_t sleep_us);
/* In place, vals [n] becomes the element-wise maximum over every process of MPI_COMM_WORLD, waiting
 * like dcp_mpi_bcast_idle (sleep_us between checks). Every process calls it with the same n. A
 * step plan goes from process 0 to the others this way while the others' reports (a stop signal)
 * come back in the same exchange. DCP_OK without MPI running. */
DCP_API dcp_status dcp_mpi_max_u32_idle(uint32_t *vals, uint32_t n, uint32_t sleep_us);
/* Ends every process of the MPI job with exit status code (MPI_Abort on MPI_COMM_WORLD), for an
 * app that met a failure the other processes cannot see (they may be waiting for it in a
 * collective) and has printed why. The library itself never calls it. Returns only when MPI is
 * not running (or not built); the caller then exits itself. */
DCP_API void dcp_mpi_abort(int code);

#ifdef __cplusplus
}
#endif
#endif
