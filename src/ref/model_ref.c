/* CPU references of the model kernels and of a whole llama step, accumulating in double. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/model_ref.h"

void dcp_ref_matmul(uint32_t rows, uint32_t k, uint32_t tokens, const float *w, const float *x,
                    float *y, int accumulate)
{
    for (uint32_t t = 0; t < tokens; t++)
        for (uint32_t n = 0; n < rows; n++) {
            double s = accumulate ? y[(uint64_t)t * rows + n] : 0.0;
            const float *wr = w + (uint64_t)n * k, *xr = x + (uint64_t)t * k;
            for (uint32_t i = 0; i < k; i++) s += (double)wr[i] * xr[i];
            y[(uint64_t)t * rows + n] = (float)s;
        }
}

void dcp_ref_rmsnorm(uint32_t n, uint32_t tokens, const float *x, const float *w, float eps, float *y)
{
    for (uint32_t t = 0; t < tokens; t++) {
        const float *xr = x + (uint64_t)t * n;
        double ss = 0.0;
        for (uint32_t i = 0; i < n; i++) ss += (double)xr[i] * xr[i];
        double inv = 1.0 / sqrt(ss / n + eps);
        for (uint32_t i = 0; i < n; i++) y[(uint64_t)t * n + i] = (float)(xr[i] * inv * w[i]);
    }
}

void dcp_ref_rope(uint32_t heads, uint32_t head_dim, uint32_t n_rot, uint32_t pos, float base, float *x)
{
    for (uint32_t i = 0; i < n_rot / 2; i++) {
        double ang = pos * pow((double)base, -2.0 * i / n_rot);
        double c = cos(ang), s = sin(ang);
        for (uint32_t h = 0; h < heads; h++) {
            float *p = x + (uint64_t)h * head_dim + 2 * i;
            double x0 = p[0], x1 = p[1];
            p[0] = (float)(x0 * c - x1 * s);
            p[1] = (float)(x0 * s + x1 * c);
        }
    }
}

/* Dimension where a frequency turns beta times over the original context (YaRN). */
static double ref_corr_dim(const dcp_ref_rope_cfg *c, double beta)
{
    const double pi = 3.14159265358979323846;
    return c->n_rot * log(c->n_ctx_orig / (2.0 * pi * beta)) / (2.0 * log(c->base));
}

void dcp_ref_rope_ex(const dcp_ref_rope_cfg *c, uint32_t heads, uint32_t head_dim, uint32_t pos, float *x)
{
    const uint32_t half = c->n_rot / 2;
    double lo = 0.0, hi = 0.0;
    if (c->scaling == 2) {
        lo = fmax(0.0, floor(ref_corr_dim(c, c->beta_fast)));
        hi = fmin(c->n_rot - 1.0, ceil(ref_corr_dim(c, c->beta_slow)));
    }
    for (uint32_t i = 0; i < half; i++) {
        double theta = pos * pow(c->base, -2.0 * i / c->n_rot);
        if (c->freq_factors) theta /= c->freq_factors[i];
        if (c->scaling == 1) theta /= c->factor;
        if (c->scaling == 2) {
            double r = 1.0 - fmin(1.0, fmax(0.0, (i - lo) / fmax(0.001, hi - lo)));
            theta = theta * ((1.0 - r) / c->factor + r);
        }
        double cs = cos(theta) * c->mscale, sn = sin(theta) * c->mscale;
        uint32_t e0 = c->neox ? i : 2 * i, e1 = c->neox ? i + half : 2 * i + 1;
        for (uint32_t h = 0; h < heads; h++) {
            float *p = x + (uint64_t)h * head_dim;
            double x0 = p[e0], x1 = p[e1];
            p[e0] = (float)(x0 * cs - x1 * sn);
            p[e1] = (float)(x0 * sn + x1 * cs);
        }
    }
}

void dcp_ref_swiglu(uint32_t n, uint32_t tokens, const float *x, float *y)
{
    for (uint32_t t = 0; t < tokens; t++)
        for (uint32_t i = 0; i < n; i++) {
            double g = x[(uint64_t)t * 2 * n + i], u = x[(uint64_t)t * 2 * n + n + i];
            y[(uint64_t)t * n + i] = (float)(g / (1.0 + exp(-g)) * u);
        }
}

uint32_t dcp_ref_argmax(uint32_t n, const float *x)
{
    uint32_t best = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++)
        if (!isnan(x[i]) && (best == UINT32_MAX || x[i] > x[best])) best = i;
    return best == UINT32_MAX ? 0 : best;
}

