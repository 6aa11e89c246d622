/* Recordable collectives: what the communicator offers the step layer (src/step/step.h) and the
 * DCP attention step (src/attn/cp_attn.c), so that a collective can live inside a caller's
 * recorded commands instead of running on its own. No caller sees the mailbox layout.
 *
 * One collective is these parts, in this order:
 *   put       each local rank's recording writes its outgoing blocks (copies or shaders) into its
 *             put area (dcp_comm_put_area), then records dcp_comm_record_put;
 *   push      the step layer ends each rank's recording with dcp_comm_record_push: the GPU copies
 *             of the pairs whose sender writes into the receiver's memory (peer, dmabuf,
 *             devgroup, a rank's own block);
 *   exchange  once every local rank's recording has completed (the step layer's round):
 *             dcp_comm_put_exchange: the host moves the blocks of staging and mpi pairs, and
 *             processes wait for each other where one's GPU wrote the other's memory; hostmem,
 *             peer, dmabuf and devgroup pairs need no host work. With GPU-synchronised rounds
 *             (dcp_comm_sync_caps) dcp_comm_put_advance replaces it;
 *   pull      the step layer starts each rank's next recording with dcp_comm_record_pull: the
 *             receiver's side (acquiring memory other VkDevices wrote, copying hostmem blocks out of
 *             shared memory when it does not read them in place);
 *   view      the next recording of each rank reads the blocks sent to it in place
 *             (dcp_comm_put_view): source s's block at first.offset + s * stride of first.buffer.
 * Kinds: ALL_GATHER and ALL_REDUCE put one block per rank (every receiver sees every rank's block);
 * ALL_TO_ALL and REDUCE_SCATTER put [size][slot] (slot d goes to rank d). No reduction is done by
 * the communicator: receivers sum the blocks they view on their devices, in rank order (part_sum,
 * rmsnorm_parts), so every rank and every transport gives the same bits.
 *
 * Blocks are at most the reserved capacity (dcp_comm_reserve), slots a multiple of 4 bytes. The
 * put area of the next exchange is the other bank, so one round may read the blocks of the last
 * exchange and write those of the next. dcp_comm_reset_banks puts the banks in their initial
 * state, so that a recorded step refers to the same banks every time it is replayed; recordings
 * stay valid while dcp_comm_generation does not change.
 *
 * Not thread-safe: one thread per communicator. */
#ifndef DCP_COMM_PUT_H
#define DCP_COMM_PUT_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/comm.h"
#include "vk/external.h"

typedef enum dcp_coll {
    DCP_COLL_ALL_GATHER = 0,
    DCP_COLL_ALL_TO_ALL = 1,
    DCP_COLL_REDUCE_SCATTER = 2,
    DCP_COLL_ALL_REDUCE = 3,
} dcp_coll;

/* Makes every block of up to `bytes` bytes fit (grows the mailboxes, waiting for the
 * communicator's own commands; no recorded command that refers to the mailboxes may be in flight:
 * growing bumps dcp_comm_generation). */
dcp_status dcp_comm_reserve(dcp_comm *comm, uint64_t bytes);
/* Bytes of the mailboxes a communicator of `size` ranks keeps per local rank once blocks of
 * `bytes` are reserved (the initial block_bytes, 64 KiB by default, at least): the memory
 * dcp_comm_reserve allocates, for estimates before anything is allocated. */
uint64_t dcp_comm_mailbox_bytes(int size, uint64_t bytes);
/* The largest single buffer of those: a put area or an inbox, [2][size][block] (half of
 * dcp_comm_mailbox_bytes). Every binding into it is one bank or less, [size][block]. */
uint64_t dcp_comm_mailbox_buffer_bytes(int size, uint64_t bytes);
/* Where local rank i writes the outgoing blocks of the next exchange, as seen from its device.
 * Changes with every exchange: fetch it for each recording. */
dcp_comm_buf dcp_comm_put_area(const dcp_comm *comm, int local);
/* The barrier that ends a recording's writes into its put area (towards the host and the peers'
 * reads after the round). */
