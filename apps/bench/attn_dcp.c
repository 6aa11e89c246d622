/* dcp-vk-bench attn --dcp N: the DCP attention step (Q gather or q_replicate, local paged decode,
 * a2a or ag_rs exchange and merge) over the N ranks of a DCP group: N logical devices in one
 * process, or mpiexec -n P processes with N / P devices each. The KV cache is filled through
 * kv_append. Reports per step: local decode, exchange, merge and total time, exchange bytes sent
 * per rank (against the a2a formula (N-1) * Hl * (D+1) * 4 per sequence), KV bytes per rank.
 * --verify compares every rank's heads with the single-device CPU reference.
 * Phases: start_mpi, open_group (devices, communicator), fill_cache, make_step, time_steps,
 * verify, report, bench_free. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "cli/cli.h"
#include "common/error.h"
#include "common/splitmix.h"
#include "comm/put.h"
#include "dcpvk/cp.h"
#include "ref/ref.h"

/* Deterministic f16-exact value in (-1, 1) for element i of stream `salt`. */
static float value(uint64_t salt, uint64_t i)
{
    uint64_t s = salt * 0x100000001B3ull ^ i;
    uint64_t h = dcp_splitmix64_next(&s);
    float f = (float)((double)(h >> 40) * (2.0 / 16777216.0) - 1.0);
    return dcp_f16_to_f32(dcp_f32_to_f16(f));
}

typedef struct rank_bufs {
    dcp_buffer *k, *v;       /* [round tokens][Hkv][D] f32 rows for kv_append */
    dcp_buffer *q;           /* [batch][NH][D] f32 (q_replicate) or [batch][Hl][D] (own heads) */
    dcp_buffer *o, *lse;     /* [batch][Hl][D], [batch][Hl] f32 */
    dcp_cmd *cmd;
} rank_bufs;

/* One run of the bench, phase by phase; zero-initialised, so that bench_free may follow any phase.
 * Under MPI every process has its own. */
typedef struct bench_dcp {
    const dcp_bench_dcp_opts *o;
    const char *prog;
    bool mpi;                /* MPI was started here */
    int proc, nproc;         /* this process and the processes (0, 1 without MPI) */
    /* open_group */
    dcp_context *ctx;
    int L;                   /* devices (ranks) of this process */
    dcp_device *devs[64];
    dcp_comm *comm;
    uint32_t first;          /* group rank of local rank 0 */
    /* fill_cache */
    dcp_kv_cache *cache;
    rank_bufs rb[64];
    uint32_t seqs[1024];     /* sequence slots 0 .. batch-1 */
    uint32_t ref_blocks;     /* --verify: pages per sequence of the single-device reference */
    void *ref_pages;         /* [batch * ref_blocks] pages of the reference pool, KV dtype */
    uint32_t *ref_bt, *ref_len;
    /* make_step */
    dcp_cp_attn_config ac;
    dcp_cp_attn *attn;
    float *q;                /* [batch][NH][D] f32 */
    dcp_comm_buf qv[64], ov[64], lv[64];
    /* time_steps */
    double *tot, *loc, *xch, *mrg; /* [iters] ns: total, local decode, exchange, merge */
    double t_tot, t_loc, t_x, t_m, t_min; /* medians and the fastest total, ns */
    uint64_t bytes, q_bytes; /* exchange and Q all-gather bytes sent per rank per step */
    uint64_t kv_rank;        /* KV bytes of the fullest rank */
    bool roofed;             /* one process: the local decode's roofline was measured */
    dcp_bench_yardsticks y;  /* device 0's, sampled before every timed step (medians) */
    dcp_bench_roofline roof; /* the local decode of one physical device's share */
    /* verify */
    uint64_t bad;            /* values beyond tolerance, all processes */
    double max_o, max_lse;   /* largest absolute errors, all processes */
} bench_dcp;

