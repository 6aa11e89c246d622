/* Automatic prefix caching of a run state (include/dcpvk/model.h, docs/design.md section 18).
 *
 * The unit is the global block: with DCP size N and pages of B tokens, positions [b B N, (b + 1) B N)
 * of a sequence are page b of its block table on every rank of a DCP group, whatever the
 * interleave (B is a multiple of I). A full block is a cache entry: its hash chains the previous
 * block's hash (the seed for block 0) and its B N token ids; it holds that page on every rank of
 * every layer's cache of every group held here (one hold each, src/kv/cache.c), and counts the
 * sequences whose block tables list it (refs). Entries with refs 0 stay until their pages are
 * needed, then go least recently released first (a list in release order); a sequence's blocks
 * are released last block first, so a block is never evicted before the blocks that follow it in
 * a chain.
 *
 * Page accounting (pages.c): a sequence's first `held` blocks are entries; on every DCP rank it
 * holds shard_pages(length) - held pages of its own, and the entries one page each, so that
 * used(r) = sum over sequences of (shard_pages - held) + entries, and the entries without refs
 * are reclaimable.
 *
 * KV offload (state config kv_offload_bytes): an entry evicted from the device pages may instead
 * go to a slot of a host-visible pool (one buffer per local rank: [slots][its page of every layer]),
 * keeping its place in the index with no device page (not counted in count or unref: the
 * accounting above is of device pages); an attach that reaches it copies it back into fresh
 * pages. Host slots are evicted oldest first when full. The slots are kv_offload_bytes over the
 * whole TP group's bytes of one block, the same on every MPI process, so that the index (and every
 * offload, host eviction and restore, which read only the index) stays the same on all of them. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/splitmix.h"
#include "kv/kv_internal.h"
#include "model/graph.h"

typedef struct pfx_entry {
    uint64_t hash;
    int32_t parent;  /* entry of the block before, or -1 for block 0 */
    int32_t next;    /* next entry of the same hash bucket, or -1 */
    int32_t lru_prev, lru_next; /* neighbours in the list of unreferenced entries (oldest first), or -1 */
    uint32_t refs;   /* sequences whose block tables list it */
    int32_t hslot;   /* host-resident (offloaded): its slot of the host pool; -1: device-resident */
    uint32_t gen;    /* times this index was let go of (an entry of another chain when reused) */
    uint32_t pgen;   /* the parent's gen when this entry was made: a child of a reused index never matches */
    bool used;
} pfx_entry;

struct dcp_prefix_cache {
    uint64_t seed;
    uint32_t bt;          /* tokens per global block: B * N */
    uint32_t cap;         /* entries at most: the pages of a rank's pool, plus the host slots */
    uint32_t n_caches, gn;/* KV caches (layers x groups held here), local ranks of each */
    uint32_t count, unref;
    uint64_t evictions;
    pfx_entry *e;         /* [cap] */
    int32_t *etoks;       /* [cap][bt] token ids of each entry */
    uint32_t *epages;     /* [cap][n_caches][gn] the page each entry holds in each cache */
    int32_t *free_e;      /* [cap] stack of unused entry indices */
    uint32_t n_free_e;
    int32_t *bucket;      /* [nbucket] first entry of each hash bucket, or -1 */
    uint32_t nbucket;     /* a power of two */
    uint32_t n_ctx, max_gblocks;
    int32_t *seq_toks;    /* [max_seqs][n_ctx] token ids of each sequence (its rows) */
    uint32_t *seq_held;   /* [max_seqs] leading blocks of each sequence that are entries */
    int32_t *seq_entry;   /* [max_seqs][max_gblocks] those entries */
    bool *seq_stop;       /* [max_seqs] no more registration (a block was cached already) */
    uint32_t *scratch;    /* [gn][max_gblocks] pages of an attach */
    int32_t lru_head, lru_tail; /* unreferenced device-resident entries, least recently released first */
    /* KV offload (the host tier): an entry evicted from the device pages keeps its place in the
     * index, its pages copied to a slot of the host pool; a lookup reaching it copies them back. */
    uint32_t hslots;      /* entries the host pool holds (0: offload off) */
    uint32_t nloc;        /* local ranks: ng x gn, local rank L = g gn + i */
    dcp_buffer **hbuf;    /* [nloc][hnseg] host-visible pool of each local rank, [hslots][hstride[L]] bytes
                           * in segments of hper[L] slots (each within the device's buffer limits) */
    uint32_t hnseg;       /* segments per local rank (the most any rank needs) */
    uint32_t *hper;       /* [nloc] slots per segment on local rank L */
    uint64_t *hstride;    /* [nloc] bytes of one entry on local rank L (its page of every layer) */
    uint64_t *hoff;       /* [n_caches][gn] offset of cache k's page within an entry's bytes */
    dcp_cmd **hcmd;       /* [nloc] transfer commands */
    dcp_cmd **hrun;       /* [nloc] those with something to run */
    bool *hrec;           /* [nloc] something recorded in hcmd[L] */
    int32_t *free_h;      /* [hslots] stack of unused host slots */
    uint32_t n_free_h, hcount;
    int32_t hlru_head, hlru_tail; /* host-resident entries no attach is restoring, oldest first */
    uint64_t to_host_blocks, to_host_bytes, to_dev_blocks, to_dev_bytes, host_evictions;
};

