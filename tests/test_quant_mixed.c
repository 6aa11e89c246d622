/* Fused matrices whose parts have different types (issue 18 section 4): a Q4_K_M file keeps the
 * attn_v of some layers in Q6_K beside Q4_K attn_q / attn_k, and the loader keeps each part in its
 * own type (a matrix of parts: one matmul dispatch per part into its rows of the output) instead
 * of expanding the fused Q|K|V to F32.
 *
 * - The op: a matrix of parts (Q4_K | Q6_K | Q4_K rows) gives bitwise the per-part matmuls, at 1
 *   and 5 tokens, with and without accumulate, leaving y's other columns alone; the other weight
 *   ops refuse it.
 * - The model: generated llama, qwen2 (Q/K/V biases) and qwen3 (Q/K norms) of 8 layers quantized
 *   as Q4_K_M by the repository's quantizer (dcp_gguf_quantize, as `dcp-vk-gguf --quantize`;
 *   argv[1] a scratch directory), loaded at TP 1, 2 and 4 over logical devices: nothing held as
 *   F32, the weights' device bytes exactly the quantized sizes (every rank), every step's logits
 *   within LOGITS_TOL of the double-precision reference built from the file's dequantized tensors
 *   (tests/ref_model.c), the reference's greedy ids and the same ids at every TP.
 * - Slices that cut blocks: a Q4_K_M llama whose row-parallel attn_output / ffn_down slices cut
 *   the 256-weight blocks at TP 2 and 8 (E 256, Q 1024, FFN 1280), at TP 1, 2 and 8: the same
 *   checks, each cut slice held as its covering blocks in the file's type (column windows).
 * - Gate and up of different types (Q4_K, Q8_0) at TP 1, 2 and 4: two parts, matmul then swiglu. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "dcpvk/ops.h"
#include "ops/ops_internal.h"
#include "ref/model_ref.h"
#include "testmodel/testmodel.h"
#include "ref_model.h"
#include "vkutil.h"

/* The engine sums in f32 over the quantized blocks, the reference in double over the same
 * dequantized weights: the same values, rounding apart (test_archs' bound for F32 weights). */
#define LOGITS_TOL 1e-4
enum { PREFILL = 6, STEPS = 8, N_CTX = 32 };

static const char *dir;

static uint64_t rng_state = 88172645463325252ull;
static float rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* A rows x k matrix of `type` from random weights. */
static void make_matrix(dcp_device *dev, dcp_ggml_type type, uint32_t rows, uint32_t k, dcp_matrix *out)
{
    uint32_t be, bb;
    assert_true(dcp_ggml_type_block(type, &be, &bb));
    float *f = malloc((size_t)rows * k * sizeof *f);
    uint8_t *q = malloc((size_t)rows * (k / be) * bb);
    assert_true(f && q);
    for (size_t i = 0; i < (size_t)rows * k; i++) f[i] = rnd();
    DCP_ASSERT_OK(dcp_ggml_from_f32(type, f, q, (uint64_t)rows * k));
    const void *data[1] = {q};
    DCP_ASSERT_OK(dcp_matrix_create(dev, type, k, 1, data, &rows, out));
    free(f);
    free(q);
}

static void run_matmul(dcp_device *dev, const dcp_matrix *w, dcp_buffer *x, uint32_t tokens, dcp_buffer *y,
                       uint32_t y_stride, int accumulate, uint32_t *dispatches)
{
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = w, .x = x, .x_stride = w->k, .y = y,
                                                        .y_stride = y_stride, .tokens = tokens,
                                                        .accumulate = accumulate}));
    if (dispatches) *dispatches = dcp_cmd_dispatches(cmd);
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    dcp_cmd_destroy(cmd);
}

