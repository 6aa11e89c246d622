/* The deepseek2 architecture through the model API (dcp_model_load, dcp_model_state_*): the
 * project's test models A (DeepSeek-V2-Lite layout), B (every feature: q_lora, YaRN with an
 * original context of 32 that the positions cross, sigmoid gating with selection bias, groups,
 * normalised and scaled weights) and C (A in the legacy attn_kv_b layout):
 *  - logits of A, B, C against the double-precision NON-absorbed oracle within 1e-4 (f32 latent
 *    cache) at every position of "Once upon a time" and 40 greedy tokens; A and C bitwise equal;
 *  - negative controls: the same check against an oracle with NEOX RoPE, with the scale
 *    1/sqrt(kv_lora + rope), and with shards merged by base-2 LSEs fails;
 *  - greedy tokens (64 from the prompt, past YaRN's original context) identical for (TP, DCP) in
 *    {(1,1), (2,2), (4,2), (4,4)} x {a2a, ag_rs} x interleave {1, block size} x q_replicate on/off;
 *    short prompts leave shards empty at the start;
 *  - several sequences in one state: bitwise the same as alone (TP 4 / DCP 4);
 *  - B and C quantized as Q2_K (IQ4_NL fallbacks) against the oracle, TP 4 / DCP 2 = TP 1; what
 *    is held as F32 counted (B nothing, C the k_b transposed out of its IQ4_NL attn_kv_b);
 *  - A reshaped and quantized as Q4_0 so that TP 4's column slices cut the blocks: windows, not F32. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "testmodel/testmodel.h"
#include "ref_deepseek2.h"
#include "ref_model.h"
#include "vkutil.h"

enum { GEN_ORACLE = 40, GEN_CONFIG = 64, BLOCK = 16 };

static char path_a[512], path_b[512], path_c[512];

static int group_setup(void **state)
{
    (void)state;
    dcp_test_ds2_make(dcp_test_ds2_tmp("model-A.gguf", path_a, sizeof path_a), 'A', 0);
    dcp_test_ds2_make(dcp_test_ds2_tmp("model-B.gguf", path_b, sizeof path_b), 'B', 0);
    dcp_test_ds2_make(dcp_test_ds2_tmp("model-C.gguf", path_c, sizeof path_c), 'C', 0);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    remove(path_a);
    remove(path_b);
    remove(path_c);
    return 0;
}

/* The prompt's token ids (malloc'd). */
static int32_t *prompt_ids(const dcp_gguf *g, size_t *n)
{
    dcp_tokenizer *tok;
    DCP_ASSERT_OK(dcp_tokenizer_create(g, &tok));
    int32_t *ids;
    DCP_ASSERT_OK(dcp_tokenizer_encode(tok, "Once upon a time", 16, DCP_TOKENIZE_ADD_BOS, &ids, n));
    dcp_tokenizer_destroy(tok);
    return ids;
}

typedef struct par {
    uint32_t tp, dcp, interleave;
    dcp_cp_backend backend;
    bool q_replicate;
} par;

/* A model and a run state of it over tp logical devices (f32 latent cache). */
typedef struct loaded {
    dcp_context *ctx;
    dcp_gguf *g;
    dcp_model_config cfg;
    dcp_model *m;
    dcp_model_state *s;
} loaded;

static void load(loaded *L, const char *path, const par *p, uint32_t max_seqs)
{
    L->ctx = dcp_test_context_of(p->tp);
    DCP_ASSERT_OK(dcp_gguf_open(path, &L->g));
    DCP_ASSERT_OK(dcp_model_config_read(L->g, &L->cfg));
    dcp_device *devs[8];
    for (uint32_t r = 0; r < p->tp; r++) devs[r] = dcp_context_device(L->ctx, (int)r);
    DCP_ASSERT_OK(dcp_test_model_load(devs, 0, p->tp, p->tp, p->dcp, p->q_replicate, L->g, &L->cfg, &L->m));
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 96;
    sc.max_rows = 8;
    sc.max_seqs = max_seqs;
    sc.block_size = BLOCK;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.interleave = p->interleave;
    sc.backend = p->backend;
    DCP_ASSERT_OK(dcp_model_state_create(L->m, &sc, &L->s));
}

