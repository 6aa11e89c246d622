/* Private parts of the communicator shared by comm.c and the MPI transport (mpi_transport.c): the
 * hooks through which the MPI transport moves host blocks between processes and tells where they
 * run. Other modules use the public collectives (include/dcpvk/comm.h) or the recordable ones
 * (src/comm/put.h). */
#ifndef DCP_COMM_INTERNAL_H
#define DCP_COMM_INTERNAL_H

#include "dcpvk/comm.h"

/* The processes of a communicator and how to move host bytes between them (MPI). Counts and
 * displacements in bytes.
 *   allgather: send [bytes] -> recv [nproc][bytes];
 *   alltoallv: send[sdispl[q], + scount[q]) to process q, recv[rdispl[q], + rcount[q]) from q;
 *   barrier:   returns once every process has called it. */
typedef struct dcp_comm_net {
    void *ctx;
    int nproc, proc;
    const int *node; /* [nproc] node of each process: the lowest process index on its node
                        (MPI_COMM_TYPE_SHARED); NULL: one process */
    dcp_status (*allgather)(void *ctx, const void *send, void *recv, uint64_t bytes);
    dcp_status (*alltoallv)(void *ctx, const void *send, const uint64_t *scount, const uint64_t *sdispl, void *recv,
                            const uint64_t *rcount, const uint64_t *rdispl);
    dcp_status (*barrier)(void *ctx);
    void (*destroy)(void *ctx);
} dcp_comm_net;

/* Creates a communicator of nproc * local_count ranks; net NULL: one process. Collective over the
 * net's processes. */
dcp_status dcp_comm_create_internal(dcp_device *const *devices, int local_count, const dcp_comm_config *config,
                                    const dcp_comm_net *net, dcp_comm **out);

#endif
