/* The benchmark's yardsticks on one device, measured in the same run as the kernels and
 * interleaved with them (a ruler sample, a kernel run, a ruler sample, ...): the streaming-read
 * shader, the FMA shader, an empty dispatch and a host wait (vkCmdCopyBuffer and 4-byte loads once,
 * for context), and the roofline of a kernel against them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "common/error.h"
#include "kernels/yardstick.h"

enum {
    MAX_SAMPLES = 4096,
    EMPTY_DISPATCHES = 48, /* empty dispatches per sample, one after the other in one command buffer */
    HOST_WAITS = 4,        /* host waits per sample */
};

struct dcp_bench_ruler {
    dcp_device *dev;
    dcp_buffer *src, *sink, *fma_out;
    dcp_cmd *cmd, *empty;
    uint64_t bytes;                 /* read by each streaming-read sample */
    uint32_t fma_groups, fma_iters; /* the calibrated FMA dispatch */
    double read_u32_bps, copy_bps;  /* measured once, at creation */
    int count;                      /* samples taken */
    double *read_ns, *fma_ns, *dispatch_ns, *wait_ns; /* [MAX_SAMPLES], [.. * HOST_WAITS] for wait_ns */
};

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

/* Median of v[first, n) without reordering v. */
static double median_of(const double *v, int first, int n)
{
    int m = n - first;
    if (m <= 0) return 0.0;
    double *t = malloc((size_t)m * sizeof *t);
    if (!t) return 0.0;
    for (int i = 0; i < m; i++) t[i] = v[first + i];
    double r = dcp_bench_median(t, m);
    free(t);
    return r;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Times one FMA dispatch of (groups, iters) on r's command. */
static dcp_status time_fma(dcp_bench_ruler *r, uint32_t groups, uint32_t iters, double *ns)
{
    uint32_t t0, t1;
    dcp_status st = dcp_cmd_reset(r->cmd);
    if (st == DCP_OK) st = dcp_cmd_timestamp(r->cmd, &t0);
    if (st == DCP_OK) st = dcp_cmd_fma_peak(r->cmd, r->fma_out, groups, iters, 1.0f - 0x1p-10f, 0x1p-8f);
    if (st == DCP_OK) st = dcp_cmd_timestamp(r->cmd, &t1);
    if (st == DCP_OK) st = dcp_cmd_run(r->cmd);
    if (st == DCP_OK) st = dcp_cmd_elapsed_ns(r->cmd, t0, t1, ns);
    return st;
}

/* The FMA dispatch: workgroups doubled until one dispatch takes 2 ms (then iterations, once the
 * workgroups reach the device's limit): past the point where more workgroups still run side by
 * side, so every compute unit of any device is busy, for long against the dispatch's start-up. */
static dcp_status calibrate_fma(dcp_bench_ruler *r)
{
    const double target_ns = 2e6;
    uint32_t groups = 64, iters = 32;
    uint64_t range = dcp_device_get_info(r->dev)->max_storage_buffer_range;
    uint32_t max_groups = 65535;
    while ((uint64_t)4 * dcp_fma_peak_invocations(r->dev, max_groups) > range) max_groups /= 2;
    double ns = 0;
    dcp_status st = time_fma(r, groups, iters, &ns); /* warm-up: pipeline creation */
    for (int k = 0; st == DCP_OK && k < 40; k++) {
        st = time_fma(r, groups, iters, &ns);
        if (st != DCP_OK || ns >= target_ns) break;
        if (groups * 2 <= max_groups) groups *= 2;
        else if (iters * 2 <= DCP_FMA_MAX_ITERS) iters *= 2;
        else break;
    }
    r->fma_groups = groups;
    r->fma_iters = iters;
    return st;
}

static dcp_status create(dcp_device *dev, dcp_bench_ruler *r)
{
    const dcp_device_info *info = dcp_device_get_info(dev);
    r->dev = dev;
    r->bytes = info->max_storage_buffer_range;
    if (r->bytes > (256ull << 20)) r->bytes = 256ull << 20;
    r->bytes &= ~15ull;
    r->read_ns = calloc(MAX_SAMPLES, sizeof(double));
    r->fma_ns = calloc(MAX_SAMPLES, sizeof(double));
    r->dispatch_ns = calloc(MAX_SAMPLES, sizeof(double));
    r->wait_ns = calloc((size_t)MAX_SAMPLES * HOST_WAITS, sizeof(double));
    if (!r->read_ns || !r->fma_ns || !r->dispatch_ns || !r->wait_ns)
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the yardsticks");
    dcp_buffer *copy_dst = NULL;
    dcp_status st = dcp_buffer_create(dev, r->bytes, DCP_MEMORY_DEVICE, &r->src);
    if (st == DCP_OK) st = dcp_buffer_create(dev, 16, DCP_MEMORY_DEVICE, &r->sink);
    if (st == DCP_OK) st = dcp_buffer_create(dev, 4 * dcp_fma_peak_invocations(dev, 65535) < r->bytes
                                                      ? 4 * dcp_fma_peak_invocations(dev, 65535) : r->bytes,
                                             DCP_MEMORY_DEVICE, &r->fma_out);
    if (st == DCP_OK) st = dcp_buffer_fill(r->src, 0, r->bytes, 0x3c003c00u);
    if (st == DCP_OK) st = dcp_cmd_create(dev, &r->cmd);
    if (st == DCP_OK) st = dcp_cmd_create(dev, &r->empty); /* recorded empty once, submitted many times */
    if (st == DCP_OK) st = calibrate_fma(r);
    /* 4-byte loads and vkCmdCopyBuffer: once, for context (the roofline uses the 16-byte rate). */
    if (st == DCP_OK) st = dcp_buffer_create(dev, r->bytes, DCP_MEMORY_DEVICE, &copy_dst);
    double u32_ns = 0, copy_ns = 0;
    for (int it = 0; st == DCP_OK && it < 2; it++) { /* iteration 0 warms up (pipelines, first touch) */
        uint32_t t0, t1, t2;
        st = dcp_cmd_reset(r->cmd);
        if (st == DCP_OK) st = dcp_cmd_timestamp(r->cmd, &t0);
        if (st == DCP_OK) st = dcp_cmd_stream_read(r->cmd, r->src, r->bytes, r->sink, 4);
        if (st == DCP_OK) dcp_cmd_barrier(r->cmd); /* one measurement -> the next (keeps them apart) */
        if (st == DCP_OK) st = dcp_cmd_timestamp(r->cmd, &t1);
        if (st == DCP_OK) st = dcp_cmd_copy(r->cmd, r->src, 0, copy_dst, 0, r->bytes);
        if (st == DCP_OK) st = dcp_cmd_timestamp(r->cmd, &t2);
        if (st == DCP_OK) st = dcp_cmd_run(r->cmd);
        if (st == DCP_OK) st = dcp_cmd_elapsed_ns(r->cmd, t0, t1, &u32_ns);
        if (st == DCP_OK) st = dcp_cmd_elapsed_ns(r->cmd, t1, t2, &copy_ns);
    }
    if (st == DCP_OK) {
        r->read_u32_bps = (double)r->bytes / (u32_ns * 1e-9);
        r->copy_bps = (double)r->bytes / (copy_ns * 1e-9);
    }
    dcp_buffer_destroy(copy_dst);
    return st;
}

int dcp_bench_ruler_create(dcp_device *dev, dcp_bench_ruler **out)
{
    *out = NULL;
    dcp_bench_ruler *r = calloc(1, sizeof *r);
    dcp_status st = r ? create(dev, r) : dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the yardsticks");
    if (st != DCP_OK) {
        dcp_cli_report("dcp-vk-bench", "measuring the yardsticks", st);
        dcp_bench_ruler_destroy(r);
        return -1;
    }
    *out = r;
    return 0;
}

void dcp_bench_ruler_destroy(dcp_bench_ruler *r)
{
    if (!r) return;
    dcp_cmd_destroy(r->cmd);
    dcp_cmd_destroy(r->empty);
    dcp_buffer_destroy(r->src);
    dcp_buffer_destroy(r->sink);
    dcp_buffer_destroy(r->fma_out);
    free(r->read_ns);
    free(r->fma_ns);
    free(r->dispatch_ns);
    free(r->wait_ns);
    free(r);
}

int dcp_bench_ruler_count(const dcp_bench_ruler *r) { return r->count; }

int dcp_bench_ruler_sample(dcp_bench_ruler *r)
{
    if (r->count == MAX_SAMPLES) return 0; /* enough: the medians do not move any more */
    uint32_t t0, t1, t2, t3;
    dcp_cmd *c = r->cmd;
    dcp_status st = dcp_cmd_reset(c);
    if (st == DCP_OK) st = dcp_cmd_timestamp(c, &t0);
    if (st == DCP_OK) st = dcp_cmd_stream_read(c, r->src, r->bytes, r->sink, 16);
    if (st == DCP_OK) dcp_cmd_barrier(c); /* one measurement -> the next (keeps them apart) */
    if (st == DCP_OK) st = dcp_cmd_timestamp(c, &t1);
    if (st == DCP_OK) st = dcp_cmd_fma_peak(c, r->fma_out, r->fma_groups, r->fma_iters, 1.0f - 0x1p-10f, 0x1p-8f);
    if (st == DCP_OK) dcp_cmd_barrier(c); /* one measurement -> the next */
    if (st == DCP_OK) st = dcp_cmd_timestamp(c, &t2);
    /* Empty dispatches as a step records its kernels: one workgroup, no work (0 iterations: one
     * store per invocation), a barrier after each (every kernel reads what the one before wrote). */
    for (int i = 0; st == DCP_OK && i < EMPTY_DISPATCHES; i++) {
        st = dcp_cmd_fma_peak(c, r->fma_out, 1, 0, 1.0f, 0.0f);
        if (st == DCP_OK) dcp_cmd_barrier(c); /* empty dispatch -> the next (same buffer) */
    }
    if (st == DCP_OK) st = dcp_cmd_timestamp(c, &t3);
    if (st == DCP_OK) st = dcp_cmd_run(c);
    if (st == DCP_OK) st = dcp_cmd_elapsed_ns(c, t0, t1, &r->read_ns[r->count]);
    if (st == DCP_OK) st = dcp_cmd_elapsed_ns(c, t1, t2, &r->fma_ns[r->count]);
    if (st == DCP_OK) st = dcp_cmd_elapsed_ns(c, t2, t3, &r->dispatch_ns[r->count]);
    if (st == DCP_OK) r->dispatch_ns[r->count] /= EMPTY_DISPATCHES;
    /* Host waits: an empty command buffer submitted and its fence waited for. */
    for (int i = 0; st == DCP_OK && i < HOST_WAITS; i++) {
        double a = now_ns();
        st = dcp_cmd_run(r->empty);
        r->wait_ns[r->count * HOST_WAITS + i] = now_ns() - a;
    }
    if (st != DCP_OK) {
        dcp_cli_report("dcp-vk-bench", "measuring the yardsticks", st);
        return -1;
    }
    r->count++;
    return 0;
}

void dcp_bench_ruler_get(const dcp_bench_ruler *r, int first, dcp_bench_yardsticks *out)
{
    if (first < 0 || first >= r->count) first = 0;
    double read = median_of(r->read_ns, first, r->count), fma = median_of(r->fma_ns, first, r->count);
    *out = (dcp_bench_yardsticks){0};
    out->bytes = r->bytes;
    out->stream_read_bps = read > 0 ? (double)r->bytes / (read * 1e-9) : 0.0;
    out->stream_read_u32_bps = r->read_u32_bps;
    out->copy_bps = r->copy_bps;
    out->fma_flop_count = dcp_fma_peak_flops(r->dev, r->fma_groups, r->fma_iters);
    out->fma_flops = fma > 0 ? out->fma_flop_count / (fma * 1e-9) : 0.0;
    out->fma_invocations = dcp_fma_peak_invocations(r->dev, r->fma_groups);
    out->fma_iters = r->fma_iters;
    out->dispatch_ns = median_of(r->dispatch_ns, first, r->count);
    out->host_wait_ns = median_of(r->wait_ns, first * HOST_WAITS, r->count * HOST_WAITS);
    out->samples = r->count - first;
}

int dcp_bench_measure_yardsticks(dcp_device *dev, int iters, dcp_bench_yardsticks *out)
{
    dcp_bench_ruler *r;
    if (dcp_bench_ruler_create(dev, &r)) return -1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < (iters > 0 ? iters : 1); i++) rc = dcp_bench_ruler_sample(r);
    if (rc == 0) dcp_bench_ruler_get(r, 0, out);
    dcp_bench_ruler_destroy(r);
    return rc;
}

