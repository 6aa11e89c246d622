/* CPU references of the MLA and MoE kernels (shaders/mla_*.comp, head_matmul.comp, moe_*.comp),
 * accumulating in double: the oracle of tests/test_mla_kernels.c and tests/test_moe_kernels.c. */
#ifndef DCP_REF_MLA_REF_H
#define DCP_REF_MLA_REF_H

#include <stdint.h>

#include "dcpvk/dtype.h"

/* MLA latent decode over K-only pages, read in the pool's own dtype:
 *   pages   [num_pages][page_size][dk] of dtype (f32, or f16 bits): rows [c_kv (dv) | k_pe]
 *   q       [batch][heads][dk] f32; lengths [batch]; block_tables [batch][max_blocks]
 *   o (out) [batch][heads][dv] f32: softmax(scale q . row) weighted sum of the rows' first dv
 *           entries; lse (out) [batch][heads] natural log; empty: O = 0, LSE = -inf. */
typedef struct dcp_ref_mla_decode_args {
    uint32_t batch, heads, dk, dv, page_size, max_blocks;
    float scale;
    dcp_dtype dtype;
    const void *pages;
    const float *q;
    const uint32_t *lengths;
    const uint32_t *block_tables;
    float *o;
    float *lse;
} dcp_ref_mla_decode_args;

void dcp_ref_mla_decode(const dcp_ref_mla_decode_args *a);

#endif
