/* The DCP attention step (see include/dcpvk/cp.h): Q gather, local decode, a2a or ag_rs exchange
 * and merge, over the local ranks of a communicator. The step is cut at its exchanges into phases
 * which dcp_cp_attn_record (src/attn/cp_internal.h) records into a step of the step layer
 * (src/step/step.h) that its caller owns, with one round per exchange: the Q all-gather (without
 * q_replicate), then a2a 1 or ag_rs 2. Puts go straight into the communicator's put areas
 * (src/comm/put.h) and receivers read them in place (permute, lse_merge, cp_scale, part_sum): no
 * copies. dcp_cp_attn_run records the phases alone into a step of its own, created at its first
 * run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attn/attn_internal.h"
#include "attn/cp_internal.h"
#include "comm/put.h"
#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/cp.h"
#include "step/step.h"
#include "kernels/kernels.h"

typedef struct attn_rank {
    dcp_device *dev;
    dcp_decode_plan *plan; /* the local decode over the rank's shard (GQA or latent kind) */
    dcp_buffer *qfull;   /* [batch][N*Hl][QD] f32 (gathered Q; NULL with q_replicate) */
    dcp_buffer *o_part;  /* ag_rs: [batch][N*Hl][OD] f32 local partial O */
    uint32_t ts[4];      /* dcp_cp_attn_run: timestamp slots around the decode [0, 1] and the merge [2, 3] */
    uint32_t ts_round[4];/* and the rounds they were recorded in */
} attn_rank;

struct dcp_cp_attn {
    dcp_comm *comm;
    dcp_kv_cache *cache;
    dcp_cp_attn_config cfg;
    uint32_t N, NH, L;
    uint32_t QD, OD;     /* values per head of the queries and of the outputs (GQA: both the head
                          * dim; MLA: kv_lora + rope and kv_lora) */
    uint32_t rows;       /* rows of the last set (<= cfg.batch) */
    attn_rank *r;
    uint32_t *bt;        /* [batch][max_blocks] scratch */
    uint32_t *lens;      /* [batch] scratch */
    dcp_step *step;      /* dcp_cp_attn_run's own step over the local ranks (created at its first
                          * run; a model records into its own step and never makes this one) */
    bool timed;          /* recording for dcp_cp_attn_run: timestamps */
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
    dcp_step_destroy(a->step);
    for (uint32_t i = 0; a->r && i < a->L; i++) {
        attn_rank *r = &a->r[i];
        dcp_decode_plan_destroy(r->plan);
        dcp_buffer_destroy(r->qfull);
        dcp_buffer_destroy(r->o_part);
    }
    free(a->r);
    free(a->bt);
    free(a->lens);
    free(a);
}

/* The a2a message to one destination: O [rows][Hl][OD], then (from a 256-byte aligned offset, so
 * that the receiver binds it directly) LSE [rows][Hl], f32. */
#define ALIGN_UP(x) (((x) + DCP_STORAGE_ALIGN_MAX - 1) / DCP_STORAGE_ALIGN_MAX * DCP_STORAGE_ALIGN_MAX)
static uint64_t a2a_lse_offset_of(uint64_t hl, uint64_t d, uint32_t rows) { return ALIGN_UP(rows * hl * d * 4); }
static uint64_t a2a_lse_offset(const dcp_cp_attn *a, uint32_t rows)
{
    return a2a_lse_offset_of(a->cfg.heads_local, a->OD, rows);
}
/* Logical bytes of one a2a message (what counts as sent). */
static uint64_t a2a_payload(const dcp_cp_attn *a, uint32_t rows)
{
    return (uint64_t)rows * a->cfg.heads_local * (a->OD + 1) * 4;
}
/* Bytes between consecutive destinations' messages in the put area: 256-byte aligned. */
static uint64_t a2a_slot_of(uint64_t hl, uint64_t d, uint32_t rows)
{
    return ALIGN_UP(a2a_lse_offset_of(hl, d, rows) + (uint64_t)rows * hl * 4);
}
static uint64_t a2a_slot(const dcp_cp_attn *a, uint32_t rows) { return a2a_slot_of(a->cfg.heads_local, a->OD, rows); }

static bool gathers_q(const dcp_cp_attn *a) { return !a->cfg.q_replicate; }

/* The largest block of the step's exchanges (Q gather, a2a message or ag_rs parts, LSE gather):
 * the communicator's mailboxes are reserved for it. */
