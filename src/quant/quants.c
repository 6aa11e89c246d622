/* Block-quantized ggml weight types: dequantizers and reference quantizers written from the block
 * layouts (see src/quant/quants.h for the layouts), and the repack to the device layout. */
#include "quant/quants.h"

#include <math.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/dtype.h"

static const dcp_quant_layout layouts[] = {
    /* type, block elems, block bytes, f16 fields at, f16 count, body words */
    {DCP_GGML_TYPE_Q4_0, 32, 18, 0, 1, 4},
    {DCP_GGML_TYPE_Q4_1, 32, 20, 0, 2, 4},
    {DCP_GGML_TYPE_Q5_0, 32, 22, 0, 1, 5},
    {DCP_GGML_TYPE_Q5_1, 32, 24, 0, 2, 5},
    {DCP_GGML_TYPE_Q2_K, 256, 84, 80, 2, 20},
    {DCP_GGML_TYPE_Q3_K, 256, 110, 108, 1, 27},
    {DCP_GGML_TYPE_Q4_K, 256, 144, 0, 8, 32}, /* d, dmin, scales[12] moved out together: 16 B */
    {DCP_GGML_TYPE_Q5_K, 256, 176, 0, 8, 40},
    {DCP_GGML_TYPE_Q6_K, 256, 210, 208, 1, 52},
    {DCP_GGML_TYPE_IQ4_NL, 32, 18, 0, 1, 4},
    {DCP_GGML_TYPE_IQ4_XS, 256, 136, 0, 4, 32}, /* d, scales_h, scales_l[4] moved out: 8 B */
};

/* The 16 levels of IQ4_NL and IQ4_XS (the format's table, in ascending order). */
const int8_t dcp_iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

const dcp_quant_layout *dcp_quant_layout_of(dcp_ggml_type type)
{
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].type == type) return &layouts[i];
    return NULL;
}

static float ld_h(const uint8_t *p) { return dcp_f16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

/* Stores f as f16 and returns the value stored. */
static float st_h(uint8_t *p, float f)
{
    uint16_t h = dcp_f32_to_f16(f);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
    return dcp_f16_to_f32(h);
}

static uint32_t ld_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* Round to nearest (ties to even), clamped to [lo, hi]; NaN gives lo. */
static int near_clamp(float x, int lo, int hi)
{
    if (!(x >= (float)lo)) return lo;
    if (x >= (float)hi) return hi;
    return (int)lrintf(x);
}

/* Q4_K / Q5_K: 6-bit scale and min of 32-weight sub-block j from the 12 packed bytes. */
static void k4_scale_min(const uint8_t *s, int j, int *sc, int *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        *m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
    }
}

static void k4_pack(uint8_t *s, const int *sc, const int *m)
{
    memset(s, 0, 12);
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)sc[j];
        s[j + 4] = (uint8_t)m[j];
    }
    for (int j = 4; j < 8; j++) {
        s[j + 4] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
        s[j - 4] |= (uint8_t)((sc[j] >> 4) << 6);
        s[j] |= (uint8_t)((m[j] >> 4) << 6);
    }
}

/* Q3_K: signed 6-bit scale (-32..31) of 16-weight sub-block j. */
static int k3_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* ---- dequantization, one block ---------------------------------------------------------------- */