/* Starts MPI when a launcher started more than one process. Returns a dcp_exit_code. */
static int start_mpi(bench_dcp *b)
{
    int announced;
    b->nproc = 1;
    if (!dcp_cli_mpi_launched(&announced) || announced <= 1) return DCP_EXIT_OK;
    dcp_status st = dcp_mpi_init(NULL, NULL, &b->proc, &b->nproc);
    if (st != DCP_OK) {
        dcp_cli_report(b->prog, "starting MPI", st);
        return DCP_EXIT_RUNTIME;
    }
    b->mpi = true;
    return DCP_EXIT_OK;
}

/* This process's devices (N in all over the processes) and the group's communicator. Returns a
 * dcp_exit_code. */
static int open_group(bench_dcp *b)
{
    const dcp_bench_dcp_opts *o = b->o;
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = o->devices;
    dcp_status st = dcp_context_create(&cc, &b->ctx);
    if (st != DCP_OK) {
        dcp_cli_report(b->prog, "opening devices", st);
        return DCP_EXIT_RUNTIME;
    }
    b->L = dcp_context_device_count(b->ctx);
    if ((uint32_t)(b->L * b->nproc) != o->dcp || b->L > 64) {
        fprintf(stderr, "%s: --dcp %u needs %u devices in all, but %d process(es) x %d device(s) = %d (set --devices "
                        "or DCP_VK_DEVICES, e.g. 0,0,0,0)\n", b->prog, o->dcp, o->dcp, b->nproc, b->L, b->nproc * b->L);
        return DCP_EXIT_USAGE;
    }
    if (o->q_heads % o->dcp) {
        fprintf(stderr, "%s: --q-heads %u is not divisible by --dcp %u\n", b->prog, o->q_heads, o->dcp);
        return DCP_EXIT_USAGE;
    }
    for (int i = 0; i < b->L; i++) b->devs[i] = dcp_context_device(b->ctx, i);
    dcp_comm_config ccfg = DCP_COMM_CONFIG_DEFAULT;
    ccfg.transport = (dcp_transport)o->transport;
    st = b->mpi ? dcp_comm_init_mpi(b->devs, b->L, &ccfg, &b->comm) : dcp_comm_init_local(b->devs, b->L, &ccfg, &b->comm);
    if (st != DCP_OK) {
        dcp_cli_report(b->prog, "creating the communicator", st);
        return st == DCP_ERR_UNSUPPORTED ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
    }
    b->first = (uint32_t)dcp_comm_first_rank(b->comm);
    return DCP_EXIT_OK;
}

/* Creates the DCP group's KV cache and each rank's buffers, then fills every sequence to --ctx
 * tokens through kv_append, in rounds of up to 2048 tokens; with --verify also the single-device
 * reference pool. */
