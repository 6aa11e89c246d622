/* CPU references of paged_decode and lse_merge, in double precision. */
#include <math.h>
#include <stdlib.h>

#include "dcpvk/kv.h"
#include "ref/kv_ref.h"
#include "ref/ref.h"

/* Value d of the stored row starting at byte `row` of a pool's raw bytes, as a double. */
static double element(const void *pages, dcp_dtype dtype, uint64_t row, uint32_t head_dim, uint32_t d)
{
    const uint8_t *r = (const uint8_t *)pages + row;
    if (dtype == DCP_DTYPE_Q8_0) return dcp_ref_q8_0_value((const uint32_t *)(const void *)r, head_dim, d);
    if (dtype == DCP_DTYPE_F16) return dcp_f16_to_f32(((const uint16_t *)(const void *)r)[d]);
    return ((const float *)(const void *)r)[d];
}

void dcp_ref_paged_decode(const dcp_ref_decode_args *a)
{
    const uint32_t group = a->q_heads / a->kv_heads;
    const uint64_t row = dcp_kv_row_bytes(a->dtype, a->head_dim);  /* bytes per stored row */
    const uint64_t head_stride = (uint64_t)a->page_size * row;      /* bytes per head in a page half */
    const uint64_t half = (uint64_t)a->kv_heads * head_stride;      /* K or V part of a page */
    double *acc = malloc(sizeof(double) * a->head_dim);
    for (uint32_t b = 0; b < a->batch; b++) {
        const uint32_t len = a->lengths[b];
        for (uint32_t h = 0; h < a->q_heads; h++) {
            const uint32_t kvh = h / group;
            const float *q = a->q + ((uint64_t)b * a->q_heads + h) * a->head_dim;
            float *o = a->o + ((uint64_t)b * a->q_heads + h) * a->head_dim;
            double m = -INFINITY, l = 0.0;
            for (uint32_t d = 0; d < a->head_dim; d++) acc[d] = 0.0;
            for (uint32_t t = 0; t < len; t++) {
                uint32_t page = a->block_tables[(uint64_t)b * a->max_blocks + t / a->page_size];
                const uint64_t k = (uint64_t)page * 2 * half + kvh * head_stride + (t % a->page_size) * row;
                const uint64_t v = k + half;
                double x = 0.0;
                for (uint32_t d = 0; d < a->head_dim; d++) x += (double)q[d] * element(a->pages, a->dtype, k, a->head_dim, d);
                x *= a->scale;
                double mn = x > m ? x : m;
                double alpha = exp(m - mn), p = exp(x - mn);
                l = l * alpha + p;
                for (uint32_t d = 0; d < a->head_dim; d++) acc[d] = acc[d] * alpha + p * element(a->pages, a->dtype, v, a->head_dim, d);
                m = mn;
            }
            for (uint32_t d = 0; d < a->head_dim; d++) o[d] = len ? (float)(acc[d] / l) : 0.0f;
            a->lse[(uint64_t)b * a->q_heads + h] = len ? (float)(m + log(l)) : -INFINITY;
        }
    }
    free(acc);
}

void dcp_ref_lse_merge(uint32_t parts, uint32_t rows, uint32_t head_dim, const float *o_in,
                       const float *lse_in, float *o_out, float *lse_out)
{
    for (uint32_t r = 0; r < rows; r++) {
        double m = -INFINITY;
        for (uint32_t p = 0; p < parts; p++) {
            double x = lse_in[(uint64_t)p * rows + r];
            if (isnan(x) || x == INFINITY) x = -INFINITY;
            if (x > m) m = x;
        }
        float *o = o_out + (uint64_t)r * head_dim;
        if (m == -INFINITY) {
            for (uint32_t d = 0; d < head_dim; d++) o[d] = 0.0f;
            lse_out[r] = -INFINITY;
            continue;
        }
        double wsum = 0.0;
        for (uint32_t d = 0; d < head_dim; d++) o[d] = 0.0f;
        double *acc = calloc(head_dim, sizeof(double));
        for (uint32_t p = 0; p < parts; p++) {
            double x = lse_in[(uint64_t)p * rows + r];
            if (isnan(x) || x == INFINITY || x == -INFINITY) continue;
            double w = exp(x - m);
            const float *oi = o_in + ((uint64_t)p * rows + r) * head_dim;
            for (uint32_t d = 0; d < head_dim; d++) acc[d] += w * oi[d];
            wsum += w;
        }
        for (uint32_t d = 0; d < head_dim; d++) o[d] = (float)(acc[d] / wsum);
        lse_out[r] = (float)(m + log(wsum));
        free(acc);
    }
}
