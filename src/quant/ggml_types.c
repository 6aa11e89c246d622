/* ggml tensor-type tables (include/dcpvk/quant.h), block layouts, and the conversions between f32
 * and the tensor types dcp-vk reads (F32, F16, BF16, Q8_0, and the block-quantized types of
 * src/quant/quants.c: Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS). */
#include "dcpvk/dtype.h"
#include "dcpvk/quant.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#include "common/error.h"
#include "quant/quants.h"

typedef struct ggml_type_info {
    dcp_ggml_type type;
    const char *name;
    uint32_t block_elems;
    uint32_t block_bytes;
} ggml_type_info;

/* Block layouts of every ggml type with a stable code (codes 4, 5 and 31..33, 36..38 were
 * removed from ggml and are unknown here). */
static const ggml_type_info ggml_types[] = {
    {DCP_GGML_TYPE_F32, "F32", 1, 4},
    {DCP_GGML_TYPE_F16, "F16", 1, 2},
    {DCP_GGML_TYPE_Q4_0, "Q4_0", 32, 18},
    {DCP_GGML_TYPE_Q4_1, "Q4_1", 32, 20},
    {DCP_GGML_TYPE_Q5_0, "Q5_0", 32, 22},
    {DCP_GGML_TYPE_Q5_1, "Q5_1", 32, 24},
    {DCP_GGML_TYPE_Q8_0, "Q8_0", 32, 34},
    {DCP_GGML_TYPE_Q8_1, "Q8_1", 32, 36},
    {DCP_GGML_TYPE_Q2_K, "Q2_K", 256, 84},
    {DCP_GGML_TYPE_Q3_K, "Q3_K", 256, 110},
    {DCP_GGML_TYPE_Q4_K, "Q4_K", 256, 144},
    {DCP_GGML_TYPE_Q5_K, "Q5_K", 256, 176},
    {DCP_GGML_TYPE_Q6_K, "Q6_K", 256, 210},
    {DCP_GGML_TYPE_Q8_K, "Q8_K", 256, 292},
    {DCP_GGML_TYPE_IQ2_XXS, "IQ2_XXS", 256, 66},
    {DCP_GGML_TYPE_IQ2_XS, "IQ2_XS", 256, 74},
    {DCP_GGML_TYPE_IQ3_XXS, "IQ3_XXS", 256, 98},
    {DCP_GGML_TYPE_IQ1_S, "IQ1_S", 256, 50},
    {DCP_GGML_TYPE_IQ4_NL, "IQ4_NL", 32, 18},
    {DCP_GGML_TYPE_IQ3_S, "IQ3_S", 256, 110},
    {DCP_GGML_TYPE_IQ2_S, "IQ2_S", 256, 82},
    {DCP_GGML_TYPE_IQ4_XS, "IQ4_XS", 256, 136},
    {DCP_GGML_TYPE_I8, "I8", 1, 1},
    {DCP_GGML_TYPE_I16, "I16", 1, 2},
    {DCP_GGML_TYPE_I32, "I32", 1, 4},
    {DCP_GGML_TYPE_I64, "I64", 1, 8},
    {DCP_GGML_TYPE_F64, "F64", 1, 8},
    {DCP_GGML_TYPE_IQ1_M, "IQ1_M", 256, 56},
    {DCP_GGML_TYPE_BF16, "BF16", 1, 2},
    {DCP_GGML_TYPE_TQ1_0, "TQ1_0", 256, 54},
    {DCP_GGML_TYPE_TQ2_0, "TQ2_0", 256, 66},
    {DCP_GGML_TYPE_MXFP4, "MXFP4", 32, 17},
};

static const ggml_type_info *ggml_info(dcp_ggml_type type)
{
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; ++i)
        if (ggml_types[i].type == type) return &ggml_types[i];
    return NULL;
}

const char *dcp_ggml_type_name(dcp_ggml_type type)
{
    const ggml_type_info *info = ggml_info(type);
    return info ? info->name : NULL;
}

dcp_status dcp_ggml_type_from_name(const char *name, dcp_ggml_type *out)
{
    for (size_t i = 0; i < sizeof ggml_types / sizeof ggml_types[0]; ++i) {
        if (strcasecmp(name, ggml_types[i].name) == 0) {
            *out = ggml_types[i].type;
            return DCP_OK;
        }
    }
    return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "unknown tensor type '%s'", name);
}

