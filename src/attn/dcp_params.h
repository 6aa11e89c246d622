/* Push constants of the DCP step shaders (dcp_scale), shared by C and GLSL. */
#ifndef DCP_DCP_PARAMS_H
#define DCP_DCP_PARAMS_H
#include "common/params_begin.h"

/* dcp_scale (ag_rs backend): one invocation per (sequence, gathered head, 4 dims). Scales this
 * rank's O by exp(LSE_rank - LSE_global) (0 for an empty shard) into the reduce-scatter send
 * buffer [ranks][batch][heads_local][D], and writes LSE_global of this rank's own heads. */
DCP_PARAMS_STRUCT(dcp_scale_params) {
    DCP_U32 batch;       /* sequences */
    DCP_U32 heads_local; /* Hl: heads each rank ends with */
    DCP_U32 ranks;       /* N: DCP group size; gathered heads = N * Hl */
    DCP_U32 rank;        /* this rank (which LSE row of the gather is its own, which heads it keeps) */
    DCP_U32 head_dim;    /* D, multiple of 4 */
};
DCP_PARAMS_END(dcp_scale_params)

/* dcp_permute: f32 copy that swaps the two outer dims of a [A][B][C] tensor:
 *   dst[b * dst_stride_b + a * C + c] = src[a * src_stride_a + b * C + c]
 * (Q unpack after the gather, a2a message packing). One invocation per element. */
DCP_PARAMS_STRUCT(dcp_permute_params) {
    DCP_U32 a, b, c;        /* A, B, C */
    DCP_U32 src_stride_a;   /* floats between consecutive a in src (>= B * C) */
    DCP_U32 dst_stride_b;   /* floats between consecutive b in dst (>= A * C) */
};
DCP_PARAMS_END(dcp_permute_params)

#endif