static void unload(loaded *L)
{
    dcp_model_state_destroy(L->s);
    dcp_model_destroy(L->m);
    dcp_gguf_close(L->g);
    dcp_test_context_done(L->ctx);
}

/* Prompt then `gen` greedy tokens; every position's logits into *all ([positions][V]) if not NULL,
 * the generated ids into ids. Returns the positions run. */
static uint32_t generate(loaded *L, uint32_t gen, float **all, int32_t *ids)
{
    size_t n_prompt;
    int32_t *prompt = prompt_ids(L->g, &n_prompt);
    const uint32_t V = L->cfg.n_vocab, total = (uint32_t)n_prompt + gen;
    if (all) *all = malloc((size_t)total * V * sizeof **all);
    int32_t next = -1;
    for (uint32_t pos = 0; pos < total; pos++) {
        int32_t tok = pos < n_prompt ? prompt[pos] : next;
        DCP_ASSERT_OK(dcp_model_state_forward(L->s, &tok, 1, all ? *all + (size_t)pos * V : NULL, &next));
        if (pos + 1 >= n_prompt) ids[pos + 1 - n_prompt] = next;
    }
    free(prompt);
    return total;
}

/* Largest |logit - oracle| over the positions, the oracle stepping the same tokens. */
static double oracle_error(const char *path, const float *logits, uint32_t total, const int32_t *ids, int neox,
                           double scale, uint32_t base2_shards)
{
    dcp_test_ds2 m;
    dcp_test_ds2_load(&m, path, 0, 128);
    m.ref.control_neox = neox;
    m.ref.control_scale = scale;
    m.ref.control_base2_shards = base2_shards;
    size_t n_prompt;
    int32_t *prompt = prompt_ids(m.g, &n_prompt);
    const uint32_t V = m.cfg.n_vocab;
    double *ref = malloc(V * sizeof *ref), worst = 0.0;
    for (uint32_t pos = 0; pos < total; pos++) {
        int32_t tok = pos < n_prompt ? prompt[pos] : ids[pos - n_prompt];
        dcp_ref_ds2_step(&m.ref, tok, pos, ref);
        for (uint32_t v = 0; v < V; v++) worst = fmax(worst, fabs(logits[(size_t)pos * V + v] - ref[v]));
    }
    free(ref);
    free(prompt);
    dcp_test_ds2_free(&m);
    return worst;
}

static void test_oracle(void **state)
{
    (void)state;
    const par one = {1, 1, 1, DCP_CP_A2A, false};
    const char *paths[3] = {path_a, path_b, path_c};
    float *logits[3];
    int32_t ids[3][GEN_ORACLE + 1];
    uint32_t total[3];
    for (int k = 0; k < 3; k++) {
        loaded L;
        load(&L, paths[k], &one, 1);
        total[k] = generate(&L, GEN_ORACLE, &logits[k], ids[k]);
        unload(&L);
        double err = oracle_error(paths[k], logits[k], total[k], ids[k], 0, 0.0, 0);
        printf("model %c: %u positions, max |logit - non-absorbed oracle| = %.3g\n", 'A' + k, total[k], err);
        if (!(err <= 1e-4)) fail_msg("model %c: logits differ from the oracle by %.3g > 1e-4", 'A' + k, err);
    }
    assert_int_equal(total[0], total[2]);
    if (memcmp(logits[0], logits[2], (size_t)total[0] * 576 * sizeof(float)) != 0)
        fail_msg("models A and C (the same weights in two layouts) give different logits");
    /* Negative controls: each deliberate error in the oracle is seen (B exercises YaRN). */
    dcp_test_ds2 mb;
    dcp_test_ds2_load(&mb, path_b, 0, 8);
    const double wrong_scale = 1.0 / sqrt((double)mb.cfg.kv_lora_rank + mb.cfg.n_rot);
    dcp_test_ds2_free(&mb);
    double e_neox = oracle_error(path_b, logits[1], total[1], ids[1], 1, 0.0, 0);
    double e_scale = oracle_error(path_b, logits[1], total[1], ids[1], 0, wrong_scale, 0);
    double e_base2 = oracle_error(path_b, logits[1], total[1], ids[1], 0, 0.0, 2);
    printf("negative controls against model B: NEOX RoPE %.3g, scale 1/sqrt(kv_lora + rope) %.3g, base-2 LSE "
           "merge %.3g (all must exceed 1e-4)\n", e_neox, e_scale, e_base2);
    assert_true(e_neox > 1e-4);
    assert_true(e_scale > 1e-4);
    assert_true(e_base2 > 1e-4);
    for (int k = 0; k < 3; k++) free(logits[k]);
}

