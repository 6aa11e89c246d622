/* dcp-vk-bench attn: paged flash-decoding step time and KV read rate, with the same device's
 * streaming-read shader and vkCmdCopyBuffer rates measured in the same run as yardsticks.
 * Every kind reports its roofline: bytes (the cache rows, Q, O, LSE and the block tables), FLOPs
 * (2 per multiply-add of the scores and of O) and max(bytes / read rate, FLOPs / FMA rate) against
 * the yardsticks sampled before every timed step (docs/design.md section 16).
 * Sequences are spread over the devices (sequence b on device b % devices). Two kinds of attention
 * share the setup, the timed steps, the yardsticks and the check against the CPU reference: GQA
 * (K and V pages, query heads over KV heads) and, with --mla, MLA's latent decode (every head
 * against one K-only latent cache, rows of kv_lora + rope; the two kinds of include/dcpvk/attn.h,
 * DeepSeek's shape by default: 512 + 64, 16 heads per rank, V3's 128 at TP 8). --dcp runs the DCP
 * step instead (attn_dcp.c). */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/dtype.h"
#include "dcpvk/kv.h"
#include "ref/kv_ref.h"
#include "ref/mla_ref.h"
#include "ref/ref.h"

typedef enum attn_kind {
    ATTN_GQA = 0, /* query heads over KV heads, K and V pages */
    ATTN_MLA = 1, /* --mla: every head against one latent cache, K-only pages */
} attn_kind;

typedef struct attn_opts {
    attn_kind kind;
    uint32_t ctx, batch, q_heads, kv_heads, head_dim, page_size, iters; /* MLA: q_heads per rank */
    dcp_dtype dtype;
    bool verify, json;
    const char *devices;
    uint32_t kv_lora, rope; /* MLA: row = kv_lora + rope values, O has kv_lora */
    float scale;            /* MLA softmax scale; 0: 1/sqrt(192) (GQA: 1/sqrt(head_dim)) */
    dcp_bench_dcp_opts dcp; /* --dcp and its options (apps/bench/attn_dcp.c) */
    int q_heads_set;        /* --q-heads given */
} attn_opts;

/* Values per cache row (the K row of a head, or the latent row) and per output row. */
static uint32_t row_values(const attn_opts *o) { return o->kind == ATTN_MLA ? o->kv_lora + o->rope : o->head_dim; }
static uint32_t out_values(const attn_opts *o) { return o->kind == ATTN_MLA ? o->kv_lora : o->head_dim; }

static void usage(FILE *f)
{
    dcp_cli_print_text(f,
            "usage: dcp-vk-bench attn [options]\n"
            "  --ctx L            tokens per sequence (default 4096)\n"
            "  --batch B          sequences (default 1); sequence b runs on device b %% devices\n"
            "  --q-heads H        query heads (default 32)\n"
            "  --kv-heads H       KV heads (default 8; divides --q-heads)\n"
            "  --head-dim D       head dim, multiple of 4 up to 256 (default 128)\n"
            "  --page-size P      tokens per KV page (default 16)\n"
            "  --kv-dtype T       f16, f32 or q8_0 (default f16; q8_0: one device (no --dcp), row width a\n"
            "                     multiple of 32)\n"
            "  --iters N          timed iterations; the median is reported (default 5)\n"
            "  --verify           compare with the CPU reference; exit 1 on a mismatch\n"
            "  --json             one JSON object per configuration instead of text\n"
            "  --devices LIST     comma-separated device indices (default: $DCP_VK_DEVICES, else all)\n"
            "DCP (one group of N ranks: N devices in this process, or mpiexec -n N with one device each):\n"
            "  --dcp N            DCP size; --q-heads then counts the group's heads after the gather\n"
            "                     (N divides it) and --kv-heads the KV heads every rank holds (default 0: off)\n"
            "  --backend B        a2a or ag_rs (default a2a; a2a needs N > 1)\n"
            "  --interleave I     tokens in a row on one rank, divides --page-size (default 1)\n"
            "  --transport T      auto, devgroup, peer, dmabuf, hostmem, staging or mpi (default auto:\n"
            "                     $DCP_VK_TRANSPORT, else the best for each pair)\n"
            "  --q-replicate      every rank gets the group's full Q; no Q all-gather\n"
            "MLA (DeepSeek's latent attention: every head against one latent cache, K-only pool):\n"
            "  --mla              decode MLA instead of GQA; --q-heads then counts the heads per rank\n"
            "                     (default 16: DeepSeek-V3's 128 at TP 8); --kv-heads and --head-dim do not apply\n"
            "  --kv-lora N        latent width, multiple of 4 (default 512)\n"
            "  --rope N           rope part of a row, multiple of 4 (default 64); rows are kv_lora + rope\n"
            "  --scale X          softmax scale (default 1/sqrt(192): DeepSeek's nope 128 + rope 64)\n");
}

