/* Double-precision reference of the deepseek2 forward (see src/ref/deepseek2_ref.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ref/deepseek2_ref.h"

int dcp_ref_ds2_init(dcp_ref_ds2 *m, uint32_t n_ctx)
{
    const dcp_model_config *c = &m->cfg;
    uint64_t per = m->absorbed ? (uint64_t)c->kv_lora_rank + c->n_rot
                               : (uint64_t)c->n_head * (c->head_dim_qk + c->head_dim_v_mla);
    m->n_ctx = n_ctx;
    m->cache = calloc((uint64_t)c->n_layer * n_ctx * per, sizeof *m->cache);
    return m->cache ? 0 : -1;
}

void dcp_ref_ds2_free(dcp_ref_ds2 *m)
{
    free(m->cache);
    m->cache = NULL;
}

/* y [rows] = W [rows][k] x [k] (W f32, x and y double); accumulate adds to y. */
static void mv(uint32_t rows, uint32_t k, const float *w, const double *x, double *y, int accumulate)
{
    for (uint32_t r = 0; r < rows; r++) {
        double s = 0.0;
        const float *wr = w + (uint64_t)r * k;
        for (uint32_t i = 0; i < k; i++) s += wr[i] * x[i];
        y[r] = accumulate ? y[r] + s : s;
    }
}

static void rmsnorm(uint32_t n, const double *x, const float *w, double eps, double *y)
{
    double ss = 0.0;
    for (uint32_t i = 0; i < n; i++) ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (uint32_t i = 0; i < n; i++) y[i] = x[i] * inv * w[i];
}

double dcp_ref_rope_angle(const dcp_model_config *c, uint32_t pos, uint32_t i)
{
    double base = c->rope_freq_base, theta = pos * pow(base, -2.0 * i / c->n_rot);
    if (c->arch != DCP_ARCH_DEEPSEEK2 || c->rope_scaling != DCP_ROPE_SCALING_YARN) return theta;
    /* YaRN: pairs below the beta_fast correction dim keep the unscaled angle (extrapolation),
     * pairs above the beta_slow one are divided by the factor (interpolation), linear between. */
    const double pi = 3.14159265358979323846;
    double lo = floor(c->n_rot * log(c->rope_n_ctx_orig / (2 * pi * c->rope_yarn_beta_fast)) / (2 * log(base)));
    double hi = ceil(c->n_rot * log(c->rope_n_ctx_orig / (2 * pi * c->rope_yarn_beta_slow)) / (2 * log(base)));
    lo = lo > 0 ? lo : 0;
    hi = hi < c->n_rot - 1.0 ? hi : c->n_rot - 1.0;
    double y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
    double extrap = 1.0 - (y < 0 ? 0 : y > 1 ? 1 : y);
    return theta / c->rope_scaling_factor * (1.0 - extrap) + theta * extrap;
}

/* NORM-mode rotation of the n_rot values at x (pairs (2i, 2i+1)); neox (a negative control):
 * pairs (i, i + n_rot/2). */
static void rope(const dcp_model_config *c, uint32_t pos, double *x, int neox)
{
    const uint32_t half = c->n_rot / 2;
    for (uint32_t i = 0; i < half; i++) {
        double a = dcp_ref_rope_angle(c, pos, i), m = c->rope_attn_factor;
        uint32_t i0 = neox ? i : 2 * i, i1 = neox ? i + half : 2 * i + 1;
        double cs = cos(a) * m, sn = sin(a) * m, x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * cs - x1 * sn;
        x[i1] = x0 * sn + x1 * cs;
    }
}

/* Negative control: probabilities of scores sc[0..n) built from `shards` interleaved partial
 * states whose LSEs are taken in base 2 but merged as natural logs (the error the check of the
 * merge must catch); one shard gives the true softmax. */
static void base2_merge(double *sc, uint32_t n, uint32_t shards)
{
    double m[64], l[64], lse[64], M = -INFINITY, wsum = 0.0;
    if (shards > 64) shards = 64;
    for (uint32_t s = 0; s < shards; s++) {
        m[s] = -INFINITY;
        l[s] = 0.0;
    }
    for (uint32_t t = 0; t < n; t++) m[t % shards] = fmax(m[t % shards], sc[t]);
    for (uint32_t t = 0; t < n; t++) l[t % shards] += exp(sc[t] - m[t % shards]);
    for (uint32_t s = 0; s < shards; s++) {
        lse[s] = l[s] > 0.0 ? (m[s] + log(l[s])) / log(2.0) : -INFINITY;
        M = fmax(M, lse[s]);
    }
    for (uint32_t s = 0; s < shards; s++) wsum += l[s] > 0.0 ? exp(lse[s] - M) : 0.0;
    for (uint32_t t = 0; t < n; t++) {
        uint32_t s = t % shards;
        sc[t] = exp(lse[s] - M) / wsum * exp(sc[t] - m[s]) / l[s];
    }
}