static dcp_status fill_cache(bench_dcp *b)
{
    const dcp_bench_dcp_opts *o = b->o;
    const uint32_t N = o->dcp, B = o->page_size, D = o->head_dim, Hkv = o->kv_heads, NH = o->q_heads;
    const uint32_t Hl = NH / N, batch = o->batch;
    const uint64_t row = (uint64_t)Hkv * D;
    dcp_status st = DCP_OK;
    float *kt = NULL, *vt = NULL; /* [batch * round][Hkv][D] f32: one round's new rows */
    uint64_t local_max = dcp_kv_local_length(o->ctx, 0, N, o->interleave);
    uint32_t blocks = (uint32_t)((local_max + B - 1) / B) + 1;
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool = (dcp_kv_pool_config){.kv_heads = Hkv, .head_dim = D, .page_size = B,
                                   .dtype = (dcp_dtype)o->dtype, .num_pages = batch * blocks};
    kc.dcp_size = N;
    kc.first_rank = b->first;
    kc.interleave = o->interleave;
    kc.max_seqs = batch;
    kc.max_blocks = blocks;
    DCP_TRY(dcp_kv_cache_create(b->devs, (uint32_t)b->L, &kc, &b->cache));

    const uint32_t round = 2048;
    uint64_t kv_cap = (uint64_t)batch * round * row * 4;
    kt = malloc(kv_cap);
    vt = malloc(kv_cap);
    if (!kt || !vt) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (int i = 0; i < b->L; i++) {
        rank_bufs *r = &b->rb[i];
        DCP_TRY(dcp_buffer_create(b->devs[i], kv_cap, DCP_MEMORY_DEVICE, &r->k));
        DCP_TRY(dcp_buffer_create(b->devs[i], kv_cap, DCP_MEMORY_DEVICE, &r->v));
        DCP_TRY(dcp_buffer_create(b->devs[i], (uint64_t)batch * NH * D * 4, DCP_MEMORY_DEVICE, &r->q));
        DCP_TRY(dcp_buffer_create(b->devs[i], (uint64_t)batch * Hl * D * 4, DCP_MEMORY_DEVICE, &r->o));
        DCP_TRY(dcp_buffer_create(b->devs[i], (uint64_t)batch * Hl * 4, DCP_MEMORY_DEVICE, &r->lse));
        DCP_TRY(dcp_cmd_create(b->devs[i], &r->cmd));
    }
    b->ref_blocks = (o->ctx + B - 1) / B + 1;
    const uint32_t ref_blocks = b->ref_blocks;
    uint32_t es = dcp_dtype_size((dcp_dtype)o->dtype);
    if (o->verify) {
        b->ref_pages = calloc((uint64_t)batch * ref_blocks * 2 * row * B, es);
        b->ref_bt = malloc((uint64_t)batch * ref_blocks * 4);
        b->ref_len = malloc(batch * 4);
        if (!b->ref_pages || !b->ref_bt || !b->ref_len) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the reference");
            goto fail;
        }
        for (uint32_t s = 0; s < batch; s++) {
            b->ref_len[s] = o->ctx;
            for (uint32_t j = 0; j < ref_blocks; j++) b->ref_bt[s * ref_blocks + j] = s * ref_blocks + j;
        }
    }
    uint32_t counts[1024];
    for (uint32_t s = 0; s < batch; s++) b->seqs[s] = s;
    for (uint32_t done_tok = 0; done_tok < o->ctx; done_tok += round) {
        uint32_t n = o->ctx - done_tok < round ? o->ctx - done_tok : round;
        uint64_t t = 0;
        for (uint32_t s = 0; s < batch; s++) {
            counts[s] = n;
            for (uint32_t p = done_tok; p < done_tok + n; p++, t++)
                for (uint64_t e = 0; e < row; e++) {
                    uint64_t idx = ((uint64_t)s * o->ctx + p) * row + e;
                    float kx = value(1, idx), vx = value(2, idx);
                    kt[t * row + e] = kx;
                    vt[t * row + e] = vx;
                    if (b->ref_pages) {
                        uint32_t h = (uint32_t)(e / D), d = (uint32_t)(e % D);
                        uint64_t off = ((uint64_t)(s * ref_blocks + p / B) * 2 * Hkv + h) * B * D + (p % B) * D + d;
                        uint64_t voff = off + (uint64_t)Hkv * B * D;
                        if (es == 2) {
                            ((uint16_t *)b->ref_pages)[off] = dcp_f32_to_f16(kx);
                            ((uint16_t *)b->ref_pages)[voff] = dcp_f32_to_f16(vx);
                        } else {
                            ((float *)b->ref_pages)[off] = kx;
                            ((float *)b->ref_pages)[voff] = vx;
                        }
                    }
                }
        }
        DCP_TRY(dcp_kv_cache_append(b->cache, batch, b->seqs, counts));
        for (int i = 0; i < b->L; i++) {
            rank_bufs *r = &b->rb[i];
            DCP_TRY(dcp_buffer_upload(r->k, 0, kt, t * row * 4));
            DCP_TRY(dcp_buffer_upload(r->v, 0, vt, t * row * 4));
            DCP_TRY(dcp_cmd_reset(r->cmd));
            DCP_TRY(dcp_kv_cache_record_append(r->cmd, b->cache, (uint32_t)i, r->k, 0, r->v, 0));
            DCP_TRY(dcp_cmd_run(r->cmd));
        }
    }
fail:
    free(kt);
    free(vt);
    return st;
}

/* The DCP attention step over the cache, and Q on every rank: the group's whole Q with
 * --q-replicate, else the rank's own heads. */
