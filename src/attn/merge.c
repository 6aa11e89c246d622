/* Recording of the lse_merge shader. */
#include "common/error.h"
#include "dcpvk/attn.h"
#include "kernels/kernels.h"

dcp_status dcp_lse_merge_record(dcp_cmd *cmd, const dcp_merge_args *a)
{
    if (a->parts == 0 || a->parts > 32767)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "lse_merge: %u parts (allowed 1..32767)", a->parts);
    if (a->head_dim == 0 || a->head_dim % 4)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "lse_merge: head dim %u is not a multiple of 4", a->head_dim);
    if (a->rows == 0) return DCP_OK;
    uint64_t need_o = ((uint64_t)(a->parts - 1) * a->o_part_stride + (uint64_t)a->rows * a->head_dim) * 4;
    uint64_t need_l = ((uint64_t)(a->parts - 1) * a->lse_part_stride + a->rows) * 4;
    dcp_binding b[4] = {{a->o_in, a->o_in_offset, need_o},
                        {a->lse_in, a->lse_in_offset, need_l},
                        {a->o_out, a->o_out_offset, (uint64_t)a->rows * a->head_dim * 4},
                        {a->lse_out, a->lse_out_offset, (uint64_t)a->rows * 4}};
    dcp_lse_merge_params p = {a->parts, a->rows, a->head_dim, a->o_part_stride, a->lse_part_stride};
    dcp_device *dev = dcp_cmd_device(cmd);
    uint32_t spec[1] = {dcp_vk_workgroup_size(dev)};
    uint64_t n = (uint64_t)a->rows * (a->head_dim / 4);
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_LSE_MERGE, spec, b, &p, (uint32_t)((n + spec[0] - 1) / spec[0]), 1, 1);
}