static int parse(int argc, char **argv, attn_opts *o)
{
    static const char *const dtypes[] = {"f32", "f16", "q8_0", NULL};
    const char *p = "dcp-vk-bench attn";
    *o = (attn_opts){.kind = ATTN_GQA, .ctx = 4096, .batch = 1, .q_heads = 32, .kv_heads = 8, .head_dim = 128,
                     .page_size = 16, .iters = 5, .dtype = DCP_DTYPE_F16, .kv_lora = 512, .rope = 64};
    o->dcp.interleave = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = NULL;
        int ok = 1;
#define U32(name, field, lo, hi)                                                                   \
    else if (strcmp(a, name) == 0) ok = (v = dcp_cli_value(p, argc, argv, &i)) && dcp_cli_u32(p, name, v, lo, hi, &o->field)
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 1;
        }
        U32("--ctx", ctx, 0, 1u << 26);
        U32("--batch", batch, 1, 1024);
        U32("--q-heads", q_heads, 1, 1024), o->q_heads_set = 1;
        U32("--kv-heads", kv_heads, 1, 1024);
        U32("--head-dim", head_dim, 4, 256);
        U32("--page-size", page_size, 1, 4096);
        U32("--iters", iters, 1, 1000);
        else if (strcmp(a, "--kv-dtype") == 0) {
            int k = (v = dcp_cli_value(p, argc, argv, &i)) ? dcp_cli_choice(p, a, v, dtypes) : -1;
            ok = k >= 0;
            if (ok) o->dtype = (dcp_dtype)k;
        } else if (strcmp(a, "--devices") == 0) ok = (o->devices = dcp_cli_value(p, argc, argv, &i)) != NULL;
        else if (strcmp(a, "--verify") == 0) o->verify = true;
        U32("--dcp", dcp.dcp, 1, 64);
        U32("--interleave", dcp.interleave, 1, 4096);
        else if (strcmp(a, "--backend") == 0) {
            static const char *const backends[] = {"a2a", "ag_rs", NULL};
            int k = (v = dcp_cli_value(p, argc, argv, &i)) ? dcp_cli_choice(p, a, v, backends) : -1;
            ok = k >= 0;
            if (ok) o->dcp.backend = k;
        } else if (strcmp(a, "--transport") == 0) {
            static const char *const transports[] = {"auto", "devgroup", "hostmem", "staging", "mpi", "peer", "dmabuf", NULL};
            int k = (v = dcp_cli_value(p, argc, argv, &i)) ? dcp_cli_choice(p, a, v, transports) : -1;
            ok = k >= 0;
            if (ok) o->dcp.transport = k; /* dcp_transport order */
        } else if (strcmp(a, "--q-replicate") == 0) o->dcp.q_replicate = true;
        else if (strcmp(a, "--mla") == 0) o->kind = ATTN_MLA;
        U32("--kv-lora", kv_lora, 4, 1020);
        U32("--rope", rope, 4, 1020);
        else if (strcmp(a, "--scale") == 0) {
            v = dcp_cli_value(p, argc, argv, &i);
            char *end = NULL;
            double x = v ? strtod(v, &end) : 0.0;
            ok = v && end && !*end && x > 0 && isfinite(x);
            if (ok) o->scale = (float)x;
            else if (v) fprintf(stderr, "%s: --scale '%s' is not a positive number\n", p, v);
        }
        else if (strcmp(a, "--json") == 0) o->json = true;
        else {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", p, a);
            ok = 0;
        }
#undef U32
        if (!ok) return -1;
    }
    if (o->kind == ATTN_MLA) {
        if (o->dcp.dcp) {
            fprintf(stderr, "%s: --mla with --dcp is not available yet (the MLA DCP step comes with the deepseek2 "
                    "graph); measure one rank's latent decode with --mla alone\n", p);
            return -1;
        }
        if (o->kv_lora % 4 || o->rope % 4 || o->kv_lora + o->rope > DCP_KV_MAX_HEAD_DIM) {
            fprintf(stderr, "%s: --kv-lora %u and --rope %u must be multiples of 4 summing to at most %d\n", p,
                    o->kv_lora, o->rope, DCP_KV_MAX_HEAD_DIM);
            return -1;
        }
        if (!o->q_heads_set) o->q_heads = 16;
        if (o->scale == 0.0f) o->scale = 1.0f / sqrtf(192.0f);
        return 0;
    }
    if (o->q_heads % o->kv_heads) {
        fprintf(stderr, "%s: --q-heads %u is not a multiple of --kv-heads %u\n", p, o->q_heads, o->kv_heads);
        return -1;
    }
    return 0;
}

/* xorshift64*: fast deterministic KV contents. */
static uint64_t next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

