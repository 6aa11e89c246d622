/* GGUF reader, writer, hyperparameters and test models: stories260K read exactly as documented in
 * tests/data/README.md, writer round trips, generated test models. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "dcpvk/tokenizer.h"
#include "testmodel/testmodel.h"
#include "test_gguf_util.h"
#include "testutil.h"

static dcp_gguf *open_ok(const char *path)
{
    dcp_gguf *g = NULL;
    if (dcp_gguf_open(path, &g) != DCP_OK) fail_msg("open %s: %s", path, dcp_last_error());
    return g;
}

static uint64_t get_u(const dcp_gguf *g, const char *key)
{
    uint64_t v = 0;
    if (dcp_gguf_get_uint(g, key, &v) != DCP_OK) fail_msg("%s", dcp_last_error());
    return v;
}

static void test_stories_metadata(void **state)
{
    (void)state;
    dcp_gguf *g = open_ok(dcp_test_data_path("stories260K.gguf"));
    assert_int_equal(dcp_gguf_version(g), 3);
    assert_int_equal(dcp_gguf_file_size(g), 1185376);
    assert_int_equal(dcp_gguf_alignment(g), 32);
    assert_int_equal(dcp_gguf_data_offset(g), 14176);
    assert_null(dcp_gguf_kv_find(g, "general.alignment"));
    const char *s;
    assert_int_equal(dcp_gguf_get_string(g, "general.architecture", &s, NULL), DCP_OK);
    assert_string_equal(s, "llama");
    assert_int_equal(dcp_gguf_get_string(g, "general.name", &s, NULL), DCP_OK);
    assert_string_equal(s, "llama");
    assert_int_equal(dcp_gguf_get_string(g, "tokenizer.ggml.model", &s, NULL), DCP_OK);
    assert_string_equal(s, "llama");
    assert_null(dcp_gguf_kv_find(g, "tokenizer.ggml.pre"));
    assert_null(dcp_gguf_kv_find(g, "tokenizer.ggml.add_bos_token"));
    assert_null(dcp_gguf_kv_find(g, "tokenizer.ggml.merges"));
    assert_null(dcp_gguf_kv_find(g, "llama.rope.freq_base"));
    assert_int_equal(get_u(g, "llama.embedding_length"), 64);
    assert_int_equal(get_u(g, "llama.block_count"), 5);
    assert_int_equal(get_u(g, "llama.attention.head_count"), 8);
    assert_int_equal(get_u(g, "llama.attention.head_count_kv"), 4);
    assert_int_equal(get_u(g, "llama.rope.dimension_count"), 8);
    assert_int_equal(get_u(g, "llama.feed_forward_length"), 172);
    assert_int_equal(get_u(g, "llama.context_length"), 2048);
    assert_int_equal(get_u(g, "tokenizer.ggml.unknown_token_id"), 0);
    assert_int_equal(get_u(g, "tokenizer.ggml.bos_token_id"), 1);
    assert_int_equal(get_u(g, "tokenizer.ggml.eos_token_id"), 2);
    assert_int_equal(get_u(g, "tokenizer.ggml.seperator_token_id"), 0xFFFFFFFFu);
    assert_int_equal(get_u(g, "tokenizer.ggml.padding_token_id"), 0xFFFFFFFFu);
    double eps;
    assert_int_equal(dcp_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &eps), DCP_OK);
    assert_true(fabs(eps - 1e-5) < 1e-10);

    const dcp_gguf_kv *tok = dcp_gguf_kv_find(g, "tokenizer.ggml.tokens");
    const dcp_gguf_kv *sc = dcp_gguf_kv_find(g, "tokenizer.ggml.scores");
    const dcp_gguf_kv *ty = dcp_gguf_kv_find(g, "tokenizer.ggml.token_type");
    assert_non_null(tok);
    assert_int_equal(tok->type, DCP_GGUF_TYPE_ARRAY);
    assert_int_equal(tok->array_type, DCP_GGUF_TYPE_STRING);
    assert_int_equal(tok->array_len, 512);
    assert_int_equal(sc->array_len, 512);
    assert_int_equal(ty->array_len, 512);
    size_t len;
    int64_t t;
    double f;
    assert_int_equal(dcp_gguf_array_string(tok, 0, &s, &len), DCP_OK);
    assert_string_equal(s, "<unk>");
    assert_int_equal(dcp_gguf_array_string(tok, 1, &s, &len), DCP_OK);
    assert_string_equal(s, "<s>");
    assert_int_equal(dcp_gguf_array_string(tok, 2, &s, &len), DCP_OK);
    assert_string_equal(s, "</s>");
    for (uint32_t i = 3; i < 259; ++i) {
        char want[8];
        snprintf(want, sizeof want, "<0x%02X>", i - 3);
        assert_int_equal(dcp_gguf_array_string(tok, i, &s, &len), DCP_OK);
        assert_string_equal(s, want);
        assert_int_equal(dcp_gguf_array_int(ty, i, &t), DCP_OK);
        assert_int_equal(t, DCP_TOKEN_BYTE);
    }
    assert_int_equal(dcp_gguf_array_int(ty, 0, &t), DCP_OK);
    assert_int_equal(t, DCP_TOKEN_UNKNOWN);
    assert_int_equal(dcp_gguf_array_int(ty, 1, &t), DCP_OK);
    assert_int_equal(t, DCP_TOKEN_CONTROL);
    assert_int_equal(dcp_gguf_array_int(ty, 2, &t), DCP_OK);
    assert_int_equal(t, DCP_TOKEN_CONTROL);
    for (uint32_t i = 259; i < 512; ++i) {
        assert_int_equal(dcp_gguf_array_float(sc, i, &f), DCP_OK);
        assert_true(f == -(double)(i - 259));
        assert_int_equal(dcp_gguf_array_int(ty, i, &t), DCP_OK);
        assert_int_equal(t, DCP_TOKEN_NORMAL);
    }
    assert_int_equal(dcp_gguf_array_string(tok, 403, &s, &len), DCP_OK);
    assert_string_equal(s, "\xe2\x96\x81Once");
    /* out of range and wrong-type accesses fail cleanly */
    assert_int_equal(dcp_gguf_array_string(tok, 512, &s, &len), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_gguf_array_int(tok, 0, &t), DCP_ERR_FORMAT);
    assert_int_equal(dcp_gguf_get_bool(g, "general.name", &(bool){0}), DCP_ERR_FORMAT);
    assert_int_equal(dcp_gguf_get_uint(g, "no.such.key", &(uint64_t){0}), DCP_ERR_FORMAT);
    assert_non_null(strstr(dcp_last_error(), "no.such.key"));
    dcp_gguf_close(g);
}

