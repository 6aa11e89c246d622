/* dcp-vk-bench attn --mla: MLA's latent decode (the latent kind of include/dcpvk/attn.h) step time and latent-cache
 * read rate, with the same device's streaming-read shader and vkCmdCopyBuffer rates measured in
 * the same run as yardsticks, as the GQA path does. DeepSeek's shape by default: rows of kv_lora
 * 512 + rope 64, 16 heads per rank (V3's 128 heads at TP 8). Sequences are spread over the devices
 * (sequence b on device b % devices). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "common/cli.h"
#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/dtype.h"
#include "dcpvk/kv.h"
#include "ref/mla_ref.h"

/* One device's share: its sequences, latent pool, plan and command. */
typedef struct mla_share {
    dcp_device *dev;
    uint32_t n, max_blocks, num_pages;
    uint32_t *lengths, *bt;
    void *pages; /* host copy of the pool (kept for --verify) */
    float *q;
    dcp_kv_pool *pool;
    dcp_decode_plan *plan;
    dcp_buffer *qb, *ob, *lb;
    dcp_cmd *cmd;
    uint32_t ts0, ts1;
} mla_share;

static uint64_t rand_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static dcp_status share_setup(mla_share *s, const dcp_bench_mla_opts *o, int d, int ndev, uint64_t seed)
{
    dcp_status st = DCP_OK;
    const uint32_t P = o->page_size, DK = o->kv_lora + o->rope;
    for (uint32_t b = 0; b < o->batch; b++)
        if ((int)(b % (uint32_t)ndev) == d) s->n++;
    if (!s->n) return DCP_OK;
    s->max_blocks = (o->ctx + P - 1) / P;
    if (!s->max_blocks) s->max_blocks = 1;
    s->num_pages = s->n * s->max_blocks;
    s->lengths = malloc(s->n * sizeof *s->lengths);
    s->bt = malloc((size_t)s->n * s->max_blocks * sizeof *s->bt);
    const uint64_t page_elems = (uint64_t)P * DK, rows = (uint64_t)s->n * o->heads;
    s->pages = malloc(s->num_pages * page_elems * dcp_dtype_size((dcp_dtype)o->dtype));
    s->q = malloc(rows * DK * sizeof(float));
    if (!s->lengths || !s->bt || !s->pages || !s->q)
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "bench: out of host memory for %u pages", s->num_pages);
    for (uint32_t i = 0; i < s->n; i++) s->lengths[i] = o->ctx;
    uint64_t r = seed + 17; /* pages in a shuffled order: a real cache is fragmented */
    for (uint32_t i = 0; i < s->num_pages; i++) s->bt[i] = i;
    for (uint32_t i = s->num_pages - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(rand_next(&r) % (i + 1)), t = s->bt[i];
        s->bt[i] = s->bt[j];
        s->bt[j] = t;
    }
    dcp_bench_fill_random(s->pages, s->num_pages * page_elems, o->dtype, seed);
    dcp_bench_fill_random(s->q, rows * DK, DCP_DTYPE_F32, seed + 1);
    dcp_kv_pool_config pc = {.kv_heads = 1, .head_dim = DK, .page_size = P, .dtype = (dcp_dtype)o->dtype,
                             .num_pages = s->num_pages, .k_only = 1};
    DCP_TRY(dcp_kv_pool_create(s->dev, &pc, &s->pool));
    DCP_TRY(dcp_kv_pool_write_pages(s->pool, 0, s->num_pages, s->pages));
    dcp_decode_config mc = DCP_DECODE_CONFIG_DEFAULT;
    mc.kind = DCP_DECODE_LATENT;
    mc.batch = s->n;
    mc.q_heads = o->heads;
    mc.latent = o->kv_lora;
    mc.max_blocks = s->max_blocks;
    mc.scale = o->scale;
    DCP_TRY(dcp_decode_plan_create(s->pool, &mc, &s->plan));
    DCP_TRY(dcp_decode_plan_set(s->plan, s->lengths, s->bt));
    DCP_TRY(dcp_buffer_create(s->dev, rows * DK * 4, DCP_MEMORY_DEVICE, &s->qb));
    DCP_TRY(dcp_buffer_create(s->dev, rows * o->kv_lora * 4, DCP_MEMORY_DEVICE, &s->ob));
    DCP_TRY(dcp_buffer_create(s->dev, rows * 4, DCP_MEMORY_DEVICE, &s->lb));
    DCP_TRY(dcp_buffer_upload(s->qb, 0, s->q, rows * DK * 4));
    DCP_TRY(dcp_cmd_create(s->dev, &s->cmd));
    DCP_TRY(dcp_cmd_timestamp(s->cmd, &s->ts0));
    DCP_TRY(dcp_decode_record(s->cmd, s->plan, s->qb, 0, s->ob, 0, s->lb, 0));
    DCP_TRY(dcp_cmd_timestamp(s->cmd, &s->ts1));
    if (!o->verify) {
        free(s->pages);
        s->pages = NULL;
    }
    return DCP_OK;