dcp_bench_roofline dcp_bench_roofline_of(const dcp_bench_yardsticks *y, double bytes, double flops,
                                         double measured_ns)
{
    dcp_bench_roofline r = {bytes, flops, 0, 0, 0, measured_ns, 0};
    r.read_ns = y->stream_read_bps > 0 ? bytes / y->stream_read_bps * 1e9 : 0.0;
    r.fma_ns = y->fma_flops > 0 ? flops / y->fma_flops * 1e9 : 0.0;
    r.roofline_ns = r.read_ns > r.fma_ns ? r.read_ns : r.fma_ns;
    r.fraction = measured_ns > 0 ? r.roofline_ns / measured_ns : 0.0;
    return r;
}

const char *dcp_bench_roofline_bound(const dcp_bench_roofline *r) { return r->read_ns >= r->fma_ns ? "read" : "fma"; }

/* JSON numbers: finite values as %.6g, anything else as null. */
static void json_num(FILE *f, double v)
{
    if (isfinite(v)) fprintf(f, "%.6g", v);
    else fputs("null", f);
}

void dcp_bench_roofline_json(FILE *f, const dcp_bench_roofline *r, const dcp_bench_yardsticks *y)
{
    fputs("\"bytes\": ", f);
    json_num(f, r->bytes);
    fputs(", \"flops\": ", f);
    json_num(f, r->flops);
    fputs(", \"intensity\": ", f);
    json_num(f, r->bytes > 0 ? r->flops / r->bytes : 0.0);
    fputs(", \"measured_us\": ", f);
    json_num(f, r->measured_ns * 1e-3);
    fputs(", \"roofline_us\": ", f);
    json_num(f, r->roofline_ns * 1e-3);
    fprintf(f, ", \"bound\": \"%s\", \"of_roofline\": ", dcp_bench_roofline_bound(r));
    json_num(f, r->fraction);
    fputs(", \"achieved_gbps\": ", f);
    json_num(f, r->measured_ns > 0 ? r->bytes / r->measured_ns : 0.0);
    fputs(", \"achieved_gflops\": ", f);
    json_num(f, r->measured_ns > 0 ? r->flops / r->measured_ns : 0.0);
    fputs(", \"read_gbps\": ", f);
    json_num(f, y->stream_read_bps * 1e-9);
    fputs(", \"fma_gflops\": ", f);
    json_num(f, y->fma_flops * 1e-9);
}