static void test_stories_tensors(void **state)
{
    (void)state;
    dcp_gguf *g = open_ok(dcp_test_data_path("stories260K.gguf"));
    assert_int_equal(dcp_gguf_tensor_count(g), 48);
    struct { const char *name; uint32_t n_dims; uint64_t ne0, ne1; } want[] = {
        {"token_embd.weight", 2, 64, 512}, {"output_norm.weight", 1, 64, 1}, {"output.weight", 2, 64, 512},
    };
    uint64_t total = 0, expect_off = 0;
    for (size_t i = 0; i < 3; ++i) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, want[i].name);
        assert_non_null(t);
        assert_int_equal(t->n_dims, want[i].n_dims);
        assert_int_equal(t->ne[0], want[i].ne0);
        assert_int_equal(t->ne[1], want[i].ne1);
    }
    for (int l = 0; l < 5; ++l) {
        struct { const char *s; uint32_t n_dims; uint64_t ne0, ne1; } blk[] = {
            {"attn_q", 2, 64, 64}, {"attn_k", 2, 64, 32}, {"attn_v", 2, 64, 32}, {"attn_output", 2, 64, 64},
            {"attn_norm", 1, 64, 1}, {"ffn_norm", 1, 64, 1}, {"ffn_gate", 2, 64, 172}, {"ffn_up", 2, 64, 172},
            {"ffn_down", 2, 172, 64},
        };
        for (size_t i = 0; i < sizeof blk / sizeof blk[0]; ++i) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, blk[i].s);
            const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, name);
            if (!t) fail_msg("missing %s", name);
            assert_int_equal(t->n_dims, blk[i].n_dims);
            assert_int_equal(t->ne[0], blk[i].ne0);
            assert_int_equal(t->ne[1], blk[i].ne1);
        }
    }
    for (uint64_t i = 0; i < 48; ++i) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        assert_int_equal(t->type, DCP_GGML_TYPE_F32);
        assert_int_equal(t->size, t->n_elements * 4);
        assert_int_equal(t->offset, expect_off); /* packed in file order, 32-aligned */
        assert_ptr_equal(t->data, (const uint8_t *)dcp_gguf_tensor_at(g, 0)->data + t->offset);
        expect_off += (t->size + 31) / 32 * 32;
        total += t->n_elements;
    }
    assert_int_equal(total, 292800);
    assert_null(dcp_gguf_tensor_find(g, "blk.5.attn_q.weight"));
    /* output.weight is a byte-identical copy of token_embd.weight */
    const dcp_gguf_tensor *e = dcp_gguf_tensor_find(g, "token_embd.weight");
    const dcp_gguf_tensor *o = dcp_gguf_tensor_find(g, "output.weight");
    assert_memory_equal(e->data, o->data, e->size);
    float *x = malloc(e->n_elements * sizeof *x);
    assert_int_equal(dcp_gguf_tensor_to_f32(g, e, x), DCP_OK);
    assert_memory_equal(x, e->data, e->size);
    free(x);
    dcp_gguf_close(g);
}

