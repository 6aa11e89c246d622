/* The llama model's run state (see include/dcpvk/model.h): per rank its KV pools (DCP: the group's
 * caches with interleaved placement), attention plans, activations and step inputs; the
 * communicators of the TP group and of each DCP group; the DCP attention steps; the step over the
 * ranks held here. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/llama_internal.h"

/* Run state of local rank i (TP rank first + i). */
static dcp_status rank_state_create(dcp_llama_state *s, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    const llama_rank_weights *rw = &s->w->ranks[i];
    llama_rank_state *rs = &s->r[i];
    const dcp_llama_config *c = &s->cfg;
    const uint32_t T = c->prefill_chunk, L = m->n_layer, D = m->head_dim, N = s->w->dcp, G = s->ng;
    rs->dev = rw->dev;
    rs->g = i / s->gn;
    rs->gr = (s->w->first + i) % N;
    rs->gl = i % s->gn;
    rs->qkv4 = (rw->qh + 2 * rw->hkv) * D;
    rs->qkv4 = (rs->qkv4 + 3) / 4 * 4;
    rs->pools = calloc(L, sizeof *rs->pools);
    rs->dplans = calloc(L, sizeof *rs->dplans);
    rs->pplans = calloc(L, sizeof *rs->pplans);
    rs->slots = calloc(L, sizeof *rs->slots);
    if (!rs->pools || !rs->dplans || !rs->pplans || !rs->slots)
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t l = 0; l < L; l++) {
        if (N == 1) {
            dcp_kv_pool_config pc = DCP_KV_POOL_CONFIG_DEFAULT;
            pc.kv_heads = rw->hkv;
            pc.head_dim = D;
            pc.page_size = c->block_size;
            pc.dtype = c->kv_dtype;
            pc.num_pages = s->pages;
            DCP_TRY(dcp_kv_pool_create(rs->dev, &pc, &rs->pools[l]));
            dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
            dc.batch = 1;
            dc.q_heads = rw->hq;
            dc.max_blocks = s->pages;
            DCP_TRY(dcp_decode_plan_create(rs->pools[l], &dc, &rs->dplans[l]));
            if (T > 1) {
                dc.batch = T;
                DCP_TRY(dcp_decode_plan_create(rs->pools[l], &dc, &rs->pplans[l]));
            }
        } else {
            rs->pools[l] = dcp_kv_cache_pool(s->caches[l * G + rs->g], rs->gl);
        }
        DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)T * 4, DCP_MEMORY_HOST, &rs->slots[l]));
    }
    struct {
        dcp_buffer **b;
        uint64_t floats;
    } acts[] = {{&rs->x, m->n_embd},   {&rs->xn, m->n_embd},         {&rs->qkv, rs->qkv4},
                {&rs->q, (uint64_t)rw->qh * D}, {&rs->o, (uint64_t)rw->hq * D}, {&rs->lse, rw->hq},
                {&rs->gu, 2ull * rw->f}, {&rs->h, rw->f_pad},          {&rs->part, m->n_embd}};
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++)
        DCP_TRY(dcp_buffer_create(rs->dev, (acts[k].floats ? acts[k].floats : 1) * T * 4, DCP_MEMORY_DEVICE,
                                  acts[k].b));
    /* The padding columns of h meet zero weight columns of ffn_down: keep them 0 (never NaN). */
    DCP_TRY(dcp_buffer_fill(rs->h, 0, dcp_buffer_size(rs->h), 0));
    DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)T * 4, DCP_MEMORY_HOST, &rs->ids));
    DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)T * (m->n_rot / 2 ? m->n_rot / 2 : 1) * 8, DCP_MEMORY_HOST, &rs->cs));
    DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)m->n_vocab * 4, DCP_MEMORY_HOST, &rs->logits));
    DCP_TRY(dcp_buffer_create(rs->dev, 16, DCP_MEMORY_HOST, &rs->next));
    s->qv[i] = (dcp_comm_buf){rs->q, 0};
    s->ov[i] = (dcp_comm_buf){rs->o, 0};
    s->lv[i] = (dcp_comm_buf){rs->lse, 0};
    return DCP_OK;
