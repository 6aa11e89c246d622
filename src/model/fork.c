/* Forks of a sequence (dcp_model_state_fork_seq, include/dcpvk/model.h; docs/design.md section 18):
 * a child that starts as a copy of its parent, sharing the parent's full global blocks and holding
 * device copies of the pages after them.
 *
 * With prefix caching on, the shared blocks are the parent's cache entries (prefix.c counts them).
 * Off, the sequences that share pages form a fork group: each member lists the group's first
 * shared[q] pages (the same page at each index on every member that lists it: a child shares a
 * prefix of its parent's shared list, or, from a parent outside any group, the parent's full
 * blocks, the parent's own list raised to them), so the group's distinct pages are its largest
 * shared count, one page per block on every rank, and the page accounting (pages.c) counts them
 * once, the members' shards less their shared blocks on top. A group of one member is dissolved
 * (its pages are its own again). Only the pages past the shared blocks are written: they are the
 * members' own, so a shared page is never written after the fork (copy on write without the
 * write: it is the last, partial block that is copied, and a full block is never appended to). */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "kv/kv_internal.h"
#include "model/graph.h"

typedef struct dcp_fork_state {
    int32_t *group;     /* [max_seqs] each sequence's fork group, -1: none */
    uint32_t *shared;   /* [max_seqs] its leading global blocks shared within the group */
    uint32_t *gmax;     /* [max_seqs] scratch: the most shared blocks of each group */
    uint32_t *gcount;   /* [max_seqs] scratch: members of each group */
    uint32_t pages;     /* distinct shared pages of every group, per rank */
    dcp_cmd **cmd;      /* [ng * gn] copy commands of each local rank (L = g gn + i), created lazily */
    dcp_cmd **run;      /* [ng * gn] scratch: those with copies to run */
    bool *rec;          /* [ng * gn] whether cmd[L] holds copies */
} dcp_fork_state;

static void fork_free(dcp_fork_state *f, uint32_t nloc)
{
    if (!f) return;
    for (uint32_t L = 0; f->cmd && L < nloc; L++) dcp_cmd_destroy(f->cmd[L]);
    free(f->cmd);
    free(f->run);
    free(f->rec);
    free(f->group);
    free(f->shared);
    free(f->gmax);
    free(f->gcount);
    free(f);
}

void dcp_graph_fork_destroy(dcp_model_state *s)
{
    fork_free(s->fork, s->ng * s->gn);
    s->fork = NULL;
}

static dcp_status fork_state(dcp_model_state *s, dcp_fork_state **out)
{
    if (s->fork) {
        *out = s->fork;
        return DCP_OK;
    }
    const uint32_t Q = s->cfg.max_seqs, nloc = s->ng * s->gn;
    dcp_fork_state *f = calloc(1, sizeof *f);
    if (f) {
        f->group = malloc(Q * sizeof *f->group);
        f->shared = calloc(Q, sizeof *f->shared);
        f->gmax = calloc(Q, sizeof *f->gmax);
        f->gcount = calloc(Q, sizeof *f->gcount);
        f->cmd = calloc(nloc, sizeof *f->cmd);
        f->run = calloc(nloc, sizeof *f->run);
        f->rec = calloc(nloc, sizeof *f->rec);
    }
    if (!f || !f->group || !f->shared || !f->gmax || !f->gcount || !f->cmd || !f->run || !f->rec) {
        fork_free(f, nloc);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the fork groups");
    }
    for (uint32_t q = 0; q < Q; q++) f->group[q] = -1;
    *out = s->fork = f;
    return DCP_OK;
}

