#version 450
// swiglu: y[t][i] = silu(g) * u with g = x[t][i], u = x[t][n + i], silu(g) = g / (1 + exp(-g)).
// x [tokens][x_stride] f32 (gate half then up half), y [tokens][y_stride] f32.
// Grid (ceil(n / WG), tokens).
#extension GL_GOOGLE_include_directive : require
#include "kernels/ops_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_swiglu_params p; };
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) writeonly buffer Y { float y[]; };

void main()
{
    const uint i = gl_GlobalInvocationID.x;
    const uint t = gl_WorkGroupID.y;
    if (i >= p.n) return;
    const float g = x[t * p.x_stride + i];
    const float u = x[t * p.x_stride + p.n + i];
    y[t * p.y_stride + i] = g / (1.0 + exp(-g)) * u;
}
