#version 450
// matmul: y[t][n] (+)= sum_k W[n][k] x[t][k] for a small batch of token rows (decode: 1 token;
// prefill: many). W [n_out][k] in one of the weight dtypes of weights.glsl; x, y f32; the rows go
// to y's columns [y_offset, y_offset + n_out) (a part of a matrix of parts: one dispatch a part).
// One subgroup per R output rows (spec constant, DCP_MATMUL_SUBGROUP_ROWS on GPUs, more where
// the device is a CPU, see ops.c): its lanes split the rows in units (a quad of F32, F16, BF16;
// a block of 32 of Q8_0; 32 or 64 weights of the other block types), each lane loads a unit of
// each of the R rows once
// (w_unit_load, 16-byte loads where the layout allows) and then, group by group, decodes the R
// rows' groups (w_unit_group: integer quants as f32 and the group's scale), loads the x vectors
// once for the R rows and adds each row's group dot product, the scale applied once per group and
// token; subgroupAdd reduces the lanes. Each workgroup holds
// RPW rows and TB tokens (spec constant: 1 for a single token, else DCP_MATMUL_TOKENS), so a
// weight unit is loaded and decoded once per TB tokens. A row's sum for a token does not depend
// on the other tokens or rows of the dispatch, nor on TB or R (same lanes, same order). Loop work
// per invocation: units / subgroup x groups per row block it owns (tokens and rows unrolled;
// bounded: lavapipe on Mesa 22 ends loops after 65,535 iterations per invocation).
// A column window (spec constant WIN 1, push constants x_col0 / x_cols > 0: a row-parallel slice
// held as the whole blocks covering its columns): stored column s meets x's column s - x_col0
// when that is in [0, x_cols), else x reads as 0 (w times 0 adds exactly 0: the sum is the
// window's weights'); x is then read a float at a time. Without one (WIN 0) the same loop reads
// x 16 bytes at a time, the window's code specialized away.
// SwiGLU (spec constant GLU 1, dcp_op_matmul's glu): W is [2 n_out][k], gate rows then up rows;
// a subgroup's R rows are R/2 gate rows j and the R/2 up rows n_out + j (same lanes, same order:
// each row's sum is bitwise the one GLU 0 gives) and y[t][j] = silu(g) * u as swiglu.comp.
// RMSNorm (spec constant NORM 1, WIN 0 only; dcp_op_matmul's norm): x's rows are normed first,
// y = W (x * nw / sqrt(mean x^2 + eps)): each subgroup sums the squares of its tokens' full rows
// in an order of its own (lane l: vec4 columns l, l + lanes, ..., then subgroupAdd: the same for
// every row, weight type, part and batch), the load multiplies x by nw, and the row's sum is
// scaled by 1 / sqrt(ss / k + eps). With both off their code is specialized away.
// Lanes owning rows (spec constant LR 1: dcp_device_info.matmul_lane_rows, CPU drivers, whose
// loads run a lane at a time): lane l of a subgroup sums R whole rows n0 + r SGS + l alone, unit
// after unit; the lanes load x a chunk at a time (lane l its vec4s l, l + SGS, ...) and each takes
// the vec4s of a group by subgroupShuffle, so an x word is loaded once for SGS R rows, not once per
// R (see lanes_own_rows). Rows per workgroup RPW = subgroups x SGS x R; the row's sum is in
// another order than LR 0's, the same for any batch, R and subgroup size.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_EXT_control_flow_attributes : require
#include "kernels/ops_params.h"

