/* Private parts of the communicator shared by comm.c and the MPI transport (mpi_transport.c): the
 * hook through which the MPI transport moves host blocks between processes. Other modules use
 * the public collectives (include/dcpvk/comm.h) or the recordable ones (src/comm/put.h). */
#ifndef DCP_COMM_INTERNAL_H
#define DCP_COMM_INTERNAL_H

#include "dcpvk/comm.h"

/* Moves host blocks between processes (MPI). Blocks are `bytes` long, per process:
 * allgather: send [bytes] -> recv [nproc][bytes]; alltoall: send [nproc][bytes] -> recv [nproc][bytes]. */
typedef struct dcp_comm_net {
    void *ctx;
    int nproc, proc;
    dcp_status (*allgather)(void *ctx, const void *send, void *recv, uint64_t bytes);
    dcp_status (*alltoall)(void *ctx, const void *send, void *recv, uint64_t bytes);
    void (*destroy)(void *ctx);
} dcp_comm_net;

/* Creates a communicator of nproc * local_count ranks; net NULL: one process. */
dcp_status dcp_comm_create_internal(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                                    const dcp_comm_net *net, dcp_comm **out);

#endif
