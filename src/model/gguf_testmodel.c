/* The project's deterministic test models: llama-architecture GGUF v3 files with seeded random
 * weights and a small built-in SentencePiece-style vocabulary. The default model of dcp-vk-run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/splitmix.h"
#include "dcpvk/gguf.h"
#include "model/gguf_internal.h"

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
    if (!c->arch || strcmp(c->arch, "llama") != 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "test model: arch '%s' is not supported (supported: "
                        "llama)", c->arch ? c->arch : "(null)");
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
    vocab *v = NULL;
    float *scores = NULL;
    const char **strs = NULL;
    char name[64];
    uint32_t hd = c->head_dim ? c->head_dim : (c->n_head ? c->n_embd / c->n_head : 0);
    *out = NULL;
    DCP_TRY(check_config(c, hd));
    v = malloc(sizeof *v);
    scores = malloc(MAX_VOCAB * sizeof *scores);
    strs = malloc(MAX_VOCAB * sizeof *strs);
    if (!v || !scores || !strs) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "test model: out of memory");
        goto fail;
    }
    vocab_build(v);
    for (uint32_t i = 0; i < v->n; ++i) {
        strs[i] = v->pieces[i];
        scores[i] = v->types[i] == TOK_NORMAL ? -(float)i : 0.0f;
    }
    /* general.file_type: the llama.cpp file type whose base is the weight type (Q4_K -> Q4_K_S) */
    static const struct { dcp_ggml_type t; uint32_t f; } ftype_of[] = {
        {DCP_GGML_TYPE_F32, DCP_FTYPE_F32},   {DCP_GGML_TYPE_F16, DCP_FTYPE_F16},   {DCP_GGML_TYPE_BF16, DCP_FTYPE_BF16},
        {DCP_GGML_TYPE_Q8_0, DCP_FTYPE_Q8_0}, {DCP_GGML_TYPE_Q4_0, DCP_FTYPE_Q4_0}, {DCP_GGML_TYPE_Q4_1, DCP_FTYPE_Q4_1},
        {DCP_GGML_TYPE_Q5_0, DCP_FTYPE_Q5_0}, {DCP_GGML_TYPE_Q5_1, DCP_FTYPE_Q5_1}, {DCP_GGML_TYPE_Q2_K, DCP_FTYPE_Q2_K},
        {DCP_GGML_TYPE_Q3_K, DCP_FTYPE_Q3_K_S}, {DCP_GGML_TYPE_Q4_K, DCP_FTYPE_Q4_K_S},
        {DCP_GGML_TYPE_Q5_K, DCP_FTYPE_Q5_K_S}, {DCP_GGML_TYPE_Q6_K, DCP_FTYPE_Q6_K}};
    uint32_t file_type = 0;
    for (size_t i = 0; i < sizeof ftype_of / sizeof ftype_of[0]; i++)
        if (ftype_of[i].t == c->weight_type) file_type = ftype_of[i].f;

    DCP_TRY(dcp_gguf_writer_create(32, &w));
    DCP_TRY(dcp_gguf_writer_set_string(w, "general.architecture", "llama", 5));
    const char *nm = c->name ? c->name : "dcp-vk-test";
    DCP_TRY(dcp_gguf_writer_set_string(w, "general.name", nm, strlen(nm)));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "general.file_type", DCP_GGUF_TYPE_UINT32, file_type));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.context_length", DCP_GGUF_TYPE_UINT32, c->n_ctx));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.embedding_length", DCP_GGUF_TYPE_UINT32, c->n_embd));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.block_count", DCP_GGUF_TYPE_UINT32, c->n_layer));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.feed_forward_length", DCP_GGUF_TYPE_UINT32, c->n_ff));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.rope.dimension_count", DCP_GGUF_TYPE_UINT32, hd));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.attention.head_count", DCP_GGUF_TYPE_UINT32, c->n_head));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.attention.head_count_kv", DCP_GGUF_TYPE_UINT32, c->n_head_kv));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.attention.key_length", DCP_GGUF_TYPE_UINT32, hd));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.attention.value_length", DCP_GGUF_TYPE_UINT32, hd));
    DCP_TRY(dcp_gguf_writer_set_float(w, "llama.attention.layer_norm_rms_epsilon", DCP_GGUF_TYPE_FLOAT32, c->rms_eps));
    DCP_TRY(dcp_gguf_writer_set_float(w, "llama.rope.freq_base", DCP_GGUF_TYPE_FLOAT32, c->rope_base));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "llama.vocab_size", DCP_GGUF_TYPE_UINT32, v->n));
    DCP_TRY(dcp_gguf_writer_set_string(w, "tokenizer.ggml.model", "llama", 5));
    DCP_TRY(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", strs, NULL, v->n));
    DCP_TRY(dcp_gguf_writer_set_array(w, "tokenizer.ggml.scores", DCP_GGUF_TYPE_FLOAT32, scores, v->n));
    DCP_TRY(dcp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", DCP_GGUF_TYPE_INT32, v->types, v->n));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "tokenizer.ggml.bos_token_id", DCP_GGUF_TYPE_UINT32, 1));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "tokenizer.ggml.eos_token_id", DCP_GGUF_TYPE_UINT32, 2));
    DCP_TRY(dcp_gguf_writer_set_uint(w, "tokenizer.ggml.unknown_token_id", DCP_GGUF_TYPE_UINT32, 0));
    DCP_TRY(dcp_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true));
    DCP_TRY(dcp_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false));

    uint64_t rng = c->seed;
    dcp_ggml_type wt = c->weight_type;
    uint64_t nq = (uint64_t)c->n_head * hd, nkv = (uint64_t)c->n_head_kv * hd;
    DCP_TRY(add_weight(w, "token_embd.weight", wt, 2, c->n_embd, v->n, &rng, false));
    DCP_TRY(add_weight(w, "output_norm.weight", DCP_GGML_TYPE_F32, 1, c->n_embd, 1, &rng, true));
    DCP_TRY(add_weight(w, "output.weight", wt, 2, c->n_embd, v->n, &rng, false));
    for (uint32_t l = 0; l < c->n_layer; ++l) {
#define BLK(suffix) (snprintf(name, sizeof name, "blk.%u." suffix, l), name)
        DCP_TRY(add_weight(w, BLK("attn_norm.weight"), DCP_GGML_TYPE_F32, 1, c->n_embd, 1, &rng, true));
        DCP_TRY(add_weight(w, BLK("attn_q.weight"), wt, 2, c->n_embd, nq, &rng, false));
        DCP_TRY(add_weight(w, BLK("attn_k.weight"), wt, 2, c->n_embd, nkv, &rng, false));
        DCP_TRY(add_weight(w, BLK("attn_v.weight"), wt, 2, c->n_embd, nkv, &rng, false));
        DCP_TRY(add_weight(w, BLK("attn_output.weight"), wt, 2, nq, c->n_embd, &rng, false));
        DCP_TRY(add_weight(w, BLK("ffn_norm.weight"), DCP_GGML_TYPE_F32, 1, c->n_embd, 1, &rng, true));
        DCP_TRY(add_weight(w, BLK("ffn_gate.weight"), wt, 2, c->n_embd, c->n_ff, &rng, false));
        DCP_TRY(add_weight(w, BLK("ffn_up.weight"), wt, 2, c->n_embd, c->n_ff, &rng, false));
        DCP_TRY(add_weight(w, BLK("ffn_down.weight"), wt, 2, c->n_ff, c->n_embd, &rng, false));
#undef BLK
    }
    *out = w;
    w = NULL;
fail:
    dcp_gguf_writer_destroy(w);
    free(v);
    free(scores);
    free(strs);
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