static uint64_t mailbox_block(const dcp_cp_attn_config *c, uint64_t QD, uint64_t OD, uint32_t N)
{
    const uint64_t B = c->batch, Hl = c->heads_local, NH = (uint64_t)N * Hl;
    uint64_t blk = !c->q_replicate ? B * Hl * QD * 4 : 0;
    uint64_t b2 = c->backend == DCP_CP_A2A ? a2a_slot_of(Hl, OD, c->batch) : B * Hl * OD * 4;
    if (b2 > blk) blk = b2;
    if (B * NH * 4 > blk) blk = B * NH * 4;
    return blk;
}

/* The local decode plan of every rank: all N * Hl heads of the group over the rank's shard. */
static dcp_decode_config plan_config(const dcp_cp_attn_config *c, uint32_t max_blocks, uint32_t NH)
{
    dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
    dc.kind = c->latent ? DCP_DECODE_LATENT : DCP_DECODE_GQA;
    dc.batch = c->batch;
    dc.q_heads = NH;
    dc.max_blocks = max_blocks;
    dc.latent = c->latent;
    dc.scale = c->scale;
    dc.chunk_tokens = c->chunk_tokens;
    return dc;
}

dcp_status dcp_cp_attn_bytes(const dcp_kv_cache_config *kc, const dcp_cp_attn_config *c, uint64_t max_length,
                             uint64_t *bytes, uint64_t *largest, uint64_t *mailbox)
{
    /* Per local rank, what dcp_cp_attn_create allocates (and its plan grows to): the local decode
     * plan over the rank's shard (rank 0's is the longest), gathered Q, and with ag_rs the partial
     * O (a2a's decode writes its messages in place). */
    const uint32_t N = kc->dcp_size;
    const uint64_t B = c->batch, QD = kc->pool.head_dim, OD = c->latent ? c->latent : QD,
                   NH = (uint64_t)N * c->heads_local;
    const uint64_t local = dcp_kv_local_length(max_length, 0, N, kc->interleave);
    const dcp_decode_config dc = plan_config(c, kc->max_blocks, (uint32_t)NH);
    dcp_status st = dcp_decode_plan_bytes(&kc->pool, &dc, local, bytes, largest);
    if (st != DCP_OK) return st;
    const uint64_t q = B * NH * QD * 4, o = c->backend == DCP_CP_AG_RS ? B * NH * OD * 4 : 0;
    *bytes += (c->q_replicate ? 0 : q) + o;
    if (!c->q_replicate && q > *largest) *largest = q;
    if (o > *largest) *largest = o;
    *mailbox = mailbox_block(c, QD, OD, N);
    return DCP_OK;
}

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
    a->QD = kc->pool.head_dim;
    a->OD = c->latent ? c->latent : kc->pool.head_dim;
    a->NH = NH;
    a->rows = c->batch;
    a->r = calloc(L, sizeof *a->r);
    a->bt = calloc((size_t)c->batch * kc->max_blocks, sizeof *a->bt);
    a->lens = calloc(c->batch, sizeof *a->lens);
    if (!a->r || !a->bt || !a->lens) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    const uint64_t B = c->batch, QD = a->QD, OD = a->OD;
    const dcp_decode_config dc = plan_config(c, kc->max_blocks, NH);
    for (uint32_t i = 0; i < L; i++) {
        attn_rank *r = &a->r[i];
        r->dev = dcp_comm_device(comm, (int)i);
        DCP_TRY(dcp_decode_plan_create(dcp_kv_cache_pool(cache, i), &dc, &r->plan));
        if (gathers_q(a)) DCP_TRY(dcp_buffer_create(r->dev, B * NH * QD * 4, DCP_MEMORY_DEVICE, &r->qfull));
        if (c->backend == DCP_CP_AG_RS)
            DCP_TRY(dcp_buffer_create(r->dev, B * NH * OD * 4, DCP_MEMORY_DEVICE, &r->o_part));
    }
    /* Mailboxes for the largest block of the step. */
    DCP_TRY(dcp_comm_reserve(comm, mailbox_block(c, QD, OD, N)));
    *out = a;
    return DCP_OK;
fail:
    dcp_cp_attn_destroy(a);
    return dcp_fail_context(st, "DCP step");
}