void dcp_bench_fill_random(void *dst, uint64_t n, int t, uint64_t seed)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    if (t == DCP_DTYPE_F16) {
        uint16_t *h = dst;
        for (uint64_t i = 0; i < n; i += 4) {
            uint64_t r = next(&s);
            for (uint64_t k = 0; k < 4 && i + k < n; k++) {
                uint16_t bits = (uint16_t)(r >> (16 * k));
                /* sign, exponent below 15 (|x| < 1), random mantissa */
                h[i + k] = (uint16_t)((bits & 0x83ffu) | ((bits % 15u) << 10));
            }
        }
    } else {
        float *f = dst;
        for (uint64_t i = 0; i < n; i++) f[i] = (float)((double)(next(&s) >> 11) * (2.0 / 9007199254740992.0) - 1.0);
    }
}

/* One device's share: its sequences, pool, plan and command. */
typedef struct share {
    dcp_device *dev;
    uint32_t n;           /* sequences */
    uint32_t max_blocks, num_pages;
    uint32_t *lengths, *bt;
    void *pages;          /* host copy of the pool (kept for --verify) */
    float *q;
    dcp_kv_pool *pool;
    dcp_decode_plan *plan;
    dcp_buffer *qb, *ob, *lb;
    dcp_cmd *cmd;
    uint32_t ts0, ts1;
    double *ns;
} share;

/* The KV pool of a share of n sequences of ctx tokens (num_pages pages). */
static dcp_kv_pool_config pool_config(const attn_opts *o, uint32_t num_pages)
{
    if (o->kind == ATTN_MLA)
        return (dcp_kv_pool_config){.kv_heads = 1, .head_dim = row_values(o), .page_size = o->page_size,
                                    .dtype = o->dtype, .num_pages = num_pages, .k_only = 1};
    return (dcp_kv_pool_config){.kv_heads = o->kv_heads, .head_dim = o->head_dim, .page_size = o->page_size,
                                .dtype = o->dtype, .num_pages = num_pages};
}

/* The decode plan of a share of n sequences: the kind's shapes. */
static dcp_decode_config decode_config(const attn_opts *o, uint32_t n, uint32_t max_blocks)
{
    dcp_decode_config c = DCP_DECODE_CONFIG_DEFAULT;
    c.kind = o->kind == ATTN_MLA ? DCP_DECODE_LATENT : DCP_DECODE_GQA;
    c.batch = n;
    c.q_heads = o->q_heads;
    c.max_blocks = max_blocks;
    if (o->kind == ATTN_MLA) {
        c.latent = o->kv_lora;
        c.scale = o->scale;
    }
    return c;
}

static dcp_status share_setup(share *s, const attn_opts *o, int d, int ndev, uint64_t seed)
{
    dcp_status st = DCP_OK;
    const uint32_t P = o->page_size, D = row_values(o), DV = out_values(o);
    for (uint32_t b = 0; b < o->batch; b++)
        if ((int)(b % (uint32_t)ndev) == d) s->n++;
    if (!s->n) return DCP_OK;
    s->max_blocks = (o->ctx + P - 1) / P;
    if (!s->max_blocks) s->max_blocks = 1;
    s->num_pages = s->n * s->max_blocks;
    s->lengths = malloc(s->n * sizeof *s->lengths);
    s->bt = malloc((size_t)s->n * s->max_blocks * sizeof *s->bt);
    const dcp_kv_pool_config pc = pool_config(o, s->num_pages);
    /* rows of a page: K and V of every KV head (GQA), the latent rows (MLA) */
    const uint64_t page_rows = (uint64_t)(pc.k_only ? 1 : 2) * pc.kv_heads * P, page_elems = page_rows * D;
    s->pages = malloc(s->num_pages * page_rows * dcp_kv_row_bytes(o->dtype, D));
    uint64_t rows = (uint64_t)s->n * o->q_heads;
    s->q = malloc(rows * D * sizeof(float));
    if (!s->lengths || !s->bt || !s->pages || !s->q)
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "bench: out of host memory for %u pages", s->num_pages);
    for (uint32_t i = 0; i < s->n; i++) s->lengths[i] = o->ctx;
    /* Pages in a shuffled order (a real cache is fragmented). */
    uint64_t r = seed + 17;
    uint32_t *perm = s->bt;
    for (uint32_t i = 0; i < s->num_pages; i++) perm[i] = i;
    for (uint32_t i = s->num_pages - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(next(&r) % (i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    if (o->dtype == DCP_DTYPE_Q8_0) { /* random rows through the reference quantizer */
        float *x = malloc(D * sizeof *x);
        if (!x) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "bench: out of host memory");
        const uint64_t rw = dcp_kv_row_bytes(o->dtype, D) / 4;
        for (uint64_t r = 0; r < s->num_pages * page_rows; r++) {
            dcp_bench_fill_random(x, D, DCP_DTYPE_F32, seed + r);
            dcp_ref_q8_0_quantize_row(x, D, (uint32_t *)s->pages + r * rw);
        }
        free(x);
    } else {
        dcp_bench_fill_random(s->pages, s->num_pages * page_elems, o->dtype, seed);
    }
    dcp_bench_fill_random(s->q, rows * D, DCP_DTYPE_F32, seed + 1);

    DCP_TRY(dcp_kv_pool_create(s->dev, &pc, &s->pool));
    DCP_TRY(dcp_kv_pool_write_pages(s->pool, 0, s->num_pages, s->pages));
    const dcp_decode_config dc = decode_config(o, s->n, s->max_blocks);
    DCP_TRY(dcp_decode_plan_create(s->pool, &dc, &s->plan));
    DCP_TRY(dcp_decode_plan_set(s->plan, s->lengths, s->bt));
    DCP_TRY(dcp_buffer_create(s->dev, rows * D * 4, DCP_MEMORY_DEVICE, &s->qb));
    DCP_TRY(dcp_buffer_create(s->dev, rows * DV * 4, DCP_MEMORY_DEVICE, &s->ob));
    DCP_TRY(dcp_buffer_create(s->dev, rows * 4, DCP_MEMORY_DEVICE, &s->lb));
    DCP_TRY(dcp_buffer_upload(s->qb, 0, s->q, rows * D * 4));
    DCP_TRY(dcp_cmd_create(s->dev, &s->cmd));
    DCP_TRY(dcp_cmd_timestamp(s->cmd, &s->ts0));
    DCP_TRY(dcp_decode_record(s->cmd, s->plan, s->qb, 0, s->ob, 0, s->lb, 0));
    DCP_TRY(dcp_cmd_timestamp(s->cmd, &s->ts1));
    s->ns = calloc(o->iters, sizeof *s->ns);
    if (!s->ns) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    if (!o->verify) {
        free(s->pages);
        s->pages = NULL;
    }
    return DCP_OK;
fail:
    return st;
}

static void share_free(share *s)
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
    free(s->ns);
}