/* The list of unreferenced entries: an entry joins at the tail when its refs fall to 0 and leaves
 * when a sequence attaches it again or it is evicted (from the head). */
static void list_push(dcp_prefix_cache *p, int32_t *head, int32_t *tail, int32_t x)
{
    pfx_entry *e = &p->e[x];
    e->lru_prev = *tail;
    e->lru_next = -1;
    if (*tail >= 0) p->e[*tail].lru_next = x;
    else *head = x;
    *tail = x;
}

static void list_unlink(dcp_prefix_cache *p, int32_t *head, int32_t *tail, int32_t x)
{
    pfx_entry *e = &p->e[x];
    if (e->lru_prev >= 0) p->e[e->lru_prev].lru_next = e->lru_next;
    else *head = e->lru_next;
    if (e->lru_next >= 0) p->e[e->lru_next].lru_prev = e->lru_prev;
    else *tail = e->lru_prev;
    e->lru_prev = e->lru_next = -1;
}

static void lru_push(dcp_prefix_cache *p, int32_t x) { list_push(p, &p->lru_head, &p->lru_tail, x); }
static void lru_unlink(dcp_prefix_cache *p, int32_t x) { list_unlink(p, &p->lru_head, &p->lru_tail, x); }
/* An entry is on one list at most: the device LRU (device-resident, refs 0) or the host LRU. */
static void hlru_push(dcp_prefix_cache *p, int32_t x) { list_push(p, &p->hlru_head, &p->hlru_tail, x); }
static void hlru_unlink(dcp_prefix_cache *p, int32_t x) { list_unlink(p, &p->hlru_head, &p->hlru_tail, x); }

uint64_t dcp_prefix_block_hash(uint64_t parent, const int32_t *tokens, uint32_t n)
{
    uint64_t st = parent ^ 0x7072656669786b76ull; /* "prefixkv" */
    uint64_t h = dcp_splitmix64_next(&st);
    for (uint32_t i = 0; i < n; i++) {
        st ^= (uint64_t)(uint32_t)tokens[i] + ((uint64_t)i << 32);
        h ^= dcp_splitmix64_next(&st);
        h = (h << 13 | h >> 51) * 0x9E3779B97F4A7C15ull;
    }
    st ^= n;
    return h ^ dcp_splitmix64_next(&st);
}

/* The seed of the chains: everything besides the tokens that changes what a block's KV holds. */
static uint64_t state_seed(const dcp_model_state *s)
{
    const dcp_model *m = s->m;
    const dcp_model_config *mc = &m->cfg;
    uint64_t st = 0x646370766b706663ull, h = 0;
    const uint32_t words[] = {mc->arch, mc->n_embd, mc->n_layer, mc->n_head, mc->n_head_kv, mc->n_ff, mc->n_vocab,
                              mc->n_rot, mc->head_dim_qk, mc->n_expert, (uint32_t)s->cfg.kv_dtype, s->cfg.block_size,
                              m->dcp, s->cfg.interleave, m->tp, (uint32_t)mc->rope_scaling};
    const float floats[] = {mc->rope_freq_base, mc->rope_scaling_factor, mc->rope_yarn_log_mul,
                            mc->rope_yarn_beta_fast, mc->rope_yarn_beta_slow, mc->rms_eps};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        st ^= words[i];
        h ^= dcp_splitmix64_next(&st);
    }
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++) {
        uint32_t b;
        memcpy(&b, &floats[i], 4);
        st ^= b;
        h ^= dcp_splitmix64_next(&st);
    }
    for (const char *c = mc->arch_name; *c; c++) {
        st ^= (uint8_t)*c;
        h ^= dcp_splitmix64_next(&st);
    }
    st ^= m->file_bytes;
    h ^= dcp_splitmix64_next(&st);
    for (uint32_t i = 0; m->rope_freqs && i < mc->n_rot / 2; i++) {
        uint32_t b;
        memcpy(&b, &m->rope_freqs[i], 4);
        st ^= b;
        h ^= dcp_splitmix64_next(&st);
    }
    return h;
}

