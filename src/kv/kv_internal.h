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

#endif
