#version 450
// part_sum: the receiving side of a reduction through mailboxes (all-reduce of the TP partial
// outputs, reduce-scatter of ag_rs). One invocation per element i < n, f32:
//   y[y_offset + i] = (accumulate ? y[y_offset + i] : 0) + sum_s x[x_offset + s * part_stride + i]
// summed from 0 in rank order s = 0 .. parts-1 (fixed, so every rank gets bitwise the same sum).
// x and y may be the same buffer only when the ranges do not overlap.
#extension GL_GOOGLE_include_directive : require
#include "kernels/cp_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_part_sum_params p; };
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };

void main()
{
    // 2D grid so that n may exceed 65,535 workgroups of WG.
    const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (i >= p.n) return;
    float acc = 0.0;
    for (uint s = 0; s < p.parts; s++) acc += x[p.x_offset + s * p.part_stride + i];
    y[p.y_offset + i] = p.accumulate != 0 ? y[p.y_offset + i] + acc : acc;
}
