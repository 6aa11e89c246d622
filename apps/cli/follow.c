/* dcp-vk-serve under mpiexec: process 0's engine plans every step; the plan (slots to free, rows) is
 * broadcast before the step runs, and the other processes apply it to their part of the run state,
 * so that every process runs the same collective steps. The header comes by dcp_mpi_bcast_idle (the
 * followers may wait a long time between requests: they sleep instead of spinning), the body by
 * dcp_mpi_bcast. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/comm.h"
#include "cli/run.h"

enum { PLAN_MAGIC = 0x6e616c70u /* "plan" */, PLAN_QUIT = 1, IDLE_SLEEP_US = 500 };

typedef struct plan_header {
    uint32_t magic, flags, n_free, n_rows;
} plan_header;

dcp_status run_plan_broadcast(void *user, const dcp_engine_plan *plan)
{
    (void)user;
    plan_header hd = {PLAN_MAGIC, 0, plan->n_free, plan->n_rows};
    dcp_status st = dcp_mpi_bcast_idle(&hd, sizeof hd, 0, IDLE_SLEEP_US);
    if (st == DCP_OK && plan->n_free) st = dcp_mpi_bcast((void *)plan->free, (uint64_t)plan->n_free * sizeof *plan->free, 0);
    if (st == DCP_OK && plan->n_rows)
        st = dcp_mpi_bcast((void *)plan->rows, (uint64_t)plan->n_rows * sizeof *plan->rows, 0);
    return st;
}

void run_plan_quit(void)
{
    plan_header hd = {PLAN_MAGIC, PLAN_QUIT, 0, 0};
    (void)dcp_mpi_bcast_idle(&hd, sizeof hd, 0, IDLE_SLEEP_US);
}

int run_follow(dcp_model_state *s, const char *prog, int proc)
{
    const dcp_model_state_config *c = dcp_model_state_get_config(s);
    uint32_t *frees = malloc((size_t)c->max_seqs * sizeof *frees);
    dcp_model_row *rows = malloc((size_t)c->max_rows * sizeof *rows);
    int rc = 1;
    if (!frees || !rows) {
        fprintf(stderr, "%s: process %d: out of memory\n", prog, proc);
        goto done;
    }
    for (;;) {
        plan_header hd;
        dcp_status st = dcp_mpi_bcast_idle(&hd, sizeof hd, 0, IDLE_SLEEP_US);
        if (st == DCP_OK && (hd.magic != PLAN_MAGIC || hd.n_free > c->max_seqs || hd.n_rows > c->max_rows)) {
            fprintf(stderr, "%s: process %d: a malformed step plan came from process 0 (%u frees, %u rows)\n", prog,
                    proc, hd.n_free, hd.n_rows);
            goto done;
        }
        if (st == DCP_OK && (hd.flags & PLAN_QUIT)) break;
        if (st == DCP_OK && hd.n_free) st = dcp_mpi_bcast(frees, (uint64_t)hd.n_free * sizeof *frees, 0);
        if (st == DCP_OK && hd.n_rows) st = dcp_mpi_bcast(rows, (uint64_t)hd.n_rows * sizeof *rows, 0);
        if (st == DCP_OK) {
            dcp_engine_plan plan = {hd.n_free, frees, hd.n_rows, rows};
            st = dcp_engine_plan_apply(s, &plan);
        }
        if (st != DCP_OK) {
            fprintf(stderr, "%s: process %d: following process 0's step: %s: %s\n", prog, proc,
                    dcp_status_string(st), dcp_last_error());
            goto done;
        }
    }
    rc = 0;
done:
    free(frees);
    free(rows);
    return rc;
}
