#version 450
// matmul: y[t][n] (+)= sum_k W[n][k] x[t][k] for a small batch of token rows (decode: 1 token;
// prefill: many). W [n_out][k] in one of the weight dtypes of weights.glsl; x, y f32.
// One subgroup per output row: its lanes split the row in units (a quad, or for the
// block-quantized types a dequantized-in-registers group of 32 or 64 weights) and reduce with
// subgroupAdd; each workgroup holds RPW rows and DCP_MATMUL_TOKENS tokens, so a weight unit is
// loaded and dequantized once per DCP_MATMUL_TOKENS tokens. A token's sum does not depend on the
// other tokens of the batch (same lanes, same order for any T). Loop work per invocation:
// (units/subgroup) * groups * DCP_MATMUL_TOKENS * rows it owns (bounded: lavapipe on Mesa 22
// ends loops after 65,535 iterations per invocation).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "model/model_params.h"

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

void main()
{
    const uint t0 = gl_WorkGroupID.y * TB;
    const uint nt = min(TB, p.tokens - t0);
    const uint nu = w_units(p.k);
    const uint xs = p.x_stride / 4u;
    const uint xo = p.x_offset / 4u;
    for (uint r = gl_SubgroupID; r < RPW; r += gl_NumSubgroups) {
        const uint n = gl_WorkGroupID.x * RPW + r;
        if (n >= p.n_out) break; // uniform in the subgroup
        float acc[TB];
        for (uint j = 0u; j < TB; j++) acc[j] = 0.0;
        for (uint u = gl_SubgroupInvocationID; u < nu; u += gl_SubgroupSize) {
            [[dont_unroll]] for (uint g = 0u; g < W_UNIT_GROUPS; g++) {
                vec4 wv[W_GROUP_VEC4];
                w_group(n, u, g, p.k, wv);
                const uint xg = xo + w_group_x4(u, g);
                for (uint j = 0u; j < TB; j++)
                    if (j < nt)
                        for (uint i = 0u; i < W_GROUP_VEC4; i++) acc[j] += dot(wv[i], x[xg + (t0 + j) * xs + i]);
            }
        }
        for (uint j = 0u; j < TB; j++) {
            const float s = subgroupAdd(acc[j]);
            if (j < nt && subgroupElect()) {
                const uint i = (t0 + j) * p.y_stride + n;
                y[i] = p.accumulate != 0u ? y[i] + s : s;
            }
        }
    }
}