layout(constant_id = 0) const uint WG = 64;  // invocations
layout(constant_id = 1) const uint RPW = 8;  // output rows per workgroup: subgroups x R
layout(constant_id = 2) const uint TB = DCP_MATMUL_TOKENS; // tokens per workgroup (1 or DCP_MATMUL_TOKENS)
layout(constant_id = 3) const uint R = DCP_MATMUL_SUBGROUP_ROWS; // rows per subgroup
layout(constant_id = 4) const uint WIN = 0; // 1: a column window (x_col0, x_cols)
layout(constant_id = 5) const uint GLU = 0; // 1: y = silu(gate rows) * up rows (R even)
layout(constant_id = 6) const uint NORM = 0; // 1: x rmsnorm'd by nw in the load (WIN 0)
layout(constant_id = 7) const uint LR = 0;   // 1: lanes own rows (R rows a lane, x broadcast)
layout(constant_id = 8) const uint SGS = 8;  // LR: the subgroup size
const uint RO = GLU != 0u ? R / 2u : R;    // output rows per subgroup
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_matmul_params p; };
layout(std430, binding = 0) readonly buffer W { uint w[]; };    // weights, see weights.glsl
layout(std430, binding = 0) readonly buffer W4 { uvec4 wq4[]; }; // the same, 16 bytes at a time
layout(std430, binding = 1) readonly buffer X { vec4 x[]; };    // [tokens][x_stride/4] f32
layout(std430, binding = 1) readonly buffer X1 { float x1[]; }; // the same, a float at a time (window)
layout(std430, binding = 2) buffer Y { float y[]; };            // [tokens][y_stride] f32
layout(std430, binding = 3) readonly buffer NW { vec4 nw[]; };  // NORM: [k/4] f32 norm weights
#define wscale_offset p.scale_offset
#define W_UNIT_DOT 1
#include "weights.glsl"

// x vec4s a unit of a row covers; LR: CH vec4s of x a chunk covers (two units at least, so that
// the K-quants' pairs of units span their columns whole (w_group_rel4), and a vec4 for each
// lane), XL of them loaded by each lane, CU units a chunk
const uint UV4 = W_UNIT_GROUPS * W_GROUP_VEC4;
const uint CH = 2u * UV4 > SGS ? 2u * UV4 : SGS;
const uint XL = CH / SGS;
const uint CU = CH / UV4;

// The x vec4 q (of the row's k / 4) of token row t, windowed: what both layouts read (NORM: the
// caller multiplies by nw[q], loaded once for all its tokens).
vec4 x_at(uint t, uint q)
{
    if (WIN == 0u) return x[p.x_offset / 4u + t * (p.x_stride / 4u) + q];
    const uint s0 = 4u * q - p.x_col0; // x column of the vec4's first
    const uint xr = p.x_offset + t * p.x_stride;
    vec4 v;
    [[unroll]] for (uint e = 0u; e < 4u; e++) {
        const uint c = s0 + e; // wraps below the window: skipped too
        v[e] = c < p.x_cols ? x1[xr + c] : 0.0;
    }
    return v;
}

// A row's group g times token j's x (xv, the group's vec4s; sx their sum where the type has a
// min): the sum of q x, the group's scale and min applied (the same expression in both layouts).
float x_sum(vec4 xv[W_GROUP_VEC4])
{
    float sx = 0.0;
    [[unroll]] for (uint i = 0u; i < W_GROUP_VEC4; i++) sx += dot(xv[i], vec4(1.0));
    return sx;
}
float group_dot(vec4 wq[W_GROUP_VEC4], vec2 sc, vec4 xv[W_GROUP_VEC4], float sx)
{
    float s = 0.0;
    [[unroll]] for (uint i = 0u; i < W_GROUP_VEC4; i++) s += dot(wq[i], xv[i]);
#ifdef W_UNIT_MIN
    return sc.x * s - sc.y * sx;
#elif defined(W_GROUP_SCALED)
    return sc.x * s;
#else
    return s;
#endif
}
#ifdef W_UNIT_MIN
#define X_SUM(xv) x_sum(xv)
#else
#define X_SUM(xv) 0.0
#endif

// An output row's value from its sum g (GLU: the gate row's, u the up row's): normed by iv, and
// with GLU silu(g) * u as swiglu.comp.
float row_out(float g, float u, float iv)
{
    if (NORM != 0u) {
        g *= iv;
        u *= iv;
    }
    return GLU != 0u ? g / (1.0 + exp(-g)) * u : g;
}

