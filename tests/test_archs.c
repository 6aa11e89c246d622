/* The llama-family architectures on generated models (src/testmodel/testmodel.c): llama with
 * Llama 3.x rope_freqs and linear / YaRN scaling, Mistral's sliding window, qwen2 (Q/K/V biases;
 * also with the output head tied to the embedding), qwen3 (per-head Q/K RMSNorm), phi3 (fused
 * attn_qkv and gate|up). Each model runs at TP 1 / DCP 1 and at TP 8 / DCP 2 (a2a and ag_rs) on
 * eight logical devices: a 6-token prefill then greedy decode, every step's logits within 1e-4 of
 * the double-precision reference (src/ref/model_ref.c, built from the file's tensors by
 * tests/ref_model.c: fused tensors split on the host, RoPE from the keys) and the same greedy ids
 * in every layout. Unknown architectures are refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/model_config.h"
#include "ref/model_ref.h"
#include "testmodel/testmodel.h"
#include "ref_model.h"
#include "vkutil.h"

#define LOGITS_TOL 1e-4
enum { PREFILL = 6, STEPS = 14, N_CTX = 32 };

typedef struct arch_case {
    const char *label, *arch;
    int rope_freqs;
    const char *scaling;
    float scale;
    uint32_t window;
    int tied;
} arch_case;

static const arch_case cases[] = {
    {"llama rope_freqs", "llama", 1, NULL, 0.0f, 0, 0},
    {"llama rope_freqs + linear x4", "llama", 1, "linear", 4.0f, 0, 0},
    {"llama yarn x8", "llama", 0, "yarn", 8.0f, 0, 0},
    {"mistral (sliding window 32)", "llama", 0, NULL, 0.0f, N_CTX, 0},
    {"qwen2", "qwen2", 0, NULL, 0.0f, 0, 0},
    {"qwen2 tied output (Qwen2.5-0.5B)", "qwen2", 0, NULL, 0.0f, 0, 1},
    {"qwen3", "qwen3", 0, NULL, 0.0f, 0, 0},
    {"phi3", "phi3", 0, NULL, 0.0f, 0, 0},
};

static dcp_test_model_config model_of(const arch_case *c, uint64_t seed)
{
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.arch = c->arch;
    mc.n_embd = 64;
    mc.n_layer = 2;
    mc.n_head = 8;
    mc.n_head_kv = 4;
    mc.head_dim = 16;
    mc.n_ff = 96; /* TP 8: 12 rows of gate and of up per rank (phi3: cut out of one ffn_up) */
    mc.n_ctx = 4096;
    mc.rope_base = 10000.0f;
    mc.seed = seed;
    mc.rope_freqs = c->rope_freqs;
    mc.rope_scaling = c->scaling;
    mc.rope_scale = c->scale;
    mc.sliding_window = c->window;
    mc.tie_output = c->tied;
    return mc;
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

/* Prefill of PREFILL prompt ids, then STEPS greedy steps at (tp, dcp) a2a; the ids go to ids
 * [STEPS]; returns the worst logits error against the reference. */
static double run_case(dcp_context *ctx, const dcp_gguf *g, const dcp_model_config *cfg, dcp_test_ref_model *rm,
                       uint32_t tp, uint32_t dcp, dcp_cp_backend backend, const char *label, int32_t *ids)
{
    const uint32_t V = cfg->n_vocab;
    dcp_device *devs[8];
    for (uint32_t r = 0; r < tp; r++) devs[r] = dcp_context_device(ctx, (int)r);
    dcp_model *w;
    DCP_ASSERT_OK(dcp_test_model_load(devs, 0, tp, tp, dcp, false, g, cfg, &w));
    dcp_model_state_config lc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    lc.kv_dtype = DCP_DTYPE_F32;
    lc.n_ctx = N_CTX;
    lc.max_rows = 8;
    lc.block_size = 4;
    lc.backend = backend;
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(w, &lc, &s));
    dcp_test_ref_model_reset(rm);
    float *logits = malloc(V * sizeof(float)), *want = malloc(V * sizeof(float));
    assert_true(logits && want);
    static const int32_t prompt[PREFILL] = {1, 300, 412, 77, 530, 95};
    for (uint32_t t = 0; t < PREFILL; t++) dcp_ref_llama_step(&rm->ref, prompt[t], t, want);
    int32_t next = -1;
    DCP_ASSERT_OK(dcp_model_state_forward(s, prompt, PREFILL, logits, &next));
    double worst = max_abs_diff(logits, want, V);
    if (!(worst <= LOGITS_TOL)) fail_msg("%s TP %u DCP %u prefill: logits error %g", label, tp, dcp, worst);
    for (uint32_t step = 0; step < STEPS; step++) {
        assert_int_equal(next, (int32_t)dcp_ref_argmax(V, want));
        ids[step] = next;
        int32_t tok = next;
        DCP_ASSERT_OK(dcp_model_state_forward(s, &tok, 1, logits, &next));
        dcp_ref_llama_step(&rm->ref, tok, PREFILL + step, want);
        double err = max_abs_diff(logits, want, V);
        if (err > worst) worst = err;
        if (!(err <= LOGITS_TOL))
            fail_msg("%s TP %u DCP %u step %u: logits error %g > %g", label, tp, dcp, step, err, LOGITS_TOL);
    }
    if (dcp > 1) assert_true(dcp_model_state_exchange_bytes(s) > 0);
    dcp_model_state_destroy(s);
    dcp_model_destroy(w);
    free(logits);
    free(want);
    return worst;
}

