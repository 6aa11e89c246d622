/* CPU references of the KV cache kernels (the oracle of tests/test_kv*.c). The DCP step's oracle is
 * the single-device reference dcp_ref_paged_decode (src/ref/ref.h): DCP must equal it. */
#ifndef DCP_KV_REF_H
#define DCP_KV_REF_H

#include <stdint.h>

/* kv_append: for token t < tokens with slots[t] != DCP_KV_NO_SLOT, page = slots[t] / page_size,
 * off = slots[t] % page_size: pages[page][0][h][off][:] = k[t][h][:] and pages[page][1][h][off][:] =
 * v[t][h][:] for every head h. pages [num_pages][2][kv_heads][page_size][head_dim] f32;
 * k, v [tokens][kv_heads][head_dim] f32. Slots past num_pages are skipped. */
void dcp_ref_kv_append(float *pages, uint32_t num_pages, uint32_t kv_heads, uint32_t page_size,
                       uint32_t head_dim, const uint32_t *slots, uint32_t tokens, const float *k,
                       const float *v);

/* q8_0 KV rows (layout: src/kernels/kv_params.h, DCP_KV_Q8_ROW_WORDS(n) words for n values, n a multiple
 * of 32), written from the definition: per block of 32, amax = max|x|, d = amax / 127 (f32), the
 * f16 of d stored, q = round(x * (1 / d)) halves away from zero (0 when d = 0), clamped to
 * [-127, 127]; in float arithmetic, as the shader computes it. The shader's 1/d and amax/127 may
 * differ from these by the GPU's division error, so its q may differ by one where x / d lies at
 * a half; the dequantized value then still lies within DCP_REF_Q8_ERR of x. */
void dcp_ref_q8_0_quantize_row(const float *x, uint32_t n, uint32_t *words);
/* Value i of a q8_0 row: f16 scale of block i / 32 times the int8 q (exact in double). */
double dcp_ref_q8_0_value(const uint32_t *words, uint32_t n, uint32_t i);
/* Bound on |x - dequantized| for a block whose largest magnitude is amax: half a step (d / 2)
 * plus the f16 rounding of d over 127 steps (127 * 2^-11 d), with 1% slack for the GPU's division:
 * 0.57 d = 0.57 amax / 127. */
#define DCP_REF_Q8_ERR(amax) (0.57 * (double)(amax) / 127.0)

#endif