static void prefix_free(dcp_prefix_cache *p)
{
    if (!p) return;
    for (uint32_t L = 0; L < p->nloc; L++) {
        if (p->hcmd) dcp_cmd_destroy(p->hcmd[L]);
        for (uint32_t j = 0; p->hbuf && j < p->hnseg; j++) dcp_buffer_destroy(p->hbuf[(size_t)L * p->hnseg + j]);
    }
    free(p->hper);
    free(p->hcmd);
    free(p->hrun);
    free(p->hbuf);
    free(p->hstride);
    free(p->hoff);
    free(p->hrec);
    free(p->free_h);
    free(p->e);
    free(p->etoks);
    free(p->epages);
    free(p->free_e);
    free(p->bucket);
    free(p->seq_toks);
    free(p->seq_held);
    free(p->seq_entry);
    free(p->seq_stop);
    free(p->scratch);
    free(p);
}

/* Takes entry x out of the index (its pages or host slot let go of already). Its children, if any
 * stayed (host-resident ones may), no longer match (gen): the index never links a block to a
 * reused entry of another chain. */
static void unindex(dcp_prefix_cache *p, int32_t x)
{
    pfx_entry *e = &p->e[x];
    int32_t *link = &p->bucket[e->hash & (p->nbucket - 1)];
    while (*link != x) link = &p->e[*link].next;
    *link = e->next;
    e->gen++;
    e->used = false;
    p->free_e[p->n_free_e++] = x;
}

/* Lets go of device-resident entry x's page on every rank of every cache. */
static void drop_pages(dcp_model_state *s, int32_t x)
{
    dcp_prefix_cache *p = s->prefix;
    const uint32_t *pg = p->epages + (uint64_t)x * p->n_caches * p->gn;
    for (uint32_t k = 0; k < p->n_caches; k++)
        for (uint32_t i = 0; i < p->gn; i++) dcp_kv_cache_page_drop(s->caches[k], i, pg[k * p->gn + i]);
}

/* Removes entry x (refs 0, device- or host-resident) altogether. */
static void evict_entry(dcp_model_state *s, int32_t x)
{
    dcp_prefix_cache *p = s->prefix;
    pfx_entry *e = &p->e[x];
    if (e->hslot >= 0) {
        hlru_unlink(p, x);
        p->free_h[p->n_free_h++] = e->hslot;
        e->hslot = -1;
        p->hcount--;
    } else {
        lru_unlink(p, x);
        drop_pages(s, x);
        p->count--;
        p->unref--;
    }
    unindex(p, x);
}

/* Host-resident entry x takes a free page on every rank of every cache (one hold each, the
 * cache's), into its epages; on failure it holds none. */
static dcp_status take_pages(dcp_model_state *s, int32_t x)
{
    dcp_prefix_cache *p = s->prefix;
    uint32_t *pg = p->epages + (uint64_t)x * p->n_caches * p->gn;
    for (uint32_t j = 0; j < p->n_caches * p->gn; j++) {
        const dcp_status st = dcp_kv_cache_page_take(s->caches[j / p->gn], j % p->gn, &pg[j]);
        if (st != DCP_OK) {
            while (j-- > 0) dcp_kv_cache_page_drop(s->caches[j / p->gn], j % p->gn, pg[j]);
            return st;
        }
    }
    return DCP_OK;
}

/* Records the copies of entry x's pages between the device pools and host slot h (to_host: pool to
 * host, else host to pool), every cache and local rank, into the transfer commands. */
static dcp_status record_moves(dcp_model_state *s, int32_t x, int32_t h, bool to_host)
{
    dcp_status st = DCP_OK;
    dcp_prefix_cache *p = s->prefix;
    const uint32_t *pg = p->epages + (uint64_t)x * p->n_caches * p->gn;
    uint64_t bytes = 0;
    for (uint32_t k = 0; k < p->n_caches; k++)
        for (uint32_t i = 0; i < p->gn; i++) {
            const uint32_t L = k % s->ng * p->gn + i, page = pg[k * p->gn + i];
            dcp_kv_pool *pool = dcp_kv_cache_pool(s->caches[k], i);
            const uint64_t pb = dcp_kv_pool_page_bytes(pool);
            const uint32_t pps = dcp_kv_pool_pages_per_segment(pool);
            dcp_buffer *seg = dcp_kv_pool_segment(pool, page / pps);
            const uint64_t po = (uint64_t)(page % pps) * pb;
            dcp_buffer *hb = p->hbuf[(size_t)L * p->hnseg + h / p->hper[L]];
            const uint64_t ho = (uint64_t)(h % p->hper[L]) * p->hstride[L] + p->hoff[k * p->gn + i];
            if (to_host) DCP_TRY(dcp_cmd_copy(p->hcmd[L], seg, po, hb, ho, pb));
            else DCP_TRY(dcp_cmd_copy(p->hcmd[L], hb, ho, seg, po, pb));
            p->hrec[L] = true;
            bytes += pb;
        }
    if (to_host) {
        p->to_host_blocks++;
        p->to_host_bytes += bytes;
    } else {
        p->to_dev_blocks++;
        p->to_dev_bytes += bytes;
    }
    return DCP_OK;
fail:
    return dcp_fail_context(st, "KV offload: copying cached block %d %s host slot %d", x, to_host ? "to" : "from", h);
}