static void test_stories_hparams(void **state)
{
    (void)state;
    dcp_gguf *g = open_ok(dcp_test_data_path("stories260K.gguf"));
    dcp_model_config c;
    assert_int_equal(dcp_model_config_read(g, &c), DCP_OK);
    assert_int_equal(c.arch, DCP_ARCH_LLAMA);
    assert_string_equal(c.arch_name, "llama");
    assert_int_equal(c.n_embd, 64);
    assert_int_equal(c.n_layer, 5);
    assert_int_equal(c.n_head, 8);
    assert_int_equal(c.n_head_kv, 4);
    assert_int_equal(c.head_dim, 8);
    assert_int_equal(c.head_dim_v, 8);
    assert_int_equal(c.n_rot, 8);
    assert_int_equal(c.n_ff, 172);
    assert_int_equal(c.n_ctx_train, 2048);
    assert_int_equal(c.n_vocab, 512);
    assert_true(fabsf(c.rms_eps - 1e-5f) < 1e-12f);
    assert_true(c.rope_freq_base == 10000.0f);
    assert_int_equal(c.kv_lora_rank, 0);
    dcp_gguf_close(g);
}

/* Copies every key and tensor of src into a writer. */
static dcp_gguf_writer *copy_all(const dcp_gguf *src)
{
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_writer_create((uint32_t)dcp_gguf_alignment(src), &w), DCP_OK);
    for (uint64_t i = 0; i < dcp_gguf_kv_count(src); ++i) {
        const dcp_gguf_kv *kv = dcp_gguf_kv_at(src, i);
        if (strcmp(kv->key, "general.alignment") == 0) continue; /* the writer adds it */
        if (dcp_gguf_writer_copy_kv(w, kv) != DCP_OK) fail_msg("%s", dcp_last_error());
    }
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(src); ++i) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(src, i);
        assert_int_equal(dcp_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size), DCP_OK);
    }
    return w;
}