void dcp_bench_yardsticks_json(FILE *f, const dcp_bench_yardsticks *y)
{
    fprintf(f, "{\"bytes\": %llu, \"stream_read_gbps\": ", (unsigned long long)y->bytes);
    json_num(f, y->stream_read_bps * 1e-9);
    fputs(", \"stream_read_u32_gbps\": ", f);
    json_num(f, y->stream_read_u32_bps * 1e-9);
    fputs(", \"copy_gbps\": ", f);
    json_num(f, y->copy_bps * 1e-9);
    fputs(", \"fma_gflops\": ", f);
    json_num(f, y->fma_flops * 1e-9);
    fprintf(f, ", \"fma_invocations\": %llu, \"fma_chains\": %d, \"fma_iters\": %u, \"fma_flops\": ",
            (unsigned long long)y->fma_invocations, DCP_FMA_CHAINS, y->fma_iters);
    json_num(f, y->fma_flop_count);
    fputs(", \"dispatch_us\": ", f);
    json_num(f, y->dispatch_ns * 1e-3);
    fputs(", \"host_wait_us\": ", f);
    json_num(f, y->host_wait_ns * 1e-3);
    fprintf(f, ", \"samples\": %d}", y->samples);
}

void dcp_bench_yardsticks_text(FILE *f, const char *device, const dcp_bench_yardsticks *y)
{
    fprintf(f,
            "yardsticks on %s (%d samples, interleaved with the kernels): streaming read %.2f GB/s (16-byte "
            "loads; 4-byte %.2f, copy %.2f), FMA %.2f GFLOP/s, empty dispatch %.2f us, host wait %.1f us\n",
            device, y->samples, y->stream_read_bps * 1e-9, y->stream_read_u32_bps * 1e-9, y->copy_bps * 1e-9,
            y->fma_flops * 1e-9, y->dispatch_ns * 1e-3, y->host_wait_ns * 1e-3);
}