/* Every (TP, DCP) layout, backend, interleave and Q mode gives TP 1's greedy tokens. */
static void test_layouts(void **state)
{
    (void)state;
    int32_t want[GEN_CONFIG + 1], got[GEN_CONFIG + 1];
    loaded L;
    const par one = {1, 1, 1, DCP_CP_A2A, false};
    load(&L, path_b, &one, 1);
    generate(&L, GEN_CONFIG, NULL, want);
    unload(&L);
    static const uint32_t sizes[3][2] = {{2, 2}, {4, 2}, {4, 4}};
    uint32_t runs = 0;
    for (int z = 0; z < 3; z++)
        for (int b = 0; b < 2; b++)
            for (int i = 0; i < 2; i++)
                for (int q = 0; q < 2; q++) {
                    par p = {sizes[z][0], sizes[z][1], i ? BLOCK : 1, b ? DCP_CP_AG_RS : DCP_CP_A2A, q != 0};
                    load(&L, path_b, &p, 1);
                    generate(&L, GEN_CONFIG, NULL, got);
                    uint64_t xbytes = dcp_model_state_exchange_bytes(L.s), toks = dcp_model_state_tokens_run(L.s);
                    unload(&L);
                    for (int t = 0; t <= GEN_CONFIG; t++)
                        if (got[t] != want[t])
                            fail_msg("TP %u DCP %u %s interleave %u%s: token %d is %d, TP 1 gives %d", p.tp, p.dcp,
                                     dcp_cp_backend_name(p.backend), p.interleave, p.q_replicate ? " q_replicate" : "",
                                     t, got[t], want[t]);
                    printf("TP %u DCP %u %-5s interleave %2u%s: %d greedy tokens = TP 1; %.0f bytes per token sent by "
                           "rank 0\n", p.tp, p.dcp, dcp_cp_backend_name(p.backend), p.interleave,
                           p.q_replicate ? " q_replicate" : "            ", GEN_CONFIG + 1, (double)xbytes / toks);
                    /* Per layer and token, rank 0 sends two all-reduces of (TP - 1) n_embd values and,
                     * for a2a, (N - 1) Hl (kv_lora + 1) values (plus the Q gather's (N - 1) Hl
                     * (kv_lora + rope) without q_replicate): the formula. */
                    if (p.backend == DCP_CP_A2A) {
                        const uint64_t E = 64, R = 32, P = 16, layers = 2, hl = 4 / p.tp;
                        uint64_t per_layer = 2 * (p.tp - 1) * E + (p.dcp - 1) * hl * (R + 1) +
                                             (p.q_replicate ? 0 : (p.dcp - 1) * hl * (R + P));
                        assert_int_equal(xbytes, toks * layers * per_layer * 4);
                    }
                    runs++;
                }
    assert_int_equal(runs, 24);
}

/* Three sequences of different lengths in one state at TP 4 / DCP 4: each one's tokens and
 * logits bitwise the same as alone. */
