/* The DCP attention step (see include/dcpvk/cp.h): Q gather, local paged decode, a2a or ag_rs
 * exchange and merge, over the local ranks of a communicator. The step is split at its exchanges
 * into phases (src/attn/cp_internal.h) that the model records into its own commands; receivers
 * read the communicator's mailboxes in place (lse_merge, cp_scale, part_sum), so one step costs
 * one submit-and-wait round per exchange: a2a 1 (+1 for the final merge when run alone), ag_rs 2
 * (+1), and one more for the Q all-gather without q_replicate. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/attn_internal.h"
#include "attn/cp_internal.h"
#include "comm/comm_internal.h"
#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/cp.h"
#include "vk/pipelines.h"

typedef struct attn_rank {
    dcp_device *dev;
    dcp_decode_plan *plan;
    dcp_cmd *cmd;
    dcp_buffer *qfull;   /* [batch][N*Hl][D] f32 (gathered Q; NULL with q_replicate) */
    dcp_buffer *o_part;  /* [batch][N*Hl][D] f32 local partial O */
    dcp_buffer *lse_part;/* [batch][N*Hl] f32 local partial LSE */
    uint32_t ts[4];      /* timestamp slots around the decode [0, 1] and the merge / scale [2, 3] */
} attn_rank;

struct dcp_cp_attn {
    dcp_comm *comm;
    dcp_kv_cache *cache;
    dcp_cp_attn_config cfg;
    uint32_t N, D, NH, L;
    attn_rank *r;
    uint32_t *bt;        /* [batch][max_blocks] scratch */
    uint32_t *lens;      /* [batch] scratch */
};

const char *dcp_cp_backend_name(dcp_cp_backend b) { return b == DCP_CP_AG_RS ? "ag_rs" : "a2a"; }

dcp_status dcp_cp_backend_parse(const char *name, dcp_cp_backend *out)
{
    if (name && strcmp(name, "a2a") == 0) *out = DCP_CP_A2A;
    else if (name && strcmp(name, "ag_rs") == 0) *out = DCP_CP_AG_RS;
    else return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "backend \"%s\" is not a2a or ag_rs", name ? name : "(null)");
    return DCP_OK;
}

dcp_status dcp_cp_check(uint32_t T, uint32_t N, uint32_t Hq, uint32_t Hkv)
{
    if (T == 0 || N == 0 || Hkv == 0 || Hq == 0)
        return dcp_fail(DCP_ERR_CONFIG, "TP size %u, DCP size %u, %u query and %u KV heads must all be >= 1", T,
                        N, Hq, Hkv);
    if (T % N)
        return dcp_fail(DCP_ERR_CONFIG, "TP size %u is not a multiple of the DCP size %u (T %% N must be 0)", T, N);
    if (Hq % Hkv)
        return dcp_fail(DCP_ERR_CONFIG, "%u query heads is not a multiple of %u KV heads", Hq, Hkv);
    if (N > 1 && N > T / Hkv)
        return dcp_fail(DCP_ERR_CONFIG,
                        "DCP size %u exceeds TP size / KV heads = %u / %u (each DCP group must hold the same "
                        "KV heads)",
                        N, T, Hkv);
    if (N > 1 && (Hq / Hkv) % N)
        return dcp_fail(DCP_ERR_CONFIG, "query heads per KV head (%u / %u) is not a multiple of the DCP size %u",
                        Hq, Hkv, N);
    return DCP_OK;
}

void dcp_cp_group_of(uint32_t tp_rank, uint32_t N, uint32_t *group, uint32_t *first)
{
    *group = tp_rank / N;
    *first = *group * N;
}

void dcp_cp_attn_destroy(dcp_cp_attn *a)
{
    if (!a) return;
    for (uint32_t i = 0; a->r && i < a->L; i++) {
        attn_rank *r = &a->r[i];
        dcp_cmd_destroy(r->cmd);
        dcp_decode_plan_destroy(r->plan);
        dcp_buffer_destroy(r->qfull);
        dcp_buffer_destroy(r->o_part);
        dcp_buffer_destroy(r->lse_part);
    }
    free(a->r);
    free(a->bt);
    free(a->lens);
    free(a);
}

/* Bytes of one a2a message: O [batch][Hl][D] then LSE [batch][Hl], f32. */
static uint64_t a2a_block(const dcp_cp_attn *a)
{
    return (uint64_t)a->cfg.batch * a->cfg.heads_local * (a->D + 1) * 4;
}