/* Runs the recorded transfers on every local rank's device (side by side, each on its queue) and
 * waits: a block's bytes are in host memory (or back in its pages) before a page is reused or read. */
static dcp_status flush_moves(dcp_prefix_cache *p)
{
    if (p->hslots == 0) return DCP_OK;
    const dcp_status st = dcp_graph_run_copies(p->hcmd, p->hrec, p->hrun, p->nloc, true);
    return st == DCP_OK ? DCP_OK : dcp_fail_context(st, "KV offload: transfers between device pages and host memory");
}

/* Device-resident entry x (refs 0) leaves the device pages: to a host slot when offload is on (the
 * oldest host-resident entry evicted when the host pool is full), else out of the cache. The
 * copies are recorded; the caller flushes them before the pages are reused. */
static dcp_status offload_entry(dcp_model_state *s, int32_t x)
{
    dcp_prefix_cache *p = s->prefix;
    if (p->hslots && p->n_free_h == 0 && p->hlru_head >= 0) {
        evict_entry(s, p->hlru_head);
        p->host_evictions++;
    }
    if (p->n_free_h == 0) { /* offload off, or every host slot is being restored */
        evict_entry(s, x);
        return DCP_OK;
    }
    const int32_t h = p->free_h[--p->n_free_h];
    dcp_status st = record_moves(s, x, h, true);
    if (st != DCP_OK) {
        p->free_h[p->n_free_h++] = h;
        return st;
    }
    lru_unlink(p, x);
    drop_pages(s, x);
    p->count--;
    p->unref--;
    p->e[x].hslot = h;
    p->hcount++;
    hlru_push(p, x);
    return DCP_OK;
}

void dcp_graph_prefix_destroy(dcp_model_state *s)
{
    prefix_free(s->prefix);
    s->prefix = NULL;
}

