/* Paged KV cache storage: a pool of equal pages on one device, split over several storage buffers
 * (segments) so that no binding exceeds the device's maxStorageBufferRange or allocation limit.
 *
 * Page layout: K[kv_heads][page_size][row] followed by V[kv_heads][page_size][row], a row being
 * head_dim values of the pool's dtype (f32, f16), or for q8_0 head_dim int8 values then the f16
 * scales of the row's blocks of 32 (dcp_kv_row_bytes; word layout in src/kernels/kv_params.h); a K-only pool (k_only, MLA's latent cache: each row [c_kv | k_pe], the values
 * being the first kv_lora entries of the same row) has no V part. Page p lives in segment
 * p / pages_per_segment.
 *
 * DCP: a dcp_kv_cache holds one pool per rank of a DCP group and places every token on one rank
 * by the interleaved rule (owner, local index, local length below). */
#ifndef DCPVK_KV_H
#define DCPVK_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/dtype.h"
#include "dcpvk/export.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_kv_pool dcp_kv_pool;

typedef struct dcp_kv_pool_config {
    uint32_t kv_heads;   /* KV heads stored per token (no default; >= 1) */
    uint32_t head_dim;   /* D: multiple of 4, at most DCP_KV_MAX_HEAD_DIM (no default); the GQA
                          * decode reads K+V pools of D <= 256, the MLA decode K-only pools of
                          * kv_lora + rope (576 for DeepSeek) */
    uint32_t page_size;  /* tokens per page (default 16) */
    dcp_dtype dtype;     /* element type (default f16): f32, f16, or q8_0 (head_dim a multiple of
                          * 32; written quantized by kv_append, dequantized in the decode) */
    uint32_t num_pages;  /* pages in the pool (no default; >= 1) */
    uint32_t k_only;     /* 1: pages hold K rows only, no V (MLA's latent cache); default 0: K then V */
} dcp_kv_pool_config;

#define DCP_KV_POOL_CONFIG_DEFAULT {.page_size = 16, .dtype = DCP_DTYPE_F16}

/* Longest row a pool stores (elements). */
#define DCP_KV_MAX_HEAD_DIM 1024

/* Bytes of one stored row of head_dim values of dtype: head_dim * 4 (f32), head_dim * 2 (f16);
 * q8_0: head_dim int8 values then head_dim / 32 f16 scales padded to a multiple of 4 bytes
 * (136 bytes for head_dim 128: 1.0625 bytes per value). A page holds (k_only ? 1 : 2) * kv_heads
 * * page_size rows. */
DCP_API uint64_t dcp_kv_row_bytes(dcp_dtype dtype, uint32_t head_dim);

/* Creates the pool's segments on dev (device-local memory, zero-filled). Errors: unsupported head
 * dim (DCP_ERR_UNSUPPORTED), a page larger than the device's binding range, more segments than
 * a pool may span (64; DCP_ERR_INVALID_ARGUMENT), allocation failure (DCP_ERR_OUT_OF_MEMORY).
 * Destroy with dcp_kv_pool_destroy before the device's context. */
DCP_API dcp_status dcp_kv_pool_create(dcp_device *dev, const dcp_kv_pool_config *config, dcp_kv_pool **out);
DCP_API void dcp_kv_pool_destroy(dcp_kv_pool *pool);
/* Device bytes dcp_kv_pool_create would allocate on dev for config (*bytes: every segment;
 * *largest: the largest segment), with the same checks and errors, allocating nothing. */
DCP_API dcp_status dcp_kv_pool_bytes(const dcp_device *dev, const dcp_kv_pool_config *config, uint64_t *bytes,
                                     uint64_t *largest);

DCP_API const dcp_kv_pool_config *dcp_kv_pool_get_config(const dcp_kv_pool *pool);
DCP_API dcp_device *dcp_kv_pool_device(const dcp_kv_pool *pool);
/* Bytes of one page (K and V, or K only). */
DCP_API uint64_t dcp_kv_pool_page_bytes(const dcp_kv_pool *pool);
DCP_API uint32_t dcp_kv_pool_pages_per_segment(const dcp_kv_pool *pool);
DCP_API uint32_t dcp_kv_pool_segment_count(const dcp_kv_pool *pool);
DCP_API dcp_buffer *dcp_kv_pool_segment(const dcp_kv_pool *pool, uint32_t i);