/* Bytes between consecutive destinations' a2a messages in the put area: the message padded to 256
 * bytes, so that every receiver binds its messages at an aligned offset. */
static uint64_t put_slot(const dcp_cp_attn *a) { return (a2a_block(a) + 255) / 256 * 256; }

dcp_status dcp_cp_attn_create(dcp_comm *comm, dcp_kv_cache *cache, const dcp_cp_attn_config *c, dcp_cp_attn **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const dcp_kv_cache_config *kc = dcp_kv_cache_get_config(cache);
    uint32_t N = (uint32_t)dcp_comm_size(comm);
    uint32_t L = (uint32_t)dcp_comm_local_count(comm);
    if (kc->dcp_size != N || dcp_kv_cache_local_count(cache) != L || kc->first_rank != (uint32_t)dcp_comm_first_rank(comm))
        return dcp_fail(DCP_ERR_CONFIG,
                        "DCP step: the communicator (%u ranks, local %u from %d) and the KV cache (DCP size %u, "
                        "local %u from %u) disagree",
                        N, L, dcp_comm_first_rank(comm), kc->dcp_size, dcp_kv_cache_local_count(cache), kc->first_rank);
    for (uint32_t i = 0; i < L; i++)
        if (dcp_kv_pool_device(dcp_kv_cache_pool(cache, i)) != dcp_comm_device(comm, (int)i))
            return dcp_fail(DCP_ERR_CONFIG, "DCP step: local rank %u's pool and communicator use different devices", i);
    if (c->backend == DCP_CP_A2A && N == 1)
        return dcp_fail(DCP_ERR_CONFIG, "DCP step: backend a2a needs a DCP size > 1 (use ag_rs or plain decode for N = 1)");
    if (c->backend != DCP_CP_A2A && c->backend != DCP_CP_AG_RS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: unknown backend %d", (int)c->backend);
    if (c->batch == 0 || c->heads_local == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: batch (%u) and heads_local (%u) must be >= 1", c->batch,
                        c->heads_local);
    uint32_t Hkv = kc->pool.kv_heads, NH = N * c->heads_local;
    if (NH % Hkv || (NH / Hkv) % N)
        return dcp_fail(DCP_ERR_CONFIG,
                        "DCP step: %u gathered query heads (N %u x Hl %u) over %u KV heads: need a multiple of "
                        "the KV heads with (Hq / Hkv) %% N == 0",
                        NH, N, c->heads_local, Hkv);
    dcp_cp_attn *a = calloc(1, sizeof *a);
    if (!a) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    a->comm = comm;
    a->cache = cache;
    a->cfg = *c;
    a->N = N;
    a->L = L;
    a->D = kc->pool.head_dim;
    a->NH = NH;
    a->r = calloc(L, sizeof *a->r);
    a->bt = calloc((size_t)c->batch * kc->max_blocks, sizeof *a->bt);
    a->lens = calloc(c->batch, sizeof *a->lens);
    if (!a->r || !a->bt || !a->lens) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    const uint64_t B = c->batch, D = a->D, Hl = c->heads_local;
    for (uint32_t i = 0; i < L; i++) {
        attn_rank *r = &a->r[i];
        r->dev = dcp_comm_device(comm, (int)i);
        dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
        dc.batch = c->batch;
        dc.q_heads = NH;
        dc.max_blocks = kc->max_blocks;
        dc.scale = c->scale;
        dc.chunk_tokens = c->chunk_tokens;
        DCP_TRY(dcp_decode_plan_create(dcp_kv_cache_pool(cache, i), &dc, &r->plan));
        DCP_TRY(dcp_cmd_create(r->dev, &r->cmd));
        if (!c->q_replicate) DCP_TRY(dcp_buffer_create(r->dev, B * NH * D * 4, DCP_MEMORY_DEVICE, &r->qfull));
        DCP_TRY(dcp_buffer_create(r->dev, B * NH * D * 4, DCP_MEMORY_DEVICE, &r->o_part));
        DCP_TRY(dcp_buffer_create(r->dev, B * NH * 4, DCP_MEMORY_DEVICE, &r->lse_part));
    }
    /* Mailboxes for the largest block of the step. */
    uint64_t blk = c->q_replicate ? 0 : B * Hl * D * 4;
    uint64_t b2 = c->backend == DCP_CP_A2A ? put_slot(a) : B * Hl * D * 4;
    if (b2 > blk) blk = b2;
    if (B * NH * 4 > blk) blk = B * NH * 4;
    DCP_TRY(dcp_comm_prepare(comm, blk));
    *out = a;
    return DCP_OK;
fail:
    dcp_cp_attn_destroy(a);
    return dcp_fail_context(st, "DCP step");
}

dcp_status dcp_cp_attn_set(dcp_cp_attn *a, const uint32_t *seqs)
{
    const dcp_kv_cache_config *kc = dcp_kv_cache_get_config(a->cache);
    for (uint32_t i = 0; i < a->L; i++) {
        for (uint32_t b = 0; b < a->cfg.batch; b++) {
            if (seqs[b] >= kc->max_seqs)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: sequence %u outside the cache's %u slots",
                                seqs[b], kc->max_seqs);
            a->lens[b] = dcp_kv_cache_seq_local_length(a->cache, i, seqs[b]);
            memcpy(a->bt + (uint64_t)b * kc->max_blocks, dcp_kv_cache_block_table(a->cache, i, seqs[b]),
                   (size_t)kc->max_blocks * sizeof *a->bt);
        }
        dcp_status st = dcp_decode_plan_set(a->r[i].plan, a->lens, a->bt);
        if (st != DCP_OK) return dcp_fail_context(st, "DCP step: local rank %u", i);
    }
    return DCP_OK;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static dcp_status run_all(dcp_cp_attn *a)
{
    dcp_status st = DCP_OK;
    for (uint32_t i = 0; i < a->L; i++) DCP_TRY(dcp_cmd_submit(a->r[i].cmd));
    for (uint32_t i = 0; i < a->L; i++) DCP_TRY(dcp_cmd_wait(a->r[i].cmd));
    return DCP_OK;
fail:
    for (uint32_t i = 0; i < a->L; i++) dcp_cmd_wait(a->r[i].cmd);
    return st;
}

/* Timestamp helper: records one when the device has them (slot UINT32_MAX otherwise). */
static uint32_t stamp(dcp_cmd *cmd)
{
    uint32_t s;
    if (dcp_device_get_info(dcp_cmd_device(cmd))->timestamp_period_ns == 0.0f) return UINT32_MAX;
    if (dcp_cmd_timestamp(cmd, &s) != DCP_OK) {
        dcp_clear_error();
        return UINT32_MAX;
    }
    return s;
}

static double elapsed(dcp_cmd *cmd, uint32_t s0, uint32_t s1)
{
    double ns = 0.0;
    if (s0 == UINT32_MAX || s1 == UINT32_MAX) return 0.0;
    if (dcp_cmd_elapsed_ns(cmd, s0, s1, &ns) != DCP_OK) {
        dcp_clear_error();
        return 0.0;
    }
    return ns;
}

uint32_t dcp_cp_attn_plan_chunks(const dcp_cp_attn *a, uint32_t i) { return i < a->L ? dcp_decode_plan_chunks(a->r[i].plan) : 0; }

uint32_t dcp_cp_attn_exchanges(const dcp_cp_attn *a) { return a->cfg.backend == DCP_CP_A2A ? 1 : 2; }

dcp_status dcp_cp_attn_record_phase(dcp_cp_attn *a, uint32_t phase, uint32_t i, dcp_cmd *cmd, dcp_comm_buf q,
                                 dcp_comm_buf o, dcp_comm_buf lse)
{
    dcp_status st = DCP_OK;
    const uint64_t B = a->cfg.batch, D = a->D, Hl = a->cfg.heads_local, N = a->N, NH = a->NH;
    const int a2a = a->cfg.backend == DCP_CP_A2A;
    if (i >= a->L || phase > dcp_cp_attn_exchanges(a))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: phase %u of local rank %u (%u phases, %u ranks)", phase, i,
                        dcp_cp_attn_exchanges(a) + 1, a->L);
    attn_rank *r = &a->r[i];
    const int timed = cmd == r->cmd; /* dcp_cp_attn_run's own commands carry the timestamps */
    if (phase == 0) {
        /* Local decode of all N*Hl heads, then a2a: pack the messages straight into the put area;
         * ag_rs: the decode writes its LSEs straight into the put area. */
        dcp_comm_buf out = dcp_comm_put_area(a->comm, (int)i);
        if (timed) r->ts[0] = stamp(cmd);
        if (a2a) DCP_TRY(dcp_decode_record(cmd, r->plan, q.buffer, q.offset, r->o_part, 0, r->lse_part, 0));
        else DCP_TRY(dcp_decode_record(cmd, r->plan, q.buffer, q.offset, r->o_part, 0, out.buffer, out.offset));
        if (timed) r->ts[1] = stamp(cmd);
        if (a2a) {
            const uint32_t slot = (uint32_t)(put_slot(a) / 4);
            dcp_cmd_barrier(cmd); /* paged_decode O/LSE -> packing */
            /* O [b][n][Hl*D] -> message n's O part [b][Hl*D]; LSE [b][n][Hl] -> its LSE part [b][Hl] */
            dcp_permute_params po = {(uint32_t)B, (uint32_t)N, (uint32_t)(Hl * D), (uint32_t)(N * Hl * D), slot};
            DCP_TRY(dcp_permute_record(cmd, &po, r->o_part, 0, out.buffer, out.offset));
            dcp_permute_params pl = {(uint32_t)B, (uint32_t)N, (uint32_t)Hl, (uint32_t)(N * Hl), slot};
            DCP_TRY(dcp_permute_record(cmd, &pl, r->lse_part, 0, out.buffer, out.offset + B * Hl * D * 4));
            dcp_comm_record_put(cmd);
        } else {
            dcp_comm_record_put(cmd);
        }
        return DCP_OK;
    }
    if (phase == 1 && a2a) {
        /* Merge the N partial states of the own heads straight from the senders' put areas. */
        dcp_comm_buf in;
        uint64_t stride;
        dcp_comm_put_view(a->comm, (int)i, DCP_COLL_ALL_TO_ALL, put_slot(a), &in, &stride);
        if (timed) r->ts[2] = stamp(cmd);
        dcp_merge_args m = {.parts = (uint32_t)N, .rows = (uint32_t)(B * Hl), .head_dim = (uint32_t)D,
                            .o_part_stride = (uint32_t)(stride / 4), .lse_part_stride = (uint32_t)(stride / 4),
                            .o_in = in.buffer, .o_in_offset = in.offset, .lse_in = in.buffer,
                            .lse_in_offset = in.offset + B * Hl * D * 4, .o_out = o.buffer, .o_out_offset = o.offset,
                            .lse_out = lse.buffer, .lse_out_offset = lse.offset};
        DCP_TRY(dcp_lse_merge_record(cmd, &m));
        if (timed) r->ts[3] = stamp(cmd);
    } else if (phase == 1) {
        /* ag_rs: gathered LSEs [N][batch][N*Hl] -> scaled O [N][batch][Hl][D], written straight into
         * the put area for the reduce-scatter. */
        dcp_comm_buf in, out = dcp_comm_put_area(a->comm, (int)i);
        uint64_t stride;
        dcp_comm_put_view(a->comm, (int)i, DCP_COLL_ALL_GATHER, B * NH * 4, &in, &stride);
        if (timed) r->ts[2] = stamp(cmd);
        dcp_cp_scale_params sp = {(uint32_t)B, (uint32_t)Hl, (uint32_t)N, (uint32_t)dcp_comm_first_rank(a->comm) + i,
                               (uint32_t)D, (uint32_t)(stride / 4)};
        DCP_TRY(dcp_cp_scale_record(cmd, &sp, r->o_part, 0, in.buffer, in.offset, out.buffer, out.offset, lse.buffer,
                                 lse.offset));
        if (timed) r->ts[3] = stamp(cmd);
        dcp_comm_record_put(cmd);
    } else {
        /* ag_rs: sum the N scaled parts of the own heads from the senders' put areas, in rank order
         * (bound from an aligned offset; the rest of the offset goes in floats). */
        dcp_comm_buf in;
        uint64_t stride;
        dcp_comm_put_view(a->comm, (int)i, DCP_COLL_REDUCE_SCATTER, B * Hl * D * 4, &in, &stride);
        uint64_t base = in.offset / 256 * 256;
        dcp_part_sum_params ps = {(uint32_t)(B * Hl * D), (uint32_t)N, (uint32_t)(stride / 4),
                                  (uint32_t)((in.offset - base) / 4), 0, 0};
        DCP_TRY(dcp_part_sum_record(cmd, &ps, in.buffer, base, o.buffer, o.offset));
    }
    return DCP_OK;
fail:
    return dcp_fail_context(st, "DCP step phase %u (%s, local rank %u)", phase, dcp_cp_backend_name(a->cfg.backend), i);
}

