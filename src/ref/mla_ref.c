/* CPU references of the MLA and MoE kernels, in double precision (see src/ref/mla_ref.h). */
#include <math.h>
#include <stdlib.h>

#include "ref/mla_ref.h"

static double element(const void *pages, dcp_dtype dtype, uint64_t i)
{
    if (dtype == DCP_DTYPE_F16) return dcp_f16_to_f32(((const uint16_t *)pages)[i]);
    return ((const float *)pages)[i];
}

void dcp_ref_mla_decode(const dcp_ref_mla_decode_args *a)
{
    double *acc = malloc(sizeof(double) * a->dv);
    if (!acc) return;
    for (uint32_t b = 0; b < a->batch; b++) {
        const uint32_t len = a->lengths[b];
        for (uint32_t h = 0; h < a->heads; h++) {
            const float *q = a->q + ((uint64_t)b * a->heads + h) * a->dk;
            float *o = a->o + ((uint64_t)b * a->heads + h) * a->dv;
            double m = -INFINITY, l = 0.0;
            for (uint32_t d = 0; d < a->dv; d++) acc[d] = 0.0;
            for (uint32_t t = 0; t < len; t++) {
                uint32_t page = a->block_tables[(uint64_t)b * a->max_blocks + t / a->page_size];
                const uint64_t row = ((uint64_t)page * a->page_size + t % a->page_size) * a->dk;
                double x = 0.0;
                for (uint32_t d = 0; d < a->dk; d++) x += (double)q[d] * element(a->pages, a->dtype, row + d);
                x *= a->scale;
                double mn = x > m ? x : m, alpha = exp(m - mn), p = exp(x - mn);
                l = l * alpha + p;
                for (uint32_t d = 0; d < a->dv; d++) acc[d] = acc[d] * alpha + p * element(a->pages, a->dtype, row + d);
                m = mn;
            }
            for (uint32_t d = 0; d < a->dv; d++) o[d] = len ? (float)(acc[d] / l) : 0.0f;
            a->lse[(uint64_t)b * a->heads + h] = len ? (float)(m + log(l)) : -INFINITY;
        }
    }
    free(acc);
}
