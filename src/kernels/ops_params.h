/* Push constants of the model kernels (matmul, get_rows, rmsnorm, rope_store, swiglu, add,
 * argmax), shared by C and GLSL. All activations are f32; element counts and strides are in
 * elements (floats) unless a field says words. */
#ifndef DCP_OPS_PARAMS_H
#define DCP_OPS_PARAMS_H
#include "common/params_begin.h"

/* Tokens one matmul workgroup multiplies per weight load (size of the per-row accumulator array). */
#define DCP_MATMUL_TOKENS 8
/* Output rows one matmul subgroup computes together, sharing each load of x (RPW, the rows per
 * workgroup, is subgroups per workgroup times this). */
#ifndef DCP_MATMUL_SUBGROUP_ROWS
#define DCP_MATMUL_SUBGROUP_ROWS 4
#endif
/* The same on a CPU device (lavapipe: lanes load one at a time, so sharing x over more rows pays). */
#define DCP_MATMUL_SUBGROUP_ROWS_CPU 8
/* ... and for the types that share x over 16 rows there (src/ops/ops.c matmul_subgroup_rows). */
#define DCP_MATMUL_SUBGROUP_ROWS_CPU_WIDE 16
/* Rows each lane sums where lanes own rows (dcp_device_info.matmul_lane_rows: CPU drivers), a
 * subgroup's lanes sharing each x load by shuffles: subgroup size x this rows a subgroup. */
#define DCP_MATMUL_LANE_ROWS 2

/* matmul: y[t][n] (+)= sum_k W[n][k] * x[t][k], W [n_out][k] in the weight layout of its dtype
 * (GGUF row order: k contiguous). One subgroup per DCP_MATMUL_SUBGROUP_ROWS (_CPU) output rows,
 * TB tokens per workgroup (1 for a single token, else DCP_MATMUL_TOKENS); grid
 * (ceil(n_out / rows_per_wg), ceil(tokens / TB)). Spec constant GLU: W [2 n_out][k] (gate rows
 * then up rows), y[t][n] = silu(gate_n . x) * (up_n . x), half the rows per subgroup. Spec constant
 * NORM: x's rows rmsnorm'd (eps norm_eps) and multiplied by the norm weights (binding 3) first. */
DCP_PARAMS_STRUCT(dcp_matmul_params) {
    DCP_U32 n_out;        /* N: output features (rows of W; GLU: half of them) */
    DCP_U32 k;            /* K: columns of a stored row of W, multiple of 4 (of the block: 32 or
                           * 256) */
    DCP_U32 tokens;       /* T: rows of x and y */
    DCP_U32 x_stride;     /* floats between rows of x, multiple of 4 */
    DCP_U32 y_stride;     /* floats between rows of y */
    DCP_U32 accumulate;   /* 1: y += W x (fused residual add); 0: y = W x */
    DCP_U32 scale_offset; /* Q8_0, block-quantized: word offset of the scales in W; else 0 */
    DCP_U32 x_offset;     /* floats before row 0 of x, multiple of 4 */
    DCP_U32 y_offset;     /* floats before output row 0 in each row of y: a part of a matrix of
                           * parts (dcp_matrix.parts) writes its rows [y_offset, y_offset + n_out) */
    DCP_U32 x_col0;       /* window (x_cols > 0): stored column x_col0 + c meets x's column c */
    DCP_U32 x_cols;       /* window width; the stored columns outside it are skipped. 0: no window
                           * (stored column c meets x's column c: 16-byte loads of x). The shader's
                           * spec constant WIN is 1 exactly when x_cols > 0 */
    DCP_F32 norm_eps;     /* NORM: added to the mean square; else unused */
};
DCP_PARAMS_END(dcp_matmul_params)

/* get_rows: y[t][:] = W[ids[t]][:] (embedding lookup), W in its dtype's layout. Grid (tokens). */
DCP_PARAMS_STRUCT(dcp_get_rows_params) {
    DCP_U32 k;            /* row length, multiple of 4 (of the block: 32 or 256) */
    DCP_U32 tokens;       /* rows to gather */
    DCP_U32 n_rows;       /* rows of W; ids outside [0, n_rows) give a zero row */
    DCP_U32 y_stride;     /* floats between output rows */
    DCP_U32 scale_offset; /* Q8_0, block-quantized: word offset of the scales in W; else 0 */
};
DCP_PARAMS_END(dcp_get_rows_params)

/* rmsnorm: y[t][i] = x[t][i] / sqrt(mean_i(x[t][i]^2) + eps) * w[i]. One workgroup per token. */
DCP_PARAMS_STRUCT(dcp_rmsnorm_params) {
    DCP_U32 n;            /* features per row */
    DCP_U32 tokens;
    DCP_U32 x_stride;     /* floats between rows of x */
    DCP_U32 y_stride;     /* floats between rows of y */
    DCP_U32 x_offset;     /* floats before row 0 of x */
    DCP_F32 eps;
};
DCP_PARAMS_END(dcp_rmsnorm_params)