static void test_matmul_of_parts(void **state)
{
    (void)state;
    dcp_context *ctx = dcp_test_context_of(1);
    dcp_device *dev = dcp_context_device(ctx, 0);
    enum { K = 512, NP = 3, T_MAX = 5, YS = 48 };
    static const dcp_ggml_type types[NP] = {DCP_GGML_TYPE_Q4_K, DCP_GGML_TYPE_Q6_K, DCP_GGML_TYPE_Q4_K};
    static const uint32_t rows[NP] = {24, 8, 9};
    const uint32_t all = rows[0] + rows[1] + rows[2];
    dcp_matrix sep[NP], parts[NP], joined;
    for (int i = 0; i < NP; i++) {
        uint64_t saved = rng_state;
        make_matrix(dev, types[i], rows[i], K, &sep[i]);
        rng_state = saved; /* the same weights again, to be moved into the joined matrix */
        make_matrix(dev, types[i], rows[i], K, &parts[i]);
    }
    DCP_ASSERT_OK(dcp_matrix_join(NP, parts, &joined));
    assert_int_equal(joined.n_parts, NP);
    assert_int_equal(joined.rows, all);
    assert_int_equal(joined.k, K);
    assert_null(joined.buf);
    uint64_t want_bytes = 0;
    for (int i = 0; i < NP; i++) want_bytes += dcp_matrix_bytes(types[i], K, rows[i]);
    assert_int_equal(dcp_matrix_device_bytes(&joined), want_bytes);

    float *x = malloc(T_MAX * K * sizeof *x), *y0 = malloc(T_MAX * YS * sizeof *y0);
    float *got = malloc(T_MAX * YS * sizeof *got), *part = malloc(T_MAX * YS * sizeof *part);
    assert_true(x && y0 && got && part);
    for (int i = 0; i < T_MAX * K; i++) x[i] = rnd();
    for (int i = 0; i < T_MAX * YS; i++) y0[i] = rnd();
    dcp_buffer *xb = dcp_test_upload(dev, x, T_MAX * K * sizeof *x);
    dcp_buffer *yb = dcp_test_upload(dev, NULL, T_MAX * YS * sizeof *got);
    dcp_buffer *pb = dcp_test_upload(dev, NULL, T_MAX * YS * sizeof *part);
    static const uint32_t token_counts[2] = {1, T_MAX};
    for (int tc = 0; tc < 2; tc++)
        for (int acc = 0; acc < 2; acc++) {
            const uint32_t T = token_counts[tc];
            DCP_ASSERT_OK(dcp_buffer_upload(yb, 0, y0, T_MAX * YS * sizeof *y0));
            uint32_t dispatches = 0;
            run_matmul(dev, &joined, xb, T, yb, YS, acc, &dispatches);
            assert_int_equal(dispatches, NP); /* one a part */
            DCP_ASSERT_OK(dcp_buffer_download(yb, 0, got, T_MAX * YS * sizeof *got));
            uint32_t r0 = 0;
            for (int i = 0; i < NP; i++) {
                /* Bitwise: the part alone (into columns [0, rows), accumulate 0) gives the sums;
                 * with accumulate the shader adds them to what y held in one f32 add. */
                DCP_ASSERT_OK(dcp_buffer_upload(pb, 0, y0, T_MAX * YS * sizeof *y0));
                run_matmul(dev, &sep[i], xb, T, pb, YS, 0, NULL);
                DCP_ASSERT_OK(dcp_buffer_download(pb, 0, part, T_MAX * YS * sizeof *part));
                for (uint32_t t = 0; t < T; t++)
                    for (uint32_t r = 0; r < rows[i]; r++) {
                        const float s = part[t * YS + r];
                        const float want = acc ? y0[t * YS + r0 + r] + s : s;
                        const float g = got[t * YS + r0 + r];
                        if (memcmp(&g, &want, sizeof g))
                            fail_msg("T %u accumulate %d: token %u row %u (part %d, %s): %.9g, per-part %.9g", T, acc, t,
                                     r0 + r, i, dcp_ggml_type_name(types[i]), g, want);
                    }
                r0 += rows[i];
            }
            for (uint32_t t = 0; t < T_MAX; t++) /* the other columns and tokens untouched */
                for (uint32_t c = t < T ? all : 0; c < YS; c++)
                    if (memcmp(&got[t * YS + c], &y0[t * YS + c], sizeof(float)))
                        fail_msg("T %u: token %u column %u written (%.9g, was %.9g)", T, t, c, got[t * YS + c],
                                 y0[t * YS + c]);
        }
    /* Only the matmul takes a matrix of parts. */
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    dcp_buffer *ids = dcp_test_upload(dev, NULL, 4);
    assert_int_equal(dcp_op_get_rows(cmd, &(dcp_get_rows_args){.w = &joined, .ids = ids, .y = yb, .y_stride = K,
                                                               .tokens = 1}),
                     DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "parts"));
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(ids);
    /* Join refuses parts of another k. */
    dcp_matrix odd[2];
    make_matrix(dev, DCP_GGML_TYPE_Q4_K, 4, 256, &odd[0]);
    make_matrix(dev, DCP_GGML_TYPE_Q6_K, 4, 512, &odd[1]);
    dcp_matrix bad;
    assert_int_equal(dcp_matrix_join(2, odd, &bad), DCP_ERR_INVALID_ARGUMENT);
    assert_null(odd[0].buf); /* destroyed */
    assert_null(bad.parts);

    dcp_buffer_destroy(xb);
    dcp_buffer_destroy(yb);
    dcp_buffer_destroy(pb);
    for (int i = 0; i < NP; i++) dcp_matrix_destroy(&sep[i]);
    dcp_matrix_destroy(&joined);
    free(x);
    free(y0);
    free(got);
    free(part);
    dcp_test_context_done(ctx);
}

