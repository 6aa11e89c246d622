#version 450
// The benchmark's yardstick: a plain streaming read of a buffer (vec4 words), summed so the loads
// cannot be removed. Each workgroup reads words_per_group consecutive words.
#extension GL_GOOGLE_include_directive : require
#include "attn/attn_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_stream_read_params p; };
layout(std430, binding = 0) readonly buffer Src { uvec4 src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uint dst[]; };

void main()
{
    uint begin = gl_WorkGroupID.x * (p.words_per_group / 4u);
    uint end = min(begin + p.words_per_group / 4u, p.words / 4u);
    uvec4 acc = uvec4(0u);
    for (uint i = begin + gl_LocalInvocationID.x; i < end; i += WG)
        acc += src[i];
    uint s = acc.x + acc.y + acc.z + acc.w;
    if (s == 0x9e3779b9u) dst[0] = s; // practically never true; keeps the reads alive
}