static void deq_block(dcp_ggml_type t, const uint8_t *b, float *y)
{
    switch (t) {
    case DCP_GGML_TYPE_Q4_0: {
        float d = ld_h(b);
        for (int i = 0; i < 16; i++) {
            y[i] = (float)((b[2 + i] & 15) - 8) * d;
            y[i + 16] = (float)((b[2 + i] >> 4) - 8) * d;
        }
        break;
    }
    case DCP_GGML_TYPE_Q4_1: {
        float d = ld_h(b), m = ld_h(b + 2);
        for (int i = 0; i < 16; i++) {
            y[i] = (float)(b[4 + i] & 15) * d + m;
            y[i + 16] = (float)(b[4 + i] >> 4) * d + m;
        }
        break;
    }
    case DCP_GGML_TYPE_Q5_0:
    case DCP_GGML_TYPE_Q5_1: {
        int one = t == DCP_GGML_TYPE_Q5_1;
        float d = ld_h(b), m = one ? ld_h(b + 2) : 0.0f;
        uint32_t qh = ld_u32(b + (one ? 4 : 2));
        const uint8_t *qs = b + (one ? 8 : 6);
        for (int i = 0; i < 16; i++) {
            int q0 = (qs[i] & 15) | (int)((qh >> i) & 1) << 4;
            int q1 = (qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
            if (one) {
                y[i] = (float)q0 * d + m;
                y[i + 16] = (float)q1 * d + m;
            } else {
                y[i] = (float)(q0 - 16) * d;
                y[i + 16] = (float)(q1 - 16) * d;
            }
        }
        break;
    }
    case DCP_GGML_TYPE_Q2_K: {
        const uint8_t *sc = b, *qs = b + 16;
        float d = ld_h(b + 80), dmin = ld_h(b + 82);
        for (int e = 0; e < 256; e++) {
            int n = e / 128, s = e % 128 / 32, l = e % 32, j = 8 * n + 2 * s + l / 16;
            int q = (qs[32 * n + l] >> (2 * s)) & 3;
            y[e] = d * (float)(sc[j] & 15) * (float)q - dmin * (float)(sc[j] >> 4);
        }
        break;
    }
    case DCP_GGML_TYPE_Q3_K: {
        const uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
        float d = ld_h(b + 108);
        for (int e = 0; e < 256; e++) {
            int n = e / 128, s = e % 128 / 32, l = e % 32, j = 8 * n + 2 * s + l / 16;
            int q = ((qs[32 * n + l] >> (2 * s)) & 3) + 4 * ((hm[l] >> (4 * n + s)) & 1) - 4;
            y[e] = d * (float)k3_scale(sc, j) * (float)q;
        }
        break;
    }
    case DCP_GGML_TYPE_Q4_K:
    case DCP_GGML_TYPE_Q5_K: {
        int five = t == DCP_GGML_TYPE_Q5_K;
        float d = ld_h(b), dmin = ld_h(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int e = 0; e < 256; e++) {
            int c = e / 64, h = e % 64 / 32, l = e % 32, s, m;
            int q = (qs[32 * c + l] >> (4 * h)) & 15;
            if (five) q |= ((qh[l] >> (2 * c + h)) & 1) << 4;
            k4_scale_min(sc, 2 * c + h, &s, &m);
            y[e] = d * (float)s * (float)q - dmin * (float)m;
        }
        break;
    }
    case DCP_GGML_TYPE_IQ4_NL: {
        float d = ld_h(b);
        for (int i = 0; i < 16; i++) {
            y[i] = d * (float)dcp_iq4_levels[b[2 + i] & 15];
            y[i + 16] = d * (float)dcp_iq4_levels[b[2 + i] >> 4];
        }
        break;
    }
    case DCP_GGML_TYPE_IQ4_XS: {
        float d = ld_h(b);
        uint32_t sh = (uint32_t)(b[2] | b[3] << 8);
        const uint8_t *sl = b + 4, *qs = b + 8;
        for (int j = 0; j < 8; j++) {
            int ls = ((sl[j / 2] >> (4 * (j % 2))) & 15) | (int)((sh >> (2 * j)) & 3) << 4;
            float dl = d * (float)(ls - 32);
            for (int i = 0; i < 16; i++) {
                y[32 * j + i] = dl * (float)dcp_iq4_levels[qs[16 * j + i] & 15];
                y[32 * j + 16 + i] = dl * (float)dcp_iq4_levels[qs[16 * j + i] >> 4];
            }
        }
        break;
    }
    case DCP_GGML_TYPE_Q6_K: {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = ld_h(b + 208);
        for (int e = 0; e < 256; e++) {
            int n = e / 128, g = e % 128 / 32, l = e % 32;
            int lo = (ql[64 * n + 32 * (g & 1) + l] >> (4 * (g / 2))) & 15;
            int q = (lo | ((qh[32 * n + l] >> (2 * g)) & 3) << 4) - 32;
            y[e] = d * (float)sc[8 * n + 2 * g + l / 16] * (float)q;
        }
        break;
    }
    default:
        break;
    }
}

static dcp_status check_n(const dcp_quant_layout *l, dcp_ggml_type type, uint64_t n)
{
    if (!l) return dcp_fail(DCP_ERR_UNSUPPORTED, "tensor type %d is not block-quantized", (int)type);
    if (n % l->block_elems)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: %llu elements is not a multiple of %u",
                        dcp_ggml_type_name(type), (unsigned long long)n, l->block_elems);
    return DCP_OK;
}

