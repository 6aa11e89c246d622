/* Recording of the deepseek2 model kernels (MLA and MoE) into a caller's command buffer:
 * per-head matrix products (absorption, W_UV), the q_pe rope, the latent-cache write, MoE routing
 * and the selected experts' products. The latent RMSNorm is dcp_op_rmsnorm (src/model/ops.h) over
 * the first kv_lora values of each kv_a row (x_stride kv_lora + rope); the expert SwiGLU is
 * dcp_op_swiglu over tokens * n_used rows. The latent decode itself is include/dcpvk/mla.h.
 *
 * One layer's decode step on one rank (T tokens, Hq query heads projected here, R kv_lora, P rope,
 * N nope, V v; buffers f32):
 *   xn = rmsnorm(x)                                   dcp_op_rmsnorm
 *   q [T][Hq (N+P)] = wq xn (or wq_b rmsnorm(wq_a xn))  dcp_op_matmul
 *   kv [T][R+P] = wkv_a xn; c = rmsnorm(kv[:, :R])    dcp_op_matmul, dcp_op_rmsnorm
 *   latent pool row of each owned token = [c | rope(kv[:, R:])]           dcp_op_mla_kv_store
 *   Q [T][Hq][R+P]: [:R] = W_UK q_nope per head, [R:] = rope(q_pe)   dcp_op_head_matmul, dcp_op_mla_rope
 *   (DCP: Q gathered over the group) latent decode -> o_lat [T][Ho][R] (merged)    include/dcpvk/mla.h
 *   o [T][Ho V] = W_UV o_lat per head                 dcp_op_head_matmul
 *   x += wo o (row-parallel, all-reduced)             dcp_op_matmul
 *   FFN: dense as llama, or MoE: logits = gate_inp xn; dcp_op_moe_route; gu = dcp_op_moe_gate_up;
 *        h = swiglu(gu); x += dcp_op_moe_down(h) + shared experts (dense FFN of width fs).
 * Every op only records; the caller orders dependent ops with dcp_cmd_barrier. Buffers are bound
 * whole (offset 0); offsets go through push constants. Not thread-safe per command. */
#ifndef DCP_MODEL_MLA_OPS_H
#define DCP_MODEL_MLA_OPS_H

#include <stdint.h>

#include "dcpvk/kv.h"
#include "dcpvk/model_config.h"
#include "dcpvk/vk.h"
#include "model/ops.h"

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
dcp_status dcp_op_head_matmul(dcp_cmd *cmd, const dcp_head_matmul_args *a);

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
dcp_status dcp_op_mla_rope(dcp_cmd *cmd, const dcp_mla_rope_args *a);

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
dcp_status dcp_op_mla_kv_store(dcp_cmd *cmd, const dcp_mla_kv_store_args *a);

/* MoE routing (see dcp_moe_route_params in src/model/ds2_params.h): logits [tokens][logits_stride]
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
dcp_status dcp_op_moe_route(dcp_cmd *cmd, const dcp_moe_route_args *a);
/* The routing of a model config's MoE layer (tokens, logits and outputs still to be set). */
void dcp_moe_route_args_from_config(const dcp_model_config *cfg, dcp_moe_route_args *out);

/* The selected experts' products. w: every expert's rows, expert e's `rows` rows at e * rows
 * (w->rows == n_expert * rows). ids / weights from dcp_op_moe_route. Input (t, j) is x[t x_stride +
 * j x_used_stride ...] (x_used_stride 0: the same input for every slot), strides multiples of 4.
 *   gate_up: y[t y_stride + j y_used_stride + n] = W_{ids[t][j]}[n] . x(t, j)
 *   down:    y[t y_stride + n] (+)= sum_j weights[t][j] W_{ids[t][j]}[n] . x(t, j) */
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
dcp_status dcp_op_moe_gate_up(dcp_cmd *cmd, const dcp_moe_matmul_args *a);
dcp_status dcp_op_moe_down(dcp_cmd *cmd, const dcp_moe_matmul_args *a);

#endif