dcp_status dcp_cp_attn_set_rows(dcp_cp_attn *a, uint32_t rows, const uint32_t *seqs, const uint64_t *lengths)
{
    const dcp_kv_cache_config *kc = dcp_kv_cache_get_config(a->cache);
    if (rows == 0 || rows > a->cfg.batch)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: %u rows (allowed 1..%u, the configured batch)", rows,
                        a->cfg.batch);
    for (uint32_t b = 0; b < rows; b++) {
        if (seqs[b] >= kc->max_seqs)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: row %u: sequence %u outside the cache's %u slots", b,
                            seqs[b], kc->max_seqs);
        uint64_t have = dcp_kv_cache_seq_length(a->cache, seqs[b]);
        if (lengths && lengths[b] > have)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "DCP step: row %u attends over %llu tokens of sequence %u, which holds %llu", b,
                            (unsigned long long)lengths[b], seqs[b], (unsigned long long)have);
    }
    for (uint32_t i = 0; i < a->L; i++) {
        uint32_t rank = kc->first_rank + i;
        for (uint32_t b = 0; b < rows; b++) {
            a->lens[b] = lengths ? (uint32_t)dcp_kv_local_length(lengths[b], rank, a->N, kc->interleave)
                                 : dcp_kv_cache_seq_local_length(a->cache, i, seqs[b]);
            memcpy(a->bt + (uint64_t)b * kc->max_blocks, dcp_kv_cache_block_table(a->cache, i, seqs[b]),
                   (size_t)kc->max_blocks * sizeof *a->bt);
        }
        dcp_status st = dcp_decode_plan_set_rows(a->r[i].plan, rows, a->lens, a->bt);
        if (st != DCP_OK) return dcp_fail_context(st, "DCP step: local rank %u", i);
    }
    a->rows = rows;
    return DCP_OK;
}

dcp_status dcp_cp_attn_set(dcp_cp_attn *a, const uint32_t *seqs)
{
    return dcp_cp_attn_set_rows(a, a->cfg.batch, seqs, NULL);
}

uint32_t dcp_cp_attn_rows(const dcp_cp_attn *a) { return a->rows; }

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
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
    if (!cmd || s0 == UINT32_MAX || s1 == UINT32_MAX) return 0.0;
    if (dcp_cmd_elapsed_ns(cmd, s0, s1, &ns) != DCP_OK) {
        dcp_clear_error();
        return 0.0;
    }
    return ns;
}

uint32_t dcp_cp_attn_plan_chunks(const dcp_cp_attn *a, uint32_t i)
{
    if (i >= a->L) return 0;
    return dcp_decode_plan_chunks(a->r[i].plan);
}

uint64_t dcp_cp_attn_key(const dcp_cp_attn *a)
{
    uint64_t key = dcp_step_key_mix(DCP_STEP_KEY_SEED, a->rows);
    for (uint32_t i = 0; i < a->L; i++)
        key = dcp_step_key_mix(key, dcp_decode_plan_key(a->r[i].plan));
    return key;
}

/* The phases of the step, cut at its exchanges: [Q put (without q_replicate)], local decode and
 * put, [ag_rs: scale and put], merge. Phase p > 0 follows the exchange xchg(a, p - 1). */
static uint32_t phases(const dcp_cp_attn *a)
{
    return (gathers_q(a) ? 1u : 0u) + (a->cfg.backend == DCP_CP_A2A ? 2u : 3u);
}

static dcp_comm_xchg xchg(const dcp_cp_attn *a, uint32_t phase)
{
    const uint64_t B = a->rows, QD = a->QD, OD = a->OD, Hl = a->cfg.heads_local, NH = a->NH;
    if (gathers_q(a)) {
        if (phase == 0) return (dcp_comm_xchg){a->comm, DCP_COLL_ALL_GATHER, B * Hl * QD * 4, B * Hl * QD * 4};
        phase--;
    }
    if (a->cfg.backend == DCP_CP_A2A)
        return (dcp_comm_xchg){a->comm, DCP_COLL_ALL_TO_ALL, a2a_slot(a, a->rows), a2a_payload(a, a->rows)};
    if (phase == 0) return (dcp_comm_xchg){a->comm, DCP_COLL_ALL_GATHER, B * NH * 4, B * NH * 4};
    /* The reduce-scatter's sum happens on the receiving devices (part_sum). */
    return (dcp_comm_xchg){a->comm, DCP_COLL_REDUCE_SCATTER, B * Hl * OD * 4, B * Hl * OD * 4};
}

