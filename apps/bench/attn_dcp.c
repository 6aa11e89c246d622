/* dcp-vk-bench attn --dcp N: the DCP attention step (Q gather or q_replicate, local paged decode,
 * a2a or ag_rs exchange and merge) over the N ranks of a DCP group: N logical devices in one
 * process, or mpiexec -n P processes with N / P devices each. The KV cache is filled through
 * kv_append. Reports per step: local decode, exchange, merge and total time, exchange bytes sent
 * per rank (against the a2a formula (N-1) * Hl * (D+1) * 4 per sequence), KV bytes per rank.
 * --verify compares every rank's heads with the single-device CPU reference. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "common/cli.h"
#include "common/error.h"
#include "common/splitmix.h"
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
    dcp_buffer *k, *v, *q, *o, *lse;
    dcp_cmd *cmd;
} rank_bufs;

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, uint32_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int dcp_bench_attn_dcp(const dcp_bench_dcp_opts *o)
{
    const char *prog = "dcp-vk-bench attn --dcp";
    int rc = DCP_EXIT_OK, mpi = 0, proc = 0, nproc = 1;
    int announced;
    dcp_status st = DCP_OK;
    if (dcp_cli_mpi_launched(&announced) && announced > 1) {
        st = dcp_mpi_init(NULL, NULL, &proc, &nproc);
        if (st != DCP_OK) {
            dcp_cli_report(prog, "starting MPI", st);
            return DCP_EXIT_RUNTIME;
        }
        mpi = 1;
    }
    dcp_context *ctx = NULL;
    dcp_comm *comm = NULL;
    dcp_kv_cache *cache = NULL;
    dcp_cp_attn *attn = NULL;
    rank_bufs rb[64];
    memset(rb, 0, sizeof rb);
    float *q = NULL, *kt = NULL, *vt = NULL, *o_ref = NULL, *l_ref = NULL, *og = NULL, *lg = NULL;
    void *ref_pages = NULL;
    uint32_t *ref_bt = NULL, *ref_len = NULL;
    double *tot = NULL, *loc = NULL, *xch = NULL, *mrg = NULL;
    int L = 0;

    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = o->devices;
    st = dcp_context_create(&cc, &ctx);
    if (st != DCP_OK) {
        dcp_cli_report(prog, "opening devices", st);
        rc = DCP_EXIT_RUNTIME;
        goto done;
    }
    L = dcp_context_device_count(ctx);
    if ((uint32_t)(L * nproc) != o->dcp || L > 64) {
        fprintf(stderr, "%s: --dcp %u needs %u devices in all, but %d process(es) x %d device(s) = %d (set --devices "
                        "or DCP_VK_DEVICES, e.g. 0,0,0,0)\n", prog, o->dcp, o->dcp, nproc, L, nproc * L);
        rc = DCP_EXIT_USAGE;
        goto done;
    }
    if (o->q_heads % o->dcp) {
        fprintf(stderr, "%s: --q-heads %u is not divisible by --dcp %u\n", prog, o->q_heads, o->dcp);
        rc = DCP_EXIT_USAGE;
        goto done;
    }
    dcp_device *devs[64];
    for (int i = 0; i < L; i++) devs[i] = dcp_context_device(ctx, i);
    dcp_comm_config ccfg = DCP_COMM_CONFIG_DEFAULT;
    ccfg.transport = (dcp_transport)o->transport;
    st = mpi ? dcp_comm_init_mpi(devs, L, &ccfg, &comm) : dcp_comm_init_local(devs, L, &ccfg, &comm);
    if (st != DCP_OK) {
        dcp_cli_report(prog, "creating the communicator", st);
        rc = st == DCP_ERR_UNSUPPORTED ? DCP_EXIT_USAGE : DCP_EXIT_RUNTIME;
        goto done;
    }
    const uint32_t N = o->dcp, first = (uint32_t)dcp_comm_first_rank(comm), B = o->page_size, D = o->head_dim;
    const uint32_t Hkv = o->kv_heads, NH = o->q_heads, Hl = NH / N, batch = o->batch;
    const uint64_t row = (uint64_t)Hkv * D;
    uint64_t local_max = dcp_kv_local_length(o->ctx, 0, N, o->interleave);
    uint32_t blocks = (uint32_t)((local_max + B - 1) / B) + 1;
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool = (dcp_kv_pool_config){Hkv, D, B, (dcp_dtype)o->dtype, batch * blocks};
    kc.dcp_size = N;
    kc.first_rank = first;
    kc.interleave = o->interleave;
    kc.max_seqs = batch;
    kc.max_blocks = blocks;
    DCP_TRY(dcp_kv_cache_create(devs, (uint32_t)L, &kc, &cache));

    /* Fill every sequence to --ctx tokens through kv_append, in rounds of up to 2048 tokens. */
    const uint32_t round = 2048;
    uint64_t kv_cap = (uint64_t)batch * round * row * 4;
    kt = malloc(kv_cap);
    vt = malloc(kv_cap);
    if (!kt || !vt) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (int i = 0; i < L; i++) {
        DCP_TRY(dcp_buffer_create(devs[i], kv_cap, DCP_MEMORY_DEVICE, &rb[i].k));
        DCP_TRY(dcp_buffer_create(devs[i], kv_cap, DCP_MEMORY_DEVICE, &rb[i].v));
        DCP_TRY(dcp_buffer_create(devs[i], (uint64_t)batch * NH * D * 4, DCP_MEMORY_DEVICE, &rb[i].q));
        DCP_TRY(dcp_buffer_create(devs[i], (uint64_t)batch * Hl * D * 4, DCP_MEMORY_DEVICE, &rb[i].o));
        DCP_TRY(dcp_buffer_create(devs[i], (uint64_t)batch * Hl * 4, DCP_MEMORY_DEVICE, &rb[i].lse));
        DCP_TRY(dcp_cmd_create(devs[i], &rb[i].cmd));
    }
    uint32_t ref_blocks = (o->ctx + B - 1) / B + 1;
    uint32_t es = dcp_dtype_size((dcp_dtype)o->dtype);
    if (o->verify) {
        ref_pages = calloc((uint64_t)batch * ref_blocks * 2 * row * B, es);
        ref_bt = malloc((uint64_t)batch * ref_blocks * 4);
        ref_len = malloc(batch * 4);
        if (!ref_pages || !ref_bt || !ref_len) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the reference");
            goto fail;
        }
        for (uint32_t b = 0; b < batch; b++) {
            ref_len[b] = o->ctx;
            for (uint32_t j = 0; j < ref_blocks; j++) ref_bt[b * ref_blocks + j] = b * ref_blocks + j;
        }
    }
    uint32_t seqs[1024], counts[1024];
    for (uint32_t b = 0; b < batch; b++) seqs[b] = b;
    for (uint32_t done_tok = 0; done_tok < o->ctx; done_tok += round) {
        uint32_t n = o->ctx - done_tok < round ? o->ctx - done_tok : round;
        uint64_t t = 0;
        for (uint32_t b = 0; b < batch; b++) {
            counts[b] = n;
            for (uint32_t p = done_tok; p < done_tok + n; p++, t++)
                for (uint64_t e = 0; e < row; e++) {
                    uint64_t idx = ((uint64_t)b * o->ctx + p) * row + e;
                    float kx = value(1, idx), vx = value(2, idx);
                    kt[t * row + e] = kx;
                    vt[t * row + e] = vx;
                    if (ref_pages) {
                        uint32_t h = (uint32_t)(e / D), d = (uint32_t)(e % D);
                        uint64_t off = ((uint64_t)(b * ref_blocks + p / B) * 2 * Hkv + h) * B * D + (p % B) * D + d;
                        uint64_t voff = off + (uint64_t)Hkv * B * D;
                        if (es == 2) {
                            ((uint16_t *)ref_pages)[off] = dcp_f32_to_f16(kx);
                            ((uint16_t *)ref_pages)[voff] = dcp_f32_to_f16(vx);
                        } else {
                            ((float *)ref_pages)[off] = kx;
                            ((float *)ref_pages)[voff] = vx;
                        }
                    }
                }
        }
        DCP_TRY(dcp_kv_cache_append(cache, batch, seqs, counts));
        for (int i = 0; i < L; i++) {
            DCP_TRY(dcp_buffer_upload(rb[i].k, 0, kt, t * row * 4));
            DCP_TRY(dcp_buffer_upload(rb[i].v, 0, vt, t * row * 4));
            DCP_TRY(dcp_cmd_reset(rb[i].cmd));
            DCP_TRY(dcp_kv_cache_record_append(rb[i].cmd, cache, (uint32_t)i, rb[i].k, 0, rb[i].v, 0));
            DCP_TRY(dcp_cmd_run(rb[i].cmd));
        }
    }
    free(kt);
    free(vt);
    kt = vt = NULL;

    dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
    ac.batch = batch;
    ac.heads_local = Hl;
    ac.backend = (dcp_cp_backend)o->backend;
    ac.q_replicate = o->q_replicate;
    DCP_TRY(dcp_cp_attn_create(comm, cache, &ac, &attn));
    DCP_TRY(dcp_cp_attn_set(attn, seqs));
    q = malloc((uint64_t)batch * NH * D * 4);
    if (!q) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (uint64_t i = 0; i < (uint64_t)batch * NH * D; i++) q[i] = value(3, i);
    dcp_comm_buf qv[64], ov[64], lv[64];
    for (int i = 0; i < L; i++) {
        uint32_t g = first + (uint32_t)i;
        if (o->q_replicate) {
            DCP_TRY(dcp_buffer_upload(rb[i].q, 0, q, (uint64_t)batch * NH * D * 4));
        } else {
            for (uint32_t b = 0; b < batch; b++)
                DCP_TRY(dcp_buffer_upload(rb[i].q, (uint64_t)b * Hl * D * 4, q + ((uint64_t)b * NH + g * Hl) * D,
                                          (uint64_t)Hl * D * 4));
        }
        qv[i] = (dcp_comm_buf){rb[i].q, 0};
        ov[i] = (dcp_comm_buf){rb[i].o, 0};
        lv[i] = (dcp_comm_buf){rb[i].lse, 0};
    }
    tot = calloc(o->iters, sizeof *tot);
    loc = calloc(o->iters, sizeof *loc);
    xch = calloc(o->iters, sizeof *xch);
    mrg = calloc(o->iters, sizeof *mrg);
    if (!tot || !loc || !xch || !mrg) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    uint64_t bytes = 0, q_bytes = 0;
    for (uint32_t it = 0; it <= o->iters; it++) { /* iteration 0 warms up */
        dcp_cp_attn_timing tm;
        if (mpi) dcp_mpi_barrier();
        DCP_TRY(dcp_cp_attn_run(attn, qv, ov, lv, &tm));
        if (it == 0) continue;
        tot[it - 1] = dcp_mpi_max(tm.total_ns);
        loc[it - 1] = dcp_mpi_max(tm.local_ns);
        xch[it - 1] = dcp_mpi_max(tm.exchange_ns);
        mrg[it - 1] = dcp_mpi_max(tm.merge_ns);
        bytes = tm.bytes_sent - tm.q_bytes_sent;
        q_bytes = tm.q_bytes_sent;
    }
    double t_min = tot[0];
    for (uint32_t i = 1; i < o->iters; i++)
        if (tot[i] < t_min) t_min = tot[i];
    double t_tot = median(tot, o->iters), t_loc = median(loc, o->iters), t_x = median(xch, o->iters),
           t_m = median(mrg, o->iters);
    uint64_t kv_rank = 0;
    for (int i = 0; i < L; i++)
        if (dcp_kv_cache_bytes_used(cache, (uint32_t)i) > kv_rank) kv_rank = dcp_kv_cache_bytes_used(cache, (uint32_t)i);
    kv_rank = (uint64_t)dcp_mpi_max((double)kv_rank);
    uint64_t formula = (uint64_t)(N - 1) * Hl * (D + 1) * 4 * batch;

    uint64_t bad = 0;
    double max_o = 0, max_lse = 0;
    if (o->verify) {
        o_ref = malloc((uint64_t)batch * NH * D * 4);
        l_ref = malloc((uint64_t)batch * NH * 4);
        og = malloc((uint64_t)batch * Hl * D * 4);
        lg = malloc((uint64_t)batch * Hl * 4);
        if (!o_ref || !l_ref || !og || !lg) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        dcp_ref_decode_args ra = {batch, NH, Hkv, D, B, ref_blocks, 1.0f / sqrtf((float)D), (dcp_dtype)o->dtype,
                                  ref_pages, q, ref_len, ref_bt, o_ref, l_ref};
        dcp_ref_paged_decode(&ra);
        for (int i = 0; i < L; i++) {
            uint32_t g = first + (uint32_t)i;
            DCP_TRY(dcp_buffer_download(rb[i].o, 0, og, (uint64_t)batch * Hl * D * 4));
            DCP_TRY(dcp_buffer_download(rb[i].lse, 0, lg, (uint64_t)batch * Hl * 4));
            for (uint32_t b = 0; b < batch; b++)
                for (uint32_t h = 0; h < Hl; h++) {
                    const float *ref_o = o_ref + ((uint64_t)b * NH + g * Hl + h) * D;
                    const float *got_o = og + ((uint64_t)b * Hl + h) * D;
                    for (uint32_t d = 0; d < D; d++) {
                        double e = fabs((double)got_o[d] - ref_o[d]);
                        if (!(e <= 1e-4)) bad++;
                        if (e > max_o || e != e) max_o = e;
                    }
                    float rl = l_ref[(uint64_t)b * NH + g * Hl + h], gl = lg[(uint64_t)b * Hl + h];
                    if (isinf(rl)) {
                        if (!(isinf(gl) && gl < 0)) bad++;
                        continue;
                    }
                    double e = fabs((double)gl - rl);
                    if (!(e <= 1e-5 * (1 + fabs(rl)))) bad++;
                    if (e > max_lse || e != e) max_lse = e;
                }
        }
        bad = (uint64_t)dcp_mpi_max((double)bad);
        max_o = dcp_mpi_max(max_o);
        max_lse = dcp_mpi_max(max_lse);
    }
    if (proc == 0) {
        const dcp_device_info *info = dcp_device_get_info(devs[0]);
        const char *tname = dcp_transport_name(dcp_comm_transport(comm));
        if (o->json) {
            printf("{\"bench\": \"attn_dcp\", \"device\": \"%s\", \"dcp\": %u, \"processes\": %d, \"backend\": \"%s\", "
                   "\"transport\": \"%s\", \"q_replicate\": %d, \"interleave\": %u, \"ctx\": %u, \"batch\": %u, "
                   "\"q_heads\": %u, \"heads_per_rank\": %u, \"kv_heads\": %u, \"head_dim\": %u, \"page_size\": %u, "
                   "\"kv_dtype\": \"%s\", \"iters\": %u, \"local_ms\": %.4f, \"exchange_ms\": %.4f, \"merge_ms\": %.4f, "
                   "\"total_ms\": %.4f, \"total_min_ms\": %.4f, \"exchange_bytes_per_rank\": %llu, \"q_gather_bytes_per_rank\": %llu, "
                   "\"a2a_formula_bytes\": %llu, "
                   "\"kv_bytes_per_rank\": %llu",
                   info->name, N, nproc, dcp_cp_backend_name(ac.backend), tname, o->q_replicate, o->interleave, o->ctx,
                   batch, NH, Hl, Hkv, D, B, dcp_dtype_name((dcp_dtype)o->dtype), o->iters, t_loc * 1e-6, t_x * 1e-6,
                   t_m * 1e-6, t_tot * 1e-6, t_min * 1e-6, (unsigned long long)bytes, (unsigned long long)q_bytes, (unsigned long long)formula,
                   (unsigned long long)kv_rank);
            if (o->verify)
                printf(", \"verify\": \"%s\", \"max_abs_err_o\": %.3g, \"max_abs_err_lse\": %.3g", bad ? "FAIL" : "ok",
                       max_o, max_lse);
            printf("}\n");
        } else {
            printf("attn --dcp %u: %s, %d process(es), backend %s, transport %s%s, interleave %u\n", N, info->name,
                   nproc, dcp_cp_backend_name(ac.backend), tname, o->q_replicate ? ", q_replicate" : "", o->interleave);
            printf("  ctx %u, batch %u, %u query heads (%u per rank), %u KV heads, head dim %u, page %u, %s KV\n",
                   o->ctx, batch, NH, Hl, Hkv, D, B, dcp_dtype_name((dcp_dtype)o->dtype));
            printf("  step (median of %u): local decode %.3f ms, exchange %.3f ms, merge %.3f ms, total %.3f ms "
                   "(fastest %.3f ms)\n",
                   o->iters, t_loc * 1e-6, t_x * 1e-6, t_m * 1e-6, t_tot * 1e-6, t_min * 1e-6);
            printf("  exchange bytes sent per rank per step: %llu (a2a formula (N-1)*Hl*(D+1)*4*batch = %llu), "
                   "plus %llu for the Q all-gather\n",
                   (unsigned long long)bytes, (unsigned long long)formula, (unsigned long long)q_bytes);
            printf("  KV bytes per rank: %llu (%.2f MiB)\n", (unsigned long long)kv_rank, (double)kv_rank / (1 << 20));
            if (o->verify)
                printf("  verify: %s (max abs error O %.3g, LSE %.3g)\n", bad ? "FAIL" : "ok", max_o, max_lse);
        }
        fflush(stdout);
    }
    if (bad) {
        if (proc == 0)
            fprintf(stderr, "%s: --verify: %llu value(s) differ from the single-device reference\n", prog,
                    (unsigned long long)bad);
        rc = DCP_EXIT_RUNTIME;
    }
    goto done;
fail:
    dcp_cli_report(prog, "running", st);
    rc = (st == DCP_ERR_CONFIG || st == DCP_ERR_INVALID_ARGUMENT || st == DCP_ERR_UNSUPPORTED) ? DCP_EXIT_USAGE
                                                                                               : DCP_EXIT_RUNTIME;
done:
    dcp_cp_attn_destroy(attn);
    for (int i = 0; i < L && i < 64; i++) {
        dcp_buffer_destroy(rb[i].k);
        dcp_buffer_destroy(rb[i].v);
        dcp_buffer_destroy(rb[i].q);
        dcp_buffer_destroy(rb[i].o);
        dcp_buffer_destroy(rb[i].lse);
        dcp_cmd_destroy(rb[i].cmd);
    }
    dcp_kv_cache_destroy(cache);
    dcp_comm_destroy(comm);
    dcp_context_destroy(ctx);
    free(q); free(kt); free(vt); free(o_ref); free(l_ref); free(og); free(lg);
    free(ref_pages); free(ref_bt); free(ref_len);
    free(tot); free(loc); free(xch); free(mrg);
    if (mpi) dcp_mpi_finalize();
    return rc;
}