static dcp_status make_step(bench_dcp *b)
{
    const dcp_bench_dcp_opts *o = b->o;
    const uint32_t N = o->dcp, D = o->head_dim, NH = o->q_heads, Hl = NH / N, batch = o->batch;
    dcp_status st = DCP_OK;
    b->ac = (dcp_cp_attn_config)DCP_CP_ATTN_CONFIG_DEFAULT;
    b->ac.batch = batch;
    b->ac.heads_local = Hl;
    b->ac.backend = (dcp_cp_backend)o->backend;
    b->ac.q_replicate = o->q_replicate;
    DCP_TRY(dcp_cp_attn_create(b->comm, b->cache, &b->ac, &b->attn));
    DCP_TRY(dcp_cp_attn_set(b->attn, b->seqs));
    b->q = malloc((uint64_t)batch * NH * D * 4);
    if (!b->q) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint64_t i = 0; i < (uint64_t)batch * NH * D; i++) b->q[i] = value(3, i);
    for (int i = 0; i < b->L; i++) {
        rank_bufs *r = &b->rb[i];
        uint32_t g = b->first + (uint32_t)i;
        if (o->q_replicate) {
            DCP_TRY(dcp_buffer_upload(r->q, 0, b->q, (uint64_t)batch * NH * D * 4));
        } else {
            for (uint32_t s = 0; s < batch; s++)
                DCP_TRY(dcp_buffer_upload(r->q, (uint64_t)s * Hl * D * 4, b->q + ((uint64_t)s * NH + g * Hl) * D,
                                          (uint64_t)Hl * D * 4));
        }
        b->qv[i] = (dcp_comm_buf){r->q, 0};
        b->ov[i] = (dcp_comm_buf){r->o, 0};
        b->lv[i] = (dcp_comm_buf){r->lse, 0};
    }
fail:
    return st;
}

/* Runs the step iters + 1 times (the first warms up), every process together; keeps the slowest
 * rank's figures of each step, then the medians, the bytes sent and the fullest rank's KV bytes. */
static dcp_status time_steps(bench_dcp *b)
{
    const dcp_bench_dcp_opts *o = b->o;
    dcp_status st = DCP_OK;
    b->tot = calloc(o->iters, sizeof *b->tot);
    b->loc = calloc(o->iters, sizeof *b->loc);
    b->xch = calloc(o->iters, sizeof *b->xch);
    b->mrg = calloc(o->iters, sizeof *b->mrg);
    if (!b->tot || !b->loc || !b->xch || !b->mrg) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    /* One process: device 0's yardsticks sampled before every timed step (ruler, step, ruler, ...),
     * the ceilings of the local decode's roofline. Under MPI the processes' devices may share a
     * physical device that no process sees whole, so no roofline is given. */
    dcp_bench_ruler *ruler = NULL;
    if (!b->mpi && dcp_bench_ruler_create(b->devs[0], &ruler))
        return dcp_fail(DCP_ERR_VULKAN, "creating the yardsticks of device 0");
    for (uint32_t it = 0; it <= o->iters; it++) { /* iteration 0 warms up */
        dcp_cp_attn_timing tm;
        if (b->mpi) dcp_mpi_barrier();
        if (ruler && it > 0 && dcp_bench_ruler_sample(ruler)) {
            st = dcp_fail(DCP_ERR_VULKAN, "sampling the yardsticks of device 0");
            goto fail;
        }
        DCP_TRY(dcp_cp_attn_run(b->attn, b->qv, b->ov, b->lv, &tm));
        if (it == 0) continue;
        b->tot[it - 1] = dcp_mpi_max(tm.total_ns);
        b->loc[it - 1] = dcp_mpi_max(tm.local_ns);
        b->xch[it - 1] = dcp_mpi_max(tm.exchange_ns);
        b->mrg[it - 1] = dcp_mpi_max(tm.merge_ns);
        b->bytes = tm.bytes_sent - tm.q_bytes_sent;
        b->q_bytes = tm.q_bytes_sent;
    }
    b->t_min = b->tot[0];
    for (uint32_t i = 1; i < o->iters; i++)
        if (b->tot[i] < b->t_min) b->t_min = b->tot[i];
    b->t_tot = dcp_bench_median(b->tot, (int)o->iters);
    b->t_loc = dcp_bench_median(b->loc, (int)o->iters);
    b->t_x = dcp_bench_median(b->xch, (int)o->iters);
    b->t_m = dcp_bench_median(b->mrg, (int)o->iters);
    for (int i = 0; i < b->L; i++)
        if (dcp_kv_cache_bytes_used(b->cache, (uint32_t)i) > b->kv_rank)
            b->kv_rank = dcp_kv_cache_bytes_used(b->cache, (uint32_t)i);
    b->kv_rank = (uint64_t)dcp_mpi_max((double)b->kv_rank);
    if (ruler) {
        /* The local decode: every rank reads its shard's K and V rows for all NH gathered query
         * heads and writes their partial O and LSE (docs/design.md section 16's attn row, per
         * rank); the ranks run side by side, so one physical device's share is the bytes and FLOPs
         * of its ranks against the local decode's time (the slowest rank's). */
        const uint32_t N = o->dcp, D = o->head_dim, NH = o->q_heads, batch = o->batch;
        double bytes = 0, flops = 0;
        for (int i = 0; i < b->L; i++) {
            const uint32_t r = b->first + (uint32_t)i;
            const double local = (double)dcp_kv_local_length(o->ctx, r, N, o->interleave);
            const double blocks = (double)batch * ((local + o->page_size - 1) / o->page_size);
            bytes += (double)dcp_kv_cache_bytes_used(b->cache, (uint32_t)i) + (double)batch * NH * (2.0 * D + 1) * 4 +
                     (blocks + batch) * 4;
            flops += 4.0 * batch * local * NH * D;
        }
        int physical = 0;
        for (int i = 0; i < b->L; i++) {
            int seen = 0;
            for (int j = 0; j < i; j++)
                if (dcp_device_get_info(b->devs[j])->physical_index == dcp_device_get_info(b->devs[i])->physical_index)
                    seen = 1;
            physical += !seen;
        }
        dcp_bench_ruler_get(ruler, 0, &b->y);
        b->roof = dcp_bench_roofline_of(&b->y, bytes / physical, flops / physical, b->t_loc);
        b->roofed = true;
    }
fail:
    dcp_bench_ruler_destroy(ruler);
    return st;
}

