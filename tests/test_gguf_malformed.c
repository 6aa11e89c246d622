/* Malformed GGUF files: each must fail with a clear error (status, file name, byte offset, what was
 * wrong) and no out-of-bounds access (this test also runs in the ASan/UBSan build). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "test_gguf_util.h"
#include "testutil.h"

#define U64MAX 0xffffffffffffffffull

static int n_variants;

/* Opening must fail with `want`; the message must name the file, the offset (for format errors)
 * and contain `needle`. */
static void expect_fail_at(const uint8_t *p, size_t n, dcp_status want, const char *needle, int line)
{
    dcp_gguf *g = (dcp_gguf *)1;
    dcp_status st = dcp_gguf_open_memory(p, n, "crafted.gguf", &g);
    ++n_variants;
    if (st != want)
        fail_msg("line %d: status %s, want %s (%s)", line, dcp_status_string(st), dcp_status_string(want),
                 dcp_last_error());
    if (g) fail_msg("line %d: out-param not NULL on failure", line);
    const char *msg = dcp_last_error();
    if (!strstr(msg, "crafted.gguf")) fail_msg("line %d: message lacks the file name: %s", line, msg);
    if (want == DCP_ERR_FORMAT && !strstr(msg, "offset"))
        fail_msg("line %d: message lacks the offset: %s", line, msg);
    if (needle && !strstr(msg, needle)) fail_msg("line %d: message lacks '%s': %s", line, needle, msg);
}
#define expect_fail(b, st, needle) expect_fail_at((b)->p, (b)->n, st, needle, __LINE__)

static void hdr(tg_bytes *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    b->n = 0;
    tg_put(b, "GGUF", 4);
    tg_u32(b, version);
    tg_u64(b, n_tensors);
    tg_u64(b, n_kv);
}

static void kv_str(tg_bytes *b, const char *k, const char *v)
{
    tg_str(b, k);
    tg_u32(b, DCP_GGUF_TYPE_STRING);
    tg_str(b, v);
}

/* A tensor info: name, dims, type, offset. */
static void tinfo(tg_bytes *b, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t type, uint64_t off)
{
    tg_str(b, name);
    tg_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) tg_u64(b, ne[d]);
    tg_u32(b, type);
    tg_u64(b, off);
}

static void data(tg_bytes *b, size_t n)
{
    tg_pad(b, 32);
    for (size_t i = 0; i < n; ++i) tg_put(b, "\x3f", 1);
}

static void test_empty_magic_version(void **state)
{
    (void)state;
    tg_bytes b = {0};
    /* empty file, through the real open path (mmap of 0 bytes is not attempted) */
    const char *path = tg_tmp_path("empty.gguf");
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f);
    dcp_gguf *g = (dcp_gguf *)1;
    assert_int_equal(dcp_gguf_open(path, &g), DCP_ERR_FORMAT);
    assert_null(g);
    assert_non_null(strstr(dcp_last_error(), "empty file"));
    assert_non_null(strstr(dcp_last_error(), path));
    remove(path);
    ++n_variants;
    uint8_t none = 0;
    expect_fail_at(&none, 0, DCP_ERR_FORMAT, "empty file", __LINE__);
    /* a directory is not a GGUF file */
    assert_int_equal(dcp_gguf_open(".", &g), DCP_ERR_IO);
    assert_null(g);
    ++n_variants;

    hdr(&b, 3, 0, 0);
    memcpy(b.p, "GGUX", 4);
    expect_fail(&b, DCP_ERR_FORMAT, "bad magic");
    expect_fail_at(b.p, 3, DCP_ERR_FORMAT, "bad magic", __LINE__);
    memcpy(b.p, "GGML", 4);
    expect_fail(&b, DCP_ERR_FORMAT, "bad magic");
    for (uint32_t v = 0; v < 8; ++v) {
        if (v == 2 || v == 3) continue;
        hdr(&b, v, 0, 0);
        expect_fail(&b, DCP_ERR_UNSUPPORTED, "version");
    }
    hdr(&b, 0x03000000u, 0, 0);
    expect_fail(&b, DCP_ERR_UNSUPPORTED, "big-endian");
    hdr(&b, 0xffffffffu, 0, 0);
    expect_fail(&b, DCP_ERR_UNSUPPORTED, "version");
    /* versions 2 and 3 with nothing in them are valid */
    for (uint32_t v = 2; v <= 3; ++v) {
        hdr(&b, v, 0, 0);
        assert_int_equal(dcp_gguf_open_memory(b.p, b.n, "ok", &g), DCP_OK);
        assert_int_equal(dcp_gguf_version(g), v);
        dcp_gguf_close(g);
    }
    free(b.p);
}

