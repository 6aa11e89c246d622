/* The benchmark's yardsticks: a streaming-read shader and vkCmdCopyBuffer on the same device. */
#include <stdlib.h>

#include "bench/bench.h"
#include "common/cli.h"
#include "kernels/yardstick.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double dcp_bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int dcp_bench_measure_yardsticks(dcp_device *dev, int iters, dcp_bench_yardsticks *out)
{
    const dcp_device_info *info = dcp_device_get_info(dev);
    uint64_t bytes = info->max_storage_buffer_range;
    if (bytes > (256ull << 20)) bytes = 256ull << 20;
    bytes &= ~15ull;
    dcp_buffer *a = NULL, *b = NULL, *sink = NULL;
    dcp_cmd *cmd = NULL;
    double read_ns[16], read32_ns[16], copy_ns[16];
    if (iters > 16) iters = 16;
    dcp_status st = dcp_buffer_create(dev, bytes, DCP_MEMORY_DEVICE, &a);
    if (st == DCP_OK) st = dcp_buffer_create(dev, bytes, DCP_MEMORY_DEVICE, &b);
    if (st == DCP_OK) st = dcp_buffer_create(dev, 16, DCP_MEMORY_DEVICE, &sink);
    if (st == DCP_OK) st = dcp_buffer_fill(a, 0, bytes, 0x3c003c00u);
    if (st == DCP_OK) st = dcp_cmd_create(dev, &cmd);
    for (int it = 0; st == DCP_OK && it <= iters; it++) { /* iteration 0 warms up */
        uint32_t t0, t1, t2, t3;
        st = dcp_cmd_reset(cmd);
        if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t0);
        if (st == DCP_OK) st = dcp_cmd_stream_read(cmd, a, bytes, sink, 16);
        if (st == DCP_OK) dcp_cmd_barrier(cmd); /* one measurement -> the next (keeps them apart) */
        if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t1);
        if (st == DCP_OK) st = dcp_cmd_stream_read(cmd, a, bytes, sink, 4);
        if (st == DCP_OK) dcp_cmd_barrier(cmd); /* one measurement -> the next */
        if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t2);
        if (st == DCP_OK) st = dcp_cmd_copy(cmd, a, 0, b, 0, bytes);
        if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t3);
        if (st == DCP_OK) st = dcp_cmd_run(cmd);
        if (st == DCP_OK && it > 0) st = dcp_cmd_elapsed_ns(cmd, t0, t1, &read_ns[it - 1]);
        if (st == DCP_OK && it > 0) st = dcp_cmd_elapsed_ns(cmd, t1, t2, &read32_ns[it - 1]);
        if (st == DCP_OK && it > 0) st = dcp_cmd_elapsed_ns(cmd, t2, t3, &copy_ns[it - 1]);
    }
    if (st == DCP_OK) {
        out->bytes = bytes;
        out->stream_read_bps = (double)bytes / (dcp_bench_median(read_ns, iters) * 1e-9);
        out->stream_read_u32_bps = (double)bytes / (dcp_bench_median(read32_ns, iters) * 1e-9);
        out->copy_bps = (double)bytes / (dcp_bench_median(copy_ns, iters) * 1e-9);
    } else {
        dcp_cli_report("dcp-vk-bench", "measuring the yardsticks", st);
    }
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(a);
    dcp_buffer_destroy(b);
    dcp_buffer_destroy(sink);
    return st == DCP_OK ? 0 : -1;
}
