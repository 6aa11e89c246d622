/* The block-quantized types on the host (src/quant/quants.c): hand-built blocks of each layout
 * decode to the values the format defines (field offsets, nibble and bit orders, scale packing),
 * the reference quantizers round-trip within the format's expected error, and the device repack
 * keeps every byte.
 *
 * Round-trip bound ("the format's expected error"): for weights uniform in [-1, 1), rounding to
 * 2^b levels spread over each block's range leaves an rms error of range / (2^b - 1) / sqrt(12),
 * i.e. rms(x - x') / rms(x) = 1 / (2^b - 1) with b the bits of a quant. The test requires
 *   0.3 / (2^b - 1) <= rms(x - x') / rms(x) <= 1.05 / (2^b - 1)
 * (the lower bound catches a quantizer that stores more than it should, e.g. a wrong layout
 * decoding to the input by accident). Measured (printed by the test):
 *   type  b  bound   measured        type  b  bound   measured
 *   Q4_0  4  0.0700  0.065           Q2_K  2  0.3500  0.225
 *   Q4_1  4  0.0700  0.061           Q3_K  3  0.1500  0.118
 *   Q5_0  5  0.0339  0.031           Q4_K  4  0.0700  0.055
 *   Q5_1  5  0.0339  0.030           Q5_K  5  0.0339  0.027
 *   IQ4_NL 4 0.0700  0.063           Q6_K  6  0.0167  0.013
 *   IQ4_XS 4 0.0700  0.063
 * (IQ4's 16 levels are not evenly spaced; the bound is that of 4 bits all the same.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "dcpvk/gguf.h"
#include "quant/quants.h"
#include "test_gguf_util.h"
#include "vkutil.h"

static const dcp_ggml_type qtypes[] = {DCP_GGML_TYPE_Q4_0, DCP_GGML_TYPE_Q4_1, DCP_GGML_TYPE_Q5_0,
                                       DCP_GGML_TYPE_Q5_1, DCP_GGML_TYPE_Q2_K, DCP_GGML_TYPE_Q3_K,
                                       DCP_GGML_TYPE_Q4_K, DCP_GGML_TYPE_Q5_K, DCP_GGML_TYPE_Q6_K,
                                       DCP_GGML_TYPE_IQ4_NL, DCP_GGML_TYPE_IQ4_XS};
static const int qbits[] = {4, 4, 5, 5, 2, 3, 4, 5, 6, 4, 4};
enum { NTYPES = sizeof qtypes / sizeof qtypes[0] };

static void put_h(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* f16 bit patterns */
enum { H_0_25 = 0x3400, H_0_5 = 0x3800, H_1 = 0x3c00, H_2 = 0x4000, H_M1 = 0xbc00 };

static float *deq(dcp_ggml_type t, const uint8_t *blk, uint32_t n)
{
    float *y = malloc(n * sizeof *y);
    DCP_ASSERT_OK(dcp_ggml_to_f32(t, blk, y, n));
    return y;
}