/* Recounts the groups' distinct pages, dissolving groups of one member. */
static void recount(dcp_model_state *s)
{
    dcp_fork_state *f = s->fork;
    const uint32_t Q = s->cfg.max_seqs;
    memset(f->gmax, 0, Q * sizeof *f->gmax);
    memset(f->gcount, 0, Q * sizeof *f->gcount);
    for (uint32_t q = 0; q < Q; q++)
        if (f->group[q] >= 0) {
            const uint32_t g = (uint32_t)f->group[q];
            f->gcount[g]++;
            if (f->shared[q] > f->gmax[g]) f->gmax[g] = f->shared[q];
        }
    f->pages = 0;
    for (uint32_t q = 0; q < Q; q++) {
        if (f->group[q] < 0) continue;
        if (f->gcount[f->group[q]] < 2) {
            f->group[q] = -1;
            f->shared[q] = 0;
        }
    }
    for (uint32_t g = 0; g < Q; g++)
        if (f->gcount[g] >= 2) f->pages += f->gmax[g];
}

uint32_t dcp_graph_fork_shared(const dcp_model_state *s, uint32_t seq)
{
    return s->fork && seq < s->cfg.max_seqs ? s->fork->shared[seq] : 0;
}

uint32_t dcp_graph_fork_pages(const dcp_model_state *s) { return s->fork ? s->fork->pages : 0; }

void dcp_graph_fork_release(dcp_model_state *s, uint32_t seq)
{
    if (!s->fork || seq >= s->cfg.max_seqs || s->fork->group[seq] < 0) return;
    s->fork->group[seq] = -1;
    s->fork->shared[seq] = 0;
    recount(s);
}

dcp_status dcp_graph_fork_check_truncate(const dcp_model_state *s, uint32_t seq, uint32_t length)
{
    const uint64_t shared = (uint64_t)dcp_graph_fork_shared(s, seq) * s->cfg.block_size * s->m->dcp;
    if (length < shared)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "model state: truncating sequence %u to %u tokens, inside its first %llu tokens, whose pages "
                        "it shares with the sequences forked with it", seq, length, (unsigned long long)shared);
    return DCP_OK;
}

/* The global blocks a fork of parent shares: its cache entries (prefix caching on), its group's
 * blocks (in a group), else its full blocks. */
static uint32_t share_blocks(const dcp_model_state *s, uint32_t parent)
{
    if (s->prefix) return dcp_graph_prefix_held(s, parent);
    if (s->fork && s->fork->group[parent] >= 0) return s->fork->shared[parent];
    return s->seq_len[parent] / (s->cfg.block_size * s->m->dcp);
}

uint32_t dcp_model_state_fork_pages(const dcp_model_state *s, uint32_t parent, uint32_t r)
{
    if (parent >= s->cfg.max_seqs || r >= s->m->dcp || !s->seq_len[parent]) return 0;
    return dcp_model_state_shard_pages(s, s->seq_len[parent], r) - share_blocks(s, parent);
}

/* Records the copies of parent's pages past block `from` into child's (every layer's cache, every
 * local rank) and runs them, waiting. */
static dcp_status copy_pages(dcp_model_state *s, dcp_fork_state *f, uint32_t parent, uint32_t child, uint32_t from)
{
    dcp_status st = DCP_OK;
    const uint32_t nloc = s->ng * s->gn, n_caches = s->ng * s->m->cfg.n_layer;
    for (uint32_t k = 0; k < n_caches; k++)
        for (uint32_t i = 0; i < s->gn; i++) {
            const uint32_t L = k % s->ng * s->gn + i;
            dcp_kv_pool *pool = dcp_kv_cache_pool(s->caches[k], i);
            const uint32_t *pbt = dcp_kv_cache_block_table(s->caches[k], i, parent);
            const uint32_t *cbt = dcp_kv_cache_block_table(s->caches[k], i, child);
            const uint32_t B = s->cfg.block_size;
            const uint32_t n = (dcp_kv_cache_seq_local_length(s->caches[k], i, parent) + B - 1) / B;
            if (n <= from) continue;
            if (!f->cmd[L]) DCP_TRY(dcp_cmd_create(dcp_kv_pool_device(pool), &f->cmd[L]));
            const uint64_t pb = dcp_kv_pool_page_bytes(pool);
            const uint32_t pps = dcp_kv_pool_pages_per_segment(pool);
            for (uint32_t b = from; b < n; b++)
                DCP_TRY(dcp_cmd_copy(f->cmd[L], dcp_kv_pool_segment(pool, pbt[b] / pps), (uint64_t)(pbt[b] % pps) * pb,
                                     dcp_kv_pool_segment(pool, cbt[b] / pps), (uint64_t)(cbt[b] % pps) * pb, pb));
            f->rec[L] = true;
        }
    /* page copies -> the next step's attention reads */
    st = dcp_graph_run_copies(f->cmd, f->rec, f->run, nloc, false);
    if (st != DCP_OK) goto fail;
    return DCP_OK;
fail:
    return dcp_fail_context(st, "fork: copying the last pages of sequence %u into sequence %u", parent, child);
}

