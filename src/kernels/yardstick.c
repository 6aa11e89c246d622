/* The streaming-read yardstick (see src/kernels/yardstick.h). */
#include "common/error.h"
#include "kernels/kernels.h"
#include "kernels/yardstick.h"

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
    return dcp_kernel_dispatch(cmd, load_bytes == 16 ? DCP_KERNEL_STREAM_READ : DCP_KERNEL_STREAM_READ_U32, spec, b,
                               &p, (words + per_group - 1) / per_group, 1, 1);
}