dcp_status dcp_model_state_set_prefix_caching(dcp_model_state *s, bool on)
{
    for (uint32_t q = 0; q < s->cfg.max_seqs; q++)
        if (s->seq_len[q])
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "prefix caching: turned on or off with sequence %u holding %u tokens; only an empty "
                            "run state changes it", q, s->seq_len[q]);
    if (!on) {
        if (s->prefix)
            for (uint32_t x = 0; x < s->prefix->cap; x++)
                if (s->prefix->e[x].used) evict_entry(s, (int32_t)x);
        dcp_graph_prefix_destroy(s);
        return DCP_OK;
    }
    if (s->prefix) return DCP_OK;
    dcp_prefix_cache *p = calloc(1, sizeof *p);
    if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    const uint32_t Q = s->cfg.max_seqs;
    p->seed = state_seed(s);
    p->bt = s->cfg.block_size * s->m->dcp;
    p->n_caches = s->ng * s->m->cfg.n_layer;
    p->gn = s->gn;
    p->nloc = s->ng * s->gn;
    /* The host tier: slots of one entry's bytes on every local rank (every layer's page). */
    p->hstride = calloc(p->nloc, sizeof *p->hstride);
    p->hoff = calloc((size_t)p->n_caches * p->gn, sizeof *p->hoff);
    if (!p->hstride || !p->hoff) {
        prefix_free(p);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the prefix cache's index");
    }
    for (uint32_t k = 0; k < p->n_caches; k++)
        for (uint32_t i = 0; i < p->gn; i++) {
            const uint32_t L = k % s->ng * p->gn + i;
            const uint64_t pb = dcp_kv_pool_page_bytes(dcp_kv_cache_pool(s->caches[k], i));
            p->hoff[k * p->gn + i] = p->hstride[L];
            p->hstride[L] += pb;
        }
    /* Host slots from the whole TP group's bytes of one entry (its page of every layer on every
     * rank, those of other MPI processes included), so that every process has the same slots and
     * the same index (the engine's step plans carry its attaches and commits in order; eviction to
     * host, host LRU eviction and restore read only the index and the page accounting, which is
     * by formula for every rank). Each process then allocates its ranks' share: slots x its local
     * ranks' bytes, at most nl / tp of kv_offload_bytes.
     * A rank's page bytes follow the KV pool's shape (KV heads, head size, dtype, page size), which
     * is the same on every rank: the architectures give every rank the same KV heads (llama
     * n_head_kv / tp, or 1 when TP exceeds them; deepseek2 one latent row). Checked here over the
     * local ranks. */
    for (uint32_t L = 1; s->cfg.kv_offload_bytes && L < p->nloc; L++)
        if (p->hstride[L] != p->hstride[0]) {
            const unsigned long long a = (unsigned long long)p->hstride[0], b = (unsigned long long)p->hstride[L];
            prefix_free(p);
            return dcp_fail(DCP_ERR_INTERNAL,
                            "KV offload: local rank %u's page of every layer takes %llu bytes, local rank 0's "
                            "%llu: the host slots assume ranks of equal KV shape", L, b, a);
        }
    const uint64_t group_bytes = p->nloc ? p->hstride[0] * s->m->tp : 0;
    const uint64_t slots = group_bytes ? s->cfg.kv_offload_bytes / group_bytes : 0;
    p->hslots = slots > (1u << 24) ? 1u << 24 : (uint32_t)slots;
    p->cap = s->cfg.kv_pages + p->hslots;
    p->n_ctx = s->cfg.n_ctx;
    p->max_gblocks = s->cfg.n_ctx / p->bt + 1;
    p->nbucket = 16;
    while (p->nbucket < 2 * p->cap) p->nbucket *= 2;
    p->e = calloc(p->cap, sizeof *p->e);
    p->etoks = malloc((size_t)p->cap * p->bt * sizeof *p->etoks);
    p->epages = malloc((size_t)p->cap * p->n_caches * p->gn * sizeof *p->epages);
    p->free_e = malloc((size_t)p->cap * sizeof *p->free_e);
    p->bucket = malloc((size_t)p->nbucket * sizeof *p->bucket);
    p->seq_toks = calloc((size_t)Q * p->n_ctx, sizeof *p->seq_toks);
    p->seq_held = calloc(Q, sizeof *p->seq_held);
    p->seq_entry = calloc((size_t)Q * p->max_gblocks, sizeof *p->seq_entry);
    p->seq_stop = calloc(Q, sizeof *p->seq_stop);
    p->scratch = malloc((size_t)p->gn * p->max_gblocks * sizeof *p->scratch);
    if (!p->e || !p->etoks || !p->epages || !p->free_e || !p->bucket || !p->seq_toks || !p->seq_held ||
        !p->seq_entry || !p->seq_stop || !p->scratch) {
        prefix_free(p);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the prefix cache's index");
    }
    p->hlru_head = p->hlru_tail = -1;
    if (p->hslots) {
        /* Segments: a buffer of one device stays within its storage-buffer range and allocation
         * limit (the copies do not bind it, but dcp_buffer_create holds every buffer to both). */
        p->hper = calloc(p->nloc, sizeof *p->hper);
        if (!p->hper) {
            prefix_free(p);
            return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the KV offload's index");
        }
        p->hnseg = 1;
        for (uint32_t L = 0; L < p->nloc; L++) {
            dcp_device *dev = dcp_kv_pool_device(dcp_kv_cache_pool(s->caches[L / p->gn], L % p->gn));
            const dcp_device_info *info = dcp_device_get_info(dev);
            uint64_t lim = info->max_storage_buffer_range;
            if (info->max_allocation_size && info->max_allocation_size < lim) lim = info->max_allocation_size;
            const uint64_t per = p->hstride[L] ? lim / p->hstride[L] : p->hslots;
            if (per == 0) {
                const uint64_t stride = p->hstride[L];
                prefix_free(p);
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "KV offload: one cached block takes %llu bytes on local rank %u, more than device %d's "
                                "buffer limit of %llu bytes (use a smaller block size)",
                                (unsigned long long)stride, L, info->logical_index, (unsigned long long)lim);
            }
            p->hper[L] = per < p->hslots ? (uint32_t)per : p->hslots;
            const uint32_t nseg = (p->hslots + p->hper[L] - 1) / p->hper[L];
            if (nseg > p->hnseg) p->hnseg = nseg;
        }
        p->hbuf = calloc((size_t)p->nloc * p->hnseg, sizeof *p->hbuf);
        p->hcmd = calloc(p->nloc, sizeof *p->hcmd);
        p->hrun = calloc(p->nloc, sizeof *p->hrun);
        p->hrec = calloc(p->nloc, sizeof *p->hrec);
        p->free_h = malloc((size_t)p->hslots * sizeof *p->free_h);
        if (!p->hbuf || !p->hcmd || !p->hrun || !p->hrec || !p->free_h) {
            prefix_free(p);
            return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the KV offload's index");
        }
        for (uint32_t L = 0; L < p->nloc; L++) {
            dcp_device *dev = dcp_kv_pool_device(dcp_kv_cache_pool(s->caches[L / p->gn], L % p->gn));
            dcp_status st = DCP_OK;
            for (uint32_t j = 0, first = 0; st == DCP_OK && first < p->hslots; j++, first += p->hper[L]) {
                const uint32_t n = p->hslots - first < p->hper[L] ? p->hslots - first : p->hper[L];
                st = dcp_buffer_create(dev, (uint64_t)n * p->hstride[L], DCP_MEMORY_HOST, &p->hbuf[(size_t)L * p->hnseg + j]);
            }
            if (st == DCP_OK) st = dcp_cmd_create(dev, &p->hcmd[L]);
            if (st != DCP_OK) {
                const unsigned long long bytes = (unsigned long long)((uint64_t)p->hslots * p->hstride[L]);
                const uint32_t slots = p->hslots;
                prefix_free(p);
                return dcp_fail_context(st, "KV offload: a host pool of %u blocks (%llu bytes) for local rank %u",
                                        slots, bytes, L);
            }
        }
        for (uint32_t h = 0; h < p->hslots; h++) p->free_h[h] = (int32_t)(p->hslots - 1 - h);
        p->n_free_h = p->hslots;
    }
    for (uint32_t x = 0; x < p->cap; x++) p->free_e[x] = (int32_t)(p->cap - 1 - x);
    p->n_free_e = p->cap;
    for (uint32_t b = 0; b < p->nbucket; b++) p->bucket[b] = -1;
    p->lru_head = p->lru_tail = -1;
    s->prefix = p;
    return DCP_OK;
}

