/* The streaming-read yardstick: a plain shader that only reads a buffer, the ceiling a kernel's
 * memory rate is compared with. A benchmark tool, not part of the public API: dcp-vk-bench
 * (apps/bench/yardsticks.c) includes this header. */
#ifndef DCP_KERNELS_YARDSTICK_H
#define DCP_KERNELS_YARDSTICK_H

#include <stdint.h>

#include "dcpvk/vk.h"

/* Records the stream_read shader (shaders/stream_read.comp): reads the first `bytes` bytes (a
 * positive multiple of 16, within src) of src, load_bytes (16 or 4) per load per invocation, 256
 * loads per invocation, and writes at most 4 bytes of dst. DCP_ERR_INVALID_ARGUMENT for other
 * sizes. Record-only, like every op: the caller submits. */
dcp_status dcp_cmd_stream_read(dcp_cmd *cmd, dcp_buffer *src, uint64_t bytes, dcp_buffer *dst,
                               uint32_t load_bytes);

#endif