fail:
    return st;
}

static void share_free(mla_share *s)
{
    dcp_cmd_destroy(s->cmd);
    dcp_buffer_destroy(s->qb);
    dcp_buffer_destroy(s->ob);
    dcp_buffer_destroy(s->lb);
    dcp_decode_plan_destroy(s->plan);
    dcp_kv_pool_destroy(s->pool);
    free(s->lengths);
    free(s->bt);
    free(s->pages);
    free(s->q);
}

/* Compares a share's result with the double-precision reference; returns the mismatches. */
static uint64_t share_verify(mla_share *s, const dcp_bench_mla_opts *o, double *max_o, double *max_lse)
{
    const uint64_t rows = (uint64_t)s->n * o->heads, DV = o->kv_lora;
    uint64_t bad = 0;
    float *og = malloc(rows * DV * 4), *lg = malloc(rows * 4), *orf = malloc(rows * DV * 4), *lrf = malloc(rows * 4);
    dcp_status st = dcp_buffer_download(s->ob, 0, og, rows * DV * 4);
    if (st == DCP_OK) st = dcp_buffer_download(s->lb, 0, lg, rows * 4);
    if (st != DCP_OK) {
        dcp_cli_report("dcp-vk-bench attn --mla", "reading results", st);
        bad = 1;
    } else {
        dcp_ref_mla_decode_args ra = {s->n, o->heads, o->kv_lora + o->rope, o->kv_lora, o->page_size, s->max_blocks,
                                      o->scale, (dcp_dtype)o->dtype, s->pages, s->q, s->lengths, s->bt, orf, lrf};
        dcp_ref_mla_decode(&ra);
        for (uint64_t i = 0; i < rows * DV; i++) {
            double e = fabs((double)og[i] - orf[i]);
            if (!(e <= 1e-4)) bad++;
            if (e > *max_o || e != e) *max_o = e;
        }
        for (uint64_t i = 0; i < rows; i++) {
            double e = fabs((double)lg[i] - lrf[i]);
            if (!(e <= 1e-5 * (1 + fabs(lrf[i])))) bad++;
            if (e > *max_lse || e != e) *max_lse = e;
        }
    }
    free(og);
    free(lg);
    free(orf);
    free(lrf);
    return bad;
}

