/* Push constants of the MLA latent decode (shaders/mla_decode.comp), shared by C and GLSL. */
#ifndef DCP_MLA_PARAMS_H
#define DCP_MLA_PARAMS_H
#include "common/params_begin.h"

/* mla_decode: MQA flash-decoding of every query head of a rank against one latent cache (a
 * K-only pool of one head, rows [c_kv (DV) | k_pe] of DK elements). One workgroup per
 * (chunk of the sequence, group of HG heads, sequence); it reads each cache row of its chunk once
 * (into shared memory) for all HG heads. Scores scale * q . row over all DK entries; values are the
 * first DV entries of the row. Writes the normalised latent O [heads][DV] and the LSE (natural log)
 * of its chunk: the final state when the sequence has one chunk (direct), else a partial that
 * lse_merge combines. */
DCP_PARAMS_STRUCT(dcp_mla_decode_params) {
    DCP_U32 batch;            /* sequences */
    DCP_U32 heads;            /* H: query heads per sequence */
    DCP_U32 page_size;        /* B: tokens per page */
    DCP_U32 chunk_tokens;     /* tokens per workgroup chunk (a multiple of the tile) */
    DCP_U32 num_chunks;       /* chunks per sequence (grid x) */
    DCP_U32 bt_stride;        /* block-table entries per sequence */
    DCP_U32 segment_shift;    /* log2 of the pages in each pool segment (a power of two) */
    DCP_U32 total_pages;      /* pages in the pool; larger entries are never read */
    DCP_U32 direct;           /* 1: write final O/LSE (num_chunks == 1); 0: per-chunk partials */
    DCP_F32 scale;            /* softmax scale applied to q . row */
    DCP_U32 out_group;        /* heads per output group (shaders/common/out_groups.glsl); 0: plain (partials) */
    DCP_U32 o_group_stride;   /* vec4s between the groups' O */
    DCP_U32 lse_group_stride; /* floats between the groups' LSE */
};
DCP_PARAMS_END(dcp_mla_decode_params)
#ifndef VULKAN
_Static_assert(sizeof(dcp_mla_decode_params) == 52, "dcp_mla_decode_params layout");
_Static_assert(offsetof(dcp_mla_decode_params, scale) == 36, "dcp_mla_decode_params.scale offset");
#endif

#endif