// LR 1 (CPU drivers): lane l of a subgroup owns rows n0 + r SGS + l (r < RO; GLU: those gate
// rows and the up rows n_out + n0 + r SGS + l) and sums each over the whole row, unit after unit,
// group after group, alone: no subgroupAdd. The lanes read x a chunk at a time, lane l the chunk's
// vec4s l, l + SGS, ..., and every lane takes a group's vec4s by subgroupShuffle (an index the
// same in every lane, constant once unrolled), so each x word is loaded once for SGS R rows.
// Loop work per invocation: k / (4 CH) chunks (units, groups, rows and tokens unrolled).
void lanes_own_rows(float inv[TB])
{
    const uint t0 = gl_WorkGroupID.y * TB;
    const uint nt = min(TB, p.tokens - t0);
    const uint nu = w_units(p.k);
    const uint RS = SGS * RO; // output rows per subgroup
    const uint lane = gl_SubgroupInvocationID;
    for (uint r0 = gl_SubgroupID * RS; r0 < RPW; r0 += gl_NumSubgroups * RS) {
        const uint n0 = gl_WorkGroupID.x * RPW + r0;
        if (n0 >= p.n_out) break; // uniform in the subgroup
        float acc[R][TB];
        for (uint r = 0u; r < R; r++)
            for (uint j = 0u; j < TB; j++) acc[r][j] = 0.0;
        uint wrow[R];
        for (uint r = 0u; r < R; r++) {
            const uint ro = GLU != 0u && r >= RO ? r - RO : r;
            const uint up = GLU != 0u && r >= RO ? p.n_out : 0u;
            wrow[r] = up + min(n0 + ro * SGS + lane, p.n_out - 1u);
        }
        for (uint c = 0u; c < nu; c += CU) {
            vec4 xl[TB][XL];
            const uint xq0 = w_group_x4(c, 0u);
            [[unroll]] for (uint s = 0u; s < XL; s++) {
                const uint q = xq0 + s * SGS + lane;
                const vec4 nv = NORM != 0u && q < p.k / 4u ? nw[q] : vec4(1.0);
                for (uint j = 0u; j < TB; j++) {
                    xl[j][s] = (TB == 1u || j < nt) && q < p.k / 4u ? x_at(t0 + j, q) : vec4(0.0);
                    if (NORM != 0u) xl[j][s] *= nv;
                }
            }
            [[unroll]] for (uint cu = 0u; cu < CU; cu++) {
                const uint u = c + cu;
                if (u >= nu) break; // uniform
                w_raw raw[R];
                for (uint r = 0u; r < R; r++) w_unit_load(wrow[r], u, p.k, raw[r]);
                [[unroll]] for (uint g = 0u; g < W_UNIT_GROUPS; g++) {
                    vec4 wq[R][W_GROUP_VEC4];
                    vec2 sc[R];
                    for (uint r = 0u; r < R; r++) w_unit_group(raw[r], g, wq[r], sc[r]);
                    const uint v0 = (cu / 2u) * 2u * UV4 + w_group_rel4(cu % 2u, g);
                    for (uint j = 0u; j < TB; j++)
                        if (TB == 1u || j < nt) {
                            vec4 xv[W_GROUP_VEC4];
                            [[unroll]] for (uint i = 0u; i < W_GROUP_VEC4; i++)
                                xv[i] = subgroupShuffle(xl[j][(v0 + i) / SGS], (v0 + i) % SGS);
                            const float sx = X_SUM(xv);
                            for (uint r = 0u; r < R; r++) acc[r][j] += group_dot(wq[r], sc[r], xv, sx);
                        }
                }
            }
        }
        for (uint r = 0u; r < RO; r++) {
            const uint n = n0 + r * SGS + lane;
            for (uint j = 0u; j < TB; j++) {
                const float s = row_out(acc[r][j], GLU != 0u ? acc[r + RO][j] : 0.0, inv[j]);
                if (n < p.n_out && j < nt) {
                    const uint i = (t0 + j) * p.y_stride + p.y_offset + n;
                    y[i] = p.accumulate != 0u ? y[i] + s : s;
                }
            }
        }
    }
}

