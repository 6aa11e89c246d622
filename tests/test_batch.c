/* Many sequences in one run state (dcp_model_state_step), stories260K:
 *  - batch invariance: four sequences with prompts of different lengths, started and ended at
 *    different steps, their prompt chunks mixed into the steps of the others and their rows at
 *    changing batch positions, give bitwise the same logits and greedy tokens as each sequence
 *    run alone, at TP 1, TP 2 and TP 8 / DCP 2 (a2a and ag_rs);
 *  - page accounting: every sequence holds exactly the pages its shard needs, freeing returns
 *    them, a step that does not fit is refused with DCP_ERR_OUT_OF_PAGES and changes nothing;
 *  - malformed steps are refused with a message and change nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "testmodel/testmodel.h"
#include "ref_model.h"
#include "stories_ref.h"
#include "vkutil.h"

enum { S = 4, GEN = 10, MAX_ROWS = 8 };

/* Sequence q: prompt = stories_ref[off[q] .. off[q] + len[q]), starts at step start[q]. */
static const uint32_t prompt_off[S] = {0, 40, 7, 100};
static const uint32_t prompt_len[S] = {5, 13, 1, 9};
static const uint32_t start_step[S] = {0, 1, 3, 4};

typedef struct seq_out {
    int32_t tokens[GEN];
    float *logits; /* [GEN][V] */
} seq_out;

typedef struct sched {
    uint32_t fed[S];   /* prompt tokens fed so far */
    uint32_t made[S];  /* tokens generated so far */
    int32_t last[S];   /* last generated token */
    bool active[S];
} sched;

/* Runs the sequences in `which` (a bit mask) together, step by step, until each has generated GEN
 * tokens: a sequence joins at its start step (counted from the first step), each step takes one
 * decode row per generating sequence and fills the rest of MAX_ROWS with prompt rows; the order of
 * the sequences in a step rotates. */
static void run_together(dcp_model_state *s, unsigned which, uint32_t V, seq_out *out)
{
    sched sc;
    memset(&sc, 0, sizeof sc);
    dcp_model_row rows[MAX_ROWS];
    float *logits = malloc((size_t)S * V * sizeof(float));
    int32_t next[S];
    uint32_t owner[S];
    const bool alone = __builtin_popcount(which) == 1;
    for (uint32_t step = 0;; step++) {
        uint32_t n = 0, outs = 0, budget = MAX_ROWS;
        bool any = false;
        for (uint32_t k = 0; k < S; k++) {
            uint32_t q = (k + step) % S; /* rotate the batch positions */
            if (!(which & (1u << q)) || sc.made[q] == GEN) continue;
            if (!alone && step < start_step[q]) { any = true; continue; }
            any = true;
            if (sc.fed[q] < prompt_len[q]) {
                uint32_t take = prompt_len[q] - sc.fed[q];
                /* leave one row for each other sequence that may want one */
                if (take > budget) take = budget;
                if (take == 0) continue;
                for (uint32_t t = 0; t < take; t++) {
                    uint32_t p = sc.fed[q] + t;
                    rows[n++] = (dcp_model_row){stories_ref[prompt_off[q] + p], q, p + 1 == prompt_len[q]};
                }
                sc.fed[q] += take;
                budget -= take;
                if (rows[n - 1].logits) owner[outs++] = q;
            } else if (budget > 0) {
                rows[n++] = (dcp_model_row){sc.last[q], q, true};
                owner[outs++] = q;
                budget--;
            }
        }
        if (!any) break;
        if (n == 0) continue;
        DCP_ASSERT_OK(dcp_model_state_step(s, rows, n, logits, next));
        for (uint32_t k = 0; k < outs; k++) {
            uint32_t q = owner[k];
            memcpy(out[q].logits + (size_t)sc.made[q] * V, logits + (size_t)k * V, V * sizeof(float));
            out[q].tokens[sc.made[q]] = next[k];
            sc.last[q] = next[k];
            if (++sc.made[q] == GEN) dcp_model_state_free_seq(s, q);
        }
    }
    free(logits);
}

