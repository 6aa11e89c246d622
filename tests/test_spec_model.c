/* Speculative verification in the run state (dcp_model_state_step with k + 1 rows of one sequence,
 * dcp_model_state_truncate_seq), against decoding one token per step:
 *  - bitwise: a verification step's row j (its last token, then the drafts, all with logits) gives
 *    exactly the logits and argmax of the one-row step at position L + j, for every row whose
 *    drafts before it are right;
 *  - roll-back: after each verification the state is truncated to the accepted tokens, and then
 *    its caches hold exactly what one-token decoding holds at that length: the same length and
 *    pages on every rank of every layer, and the same bytes of K and V (or of the latent row) at
 *    every live position, read through each state's own block tables;
 *  - configurations: stories260K at TP 1 (f32, f16 with pages of 4), TP 2, TP 8 / DCP 2 (a2a with
 *    interleave 1 and 4, ag_rs with interleave = block size and q_replicate); a generated llama
 *    with one KV head at TP 8 / DCP 8 and DCP 4; q8_0 KV (a generated head-dim-32 llama) at TP 1
 *    and TP 8 / DCP 2 (a2a, ag_rs); deepseek2 (MLA latent cache, MoE) at TP 1 and TP 4 / DCP 4 (a2a,
 *    ag_rs with q_replicate), with q8_0 latent rows too. Accepted counts vary from 0 to k, so
 *    verifications start and end on and across page and interleave boundaries, and ranks that own
 *    none of the draft tokens occur;
 *  - per-rank visibility in each real verification step: the local lengths every layer's attention
 *    reads for query j on every rank are the rank's tokens before L + j + 1 (brute force);
 *  - truncation refuses a longer length and a slot outside the state. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "model/graph.h"
#include "testmodel/testmodel.h"
#include "ref_model.h"
#include "vkutil.h"

enum { K = 4, PROMPT = 7, TOTAL = 36 };

typedef enum src_kind { SRC_STORIES, SRC_GEN_KV1, SRC_GEN_HD32, SRC_DS2, SRC_DS2_Q8 } src_kind;

typedef struct scase {
    src_kind src;
    uint32_t tp, dcp, interleave, block;
    dcp_cp_backend backend;
    bool q_replicate;
    dcp_dtype kv;
} scase;

typedef struct model_src {
    dcp_gguf *g;
    void *bytes; /* in-memory files */
} model_src;

static void open_src(src_kind k, model_src *ms)
{
    memset(ms, 0, sizeof *ms);
    if (k == SRC_STORIES) {
        DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &ms->g));
        return;
    }
    if (k == SRC_GEN_KV1 || k == SRC_GEN_HD32) {
        dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
        mc.n_layer = 2;
        mc.n_head = 8;
        mc.n_ff = 256;
        if (k == SRC_GEN_KV1) {
            mc.n_embd = 128;
            mc.n_head_kv = 1;
            mc.head_dim = 16;
            mc.seed = 77;
        } else {
            mc.n_embd = 256;
            mc.n_head_kv = 2;
            mc.head_dim = 32;
            mc.seed = 311;
        }
        DCP_ASSERT_OK(dcp_gguf_open_test_model(&mc, &ms->g));
        return;
    }
    dcp_test_deepseek2_config dc;
    DCP_ASSERT_OK(dcp_test_deepseek2_preset('A', &dc));
    if (k == SRC_DS2_Q8) dc.kv_lora_rank = 48; /* latent rows of 48 + 16 = 64 values: q8_0 blocks */
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_build_test_model_deepseek2(&dc, &w));
    size_t size;
    DCP_ASSERT_OK(dcp_gguf_writer_write_memory(w, &ms->bytes, &size));
    dcp_gguf_writer_destroy(w);
    DCP_ASSERT_OK(dcp_gguf_open_memory(ms->bytes, size, "<deepseek2 test model>", &ms->g));
}

static void close_src(model_src *ms)
{
    dcp_gguf_close(ms->g);
    free(ms->bytes);
}

