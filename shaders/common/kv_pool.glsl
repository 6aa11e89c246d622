// A KV page pool as the shaders see it (kv_append, rope_store, paged_decode): the binding array of
// its segments and the page addressing. Constants: src/kernels/kv_params.h; layout: include/dcpvk/kv.h.
//
// A pool is num_pages equal pages. Page `page` lives in segment page / pages_per_segment (a power
// of two) as local page page % pages_per_segment. A page holds K[kv_heads][page_size][D] followed by
// V[kv_heads][page_size][D]. Slot s = page * page_size + row names one token's rows in a page
// (DCP_KV_NO_SLOT: the token is not stored here).
// Addresses count units of the binding's element type (a vec4, vec2, uvec2, uint...): a row of D
// values is row_units units, so one formula serves every dtype and load width.
//
// By default the segment index may differ between invocations (non-uniform indexing, Vulkan 1.2
// feature shaderStorageBufferArrayNonUniformIndexing). Built with KV_ONE_SEGMENT, the shader only
// touches segment 0: the variant for devices without that feature, where pools have one segment
// (DCP_KERNEL_KV in src/kernels/kernels.def builds it; src/vk/pipeline.c picks it per device).
#ifndef DCP_KV_POOL_GLSL
#define DCP_KV_POOL_GLSL
#include "kernels/kv_params.h"

// Declare the pool binding as `... kv[DCP_KV_ARRAY]` and index it with DCP_KV_SEG(segment).
#ifdef KV_ONE_SEGMENT
#define DCP_KV_ARRAY 1
#define DCP_KV_SEG(s) 0
#else
#extension GL_EXT_nonuniform_qualifier : require
#define DCP_KV_ARRAY DCP_KV_MAX_SEGMENTS
#define DCP_KV_SEG(s) nonuniformEXT(s)
#endif

// Units of one half of a page (all its K rows, or all its V rows): a V row lies this far after the
// K row of the same head and token.
uint dcp_kv_half_units(uint kv_heads, uint page_size, uint row_units)
{
    return kv_heads * page_size * row_units;
}

// Units of one page (K and V halves): local page lp starts at lp * dcp_kv_page_units(...).
uint dcp_kv_page_units(uint kv_heads, uint page_size, uint row_units)
{
    return 2u * dcp_kv_half_units(kv_heads, page_size, row_units);
}

// First unit of the K row of KV head `head`, token row `row` (< page_size), from its page's start.
uint dcp_kv_row_in_page(uint head, uint row, uint page_size, uint row_units)
{
    return (head * page_size + row) * row_units;
}

// True when slot s is stored in this pool: not DCP_KV_NO_SLOT and its page below total_pages.
bool dcp_kv_slot_stored(uint s, uint page_size, uint total_pages)
{
    return s != DCP_KV_NO_SLOT && s / page_size < total_pages;
}

// Where the K row of KV head `head` of the token in slot s lies: segment, and first unit inside the
// segment (the V row: dcp_kv_half_units later). The slot must be stored (dcp_kv_slot_stored).
struct dcp_kv_addr {
    uint seg;
    uint unit;
};
dcp_kv_addr dcp_kv_slot_addr(uint s, uint head, uint kv_heads, uint page_size, uint pages_per_segment,
                             uint row_units)
{
    const uint page = s / page_size;
    dcp_kv_addr a;
    a.seg = page / pages_per_segment;
    a.unit = (page % pages_per_segment) * dcp_kv_page_units(kv_heads, page_size, row_units) +
             dcp_kv_row_in_page(head, s % page_size, page_size, row_units);
    return a;
}
#endif
