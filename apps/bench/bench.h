/* dcp-vk-bench subcommands. Each takes the arguments after its name and returns an exit code. */
#ifndef DCP_BENCH_H
#define DCP_BENCH_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/vk.h"

/* dcp-vk-bench attn (apps/bench/attn.c): paged decode attention, GQA or (--mla) MLA's latent
 * decode, on each device; with --dcp the DCP step (attn_dcp.c). */
int dcp_bench_attn(int argc, char **argv);
/* dcp-vk-bench comm (apps/bench/comm.c): exchange latency and bandwidth per collective and transport,
 * and a model decode step split into compute and exchange. */
int dcp_bench_comm(int argc, char **argv);
/* dcp-vk-bench capacity (apps/bench/capacity.c): longest context in a KV budget, plain TP vs DCP. */
int dcp_bench_capacity(int argc, char **argv);
/* dcp-vk-bench matmul (apps/bench/matmul.c): weight read rate of each weight type at several batch
 * sizes against the same device's yardsticks. */
int dcp_bench_matmul(int argc, char **argv);

/* dcp-vk-bench attn --dcp N (apps/bench/attn_dcp.c): the DCP attention step over N devices in one
 * process, or under mpiexec -n P with P x (devices per process) = N. */
typedef struct dcp_bench_dcp_opts {
    uint32_t dcp;            /* N: DCP group size (0: not a DCP run) */
    int backend;             /* dcp_cp_backend: 0 a2a, 1 ag_rs */
    uint32_t interleave;     /* I, divides the page size */
    int transport;           /* dcp_transport (in-process part) */
    bool q_replicate;        /* every rank gets the full Q, no gather */
    uint32_t ctx, batch, q_heads, kv_heads, head_dim, page_size, iters; /* as in attn; q_heads: after the gather */
    int dtype;               /* dcp_dtype of the KV cache */
    bool verify, json;
    const char *devices;
} dcp_bench_dcp_opts;

int dcp_bench_attn_dcp(const dcp_bench_dcp_opts *o);

/* Fills n elements of dtype t (dcp_dtype f32 or f16) with deterministic values in (-1, 1). */
void dcp_bench_fill_random(void *dst, uint64_t n, int t, uint64_t seed);

/* Yardsticks measured on one device in the same run: a plain streaming-read shader and
 * vkCmdCopyBuffer, in bytes per second. */
typedef struct dcp_bench_yardsticks {
    double stream_read_bps; /* bytes read per second by the streaming-read shader, 16-byte loads */
    double stream_read_u32_bps; /* the same with 4-byte loads (the plainest shader) */
    double copy_bps;        /* bytes copied per second by vkCmdCopyBuffer */
    uint64_t bytes;         /* size of the buffers measured */
} dcp_bench_yardsticks;

int dcp_bench_measure_yardsticks(dcp_device *dev, int iters, dcp_bench_yardsticks *out);

/* What a benchmark configuration needs, counted before anything is allocated (apps/bench/memcheck.c). */
enum { DCP_BENCH_MAX_DEVICES = 1024 };
typedef struct dcp_bench_need {
    int count;                                /* devices */
    dcp_device *devs[DCP_BENCH_MAX_DEVICES];
    uint64_t device[DCP_BENCH_MAX_DEVICES];   /* bytes on each device */
    uint64_t largest[DCP_BENCH_MAX_DEVICES];  /* its largest buffer */
    const char *largest_what;
    uint64_t host;                            /* host bytes (copies that fill the device buffers) */
    dcp_status status;                        /* DCP_OK, or a configuration the counting refused */
    char error[512];                          /* its message */
} dcp_bench_need;
/* Fills *need for a context of ctx tokens. */
typedef void (*dcp_bench_need_fn)(void *user, uint32_t ctx, dcp_bench_need *need);
/* Checks the needs at ctx against the devices (their range and memory budget; CPU devices and the
 * host copies together). Returns 0, or DCP_EXIT_USAGE after printing (unless quiet) what is needed,
 * what is available and the longest --ctx that fits. */
int dcp_bench_check_memory(const char *prog, uint32_t ctx, dcp_bench_need_fn fn, void *user, int quiet);

/* Median of n values (sorts them). */
double dcp_bench_median(double *v, int n);

#endif