static void test_known_blocks_32(void **state)
{
    (void)state;
    uint8_t b[24];
    float *y;
    /* Q4_0: d | qs; weight i = low nibble of qs[i], weight 16+i = high nibble; w = d (q - 8) */
    memset(b, 0, sizeof b);
    put_h(b, H_0_5);
    for (int i = 0; i < 16; i++) b[2 + i] = (uint8_t)(i | (15 - i) << 4);
    y = deq(DCP_GGML_TYPE_Q4_0, b, 32);
    for (int i = 0; i < 16; i++) {
        assert_true(y[i] == (float)(i - 8) * 0.5f);
        assert_true(y[16 + i] == (float)(7 - i) * 0.5f);
    }
    free(y);
    /* Q4_1: d, m | qs; w = d q + m */
    memset(b, 0, sizeof b);
    put_h(b, H_0_25);
    put_h(b + 2, H_M1);
    for (int i = 0; i < 16; i++) b[4 + i] = (uint8_t)(i | (i ^ 5) << 4);
    y = deq(DCP_GGML_TYPE_Q4_1, b, 32);
    for (int i = 0; i < 16; i++) {
        assert_true(y[i] == (float)i * 0.25f - 1.0f);
        assert_true(y[16 + i] == (float)(i ^ 5) * 0.25f - 1.0f);
    }
    free(y);
    /* Q5_0: d | qh (u32 LE: bit e = 5th bit of weight e) | qs; w = d (q - 16) */
    memset(b, 0, sizeof b);
    put_h(b, H_1);
    b[2] = 0x01;             /* bit 0 */
    b[5] = 0x80;             /* bit 31 */
    b[6 + 0] = 0x21;         /* weight 0 low nibble 1, weight 16 high nibble 2 */
    b[6 + 15] = 0xf0;        /* weight 15: 0, weight 31: 15 */
    y = deq(DCP_GGML_TYPE_Q5_0, b, 32);
    assert_true(y[0] == 1.0f && y[16] == -14.0f && y[15] == -16.0f && y[31] == 15.0f && y[7] == -16.0f);
    free(y);
    /* Q5_1: d, m | qh | qs; w = d q + m */
    memset(b, 0, sizeof b);
    put_h(b, H_2);
    put_h(b + 2, H_0_5);
    b[4 + 2] = 0x10;         /* bit 20 */
    y = deq(DCP_GGML_TYPE_Q5_1, b, 32);
    for (int i = 0; i < 32; i++) assert_true(y[i] == (i == 20 ? 32.5f : 0.5f));
    free(y);
}

static void test_known_blocks_256(void **state)
{
    (void)state;
    uint8_t b[210];
    float *y;
    /* Q2_K: scales[16] | qs[64] | d | dmin. Weight 209 = 128 + 32*2 + 17: 2-bit field 2 of
     * qs[32 + 17], sub-block 8 + 4 + 1 = 13; weight 0: field 0 of qs[0], sub-block 0. */
    memset(b, 0, sizeof b);
    b[13] = 0x27;            /* scale 7, min 2 */
    b[0] = 0x31;             /* scale 1, min 3 */
    b[16 + 49] = 3 << 4;
    put_h(b + 80, H_1);
    put_h(b + 82, H_0_5);
    y = deq(DCP_GGML_TYPE_Q2_K, b, 256);
    assert_true(y[209] == 7.0f * 3.0f - 0.5f * 2.0f);
    assert_true(y[0] == -1.5f);
    assert_true(y[208] == -1.0f); /* same sub-block, q = 0 */
    free(y);
    /* Q3_K: hmask[32] | qs[64] | scales[12] | d. Weight 244 = 128 + 32*3 + 20: field 3 of
     * qs[32 + 20], high bit 4 + 3 of hmask[20], sub-block 15: low 4 bits = high nibble of
     * scales[7], high 2 bits = bits 6..7 of scales[8 + 3]. */
    memset(b, 0, sizeof b);
    b[32 + 52] = 2 << 6;
    b[20] = 0x80;
    b[96 + 7] = 0x90;
    b[96 + 11] = 0x80;
    put_h(b + 108, H_0_5);
    y = deq(DCP_GGML_TYPE_Q3_K, b, 256);
    assert_true(y[244] == 0.5f * (41 - 32) * 2.0f);
    assert_true(y[0] == 0.5f * -32.0f * -4.0f); /* all-zero fields: scale -32, q = -4 */
    free(y);
    /* Q4_K: d | dmin | scales[12] | qs[128]. Sub-block 5 (weights 160..191): scale
     * (s[9] & 15) | (s[1] >> 6) << 4 = 26, min (s[9] >> 4) | (s[5] >> 6) << 4 = 51; weight 167 =
     * high nibble of qs[64 + 7]. Sub-block 0: scale s[0] & 63, min s[4] & 63; weight 3 = low
     * nibble of qs[3]. */
    memset(b, 0, sizeof b);
    put_h(b, H_1);
    put_h(b + 2, H_0_25);
    b[4 + 9] = 0x3a;
    b[4 + 1] = 0x40;
    b[4 + 5] = 0xc0;
    b[4 + 0] = 0x05;
    b[4 + 4] = 0x02;
    b[16 + 71] = 0x90;
    b[16 + 3] = 0x0c;
    y = deq(DCP_GGML_TYPE_Q4_K, b, 256);
    assert_true(y[167] == 26.0f * 9.0f - 0.25f * 51.0f);
    assert_true(y[3] == 5.0f * 12.0f - 0.25f * 2.0f);
    assert_true(y[40] == 0.0f); /* sub-block 1: scale s[1] & 63 = 0, min s[5] & 63 = 0 */
    free(y);
    /* Q5_K: d | dmin | scales[12] | qh[32] | qs[128]; the 5th bit of weight 167 is bit 2*2 + 1
     * of qh[7]. */
    memset(b, 0, sizeof b);
    put_h(b, H_1);
    put_h(b + 2, H_0_25);
    b[4 + 9] = 0x3a;
    b[4 + 1] = 0x40;
    b[4 + 5] = 0xc0;
    b[16 + 7] = 0x20;
    b[48 + 71] = 0x90;
    y = deq(DCP_GGML_TYPE_Q5_K, b, 256);
    assert_true(y[167] == 26.0f * 25.0f - 0.25f * 51.0f);
    assert_true(y[161] == -0.25f * 51.0f); /* sub-block 5, q = 0 */
    assert_true(y[135] == 0.0f);           /* sub-block 4: scale and min 0 */
    free(y);
    /* Q6_K: ql[128] | qh[64] | scales[16] (int8) | d. Weight 241 = 128 + 32*3 + 17: high nibble of
     * ql[64 + 32 + 17], bits 6..7 of qh[32 + 17], scale 8 + 6 + 1 = 15. */
    memset(b, 0, sizeof b);
    b[113] = 0x50;
    b[128 + 49] = 0xc0;
    b[192 + 15] = (uint8_t)(int8_t)-3;
    b[192 + 0] = 2;
    put_h(b + 208, H_0_5);
    y = deq(DCP_GGML_TYPE_Q6_K, b, 256);
    assert_true(y[241] == 0.5f * -3.0f * (float)((5 | 3 << 4) - 32));
    assert_true(y[0] == 0.5f * 2.0f * -32.0f);
    free(y);
}