/* Compares every key (type and value), tensor (type, shape, offset, bytes) of two files. */
static void assert_same_content(const dcp_gguf *a, const dcp_gguf *b)
{
    assert_int_equal(dcp_gguf_kv_count(a), dcp_gguf_kv_count(b));
    for (uint64_t i = 0; i < dcp_gguf_kv_count(a); ++i) {
        const dcp_gguf_kv *x = dcp_gguf_kv_at(a, i), *y = dcp_gguf_kv_find(b, x->key);
        if (!y) fail_msg("key %s missing", x->key);
        assert_int_equal(x->type, y->type);
        switch (x->type) {
        case DCP_GGUF_TYPE_STRING:
            assert_int_equal(x->str_len, y->str_len);
            assert_memory_equal(x->str, y->str, x->str_len + 1);
            break;
        case DCP_GGUF_TYPE_ARRAY:
            assert_int_equal(x->array_type, y->array_type);
            assert_int_equal(x->array_len, y->array_len);
            for (uint64_t k = 0; k < x->array_len; ++k) {
                if (x->array_type == DCP_GGUF_TYPE_STRING) {
                    const char *s1, *s2;
                    size_t l1, l2;
                    assert_int_equal(dcp_gguf_array_string(x, k, &s1, &l1), DCP_OK);
                    assert_int_equal(dcp_gguf_array_string(y, k, &s2, &l2), DCP_OK);
                    assert_int_equal(l1, l2);
                    assert_memory_equal(s1, s2, l1);
                }
            }
            if (x->array_type != DCP_GGUF_TYPE_STRING && x->array_len)
                assert_memory_equal(x->array_data, y->array_data, x->array_len * (x->array_type == DCP_GGUF_TYPE_UINT8 || x->array_type == DCP_GGUF_TYPE_INT8 || x->array_type == DCP_GGUF_TYPE_BOOL ? 1 : x->array_type == DCP_GGUF_TYPE_UINT16 || x->array_type == DCP_GGUF_TYPE_INT16 ? 2 : x->array_type == DCP_GGUF_TYPE_UINT64 || x->array_type == DCP_GGUF_TYPE_INT64 || x->array_type == DCP_GGUF_TYPE_FLOAT64 ? 8 : 4));
            break;
        default:
            assert_memory_equal(&x->v, &y->v, sizeof x->v);
            break;
        }
    }
    assert_int_equal(dcp_gguf_tensor_count(a), dcp_gguf_tensor_count(b));
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(a); ++i) {
        const dcp_gguf_tensor *x = dcp_gguf_tensor_at(a, i), *y = dcp_gguf_tensor_at(b, i);
        assert_string_equal(x->name, y->name);
        assert_int_equal(x->type, y->type);
        assert_int_equal(x->n_dims, y->n_dims);
        assert_memory_equal(x->ne, y->ne, sizeof x->ne);
        assert_int_equal(x->offset, y->offset);
        assert_int_equal(x->size, y->size);
        assert_memory_equal(x->data, y->data, x->size);
    }
}

static void test_roundtrip_stories(void **state)
{
    (void)state;
    const char *path = dcp_test_data_path("stories260K.gguf");
    size_t n_orig, n_copy;
    char *orig = dcp_test_read_file(path, &n_orig);
    dcp_gguf *g = open_ok(path);
    dcp_gguf_writer *w = copy_all(g);
    uint8_t *copy = tg_writer_bytes(w, &n_copy);
    /* same keys in the same order, same tensors packed the same way: the very same bytes */
    assert_int_equal(n_copy, n_orig);
    assert_memory_equal(copy, orig, n_orig);
    dcp_gguf *h;
    assert_int_equal(dcp_gguf_open_memory(copy, n_copy, "copy", &h), DCP_OK);
    assert_same_content(g, h);
    dcp_gguf_close(h);
    dcp_gguf_close(g);
    dcp_gguf_writer_destroy(w);
    free(copy);
    free(orig);
}

