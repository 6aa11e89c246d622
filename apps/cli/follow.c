/* The model apps under mpiexec (dcp-vk-run, dcp-vk-serve): process 0's engine plans every step;
 * the plan (slots to shorten and to free, rows) goes to the other processes before the step runs, and they apply
 * it to their part of the run state, so that every process runs the same collective steps.
 *
 * The plan's header is one element-wise maximum over the processes (dcp_mpi_max_u32_idle):
 * process 0 contributes the plan and zeros where the others report, the others contribute zeros
 * and their report (a stop signal), so the header carries the plan out and the reports back in one
 * exchange. The followers may wait a long time between requests (a server): they sleep between
 * checks instead of spinning. The header's counts then size the body (dcp_mpi_bcast).
 *
 * A follower that fails (a step that does not run, a malformed plan, an MPI error) cannot tell
 * process 0, which may already wait for it inside the step's collectives: it says why and ends
 * the whole job (run_world_abort). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/run.h"
#include "dcpvk/comm.h"

enum { PLAN_MAGIC = 0x6e616c70u /* "plan" */, PLAN_QUIT = 1, IDLE_SLEEP_US = 500 };

/* Reduced by maximum: magic, flags, n_free, n_rows, n_truncate and code come from process 0 (the others give
 * 0), stop from the followers (process 0 gives 0). */
typedef struct plan_header {
    uint32_t magic, flags, n_free, n_rows, n_truncate;
    uint32_t code; /* PLAN_QUIT: the exit code every process ends with */
    uint32_t stop; /* the largest stop signal a follower has seen (0: none) */
} plan_header;
_Static_assert(sizeof(plan_header) == 7 * sizeof(uint32_t), "the header is reduced as uint32_t values");

static dcp_status exchange(plan_header *hd)
{
    return dcp_mpi_max_u32_idle((uint32_t *)hd, sizeof *hd / sizeof(uint32_t), IDLE_SLEEP_US);
}

dcp_status run_plan_broadcast(void *user, const dcp_engine_plan *plan)
{
    run_lead *lead = user;
    plan_header hd = {PLAN_MAGIC, 0, plan->n_free, plan->n_rows, plan->n_truncate, 0, 0};
    dcp_status st = exchange(&hd);
    if (st == DCP_OK && lead && (int)hd.stop > lead->stop) lead->stop = (int)hd.stop;
    if (st == DCP_OK && plan->n_truncate)
        st = dcp_mpi_bcast((void *)plan->truncate, (uint64_t)plan->n_truncate * sizeof *plan->truncate, 0);
    if (st == DCP_OK && plan->n_free) st = dcp_mpi_bcast((void *)plan->free, (uint64_t)plan->n_free * sizeof *plan->free, 0);
    if (st == DCP_OK && plan->n_rows)
        st = dcp_mpi_bcast((void *)plan->rows, (uint64_t)plan->n_rows * sizeof *plan->rows, 0);
    return st;
}

/* After the stop: no process watches any more, then one more exchange, so that none ends while
 * another still watches it. */
static dcp_status last_exchange(void)
{
    run_world_unwatch();
    plan_header hd = {0};
    return exchange(&hd);
}

dcp_status run_plan_quit(int code)
{
    plan_header hd = {PLAN_MAGIC, PLAN_QUIT, 0, 0, 0, (uint32_t)code, 0};
    dcp_status st = exchange(&hd);
    return st == DCP_OK ? last_exchange() : st;
}

int run_follow(const run_world *w, dcp_model_state *s, const char *prog, bool report_signals)
{
    const dcp_model_state_config *c = dcp_model_state_get_config(s);
    uint32_t *frees = malloc((size_t)c->max_seqs * sizeof *frees);
    dcp_model_row *rows = malloc((size_t)c->max_rows * sizeof *rows);
    dcp_engine_truncate *truncs = malloc((size_t)c->max_seqs * sizeof *truncs);
    if (!frees || !rows || !truncs) {
        fprintf(stderr, "%s: process %d: out of host memory for the step plans\n", prog, w->proc);
        return run_world_abort(w, DCP_EXIT_RUNTIME);
    }
    for (;;) {
        plan_header hd = {0, 0, 0, 0, 0, 0, report_signals ? (uint32_t)dcp_cli_stop_signal() : 0};
        dcp_status st = exchange(&hd);
        if (st == DCP_OK && (hd.magic != PLAN_MAGIC || hd.n_free > c->max_seqs || hd.n_rows > c->max_rows ||
                             hd.n_truncate > c->max_seqs)) {
            fprintf(stderr,
                    "%s: process %d: a malformed step plan came from process 0 (%u frees, %u rows, %u shortened "
                    "slots; at most %u, %u, %u)\n",
                    prog, w->proc, hd.n_free, hd.n_rows, hd.n_truncate, c->max_seqs, c->max_rows, c->max_seqs);
            fflush(stderr);
            return run_world_abort(w, DCP_EXIT_RUNTIME);
        }
        if (st == DCP_OK && (hd.flags & PLAN_QUIT) && (st = last_exchange()) == DCP_OK) {
            free(frees);
            free(rows);
            free(truncs);
            return (int)hd.code;
        }
        if (st == DCP_OK && hd.n_truncate) st = dcp_mpi_bcast(truncs, (uint64_t)hd.n_truncate * sizeof *truncs, 0);
        if (st == DCP_OK && hd.n_free) st = dcp_mpi_bcast(frees, (uint64_t)hd.n_free * sizeof *frees, 0);
        if (st == DCP_OK && hd.n_rows) st = dcp_mpi_bcast(rows, (uint64_t)hd.n_rows * sizeof *rows, 0);
        if (st == DCP_OK) {
            dcp_engine_plan plan = {.n_free = hd.n_free, .free = frees, .n_rows = hd.n_rows, .rows = rows,
                                    .n_truncate = hd.n_truncate, .truncate = truncs};
            st = dcp_engine_plan_apply(s, &plan);
        }
        if (st != DCP_OK) {
            fprintf(stderr, "%s: process %d: following process 0's step: %s: %s\n", prog, w->proc,
                    dcp_status_string(st), dcp_last_error());
            fflush(stderr);
            return run_world_abort(w, DCP_EXIT_RUNTIME);
        }
    }
}
