/* The step layer: how a step of work over the local ranks of a multi-device group is recorded,
 * submitted and exchanged. It knows no client (the layers above record into its commands: the
 * model graph, the DCP attention step); it is the single place that submits their commands and
 * waits for them.
 *
 * A step is a sequence of rounds. In a round every local rank records its work into its own
 * command (dcp_step_cmd); dcp_step_round then submits every rank's command, waits for all of them
 * and runs the exchanges that the recordings prepared (the communicator's recordable collectives,
 * src/comm/put.h: each rank put its outgoing blocks into its put area; after the exchange the
 * next round reads what it received in place). dcp_step_end runs the last round.
 *
 *   dcp_step_begin(step, key, &replayed);
 *   if (!replayed) {
 *       for each local rank i: record into dcp_step_cmd(step, i), including puts;
 *       dcp_step_round(step, n, exchanges);        // as often as the work needs
 *       for each local rank i: record, reading the views ...
 *       dcp_step_end(step);
 *   }
 *
 * Record once, replay: a step begun with a key != 0 is recorded into commands of its own, one per
 * round and rank, and kept with its exchanges. A later step begun with the same key (mixed with
 * the generation of every communicator added with dcp_step_add_comm) is not recorded again:
 * dcp_step_begin resubmits the kept rounds with their exchanges in between and reports
 * replayed = true. The key must therefore cover everything the recording depends on besides
 * buffers fixed at creation and host-visible inputs rewritten before each step (token ids, slots,
 * block tables): e.g. the split-KV chunking of every decode plan. Key 0: recorded, run, not kept.
 * Up to five recordings of different keys are kept (the least recently used one is recorded over),
 * so that steps of a few shapes taking turns (a speculative verification of k + 1 rows between
 * one-row decode steps) each replay their own.
 * Every step starts with the added communicators' mailbox banks reset, so that a step's commands
 * refer to the same banks every time.
 *
 * Synchronisation (DCP_VK_STEP_SYNC = auto | host | gpu, decided at the first step after the
 * communicators change, dcp_step_sync_choose):
 *   host  every round is submitted, waited for on the host (one host wait per round), then the
 *         exchanges' host part runs (staging and mpi moves, waits between processes);
 *   gpu   where no exchange needs the host (devgroup, peer, dmabuf, hostmem pairs) and every pair
 *         of ranks shares timeline semaphores (one VkDevice, or opaque fds on one physical
 *         device): each round is submitted as soon as it is recorded (a replay: all at once),
 *         each rank's submission waiting on the GPU for its peers' previous round and signalling
 *         its own; the host waits once, at the end of the step.
 * The recorded commands are the same in both modes (the communicators' pushes and pulls inside).
 *
 * Lifetimes: dcp_step_create borrows the devices and dcp_step_add_comm the communicators; both
 * must outlive the step. Destroy with dcp_step_destroy (waits for its commands). Not thread-safe:
 * one thread per step. */
#ifndef DCP_STEP_STEP_H
#define DCP_STEP_STEP_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/put.h"
#include "dcpvk/comm.h"
#include "dcpvk/vk.h"

typedef struct dcp_step dcp_step;

/* A step over `count` local ranks, rank i on devs[i] (distinct dcp_devices). */
dcp_status dcp_step_create(dcp_device *const *devs, uint32_t count, dcp_step **out);
void dcp_step_destroy(dcp_step *step);

/* Registers a communicator whose exchanges the steps run (banks reset per step, generation in the
 * replay key). At most 64. */
dcp_status dcp_step_add_comm(dcp_step *step, dcp_comm *comm);

uint32_t dcp_step_count(const dcp_step *step);

/* Starts a step (see above). On a replay the whole step has run when this returns
 * (*replayed = true); otherwise every rank's first-round command is reset and recording. */
