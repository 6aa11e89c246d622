/* The project's deterministic test models: llama-family (llama, qwen2, qwen3, phi3) GGUF v3 files with seeded random
 * weights and a small built-in SentencePiece-style vocabulary. The default model of dcp-vk-run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/splitmix.h"
#include "dcpvk/gguf.h"
#include "gguf/gguf_internal.h"
#include "testmodel/testmodel.h"

enum { TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_UNUSED = 5, TOK_BYTE = 6 };
enum { MAX_VOCAB = 1024, MAX_PIECE = 32 };

/* Word pieces of the built-in vocabulary; every prefix of "▁word" becomes a token so that merges
 * by score can reach the whole word. */
static const char *const vocab_words[] = {
    "Once", "upon", "a", "time", "there", "was", "little", "girl", "boy", "named", "Lily", "Tom",
    "She", "He", "They", "The", "It", "the", "and", "to", "he", "she", "it", "of", "in", "is",
    "that", "for", "on", "with", "his", "her", "they", "at", "be", "one", "day", "play", "loved",
    "happy", "big", "said", "mom", "dog", "cat", "park", "sun", "tree", "friend", "help", "we",
    "can", "you", "I", "Hello", "hello", "world", "outside", "very", "had", "saw",
};
static const char *const vocab_suffixes[] = {"ing", "ed", "er", "ly", "s"};

typedef struct vocab {
    char pieces[MAX_VOCAB][MAX_PIECE];
    int32_t types[MAX_VOCAB];
    uint32_t n;
} vocab;

static void vocab_add(vocab *v, const char *piece, int32_t type)
{
    for (uint32_t i = 0; i < v->n; ++i)
        if (strcmp(v->pieces[i], piece) == 0) return;
    snprintf(v->pieces[v->n], MAX_PIECE, "%s", piece);
    v->types[v->n++] = type;
}

static void vocab_build(vocab *v)
{
    char buf[MAX_PIECE];
    v->n = 0;
    vocab_add(v, "<unk>", TOK_UNKNOWN);
    vocab_add(v, "<s>", TOK_CONTROL);
    vocab_add(v, "</s>", TOK_CONTROL);
    for (int b = 0; b < 256; ++b) {
        snprintf(buf, sizeof buf, "<0x%02X>", b);
        vocab_add(v, buf, TOK_BYTE);
    }
    vocab_add(v, "\xe2\x96\x81", TOK_NORMAL); /* U+2581, the SentencePiece space */
    for (int c = 0x21; c < 0x7f; ++c) {
        buf[0] = (char)c;
        buf[1] = '\0';
        vocab_add(v, buf, TOK_NORMAL);
    }
    for (size_t w = 0; w < sizeof vocab_words / sizeof vocab_words[0]; ++w) {
        size_t n = strlen(vocab_words[w]);
        for (size_t k = 1; k <= n; ++k) {
            snprintf(buf, sizeof buf, "\xe2\x96\x81%.*s", (int)k, vocab_words[w]);
            vocab_add(v, buf, TOK_NORMAL);
        }
    }
    for (size_t s = 0; s < sizeof vocab_suffixes / sizeof vocab_suffixes[0]; ++s) {
        size_t n = strlen(vocab_suffixes[s]);
        for (size_t k = 2; k <= n; ++k) {
            snprintf(buf, sizeof buf, "%.*s", (int)k, vocab_suffixes[s]);
            vocab_add(v, buf, TOK_NORMAL);
        }
    }
    for (uint32_t i = 0; v->n % 64; ++i) {
        snprintf(buf, sizeof buf, "<unused_%u>", i);
        vocab_add(v, buf, TOK_UNUSED);
    }
}

uint32_t dcp_test_model_vocab_size(void)
{
    vocab *v = malloc(sizeof *v);
    if (!v) return 0;
    vocab_build(v);
    uint32_t n = v->n;
    free(v);
    return n;
}