/* IQ4_NL and IQ4_XS: the nibbles index the 16 levels K = -127, -104, ..., 113. */
static void test_known_blocks_iq4(void **state)
{
    (void)state;
    static const int K[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
    uint8_t b[136];
    float *y;
    /* IQ4_NL: d | qs[16]; weight i = low nibble of qs[i], weight 16 + i = high nibble */
    memset(b, 0, sizeof b);
    put_h(b, H_0_5);
    for (int i = 0; i < 16; i++) b[2 + i] = (uint8_t)(i | (15 - i) << 4);
    y = deq(DCP_GGML_TYPE_IQ4_NL, b, 32);
    for (int i = 0; i < 16; i++) {
        assert_true(y[i] == 0.5f * (float)K[i]);
        assert_true(y[16 + i] == 0.5f * (float)K[15 - i]);
    }
    free(y);
    /* IQ4_XS: d | scales_h u16 | scales_l[4] | qs[128]. Sub-block 5: 6-bit scale = high nibble of
     * scales_l[2] | bits 10..11 of scales_h << 4 = 7 | 2 << 4 = 39, so (39 - 32) d; weight
     * 32 * 5 + 16 + 3 = 179 = high nibble of qs[16 * 5 + 3]. Sub-block 0: scale = low nibble of
     * scales_l[0] | bits 0..1 << 4 = 1 | 0 = 1, i.e. -31 d; weight 2 = low nibble of qs[2]. */
    memset(b, 0, sizeof b);
    put_h(b, H_0_25);
    put_h(b + 2, 2u << 10);
    b[4 + 2] = 0x70;
    b[4 + 0] = 0x01;
    b[8 + 83] = 0xc0;
    b[8 + 2] = 0x03;
    y = deq(DCP_GGML_TYPE_IQ4_XS, b, 256);
    assert_true(y[179] == 0.25f * 7.0f * (float)K[12]);
    assert_true(y[2] == 0.25f * -31.0f * (float)K[3]);
    assert_true(y[3] == 0.25f * -31.0f * (float)K[0]);
    assert_true(y[160] == 0.25f * 7.0f * (float)K[0]);
    assert_true(y[40] == 0.25f * -32.0f * (float)K[0]); /* sub-block 1: all-zero fields, scale -32 */
    free(y);
}

static double rel_rms(const float *x, const float *y, uint64_t n)
{
    double se = 0, sx = 0;
    for (uint64_t i = 0; i < n; i++) {
        se += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        sx += (double)x[i] * x[i];
    }
    return sqrt(se / sx);
}

static void test_round_trip(void **state)
{
    (void)state;
    const uint64_t n = 256 * 64;
    float *x = malloc(n * 4), *y = malloc(n * 4);
    uint8_t *q = malloc(n);
    dcp_test_rng rng = {99};
    for (uint64_t i = 0; i < n; i++) x[i] = dcp_test_rng_uniform(&rng, -1.0f, 1.0f);
    for (int t = 0; t < NTYPES; t++) {
        DCP_ASSERT_OK(dcp_ggml_from_f32(qtypes[t], x, q, n));
        DCP_ASSERT_OK(dcp_ggml_to_f32(qtypes[t], q, y, n));
        double e = rel_rms(x, y, n), expect = 1.0 / ((1 << qbits[t]) - 1);
        printf("round trip %-5s: rms error / rms %.4f (format: %.4f)\n", dcp_ggml_type_name(qtypes[t]), e, expect);
        if (!(e <= 1.05 * expect && e >= 0.3 * expect))
            fail_msg("%s: relative rms error %.4f outside [0.3, 1.05] x %.4f", dcp_ggml_type_name(qtypes[t]), e, expect);
        /* Re-quantizing the dequantized values reproduces them closely (a fixed point up to the
         * scale search). */
        float *z = malloc(n * 4);
        DCP_ASSERT_OK(dcp_ggml_from_f32(qtypes[t], y, q, n));
        DCP_ASSERT_OK(dcp_ggml_to_f32(qtypes[t], q, z, n));
        assert_true(rel_rms(y, z, n) <= 0.5 * expect);
        free(z);
    }
    /* Zeros stay zeros; sub-blocks of very different magnitudes each keep their own scale. */
    for (uint64_t i = 0; i < n; i++) x[i] = 0.0f;
    for (int t = 0; t < NTYPES; t++) {
        DCP_ASSERT_OK(dcp_ggml_from_f32(qtypes[t], x, q, n));
        DCP_ASSERT_OK(dcp_ggml_to_f32(qtypes[t], q, y, n));
        for (uint64_t i = 0; i < n; i++) assert_true(y[i] == 0.0f);
    }
    for (uint64_t i = 0; i < 256; i++) x[i] = dcp_test_rng_uniform(&rng, -1.0f, 1.0f) * (i / 32 % 2 ? 1.0f : 0.125f);
    for (int t = 0; t < NTYPES; t++) {
        DCP_ASSERT_OK(dcp_ggml_from_f32(qtypes[t], x, q, 256));
        DCP_ASSERT_OK(dcp_ggml_to_f32(qtypes[t], q, y, 256));
        double small = rel_rms(x, y, 32); /* the first 32 weights, at 1/8 of the others */
        printf("round trip %-5s: small sub-block rms error / rms %.4f\n", dcp_ggml_type_name(qtypes[t]), small);
        assert_true(small <= 1.6 / ((1 << qbits[t]) - 1));
    }
    /* Not whole blocks: refused, naming the type and the block size. */
    assert_int_equal(dcp_ggml_from_f32(DCP_GGML_TYPE_Q4_K, x, q, 128), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "multiple of 256"));
    assert_int_equal(dcp_ggml_to_f32(DCP_GGML_TYPE_Q5_1, q, y, 48), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "Q5_1"));
    free(x);
    free(y);
    free(q);
}

