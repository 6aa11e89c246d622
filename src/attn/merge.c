/* Recording of the lse_merge shader. */
#include "attn/attn_internal.h"
#include "common/error.h"
#include "dcpvk/attn.h"
#include "kernels/kernels.h"

dcp_status dcp_out_groups_check(const char *what, const dcp_out_groups *g, uint64_t tokens, uint32_t heads,
                                uint32_t width, uint64_t *o_bytes, uint64_t *lse_bytes, uint32_t pc[3])
{
    pc[0] = pc[1] = pc[2] = 0;
    if (!g || g->count == 0) {
        *o_bytes = tokens * heads * width * 4;
        *lse_bytes = tokens * heads * 4;
        return DCP_OK;
    }
    const uint64_t o_group = tokens * g->group * width * 4, lse_group = tokens * g->group * 4;
    if ((uint64_t)g->count * g->group != heads || g->o_stride % 16 || g->lse_stride % 4 || g->o_stride < o_group ||
        g->lse_stride < lse_group || g->o_stride / 16 > UINT32_MAX || g->lse_stride / 4 > UINT32_MAX)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "%s: output groups of %u x %u heads for rows of %u heads, O stride %llu bytes (a multiple "
                        "of 16, at least %llu), LSE stride %llu (a multiple of 4, at least %llu)",
                        what, g->count, g->group, heads, (unsigned long long)g->o_stride,
                        (unsigned long long)o_group, (unsigned long long)g->lse_stride,
                        (unsigned long long)lse_group);
    *o_bytes = (g->count - 1) * g->o_stride + o_group;
    *lse_bytes = (g->count - 1) * g->lse_stride + lse_group;
    pc[0] = g->group;
    pc[1] = (uint32_t)(g->o_stride / 16);
    pc[2] = (uint32_t)(g->lse_stride / 4);
    return DCP_OK;
}

dcp_status dcp_lse_merge_record(dcp_cmd *cmd, const dcp_merge_args *a)
{
    return dcp_lse_merge_record_grouped(cmd, a, a->rows, NULL);
}

dcp_status dcp_lse_merge_record_grouped(dcp_cmd *cmd, const dcp_merge_args *a, uint32_t heads,
                                        const dcp_out_groups *g)
{
    if (a->parts == 0 || a->parts > 32767)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "lse_merge: %u parts (allowed 1..32767)", a->parts);
    if (a->head_dim == 0 || a->head_dim % 4)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "lse_merge: head dim %u is not a multiple of 4", a->head_dim);
    if (a->rows == 0) return DCP_OK;
    uint64_t need_o = ((uint64_t)(a->parts - 1) * a->o_part_stride + (uint64_t)a->rows * a->head_dim) * 4;
    uint64_t need_l = ((uint64_t)(a->parts - 1) * a->lse_part_stride + a->rows) * 4;
    if (heads == 0 || a->rows % heads)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "lse_merge: %u rows are not tokens of %u heads", a->rows, heads);
    uint64_t out_o, out_l;
    uint32_t pc[3];
    dcp_status st = dcp_out_groups_check("lse_merge", g, a->rows / heads, heads, a->head_dim, &out_o, &out_l, pc);
    if (st != DCP_OK) return st;
    dcp_binding b[4] = {{a->o_in, a->o_in_offset, need_o},
                        {a->lse_in, a->lse_in_offset, need_l},
                        {a->o_out, a->o_out_offset, out_o},
                        {a->lse_out, a->lse_out_offset, out_l}};
    dcp_lse_merge_params p = {a->parts, a->rows, a->head_dim, a->o_part_stride, a->lse_part_stride,
                              heads, pc[0], pc[1], pc[2]};
    dcp_device *dev = dcp_cmd_device(cmd);
    uint32_t spec[1] = {dcp_vk_workgroup_size(dev)};
    uint64_t n = (uint64_t)a->rows * (a->head_dim / 4);
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_LSE_MERGE, spec, b, &p, (uint32_t)((n + spec[0] - 1) / spec[0]), 1, 1);
}