/* Phase "local": the decode of all N*Hl heads over the local shard. a2a: its output grouped by
 * destination, each message written in place in the put area; ag_rs: its LSEs straight into the
 * put area, its O into o_part. */
static dcp_status record_local(dcp_cp_attn *a, uint32_t i, uint32_t round, dcp_cmd *cmd, dcp_comm_buf q)
{
    dcp_status st = DCP_OK;
    const uint64_t B = a->rows, QD = a->QD, Hl = a->cfg.heads_local, N = a->N;
    attn_rank *r = &a->r[i];
    if (gathers_q(a)) {
        /* gathered own heads [src rank s][rows][Hl*QD] (s at stride) -> qfull [rows][s][Hl*QD] */
        dcp_comm_buf in;
        uint64_t stride;
        dcp_comm_put_view(a->comm, (int)i, DCP_COLL_ALL_GATHER, B * Hl * QD * 4, &in, &stride);
        dcp_permute_params pp = {(uint32_t)N, (uint32_t)B, (uint32_t)(Hl * QD), (uint32_t)(stride / 4),
                                 (uint32_t)(N * Hl * QD)};
        DCP_TRY(dcp_permute_record(cmd, &pp, in.buffer, in.offset, r->qfull, 0));
        dcp_cmd_barrier(cmd); /* permute (gathered Q) -> paged_decode */
        q = (dcp_comm_buf){r->qfull, 0};
    }
    dcp_comm_buf out = dcp_comm_put_area(a->comm, (int)i);
    if (a->timed) r->ts[0] = stamp(cmd), r->ts_round[0] = round;
    if (a->cfg.backend == DCP_CP_A2A) {
        /* Each destination's message written in place by the decode (or its chunks' merge): the
         * heads in N groups of Hl, group n's O [b][Hl][OD] at message n, its LSE [b][Hl] at the
         * message's LSE offset. */
        const uint64_t slot = a2a_slot(a, a->rows);
        const dcp_out_groups og = {(uint32_t)N, (uint32_t)Hl, slot, slot};
        DCP_TRY(dcp_decode_record_grouped(cmd, r->plan, q.buffer, q.offset, out.buffer, out.offset, out.buffer,
                                          out.offset + a2a_lse_offset(a, a->rows), &og));
    } else { /* ag_rs: O to o_part, LSEs straight into the put area of the all-gather */
        DCP_TRY(dcp_decode_record(cmd, r->plan, q.buffer, q.offset, r->o_part, 0, out.buffer, out.offset));
    }
    if (a->timed) r->ts[1] = stamp(cmd), r->ts_round[1] = round;
    dcp_comm_record_put(cmd);
    return DCP_OK;
fail:
    return st;
}

/* Records phase `phase` of local rank i into cmd: phase 0 reads q, the last writes o and lse
 * (shapes in include/dcpvk/cp.h); the others read the communicator's put areas in place. */
