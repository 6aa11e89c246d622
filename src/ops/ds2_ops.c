/* Recording of the deepseek2 model kernels (see include/dcpvk/ops.h). */
#include <string.h>

#include "common/error.h"
#include "dcpvk/ops.h"
#include "kv/kv_internal.h"
#include "kernels/kernels.h"
#include "ops/ops_internal.h"

typedef unsigned long long ull;

static uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* Bytes a [rows][stride] float region needs when its last row uses `last` floats from `offset`. */
static uint64_t need(uint32_t rows, uint32_t stride, uint64_t last)
{
    return rows ? ((uint64_t)(rows - 1) * stride + last) * 4 : 0;
}

static dcp_status fits(const char *op, const char *what, dcp_buffer *b, uint64_t bytes)
{
    if (!b) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: no %s buffer", op, what);
    if (bytes > dcp_buffer_size(b))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: %s needs %llu bytes, its buffer has %llu", op, what, (ull)bytes,
                        (ull)dcp_buffer_size(b));
    return DCP_OK;
}

/* Workgroup size and rows per workgroup of the subgroup-per-row kernels. */
static void rows_spec(dcp_device *dev, uint32_t spec[2])
{
    const dcp_device_info *info = dcp_device_get_info(dev);
    uint32_t wg = dcp_vk_workgroup_size(dev);
    uint32_t rpw = wg / (info->subgroup_size ? info->subgroup_size : wg);
    spec[0] = wg;
    spec[1] = rpw ? rpw : 1;
}

dcp_status dcp_op_head_matmul(dcp_cmd *cmd, const dcp_head_matmul_args *a)
{
    const dcp_matrix *w = a->w;
    if (w->n_parts)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "head_matmul: a matrix of %u parts of different types (matmul only)",
                        w->n_parts);
    if (w->cols)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "head_matmul: a matrix with a column window (matmul only)");
    if (!a->heads || !a->rows || (uint64_t)a->heads * a->rows != w->rows)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "head_matmul: %u heads x %u rows do not match the %u-row matrix",
                        a->heads, a->rows, w->rows);
    if (a->x_stride % 4 || a->x_head_stride % 4 || a->x_offset % 4 || a->x_head_stride < w->k ||
        a->y_head_stride < a->rows)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "head_matmul: x stride %u / head stride %u / offset %u must be "
                        "multiples of 4, the head strides at least k %u (x) and rows %u (y, %u)", a->x_stride,
                        a->x_head_stride, a->x_offset, w->k, a->rows, a->y_head_stride);
    if (a->tokens == 0) return DCP_OK;
    dcp_status st;
    uint64_t xl = a->x_offset + (uint64_t)(a->heads - 1) * a->x_head_stride + w->k;
    uint64_t yl = a->y_offset + (uint64_t)(a->heads - 1) * a->y_head_stride + a->rows;
    if ((st = fits("head_matmul", "x", a->x, need(a->tokens, a->x_stride, xl)))) return st;
    if ((st = fits("head_matmul", "y", a->y, need(a->tokens, a->y_stride, yl)))) return st;
    uint32_t spec[2];
    rows_spec(dcp_cmd_device(cmd), spec);
    dcp_binding b[3] = {{w->buf, 0, 0}, {a->x, 0, 0}, {a->y, 0, 0}};
    dcp_head_matmul_params p = {
        .heads = a->heads, .rows = a->rows, .k = w->k, .tokens = a->tokens, .x_stride = a->x_stride,
        .x_head_stride = a->x_head_stride, .x_offset = a->x_offset, .y_stride = a->y_stride,
        .y_head_stride = a->y_head_stride, .y_offset = a->y_offset, .accumulate = a->accumulate ? 1u : 0u,
        .scale_offset = w->scale_offset};
    dcp_kernel_id id;
    if ((st = dcp_ops_weight_kernel("head_matmul", DCP_KERNEL_HEAD_MATMUL, w->type, &id))) return st;
    return dcp_kernel_dispatch(cmd, id, spec, b, &p, ceil_div(a->rows, spec[1]), a->heads,
                               ceil_div(a->tokens, DCP_HEAD_MATMUL_TOKENS));
}