static void test_every_truncation(void **state)
{
    (void)state;
    size_t n;
    uint8_t *p = tg_small_file(&n);
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open_memory(p, n, "small", &g), DCP_OK);
    const dcp_gguf_tensor *last = dcp_gguf_tensor_at(g, dcp_gguf_tensor_count(g) - 1);
    size_t data_end = (size_t)(dcp_gguf_data_offset(g) + last->offset + last->size);
    dcp_gguf_close(g);
    int failed = 0, passed = 0;
    for (size_t k = 0; k < n; ++k) {
        /* an exact-size copy, so ASan sees any read past the end */
        uint8_t *c = malloc(k ? k : 1);
        memcpy(c, p, k);
        if (k >= data_end) { /* only the final padding is missing: still valid */
            assert_int_equal(dcp_gguf_open_memory(c, k, "crafted.gguf", &g), DCP_OK);
            dcp_gguf_close(g);
            ++passed;
        } else {
            expect_fail_at(c, k, DCP_ERR_FORMAT, NULL, __LINE__);
            ++failed;
        }
        free(c);
    }
    print_message("small file: %zu bytes, %d truncations rejected, %d (padding only) accepted\n", n, failed, passed);
    free(p);

    /* every truncation of the stories260K header and the start of its data */
    size_t sn;
    char *s = dcp_test_read_file(dcp_test_data_path("stories260K.gguf"), &sn);
    for (size_t k = 0; k < 14176 + 64; ++k) {
        uint8_t *c = malloc(k ? k : 1);
        memcpy(c, s, k);
        expect_fail_at(c, k, DCP_ERR_FORMAT, NULL, __LINE__);
        free(c);
    }
    /* the last tensor one byte short */
    expect_fail_at((const uint8_t *)s, sn - 1, DCP_ERR_FORMAT, "extends past end of file", __LINE__);
    free(s);
}