/* The device layout keeps every byte: bodies in GGUF order without the f16 fields, then the f16
 * fields, at the blocks' places in the whole matrix. */
static void test_repack(void **state)
{
    (void)state;
    dcp_test_rng rng = {5};
    for (int t = 0; t < NTYPES; t++) {
        const dcp_quant_layout *l = dcp_quant_layout_of(qtypes[t]);
        uint32_t be, bb;
        assert_true(dcp_ggml_type_block(qtypes[t], &be, &bb));
        assert_int_equal(be, l->block_elems);
        assert_int_equal(bb, l->block_bytes);
        assert_int_equal(l->body_words * 4 + l->scale_halves * 2, l->block_bytes);
        const uint64_t blocks = 7, first = 2, total = 10;
        uint8_t *src = malloc(blocks * bb);
        for (uint64_t i = 0; i < blocks * bb; i++) src[i] = (uint8_t)dcp_test_rng_next(&rng);
        uint64_t bytes = dcp_quant_device_bytes(l, total);
        assert_true(bytes >= total * bb && bytes <= total * bb + 2);
        uint8_t *dev = calloc(1, bytes);
        uint32_t *body = (uint32_t *)dev;
        uint16_t *halves = (uint16_t *)(body + total * l->body_words);
        dcp_quant_repack(l, src, blocks, first, body, halves);
        for (uint64_t i = 0; i < blocks; i++) {
            const uint8_t *blk = src + i * bb, *bd = (const uint8_t *)(body + (first + i) * l->body_words);
            uint32_t sb = 2 * l->scale_halves;
            assert_memory_equal(bd, blk, l->scale_at);
            assert_memory_equal(bd + l->scale_at, blk + l->scale_at + sb, bb - l->scale_at - sb);
            for (uint32_t h = 0; h < l->scale_halves; h++)
                assert_int_equal(halves[(first + i) * l->scale_halves + h], blk[l->scale_at + 2 * h] | blk[l->scale_at + 2 * h + 1] << 8);
        }
        free(src);
        free(dev);
    }
    assert_null(dcp_quant_layout_of(DCP_GGML_TYPE_Q8_0));
    assert_null(dcp_quant_layout_of(DCP_GGML_TYPE_IQ2_XS));
}