static double max_abs_diff(const float *a, const float *b, uint32_t n)
{
    double m = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d; /* NaN propagates */
    }
    return m;
}

/* Columns [c0, c0 + nc) of rank r's slice of a row-parallel matrix of k columns (attn_output:
 * whole query heads, ffn_down: FFN rows, the first k % tp ranks one more), as the loader splits. */
static void rank_columns(const dcp_gguf_tensor *t, const dcp_model_config *cfg, uint32_t tp, uint32_t r, uint32_t *c0,
                         uint32_t *nc)
{
    const uint32_t k = (uint32_t)t->ne[0];
    if (strstr(t->name, "attn_output")) {
        *nc = cfg->n_head / tp * cfg->head_dim;
        *c0 = r * *nc;
    } else {
        *nc = k / tp + (r < k % tp ? 1 : 0);
        *c0 = r * (k / tp) + (r < k % tp ? r : k % tp);
    }
}

/* Device bytes the weights of a TP group of tp take in their file's types: each row-split matrix
 * once (split over the ranks by whole rows), each row-parallel one (attn_output, ffn_down) rank by
 * rank as the whole blocks covering the rank's columns (a slice that cuts blocks holds them all:
 * neighbouring ranks both hold a block they share), norms as f32, the replicated embedding and
 * norms on every rank. */
static uint64_t quantized_bytes(const dcp_gguf *g, const dcp_model_config *cfg, uint32_t tp)
{
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        const bool matrix = t->ne[1] > 1;
        const bool row_parallel = strstr(t->name, "attn_output.weight") || strstr(t->name, "ffn_down.weight");
        if (matrix && row_parallel) {
            uint32_t be, bb;
            assert_true(dcp_ggml_type_block(t->type, &be, &bb));
            for (uint32_t r = 0; r < tp; r++) {
                uint32_t c0, nc;
                rank_columns(t, cfg, tp, r, &c0, &nc);
                const uint32_t held = (c0 + nc + be - 1) / be * be - c0 / be * be; /* = nc when aligned */
                bytes += dcp_matrix_bytes(t->type, held, t->ne[1]);
            }
            continue;
        }
        const uint64_t b = matrix ? dcp_matrix_bytes(t->type, (uint32_t)t->ne[0], t->ne[1]) : t->ne[0] * 4;
        const bool replicated = !strcmp(t->name, "token_embd.weight") || strstr(t->name, "norm.weight");
        bytes += replicated ? tp * b : b;
    }
    return bytes;
}

