/* CPU references of the MLA and MoE kernels (shaders/mla_*.comp, head_matmul.comp, moe_*.comp),
 * accumulating in double: the oracle of tests/test_mla_kernels.c and tests/test_moe_kernels.c. */
#ifndef DCP_REF_MLA_REF_H
#define DCP_REF_MLA_REF_H

#include <stdint.h>

#include "dcpvk/dtype.h"

/* MLA latent decode over K-only pages, read in the pool's own dtype:
 *   pages   [num_pages][page_size][row] of dtype (f32, f16 bits, or q8_0 rows of dcp_kv_row_bytes):
 *           rows [c_kv (dv) | k_pe]
 *   q       [batch][heads][dk] f32; lengths [batch]; block_tables [batch][max_blocks]
 *   o (out) [batch][heads][dv] f32: softmax(scale q . row) weighted sum of the rows' first dv
 *           entries; lse (out) [batch][heads] natural log; empty: O = 0, LSE = -inf. */
typedef struct dcp_ref_mla_decode_args {
    uint32_t batch, heads, dk, dv, page_size, max_blocks;
    float scale;
    dcp_dtype dtype;
    const void *pages;
    const float *q;
    const uint32_t *lengths;
    const uint32_t *block_tables;
    float *o;
    float *lse;
} dcp_ref_mla_decode_args;

void dcp_ref_mla_decode(const dcp_ref_mla_decode_args *a);

/* head_matmul: y[t][h y_hs + y_off + n] (+)= sum_k W[h rows + n][k] x[t][h x_hs + x_off + k];
 * W [heads rows][k] f32 (dequantised). */
void dcp_ref_head_matmul(uint32_t heads, uint32_t rows, uint32_t k, uint32_t tokens, const float *w, const float *x,
                         uint32_t x_stride, uint32_t x_hs, uint32_t x_off, float *y, uint32_t y_stride, uint32_t y_hs,
                         uint32_t y_off, int accumulate);

/* NORM-mode rotation of pairs (2i, 2i+1), i < n_rot/2, by cs[i] = (cos, sin) (double math):
 * dst[2i..] = rotated src[2i..]. */
void dcp_ref_rope_pairs(uint32_t n_rot, const float *cs, const float *src, float *dst);

/* mla_kv_store: for t with slots[t] != 0xffffffff and page < num_pages, row slots[t] of the K-only
 * pages [num_pages][page_size][kv_lora + n_rot] f32 becomes [c[t] | rope(kpe[t], cs[t])];
 * c [tokens][c_stride] from c_offset, kpe [tokens][kpe_stride] from kpe_offset, cs [tokens][n_rot/2][2]. */
void dcp_ref_mla_kv_store(float *pages, uint32_t num_pages, uint32_t page_size, uint32_t kv_lora, uint32_t n_rot,
                          const uint32_t *slots, uint32_t tokens, const float *c, uint32_t c_stride, uint32_t c_offset,
                          const float *kpe, uint32_t kpe_stride, uint32_t kpe_offset, const float *cs);

/* moe gate_up: y[t y_stride + j y_us + n] = sum_k W[ids[t][j] rows + n][k] x[t x_stride + j x_us + k];
 * moe down: y[t y_stride + n] (+)= sum_j w[t][j] sum_k W[ids[t][j] rows + n][k] x[t x_stride + j x_us + k].
 * W [n_expert rows][k] f32; ids >= n_expert contribute 0. */
void dcp_ref_moe_gate_up(uint32_t n_expert, uint32_t rows, uint32_t k, uint32_t tokens, uint32_t n_used, const float *w,
                         const uint32_t *ids, const float *x, uint32_t x_stride, uint32_t x_us, float *y,
                         uint32_t y_stride, uint32_t y_us);
void dcp_ref_moe_down(uint32_t n_expert, uint32_t rows, uint32_t k, uint32_t tokens, uint32_t n_used, const float *w,
                      const uint32_t *ids, const float *wt, const float *x, uint32_t x_stride, uint32_t x_us, float *y,
                      uint32_t y_stride, int accumulate);

#endif
