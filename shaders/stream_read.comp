#version 450
// The benchmark's yardstick: a plain streaming read of a buffer, summed so the loads cannot be
// removed. Each workgroup reads words_per_group consecutive 32-bit words, 16 bytes per load
// (uvec4), or 4 bytes per load with STREAM_U32.
#extension GL_GOOGLE_include_directive : require
#include "kernels/yardstick_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_stream_read_params p; };
#ifdef STREAM_U32
layout(std430, binding = 0) readonly buffer Src { uint src[]; };
const uint PER_LOAD = 1u;
#define WIDE uint
#else
layout(std430, binding = 0) readonly buffer Src { uvec4 src[]; };
const uint PER_LOAD = 4u;
#define WIDE uvec4
#endif
layout(std430, binding = 1) writeonly buffer Dst { uint dst[]; };

void main()
{
    uint begin = gl_WorkGroupID.x * (p.words_per_group / PER_LOAD);
    uint end = min(begin + p.words_per_group / PER_LOAD, p.words / PER_LOAD);
    WIDE acc = WIDE(0u);
    for (uint i = begin + gl_LocalInvocationID.x; i < end; i += WG)
        acc += src[i];
#ifdef STREAM_U32
    uint s = acc;
#else
    uint s = acc.x + acc.y + acc.z + acc.w;
#endif
    if (s == 0x9e3779b9u) dst[0] = s; // practically never true; keeps the reads alive
}