static void test_huge_counts(void **state)
{
    (void)state;
    tg_bytes b = {0};
    const uint64_t huge[] = {U64MAX, U64MAX - 1, 1ull << 63, (1ull << 63) - 1, 1ull << 62, 1ull << 61,
                             (1ull << 61) + 1, 1ull << 32, 0xffffffffull, 1000000};
    for (size_t i = 0; i < sizeof huge / sizeof huge[0]; ++i) {
        uint64_t h = huge[i];
        hdr(&b, 3, h, 0);
        expect_fail(&b, DCP_ERR_FORMAT, "tensor count");
        hdr(&b, 3, 0, h);
        expect_fail(&b, DCP_ERR_FORMAT, "key/value count");
        /* key length */
        hdr(&b, 3, 0, 1);
        tg_u64(&b, h);
        tg_put(&b, "abcdefgh", 8);
        expect_fail(&b, DCP_ERR_FORMAT, "length");
        /* string value length */
        hdr(&b, 3, 0, 1);
        tg_str(&b, "k");
        tg_u32(&b, DCP_GGUF_TYPE_STRING);
        tg_u64(&b, h);
        tg_put(&b, "abcdefgh", 8);
        expect_fail(&b, DCP_ERR_FORMAT, "runs past the end");
        /* array lengths of every element size (length * size may wrap around 2^64) */
        static const uint32_t etypes[] = {DCP_GGUF_TYPE_UINT8, DCP_GGUF_TYPE_UINT16, DCP_GGUF_TYPE_UINT32,
                                          DCP_GGUF_TYPE_UINT64, DCP_GGUF_TYPE_FLOAT64, DCP_GGUF_TYPE_BOOL,
                                          DCP_GGUF_TYPE_STRING};
        for (size_t e = 0; e < sizeof etypes / sizeof etypes[0]; ++e) {
            hdr(&b, 3, 0, 1);
            tg_str(&b, "arr");
            tg_u32(&b, DCP_GGUF_TYPE_ARRAY);
            tg_u32(&b, etypes[e]);
            tg_u64(&b, h);
            tg_u64(&b, 0);
            expect_fail(&b, DCP_ERR_FORMAT, "array");
        }
        /* a dimension */
        hdr(&b, 3, 1, 0);
        tinfo(&b, "t", 2, (uint64_t[]){32, h}, DCP_GGML_TYPE_F32, 0);
        data(&b, 128);
        expect_fail(&b, DCP_ERR_FORMAT, "tensor t");
        /* a data offset (aligned) */
        hdr(&b, 3, 1, 0);
        tinfo(&b, "t", 1, (uint64_t[]){8}, DCP_GGML_TYPE_F32, h & ~31ull);
        data(&b, 32);
        expect_fail(&b, DCP_ERR_FORMAT, "tensor t");
    }
    /* element count overflow: 2^32 * 2^32 */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t", 2, (uint64_t[]){1ull << 32, 1ull << 32}, DCP_GGML_TYPE_F32, 0);
    data(&b, 32);
    expect_fail(&b, DCP_ERR_FORMAT, "overflows");
    /* byte size overflow: 2^62 F32 elements = 2^64 bytes */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t", 2, (uint64_t[]){1ull << 31, 1ull << 31}, DCP_GGML_TYPE_F32, 0);
    data(&b, 32);
    expect_fail(&b, DCP_ERR_FORMAT, "overflows");
    /* offset + size wraps around */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "t", 1, (uint64_t[]){64}, DCP_GGML_TYPE_F32, U64MAX - 127);
    data(&b, 256);
    expect_fail(&b, DCP_ERR_FORMAT, "extends past end of file");
    free(b.p);
}

static void test_bad_values(void **state)
{
    (void)state;
    tg_bytes b = {0};
    /* string length one past the end */
    hdr(&b, 3, 0, 1);
    tg_str(&b, "k");
    tg_u32(&b, DCP_GGUF_TYPE_STRING);
    tg_u64(&b, 6);
    tg_put(&b, "hello", 5);
    expect_fail(&b, DCP_ERR_FORMAT, "string value length 6 runs past the end");
    /* unknown value types */
    const uint32_t bad_types[] = {13, 14, 255, 0xffffffffu};
    for (size_t i = 0; i < 4; ++i) {
        hdr(&b, 3, 0, 1);
        tg_str(&b, "k");
        tg_u32(&b, bad_types[i]);
        tg_u64(&b, 0);
        expect_fail(&b, DCP_ERR_FORMAT, "unknown value type");
        hdr(&b, 3, 0, 1);
        tg_str(&b, "k");
        tg_u32(&b, DCP_GGUF_TYPE_ARRAY);
        tg_u32(&b, bad_types[i]);
        tg_u64(&b, 0);
        expect_fail(&b, DCP_ERR_FORMAT, "unknown array element type");
    }
    /* arrays of arrays */
    hdr(&b, 3, 0, 1);
    tg_str(&b, "k");
    tg_u32(&b, DCP_GGUF_TYPE_ARRAY);
    tg_u32(&b, DCP_GGUF_TYPE_ARRAY);
    tg_u64(&b, 1);
    tg_u32(&b, DCP_GGUF_TYPE_UINT8);
    tg_u64(&b, 0);
    expect_fail(&b, DCP_ERR_UNSUPPORTED, "arrays of arrays");
    /* bools other than 0/1 */
    hdr(&b, 3, 0, 1);
    tg_str(&b, "k");
    tg_u32(&b, DCP_GGUF_TYPE_BOOL);
    tg_put(&b, "\x02", 1);
    expect_fail(&b, DCP_ERR_FORMAT, "bool");
    hdr(&b, 3, 0, 1);
    tg_str(&b, "k");
    tg_u32(&b, DCP_GGUF_TYPE_ARRAY);
    tg_u32(&b, DCP_GGUF_TYPE_BOOL);
    tg_u64(&b, 2);
    tg_put(&b, "\x01\x07", 2);
    expect_fail(&b, DCP_ERR_FORMAT, "bool element 1");
    /* a key with a NUL byte */
    hdr(&b, 3, 0, 1);
    tg_u64(&b, 3);
    tg_put(&b, "a\0b", 3);
    tg_u32(&b, DCP_GGUF_TYPE_UINT8);
    tg_put(&b, "\x01", 1);
    expect_fail(&b, DCP_ERR_FORMAT, "NUL");
    /* duplicated key */
    hdr(&b, 3, 0, 3);
    kv_str(&b, "general.name", "a");
    kv_str(&b, "other", "b");
    kv_str(&b, "general.name", "c");
    expect_fail(&b, DCP_ERR_FORMAT, "duplicated key 'general.name'");
    /* general.alignment: wrong type, zero, not a power of two */
    hdr(&b, 3, 0, 1);
    tg_str(&b, "general.alignment");
    tg_u32(&b, DCP_GGUF_TYPE_UINT64);
    tg_u64(&b, 32);
    expect_fail(&b, DCP_ERR_FORMAT, "general.alignment");
    const uint32_t aligns[] = {0, 3, 48, 0x80000001u};
    for (size_t i = 0; i < 4; ++i) {
        hdr(&b, 3, 0, 1);
        tg_str(&b, "general.alignment");
        tg_u32(&b, DCP_GGUF_TYPE_UINT32);
        tg_u32(&b, aligns[i]);
        expect_fail(&b, DCP_ERR_FORMAT, "power of two");
    }
    free(b.p);
}

