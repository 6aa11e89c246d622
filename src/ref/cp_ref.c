/* CPU references of cp_scale and permute. */
#include <math.h>

#include "ref/cp_ref.h"

static double clean(double x) { return (isnan(x) || x == INFINITY) ? -INFINITY : x; }

void dcp_ref_cp_scale(uint32_t batch, uint32_t Hl, uint32_t N, uint32_t rank, uint32_t D, const float *o_in,
                       const float *lse_all, float *send, float *lse_out)
{
    const uint64_t NH = (uint64_t)N * Hl, rows = batch * NH;
    for (uint32_t b = 0; b < batch; b++)
        for (uint64_t h = 0; h < NH; h++) {
            uint64_t row = b * NH + h;
            double m = -INFINITY;
            for (uint32_t n = 0; n < N; n++) {
                double l = clean(lse_all[n * rows + row]);
                if (l > m) m = l;
            }
            double w = 0.0, lg = m;
            if (m != -INFINITY) {
                double sum = 0.0;
                for (uint32_t n = 0; n < N; n++) {
                    double l = clean(lse_all[n * rows + row]);
                    if (l != -INFINITY) sum += exp(l - m);
                }
                lg = m + log(sum);
                double mine = clean(lse_all[rank * rows + row]);
                if (mine != -INFINITY) w = exp(mine - m) / sum;
            }
            uint64_t dst = h / Hl, hl = h % Hl;
            float *out = send + ((dst * batch + b) * Hl + hl) * D;
            for (uint32_t d = 0; d < D; d++) out[d] = w == 0.0 ? 0.0f : (float)(o_in[row * D + d] * w);
            if (dst == rank) lse_out[(uint64_t)b * Hl + hl] = (float)lg;
        }
}

void dcp_ref_permute(uint32_t A, uint32_t B, uint32_t C, uint32_t src_stride_a, uint32_t dst_stride_b,
                     const float *src, float *dst)
{
    for (uint64_t a = 0; a < A; a++)
        for (uint64_t b = 0; b < B; b++)
            for (uint64_t c = 0; c < C; c++) dst[b * dst_stride_b + a * C + c] = src[a * src_stride_a + b * C + c];
}

void dcp_ref_part_sum(uint32_t n, uint32_t parts, uint32_t part_stride, uint32_t x_offset, uint32_t y_offset,
                      int accumulate, const float *x, float *y)
{
    for (uint64_t i = 0; i < n; i++) {
        float acc = 0.0f;
        for (uint64_t s = 0; s < parts; s++) acc += x[x_offset + s * part_stride + i];
        y[y_offset + i] = accumulate ? y[y_offset + i] + acc : acc;
    }
}