dcp_status dcp_quant_dequantize(dcp_ggml_type type, const void *src, float *dst, uint64_t n)
{
    const dcp_quant_layout *l = dcp_quant_layout_of(type);
    dcp_status st = check_n(l, type, n);
    if (st) return st;
    const uint8_t *s = src;
    for (uint64_t b = 0; b < n / l->block_elems; b++)
        deq_block(type, s + b * l->block_bytes, dst + b * l->block_elems);
    return DCP_OK;
}

/* ---- quantization ------------------------------------------------------------------------------ */

/* Fits x[n] ~ scale * L[i] - mn, L in [0, nmax], scale >= 0, mn >= 0 (the sub-block minimum, or 0
 * when all x are positive). Candidates iscale = (nmax + 0.1 s) / (max - min), s = -10..10; each
 * rounding is refit by least squares (x ~ scale * L + min, min <= 0); least squared error wins. */
static float fit_asym(int n, int nmax, const float *x, float *mn)
{
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; i++) {
        lo = fminf(lo, x[i]);
        hi = fmaxf(hi, x[i]);
    }
    if (lo > 0.0f) lo = 0.0f;
    *mn = -lo;
    if (!(hi > lo)) return 0.0f;
    double best = INFINITY;
    float best_scale = (hi - lo) / (float)nmax, best_min = lo;
    for (int s = -10; s <= 10; s++) {
        float iscale = ((float)nmax + 0.1f * (float)s) / (hi - lo);
        double sl = 0, sl2 = 0, sx = 0, sxl = 0;
        int L[32];
        for (int i = 0; i < n; i++) {
            L[i] = near_clamp(iscale * (x[i] - lo), 0, nmax);
            sl += L[i];
            sl2 += (double)L[i] * L[i];
            sx += x[i];
            sxl += (double)x[i] * L[i];
        }
        double D = n * sl2 - sl * sl, scale, min;
        if (D > 0) {
            scale = (n * sxl - sx * sl) / D;
            min = (sl2 * sx - sl * sxl) / D;
            if (min > 0) {
                min = 0;
                scale = sxl / sl2;
            }
        } else {
            scale = 1.0 / iscale;
            min = lo;
        }
        if (scale < 0) continue;
        double err = 0;
        for (int i = 0; i < n; i++) {
            double e = scale * L[i] + min - x[i];
            err += e * e;
        }
        if (err < best) {
            best = err;
            best_scale = (float)scale;
            best_min = (float)min;
        }
    }
    *mn = -best_min;
    return best_scale;
}

/* Fits x[n] ~ scale * L[i], L in [-nmax, nmax - 1] (scale may be negative: the value of largest
 * magnitude goes to -nmax). Candidates iscale = -(nmax + 0.1 s) / max, s = -9..9, each refit by
 * least squares; least squared error wins. */
static float fit_sym(int n, int nmax, const float *x)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax == 0.0f) return 0.0f;
    double best = INFINITY;
    float best_scale = max / (float)-nmax;
    for (int s = -9; s <= 9; s++) {
        float iscale = -((float)nmax + 0.1f * (float)s) / max;
        double slx = 0, sl2 = 0;
        int L[16];
        for (int i = 0; i < n; i++) {
            L[i] = near_clamp(iscale * x[i], -nmax, nmax - 1);
            slx += (double)L[i] * x[i];
            sl2 += (double)L[i] * L[i];
        }
        if (sl2 == 0) continue;
        double scale = slx / sl2, err = 0;
        for (int i = 0; i < n; i++) {
            double e = scale * L[i] - x[i];
            err += e * e;
        }
        if (err < best) {
            best = err;
            best_scale = (float)scale;
        }
    }
    return best_scale;
}