static void test_bad_tensors(void **state)
{
    (void)state;
    tg_bytes b = {0};
    const uint64_t ne8[1] = {8};
    /* dimension counts */
    const uint32_t dims[] = {0, 5, 0xffffffffu};
    for (size_t i = 0; i < 3; ++i) {
        hdr(&b, 3, 1, 0);
        tg_str(&b, "t");
        tg_u32(&b, dims[i]);
        tg_u64(&b, 8);
        tg_u32(&b, 0);
        tg_u64(&b, 0);
        data(&b, 32);
        expect_fail(&b, DCP_ERR_FORMAT, "dimensions");
    }
    /* unknown tensor types: removed codes, out of range */
    const uint32_t types[] = {4, 5, 31, 32, 33, 36, 37, 38, 40, 77, 0xffffffffu};
    for (size_t i = 0; i < sizeof types / sizeof types[0]; ++i) {
        hdr(&b, 3, 1, 0);
        tinfo(&b, "blk.0.attn_q.weight", 1, ne8, types[i], 0);
        data(&b, 64);
        expect_fail(&b, DCP_ERR_FORMAT, "unknown tensor type");
    }
    /* ne[0] not a multiple of the block */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "q", 1, (uint64_t[]){48}, DCP_GGML_TYPE_Q8_0, 0);
    data(&b, 64);
    expect_fail(&b, DCP_ERR_FORMAT, "block size");
    /* data past the end, by one byte */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "blk.3.attn_q.weight", 1, (uint64_t[]){16}, DCP_GGML_TYPE_F32, 0);
    data(&b, 63);
    expect_fail(&b, DCP_ERR_FORMAT, "tensor blk.3.attn_q.weight: data [");
    expect_fail(&b, DCP_ERR_FORMAT, "extends past end of file (size");
    /* misaligned data offsets */
    const uint64_t mis[] = {1, 4, 16, 31, 33};
    for (size_t i = 0; i < 5; ++i) {
        hdr(&b, 3, 1, 0);
        tinfo(&b, "t", 1, ne8, DCP_GGML_TYPE_F32, mis[i]);
        data(&b, 128);
        expect_fail(&b, DCP_ERR_FORMAT, "not a multiple of the alignment");
    }
    /* misaligned for a declared alignment of 64 */
    hdr(&b, 3, 1, 1);
    tg_str(&b, "general.alignment");
    tg_u32(&b, DCP_GGUF_TYPE_UINT32);
    tg_u32(&b, 64);
    tinfo(&b, "t", 1, ne8, DCP_GGML_TYPE_F32, 32);
    data(&b, 128);
    expect_fail(&b, DCP_ERR_FORMAT, "alignment 64");
    /* overlapping tensors: same offset; partial overlap; listed out of order */
    const uint64_t offs[][2] = {{0, 0}, {0, 32}, {64, 32}, {32, 0}};
    for (size_t i = 0; i < 4; ++i) {
        hdr(&b, 3, 2, 0);
        tinfo(&b, "a", 1, (uint64_t[]){16}, DCP_GGML_TYPE_F32, offs[i][0]);
        tinfo(&b, "b", 1, (uint64_t[]){32}, DCP_GGML_TYPE_F32, offs[i][1]);
        data(&b, 256);
        expect_fail(&b, DCP_ERR_FORMAT, "overlaps");
    }
    /* touching is fine */
    hdr(&b, 3, 2, 0);
    tinfo(&b, "a", 1, (uint64_t[]){8}, DCP_GGML_TYPE_F32, 0);
    tinfo(&b, "b", 1, (uint64_t[]){8}, DCP_GGML_TYPE_F32, 32);
    data(&b, 64);
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open_memory(b.p, b.n, "ok", &g), DCP_OK);
    dcp_gguf_close(g);
    /* duplicated tensor name */
    hdr(&b, 3, 2, 0);
    tinfo(&b, "a", 1, ne8, DCP_GGML_TYPE_F32, 0);
    tinfo(&b, "a", 1, ne8, DCP_GGML_TYPE_F32, 32);
    data(&b, 64);
    expect_fail(&b, DCP_ERR_FORMAT, "duplicated tensor name 'a'");
    /* tensors but the data section would start past the end */
    hdr(&b, 3, 1, 0);
    tinfo(&b, "a", 1, (uint64_t[]){0}, DCP_GGML_TYPE_F32, 0);
    expect_fail(&b, DCP_ERR_FORMAT, "data section");
    free(b.p);
}

