#version 450
// paged_decode: batched paged flash-decoding with grouped-query attention.
// One workgroup per (chunk of the sequence, KV head x head split, sequence). It reads each K and V
// row of its chunk once and scores all HG query heads that share the KV head against it, with an
// online softmax in fp32. It writes the normalised O and the LSE (natural log) of its chunk: the
// final state when the sequence has one chunk (direct), else a partial that lse_merge combines.
//
// Page layout (pool of equal pages, split over up to DCP_KV_MAX_SEGMENTS buffers):
//   page = K[kv_heads][page_size][D] followed by V[kv_heads][page_size][D], f16 or f32.
// Work per invocation is bounded by chunk_tokens (lavapipe on Mesa 22 ends loops after 65,535
// iterations per invocation; GPUs kill long dispatches).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_nonuniform_qualifier : require
#include "attn/attn_params.h"
#include "dcp_math.glsl"

layout(constant_id = 0) const uint WG = 64;  // invocations; WG >= D / 4
layout(constant_id = 1) const uint HG = 1;   // query heads per workgroup (divides Hq / Hkv)
layout(constant_id = 2) const uint D = 128;  // head dim, multiple of 4
layout(local_size_x_id = 0) in;
const uint DQ = D / 4u;   // vec4 quads per row
const uint R = WG / DQ;   // token groups in the V pass
const uint NONE = 0xffffffffu;

layout(push_constant) uniform PC { dcp_paged_decode_params p; };
layout(std430, binding = 0) readonly buffer Q { vec4 q[]; };          // [batch][Hq][D/4] f32
layout(std430, binding = 1) readonly buffer BT { uint bt[]; };        // [batch][bt_stride] page ids
layout(std430, binding = 2) readonly buffer Len { uint lens[]; };     // [batch] tokens
layout(std430, binding = 3) writeonly buffer O { vec4 o[]; };         // [(chunk)][batch][Hq][D/4]
layout(std430, binding = 4) writeonly buffer L { float lse[]; };      // [(chunk)][batch][Hq]
#ifdef KV_F16
layout(std430, binding = 5) readonly buffer KV { uvec2 data[]; } kv[DCP_KV_MAX_SEGMENTS];
vec4 load_kv(uint seg, uint i)
{
    uvec2 w = kv[nonuniformEXT(seg)].data[i];
    return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
}
#else
layout(std430, binding = 5) readonly buffer KV { vec4 data[]; } kv[DCP_KV_MAX_SEGMENTS];
vec4 load_kv(uint seg, uint i) { return kv[nonuniformEXT(seg)].data[i]; }
#endif

shared vec4 qs[HG * DQ];        // scaled queries
shared float ps[HG * WG];       // softmax weights of the tile's tokens
shared uint row_seg[WG];        // segment of each tile token's page (NONE: no token)
shared uint row_v[WG];          // quad index of each tile token's V row in its segment
shared float red_max[HG * WG];  // per (head, subgroup) partial maxima
shared float red_sum[HG * WG];  // per (head, subgroup) partial sums
shared vec4 acc_s[HG * WG];     // final reduction of O over the token groups (R * DQ <= WG)