/* Compares a share's result with the double-precision reference; returns the number of mismatches. */
static uint64_t share_verify(share *s, const attn_opts *o, double *max_o, double *max_lse)
{
    const uint64_t rows = (uint64_t)s->n * o->q_heads, DV = out_values(o);
    uint64_t bad = 0;
    float *o_gpu = malloc(rows * DV * 4), *l_gpu = malloc(rows * 4);
    float *o_ref = malloc(rows * DV * 4), *l_ref = malloc(rows * 4);
    dcp_status st = dcp_buffer_download(s->ob, 0, o_gpu, rows * DV * 4);
    if (st == DCP_OK) st = dcp_buffer_download(s->lb, 0, l_gpu, rows * 4);
    if (st != DCP_OK) {
        dcp_cli_report(o->kind == ATTN_MLA ? "dcp-vk-bench attn --mla" : "dcp-vk-bench attn", "reading results", st);
        bad = 1;
    } else {
        if (o->kind == ATTN_MLA) {
            dcp_ref_mla_decode_args ra = {.batch = s->n, .heads = o->q_heads, .dk = row_values(o), .dv = o->kv_lora,
                .page_size = o->page_size, .max_blocks = s->max_blocks, .scale = o->scale, .dtype = o->dtype,
                .pages = s->pages, .q = s->q, .lengths = s->lengths, .block_tables = s->bt, .o = o_ref,
                .lse = l_ref};
            dcp_ref_mla_decode(&ra);
        } else {
            dcp_ref_decode_args ra = {.batch = s->n, .q_heads = o->q_heads, .kv_heads = o->kv_heads,
                .head_dim = o->head_dim, .page_size = o->page_size, .max_blocks = s->max_blocks,
                .scale = 1.0f / sqrtf((float)o->head_dim), .dtype = o->dtype, .pages = s->pages, .q = s->q,
                .lengths = s->lengths, .block_tables = s->bt, .o = o_ref, .lse = l_ref};
            dcp_ref_paged_decode(&ra);
        }
        for (uint64_t i = 0; i < rows * DV; i++) {
            double e = fabs((double)o_gpu[i] - o_ref[i]);
            if (!(e <= 1e-4)) bad++;
            if (e > *max_o || e != e) *max_o = e;
        }
        for (uint64_t i = 0; i < rows; i++) {
            if (isinf(l_ref[i])) {
                if (!(isinf(l_gpu[i]) && l_gpu[i] < 0)) bad++;
                continue;
            }
            double e = fabs((double)l_gpu[i] - l_ref[i]);
            if (!(e <= 1e-5 * (1 + fabs(l_ref[i])))) bad++;
            if (e > *max_lse || e != e) *max_lse = e;
        }
    }
    free(o_gpu);
    free(l_gpu);
    free(o_ref);
    free(l_ref);
    return bad;
}

/* What --ctx ctx needs: on each device its share's pool, plan (workspace at ctx), q/o/lse and
 * staging buffer; on the host the pages that fill the pools, block tables and queries (share_setup
 * allocates these). */
typedef struct attn_need_args {
    const attn_opts *o;
    dcp_context *ctx;
} attn_need_args;