fail:
    return st;
}

/* Over MPI: the TP communicator over the world and, when this process holds part of a DCP group,
 * the group's sub-communicator. The collective creations run on every process whatever it meets
 * on the way, then one agreement: a process that failed makes all fail instead of leaving them
 * waiting. */
static dcp_status create_mpi_comms(dcp_llama_state *s, dcp_device *const *devs, const dcp_comm_config *cc)
{
    const dcp_llama_weights *w = s->w;
    const uint32_t N = w->dcp, nl = w->nl;
    dcp_status st = dcp_comm_init_mpi(devs, (int)nl, cc, &s->comm);
    if (st == DCP_OK && (dcp_comm_size(s->comm) != (int)w->tp || dcp_comm_first_rank(s->comm) != (int)w->first))
        st = dcp_fail(DCP_ERR_CONFIG,
                      "TP size %u with %u ranks per process needs %u MPI processes holding ranks from %u on "
                      "here; found %d processes, ranks from %d on here",
                      w->tp, nl, w->tp / nl, w->first, dcp_comm_size(s->comm) / (int)nl, dcp_comm_first_rank(s->comm));
    if (N > 1 && s->gn < N) { /* this process holds part of one DCP group: colour = group index */
        dcp_status gs = dcp_comm_init_mpi_split(devs, (int)nl, (int)(w->first / N), cc, &s->gcomm[0]);
        if (st == DCP_OK) st = gs;
        if (st == DCP_OK &&
            (dcp_comm_size(s->gcomm[0]) != (int)N || dcp_comm_first_rank(s->gcomm[0]) != (int)(w->first % N)))
            st = dcp_fail(DCP_ERR_CONFIG,
                          "DCP group %u: sub-communicator of %d ranks, ranks from %d here; expected %u, from %u",
                          w->first / N, dcp_comm_size(s->gcomm[0]), dcp_comm_first_rank(s->gcomm[0]), N, w->first % N);
    }
    if (dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
        st = dcp_fail(DCP_ERR_MPI, "llama state: another MPI process failed to create its communicators");
    return st;
}

/* Group g's KV cache and DCP attention step of layer l. */
static dcp_status create_group_layer(dcp_llama_state *s, dcp_device *const *devs, uint32_t g, uint32_t l)
{
    dcp_status st = DCP_OK;
    const dcp_llama_weights *w = s->w;
    const dcp_llama_config *c = &s->cfg;
    const uint32_t N = w->dcp, gn = s->gn, G = s->ng;
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool.kv_heads = w->ranks[g * gn].hkv;
    kc.pool.head_dim = w->cfg.head_dim;
    kc.pool.page_size = c->block_size;
    kc.pool.dtype = c->kv_dtype;
    kc.pool.num_pages = s->pages;
    kc.dcp_size = N;
    kc.first_rank = (w->first + g * gn) % N;
    kc.interleave = c->interleave;
    kc.max_seqs = 1;
    kc.max_blocks = s->pages;
    DCP_TRY(dcp_kv_cache_create(devs + g * gn, gn, &kc, &s->caches[l * G + g]));
    dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
    ac.batch = c->prefill_chunk;
    ac.heads_local = w->ranks[g * gn].hq;
    ac.backend = c->backend;
    ac.q_replicate = w->q_replicate;
    DCP_TRY(dcp_cp_attn_create(s->gcomm[g], s->caches[l * G + g], &ac, &s->attns[l * G + g]));
fail:
    return st;
}

/* Everything of the run state but the warm-up, on s (whose w, cfg and pages are set). spread: the
 * TP group spans MPI processes. On failure the caller destroys s. */
static dcp_status state_build(dcp_llama_state *s, bool spread)
{
    dcp_status st = DCP_OK;
    const dcp_llama_weights *w = s->w;
    const uint32_t N = w->dcp, L = w->cfg.n_layer, nl = w->nl, T = s->cfg.prefill_chunk;
    s->ng = nl >= N ? nl / N : 1;
    s->gn = nl >= N ? N : nl;
    const uint32_t G = s->ng;
    s->r = calloc(nl, sizeof *s->r);
    s->qv = calloc(nl, sizeof *s->qv);
    s->ov = calloc(nl, sizeof *s->ov);
    s->lv = calloc(nl, sizeof *s->lv);
    s->bt = malloc((size_t)T * s->pages * sizeof *s->bt);
    s->lens = calloc(T, sizeof *s->lens);
    s->seqs = calloc(T, sizeof *s->seqs);
    s->glens = calloc(T, sizeof *s->glens);
    if (N > 1) {
        s->gcomm = calloc(G, sizeof *s->gcomm);
        s->caches = calloc((size_t)G * L, sizeof *s->caches);
        s->attns = calloc((size_t)G * L, sizeof *s->attns);
    }
    if (!s->r || !s->qv || !s->ov || !s->lv || !s->bt || !s->lens || !s->seqs || !s->glens ||
        (N > 1 && (!s->gcomm || !s->caches || !s->attns)))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t p = 0; p < s->pages; p++) s->bt[(size_t)t * s->pages + p] = p;
    dcp_device *devs[1024];
    if (nl > 1024) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "llama state: %u ranks in one process (at most 1024)", nl);
    for (uint32_t r = 0; r < nl; r++) devs[r] = w->ranks[r].dev;
    dcp_comm_config cc = DCP_COMM_CONFIG_DEFAULT;
    if (spread && (st = create_mpi_comms(s, devs, &cc)) != DCP_OK) return st;
    if (w->tp > 1 && !spread) DCP_TRY(dcp_comm_init_local(devs, (int)w->tp, &cc, &s->comm));
    if (N > 1) {
        for (uint32_t g = 0; g < G; g++) {
            if (s->gn == N) DCP_TRY(dcp_comm_init_local(devs + g * N, (int)N, &cc, &s->gcomm[g]));
            for (uint32_t l = 0; l < L; l++) DCP_TRY(create_group_layer(s, devs, g, l));
        }
    }
    for (uint32_t r = 0; r < nl; r++) DCP_TRY(rank_state_create(s, r));
    DCP_TRY(dcp_step_create(devs, nl, &s->step));
    if (s->comm) DCP_TRY(dcp_step_add_comm(s->step, s->comm));
    for (uint32_t g = 0; N > 1 && g < G; g++) DCP_TRY(dcp_step_add_comm(s->step, s->gcomm[g]));
