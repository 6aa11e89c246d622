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

/* Put-style exchange, one round and no per-destination copies: in its recording, local rank i
 * writes its outgoing blocks (copies or shaders) straight into dcp_comm_put_area(c, i): one block
 * for ALL_GATHER / ALL_REDUCE, [size][slot] (slot d for rank d) for ALL_TO_ALL /
 * REDUCE_SCATTER; slot <= the prepared capacity and a multiple of 4. Then dcp_comm_record_put
 * (the barrier towards the host). After every local rank's recording ran: dcp_comm_put_exchange
 * (staging, MPI: moves blocks on the host; hostmem: nothing to move, every device reads the one
 * shared allocation; counts `payload` bytes sent to each peer by every local rank). Then rank i's next recording reads the blocks
 * sent to it in place: source s's block at first.offset + s * stride of first.buffer (no
 * reduction is done: receivers sum on their devices, e.g. part_sum). The put area of the next
 * exchange is the other bank, so a round may read the last exchange's blocks and write the next
 * one's. The put area changes with every exchange: fetch it for each recording. */
dcp_comm_buf dcp_comm_put_area(const dcp_comm *c, int local);
/* Puts the mailbox banks in their initial state (next exchange in bank 0). Only between
 * exchanges whose blocks have all been read: e.g. before each model step, so that a step's
 * commands refer to the same banks every time and can be recorded once and replayed. */
void dcp_comm_reset_banks(dcp_comm *c);
/* Changes whenever the mailboxes are reallocated (dcp_comm_prepare growing them): commands
 * recorded against an older generation refer to freed memory. */
uint64_t dcp_comm_generation(const dcp_comm *c);
void dcp_comm_record_put(dcp_cmd *cmd);
dcp_status dcp_comm_put_exchange(dcp_comm *c, dcp_coll kind, uint64_t slot, uint64_t payload);
void dcp_comm_put_view(const dcp_comm *c, int local, dcp_coll kind, uint64_t slot, dcp_comm_buf *first,
                       uint64_t *stride);

#endif
