/* KV page pool constants and the push constants of the KV cache shaders (kv_append), shared by C
 * and GLSL (shaders/common/kv_pool.glsl holds the page addressing built on them). */
#ifndef DCP_KV_PARAMS_H
#define DCP_KV_PARAMS_H
#include "common/params_begin.h"

/* Maximum number of storage buffers (segments) one KV page pool spans; each segment is at most
 * the device's maxStorageBufferRange. The shaders bind the segments as one array binding of this
 * many descriptors. */
#define DCP_KV_MAX_SEGMENTS 64

/* Slot value meaning "not stored on this rank" in slot tables (dcp_kv_cache_append_slots): the
 * token belongs to another rank of the DCP group, and the shaders skip it. UINT32_MAX. */
#define DCP_KV_NO_SLOT 0xffffffffu

/* q8_0 KV rows (DCP_DTYPE_Q8_0): a row of D values (D a multiple of DCP_KV_Q8_BLOCK) is D / 4 words
 * of int8 values (value i in byte i % 4 of word i / 4, little-endian) followed by the f16 scales of
 * its D / 32 blocks, two per word (block b in the low half of word b / 2 when b is even, the high
 * half when odd), padded to a whole word: DCP_KV_Q8_ROW_WORDS(D) words in all. Values and scales
 * are ggml's block_q8_0 (d = max|x| / 127, q = round(x / d)); only their order in memory differs,
 * so that every load is an aligned 32-bit word. */
#define DCP_KV_Q8_BLOCK 32u
#define DCP_KV_Q8_ROW_WORDS(d) ((d) / 4u + ((d) + 63u) / 64u)

/* kv_append: one invocation per (token, KV head, 4 dims); q8_0 pools: per (token, KV head, pair of
 * blocks), which quantizes the pair and writes its values and its scale word. Token t goes to slot
 * slots[t] = page * page_size + offset of the pool, or nowhere when slots[t] == DCP_KV_NO_SLOT
 * (another rank owns it). Row t of k (and of v) starts at float t * src_stride. */
DCP_PARAMS_STRUCT(dcp_kv_append_params) {
    DCP_U32 tokens;            /* rows of k and v */
    DCP_U32 kv_heads;          /* Hkv */
    DCP_U32 head_dim;          /* D, multiple of 4 */
    DCP_U32 page_size;         /* B: tokens per page */
    DCP_U32 pages_per_segment; /* pages in each pool segment */
    DCP_U32 total_pages;       /* pages in the pool; slots beyond are never written */
    DCP_U32 src_stride;        /* floats between token rows of k and of v (>= kv_heads * D, multiple of 4) */
};
DCP_PARAMS_END(dcp_kv_append_params)

#endif