/* A llama-like directory of n_layer layers (F32 data of zeros) with rows of `e`, ffn_down rows of
 * `f`; tied: no output.weight. Returns an open reader over the bytes in *mem. */
static dcp_gguf *mix_model(uint32_t n_layer, uint64_t e, uint64_t f, int tied, uint8_t **mem)
{
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_writer_create(32, &w));
    DCP_ASSERT_OK(dcp_gguf_writer_set_string(w, "general.architecture", "llama", 5));
    DCP_ASSERT_OK(dcp_gguf_writer_set_uint(w, "llama.attention.head_count", DCP_GGUF_TYPE_UINT32, 8));
    DCP_ASSERT_OK(dcp_gguf_writer_set_uint(w, "llama.attention.head_count_kv", DCP_GGUF_TYPE_UINT32, 2));
    float *zeros = calloc(e * f + e * 64, sizeof *zeros);
    char name[64];
    uint64_t ne_e[2] = {e, 64}, ne_f[2] = {f, e}, ne_n[1] = {e};
    DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, "token_embd.weight", DCP_GGML_TYPE_F32, 2, ne_e, zeros, e * 64 * 4));
    if (!tied) DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, "output.weight", DCP_GGML_TYPE_F32, 2, ne_e, zeros, e * 64 * 4));
    for (uint32_t l = 0; l < n_layer; l++) {
        static const char *const sq[] = {"attn_q", "attn_v", "attn_output"};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "blk.%u.%s.weight", l, sq[i]);
            DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, name, DCP_GGML_TYPE_F32, 2, ne_e, zeros, e * 64 * 4));
        }
        snprintf(name, sizeof name, "blk.%u.ffn_down.weight", l);
        DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, name, DCP_GGML_TYPE_F32, 2, ne_f, zeros, e * f * 4));
        snprintf(name, sizeof name, "blk.%u.attn_norm.weight", l);
        DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, name, DCP_GGML_TYPE_F32, 1, ne_n, zeros, e * 4));
    }
    size_t n;
    *mem = tg_writer_bytes(w, &n);
    dcp_gguf_writer_destroy(w);
    free(zeros);
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open_memory(*mem, n, "mix.gguf", &g));
    return g;
}

