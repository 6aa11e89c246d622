#version 450
// add: y[i] = a[i] + b[i], i < n, f32 (y may alias a or b: each invocation reads then writes its
// own element). Residual adds inside the model step are fused into matmul (accumulate); this is
// the stand-alone kernel.
// ADD_ROWS: y[t][i] += b[i] (dcp_add_rows_params): a bias added to every token row, in place.
#extension GL_GOOGLE_include_directive : require
#include "kernels/ops_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
#ifdef ADD_ROWS
layout(push_constant) uniform PC { dcp_add_rows_params p; };
layout(std430, binding = 0) buffer Y { float y[]; };          // [tokens][y_stride], updated
layout(std430, binding = 1) readonly buffer B { float b[]; }; // [n]

void main()
{
    const uint i = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
    if (i >= p.n) return;
    y[t * p.y_stride + i] += b[i];
}
#else
layout(push_constant) uniform PC { dcp_add_params p; };
layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };

void main()
{
    // 2D grid so that n may exceed 65,535 workgroups of WG.
    const uint i = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * WG + gl_LocalInvocationID.x;
    if (i >= p.n) return;
    y[i] = a[i] + b[i];
}
#endif