/* Writes <arch>.vocab_size and the tokenizer keys of the built-in vocabulary; *n_vocab = its size. */
static dcp_status add_tokenizer(dcp_gguf_writer *w, const char *arch, uint32_t *n_vocab)
{
    dcp_status st = DCP_OK;
    char key[64];
    vocab *v = malloc(sizeof *v);
    float *scores = malloc(MAX_VOCAB * sizeof *scores);
    const char **strs = malloc(MAX_VOCAB * sizeof *strs);
    if (!v || !scores || !strs) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
        goto fail;
    }
    vocab_build(v);
    for (uint32_t i = 0; i < v->n; ++i) {
        strs[i] = v->pieces[i];
        scores[i] = v->types[i] == TOK_NORMAL ? -(float)i : 0.0f;
    }
    snprintf(key, sizeof key, "%s.vocab_size", arch);
    DCP_TRY(dcp_gguf_writer_set_uint(w, key, DCP_GGUF_TYPE_UINT32, v->n));
    DCP_TRY(dcp_gguf_writer_set_string(w, "tokenizer.ggml.model", "llama", 5));
    DCP_TRY(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", strs, NULL, v->n));
    DCP_TRY(dcp_gguf_writer_set_array(w, "tokenizer.ggml.scores", DCP_GGUF_TYPE_FLOAT32, scores, v->n));
    DCP_TRY(dcp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", DCP_GGUF_TYPE_INT32, v->types, v->n));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "tokenizer.ggml.bos_token_id", DCP_GGUF_TYPE_UINT32, 1));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "tokenizer.ggml.eos_token_id", DCP_GGUF_TYPE_UINT32, 2));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "tokenizer.ggml.unknown_token_id", DCP_GGUF_TYPE_UINT32, 0));
    DCP_TRY(dcp_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    DCP_TRY(dcp_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false));
    *n_vocab = v->n;
fail:
    free(v);
    free(scores);
    free(strs);
    return st;
}

/* Uniform in [-1, 1), exact in float (24 random bits). */
static float rng_sym(uint64_t *s) { return (float)(dcp_splitmix64_next(s) >> 40) * (1.0f / 8388608.0f) - 1.0f; }

static dcp_status add_weight(dcp_gguf_writer *w, const char *name, dcp_ggml_type type,
                             uint32_t n_dims, uint64_t ne0, uint64_t ne1, uint64_t *rng, bool norm)
{
    dcp_status st = DCP_OK;
    uint64_t ne[2] = {ne0, ne1};
    uint64_t n = ne0 * (n_dims > 1 ? ne1 : 1);
    uint32_t be, bb;
    float *x = malloc(n * sizeof *x);
    void *q = NULL;
    if (!x) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
    float scale = 1.0f / sqrtf((float)ne0);
    for (uint64_t i = 0; i < n; ++i) x[i] = norm ? 1.0f + 0.1f * rng_sym(rng) : scale * rng_sym(rng);
    dcp_ggml_type_block(type, &be, &bb);
    uint64_t bytes = n / be * bb;
    q = malloc(bytes);
    if (!q) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
        goto fail;
    }
    DCP_TRY(dcp_ggml_from_f32(type, x, q, n));
    DCP_TRY(dcp_gguf_writer_add_tensor(w, name, type, n_dims, ne, q, bytes));
fail:
    free(x);
    free(q);
    return st;
}

static dcp_status check_config(const dcp_test_model_config *c, uint32_t head_dim)
{
    if (!c->arch || (strcmp(c->arch, "llama") && strcmp(c->arch, "qwen2") && strcmp(c->arch, "qwen3") &&
                     strcmp(c->arch, "phi3")))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: arch '%s' is not supported (supported: "
                        "llama, qwen2, qwen3, phi3; deepseek2 through dcp_gguf_build_test_model_deepseek2)",
                        c->arch ? c->arch : "(null)");
    if (c->rope_freqs && strcmp(c->arch, "llama"))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: rope_freqs (rope_freqs.weight) is a tensor of arch "
                        "llama only; %s files do not have it (llama.cpp refuses them)", c->arch);
    if (c->rope_scaling && strcmp(c->rope_scaling, "none") && strcmp(c->rope_scaling, "linear") &&
        strcmp(c->rope_scaling, "yarn"))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: rope scaling '%s' is not one of none, linear, yarn",
                        c->rope_scaling);
    if (c->rope_scaling && strcmp(c->rope_scaling, "none") && !(c->rope_scale >= 1.0f && c->rope_scale <= 1024.0f))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: rope scale %g must be in [1, 1024] with %s scaling",
                        (double)c->rope_scale, c->rope_scaling);
    if (c->n_embd == 0 || c->n_layer == 0 || c->n_head == 0 || c->n_head_kv == 0 || c->n_ff == 0 ||
        c->n_ctx == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: n_embd, n_layer, n_head, n_head_kv, "
                        "n_ff and n_ctx must all be > 0");
    if (c->n_embd > 65536 || c->n_ff > 262144 || c->n_layer > 1024 || c->n_head > 4096)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: sizes too large for a test model "
                        "(n_embd <= 65536, n_ff <= 262144, n_layer <= 1024, n_head <= 4096)");
    if (c->n_head % c->n_head_kv)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: n_head_kv %u does not divide n_head %u",
                        c->n_head_kv, c->n_head);
    if (head_dim == 0 || head_dim % 2 || head_dim > 1024)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: head_dim %u must be even, in 2..1024 "
                        "(head_dim 0 means n_embd / n_head)", head_dim);
    uint32_t be, bb;
    if (!dcp_ggml_type_supported(c->weight_type) || !dcp_ggml_type_block(c->weight_type, &be, &bb))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: weight type %s is not supported "
                        "(supported: " DCP_GGML_SUPPORTED_LIST ")",
                        dcp_ggml_type_name(c->weight_type) ? dcp_ggml_type_name(c->weight_type) : "?");
    if (c->n_embd % be || c->n_ff % be || (c->n_head * head_dim) % be)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: %s needs n_embd, n_ff and "
                        "n_head*head_dim to be multiples of %u (use a mix such as q4_k_m through "
                        "dcp_gguf_quantize for fallbacks)", dcp_ggml_type_name(c->weight_type), be);
    if (c->ffn_up_own_type &&
        (!dcp_ggml_type_supported(c->ffn_up_type) || !dcp_ggml_type_block(c->ffn_up_type, &be, &bb) ||
         c->n_embd % be || !strcmp(c->arch, "phi3")))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: ffn_up type %s needs a supported type whose block "
                        "divides n_embd, and a separate ffn_gate (not phi3)",
                        dcp_ggml_type_name(c->ffn_up_type) ? dcp_ggml_type_name(c->ffn_up_type) : "?");
    if (!(c->rms_eps > 0.0f) || !(c->rope_base > 0.0f))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: rms_eps and rope_base must be > 0");
    return DCP_OK;
}