/* Index of the IQ4 level nearest v (ties to the lower level): the number of midpoints between
 * consecutive levels below v, by bisection. */
static int iq4_nearest(float v)
{
    int lo = 0, hi = 15; /* the answer is in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (v > 0.5f * (float)(dcp_iq4_levels[mid] + dcp_iq4_levels[mid + 1])) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Fits x[32] ~ scale * levels[L[i]] (scale of either sign). Candidates: the value of largest
 * magnitude mapped near the lowest level (-127 + s) or near the highest (113 + s), s = -5..5;
 * each rounding (nearest level) is refit by least squares; least squared error wins. */
static float fit_iq4(const float *x)
{
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax == 0.0f) return 0.0f;
    double best = INFINITY;
    float best_scale = max / (float)dcp_iq4_levels[0];
    for (int end = 0; end < 2; end++)
        for (int s = -5; s <= 5; s++) {
            float target = (float)(end ? dcp_iq4_levels[15] : dcp_iq4_levels[0]) + (float)s;
            float iscale = target / max;
            double sxl = 0, sl2 = 0;
            int L[32];
            for (int i = 0; i < 32; i++) {
                L[i] = dcp_iq4_levels[iq4_nearest(iscale * x[i])];
                sxl += (double)x[i] * L[i];
                sl2 += (double)L[i] * L[i];
            }
            if (sl2 == 0) continue;
            double scale = sxl / sl2, err = 0;
            for (int i = 0; i < 32; i++) {
                double e = scale * L[i] - x[i];
                err += e * e;
            }
            if (err < best) {
                best = err;
                best_scale = (float)scale;
            }
        }
    return best_scale;
}

/* 32 weights against the stored scale d: nibbles of the nearest levels, weight i in the low
 * nibble of qs[i % 16] for i < 16, the high nibble for i >= 16. */
static void put_iq4(const float *x, float d, uint8_t *qs)
{
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; i++) {
        int q = d != 0.0f ? iq4_nearest(x[i] * id) : 8;
        qs[i % 16] |= (uint8_t)(q << (4 * (i / 16)));
    }
}

