#version 450
// mla_rope: llama.cpp NORM-mode RoPE (adjacent pairs (2i, 2i+1), i < n_rot/2) of one part of every
// head of a token row, written to another buffer's place (src/kernels/ds2_params.h): MLA's q_pe, from
// the query projection [heads][nope | rope] to the absorbed query [heads][kv_lora | rope]. The
// (cos, sin) table cs [tokens][n_rot/2] comes from the host (dcp_rope_cs: YaRN, magnitude).
// One invocation per (token, head, pair).
#extension GL_GOOGLE_include_directive : require
#include "kernels/ds2_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_mla_rope_params p; };
layout(std430, binding = 0) readonly buffer Src { vec2 src[]; };  // [tokens][src_stride/2]
layout(std430, binding = 1) readonly buffer CS { vec2 cs[]; };    // [tokens][n_rot/2] (cos, sin)
layout(std430, binding = 2) writeonly buffer Dst { vec2 dst[]; }; // [tokens][dst_stride/2]

void main()
{
    const uint t = gl_WorkGroupID.y;
    const uint half_r = p.n_rot / 2u;
    const uint idx = gl_GlobalInvocationID.x;
    if (idx >= p.heads * half_r) return;
    const uint h = idx / half_r, i = idx % half_r;
    const vec2 v = src[(t * p.src_stride + h * p.src_head_stride + p.src_offset) / 2u + i];
    const vec2 c = cs[t * half_r + i];
    dst[(t * p.dst_stride + h * p.dst_head_stride + p.dst_offset) / 2u + i] = vec2(v.x * c.x - v.y * c.y, v.x * c.y + v.y * c.x);
}