dcp_status dcp_gguf_build_test_model(const dcp_test_model_config *cfg, dcp_gguf_writer **out)
{
    static const dcp_test_model_config defaults = DCP_TEST_MODEL_CONFIG_DEFAULT;
    const dcp_test_model_config *c = cfg ? cfg : &defaults;
    dcp_status st;
    dcp_gguf_writer *w = NULL;
    char name[64];
    uint32_t n_vocab = 0;
    uint32_t hd = c->head_dim ? c->head_dim : (c->n_head ? c->n_embd / c->n_head : 0);
    *out = NULL;
    DCP_TRY(check_config(c, hd));
    /* general.file_type: the llama.cpp file type whose base is the weight type (Q4_K -> Q4_K_S) */
    static const struct { dcp_ggml_type t; uint32_t f; } ftype_of[] = {
        {DCP_GGML_TYPE_F32, DCP_FTYPE_F32},   {DCP_GGML_TYPE_F16, DCP_FTYPE_F16},   {DCP_GGML_TYPE_BF16, DCP_FTYPE_BF16},
        {DCP_GGML_TYPE_Q8_0, DCP_FTYPE_Q8_0}, {DCP_GGML_TYPE_Q4_0, DCP_FTYPE_Q4_0}, {DCP_GGML_TYPE_Q4_1, DCP_FTYPE_Q4_1},
        {DCP_GGML_TYPE_Q5_0, DCP_FTYPE_Q5_0}, {DCP_GGML_TYPE_Q5_1, DCP_FTYPE_Q5_1}, {DCP_GGML_TYPE_Q2_K, DCP_FTYPE_Q2_K},
        {DCP_GGML_TYPE_Q3_K, DCP_FTYPE_Q3_K_S}, {DCP_GGML_TYPE_Q4_K, DCP_FTYPE_Q4_K_S},
        {DCP_GGML_TYPE_Q5_K, DCP_FTYPE_Q5_K_S}, {DCP_GGML_TYPE_Q6_K, DCP_FTYPE_Q6_K},
        {DCP_GGML_TYPE_IQ4_NL, DCP_FTYPE_IQ4_NL}, {DCP_GGML_TYPE_IQ4_XS, DCP_FTYPE_IQ4_XS}};
    uint32_t file_type = 0;
    for (size_t i = 0; i < sizeof ftype_of / sizeof ftype_of[0]; i++)
        if (ftype_of[i].t == c->weight_type) file_type = ftype_of[i].f;

    DCP_TRY(dcp_gguf_writer_create(32, &w));
    const char *arch = c->arch;
    const bool phi3 = !strcmp(arch, "phi3"), qwen2 = !strcmp(arch, "qwen2"), qwen3 = !strcmp(arch, "qwen3");
    char key[96];
#define KEY(k) (snprintf(key, sizeof key, "%s." k, arch), key)
    DCP_TRY(dcp_gguf_writer_set_string(w, "general.architecture", arch, strlen(arch)));
    const char *nm = c->name ? c->name : "dcp-vk-test";
    DCP_TRY(dcp_gguf_writer_set_string(w, "general.name", nm, strlen(nm)));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "general.file_type", DCP_GGUF_TYPE_UINT32, file_type));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("context_length"), DCP_GGUF_TYPE_UINT32, c->n_ctx));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("embedding_length"), DCP_GGUF_TYPE_UINT32, c->n_embd));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("block_count"), DCP_GGUF_TYPE_UINT32, c->n_layer));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("feed_forward_length"), DCP_GGUF_TYPE_UINT32, c->n_ff));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("rope.dimension_count"), DCP_GGUF_TYPE_UINT32, hd));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("attention.head_count"), DCP_GGUF_TYPE_UINT32, c->n_head));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("attention.head_count_kv"), DCP_GGUF_TYPE_UINT32, c->n_head_kv));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("attention.key_length"), DCP_GGUF_TYPE_UINT32, hd));
    DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("attention.value_length"), DCP_GGUF_TYPE_UINT32, hd));
    DCP_TRY(dcp_gguf_writer_set_float(w, KEY("attention.layer_norm_rms_epsilon"), DCP_GGUF_TYPE_FLOAT32, c->rms_eps));
    DCP_TRY(dcp_gguf_writer_set_float(w, KEY("rope.freq_base"), DCP_GGUF_TYPE_FLOAT32, c->rope_base));
    if (c->rope_scaling) {
        DCP_TRY(dcp_gguf_writer_set_string(w, KEY("rope.scaling.type"), c->rope_scaling, strlen(c->rope_scaling)));
        if (strcmp(c->rope_scaling, "none")) {
            DCP_TRY(dcp_gguf_writer_set_float(w, KEY("rope.scaling.factor"), DCP_GGUF_TYPE_FLOAT32, c->rope_scale));
            if (!strcmp(c->rope_scaling, "yarn"))
                DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("rope.scaling.original_context_length"), DCP_GGUF_TYPE_UINT32,
                                                 (uint32_t)(c->n_ctx / c->rope_scale)));
        }
    }
    if (c->sliding_window)
        DCP_TRY(dcp_gguf_writer_set_uint(w, KEY("attention.sliding_window"), DCP_GGUF_TYPE_UINT32, c->sliding_window));