/* Records the kv_append shader (f32 rows converted to the pool's dtype; q8_0 pools quantize) on
 * cmd, cmd being on the pool's device: token t < tokens goes to slot slots[t] of the pool
 * (page * page_size + offset) unless it is DCP_KV_NO_SLOT or past the pool. slots: device buffer
 * [tokens] u32; k, v: row t of the token's K (and V) heads [kv_heads][head_dim] f32 starts at float
 * t * src_stride from k_offset (v_offset). K+V pools only. dcp_kv_cache_record_append uses it; the
 * model uses it for q8_0 pools after RoPE. */
DCP_API dcp_status dcp_kv_pool_record_store(dcp_cmd *cmd, dcp_kv_pool *pool, dcp_buffer *slots, uint32_t tokens,
                                            dcp_buffer *k, uint64_t k_offset, dcp_buffer *v, uint64_t v_offset,
                                            uint32_t src_stride);

/* Uploads `count` whole pages starting at page `first` from data (count * page_bytes bytes, page
 * layout above, pool dtype). Synchronous. */
DCP_API dcp_status dcp_kv_pool_write_pages(dcp_kv_pool *pool, uint32_t first, uint32_t count, const void *data);

/* ---- interleaved placement (docs/design.md section 4) ---------------------------------- */
/* DCP size N (ranks of the group), interleave I (tokens in a row on one rank), positions and
 * lengths in tokens. Pure functions, thread-safe. */

/* Checks N >= 1, 1 <= I <= page_size and page_size % I == 0; DCP_ERR_CONFIG names what is wrong. */
DCP_API dcp_status dcp_kv_placement_check(uint32_t dcp_size, uint32_t interleave, uint32_t page_size);
/* owner(p) = (p / I) mod N: the rank that stores position p. */
DCP_API uint32_t dcp_kv_owner(uint64_t pos, uint32_t dcp_size, uint32_t interleave);
/* local(p) = (p / (I*N)) * I + p mod I: index of position p inside its owner's shard. */
DCP_API uint64_t dcp_kv_local_index(uint64_t pos, uint32_t dcp_size, uint32_t interleave);
/* L_r: tokens rank r stores of a sequence of `length` tokens. */
DCP_API uint64_t dcp_kv_local_length(uint64_t length, uint32_t rank, uint32_t dcp_size, uint32_t interleave);
/* The longest sequence whose shard fits in `pages` pages of page_size tokens on every rank (rank 0
 * holds the most): with C = pages * page_size, (C / I) * I * N + C mod I tokens. Counts instead of
 * allocating, so capacity planning answers at once for any size; a host_only dcp_kv_cache accepts
 * exactly this many (tests/test_capacity.c checks it). */
DCP_API uint64_t dcp_kv_max_length(uint64_t pages, uint32_t page_size, uint32_t dcp_size, uint32_t interleave);

/* ---- KV cache of a DCP group: per-rank page pools, free lists and per-sequence block tables --- */

typedef struct dcp_kv_cache dcp_kv_cache;

typedef struct dcp_kv_cache_config {
    dcp_kv_pool_config pool; /* every rank's pool (num_pages: pages per rank) */
    uint32_t dcp_size;       /* N: ranks in the DCP group (default 1) */
    uint32_t first_rank;     /* group rank of local rank 0 (default 0; MPI: this process's first) */
    uint32_t interleave;     /* I: tokens in a row on one rank, divides pool.page_size (default 1) */
    uint32_t max_seqs;       /* sequence slots 0..max_seqs-1 (no default; >= 1) */
    uint32_t max_blocks;     /* block-table entries per sequence and rank (no default; >= 1) */
    bool host_only;          /* page accounting only, no device pools (capacity planning; devices
                              * may be NULL; record_append fails). Default false. */
} dcp_kv_cache_config;

#define DCP_KV_CACHE_CONFIG_DEFAULT                                                                \
    {.pool = DCP_KV_POOL_CONFIG_DEFAULT, .dcp_size = 1, .first_rank = 0, .interleave = 1,          \
     .host_only = false}