/* Row-parallel matrices of the file whose rank slices cut their type's blocks at tp. */
static uint32_t cut_slices(const dcp_gguf *g, const dcp_model_config *cfg, uint32_t tp)
{
    uint32_t n = 0;
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        if (!strstr(t->name, "attn_output.weight") && !strstr(t->name, "ffn_down.weight")) continue;
        uint32_t be, bb;
        assert_true(dcp_ggml_type_block(t->type, &be, &bb));
        for (uint32_t r = 0; r < tp; r++) {
            uint32_t c0, nc;
            rank_columns(t, cfg, tp, r, &c0, &nc);
            n += c0 % be || nc % be;
        }
    }
    return n;
}

/* Prefill then STEPS greedy steps at TP tp; the ids go to ids[STEPS]; returns the worst logits
 * error against the reference. */
static double run_model(dcp_context *ctx, const dcp_gguf *g, const dcp_model_config *cfg, dcp_test_ref_model *rm,
                        uint32_t tp, const char *label, int32_t *ids)
{
    const uint32_t V = cfg->n_vocab;
    dcp_device *devs[8];
    assert_true(tp <= 8);
    for (uint32_t r = 0; r < tp; r++) devs[r] = dcp_context_device(ctx, (int)r);
    dcp_model *w;
    DCP_ASSERT_OK(dcp_test_model_load(devs, 0, tp, tp, 1, false, g, cfg, &w));
    const dcp_model_fallback *fb = dcp_model_fallbacks(w);
    if (fb->count)
        fail_msg("%s TP %u: %u matrices held as F32 (%llu bytes instead of %llu); first: %s", label, tp, fb->count,
                 (unsigned long long)fb->f32_bytes, (unsigned long long)fb->native_bytes, fb->first);
    uint64_t ranks = 0;
    for (uint32_t r = 0; r < tp; r++) ranks += dcp_model_rank_bytes(w, r);
    const uint64_t want = quantized_bytes(g, cfg, tp);
    if (dcp_model_bytes(w) != want || ranks != want)
        fail_msg("%s TP %u: weights take %llu device bytes (ranks %llu), the file's types %llu", label, tp,
                 (unsigned long long)dcp_model_bytes(w), (unsigned long long)ranks, (unsigned long long)want);
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.n_ctx = N_CTX;
    sc.max_rows = 8;
    sc.block_size = 4;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(w, &sc, &s));
    dcp_test_ref_model_reset(rm);
    float *logits = malloc(V * sizeof(float)), *ref = malloc(V * sizeof(float));
    assert_true(logits && ref);
    static const int32_t prompt[PREFILL] = {1, 300, 412, 77, 530, 95};
    for (uint32_t t = 0; t < PREFILL; t++) dcp_ref_llama_step(&rm->ref, prompt[t], t, ref);
    int32_t next = -1;
    DCP_ASSERT_OK(dcp_model_state_forward(s, prompt, PREFILL, logits, &next));
    double worst = max_abs_diff(logits, ref, V);
    if (!(worst <= LOGITS_TOL)) fail_msg("%s TP %u prefill: logits error %g", label, tp, worst);
    for (uint32_t step = 0; step < STEPS; step++) {
        assert_int_equal(next, (int32_t)dcp_ref_argmax(V, ref));
        ids[step] = next;
        int32_t tok = next;
        DCP_ASSERT_OK(dcp_model_state_forward(s, &tok, 1, logits, &next));
        dcp_ref_llama_step(&rm->ref, tok, PREFILL + step, ref);
        double err = max_abs_diff(logits, ref, V);
        if (err > worst) worst = err;
        if (!(err <= LOGITS_TOL))
            fail_msg("%s TP %u step %u: logits error %g > %g", label, tp, step, err, LOGITS_TOL);
    }
    printf("%-6s TP %u: weights %.2f MiB in the file's types, nothing as F32 (%u rank slices cut their blocks); "
           "logits within %.3g of the reference\n",
           label, tp, dcp_model_bytes(w) / 1048576.0, cut_slices(g, cfg, tp), worst);
    dcp_model_state_destroy(s);
    dcp_model_destroy(w);
    free(logits);
    free(ref);
    return worst;
}