static void check_invariance(uint32_t tp, uint32_t dcp, dcp_cp_backend backend)
{
    dcp_gguf *g;
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &g));
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_context *ctx = dcp_test_context_of(tp);
    dcp_device *devs[8];
    for (uint32_t r = 0; r < tp; r++) devs[r] = dcp_context_device(ctx, (int)r);
    dcp_model *m;
    DCP_ASSERT_OK(dcp_test_model_load(devs, 0, tp, tp, dcp, false, g, &cfg, &m));
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_seqs = S;
    sc.max_rows = MAX_ROWS;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.backend = backend;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &s));
    const uint32_t V = cfg.n_vocab;
    seq_out alone[S], together[S];
    for (uint32_t q = 0; q < S; q++) {
        alone[q].logits = calloc((size_t)GEN * V, sizeof(float));
        together[q].logits = calloc((size_t)GEN * V, sizeof(float));
        run_together(s, 1u << q, V, alone);
        assert_int_equal(dcp_model_state_pages_free(s), dcp_model_state_pages_total(s));
    }
    run_together(s, (1u << S) - 1, V, together);
    assert_int_equal(dcp_model_state_pages_free(s), dcp_model_state_pages_total(s));
    for (uint32_t q = 0; q < S; q++) {
        for (uint32_t t = 0; t < GEN; t++)
            if (alone[q].tokens[t] != together[q].tokens[t])
                fail_msg("TP %u DCP %u %s: sequence %u token %u: %d alone, %d in the batch", tp, dcp,
                         dcp_cp_backend_name(backend), q, t, alone[q].tokens[t], together[q].tokens[t]);
        if (memcmp(alone[q].logits, together[q].logits, (size_t)GEN * V * sizeof(float)) != 0)
            fail_msg("TP %u DCP %u %s: sequence %u: logits differ bitwise between alone and in the batch", tp, dcp,
                     dcp_cp_backend_name(backend), q);
        free(alone[q].logits);
        free(together[q].logits);
    }
    printf("TP %u DCP %u %s: %u sequences, %u tokens each: logits and tokens bitwise the same alone and batched\n", tp,
           dcp, dcp > 1 ? dcp_cp_backend_name(backend) : "-", S, GEN);
    dcp_model_state_destroy(s);
    dcp_model_destroy(m);
    dcp_test_context_done(ctx);
    dcp_gguf_close(g);
}

static void test_invariance_tp1(void **state) { (void)state; check_invariance(1, 1, DCP_CP_A2A); }
static void test_invariance_tp2(void **state) { (void)state; check_invariance(2, 1, DCP_CP_A2A); }
static void test_invariance_tp8_dcp2_a2a(void **state) { (void)state; check_invariance(8, 2, DCP_CP_A2A); }
static void test_invariance_tp8_dcp2_ag_rs(void **state) { (void)state; check_invariance(8, 2, DCP_CP_AG_RS); }

/* Pages held, freed and refused: a pool of 6 pages of 4 tokens per rank (TP 8 / DCP 2, interleave
 * 1: a rank holds every other token of a sequence). */
