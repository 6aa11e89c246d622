/* Recording of the DCP step's shaders: cp_scale (ag_rs), permute (Q unpack, a2a packing) and
 * part_sum (mailbox reductions: all-reduce, reduce-scatter). */
#include "attn/cp_internal.h"
#include "common/error.h"
#include "kernels/kernels.h"

/* Workgroups for n invocations: x up to 65535, the rest in y. */
static void grid(uint64_t n, uint32_t wg, uint32_t *gx, uint32_t *gy)
{
    uint64_t groups = (n + wg - 1) / wg;
    *gx = groups > 65535 ? 65535 : (uint32_t)groups;
    *gy = *gx ? (uint32_t)((groups + *gx - 1) / *gx) : 0;
}

dcp_status dcp_cp_scale_record(dcp_cmd *cmd, const dcp_cp_scale_params *p, dcp_buffer *o_in, uint64_t o_in_offset,
                            dcp_buffer *lse_all, uint64_t lse_all_offset, dcp_buffer *send, uint64_t send_offset,
                            dcp_buffer *lse_out, uint64_t lse_out_offset)
{
    if (p->head_dim == 0 || p->head_dim % 4 || p->rank >= p->ranks)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "cp_scale: head dim %u (multiple of 4) or rank %u of %u", p->head_dim,
                        p->rank, p->ranks);
    const uint64_t B = p->batch, NH = (uint64_t)p->ranks * p->heads_local, D = p->head_dim;
    if (B * NH == 0) return DCP_OK;
    dcp_binding b[4] = {{o_in, o_in_offset, B * NH * D * 4},
                        {lse_all, lse_all_offset, ((uint64_t)(p->ranks - 1) * (p->lse_stride ? p->lse_stride : B * NH) + B * NH) * 4},
                        {send, send_offset, B * NH * D * 4},
                        {lse_out, lse_out_offset, B * p->heads_local * 4}};
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    uint64_t n = B * NH * (D / 4);
    if ((n + spec[0] - 1) / spec[0] > 65535)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "cp_scale: %llu invocations exceed one dispatch row", (unsigned long long)n);
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_CP_SCALE, spec, b, p, (uint32_t)((n + spec[0] - 1) / spec[0]), 1, 1);
}

dcp_status dcp_permute_record(dcp_cmd *cmd, const dcp_permute_params *p, dcp_buffer *src, uint64_t src_offset,
                              dcp_buffer *dst, uint64_t dst_offset)
{
    uint64_t n = (uint64_t)p->a * p->b * p->c;
    if (n == 0) return DCP_OK;
    if (p->src_stride_a < (uint64_t)p->b * p->c || p->dst_stride_b < (uint64_t)p->a * p->c)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "permute: strides %u / %u below the block sizes %llu / %llu",
                        p->src_stride_a, p->dst_stride_b, (unsigned long long)p->b * p->c,
                        (unsigned long long)p->a * p->c);
    uint64_t src_n = (uint64_t)(p->a - 1) * p->src_stride_a + (uint64_t)p->b * p->c;
    uint64_t dst_n = (uint64_t)(p->b - 1) * p->dst_stride_b + (uint64_t)p->a * p->c;
    dcp_binding b[2] = {{src, src_offset, src_n * 4}, {dst, dst_offset, dst_n * 4}};
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    uint32_t gx, gy;
    grid(n, spec[0], &gx, &gy);
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_PERMUTE, spec, b, p, gx, gy, 1);
}

dcp_status dcp_part_sum_record(dcp_cmd *cmd, const dcp_part_sum_params *p, dcp_buffer *x, uint64_t x_offset,
                               dcp_buffer *y, uint64_t y_offset)
{
    if (p->parts == 0 || p->part_stride < p->n)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "part_sum: %u parts (>= 1) with a stride of %u floats below n = %u",
                        p->parts, p->part_stride, p->n);
    if (p->n == 0) return DCP_OK;
    uint64_t x_n = (uint64_t)p->x_offset + (uint64_t)(p->parts - 1) * p->part_stride + p->n;
    uint64_t y_n = (uint64_t)p->y_offset + p->n;
    dcp_binding b[2] = {{x, x_offset, x_n * 4}, {y, y_offset, y_n * 4}};
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    uint32_t gx, gy;
    grid(p->n, spec[0], &gx, &gy);
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_PART_SUM, spec, b, p, gx, gy, 1);
}