static void expect_type(const dcp_gguf *g, const char *name, dcp_ggml_type type)
{
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, name);
    assert_non_null(t);
    if (t->type != type) fail_msg("%s is %s, want %s", name, dcp_ggml_type_name(t->type), dcp_ggml_type_name(type));
}

/* The generated model mc quantized as Q4_K_M by the repository's quantizer into
 * dir/dcp-vk-test-<name>-q4_k_m.gguf (its path into q_path, the F32 file removed), opened. */
static dcp_gguf *q4_k_m_model(const dcp_test_model_config *mc, const char *name, char q_path[1024])
{
    char f32_path[1024];
    snprintf(f32_path, sizeof f32_path, "%s/dcp-vk-test-%s-f32.gguf", dir, name);
    snprintf(q_path, 1024, "%s/dcp-vk-test-%s-q4_k_m.gguf", dir, name);
    DCP_ASSERT_OK(dcp_gguf_make_test_model(f32_path, mc));
    dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
    qc.ftype = DCP_FTYPE_Q4_K_M;
    DCP_ASSERT_OK(dcp_gguf_quantize(f32_path, q_path, &qc, NULL, NULL));
    remove(f32_path);
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open(q_path, &g));
    return g;
}

/* run_model at each of the three TPs against the dequantized reference of g; the greedy ids the
 * same at every TP. */
static void run_tps(dcp_context *ctx, const dcp_gguf *g, const dcp_model_config *cfg, const uint32_t tps[3],
                    const char *label)
{
    dcp_test_ref_model rm;
    dcp_test_ref_model_load(&rm, g, cfg, N_CTX);
    int32_t ids[3][STEPS];
    for (int i = 0; i < 3; i++) run_model(ctx, g, cfg, &rm, tps[i], label, ids[i]);
    for (int s = 0; s < STEPS; s++)
        if (ids[0][s] != ids[1][s] || ids[0][s] != ids[2][s])
            fail_msg("%s: greedy id %d: %d at TP %u, %d at TP %u, %d at TP %u", label, s, ids[0][s], tps[0], ids[1][s],
                     tps[1], ids[2][s], tps[2]);
    dcp_test_ref_model_free(&rm);
}

static void test_q4_k_m_models(void **state)
{
    (void)state;
    static const char *archs[] = {"llama", "qwen2", "qwen3"};
    dcp_context *ctx = dcp_test_context_of(4);
    for (size_t a = 0; a < sizeof archs / sizeof archs[0]; a++) {
        /* Every row length a whole number of 256-weight blocks on every rank at TP 1, 2, 4:
         * E 256, Q 16 x 64 = 1024 (attn_output's columns 256 a rank at TP 4), FFN 1024. */
        dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
        mc.arch = archs[a];
        mc.n_layer = 8;
        mc.n_head = 16;
        mc.n_head_kv = 4;
        mc.head_dim = 64;
        mc.n_ff = 1024;
        mc.seed = 1800 + a;
        char name[32], q_path[1024];
        snprintf(name, sizeof name, "mixed-%s", archs[a]);
        dcp_gguf *g = q4_k_m_model(&mc, name, q_path);
        /* The mix: attn_v in Q6_K on the more-bits layers (0, 3, 6, 7 of 8), else Q4_K like attn_q. */
        expect_type(g, "blk.0.attn_q.weight", DCP_GGML_TYPE_Q4_K);
        expect_type(g, "blk.0.attn_k.weight", DCP_GGML_TYPE_Q4_K);
        expect_type(g, "blk.0.attn_v.weight", DCP_GGML_TYPE_Q6_K);
        expect_type(g, "blk.1.attn_v.weight", DCP_GGML_TYPE_Q4_K);
        expect_type(g, "blk.3.attn_v.weight", DCP_GGML_TYPE_Q6_K);
        dcp_model_config cfg;
        DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
        static const uint32_t tps[3] = {1, 2, 4};
        run_tps(ctx, g, &cfg, tps, archs[a]);
        dcp_gguf_close(g);
        remove(q_path);
    }
    dcp_test_context_done(ctx);
}