/* --verify: compares every rank's O and LSE of its own heads with the single-device CPU reference
 * (O within 1e-4, LSE within 1e-5 relative); counts the values beyond, over all processes. */
static dcp_status verify(bench_dcp *b)
{
    const dcp_bench_dcp_opts *o = b->o;
    const uint32_t N = o->dcp, D = o->head_dim, NH = o->q_heads, Hl = NH / N, batch = o->batch;
    dcp_status st = DCP_OK;
    float *o_ref = malloc((uint64_t)batch * NH * D * 4), *l_ref = malloc((uint64_t)batch * NH * 4);
    float *og = malloc((uint64_t)batch * Hl * D * 4), *lg = malloc((uint64_t)batch * Hl * 4);
    if (!o_ref || !l_ref || !og || !lg) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    dcp_ref_decode_args ra = {.batch = batch, .q_heads = NH, .kv_heads = o->kv_heads, .head_dim = D,
        .page_size = o->page_size, .max_blocks = b->ref_blocks, .scale = 1.0f / sqrtf((float)D),
        .dtype = (dcp_dtype)o->dtype, .pages = b->ref_pages, .q = b->q, .lengths = b->ref_len,
        .block_tables = b->ref_bt, .o = o_ref, .lse = l_ref};
    dcp_ref_paged_decode(&ra);
    for (int i = 0; i < b->L; i++) {
        uint32_t g = b->first + (uint32_t)i;
        DCP_TRY(dcp_buffer_download(b->rb[i].o, 0, og, (uint64_t)batch * Hl * D * 4));
        DCP_TRY(dcp_buffer_download(b->rb[i].lse, 0, lg, (uint64_t)batch * Hl * 4));
        for (uint32_t s = 0; s < batch; s++)
            for (uint32_t h = 0; h < Hl; h++) {
                const float *ref_o = o_ref + ((uint64_t)s * NH + g * Hl + h) * D;
                const float *got_o = og + ((uint64_t)s * Hl + h) * D;
                for (uint32_t d = 0; d < D; d++) {
                    double e = fabs((double)got_o[d] - ref_o[d]);
                    if (!(e <= 1e-4)) b->bad++;
                    if (e > b->max_o || e != e) b->max_o = e;
                }
                float rl = l_ref[(uint64_t)s * NH + g * Hl + h], gl = lg[(uint64_t)s * Hl + h];
                if (isinf(rl)) {
                    if (!(isinf(gl) && gl < 0)) b->bad++;
                    continue;
                }
                double e = fabs((double)gl - rl);
                if (!(e <= 1e-5 * (1 + fabs(rl)))) b->bad++;
                if (e > b->max_lse || e != e) b->max_lse = e;
            }
    }
    b->bad = (uint64_t)dcp_mpi_max((double)b->bad);
    b->max_o = dcp_mpi_max(b->max_o);
    b->max_lse = dcp_mpi_max(b->max_lse);
fail:
    free(o_ref);
    free(l_ref);
    free(og);
    free(lg);
    return st;
}