static void test_batch(void **state)
{
    (void)state;
    const par p = {4, 4, 1, DCP_CP_A2A, false};
    loaded L;
    load(&L, path_b, &p, 3);
    const uint32_t V = L.cfg.n_vocab, S = 3, G = 12;
    size_t n_prompt;
    int32_t *prompt = prompt_ids(L.g, &n_prompt);
    float *alone = malloc((size_t)S * G * V * sizeof(float)), *together = malloc((size_t)S * G * V * sizeof(float));
    float *lg = malloc((size_t)S * V * sizeof(float));
    int32_t next[3];
    /* alone: sequence q has the prompt's first 1 + q tokens */
    for (uint32_t q = 0; q < S; q++) {
        uint32_t np = 1 + q;
        dcp_model_row rows[8];
        for (uint32_t t = 0; t < np; t++) rows[t] = (dcp_model_row){prompt[t], q, t + 1 == np};
        DCP_ASSERT_OK(dcp_model_state_step(L.s, rows, np, alone + ((size_t)q * G) * V, next));
        for (uint32_t g = 1; g < G; g++) {
            dcp_model_row r = {next[0], q, true};
            DCP_ASSERT_OK(dcp_model_state_step(L.s, &r, 1, alone + ((size_t)q * G + g) * V, next));
        }
        dcp_model_state_free_seq(L.s, q);
    }
    /* together: all prompts in the first step, then one decode row each, in rotating order */
    dcp_model_row rows[8];
    uint32_t n = 0;
    for (uint32_t q = S; q-- > 0;)
        for (uint32_t t = 0; t < 1 + q; t++) rows[n++] = (dcp_model_row){prompt[t], q, t == q};
    DCP_ASSERT_OK(dcp_model_state_step(L.s, rows, n, lg, next));
    int32_t last[3];
    for (uint32_t k = 0; k < S; k++) {
        uint32_t q = S - 1 - k;
        memcpy(together + ((size_t)q * G) * V, lg + (size_t)k * V, V * sizeof(float));
        last[q] = next[k];
    }
    for (uint32_t g = 1; g < G; g++) {
        for (uint32_t k = 0; k < S; k++) {
            uint32_t q = (k + g) % S;
            rows[k] = (dcp_model_row){last[q], q, true};
        }
        DCP_ASSERT_OK(dcp_model_state_step(L.s, rows, S, lg, next));
        for (uint32_t k = 0; k < S; k++) {
            uint32_t q = (k + g) % S;
            memcpy(together + ((size_t)q * G + g) * V, lg + (size_t)k * V, V * sizeof(float));
            last[q] = next[k];
        }
    }
    if (memcmp(alone, together, (size_t)S * G * V * sizeof(float)) != 0)
        fail_msg("TP 4 / DCP 4: a sequence's logits differ between alone and batched");
    printf("TP 4 DCP 4: %u sequences x %u steps, logits bitwise the same alone and batched\n", S, G);
    free(prompt);
    free(alone);
    free(together);
    free(lg);
    unload(&L);
}

/* src quantized as ftype by the repository's quantizer into the scratch file `name` (its path into
 * out, 512 bytes), opened. */
static dcp_gguf *quantize(const char *src, dcp_ftype ftype, const char *name, char *out)
{
    dcp_test_ds2_tmp(name, out, 512);
    dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
    qc.ftype = ftype;
    DCP_ASSERT_OK(dcp_gguf_quantize(src, out, &qc, NULL, NULL));
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open(out, &g));
    return g;
}

/* The quantized file at path at TP 1 and at `wide`: both layouts' logits within 1e-4 of the
 * oracle built from the same dequantized weights, and `wide` gives TP 1's greedy tokens; the test
 * fails naming `what`. Unless fb is NULL, each load's dcp_model_fallbacks into fb[0] (TP 1) and
 * fb[1] (wide). Returns the positions run and the oracle errors in err[0] (TP 1), err[1] (wide). */