#undef KEY
    DCP_TRY(add_tokenizer(w, arch, &n_vocab));

    uint64_t rng = c->seed;
    dcp_ggml_type wt = c->weight_type;
    uint64_t nq = (uint64_t)c->n_head * hd, nkv = (uint64_t)c->n_head_kv * hd;
    DCP_TRY(add_weight(w, "token_embd.weight", wt, 2, c->n_embd, n_vocab, &rng, false));
    DCP_TRY(add_weight(w, "output_norm.weight", DCP_GGML_TYPE_F32, 1, c->n_embd, 1, &rng, true));
    if (!c->tie_output) DCP_TRY(add_weight(w, "output.weight", wt, 2, c->n_embd, n_vocab, &rng, false));
    if (c->rope_freqs) { /* Llama 3.x-like: factor 1 for the fastest pairs rising to 8 for the slowest */
        const uint32_t half = hd / 2;
        float f[512];
        for (uint32_t i = 0; i < half; i++) f[i] = 1.0f + 7.0f * (float)i / (float)(half > 1 ? half - 1 : 1);
        const uint64_t ne[1] = {half};
        DCP_TRY(dcp_gguf_writer_add_tensor(w, "rope_freqs.weight", DCP_GGML_TYPE_F32, 1, ne, f, (uint64_t)half * 4));
    }
    for (uint32_t l = 0; l < c->n_layer; ++l) {
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%u." suffix, l), name)
        DCP_TRY(add_weight(w, BLK("attn_norm.weight"), DCP_GGML_TYPE_F32, 1, c->n_embd, 1, &rng, true));
        if (phi3) {
            DCP_TRY(add_weight(w, BLK("attn_qkv.weight"), wt, 2, c->n_embd, nq + 2 * nkv, &rng, false));
        } else {
            DCP_TRY(add_weight(w, BLK("attn_q.weight"), wt, 2, c->n_embd, nq, &rng, false));
            DCP_TRY(add_weight(w, BLK("attn_k.weight"), wt, 2, c->n_embd, nkv, &rng, false));
            DCP_TRY(add_weight(w, BLK("attn_v.weight"), wt, 2, c->n_embd, nkv, &rng, false));
        }
        if (qwen2) { /* biases: drawn with scale 1/sqrt(n) like the matrices, F32 */
            DCP_TRY(add_weight(w, BLK("attn_q.bias"), DCP_GGML_TYPE_F32, 1, nq, 1, &rng, false));
            DCP_TRY(add_weight(w, BLK("attn_k.bias"), DCP_GGML_TYPE_F32, 1, nkv, 1, &rng, false));
            DCP_TRY(add_weight(w, BLK("attn_v.bias"), DCP_GGML_TYPE_F32, 1, nkv, 1, &rng, false));
        }
        if (qwen3) {
            DCP_TRY(add_weight(w, BLK("attn_q_norm.weight"), DCP_GGML_TYPE_F32, 1, hd, 1, &rng, true));
            DCP_TRY(add_weight(w, BLK("attn_k_norm.weight"), DCP_GGML_TYPE_F32, 1, hd, 1, &rng, true));
        }
        DCP_TRY(add_weight(w, BLK("attn_output.weight"), wt, 2, nq, c->n_embd, &rng, false));
        DCP_TRY(add_weight(w, BLK("ffn_norm.weight"), DCP_GGML_TYPE_F32, 1, c->n_embd, 1, &rng, true));
        if (phi3) {
            DCP_TRY(add_weight(w, BLK("ffn_up.weight"), wt, 2, c->n_embd, 2ull * c->n_ff, &rng, false));
        } else {
            DCP_TRY(add_weight(w, BLK("ffn_gate.weight"), wt, 2, c->n_embd, c->n_ff, &rng, false));
            DCP_TRY(add_weight(w, BLK("ffn_up.weight"), c->ffn_up_own_type ? c->ffn_up_type : wt, 2, c->n_embd,
                               c->n_ff, &rng, false));
        }
        DCP_TRY(add_weight(w, BLK("ffn_down.weight"), wt, 2, c->n_ff, c->n_embd, &rng, false));
#undef BLK
    }
    *out = w;
    w = NULL;
fail:
    dcp_gguf_writer_destroy(w);
    return st;
}

dcp_status dcp_gguf_make_test_model(const char *path, const dcp_test_model_config *cfg)
{
    dcp_gguf_writer *w = NULL;
    dcp_status st = dcp_gguf_build_test_model(cfg, &w);
    if (st) return st;
    st = dcp_gguf_writer_write(w, path);
    dcp_gguf_writer_destroy(w);
    return st;
}

