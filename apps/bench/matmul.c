/* dcp-vk-bench matmul: weight read rate of the matmul shader for each weight type at several
 * batch sizes, against the same device's yardsticks sampled between its runs (a ruler sample, a
 * matmul, a ruler sample, ...). The read rate is the matrix's device bytes (its weights as
 * uploaded) over the time of one matmul: the fraction of the 16-byte streaming-read rate says how
 * close decode comes to reading weights at the speed of memory; bytes per weight differ by type, so
 * a type with fewer bytes per weight at the same fraction decodes faster. The roofline counts the
 * matrix, x and y as bytes and 2 rows k per token as FLOPs (docs/design.md section 16). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "dcpvk/gguf.h"
#include "kernels/ops_params.h"
#include "dcpvk/ops.h"

enum { MAX_TYPES = 16, MAX_BATCHES = 8, MAX_ITERS = 30 };

typedef struct mm_opts {
    uint32_t rows, k, iters, device;
    uint32_t ntypes, nbatches;
    dcp_ggml_type types[MAX_TYPES];
    uint32_t batches[MAX_BATCHES];
    int json;
    int norm, glu; /* --fuse: the RMSNorm in the load, the SwiGLU in the store (as the model runs) */
} mm_opts;

static const char *const default_types = "f32,f16,bf16,q8_0,q4_0,q4_1,q5_0,q5_1,q2_k,q3_k,q4_k,q5_k,q6_k,iq4_nl,iq4_xs";

static void usage(FILE *f)
{
    dcp_cli_print_text(f,
            "usage: dcp-vk-bench matmul [options]\n"
            "  --rows N       output rows of the matrix (default 4096)\n"
            "  --k K          input columns, a multiple of 256 (default 4096)\n"
            "  --types LIST   weight types, comma-separated (default %s)\n"
            "  --batch LIST   token counts, comma-separated, each 1..4096 (default 1,8,32)\n"
            "  --iters N      timed runs per point, the median is reported (default 5, at most %d)\n"
            "  --device I     device index among $DCP_VK_DEVICES / all devices (default 0)\n"
            "  --fuse F       none, norm, glu or norm+glu: the matmul with the RMSNorm fused into its\n"
            "                 load and / or the SwiGLU into its store (gate rows then up rows: --rows\n"
            "                 even, y rows / 2 wide), as the model's Q|K|V and gate|up run at TP 1\n"
            "                 (default none)\n"
            "  --json         one JSON object instead of the table\n"
            "Weights are seeded uniform values in [-1, 1) quantized by the reference quantizers.\n"
            "read GB/s = the matrix's device bytes / the time of one matmul of B tokens (a workgroup\n"
            "reads its weights once per %d tokens); 'of yardstick' = that rate / the 16-byte\n"
            "streaming-read shader's rate on the same device; 'vs F16' = that fraction / F16's.\n"
            "roofline = max(bytes / read rate, FLOPs / FMA rate) with bytes = matrix + x + y (f32) and\n"
            "FLOPs = 2 rows k per token (dequantization not counted); with the norm bytes count its k\n"
            "weights too and FLOPs 3 k per token more; 'of roofline' = roofline / time.\n"
            "The yardsticks are sampled before every timed matmul; each point uses its own samples.\n",
            default_types, MAX_ITERS, DCP_MATMUL_TOKENS);
}

static int parse_fuse(const char *p, const char *v, mm_opts *o)
{
    static const char *const names[4] = {"none", "norm", "glu", "norm+glu"};
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0) {
            o->norm = i & 1;
            o->glu = i >> 1;
            return 1;
        }
    fprintf(stderr, "%s: --fuse: '%s' is not a fusion (allowed: none, norm, glu, norm+glu)\n", p, v);
    return 0;
}

/* The kernel's name in the results: matmul[_norm][_glu]_<type>. */
static void kernel_name(const mm_opts *o, dcp_ggml_type t, char *out, size_t n)
{
    snprintf(out, n, "matmul%s%s_%s", o->norm ? "_norm" : "", o->glu ? "_glu" : "", dcp_ggml_type_name(t));
}

static int parse_types(const char *p, const char *v, mm_opts *o)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    o->ntypes = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        dcp_ggml_type ty;
        if (dcp_ggml_type_from_name(t, &ty) != DCP_OK || !dcp_ggml_type_supported(ty) || o->ntypes == MAX_TYPES) {
            fprintf(stderr, "%s: --types: '%s' is not a weight type (allowed: %s)\n", p, t, default_types);
            return 0;
        }
        o->types[o->ntypes++] = ty;
    }
    return o->ntypes > 0;
}