dcp_status dcp_op_mla_rope(dcp_cmd *cmd, const dcp_mla_rope_args *a)
{
    if (!a->n_rot || a->n_rot % 2 || a->src_stride % 2 || a->src_head_stride % 2 || a->src_offset % 2 ||
        a->dst_stride % 2 || a->dst_head_stride % 2 || a->dst_offset % 2)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "mla_rope: n_rot %u and every stride and offset must be even",
                        a->n_rot);
    if (a->tokens == 0 || a->heads == 0) return DCP_OK;
    dcp_status st;
    uint64_t sl = a->src_offset + (uint64_t)(a->heads - 1) * a->src_head_stride + a->n_rot;
    uint64_t dl = a->dst_offset + (uint64_t)(a->heads - 1) * a->dst_head_stride + a->n_rot;
    if ((st = fits("mla_rope", "src", a->src, need(a->tokens, a->src_stride, sl)))) return st;
    if ((st = fits("mla_rope", "dst", a->dst, need(a->tokens, a->dst_stride, dl)))) return st;
    if ((st = fits("mla_rope", "cs", a->cs, (uint64_t)a->tokens * a->n_rot * 4))) return st;
    uint32_t wg = dcp_vk_workgroup_size(dcp_cmd_device(cmd));
    uint32_t spec[1] = {wg};
    dcp_binding b[3] = {{a->src, 0, 0}, {a->cs, 0, 0}, {a->dst, 0, 0}};
    dcp_mla_rope_params p = {
        .tokens = a->tokens, .heads = a->heads, .n_rot = a->n_rot, .src_stride = a->src_stride,
        .src_head_stride = a->src_head_stride, .src_offset = a->src_offset, .dst_stride = a->dst_stride,
        .dst_head_stride = a->dst_head_stride, .dst_offset = a->dst_offset};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_MLA_ROPE, spec, b, &p, ceil_div((uint64_t)a->heads * a->n_rot / 2, wg),
                               a->tokens, 1);
}

