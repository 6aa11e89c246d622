/* The yardsticks (see src/kernels/yardstick.h). */
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

uint64_t dcp_fma_peak_invocations(const dcp_device *dev, uint32_t groups)
{
    return (uint64_t)groups * dcp_vk_workgroup_size(dev);
}

double dcp_fma_peak_flops(const dcp_device *dev, uint32_t groups, uint32_t iters)
{
    return 2.0 * (double)dcp_fma_peak_invocations(dev, groups) * DCP_FMA_CHAINS * iters * DCP_FMA_UNROLL;
}

dcp_status dcp_cmd_fma_peak(dcp_cmd *cmd, dcp_buffer *dst, uint32_t groups, uint32_t iters, float mul,
                            float add)
{
    enum { MAX_X = 65535 }; /* the smallest maxComputeWorkGroupCount Vulkan allows */
    const dcp_device *dev = dcp_cmd_device(cmd);
    if (groups == 0 || groups > MAX_X || iters > DCP_FMA_MAX_ITERS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "fma_peak: %u workgroups (allowed 1 .. %d) and %u iterations (at most %u)",
                        groups, MAX_X, iters, DCP_FMA_MAX_ITERS);
    uint64_t need = 4 * dcp_fma_peak_invocations(dev, groups);
    uint64_t range = dcp_device_get_info(dev)->max_storage_buffer_range;
    if (need > dcp_buffer_size(dst) || need > range)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "fma_peak: %u workgroups write %llu bytes; the buffer holds %llu, the device binds at most %llu",
                        groups, (unsigned long long)need, (unsigned long long)dcp_buffer_size(dst),
                        (unsigned long long)range);
    dcp_fma_peak_params p = {iters, mul, add};
    dcp_binding b[1] = {{dst, 0, need}};
    uint32_t spec[1] = {dcp_vk_workgroup_size(dev)};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_FMA_PEAK, spec, b, &p, groups, 1, 1);
}
