#version 450
// argmax: out[r] = the smallest index of the largest value in row r of x (NaN ignored; a row of
// only NaN gives 0). x [rows][stride] f32, out [rows] u32. One workgroup per row.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "kernels/ops_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_argmax_params p; };
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Out { uint o[]; };

shared float best_v[WG];
shared uint best_i[WG];

void main()
{
    const uint r = gl_WorkGroupID.x;
    const uint lane = gl_LocalInvocationID.x;
    float bv = uintBitsToFloat(0xff800000u); // -inf
    uint bi = 0xffffffffu;
    for (uint i = lane; i < p.n; i += WG) {
        const float v = x[r * p.stride + i];
        if (!isnan(v) && (bi == 0xffffffffu || v > bv)) { // strided scan: first hit is the smallest index
            bv = v;
            bi = i;
        }
    }
    const float m = subgroupMax(bi == 0xffffffffu ? uintBitsToFloat(0xff800000u) : bv);
    const uint mi = subgroupMin((bi != 0xffffffffu && bv == m) ? bi : 0xffffffffu);
    if (subgroupElect()) {
        best_v[gl_SubgroupID] = m;
        best_i[gl_SubgroupID] = mi;
    }
    barrier(); // best_* writes -> reads
    if (lane == 0u) {
        float v = uintBitsToFloat(0xff800000u);
        uint idx = 0xffffffffu;
        for (uint k = 0u; k < gl_NumSubgroups; k++) {
            const uint ki = best_i[k];
            if (ki == 0xffffffffu) continue;
            if (idx == 0xffffffffu || best_v[k] > v || (best_v[k] == v && ki < idx)) {
                v = best_v[k];
                idx = ki;
            }
        }
        o[r] = idx == 0xffffffffu ? 0u : idx;
    }
}