/* ---- deepseek2 test models ------------------------------------------------------------------ */

dcp_status dcp_test_deepseek2_preset(char variant, dcp_test_deepseek2_config *out)
{
    dcp_test_deepseek2_config c = {
        .name = "dcp-vk-test-deepseek2", .n_embd = 64, .n_layer = 2, .n_layer_dense = 1, .n_head = 4,
        .q_lora_rank = 0, .kv_lora_rank = 32, .n_rot = 16, .head_dim_nope = 24, .head_dim_v = 20, .n_ff = 72,
        .n_expert = 6, .n_expert_used = 2, .n_expert_shared = 1, .n_ff_exp = 56, .n_ctx = 4096,
        .legacy_kv_b = 0, .gating_func = 1, .exp_probs_b = 0, .weights_norm = 0, .weights_scale = 1.0f,
        .n_expert_groups = 0, .n_expert_groups_used = 0, .yarn_factor = 0.0f, .yarn_orig_ctx = 0,
        .yarn_log_mul = 0.0f, .yarn_beta_fast = 32.0f, .yarn_beta_slow = 1.0f, .rms_eps = 1e-6f,
        .rope_base = 10000.0f, .weight_type = DCP_GGML_TYPE_F32, .seed = 4242,
    };
    switch (variant) {
    case 'A': case 'a': break;
    case 'C': case 'c': c.legacy_kv_b = 1; break;
    case 'B': case 'b':
        c.q_lora_rank = 40;
        c.yarn_factor = 4.0f;
        c.yarn_orig_ctx = 32;
        c.yarn_log_mul = 0.0707f;
        c.gating_func = 2;
        c.exp_probs_b = 1;
        c.weights_norm = 1;
        c.weights_scale = 2.5f;
        c.n_expert_groups = 3;
        c.n_expert_groups_used = 2;
        break;
    default:
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "deepseek2 test model: configuration '%c' is not one of A, B, C",
                        variant);
    }
    *out = c;
    return DCP_OK;
}

static dcp_status check_deepseek2(const dcp_test_deepseek2_config *c)
{
#define DS2_BAD(...) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "deepseek2 test model: " __VA_ARGS__)
    if (!c->n_embd || !c->n_layer || !c->n_head || !c->kv_lora_rank || !c->n_rot || !c->head_dim_nope ||
        !c->head_dim_v || !c->n_ctx)
        DS2_BAD("n_embd, n_layer, n_head, kv_lora_rank, n_rot, head_dim_nope, head_dim_v and n_ctx must be > 0");
    if (c->n_embd > 16384 || c->n_layer > 256 || c->n_head > 256 || c->kv_lora_rank > 1024 ||
        c->n_rot > 256 || c->head_dim_nope > 512 || c->head_dim_v > 512 || c->q_lora_rank > 4096 ||
        c->n_ff > 65536 || c->n_ff_exp > 65536 || c->n_expert > 256)
        DS2_BAD("sizes too large for a test model");
    if (c->n_embd % 4 || c->kv_lora_rank % 4 || c->n_rot % 4 || c->head_dim_nope % 4 || c->head_dim_v % 4 ||
        c->q_lora_rank % 4)
        DS2_BAD("n_embd, q_lora_rank, kv_lora_rank, n_rot, head_dim_nope and head_dim_v must be multiples of 4");
    if (c->n_layer_dense > c->n_layer) DS2_BAD("n_layer_dense %u exceeds n_layer %u", c->n_layer_dense, c->n_layer);
    if (c->n_layer_dense && !c->n_ff) DS2_BAD("n_ff must be > 0 with dense layers");
    if (c->n_layer_dense < c->n_layer) {
        if (!c->n_expert || !c->n_expert_used || c->n_expert_used > c->n_expert || !c->n_ff_exp)
            DS2_BAD("MoE layers need n_expert > 0, n_expert_used in 1..n_expert and n_ff_exp > 0");
        if (c->gating_func != 1 && c->gating_func != 2) DS2_BAD("gating_func %u (1 softmax, 2 sigmoid)", c->gating_func);
        uint32_t g = c->n_expert_groups;
        if (g > 1 && (c->n_expert % g || c->n_expert / g < 2 || !c->n_expert_groups_used ||
                      c->n_expert_groups_used > g || c->n_expert_used > c->n_expert_groups_used * (c->n_expert / g)))
            DS2_BAD("n_expert_groups %u / n_expert_groups_used %u do not fit %u experts, %u used", g,
                    c->n_expert_groups_used, c->n_expert, c->n_expert_used);
    }
    if (c->weight_type != DCP_GGML_TYPE_F32 && c->weight_type != DCP_GGML_TYPE_F16)
        DS2_BAD("weight type %s is not supported (F32, F16)",
                dcp_ggml_type_name(c->weight_type) ? dcp_ggml_type_name(c->weight_type) : "?");
    if (!(c->rms_eps > 0.0f) || !(c->rope_base > 1.0f) || !(c->weights_scale > 0.0f) || c->yarn_factor < 0.0f ||
        (c->yarn_factor > 0.0f && (!c->yarn_orig_ctx || !(c->yarn_beta_fast > 0.0f) || !(c->yarn_beta_slow > 0.0f) ||
                                   c->yarn_log_mul < 0.0f)))
        DS2_BAD("rms_eps, rope_base > 1, weights_scale and the YaRN parameters must be positive");
    return DCP_OK;
#undef DS2_BAD
}

