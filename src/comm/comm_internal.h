/* Private parts of the communicator: the phases of a collective (device -> host mailboxes, host
 * exchange, host mailboxes -> device), which the DCP step records into its own commands, and the
 * hook through which the MPI transport moves host blocks between processes. */
#ifndef DCP_COMM_INTERNAL_H
#define DCP_COMM_INTERNAL_H

#include "dcpvk/comm.h"

typedef enum dcp_coll {
    DCP_COLL_ALL_GATHER = 0,
    DCP_COLL_ALL_TO_ALL = 1,
    DCP_COLL_REDUCE_SCATTER = 2,
    DCP_COLL_ALL_REDUCE = 3,
} dcp_coll;

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

/* Makes the mailboxes hold blocks of `bytes` (grows them; every device must be idle). */
dcp_status dcp_comm_prepare(dcp_comm *c, uint64_t bytes);
/* Records local rank i's sends of collective kind into cmd (on rank i's device): block = bytes of
 * one block (count * dtype size). Ends with a barrier towards the host. */
dcp_status dcp_comm_record_send(dcp_cmd *cmd, dcp_comm *c, int local, dcp_coll kind, dcp_comm_buf send,
                                uint64_t block);
/* Host step once every local rank's send recording has completed: moves blocks between ranks and
 * reduces (sum, rank order, f32 accumulation) for REDUCE_SCATTER / ALL_REDUCE. Then flips the
 * mailbox bank, so that the sends of the next collective may be recorded into the same submission
 * as this collective's receive. Per collective: sends, exchange, receive, in that order. */
dcp_status dcp_comm_exchange(dcp_comm *c, dcp_coll kind, uint64_t count, dcp_dtype dtype);
/* Records local rank i's copy of the result into recv (a barrier orders it before later work). */
dcp_status dcp_comm_record_recv(dcp_cmd *cmd, dcp_comm *c, int local, dcp_coll kind, dcp_comm_buf recv,
                                uint64_t block);
/* Where local rank i's received blocks [size][block] sit, as seen from its device (ALL_GATHER and
 * ALL_TO_ALL), for callers that copy them out in another layout. */
dcp_comm_buf dcp_comm_recv_area(const dcp_comm *c, int local);
/* Adds logical bytes sent to rank i's counter. */
void dcp_comm_count(dcp_comm *c, int local, uint64_t bytes);

#endif