static void test_roundtrip_small(void **state)
{
    (void)state;
    size_t n;
    uint8_t *p = tg_small_file(&n);
    dcp_gguf *g;
    if (dcp_gguf_open_memory(p, n, "small", &g) != DCP_OK) fail_msg("%s", dcp_last_error());
    const dcp_gguf_kv *kv = dcp_gguf_kv_find(g, "t.u8");
    assert_int_equal(kv->type, DCP_GGUF_TYPE_UINT8);
    assert_int_equal(kv->v.u64, 200);
    assert_int_equal(dcp_gguf_kv_find(g, "t.i8")->v.i64, -100);
    assert_int_equal(dcp_gguf_kv_find(g, "t.u16")->v.u64, 60000);
    assert_int_equal(dcp_gguf_kv_find(g, "t.i16")->v.i64, -30000);
    assert_int_equal(dcp_gguf_kv_find(g, "t.u32")->v.u64, 4000000000u);
    assert_int_equal(dcp_gguf_kv_find(g, "t.i32")->v.i64, -2000000000);
    assert_true(dcp_gguf_kv_find(g, "t.u64")->v.u64 == 18000000000000000000ull);
    assert_true(dcp_gguf_kv_find(g, "t.i64")->v.i64 == -9000000000000000000ll);
    assert_true(dcp_gguf_kv_find(g, "t.f32")->v.f64 == 0.25);
    assert_true(dcp_gguf_kv_find(g, "t.f64")->v.f64 == -1.0 / 3.0);
    assert_true(dcp_gguf_kv_find(g, "t.bool")->v.b);
    kv = dcp_gguf_kv_find(g, "t.str");
    assert_int_equal(kv->str_len, 5);
    assert_memory_equal(kv->str, "h\0llo", 6);
    int64_t iv;
    uint64_t uv;
    double fv;
    const char *s;
    size_t len;
    kv = dcp_gguf_kv_find(g, "t.a.i32");
    assert_int_equal(dcp_gguf_array_int(kv, 0, &iv), DCP_OK);
    assert_int_equal(iv, -1);
    assert_int_equal(dcp_gguf_array_uint(kv, 0, &uv), DCP_ERR_FORMAT);
    assert_int_equal(dcp_gguf_array_int(kv, 3, &iv), DCP_OK);
    assert_int_equal(iv, 2147483647);
    assert_int_equal(dcp_gguf_array_uint(dcp_gguf_kv_find(g, "t.a.u8"), 2, &uv), DCP_OK);
    assert_int_equal(uv, 255);
    assert_int_equal(dcp_gguf_array_float(dcp_gguf_kv_find(g, "t.a.f32"), 1, &fv), DCP_OK);
    assert_true(fv == -2.0);
    kv = dcp_gguf_kv_find(g, "t.a.str");
    assert_int_equal(dcp_gguf_array_string(kv, 1, &s, &len), DCP_OK);
    assert_int_equal(len, 0);
    assert_int_equal(dcp_gguf_array_string(kv, 2, &s, &len), DCP_OK);
    assert_string_equal(s, "\xe2\x96\x81x");
    assert_int_equal(dcp_gguf_kv_find(g, "t.a.empty")->array_len, 0);
    float x[64];
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, "h");
    assert_int_equal(dcp_gguf_tensor_to_f32(g, t, x), DCP_OK);
    for (int i = 0; i < 8; ++i) assert_true(x[i] == (float)(i + 1));
    t = dcp_gguf_tensor_find(g, "q");
    assert_int_equal(t->size, 2 * DCP_Q8_0_BYTES);
    assert_int_equal(dcp_gguf_tensor_to_f32(g, t, x), DCP_OK);
    for (int i = 0; i < 64; ++i) assert_true(fabsf(x[i] - (float)(i - 32) / 8.0f) < 4.0f / 127.0f * 0.51f + 1e-3f);

    /* write -> read -> write again gives the same bytes; the content compares equal */
    dcp_gguf_writer *w = copy_all(g);
    size_t n2;
    uint8_t *p2 = tg_writer_bytes(w, &n2);
    assert_int_equal(n2, n);
    assert_memory_equal(p2, p, n);
    dcp_gguf *h;
    assert_int_equal(dcp_gguf_open_memory(p2, n2, "small2", &h), DCP_OK);
    assert_same_content(g, h);
    dcp_gguf_close(h);
    dcp_gguf_writer_destroy(w);
    free(p2);

    /* another alignment is written as general.alignment and honoured */
    assert_int_equal(dcp_gguf_writer_create(64, &w), DCP_OK);
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); ++i) {
        t = dcp_gguf_tensor_at(g, i);
        assert_int_equal(dcp_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->size), DCP_OK);
    }
    p2 = tg_writer_bytes(w, &n2);
    assert_int_equal(dcp_gguf_open_memory(p2, n2, "align64", &h), DCP_OK);
    assert_int_equal(dcp_gguf_alignment(h), 64);
    assert_int_equal(dcp_gguf_data_offset(h) % 64, 0);
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(h); ++i) {
        assert_int_equal(dcp_gguf_tensor_at(h, i)->offset % 64, 0);
        assert_memory_equal(dcp_gguf_tensor_at(h, i)->data, dcp_gguf_tensor_at(g, i)->data, dcp_gguf_tensor_at(g, i)->size);
    }
    dcp_gguf_close(h);
    dcp_gguf_writer_destroy(w);
    free(p2);
    dcp_gguf_close(g);
    free(p);
}