static uint32_t tp1_and_wide(const char *path, const par *wide, const char *what, double err[2],
                             dcp_model_fallback fb[2])
{
    const par one = {1, 1, 1, DCP_CP_A2A, false};
    int32_t ids[GEN_ORACLE + 1], ids_wide[GEN_ORACLE + 1];
    float *logits;
    loaded L;
    load(&L, path, &one, 1);
    if (fb) fb[0] = *dcp_model_fallbacks(L.m);
    uint32_t total = generate(&L, GEN_ORACLE, &logits, ids);
    unload(&L);
    err[0] = oracle_error(path, logits, total, ids, 0, 0.0, 0);
    if (!(err[0] <= 1e-4)) fail_msg("%s: logits differ from the oracle by %.3g > 1e-4", what, err[0]);
    free(logits);
    load(&L, path, wide, 1);
    if (fb) fb[1] = *dcp_model_fallbacks(L.m);
    uint32_t total_wide = generate(&L, GEN_ORACLE, &logits, ids_wide);
    unload(&L);
    assert_int_equal(total_wide, total);
    err[1] = oracle_error(path, logits, total, ids_wide, 0, 0.0, 0);
    if (!(err[1] <= 1e-4))
        fail_msg("%s: TP %u / DCP %u logits differ from the oracle by %.3g > 1e-4", what, wide->tp, wide->dcp, err[1]);
    if (memcmp(ids, ids_wide, sizeof ids) != 0)
        fail_msg("%s: TP %u / DCP %u tokens differ from TP 1", what, wide->tp, wide->dcp);
    free(logits);
    return total;
}

/* Models B and C quantized as llama-quantize's Q2_K: their rows of 32 to 64 are not whole blocks
 * of 256, so nearly every matrix falls back to IQ4_NL (the experts' down projections, rows of 56,
 * to F16): the file loads, its logits match the oracle built from the same dequantized weights,
 * and TP 4 / DCP 2 gives TP 1's greedy tokens (head_matmul, the expert matmuls and get_rows in
 * IQ4_NL). */
static void test_iq4_nl_fallback(void **state)
{
    (void)state;
    const char *src[2] = {path_b, path_c};
    for (int k = 0; k < 2; k++) {
        char out[512], what[32];
        dcp_gguf *g = quantize(src[k], DCP_FTYPE_Q2_K, k ? "model-C-q2_k.gguf" : "model-B-q2_k.gguf", out);
        static const char *const iq4[] = {"token_embd.weight", "blk.1.ffn_gate_exps.weight", "blk.1.ffn_up_shexp.weight"};
        for (size_t i = 0; i < sizeof iq4 / sizeof iq4[0]; i++)
            assert_int_equal(dcp_gguf_tensor_find(g, iq4[i])->type, DCP_GGML_TYPE_IQ4_NL);
        const dcp_gguf_tensor *vb = dcp_gguf_tensor_find(g, k ? "blk.0.attn_kv_b.weight" : "blk.0.attn_v_b.weight");
        assert_int_equal(vb->type, DCP_GGML_TYPE_IQ4_NL);
        dcp_gguf_close(g);
        const par four = {4, 2, 1, DCP_CP_A2A, false};
        snprintf(what, sizeof what, "model %c as Q2_K", 'B' + k);
        double err[2];
        dcp_model_fallback fbs[2];
        uint32_t total = tp1_and_wide(out, &four, what, err, fbs);
        printf("model %c as Q2_K (IQ4_NL fallback): %u positions, max |logit - oracle| = %.3g (TP 1), %.3g (TP 4 / DCP 2)\n",
               'B' + k, total, err[0], err[1]);
        for (int w = 0; w < 2; w++)
            printf("  %s: %u matrices as F32 (%.1f KiB, %.1f KiB in their type)%s%s\n", w ? "TP 4" : "TP 1", fbs[w].count,
                   fbs[w].f32_bytes / 1024.0, fbs[w].native_bytes / 1024.0, fbs[w].count ? "; first: " : "",
                   fbs[w].first);
        /* B keeps every matrix in its type; C's legacy attn_kv_b gives k_b as its transpose, which
         * runs across IQ4_NL's blocks: F32, one per layer and rank, and counted. */
        if (k == 0) {
            assert_int_equal(fbs[0].count, 0);
            assert_int_equal(fbs[1].count, 0);
        } else {
            assert_true(fbs[0].count >= 1);
            assert_non_null(strstr(fbs[0].first, "attn_kv_b.weight (IQ4_NL): k_b is its transpose"));
            assert_int_equal(fbs[1].count, 4 * fbs[0].count);
            assert_true(fbs[0].native_bytes > 0 && fbs[0].native_bytes < fbs[0].f32_bytes);
        }
        remove(out);
    }
}

