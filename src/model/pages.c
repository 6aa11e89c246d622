/* Page accounting of a model state by the placement formulas, for every rank of a DCP group (held
 * here or not): every rank allocates the pages its shard needs, so every process computes the same
 * figures without communicating (steps are refused or run alike on all of them). Read by the state
 * (its sizes), the step (dcp_graph_check_pages before the KV appends) and the engine's scheduler
 * (through include/dcpvk/model.h). */
#include "common/error.h"
#include "model/graph.h"

/* Pages of a sequence's shard of `length` tokens on DCP rank r (N ranks, pages of B, interleave I). */
uint32_t dcp_graph_shard_pages(uint32_t N, uint32_t B, uint32_t I, uint64_t length, uint32_t r)
{
    uint64_t local = N == 1 ? length : dcp_kv_local_length(length, r, N, I);
    return (uint32_t)((local + B - 1) / B);
}

static uint32_t shard_pages(const dcp_model_state *s, uint64_t length, uint32_t r)
{
    return dcp_graph_shard_pages(s->m->dcp, s->cfg.block_size, s->cfg.interleave, length, r);
}

uint32_t dcp_model_state_pages_total(const dcp_model_state *s) { return s->cfg.kv_pages; }

/* Pages of rank r's pool in use: each sequence's own (its shard less the leading blocks that are
 * prefix-cache entries or shared within its fork group), one per cache entry (src/model/prefix.c),
 * referenced or not, and one per shared block of each fork group (src/model/fork.c). */
static uint32_t pages_used(const dcp_model_state *s, uint32_t r)
{
    uint64_t used = dcp_graph_prefix_entries(s) + dcp_graph_fork_pages(s);
    for (uint32_t q = 0; q < s->cfg.max_seqs; q++)
        used += shard_pages(s, s->seq_len[q], r) - dcp_graph_prefix_held(s, q) - dcp_graph_fork_shared(s, q);
    return (uint32_t)used;
}

/* Free pages of rank r, counting the cached blocks no sequence references as free (they are
 * evicted when a step needs their pages). */
static uint32_t pages_avail(const dcp_model_state *s, uint32_t r)
{
    return s->cfg.kv_pages - pages_used(s, r) + dcp_graph_prefix_reclaimable(s);
}

uint32_t dcp_model_state_pages_free(const dcp_model_state *s)
{
    uint32_t worst = s->cfg.kv_pages;
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        uint32_t f = pages_avail(s, r);
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

uint32_t dcp_model_state_shard_pages(const dcp_model_state *s, uint64_t length, uint32_t r)
{
    return r < s->m->dcp ? shard_pages(s, length, r) : 0;
}

uint32_t dcp_model_state_rank_pages_free(const dcp_model_state *s, uint32_t r)
{
    return r < s->m->dcp ? pages_avail(s, r) : 0;
}

/* Pages rank r takes to grow the sequences by adds[q] tokens each. */
static uint64_t step_need(const dcp_model_state *s, const uint32_t *adds, uint32_t r)
{
    uint64_t need = 0;
    for (uint32_t q = 0; q < s->cfg.max_seqs; q++)
        if (adds[q]) need += shard_pages(s, (uint64_t)s->seq_len[q] + adds[q], r) - shard_pages(s, s->seq_len[q], r);
    return need;
}

uint32_t dcp_graph_rank_free_now(const dcp_model_state *s, uint32_t r) { return s->cfg.kv_pages - pages_used(s, r); }

uint32_t dcp_graph_pages_free_now(const dcp_model_state *s)
{
    uint32_t worst = s->cfg.kv_pages;
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        const uint32_t f = s->cfg.kv_pages - pages_used(s, r);
        if (f < worst) worst = f;
    }
    return worst;
}

dcp_status dcp_graph_make_room(dcp_model_state *s, const uint32_t *adds)
{
    uint64_t short_by = 0;
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        const uint64_t need = step_need(s, adds, r), free_now = s->cfg.kv_pages - pages_used(s, r);
        if (need > free_now && need - free_now > short_by) short_by = need - free_now;
    }
    return short_by ? dcp_graph_prefix_evict(s, (uint32_t)short_by) : DCP_OK;
}

/* Whether growing the sequences of a step (adds[q] tokens for sequence q) fits on every rank. */
dcp_status dcp_graph_check_pages(const dcp_model_state *s, const uint32_t *adds)
{
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        const uint64_t need = step_need(s, adds, r);
        uint32_t free_pages = pages_avail(s, r);
        if (need > free_pages)
            return dcp_fail(DCP_ERR_OUT_OF_PAGES,
                            "model step: DCP rank %u needs %llu more KV pages of %u tokens, %u of %u are free",
                            r, (unsigned long long)need, s->cfg.block_size, free_pages, s->cfg.kv_pages);
    }
    return DCP_OK;
}
