/* Internals of the KV module for the code that records shaders over a KV page pool (kv_append in
 * src/kv/cache.c, paged and latent decode in src/attn/, rope_store and mla_kv_store in src/ops/). */
#ifndef DCP_KV_INTERNAL_H
#define DCP_KV_INTERNAL_H

#include "dcpvk/kv.h"
#include "kernels/kv_params.h"
#include "kernels/kernels.h"

/* Fills out [DCP_KV_MAX_SEGMENTS] with the descriptors of pool's segment array binding (the last
 * binding of kv_append, rope_store, mla_kv_store and the paged and latent decode kernels,
 * shaders/common/kv_pool.glsl): segment s whole
 * for s < the pool's segment count, segment 0 again for the rest (never read, but every descriptor
 * of the array must be valid). Thread-safe; the pool must outlive the recording. */
void dcp_kv_pool_bindings(const dcp_kv_pool *pool, dcp_binding *out);

/* ---- shared pages (automatic prefix caching, src/model/prefix.c) ---------------------------
 * Every page has a count of holders: each sequence whose block table lists it, and each hold
 * taken here; it returns to the free list when the last one lets go. The model's prefix cache
 * holds the pages of its cached blocks, so that they outlive the sequences that computed them,
 * and attaches them to the sequences that start with the same tokens. */

/* One more hold on page `page` of local rank i (a page in use; a free page is left alone). */
void dcp_kv_cache_page_hold(dcp_kv_cache *kc, uint32_t i, uint32_t page);
/* Lets go of one hold on page `page` of local rank i (freeing it when it was the last). */
void dcp_kv_cache_page_drop(dcp_kv_cache *kc, uint32_t i, uint32_t page);
/* Takes a free page of local rank i with one hold (the caller's): *page. DCP_ERR_OUT_OF_PAGES when
 * none is free (KV offload restores a host-resident block into it, src/model/prefix.c). */
dcp_status dcp_kv_cache_page_take(dcp_kv_cache *kc, uint32_t i, uint32_t *page);
/* Holders of page `page` of local rank i (0: free). */
uint32_t dcp_kv_cache_page_refs(const dcp_kv_cache *kc, uint32_t i, uint32_t page);
/* Empty sequence s starts with `blocks` whole global blocks held elsewhere: on local rank i its
 * block-table entry b becomes pages[i * blocks + b] (each page gets one more holder), and its
 * length blocks * page_size * dcp_size tokens (global block b is page b of every rank: the
 * placement rule puts positions [b B N, (b + 1) B N) there, for every interleave).
 * DCP_ERR_INVALID_ARGUMENT (nothing changed) for a busy slot, too many blocks or a free page. */
dcp_status dcp_kv_cache_attach(dcp_kv_cache *kc, uint32_t s, uint32_t blocks, const uint32_t *pages);
/* Sequence s (its first `from` whole global blocks attached already, the same pages as parent's,
 * or empty with from 0) becomes as long as sequence parent: on every local rank its block-table
 * entries from .. share - 1 become parent's pages (one more holder each) and the rest of parent's
 * page count fresh pages of its own, which the caller fills (a copy of parent's pages: the block
 * tables say which). DCP_ERR_INVALID_ARGUMENT / DCP_ERR_OUT_OF_PAGES with nothing changed. */
dcp_status dcp_kv_cache_fork(dcp_kv_cache *kc, uint32_t s, uint32_t parent, uint32_t from, uint32_t share);

#endif
