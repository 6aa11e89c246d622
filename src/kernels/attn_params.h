/* Push constants of the attention shaders (paged_decode, lse_merge), shared by C and GLSL. */
#ifndef DCP_ATTN_PARAMS_H
#define DCP_ATTN_PARAMS_H
#include "common/params_begin.h"

/* paged_decode: one workgroup per (chunk, kv head x head-split, sequence). */
DCP_PARAMS_STRUCT(dcp_paged_decode_params) {
    DCP_U32 batch;            /* sequences */
    DCP_U32 q_heads;          /* Hq: query heads per sequence */
    DCP_U32 kv_heads;         /* Hkv: KV heads stored in the pool */
    DCP_U32 page_size;        /* B: tokens per page */
    DCP_U32 chunk_tokens;     /* tokens per workgroup chunk */
    DCP_U32 num_chunks;       /* chunks per sequence (grid x) */
    DCP_U32 bt_stride;        /* block-table entries per sequence */
    DCP_U32 segment_shift;    /* log2 of the pages in each pool segment (a power of two) */
    DCP_U32 total_pages;      /* pages in the pool; larger entries are never read */
    DCP_U32 direct;           /* 1: write final O/LSE (num_chunks == 1); 0: write per-chunk partials */
    DCP_F32 scale;            /* softmax scale applied to q.k */
    DCP_U32 out_group;        /* heads per output group (shaders/common/out_groups.glsl); 0: plain (partials) */
    DCP_U32 o_group_stride;   /* vec4s between the groups' O */
    DCP_U32 lse_group_stride; /* floats between the groups' LSE */
};
DCP_PARAMS_END(dcp_paged_decode_params)

/* lse_merge: merges `parts` partial states per row; part p of row r sits at
 * o_in[p * o_part_stride + r * head_dim ...], lse_in[p * lse_part_stride + r]. */
DCP_PARAMS_STRUCT(dcp_lse_merge_params) {
    DCP_U32 parts;            /* P */
    DCP_U32 rows;             /* (sequence, head) pairs */
    DCP_U32 head_dim;         /* D, multiple of 4 */
    DCP_U32 o_part_stride;    /* floats between parts in o_in */
    DCP_U32 lse_part_stride;  /* floats between parts in lse_in */
    DCP_U32 out_heads;        /* heads per token row (rows = tokens x out_heads), for out_group */
    DCP_U32 out_group;        /* heads per output group (shaders/common/out_groups.glsl); 0: plain */
    DCP_U32 o_group_stride;   /* vec4s between the groups' O */
    DCP_U32 lse_group_stride; /* floats between the groups' LSE */
};
DCP_PARAMS_END(dcp_lse_merge_params)

#endif