/* Creates one pool per local rank: devices[i] holds group rank first_rank + i (local_count
 * devices, first_rank + local_count <= dcp_size). Errors: DCP_ERR_CONFIG for a bad placement
 * (dcp_kv_placement_check), pool errors (dcp_kv_pool_create). The devices must outlive the cache.
 * Destroy with dcp_kv_cache_destroy. Not thread-safe. */
DCP_API dcp_status dcp_kv_cache_create(dcp_device *const *devices, uint32_t local_count,
                                       const dcp_kv_cache_config *config, dcp_kv_cache **out);
DCP_API void dcp_kv_cache_destroy(dcp_kv_cache *cache);

DCP_API const dcp_kv_cache_config *dcp_kv_cache_get_config(const dcp_kv_cache *cache);
DCP_API uint32_t dcp_kv_cache_local_count(const dcp_kv_cache *cache);
/* Pool of local rank i (owned by the cache; NULL for a host_only cache). */
DCP_API dcp_kv_pool *dcp_kv_cache_pool(const dcp_kv_cache *cache, uint32_t local);

/* Host step of appending tokens: sequence seqs[j] grows by counts[j] tokens (j < n, distinct
 * slots). Reserves on every local rank the pages its shard needs, all or nothing: when any rank
 * lacks pages, returns DCP_ERR_OUT_OF_PAGES naming the rank and the sequence and changes nothing.
 * Computes each new token's destination slot on its owner (the other ranks skip it) for the next
 * dcp_kv_cache_record_append; tokens are numbered sequence by sequence in position order. */
DCP_API dcp_status dcp_kv_cache_append(dcp_kv_cache *cache, uint32_t n, const uint32_t *seqs,
                                       const uint32_t *counts);
/* Tokens of the last dcp_kv_cache_append (the rows k and v must hold). */
DCP_API uint32_t dcp_kv_cache_append_tokens(const dcp_kv_cache *cache);
/* Records the kv_append shader of local rank `local` on its command: writes the K and V rows of
 * the tokens this rank owns, k and v [tokens][kv_heads][head_dim] f32 (the same on every rank),
 * converted to the pool dtype (K+V pools; K-only pools are written by their model's own store,
 * DCP_ERR_INVALID_ARGUMENT here). Uploads the slot table (synchronously) into a per-rank buffer that
 * the recording reads: submit before the next dcp_kv_cache_append. */
DCP_API dcp_status dcp_kv_cache_record_append(dcp_cmd *cmd, dcp_kv_cache *cache, uint32_t local, dcp_buffer *k,
                                              uint64_t k_offset, dcp_buffer *v, uint64_t v_offset);
/* Device bytes of the slot table record_append keeps per local rank once a step appended `tokens`
 * tokens (it grows to the largest step's). */
DCP_API uint64_t dcp_kv_cache_slot_bytes(uint32_t tokens);
/* Returns every page of sequence seq on every local rank to the free lists; its length becomes 0. */
DCP_API void dcp_kv_cache_free_seq(dcp_kv_cache *cache, uint32_t seq);

/* Global length of sequence seq (tokens), and the tokens / pages local rank i holds of it. */
DCP_API uint64_t dcp_kv_cache_seq_length(const dcp_kv_cache *cache, uint32_t seq);
DCP_API uint32_t dcp_kv_cache_seq_local_length(const dcp_kv_cache *cache, uint32_t local, uint32_t seq);
/* Block table [max_blocks] page ids of seq on local rank i (entries past its pages are 0). */
DCP_API const uint32_t *dcp_kv_cache_block_table(const dcp_kv_cache *cache, uint32_t local, uint32_t seq);
/* Pages in use / free on local rank i, and bytes in use (pages * page bytes). */
DCP_API uint32_t dcp_kv_cache_pages_used(const dcp_kv_cache *cache, uint32_t local);
DCP_API uint32_t dcp_kv_cache_pages_free(const dcp_kv_cache *cache, uint32_t local);
DCP_API uint64_t dcp_kv_cache_bytes_used(const dcp_kv_cache *cache, uint32_t local);

/* Slot table of the last append on local rank i: [tokens] page * page_size + offset, or
 * UINT32_MAX (not stored on this rank) for tokens another rank owns. */
DCP_API const uint32_t *dcp_kv_cache_append_slots(const dcp_kv_cache *cache, uint32_t local);

#ifdef __cplusplus
}
#endif
#endif
