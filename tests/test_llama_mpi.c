/* The llama model over MPI processes: under `mpiexec -n P`, each process holds the TP ranks of its
 * $DCP_VK_DEVICES (count = number of devices listed; process p holds ranks [p count, (p+1) count)),
 * the TP communicator spans the world and DCP groups spread over processes get sub-communicators.
 * stories260K greedy decoding reproduces the reference ids (tests/data/README.md) on every
 * process, and process 0's logits match the double-precision CPU reference step within 1e-4.
 *
 * With `gen` the model is instead a generated llama (8 query heads, 2 KV heads: TP 8 allows DCP 4,
 * so 4 processes of 2 devices hold half a DCP group each) decoded greedily from token 1, process 0's
 * reference argmax (broadcast) being the id every process must produce.
 *
 * Usage: test_llama_mpi TP DCP BACKEND INTERLEAVE BLOCK PREFILL STEPS [q_replicate] [gen]
 *   PREFILL: tokens of the reference run through one batched prefill first (1: from BOS alone;
 *   gen: 1); STEPS: greedy decode steps checked after it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dcpvk/comm.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "ref/model_ref.h"
#include "testmodel/testmodel.h"
#include "ref_model.h"
#include "stories_ref.h"
#include "vkutil.h"



/* Tolerance of the model-step logits against the reference (F32 weights, f32 KV). */
#define LOGITS_TOL 1e-4

typedef struct mpi_case {
    uint32_t tp, dcp, interleave, block, prefill, steps;
    dcp_cp_backend backend;
    int q_replicate, gen;
} mpi_case;

static mpi_case the_case;
static int proc, nproc;