bool dcp_ggml_type_block(dcp_ggml_type type, uint32_t *block_elems, uint32_t *block_bytes)
{
    const ggml_type_info *info = ggml_info(type);
    *block_elems = info ? info->block_elems : 0;
    *block_bytes = info ? info->block_bytes : 0;
    return info != NULL;
}

bool dcp_ggml_type_supported(dcp_ggml_type type)
{
    return type == DCP_GGML_TYPE_F32 || type == DCP_GGML_TYPE_F16 || type == DCP_GGML_TYPE_BF16 ||
           type == DCP_GGML_TYPE_Q8_0 || dcp_quant_layout_of(type) != NULL;
}

/* ---- scalar conversions (bfloat16 here; IEEE half in src/common/dtype.c), round to nearest even ------------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

static uint16_t f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static uint16_t load_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

static void store_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

dcp_status dcp_ggml_to_f32(dcp_ggml_type type, const void *src, float *dst, uint64_t n)
{
    const uint8_t *s = src;
    switch (type) {
    case DCP_GGML_TYPE_F32:
        memcpy(dst, s, n * 4);
        return DCP_OK;
    case DCP_GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; ++i) dst[i] = dcp_f16_to_f32(load_u16(s + 2 * i));
        return DCP_OK;
    case DCP_GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(s + 2 * i));
        return DCP_OK;
    case DCP_GGML_TYPE_Q8_0:
        if (n % DCP_Q8_0_BLOCK)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "Q8_0: %llu elements is not a multiple of 32",
                            (unsigned long long)n);
        for (uint64_t b = 0; b < n / DCP_Q8_0_BLOCK; ++b) {
            const uint8_t *blk = s + b * DCP_Q8_0_BYTES;
            float d = dcp_f16_to_f32(load_u16(blk));
            for (int i = 0; i < DCP_Q8_0_BLOCK; ++i)
                dst[b * DCP_Q8_0_BLOCK + i] = d * (float)(int8_t)blk[2 + i];
        }
        return DCP_OK;
    default:
        if (dcp_quant_layout_of(type)) return dcp_quant_dequantize(type, src, dst, n);
        break;
    }
    const char *name = dcp_ggml_type_name(type);
    return dcp_fail(DCP_ERR_UNSUPPORTED,
                    "tensor type %s (%d) is not supported (supported: " DCP_GGML_SUPPORTED_LIST ")",
                    name ? name : "unknown", (int)type);
}

dcp_status dcp_ggml_from_f32(dcp_ggml_type type, const float *src, void *dst, uint64_t n)
{
    uint8_t *d = dst;
    switch (type) {
    case DCP_GGML_TYPE_F32:
        memcpy(d, src, n * 4);
        return DCP_OK;
    case DCP_GGML_TYPE_F16:
        for (uint64_t i = 0; i < n; ++i) store_u16(d + 2 * i, dcp_f32_to_f16(src[i]));
        return DCP_OK;
    case DCP_GGML_TYPE_BF16:
        for (uint64_t i = 0; i < n; ++i) store_u16(d + 2 * i, f32_to_bf16(src[i]));
        return DCP_OK;
    case DCP_GGML_TYPE_Q8_0:
        if (n % DCP_Q8_0_BLOCK)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "Q8_0: %llu elements is not a multiple of 32",
                            (unsigned long long)n);
        for (uint64_t b = 0; b < n / DCP_Q8_0_BLOCK; ++b) {
            const float *x = src + b * DCP_Q8_0_BLOCK;
            uint8_t *blk = d + b * DCP_Q8_0_BYTES;
            float amax = 0.0f;
            for (int i = 0; i < DCP_Q8_0_BLOCK; ++i)
                if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
            float scale = amax / 127.0f;
            float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
            store_u16(blk, dcp_f32_to_f16(scale));
            for (int i = 0; i < DCP_Q8_0_BLOCK; ++i) {
                float q = nearbyintf(x[i] * inv);
                if (q > 127.0f) q = 127.0f;
                if (q < -127.0f) q = -127.0f;
                blk[2 + i] = (uint8_t)(int8_t)q;
            }
        }
        return DCP_OK;
    default:
        if (dcp_quant_layout_of(type)) return dcp_quant_quantize(type, src, dst, n);
        break;
    }
    const char *name = dcp_ggml_type_name(type);
    return dcp_fail(DCP_ERR_UNSUPPORTED,
                    "cannot convert to tensor type %s (supported: " DCP_GGML_SUPPORTED_LIST ")",
                    name ? name : "unknown");
}
