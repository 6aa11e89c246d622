/* dcp-vk-bench subcommands. Each takes the arguments after its name and returns an exit code. */
#ifndef DCP_BENCH_H
#define DCP_BENCH_H

#include <stdint.h>

#include "dcpvk/vk.h"

int dcp_bench_attn(int argc, char **argv);
/* dcp-vk-bench capacity (apps/bench/capacity.c): longest context in a KV budget, plain TP vs DCP. */
int dcp_bench_capacity(int argc, char **argv);

/* Yardsticks measured on one device in the same run: a plain streaming-read shader and
 * vkCmdCopyBuffer, in bytes per second. */
typedef struct dcp_bench_yardsticks {
    double stream_read_bps; /* bytes read per second by the streaming-read shader */
    double copy_bps;        /* bytes copied per second by vkCmdCopyBuffer */
    uint64_t bytes;         /* size of the buffers measured */
} dcp_bench_yardsticks;

int dcp_bench_measure_yardsticks(dcp_device *dev, int iters, dcp_bench_yardsticks *out);

/* Median of n values (sorts them). */
double dcp_bench_median(double *v, int n);

#endif