static void test_stories_over_mpi(void **state)
{
    const mpi_case *pc = &the_case;
    dcp_context *ctx = dcp_test_context();
    const uint32_t nl = (uint32_t)dcp_context_device_count(ctx);
    assert_true(nl >= 1 && nl <= 16);
    if (nl * (uint32_t)nproc != pc->tp)
        fail_msg("TP %u needs %u processes of %u devices; got %d processes", pc->tp, pc->tp / nl, nl, nproc);
    dcp_device *devs[16];
    for (uint32_t i = 0; i < nl; i++) devs[i] = dcp_context_device(ctx, (int)i);

    dcp_gguf *g;
    dcp_model_config cfg;
    if (pc->gen) { /* every process makes the same model (same seed) in its own memory */
        dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
        mc.n_embd = 128;
        mc.n_layer = 2;
        mc.n_head = 8;
        mc.n_head_kv = 2;
        mc.head_dim = 16;
        mc.n_ff = 256;
        mc.seed = 99;
        DCP_ASSERT_OK(dcp_gguf_open_test_model(&mc, &g));
    } else {
        DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &g));
    }
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_model *w;
    DCP_ASSERT_OK(dcp_test_model_load(devs, (uint32_t)proc * nl, nl, pc->tp, pc->dcp, pc->q_replicate, g, &cfg, &w));
    assert_int_equal(dcp_model_tp(w), pc->tp);
    assert_int_equal(dcp_model_first_rank(w), (uint32_t)proc * nl);
    assert_int_equal(dcp_model_local_count(w), nl);
    dcp_model_state_config lc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    lc.kv_dtype = DCP_DTYPE_F32;
    lc.n_ctx = 320;
    lc.max_rows = 16;
    lc.block_size = pc->block;
    lc.interleave = pc->interleave;
    lc.backend = pc->backend;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(w, &lc, &s));

    /* The CPU reference, on process 0 only (the others check the ids). */
    const uint32_t V = cfg.n_vocab;
    dcp_test_ref_model rm = {0};
    dcp_ref_llama *ref = &rm.ref;
    if (proc == 0) dcp_test_ref_model_load(&rm, g, &cfg, 300);
    float *logits = malloc(V * sizeof(float)), *want = malloc(V * sizeof(float));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (proc == 0)
        for (uint32_t t = 0; t + 1 < pc->prefill; t++) dcp_ref_llama_step(ref, stories_ref[t], t, want);
    if (pc->prefill > 1) DCP_ASSERT_OK(dcp_model_state_forward(s, stories_ref, pc->prefill - 1, NULL, NULL));
    int32_t tok = pc->gen ? 1 : stories_ref[pc->prefill - 1], next = -1;
    double worst = 0.0;
    for (uint32_t step = pc->prefill - 1; step < pc->prefill - 1 + pc->steps; step++) {
        DCP_ASSERT_OK(dcp_model_state_forward(s, &tok, 1, proc == 0 ? logits : NULL, &next));
        if (proc == 0) {
            dcp_ref_llama_step(ref, tok, step, want);
            double err = 0.0;
            for (uint32_t i = 0; i < V; i++) {
                double d = fabs((double)logits[i] - want[i]);
                if (!(d <= err)) err = d; /* NaN propagates */
            }
            if (!(err <= worst)) worst = err;
            if (!(err <= LOGITS_TOL))
                fail_msg("TP %u DCP %u step %u: logits max abs error %g > %g", pc->tp, pc->dcp, step, err,
                         LOGITS_TOL);
        }
        int32_t expect = pc->gen ? (int32_t)(proc == 0 ? dcp_ref_argmax(V, want) : 0) : stories_ref[step + 1];
        if (pc->gen) DCP_ASSERT_OK(dcp_mpi_bcast(&expect, sizeof expect, 0));
        if (next != expect)
            fail_msg("process %d, TP %u DCP %u step %u: generated id %d, reference %d", proc, pc->tp, pc->dcp,
                     step, next, expect);
        tok = next;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = dcp_mpi_max((double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    if (pc->tp > 1) assert_true(dcp_model_state_exchange_bytes(s) > 0);
    if (proc == 0)
        printf("%s, %d processes x %u devices, TP %u DCP %u %s I %u B %u%s: %u greedy ids match on every "
               "process (prefill %u); logits max abs error %.3g; %.1f s (%.1f tokens/s)\n",
               pc->gen ? "generated model" : "stories260K", nproc, nl, pc->tp, pc->dcp, dcp_cp_backend_name(pc->backend), pc->interleave, pc->block,
               pc->q_replicate ? " q_replicate" : "", pc->steps, pc->prefill, worst, secs,
               (pc->prefill - 1 + pc->steps) / secs);
    dcp_model_state_destroy(s);
    dcp_model_destroy(w);
    dcp_gguf_close(g);
    dcp_test_context_done(ctx);
    dcp_test_ref_model_free(&rm);
    free(logits);
    free(want);
}

int main(int argc, char **argv)
{
    if (dcp_mpi_init(&argc, &argv, &proc, &nproc) != DCP_OK) {
        fprintf(stderr, "dcp_mpi_init: %s\n", dcp_last_error());
        return 1;
    }
    if (argc < 8) {
        fprintf(stderr, "usage: %s TP DCP a2a|ag_rs INTERLEAVE BLOCK PREFILL STEPS [q_replicate]\n", argv[0]);
        dcp_mpi_finalize();
        return 2;
    }
    mpi_case *c = &the_case;
    c->tp = (uint32_t)atoi(argv[1]);
    c->dcp = (uint32_t)atoi(argv[2]);
    if (dcp_cp_backend_parse(argv[3], &c->backend) != DCP_OK) {
        fprintf(stderr, "%s\n", dcp_last_error());
        dcp_mpi_finalize();
        return 2;
    }
    c->interleave = (uint32_t)atoi(argv[4]);
    c->block = (uint32_t)atoi(argv[5]);
    c->prefill = (uint32_t)atoi(argv[6]);
    c->steps = (uint32_t)atoi(argv[7]);
    for (int i = 8; i < argc; i++) {
        c->q_replicate |= strcmp(argv[i], "q_replicate") == 0;
        c->gen |= strcmp(argv[i], "gen") == 0;
    }
    if (c->prefill < 1 || c->prefill - 1 + c->steps > 256 || (c->gen && c->prefill != 1)) {
        fprintf(stderr, "PREFILL >= 1 (gen: 1) and PREFILL - 1 + STEPS <= 256\n");
        dcp_mpi_finalize();
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_over_mpi),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    dcp_mpi_finalize();
    return rc;
}