static dcp_model_state *make_state(dcp_model *m, const scase *c)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_rows = 8;
    sc.max_logits = 8;
    sc.block_size = c->block;
    sc.interleave = c->interleave;
    sc.backend = c->backend;
    sc.kv_dtype = c->kv;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &s));
    return s;
}

/* Runs tokens [n] on sequence 0, one row per step; logits [n][V] of every row if not NULL. */
static void one_by_one(dcp_model_state *s, const int32_t *toks, uint32_t n, float *logits, int32_t *next, uint32_t V)
{
    for (uint32_t i = 0; i < n; i++) {
        dcp_model_row row = {toks[i], 0, true};
        DCP_ASSERT_OK(dcp_model_state_step(s, &row, 1, logits ? logits + (size_t)i * V : NULL, next ? next + i : NULL));
    }
}

/* The pool bytes of local rank i of cache kc, all segments, into a malloc'd copy. */
static uint8_t *pool_bytes(const dcp_kv_cache *kc, uint32_t i)
{
    const dcp_kv_pool *p = dcp_kv_cache_pool(kc, i);
    const uint64_t pb = dcp_kv_pool_page_bytes(p), pps = dcp_kv_pool_pages_per_segment(p);
    uint8_t *raw = malloc(pb * dcp_kv_pool_get_config(p)->num_pages);
    for (uint32_t seg = 0; seg < dcp_kv_pool_segment_count(p); seg++) {
        dcp_buffer *b = dcp_kv_pool_segment(p, seg);
        DCP_ASSERT_OK(dcp_buffer_download(b, 0, raw + seg * pps * pb, dcp_buffer_size(b)));
    }
    return raw;
}

/* Both states' caches of sequence 0: same length and pages on every rank of every layer, and the
 * same bytes at every live position (K and V rows of every KV head). */
static void same_caches(const dcp_model_state *a, const dcp_model_state *b, const char *what)
{
    assert_int_equal(dcp_model_state_seq_length(a, 0), dcp_model_state_seq_length(b, 0));
    const uint32_t L = a->m->cfg.n_layer;
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t i = 0; i < a->m->nl; i++) {
            const dcp_kv_cache *ka = a->caches[l * a->ng + a->r[i].g], *kb = b->caches[l * b->ng + b->r[i].g];
            const uint32_t gl = a->r[i].gl;
            const uint32_t len = dcp_kv_cache_seq_local_length(ka, gl, 0);
            assert_int_equal(len, dcp_kv_cache_seq_local_length(kb, gl, 0));
            if (dcp_kv_cache_pages_used(ka, gl) != dcp_kv_cache_pages_used(kb, gl))
                fail_msg("%s: layer %u rank %u: %u pages in use after speculation, %u one token at a time", what, l, i,
                         dcp_kv_cache_pages_used(ka, gl), dcp_kv_cache_pages_used(kb, gl));
            const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(dcp_kv_cache_pool(ka, gl));
            const uint64_t row = dcp_kv_row_bytes(pc->dtype, pc->head_dim), B = pc->page_size;
            const uint64_t pb = dcp_kv_pool_page_bytes(dcp_kv_cache_pool(ka, gl));
            uint8_t *ra = pool_bytes(ka, gl), *rb = pool_bytes(kb, gl);
            const uint32_t *bta = dcp_kv_cache_block_table(ka, gl, 0), *btb = dcp_kv_cache_block_table(kb, gl, 0);
            for (uint32_t li = 0; li < len; li++)
                for (uint32_t part = 0; part < (pc->k_only ? 1u : 2u); part++)
                    for (uint32_t h = 0; h < pc->kv_heads; h++) {
                        const uint64_t in_page = ((uint64_t)part * pc->kv_heads * B + (uint64_t)h * B + li % B) * row;
                        const uint8_t *x = ra + bta[li / B] * pb + in_page, *y = rb + btb[li / B] * pb + in_page;
                        if (memcmp(x, y, row) != 0)
                            fail_msg("%s: layer %u rank %u local position %u %s head %u: KV bytes differ from one-token "
                                     "decoding", what, l, i, li, part ? "V" : "K", h);
                    }
            free(ra);
            free(rb);
        }
}

