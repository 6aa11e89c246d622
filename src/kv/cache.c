/* KV cache of a DCP group (see include/dcpvk/kv.h): per local rank a page pool, a free list and
 * per-sequence block tables; tokens placed by the interleaved rule; the kv_append recording. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/kv.h"
#include "kv/kv_internal.h"
#include "kernels/kernels.h"

typedef struct kv_rank {
    dcp_kv_pool *pool;
    uint32_t *free_pages; /* stack of free page ids */
    uint32_t free_count;
    uint32_t *bt;         /* [max_seqs][max_blocks] page ids */
    uint32_t *pages;      /* [max_seqs] pages held per sequence */
    uint32_t *ref;        /* [num_pages] holders of each page (block tables, prefix-cache holds);
                           * a page is on the free list exactly when it has none */
    uint32_t *slots;      /* [slot_cap] slot table of the last append */
    dcp_buffer *slot_buf; /* device copy of slots */
    uint32_t slot_buf_cap;
} kv_rank;

struct dcp_kv_cache {
    dcp_kv_cache_config cfg;
    uint32_t local_count;
    kv_rank *ranks;
    uint64_t *lengths;    /* [max_seqs] global lengths */
    uint32_t append_tokens;
    uint32_t slot_cap;
    uint64_t page_bytes;  /* K and V of one page, bytes */
};

dcp_status dcp_kv_cache_create(dcp_device *const *devices, uint32_t local_count,
                               const dcp_kv_cache_config *c, dcp_kv_cache **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    st = dcp_kv_placement_check(c->dcp_size, c->interleave, c->pool.page_size);
    if (st != DCP_OK) return dcp_fail_context(st, "KV cache");
    if (local_count == 0 || c->first_rank + local_count > c->dcp_size)
        return dcp_fail(DCP_ERR_CONFIG,
                        "KV cache: local ranks [%u, %u) do not fit in a DCP group of %u ranks",
                        c->first_rank, c->first_rank + local_count, c->dcp_size);
    if (c->max_seqs == 0 || c->max_blocks == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: max_seqs (%u) and max_blocks (%u) must be >= 1",
                        c->max_seqs, c->max_blocks);
    dcp_kv_cache *kc = calloc(1, sizeof *kc);
    if (!kc) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    kc->cfg = *c;
    kc->ranks = calloc(local_count, sizeof *kc->ranks);
    kc->lengths = calloc(c->max_seqs, sizeof *kc->lengths);
    if (!kc->ranks || !kc->lengths) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    kc->local_count = local_count;
    if (c->host_only && (c->pool.kv_heads == 0 || c->pool.head_dim == 0 || c->pool.page_size == 0 ||
                         c->pool.num_pages == 0)) {
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: kv_heads, head_dim, page_size and num_pages must be >= 1");
        goto fail;
    }
    kc->page_bytes = (c->pool.k_only ? 1ull : 2ull) * c->pool.kv_heads * c->pool.page_size *
                     dcp_kv_row_bytes(c->pool.dtype, c->pool.head_dim);
    for (uint32_t i = 0; i < local_count; i++) {
        kv_rank *r = &kc->ranks[i];
        if (!c->host_only) DCP_TRY(dcp_kv_pool_create(devices[i], &c->pool, &r->pool));
        r->free_pages = malloc((size_t)c->pool.num_pages * sizeof *r->free_pages);
        r->bt = calloc((size_t)c->max_seqs * c->max_blocks, sizeof *r->bt);
        r->pages = calloc(c->max_seqs, sizeof *r->pages);
        r->ref = calloc(c->pool.num_pages, sizeof *r->ref);
        if (!r->free_pages || !r->bt || !r->pages || !r->ref) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        /* Page 0 is handed out first. */
        for (uint32_t p = 0; p < c->pool.num_pages; p++) r->free_pages[p] = c->pool.num_pages - 1 - p;
        r->free_count = c->pool.num_pages;
    }
    *out = kc;
    return DCP_OK;
fail:
    dcp_kv_cache_destroy(kc);
    return st;
}

void dcp_kv_cache_destroy(dcp_kv_cache *kc)
{
    if (!kc) return;
    for (uint32_t i = 0; kc->ranks && i < kc->local_count; i++) {
        kv_rank *r = &kc->ranks[i];
        dcp_kv_pool_destroy(r->pool);
        dcp_buffer_destroy(r->slot_buf);
        free(r->free_pages);
        free(r->bt);
        free(r->pages);
        free(r->ref);
        free(r->slots);
    }
    free(kc->ranks);
    free(kc->lengths);
    free(kc);
}

