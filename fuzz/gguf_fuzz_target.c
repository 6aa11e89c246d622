/* The GGUF fuzz target body, shared by the libFuzzer driver (fuzz_gguf.c) and the plain smoke
 * test that CI runs with gcc (tests/test_gguf_fuzz.c): open bytes as GGUF and, when they parse,
 * touch everything a user of the file would (metadata, tensors, hyperparameters, tokenizer). */
#include "gguf_fuzz_target.h"

#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "dcpvk/tokenizer.h"

/* Keeps the compiler from dropping reads. */
static volatile uint64_t sink;

static void touch_kv(const dcp_gguf_kv *kv)
{
    sink += strlen(kv->key);
    if (kv->type == DCP_GGUF_TYPE_STRING) sink += kv->str_len + (unsigned char)kv->str[kv->str_len];
    if (kv->type != DCP_GGUF_TYPE_ARRAY || kv->array_len == 0) return;
    uint64_t idx[3] = {0, kv->array_len / 2, kv->array_len - 1};
    for (int k = 0; k < 3; ++k) {
        const char *s;
        size_t n;
        uint64_t u;
        int64_t i;
        double f;
        if (dcp_gguf_array_string(kv, idx[k], &s, &n) == DCP_OK) sink += n + (unsigned char)s[n];
        if (dcp_gguf_array_uint(kv, idx[k], &u) == DCP_OK) sink += u;
        if (dcp_gguf_array_int(kv, idx[k], &i) == DCP_OK) sink += (uint64_t)i;
        if (dcp_gguf_array_float(kv, idx[k], &f) == DCP_OK) sink += (uint64_t)(f == f);
    }
    /* an index past the end must be refused */
    const char *s;
    if (dcp_gguf_array_string(kv, kv->array_len, &s, NULL) == DCP_OK) abort();
}

static void touch_tokenizer(const dcp_gguf *g)
{
    dcp_tokenizer *t;
    if (dcp_tokenizer_create(g, &t) != DCP_OK) return;
    static const char *const texts[] = {
        "Hello world! 123 4567 it's", " \t\n  leading spaces\r\n", "\xc3\xbc\xe4\xb8\xad\xf0\x9f\xa6\x99<s></s><|endoftext|>",
        "\xff\xfe broken \xe2\x82 utf8 \xc0\xaf", "",
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; ++k) {
        int32_t *ids;
        size_t n;
        unsigned flags = k & 1 ? DCP_TOKENIZE_PARSE_SPECIAL | DCP_TOKENIZE_ADD_BOS : DCP_TOKENIZE_ADD_EOS;
        if (dcp_tokenizer_encode(t, texts[k], strlen(texts[k]), flags, &ids, &n) != DCP_OK) continue;
        for (size_t i = 0; i < n; ++i)
            if (ids[i] < 0 || (uint32_t)ids[i] >= dcp_tokenizer_n_vocab(t)) abort();
        char *text;
        size_t len;
        if (dcp_tokenizer_decode(t, ids, n, k & 1 ? DCP_DECODE_SPECIAL : 0, &text, &len) == DCP_OK) {
            sink += len + (unsigned char)text[len];
            free(text);
        }
        free(ids);
    }
    /* stream the first few ids of the vocabulary */
    dcp_detokenizer *d;
    if (dcp_detokenizer_create(t, DCP_DECODE_SPECIAL, &d) == DCP_OK) {
        const char *p;
        size_t n;
        uint32_t nv = dcp_tokenizer_n_vocab(t);
        for (uint32_t i = 0; i < nv && i < 300; ++i)
            if (dcp_detokenizer_push(d, (int32_t)i, &p, &n) == DCP_OK && n) sink += (unsigned char)p[n - 1];
        if (dcp_detokenizer_flush(d, &p, &n) == DCP_OK) sink += n;
        dcp_detokenizer_destroy(d);
    }
    dcp_tokenizer_destroy(t);
}

int dcp_fuzz_gguf(const uint8_t *data, size_t size)
{
    dcp_gguf *g;
    if (dcp_gguf_open_memory(data, size, "fuzz-input", &g) != DCP_OK) {
        if (g != NULL || !dcp_last_error()[0]) abort(); /* failures must explain themselves */
        return 0;
    }
    for (uint64_t i = 0; i < dcp_gguf_kv_count(g); ++i) touch_kv(dcp_gguf_kv_at(g, i));
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); ++i) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        if (dcp_gguf_tensor_find(g, t->name) != t) abort();
        if (t->size && ((const uint8_t *)t->data < data || (const uint8_t *)t->data + t->size > data + size))
            abort();
        if (t->size) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->size - 1];
        if (dcp_ggml_type_supported(t->type) && t->n_elements <= (1u << 16)) {
            float *x = malloc(t->n_elements ? t->n_elements * sizeof *x : 1);
            if (x && dcp_gguf_tensor_to_f32(g, t, x) == DCP_OK && t->n_elements) sink += (uint64_t)(x[0] == x[0]);
            free(x);
        }
    }
    dcp_model_config c;
    if (dcp_model_config_read(g, &c) == DCP_OK) sink += c.n_embd;
    touch_tokenizer(g);
    dcp_gguf_close(g);
    return 0;
}
