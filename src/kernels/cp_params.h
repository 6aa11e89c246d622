/* Push constants of the DCP step shaders (cp_scale, permute, part_sum), shared by C and GLSL. */
#ifndef DCP_CP_PARAMS_H
#define DCP_CP_PARAMS_H
#include "common/params_begin.h"

/* cp_scale (ag_rs backend): one invocation per (sequence, gathered head, 4 dims). Scales this
 * rank's O by exp(LSE_rank - LSE_global) (0 for an empty shard) into the reduce-scatter send
 * buffer [ranks][batch][heads_local][D], and writes LSE_global of this rank's own heads. */
DCP_PARAMS_STRUCT(dcp_cp_scale_params) {
    DCP_U32 batch;       /* sequences */
    DCP_U32 heads_local; /* Hl: heads each rank ends with */
    DCP_U32 ranks;       /* N: DCP group size; gathered heads = N * Hl */
    DCP_U32 rank;        /* this rank (which LSE row of the gather is its own, which heads it keeps) */
    DCP_U32 head_dim;    /* D, multiple of 4 */
    DCP_U32 lse_stride;  /* floats between consecutive ranks' LSEs in lse_all; 0 (default): batch * N * Hl */
};
DCP_PARAMS_END(dcp_cp_scale_params)

/* permute: f32 copy that swaps the two outer dims of a [A][B][C] tensor:
 *   dst[b * dst_stride_b + a * C + c] = src[a * src_stride_a + b * C + c]
 * (Q unpack after the gather, a2a message packing). One invocation per element. */
DCP_PARAMS_STRUCT(dcp_permute_params) {
    DCP_U32 a, b, c;        /* A, B, C */
    DCP_U32 src_stride_a;   /* floats between consecutive a in src (>= B * C) */
    DCP_U32 dst_stride_b;   /* floats between consecutive b in dst (>= A * C) */
};
DCP_PARAMS_END(dcp_permute_params)

/* part_sum: the receiving side of a reduction through mailboxes (all-reduce, reduce-scatter).
 * One invocation per element i < n:
 *   y[y_offset + i] = (accumulate ? y[y_offset + i] : 0) + sum_{s = 0..parts-1} x[x_offset + s * part_stride + i]
 * The parts are summed into an f32 accumulator starting from 0 in rank order s = 0, 1, ..., so
 * every rank that sums the same parts gets bitwise the same result. Offsets and strides in floats. */
DCP_PARAMS_STRUCT(dcp_part_sum_params) {
    DCP_U32 n;           /* elements per part */
    DCP_U32 parts;       /* ranks summed (>= 1) */
    DCP_U32 part_stride; /* floats between consecutive parts in x (>= n) */
    DCP_U32 x_offset;    /* first float of part 0 in x */
    DCP_U32 y_offset;    /* first float of the result in y */
    DCP_U32 accumulate;  /* 1: add to y; 0: overwrite y */
};
DCP_PARAMS_END(dcp_part_sum_params)

#endif