const dcp_kv_cache_config *dcp_kv_cache_get_config(const dcp_kv_cache *kc) { return &kc->cfg; }
uint32_t dcp_kv_cache_local_count(const dcp_kv_cache *kc) { return kc->local_count; }
dcp_kv_pool *dcp_kv_cache_pool(const dcp_kv_cache *kc, uint32_t i)
{
    return i < kc->local_count ? kc->ranks[i].pool : NULL;
}

static uint32_t pages_for(uint64_t tokens, uint32_t page_size)
{
    return (uint32_t)((tokens + page_size - 1) / page_size);
}

dcp_status dcp_kv_cache_append(dcp_kv_cache *kc, uint32_t n, const uint32_t *seqs, const uint32_t *counts)
{
    const dcp_kv_cache_config *c = &kc->cfg;
    const uint32_t N = c->dcp_size, I = c->interleave, B = c->pool.page_size;
    uint64_t total = 0;
    /* Check everything first: all or nothing. */
    for (uint32_t j = 0; j < n; j++) {
        if (seqs[j] >= c->max_seqs)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: sequence %u outside the %u slots", seqs[j],
                            c->max_seqs);
        for (uint32_t k = 0; k < j; k++)
            if (seqs[k] == seqs[j])
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: sequence %u listed twice in one append",
                                seqs[j]);
        total += counts[j];
    }
    if (total > 0xfffffffull)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: %llu tokens in one append", (unsigned long long)total);
    for (uint32_t i = 0; i < kc->local_count; i++) {
        kv_rank *r = &kc->ranks[i];
        uint32_t rank = c->first_rank + i;
        uint64_t need = 0;
        for (uint32_t j = 0; j < n; j++) {
            uint64_t len = dcp_kv_cache_seq_length(kc, seqs[j]) + counts[j];
            uint32_t pages = pages_for(dcp_kv_local_length(len, rank, N, I), B);
            if (pages > c->max_blocks)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "KV cache: sequence %u at %llu tokens needs %u pages on rank %u, more than "
                                "its %u block-table entries",
                                seqs[j], (unsigned long long)len, pages, rank, c->max_blocks);
            need += pages - r->pages[seqs[j]];
        }
        if (need > r->free_count)
            return dcp_fail(DCP_ERR_OUT_OF_PAGES,
                            "KV cache: rank %u needs %llu more pages for this append (sequence %u first) "
                            "but has %u free of %u",
                            rank, (unsigned long long)need, n ? seqs[0] : 0, r->free_count,
                            c->pool.num_pages);
    }
    if (total > kc->slot_cap) {
        for (uint32_t i = 0; i < kc->local_count; i++) {
            uint32_t *s = realloc(kc->ranks[i].slots, total * sizeof *s);
            if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            kc->ranks[i].slots = s;
        }
        kc->slot_cap = (uint32_t)total;
    }
    /* Apply: allocate pages and compute slots. */
    for (uint32_t i = 0; i < kc->local_count; i++) {
        kv_rank *r = &kc->ranks[i];
        uint32_t rank = c->first_rank + i;
        uint32_t t = 0;
        for (uint32_t j = 0; j < n; j++) {
            uint32_t s = seqs[j];
            uint64_t len = kc->lengths[s] + counts[j];
            uint32_t pages = pages_for(dcp_kv_local_length(len, rank, N, I), B);
            uint32_t *bt = r->bt + (uint64_t)s * c->max_blocks;
            while (r->pages[s] < pages) {
                const uint32_t p = r->free_pages[--r->free_count];
                r->ref[p] = 1;
                bt[r->pages[s]++] = p;
            }
            for (uint64_t pos = kc->lengths[s]; pos < len; pos++, t++) {
                if (dcp_kv_owner(pos, N, I) != rank) {
                    r->slots[t] = DCP_KV_NO_SLOT;
                    continue;
                }
                uint64_t li = dcp_kv_local_index(pos, N, I);
                r->slots[t] = bt[li / B] * B + (uint32_t)(li % B);
            }
        }
    }
    for (uint32_t j = 0; j < n; j++) kc->lengths[seqs[j]] += counts[j];
    kc->append_tokens = (uint32_t)total;
    return DCP_OK;
}

