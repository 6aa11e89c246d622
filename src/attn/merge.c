/* Recording of the lse_merge shader and of the streaming-read yardstick. */
#include "common/error.h"
#include "dcpvk/attn.h"
#include "vk/pipelines.h"

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
    return dcp_cmd_dispatch(cmd, DCP_PIPE_LSE_MERGE, spec, b, &p, (uint32_t)((n + spec[0] - 1) / spec[0]), 1, 1);
}

dcp_status dcp_cmd_stream_read(dcp_cmd *cmd, dcp_buffer *src, uint64_t bytes, dcp_buffer *dst,
                               uint32_t load_bytes)
{
    if (bytes == 0 || bytes % 16 || bytes > dcp_buffer_size(src) || bytes / 4 > UINT32_MAX)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "stream_read: %llu bytes must be a positive multiple of 16 within the %llu-byte buffer",
                        (unsigned long long)bytes, (unsigned long long)dcp_buffer_size(src));
    if (load_bytes != 4 && load_bytes != 16)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "stream_read: %u bytes per load (allowed: 4, 16)", load_bytes);
    uint32_t wg = dcp_vk_workgroup_size(dcp_cmd_device(cmd));
    uint32_t words = (uint32_t)(bytes / 4);
    uint32_t per_group = wg * (load_bytes / 4) * 256; /* 256 loads per invocation */
    dcp_stream_read_params p = {words, per_group};
    dcp_binding b[2] = {{src, 0, bytes}, {dst, 0, 0}};
    uint32_t spec[1] = {wg};
    return dcp_cmd_dispatch(cmd, load_bytes == 16 ? DCP_PIPE_STREAM_READ : DCP_PIPE_STREAM_READ_U32, spec, b,
                            &p, (words + per_group - 1) / per_group, 1, 1);
}