/* A small llama file without `skip` (or with `key` replaced by a bad value). */
static uint8_t *llama_file(const char *skip, const char *arch, size_t *n)
{
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
    if (!skip || strcmp(skip, "general.architecture"))
        assert_int_equal(dcp_gguf_writer_set_string(w, "general.architecture", arch, strlen(arch)), DCP_OK);
    static const struct { const char *k; uint32_t v; } hp[] = {
        {"llama.embedding_length", 32}, {"llama.block_count", 1}, {"llama.attention.head_count", 4},
        {"llama.attention.head_count_kv", 2}, {"llama.feed_forward_length", 64},
        {"llama.context_length", 128}, {"llama.vocab_size", 16},
    };
    for (size_t i = 0; i < sizeof hp / sizeof hp[0]; ++i)
        if (!skip || strcmp(skip, hp[i].k))
            assert_int_equal(dcp_gguf_writer_set_uint(w, hp[i].k, DCP_GGUF_TYPE_UINT32, hp[i].v), DCP_OK);
    if (!skip || strcmp(skip, "llama.attention.layer_norm_rms_epsilon"))
        assert_int_equal(dcp_gguf_writer_set_float(w, "llama.attention.layer_norm_rms_epsilon", DCP_GGUF_TYPE_FLOAT32, 1e-5), DCP_OK);
    uint8_t *p = tg_writer_bytes(w, n);
    dcp_gguf_writer_destroy(w);
    return p;
}

static void expect_hparams_fail(const uint8_t *p, size_t n, dcp_status want, const char *needle)
{
    dcp_gguf *g;
    dcp_model_config c;
    assert_int_equal(dcp_gguf_open_memory(p, n, "crafted.gguf", &g), DCP_OK);
    assert_int_equal(dcp_model_config_read(g, &c), want);
    if (!strstr(dcp_last_error(), needle) || !strstr(dcp_last_error(), "crafted.gguf"))
        fail_msg("message '%s' lacks '%s'", dcp_last_error(), needle);
    dcp_gguf_close(g);
    ++n_variants;
}

