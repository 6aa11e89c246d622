/* Paged KV cache storage: a pool of equal pages on one device, split over several storage buffers
 * (segments) so that no binding exceeds the device's maxStorageBufferRange or allocation limit.
 *
 * Page layout: K[kv_heads][page_size][head_dim] followed by V[kv_heads][page_size][head_dim], in
 * the pool's dtype. Page p lives in segment p / pages_per_segment. */
#ifndef DCPVK_KV_H
#define DCPVK_KV_H

#include <stdint.h>

#include "dcpvk/dtype.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_kv_pool dcp_kv_pool;

typedef struct dcp_kv_pool_config {
    uint32_t kv_heads;   /* KV heads stored per token (no default; >= 1) */
    uint32_t head_dim;   /* D: multiple of 4, at most 256 (no default) */
    uint32_t page_size;  /* tokens per page (default 16) */
    dcp_dtype dtype;     /* element type (default f16) */
    uint32_t num_pages;  /* pages in the pool (no default; >= 1) */
} dcp_kv_pool_config;

#define DCP_KV_POOL_CONFIG_DEFAULT {0, 0, 16, DCP_DTYPE_F16, 0}

/* Creates the pool's segments on dev (device-local memory, zero-filled). Errors: unsupported head
 * dim (DCP_ERR_UNSUPPORTED), a page larger than the device's binding range, more segments than
 * DCP_KV_MAX_SEGMENTS (DCP_ERR_INVALID_ARGUMENT), allocation failure (DCP_ERR_OUT_OF_MEMORY).
 * Destroy with dcp_kv_pool_destroy before the device's context. */
dcp_status dcp_kv_pool_create(dcp_device *dev, const dcp_kv_pool_config *config, dcp_kv_pool **out);
void dcp_kv_pool_destroy(dcp_kv_pool *pool);

const dcp_kv_pool_config *dcp_kv_pool_get_config(const dcp_kv_pool *pool);
dcp_device *dcp_kv_pool_device(const dcp_kv_pool *pool);
/* Bytes of one page (K and V). */
uint64_t dcp_kv_pool_page_bytes(const dcp_kv_pool *pool);
uint32_t dcp_kv_pool_pages_per_segment(const dcp_kv_pool *pool);
uint32_t dcp_kv_pool_segment_count(const dcp_kv_pool *pool);
dcp_buffer *dcp_kv_pool_segment(const dcp_kv_pool *pool, uint32_t i);

/* Uploads `count` whole pages starting at page `first` from data (count * page_bytes bytes, page
 * layout above, pool dtype). Synchronous. */
dcp_status dcp_kv_pool_write_pages(dcp_kv_pool *pool, uint32_t first, uint32_t count, const void *data);

#ifdef __cplusplus
}
#endif
#endif