static void test_architectures(void **state)
{
    (void)state;
    dcp_context *ctx1 = dcp_test_context_of(1), *ctx8 = dcp_test_context_of(8);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        dcp_test_model_config mc = model_of(&cases[c], 900 + c);
        dcp_gguf *g;
        DCP_ASSERT_OK(dcp_gguf_open_test_model(&mc, &g));
        dcp_model_config cfg;
        DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
        assert_string_equal(cfg.arch_name, cases[c].arch);
        assert_int_equal(cfg.rope_neox, strcmp(cases[c].arch, "llama") != 0);
        assert_int_equal(cfg.sliding_window, cases[c].window);
        assert_int_equal(dcp_gguf_tensor_find(g, "output.weight") == NULL, cases[c].tied);
        dcp_test_ref_model rm;
        dcp_test_ref_model_load(&rm, g, &cfg, N_CTX);
        int32_t ids1[STEPS], ids8[STEPS], ids8r[STEPS];
        double e1 = run_case(ctx1, g, &cfg, &rm, 1, 1, DCP_CP_A2A, cases[c].label, ids1);
        double e8 = run_case(ctx8, g, &cfg, &rm, 8, 2, DCP_CP_A2A, cases[c].label, ids8);
        double e8r = run_case(ctx8, g, &cfg, &rm, 8, 2, DCP_CP_AG_RS, cases[c].label, ids8r);
        for (int i = 0; i < STEPS; i++)
            if (ids1[i] != ids8[i] || ids1[i] != ids8r[i])
                fail_msg("%s: greedy id %d differs: %d at (1,1), %d at (8,2) a2a, %d at (8,2) ag_rs", cases[c].label, i,
                         ids1[i], ids8[i], ids8r[i]);
        printf("%-34s %d greedy ids equal at (1,1), (8,2) a2a, ag_rs; logits max abs error vs reference %.3g / %.3g / "
               "%.3g\n", cases[c].label, STEPS, e1, e8, e8r);
        dcp_test_ref_model_free(&rm);
        dcp_gguf_close(g);
    }
    dcp_test_context_done(ctx8);
    dcp_test_context_done(ctx1);
}

/* The reference itself depends on what the tests claim to cover: the same llama model with and
 * without its rope_freqs factors, or without its linear scaling, gives different logits (so an
 * engine that ignored them would fail above). */