static void quant_block(dcp_ggml_type t, const float *x, uint8_t *b)
{
    const dcp_quant_layout *lay = dcp_quant_layout_of(t);
    memset(b, 0, lay->block_bytes);
    switch (t) {
    case DCP_GGML_TYPE_Q4_0:
    case DCP_GGML_TYPE_Q5_0: {
        int five = t == DCP_GGML_TYPE_Q5_0, half = five ? 16 : 8;
        float amax = 0.0f, max = 0.0f;
        for (int i = 0; i < 32; i++)
            if (fabsf(x[i]) > amax) {
                amax = fabsf(x[i]);
                max = x[i];
            }
        float d = st_h(b, max / (float)-half), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *qs = b + (five ? 6 : 2);
        uint32_t qh = 0;
        for (int i = 0; i < 32; i++) {
            int q = near_clamp(x[i] * id, -half, half - 1) + half;
            qs[i % 16] |= (uint8_t)((q & 15) << (4 * (i / 16)));
            qh |= (uint32_t)(q >> 4) << i;
        }
        if (five)
            for (int i = 0; i < 4; i++) b[2 + i] = (uint8_t)(qh >> (8 * i));
        break;
    }
    case DCP_GGML_TYPE_Q4_1:
    case DCP_GGML_TYPE_Q5_1: {
        int five = t == DCP_GGML_TYPE_Q5_1, top = five ? 31 : 15;
        float lo = x[0], hi = x[0];
        for (int i = 1; i < 32; i++) {
            lo = fminf(lo, x[i]);
            hi = fmaxf(hi, x[i]);
        }
        float d = st_h(b, (hi - lo) / (float)top), m = st_h(b + 2, lo), id = d != 0.0f ? 1.0f / d : 0.0f;
        uint8_t *qs = b + (five ? 8 : 4);
        uint32_t qh = 0;
        for (int i = 0; i < 32; i++) {
            int q = near_clamp((x[i] - m) * id, 0, top);
            qs[i % 16] |= (uint8_t)((q & 15) << (4 * (i / 16)));
            qh |= (uint32_t)(q >> 4) << i;
        }
        if (five)
            for (int i = 0; i < 4; i++) b[4 + i] = (uint8_t)(qh >> (8 * i));
        break;
    }
    case DCP_GGML_TYPE_Q2_K: {
        float sc[16], mn[16], smax = 0.0f, mmax = 0.0f;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_asym(16, 3, x + 16 * j, &mn[j]);
            smax = fmaxf(smax, sc[j]);
            mmax = fmaxf(mmax, mn[j]);
        }
        float d = st_h(b + 80, smax / 15.0f), dmin = st_h(b + 82, mmax / 15.0f);
        for (int j = 0; j < 16; j++) {
            int ls = d > 0.0f ? near_clamp(sc[j] / d, 0, 15) : 0;
            int lm = dmin > 0.0f ? near_clamp(mn[j] / dmin, 0, 15) : 0;
            b[j] = (uint8_t)(ls | lm << 4);
            float ds = d * (float)ls, dm = dmin * (float)lm;
            for (int i = 0; i < 16; i++) {
                int e = 16 * j + i, q = ds > 0.0f ? near_clamp((x[e] + dm) / ds, 0, 3) : 0;
                b[16 + 32 * (e / 128) + e % 32] |= (uint8_t)(q << (2 * (e % 128 / 32)));
            }
        }
        break;
    }
    case DCP_GGML_TYPE_Q3_K: {
        float sc[16], amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_sym(16, 4, x + 16 * j);
            if (fabsf(sc[j]) > amax) {
                amax = fabsf(sc[j]);
                max = sc[j];
            }
        }
        float d = st_h(b + 108, max / -32.0f);
        uint8_t *hm = b, *qs = b + 32, *s6 = b + 96;
        for (int j = 0; j < 16; j++) {
            int ls = d != 0.0f ? near_clamp(sc[j] / d, -32, 31) : 0, u = ls + 32;
            if (j < 8) s6[j] |= (uint8_t)(u & 15);
            else s6[j - 8] |= (uint8_t)((u & 15) << 4);
            s6[8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
            float ds = d * (float)ls;
            for (int i = 0; i < 16; i++) {
                int e = 16 * j + i, q = ds != 0.0f ? near_clamp(x[e] / ds, -4, 3) + 4 : 4;
                qs[32 * (e / 128) + e % 32] |= (uint8_t)((q & 3) << (2 * (e % 128 / 32)));
                hm[e % 32] |= (uint8_t)((q >> 2) << (e / 32));
            }
        }
        break;
    }
    case DCP_GGML_TYPE_Q4_K:
    case DCP_GGML_TYPE_Q5_K: {
        int five = t == DCP_GGML_TYPE_Q5_K, top = five ? 31 : 15;
        float sc[8], mn[8], smax = 0.0f, mmax = 0.0f;
        for (int j = 0; j < 8; j++) {
            sc[j] = fit_asym(32, top, x + 32 * j, &mn[j]);
            smax = fmaxf(smax, sc[j]);
            mmax = fmaxf(mmax, mn[j]);
        }
        float d = st_h(b, smax / 63.0f), dmin = st_h(b + 2, mmax / 63.0f);
        int ls[8], lm[8];
        for (int j = 0; j < 8; j++) {
            ls[j] = d > 0.0f ? near_clamp(sc[j] / d, 0, 63) : 0;
            lm[j] = dmin > 0.0f ? near_clamp(mn[j] / dmin, 0, 63) : 0;
        }
        k4_pack(b + 4, ls, lm);
        uint8_t *qh = b + 16, *qs = b + (five ? 48 : 16);
        for (int e = 0; e < 256; e++) {
            int j = e / 32, c = e / 64, h = e % 64 / 32, l = e % 32;
            float ds = d * (float)ls[j], dm = dmin * (float)lm[j];
            int q = ds > 0.0f ? near_clamp((x[e] + dm) / ds, 0, top) : 0;
            qs[32 * c + l] |= (uint8_t)((q & 15) << (4 * h));
            if (five) qh[l] |= (uint8_t)((q >> 4) << (2 * c + h));
        }
        break;
    }
    case DCP_GGML_TYPE_IQ4_NL:
        put_iq4(x, st_h(b, fit_iq4(x)), b + 2);
        break;
    case DCP_GGML_TYPE_IQ4_XS: {
        float sc[8], amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 8; j++) {
            sc[j] = fit_iq4(x + 32 * j);
            if (fabsf(sc[j]) > amax) {
                amax = fabsf(sc[j]);
                max = sc[j];
            }
        }
        float d = st_h(b, max / -32.0f);
        uint32_t sh = 0;
        for (int j = 0; j < 8; j++) {
            int ls = d != 0.0f ? near_clamp(sc[j] / d, -32, 31) : 0, u = ls + 32;
            b[4 + j / 2] |= (uint8_t)((u & 15) << (4 * (j % 2)));
            sh |= (uint32_t)(u >> 4) << (2 * j);
            put_iq4(x + 32 * j, d * (float)ls, b + 8 + 16 * j);
        }
        b[2] = (uint8_t)sh;
        b[3] = (uint8_t)(sh >> 8);
        break;
    }
    case DCP_GGML_TYPE_Q6_K: {
        float sc[16], amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 16; j++) {
            sc[j] = fit_sym(16, 32, x + 16 * j);
            if (fabsf(sc[j]) > amax) {
                amax = fabsf(sc[j]);
                max = sc[j];
            }
        }
        float d = st_h(b + 208, max / -128.0f);
        uint8_t *ql = b, *qh = b + 128;
        for (int j = 0; j < 16; j++) {
            int ls = d != 0.0f ? near_clamp(sc[j] / d, -128, 127) : 0;
            b[192 + j] = (uint8_t)(int8_t)ls;
        }
        for (int e = 0; e < 256; e++) {
            int n = e / 128, g = e % 128 / 32, l = e % 32;
            float ds = d * (float)(int8_t)b[192 + 8 * n + 2 * g + l / 16];
            int q = ds != 0.0f ? near_clamp(x[e] / ds, -32, 31) + 32 : 32;
            ql[64 * n + 32 * (g & 1) + l] |= (uint8_t)((q & 15) << (4 * (g / 2)));
            qh[32 * n + l] |= (uint8_t)((q >> 4) << (2 * g));
        }
        break;
    }
    default:
        break;
    }
}

