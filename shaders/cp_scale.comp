#version 450
// cp_scale (DCP ag_rs backend): given this rank's partial O over its KV shard and the gathered
// LSE of every rank, computes LSE_global = logsumexp_n LSE_n (NaN / +inf count as -inf) and writes
//   send[h / Hl][b][h % Hl][:] = O[b][h][:] * exp(LSE_rank - LSE_global)   (0 for an empty shard)
// so that a reduce-scatter (sum) over the ranks yields the exact merged O of each rank's heads.
// Also writes lse_out[b][hl] = LSE_global of this rank's own heads.
#extension GL_GOOGLE_include_directive : require
#include "kernels/cp_params.h"
#include "dcp_math.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_cp_scale_params p; };
layout(std430, binding = 0) readonly buffer OIn { vec4 o_in[]; };      // [batch][N*Hl][D/4]
layout(std430, binding = 1) readonly buffer LAll { float lse_all[]; }; // [N][batch][N*Hl], rank n's rows at n * lse_stride
layout(std430, binding = 2) writeonly buffer Send { vec4 send[]; };    // [N][batch][Hl][D/4]
layout(std430, binding = 3) writeonly buffer LOut { float lse_out[]; };// [batch][Hl]

void main()
{
    uint dq = p.head_dim / 4u;
    uint heads = p.ranks * p.heads_local;
    uint idx = gl_GlobalInvocationID.x;
    if (idx >= p.batch * heads * dq) return;
    uint q = idx % dq;
    uint h = (idx / dq) % heads;
    uint b = idx / (dq * heads);
    uint row = b * heads + h;
    uint rows = p.batch * heads;
    uint ls = p.lse_stride != 0u ? p.lse_stride : rows; // floats between ranks' LSE rows

    float m = dcp_neg_inf();
    for (uint n = 0u; n < p.ranks; n++) m = max(m, dcp_sanitize_lse(lse_all[n * ls + row]));
    uint dst = h / p.heads_local, hl = h % p.heads_local;
    uint out_idx = ((dst * p.batch + b) * p.heads_local + hl) * dq + q;
    float mine = dcp_sanitize_lse(lse_all[p.rank * ls + row]);
    float lg = m;
    float w = 0.0;
    if (!dcp_is_neg_inf(m)) {
        float wsum = 0.0;
        for (uint n = 0u; n < p.ranks; n++) {
            float l = dcp_sanitize_lse(lse_all[n * ls + row]);
            if (!dcp_is_neg_inf(l)) wsum += exp(l - m);
        }
        lg = m + log(wsum);
        if (!dcp_is_neg_inf(mine)) w = exp(mine - m) / wsum;
    }
    send[out_idx] = w == 0.0 ? vec4(0.0) : o_in[idx] * w;
    if (dst == p.rank && q == 0u) lse_out[b * p.heads_local + hl] = lg;
}