bool dcp_model_state_prefix_caching(const dcp_model_state *s) { return s->prefix != NULL; }

/* The entry of block `block` with parent `parent`, hash h and tokens toks [bt], or -1. */
static int32_t find_entry(const dcp_prefix_cache *p, int32_t parent, uint64_t h, const int32_t *toks)
{
    for (int32_t x = p->bucket[h & (p->nbucket - 1)]; x >= 0; x = p->e[x].next) {
        const pfx_entry *e = &p->e[x];
        if (e->hash == h && e->parent == parent && (parent < 0 || e->pgen == p->e[parent].gen) &&
            !memcmp(p->etoks + (uint64_t)x * p->bt, toks, (size_t)p->bt * sizeof *toks))
            return x;
    }
    return -1;
}

/* Walks the chain of tokens [n] (at most n - 1 tokens cached: the last one is computed for its
 * logits); fills out [blocks] with the entries when out is not NULL. Returns the blocks found. */
static uint32_t walk(const dcp_prefix_cache *p, const int32_t *toks, uint32_t n, int32_t *out, uint32_t *revived)
{
    uint32_t blocks = 0, rev = 0;
    const uint32_t most = n ? (n - 1) / p->bt : 0;
    uint64_t h = p->seed;
    int32_t parent = -1;
    while (blocks < most && blocks < p->max_gblocks) {
        const int32_t *bt = toks + (uint64_t)blocks * p->bt;
        h = dcp_prefix_block_hash(h, bt, p->bt);
        int32_t x = find_entry(p, parent, h, bt);
        if (x < 0) break;
        rev += p->e[x].refs == 0;
        if (out) out[blocks] = x;
        parent = x;
        blocks++;
    }
    if (revived) *revived = rev;
    return blocks;
}

uint32_t dcp_model_state_prefix_lookup(const dcp_model_state *s, const int32_t *tokens, uint32_t n, uint32_t *revived)
{
    if (revived) *revived = 0;
    if (!s->prefix || !tokens) return 0;
    return walk(s->prefix, tokens, n, NULL, revived) * s->prefix->bt;
}

dcp_status dcp_model_state_prefix_attach(dcp_model_state *s, uint32_t seq, const int32_t *tokens, uint32_t n,
                                         uint32_t *cached)
{
    dcp_status st = DCP_OK;
    *cached = 0;
    dcp_prefix_cache *p = s->prefix;
    if (!p) return DCP_OK;
    if (seq >= s->cfg.max_seqs || s->seq_len[seq] || n > s->cfg.n_ctx)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "prefix attach: sequence %u must be an empty slot of the %u, with at most %u tokens (%u)", seq,
                        s->cfg.max_seqs, s->cfg.n_ctx, n);
    int32_t *ent = p->seq_entry + (uint64_t)seq * p->max_gblocks;
    uint32_t blocks = walk(p, tokens, n, ent, NULL), pinned = 0;
    if (blocks == 0) return DCP_OK;
    /* Host-resident blocks come back into fresh pages: the free ones, then those of unreferenced
     * device-resident entries outside this chain (offloaded in turn). Without room for all of
     * them, the chain ends before the first (the rest is computed: it takes a page either way). */
    uint32_t n_host = 0, chain_unref = 0;
    for (uint32_t b = 0; b < blocks; b++) {
        n_host += p->e[ent[b]].hslot >= 0;
        chain_unref += p->e[ent[b]].hslot < 0 && p->e[ent[b]].refs == 0;
    }
    const uint32_t free_now = dcp_graph_pages_free_now(s);
    if (n_host && (uint64_t)free_now + p->unref - chain_unref < n_host) {
        uint32_t b = 0;
        while (p->e[ent[b]].hslot < 0) b++;
        blocks = b;
        n_host = 0;
        if (blocks == 0) return DCP_OK;
    }
    for (uint32_t b = 0; b < blocks; b++) {
        pfx_entry *e = &p->e[ent[b]];
        if (e->hslot >= 0) hlru_unlink(p, ent[b]); /* held by this attach: no host eviction takes it */
        else if (e->refs == 0) {
            lru_unlink(p, ent[b]);
            p->unref--;
        }
        e->refs++;
    }
    pinned = blocks;
    /* Restores into the free pages first, so that the device entries evicted for the rest can take
     * the host slots those restores let go of. */
    for (uint32_t b = 0, left = n_host; left;) {
        uint32_t room = dcp_graph_pages_free_now(s);
        if (room == 0) {
            DCP_TRY(dcp_graph_prefix_evict(s, left));
            room = dcp_graph_pages_free_now(s);
        }
        if (room == 0) {
            st = dcp_fail(DCP_ERR_OUT_OF_PAGES, "KV offload: no free page to restore %u host-resident blocks into",
                          left);
            goto fail;
        }
        for (; b < blocks && room && left; b++) {
            pfx_entry *e = &p->e[ent[b]];
            if (e->hslot < 0) continue;
            DCP_TRY(take_pages(s, ent[b]));
            DCP_TRY(record_moves(s, ent[b], e->hslot, false));
            p->free_h[p->n_free_h++] = e->hslot; /* reused only after the flush below */
            e->hslot = -1;
            p->hcount--;
            p->count++;
            room--;
            left--;
        }
        DCP_TRY(flush_moves(p));
    }
    for (uint32_t k = 0; k < p->n_caches; k++) {
        for (uint32_t i = 0; i < p->gn; i++)
            for (uint32_t b = 0; b < blocks; b++)
                p->scratch[(uint64_t)i * blocks + b] = p->epages[((uint64_t)ent[b] * p->n_caches + k) * p->gn + i];
        /* Every cache checks the same things first: the first refuses or none does. */
        DCP_TRY(dcp_kv_cache_attach(s->caches[k], seq, blocks, p->scratch));
    }
    const uint32_t c = blocks * p->bt;
    memcpy(p->seq_toks + (uint64_t)seq * p->n_ctx, tokens, (size_t)c * sizeof *tokens);
    p->seq_held[seq] = blocks;
    p->seq_stop[seq] = false;
    s->seq_len[seq] = c;
    *cached = c;
    return DCP_OK;