uint32_t dcp_kv_cache_append_tokens(const dcp_kv_cache *kc) { return kc->append_tokens; }

const uint32_t *dcp_kv_cache_append_slots(const dcp_kv_cache *kc, uint32_t i)
{
    return i < kc->local_count ? kc->ranks[i].slots : NULL;
}

dcp_status dcp_kv_cache_record_append(dcp_cmd *cmd, dcp_kv_cache *kc, uint32_t i, dcp_buffer *k,
                                      uint64_t k_offset, dcp_buffer *v, uint64_t v_offset)
{
    dcp_status st = DCP_OK;
    if (i >= kc->local_count)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: local rank %u of %u", i, kc->local_count);
    kv_rank *r = &kc->ranks[i];
    uint32_t T = kc->append_tokens;
    if (!r->pool)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV append: the cache is host_only (no device pools)");
    if (kc->cfg.pool.k_only)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV append: the pools are K-only (an MLA latent cache is "
                        "written by its own store, dcp_op_mla_kv_store)");
    if (T == 0) return DCP_OK;
    dcp_device *dev = dcp_kv_pool_device(r->pool);
    if (dcp_cmd_device(cmd) != dev)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV append: the command is not on local rank %u's device", i);
    if (r->slot_buf_cap < T) {
        dcp_buffer_destroy(r->slot_buf);
        r->slot_buf = NULL;
        r->slot_buf_cap = 0;
        DCP_TRY(dcp_buffer_create(dev, dcp_kv_cache_slot_bytes(T), DCP_MEMORY_DEVICE, &r->slot_buf));
        r->slot_buf_cap = T;
    }
    DCP_TRY(dcp_buffer_upload(r->slot_buf, 0, r->slots, (uint64_t)T * 4));
    const dcp_kv_pool_config *pc = &kc->cfg.pool;
    DCP_TRY(dcp_kv_pool_record_store(cmd, r->pool, r->slot_buf, T, k, k_offset, v, v_offset,
                                     pc->kv_heads * pc->head_dim));
    return DCP_OK;
fail:
    return dcp_fail_context(st, "KV append on local rank %u", i);
}

dcp_status dcp_kv_pool_record_store(dcp_cmd *cmd, dcp_kv_pool *pool, dcp_buffer *slots, uint32_t tokens,
                                    dcp_buffer *k, uint64_t k_offset, dcp_buffer *v, uint64_t v_offset,
                                    uint32_t src_stride)
{
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(pool);
    dcp_device *dev = dcp_kv_pool_device(pool);
    if (pc->k_only)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV store: the pool is K-only (an MLA latent cache is "
                        "written by its own store, dcp_op_mla_kv_store)");
    if (dcp_cmd_device(cmd) != dev)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV store: the command is not on the pool's device");
    const uint32_t row = pc->kv_heads * pc->head_dim;
    if (src_stride < row || src_stride % 4)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "KV store: source row stride %u floats (need a multiple of 4, at least %u)", src_stride, row);
    if (tokens == 0) return DCP_OK;
    const uint64_t rows_bytes = ((uint64_t)(tokens - 1) * src_stride + row) * 4;
    if (dcp_buffer_size(slots) < (uint64_t)tokens * 4 || k_offset + rows_bytes > dcp_buffer_size(k) ||
        v_offset + rows_bytes > dcp_buffer_size(v))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV store: %u tokens do not fit the slot, K or V buffer", tokens);
    dcp_binding b[3 + DCP_KV_MAX_SEGMENTS];
    b[0] = (dcp_binding){slots, 0, (uint64_t)tokens * 4};
    b[1] = (dcp_binding){k, k_offset, rows_bytes};
    b[2] = (dcp_binding){v, v_offset, rows_bytes};
    dcp_kv_pool_bindings(pool, b + 3);
    dcp_kv_append_params p = {tokens, pc->kv_heads, pc->head_dim, pc->page_size,
                              dcp_kv_pool_pages_per_segment(pool), pc->num_pages, src_stride};
    uint32_t spec[1] = {dcp_vk_workgroup_size(dev)};
    /* Invocations: one per 4 values (f32, f16) or per pair of q8_0 blocks (64 values). */
    const uint32_t per_row = pc->dtype == DCP_DTYPE_Q8_0 ? (pc->head_dim + 63) / 64 : pc->head_dim / 4;
    uint64_t n = (uint64_t)tokens * pc->kv_heads * per_row;
    dcp_kernel_id id = pc->dtype == DCP_DTYPE_Q8_0 ? DCP_KERNEL_KV_APPEND_Q8_0
                         : pc->dtype == DCP_DTYPE_F16 ? DCP_KERNEL_KV_APPEND_F16
                                                      : DCP_KERNEL_KV_APPEND_F32;
    return dcp_kernel_dispatch(cmd, id, spec, b, &p, (uint32_t)((n + spec[0] - 1) / spec[0]), 1, 1);
}

