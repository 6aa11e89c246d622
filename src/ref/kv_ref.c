/* CPU reference of kv_append (a copy: exact) and of the q8_0 KV rows. */
#include <math.h>
#include <string.h>

#include "dcpvk/dtype.h"
#include "kernels/kv_params.h"
#include "ref/kv_ref.h"

void dcp_ref_kv_append(float *pages, uint32_t num_pages, uint32_t kv_heads, uint32_t page_size,
                       uint32_t head_dim, const uint32_t *slots, uint32_t tokens, const float *k,
                       const float *v)
{
    const uint64_t half = (uint64_t)kv_heads * page_size * head_dim;
    for (uint32_t t = 0; t < tokens; t++) {
        if (slots[t] == DCP_KV_NO_SLOT) continue;
        uint32_t page = slots[t] / page_size, off = slots[t] % page_size;
        if (page >= num_pages) continue;
        for (uint32_t h = 0; h < kv_heads; h++) {
            float *dk = pages + page * 2 * half + ((uint64_t)h * page_size + off) * head_dim;
            const uint64_t src = ((uint64_t)t * kv_heads + h) * head_dim;
            memcpy(dk, k + src, head_dim * sizeof(float));
            memcpy(dk + half, v + src, head_dim * sizeof(float));
        }
    }
}

void dcp_ref_q8_0_quantize_row(const float *x, uint32_t n, uint32_t *words)
{
    const uint32_t blocks = n / DCP_KV_Q8_BLOCK;
    memset(words, 0, DCP_KV_Q8_ROW_WORDS(n) * 4u);
    for (uint32_t b = 0; b < blocks; b++) {
        const float *xb = x + b * DCP_KV_Q8_BLOCK;
        float amax = 0.0f;
        for (uint32_t j = 0; j < DCP_KV_Q8_BLOCK; j++) amax = fmaxf(amax, fabsf(xb[j]));
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        for (uint32_t j = 0; j < DCP_KV_Q8_BLOCK; j++) {
            float v = xb[j] * id, r = floorf(fabsf(v) + 0.5f);
            if (r > 127.0f) r = 127.0f;
            int q = v < 0.0f ? -(int)r : (int)r;
            const uint32_t i = b * DCP_KV_Q8_BLOCK + j;
            words[i / 4] |= (uint32_t)(uint8_t)(int8_t)q << (8 * (i % 4));
        }
        words[n / 4 + b / 2] |= (uint32_t)dcp_f32_to_f16(d) << (16 * (b % 2));
    }
}

double dcp_ref_q8_0_value(const uint32_t *words, uint32_t n, uint32_t i)
{
    const uint32_t b = i / DCP_KV_Q8_BLOCK;
    const int8_t q = (int8_t)(uint8_t)(words[i / 4] >> (8 * (i % 4)));
    const uint16_t d = (uint16_t)(words[n / 4 + b / 2] >> (16 * (b % 2)));
    return (double)dcp_f16_to_f32(d) * q;
}
