/* The run state (include/dcpvk/model.h), the part every architecture shares (src/model/graph.h):
 * communicators, KV caches, the step, per-rank residual stream and step inputs and outputs, page
 * accounting; the architecture adds its own part through its ops. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/graph.h"

/* Over MPI: the TP communicator over the world and, when this process holds part of a DCP group,
 * the group's sub-communicator. The collective creations run on every process whatever it meets
 * on the way, then one agreement: a process that failed makes all fail instead of leaving them
 * waiting. */
static dcp_status create_mpi_comms(dcp_model_state *s, dcp_device *const *devs, const dcp_comm_config *cc)
{
    const dcp_model *m = s->m;
    const uint32_t N = m->dcp, nl = m->nl;
    dcp_status st = dcp_comm_init_mpi(devs, (int)nl, cc, &s->comm);
    if (st == DCP_OK && (dcp_comm_size(s->comm) != (int)m->tp || dcp_comm_first_rank(s->comm) != (int)m->first))
        st = dcp_fail(DCP_ERR_CONFIG,
                      "TP size %u with %u ranks per process needs %u MPI processes holding ranks from %u on "
                      "here; found %d processes, ranks from %d on here",
                      m->tp, nl, m->tp / nl, m->first, dcp_comm_size(s->comm) / (int)nl, dcp_comm_first_rank(s->comm));
    if (N > 1 && s->gn < N) { /* this process holds part of one DCP group: colour = group index */
        dcp_status gs = dcp_comm_init_mpi_split(devs, (int)nl, (int)(m->first / N), cc, &s->gcomm[0]);
        if (st == DCP_OK) st = gs;
        if (st == DCP_OK &&
            (dcp_comm_size(s->gcomm[0]) != (int)N || dcp_comm_first_rank(s->gcomm[0]) != (int)(m->first % N)))
            st = dcp_fail(DCP_ERR_CONFIG,
                          "DCP group %u: sub-communicator of %d ranks, ranks from %d here; expected %u, from %u",
                          m->first / N, dcp_comm_size(s->gcomm[0]), dcp_comm_first_rank(s->gcomm[0]), N, m->first % N);
    }
    if (dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
        st = dcp_fail(DCP_ERR_MPI, "model state: another MPI process failed to create its communicators");
    return st;
}

/* Group g's KV cache of layer l: the pools of the group's ranks held here. */
static dcp_status create_cache(dcp_model_state *s, dcp_device *const *devs, uint32_t g, uint32_t l)
{
    const dcp_model *m = s->m;
    const dcp_model_state_config *c = &s->cfg;
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    m->ops->kv_pool(m, g * s->gn, &kc.pool);
    kc.pool.page_size = c->block_size;
    kc.pool.dtype = c->kv_dtype;
    kc.pool.num_pages = c->kv_pages;
    kc.dcp_size = m->dcp;
    kc.first_rank = m->dcp > 1 ? (m->first + g * s->gn) % m->dcp : 0;
    kc.interleave = m->dcp > 1 ? c->interleave : 1;
    kc.max_seqs = c->max_seqs;
    kc.max_blocks = s->max_blocks;
    dcp_status st = dcp_kv_cache_create(devs + g * s->gn, s->gn, &kc, &s->caches[l * s->ng + g]);
    if (st != DCP_OK) return dcp_fail_context(st, "layer %u", l);
    return DCP_OK;
}

/* The buffers every architecture uses on local rank i. */
static dcp_status create_rank(dcp_model_state *s, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const dcp_model_config *mc = &m->cfg;
    dcp_graph_rank *r = &s->r[i];
    const uint64_t R = s->cfg.max_rows, E = mc->n_embd;
    r->dev = m->ranks[i].dev;
    r->g = i / s->gn;
    r->gr = m->dcp > 1 ? (m->first + i) % m->dcp : 0;
    r->gl = i % s->gn;
    r->slots = calloc(mc->n_layer, sizeof *r->slots);
    if (!r->slots) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    DCP_TRY(dcp_buffer_create(r->dev, R * E * 4, DCP_MEMORY_DEVICE, &r->x));
    DCP_TRY(dcp_buffer_create(r->dev, R * E * 4, DCP_MEMORY_DEVICE, &r->xn));
    if (m->tp > 1) DCP_TRY(dcp_buffer_create(r->dev, R * E * 4, DCP_MEMORY_DEVICE, &r->part));
    for (uint32_t l = 0; l < mc->n_layer; l++)
        DCP_TRY(dcp_buffer_create(r->dev, R * 4, DCP_MEMORY_HOST, &r->slots[l]));
    DCP_TRY(dcp_buffer_create(r->dev, R * 4, DCP_MEMORY_HOST, &r->ids));
    DCP_TRY(dcp_buffer_create(r->dev, R * (s->rope_pairs ? s->rope_pairs : 1) * 8, DCP_MEMORY_HOST, &r->cs));
    if (i == 0) {
        DCP_TRY(dcp_buffer_create(r->dev, (uint64_t)s->max_out * E * 4, DCP_MEMORY_DEVICE, &r->xo));
        DCP_TRY(dcp_buffer_create(r->dev, (uint64_t)s->max_out * mc->n_vocab * 4, DCP_MEMORY_HOST, &r->logits));
        DCP_TRY(dcp_buffer_create(r->dev, (uint64_t)s->max_out * 4, DCP_MEMORY_HOST, &r->next));
    }
fail:
    return st;
}

/* Everything but the warm-up, on s (whose m and cfg are set). On failure the caller destroys s. */
static dcp_status state_build(dcp_model_state *s, bool spread)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const uint32_t N = m->dcp, L = m->cfg.n_layer, nl = m->nl, R = s->cfg.max_rows;
    s->ng = N == 1 ? nl : (nl >= N ? nl / N : 1);
    s->gn = N == 1 ? 1 : (nl >= N ? N : nl);
    const uint32_t G = s->ng;
    s->r = calloc(nl, sizeof *s->r);
    s->caches = calloc((size_t)G * L, sizeof *s->caches);
    s->row_seq = calloc(R, sizeof *s->row_seq);
    s->row_len = calloc(R, sizeof *s->row_len);
    s->row_pos = calloc(R, sizeof *s->row_pos);
    s->out_row = calloc(s->max_out, sizeof *s->out_row);
    s->lens = calloc(R, sizeof *s->lens);
    s->bt = calloc((size_t)R * s->max_blocks, sizeof *s->bt);
    s->seq_len = calloc(s->cfg.max_seqs, sizeof *s->seq_len);
    s->seq_add = calloc(s->cfg.max_seqs, sizeof *s->seq_add);
    s->run_seq = calloc(R, sizeof *s->run_seq);
    s->run_count = calloc(R, sizeof *s->run_count);
    s->fwd_rows = calloc(R, sizeof *s->fwd_rows);
    if (N > 1) s->gcomm = calloc(G, sizeof *s->gcomm);
    if (!s->r || !s->caches || !s->row_seq || !s->row_len || !s->row_pos || !s->out_row || !s->lens || !s->bt || !s->seq_len ||
        !s->seq_add || !s->run_seq || !s->run_count || !s->fwd_rows || (N > 1 && !s->gcomm))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_device *devs[1024];
    if (nl > 1024) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: %u ranks in one process (at most 1024)", nl);
    for (uint32_t i = 0; i < nl; i++) devs[i] = m->ranks[i].dev;
    dcp_comm_config cc = DCP_COMM_CONFIG_DEFAULT;
    if (spread && (st = create_mpi_comms(s, devs, &cc)) != DCP_OK) return st;
    if (m->tp > 1 && !spread) DCP_TRY(dcp_comm_init_local(devs, (int)m->tp, &cc, &s->comm));
    for (uint32_t g = 0; N > 1 && s->gn == N && g < G; g++)
        DCP_TRY(dcp_comm_init_local(devs + g * N, (int)N, &cc, &s->gcomm[g]));
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t g = 0; g < G; g++) DCP_TRY(create_cache(s, devs, g, l));
    for (uint32_t i = 0; i < nl; i++) DCP_TRY(create_rank(s, i));
    DCP_TRY(dcp_step_create(devs, nl, &s->step));
    if (s->comm) {
        DCP_TRY(dcp_step_add_comm(s->step, s->comm));
        /* Mailboxes for the largest all-reduce, so that they never move between steps. */
        DCP_TRY(dcp_comm_reserve(s->comm, (uint64_t)R * m->cfg.n_embd * 4));
    }
    for (uint32_t g = 0; N > 1 && g < G; g++) DCP_TRY(dcp_step_add_comm(s->step, s->gcomm[g]));
    DCP_TRY(m->ops->state_create(s));