/* Row-parallel slices that cut their blocks (issue 18 section 4, "quantized files stay
 * quantized"): a Q4_K_M llama (Q4_K, with Q6_K attn_v and ffn_down on the more-bits layers) of
 * E 256, Q 16 x 64 = 1024 and FFN 1280 at TP 1, 2 and 8 over 8 logical devices. At TP 8
 * attn_output's 128 columns a rank and ffn_down's 160 cut the 256-weight blocks on every rank, and
 * at TP 2 ffn_down's 640: each rank holds the whole blocks covering its columns in the file's
 * type, read through a column window. Nothing as F32, the device bytes those blocks' (every
 * rank), logits within LOGITS_TOL of the dequantized reference, the same greedy ids at every TP. */
static void test_q4_k_m_cut_blocks(void **state)
{
    (void)state;
    dcp_context *ctx = dcp_test_context_of(8);
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.arch = "llama";
    mc.n_layer = 8;
    mc.n_head = 16;
    mc.n_head_kv = 8;
    mc.head_dim = 64;
    mc.n_ff = 1280;
    mc.seed = 1850;
    char q_path[1024];
    dcp_gguf *g = q4_k_m_model(&mc, "cut", q_path);
    expect_type(g, "blk.1.attn_output.weight", DCP_GGML_TYPE_Q4_K);
    expect_type(g, "blk.1.ffn_down.weight", DCP_GGML_TYPE_Q4_K);
    expect_type(g, "blk.0.ffn_down.weight", DCP_GGML_TYPE_Q6_K);
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    /* The shapes do cut: every rank at TP 8 (both matrices of 16 layers' worth: 8 x 2 x 8 slices),
     * ffn_down at TP 2 (8 x 2), nothing at TP 1. */
    assert_int_equal(cut_slices(g, &cfg, 1), 0);
    assert_int_equal(cut_slices(g, &cfg, 2), 8 * 2);
    assert_int_equal(cut_slices(g, &cfg, 8), 8 * 2 * 8);
    static const uint32_t tps[3] = {1, 2, 8};
    run_tps(ctx, g, &cfg, tps, "cut");
    dcp_gguf_close(g);
    remove(q_path);
    dcp_test_context_done(ctx);
}

/* Gate and up of different types: a generated llama whose ffn_up is Q8_0 beside Q4_K ffn_gate
 * (E 256, FFN 512) at TP 1, 2 and 4: each rank's gate|up is a matrix of two parts, multiplied into
 * the state's gu and then swiglu (the fused SwiGLU needs one part): the same checks as above. The
 * states of the other tests (one-part gate|up) hold no gu (llama's rank_needs_gu). */
static void test_gate_up_types(void **state)
{
    (void)state;
    dcp_context *ctx = dcp_test_context_of(4);
    char path[1024];
    snprintf(path, sizeof path, "%s/dcp-vk-test-gate-up-types.gguf", dir);
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.n_ff = 512;
    mc.weight_type = DCP_GGML_TYPE_Q4_K;
    mc.ffn_up_own_type = 1;
    mc.ffn_up_type = DCP_GGML_TYPE_Q8_0;
    mc.seed = 1870;
    DCP_ASSERT_OK(dcp_gguf_make_test_model(path, &mc));
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open(path, &g));
    expect_type(g, "blk.0.ffn_gate.weight", DCP_GGML_TYPE_Q4_K);
    expect_type(g, "blk.0.ffn_up.weight", DCP_GGML_TYPE_Q8_0);
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    static const uint32_t tps[3] = {1, 2, 4};
    run_tps(ctx, g, &cfg, tps, "gate|up");
    dcp_gguf_close(g);
    remove(path);
    dcp_test_context_done(ctx);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SCRATCH-DIR\n", argv[0]);
        return 2;
    }
    dir = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul_of_parts),
        cmocka_unit_test(test_q4_k_m_models),
        cmocka_unit_test(test_q4_k_m_cut_blocks),
        cmocka_unit_test(test_gate_up_types),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
