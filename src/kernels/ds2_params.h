/* Push constants of the deepseek2 model kernels (head_matmul, mla_rope, mla_kv_store, moe_route,
 * moe_matmul), shared by C and GLSL. Activations are f32; counts, strides and offsets in elements
 * (floats) unless a field says otherwise. */
#ifndef DCP_DS2_PARAMS_H
#define DCP_DS2_PARAMS_H
#include "common/params_begin.h"

/* Tokens one head_matmul / moe_matmul workgroup multiplies per weight load. */
#define DCP_HEAD_MATMUL_TOKENS 8

/* head_matmul: a batch of per-head matrix products (MLA's absorption q_lat = W_UK q_nope and the
 * up-projection o = W_UV o_lat):
 *   y[t][h y_head_stride + y_offset + n] (+)= sum_k W[h rows + n][k] x[t][h x_head_stride + x_offset + k]
 * for h < heads, n < rows, W [heads rows][k] in one of the weight dtypes (shaders/common/weights.glsl).
 * One subgroup per output row, DCP_HEAD_MATMUL_TOKENS tokens per workgroup; grid
 * (ceil(rows / rows_per_wg), heads, ceil(tokens / DCP_HEAD_MATMUL_TOKENS)). */
DCP_PARAMS_STRUCT(dcp_head_matmul_params) {
    DCP_U32 heads;
    DCP_U32 rows;          /* output rows per head */
    DCP_U32 k;             /* input features per head, multiple of 4 (of 32 for Q8_0) */
    DCP_U32 tokens;
    DCP_U32 x_stride;      /* floats between token rows of x, multiple of 4 */
    DCP_U32 x_head_stride; /* floats between heads in a row of x, multiple of 4 */
    DCP_U32 x_offset;      /* floats before head 0 of a row of x, multiple of 4 */
    DCP_U32 y_stride;      /* floats between token rows of y */
    DCP_U32 y_head_stride; /* floats between heads in a row of y */
    DCP_U32 y_offset;      /* floats before head 0 of a row of y */
    DCP_U32 accumulate;    /* 1: y += W x; 0: y = W x */
    DCP_U32 scale_offset;  /* Q8_0: word offset of the f32 scales in W; else 0 */
};
DCP_PARAMS_END(dcp_head_matmul_params)

/* mla_rope: llama.cpp NORM-mode RoPE (adjacent pairs) of a part of each head, copied to another
 * place: for t < tokens, h < heads, i < n_rot / 2, (x0, x1) = src[t src_stride + h src_head_stride +
 * src_offset + 2i + (0, 1)] becomes (x0 c - x1 s, x0 s + x1 c) at the same place of dst, (c, s) =
 * cs[t][i] (from the host's table). All offsets and strides even. Grid (ceil(heads n_rot/2 / WG), tokens). */
DCP_PARAMS_STRUCT(dcp_mla_rope_params) {
    DCP_U32 tokens;
    DCP_U32 heads;
    DCP_U32 n_rot;
    DCP_U32 src_stride;
    DCP_U32 src_head_stride;
    DCP_U32 src_offset;
    DCP_U32 dst_stride;
    DCP_U32 dst_head_stride;
    DCP_U32 dst_offset;
};
DCP_PARAMS_END(dcp_mla_rope_params)

/* mla_kv_store: the latent-cache write. For tokens with slot[t] != 0xffffffff the K-only pool row
 * of slot page * page_size + row becomes [c (kv_lora) | rope(k_pe) (n_rot)]: c[t][:] =
 * c[t c_stride + c_offset + i], k_pe = kpe[t kpe_stride + kpe_offset + i], rotated by cs[t] like
 * mla_rope; slots past the pool are not written. One invocation per (token, pair of entries): each
 * writes one f16 word or one f32 pair. Grid (ceil((kv_lora + n_rot) / 2 / WG), tokens). */