fail:
    return st;
}

/* Pages of a sequence's shard of `length` tokens on DCP rank r. */
static uint32_t shard_pages(const dcp_model_state *s, uint64_t length, uint32_t r)
{
    const uint32_t N = s->m->dcp, B = s->cfg.block_size;
    uint64_t local = N == 1 ? length : dcp_kv_local_length(length, r, N, s->cfg.interleave);
    return (uint32_t)((local + B - 1) / B);
}

dcp_status dcp_model_state_create(dcp_model *m, const dcp_model_state_config *config, dcp_model_state **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const dcp_model_config *mc = &m->cfg;
    dcp_model_state_config c = *config;
    const uint32_t N = m->dcp;
    const bool spread = m->nl < m->tp; /* the TP group spans processes (MPI) */
    if (c.n_ctx == 0) {
        c.n_ctx = mc->n_ctx_train < 4096 ? mc->n_ctx_train : 4096;
        if (mc->sliding_window && c.n_ctx > mc->sliding_window) c.n_ctx = mc->sliding_window;
    }
    if (mc->sliding_window && c.n_ctx > mc->sliding_window)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "model state: a context of %u tokens exceeds the model's sliding attention window of %u "
                        "tokens (%s.attention.sliding_window); dcp-vk runs full attention, which equals "
                        "sliding-window attention only while the context fits in the window: use n_ctx <= %u",
                        c.n_ctx, mc->sliding_window, mc->arch_name, mc->sliding_window);
    if (c.max_seqs == 0) c.max_seqs = 1;
    if (c.interleave == 0) c.interleave = 1;
    if (c.chunk_tokens == 0) c.chunk_tokens = 512;
    if (c.block_size == 0 || c.max_rows == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model state: block size %u and rows per step %u must be >= 1",
                        c.block_size, c.max_rows);
    if (N > 1) {
        dcp_status ps = dcp_kv_placement_check(N, c.interleave, c.block_size);
        if (ps) return ps;
    }
    dcp_model_state *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->m = m;
    s->cfg = c;
    s->max_blocks = shard_pages(s, c.n_ctx, 0) + (N > 1 ? 1 : 0);
    if (s->cfg.kv_pages == 0) s->cfg.kv_pages = c.max_seqs * s->max_blocks;
    s->max_out = c.max_rows < c.max_seqs ? c.max_rows : c.max_seqs;
    s->rope_pairs = mc->n_rot / 2;
    st = state_build(s, spread);
    /* Over MPI, one more agreement: a process that failed makes all fail (none waits for it). */
    if (spread && dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
        st = dcp_fail(DCP_ERR_MPI, "model state: another MPI process failed to create its part of the state");
    if (st != DCP_OK) goto fail;
    /* Warm-up: a 2-token prefill and a decode step create every pipeline the steps use, so that
     * the first real step does not pay for shader compilation; then the sequence is forgotten. */
    if (c.n_ctx >= 3) {
        int32_t warm[2] = {0, 0};
        DCP_TRY(dcp_model_state_forward(s, warm, c.max_rows > 1 ? 2 : 1, NULL, NULL));
        DCP_TRY(dcp_model_state_forward(s, warm, 1, NULL, NULL));
        dcp_model_state_reset(s);
        s->tokens_run = 0;
        if (s->comm) dcp_comm_reset_stats(s->comm);
        for (uint32_t g = 0; s->gcomm && g < s->ng; g++) dcp_comm_reset_stats(s->gcomm[g]);
    }
    *out = s;
    return DCP_OK;
fail:
    dcp_model_state_destroy(s);
    return st;
}