void main()
{
    const uint t0 = gl_WorkGroupID.y * TB;
    const uint nt = min(TB, p.tokens - t0);
    const uint nu = w_units(p.k);
    const uint xs = p.x_stride / 4u;
    const uint xo = p.x_offset / 4u;
    float inv[TB]; // NORM: 1 / sqrt(mean x^2 + eps) of each token
    if (NORM != 0u)
        for (uint j = 0u; j < TB; j++) {
            float ss = 0.0;
            if (TB == 1u || j < nt)
                for (uint q = gl_SubgroupInvocationID; q < p.k / 4u; q += gl_SubgroupSize) {
                    const vec4 v = x[xo + (t0 + j) * xs + q];
                    ss += dot(v, v);
                }
            inv[j] = 1.0 / sqrt(subgroupAdd(ss) / float(p.k) + p.norm_eps);
        }
    if (LR != 0u) {
        lanes_own_rows(inv);
        return;
    }
    for (uint r0 = gl_SubgroupID * RO; r0 < RPW; r0 += gl_NumSubgroups * RO) {
        const uint n0 = gl_WorkGroupID.x * RPW + r0;
        if (n0 >= p.n_out) break; // uniform in the subgroup
        const uint nr = min(RO, p.n_out - n0);
        float acc[R][TB];
        for (uint r = 0u; r < R; r++)
            for (uint j = 0u; j < TB; j++) acc[r][j] = 0.0;
        for (uint u = gl_SubgroupInvocationID; u < nu; u += gl_SubgroupSize) {
            w_raw raw[R];
            for (uint r = 0u; r < R; r++) {
                // GLU: rows r < RO gate rows n0 + r, the others up rows n_out + n0 + r - RO
                const uint ro = GLU != 0u && r >= RO ? r - RO : r;
                const uint up = GLU != 0u && r >= RO ? p.n_out : 0u;
                w_unit_load(up + n0 + min(ro, nr - 1u), u, p.k, raw[r]);
            }
            [[dont_unroll]] for (uint g = 0u; g < W_UNIT_GROUPS; g++) {
                vec4 wq[R][W_GROUP_VEC4];
                vec2 sc[R];
                for (uint r = 0u; r < R; r++) w_unit_group(raw[r], g, wq[r], sc[r]);
                vec4 nv[W_GROUP_VEC4];
                if (NORM != 0u)
                    [[unroll]] for (uint i = 0u; i < W_GROUP_VEC4; i++) nv[i] = nw[w_group_x4(u, g) + i];
                for (uint j = 0u; j < TB; j++)
                    if (TB == 1u || j < nt) {
                        vec4 xv[W_GROUP_VEC4];
                        [[unroll]] for (uint i = 0u; i < W_GROUP_VEC4; i++) {
                            xv[i] = x_at(t0 + j, w_group_x4(u, g) + i);
                            if (NORM != 0u) xv[i] *= nv[i];
                        }
                        const float sx = X_SUM(xv);
                        for (uint r = 0u; r < R; r++) acc[r][j] += group_dot(wq[r], sc[r], xv, sx);
                    }
            }
        }
        for (uint r = 0u; r < RO; r++)
            for (uint j = 0u; j < TB; j++) {
                const float s = row_out(subgroupAdd(acc[r][j]), GLU != 0u ? subgroupAdd(acc[r + RO][j]) : 0.0, inv[j]);
                if (r < nr && j < nt && subgroupElect()) {
                    const uint i = (t0 + j) * p.y_stride + p.y_offset + n0 + r;
                    y[i] = p.accumulate != 0u ? y[i] + s : s;
                }
            }
    }
}