static dcp_ggml_type plan_type(const dcp_quantize_plan *p, const dcp_gguf *g, const char *name, int *fb)
{
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, name);
    if (!t) fail_msg("no tensor %s", name);
    return dcp_quantize_tensor_type(p, t, fb);
}

/* llama-quantize's mixes: which tensor gets which type. */
static void test_mix_rules(void **state)
{
    (void)state;
    uint8_t *mem;
    dcp_gguf *g = mix_model(8, 256, 512, 0, &mem); /* more-bits layers of 8: 0, 3, 6, 7 */
    dcp_quantize_plan p;
    int fb;
    static const struct { dcp_ftype f; const char *tensor; dcp_ggml_type want; } cases[] = {
        {DCP_FTYPE_Q4_K_M, "output.weight", DCP_GGML_TYPE_Q6_K},
        {DCP_FTYPE_Q4_K_M, "token_embd.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q4_K_M, "blk.0.attn_v.weight", DCP_GGML_TYPE_Q6_K},
        {DCP_FTYPE_Q4_K_M, "blk.1.attn_v.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q4_K_M, "blk.3.attn_v.weight", DCP_GGML_TYPE_Q6_K},
        {DCP_FTYPE_Q4_K_M, "blk.5.attn_v.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q4_K_M, "blk.7.ffn_down.weight", DCP_GGML_TYPE_Q6_K},
        {DCP_FTYPE_Q4_K_M, "blk.4.ffn_down.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q4_K_M, "blk.2.attn_q.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q4_K_M, "blk.2.attn_norm.weight", DCP_GGML_TYPE_F32},
        {DCP_FTYPE_Q5_K_M, "blk.6.ffn_down.weight", DCP_GGML_TYPE_Q6_K},
        {DCP_FTYPE_Q5_K_M, "blk.1.attn_output.weight", DCP_GGML_TYPE_Q5_K},
        {DCP_FTYPE_Q4_K_S, "blk.3.attn_v.weight", DCP_GGML_TYPE_Q5_K},
        {DCP_FTYPE_Q4_K_S, "blk.4.attn_v.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q2_K, "blk.0.attn_v.weight", DCP_GGML_TYPE_Q4_K}, /* 8 heads / 2 KV heads >= 4 */
        {DCP_FTYPE_Q2_K, "blk.0.ffn_down.weight", DCP_GGML_TYPE_Q3_K},
        {DCP_FTYPE_Q2_K, "blk.0.attn_q.weight", DCP_GGML_TYPE_Q2_K},
        {DCP_FTYPE_Q3_K_M, "blk.1.attn_v.weight", DCP_GGML_TYPE_Q5_K},
        {DCP_FTYPE_Q3_K_M, "blk.2.attn_v.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q3_K_M, "blk.1.attn_output.weight", DCP_GGML_TYPE_Q4_K},
        {DCP_FTYPE_Q4_0, "output.weight", DCP_GGML_TYPE_Q6_K},
        {DCP_FTYPE_Q4_0, "blk.1.attn_v.weight", DCP_GGML_TYPE_Q4_0},
        {DCP_FTYPE_Q8_0, "output.weight", DCP_GGML_TYPE_Q8_0},
        {DCP_FTYPE_F16, "output.weight", DCP_GGML_TYPE_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DCP_ASSERT_OK(dcp_quantize_plan_init(g, cases[i].f, false, &p));
        dcp_ggml_type got = plan_type(&p, g, cases[i].tensor, &fb);
        if (got != cases[i].want)
            fail_msg("%s: %s is %s, want %s", dcp_ftype_name(cases[i].f), cases[i].tensor, dcp_ggml_type_name(got),
                     dcp_ggml_type_name(cases[i].want));
    }
    DCP_ASSERT_OK(dcp_quantize_plan_init(g, DCP_FTYPE_Q4_K_M, true, &p)); /* pure: no mix */
    assert_int_equal(plan_type(&p, g, "output.weight", &fb), DCP_GGML_TYPE_Q4_K);
    assert_int_equal(plan_type(&p, g, "blk.0.attn_v.weight", &fb), DCP_GGML_TYPE_Q4_K);
    dcp_gguf_close(g);
    free(mem);
    /* Rows that are not whole blocks: fallbacks, and the tied embedding as output. */
    g = mix_model(2, 96, 160, 1, &mem);
    DCP_ASSERT_OK(dcp_quantize_plan_init(g, DCP_FTYPE_Q4_K_M, false, &p));
    assert_int_equal(plan_type(&p, g, "token_embd.weight", &fb), DCP_GGML_TYPE_Q8_0); /* output rule: 96 % 256 */
    DCP_ASSERT_OK(dcp_quantize_plan_init(g, DCP_FTYPE_Q4_K_M, false, &p));
    assert_int_equal(plan_type(&p, g, "blk.1.attn_q.weight", &fb), DCP_GGML_TYPE_Q5_0);
    assert_true(fb);
    DCP_ASSERT_OK(dcp_quantize_plan_init(g, DCP_FTYPE_Q5_K_S, false, &p));
    assert_int_equal(plan_type(&p, g, "blk.1.attn_q.weight", &fb), DCP_GGML_TYPE_Q5_1);
    DCP_ASSERT_OK(dcp_quantize_plan_init(g, DCP_FTYPE_Q2_K, false, &p));
    assert_int_equal(plan_type(&p, g, "blk.1.attn_q.weight", &fb), DCP_GGML_TYPE_IQ4_NL);
    DCP_ASSERT_OK(dcp_quantize_plan_init(g, DCP_FTYPE_Q3_K_S, false, &p));
    assert_int_equal(plan_type(&p, g, "blk.1.attn_q.weight", &fb), DCP_GGML_TYPE_IQ4_NL);
    dcp_gguf_close(g);
    free(mem);
    assert_int_equal(dcp_quantize_fallback(DCP_GGML_TYPE_Q6_K, 96), DCP_GGML_TYPE_Q8_0);
    assert_int_equal(dcp_quantize_fallback(DCP_GGML_TYPE_Q6_K, 100), DCP_GGML_TYPE_F16);
    assert_int_equal(dcp_quantize_fallback(DCP_GGML_TYPE_Q4_0, 172), DCP_GGML_TYPE_F16);
    assert_int_equal(dcp_quantize_fallback(DCP_GGML_TYPE_Q4_K, 512), DCP_GGML_TYPE_Q4_K);
    assert_int_equal(dcp_quantize_fallback(DCP_GGML_TYPE_Q3_K, 96), DCP_GGML_TYPE_IQ4_NL);
    assert_int_equal(dcp_quantize_fallback(DCP_GGML_TYPE_IQ4_XS, 96), DCP_GGML_TYPE_IQ4_NL);
    assert_int_equal(dcp_quantize_fallback(DCP_GGML_TYPE_Q2_K, 100), DCP_GGML_TYPE_F16);
    dcp_ftype f;
    DCP_ASSERT_OK(dcp_ftype_from_name("q4_k", &f));
    assert_int_equal(f, DCP_FTYPE_Q4_K_M);
    DCP_ASSERT_OK(dcp_ftype_from_name("Q5_K_S", &f));
    assert_int_equal(f, DCP_FTYPE_Q5_K_S);
    assert_int_equal(dcp_ftype_from_name("q4_k_x", &f), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "q4_k_m"));
}

/* dcp_gguf_quantize end to end on a small file, and the writer's safety: a symbolic link or a
 * directory as the target is refused (the link's target untouched), and no temporary is left. */
static void test_quantize_file(void **state)
{
    (void)state;
    dcp_gguf *g;
    char in[256], out[256], link[256], victim[256];
    snprintf(in, sizeof in, "%s", tg_tmp_path("quant-in.gguf"));
    snprintf(out, sizeof out, "%s", tg_tmp_path("quant-out.gguf"));
    snprintf(link, sizeof link, "%s", tg_tmp_path("quant-link.gguf"));
    snprintf(victim, sizeof victim, "%s", tg_tmp_path("quant-victim"));
    FILE *f;
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_writer_create(32, &w));
    DCP_ASSERT_OK(dcp_gguf_writer_set_string(w, "general.architecture", "llama", 5));
    DCP_ASSERT_OK(dcp_gguf_writer_set_uint(w, "general.file_type", DCP_GGUF_TYPE_UINT32, 0));
    float *x = malloc(256 * 8 * 4);
    dcp_test_rng rng = {3};
    for (int i = 0; i < 256 * 8; i++) x[i] = dcp_test_rng_uniform(&rng, -1, 1);
    uint64_t ne[2] = {256, 8}, ne1[1] = {256};
    DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", DCP_GGML_TYPE_F32, 2, ne, x, 256 * 8 * 4));
    DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, "blk.0.attn_norm.weight", DCP_GGML_TYPE_F32, 1, ne1, x, 256 * 4));
    DCP_ASSERT_OK(dcp_gguf_writer_write(w, in));
    dcp_gguf_writer_destroy(w);
    dcp_quantize_config qc = DCP_QUANTIZE_CONFIG_DEFAULT;
    qc.ftype = DCP_FTYPE_Q6_K;
    DCP_ASSERT_OK(dcp_gguf_quantize(in, out, &qc, NULL, NULL));
    DCP_ASSERT_OK(dcp_gguf_open(out, &g));
    assert_int_equal(dcp_gguf_tensor_find(g, "blk.0.attn_q.weight")->type, DCP_GGML_TYPE_Q6_K);
    assert_int_equal(dcp_gguf_tensor_find(g, "blk.0.attn_norm.weight")->type, DCP_GGML_TYPE_F32);
    uint64_t ft;
    DCP_ASSERT_OK(dcp_gguf_get_uint(g, "general.file_type", &ft));
    assert_int_equal(ft, DCP_FTYPE_Q6_K);
    float y[256 * 8];
    DCP_ASSERT_OK(dcp_gguf_tensor_to_f32(g, dcp_gguf_tensor_find(g, "blk.0.attn_q.weight"), y));
    double se = 0, sx = 0;
    for (int i = 0; i < 256 * 8; i++) {
        se += (y[i] - x[i]) * (y[i] - x[i]);
        sx += x[i] * x[i];
    }
    assert_true(sqrt(se / sx) < 0.02);
    dcp_gguf_close(g);
    /* A symbolic link as the target: refused, what it points to untouched. */
    f = fopen(victim, "wb");
    fputs("keep", f);
    fclose(f);
    unlink(link);
    assert_int_equal(symlink(victim, link), 0);
    assert_int_equal(dcp_gguf_quantize(in, link, &qc, NULL, NULL), DCP_ERR_IO);
    assert_non_null(strstr(dcp_last_error(), "not a regular file"));
    struct stat sb;
    assert_int_equal(stat(victim, &sb), 0);
    assert_int_equal(sb.st_size, 4);
    /* A directory as the target: refused. */
    assert_int_equal(dcp_gguf_quantize(in, ".", &qc, NULL, NULL), DCP_ERR_IO);
    unlink(link);
    unlink(victim);
    unlink(in);
    unlink(out);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_known_blocks_32),
        cmocka_unit_test(test_known_blocks_256),
        cmocka_unit_test(test_known_blocks_iq4),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_repack),
        cmocka_unit_test(test_mix_rules),
        cmocka_unit_test(test_quantize_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
