#version 450
// moe_matmul: the selected experts' products of a MoE layer (src/kernels/ds2_params.h). W holds every
// expert's rows, expert e's at row e * rows, in one of the weight dtypes of weights.glsl.
//   gate|up (default): y[t][j][n] = W_{ids[t][j]}[n] . x[t][j]   (one workgroup per (token, slot j))
//   down (MOE_DOWN):   y[t][n] (+)= sum_j w[t][j] (W_{ids[t][j]}[n] . x[t][j])   (one per token)
// As matmul.comp: one subgroup per output row, lanes split k in weight units and reduce with
// subgroupAdd. Loop work per invocation: n_used (down) * units/subgroup per row it owns (bounded for
// Mesa 22).
// A column window (spec constant WIN 1, push constants x_col0 / x_cols > 0: a row-parallel expert
// slice held as the whole blocks covering its columns, as matmul.comp's): stored column s meets
// x's column s - x_col0 when that is in [0, x_cols), else x reads as 0 (w times 0 adds exactly 0:
// the sum is the window's weights'); x is then read a float at a time. Without one (WIN 0) the
// same loop reads x 16 bytes at a time, the window's code specialized away.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "kernels/ds2_params.h"

layout(constant_id = 0) const uint WG = 64;  // invocations
layout(constant_id = 1) const uint RPW = 8;  // output rows per workgroup
layout(constant_id = 2) const uint WIN = 0;  // 1: a column window (x_col0, x_cols)
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_moe_matmul_params p; };
layout(std430, binding = 0) readonly buffer W { uint w[]; };     // weights, see weights.glsl
layout(std430, binding = 1) readonly buffer X { vec4 x[]; };     // f32 rows, strides in p
layout(std430, binding = 1) readonly buffer X1 { float x1[]; };  // the same, a float at a time (window)
layout(std430, binding = 2) buffer Y { float y[]; };             // f32
layout(std430, binding = 3) readonly buffer Ids { uint ids[]; }; // [tokens][n_used]
layout(std430, binding = 4) readonly buffer Wt { float wt[]; };  // [tokens][n_used] (down)
#define wscale_offset p.scale_offset
#include "weights.glsl"

/* This lane's part of W[row] . x[xo ...] (xo in vec4s): the units u = lane, lane + subgroup, ...
 * of the row. */
float row_dot(uint row, uint xo, uint nu)
{
    float a = 0.0;
    for (uint u = gl_SubgroupInvocationID; u < nu; u += gl_SubgroupSize)
        [[dont_unroll]] for (uint g = 0u; g < W_UNIT_GROUPS; g++) {
            vec4 wv[W_GROUP_VEC4];
            w_group(row, u, g, p.k, wv);
            if (WIN == 0u) {
                const uint xg = xo + w_group_x4(u, g);
                for (uint i = 0u; i < W_GROUP_VEC4; i++) a += dot(wv[i], x[xg + i]);
            } else {
                const uint s0 = 4u * w_group_x4(u, g) - p.x_col0; // x column of the group's first
                for (uint i = 0u; i < W_GROUP_VEC4; i++) {
                    vec4 xv;
                    [[unroll]] for (uint e = 0u; e < 4u; e++) {
                        const uint c = s0 + 4u * i + e; // wraps below the window: skipped too
                        xv[e] = c < p.x_cols ? x1[4u * xo + c] : 0.0;
                    }
                    a += dot(wv[i], xv);
                }
            }
        }
    return a;
}

void main()
{
    const uint nu = w_units(p.k);
#ifdef MOE_DOWN
    const uint t = gl_WorkGroupID.y;
#else
    const uint t = gl_WorkGroupID.y / p.n_used, j = gl_WorkGroupID.y % p.n_used;
    const uint e = ids[t * p.n_used + j];
    const uint xo = (t * p.x_stride + j * p.x_used_stride) / 4u;
#endif
    for (uint r = gl_SubgroupID; r < RPW; r += gl_NumSubgroups) {
        const uint n = gl_WorkGroupID.x * RPW + r;
        if (n >= p.rows) break; // uniform in the subgroup
        float acc = 0.0;
#ifdef MOE_DOWN
        for (uint j = 0u; j < p.n_used; j++) {
            const uint e = ids[t * p.n_used + j];
            if (e >= p.n_expert) continue; // uniform in the workgroup
            const uint xo = (t * p.x_stride + j * p.x_used_stride) / 4u;
            acc += wt[t * p.n_used + j] * row_dot(e * p.rows + n, xo, nu);
        }
        const float s = subgroupAdd(acc);
        if (subgroupElect()) {
            const uint i = t * p.y_stride + n;
            y[i] = p.accumulate != 0u ? y[i] + s : s;
        }
#else
        if (e < p.n_expert) acc = row_dot(e * p.rows + n, xo, nu);
        const float s = subgroupAdd(acc);
        if (subgroupElect()) y[t * p.y_stride + j * p.y_used_stride + n] = s;
#endif
    }
}