static dcp_status record_phase(dcp_cp_attn *a, uint32_t phase, uint32_t i, dcp_cmd *cmd, dcp_comm_buf q,
                               dcp_comm_buf o, dcp_comm_buf lse)
{
    dcp_status st = DCP_OK;
    const uint64_t B = a->rows, QD = a->QD, OD = a->OD, Hl = a->cfg.heads_local, N = a->N, NH = a->NH;
    const int a2a = a->cfg.backend == DCP_CP_A2A;
    const uint32_t round = phase;
    if (i >= a->L || phase >= phases(a))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: phase %u of local rank %u (%u phases, %u ranks)", phase, i,
                        phases(a), a->L);
    attn_rank *r = &a->r[i];
    if (gathers_q(a)) {
        if (phase == 0) {
            /* Own heads' Q [rows][Hl][QD] into the put area of the all-gather. */
            DCP_TRY(dcp_step_put_copy(cmd, a->comm, (int)i, q.buffer, q.offset, B * Hl * QD * 4));
            return DCP_OK;
        }
        phase--;
    }
    if (phase == 0) {
        DCP_TRY(record_local(a, i, round, cmd, q));
    } else if (phase == 1 && a2a) {
        /* Merge the N partial states of the own heads straight from the senders' put areas. */
        dcp_comm_buf in;
        uint64_t stride;
        dcp_comm_put_view(a->comm, (int)i, DCP_COLL_ALL_TO_ALL, a2a_slot(a, a->rows), &in, &stride);
        if (a->timed) r->ts[2] = stamp(cmd), r->ts_round[2] = round;
        dcp_merge_args m = {.parts = (uint32_t)N, .rows = (uint32_t)(B * Hl), .head_dim = (uint32_t)OD,
                            .o_part_stride = (uint32_t)(stride / 4), .lse_part_stride = (uint32_t)(stride / 4),
                            .o_in = in.buffer, .o_in_offset = in.offset, .lse_in = in.buffer,
                            .lse_in_offset = in.offset + a2a_lse_offset(a, a->rows), .o_out = o.buffer,
                            .o_out_offset = o.offset, .lse_out = lse.buffer, .lse_out_offset = lse.offset};
        DCP_TRY(dcp_lse_merge_record(cmd, &m));
        if (a->timed) r->ts[3] = stamp(cmd), r->ts_round[3] = round;
    } else if (phase == 1) {
        /* ag_rs: gathered LSEs [N][rows][N*Hl] -> scaled O [N][rows][Hl][OD], written straight into
         * the put area for the reduce-scatter. */
        dcp_comm_buf in, out = dcp_comm_put_area(a->comm, (int)i);
        uint64_t stride;
        dcp_comm_put_view(a->comm, (int)i, DCP_COLL_ALL_GATHER, B * NH * 4, &in, &stride);
        if (a->timed) r->ts[2] = stamp(cmd), r->ts_round[2] = round;
        dcp_cp_scale_params sp = {(uint32_t)B, (uint32_t)Hl, (uint32_t)N, (uint32_t)dcp_comm_first_rank(a->comm) + i,
                                  (uint32_t)OD, (uint32_t)(stride / 4)};
        DCP_TRY(dcp_cp_scale_record(cmd, &sp, r->o_part, 0, in.buffer, in.offset, out.buffer, out.offset, lse.buffer,
                                    lse.offset));
        if (a->timed) r->ts[3] = stamp(cmd), r->ts_round[3] = round;
        dcp_comm_record_put(cmd);
    } else {
        /* ag_rs: sum the N scaled parts of the own heads from the senders' put areas, in rank order
         * (bound from an aligned offset; the rest of the offset goes in floats). */
        dcp_comm_buf in;
        uint64_t stride;
        dcp_comm_put_view(a->comm, (int)i, DCP_COLL_REDUCE_SCATTER, B * Hl * OD * 4, &in, &stride);
        uint64_t base = in.offset / DCP_STORAGE_ALIGN_MAX * DCP_STORAGE_ALIGN_MAX;
        dcp_part_sum_params ps = {(uint32_t)(B * Hl * OD), (uint32_t)N, (uint32_t)(stride / 4),
                                  (uint32_t)((in.offset - base) / 4), 0, 0};
        DCP_TRY(dcp_part_sum_record(cmd, &ps, in.buffer, base, o.buffer, o.offset));
    }
    return DCP_OK;
fail:
    return dcp_fail_context(st, "DCP step phase %u (%s, local rank %u)", round, dcp_cp_backend_name(a->cfg.backend), i);
}

dcp_status dcp_cp_attn_record(dcp_step *step, dcp_cp_attn *const *attns, uint32_t G, const dcp_comm_buf *q,
                              const dcp_comm_buf *o, const dcp_comm_buf *lse)
{
    dcp_status st = DCP_OK;
    if (G == 0) return DCP_OK;
    if (G > DCP_CP_MAX_GROUPS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: %u DCP groups in one step (at most %d)", G,
                        DCP_CP_MAX_GROUPS);
    const uint32_t per = attns[0]->L, P = phases(attns[0]);
    if (dcp_step_count(step) != G * per)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "DCP step: %u groups of %u local ranks in a step of %u ranks", G,
                        per, dcp_step_count(step));
    for (uint32_t g = 0; g < G; g++) {
        if (attns[g]->L != per || phases(attns[g]) != P)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "DCP step: group %u has %u local ranks and %u phases, group 0 %u and %u (groups recorded "
                            "together exchange in the same rounds)", g, attns[g]->L, phases(attns[g]), per, P);
        for (uint32_t i = 0; i < per; i++) {
            const dcp_cmd *cmd = dcp_step_cmd(step, g * per + i);
            if (!cmd)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "DCP step: the step is not recording (record between dcp_step_begin and its end)");
            if (dcp_cmd_device(cmd) != attns[g]->r[i].dev)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "DCP step: step rank %u is not on the device of group %u's local rank %u", g * per + i,
                                g, i);
        }
    }
    dcp_comm_xchg x[DCP_CP_MAX_GROUPS];
    for (uint32_t p = 0; p < P; p++) {
        if (p > 0) {
            for (uint32_t g = 0; g < G; g++) x[g] = xchg(attns[g], p - 1);
            DCP_TRY(dcp_step_round(step, G, x));
        }
        for (uint32_t g = 0; g < G; g++)
            for (uint32_t i = 0; i < per; i++) {
                const uint32_t r = g * per + i;
                DCP_TRY(record_phase(attns[g], p, i, dcp_step_cmd(step, r), q[r], o[r], lse[r]));
            }
    }
    return DCP_OK;