enum { DRAW_SYM, DRAW_NORM, DRAW_BIAS };

/* n values: DRAW_SYM gain / sqrt(fan_in) * U(-1, 1); DRAW_NORM 1 + 0.1 U(-1, 1); DRAW_BIAS gain * U(-1, 1). */
static float *ds2_draw(uint64_t n, uint64_t *rng, int mode, double gain, uint64_t fan_in)
{
    float *x = malloc(n * sizeof *x);
    if (!x) return NULL;
    float scale = (float)(gain / sqrt((double)fan_in));
    for (uint64_t i = 0; i < n; ++i) {
        float u = rng_sym(rng);
        x[i] = mode == DRAW_NORM ? 1.0f + 0.1f * u : mode == DRAW_BIAS ? (float)gain * u : scale * u;
    }
    return x;
}

/* Writes x (ne[0] x ne[1] x ne[2] values) as a tensor of `type`. */
static dcp_status ds2_put(dcp_gguf_writer *w, const char *name, dcp_ggml_type type, uint32_t n_dims, uint64_t ne0,
                          uint64_t ne1, uint64_t ne2, const float *x)
{
    dcp_status st = DCP_OK;
    uint64_t ne[3] = {ne0, ne1, ne2};
    uint64_t n = ne0 * (n_dims > 1 ? ne1 : 1) * (n_dims > 2 ? ne2 : 1);
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    uint64_t bytes = n / be * bb;
    void *q = malloc(bytes);
    if (!q) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
    DCP_TRY(dcp_ggml_from_f32(type, x, q, n));
    DCP_TRY(dcp_gguf_writer_add_tensor(w, name, type, n_dims, ne, q, bytes));
fail:
    free(q);
    return st;
}

/* Draws and writes one tensor. */
static dcp_status ds2_weight(dcp_gguf_writer *w, const char *name, dcp_ggml_type type, uint32_t n_dims,
                             uint64_t ne0, uint64_t ne1, uint64_t ne2, uint64_t *rng, int mode, double gain,
                             uint64_t fan_in)
{
    uint64_t n = ne0 * (n_dims > 1 ? ne1 : 1) * (n_dims > 2 ? ne2 : 1);
    float *x = ds2_draw(n, rng, mode, gain, fan_in);
    if (!x) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
    dcp_status st = ds2_put(w, name, type, n_dims, ne0, ne1, ne2, x);
    free(x);
    return st;
}

/* Gains of the attention projections and the router: with inputs of RMS 1 they give attention
 * scores of standard deviation about 2 and router logits of about 1.4 (checked by test_deepseek2_ref). */
#define DS2_GAIN_Q 2.5
#define DS2_GAIN_KV_A 2.0
#define DS2_GAIN_K_B 2.5
#define DS2_GAIN_ROUTER 2.5
#define DS2_GAIN_PROBS_B 0.2

dcp_status dcp_gguf_build_test_model_deepseek2(const dcp_test_deepseek2_config *c, dcp_gguf_writer **out)
{
    dcp_status st;
    dcp_gguf_writer *w = NULL;
    float *kb = NULL, *vb = NULL, *kvb = NULL;
    char name[64], key[96];
    uint32_t n_vocab = 0;
    *out = NULL;
    if (!c) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "deepseek2 test model: no config");
    DCP_TRY(check_deepseek2(c));
    const uint32_t E = c->n_embd, H = c->n_head, R = c->kv_lora_rank, P = c->n_rot, N = c->head_dim_nope,
                   V = c->head_dim_v, QL = c->q_lora_rank, FE = c->n_ff_exp;
    const dcp_ggml_type wt = c->weight_type, f32 = DCP_GGML_TYPE_F32;
    DCP_TRY(dcp_gguf_writer_create(32, &w));
