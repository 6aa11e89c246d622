/* Helpers shared by the GGUF tests (see test_gguf_util.h). */
#include "test_gguf_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

void tg_put(tg_bytes *b, const void *data, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n) cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

void tg_u32(tg_bytes *b, uint32_t v)
{
    uint8_t t[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    tg_put(b, t, 4);
}

void tg_u64(tg_bytes *b, uint64_t v)
{
    tg_u32(b, (uint32_t)v);
    tg_u32(b, (uint32_t)(v >> 32));
}

void tg_str(tg_bytes *b, const char *s)
{
    tg_u64(b, strlen(s));
    tg_put(b, s, strlen(s));
}

void tg_pad(tg_bytes *b, size_t a)
{
    static const uint8_t z[64];
    while (b->n % a) tg_put(b, z, 1);
}

const char *tg_tmp_path(const char *name)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "tmp_gguf_%ld_%s", (long)getpid(), name);
    return buf;
}

uint8_t *tg_writer_bytes(const dcp_gguf_writer *w, size_t *n)
{
    char path[512];
    snprintf(path, sizeof path, "%s", tg_tmp_path("writer_bytes.gguf"));
    if (dcp_gguf_writer_write(w, path) != DCP_OK) fail_msg("write: %s", dcp_last_error());
    uint8_t *p = (uint8_t *)dcp_test_read_file(path, n);
    remove(path);
    return p;
}

dcp_gguf_writer *tg_small_writer(void)
{
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string(w, "general.architecture", "llama", 5), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_uint(w, "t.u8", DCP_GGUF_TYPE_UINT8, 200), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_int(w, "t.i8", DCP_GGUF_TYPE_INT8, -100), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_uint(w, "t.u16", DCP_GGUF_TYPE_UINT16, 60000), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_int(w, "t.i16", DCP_GGUF_TYPE_INT16, -30000), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_uint(w, "t.u32", DCP_GGUF_TYPE_UINT32, 4000000000u), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_int(w, "t.i32", DCP_GGUF_TYPE_INT32, -2000000000), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_uint(w, "t.u64", DCP_GGUF_TYPE_UINT64, 18000000000000000000ull), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_int(w, "t.i64", DCP_GGUF_TYPE_INT64, -9000000000000000000ll), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_float(w, "t.f32", DCP_GGUF_TYPE_FLOAT32, 0.25), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_float(w, "t.f64", DCP_GGUF_TYPE_FLOAT64, -1.0 / 3.0), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_bool(w, "t.bool", true), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string(w, "t.str", "h\0llo", 5), DCP_OK);
    static const uint8_t au8[3] = {1, 2, 255};
    static const int32_t ai32[4] = {-1, 0, 1, 2147483647};
    static const float af32[2] = {1.5f, -2.0f};
    static const uint8_t abool[3] = {1, 0, 1};
    static const char *const astr[3] = {"a", "", "\xe2\x96\x81x"};
    assert_int_equal(dcp_gguf_writer_set_array(w, "t.a.u8", DCP_GGUF_TYPE_UINT8, au8, 3), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_array(w, "t.a.i32", DCP_GGUF_TYPE_INT32, ai32, 4), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_array(w, "t.a.f32", DCP_GGUF_TYPE_FLOAT32, af32, 2), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_array(w, "t.a.bool", DCP_GGUF_TYPE_BOOL, abool, 3), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string_array(w, "t.a.str", astr, NULL, 3), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_array(w, "t.a.empty", DCP_GGUF_TYPE_UINT64, NULL, 0), DCP_OK);
    static const struct { const char *k; uint32_t v; } hp[] = {
        {"llama.embedding_length", 32}, {"llama.block_count", 1}, {"llama.attention.head_count", 4},
        {"llama.attention.head_count_kv", 2}, {"llama.feed_forward_length", 64},
        {"llama.context_length", 128}, {"llama.vocab_size", 16},
    };
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; ++i)
        assert_int_equal(dcp_gguf_writer_set_uint(w, hp[i].k, DCP_GGUF_TYPE_UINT32, hp[i].v), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_float(w, "llama.attention.layer_norm_rms_epsilon",
                                               DCP_GGUF_TYPE_FLOAT32, 1e-5), DCP_OK);
    float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint64_t ne_a[2] = {4, 2};
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "a", DCP_GGML_TYPE_F32, 2, ne_a, a, sizeof a), DCP_OK);
    uint8_t h[16];
    uint64_t ne_h[1] = {8};
    assert_int_equal(dcp_ggml_from_f32(DCP_GGML_TYPE_F16, a, h, 8), DCP_OK);
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "h", DCP_GGML_TYPE_F16, 1, ne_h, h, sizeof h), DCP_OK);
    float q[64];
    for (int i = 0; i < 64; ++i) q[i] = (float)(i - 32) / 8.0f;
    uint8_t qb[2 * DCP_Q8_0_BYTES];
    uint64_t ne_q[2] = {32, 2};
    assert_int_equal(dcp_ggml_from_f32(DCP_GGML_TYPE_Q8_0, q, qb, 64), DCP_OK);
    assert_int_equal(dcp_gguf_writer_add_tensor(w, "q", DCP_GGML_TYPE_Q8_0, 2, ne_q, qb, sizeof qb), DCP_OK);
    return w;
}

uint8_t *tg_small_file(size_t *n)
{
    dcp_gguf_writer *w = tg_small_writer();
    uint8_t *p = tg_writer_bytes(w, n);
    dcp_gguf_writer_destroy(w);
    return p;
}
