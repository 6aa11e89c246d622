#version 450
// rmsnorm: y[t][i] = x[t][i] * w[i] / sqrt(mean_i x[t][i]^2 + eps); x, w, y f32.
// One workgroup per token row; sum of squares in f32 (subgroupAdd, then across subgroups).
// RMSNORM_PARTS: first x += the sum of an all-reduce's parts (dcp_rmsnorm_parts_params).
// RMSNORM_HEADS: each head of each token row normed in place (qwen3's Q/K norm,
// dcp_rmsnorm_heads_params); one workgroup per (head, token).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "kernels/ops_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
#ifdef RMSNORM_HEADS
layout(push_constant) uniform PC { dcp_rmsnorm_heads_params p; };
layout(std430, binding = 0) buffer X { float x[]; };            // [tokens][x_stride], updated
layout(std430, binding = 1) readonly buffer Wt { float wt[]; }; // [2][head_dim]

shared float part[WG];

void main()
{
    const uint h = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
    const uint lane = gl_LocalInvocationID.x;
    const uint base = p.x_offset + t * p.x_stride + h * p.head_dim;
    const uint wo = h < p.w_split ? 0u : p.head_dim;
    float s = 0.0;
    for (uint i = lane; i < p.head_dim; i += WG) s += x[base + i] * x[base + i];
    s = subgroupAdd(s);
    if (subgroupElect()) part[gl_SubgroupID] = s;
    barrier(); // part writes -> reads (and every read of x -> the writes below)
    float tot = 0.0;
    for (uint k = 0u; k < gl_NumSubgroups; k++) tot += part[k];
    const float inv = 1.0 / sqrt(tot / float(p.head_dim) + p.eps);
    for (uint i = lane; i < p.head_dim; i += WG) x[base + i] = x[base + i] * inv * wt[wo + i];
}
#else
#ifdef RMSNORM_PARTS
// Variant: x += the rank-ordered sum of the all-reduce's parts first (see dcp_rmsnorm_parts_params).
layout(push_constant) uniform PC { dcp_rmsnorm_parts_params pp; };
#define p pp.norm
layout(std430, binding = 0) buffer X { float x[]; };            // [tokens][x_stride], updated
layout(std430, binding = 3) readonly buffer P { float parts[]; }; // [parts][tokens][n] with strides
#else
layout(push_constant) uniform PC { dcp_rmsnorm_params p; };
layout(std430, binding = 0) readonly buffer X { float x[]; };   // [tokens][x_stride]
#endif
layout(std430, binding = 1) readonly buffer Wt { float wt[]; }; // [n]
layout(std430, binding = 2) writeonly buffer Y { float y[]; };  // [tokens][y_stride]

shared float part[WG];

void main()
{
    const uint t = gl_WorkGroupID.x;
    const uint lane = gl_LocalInvocationID.x;
    float s = 0.0;
    for (uint i = lane; i < p.n; i += WG) {
#ifdef RMSNORM_PARTS
        float acc = 0.0;
        for (uint r = 0u; r < pp.parts; r++) acc += parts[pp.part_offset + r * pp.part_stride + t * p.n + i];
        const float v = x[p.x_offset + t * p.x_stride + i] + acc;
        x[p.x_offset + t * p.x_stride + i] = v; // read back below by this same invocation
#else
        const float v = x[p.x_offset + t * p.x_stride + i];
#endif
        s += v * v;
    }
    s = subgroupAdd(s);
    if (subgroupElect()) part[gl_SubgroupID] = s;
    barrier(); // part writes -> reads
    float tot = 0.0;
    for (uint k = 0u; k < gl_NumSubgroups; k++) tot += part[k];
    const float inv = 1.0 / sqrt(tot / float(p.n) + p.eps);
    for (uint i = lane; i < p.n; i += WG) y[t * p.y_stride + i] = x[p.x_offset + t * p.x_stride + i] * inv * wt[i];
}
#endif