static void test_writer_errors(void **state)
{
    (void)state;
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_writer_create(48, &w), DCP_ERR_INVALID_ARGUMENT);
    assert_null(w);
    assert_int_equal(dcp_gguf_writer_create(0, &w), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_bool(w, "k", true), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_bool(w, "k", false), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "duplicated key"));
    assert_int_equal(dcp_gguf_writer_set_uint(w, "f", DCP_GGUF_TYPE_FLOAT32, 1), DCP_ERR_INVALID_ARGUMENT);
    float d[33] = {0};
    uint64_t ne[2] = {33, 1};
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "t", DCP_GGML_TYPE_Q8_0, 2, ne, d, 34), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "t", DCP_GGML_TYPE_F32, 2, ne, d, 4), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "t", DCP_GGML_TYPE_F32, 2, ne, d, sizeof d), DCP_OK);
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "t", DCP_GGML_TYPE_F32, 2, ne, d, sizeof d), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_gguf_writer_write(w, "/nonexistent-dir/x.gguf"), DCP_ERR_IO);
    assert_non_null(strstr(dcp_last_error(), "/nonexistent-dir/x.gguf"));
    dcp_gguf_writer_destroy(w);
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open("/nonexistent-dir/x.gguf", &g), DCP_ERR_IO);
    assert_null(g);
}

static void test_type_tables(void **state)
{
    (void)state;
    uint32_t be, bb;
    assert_true(dcp_ggml_type_block(DCP_GGML_TYPE_Q8_0, &be, &bb));
    assert_int_equal(be, 32);
    assert_int_equal(bb, 34);
    assert_true(dcp_ggml_type_block(DCP_GGML_TYPE_Q4_K, &be, &bb));
    assert_int_equal(be, 256);
    assert_int_equal(bb, 144);
    assert_false(dcp_ggml_type_block((dcp_ggml_type)4, &be, &bb));
    assert_string_equal(dcp_ggml_type_name(DCP_GGML_TYPE_BF16), "BF16");
    assert_null(dcp_ggml_type_name((dcp_ggml_type)77));
    dcp_ggml_type t;
    assert_int_equal(dcp_ggml_type_from_name("q8_0", &t), DCP_OK);
    assert_int_equal(t, DCP_GGML_TYPE_Q8_0);
    assert_int_equal(dcp_ggml_type_from_name("q9_9", &t), DCP_ERR_INVALID_ARGUMENT);
    assert_true(dcp_ggml_type_supported(DCP_GGML_TYPE_BF16));
    assert_true(dcp_ggml_type_supported(DCP_GGML_TYPE_Q4_0));
    assert_false(dcp_ggml_type_supported(DCP_GGML_TYPE_IQ2_XXS));

    /* F16 / BF16 round trips of exactly representable values and rounding */
    float in[8] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604644775390625e-08f, 1.0f + 1.0f / 4096.0f};
    float out[8];
    uint8_t h[16];
    assert_int_equal(dcp_ggml_from_f32(DCP_GGML_TYPE_F16, in, h, 8), DCP_OK);
    assert_int_equal(dcp_ggml_to_f32(DCP_GGML_TYPE_F16, h, out, 8), DCP_OK);
    for (int i = 0; i < 7; ++i) assert_true(out[i] == in[i]);
    assert_true(out[7] == 1.0f); /* halfway between 1 and 1+2^-10: to even */
    assert_int_equal(dcp_ggml_from_f32(DCP_GGML_TYPE_BF16, in, h, 8), DCP_OK);
    assert_int_equal(dcp_ggml_to_f32(DCP_GGML_TYPE_BF16, h, out, 8), DCP_OK);
    assert_true(out[2] == 1.0f && out[3] == -2.5f);
    /* Q8_0: error at most half a step of max|x|/127 */
    dcp_test_rng rng = {7};
    float x[96], y[96];
    uint8_t q[3 * DCP_Q8_0_BYTES];
    for (int i = 0; i < 96; ++i) x[i] = dcp_test_rng_uniform(&rng, -3.0f, 3.0f);
    assert_int_equal(dcp_ggml_from_f32(DCP_GGML_TYPE_Q8_0, x, q, 96), DCP_OK);
    assert_int_equal(dcp_ggml_to_f32(DCP_GGML_TYPE_Q8_0, q, y, 96), DCP_OK);
    for (int i = 0; i < 96; ++i) assert_true(fabsf(x[i] - y[i]) <= 3.0f / 127.0f * 0.5f + 3e-3f);
    assert_int_equal(dcp_ggml_to_f32(DCP_GGML_TYPE_MXFP4, q, y, 32), DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "MXFP4"));
}

