/* Private parts of the communicator, shared by its files and nothing else (other modules use the
 * public collectives of include/dcpvk/comm.h or the recordable ones of src/comm/put.h):
 *   comm.c         ranks, capabilities, the pair choice (select.c), queries, agreement
 *   mailbox.c      where every rank's memory lives (from the transports' rows), the node's shared
 *                  segment, the mailboxes and their growth
 *   targets.c      the push targets (own inbox, peer views, fds exported and imported, over Unix
 *                  sockets between processes) and the descriptor exchange that sem.c reuses
 *   put.c          the recordable put exchange
 *   sem.c          GPU-synchronised rounds: what the ranks can share, semaphores shared
 *   collectives.c  the synchronous (copying) collectives
 *   mpi_transport.c  the processes' hooks (MPI), and packing of mpi pairs' blocks; the only file
 *                  that includes mpi.h (mpi_none.c: builds without MPI).
 *
 * Memory of local rank i (global rank g), with bank = size * cap bytes ([rank][cap] slots) and
 * two banks that alternate between consecutive exchanges:
 *   put area  [2][size][cap]: where its recordings write outgoing blocks. In the node's shared
 *             segment (region of g) when some pair from g puts there (hostmem); else its own
 *             buffer, host-visible when the host copies some pair from g (staging, mpi), else
 *             device-local.
 *   view      where it reads what it received: the shared segment itself (source s's put region
 *             at stride `region`) when every pair into g may be read in place; else its inbox
 *             [2][size][cap] (source s at s * slot), into which senders' GPUs push (through
 *             imports or peer views), the host writes, or g's own GPU pulls blocks out of the
 *             segment.
 * Which of these each transport does is its row in select.c (dcp_transport_info_of). A pair's
 * bytes are the same whichever way they go, so results do not depend on transports. */
#ifndef DCP_COMM_INTERNAL_H
#define DCP_COMM_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "comm/fdx.h"
#include "comm/put.h"
#include "comm/select.h"
#include "comm/shm.h"
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

enum { DCP_COMM_WHY_CAP = 384, DCP_COMM_MSG_CAP = 512 };

/* What every process learns about every rank (gathered). */
typedef struct dcp_rank_caps {
    uint8_t device_uuid[16], driver_uuid[16];
    int32_t proc, node, pid, local;
    uint32_t mem_export, mem_import, sem_export, sem_import, timeline;
    uint32_t group_count, group_index;
    uint64_t vkdevice;
    int32_t logical_index;
    char name[64];
} dcp_rank_caps;

/* Equal device and driver UUIDs: one physical device (opaque fds import). */
static inline int dcp_rank_caps_same_physical(const dcp_rank_caps *a, const dcp_rank_caps *b)
{
    return !memcmp(a->device_uuid, b->device_uuid, 16) && !memcmp(a->driver_uuid, b->driver_uuid, 16);
}

/* A pair's choice as gathered: transport and reason. */
typedef struct dcp_pair_choice {
    int32_t transport;
    char why[DCP_COMM_WHY_CAP];
} dcp_pair_choice;

/* Created by dcp_comm_create_internal, destroyed by dcp_comm_destroy; the devices must outlive it. */
struct dcp_comm {
    int size, local_count, first_rank;
    dcp_transport forced;         /* AUTO: best per pair */
    dcp_comm_net net;             /* nproc 1 without MPI */
    dcp_device **devs;            /* [local_count] */
    dcp_cmd **cmds;               /* [local_count] the synchronous collectives' commands */
    dcp_rank_caps *caps;          /* [size] */
    dcp_pair_choice *pair;        /* [size][size]: pair[s * size + d] */
    /* where things live (from the pairs; the same on every process) */
    int *node_rank;               /* [size] index among the comm's ranks on its node (segment region) */
    int node_ranks;               /* the comm's ranks on this process's node */
    int node_first_rank;          /* the first of them */
    uint8_t *put_seg;             /* [size] put area in the node's segment */
    uint8_t *put_host;            /* [size] put area host-visible */
    uint8_t *view_seg;            /* [size] the view is the segment */
    uint8_t *inbox_host;          /* [size] inbox host-visible */
    uint32_t *inbox_handles;      /* [size] DCP_HANDLE_* the inbox is exported as */
    int seg_needed;               /* this node has a shared segment */
    int has_net;                  /* some pair's blocks go through the net (mpi): every process packs */
    int cross_sync;               /* some GPU writes or reads memory of another process */
    int has_fdx;                  /* some push target is an fd passed between processes */
    /* memory */
    uint64_t cap;                 /* slot capacity, bytes (multiple of 256) */
    uint64_t region;              /* bytes of one node rank's region of the segment */
    void *seg_private;            /* one process: the segment */
    dcp_shm shm;                  /* several processes: the node's segment */
    char *seg;                    /* segment base here */
    uint64_t seg_size;
    dcp_buffer **segview;         /* [local] the segment on local rank i's device */
    dcp_buffer **put;             /* [local] own put buffer (NULL: in the segment) */
    dcp_buffer **inbox;           /* [local] (NULL: the view is the segment) */
    dcp_buffer **target;          /* [local][size] where local sender i pushes to rank d */
    uint8_t *target_owned;        /* [local][size] */
    uint8_t *target_release;      /* [local][size] another VkDevice's memory: release after writing */
    uint8_t *inbox_acquire;       /* [local] the inbox is written by other VkDevices */
    /* processes */
    char *net_send, *net_recv;    /* the packed blocks of mpi pairs (mpi_transport.c) */
    uint64_t net_cap;
    uint64_t *scount, *sdispl, *rcount, *rdispl; /* [nproc] */
    dcp_fdx *fdx;
    char (*fdx_names)[DCP_FDX_NAME_MAX];         /* [nproc] */
    int32_t *pids;                               /* [nproc] */
    /* state */
    uint64_t *bytes_sent;         /* [local] */
    dcp_buffer **scratch;         /* [local] host-visible [size + 1][block] for reductions */
    uint64_t scratch_bytes;
    int send_bank, recv_bank;
    uint32_t flips;               /* exchanges since the banks were last reset */
    uint64_t generation;
};