/* The step's figures on stdout: one JSON object with --json, else a few lines. Process 0 only. */
static void report(const bench_dcp *b)
{
    const dcp_bench_dcp_opts *o = b->o;
    if (b->proc != 0) return;
    const uint32_t N = o->dcp, B = o->page_size, D = o->head_dim, Hkv = o->kv_heads, NH = o->q_heads;
    const uint32_t Hl = NH / N, batch = o->batch;
    const uint64_t formula = (uint64_t)(N - 1) * Hl * (D + 1) * 4 * batch;
    const dcp_device_info *info = dcp_device_get_info(b->devs[0]);
    const char *tname = dcp_transport_name(dcp_comm_transport(b->comm));
    const char *bname = dcp_cp_backend_name(b->ac.backend);
    if (o->json) {
        printf("{\"bench\": \"attn_dcp\", \"device\": ");
        dcp_cli_json_string(stdout, info->name, strlen(info->name));
        printf(", \"dcp\": %u, \"processes\": %d, \"backend\": \"%s\", "
               "\"transport\": \"%s\", \"q_replicate\": %d, \"interleave\": %u, \"ctx\": %u, \"batch\": %u, "
               "\"q_heads\": %u, \"heads_per_rank\": %u, \"kv_heads\": %u, \"head_dim\": %u, \"page_size\": %u, "
               "\"kv_dtype\": \"%s\", \"iters\": %u, \"local_ms\": %.4f, \"exchange_ms\": %.4f, \"merge_ms\": %.4f, "
               "\"total_ms\": %.4f, \"total_min_ms\": %.4f, \"exchange_bytes_per_rank\": %llu, \"q_gather_bytes_per_rank\": %llu, "
               "\"a2a_formula_bytes\": %llu, "
               "\"kv_bytes_per_rank\": %llu",
               N, b->nproc, bname, tname, o->q_replicate, o->interleave, o->ctx, batch, NH, Hl, Hkv, D,
               B, dcp_dtype_name((dcp_dtype)o->dtype), o->iters, b->t_loc * 1e-6, b->t_x * 1e-6, b->t_m * 1e-6,
               b->t_tot * 1e-6, b->t_min * 1e-6, (unsigned long long)b->bytes, (unsigned long long)b->q_bytes,
               (unsigned long long)formula, (unsigned long long)b->kv_rank);
        if (b->roofed) { /* the local decode against device 0's yardsticks */
            printf(", \"local_roofline\": {");
            dcp_bench_roofline_json(stdout, &b->roof, &b->y);
            printf("}, \"yardsticks\": ");
            dcp_bench_yardsticks_json(stdout, &b->y);
        }
        if (o->verify)
            printf(", \"verify\": \"%s\", \"max_abs_err_o\": %.3g, \"max_abs_err_lse\": %.3g", b->bad ? "FAIL" : "ok",
                   b->max_o, b->max_lse);
        printf("}\n");
    } else {
        printf("attn --dcp %u: %s, %d process(es), backend %s, transport %s%s, interleave %u\n", N, info->name,
               b->nproc, bname, tname, o->q_replicate ? ", q_replicate" : "", o->interleave);
        printf("  ctx %u, batch %u, %u query heads (%u per rank), %u KV heads, head dim %u, page %u, %s KV\n",
               o->ctx, batch, NH, Hl, Hkv, D, B, dcp_dtype_name((dcp_dtype)o->dtype));
        printf("  step (median of %u): local decode %.3f ms, exchange %.3f ms, merge %.3f ms, total %.3f ms "
               "(fastest %.3f ms)\n",
               o->iters, b->t_loc * 1e-6, b->t_x * 1e-6, b->t_m * 1e-6, b->t_tot * 1e-6, b->t_min * 1e-6);
        printf("  exchange bytes sent per rank per step: %llu (a2a formula (N-1)*Hl*(D+1)*4*batch = %llu), "
               "plus %llu for the Q all-gather\n",
               (unsigned long long)b->bytes, (unsigned long long)formula, (unsigned long long)b->q_bytes);
        printf("  KV bytes per rank: %llu (%.2f MiB)\n", (unsigned long long)b->kv_rank, (double)b->kv_rank / (1 << 20));
        if (b->roofed) {
            const dcp_bench_roofline *f = &b->roof;
            printf("  local decode roofline (one physical device's ranks, device 0's yardsticks: read %.3f GB/s, "
                   "FMA %.2f GFLOP/s): %.0f bytes, %.0f FLOPs; max(read %.3f ms, FMA %.3f ms) = %.3f ms, %s-bound; "
                   "measured %.3f ms = %.2f of the roofline\n",
                   b->y.stream_read_bps * 1e-9, b->y.fma_flops * 1e-9, f->bytes, f->flops, f->read_ns * 1e-6,
                   f->fma_ns * 1e-6, f->roofline_ns * 1e-6, dcp_bench_roofline_bound(f), f->measured_ns * 1e-6,
                   f->fraction);
        }
        if (o->verify)
            printf("  verify: %s (max abs error O %.3g, LSE %.3g)\n", b->bad ? "FAIL" : "ok", b->max_o, b->max_lse);
    }
    fflush(stdout);
}