static void test_rope_variants_matter(void **state)
{
    (void)state;
    dcp_test_model_config mc = model_of(&cases[1], 901);
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open_test_model(&mc, &g));
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    assert_int_equal(cfg.rope_scaling, DCP_ROPE_SCALING_LINEAR);
    assert_true(cfg.rope_scaling_factor == 4.0f);
    dcp_test_ref_model rm;
    dcp_test_ref_model_load(&rm, g, &cfg, N_CTX);
    assert_non_null(rm.ref.rope.freq_factors);
    const uint32_t V = cfg.n_vocab;
    float *a = malloc(V * sizeof(float)), *b = malloc(V * sizeof(float));
    static const int32_t prompt[4] = {1, 300, 412, 77};
    for (int variant = 0; variant < 2; variant++) {
        dcp_test_ref_model_reset(&rm);
        for (uint32_t t = 0; t < 4; t++) dcp_ref_llama_step(&rm.ref, prompt[t], t, a);
        const float *ff = rm.ref.rope.freq_factors;
        int scaling = rm.ref.rope.scaling;
        if (variant == 0) rm.ref.rope.freq_factors = NULL;
        else rm.ref.rope.scaling = 0;
        dcp_test_ref_model_reset(&rm);
        for (uint32_t t = 0; t < 4; t++) dcp_ref_llama_step(&rm.ref, prompt[t], t, b);
        rm.ref.rope.freq_factors = ff;
        rm.ref.rope.scaling = scaling;
        double d = max_abs_diff(a, b, V);
        printf("without %s: logits differ by %.3g\n", variant ? "linear scaling" : "rope_freqs", d);
        assert_true(d > 10 * LOGITS_TOL); /* well outside the tolerance the tests use */
    }
    free(a);
    free(b);
    dcp_test_ref_model_free(&rm);
    dcp_gguf_close(g);
}

/* An architecture outside the list is refused by name, with the list; so is one the writer
 * does not make. */
static void test_unknown_architecture(void **state)
{
    (void)state;
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_writer_create(32, &w));
    DCP_ASSERT_OK(dcp_gguf_writer_set_string(w, "general.architecture", "gemma2", 6));
    void *data;
    size_t size;
    DCP_ASSERT_OK(dcp_gguf_writer_write_memory(w, &data, &size));
    dcp_gguf_writer_destroy(w);
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open_memory(data, size, "gemma2.gguf", &g));
    dcp_model_config cfg;
    assert_int_equal(dcp_model_config_read(g, &cfg), DCP_ERR_UNSUPPORTED);
    const char *msg = dcp_last_error();
    printf("refused: %s\n", msg);
    assert_non_null(strstr(msg, "'gemma2'"));
    assert_non_null(strstr(msg, "llama, qwen2, qwen3, phi3, deepseek2"));
    dcp_gguf_close(g);
    free(data);

    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.arch = "gemma2";
    assert_int_equal(dcp_gguf_build_test_model(&mc, &w), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "gemma2"));
}

static char logged[1024]; /* the last message of log_capture */
static void log_capture(void *user, const char *message)
{
    (void)user;
    snprintf(logged, sizeof logged, "%s", message);
}

/* Mistral's sliding window: a context inside it runs (above), with its warning passed to the log
 * callback; a longer one is refused naming the key and the window. */
static void test_sliding_window_refused(void **state)
{
    (void)state;
    dcp_test_model_config mc = model_of(&cases[3], 903);
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open_test_model(&mc, &g));
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_context *ctx = dcp_test_context_of(1);
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_model *w;
    DCP_ASSERT_OK(dcp_test_model_load(&dev, 0, 1, 1, 1, false, g, &cfg, &w));
    dcp_set_log_callback(log_capture, NULL);
    logged[0] = '\0';
    dcp_model_state_config in = DCP_MODEL_STATE_CONFIG_DEFAULT;
    in.n_ctx = N_CTX;
    dcp_model_state *fits = NULL;
    DCP_ASSERT_OK(dcp_model_state_create(w, &in, &fits));
    dcp_model_state_destroy(fits);
    dcp_set_log_callback(NULL, NULL);
    printf("logged: %s\n", logged);
    assert_non_null(strstr(logged, "dcp-vk: warning: llama.attention.sliding_window = 32 is ignored"));
    dcp_model_state_config lc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    lc.n_ctx = N_CTX + 1;
    dcp_model_state *s = NULL;
    assert_int_equal(dcp_model_state_create(w, &lc, &s), DCP_ERR_UNSUPPORTED);
    assert_null(s);
    printf("refused: %s\n", dcp_last_error());
    assert_non_null(strstr(dcp_last_error(), "llama.attention.sliding_window"));
    assert_non_null(strstr(dcp_last_error(), "32 tokens"));
    dcp_model_destroy(w);
    dcp_test_context_done(ctx);
    dcp_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_architecture),
        cmocka_unit_test(test_rope_variants_matter),
        cmocka_unit_test(test_sliding_window_refused),
        cmocka_unit_test(test_architectures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