/* A file whose tensor has a known but unsupported type opens (so its directory can be listed),
 * and reading its data fails naming the tensor and the type. */
static void test_unsupported_tensor_type(void **state)
{
    (void)state;
    dcp_gguf_writer *w;
    uint8_t blk[110] = {0};
    uint64_t ne[1] = {256};
    assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", DCP_GGML_TYPE_IQ3_S, 1, ne, blk, sizeof blk), DCP_OK);
    size_t n;
    uint8_t *p = tg_writer_bytes(w, &n);
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open_memory(p, n, "iq3s.gguf", &g), DCP_OK);
    float out[256];
    const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, 0);
    assert_int_equal(t->size, 110);
    assert_int_equal(dcp_gguf_tensor_to_f32(g, t, out), DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "blk.0.attn_q.weight"));
    assert_non_null(strstr(dcp_last_error(), "IQ3_S"));
    dcp_gguf_close(g);
    dcp_gguf_writer_destroy(w);
    free(p);
}

static void check_test_model(const dcp_test_model_config *cfg, const char *path)
{
    dcp_gguf *g = open_ok(path);
    dcp_model_config c;
    if (dcp_model_config_read(g, &c) != DCP_OK) fail_msg("%s", dcp_last_error());
    uint32_t hd = cfg->head_dim ? cfg->head_dim : cfg->n_embd / cfg->n_head;
    assert_int_equal(c.n_embd, cfg->n_embd);
    assert_int_equal(c.n_layer, cfg->n_layer);
    assert_int_equal(c.n_head, cfg->n_head);
    assert_int_equal(c.n_head_kv, cfg->n_head_kv);
    assert_int_equal(c.head_dim, hd);
    assert_int_equal(c.n_ff, cfg->n_ff);
    assert_int_equal(c.n_ctx_train, cfg->n_ctx);
    assert_int_equal(c.n_vocab, dcp_test_model_vocab_size());
    assert_int_equal(c.n_vocab % 64, 0);
    assert_int_equal(dcp_gguf_tensor_count(g), 3 + 9 * cfg->n_layer);
    const dcp_gguf_tensor *q = dcp_gguf_tensor_find(g, "blk.0.attn_q.weight");
    const dcp_gguf_tensor *k = dcp_gguf_tensor_find(g, "blk.0.attn_k.weight");
    const dcp_gguf_tensor *o = dcp_gguf_tensor_find(g, "blk.0.attn_output.weight");
    assert_non_null(q);
    assert_int_equal(q->type, cfg->weight_type);
    assert_int_equal(q->ne[0], cfg->n_embd);
    assert_int_equal(q->ne[1], (uint64_t)cfg->n_head * hd);
    assert_int_equal(k->ne[1], (uint64_t)cfg->n_head_kv * hd);
    assert_int_equal(o->ne[0], (uint64_t)cfg->n_head * hd);
    assert_int_equal(dcp_gguf_tensor_find(g, "output_norm.weight")->type, DCP_GGML_TYPE_F32);
    /* weights are in [-1/sqrt(fan_in), 1/sqrt(fan_in)], norms near 1 */
    float *x = malloc(q->n_elements * sizeof *x);
    assert_int_equal(dcp_gguf_tensor_to_f32(g, q, x), DCP_OK);
    float lim = 1.0f / sqrtf((float)cfg->n_embd) * 1.01f;
    double sum2 = 0;
    for (uint64_t i = 0; i < q->n_elements; ++i) {
        assert_true(fabsf(x[i]) <= lim);
        sum2 += (double)x[i] * x[i];
    }
    assert_true(sum2 > 0.1 * q->n_elements * lim * lim / 3.0); /* not all zero */
    free(x);
    /* its tokenizer works */
    dcp_tokenizer *t;
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    int32_t *ids;
    size_t n;
    const char *text = "Once upon a time, there was a little girl named Lily. \xc3\xa9!";
    assert_int_equal(dcp_tokenizer_encode(t, text, strlen(text), DCP_TOKENIZE_ADD_BOS, &ids, &n), DCP_OK);
    assert_int_equal(ids[0], 1);
    assert_true(n < 30);
    char *back;
    assert_int_equal(dcp_tokenizer_decode(t, ids, n, 0, &back, NULL), DCP_OK);
    assert_string_equal(back, text);
    free(back);
    free(ids);
    dcp_tokenizer_destroy(t);
    dcp_gguf_close(g);
}