/* Frees whatever the phases made (any of it may be missing), then leaves MPI if it started it. */
static void bench_free(bench_dcp *b)
{
    dcp_cp_attn_destroy(b->attn);
    for (int i = 0; i < b->L && i < 64; i++) {
        rank_bufs *r = &b->rb[i];
        dcp_buffer_destroy(r->k);
        dcp_buffer_destroy(r->v);
        dcp_buffer_destroy(r->q);
        dcp_buffer_destroy(r->o);
        dcp_buffer_destroy(r->lse);
        dcp_cmd_destroy(r->cmd);
    }
    dcp_kv_cache_destroy(b->cache);
    dcp_comm_destroy(b->comm);
    dcp_context_destroy(b->ctx);
    free(b->q);
    free(b->ref_pages);
    free(b->ref_bt);
    free(b->ref_len);
    free(b->tot);
    free(b->loc);
    free(b->xch);
    free(b->mrg);
    if (b->mpi) dcp_mpi_finalize();
}

/* What --ctx ctx needs on each local rank (fill_cache and make_step allocate these): its pool of
 * the shard, the fill's K and V rounds, Q / O / LSE, the DCP step (plan with its workspace,
 * gathered Q, partial states), the communicator's mailboxes, the slot table and staging buffer; on
 * the host the fill's rounds and, with --verify, the single-device reference pool. */
