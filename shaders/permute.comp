#version 450
// permute: f32 copy swapping the two outer dims of a [A][B][C] tensor with strides:
//   dst[b * dst_stride_b + a * C + c] = src[a * src_stride_a + b * C + c]
// Used by the DCP step to unpack the gathered Q ([rank][batch][Hl*D] -> [batch][rank][Hl*D]) and
// to pack a2a messages ([batch][rank][Hl*D] -> [rank][batch][Hl*D] inside message blocks).
#extension GL_GOOGLE_include_directive : require
#include "kernels/cp_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_permute_params p; };
layout(std430, binding = 0) readonly buffer Src { float src[]; };
layout(std430, binding = 1) writeonly buffer Dst { float dst[]; };

void main()
{
    uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * WG;
    if (idx >= p.a * p.b * p.c) return;
    uint c = idx % p.c;
    uint b = (idx / p.c) % p.b;
    uint a = idx / (p.c * p.b);
    dst[b * p.dst_stride_b + a * p.c + c] = src[a * p.src_stride_a + b * p.c + c];
}