void dcp_model_state_destroy(dcp_model_state *s)
{
    if (!s) return;
    const uint32_t G = s->ng, L = s->m->cfg.n_layer;
    dcp_step_destroy(s->step);
    if (s->arch) s->m->ops->state_destroy(s);
    for (uint32_t i = 0; s->r && i < s->m->nl; i++) {
        dcp_graph_rank *r = &s->r[i];
        for (uint32_t l = 0; r->slots && l < L; l++) dcp_buffer_destroy(r->slots[l]);
        dcp_buffer *bufs[] = {r->x, r->xn, r->part, r->xo, r->ids, r->cs, r->logits, r->next};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) dcp_buffer_destroy(bufs[k]);
        free(r->slots);
    }
    for (uint32_t i = 0; s->caches && i < G * L; i++) dcp_kv_cache_destroy(s->caches[i]);
    for (uint32_t g = 0; s->gcomm && g < G; g++) dcp_comm_destroy(s->gcomm[g]);
    dcp_comm_destroy(s->comm);
    free(s->caches);
    free(s->gcomm);
    free(s->r);
    free(s->row_seq);
    free(s->row_len);
    free(s->row_pos);
    free(s->out_row);
    free(s->lens);
    free(s->bt);
    free(s->seq_len);
    free(s->seq_add);
    free(s->run_seq);
    free(s->run_count);
    free(s->fwd_rows);
    free(s);
}