dcp_status dcp_step_begin(dcp_step *step, uint64_t key, bool *replayed);
/* Local rank i's command of the current round (valid until the round ends). */
dcp_cmd *dcp_step_cmd(const dcp_step *step, uint32_t local);
/* Ends the current round: records the exchanges' pushes, submits every rank's command, waits for
 * all and runs the host part of x[0..n) in order (gpu mode: no wait, no host part), and starts the
 * next round with the exchanges' pulls recorded. */
dcp_status dcp_step_round(dcp_step *step, uint32_t n, const dcp_comm_xchg *x);
/* Runs the last round and ends the step (a keyed step's recording is kept). */
dcp_status dcp_step_end(dcp_step *step);
/* Ends a step after an error: waits for what was submitted, drops a partial recording. Safe to
 * call when no step is active. */
void dcp_step_abort(dcp_step *step);

/* After a keyed step: local rank i's command of round `round` of the kept recording (to read its
 * timestamps), or NULL. */
dcp_cmd *dcp_step_recorded_cmd(const dcp_step *step, uint32_t round, uint32_t local);

/* Rounds of the last step, the host waits it took, and whether it was replayed. A host wait is
 * counted where the host blocks on the GPU: after every round in host mode (every rank's fence of
 * the round), once at the end in gpu mode (the last round's fences). */
uint32_t dcp_step_last_rounds(const dcp_step *step);
uint32_t dcp_step_last_host_waits(const dcp_step *step);
/* Compute dispatches the last step recorded or replayed: over every local rank and round, and of
 * local rank i alone (0 for another i). */
uint32_t dcp_step_last_dispatches(const dcp_step *step);
uint32_t dcp_step_last_rank_dispatches(const dcp_step *step, uint32_t local);
bool dcp_step_last_replayed(const dcp_step *step);

/* Timing of the steps (off by default): on, every round's command of every rank is bracketed by
 * device timestamps (kept recordings are dropped so that the next step records them). After a step,
 * compute_ns = the sum over its rounds of the slowest rank's time between them (the GPU work) and
 * total_ns = its wall-clock time; the rest is exchange (host round trips, waits, host moves).
 * Zeros when timing is off or the devices have no timestamps. */
void dcp_step_set_timing(dcp_step *step, bool on);
void dcp_step_last_timing(const dcp_step *step, double *compute_ns, double *total_ns);

typedef enum dcp_step_sync {
    DCP_STEP_SYNC_HOST = 0,
    DCP_STEP_SYNC_GPU = 1,
} dcp_step_sync;

/* The mode of the steps (decided at the first dcp_step_begin; host before) and why. */
dcp_step_sync dcp_step_sync_mode(const dcp_step *step, const char **why);

/* The decision, from the request (-1 auto, 0 host, 1 gpu), the communicators' capabilities and
 * whether every device has timeline semaphores. A gpu request that cannot be met is
 * DCP_ERR_UNSUPPORTED saying why. Pure: tests feed it what this machine cannot show. */
dcp_status dcp_step_sync_choose(int requested, const dcp_comm_sync_caps *caps, uint32_t ncomm, bool timeline,
                                dcp_step_sync *out, char *why, size_t why_cap);

/* FNV-1a mixing of one value into a replay key (start from DCP_STEP_KEY_SEED). */
#define DCP_STEP_KEY_SEED 1469598103934665603ull
static inline uint64_t dcp_step_key_mix(uint64_t key, uint64_t value)
{
    return (key ^ value) * 1099511628211ull;
}

/* Records the put of a gathering collective (ALL_GATHER, ALL_REDUCE) from cmd of comm's local
 * rank `local`: copies `bytes` of src from src_offset into its put area, then the put barrier.
 * The matching exchange is {comm, kind, bytes, bytes}. */
dcp_status dcp_step_put_copy(dcp_cmd *cmd, dcp_comm *comm, int local, dcp_buffer *src, uint64_t src_offset,
                             uint64_t bytes);

#endif
