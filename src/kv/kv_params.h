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

/* kv_append: one invocation per (token, KV head, 4 dims). Token t goes to slot slots[t] =
 * page * page_size + offset of the pool, or nowhere when slots[t] == DCP_KV_NO_SLOT (another rank
 * owns it). */
DCP_PARAMS_STRUCT(dcp_kv_append_params) {
    DCP_U32 tokens;            /* rows of k and v */
    DCP_U32 kv_heads;          /* Hkv */
    DCP_U32 head_dim;          /* D, multiple of 4 */
    DCP_U32 page_size;         /* B: tokens per page */
    DCP_U32 pages_per_segment; /* pages in each pool segment */
    DCP_U32 total_pages;       /* pages in the pool; slots beyond are never written */
};
DCP_PARAMS_END(dcp_kv_append_params)

#endif