const dcp_model_state_config *dcp_model_state_get_config(const dcp_model_state *s) { return &s->cfg; }

void dcp_model_state_free_seq(dcp_model_state *s, uint32_t seq)
{
    if (seq >= s->cfg.max_seqs) return;
    for (uint32_t i = 0; i < s->ng * s->m->cfg.n_layer; i++) dcp_kv_cache_free_seq(s->caches[i], seq);
    s->seq_len[seq] = 0;
}

void dcp_model_state_reset(dcp_model_state *s)
{
    for (uint32_t q = 0; q < s->cfg.max_seqs; q++)
        if (s->seq_len[q]) dcp_model_state_free_seq(s, q);
}

uint32_t dcp_model_state_seq_length(const dcp_model_state *s, uint32_t seq)
{
    return seq < s->cfg.max_seqs ? s->seq_len[seq] : 0;
}

uint32_t dcp_model_state_n_ctx(const dcp_model_state *s) { return s->cfg.n_ctx; }

/* Page accounting by the placement formulas, for every rank of a DCP group (held here or not): every
 * rank allocates the pages its shard needs, so every process computes the same figures without
 * communicating (steps are refused or run alike on all of them). */
uint32_t dcp_model_state_pages_total(const dcp_model_state *s) { return s->cfg.kv_pages; }

static uint32_t pages_used(const dcp_model_state *s, uint32_t r)
{
    uint64_t used = 0;
    for (uint32_t q = 0; q < s->cfg.max_seqs; q++) used += shard_pages(s, s->seq_len[q], r);
    return (uint32_t)used;
}

uint32_t dcp_model_state_pages_free(const dcp_model_state *s)
{
    uint32_t worst = s->cfg.kv_pages;
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        uint32_t f = s->cfg.kv_pages - pages_used(s, r);
        if (f < worst) worst = f;
    }
    return worst;
}

uint32_t dcp_model_state_pages_needed(const dcp_model_state *s, uint32_t seq, uint32_t add)
{
    if (seq >= s->cfg.max_seqs) return 0;
    uint32_t need = 0;
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        uint32_t n = shard_pages(s, (uint64_t)s->seq_len[seq] + add, r) - shard_pages(s, s->seq_len[seq], r);
        if (n > need) need = n;
    }
    return need;
}

uint32_t dcp_model_state_seq_pages(const dcp_model_state *s, uint32_t seq, uint32_t local)
{
    if (seq >= s->cfg.max_seqs || local >= s->m->nl) return 0;
    return shard_pages(s, s->seq_len[seq], s->r[local].gr);
}

/* Whether growing the sequences of a step (adds[q] tokens for sequence q) fits on every rank. */
dcp_status dcp_graph_check_pages(const dcp_model_state *s, const uint32_t *adds)
{
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        uint64_t need = 0;
        for (uint32_t q = 0; q < s->cfg.max_seqs; q++)
            if (adds[q]) need += shard_pages(s, (uint64_t)s->seq_len[q] + adds[q], r) - shard_pages(s, s->seq_len[q], r);
        uint32_t free_pages = s->cfg.kv_pages - pages_used(s, r);
        if (need > free_pages)
            return dcp_fail(DCP_ERR_OUT_OF_PAGES,
                            "model step: DCP rank %u needs %llu more KV pages of %u tokens, %u of %u are free",
                            r, (unsigned long long)need, s->cfg.block_size, free_pages, s->cfg.kv_pages);
    }
    return DCP_OK;
}

uint64_t dcp_model_state_kv_bytes(const dcp_model_state *s)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < s->m->cfg.n_layer; l++) {
        const dcp_kv_pool *p = dcp_kv_cache_pool(s->caches[l * s->ng], 0);
        b += dcp_kv_pool_page_bytes(p) * dcp_kv_pool_get_config(p)->num_pages;
    }
    return b;
}

uint64_t dcp_model_state_exchange_bytes(const dcp_model_state *s)
{
    uint64_t b = s->comm ? dcp_comm_bytes_sent(s->comm, 0) : 0;
    if (s->gcomm) b += dcp_comm_bytes_sent(s->gcomm[0], 0);
    return b;
}

uint64_t dcp_model_state_tokens_run(const dcp_model_state *s) { return s->tokens_run; }
uint32_t dcp_model_state_last_rounds(const dcp_model_state *s) { return dcp_step_last_rounds(s->step); }
bool dcp_model_state_last_replayed(const dcp_model_state *s) { return dcp_step_last_replayed(s->step); }