dcp_status dcp_model_state_fork_seq(dcp_model_state *s, uint32_t parent, uint32_t child, uint32_t *shared)
{
    dcp_status st = DCP_OK;
    if (shared) *shared = 0;
    const uint32_t Q = s->cfg.max_seqs, bt = s->cfg.block_size * s->m->dcp;
    if (parent >= Q || child >= Q || parent == child || !s->seq_len[parent] || s->seq_len[child])
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "fork: sequence %u into %u (slots 0..%u; the parent must hold tokens, the child none, and "
                        "they must differ)", parent, child, Q - 1);
    dcp_fork_state *f = NULL;
    DCP_TRY(fork_state(s, &f));
    const uint32_t share = share_blocks(s, parent);
    /* Room on every rank's free lists for the copies: unreferenced cached blocks go first. */
    uint32_t short_by = 0;
    for (uint32_t r = 0; r < s->m->dcp; r++) {
        const uint32_t need = dcp_model_state_fork_pages(s, parent, r), have = dcp_graph_rank_free_now(s, r);
        if (need > have && need - have > short_by) short_by = need - have;
    }
    if (short_by) DCP_TRY(dcp_graph_prefix_evict(s, short_by));
    for (uint32_t r = 0; r < s->m->dcp; r++)
        if (dcp_model_state_fork_pages(s, parent, r) > dcp_graph_rank_free_now(s, r))
            return dcp_fail(DCP_ERR_OUT_OF_PAGES, "fork: sequence %u into %u needs %u pages on DCP rank %u, %u are free",
                            parent, child, dcp_model_state_fork_pages(s, parent, r), r, dcp_graph_rank_free_now(s, r));
    uint32_t from = 0;
    DCP_TRY(dcp_graph_prefix_share(s, parent, child, &from));
    const uint32_t n_caches = s->ng * s->m->cfg.n_layer;
    for (uint32_t k = 0; k < n_caches; k++) {
        st = dcp_kv_cache_fork(s->caches[k], child, parent, from, share);
        if (st != DCP_OK) { /* cannot happen after the checks above; undo what was done */
            s->seq_len[child] = from * bt;
            dcp_model_state_free_seq(s, child);
            goto fail;
        }
    }
    s->seq_len[child] = s->seq_len[parent];
    if (!s->prefix && share) {
        if (f->group[parent] < 0) {
            uint32_t g = 0; /* a group id no sequence uses */
            for (bool used = true; used; g += used) {
                used = false;
                for (uint32_t q = 0; q < Q && !used; q++) used = f->group[q] == (int32_t)g;
            }
            f->group[parent] = (int32_t)g;
            f->shared[parent] = share;
        }
        f->group[child] = f->group[parent];
        f->shared[child] = share;
        recount(s);
    }
    st = copy_pages(s, f, parent, child, share);
    if (st != DCP_OK) {
        dcp_model_state_free_seq(s, child);
        return st;
    }
    if (shared) *shared = share * bt;
    return DCP_OK;
fail:
    return dcp_fail_context(st, "fork of sequence %u into %u", parent, child);
}