static void dcp_need(void *user, uint32_t ctx, dcp_bench_need *need)
{
    const bench_dcp *b = user;
    const dcp_bench_dcp_opts *o = b->o;
    const uint32_t N = o->dcp, B = o->page_size, D = o->head_dim, Hkv = o->kv_heads, NH = o->q_heads;
    const uint32_t Hl = NH / N, batch = o->batch, round = 2048;
    memset(need, 0, offsetof(dcp_bench_need, error) + 1);
    need->count = b->L;
    need->largest_what = "a KV pool segment, the block table, the split-KV workspace or a partial state";
    const uint64_t local_max = dcp_kv_local_length(ctx, 0, N, o->interleave);
    const uint64_t blocks = (local_max + B - 1) / B + 1, pages = (uint64_t)batch * blocks;
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool = (dcp_kv_pool_config){.kv_heads = Hkv, .head_dim = D, .page_size = B, .dtype = (dcp_dtype)o->dtype,
                               .num_pages = pages > UINT32_MAX ? UINT32_MAX : (uint32_t)pages};
    kc.dcp_size = N;
    kc.interleave = o->interleave;
    kc.max_seqs = batch;
    kc.max_blocks = blocks > UINT32_MAX ? UINT32_MAX : (uint32_t)blocks;
    dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
    ac.batch = batch;
    ac.heads_local = Hl;
    ac.backend = (dcp_cp_backend)o->backend;
    ac.q_replicate = o->q_replicate;
    const uint64_t kv_cap = (uint64_t)batch * round * Hkv * D * 4;
    for (int i = 0; i < b->L; i++) {
        dcp_device *dev = need->devs[i] = b->devs[i];
        uint64_t pool, seg, step, step_largest, block;
        dcp_status st = dcp_kv_pool_bytes(dev, &kc.pool, &pool, &seg);
        if (st == DCP_OK) st = dcp_cp_attn_bytes(&kc, &ac, ctx, &step, &step_largest, &block);
        if (st != DCP_OK) {
            need->status = st;
            snprintf(need->error, sizeof need->error, "%s", dcp_last_error());
            return;
        }
        uint64_t bufs = 2 * kv_cap + (uint64_t)batch * NH * D * 4 + (uint64_t)batch * Hl * (D + 1) * 4;
        need->device[i] = pool + bufs + step + dcp_comm_mailbox_bytes((int)N, block > 65536 ? block : 65536) +
                          dcp_kv_cache_slot_bytes(batch * round) + dcp_device_staging_bytes(dev, kv_cap);
        need->largest[i] = seg > step_largest ? seg : step_largest;
        if (kv_cap > need->largest[i]) need->largest[i] = kv_cap;
    }
    need->host = 2 * kv_cap + (uint64_t)batch * NH * D * 4;
    if (o->verify) /* the reference pool of every sequence at full length, with its tables */
        need->host += (uint64_t)batch * (((uint64_t)ctx + B - 1) / B + 1) * (2ull * Hkv * D * B *
                      dcp_dtype_size((dcp_dtype)o->dtype) + 4);
}

/* The phases after the group is open: KV cache, step, timing, verification. */
static dcp_status run_phases(bench_dcp *b)
{
    dcp_status st;
    if ((st = fill_cache(b)) != DCP_OK) return st;
    if ((st = make_step(b)) != DCP_OK) return st;
    if ((st = time_steps(b)) != DCP_OK) return st;
    if (b->o->verify && (st = verify(b)) != DCP_OK) return st;
    return DCP_OK;
}

int dcp_bench_attn_dcp(const dcp_bench_dcp_opts *o)
{
    bench_dcp bench = {.o = o, .prog = "dcp-vk-bench attn --dcp"};
    bench_dcp *b = &bench;
    int rc = start_mpi(b);
    if (rc) return rc;
    rc = open_group(b);
    /* Counted first: a configuration the devices cannot hold is refused before anything is
     * allocated (every process checks its own ranks; they agree). */
    if (rc == DCP_EXIT_OK) rc = dcp_bench_check_memory(b->prog, o->ctx, dcp_need, b, b->proc != 0);
    if (b->mpi) rc = (int)dcp_mpi_max((double)rc);
    if (rc == DCP_EXIT_OK) {
        dcp_status st = run_phases(b);
        if (st != DCP_OK) {
            dcp_cli_report(b->prog, "running", st);
            rc = (st == DCP_ERR_CONFIG || st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_UNSUPPORTED) ? DCP_EXIT_USAGE
                                                                                                       : DCP_EXIT_RUNTIME;
        } else {
            report(b);
            if (b->bad) {
                if (b->proc == 0)
                    fprintf(stderr, "%s: --verify: %llu value(s) differ from the single-device reference\n", b->prog,
                            (unsigned long long)b->bad);
                rc = DCP_EXIT_RUNTIME;
            }
        }
    }
    bench_free(b);
    return rc;
}
