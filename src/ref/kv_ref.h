/* CPU references of the KV cache kernels (the oracle of tests/test_kv*.c). The DCP step's oracle is
 * the single-device reference dcp_ref_paged_decode (src/ref/ref.h): DCP must equal it. */
#ifndef DCP_KV_REF_H
#define DCP_KV_REF_H

#include <stdint.h>

/* kv_append: for token t < tokens with slots[t] != DCP_KV_NO_SLOT, page = slots[t] / page_size,
 * off = slots[t] % page_size: pages[page][0][h][off][:] = k[t][h][:] and pages[page][1][h][off][:] =
 * v[t][h][:] for every head h. pages [num_pages][2][kv_heads][page_size][head_dim] f32;
 * k, v [tokens][kv_heads][head_dim] f32. Slots past num_pages are skipped. */
void dcp_ref_kv_append(float *pages, uint32_t num_pages, uint32_t kv_heads, uint32_t page_size,
                       uint32_t head_dim, const uint32_t *slots, uint32_t tokens, const float *k,
                       const float *v);

#endif
