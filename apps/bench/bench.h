/* dcp-vk-bench subcommands. Each takes the arguments after its name and returns an exit code. */
#ifndef DCP_BENCH_H
#define DCP_BENCH_H

#include <stdint.h>

#include "dcpvk/vk.h"

int dcp_bench_attn(int argc, char **argv);
/* dcp-vk-bench comm (apps/bench/comm.c): exchange latency and bandwidth per collective and transport,
 * and a model decode step split into compute and exchange. */
int dcp_bench_comm(int argc, char **argv);
/* dcp-vk-bench capacity (apps/bench/capacity.c): longest context in a KV budget, plain TP vs DCP. */
int dcp_bench_capacity(int argc, char **argv);

/* dcp-vk-bench attn --dcp N (apps/bench/attn_dcp.c): the DCP attention step over N devices in one
 * process, or under mpiexec -n P with P x (devices per process) = N. */
typedef struct dcp_bench_dcp_opts {
    uint32_t dcp;            /* N: DCP group size (0: not a DCP run) */
    int backend;             /* dcp_cp_backend: 0 a2a, 1 ag_rs */
    uint32_t interleave;     /* I, divides the page size */
    int transport;           /* dcp_transport (in-process part) */
    int q_replicate;         /* 1: every rank gets the full Q, no gather */
    uint32_t ctx, batch, q_heads, kv_heads, head_dim, page_size, iters; /* as in attn; q_heads: after the gather */
    int dtype;               /* dcp_dtype of the KV cache */
    int verify, json;
    const char *devices;
} dcp_bench_dcp_opts;

int dcp_bench_attn_dcp(const dcp_bench_dcp_opts *o);

/* Yardsticks measured on one device in the same run: a plain streaming-read shader and
 * vkCmdCopyBuffer, in bytes per second. */
typedef struct dcp_bench_yardsticks {
    double stream_read_bps; /* bytes read per second by the streaming-read shader, 16-byte loads */
    double stream_read_u32_bps; /* the same with 4-byte loads (the plainest shader) */
    double copy_bps;        /* bytes copied per second by vkCmdCopyBuffer */
    uint64_t bytes;         /* size of the buffers measured */
} dcp_bench_yardsticks;

int dcp_bench_measure_yardsticks(dcp_device *dev, int iters, dcp_bench_yardsticks *out);

/* Median of n values (sorts them). */
double dcp_bench_median(double *v, int n);

#endif