static void test_pages(void **state)
{
    (void)state;
    dcp_gguf *g;
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &g));
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_context *ctx = dcp_test_context_of(8);
    dcp_device *devs[8];
    for (int r = 0; r < 8; r++) devs[r] = dcp_context_device(ctx, r);
    dcp_model *m;
    DCP_ASSERT_OK(dcp_test_model_load(devs, 0, 8, 8, 2, false, g, &cfg, &m));
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 40;
    sc.max_seqs = 3;
    sc.max_rows = 24;
    sc.block_size = 4;
    sc.kv_pages = 6;
    sc.backend = DCP_CP_AG_RS;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &s));
    assert_int_equal(dcp_model_state_pages_total(s), 6);
    assert_int_equal(dcp_model_state_pages_free(s), 6);
    /* 9 tokens: rank 0 holds 5 (2 pages), rank 1 holds 4 (1 page). */
    dcp_model_row rows[24];
    for (uint32_t t = 0; t < 9; t++) rows[t] = (dcp_model_row){stories_ref[t], 1, t == 8};
    assert_int_equal(dcp_model_state_pages_needed(s, 1, 9), 2);
    DCP_ASSERT_OK(dcp_model_state_step(s, rows, 9, NULL, NULL));
    assert_int_equal(dcp_model_state_seq_length(s, 1), 9);
    assert_int_equal(dcp_model_state_seq_pages(s, 1, 0), 2);
    assert_int_equal(dcp_model_state_seq_pages(s, 1, 1), 1);
    assert_int_equal(dcp_model_state_pages_free(s), 4);
    /* Sequence 2, 16 tokens: 2 pages per rank (rank 0 then has 2 free, rank 1 3). Sequence 0, 17
     * tokens: rank 0 would hold 9 of them, 3 pages: refused, nothing changes. */
    for (uint32_t t = 0; t < 16; t++) rows[t] = (dcp_model_row){stories_ref[t], 2, false};
    DCP_ASSERT_OK(dcp_model_state_step(s, rows, 16, NULL, NULL));
    assert_int_equal(dcp_model_state_pages_free(s), 2);
    for (uint32_t t = 0; t < 17; t++) rows[t] = (dcp_model_row){stories_ref[t], 0, false};
    assert_int_equal(dcp_model_state_pages_needed(s, 0, 17), 3);
    uint32_t free_before = dcp_model_state_pages_free(s);
    assert_int_equal(dcp_model_state_step(s, rows, 17, NULL, NULL), DCP_ERR_OUT_OF_PAGES);
    assert_non_null(strstr(dcp_last_error(), "needs"));
    assert_int_equal(dcp_model_state_seq_length(s, 0), 0);
    assert_int_equal(dcp_model_state_pages_free(s), free_before);
    /* Freeing sequence 2 gives its pages back at once; the step then fits. */
    dcp_model_state_free_seq(s, 2);
    assert_int_equal(dcp_model_state_pages_free(s), 4);
    DCP_ASSERT_OK(dcp_model_state_step(s, rows, 17, NULL, NULL));
    assert_int_equal(dcp_model_state_seq_pages(s, 0, 0), 3);
    assert_int_equal(dcp_model_state_seq_pages(s, 0, 1), 2);
    assert_int_equal(dcp_model_state_pages_free(s), 1);
    dcp_model_state_reset(s);
    assert_int_equal(dcp_model_state_pages_free(s), 6);
    dcp_model_state_destroy(s);
    dcp_model_destroy(m);
    dcp_test_context_done(ctx);
    dcp_gguf_close(g);
}

static void test_bad_steps(void **state)
{
    (void)state;
    dcp_gguf *g;
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &g));
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_context *ctx = dcp_test_context_of(1);
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_model *m;
    DCP_ASSERT_OK(dcp_test_model_load(&dev, 0, 1, 1, 1, false, g, &cfg, &m));
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 8;
    sc.max_seqs = 2;
    sc.max_rows = 4;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &s));
    dcp_model_row split[3] = {{1, 0, false}, {1, 1, false}, {1, 0, true}};
    assert_int_equal(dcp_model_state_step(s, split, 3, NULL, NULL), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "not consecutive"));
    dcp_model_row slot[1] = {{1, 2, true}};
    assert_int_equal(dcp_model_state_step(s, slot, 1, NULL, NULL), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "slots 0..1"));
    dcp_model_row many[5] = {{1, 0, false}, {1, 0, false}, {1, 0, false}, {1, 0, false}, {1, 0, false}};
    assert_int_equal(dcp_model_state_step(s, many, 5, NULL, NULL), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "allowed 1..4"));
    dcp_model_row outs[3] = {{1, 0, true}, {1, 0, true}, {1, 0, true}};
    assert_int_equal(dcp_model_state_step(s, outs, 3, NULL, NULL), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "want logits"));
    DCP_ASSERT_OK(dcp_model_state_step(s, many, 4, NULL, NULL));
    DCP_ASSERT_OK(dcp_model_state_step(s, many, 4, NULL, NULL));
    assert_int_equal(dcp_model_state_step(s, many, 1, NULL, NULL), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "past the context of 8"));
    assert_int_equal(dcp_model_state_seq_length(s, 0), 8);
    assert_int_equal(dcp_model_state_seq_length(s, 1), 0);
    dcp_model_state_destroy(s);
    dcp_model_destroy(m);
    dcp_test_context_done(ctx);
    dcp_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_steps),
        cmocka_unit_test(test_pages),
        cmocka_unit_test(test_invariance_tp1),
        cmocka_unit_test(test_invariance_tp2),
        cmocka_unit_test(test_invariance_tp8_dcp2_a2a),
        cmocka_unit_test(test_invariance_tp8_dcp2_ag_rs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
