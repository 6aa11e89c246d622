/* CPU reference of kv_append (a copy: exact). */
#include <string.h>

#include "kv/kv_params.h"
#include "ref/kv_ref.h"

void dcp_ref_kv_append(float *pages, uint32_t num_pages, uint32_t kv_heads, uint32_t page_size,
                       uint32_t head_dim, const uint32_t *slots, uint32_t tokens, const float *k,
                       const float *v)
{
    const uint64_t half = (uint64_t)kv_heads * page_size * head_dim;
    for (uint32_t t = 0; t < tokens; t++) {
        if (slots[t] == DCP_KV_NO_SLOT) continue;
        uint32_t page = slots[t] / page_size, off = slots[t] % page_size;
        if (page >= num_pages) continue;
        for (uint32_t h = 0; h < kv_heads; h++) {
            float *dk = pages + page * 2 * half + ((uint64_t)h * page_size + off) * head_dim;
            const uint64_t src = ((uint64_t)t * kv_heads + h) * head_dim;
            memcpy(dk, k + src, head_dim * sizeof(float));
            memcpy(dk + half, v + src, head_dim * sizeof(float));
        }
    }
}
