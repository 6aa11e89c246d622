#version 450
// head_matmul: per-head matrix products for MLA (src/kernels/ds2_params.h): with W [heads rows][k]
//   y[t][h y_head_stride + y_offset + n] (+)= sum_k W[h rows + n][k] x[t][h x_head_stride + x_offset + k]
// (the absorption q_lat[h] = W_UK[h] q_nope[h], kv_lora rows of nope; the up-projection
// o[h] = W_UV[h] o_lat[h], v rows of kv_lora). W in one of the weight dtypes of weights.glsl
// (block-quantized types dequantized in registers, unit by unit); x, y f32.
// As matmul.comp: one subgroup per output row, its lanes split k in weight units and reduce with
// subgroupAdd; a workgroup holds RPW rows of one head and DCP_HEAD_MATMUL_TOKENS tokens, so a
// weight unit is loaded once per token batch. Loop work per invocation: (units/subgroup) * tokens of
// the batch * rows it owns (bounded for Mesa 22's 65,535-iteration limit).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "kernels/ds2_params.h"

layout(constant_id = 0) const uint WG = 64;  // invocations
layout(constant_id = 1) const uint RPW = 8;  // output rows per workgroup
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_head_matmul_params p; };
layout(std430, binding = 0) readonly buffer W { uint w[]; };   // weights, see weights.glsl
layout(std430, binding = 1) readonly buffer X { vec4 x[]; };   // [tokens][x_stride/4] f32
layout(std430, binding = 2) buffer Y { float y[]; };           // [tokens][y_stride] f32
#define wscale_offset p.scale_offset
#define W_QUAD_UNITS 1 // Q8_0 read a quad a unit: see weights.glsl
#include "weights.glsl"

const uint TB = DCP_HEAD_MATMUL_TOKENS;

void main()
{
    const uint h = gl_WorkGroupID.y;
    const uint t0 = gl_WorkGroupID.z * TB;
    const uint nt = min(TB, p.tokens - t0);
    const uint nu = w_units(p.k);
    const uint xs = p.x_stride / 4u;
    const uint xo = (h * p.x_head_stride + p.x_offset) / 4u;
    for (uint r = gl_SubgroupID; r < RPW; r += gl_NumSubgroups) {
        const uint n = gl_WorkGroupID.x * RPW + r;
        if (n >= p.rows) break; // uniform in the subgroup
        float acc[TB];
        for (uint j = 0u; j < TB; j++) acc[j] = 0.0;
        for (uint u = gl_SubgroupInvocationID; u < nu; u += gl_SubgroupSize) {
            [[dont_unroll]] for (uint g = 0u; g < W_UNIT_GROUPS; g++) {
                vec4 wv[W_GROUP_VEC4];
                w_group(h * p.rows + n, u, g, p.k, wv);
                const uint xg = xo + w_group_x4(u, g);
                for (uint j = 0u; j < TB; j++)
                    if (j < nt)
                        for (uint i = 0u; i < W_GROUP_VEC4; i++) acc[j] += dot(wv[i], x[xg + (t0 + j) * xs + i]);
            }
        }
        for (uint j = 0u; j < TB; j++) {
            const float s = subgroupAdd(acc[j]);
            if (j < nt && subgroupElect()) {
                const uint i = (t0 + j) * p.y_stride + h * p.y_head_stride + p.y_offset + n;
                y[i] = p.accumulate != 0u ? y[i] + s : s;
            }
        }
    }
}
