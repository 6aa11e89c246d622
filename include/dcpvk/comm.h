/* Communicator of a DCP (or TP) group: collectives on device buffers, shaped like NCCL.
 *
 * A communicator spans `size` ranks, one device each. This process holds `local_count` of them:
 * group ranks [first_rank, first_rank + local_count). In one process (dcp_comm_init_local) it holds
 * them all; under MPI (dcp_comm_init_mpi) each process holds the same number of consecutive ranks.
 * Collectives take one buffer per local rank: send[i] and recv[i] belong to local rank i's device.
 *
 * Transports (docs/design.md section 8), chosen for the whole group:
 *   devgroup  device-group peer copies (needs a Vulkan device group with peer memory; the context
 *             creates one VkDevice per device, so this always answers DCP_ERR_UNSUPPORTED today);
 *   hostmem   one host allocation imported into every device (VK_EXT_external_memory_host): each
 *             device copies its messages straight into its peers' mailboxes with its own queue;
 *   staging   each device's own mapped host-visible buffer, messages moved by memcpy;
 *   mpi       device -> host staging -> MPI_Alltoall / MPI_Allgather -> host staging -> device.
 * Reductions (sum) are done on the host in rank order with f32 accumulation, so every transport
 * gives bitwise the same result.
 *
 * Synchronous: call after the work that writes send has completed (dcp_cmd_wait); on return every
 * recv holds the result and the communicator's own device work has completed. In-place rule: send
 * and recv may overlap in any way (all of send is read before any of recv is written).
 * Not thread-safe: one thread per communicator. */
#ifndef DCPVK_COMM_H
#define DCPVK_COMM_H

#include <stdint.h>

#include "dcpvk/dtype.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_comm dcp_comm;

typedef enum dcp_transport {
    DCP_TRANSPORT_AUTO = 0,     /* $DCP_VK_TRANSPORT if set, else the best available in-process one */
    DCP_TRANSPORT_DEVGROUP = 1,
    DCP_TRANSPORT_HOSTMEM = 2,
    DCP_TRANSPORT_STAGING = 3,
    DCP_TRANSPORT_MPI = 4,      /* only from dcp_comm_init_mpi */
} dcp_transport;

typedef enum dcp_red_op {
    DCP_RED_SUM = 0,
} dcp_red_op;

typedef struct dcp_comm_config {
    /* In-process transport (default AUTO: $DCP_VK_TRANSPORT = auto|devgroup|hostmem|staging, else
     * hostmem where every device has VK_EXT_external_memory_host, else staging). A forced transport
     * that is unavailable fails with DCP_ERR_UNSUPPORTED. Under MPI it is the in-process part. */
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
dcp_status dcp_comm_init_local(dcp_device *const *devices, int count, const dcp_comm_config *config,
                               dcp_comm **out);
/* Collective over MPI_COMM_WORLD: every process passes local_count devices (the same number
 * everywhere); process p holds ranks [p * local_count, (p + 1) * local_count). MPI must be
 * initialised (dcp_mpi_init). DCP_ERR_UNSUPPORTED when built without MPI. */
dcp_status dcp_comm_init_mpi(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                             dcp_comm **out);
/* Sub-communicator (e.g. one DCP group of a TP group spread over processes). Collective over
 * MPI_COMM_WORLD: every process calls it at the same point (MPI_Comm_split). The processes that
 * pass the same color >= 0 form one communicator, ordered by world rank; each passes local_count
 * devices (the same number within a communicator), so the process that is the p-th of its color
 * holds ranks [p * local_count, (p + 1) * local_count) of it. color < 0: this process joins none
 * (DCP_OK, *out NULL). A communicator of one process uses the in-process transport of config;
 * otherwise the transport is mpi. The communicator owns the MPI sub-communicator and frees it in
 * dcp_comm_destroy (before dcp_mpi_finalize). DCP_ERR_UNSUPPORTED when built without MPI. */
dcp_status dcp_comm_init_mpi_split(dcp_device *const *devices, int local_count, int color,
                                   const dcp_comm_config *config, dcp_comm **out);
void dcp_comm_destroy(dcp_comm *comm);

int dcp_comm_size(const dcp_comm *comm);
int dcp_comm_local_count(const dcp_comm *comm);
int dcp_comm_first_rank(const dcp_comm *comm);
dcp_device *dcp_comm_device(const dcp_comm *comm, int local);
dcp_transport dcp_comm_transport(const dcp_comm *comm);
/* Bytes local rank i has sent to other ranks since creation or the last reset (logical message
 * bytes; its own block is not counted). */
uint64_t dcp_comm_bytes_sent(const dcp_comm *comm, int local);
void dcp_comm_reset_stats(dcp_comm *comm);

/* "auto", "devgroup", "hostmem", "staging", "mpi". */
const char *dcp_transport_name(dcp_transport t);
/* Parses a transport name; DCP_ERR_INVALID_ARGUMENT lists the allowed names. */
dcp_status dcp_transport_parse(const char *name, dcp_transport *out);

/* send [count] -> recv [size][count]: block n is rank n's send. */
dcp_status dcp_comm_all_gather(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_comm *comm);
/* send [size][count] -> recv [count] = op over ranks n of rank n's send block `rank`. */
dcp_status dcp_comm_reduce_scatter(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                                   dcp_dtype dtype, dcp_red_op op, dcp_comm *comm);
/* send [size][count] -> recv [size][count]: recv block n = rank n's send block `rank`. */
dcp_status dcp_comm_all_to_all(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_comm *comm);
/* send [count] -> recv [count] = op over all ranks' send. */
dcp_status dcp_comm_all_reduce(const dcp_comm_buf *send, const dcp_comm_buf *recv, uint64_t count,
                               dcp_dtype dtype, dcp_red_op op, dcp_comm *comm);

/* MPI helpers for apps and tests, so that only the transport includes mpi.h. dcp_mpi_init calls
 * MPI_Init (once) and returns this process's rank and the world size; DCP_ERR_UNSUPPORTED when
 * built without MPI. dcp_mpi_finalize calls MPI_Finalize; dcp_mpi_barrier MPI_Barrier. */
dcp_status dcp_mpi_init(int *argc, char ***argv, int *rank, int *size);
void dcp_mpi_finalize(void);
void dcp_mpi_barrier(void);
/* Max over processes of a double (timings); identity without MPI. */
double dcp_mpi_max(double x);
/* MPI_Bcast over MPI_COMM_WORLD of `bytes` bytes at data from process root (apps: the sampled
 * token of rank 0, so that every process feeds the same one). DCP_OK without MPI running;
 * DCP_ERR_UNSUPPORTED never (a no-op when built without MPI). */
dcp_status dcp_mpi_bcast(void *data, uint64_t bytes, int root);
/* dcp_mpi_bcast for a wait that may be long (a server's followers waiting for the next step): a
 * process whose data has not come yet sleeps sleep_us microseconds between checks instead of
 * spinning in MPI (MPICH polls at full speed). Every process of the broadcast calls this variant. */
dcp_status dcp_mpi_bcast_idle(void *data, uint64_t bytes, int root, uint32_t sleep_us);

#ifdef __cplusplus
}
#endif
#endif