void dcp_ref_llama_step(dcp_ref_llama *m, int32_t token, uint32_t pos, float *logits)
{
    const uint32_t E = m->n_embd, D = m->head_dim, Hq = m->n_head, Hkv = m->n_head_kv, F = m->n_ff;
    const uint32_t G = Hq / Hkv;
    float *x = calloc(E, sizeof *x), *xn = calloc(E, sizeof *xn);
    float *q = calloc((size_t)Hq * D, sizeof *q), *att = calloc((size_t)Hq * D, sizeof *att);
    float *gu = calloc(2 * (size_t)F, sizeof *gu), *h = calloc(F, sizeof *h);
    double *sc = calloc(pos + 1, sizeof *sc);
    if (!x || !xn || !q || !att || !gu || !h || !sc) goto done;
    memcpy(x, m->tok_embd + (uint64_t)token * E, E * sizeof *x);
    for (uint32_t l = 0; l < m->n_layer; l++) {
        const dcp_ref_llama_layer *L = &m->layers[l];
        float *kc = m->k_cache + ((uint64_t)l * m->n_ctx) * Hkv * D;
        float *vc = m->v_cache + ((uint64_t)l * m->n_ctx) * Hkv * D;
        dcp_ref_rmsnorm(E, 1, x, L->attn_norm, m->rms_eps, xn);
        dcp_ref_matmul(Hq * D, E, 1, L->wq, xn, q, 0);
        dcp_ref_matmul(Hkv * D, E, 1, L->wk, xn, kc + (uint64_t)pos * Hkv * D, 0);
        dcp_ref_matmul(Hkv * D, E, 1, L->wv, xn, vc + (uint64_t)pos * Hkv * D, 0);
        float *kp = kc + (uint64_t)pos * Hkv * D, *vp = vc + (uint64_t)pos * Hkv * D;
        for (uint32_t i = 0; L->bq && i < Hq * D; i++) q[i] += L->bq[i];
        for (uint32_t i = 0; L->bk && i < Hkv * D; i++) kp[i] += L->bk[i];
        for (uint32_t i = 0; L->bv && i < Hkv * D; i++) vp[i] += L->bv[i];
        if (L->q_norm) dcp_ref_rmsnorm(D, Hq, q, L->q_norm, m->rms_eps, q);
        if (L->k_norm) dcp_ref_rmsnorm(D, Hkv, kp, L->k_norm, m->rms_eps, kp);
        if (m->rope.n_rot) {
            dcp_ref_rope_ex(&m->rope, Hq, D, pos, q);
            dcp_ref_rope_ex(&m->rope, Hkv, D, pos, kp);
        } else {
            dcp_ref_rope(Hq, D, m->n_rot, pos, m->rope_base, q);
            dcp_ref_rope(Hkv, D, m->n_rot, pos, m->rope_base, kp);
        }
        double scale = 1.0 / sqrt((double)D);
        for (uint32_t hq = 0; hq < Hq; hq++) {
            uint32_t hk = hq / G;
            double mx = -INFINITY;
            for (uint32_t t = 0; t <= pos; t++) {
                double s = 0.0;
                for (uint32_t d = 0; d < D; d++)
                    s += (double)q[hq * D + d] * kc[((uint64_t)t * Hkv + hk) * D + d];
                sc[t] = s * scale;
                if (sc[t] > mx) mx = sc[t];
            }
            double sum = 0.0;
            for (uint32_t t = 0; t <= pos; t++) sum += (sc[t] = exp(sc[t] - mx));
            for (uint32_t d = 0; d < D; d++) {
                double o = 0.0;
                for (uint32_t t = 0; t <= pos; t++) o += sc[t] * vc[((uint64_t)t * Hkv + hk) * D + d];
                att[hq * D + d] = (float)(o / sum);
            }
        }
        dcp_ref_matmul(E, Hq * D, 1, L->wo, att, x, 1);
        dcp_ref_rmsnorm(E, 1, x, L->ffn_norm, m->rms_eps, xn);
        dcp_ref_matmul(F, E, 1, L->w_gate, xn, gu, 0);
        dcp_ref_matmul(F, E, 1, L->w_up, xn, gu + F, 0);
        dcp_ref_swiglu(F, 1, gu, h);
        dcp_ref_matmul(E, F, 1, L->w_down, h, x, 1);
    }
    dcp_ref_rmsnorm(E, 1, x, m->output_norm, m->rms_eps, xn);
    dcp_ref_matmul(m->n_vocab, E, 1, m->output, xn, logits, 0);
done:
    free(x);
    free(xn);
    free(q);
    free(att);
    free(gu);
    free(h);
    free(sc);
}