static void attn_need(void *user, uint32_t ctx, dcp_bench_need *need)
{
    const attn_need_args *a = user;
    const attn_opts *o = a->o;
    const int ndev = dcp_context_device_count(a->ctx);
    memset(need, 0, offsetof(dcp_bench_need, error) + 1);
    need->count = ndev < DCP_BENCH_MAX_DEVICES ? ndev : DCP_BENCH_MAX_DEVICES;
    need->largest_what = "the KV pool's segment, the block table or the split-KV workspace";
    for (int d = 0; d < need->count; d++) {
        dcp_device *dev = need->devs[d] = dcp_context_device(a->ctx, d);
        uint32_t n = 0;
        for (uint32_t b = 0; b < o->batch; b++) n += (int)(b % (uint32_t)ndev) == d;
        if (!n) continue;
        uint64_t max_blocks = ((uint64_t)ctx + o->page_size - 1) / o->page_size;
        if (!max_blocks) max_blocks = 1;
        uint64_t pages = n * max_blocks;
        if (pages > UINT32_MAX) pages = UINT32_MAX; /* the pool refuses that many below */
        const dcp_kv_pool_config pc = pool_config(o, (uint32_t)pages);
        uint64_t pool, seg, plan, plan_largest;
        dcp_status st = dcp_kv_pool_bytes(dev, &pc, &pool, &seg);
        const dcp_decode_config dc = decode_config(o, n, (uint32_t)max_blocks);
        if (st == DCP_OK) st = dcp_decode_plan_bytes(&pc, &dc, ctx, &plan, &plan_largest);
        if (st != DCP_OK) {
            need->status = st;
            snprintf(need->error, sizeof need->error, "%s", dcp_last_error());
            return;
        }
        const uint64_t rows = (uint64_t)n * o->q_heads, q = rows * row_values(o) * 4, out = rows * out_values(o) * 4;
        const uint64_t qo = q > out ? q : out;
        need->device[d] = pool + plan + q + out + rows * 4 + dcp_device_staging_bytes(dev, seg > qo ? seg : qo);
        need->largest[d] = seg > plan_largest ? seg : plan_largest;
        if (qo > need->largest[d]) need->largest[d] = qo;
        need->host += pool + (uint64_t)n * max_blocks * 4 + q;
    }
}

/* What one run measured, for the report. */
typedef struct attn_result {
    const dcp_device_info *info; /* device 0's */
    int ndev;
    double step, step_min;       /* ns: median and fastest step */
    uint64_t kv_bytes;           /* cache bytes one step reads */
    double rate, per_dev;        /* bytes/s: all devices, per physical device */
    dcp_bench_yardsticks y;      /* device 0's, sampled before every timed step (medians) */
    double bytes, flops;         /* a step's, over every sequence */
    int physical;                /* physical devices in use */
    dcp_bench_roofline roof;     /* of one physical device's share */
    uint64_t bad;                /* --verify mismatches */
    double max_o, max_lse;
} attn_result;

/* The roofline line of the text report. */
static void report_roofline(const attn_result *r)
{
    const dcp_bench_roofline *f = &r->roof;
    printf("  roofline%s: %.0f bytes, %.0f FLOPs (%.2f per byte); max(read %.3f ms, FMA %.3f ms) = %.3f ms "
           "(%s-bound; FMA %.2f GFLOP/s, empty dispatch %.1f us, host wait %.1f us): %.3f of it reached\n",
           r->physical > 1 ? " per physical device" : "", f->bytes, f->flops, f->bytes > 0 ? f->flops / f->bytes : 0.0,
           f->read_ns * 1e-6, f->fma_ns * 1e-6, f->roofline_ns * 1e-6, dcp_bench_roofline_bound(f),
           r->y.fma_flops * 1e-9, r->y.dispatch_ns * 1e-3, r->y.host_wait_ns * 1e-3, f->fraction);
}

