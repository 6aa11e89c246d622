#version 450
// matmul: y[t][n] (+)= sum_k W[n][k] x[t][k] for a small batch of token rows (decode: 1 token;
// prefill: many). W [n_out][k] in one of the weight dtypes of weights.glsl; x, y f32.
// One subgroup per R = DCP_MATMUL_SUBGROUP_ROWS output rows: its lanes split the rows in units (a
// quad, or for the block-quantized types 32 or 64 weights dequantized in registers, group by
// group), load each x vector once for the R rows, and reduce with subgroupAdd; each workgroup
// holds RPW rows and DCP_MATMUL_TOKENS tokens, so a weight unit is loaded and dequantized once per
// DCP_MATMUL_TOKENS tokens. A row's sum for a token does not depend on the other tokens or rows of
// the dispatch (same lanes, same order for any T). Loop work per invocation: (units/subgroup) *
// groups * DCP_MATMUL_TOKENS * (R rows) per row block it owns (bounded: lavapipe on Mesa 22 ends
// loops after 65,535 iterations per invocation).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "ops/ops_params.h"

layout(constant_id = 0) const uint WG = 64;  // invocations
layout(constant_id = 1) const uint RPW = 8;  // output rows per workgroup
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_matmul_params p; };
layout(std430, binding = 0) readonly buffer W { uint w[]; };   // weights, see weights.glsl
layout(std430, binding = 1) readonly buffer X { vec4 x[]; };   // [tokens][x_stride/4] f32
layout(std430, binding = 2) buffer Y { float y[]; };           // [tokens][y_stride] f32
#define wscale_offset p.scale_offset
#include "weights.glsl"

const uint TB = DCP_MATMUL_TOKENS;
const uint R = DCP_MATMUL_SUBGROUP_ROWS;

void main()
{
    const uint t0 = gl_WorkGroupID.y * TB;
    const uint nt = min(TB, p.tokens - t0);
    const uint nu = w_units(p.k);
    const uint xs = p.x_stride / 4u;
    const uint xo = p.x_offset / 4u;
    for (uint r0 = gl_SubgroupID * R; r0 < RPW; r0 += gl_NumSubgroups * R) {
        const uint n0 = gl_WorkGroupID.x * RPW + r0;
        if (n0 >= p.n_out) break; // uniform in the subgroup
        const uint nr = min(R, p.n_out - n0);
        float acc[R][TB];
        for (uint r = 0u; r < R; r++)
            for (uint j = 0u; j < TB; j++) acc[r][j] = 0.0;
        for (uint u = gl_SubgroupInvocationID; u < nu; u += gl_SubgroupSize) {
            [[dont_unroll]] for (uint g = 0u; g < W_UNIT_GROUPS; g++) {
                vec4 wv[R][W_GROUP_VEC4];
                for (uint r = 0u; r < R; r++) {
                    if (r < nr) w_group(n0 + r, u, g, p.k, wv[r]);
                    else
                        for (uint i = 0u; i < W_GROUP_VEC4; i++) wv[r][i] = vec4(0.0);
                }
                const uint xg = xo + w_group_x4(u, g);
                for (uint j = 0u; j < TB; j++)
                    if (j < nt) {
                        vec4 xv[W_GROUP_VEC4];
                        for (uint i = 0u; i < W_GROUP_VEC4; i++) xv[i] = x[xg + (t0 + j) * xs + i];
                        for (uint r = 0u; r < R; r++)
                            for (uint i = 0u; i < W_GROUP_VEC4; i++) acc[r][j] += dot(wv[r][i], xv[i]);
                    }
            }
        }
        for (uint r = 0u; r < R; r++)
            for (uint j = 0u; j < TB; j++) {
                const float s = subgroupAdd(acc[r][j]);
                if (r < nr && j < nt && subgroupElect()) {
                    const uint i = (t0 + j) * p.y_stride + n0 + r;
                    y[i] = p.accumulate != 0u ? y[i] + s : s;
                }
            }
    }
}