#define KEY(suffix) (snprintf(key, sizeof key, "deepseek2." suffix), key)
#define U32(suffix, v) DCP_TRY(dcp_gguf_writer_set_uint(w, KEY(suffix), DCP_GGUF_TYPE_UINT32, (v)))
#define F32(suffix, v) DCP_TRY(dcp_gguf_writer_set_float(w, KEY(suffix), DCP_GGUF_TYPE_FLOAT32, (v)))
    DCP_TRY(dcp_gguf_writer_set_string(w, "general.architecture", "deepseek2", 9));
    const char *nm = c->name ? c->name : "dcp-vk-test-deepseek2";
    DCP_TRY(dcp_gguf_writer_set_string(w, "general.name", nm, strlen(nm)));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "general.file_type", DCP_GGUF_TYPE_UINT32, wt == f32 ? 0 : 1));
    U32("context_length", c->n_ctx);
    U32("embedding_length", E);
    U32("block_count", c->n_layer);
    U32("feed_forward_length", c->n_ff ? c->n_ff : FE);
    U32("attention.head_count", H);
    U32("attention.head_count_kv", c->legacy_kv_b ? H : 1);
    F32("attention.layer_norm_rms_epsilon", c->rms_eps);
    /* llama.cpp reads q_lora_rank unless the layer count is a V2-Lite one (26, 27): written
     * always, 0 for the attn_q layout. */
    U32("attention.q_lora_rank", QL);
    U32("attention.kv_lora_rank", R);
    if (c->legacy_kv_b) {
        U32("attention.key_length", N + P);
        U32("attention.value_length", V);
    } else {
        U32("attention.key_length", R + P);
        U32("attention.value_length", R);
        U32("attention.key_length_mla", N + P);
        U32("attention.value_length_mla", V);
    }
    U32("rope.dimension_count", P);
    F32("rope.freq_base", c->rope_base);
    if (c->yarn_factor > 0.0f) {
        DCP_TRY(dcp_gguf_writer_set_string(w, KEY("rope.scaling.type"), "yarn", 4));
        F32("rope.scaling.factor", c->yarn_factor);
        U32("rope.scaling.original_context_length", c->yarn_orig_ctx);
        F32("rope.scaling.yarn_log_multiplier", c->yarn_log_mul);
        F32("rope.scaling.yarn_beta_fast", c->yarn_beta_fast);
        F32("rope.scaling.yarn_beta_slow", c->yarn_beta_slow);
    }
    /* The MoE keys as DeepSeek files carry them, also when every layer is dense: llama.cpp needs
     * expert_feed_forward_length, expert_shared_count and expert_weights_scale in any case. */
    U32("leading_dense_block_count", c->n_layer_dense);
    const bool moe = c->n_layer_dense < c->n_layer;
    U32("expert_count", moe ? c->n_expert : 0);
    U32("expert_used_count", moe ? c->n_expert_used : 0);
    U32("expert_shared_count", c->n_expert_shared);
    U32("expert_feed_forward_length", FE);
    F32("expert_weights_scale", c->weights_scale);
    DCP_TRY(dcp_gguf_writer_set_bool(w, KEY("expert_weights_norm"), c->weights_norm != 0));
    U32("expert_gating_func", c->gating_func);
    if (moe && c->n_expert_groups > 1) {
        U32("expert_group_count", c->n_expert_groups);
        U32("expert_group_used_count", c->n_expert_groups_used);
    }
    DCP_TRY(add_tokenizer(w, "deepseek2", &n_vocab));
