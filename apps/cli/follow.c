/* The model apps under mpiexec (dcp-vk-run, dcp-vk-serve): process 0's engine plans every step;
 * the plan (the changes to the slots in order: shortened, freed, attached to cached blocks, committed to
 * the prefix cache; then the rows) goes to the other processes before the step runs, and they apply
 * it to their part of the run state, so that every process runs the same collective steps and keeps
 * the same prefix cache. A draft model's steps (speculative decoding) come as plans of their own
 * (PLAN_DRAFT), applied to the process's part of the draft model's state.
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

enum { PLAN_MAGIC = 0x6e616c70u /* "plan" */, PLAN_QUIT = 1, PLAN_DRAFT = 2, IDLE_SLEEP_US = 500 };

/* Reduced by maximum: magic, flags, n_ops, n_rows, n_tokens and code come from process 0 (the others give
 * 0), stop from the followers (process 0 gives 0). */
typedef struct plan_header {
    uint32_t magic, flags, n_ops, n_rows, n_tokens;
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
    plan_header hd = {PLAN_MAGIC, plan->draft ? PLAN_DRAFT : 0, plan->n_ops, plan->n_rows, plan->n_tokens, 0, 0};
    dcp_status st = exchange(&hd);
    if (st == DCP_OK && lead && (int)hd.stop > lead->stop) lead->stop = (int)hd.stop;
    if (st == DCP_OK && plan->n_ops) st = dcp_mpi_bcast((void *)plan->ops, (uint64_t)plan->n_ops * sizeof *plan->ops, 0);
    if (st == DCP_OK && plan->n_tokens)
        st = dcp_mpi_bcast((void *)plan->tokens, (uint64_t)plan->n_tokens * sizeof *plan->tokens, 0);
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

int run_follow(const run_world *w, dcp_model_state *s, dcp_model_state *draft, const char *prog, bool report_signals)
{
    const dcp_model_state_config *c = dcp_model_state_get_config(s);
    const uint32_t max_rows = draft && dcp_model_state_get_config(draft)->max_rows > c->max_rows
                                  ? dcp_model_state_get_config(draft)->max_rows
                                  : c->max_rows;
    const uint32_t max_ops = DCP_ENGINE_PLAN_MAX_OPS(c->max_seqs);
    /* An ATTACH op's tokens: at most n_ctx, one op per slot and plan but for a freed slot's */
    const uint64_t max_tokens = (uint64_t)max_ops * c->n_ctx;
    dcp_engine_op *ops = malloc((size_t)max_ops * sizeof *ops);
    dcp_model_row *rows = malloc((size_t)max_rows * sizeof *rows);
    int32_t *toks = NULL;
    uint32_t cap_toks = 0;
    if (!ops || !rows) {
        fprintf(stderr, "%s: process %d: out of host memory for the step plans\n", prog, w->proc);
        return run_world_abort(w, DCP_EXIT_RUNTIME);
    }
    for (;;) {
        plan_header hd = {0, 0, 0, 0, 0, 0, report_signals ? (uint32_t)dcp_cli_stop_signal() : 0};
        dcp_status st = exchange(&hd);
        if (st == DCP_OK &&
            (hd.magic != PLAN_MAGIC || hd.n_ops > max_ops || hd.n_rows > max_rows || hd.n_tokens > max_tokens)) {
            fprintf(stderr,
                    "%s: process %d: a malformed step plan came from process 0 (%u slot changes, %u rows, %u "
                    "tokens; at most %u, %u, %llu)\n",
                    prog, w->proc, hd.n_ops, hd.n_rows, hd.n_tokens, max_ops, max_rows,
                    (unsigned long long)max_tokens);
            fflush(stderr);
            return run_world_abort(w, DCP_EXIT_RUNTIME);
        }
        if (st == DCP_OK && (hd.flags & PLAN_QUIT) && (st = last_exchange()) == DCP_OK) {
            free(ops);
            free(rows);
            free(toks);
            return (int)hd.code;
        }
        if (st == DCP_OK && hd.n_tokens > cap_toks) {
            int32_t *t = realloc(toks, (size_t)hd.n_tokens * sizeof *t);
            if (!t) {
                fprintf(stderr, "%s: process %d: out of host memory for a step plan's %u tokens\n", prog, w->proc,
                        hd.n_tokens);
                fflush(stderr);
                return run_world_abort(w, DCP_EXIT_RUNTIME);
            }
            toks = t;
            cap_toks = hd.n_tokens;
        }
        if (st == DCP_OK && hd.n_ops) st = dcp_mpi_bcast(ops, (uint64_t)hd.n_ops * sizeof *ops, 0);
        if (st == DCP_OK && hd.n_tokens) st = dcp_mpi_bcast(toks, (uint64_t)hd.n_tokens * sizeof *toks, 0);
        if (st == DCP_OK && hd.n_rows) st = dcp_mpi_bcast(rows, (uint64_t)hd.n_rows * sizeof *rows, 0);
        if (st == DCP_OK) {
            dcp_engine_plan plan = {.n_ops = hd.n_ops, .ops = ops, .n_tokens = hd.n_tokens, .tokens = toks,
                                    .n_rows = hd.n_rows, .rows = rows, .draft = (hd.flags & PLAN_DRAFT) != 0};
            st = dcp_engine_plan_apply(s, draft, &plan);
        }
        if (st != DCP_OK) {
            fprintf(stderr, "%s: process %d: following process 0's step: %s: %s\n", prog, w->proc,
                    dcp_status_string(st), dcp_last_error());
            fflush(stderr);
            return run_world_abort(w, DCP_EXIT_RUNTIME);
        }
    }
}