static void test_test_model(void **state)
{
    (void)state;
    dcp_test_model_config cfg = DCP_TEST_MODEL_CONFIG_DEFAULT;
    char a[512], b[512];
    snprintf(a, sizeof a, "%s", tg_tmp_path("model_a.gguf"));
    snprintf(b, sizeof b, "%s", tg_tmp_path("model_b.gguf"));
    assert_int_equal(dcp_gguf_make_test_model(a, NULL), DCP_OK);
    check_test_model(&cfg, a);
    /* deterministic: the same config gives the same bytes; another seed other weights */
    assert_int_equal(dcp_gguf_make_test_model(b, &cfg), DCP_OK);
    size_t na, nb;
    char *pa = dcp_test_read_file(a, &na), *pb = dcp_test_read_file(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(pa, pb, na);
    free(pb);
    cfg.seed = 99;
    assert_int_equal(dcp_gguf_make_test_model(b, &cfg), DCP_OK);
    pb = dcp_test_read_file(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_not_equal(pa, pb, na);
    free(pa);
    free(pb);
    /* other types and shapes */
    dcp_test_model_config f16 = DCP_TEST_MODEL_CONFIG_DEFAULT;
    f16.weight_type = DCP_GGML_TYPE_F16;
    f16.n_layer = 2;
    assert_int_equal(dcp_gguf_make_test_model(b, &f16), DCP_OK);
    check_test_model(&f16, b);
    dcp_test_model_config q8 = DCP_TEST_MODEL_CONFIG_DEFAULT;
    q8.weight_type = DCP_GGML_TYPE_Q8_0;
    q8.n_embd = 64, q8.n_head = 8, q8.n_head_kv = 2, q8.head_dim = 8, q8.n_ff = 96, q8.n_layer = 1;
    assert_int_equal(dcp_gguf_make_test_model(b, &q8), DCP_OK);
    check_test_model(&q8, b);
    /* bad configs name the problem */
    dcp_test_model_config bad = DCP_TEST_MODEL_CONFIG_DEFAULT;
    bad.n_head_kv = 5;
    assert_int_equal(dcp_gguf_make_test_model(b, &bad), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "n_head_kv"));
    bad = q8;
    bad.n_ff = 100;
    assert_int_equal(dcp_gguf_make_test_model(b, &bad), DCP_ERR_INVALID_ARGUMENT);
    bad = cfg;
    bad.arch = "deepseek2";
    assert_int_equal(dcp_gguf_make_test_model(b, &bad), DCP_ERR_INVALID_ARGUMENT);
    remove(a);
    remove(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_metadata),
        cmocka_unit_test(test_stories_tensors),
        cmocka_unit_test(test_stories_hparams),
        cmocka_unit_test(test_roundtrip_stories),
        cmocka_unit_test(test_roundtrip_small),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_type_tables),
        cmocka_unit_test(test_unsupported_tensor_type),
        cmocka_unit_test(test_test_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