fail:
    for (uint32_t b = pinned; b-- > 0;) { /* let go of the chain again: it stays cached */
        pfx_entry *e = &p->e[ent[b]];
        if (--e->refs) continue;
        if (e->hslot >= 0) hlru_push(p, ent[b]);
        else {
            lru_push(p, ent[b]);
            p->unref++;
        }
    }
    return dcp_fail_context(st, "prefix attach of sequence %u", seq);
}

dcp_status dcp_model_state_prefix_commit(dcp_model_state *s, uint32_t seq, uint32_t n)
{
    dcp_prefix_cache *p = s->prefix;
    if (!p) return DCP_OK;
    if (seq >= s->cfg.max_seqs || n > s->seq_len[seq])
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "prefix commit: sequence %u (of %u slots) holds %u tokens, fewer than the %u committed", seq,
                        s->cfg.max_seqs, seq < s->cfg.max_seqs ? s->seq_len[seq] : 0, n);
    int32_t *ent = p->seq_entry + (uint64_t)seq * p->max_gblocks;
    const int32_t *toks = p->seq_toks + (uint64_t)seq * p->n_ctx;
    while (!p->seq_stop[seq] && (uint64_t)(p->seq_held[seq] + 1) * p->bt <= n) {
        const uint32_t b = p->seq_held[seq];
        const int32_t parent = b ? ent[b - 1] : -1;
        const uint64_t h = dcp_prefix_block_hash(b ? p->e[parent].hash : p->seed, toks + (uint64_t)b * p->bt, p->bt);
        /* Computed already by another sequence (both prefilled it at once): this one keeps its own
         * copy, and its later blocks stay its own too (a chain has one entry per block). */
        if (find_entry(p, parent, h, toks + (uint64_t)b * p->bt) >= 0 || p->n_free_e == 0) {
            p->seq_stop[seq] = true;
            break;
        }
        const int32_t x = p->free_e[--p->n_free_e];
        p->e[x] = (pfx_entry){.hash = h, .parent = parent, .next = p->bucket[h & (p->nbucket - 1)], .refs = 1,
                              .lru_prev = -1, .lru_next = -1, .hslot = -1, .gen = p->e[x].gen,
                              .pgen = parent >= 0 ? p->e[parent].gen : 0, .used = true};
        p->bucket[h & (p->nbucket - 1)] = x;
        memcpy(p->etoks + (uint64_t)x * p->bt, toks + (uint64_t)b * p->bt, (size_t)p->bt * sizeof *toks);
        uint32_t *pg = p->epages + (uint64_t)x * p->n_caches * p->gn;
        for (uint32_t k = 0; k < p->n_caches; k++)
            for (uint32_t i = 0; i < p->gn; i++) {
                pg[k * p->gn + i] = dcp_kv_cache_block_table(s->caches[k], i, seq)[b];
                dcp_kv_cache_page_hold(s->caches[k], i, pg[k * p->gn + i]);
            }
        ent[b] = x;
        p->seq_held[seq]++;
        p->count++;
    }
    return DCP_OK;
}

