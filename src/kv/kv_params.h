/* Push constants of the KV cache shaders (kv_append), shared by C and GLSL. */
#ifndef DCP_KV_PARAMS_H
#define DCP_KV_PARAMS_H
#include "common/params_begin.h"

/* kv_append: one invocation per (token, KV head, 4 dims). Token t goes to slot slots[t] =
 * page * page_size + offset of the pool, or nowhere when slots[t] == 0xffffffff (another rank
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