dcp_status dcp_quant_quantize(dcp_ggml_type type, const float *src, void *dst, uint64_t n)
{
    const dcp_quant_layout *l = dcp_quant_layout_of(type);
    dcp_status st = check_n(l, type, n);
    if (st) return st;
    uint8_t *d = dst;
    for (uint64_t b = 0; b < n / l->block_elems; b++)
        quant_block(type, src + b * l->block_elems, d + b * l->block_bytes);
    return DCP_OK;
}

/* ---- device layout ----------------------------------------------------------------------------- */

uint64_t dcp_quant_device_bytes(const dcp_quant_layout *l, uint64_t blocks)
{
    return blocks * l->body_words * 4 + (blocks * l->scale_halves + 1) / 2 * 4;
}

void dcp_quant_repack(const dcp_quant_layout *l, const uint8_t *src, uint64_t blocks, uint64_t first,
                      uint32_t *body, uint16_t *halves)
{
    const uint32_t sb = 2 * l->scale_halves;
    for (uint64_t i = 0; i < blocks; i++) {
        const uint8_t *blk = src + i * l->block_bytes;
        uint8_t *dst = (uint8_t *)(body + (first + i) * l->body_words);
        memcpy(dst, blk, l->scale_at);
        memcpy(dst + l->scale_at, blk + l->scale_at + sb, l->block_bytes - l->scale_at - sb);
        for (uint32_t h = 0; h < l->scale_halves; h++)
            halves[(first + i) * l->scale_halves + h] = (uint16_t)(blk[l->scale_at + 2 * h] | blk[l->scale_at + 2 * h + 1] << 8);
    }
}