/* ---- small helpers ------------------------------------------------------------------------ */

/* Kinds whose senders put one block for every receiver (else one slot per destination). */
static inline int dcp_coll_gathers(dcp_coll k) { return k == DCP_COLL_ALL_GATHER || k == DCP_COLL_ALL_REDUCE; }
/* Bytes into a sender's put bank where its block for rank d starts. */
static inline uint64_t dcp_coll_slot_of(dcp_coll k, int d, uint64_t slot)
{
    return dcp_coll_gathers(k) ? 0 : (uint64_t)d * slot;
}
static inline dcp_transport dcp_comm_pair_t(const dcp_comm *c, int s, int d)
{
    return (dcp_transport)c->pair[s * c->size + d].transport;
}
/* The row of pair s -> d (select.c). */
static inline const dcp_transport_info *dcp_comm_pair_info(const dcp_comm *c, int s, int d)
{
    return dcp_transport_info_of(dcp_comm_pair_t(c, s, d));
}
static inline int dcp_comm_is_local(const dcp_comm *c, int g)
{
    return g >= c->first_rank && g < c->first_rank + c->local_count;
}
/* Pairs whose sender's GPU copies into the receiver's inbox. */
static inline int dcp_comm_pushes(const dcp_comm *c, int s, int d)
{
    return dcp_comm_pair_info(c, s, d)->copier == DCP_COPIER_SENDER_GPU && !c->view_seg[d];
}
static inline uint64_t dcp_comm_bank_bytes(const dcp_comm *c) { return (uint64_t)c->size * c->cap; }
/* Bank b of rank g's put area: bytes into its own buffer, or into the segment. */
static inline uint64_t dcp_comm_put_off(const dcp_comm *c, int g, int bank)
{
    uint64_t base = c->put_seg[g] ? (uint64_t)c->node_rank[g] * c->region : 0;
    return base + (uint64_t)bank * dcp_comm_bank_bytes(c);
}
static inline uint64_t dcp_comm_inbox_off(const dcp_comm *c, int bank)
{
    return (uint64_t)bank * dcp_comm_bank_bytes(c);
}
/* Host addresses of local rank g's put bank and of local rank i's inbox bank (host-visible only). */
char *dcp_comm_put_host_ptr(const dcp_comm *c, int g, int bank);
char *dcp_comm_inbox_host_ptr(const dcp_comm *c, int i, int bank);

/* ---- across the files --------------------------------------------------------------------- */

/* comm.c. Every process passes its status; all return failure if any failed (the first failing
 * process's message on the others). */
dcp_status dcp_comm_agree(dcp_comm *c, dcp_status st, const char *what);

/* mailbox.c. Where every rank's memory lives, from the pairs' rows (the same on every process). */
void dcp_comm_plan_layout(dcp_comm *c);
/* Allocates the mailboxes for blocks of cap bytes and the push targets; collective. On failure
 * nothing is left allocated. Bumps the generation. */
dcp_status dcp_comm_alloc_mailboxes(dcp_comm *c, uint64_t cap);
void dcp_comm_free_mailboxes(dcp_comm *c);

/* targets.c. The push targets of every local sender; collective. */
dcp_status dcp_comm_make_targets(dcp_comm *c);

/* What a descriptor passed between processes is (dcp_fdx_msg.kind). */
enum { DCP_FDX_KIND_MEM = 1, DCP_FDX_KIND_SEM = 2 };
/* Collective over the comm's processes, each passing its status so far (`prior`: on failure it
 * takes part without doing anything, and every process returns a failure). */
/* Opens this process's descriptor socket and learns every process's socket name and pid. */
dcp_status dcp_comm_open_fdx(dcp_comm *c, dcp_status prior);
/* Fills, for process q, up to L * L messages and their descriptors (*n of them). */
typedef dcp_status (*dcp_comm_fdx_fill)(dcp_comm *c, int q, void *arg, dcp_fdx_msg *msgs, int *fds, int *n);
/* Descriptors between processes: sends every other process q what fill gives for it (the
 * descriptors are closed after sending), then accepts `connections` connections: *in_msgs,
 * *in_fds (malloc'd, *nin entries, or NULL) receive the messages; the caller owns and closes the
 * descriptors. what names the step in messages. */
dcp_status dcp_comm_fdx_swap(dcp_comm *c, dcp_status prior, dcp_comm_fdx_fill fill, void *arg, int connections,
                             const char *what, dcp_fdx_msg **in_msgs, int **in_fds, int *nin);

/* mpi_transport.c (mpi_none.c without MPI): moves the blocks of every pair whose copier is the net
 * (mpi) from the senders' host-visible put banks into the receivers' inboxes: every process sends,
 * per peer process, its local senders' blocks for that process's ranks. Collective. */
dcp_status dcp_comm_net_move(dcp_comm *c, dcp_coll kind, uint64_t slot);

#endif