/* Drops one holder of page p of rank r; the last one returns it to the free list. */
static void drop_page(kv_rank *r, uint32_t p)
{
    if (r->ref[p] && --r->ref[p] == 0) r->free_pages[r->free_count++] = p;
}

/* Drops sequence s's hold on its pages of rank r beyond its first `keep`, last first (pages no
 * one else holds go back to the free list). */
static void release_pages(const dcp_kv_cache *kc, kv_rank *r, uint32_t s, uint32_t keep)
{
    uint32_t *bt = r->bt + (uint64_t)s * kc->cfg.max_blocks;
    while (r->pages[s] > keep) {
        drop_page(r, bt[--r->pages[s]]);
        bt[r->pages[s]] = 0;
    }
}

void dcp_kv_cache_page_hold(dcp_kv_cache *kc, uint32_t i, uint32_t page)
{
    if (i < kc->local_count && page < kc->cfg.pool.num_pages && kc->ranks[i].ref[page]) kc->ranks[i].ref[page]++;
}

void dcp_kv_cache_page_drop(dcp_kv_cache *kc, uint32_t i, uint32_t page)
{
    if (i < kc->local_count && page < kc->cfg.pool.num_pages) drop_page(&kc->ranks[i], page);
}

dcp_status dcp_kv_cache_page_take(dcp_kv_cache *kc, uint32_t i, uint32_t *page)
{
    if (i >= kc->local_count || kc->ranks[i].free_count == 0)
        return dcp_fail(DCP_ERR_OUT_OF_PAGES, "KV cache: no free page on local rank %u (of %u) to take", i,
                        kc->local_count);
    kv_rank *r = &kc->ranks[i];
    *page = r->free_pages[--r->free_count];
    r->ref[*page] = 1;
    return DCP_OK;
}

uint32_t dcp_kv_cache_page_refs(const dcp_kv_cache *kc, uint32_t i, uint32_t page)
{
    return i < kc->local_count && page < kc->cfg.pool.num_pages ? kc->ranks[i].ref[page] : 0;
}

dcp_status dcp_kv_cache_attach(dcp_kv_cache *kc, uint32_t s, uint32_t blocks, const uint32_t *pages)
{
    const dcp_kv_cache_config *c = &kc->cfg;
    if (s >= c->max_seqs || kc->lengths[s] != 0 || blocks > c->max_blocks)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "KV cache: attaching %u blocks to sequence %u (it must be an empty slot of the %u, and "
                        "the blocks at most its %u block-table entries)",
                        blocks, s, c->max_seqs, c->max_blocks);
    for (uint32_t i = 0; i < kc->local_count; i++)
        for (uint32_t b = 0; b < blocks; b++) {
            const uint32_t p = pages[(uint64_t)i * blocks + b];
            if (p >= c->pool.num_pages || kc->ranks[i].ref[p] == 0)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "KV cache: attaching page %u on local rank %u, which is not a held page of the %u",
                                p, i, c->pool.num_pages);
        }
    for (uint32_t i = 0; i < kc->local_count; i++) {
        kv_rank *r = &kc->ranks[i];
        uint32_t *bt = r->bt + (uint64_t)s * c->max_blocks;
        for (uint32_t b = 0; b < blocks; b++) {
            bt[b] = pages[(uint64_t)i * blocks + b];
            r->ref[bt[b]]++;
        }
        r->pages[s] = blocks;
    }
    kc->lengths[s] = (uint64_t)blocks * c->pool.page_size * c->dcp_size;
    return DCP_OK;
}