#undef U32
#undef F32
#undef KEY

    uint64_t rng = c->seed;
    DCP_TRY(ds2_weight(w, "token_embd.weight", wt, 2, E, n_vocab, 1, &rng, DRAW_SYM, 1.0, E));
    DCP_TRY(ds2_weight(w, "output_norm.weight", f32, 1, E, 1, 1, &rng, DRAW_NORM, 0, 1));
    DCP_TRY(ds2_weight(w, "output.weight", wt, 2, E, n_vocab, 1, &rng, DRAW_SYM, 1.0, E));
    for (uint32_t l = 0; l < c->n_layer; ++l) {
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%u." suffix, l), name)
        DCP_TRY(ds2_weight(w, BLK("attn_norm.weight"), f32, 1, E, 1, 1, &rng, DRAW_NORM, 0, 1));
        if (QL) {
            DCP_TRY(ds2_weight(w, BLK("attn_q_a.weight"), wt, 2, E, QL, 1, &rng, DRAW_SYM, 1.0, E));
            DCP_TRY(ds2_weight(w, BLK("attn_q_a_norm.weight"), f32, 1, QL, 1, 1, &rng, DRAW_NORM, 0, 1));
            DCP_TRY(ds2_weight(w, BLK("attn_q_b.weight"), wt, 2, QL, (uint64_t)H * (N + P), 1, &rng, DRAW_SYM,
                               DS2_GAIN_Q, QL));
        } else {
            DCP_TRY(ds2_weight(w, BLK("attn_q.weight"), wt, 2, E, (uint64_t)H * (N + P), 1, &rng, DRAW_SYM,
                               DS2_GAIN_Q, E));
        }
        DCP_TRY(ds2_weight(w, BLK("attn_kv_a_mqa.weight"), wt, 2, E, R + P, 1, &rng, DRAW_SYM, DS2_GAIN_KV_A, E));
        DCP_TRY(ds2_weight(w, BLK("attn_kv_a_norm.weight"), f32, 1, R, 1, 1, &rng, DRAW_NORM, 0, 1));
        /* k_b {nope, kv_lora, H} and v_b {kv_lora, v, H}; both contract c_n (kv_lora) in the
         * uncompressed form. The legacy layout writes the same values as attn_kv_b
         * {kv_lora, H (nope + v)}: row h (nope + v) + n is k_b[h][:][n], row h (nope + v) + nope + j
         * is v_b[h][j][:]. */
        kb = ds2_draw((uint64_t)H * R * N, &rng, DRAW_SYM, DS2_GAIN_K_B, R);
        vb = ds2_draw((uint64_t)H * V * R, &rng, DRAW_SYM, 1.0, R);
        if (!kb || !vb) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
            goto fail;
        }
        if (c->legacy_kv_b) {
            kvb = malloc((uint64_t)H * (N + V) * R * sizeof *kvb);
            if (!kvb) {
                st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
                goto fail;
            }
            for (uint32_t h = 0; h < H; ++h) {
                for (uint32_t n = 0; n < N; ++n)
                    for (uint32_t r = 0; r < R; ++r)
                        kvb[((uint64_t)h * (N + V) + n) * R + r] = kb[((uint64_t)h * R + r) * N + n];
                for (uint32_t j = 0; j < V; ++j)
                    memcpy(kvb + ((uint64_t)h * (N + V) + N + j) * R, vb + ((uint64_t)h * V + j) * R, R * sizeof *kvb);
            }
            DCP_TRY(ds2_put(w, BLK("attn_kv_b.weight"), wt, 2, R, (uint64_t)H * (N + V), 1, kvb));
            free(kvb);
            kvb = NULL;
        } else {
            DCP_TRY(ds2_put(w, BLK("attn_k_b.weight"), wt, 3, N, R, H, kb));
            DCP_TRY(ds2_put(w, BLK("attn_v_b.weight"), wt, 3, R, V, H, vb));
        }
        free(kb);
        free(vb);
        kb = vb = NULL;
        DCP_TRY(ds2_weight(w, BLK("attn_output.weight"), wt, 2, (uint64_t)H * V, E, 1, &rng, DRAW_SYM, 1.0,
                           (uint64_t)H * V));
        DCP_TRY(ds2_weight(w, BLK("ffn_norm.weight"), f32, 1, E, 1, 1, &rng, DRAW_NORM, 0, 1));
        if (l < c->n_layer_dense) {
            DCP_TRY(ds2_weight(w, BLK("ffn_gate.weight"), wt, 2, E, c->n_ff, 1, &rng, DRAW_SYM, 1.0, E));
            DCP_TRY(ds2_weight(w, BLK("ffn_up.weight"), wt, 2, E, c->n_ff, 1, &rng, DRAW_SYM, 1.0, E));
            DCP_TRY(ds2_weight(w, BLK("ffn_down.weight"), wt, 2, c->n_ff, E, 1, &rng, DRAW_SYM, 1.0, c->n_ff));
            continue;
        }
        const uint32_t X = c->n_expert, FS = FE * c->n_expert_shared;
        DCP_TRY(ds2_weight(w, BLK("ffn_gate_inp.weight"), f32, 2, E, X, 1, &rng, DRAW_SYM, DS2_GAIN_ROUTER, E));
        if (c->exp_probs_b)
            DCP_TRY(ds2_weight(w, BLK("exp_probs_b.bias"), f32, 1, X, 1, 1, &rng, DRAW_BIAS, DS2_GAIN_PROBS_B, 1));
        DCP_TRY(ds2_weight(w, BLK("ffn_gate_exps.weight"), wt, 3, E, FE, X, &rng, DRAW_SYM, 1.0, E));
        DCP_TRY(ds2_weight(w, BLK("ffn_up_exps.weight"), wt, 3, E, FE, X, &rng, DRAW_SYM, 1.0, E));
        DCP_TRY(ds2_weight(w, BLK("ffn_down_exps.weight"), wt, 3, FE, E, X, &rng, DRAW_SYM, 1.0, FE));
        if (FS) {
            DCP_TRY(ds2_weight(w, BLK("ffn_gate_shexp.weight"), wt, 2, E, FS, 1, &rng, DRAW_SYM, 1.0, E));
            DCP_TRY(ds2_weight(w, BLK("ffn_up_shexp.weight"), wt, 2, E, FS, 1, &rng, DRAW_SYM, 1.0, E));
            DCP_TRY(ds2_weight(w, BLK("ffn_down_shexp.weight"), wt, 2, FS, E, 1, &rng, DRAW_SYM, 1.0, FS));
        }
#undef BLK
    }
    *out = w;
    w = NULL;
fail:
    dcp_gguf_writer_destroy(w);
    free(kb);
    free(vb);
    free(kvb);
    return st;
}

dcp_status dcp_gguf_make_test_model_deepseek2(const char *path, const dcp_test_deepseek2_config *cfg)
{
    dcp_gguf_writer *w = NULL;
    dcp_status st = dcp_gguf_build_test_model_deepseek2(cfg, &w);
    if (st) return st;
    st = dcp_gguf_writer_write(w, path);
    dcp_gguf_writer_destroy(w);
    return st;
}

dcp_status dcp_gguf_open_test_model(const dcp_test_model_config *cfg, dcp_gguf **out)
{
    dcp_gguf_writer *w = NULL;
    void *data = NULL;
    size_t size = 0;
    *out = NULL;
    dcp_status st = dcp_gguf_build_test_model(cfg, &w);
    if (st == DCP_OK) st = dcp_gguf_writer_write_memory(w, &data, &size);
    dcp_gguf_writer_destroy(w);
    if (st != DCP_OK) return st;
    st = dcp_gguf_open_memory(data, size, "<generated test model>", out);
    if (st != DCP_OK) {
        free(data);
        return st;
    }
    (*out)->owned = data;
    return DCP_OK;
}
