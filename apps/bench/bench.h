/* dcp-vk-bench subcommands. Each takes the arguments after its name and returns an exit code. */
#ifndef DCP_BENCH_H
#define DCP_BENCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

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
/* dcp-vk-bench ops (apps/bench/ops.c): the model kernels other than matmul and attention against
 * the roofline. */
int dcp_bench_ops(int argc, char **argv);
/* dcp-vk-bench spec (apps/bench/spec.c): tokens/s of a greedy request with and without speculative
 * decoding (n-gram drafts on a self-quoting prompt, a draft model), acceptance counters. */
int dcp_bench_spec(int argc, char **argv);
/* dcp-vk-bench yardsticks (apps/bench/yardsticks.c): the yardsticks of one device alone. */
int dcp_bench_yardsticks_cmd(int argc, char **argv);

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

/* Opens every device ($DCP_VK_DEVICES, else all) into *ctx and takes device `index` of them into
 * *dev, for the subcommands that measure one device (--device I). Returns 0, or an exit code after
 * printing why to stderr (prog: the message's prefix): DCP_EXIT_USAGE for an index past the
 * devices, DCP_EXIT_RUNTIME when the devices do not open; *ctx is then NULL. Destroy *ctx with
 * dcp_context_destroy. */
int dcp_bench_open_device(const char *prog, uint32_t index, dcp_context **ctx, dcp_device **dev);

/* Fills n elements of dtype t (dcp_dtype f32 or f16) with deterministic values in (-1, 1). */
void dcp_bench_fill_random(void *dst, uint64_t n, int t, uint64_t seed);

/* Yardsticks of one device measured in the same run as the kernels (apps/bench/yardsticks.c):
 * the ceilings of the roofline (docs/design.md section 16). */
typedef struct dcp_bench_yardsticks {
    double stream_read_bps;     /* bytes read per second by the streaming-read shader, 16-byte loads */
    double stream_read_u32_bps; /* the same with 4-byte loads (the plainest shader), measured once */
    double copy_bps;            /* bytes copied per second by vkCmdCopyBuffer, measured once */
    uint64_t bytes;             /* bytes each streaming read reads */
    double fma_flops;           /* FLOP/s of the FMA shader (2 FLOPs per f32 FMA) */
    double fma_flop_count;      /* FLOPs of its dispatch (calibrated to take 2 ms or more) */
    uint64_t fma_invocations;   /* invocations of that dispatch, DCP_FMA_CHAINS chains each */
    uint32_t fma_iters;         /* its loop iterations (DCP_FMA_UNROLL steps of every chain) */
    double dispatch_ns;         /* one empty dispatch among many in one command buffer, each
                                 * followed by a barrier, as a step records its kernels */
    double host_wait_ns;        /* submit + fence wait of an empty command buffer, wall clock */
    int samples;                /* samples the medians are taken over */
} dcp_bench_yardsticks;

/* A ruler: the yardsticks of one device, sampled between a kernel's runs so that a shared, noisy
 * machine slows both alike (ruler sample, kernel run, ruler sample, ...). Created by
 * dcp_bench_ruler_create (buffers of the device's storage-buffer range up to 256 MiB, the FMA
 * dispatch calibrated), destroyed by dcp_bench_ruler_destroy, before its device. Not thread-safe. */
typedef struct dcp_bench_ruler dcp_bench_ruler;
/* Returns 0, or -1 after printing what failed. */
int dcp_bench_ruler_create(dcp_device *dev, dcp_bench_ruler **out);
void dcp_bench_ruler_destroy(dcp_bench_ruler *r);
/* Takes one sample of each yardstick (one submit and wait, then a few host waits). Returns 0, or
 * -1 after printing what failed. */
int dcp_bench_ruler_sample(dcp_bench_ruler *r);
/* Samples taken so far (to pass as `first` below). */
int dcp_bench_ruler_count(const dcp_bench_ruler *r);
/* Medians of the samples [first, count) (all of them when first is out of range). */
void dcp_bench_ruler_get(const dcp_bench_ruler *r, int first, dcp_bench_yardsticks *out);
/* A ruler of `iters` samples taken back to back. Returns 0, or -1 after printing what failed. */
int dcp_bench_measure_yardsticks(dcp_device *dev, int iters, dcp_bench_yardsticks *out);
/* Prints the yardsticks as one JSON object, or as one line of text naming the device. */
void dcp_bench_yardsticks_json(FILE *f, const dcp_bench_yardsticks *y);
void dcp_bench_yardsticks_text(FILE *f, const char *device, const dcp_bench_yardsticks *y);

/* A kernel against the yardsticks: roofline time max(bytes / read rate, FLOPs / FMA rate) and the
 * fraction of it reached, roofline time / measured time (1 = at the ceiling). What each kernel
 * counts as its bytes and FLOPs: docs/design.md section 16. */
typedef struct dcp_bench_roofline {
    double bytes;        /* bytes the kernel has to read and write */
    double flops;        /* its FLOPs, 2 per multiply-add */
    double read_ns;      /* bytes / the streaming-read rate */
    double fma_ns;       /* flops / the FMA rate */
    double roofline_ns;  /* max(read_ns, fma_ns) */
    double measured_ns;  /* the kernel's time */
    double fraction;     /* roofline_ns / measured_ns */
} dcp_bench_roofline;
dcp_bench_roofline dcp_bench_roofline_of(const dcp_bench_yardsticks *y, double bytes, double flops,
                                         double measured_ns);
/* "read" or "fma": the ceiling that bounds the kernel. */
const char *dcp_bench_roofline_bound(const dcp_bench_roofline *r);
/* Prints the roofline as JSON members (no braces): bytes, flops, intensity (FLOPs per byte),
 * measured_us, roofline_us, bound, of_roofline, achieved_gbps, achieved_gflops and the read_gbps
 * and fma_gflops of y it was computed with. */
void dcp_bench_roofline_json(FILE *f, const dcp_bench_roofline *r, const dcp_bench_yardsticks *y);

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