void dcp_comm_record_put(dcp_cmd *cmd);
/* The host part of an exchange of `kind`, blocks of `slot` bytes (destinations `slot` bytes apart
 * for ALL_TO_ALL / REDUCE_SCATTER), after every local rank's put has completed. `payload` bytes
 * per destination count as sent (the statistics of dcp_comm_bytes_sent). */
dcp_status dcp_comm_put_exchange(dcp_comm *comm, dcp_coll kind, uint64_t slot, uint64_t payload);
/* Where local rank i reads the blocks of the last exchange of `kind` with blocks of `slot` bytes:
 * source s's block at first->offset + s * *stride of first->buffer. first->offset is 256-byte
 * aligned (a valid storage-buffer binding offset) for the gathering kinds, and for the others
 * when slot is a multiple of 256. */
void dcp_comm_put_view(const dcp_comm *comm, int local, dcp_coll kind, uint64_t slot, dcp_comm_buf *first,
                       uint64_t *stride);
/* One exchange as a value: what the step layer runs between two rounds (and replays). */
typedef struct dcp_comm_xchg {
    dcp_comm *comm;
    dcp_coll kind;
    uint64_t slot;    /* bytes per block / destination */
    uint64_t payload; /* bytes per destination counted as sent */
} dcp_comm_xchg;

/* The GPU copies of local rank i's pushes for an exchange of kind / slot, recorded at the end of
 * its command of the round (nothing for pairs that need none). */
dcp_status dcp_comm_record_push(dcp_comm *comm, int local, dcp_cmd *cmd, dcp_coll kind, uint64_t slot);
/* The receiver's side of the last exchange of kind / slot for local rank i, recorded at the start
 * of its next command (before anything reads the view). */
dcp_status dcp_comm_record_pull(dcp_comm *comm, int local, dcp_cmd *cmd, dcp_coll kind, uint64_t slot);
/* The exchange's bookkeeping without host work, for GPU-synchronised rounds (only when
 * dcp_comm_sync_caps says host_work == 0). */
void dcp_comm_put_advance(dcp_comm *comm, dcp_coll kind, uint64_t slot, uint64_t payload);

/* Next exchange in bank 0 (only when every block of earlier exchanges has been read). host_sync:
 * the step is host-synchronised, so processes whose GPUs write each other's memory wait for each
 * other first when an odd number of exchanges ran since the last reset (peers may still read bank
 * 0). Collective over the processes of the comm. */
dcp_status dcp_comm_reset_banks(dcp_comm *comm, bool host_sync);

/* ---- GPU-synchronised rounds --------------------------------------------------------------- */

typedef enum dcp_sem_share {
    DCP_SEM_SHARE_NONE = 0,      /* some pair of ranks cannot share a semaphore */
    DCP_SEM_SHARE_OPAQUE_FD = 1, /* timeline semaphores exported as opaque fds (one physical device) */
    DCP_SEM_SHARE_NATIVE = 2,    /* every rank on one VkDevice (a device group, or a single rank) */
} dcp_sem_share;

/* What a step needs to know to submit its rounds up front with the ranks waiting on each other on
 * the GPU: whether any exchange needs the host (staging, mpi), and how far the ranks can share
 * semaphores (the least of every pair). why: a sentence for messages. The same on every process. */
typedef struct dcp_comm_sync_caps {
    int host_work;
    dcp_sem_share share;
    char why[256];
} dcp_comm_sync_caps;
void dcp_comm_sync_caps_get(const dcp_comm *comm, dcp_comm_sync_caps *out);

/* Makes every rank's timeline semaphore visible to every local rank: mine[i] is local rank i's
 * semaphore (on its device, exportable as an opaque fd when share is OPAQUE_FD); on return
 * peers[i][r] is a semaphore on local rank i's device that rank r's signals reach (the same object
 * for ranks on i's VkDevice, else an import: owned[i][r] = 1, destroy it). Arrays [local][size]
 * allocated by the caller. Collective over the comm's processes. */
dcp_status dcp_comm_share_semaphores(dcp_comm *comm, dcp_sem *const *mine, dcp_sem **peers, uint8_t *owned);
/* Changes whenever the mailboxes are reallocated (dcp_comm_reserve growing them). */
uint64_t dcp_comm_generation(const dcp_comm *comm);

#endif
