/* CPU references of every kernel, accumulating in double: the oracle of the tests. */
#ifndef DCP_REF_H
#define DCP_REF_H

#include <stdint.h>

#include "dcpvk/dtype.h"

/* Paged attention over pages laid out as in include/dcpvk/kv.h, read in the pool's own dtype.
 *   pages       [num_pages][2][kv_heads][page_size][row] of dtype: f32 or f16 bits, or q8_0 rows
 *               (dcp_kv_row_bytes; values dequantized exactly in double)
 *   q           [batch][q_heads][head_dim] f32
 *   lengths     [batch] tokens; block_tables [batch][max_blocks] page ids
 *   o (out)     [batch][q_heads][head_dim] f32, normalised; lse (out) [batch][q_heads] f32,
 *               natural log; an empty sequence gives O = 0, LSE = -inf.
 * Query head h uses KV head h / (q_heads / kv_heads). */
typedef struct dcp_ref_decode_args {
    uint32_t batch, q_heads, kv_heads, head_dim, page_size, max_blocks;
    float scale;
    dcp_dtype dtype;
    const void *pages;
    const float *q;
    const uint32_t *lengths;
    const uint32_t *block_tables;
    float *o;
    float *lse;
} dcp_ref_decode_args;

void dcp_ref_paged_decode(const dcp_ref_decode_args *a);

/* Merge of `parts` partial states per row (docs/design.md section 3), part-major:
 * o_in [parts][rows][head_dim], lse_in [parts][rows] -> o_out [rows][head_dim], lse_out [rows]. */
void dcp_ref_lse_merge(uint32_t parts, uint32_t rows, uint32_t head_dim, const float *o_in,
                       const float *lse_in, float *o_out, float *lse_out);

#endif