void dcp_ref_moe_route(const dcp_ref_moe_route_args *a, const double *logits, const float *bias, uint32_t *ids,
                       double *w, double *probs_out)
{
    const uint32_t X = a->n_expert;
    double *p = malloc(X * sizeof *p), *sel = malloc(X * sizeof *sel), *gs = malloc(X * sizeof *gs);
    char *keep = malloc(X), *gkeep = malloc(X);
    if (!p || !sel || !gs || !keep || !gkeep) goto done;
    if (a->sigmoid) {
        for (uint32_t e = 0; e < X; e++) p[e] = 1.0 / (1.0 + exp(-logits[e]));
    } else {
        double mx = -INFINITY, sum = 0.0;
        for (uint32_t e = 0; e < X; e++) mx = logits[e] > mx ? logits[e] : mx;
        for (uint32_t e = 0; e < X; e++) sum += (p[e] = exp(logits[e] - mx));
        for (uint32_t e = 0; e < X; e++) p[e] /= sum;
    }
    for (uint32_t e = 0; e < X; e++) {
        sel[e] = p[e] + (bias ? bias[e] : 0.0);
        keep[e] = 1;
    }
    if (a->n_groups > 1) {
        const uint32_t G = a->n_groups, per = X / G;
        for (uint32_t g = 0; g < G; g++) {
            double b1 = -INFINITY, b2 = -INFINITY;
            for (uint32_t e = g * per; e < (g + 1) * per; e++) {
                if (sel[e] > b1) b2 = b1, b1 = sel[e];
                else if (sel[e] > b2) b2 = sel[e];
            }
            gs[g] = b1 + b2;
            gkeep[g] = 0;
        }
        for (uint32_t k = 0; k < a->n_groups_used; k++) {
            int best = -1;
            for (uint32_t g = 0; g < G; g++)
                if (!gkeep[g] && (best < 0 || gs[g] > gs[best])) best = (int)g;
            gkeep[best] = 1;
        }
        for (uint32_t e = 0; e < X; e++) keep[e] = gkeep[e / per];
    }
    double sum = 0.0;
    for (uint32_t k = 0; k < a->n_used; k++) {
        int best = -1;
        for (uint32_t e = 0; e < X; e++)
            if (keep[e] && (best < 0 || sel[e] > sel[best])) best = (int)e;
        keep[best] = 0;
        ids[k] = (uint32_t)best;
        sum += (w[k] = p[best]);
    }
    double div = a->norm ? (sum > 6.103515625e-5 ? sum : 6.103515625e-5) : 1.0;
    for (uint32_t k = 0; k < a->n_used; k++) w[k] = w[k] / div * a->scale;
    if (probs_out) memcpy(probs_out, p, X * sizeof *p);
done:
    free(p);
    free(sel);
    free(gs);
    free(keep);
    free(gkeep);
}

