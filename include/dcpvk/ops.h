/* The model kernels: weight matrices on a device and the recording of the ops a model graph is
 * made of (shaders/matmul, get_rows, rmsnorm, rope_store, swiglu, add, argmax) into a caller's
 * command buffer. Implemented in src/ops/ops.c; push constants in src/kernels/ops_params.h.
 *
 * Every op only records (no submit, no wait); the caller orders dependent ops with
 * dcp_cmd_barrier. Buffers are bound whole (offset 0) so no binding offset alignment applies;
 * row offsets go through push constants. Activations are f32. Not thread-safe per command.
 * An op of more than a few parameters takes them in an args struct (dcp_<op>_args, read only during
 * the call), meant to be filled with designated initializers: a field left out is 0 (or NULL). */
#ifndef DCPVK_OPS_H
#define DCPVK_OPS_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/kv.h"
#include "dcpvk/quant.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix on one device: rows x k, k contiguous (GGUF ne0 = k, ne1 = rows).
 * Device layout by type: F32 [rows][k] f32; F16 / BF16 [rows][k] 16-bit; Q8_0 repacked as
 * int8 quants [rows][k] followed (at word scale_offset) by f32 block scales [rows][k/32] (the
 * GGUF f16 scale widened: exact); Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL,
 * IQ4_XS as block bodies [rows][k/block][body words] followed (at word scale_offset) by their f16
 * scales (src/quant/quants.h: the GGUF bytes, aligned). Created by dcp_matrix_create, destroyed by
 * dcp_matrix_destroy (before the device).
 *
 * A matrix of parts (n_parts > 1; made by the model loader, src/ops/ops_internal.h's
 * dcp_matrix_join) is the row concatenation of matrices of different types, each kept in its own
 * (a Q4_K_M file's Q4_K attn_q / attn_k beside a Q6_K attn_v): buf is NULL, type the first part's,
 * rows their sum; dcp_op_matmul records one dispatch per part into that part's rows of y, so y is
 * what one fused matrix would give. Only dcp_op_matmul takes one; the other weight ops refuse it.
 *
 * A column window (cols > 0; dcp_matrix_window, made by the model loader for a row-parallel
 * slice that cuts its type's blocks) stores rows of held_k columns (the whole blocks covering the
 * slice, in the matrix's type) and multiplies x of k columns: x's column c < cols meets stored
 * column col0 + c, the stored columns outside [col0, col0 + cols) are skipped. dcp_op_matmul,
 * dcp_op_moe_gate_up and dcp_op_moe_down take one (every expert's rows through the same window);
 * head_matmul and get_rows refuse it. */
typedef struct dcp_matrix {
    dcp_buffer *buf;
    dcp_ggml_type type;     /* a type of DCP_GGML_SUPPORTED_LIST */
    uint32_t rows, k;
    uint32_t scale_offset;  /* Q8_0 and block-quantized types: words before the scales; else 0 */
    uint32_t n_parts;       /* 0: one matrix (buf); > 1: parts[0 .. n_parts), rows in that order */
    struct dcp_matrix *parts; /* [n_parts] one-part matrices of the same k, owned */
    uint32_t held_k;        /* columns of a stored row: k, or with a window the covering blocks (a
                             * matrix of parts: k, each part holding its own) */
    uint32_t col0, cols;    /* window: x's columns [0, cols) meet stored [col0, col0 + cols); cols 0:
                             * none (x's column c meets stored column c) */
} dcp_matrix;

/* Uploads the row-wise concatenation of `parts` GGUF tensors that share one type and k (part i
 * has part_rows[i] rows, data[i] its GGUF bytes) as one matrix: fused Q|K|V or gate|up.
 * DCP_ERR_UNSUPPORTED for another type or k not a multiple of 4 (of the block size, 32 or 256,
 * for the quantized types);
 * DCP_ERR_INVALID_ARGUMENT when the matrix exceeds the device's storage-buffer range. */
DCP_API dcp_status dcp_matrix_create(dcp_device *dev, dcp_ggml_type type, uint32_t k, uint32_t parts,
                                     const void *const *data, const uint32_t *part_rows, dcp_matrix *out);
DCP_API void dcp_matrix_destroy(dcp_matrix *m);
/* Gives the one-part matrix m (rows x held k, from dcp_matrix_create) a column window: it then
 * multiplies x of k columns, x's column c < cols meeting stored column col0 + c (cols <= k,
 * col0 + cols <= the held k); the stored columns outside the window are skipped, the sums exactly
 * those of the window's weights. A full window (col0 0, cols = k = the held k) is no window.
 * DCP_ERR_INVALID_ARGUMENT for a window that does not fit (nothing changed). */
DCP_API dcp_status dcp_matrix_window(dcp_matrix *m, uint32_t k, uint32_t col0, uint32_t cols);
/* Device bytes of a rows x k matrix of `type` (the buffer dcp_matrix_create makes), or 0 for an
 * unsupported type. Thread-safe. */
DCP_API uint64_t dcp_matrix_bytes(dcp_ggml_type type, uint32_t k, uint64_t rows);

/* y [tokens][y_stride] (+)= x [tokens][x_stride] (from float x_offset) times W^T (y's rows w->rows
 * values, x's w->k). x_stride, x_offset multiples of 4. A matrix of parts: one dispatch per part,
 * part i writing y's columns [rows of parts before it, + its rows). A matrix with a column window
 * reads only x's columns [0, w->cols).
 * Fused SwiGLU (glu): w is a one-part matrix without a window of 2 n rows, the n gate rows then
 * the n up rows, and y's rows get n values, y[t][j] = silu(g) * u, g and u gate row j's and up row
 * j's products: bitwise dcp_op_swiglu of the plain product's rows. Not with accumulate.
 * Fused RMSNorm (norm): each row of x is first rmsnorm'd and multiplied by norm [w->k] f32,
 * y = W^T (x / sqrt(mean_k x^2 + norm_eps) * norm) (as dcp_op_rmsnorm, then the product; the
 * sum of squares in an order of its own, the same for every row of y, weight type, matrix part
 * and batch). Not with a column window. Both may be combined. */
typedef struct dcp_matmul_args {
    const dcp_matrix *w;
    dcp_buffer *x;          /* [tokens][x_stride] f32, read from float x_offset */
    uint32_t x_offset;      /* floats; a multiple of 4 */
    uint32_t x_stride;      /* floats between token rows; a multiple of 4, >= w->k */
    dcp_buffer *y;          /* [tokens][y_stride] f32 */
    uint32_t y_stride;      /* floats, >= w->rows */
    uint32_t tokens;
    int accumulate;         /* != 0: y += the product (fused residual); 0: y = it */
    int glu;                /* != 0: y = silu(gate rows' product) * up rows' (see above) */
    dcp_buffer *norm;       /* [w->k] f32 RMSNorm weights applied to x first, or NULL: none */
    float norm_eps;         /* with norm: added to the mean square */
} dcp_matmul_args;
DCP_API dcp_status dcp_op_matmul(dcp_cmd *cmd, const dcp_matmul_args *a);
/* Whether dcp_op_matmul can fuse the SwiGLU (glu) into w's product: one part, no column window,
 * an even row count. Thread-safe (reads w only). */
DCP_API bool dcp_matmul_can_glu(const dcp_matrix *w);
/* Whether fusing the RMSNorm into w's product (norm) is cheaper on dev than an rmsnorm dispatch
 * before it. Each subgroup of the fused matmul reads x twice (its sum of squares, then the product)
 * and the norm weights once more: on a GPU those reads hit its caches and the fusion always pays;
 * on a CPU driver (lavapipe) every one is a load, so it pays only for a small matrix, where the
 * dispatch it saves costs more (the bound and its measurement: src/ops/ops.c). Depends on w's
 * shape and the device only, never on the tokens of a step (a row's bits do not depend on its
 * batch). Thread-safe. */
DCP_API bool dcp_matmul_norm_pays(const dcp_device *dev, const dcp_matrix *w);

/* y [tokens][y_stride] = rows ids[0..tokens) of W (embedding lookup), as f32. */
typedef struct dcp_get_rows_args {
    const dcp_matrix *w;
    dcp_buffer *ids;        /* [tokens] u32, each < w->rows */
    dcp_buffer *y;          /* [tokens][y_stride] f32 */
    uint32_t y_stride;      /* floats, >= w->k */
    uint32_t tokens;
} dcp_get_rows_args;
DCP_API dcp_status dcp_op_get_rows(dcp_cmd *cmd, const dcp_get_rows_args *a);

/* y [tokens][y_stride] = rmsnorm(x rows of n values) * w. */
typedef struct dcp_rmsnorm_args {
    dcp_buffer *x;          /* [tokens][x_stride] f32, rows from float x_offset */
    uint32_t x_offset;      /* floats */
    uint32_t x_stride;      /* floats, >= n */
    dcp_buffer *w;          /* [n] f32 */
    uint32_t n;
    dcp_buffer *y;          /* [tokens][y_stride] f32 */
    uint32_t y_stride;      /* floats, >= n */
    uint32_t tokens;
    float eps;              /* added to the mean square */
} dcp_rmsnorm_args;
DCP_API dcp_status dcp_op_rmsnorm(dcp_cmd *cmd, const dcp_rmsnorm_args *a);

/* The all-reduce's receiving side fused into the next rmsnorm: first x rows += the sum, in rank
 * order s = 0 .. parts-1 from 0 (as part_sum: bitwise the same on every rank), of the parts
 * p [parts][tokens][n] f32 (part s's row t at float part_offset + s * part_stride + t * n of p,
 * bound from byte p_offset), writing x back; then y = rmsnorm(x) * w as dcp_op_rmsnorm (norm). */
typedef struct dcp_rmsnorm_parts_args {
    dcp_rmsnorm_args norm;
    dcp_buffer *p;          /* the parts, f32 */
    uint64_t p_offset;      /* bytes: where p is bound from */
    uint32_t parts;         /* >= 1 */
    uint32_t part_stride;   /* floats between parts, >= tokens * n */
    uint32_t part_offset;   /* floats from p_offset to part 0 */
} dcp_rmsnorm_parts_args;
DCP_API dcp_status dcp_op_rmsnorm_parts(dcp_cmd *cmd, const dcp_rmsnorm_parts_args *a);

/* The per-head RMSNorm of qwen3's Q and K, in place: for every token row t < tokens and head
 * h < heads, the D = head_dim values x[x_offset + t x_stride + h D ..] become rmsnorm(.) * w_h,
 * w_h = w[0..D) for h < w_split (the query heads), w[D..2D) otherwise (the key heads). */
typedef struct dcp_rmsnorm_heads_args {
    dcp_buffer *x;          /* [tokens][x_stride] f32, heads from float x_offset */
    uint32_t x_offset;      /* floats */
    uint32_t x_stride;      /* floats, >= heads * head_dim */
    uint32_t heads, head_dim;
    uint32_t w_split;       /* heads below use w[0..D), the others w[D..2D) */
    dcp_buffer *w;          /* [2][head_dim] f32 */
    uint32_t tokens;
    float eps;              /* added to the mean square */
} dcp_rmsnorm_heads_args;
DCP_API dcp_status dcp_op_rmsnorm_heads(dcp_cmd *cmd, const dcp_rmsnorm_heads_args *a);

/* y[t][i] += b[i] for t < tokens, i < n (a bias on every row, e.g. qwen2's Q|K|V bias after the
 * fused projection). */
typedef struct dcp_add_rows_args {
    dcp_buffer *y;          /* [tokens][y_stride] f32 */
    uint32_t y_stride;      /* floats, >= n */
    dcp_buffer *b;          /* [n] f32 */
    uint32_t n;
    uint32_t tokens;
} dcp_add_rows_args;
DCP_API dcp_status dcp_op_add_rows(dcp_cmd *cmd, const dcp_add_rows_args *a);

/* RoPE of Q and K plus the KV write (shaders/rope_store.comp): src [tokens][src_stride] f32 rows
 * of [q_heads][D] | [kv_heads][D] | [kv_heads][D]; slot [tokens] u32 (page * page_size + row, or
 * DCP_KV_NO_SLOT: do not store); cs [tokens][n_rot/2][2] f32 (cos, sin); q_out [tokens][q_heads][D]
 * f32. pool (kv_heads and head_dim must match) may be NULL when no token is stored. neox: 0 rotates
 * adjacent pairs (2i, 2i+1) (llama's NORM mode), 1 the pairs (i, i + n_rot/2) (NEOX mode: qwen2,
 * qwen3, phi3).
 * A q8_0 pool is written in two passes: RoPE into kv_stage [tokens][2][kv_heads][D] f32 (every
 * token, through stage_slots [tokens] u32 holding 0, 1, 2, ...), then kv_append quantizes the
 * stored tokens from there (dcp_kv_pool_record_store); both are needed only for q8_0 pools. */
typedef struct dcp_rope_store_args {
    uint32_t tokens, q_heads, kv_heads, head_dim, n_rot, src_stride;
    dcp_buffer *src, *slot, *cs, *q_out;
    dcp_kv_pool *pool;
    uint32_t neox;
    dcp_buffer *kv_stage, *stage_slots;
} dcp_rope_store_args;
DCP_API dcp_status dcp_op_rope_store(dcp_cmd *cmd, const dcp_rope_store_args *a);

/* y [tokens][y_stride] = silu(x[:, :n]) * x[:, n:2n]. */
typedef struct dcp_swiglu_args {
    dcp_buffer *x;          /* [tokens][x_stride] f32: gate [n] | up [n] */
    uint32_t x_stride;      /* floats, >= 2 n */
    dcp_buffer *y;          /* [tokens][y_stride] f32 */
    uint32_t y_stride;      /* floats, >= n */
    uint32_t n;
    uint32_t tokens;
} dcp_swiglu_args;
DCP_API dcp_status dcp_op_swiglu(dcp_cmd *cmd, const dcp_swiglu_args *a);

/* y[i] = a[i] + b[i] for n floats (y may be a or b). */
DCP_API dcp_status dcp_op_add(dcp_cmd *cmd, dcp_buffer *a, dcp_buffer *b, dcp_buffer *y, uint32_t n);

/* out [rows] u32 = argmax of each row's first n values (ties: smallest index). */
typedef struct dcp_argmax_args {
    dcp_buffer *x;          /* [rows][stride] f32 */
    uint32_t n;
    uint32_t stride;        /* floats, >= n */
    uint32_t rows;
    dcp_buffer *out;        /* [rows] u32 */
} dcp_argmax_args;
DCP_API dcp_status dcp_op_argmax(dcp_cmd *cmd, const dcp_argmax_args *a);

/* ---- deepseek2 (MLA attention + MoE) kernels --------------------------------------------------
 * Per-head matrix products (absorption, W_UV), the q_pe rope, the latent-cache write, MoE routing
 * and the selected experts' products (src/ops/ds2_ops.c; push constants in src/kernels/ds2_params.h).
 * The latent RMSNorm is dcp_op_rmsnorm over the first kv_lora values of each kv_a row (x_stride
 * kv_lora + rope); the expert SwiGLU is dcp_op_swiglu over tokens * n_used rows; the latent decode
 * itself is the latent kind of the decode plan (include/dcpvk/attn.h).
 *
 * One layer's decode step on one rank (T tokens, Hq query heads projected here, R kv_lora, P rope,
 * N nope, V v; buffers f32):
 *   xn = rmsnorm(x)                                   dcp_op_rmsnorm
 *   q [T][Hq (N+P)] = wq xn (or wq_b rmsnorm(wq_a xn))  dcp_op_matmul
 *   kv [T][R+P] = wkv_a xn; c = rmsnorm(kv[:, :R])    dcp_op_matmul, dcp_op_rmsnorm
 *   latent pool row of each owned token = [c | rope(kv[:, R:])]           dcp_op_mla_kv_store
 *   Q [T][Hq][R+P]: [:R] = W_UK q_nope per head, [R:] = rope(q_pe)   dcp_op_head_matmul, dcp_op_mla_rope
 *   (DCP: Q gathered over the group) latent decode -> o_lat [T][Ho][R] (merged)    include/dcpvk/attn.h
 *   o [T][Ho V] = W_UV o_lat per head                 dcp_op_head_matmul
 *   x += wo o (row-parallel, all-reduced)             dcp_op_matmul
 *   FFN: dense as llama, or MoE: logits = gate_inp xn; dcp_op_moe_route; gu = dcp_op_moe_gate_up;
 *        h = swiglu(gu); x += dcp_op_moe_down(h) + shared experts (dense FFN of width fs).
 */

/* y[t][h y_head_stride + y_offset + n] (+)= sum_k W[h rows + n][k] x[t][h x_head_stride + x_offset + k]
 * for h < heads, n < rows (w->rows == heads * rows, k = w->k); x strides and offset multiples of 4. */
typedef struct dcp_head_matmul_args {
    const dcp_matrix *w;
    uint32_t heads, rows, tokens;
    dcp_buffer *x;
    uint32_t x_stride, x_head_stride, x_offset;
    dcp_buffer *y;
    uint32_t y_stride, y_head_stride, y_offset;
    int accumulate;
} dcp_head_matmul_args;
DCP_API dcp_status dcp_op_head_matmul(dcp_cmd *cmd, const dcp_head_matmul_args *a);

/* NORM-mode RoPE of the n_rot values at src_offset of every head, written at dst_offset of the
 * same head in dst: src [tokens][src_stride], dst [tokens][dst_stride], cs [tokens][n_rot/2][2]
 * (dcp_rope_cs). Offsets and strides even. */
typedef struct dcp_mla_rope_args {
    uint32_t tokens, heads, n_rot;
    dcp_buffer *src;
    uint32_t src_stride, src_head_stride, src_offset;
    dcp_buffer *dst;
    uint32_t dst_stride, dst_head_stride, dst_offset;
    dcp_buffer *cs;
} dcp_mla_rope_args;
DCP_API dcp_status dcp_op_mla_rope(dcp_cmd *cmd, const dcp_mla_rope_args *a);

/* Writes [c | rope(k_pe)] into the latent pool (K-only, one head of kv_lora + n_rot) for the
 * tokens whose slot[t] is not DCP_KV_NO_SLOT (slots from dcp_kv_cache_append_slots; page *
 * page_size + row): c [tokens][c_stride] from c_offset (kv_lora values), k_pe [tokens][kpe_stride]
 * from kpe_offset (n_rot values), cs [tokens][n_rot/2][2], slot [tokens] u32. Offsets and strides even. */
typedef struct dcp_mla_kv_store_args {
    uint32_t tokens, kv_lora, n_rot;
    dcp_buffer *c;
    uint32_t c_stride, c_offset;
    dcp_buffer *kpe;
    uint32_t kpe_stride, kpe_offset;
    dcp_buffer *cs, *slot;
    dcp_kv_pool *pool;
} dcp_mla_kv_store_args;
DCP_API dcp_status dcp_op_mla_kv_store(dcp_cmd *cmd, const dcp_mla_kv_store_args *a);

/* Expert gating function of a MoE layer (the GGUF's <arch>.expert_gating_func codes). */
typedef enum dcp_expert_gating {
    DCP_EXPERT_GATING_SOFTMAX = 1, /* probs = softmax over all experts of the router logits */
    DCP_EXPERT_GATING_SIGMOID = 2, /* probs = sigmoid of each router logit */
} dcp_expert_gating;

/* MoE routing (see dcp_moe_route_params in src/kernels/ds2_params.h): logits [tokens][logits_stride]
 * f32, bias [n_expert] f32 or NULL; writes ids [tokens][n_used] u32 (descending selection) and
 * weights [tokens][n_used] f32. */
typedef struct dcp_moe_route_args {
    uint32_t tokens, n_expert, n_used, n_groups, n_groups_used;
    dcp_expert_gating gating;
    int norm;
    float scale;
    dcp_buffer *logits;
    uint32_t logits_stride;
    dcp_buffer *bias;
    dcp_buffer *ids, *weights;
} dcp_moe_route_args;
DCP_API dcp_status dcp_op_moe_route(dcp_cmd *cmd, const dcp_moe_route_args *a);

/* The selected experts' products. w: every expert's rows, expert e's `rows` rows at e * rows
 * (w->rows == n_expert * rows). ids / weights from dcp_op_moe_route. Input (t, j) is x[t x_stride +
 * j x_used_stride ...] (x_used_stride 0: the same input for every slot), strides multiples of 4.
 *   gate_up: y[t y_stride + j y_used_stride + n] = W_{ids[t][j]}[n] . x(t, j)
 *   down:    y[t y_stride + n] (+)= sum_j weights[t][j] W_{ids[t][j]}[n] . x(t, j)
 * x(t, j) has w->k columns; a matrix with a column window reads only its columns [0, w->cols). */
typedef struct dcp_moe_matmul_args {
    const dcp_matrix *w;
    uint32_t n_expert, rows, tokens, n_used;
    dcp_buffer *ids, *weights;
    dcp_buffer *x;
    uint32_t x_stride, x_used_stride;
    dcp_buffer *y;
    uint32_t y_stride, y_used_stride;
    int accumulate;
} dcp_moe_matmul_args;
DCP_API dcp_status dcp_op_moe_gate_up(dcp_cmd *cmd, const dcp_moe_matmul_args *a);
DCP_API dcp_status dcp_op_moe_down(dcp_cmd *cmd, const dcp_moe_matmul_args *a);

#ifdef __cplusplus
}
#endif
#endif