DCP_PARAMS_STRUCT(dcp_mla_kv_store_params) {
    DCP_U32 tokens;
    DCP_U32 kv_lora;           /* even */
    DCP_U32 n_rot;             /* even */
    DCP_U32 c_stride;          /* even */
    DCP_U32 c_offset;          /* even */
    DCP_U32 kpe_stride;        /* even */
    DCP_U32 kpe_offset;        /* even */
    DCP_U32 page_size;
    DCP_U32 pages_per_segment;
    DCP_U32 total_pages;
};
DCP_PARAMS_END(dcp_mla_kv_store_params)

/* Largest expert count moe_route handles (DeepSeek-V3: 256). */
#define DCP_MOE_MAX_EXPERTS 512

/* moe_route: per token, from the router logits [t][logits_stride] (first n_expert used):
 * probs = softmax or sigmoid; selection = probs + bias (has_bias); with n_groups > 1 only the
 * n_groups_used groups of largest top-2 sums stay; ids = the n_used largest selection values in
 * descending order (ties: lower id); weights = probs[ids], divided by max(sum, 2^-14) when norm,
 * times scale. One workgroup per token. */
DCP_PARAMS_STRUCT(dcp_moe_route_params) {
    DCP_U32 tokens;
    DCP_U32 n_expert;      /* <= DCP_MOE_MAX_EXPERTS */
    DCP_U32 n_used;
    DCP_U32 n_groups;      /* 1: no group limit */
    DCP_U32 n_groups_used;
    DCP_U32 sigmoid;       /* 1: sigmoid gating; 0: softmax */
    DCP_U32 norm;          /* 1: renormalise the selected weights */
    DCP_U32 has_bias;      /* 1: add bias[e] for the selection only */
    DCP_U32 logits_stride; /* floats between tokens' logits */
    DCP_F32 scale;         /* expert_weights_scale */
};
DCP_PARAMS_END(dcp_moe_route_params)

/* moe_matmul: the selected experts' matrices, W [n_expert rows][k] (expert e's rows at e rows):
 *   gate|up (default): y[t y_stride + j y_used_stride + n] = sum_k W[ids[t][j] rows + n][k]
 *                      x[t x_stride + j x_used_stride + k]   (x_used_stride 0: one input per token)
 *   down (MOE_DOWN):   y[t y_stride + n] (+)= sum_j w[t][j] sum_k W[ids[t][j] rows + n][k]
 *                      x[t x_stride + j x_used_stride + k]
 * for j < n_used, n < rows; ids [t][n_used] u32 (an id >= n_expert contributes 0), w [t][n_used] f32.
 * With a column window (x_cols > 0: a row-parallel expert slice held as the whole blocks covering
 * its columns) the sums over k are over c < x_cols of W[..][x_col0 + c] x[.. + c] instead.
 * One subgroup per output row; grid (ceil(rows / rows_per_wg), tokens n_used) for gate|up,
 * (ceil(rows / rows_per_wg), tokens) for down. */
DCP_PARAMS_STRUCT(dcp_moe_matmul_params) {
    DCP_U32 n_expert;
    DCP_U32 rows;          /* output rows per expert */
    DCP_U32 k;             /* columns of a stored row of W, multiple of 4 (of the block: 32 or 256) */
    DCP_U32 tokens;
    DCP_U32 n_used;
    DCP_U32 x_stride;      /* multiple of 4 */
    DCP_U32 x_used_stride; /* multiple of 4 */
    DCP_U32 y_stride;
    DCP_U32 y_used_stride; /* gate|up only */
    DCP_U32 accumulate;    /* down: 1 adds to y */
    DCP_U32 scale_offset;  /* Q8_0, block-quantized: word offset of the scales in W; else 0 */
    DCP_U32 x_col0;        /* window (x_cols > 0): stored column x_col0 + c meets x's column c */
    DCP_U32 x_cols;        /* window width; the stored columns outside it are skipped. 0: no window
                            * (stored column c meets x's column c: 16-byte loads of x). The shader's
                            * spec constant WIN is 1 exactly when x_cols > 0 */
};
DCP_PARAMS_END(dcp_moe_matmul_params)
#ifndef VULKAN
_Static_assert(sizeof(dcp_moe_matmul_params) == 52 && offsetof(dcp_moe_matmul_params, x_col0) == 44,
               "dcp_moe_matmul_params layout (shaders/moe_matmul.comp)");
#endif

#endif
