#version 450
// get_rows: embedding lookup y[t][:] = W[ids[t]][:], W [n_rows][k] in a weight dtype of
// weights.glsl (block-quantized rows dequantized unit by unit), y f32. One workgroup per token;
// an id outside [0, n_rows) gives a zero row.
#extension GL_GOOGLE_include_directive : require
#include "kernels/ops_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_get_rows_params p; };
layout(std430, binding = 0) readonly buffer W { uint w[]; };    // weights
layout(std430, binding = 1) readonly buffer Ids { uint ids[]; }; // [tokens] token ids
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [tokens][y_stride] f32
#define wscale_offset p.scale_offset
#include "weights.glsl"

void main()
{
    const uint t = gl_WorkGroupID.x;
    const uint id = ids[t];
    for (uint u = gl_LocalInvocationID.x; u < w_units(p.k); u += WG) {
        for (uint g = 0u; g < W_UNIT_GROUPS; g++) {
            vec4 wv[W_GROUP_VEC4];
            if (id < p.n_rows) w_group(id, u, g, p.k, wv);
            for (uint q = 0u; q < W_GROUP_VEC4; q++) {
                const vec4 v = id < p.n_rows ? wv[q] : vec4(0.0);
                const uint i = t * p.y_stride + 4u * (w_group_x4(u, g) + q);
                y[i] = v.x;
                y[i + 1u] = v.y;
                y[i + 2u] = v.z;
                y[i + 3u] = v.w;
            }
        }
    }
}
