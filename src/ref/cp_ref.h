/* CPU references of the DCP step's own shaders (cp_scale, permute, part_sum), in double where it
 * matters. The step as a whole is checked against the single-device dcp_ref_paged_decode. */
#ifndef DCP_CP_REF_H
#define DCP_CP_REF_H

#include <stdint.h>

/* cp_scale: o_in [batch][N*Hl][D], lse_all [N][batch][N*Hl] -> send [N][batch][Hl][D] = O of this
 * rank scaled by exp(LSE_rank - LSE_global) (0 for an empty shard), lse_out [batch][Hl] =
 * LSE_global of the rank's own heads (NaN / +inf count as -inf). */
void dcp_ref_cp_scale(uint32_t batch, uint32_t heads_local, uint32_t ranks, uint32_t rank, uint32_t head_dim,
                       const float *o_in, const float *lse_all, float *send, float *lse_out);
/* permute: dst[b * dst_stride_b + a * C + c] = src[a * src_stride_a + b * C + c]. */
void dcp_ref_permute(uint32_t A, uint32_t B, uint32_t C, uint32_t src_stride_a, uint32_t dst_stride_b,
                     const float *src, float *dst);
/* part_sum: y[y_offset + i] = (accumulate ? y[y_offset + i] : 0) + sum_s x[x_offset + s * part_stride + i],
 * the sum in f32 from 0 in rank order s = 0 .. parts-1: the shader's contract is this exact order
 * (bitwise the same on every rank), so the reference follows it and tests compare exactly. */
void dcp_ref_part_sum(uint32_t n, uint32_t parts, uint32_t part_stride, uint32_t x_offset, uint32_t y_offset,
                      int accumulate, const float *x, float *y);

#endif
