/* RoPE (cos, sin) tables on the host, with frequency factors, linear and YaRN scaling
 * (include/dcpvk/model_config.h).
 * Computed in double and rounded once, so every rank of a group uploads the same bits. */
#include <math.h>

#include "dcpvk/model_config.h"

void dcp_rope_params_from_config(const dcp_model_config *cfg, dcp_rope_params *out)
{
    dcp_rope_params r = {
        .n_rot = cfg->n_rot,
        .freq_base = cfg->rope_freq_base,
        .scaling = cfg->rope_scaling,
        .factor = cfg->rope_scaling == DCP_ROPE_SCALING_NONE ? 1.0f : cfg->rope_scaling_factor,
        .n_ctx_orig = cfg->rope_scaling == DCP_ROPE_SCALING_YARN ? cfg->rope_n_ctx_orig : cfg->n_ctx_train,
        .beta_fast = cfg->rope_scaling == DCP_ROPE_SCALING_YARN ? cfg->rope_yarn_beta_fast : 32.0f,
        .beta_slow = cfg->rope_scaling == DCP_ROPE_SCALING_YARN ? cfg->rope_yarn_beta_slow : 1.0f,
        .attn_factor = cfg->rope_attn_factor > 0.0f ? cfg->rope_attn_factor : 1.0f,
        .freq_factors = NULL,
    };
    *out = r;
}

/* Dimension (in pairs x 2 units, as ggml counts) at which a frequency turns `beta` times over
 * the original context: n_rot ln(n_ctx_orig / (2 pi beta)) / (2 ln base). */
static double corr_dim(const dcp_rope_params *r, double beta)
{
    const double pi = 3.14159265358979323846;
    return r->n_rot * log(r->n_ctx_orig / (2.0 * pi * beta)) / (2.0 * log((double)r->freq_base));
}

void dcp_rope_cs(const dcp_rope_params *r, const uint32_t *pos, uint32_t n, float *cs)
{
    const uint32_t half = r->n_rot / 2;
    double lo = 0.0, hi = 0.0;
    if (r->scaling == DCP_ROPE_SCALING_YARN) {
        lo = floor(corr_dim(r, r->beta_fast));
        hi = ceil(corr_dim(r, r->beta_slow));
        if (lo < 0.0) lo = 0.0;
        if (hi > r->n_rot - 1.0) hi = r->n_rot - 1.0;
    }
    for (uint32_t t = 0; t < n; t++)
        for (uint32_t i = 0; i < half; i++) {
            double theta = pos[t] * pow((double)r->freq_base, -2.0 * i / r->n_rot);
            if (r->freq_factors) theta /= r->freq_factors[i];
            if (r->scaling == DCP_ROPE_SCALING_LINEAR) theta /= r->factor;
            if (r->scaling == DCP_ROPE_SCALING_YARN) {
                double y = (i - lo) / fmax(0.001, hi - lo);
                double ramp = 1.0 - fmin(1.0, fmax(0.0, y));
                theta = theta / r->factor * (1.0 - ramp) + theta * ramp;
            }
            cs[((uint64_t)t * half + i) * 2] = (float)(cos(theta) * r->attn_factor);
            cs[((uint64_t)t * half + i) * 2 + 1] = (float)(sin(theta) * r->attn_factor);
        }
}
