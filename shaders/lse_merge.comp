#version 450
// lse_merge: merges P partial attention states (O normalised, LSE natural log) per row into one:
//   M = max_p LSE_p (NaN / +inf count as -inf); all empty: O = 0, LSE = -inf
//   w_p = exp(LSE_p - M);  O = sum_p w_p O_p / sum_p w_p;  LSE = M + ln(sum_p w_p)
// One invocation per (row, 4 dims). Serves split-KV chunks and DCP ranks alike.
#extension GL_GOOGLE_include_directive : require
#include "kernels/attn_params.h"
#include "dcp_math.glsl"
#include "out_groups.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_lse_merge_params p; };
layout(std430, binding = 0) readonly buffer OIn { float o_in[]; };    // [P][rows][D] (strided)
layout(std430, binding = 1) readonly buffer LIn { float lse_in[]; };  // [P][rows] (strided)
layout(std430, binding = 2) writeonly buffer OOut { vec4 o_out[]; };  // [rows][D/4], or grouped
layout(std430, binding = 3) writeonly buffer LOut { float lse_out[]; }; // [rows], or grouped

void main()
{
    uint dq = p.head_dim / 4u;
    uint idx = gl_GlobalInvocationID.x;
    if (idx >= p.rows * dq) return;
    uint row = idx / dq;
    uint q = idx % dq;

    float m = dcp_neg_inf();
    for (uint i = 0u; i < p.parts; i++)
        m = max(m, dcp_sanitize_lse(lse_in[i * p.lse_part_stride + row]));
    const uint oi = dcp_out_at(row, p.out_heads, p.out_group, p.o_group_stride, dq) + q;
    const uint li = dcp_out_at(row, p.out_heads, p.out_group, p.lse_group_stride, 1u);
    if (dcp_is_neg_inf(m)) {
        o_out[oi] = vec4(0.0);
        if (q == 0u) lse_out[li] = m;
        return;
    }
    vec4 acc = vec4(0.0);
    float wsum = 0.0;
    for (uint i = 0u; i < p.parts; i++) {
        float l = dcp_sanitize_lse(lse_in[i * p.lse_part_stride + row]);
        if (dcp_is_neg_inf(l)) continue; // weight 0: an empty part contributes nothing
        float w = exp(l - m);
        uint base = i * p.o_part_stride + row * p.head_dim + q * 4u;
        acc += w * vec4(o_in[base], o_in[base + 1u], o_in[base + 2u], o_in[base + 3u]);
        wsum += w;
    }
    o_out[oi] = acc / wsum;
    if (q == 0u) lse_out[li] = m + log(wsum);
}