dcp_status dcp_cp_attn_exchange(dcp_cp_attn *a, uint32_t phase)
{
    const uint64_t B = a->cfg.batch, D = a->D, Hl = a->cfg.heads_local, NH = a->NH;
    if (a->cfg.backend == DCP_CP_A2A)
        return dcp_comm_put_exchange(a->comm, DCP_COLL_ALL_TO_ALL, put_slot(a), a2a_block(a));
    if (phase == 0) return dcp_comm_put_exchange(a->comm, DCP_COLL_ALL_GATHER, B * NH * 4, B * NH * 4);
    /* The reduce-scatter's sum happens on the receiving devices (part_sum). */
    return dcp_comm_put_exchange(a->comm, DCP_COLL_REDUCE_SCATTER, B * Hl * D * 4, B * Hl * D * 4);
}

dcp_status dcp_cp_attn_run(dcp_cp_attn *a, const dcp_comm_buf *q, const dcp_comm_buf *o, const dcp_comm_buf *lse,
                        dcp_cp_attn_timing *timing)
{
    dcp_status st = DCP_OK;
    const uint64_t B = a->cfg.batch, D = a->D, Hl = a->cfg.heads_local, N = a->N;
    const uint32_t E = dcp_cp_attn_exchanges(a);
    double t0 = now_ns(), local_ns = 0.0, merge_ns = 0.0;
    uint64_t sent0 = dcp_comm_bytes_sent(a->comm, 0);

    /* All-gather Q (own heads [batch][Hl][D] from every rank). */
    const uint64_t qblk = B * Hl * D * 4;
    if (!a->cfg.q_replicate) {
        for (uint32_t i = 0; i < a->L; i++) {
            DCP_TRY(dcp_cmd_reset(a->r[i].cmd));
            DCP_TRY(dcp_comm_record_send(a->r[i].cmd, a->comm, (int)i, DCP_COLL_ALL_GATHER, q[i], qblk));
        }
        DCP_TRY(run_all(a));
        DCP_TRY(dcp_comm_exchange(a->comm, DCP_COLL_ALL_GATHER, qblk / 4, DCP_DTYPE_F32));
    }
    uint64_t q_bytes = dcp_comm_bytes_sent(a->comm, 0) - sent0;

    for (uint32_t p = 0; p <= E; p++) {
        for (uint32_t i = 0; i < a->L; i++) {
            attn_rank *r = &a->r[i];
            dcp_cmd *cmd = r->cmd;
            r->ts[0] = r->ts[1] = r->ts[2] = r->ts[3] = UINT32_MAX;
            DCP_TRY(dcp_cmd_reset(cmd));
            dcp_comm_buf qi = q[i];
            if (p == 0 && !a->cfg.q_replicate) {
                /* mailbox [src rank s][b][Hl*D] -> qfull [b][s][Hl*D] */
                dcp_comm_buf in = dcp_comm_recv_area(a->comm, (int)i);
                dcp_permute_params pp = {(uint32_t)N, (uint32_t)B, (uint32_t)(Hl * D), (uint32_t)(B * Hl * D),
                                         (uint32_t)(N * Hl * D)};
                DCP_TRY(dcp_permute_record(cmd, &pp, in.buffer, in.offset, r->qfull, 0));
                dcp_cmd_barrier(cmd); /* permute (gathered Q) -> paged_decode */
                qi = (dcp_comm_buf){r->qfull, 0};
            }
            DCP_TRY(dcp_cp_attn_record_phase(a, p, i, cmd, qi, o[i], lse[i]));
        }
        DCP_TRY(run_all(a));
        for (uint32_t i = 0; i < a->L; i++) {
            double ns = elapsed(a->r[i].cmd, a->r[i].ts[0], a->r[i].ts[1]);
            if (ns > local_ns) local_ns = ns;
            ns = elapsed(a->r[i].cmd, a->r[i].ts[2], a->r[i].ts[3]);
            if (ns > merge_ns) merge_ns = ns;
        }
        if (p < E) DCP_TRY(dcp_cp_attn_exchange(a, p));
    }
    if (timing) {
        timing->total_ns = now_ns() - t0;
        timing->local_ns = local_ns;
        timing->merge_ns = merge_ns;
        timing->exchange_ns = timing->total_ns - local_ns - merge_ns;
        if (timing->exchange_ns < 0) timing->exchange_ns = 0;
        timing->bytes_sent = dcp_comm_bytes_sent(a->comm, 0) - sent0;
        timing->q_bytes_sent = q_bytes;
    }
    return DCP_OK;
fail:
    return dcp_fail_context(st, "DCP step (%s, N %u)", dcp_cp_backend_name(a->cfg.backend), a->N);
}