dcp_status dcp_kv_cache_fork(dcp_kv_cache *kc, uint32_t s, uint32_t parent, uint32_t from, uint32_t share)
{
    const dcp_kv_cache_config *c = &kc->cfg;
    const uint64_t bt_tokens = (uint64_t)c->pool.page_size * c->dcp_size;
    if (s >= c->max_seqs || parent >= c->max_seqs || s == parent || kc->lengths[s] != from * bt_tokens ||
        (uint64_t)share * bt_tokens > kc->lengths[parent] || from > share)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "KV cache: forking sequence %u from %u (slots of the %u; the child must hold exactly its %u "
                        "attached blocks, and the %u shared blocks lie within the parent's %llu tokens)",
                        s, parent, c->max_seqs, from, share, (unsigned long long)kc->lengths[parent]);
    for (uint32_t i = 0; i < kc->local_count; i++) {
        const kv_rank *r = &kc->ranks[i];
        if (r->pages[parent] - share > r->free_count)
            return dcp_fail(DCP_ERR_OUT_OF_PAGES, "KV cache: forking sequence %u from %u takes %u pages on local rank "
                            "%u, %u are free", s, parent, r->pages[parent] - share, i, r->free_count);
    }
    for (uint32_t i = 0; i < kc->local_count; i++) {
        kv_rank *r = &kc->ranks[i];
        uint32_t *bt = r->bt + (uint64_t)s * c->max_blocks;
        const uint32_t *pbt = r->bt + (uint64_t)parent * c->max_blocks;
        for (uint32_t b = from; b < share; b++) r->ref[bt[b] = pbt[b]]++;
        for (uint32_t b = share; b < r->pages[parent]; b++) {
            bt[b] = r->free_pages[--r->free_count];
            r->ref[bt[b]] = 1;
        }
        r->pages[s] = r->pages[parent];
    }
    kc->lengths[s] = kc->lengths[parent];
    return DCP_OK;
}

void dcp_kv_cache_free_seq(dcp_kv_cache *kc, uint32_t s)
{
    if (s >= kc->cfg.max_seqs) return;
    for (uint32_t i = 0; i < kc->local_count; i++) release_pages(kc, &kc->ranks[i], s, 0);
    kc->lengths[s] = 0;
}

dcp_status dcp_kv_cache_truncate_seq(dcp_kv_cache *kc, uint32_t s, uint64_t length)
{
    const dcp_kv_cache_config *c = &kc->cfg;
    if (s >= c->max_seqs)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: truncating sequence %u outside the %u slots", s,
                        c->max_seqs);
    if (length > kc->lengths[s])
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "KV cache: truncating sequence %u of %llu tokens to %llu (longer)",
                        s, (unsigned long long)kc->lengths[s], (unsigned long long)length);
    for (uint32_t i = 0; i < kc->local_count; i++) {
        uint64_t local = dcp_kv_local_length(length, c->first_rank + i, c->dcp_size, c->interleave);
        release_pages(kc, &kc->ranks[i], s, pages_for(local, c->pool.page_size));
    }
    kc->lengths[s] = length;
    return DCP_OK;
}

uint64_t dcp_kv_cache_seq_length(const dcp_kv_cache *kc, uint32_t s)
{
    return s < kc->cfg.max_seqs ? kc->lengths[s] : 0;
}

uint32_t dcp_kv_cache_seq_local_length(const dcp_kv_cache *kc, uint32_t i, uint32_t s)
{
    return (uint32_t)dcp_kv_local_length(dcp_kv_cache_seq_length(kc, s), kc->cfg.first_rank + i,
                                         kc->cfg.dcp_size, kc->cfg.interleave);
}

const uint32_t *dcp_kv_cache_block_table(const dcp_kv_cache *kc, uint32_t i, uint32_t s)
{
    if (i >= kc->local_count || s >= kc->cfg.max_seqs) return NULL;
    return kc->ranks[i].bt + (uint64_t)s * kc->cfg.max_blocks;
}

uint32_t dcp_kv_cache_pages_used(const dcp_kv_cache *kc, uint32_t i)
{
    return i < kc->local_count ? kc->cfg.pool.num_pages - kc->ranks[i].free_count : 0;
}

uint32_t dcp_kv_cache_pages_free(const dcp_kv_cache *kc, uint32_t i)
{
    return i < kc->local_count ? kc->ranks[i].free_count : 0;
}

uint64_t dcp_kv_cache_bytes_used(const dcp_kv_cache *kc, uint32_t i)
{
    return i < kc->local_count ? (uint64_t)dcp_kv_cache_pages_used(kc, i) * kc->page_bytes : 0;
}

uint64_t dcp_kv_cache_slot_bytes(uint32_t tokens) { return (uint64_t)tokens * 4; }
