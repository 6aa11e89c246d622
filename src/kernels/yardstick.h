/* The yardsticks: plain shaders that only read a buffer (stream_read) or only run fused
 * multiply-adds (fma_peak), the ceilings a kernel's memory and FLOP rates are compared with. A
 * benchmark tool, not part of the public API: dcp-vk-bench (apps/bench/yardsticks.c, which
 * measures them) and the tests include this header. */
#ifndef DCP_KERNELS_YARDSTICK_H
#define DCP_KERNELS_YARDSTICK_H

#include <stdint.h>

#include "dcpvk/vk.h"
#include "kernels/yardstick_params.h"

/* Records the stream_read shader (shaders/stream_read.comp): reads the first `bytes` bytes (a
 * positive multiple of 16, within src) of src, load_bytes (16 or 4) per load per invocation, 256
 * loads per invocation, and writes at most 4 bytes of dst. DCP_ERR_INVALID_ARGUMENT for other
 * sizes. Record-only, like every op: the caller submits. */
dcp_status dcp_cmd_stream_read(dcp_cmd *cmd, dcp_buffer *src, uint64_t bytes, dcp_buffer *dst,
                               uint32_t load_bytes);

/* Longest loop of fma_peak: iters * DCP_FMA_UNROLL * DCP_FMA_VEC4 stays under Mesa 22 lavapipe's
 * 65,535 loop iterations per invocation even if the compiler unrolls nothing. */
#define DCP_FMA_MAX_ITERS 1024u

/* Records the fma_peak shader (shaders/fma_peak.comp): `groups` workgroups (1 .. 65535, the
 * smallest maxComputeWorkGroupCount Vulkan allows: 65535 x 64 invocations x 1024 iterations are
 * over 10^12 FLOPs, enough for any device) of dcp_fma_peak_invocations(dev, 1) invocations; each runs DCP_FMA_CHAINS independent f32
 * chains x <- fma(x, mul, add) for iters * DCP_FMA_UNROLL steps (iters 0 .. DCP_FMA_MAX_ITERS)
 * and writes the sum of its chains as one f32 to dst [invocations] (dst holds at least
 * 4 * invocations bytes). DCP_ERR_INVALID_ARGUMENT otherwise. Record-only: the caller submits. */
dcp_status dcp_cmd_fma_peak(dcp_cmd *cmd, dcp_buffer *dst, uint32_t groups, uint32_t iters, float mul,
                            float add);
/* Invocations of `groups` workgroups of fma_peak on dev. Thread-safe. */
uint64_t dcp_fma_peak_invocations(const dcp_device *dev, uint32_t groups);
/* FLOPs of one such dispatch: 2 per FMA (invocations * DCP_FMA_CHAINS * iters * DCP_FMA_UNROLL
 * FMAs); the final sum of the chains is not counted. */
double dcp_fma_peak_flops(const dcp_device *dev, uint32_t groups, uint32_t iters);

#endif
