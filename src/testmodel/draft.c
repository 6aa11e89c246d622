/* Draft models for speculative decoding tests and benchmarks: a GGUF model cut down to its first
 * layers (the same embedding, head and vocabulary, so a cheap draft that agrees with its target
 * often), and optionally one token's text changed (a vocabulary a draft must be refused for). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "testmodel/testmodel.h"

/* Whether name is "blk.<i>.<rest>" with i >= n_layer. */
static bool beyond(const char *name, uint32_t n_layer)
{
    if (strncmp(name, "blk.", 4) != 0) return false;
    char *end;
    unsigned long i = strtoul(name + 4, &end, 10);
    return end != name + 4 && *end == '.' && i >= n_layer;
}

static bool ends_with(const char *s, const char *tail)
{
    size_t a = strlen(s), b = strlen(tail);
    return a >= b && strcmp(s + a - b, tail) == 0;
}

/* Copies the string array kv with entry `change` (if < its length) given a new text. */
static dcp_status copy_tokens(dcp_gguf_writer *w, const dcp_gguf_kv *kv, int64_t change)
{
    dcp_status st = DCP_OK;
    const uint64_t n = kv->array_len;
    const char **strs = calloc(n ? n : 1, sizeof *strs);
    size_t *lens = calloc(n ? n : 1, sizeof *lens);
    if (!strs || !lens) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (uint64_t i = 0; i < n; i++) DCP_TRY(dcp_gguf_array_string(kv, i, &strs[i], &lens[i]));
    if (change >= 0 && (uint64_t)change < n) {
        strs[change] = "<dcp-vk-renamed>";
        lens[change] = strlen(strs[change]);
    }
    st = dcp_gguf_writer_set_string_array(w, kv->key, strs, lens, n);
fail:
    free(strs);
    free(lens);
    return st;
}

dcp_status dcp_test_model_cut_layers(const dcp_gguf *src, uint32_t n_layer, int64_t rename_token,
                                     dcp_gguf_writer **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    dcp_gguf_writer *w = NULL;
    if (n_layer == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "draft model: n_layer must be >= 1");
    DCP_TRY(dcp_gguf_writer_create((uint32_t)dcp_gguf_alignment(src), &w));
    for (uint64_t i = 0; i < dcp_gguf_kv_count(src); i++) {
        const dcp_gguf_kv *kv = dcp_gguf_kv_at(src, i);
        if (strcmp(kv->key, "general.alignment") == 0) continue; /* the writer writes its own */
        if (ends_with(kv->key, ".block_count")) {
            if (kv->v.u64 < n_layer) {
                st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "draft model: %s is %llu; cannot keep %u layers", kv->key,
                              (unsigned long long)kv->v.u64, n_layer);
                goto fail;
            }
            DCP_TRY(dcp_gguf_writer_set_uint(w, kv->key, kv->type, n_layer));
        } else if (ends_with(kv->key, ".leading_dense_block_count") && kv->v.u64 > n_layer) {
            DCP_TRY(dcp_gguf_writer_set_uint(w, kv->key, kv->type, n_layer));
        } else if (strcmp(kv->key, "tokenizer.ggml.tokens") == 0 && rename_token >= 0) {
            DCP_TRY(copy_tokens(w, kv, rename_token));
        } else {
            DCP_TRY(dcp_gguf_writer_copy_kv(w, kv));
        }
    }
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(src); i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(src, i);
        if (beyond(t->name, n_layer)) continue;
        DCP_TRY(dcp_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size));
    }
    *out = w;
    return DCP_OK;
fail:
    dcp_gguf_writer_destroy(w);
    return st;
}