dcp_status dcp_op_mla_kv_store(dcp_cmd *cmd, const dcp_mla_kv_store_args *a)
{
    if (!a->pool) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "mla_kv_store: no latent pool");
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(a->pool);
    if (!pc->k_only || pc->kv_heads != 1 || pc->head_dim != a->kv_lora + a->n_rot)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "mla_kv_store: the pool must be K-only with one head of kv_lora + "
                        "rope = %u values (it is %s, %u heads of %u)", a->kv_lora + a->n_rot,
                        pc->k_only ? "K-only" : "K+V", pc->kv_heads, pc->head_dim);
    if (a->kv_lora % 2 || a->n_rot % 2 || a->c_stride % 2 || a->c_offset % 2 || a->kpe_stride % 2 || a->kpe_offset % 2)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "mla_kv_store: kv_lora %u, n_rot %u, strides and offsets must be even",
                        a->kv_lora, a->n_rot);
    if (dcp_kv_pool_device(a->pool) != dcp_cmd_device(cmd))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "mla_kv_store: the pool is not on the command's device");
    if (a->tokens == 0) return DCP_OK;
    dcp_status st;
    if ((st = fits("mla_kv_store", "c", a->c, need(a->tokens, a->c_stride, a->c_offset + (uint64_t)a->kv_lora)))) return st;
    if ((st = fits("mla_kv_store", "k_pe", a->kpe, need(a->tokens, a->kpe_stride, a->kpe_offset + (uint64_t)a->n_rot))))
        return st;
    if ((st = fits("mla_kv_store", "cs", a->cs, (uint64_t)a->tokens * a->n_rot * 4))) return st;
    if ((st = fits("mla_kv_store", "slot", a->slot, (uint64_t)a->tokens * 4))) return st;
    dcp_binding b[4 + DCP_KV_MAX_SEGMENTS];
    b[0] = (dcp_binding){a->c, 0, 0};
    b[1] = (dcp_binding){a->kpe, 0, 0};
    b[2] = (dcp_binding){a->cs, 0, 0};
    b[3] = (dcp_binding){a->slot, 0, 0};
    dcp_kv_pool_bindings(a->pool, b + 4);
    dcp_mla_kv_store_params p = {
        .tokens = a->tokens, .kv_lora = a->kv_lora, .n_rot = a->n_rot, .c_stride = a->c_stride, .c_offset = a->c_offset,
        .kpe_stride = a->kpe_stride, .kpe_offset = a->kpe_offset, .page_size = pc->page_size,
        .pages_per_segment = dcp_kv_pool_pages_per_segment(a->pool), .total_pages = pc->num_pages};
    uint32_t wg = dcp_vk_workgroup_size(dcp_cmd_device(cmd));
    uint32_t spec[1] = {wg};
    if (pc->dtype == DCP_DTYPE_Q8_0) /* one invocation per pair of blocks of 32 (shaders/mla_kv_store.comp) */
        return dcp_kernel_dispatch(cmd, DCP_KERNEL_MLA_KV_STORE_Q8_0, spec, b, &p,
                                   ceil_div(((uint64_t)a->kv_lora + a->n_rot + 63) / 64, wg), a->tokens, 1);
    dcp_kernel_id id = pc->dtype == DCP_DTYPE_F16 ? DCP_KERNEL_MLA_KV_STORE_F16 : DCP_KERNEL_MLA_KV_STORE_F32;
    return dcp_kernel_dispatch(cmd, id, spec, b, &p, ceil_div((a->kv_lora + a->n_rot) / 2, wg), a->tokens, 1);
}

dcp_status dcp_op_moe_route(dcp_cmd *cmd, const dcp_moe_route_args *a)
{
    const uint32_t X = a->n_expert, G = a->n_groups ? a->n_groups : 1;
    if (X == 0 || X > DCP_MOE_MAX_EXPERTS || a->n_used == 0 || a->n_used > X || X % G || (G > 1 && X / G < 2) ||
        (G > 1 && (a->n_groups_used == 0 || a->n_groups_used > G || a->n_used > a->n_groups_used * (X / G))))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "moe_route: %u experts (at most %d), %u used, %u groups (%u used) "
                        "are not a valid routing", X, DCP_MOE_MAX_EXPERTS, a->n_used, G, a->n_groups_used);
    if (a->gating != DCP_EXPERT_GATING_SOFTMAX && a->gating != DCP_EXPERT_GATING_SIGMOID)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "moe_route: gating %d (softmax 1, sigmoid 2)", (int)a->gating);
    if (a->logits_stride < X)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "moe_route: logits stride %u < %u experts", a->logits_stride, X);
    if (a->tokens == 0) return DCP_OK;
    dcp_status st;
    if ((st = fits("moe_route", "logits", a->logits, need(a->tokens, a->logits_stride, X)))) return st;
    if (a->bias && (st = fits("moe_route", "bias", a->bias, (uint64_t)X * 4))) return st;
    if ((st = fits("moe_route", "ids", a->ids, (uint64_t)a->tokens * a->n_used * 4))) return st;
    if ((st = fits("moe_route", "weights", a->weights, (uint64_t)a->tokens * a->n_used * 4))) return st;
    uint32_t spec[1] = {1};
    dcp_binding b[4] = {{a->logits, 0, 0}, {a->bias ? a->bias : a->logits, 0, 0}, {a->ids, 0, 0}, {a->weights, 0, 0}};
    dcp_moe_route_params p = {
        .tokens = a->tokens, .n_expert = X, .n_used = a->n_used, .n_groups = G,
        .n_groups_used = G > 1 ? a->n_groups_used : 1, .sigmoid = a->gating == DCP_EXPERT_GATING_SIGMOID,
        .norm = a->norm ? 1u : 0u, .has_bias = a->bias ? 1u : 0u, .logits_stride = a->logits_stride,
        .scale = a->scale};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_MOE_ROUTE, spec, b, &p, a->tokens, 1, 1);
}