/* Model A reshaped so that the row-parallel matrices' rows are whole 32-weight blocks (V 24: attn_output
 * 96 columns; dense FFN 96; experts 64) and quantized as Q4_0: at TP 4 every rank's columns (24, 24,
 * 16) cut the blocks. attn_output, the dense and shared-expert ffn_down and the routed experts'
 * ffn_down_exps stay Q4_0 as the covering blocks with a column window (dcp_op_matmul's and the MoE
 * kernels'): nothing is held as F32 (a matrix expanded would be counted; without the experts'
 * window the 4 ranks' ffn_down_exps were). The logits match the oracle built from the same
 * dequantized weights at TP 1 and at TP 4, and TP 4 gives TP 1's greedy tokens. */
static void test_cut_blocks_window(void **state)
{
    (void)state;
    char src[512], out[512];
    dcp_test_deepseek2_config c;
    DCP_ASSERT_OK(dcp_test_deepseek2_preset('A', &c));
    c.head_dim_v = 24;
    c.n_ff = 96;
    c.n_ff_exp = 64;
    DCP_ASSERT_OK(dcp_gguf_make_test_model_deepseek2(dcp_test_ds2_tmp("model-A-cut.gguf", src, sizeof src), &c));
    dcp_gguf *g = quantize(src, DCP_FTYPE_Q4_0, "model-A-cut-q4_0.gguf", out);
    static const char *const cut[] = {"blk.0.attn_output.weight", "blk.0.ffn_down.weight", "blk.1.ffn_down_exps.weight",
                                      "blk.1.ffn_down_shexp.weight"};
    for (size_t i = 0; i < sizeof cut / sizeof cut[0]; i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, cut[i]);
        assert_non_null(t);
        if (t->type != DCP_GGML_TYPE_Q4_0)
            fail_msg("%s is %s, not Q4_0: the test does not cut blocks", cut[i], dcp_ggml_type_name(t->type));
    }
    dcp_gguf_close(g);
    const par four = {4, 1, 1, DCP_CP_A2A, false};
    double err[2];
    dcp_model_fallback fbs[2];
    tp1_and_wide(out, &four, "model A cut as Q4_0", err, fbs);
    assert_int_equal(fbs[0].count, 0);
    const dcp_model_fallback *fb = &fbs[1];
    if (fb->count != 0)
        fail_msg("TP 4: %u matrices as F32 (%.1f KiB instead of %.1f KiB; first: %s), expected none", fb->count,
                 fb->f32_bytes / 1024.0, fb->native_bytes / 1024.0, fb->first);
    printf("model A cut as Q4_0: max |logit - oracle| = %.3g at TP 1, %.3g at TP 4; TP 4 holds no matrix as F32\n",
           err[0], err[1]);
    remove(out);
    remove(src);
}

int main(int argc, char **argv)
{
    if (argc > 1) cmocka_set_test_filter(argv[1]); /* one test by name (the GPU-assisted run) */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle),
        cmocka_unit_test(test_layouts),
        cmocka_unit_test(test_batch),
        cmocka_unit_test(test_iq4_nl_fallback),
        cmocka_unit_test(test_cut_blocks_window),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