/* dcp-vk-bench yardsticks: the yardsticks of one device alone. */
int dcp_bench_yardsticks_cmd(int argc, char **argv)
{
    const char *p = "dcp-vk-bench yardsticks";
    uint32_t samples = 5, device = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            printf("usage: dcp-vk-bench yardsticks [options]\n"
                   "  --samples N    samples of each yardstick, the median is reported (default 5, 1..%d)\n"
                   "  --device I     device index among $DCP_VK_DEVICES / all devices (default 0)\n"
                   "  --json         one JSON object instead of the line of text\n"
                   "The streaming-read shader (16-byte loads; 4-byte loads and vkCmdCopyBuffer once), the\n"
                   "FMA shader (%d independent f32 chains per invocation, FLOPs = 2 per FMA), an empty\n"
                   "dispatch (one of %d in one command buffer, a barrier after each) and a host wait\n"
                   "(submit + fence wait of an empty command buffer).\n",
                   MAX_SAMPLES, DCP_FMA_CHAINS, EMPTY_DISPATCHES);
            return DCP_EXIT_OK;
        } else if (strcmp(a, "--samples") == 0)
            ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, MAX_SAMPLES, &samples);
        else if (strcmp(a, "--device") == 0)
            ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 0, 1023, &device);
        else if (strcmp(a, "--json") == 0) json = 1;
        else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            ok = 0;
        }
        if (!ok) return DCP_EXIT_USAGE;
    }
    int rc = DCP_EXIT_RUNTIME;
    dcp_context *ctx = NULL;
    dcp_device *dev = NULL;
    if ((rc = dcp_bench_open_device(p, device, &ctx, &dev))) return rc;
    rc = DCP_EXIT_RUNTIME;
    const char *name = dcp_device_get_info(dev)->name;
    dcp_bench_yardsticks y;
    if (dcp_bench_measure_yardsticks(dev, (int)samples, &y) == 0) {
        if (json) {
            printf("{\"bench\": \"yardsticks\", \"device\": ");
            dcp_cli_json_string(stdout, name, strlen(name));
            printf(", \"yardsticks\": ");
            dcp_bench_yardsticks_json(stdout, &y);
            printf("}\n");
        } else {
            dcp_bench_yardsticks_text(stdout, name, &y);
        }
        rc = DCP_EXIT_OK;
    }
    dcp_context_destroy(ctx);
    return rc;
}

int dcp_bench_open_device(const char *prog, uint32_t index, dcp_context **ctx, dcp_device **dev)
{
    dcp_context_config cfg = DCP_CONTEXT_CONFIG_DEFAULT;
    *dev = NULL;
    dcp_status st = dcp_context_create(&cfg, ctx);
    if (st != DCP_OK) {
        dcp_cli_report(prog, "opening devices", st);
        *ctx = NULL;
        return DCP_EXIT_RUNTIME;
    }
    int count = dcp_context_device_count(*ctx);
    if ((int64_t)index >= count) {
        fprintf(stderr, "%s: --device %u: there are %d devices\n", prog, index, count);
        dcp_context_destroy(*ctx);
        *ctx = NULL;
        return DCP_EXIT_USAGE;
    }
    *dev = dcp_context_device(*ctx, (int)index);
    return 0;
}