/* rmsnorm_parts (rmsnorm.comp with RMSNORM_PARTS): the all-reduce's receiving side fused into the
 * next rmsnorm. Per token row t and feature i < n, first
 *   x[x_offset + t x_stride + i] += sum_{s < parts} p[part_offset + s part_stride + t n + i]
 * (summed from 0 in rank order s = 0, 1, ..., as part_sum: bitwise the same x on every rank), then
 * y = rmsnorm(x) * w as rmsnorm. */
DCP_PARAMS_STRUCT(dcp_rmsnorm_parts_params) {
    dcp_rmsnorm_params norm;
    DCP_U32 parts;        /* ranks summed (>= 1) */
    DCP_U32 part_stride;  /* floats between consecutive ranks' parts in p */
    DCP_U32 part_offset;  /* floats before part 0, row 0 */
};
DCP_PARAMS_END(dcp_rmsnorm_parts_params)

/* rmsnorm_heads (rmsnorm.comp with RMSNORM_HEADS): the per-head RMSNorm of qwen3's Q and K, in
 * place. Head h < heads of token row t is the D values at x_offset + t x_stride + h D of x; it
 * becomes x / sqrt(mean(x^2) + eps) * w[h < w_split ? 0 : D ..][:D], w [2][D] f32 (the Q norm,
 * then the K norm). One workgroup per (head, token): grid (heads, tokens). */
DCP_PARAMS_STRUCT(dcp_rmsnorm_heads_params) {
    DCP_U32 head_dim;     /* D */
    DCP_U32 heads;        /* heads per token row */
    DCP_U32 w_split;      /* heads [0, w_split) use w[0..D), the others w[D..2D) */
    DCP_U32 tokens;
    DCP_U32 x_stride;     /* floats between token rows of x */
    DCP_U32 x_offset;     /* floats before head 0 of row 0 */
    DCP_F32 eps;
};
DCP_PARAMS_END(dcp_rmsnorm_heads_params)

/* add_rows: y[t y_stride + i] += b[i] for t < tokens, i < n (a bias added to every row). Grid
 * (ceil(n / WG), tokens). */
DCP_PARAMS_STRUCT(dcp_add_rows_params) {
    DCP_U32 n;
    DCP_U32 tokens;
    DCP_U32 y_stride;     /* floats between rows of y */
};
DCP_PARAMS_END(dcp_add_rows_params)

/* rope_store: one token row of src = [q_heads][D] | [kv_heads][D] (K) | [kv_heads][D] (V).
 * Rotates pair i < n_rot/2 of every Q and K head by the angle whose (cos, sin) is cs[t][i]: the
 * adjacent elements (2i, 2i+1) in llama's NORM mode (neox = 0), elements (i, i + n_rot/2) in NEOX
 * mode (neox = 1: qwen2, qwen3, phi3); elements from n_rot on are copied. Writes Q to q_out
 * [tokens][q_heads][D] and, for tokens with slot[t] != DCP_KV_NO_SLOT (src/kernels/kv_params.h),
 * rotated K and plain V into the KV page of token slot (page = slot / page_size, row = slot %
 * page_size). One invocation per output element pair (2j, 2j+1): grid (ceil(heads * D/2 / WG),
 * tokens). */
DCP_PARAMS_STRUCT(dcp_rope_store_params) {
    DCP_U32 tokens;
    DCP_U32 q_heads;
    DCP_U32 kv_heads;
    DCP_U32 head_dim;         /* D, even */
    DCP_U32 n_rot;            /* rotated dims per head, even, <= D */
    DCP_U32 src_stride;       /* floats between token rows of src */
    DCP_U32 page_size;        /* tokens per KV page */
    DCP_U32 pages_per_segment;/* pages per pool segment */
    DCP_U32 total_pages;      /* pages in the pool; larger slots are not written */
    DCP_U32 neox;             /* 1: NEOX pairs (i, i + n_rot/2); 0: NORM pairs (2i, 2i+1) */
};
DCP_PARAMS_END(dcp_rope_store_params)

/* swiglu: y[t][i] = silu(x[t][i]) * x[t][n + i], silu(g) = g / (1 + exp(-g)). */
DCP_PARAMS_STRUCT(dcp_swiglu_params) {
    DCP_U32 n;            /* hidden features (gate and up halves have n each) */
    DCP_U32 tokens;
    DCP_U32 x_stride;     /* floats between rows of x (>= 2n) */
    DCP_U32 y_stride;     /* floats between rows of y */
};
DCP_PARAMS_END(dcp_swiglu_params)

/* add: y[i] = a[i] + b[i], i < n (y may alias a or b). */
DCP_PARAMS_STRUCT(dcp_add_params) {
    DCP_U32 n;
};
DCP_PARAMS_END(dcp_add_params)

/* argmax: out[r] = smallest index of the largest value of row r (NaN ignored; a row of only NaN
 * gives 0). One workgroup per row. */
DCP_PARAMS_STRUCT(dcp_argmax_params) {
    DCP_U32 n;            /* values per row */
    DCP_U32 rows;
    DCP_U32 stride;       /* floats between rows */
};
DCP_PARAMS_END(dcp_argmax_params)

#endif