static dcp_status moe_matmul(dcp_cmd *cmd, const dcp_moe_matmul_args *a, int down)
{
    const dcp_matrix *w = a->w;
    const char *op = down ? "moe_down" : "moe_gate_up";
    if (w->n_parts)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: a matrix of %u parts of different types (matmul only)", op,
                        w->n_parts);
    if (!a->n_expert || !a->rows || (uint64_t)a->n_expert * a->rows != w->rows || !a->n_used)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: %u experts x %u rows (%u used) do not match the %u-row matrix",
                        op, a->n_expert, a->rows, a->n_used, w->rows);
    if (a->x_stride % 4 || a->x_used_stride % 4)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: x strides %u / %u must be multiples of 4", op, a->x_stride,
                        a->x_used_stride);
    if (!down && a->y_used_stride < a->rows)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: y slot stride %u < %u rows", op, a->y_used_stride, a->rows);
    if (a->tokens == 0) return DCP_OK;
    dcp_status st;
    uint64_t xl = (uint64_t)(a->n_used - 1) * a->x_used_stride + w->k;
    uint64_t yl = down ? a->rows : (uint64_t)(a->n_used - 1) * a->y_used_stride + a->rows;
    if ((st = fits(op, "x", a->x, need(a->tokens, a->x_stride, xl)))) return st;
    if ((st = fits(op, "y", a->y, need(a->tokens, a->y_stride, yl)))) return st;
    if ((st = fits(op, "ids", a->ids, (uint64_t)a->tokens * a->n_used * 4))) return st;
    if (down && (st = fits(op, "weights", a->weights, (uint64_t)a->tokens * a->n_used * 4))) return st;
    /* A column window (w->cols > 0): the WIN variant reads x's columns [0, cols) a float at a time
     * against stored columns [col0, col0 + cols) of rows of held_k. */
    uint32_t spec[3];
    rows_spec(dcp_cmd_device(cmd), spec);
    spec[2] = w->cols ? 1u : 0u;
    dcp_binding b[5] = {{w->buf, 0, 0}, {a->x, 0, 0}, {a->y, 0, 0}, {a->ids, 0, 0},
                        {down ? a->weights : a->ids, 0, 0}};
    dcp_moe_matmul_params p = {
        .n_expert = a->n_expert, .rows = a->rows, .k = w->held_k, .tokens = a->tokens,
        .n_used = a->n_used, .x_stride = a->x_stride, .x_used_stride = a->x_used_stride, .y_stride = a->y_stride,
        .y_used_stride = a->y_used_stride, .accumulate = a->accumulate ? 1u : 0u, .scale_offset = w->scale_offset,
        .x_col0 = w->col0, .x_cols = w->cols};
    dcp_kernel_id id;
    if ((st = dcp_ops_weight_kernel(op, down ? DCP_KERNEL_MOE_DOWN : DCP_KERNEL_MOE_MATMUL, w->type, &id))) return st;
    uint64_t groups_y = down ? a->tokens : (uint64_t)a->tokens * a->n_used;
    if (groups_y > 65535)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: %llu token slots exceed one dispatch (65535)", op, (ull)groups_y);
    return dcp_kernel_dispatch(cmd, id, spec, b, &p, ceil_div(a->rows, spec[1]), (uint32_t)groups_y, 1);
}

dcp_status dcp_op_moe_gate_up(dcp_cmd *cmd, const dcp_moe_matmul_args *a) { return moe_matmul(cmd, a, 0); }
dcp_status dcp_op_moe_down(dcp_cmd *cmd, const dcp_moe_matmul_args *a) { return moe_matmul(cmd, a, 1); }