/* The lengths the step's attention read for its k + 1 rows (dcp_graph_rows_tables, as each
 * architecture's layers call it) on every layer and rank held: query j at global position L + j
 * sees, on group rank r, as many local tokens as r owns before L + j + 1 (counted position by
 * position with the owner function). */
static void check_visibility(dcp_model_state *s, uint32_t L, uint32_t k, const char *what)
{
    assert_int_equal(s->rows, k + 1);
    const uint32_t N = s->m->dcp, I = s->cfg.interleave;
    for (uint32_t l = 0; l < s->m->cfg.n_layer; l++)
        for (uint32_t i = 0; i < s->m->nl; i++) {
            dcp_graph_rows_tables(s, l, i);
            const uint32_t r = s->r[i].gr;
            for (uint32_t j = 0; j <= k; j++) {
                uint32_t own = 0;
                for (uint32_t p = 0; p <= L + j; p++) own += N == 1 || dcp_kv_owner(p, N, I) == r;
                if (s->lens[j] != own)
                    fail_msg("%s: verification at L = %u: query %u on rank %u layer %u sees %u local tokens; the "
                             "rank owns %u before position %u", what, L, j, r, l, s->lens[j], own, L + j + 1);
            }
        }
}

static void check_case(const scase *c)
{
    model_src ms;
    open_src(c->src, &ms);
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(ms.g, &cfg));
    const uint32_t V = cfg.n_vocab;
    dcp_context *ctx = dcp_test_context_of(c->tp);
    dcp_device *devs[8];
    for (uint32_t r = 0; r < c->tp; r++) devs[r] = dcp_context_device(ctx, (int)r);
    dcp_model *m;
    DCP_ASSERT_OK(dcp_test_model_load(devs, 0, c->tp, c->tp, c->dcp, c->q_replicate, ms.g, &cfg, &m));
    dcp_model_state *ref = make_state(m, c), *spec = make_state(m, c);
    char what[160];
    snprintf(what, sizeof what, "%s TP %u DCP %u %s interleave %u block %u%s %s",
             c->src == SRC_STORIES ? "stories260K" : c->src == SRC_DS2 ? "deepseek2" : c->src == SRC_DS2_Q8 ? "deepseek2-kv64" : c->src == SRC_GEN_KV1 ? "llama-1kv" : "llama-hd32",
             c->tp, c->dcp, dcp_cp_backend_name(c->backend), c->interleave, c->block, c->q_replicate ? " q_replicate" : "",
             dcp_dtype_name(c->kv));

    /* One token at a time: the greedy sequence and every position's logits. */
    int32_t toks[TOTAL + 1];
    for (uint32_t t = 0; t < PROMPT; t++) toks[t] = (int32_t)(1 + (t * 37 + 11) % (V - 1));
    float *ref_logits = malloc((size_t)TOTAL * V * sizeof *ref_logits);
    int32_t next;
    DCP_ASSERT_OK(dcp_model_state_forward(ref, toks, PROMPT - 1, NULL, NULL));
    for (uint32_t pos = PROMPT - 1; pos < TOTAL; pos++) {
        dcp_model_row row = {toks[pos], 0, true};
        DCP_ASSERT_OK(dcp_model_state_step(ref, &row, 1, ref_logits + (size_t)pos * V, &next));
        if (pos + 1 >= PROMPT) toks[pos + 1] = next;
    }
    dcp_model_state_reset(ref);

    /* Speculation beside one-token decoding, compared after every verification. */
    DCP_ASSERT_OK(dcp_model_state_forward(ref, toks, PROMPT - 1, NULL, NULL));
    DCP_ASSERT_OK(dcp_model_state_forward(spec, toks, PROMPT - 1, NULL, NULL));
    float *logits = malloc((size_t)(K + 1) * V * sizeof *logits);
    uint32_t L = PROMPT - 1, steps = 0, accepted = 0;
    uint64_t rng = 0x5eed + c->tp * 131 + c->dcp * 17 + c->interleave;
    while (L + 1 < TOTAL) {
        uint32_t d = TOTAL - 1 - L < K ? TOTAL - 1 - L : K;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        const uint32_t a = (uint32_t)((rng >> 33) % (d + 1)); /* drafts that will be right */
        dcp_model_row rows[K + 1];
        rows[0] = (dcp_model_row){toks[L], 0, true};
        for (uint32_t j = 0; j < d; j++) {
            int32_t t = toks[L + 1 + j];
            if (j >= a) t = (t + 1 + (int32_t)j) % (int32_t)V; /* wrong from draft a on */
            rows[1 + j] = (dcp_model_row){t, 0, true};
        }
        int32_t nx[K + 1];
        DCP_ASSERT_OK(dcp_model_state_step(spec, rows, 1 + d, logits, nx));
        check_visibility(spec, L, d, what);
        for (uint32_t j = 0; j <= a; j++) {
            if (memcmp(logits + (size_t)j * V, ref_logits + (size_t)(L + j) * V, (size_t)V * sizeof *logits) != 0)
                fail_msg("%s: verification at L = %u, row %u: logits differ from the one-token step at position %u",
                         what, L, j, L + j);
            assert_int_equal(nx[j], toks[L + j + 1]);
        }
        DCP_ASSERT_OK(dcp_model_state_truncate_seq(spec, 0, L + 1 + a));
        one_by_one(ref, toks + L, 1 + a, NULL, NULL, V);
        same_caches(spec, ref, what);
        L += 1 + a;
        accepted += a;
        steps++;
    }
    printf("%s: %u verifications (%u drafts accepted) bitwise equal to one-token steps; caches equal after each\n",
           what, steps, accepted);
    /* Refusals change nothing. */
    const uint32_t len = dcp_model_state_seq_length(spec, 0);
    assert_int_equal(dcp_model_state_truncate_seq(spec, 0, len + 1), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "longer"));
    assert_int_equal(dcp_model_state_truncate_seq(spec, 1, 0), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_model_state_seq_length(spec, 0), len);
    DCP_ASSERT_OK(dcp_model_state_truncate_seq(spec, 0, 0)); /* to 0: every page back */
    assert_int_equal(dcp_model_state_pages_free(spec), dcp_model_state_pages_total(spec));
    free(logits);
    free(ref_logits);
    dcp_model_state_destroy(spec);
    dcp_model_state_destroy(ref);
    dcp_model_destroy(m);
    dcp_test_context_done(ctx);
    close_src(&ms);
}