static void test_missing_required_keys(void **state)
{
    (void)state;
    size_t n;
    uint8_t *p = llama_file(NULL, "llama", &n);
    dcp_gguf *g;
    dcp_model_config c;
    assert_int_equal(dcp_gguf_open_memory(p, n, "ok", &g), DCP_OK);
    assert_int_equal(dcp_model_config_read(g, &c), DCP_OK);
    assert_int_equal(c.head_dim, 8);
    dcp_gguf_close(g);
    free(p);
    static const char *const required[] = {
        "general.architecture", "llama.embedding_length", "llama.block_count", "llama.attention.head_count",
        "llama.feed_forward_length", "llama.context_length", "llama.attention.layer_norm_rms_epsilon",
    };
    for (size_t i = 0; i < sizeof required / sizeof required[0]; ++i) {
        p = llama_file(required[i], "llama", &n);
        char needle[128];
        snprintf(needle, sizeof needle, "missing required key '%s'", required[i]);
        expect_hparams_fail(p, n, DCP_ERR_FORMAT, needle);
        free(p);
    }
    /* deepseek2 is read with its own keys (tests/test_deepseek2_ref.c covers them). */
    p = llama_file(NULL, "deepseek2", &n);
    expect_hparams_fail(p, n, DCP_ERR_FORMAT, "missing required key 'deepseek2.embedding_length'");
    free(p);
    p = llama_file(NULL, "mamba", &n);
    expect_hparams_fail(p, n, DCP_ERR_UNSUPPORTED, "mamba");
    free(p);
    /* bad values: wrong type, zero, head_count_kv not dividing head_count */
    tg_bytes b = {0};
    hdr(&b, 3, 0, 2);
    kv_str(&b, "general.architecture", "llama");
    kv_str(&b, "llama.embedding_length", "32");
    dcp_gguf *h;
    assert_int_equal(dcp_gguf_open_memory(b.p, b.n, "crafted.gguf", &h), DCP_OK);
    assert_int_equal(dcp_model_config_read(h, &c), DCP_ERR_FORMAT);
    assert_non_null(strstr(dcp_last_error(), "llama.embedding_length"));
    dcp_gguf_close(h);
    ++n_variants;
    free(b.p);
    dcp_gguf_writer *w;
    for (int k = 0; k < 2; ++k) {
        assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_string(w, "general.architecture", "llama", 5), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_uint(w, "llama.embedding_length", DCP_GGUF_TYPE_UINT32, 32), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_uint(w, "llama.block_count", DCP_GGUF_TYPE_UINT32, k == 0 ? 0 : 1), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_uint(w, "llama.attention.head_count", DCP_GGUF_TYPE_UINT32, 4), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_uint(w, "llama.attention.head_count_kv", DCP_GGUF_TYPE_UINT32, 3), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_uint(w, "llama.feed_forward_length", DCP_GGUF_TYPE_UINT32, 64), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_uint(w, "llama.context_length", DCP_GGUF_TYPE_UINT32, 64), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_float(w, "llama.attention.layer_norm_rms_epsilon", DCP_GGUF_TYPE_FLOAT32, 1e-5), DCP_OK);
        p = tg_writer_bytes(w, &n);
        expect_hparams_fail(p, n, DCP_ERR_FORMAT, k == 0 ? "llama.block_count" : "head_count_kv");
        free(p);
        dcp_gguf_writer_destroy(w);
    }
}

static int teardown(void **state)
{
    (void)state;
    print_message("malformed variants rejected with a clear error: %d\n", n_variants);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_magic_version),
        cmocka_unit_test(test_every_truncation),
        cmocka_unit_test(test_huge_counts),
        cmocka_unit_test(test_bad_values),
        cmocka_unit_test(test_bad_tensors),
        cmocka_unit_test(test_missing_required_keys),
    };
    return cmocka_run_group_tests(tests, NULL, teardown);
}