static void report_gqa(const attn_opts *o, const share *sh, const attn_result *r)
{
    const dcp_bench_yardsticks *y = &r->y;
    if (o->json) {
        printf("{\"bench\": \"attn\", \"device\": ");
        dcp_cli_json_string(stdout, r->info->name, strlen(r->info->name));
        printf(", \"devices\": %d, \"ctx\": %u, \"batch\": %u, "
               "\"q_heads\": %u, \"kv_heads\": %u, \"head_dim\": %u, \"page_size\": %u, \"kv_dtype\": \"%s\", "
               "\"iters\": %u, \"chunks\": %u, \"step_ms\": %.4f, \"step_min_ms\": %.4f, \"kv_bytes\": %llu, \"kv_read_gbps\": %.4f, "
               "\"stream_read_gbps\": %.4f, \"stream_read_u32_gbps\": %.4f, \"copy_gbps\": %.4f, "
               "\"ratio_vs_stream_read\": %.4f, \"ratio_vs_stream_read_u32\": %.4f, \"ratio_vs_copy\": %.4f",
               r->ndev, o->ctx, o->batch, o->q_heads, o->kv_heads, o->head_dim, o->page_size,
               dcp_dtype_name(o->dtype), o->iters, dcp_decode_plan_chunks(sh[0].plan), r->step * 1e-6,
               r->step_min * 1e-6, (unsigned long long)r->kv_bytes, r->rate * 1e-9, y->stream_read_bps * 1e-9,
               y->stream_read_u32_bps * 1e-9, y->copy_bps * 1e-9, r->per_dev / y->stream_read_bps,
               r->per_dev / y->stream_read_u32_bps, r->per_dev / y->copy_bps);
        printf(", ");
        dcp_bench_roofline_json(stdout, &r->roof, y);
        printf(", \"yardsticks\": ");
        dcp_bench_yardsticks_json(stdout, y);
        if (o->verify)
            printf(", \"verify\": \"%s\", \"max_abs_err_o\": %.3g, \"max_abs_err_lse\": %.3g",
                   r->bad ? "FAIL" : "ok", r->max_o, r->max_lse);
        printf("}\n");
        return;
    }
    printf("attn: %s x%d, ctx %u, batch %u, heads %u/%u, head dim %u, page %u, %s KV, %u chunk(s)/seq\n",
           r->info->name, r->ndev, o->ctx, o->batch, o->q_heads, o->kv_heads, o->head_dim, o->page_size,
           dcp_dtype_name(o->dtype), dcp_decode_plan_chunks(sh[0].plan));
    printf("  step (median of %u, GPU timestamps): %.3f ms\n", o->iters, r->step * 1e-6);
    printf("  KV read: %.1f MiB per step, %.3f GB/s (%.3f GB/s per physical device)\n",
           (double)r->kv_bytes / (1 << 20), r->rate * 1e-9, r->per_dev * 1e-9);
    printf("  yardsticks on device 0: streaming-read shader %.3f GB/s (16-byte loads), %.3f GB/s "
           "(4-byte loads), vkCmdCopyBuffer %.3f GB/s\n",
           y->stream_read_bps * 1e-9, y->stream_read_u32_bps * 1e-9, y->copy_bps * 1e-9);
    printf("  ratio: %.2f of the streaming-read shader (16-byte loads), %.2f (4-byte loads), %.2f of "
           "vkCmdCopyBuffer\n",
           r->per_dev / y->stream_read_bps, r->per_dev / y->stream_read_u32_bps, r->per_dev / y->copy_bps);
    report_roofline(r);
    if (o->verify) printf("  verify: %s (max abs error O %.3g, LSE %.3g)\n", r->bad ? "FAIL" : "ok", r->max_o, r->max_lse);
}