void main()
{
    const uint lane = gl_LocalInvocationID.x;
    const uint chunk = gl_WorkGroupID.x;
    const uint G = p.q_heads / p.kv_heads;
    const uint splits = G / HG;
    const uint kvh = gl_WorkGroupID.y / splits;
    const uint hq0 = kvh * G + (gl_WorkGroupID.y % splits) * HG;
    const uint b = gl_WorkGroupID.z;
    const uint len = lens[b];
    const uint t0 = chunk * p.chunk_tokens;
    const uint t1 = min(t0 + p.chunk_tokens, len);

    for (uint i = lane; i < HG * DQ; i += WG)
        qs[i] = q[(b * p.q_heads + hq0 + i / DQ) * DQ + i % DQ] * p.scale;
    barrier(); // qs writes -> qs reads

    float m[HG];
    float l[HG];
    vec4 acc[HG];
    for (uint g = 0u; g < HG; g++) {
        m[g] = dcp_neg_inf();
        l[g] = 0.0;
        acc[g] = vec4(0.0);
    }
    const uint page_quads = 2u * p.kv_heads * p.page_size * DQ;
    const uint v_off = p.kv_heads * p.page_size * DQ;
    const uint rq = lane % DQ;
    const uint rr = lane / DQ;

    for (uint base = t0; base < t1; base += WG) {
        // Scores: one invocation per token of the tile, all HG heads from one read of the K row.
        const uint t = base + lane;
        bool valid = t < t1;
        uint seg = NONE;
        uint kq = 0u;
        if (valid) {
            uint page = bt[b * p.bt_stride + t / p.page_size];
            valid = page < p.total_pages;
            if (valid) {
                seg = page / p.pages_per_segment;
                kq = (page % p.pages_per_segment) * page_quads + (kvh * p.page_size + t % p.page_size) * DQ;
            }
        }
        float s[HG];
        for (uint g = 0u; g < HG; g++) s[g] = 0.0;
        if (valid) {
            for (uint d = 0u; d < DQ; d++) {
                vec4 k = load_kv(seg, kq + d);
                for (uint g = 0u; g < HG; g++) s[g] += dot(qs[g * DQ + d], k);
            }
        }
        row_seg[lane] = valid ? seg : NONE;
        row_v[lane] = kq + v_off;
        for (uint g = 0u; g < HG; g++) {
            float mx = subgroupMax(valid ? s[g] : dcp_neg_inf());
            if (subgroupElect()) red_max[g * WG + gl_SubgroupID] = mx;
        }
        barrier(); // red_max, row_* writes -> reads

        float alpha[HG];
        for (uint g = 0u; g < HG; g++) {
            float mt = dcp_neg_inf();
            for (uint k = 0u; k < gl_NumSubgroups; k++) mt = max(mt, red_max[g * WG + k]);
            float mn = max(m[g], mt);
            alpha[g] = dcp_is_neg_inf(m[g]) ? 0.0 : exp(m[g] - mn);
            float pr = (valid && !dcp_is_neg_inf(mn)) ? exp(s[g] - mn) : 0.0;
            ps[g * WG + lane] = pr;
            float sm = subgroupAdd(pr);
            if (subgroupElect()) red_sum[g * WG + gl_SubgroupID] = sm;
            m[g] = mn;
        }
        barrier(); // ps, red_sum writes -> reads

        for (uint g = 0u; g < HG; g++) {
            float ts = 0.0;
            for (uint k = 0u; k < gl_NumSubgroups; k++) ts += red_sum[g * WG + k];
            l[g] = l[g] * alpha[g] + ts;
            acc[g] *= alpha[g];
        }
        // Values: invocation (rr, rq) adds quad rq of the V rows of tokens rr, rr + R, ...
        if (rr < R) {
            const uint n = min(WG, t1 - base);
            for (uint tt = rr; tt < n; tt += R) {
                uint sg = row_seg[tt];
                if (sg == NONE) continue;
                vec4 v = load_kv(sg, row_v[tt] + rq);
                for (uint g = 0u; g < HG; g++) acc[g] += ps[g * WG + tt] * v;
            }
        }
        barrier(); // ps, row_*, red_* reads -> next tile's writes
    }

    if (rr < R)
        for (uint g = 0u; g < HG; g++) acc_s[(rr * HG + g) * DQ + rq] = acc[g];
    barrier(); // acc_s writes -> reads

    for (uint i = lane; i < HG * DQ; i += WG) {
        const uint g = i / DQ;
        const uint d = i % DQ;
        vec4 sum = vec4(0.0);
        for (uint r = 0u; r < R; r++) sum += acc_s[(r * HG + g) * DQ + d];
        const float lg = l[g];
        const uint row = b * p.q_heads + hq0 + g;
        const uint orow = p.direct != 0u ? row : chunk * p.batch * p.q_heads + row;
        o[orow * DQ + d] = lg > 0.0 ? sum / lg : vec4(0.0);
        if (d == 0u) lse[orow] = lg > 0.0 ? m[g] + log(lg) : dcp_neg_inf();
    }
}