/* silu(g) * u over n values; y may alias neither. */
static void swiglu(uint32_t n, const double *g, const double *u, double *y)
{
    for (uint32_t i = 0; i < n; i++) y[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
}

/* y += W_down silu(W_gate x) * (W_up x) * weight, for an FFN of width f. */
static void ffn(uint32_t E, uint32_t f, const float *wg, const float *wu, const float *wd, const double *x,
                double weight, double *y, double *buf)
{
    double *g = buf, *u = buf + f, *h = buf + 2 * f, *o = buf + 3 * f;
    mv(f, E, wg, x, g, 0);
    mv(f, E, wu, x, u, 0);
    swiglu(f, g, u, h);
    mv(E, f, wd, h, o, 0);
    for (uint32_t i = 0; i < E; i++) y[i] += weight * o[i];
}

/* W_UK[h][r][n] and W_UV[h][j][r] in either layout. */
static double wkb(const dcp_model_config *c, const dcp_ref_ds2_layer *L, uint32_t h, uint32_t r, uint32_t n)
{
    const uint64_t R = c->kv_lora_rank, N = c->head_dim_nope, V = c->head_dim_v_mla;
    return L->k_b ? L->k_b[((uint64_t)h * R + r) * N + n] : L->kv_b[((uint64_t)h * (N + V) + n) * R + r];
}

static double wvb(const dcp_model_config *c, const dcp_ref_ds2_layer *L, uint32_t h, uint32_t j, uint32_t r)
{
    const uint64_t R = c->kv_lora_rank, N = c->head_dim_nope, V = c->head_dim_v_mla;
    return L->k_b ? L->v_b[((uint64_t)h * V + j) * R + r] : L->kv_b[((uint64_t)h * (N + V) + N + j) * R + r];
}

void dcp_ref_ds2_step(dcp_ref_ds2 *m, int32_t token, uint32_t pos, double *logits)
{
    const dcp_model_config *c = &m->cfg;
    const uint32_t E = c->n_embd, H = c->n_head, R = c->kv_lora_rank, P = c->n_rot, N = c->head_dim_nope,
                   V = c->head_dim_v_mla, QK = c->head_dim_qk, X = c->n_expert, FE = c->n_ff_exp,
                   FS = c->n_ff_exp * c->n_expert_shared, QL = c->q_lora_rank;
    const double eps = c->rms_eps, scale = m->control_scale > 0.0 ? m->control_scale : c->attn_scale;
    uint32_t fmax = c->n_ff > FE ? c->n_ff : FE;
    fmax = fmax > FS ? fmax : FS;
    const uint64_t per = m->absorbed ? (uint64_t)R + P : (uint64_t)H * (QK + V);
    double *x = calloc(E, sizeof *x), *xn = calloc(E, sizeof *xn), *q = calloc((uint64_t)H * QK, sizeof *q);
    double *qa = calloc(QL ? QL : 1, sizeof *qa), *kv = calloc(R + P, sizeof *kv), *cn = calloc(R, sizeof *cn);
    double *o = calloc((uint64_t)H * V, sizeof *o), *ql = calloc(R, sizeof *ql), *ol = calloc(R, sizeof *ol);
    double *sc = calloc(pos + 1, sizeof *sc), *buf = calloc(3 * (uint64_t)fmax + E, sizeof *buf);
    double *rl = calloc(X ? X : 1, sizeof *rl), *rw = calloc(c->n_expert_used ? c->n_expert_used : 1, sizeof *rw);
    uint32_t *ids = calloc(c->n_expert_used ? c->n_expert_used : 1, sizeof *ids);
    if (!x || !xn || !q || !qa || !kv || !cn || !o || !ql || !ol || !sc || !buf || !rl || !rw || !ids) goto done;
    for (uint32_t i = 0; i < E; i++) x[i] = m->tok_embd[(uint64_t)token * E + i];
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const dcp_ref_ds2_layer *L = &m->layers[l];
        double *cache = m->cache + (uint64_t)l * m->n_ctx * per;
        rmsnorm(E, x, L->attn_norm, eps, xn);
        if (QL) {
            mv(QL, E, L->wq_a, xn, qa, 0);
            rmsnorm(QL, qa, L->q_a_norm, eps, qa);
            mv(H * QK, QL, L->wq_b, qa, q, 0);
        } else {
            mv(H * QK, E, L->wq, xn, q, 0);
        }
        mv(R + P, E, L->wkv_a, xn, kv, 0);
        rmsnorm(R, kv, L->kv_a_norm, eps, cn);
        double *kpe = kv + R;
        rope(c, pos, kpe, m->control_neox);
        for (uint32_t h = 0; h < H; h++) rope(c, pos, q + (uint64_t)h * QK + N, m->control_neox);
        double *row = cache + (uint64_t)pos * per;
        if (m->absorbed) {
            memcpy(row, cn, R * sizeof *row);
            memcpy(row + R, kpe, P * sizeof *row);
        } else {
            for (uint32_t h = 0; h < H; h++) {
                double *k = row + (uint64_t)h * (QK + V), *v = k + QK;
                for (uint32_t n = 0; n < N; n++) {
                    double s = 0.0;
                    for (uint32_t r = 0; r < R; r++) s += wkb(c, L, h, r, n) * cn[r];
                    k[n] = s;
                }
                memcpy(k + N, kpe, P * sizeof *k);
                for (uint32_t j = 0; j < V; j++) {
                    double s = 0.0;
                    for (uint32_t r = 0; r < R; r++) s += wvb(c, L, h, j, r) * cn[r];
                    v[j] = s;
                }
            }
        }
        for (uint32_t h = 0; h < H; h++) {
            const double *qh = q + (uint64_t)h * QK;
            if (m->absorbed)
                for (uint32_t r = 0; r < R; r++) {
                    double s = 0.0;
                    for (uint32_t n = 0; n < N; n++) s += wkb(c, L, h, r, n) * qh[n];
                    ql[r] = s;
                }
            double mx = -INFINITY, sum = 0.0;
            for (uint32_t t = 0; t <= pos; t++) {
                const double *ct = cache + (uint64_t)t * per;
                double s = 0.0;
                if (m->absorbed) {
                    for (uint32_t r = 0; r < R; r++) s += ql[r] * ct[r];
                    for (uint32_t i = 0; i < P; i++) s += qh[N + i] * ct[R + i];
                } else {
                    const double *k = ct + (uint64_t)h * (QK + V);
                    for (uint32_t i = 0; i < QK; i++) s += qh[i] * k[i];
                }
                sc[t] = s * scale;
                mx = sc[t] > mx ? sc[t] : mx;
            }
            if (m->control_base2_shards > 1) {
                base2_merge(sc, pos + 1, m->control_base2_shards);
            } else {
                for (uint32_t t = 0; t <= pos; t++) sum += (sc[t] = exp(sc[t] - mx));
                for (uint32_t t = 0; t <= pos; t++) sc[t] /= sum;
            }
            if (m->probe_attn)
                for (uint32_t t = 0; t <= pos; t++) m->probe_attn[((uint64_t)l * H + h) * m->n_ctx + t] = sc[t];
            double *oh = o + (uint64_t)h * V;
            if (m->absorbed) {
                for (uint32_t r = 0; r < R; r++) {
                    double s = 0.0;
                    for (uint32_t t = 0; t <= pos; t++) s += sc[t] * cache[(uint64_t)t * per + r];
                    ol[r] = s;
                }
                for (uint32_t j = 0; j < V; j++) {
                    double s = 0.0;
                    for (uint32_t r = 0; r < R; r++) s += wvb(c, L, h, j, r) * ol[r];
                    oh[j] = s;
                }
            } else {
                for (uint32_t j = 0; j < V; j++) {
                    double s = 0.0;
                    for (uint32_t t = 0; t <= pos; t++) s += sc[t] * cache[(uint64_t)t * per + (uint64_t)h * (QK + V) + QK + j];
                    oh[j] = s;
                }
            }
        }
        mv(E, H * V, L->wo, o, x, 1);
        rmsnorm(E, x, L->ffn_norm, eps, xn);
        if (!L->gate_inp) {
            ffn(E, c->n_ff, L->w_gate, L->w_up, L->w_down, xn, 1.0, x, buf);
            continue;
        }
        mv(X, E, L->gate_inp, xn, rl, 0);
        dcp_ref_moe_route_args ra = {.n_expert = X, .n_used = c->n_expert_used, .n_groups = c->n_expert_groups,
            .n_groups_used = c->n_expert_groups_used, .sigmoid = c->expert_gating == DCP_EXPERT_GATING_SIGMOID,
            .norm = (int)c->expert_weights_norm, .scale = c->expert_weights_scale};
        dcp_ref_moe_route(&ra, rl, L->exp_probs_b, ids, rw, m->probe_router ? m->probe_router + (uint64_t)l * X : NULL);
        /* x += shared(xn) + sum_j w_j expert_j(xn): accumulate the FFN output apart, then add. */
        double *acc = calloc(E, sizeof *acc);
        if (!acc) goto done;
        for (uint32_t j = 0; j < c->n_expert_used; j++) {
            uint32_t e = ids[j];
            ffn(E, FE, L->gate_exps + (uint64_t)e * FE * E, L->up_exps + (uint64_t)e * FE * E,
                L->down_exps + (uint64_t)e * E * FE, xn, rw[j], acc, buf);
        }
        if (FS && L->gate_sh) ffn(E, FS, L->gate_sh, L->up_sh, L->down_sh, xn, 1.0, acc, buf);
        for (uint32_t i = 0; i < E; i++) x[i] += acc[i];
        free(acc);
    }
    rmsnorm(E, x, m->output_norm, eps, xn);
    for (uint32_t v = 0; v < c->n_vocab; v++) {
        double s = 0.0;
        const float *wr = m->output + (uint64_t)v * E;
        for (uint32_t i = 0; i < E; i++) s += wr[i] * xn[i];
        logits[v] = s;
    }
done:
    free(x);
    free(xn);
    free(q);
    free(qa);
    free(kv);
    free(cn);
    free(o);
    free(ql);
    free(ol);
    free(sc);
    free(buf);
    free(rl);
    free(rw);
    free(ids);
}