static void report_mla(const attn_opts *o, const share *sh, const attn_result *r)
{
    const dcp_bench_yardsticks *y = &r->y;
    const uint32_t DK = row_values(o);
    /* Attention arithmetic: per token and head, DK multiply-adds for the score and kv_lora for O. */
    const double flops = 2.0 * o->batch * (double)o->ctx * o->q_heads * (DK + o->kv_lora);
    const uint32_t hg = dcp_decode_plan_heads_per_group(sh[0].plan);
    if (o->json) {
        printf("{\"bench\": \"attn_mla\", \"device\": ");
        dcp_cli_json_string(stdout, r->info->name, strlen(r->info->name));
        printf(", \"devices\": %d, \"ctx\": %u, \"batch\": %u, \"heads\": %u, \"kv_lora\": %u, \"rope\": %u, "
               "\"page_size\": %u, \"kv_dtype\": \"%s\", \"iters\": %u, \"heads_per_workgroup\": %u, \"chunks\": %u, "
               "\"chunk_tokens\": %u, \"step_ms\": %.4f, \"step_min_ms\": %.4f, \"kv_bytes\": %llu, "
               "\"kv_read_gbps\": %.4f, \"gflops\": %.4f, \"stream_read_gbps\": %.4f, \"stream_read_u32_gbps\": %.4f, "
               "\"copy_gbps\": %.4f, \"ratio_vs_stream_read\": %.4f, \"ratio_vs_stream_read_u32\": %.4f, "
               "\"ratio_vs_copy\": %.4f",
               r->ndev, o->ctx, o->batch, o->q_heads, o->kv_lora, o->rope, o->page_size, dcp_dtype_name(o->dtype),
               o->iters, hg, dcp_decode_plan_chunks(sh[0].plan), dcp_decode_plan_chunk_tokens(sh[0].plan),
               r->step * 1e-6, r->step_min * 1e-6, (unsigned long long)r->kv_bytes, r->rate * 1e-9, flops / r->step,
               y->stream_read_bps * 1e-9, y->stream_read_u32_bps * 1e-9, y->copy_bps * 1e-9,
               r->per_dev / y->stream_read_bps, r->per_dev / y->stream_read_u32_bps, r->per_dev / y->copy_bps);
        printf(", ");
        dcp_bench_roofline_json(stdout, &r->roof, y);
        printf(", \"yardsticks\": ");
        dcp_bench_yardsticks_json(stdout, y);
        if (o->verify)
            printf(", \"verify\": \"%s\", \"max_abs_err_o\": %.3g, \"max_abs_err_lse\": %.3g", r->bad ? "FAIL" : "ok",
                   r->max_o, r->max_lse);
        printf("}\n");
        return;
    }
    printf("attn --mla: %s x%d, ctx %u, batch %u, %u heads, rows %u (kv_lora %u + rope %u), page %u, %s cache\n",
           r->info->name, r->ndev, o->ctx, o->batch, o->q_heads, DK, o->kv_lora, o->rope, o->page_size,
           dcp_dtype_name(o->dtype));
    printf("  plan: %u heads per workgroup (each row read %u time(s) per step), %u chunk(s) of %u tokens per "
           "sequence\n", hg, o->q_heads / hg, dcp_decode_plan_chunks(sh[0].plan),
           dcp_decode_plan_chunk_tokens(sh[0].plan));
    printf("  step (median of %u, GPU timestamps): %.3f ms (fastest %.3f ms), %.2f GFLOP/s\n", o->iters,
           r->step * 1e-6, r->step_min * 1e-6, flops / r->step);
    printf("  latent cache read: %.1f MiB per step, %.3f GB/s (%.3f GB/s per physical device)\n",
           (double)r->kv_bytes / (1 << 20), r->rate * 1e-9, r->per_dev * 1e-9);
    printf("  yardsticks on device 0: streaming-read shader %.3f GB/s (16-byte loads), %.3f GB/s (4-byte loads), "
           "vkCmdCopyBuffer %.3f GB/s\n", y->stream_read_bps * 1e-9, y->stream_read_u32_bps * 1e-9, y->copy_bps * 1e-9);
    printf("  ratio: %.3f of the streaming-read shader (16-byte loads), %.3f (4-byte loads), %.3f of "
           "vkCmdCopyBuffer\n", r->per_dev / y->stream_read_bps, r->per_dev / y->stream_read_u32_bps,
           r->per_dev / y->copy_bps);
    report_roofline(r);
    if (o->verify) printf("  verify: %s (max abs error O %.3g, LSE %.3g)\n", r->bad ? "FAIL" : "ok", r->max_o, r->max_lse);
}