fail:
    return st;
}

dcp_status dcp_llama_state_create(dcp_llama_weights *w, const dcp_llama_config *config, dcp_llama_state **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const dcp_model_config *m = &w->cfg;
    dcp_llama_config c = *config;
    const uint32_t N = w->dcp;
    const bool spread = w->nl < w->tp; /* the TP group spans processes (MPI) */
    if (c.n_ctx == 0) c.n_ctx = m->n_ctx_train < 4096 ? m->n_ctx_train : 4096;
    if (c.block_size == 0 || c.prefill_chunk == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "llama state: block size %u and prefill chunk %u must be >= 1",
                        c.block_size, c.prefill_chunk);
    if (c.interleave == 0) c.interleave = 1;
    if (N > 1) {
        dcp_status ps = dcp_kv_placement_check(N, c.interleave, c.block_size);
        if (ps) return ps;
    }
    dcp_llama_state *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->w = w;
    s->cfg = c;
    /* Pages per rank: the longest shard a context of n_ctx tokens gives, plus one for rounding. */
    uint64_t shard = N == 1 ? c.n_ctx : dcp_kv_local_length(c.n_ctx, 0, N, c.interleave);
    s->pages = (uint32_t)((shard + c.block_size - 1) / c.block_size) + (N > 1 ? 1 : 0);
    st = state_build(s, spread);
    /* Over MPI, one more agreement: a process that failed makes all fail (none waits for it). */
    if (spread && dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
        st = dcp_fail(DCP_ERR_MPI, "llama state: another MPI process failed to create its part of the state");
    if (st != DCP_OK) goto fail;
    /* Warm-up: a 2-token prefill and a decode step create every pipeline the steps use, so that
     * the first real step does not pay for shader compilation; then the sequence is forgotten. */
    if (c.n_ctx >= 3) {
        int32_t warm[2] = {0, 0};
        DCP_TRY(dcp_llama_forward(s, warm, c.prefill_chunk > 1 ? 2 : 1, NULL, NULL));
        DCP_TRY(dcp_llama_forward(s, warm, 1, NULL, NULL));
        dcp_llama_state_reset(s);
        s->tokens_run = 0;
        if (s->comm) dcp_comm_reset_stats(s->comm);
        for (uint32_t g = 0; s->gcomm && g < s->ng; g++) dcp_comm_reset_stats(s->gcomm[g]);
    }
    *out = s;
    return DCP_OK;
fail:
    dcp_llama_state_destroy(s);
    return st;
}

void dcp_llama_state_destroy(dcp_llama_state *s)
{
    if (!s) return;
    const uint32_t N = s->w->dcp, G = s->ng, L = s->w->cfg.n_layer;
    dcp_step_destroy(s->step);
    for (uint32_t r = 0; s->r && r < s->w->nl; r++) {
        llama_rank_state *rs = &s->r[r];
        for (uint32_t l = 0; rs->pools && l < L; l++) {
            if (rs->dplans) dcp_decode_plan_destroy(rs->dplans[l]);
            if (rs->pplans) dcp_decode_plan_destroy(rs->pplans[l]);
            if (N == 1) dcp_kv_pool_destroy(rs->pools[l]);
            if (rs->slots) dcp_buffer_destroy(rs->slots[l]);
        }
        dcp_buffer *bufs[] = {rs->x,  rs->xn,  rs->qkv, rs->q,      rs->o,     rs->lse, rs->gu,
                              rs->h,  rs->part, rs->ids, rs->cs, rs->logits, rs->next};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
        free(rs->pools);
        free(rs->dplans);
        free(rs->pplans);
        free(rs->slots);
    }
    for (uint32_t i = 0; s->attns && i < G * L; i++) dcp_cp_attn_destroy(s->attns[i]);
    for (uint32_t i = 0; s->caches && i < G * L; i++) dcp_kv_cache_destroy(s->caches[i]);
    for (uint32_t g = 0; s->gcomm && g < G; g++) dcp_comm_destroy(s->gcomm[g]);
    dcp_comm_destroy(s->comm);
    free(s->attns);
    free(s->caches);
    free(s->gcomm);
    free(s->r);
    free(s->qv);
    free(s->ov);
    free(s->lv);
    free(s->bt);
    free(s->lens);
    free(s->seqs);
    free(s->glens);
    free(s);
}

void dcp_llama_state_reset(dcp_llama_state *s)
{
    s->pos = 0;
    for (uint32_t i = 0; s->caches && i < s->ng * s->w->cfg.n_layer; i++) dcp_kv_cache_free_seq(s->caches[i], 0);
}

uint32_t dcp_llama_state_pos(const dcp_llama_state *s) { return s->pos; }
uint32_t dcp_llama_state_n_ctx(const dcp_llama_state *s) { return s->cfg.n_ctx; }

uint64_t dcp_llama_state_kv_bytes(const dcp_llama_state *s)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < s->w->cfg.n_layer; l++)
        b += dcp_kv_pool_page_bytes(s->r[0].pools[l]) * dcp_kv_pool_get_config(s->r[0].pools[l])->num_pages;
    return b;
}

uint64_t dcp_llama_state_exchange_bytes(const dcp_llama_state *s)
{
    uint64_t b = s->comm ? dcp_comm_bytes_sent(s->comm, 0) : 0;
    if (s->gcomm) b += dcp_comm_bytes_sent(s->gcomm[0], 0);
    return b;
}

uint64_t dcp_llama_state_tokens_run(const dcp_llama_state *s) { return s->tokens_run; }