fail:
    return st;
}

/* dcp_cp_attn_run's own step over the local ranks, created at the first run. */
static dcp_status own_step(dcp_cp_attn *a)
{
    dcp_status st = DCP_OK;
    if (a->step) return DCP_OK;
    dcp_device **devs = calloc(a->L, sizeof *devs);
    if (!devs) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < a->L; i++) devs[i] = a->r[i].dev;
    DCP_TRY(dcp_step_create(devs, a->L, &a->step));
    DCP_TRY(dcp_step_add_comm(a->step, a->comm));
fail:
    free(devs);
    if (st != DCP_OK) {
        dcp_step_destroy(a->step);
        a->step = NULL;
    }
    return st;
}

dcp_status dcp_cp_attn_run(dcp_cp_attn *a, const dcp_comm_buf *q, const dcp_comm_buf *o, const dcp_comm_buf *lse,
                           dcp_cp_attn_timing *timing)
{
    dcp_status st = DCP_OK;
    double t0 = now_ns(), local_ns = 0.0, merge_ns = 0.0;
    uint64_t sent0 = dcp_comm_bytes_sent(a->comm, 0);
    DCP_TRY(own_step(a));
    /* Recorded once and replayed while the rows, the chunking and the buffers stay. */
    uint64_t key = dcp_cp_attn_key(a);
    for (uint32_t i = 0; i < a->L; i++) {
        key = dcp_step_key_mix(key, (uint64_t)(uintptr_t)q[i].buffer ^ q[i].offset);
        key = dcp_step_key_mix(key, (uint64_t)(uintptr_t)o[i].buffer ^ o[i].offset);
        key = dcp_step_key_mix(key, (uint64_t)(uintptr_t)lse[i].buffer ^ lse[i].offset);
    }
    bool replayed;
    a->timed = true;
    DCP_TRY(dcp_step_begin(a->step, key, &replayed));
    if (!replayed) {
        for (uint32_t i = 0; i < a->L; i++)
            for (int k = 0; k < 4; k++) a->r[i].ts[k] = UINT32_MAX;
        DCP_TRY(dcp_cp_attn_record(a->step, &a, 1, q, o, lse));
        DCP_TRY(dcp_step_end(a->step));
    }
    a->timed = false;
    for (uint32_t i = 0; i < a->L; i++) {
        const attn_rank *r = &a->r[i];
        double ns = elapsed(dcp_step_recorded_cmd(a->step, r->ts_round[0], i), r->ts[0], r->ts[1]);
        if (ns > local_ns) local_ns = ns;
        ns = elapsed(dcp_step_recorded_cmd(a->step, r->ts_round[2], i), r->ts[2], r->ts[3]);
        if (ns > merge_ns) merge_ns = ns;
    }
    if (timing) {
        timing->total_ns = now_ns() - t0;
        timing->local_ns = local_ns;
        timing->merge_ns = merge_ns;
        timing->exchange_ns = timing->total_ns - local_ns - merge_ns;
        if (timing->exchange_ns < 0) timing->exchange_ns = 0;
        timing->bytes_sent = dcp_comm_bytes_sent(a->comm, 0) - sent0;
        timing->q_bytes_sent = gathers_q(a) ? xchg(a, 0).payload * (a->N - 1) : 0;
        timing->rounds = dcp_step_last_rounds(a->step);
        timing->host_waits = dcp_step_last_host_waits(a->step);
    }
    return DCP_OK;
fail:
    a->timed = false;
    if (a->step) dcp_step_abort(a->step);
    return dcp_fail_context(st, "DCP step (%s, N %u)", dcp_cp_backend_name(a->cfg.backend), a->N);
}