int dcp_bench_attn_mla(const dcp_bench_mla_opts *in)
{
    const char *prog = "dcp-vk-bench attn --mla";
    dcp_bench_mla_opts o = *in;
    if (o.scale == 0.0f) o.scale = 1.0f / sqrtf(192.0f);
    dcp_context_config cfg = DCP_CONTEXT_CONFIG_DEFAULT;
    cfg.devices = o.devices;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&cfg, &ctx);
    if (st != DCP_OK) {
        dcp_cli_report(prog, "opening devices", st);
        return st == DCP_ERR_INVALID_ARGUMENT ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    }
    const int ndev = dcp_context_device_count(ctx);
    mla_share *sh = calloc((size_t)ndev, sizeof *sh);
    double *step_ns = calloc(o.iters, sizeof *step_ns);
    int rc = DCP_EXIT_OK;
    for (int d = 0; d < ndev && st == DCP_OK; d++) {
        sh[d].dev = dcp_context_device(ctx, d);
        st = share_setup(&sh[d], &o, d, ndev, 2000 + (uint64_t)d);
    }
    if (st != DCP_OK) {
        dcp_cli_report(prog, "setting up", st);
        rc = (st == DCP_ERR_UNSUPPORTED || st == DCP_ERR_INVALID_ARGUMENT) ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
        goto done;
    }
    for (uint32_t it = 0; it <= o.iters && st == DCP_OK; it++) { /* iteration 0 warms up */
        for (int d = 0; d < ndev && st == DCP_OK; d++)
            if (sh[d].n) st = dcp_cmd_submit(sh[d].cmd);
        for (int d = 0; d < ndev && st == DCP_OK; d++)
            if (sh[d].n) st = dcp_cmd_wait(sh[d].cmd);
        if (it == 0) continue;
        double worst = 0;
        for (int d = 0; d < ndev && st == DCP_OK; d++) {
            double ns = 0;
            if (!sh[d].n) continue;
            st = dcp_cmd_elapsed_ns(sh[d].cmd, sh[d].ts0, sh[d].ts1, &ns);
            if (ns > worst) worst = ns;
        }
        step_ns[it - 1] = worst;
    }
    if (st != DCP_OK) {
        dcp_cli_report(prog, "running", st);
        rc = DCP_EXIT_RUNTIME;
        goto done;
    }
    double step_min = step_ns[0];
    for (uint32_t i = 1; i < o.iters; i++) step_min = step_ns[i] < step_min ? step_ns[i] : step_min;
    const double step = dcp_bench_median(step_ns, (int)o.iters);
    const uint32_t DK = o.kv_lora + o.rope;
    const uint64_t kv_bytes = (uint64_t)o.batch * o.ctx * DK * dcp_dtype_size((dcp_dtype)o.dtype);
    const double rate = (double)kv_bytes / (step * 1e-9);
    /* Attention arithmetic: per token and head, DK multiply-adds for the score and kv_lora for O. */
    const double flops = 2.0 * o.batch * (double)o.ctx * o.heads * (DK + o.kv_lora);
    dcp_bench_yardsticks y = {0};
    if (dcp_bench_measure_yardsticks(sh[0].dev, 3, &y)) {
        rc = DCP_EXIT_RUNTIME;
        goto done;
    }
    int physical = 0; /* rates per physical device, as the GQA path reports them */
    for (int d = 0; d < ndev; d++) {
        int seen = 0;
        for (int e = 0; e < d; e++)
            if (sh[e].n && dcp_device_get_info(sh[e].dev)->physical_index == dcp_device_get_info(sh[d].dev)->physical_index)
                seen = 1;
        if (sh[d].n && !seen) physical++;
    }
    const double per_dev = rate / (physical ? physical : 1);
    double max_o = 0, max_lse = 0;
    uint64_t bad = 0;
    if (o.verify)
        for (int d = 0; d < ndev; d++)
            if (sh[d].n) bad += share_verify(&sh[d], &o, &max_o, &max_lse);
    const dcp_device_info *info = dcp_device_get_info(sh[0].dev);
    const uint32_t hg = dcp_decode_plan_heads_per_group(sh[0].plan);
    if (o.json) {
        printf("{\"bench\": \"attn_mla\", \"device\": ");
        dcp_cli_json_string(stdout, info->name, strlen(info->name));
        printf(", \"devices\": %d, \"ctx\": %u, \"batch\": %u, \"heads\": %u, \"kv_lora\": %u, \"rope\": %u, "
               "\"page_size\": %u, \"kv_dtype\": \"%s\", \"iters\": %u, \"heads_per_workgroup\": %u, \"chunks\": %u, "
               "\"chunk_tokens\": %u, \"step_ms\": %.4f, \"step_min_ms\": %.4f, \"kv_bytes\": %llu, "
               "\"kv_read_gbps\": %.4f, \"gflops\": %.4f, \"stream_read_gbps\": %.4f, \"stream_read_u32_gbps\": %.4f, "
               "\"copy_gbps\": %.4f, \"ratio_vs_stream_read\": %.4f, \"ratio_vs_stream_read_u32\": %.4f, "
               "\"ratio_vs_copy\": %.4f",
               ndev, o.ctx, o.batch, o.heads, o.kv_lora, o.rope, o.page_size, dcp_dtype_name((dcp_dtype)o.dtype),
               o.iters, hg, dcp_decode_plan_chunks(sh[0].plan), dcp_decode_plan_chunk_tokens(sh[0].plan),
               step * 1e-6, step_min * 1e-6, (unsigned long long)kv_bytes, rate * 1e-9, flops / step,
               y.stream_read_bps * 1e-9, y.stream_read_u32_bps * 1e-9, y.copy_bps * 1e-9, per_dev / y.stream_read_bps,
               per_dev / y.stream_read_u32_bps, per_dev / y.copy_bps);
        if (o.verify)
            printf(", \"verify\": \"%s\", \"max_abs_err_o\": %.3g, \"max_abs_err_lse\": %.3g", bad ? "FAIL" : "ok",
                   max_o, max_lse);
        printf("}\n");
    } else {
        printf("attn --mla: %s x%d, ctx %u, batch %u, %u heads, rows %u (kv_lora %u + rope %u), page %u, %s cache\n",
               info->name, ndev, o.ctx, o.batch, o.heads, DK, o.kv_lora, o.rope, o.page_size,
               dcp_dtype_name((dcp_dtype)o.dtype));
        printf("  plan: %u heads per workgroup (each row read %u time(s) per step), %u chunk(s) of %u tokens per "
               "sequence\n", hg, o.heads / hg, dcp_decode_plan_chunks(sh[0].plan),
               dcp_decode_plan_chunk_tokens(sh[0].plan));
        printf("  step (median of %u, GPU timestamps): %.3f ms (fastest %.3f ms), %.2f GFLOP/s\n", o.iters,
               step * 1e-6, step_min * 1e-6, flops / step);
        printf("  latent cache read: %.1f MiB per step, %.3f GB/s (%.3f GB/s per physical device)\n",
               (double)kv_bytes / (1 << 20), rate * 1e-9, per_dev * 1e-9);
        printf("  yardsticks on device 0: streaming-read shader %.3f GB/s (16-byte loads), %.3f GB/s (4-byte loads), "
               "vkCmdCopyBuffer %.3f GB/s\n", y.stream_read_bps * 1e-9, y.stream_read_u32_bps * 1e-9, y.copy_bps * 1e-9);
        printf("  ratio: %.3f of the streaming-read shader (16-byte loads), %.3f (4-byte loads), %.3f of "
               "vkCmdCopyBuffer\n", per_dev / y.stream_read_bps, per_dev / y.stream_read_u32_bps, per_dev / y.copy_bps);
        if (o.verify) printf("  verify: %s (max abs error O %.3g, LSE %.3g)\n", bad ? "FAIL" : "ok", max_o, max_lse);
    }
    if (bad) {
        fprintf(stderr, "%s: --verify: %llu value(s) differ from the CPU reference beyond tolerance\n", prog,
                (unsigned long long)bad);
        rc = DCP_EXIT_RUNTIME;
    }
done:
    for (int d = 0; d < ndev; d++) share_free(&sh[d]);
    free(sh);
    free(step_ns);
    dcp_context_destroy(ctx);
    return rc;
}