int dcp_bench_attn(int argc, char **argv)
{
    attn_opts o;
    int pr = parse(argc, argv, &o);
    if (pr) return pr > 0 ? DCP_EXIT_OK : DCP_EXIT_USAGE;
    const char *prog = o.kind == ATTN_MLA ? "dcp-vk-bench attn --mla" : "dcp-vk-bench attn";
    if (o.dtype == DCP_DTYPE_Q8_0 && o.dcp.dcp) {
        fprintf(stderr, "dcp-vk-bench attn: --kv-dtype q8_0 is measured on a single device's decode only (not with "
                        "--dcp; the model runs it under DCP: dcp-vk-run --kv-dtype q8_0)\n");
        return DCP_EXIT_USAGE;
    }
    if (o.dcp.dcp) {
        dcp_bench_dcp_opts d = o.dcp;
        d.ctx = o.ctx, d.batch = o.batch, d.q_heads = o.q_heads, d.kv_heads = o.kv_heads, d.head_dim = o.head_dim;
        d.page_size = o.page_size, d.iters = o.iters, d.dtype = o.dtype, d.verify = o.verify, d.json = o.json;
        d.devices = o.devices;
        return dcp_bench_attn_dcp(&d);
    }
    dcp_context_config cfg = DCP_CONTEXT_CONFIG_DEFAULT;
    cfg.devices = o.devices;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&cfg, &ctx);
    if (st != DCP_OK) {
        dcp_cli_report(prog, "opening devices", st);
        return st == DCP_ERR_INVALID_ARGUMENT ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    }
    int ndev = dcp_context_device_count(ctx);
    /* Counted first: a configuration the devices cannot hold is refused before anything is allocated. */
    attn_need_args na = {&o, ctx};
    int mrc = dcp_bench_check_memory(prog, o.ctx, attn_need, &na, 0);
    if (mrc) {
        dcp_context_destroy(ctx);
        return mrc;
    }
    share *sh = calloc((size_t)ndev, sizeof *sh);
    int rc = DCP_EXIT_OK;
    const uint64_t seed = o.kind == ATTN_MLA ? 2000 : 1000;
    for (int d = 0; d < ndev && st == DCP_OK; d++) {
        sh[d].dev = dcp_context_device(ctx, d);
        st = share_setup(&sh[d], &o, d, ndev, seed + (uint64_t)d);
    }
    if (st != DCP_OK) {
        dcp_cli_report(prog, "setting up", st);
        rc = (st == DCP_ERR_UNSUPPORTED || st == DCP_ERR_INVALID_ARGUMENT) ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
        goto done;
    }
    /* Timed steps: every device's share submitted together; the step ends with the slowest. A
     * sample of device 0's yardsticks before each (ruler, step, ruler, step, ...). */
    dcp_bench_ruler *ruler = NULL;
    if (dcp_bench_ruler_create(sh[0].dev, &ruler)) {
        rc = DCP_EXIT_RUNTIME;
        goto done;
    }
    double *step_ns = calloc(o.iters, sizeof *step_ns);
    for (uint32_t it = 0; it <= o.iters && st == DCP_OK; it++) { /* iteration 0 warms up */
        if (it > 0 && dcp_bench_ruler_sample(ruler)) {
            dcp_bench_ruler_destroy(ruler);
            free(step_ns);
            rc = DCP_EXIT_RUNTIME;
            goto done;
        }
        for (int d = 0; d < ndev && st == DCP_OK; d++)
            if (sh[d].n) st = dcp_cmd_submit(sh[d].cmd);
        for (int d = 0; d < ndev && st == DCP_OK; d++)
            if (sh[d].n) st = dcp_cmd_wait(sh[d].cmd);
        if (it == 0) continue;
        double worst = 0;
        for (int d = 0; d < ndev && st == DCP_OK; d++) {
            if (!sh[d].n) continue;
            st = dcp_cmd_elapsed_ns(sh[d].cmd, sh[d].ts0, sh[d].ts1, &sh[d].ns[it - 1]);
            if (sh[d].ns[it - 1] > worst) worst = sh[d].ns[it - 1];
        }
        step_ns[it - 1] = worst;
    }
    if (st != DCP_OK) {
        dcp_cli_report(prog, "running", st);
        rc = DCP_EXIT_RUNTIME;
        free(step_ns);
        dcp_bench_ruler_destroy(ruler);
        goto done;
    }
    attn_result r = {.info = dcp_device_get_info(sh[0].dev), .ndev = ndev, .step_min = step_ns[0]};
    for (uint32_t i = 1; i < o.iters; i++)
        if (step_ns[i] < r.step_min) r.step_min = step_ns[i];
    r.step = dcp_bench_median(step_ns, (int)o.iters);
    free(step_ns);
    r.kv_bytes = (uint64_t)o.batch * o.ctx * (o.kind == ATTN_MLA ? 1 : o.kv_heads * 2) *
                 dcp_kv_row_bytes(o.dtype, row_values(&o));
    r.rate = (double)r.kv_bytes / (r.step * 1e-9);
    dcp_bench_ruler_get(ruler, 0, &r.y);
    dcp_bench_ruler_destroy(ruler);
    /* Bytes: the cache rows, Q and the block tables and lengths read, O and LSE written. FLOPs: per
     * token and query head, the score (row values) and O (output values) multiply-adds. */
    {
        const double rows = (double)o.batch * o.q_heads, blocks = (double)o.batch * ((o.ctx + o.page_size - 1) / o.page_size);
        r.bytes = (double)r.kv_bytes + rows * (row_values(&o) + out_values(&o) + 1) * 4 + (blocks + o.batch) * 4;
        r.flops = 2.0 * o.batch * (double)o.ctx * o.q_heads * (row_values(&o) + out_values(&o));
    }
    /* The yardsticks measure one physical device with all of it: logical devices that share one
     * (DCP_VK_DEVICES=0,0) split it, so compare the rate per physical device in use. */
    int physical = 0;
    for (int d = 0; d < ndev; d++) {
        int seen = 0;
        for (int e = 0; e < d; e++)
            if (sh[e].n && dcp_device_get_info(sh[e].dev)->physical_index ==
                               dcp_device_get_info(sh[d].dev)->physical_index)
                seen = 1;
        if (sh[d].n && !seen) physical++;
    }
    r.per_dev = r.rate / (physical ? physical : 1);
    /* Each physical device in use runs its share (an even split of the sequences) against its own
     * ceilings: the roofline of one share (device 0's yardsticks). */
    r.physical = physical ? physical : 1;
    r.roof = dcp_bench_roofline_of(&r.y, r.bytes / r.physical, r.flops / r.physical, r.step);
    if (o.verify)
        for (int d = 0; d < ndev; d++)
            if (sh[d].n) r.bad += share_verify(&sh[d], &o, &r.max_o, &r.max_lse);
    if (o.kind == ATTN_MLA) report_mla(&o, sh, &r);
    else report_gqa(&o, sh, &r);
    if (r.bad) {
        fprintf(stderr, "%s: --verify: %llu value(s) differ from the CPU reference beyond tolerance\n", prog,
                (unsigned long long)r.bad);
        rc = DCP_EXIT_RUNTIME;
    }
done:
    for (int d = 0; d < ndev; d++) share_free(&sh[d]);
    free(sh);
    dcp_context_destroy(ctx);
    return rc;
}
