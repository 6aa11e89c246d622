/* CPU references of the MLA and MoE kernels, in double precision (see src/ref/mla_ref.h). */
#include <math.h>
#include <stdlib.h>

#include "dcpvk/kv.h"
#include "ref/kv_ref.h"
#include "ref/mla_ref.h"

/* Entry d of stored row r (rows of dk entries; q8_0 rows as in src/kernels/kv_params.h). */
static double element(const void *pages, dcp_dtype dtype, uint64_t r, uint32_t dk, uint32_t d)
{
    if (dtype == DCP_DTYPE_Q8_0)
        return dcp_ref_q8_0_value((const uint32_t *)pages + r * (dcp_kv_row_bytes(dtype, dk) / 4), dk, d);
    const uint64_t i = r * dk + d;
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
                const uint64_t row = (uint64_t)page * a->page_size + t % a->page_size;
                double x = 0.0;
                for (uint32_t d = 0; d < a->dk; d++) x += (double)q[d] * element(a->pages, a->dtype, row, a->dk, d);
                x *= a->scale;
                double mn = x > m ? x : m, alpha = exp(m - mn), p = exp(x - mn);
                l = l * alpha + p;
                for (uint32_t d = 0; d < a->dv; d++) acc[d] = acc[d] * alpha + p * element(a->pages, a->dtype, row, a->dk, d);
                m = mn;
            }
            for (uint32_t d = 0; d < a->dv; d++) o[d] = len ? (float)(acc[d] / l) : 0.0f;
            a->lse[(uint64_t)b * a->heads + h] = len ? (float)(m + log(l)) : -INFINITY;
        }
    }
    free(acc);
}

void dcp_ref_head_matmul(uint32_t heads, uint32_t rows, uint32_t k, uint32_t tokens, const float *w, const float *x,
                         uint32_t x_stride, uint32_t x_hs, uint32_t x_off, float *y, uint32_t y_stride, uint32_t y_hs,
                         uint32_t y_off, int accumulate)
{
    for (uint32_t t = 0; t < tokens; t++)
        for (uint32_t h = 0; h < heads; h++)
            for (uint32_t n = 0; n < rows; n++) {
                const float *wr = w + ((uint64_t)h * rows + n) * k;
                const float *xr = x + (uint64_t)t * x_stride + (uint64_t)h * x_hs + x_off;
                float *yo = y + (uint64_t)t * y_stride + (uint64_t)h * y_hs + y_off + n;
                double s = accumulate ? *yo : 0.0;
                for (uint32_t i = 0; i < k; i++) s += (double)wr[i] * xr[i];
                *yo = (float)s;
            }
}

void dcp_ref_rope_pairs(uint32_t n_rot, const float *cs, const float *src, float *dst)
{
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        double c = cs[2 * i], s = cs[2 * i + 1], x0 = src[2 * i], x1 = src[2 * i + 1];
        dst[2 * i] = (float)(x0 * c - x1 * s);
        dst[2 * i + 1] = (float)(x0 * s + x1 * c);
    }
}

void dcp_ref_mla_kv_store(float *pages, uint32_t num_pages, uint32_t page_size, uint32_t kv_lora, uint32_t n_rot,
                          const uint32_t *slots, uint32_t tokens, const float *c, uint32_t c_stride, uint32_t c_offset,
                          const float *kpe, uint32_t kpe_stride, uint32_t kpe_offset, const float *cs)
{
    const uint32_t dk = kv_lora + n_rot;
    for (uint32_t t = 0; t < tokens; t++) {
        if (slots[t] == 0xffffffffu || slots[t] / page_size >= num_pages) continue;
        float *row = pages + (uint64_t)slots[t] * dk;
        for (uint32_t i = 0; i < kv_lora; i++) row[i] = c[(uint64_t)t * c_stride + c_offset + i];
        dcp_ref_rope_pairs(n_rot, cs + (uint64_t)t * n_rot, kpe + (uint64_t)t * kpe_stride + kpe_offset, row + kv_lora);
    }
}

void dcp_ref_moe_gate_up(uint32_t n_expert, uint32_t rows, uint32_t k, uint32_t tokens, uint32_t n_used, const float *w,
                         const uint32_t *ids, const float *x, uint32_t x_stride, uint32_t x_us, float *y,
                         uint32_t y_stride, uint32_t y_us)
{
    for (uint32_t t = 0; t < tokens; t++)
        for (uint32_t j = 0; j < n_used; j++) {
            const uint32_t e = ids[(uint64_t)t * n_used + j];
            const float *xr = x + (uint64_t)t * x_stride + (uint64_t)j * x_us;
            for (uint32_t n = 0; n < rows; n++) {
                double s = 0.0;
                if (e < n_expert) {
                    const float *wr = w + ((uint64_t)e * rows + n) * k;
                    for (uint32_t i = 0; i < k; i++) s += (double)wr[i] * xr[i];
                }
                y[(uint64_t)t * y_stride + (uint64_t)j * y_us + n] = (float)s;
            }
        }
}

void dcp_ref_moe_down(uint32_t n_expert, uint32_t rows, uint32_t k, uint32_t tokens, uint32_t n_used, const float *w,
                      const uint32_t *ids, const float *wt, const float *x, uint32_t x_stride, uint32_t x_us, float *y,
                      uint32_t y_stride, int accumulate)
{
    for (uint32_t t = 0; t < tokens; t++)
        for (uint32_t n = 0; n < rows; n++) {
            double s = accumulate ? y[(uint64_t)t * y_stride + n] : 0.0;
            for (uint32_t j = 0; j < n_used; j++) {
                const uint32_t e = ids[(uint64_t)t * n_used + j];
                if (e >= n_expert) continue;
                const float *wr = w + ((uint64_t)e * rows + n) * k;
                const float *xr = x + (uint64_t)t * x_stride + (uint64_t)j * x_us;
                double d = 0.0;
                for (uint32_t i = 0; i < k; i++) d += (double)wr[i] * xr[i];
                s += wt[(uint64_t)t * n_used + j] * d;
            }
            y[(uint64_t)t * y_stride + n] = (float)s;
        }
}