static int parse_batches(const char *p, const char *v, mm_opts *o)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    o->nbatches = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nbatches == MAX_BATCHES || !dcp_cli_u32(p, "--batch", t, 1, 4096, &o->batches[o->nbatches])) return 0;
        o->nbatches++;
    }
    return o->nbatches > 0;
}

/* One type's result at one batch size. */
typedef struct mm_point {
    dcp_ggml_type type;
    uint32_t batch;
    uint64_t bytes;             /* the matrix's device bytes */
    double ns, bps, fraction;   /* median time, read rate, bps / the streaming-read rate */
    dcp_bench_yardsticks ys;    /* the ruler samples taken beside this point's runs */
    dcp_bench_roofline roof;
} mm_point;

/* One matmul of B tokens in a command of its own (nw: the norm's weights with --fuse norm, else
 * NULL); its time into *ns. */
static dcp_status run_matmul(dcp_cmd *cmd, const dcp_matrix *m, dcp_buffer *x, dcp_buffer *y, dcp_buffer *nw, int glu,
                             uint32_t B, double *ns)
{
    uint32_t t0, t1;
    const dcp_matmul_args args = {.w = m, .x = x, .x_stride = m->k, .y = y, .y_stride = glu ? m->rows / 2 : m->rows,
                                  .tokens = B, .glu = glu, .norm = nw, .norm_eps = 1e-5f};
    dcp_status st = dcp_cmd_reset(cmd);
    if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t0);
    if (st == DCP_OK) st = dcp_op_matmul(cmd, &args);
    if (st == DCP_OK) st = dcp_cmd_timestamp(cmd, &t1);
    if (st == DCP_OK) st = dcp_cmd_run(cmd);
    if (st == DCP_OK) st = dcp_cmd_elapsed_ns(cmd, t0, t1, ns);
    return st;
}

/* One warm-up, then `iters` times a ruler sample and a timed matmul: the median time into pt->ns,
 * the medians of those samples into pt->ys. Returns DCP_OK, or the failure (the ruler's printed). */
static dcp_status time_matmul(dcp_bench_ruler *ruler, dcp_cmd *cmd, const dcp_matrix *m, dcp_buffer *x,
                              dcp_buffer *y, dcp_buffer *nw, int glu, uint32_t B, uint32_t iters, mm_point *pt)
{
    double t[MAX_ITERS], warm;
    int first = dcp_bench_ruler_count(ruler);
    dcp_status st = run_matmul(cmd, m, x, y, nw, glu, B, &warm);
    for (uint32_t i = 0; st == DCP_OK && i < iters; i++) {
        if (dcp_bench_ruler_sample(ruler)) return DCP_ERR_VULKAN;
        st = run_matmul(cmd, m, x, y, nw, glu, B, &t[i]);
    }
    if (st != DCP_OK) return st;
    pt->ns = dcp_bench_median(t, (int)iters);
    dcp_bench_ruler_get(ruler, first, &pt->ys);
    return DCP_OK;
}

static double bits_per_weight(dcp_ggml_type t)
{
    uint32_t be, bb;
    dcp_ggml_type_block(t, &be, &bb);
    return 8.0 * bb / be;
}