static void run_cases(const scase *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) check_case(&cases[i]);
}

static void test_stories(void **state)
{
    (void)state;
    static const scase cases[] = {
        {SRC_STORIES, 1, 1, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F32},
        {SRC_STORIES, 1, 1, 1, 4, DCP_CP_A2A, false, DCP_DTYPE_F16},
        {SRC_STORIES, 2, 1, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F16},
        {SRC_STORIES, 8, 2, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F32},
        {SRC_STORIES, 8, 2, 4, 8, DCP_CP_A2A, false, DCP_DTYPE_F16},
        {SRC_STORIES, 8, 2, 16, 16, DCP_CP_AG_RS, true, DCP_DTYPE_F16},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_dcp_wide(void **state)
{
    (void)state;
    static const scase cases[] = {
        {SRC_GEN_KV1, 8, 8, 1, 4, DCP_CP_A2A, false, DCP_DTYPE_F16},
        {SRC_GEN_KV1, 8, 4, 4, 4, DCP_CP_AG_RS, false, DCP_DTYPE_F32},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_q8(void **state)
{
    (void)state;
    static const scase cases[] = {
        {SRC_GEN_HD32, 1, 1, 1, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0},
        {SRC_GEN_HD32, 8, 2, 1, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0},
        {SRC_GEN_HD32, 8, 4, 8, 8, DCP_CP_AG_RS, false, DCP_DTYPE_Q8_0},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

static void test_deepseek2(void **state)
{
    (void)state;
    static const scase cases[] = {
        {SRC_DS2, 1, 1, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F32},
        {SRC_DS2, 4, 4, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F16},
        {SRC_DS2, 4, 2, 16, 16, DCP_CP_AG_RS, true, DCP_DTYPE_F32},
        {SRC_DS2_Q8, 1, 1, 1, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0},
        {SRC_DS2_Q8, 4, 4, 8, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0},
    };
    run_cases(cases, sizeof cases / sizeof cases[0]);
}

/* Steps of two shapes taking turns (one row, then a verification of five rows) each replay their
 * own recording from the third step on (the step layer keeps several), and compute what one-row
 * steps compute: at TP 1 and TP 8 / DCP 2 (exchanges kept with each recording). A fixed split-KV
 * chunking keeps the attention's part of the keys the same while the sequence grows. */
static void test_replay_shapes(void **state)
{
    (void)state;
    static const scase cases[] = {
        {SRC_STORIES, 1, 1, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F32},
        {SRC_STORIES, 8, 2, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F32},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        model_src ms;
        open_src(SRC_STORIES, &ms);
        dcp_model_config cfg;
        DCP_ASSERT_OK(dcp_model_config_read(ms.g, &cfg));
        const uint32_t V = cfg.n_vocab, tp = cases[c].tp;
        dcp_context *ctx = dcp_test_context_of(tp);
        dcp_device *devs[8];
        for (uint32_t r = 0; r < tp; r++) devs[r] = dcp_context_device(ctx, (int)r);
        dcp_model *m;
        DCP_ASSERT_OK(dcp_test_model_load(devs, 0, tp, tp, cases[c].dcp, false, ms.g, &cfg, &m));
        dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
        sc.n_ctx = 64;
        sc.max_rows = 8;
        sc.max_logits = 8;
        sc.kv_dtype = DCP_DTYPE_F32;
        sc.chunk_tokens = 64;
        dcp_model_state *a, *b;
        DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &a));
        DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &b));
        int32_t toks[64];
        for (uint32_t t = 0; t < 64; t++) toks[t] = (int32_t)(1 + (t * 53 + 7) % (V - 1));
        DCP_ASSERT_OK(dcp_model_state_forward(a, toks, 4, NULL, NULL));
        DCP_ASSERT_OK(dcp_model_state_forward(b, toks, 4, NULL, NULL));
        float *la = malloc((size_t)5 * V * sizeof *la), *lb = malloc((size_t)5 * V * sizeof *lb);
        uint32_t L = 4, replays = 0;
        for (uint32_t i = 0; i < 10; i++) {
            const uint32_t n = i % 2 ? 5 : 1;
            dcp_model_row rows[5];
            for (uint32_t j = 0; j < n; j++) rows[j] = (dcp_model_row){toks[L + j], 0, true};
            DCP_ASSERT_OK(dcp_model_state_step(a, rows, n, la, NULL));
            const bool rep = dcp_model_state_last_replayed(a);
            if (i >= 2 && !rep) fail_msg("TP %u DCP %u: step %u (%u rows) was recorded again", tp, cases[c].dcp, i, n);
            replays += rep;
            one_by_one(b, toks + L, n, lb, NULL, V);
            if (memcmp(la, lb, (size_t)n * V * sizeof *la))
                fail_msg("TP %u DCP %u: step %u (%u rows, replayed %d): logits differ from one-row steps", tp,
                         cases[c].dcp, i, n, rep);
            L += n;
        }
        printf("TP %u DCP %u: one-row and five-row steps in turn: %u of 10 replayed, logits equal to one-row steps\n",
               tp, cases[c].dcp, replays);
        free(la);
        free(lb);
        dcp_model_state_destroy(b);
        dcp_model_state_destroy(a);
        dcp_model_destroy(m);
        dcp_test_context_done(ctx);
        close_src(&ms);
    }
}

int main(int argc, char **argv)
{
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* one group per CTest entry: they run in parallel */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories),
        cmocka_unit_test(test_dcp_wide),
        cmocka_unit_test(test_q8),
        cmocka_unit_test(test_deepseek2),
        cmocka_unit_test(test_replay_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