void dcp_graph_prefix_record(dcp_model_state *s, uint32_t seq, uint32_t pos, int32_t token)
{
    if (s->prefix && pos < s->prefix->n_ctx) s->prefix->seq_toks[(uint64_t)seq * s->prefix->n_ctx + pos] = token;
}

uint32_t dcp_graph_prefix_held(const dcp_model_state *s, uint32_t seq)
{
    return s->prefix && seq < s->cfg.max_seqs ? s->prefix->seq_held[seq] : 0;
}

uint32_t dcp_graph_prefix_entries(const dcp_model_state *s) { return s->prefix ? s->prefix->count : 0; }
uint32_t dcp_graph_prefix_reclaimable(const dcp_model_state *s) { return s->prefix ? s->prefix->unref : 0; }

void dcp_graph_prefix_release(dcp_model_state *s, uint32_t seq)
{
    dcp_prefix_cache *p = s->prefix;
    if (!p || seq >= s->cfg.max_seqs) return;
    const int32_t *ent = p->seq_entry + (uint64_t)seq * p->max_gblocks;
    /* Last block first: the chain's tail is evicted before its head. */
    for (uint32_t b = p->seq_held[seq]; b-- > 0;) {
        pfx_entry *e = &p->e[ent[b]];
        if (--e->refs == 0) {
            lru_push(p, ent[b]);
            p->unref++;
        }
    }
    p->seq_held[seq] = 0;
    p->seq_stop[seq] = false;
}

dcp_status dcp_graph_prefix_share(dcp_model_state *s, uint32_t parent, uint32_t seq, uint32_t *blocks)
{
    *blocks = 0;
    dcp_prefix_cache *p = s->prefix;
    if (!p) return DCP_OK;
    const uint32_t n = p->seq_held[parent];
    const int32_t *pent = p->seq_entry + (uint64_t)parent * p->max_gblocks;
    int32_t *ent = p->seq_entry + (uint64_t)seq * p->max_gblocks;
    for (uint32_t k = 0; k < p->n_caches && n; k++) {
        for (uint32_t i = 0; i < p->gn; i++)
            for (uint32_t b = 0; b < n; b++)
                p->scratch[(uint64_t)i * n + b] = p->epages[((uint64_t)pent[b] * p->n_caches + k) * p->gn + i];
        const dcp_status st = dcp_kv_cache_attach(s->caches[k], seq, n, p->scratch);
        if (st != DCP_OK) return dcp_fail_context(st, "fork: sharing the cached blocks of sequence %u", parent);
    }
    for (uint32_t b = 0; b < n; b++) { /* the parent holds them: none is on the unreferenced list */
        ent[b] = pent[b];
        p->e[ent[b]].refs++;
    }
    memcpy(p->seq_toks + (uint64_t)seq * p->n_ctx, p->seq_toks + (uint64_t)parent * p->n_ctx,
           (size_t)s->seq_len[parent] * sizeof *p->seq_toks);
    p->seq_held[seq] = n;
    p->seq_stop[seq] = false;
    *blocks = n;
    return DCP_OK;
}

dcp_status dcp_graph_prefix_evict(dcp_model_state *s, uint32_t n)
{
    dcp_status st = DCP_OK;
    dcp_prefix_cache *p = s->prefix;
    while (p && n-- > 0 && p->lru_head >= 0) {
        DCP_TRY(offload_entry(s, p->lru_head));
        p->evictions++;
    }
    if (p) DCP_TRY(flush_moves(p));
    return DCP_OK;
fail:
    return st;
}

void dcp_model_state_prefix_stats(const dcp_model_state *s, dcp_prefix_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    const dcp_prefix_cache *p = s->prefix;
    if (!p) return;
    out->enabled = true;
    out->block_tokens = p->bt;
    out->blocks = p->count;
    out->blocks_unreferenced = p->unref;
    out->evictions = p->evictions;
    out->host_blocks = p->hcount;
    out->host_capacity = p->hslots;
    out->host_evictions = p->host_evictions;
    out->host_segments = p->hslots ? p->hnseg : 0;
    for (uint32_t L = 0; p->hslots && L < p->nloc; L++)
        if (!L || p->hper[L] < out->host_segment_blocks) out->host_segment_blocks = p->hper[L];
    /* The whole TP group's bytes: every local rank copies the same bytes per block (checked when
     * the host pool was made), and under MPI every process copies the same blocks. */
    const uint64_t tp = s->m->tp, nloc = p->nloc ? p->nloc : 1;
    out->offloaded_blocks = p->to_host_blocks;
    out->offloaded_bytes = p->to_host_bytes / nloc * tp;
    out->restored_blocks = p->to_dev_blocks;
    out->restored_bytes = p->to_dev_bytes / nloc * tp;
    out->seed = p->seed;
}