int dcp_bench_matmul(int argc, char **argv)
{
    const char *p = "dcp-vk-bench matmul";
    mm_opts o = {4096, 4096, 5, 0, 0, 0, {DCP_GGML_TYPE_F32}, {1}, 0, 0, 0};
    parse_types(p, default_types, &o);
    o.nbatches = 3;
    o.batches[0] = 1;
    o.batches[1] = 8;
    o.batches[2] = 32;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return DCP_EXIT_OK;
        } else if (strcmp(a, "--rows") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, 1u << 20, &o.rows);
        else if (strcmp(a, "--k") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 256, 1u << 20, &o.k);
        else if (strcmp(a, "--iters") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 1, MAX_ITERS, &o.iters);
        else if (strcmp(a, "--device") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, a, v, 0, 1023, &o.device);
        else if (strcmp(a, "--types") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && parse_types(p, v, &o);
        else if (strcmp(a, "--batch") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && parse_batches(p, v, &o);
        else if (strcmp(a, "--fuse") == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && parse_fuse(p, v, &o);
        else if (strcmp(a, "--json") == 0) o.json = 1;
        else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            ok = 0;
        }
        if (!ok) return DCP_EXIT_USAGE;
    }
    if (o.k % 256) {
        fprintf(stderr, "%s: --k %u is not a multiple of 256 (the k-quant super-block)\n", p, o.k);
        return DCP_EXIT_USAGE;
    }
    if (o.glu && o.rows % 2) {
        fprintf(stderr, "%s: --fuse glu needs an even --rows (gate rows then up rows), not %u\n", p, o.rows);
        return DCP_EXIT_USAGE;
    }
    uint32_t bmax = 0;
    for (uint32_t b = 0; b < o.nbatches; b++)
        if (o.batches[b] > bmax) bmax = o.batches[b];

    int rc = DCP_EXIT_RUNTIME;
    dcp_context *ctx = NULL;
    dcp_bench_ruler *ruler = NULL;
    dcp_cmd *cmd = NULL;
    dcp_buffer *x = NULL, *y = NULL, *nw = NULL;
    float *w = NULL, *xs = NULL;
    uint8_t *raw = NULL;
    mm_point *pts = calloc((size_t)o.ntypes * o.nbatches, sizeof *pts);
    dcp_device *dev = NULL;
    if ((rc = dcp_bench_open_device(p, o.device, &ctx, &dev))) goto out;
    rc = DCP_EXIT_RUNTIME;
    dcp_status st;
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (dcp_bench_ruler_create(dev, &ruler) != 0) goto out;

    uint64_t n = (uint64_t)o.rows * o.k;
    w = malloc(n * sizeof *w);
    xs = malloc((uint64_t)bmax * o.k * sizeof *xs);
    raw = malloc(n * 4);
    if (!pts || !w || !xs || !raw) {
        fprintf(stderr, "%s: out of host memory for a %u x %u matrix\n", p, o.rows, o.k);
        goto out;
    }
    uint64_t s = 12345;
    for (uint64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)(s >> 40) * (2.0f / 16777216.0f) - 1.0f;
    }
    for (uint64_t i = 0; i < (uint64_t)bmax * o.k; i++) xs[i] = (float)((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    st = dcp_buffer_create(dev, (uint64_t)bmax * o.k * 4, DCP_MEMORY_DEVICE, &x);
    if (st == DCP_OK) st = dcp_buffer_upload(x, 0, xs, (uint64_t)bmax * o.k * 4);
    if (st == DCP_OK) st = dcp_buffer_create(dev, (uint64_t)bmax * o.rows * 4, DCP_MEMORY_DEVICE, &y);
    if (st == DCP_OK && o.norm) { /* the norm's weights: near 1, as trained models' */
        for (uint32_t i = 0; i < o.k; i++) xs[i] = 1.0f + (float)((i * 40503u) % 200) * 1e-3f - 0.1f;
        st = dcp_buffer_create(dev, (uint64_t)o.k * 4, DCP_MEMORY_DEVICE, &nw);
        if (st == DCP_OK) st = dcp_buffer_upload(nw, 0, xs, (uint64_t)o.k * 4);
    }
    if (st == DCP_OK) st = dcp_cmd_create(dev, &cmd);
    for (uint32_t ti = 0; st == DCP_OK && ti < o.ntypes; ti++) {
        dcp_matrix m;
        const void *parts[1] = {raw};
        uint32_t rows[1] = {o.rows};
        st = dcp_ggml_from_f32(o.types[ti], w, raw, n);
        if (st == DCP_OK) st = dcp_matrix_create(dev, o.types[ti], o.k, 1, parts, rows, &m);
        if (st != DCP_OK) break;
        for (uint32_t b = 0; st == DCP_OK && b < o.nbatches; b++) {
            mm_point *pt = &pts[ti * o.nbatches + b];
            pt->type = o.types[ti];
            pt->batch = o.batches[b];
            pt->bytes = dcp_buffer_size(m.buf);
            st = time_matmul(ruler, cmd, &m, x, y, nw, o.glu, o.batches[b], o.iters, pt);
            if (st != DCP_OK) break;
            pt->bps = pt->ns > 0 ? (double)pt->bytes / (pt->ns * 1e-9) : 0.0;
            pt->fraction = pt->bps / pt->ys.stream_read_bps;
            const double B = o.batches[b], out = o.glu ? o.rows / 2 : o.rows;
            const double io = 4.0 * B * ((double)o.k + out) + (o.norm ? 4.0 * o.k : 0.0); /* x in, y out, nw */
            const double flops = 2.0 * B * (double)o.rows * o.k + (o.norm ? 3.0 * B * o.k : 0.0);
            pt->roof = dcp_bench_roofline_of(&pt->ys, (double)pt->bytes + io, flops, pt->ns);
        }
        dcp_matrix_destroy(&m);
    }
    if (st != DCP_OK) {
        dcp_cli_report(p, "measuring", st);
        goto out;
    }
    double f16_fraction[MAX_BATCHES] = {0};
    for (uint32_t ti = 0; ti < o.ntypes; ti++)
        for (uint32_t b = 0; b < o.nbatches; b++)
            if (o.types[ti] == DCP_GGML_TYPE_F16) f16_fraction[b] = pts[ti * o.nbatches + b].fraction;
    dcp_bench_yardsticks ys;
    dcp_bench_ruler_get(ruler, 0, &ys); /* the whole run */
    if (o.json) {
        printf("{\"bench\": \"matmul\", \"device\": ");
        dcp_cli_json_string(stdout, info->name, strlen(info->name));
        printf(", \"rows\": %u, \"k\": %u, \"iters\": %u, \"tokens_per_workgroup\": %d, \"norm\": %s, "
               "\"glu\": %s,\n \"yardsticks\": ",
               o.rows, o.k, o.iters, DCP_MATMUL_TOKENS, o.norm ? "true" : "false", o.glu ? "true" : "false");
        dcp_bench_yardsticks_json(stdout, &ys);
        printf(",\n \"results\": [");
        for (uint32_t i = 0; i < o.ntypes * o.nbatches; i++) {
            const mm_point *pt = &pts[i];
            double f16 = f16_fraction[i % o.nbatches];
            char kernel[64];
            kernel_name(&o, pt->type, kernel, sizeof kernel);
            printf("%s\n  {\"kernel\": \"%s\", \"type\": \"%s\", \"bits_per_weight\": %.4g, "
                   "\"device_bytes\": %llu, \"batch\": %u, \"us\": %.3f, \"weight_read_gbps\": %.3f, "
                   "\"weights_per_s\": %.4g, \"of_yardstick\": %.4f, \"vs_f16\": ",
                   i ? "," : "", kernel, dcp_ggml_type_name(pt->type), bits_per_weight(pt->type),
                   (unsigned long long)pt->bytes, pt->batch, pt->ns * 1e-3, pt->bps * 1e-9,
                   (double)n / (pt->ns * 1e-9), pt->fraction);
            if (f16 > 0) printf("%.4f, ", pt->fraction / f16);
            else printf("null, ");
            dcp_bench_roofline_json(stdout, &pt->roof, &pt->ys);
            printf("}");
        }
        printf("\n ]}\n");
    } else {
        printf("matmul %u x %u%s%s on %s\n", o.rows, o.k, o.norm ? ", RMSNorm in the load" : "",
               o.glu ? ", SwiGLU in the store" : "", info->name);
        dcp_bench_yardsticks_text(stdout, info->name, &ys);
        printf("%-6s %6s %10s %6s %11s %10s %13s %7s %9s %12s %5s %12s\n", "type", "bits/w", "MiB", "batch", "us",
               "read GB/s", "of yardstick", "vs F16", "GFLOP/s", "roofline us", "bound", "of roofline");
        for (uint32_t i = 0; i < o.ntypes * o.nbatches; i++) {
            const mm_point *pt = &pts[i];
            double f16 = f16_fraction[i % o.nbatches];
            printf("%-6s %6.3g %10.2f %6u %11.1f %10.2f %12.1f%% ", dcp_ggml_type_name(pt->type), bits_per_weight(pt->type),
                   (double)pt->bytes / 1048576.0, pt->batch, pt->ns * 1e-3, pt->bps * 1e-9, 100.0 * pt->fraction);
            if (f16 > 0) printf("%7.2f", pt->fraction / f16);
            else printf("%7s", "-");
            printf(" %9.2f %12.1f %5s %11.1f%%\n", pt->roof.flops / pt->ns, pt->roof.roofline_ns * 1e-3,
                   dcp_bench_roofline_bound(&pt->roof), 100.0 * pt->roof.fraction);
        }
    }
    rc = DCP_EXIT_OK;
out:
    dcp_bench_ruler_destroy(ruler);
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(x);
    dcp_buffer_destroy(y);
    dcp_buffer_destroy(nw);
    dcp_context_destroy(ctx);
    free(pts);
    free(w);
    free(xs);
    free(raw);
    return rc;
}
