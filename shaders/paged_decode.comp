#version 450
// paged_decode: batched paged flash-decoding with grouped-query attention.
// One workgroup per (chunk of the sequence, KV head x head split, sequence). It reads each K and V
// row of its chunk once and scores all HG query heads that share the KV head against it, with an
// online softmax in fp32. It writes the normalised O and the LSE (natural log) of its chunk: the
// final state when the sequence has one chunk (direct), else a partial that lse_merge combines.
//
// Work split: the workgroup is cut into clusters of C invocations (C a power of two no larger than
// the subgroup). A cluster owns one token at a time (token slots: WG / C per workgroup); its lanes
// split the head dim in quads, hold their quads of the HG queries in registers, and reduce the
// dot products with subgroup shuffles. Each cluster keeps its own online-softmax state; the slots
// are merged once at the end of the chunk. No shared memory is touched in the token loop.
//
// Page layout (pool of equal pages, split over up to DCP_KV_MAX_SEGMENTS buffers):
//   page = K[kv_heads][page_size][D] followed by V[kv_heads][page_size][D], f16 or f32.
// Work per invocation is bounded by chunk_tokens (lavapipe on Mesa 22 ends loops after 65,535
// iterations per invocation; GPUs kill long dispatches).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "kv_pool.glsl"
#include "attn/attn_params.h"
#include "dcp_math.glsl"

layout(constant_id = 0) const uint WG = 64;  // invocations, a multiple of C
layout(constant_id = 1) const uint HG = 1;   // query heads per workgroup (divides Hq / Hkv)
layout(constant_id = 2) const uint D = 128;  // head dim, multiple of 4
layout(constant_id = 3) const uint C = 8;    // cluster size: power of two <= subgroup size
layout(local_size_x_id = 0) in;
const uint DQ = D / 4u;              // vec4 quads per row
const uint QPL = (DQ + C - 1u) / C;  // quads per lane
const uint TS = WG / C;              // token slots per workgroup

layout(push_constant) uniform PC { dcp_paged_decode_params p; };
layout(std430, binding = 0) readonly buffer Q { vec4 q[]; };          // [batch][Hq][D/4] f32
layout(std430, binding = 1) readonly buffer BT { uint bt[]; };        // [batch][bt_stride] page ids
layout(std430, binding = 2) readonly buffer Len { uint lens[]; };     // [batch] tokens
layout(std430, binding = 3) writeonly buffer O { vec4 o[]; };         // [(chunk)][batch][Hq][D/4]
layout(std430, binding = 4) writeonly buffer L { float lse[]; };      // [(chunk)][batch][Hq]
#ifdef KV_F16
layout(std430, binding = 5) readonly buffer KV { uvec2 data[]; } kv[DCP_KV_ARRAY];
vec4 unpack_kv(uvec2 w) { return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
#else
layout(std430, binding = 5) readonly buffer KV { vec4 data[]; } kv[DCP_KV_ARRAY];
vec4 unpack_kv(vec4 w) { return w; }
#endif
vec4 load_kv(uint seg, uint i)
{
    return unpack_kv(kv[DCP_KV_SEG(seg)].data[i]);
}

shared float slot_m[TS];        // per-slot running max of one head
shared float slot_l[TS];        // per-slot running sum of one head
shared vec4 slot_o[TS * DQ];    // per-slot unnormalised O of one head

void main()
{
    const uint lane = gl_LocalInvocationID.x;
    const uint slot = lane / C;
    const uint k = lane % C;
    const uint chunk = gl_WorkGroupID.x;
    const uint G = p.q_heads / p.kv_heads;
    const uint splits = G / HG;
    const uint kvh = gl_WorkGroupID.y / splits;
    const uint hq0 = kvh * G + (gl_WorkGroupID.y % splits) * HG;
    const uint b = gl_WorkGroupID.z;
    const uint len = lens[b];
    const uint t0 = chunk * p.chunk_tokens;
    const uint t1 = min(t0 + p.chunk_tokens, len);

    // This lane's quads of the HG (pre-scaled) queries.
    vec4 qr[HG * QPL];
    vec4 acc[HG * QPL];
    float m[HG];
    float l[HG];
    for (uint g = 0u; g < HG; g++) {
        for (uint i = 0u; i < QPL; i++) {
            uint d = k + i * C;
            qr[g * QPL + i] = d < DQ ? q[(b * p.q_heads + hq0 + g) * DQ + d] * p.scale : vec4(0.0);
            acc[g * QPL + i] = vec4(0.0);
        }
        m[g] = dcp_neg_inf();
        l[g] = 0.0;
    }
    const uint page_quads = 2u * p.kv_heads * p.page_size * DQ;
    const uint v_off = p.kv_heads * p.page_size * DQ;

    // Every lane runs the same number of iterations, so the shuffles see the whole subgroup. The
    // slot's token t advances by TS; its page and offset advance without a division per token.
    uint t = t0 + slot;
    uint lp = t / p.page_size;
    uint off = t % p.page_size;
    const uint seg_mask = (1u << p.segment_shift) - 1u;
    for (uint base = t0; base < t1; base += TS) {
        bool valid = t < t1;
        uint seg = 0u;
        uint kq = 0u;
        if (valid) {
            uint page = bt[b * p.bt_stride + lp];
            valid = page < p.total_pages;
            seg = valid ? page >> p.segment_shift : 0u;
            kq = (page & seg_mask) * page_quads + (kvh * p.page_size + off) * DQ;
        }
        t += TS;
        off += TS;
        if (off >= p.page_size) {
            lp += off / p.page_size;
            off %= p.page_size;
        }
        float s[HG];
        for (uint g = 0u; g < HG; g++) s[g] = 0.0;
        if (valid) {
            for (uint i = 0u; i < QPL; i++) {
                uint d = k + i * C;
                if (d < DQ) {
                    vec4 kk = load_kv(seg, kq + d);
                    for (uint g = 0u; g < HG; g++) s[g] += dot(qr[g * QPL + i], kk);
                }
            }
        }
        for (uint g = 0u; g < HG; g++)
            for (uint w = 1u; w < C; w <<= 1u) s[g] += subgroupShuffleXor(s[g], w);
        if (valid) { // uniform within the cluster; no subgroup operation inside
            float pr[HG];
            for (uint g = 0u; g < HG; g++) {
                if (s[g] > m[g]) { // a new maximum (rare after the first tokens): rescale
                    float alpha = dcp_is_neg_inf(m[g]) ? 0.0 : exp(m[g] - s[g]);
                    l[g] *= alpha;
                    for (uint i = 0u; i < QPL; i++) acc[g * QPL + i] *= alpha;
                    m[g] = s[g];
                }
                pr[g] = exp(s[g] - m[g]);
                l[g] += pr[g];
            }
            for (uint i = 0u; i < QPL; i++) {
                uint d = k + i * C;
                if (d < DQ) {
                    vec4 v = load_kv(seg, kq + v_off + d);
                    for (uint g = 0u; g < HG; g++) acc[g * QPL + i] += pr[g] * v;
                }
            }
        }
    }

    // Merge the token slots, one head at a time.
    for (uint g = 0u; g < HG; g++) {
        for (uint i = 0u; i < QPL; i++) {
            uint d = k + i * C;
            if (d < DQ) slot_o[slot * DQ + d] = acc[g * QPL + i];
        }
        if (k == 0u) {
            slot_m[slot] = m[g];
            slot_l[slot] = l[g];
        }
        barrier(); // slot_* writes -> reads
        const uint row = b * p.q_heads + hq0 + g;
        const uint orow = p.direct != 0u ? row : chunk * p.batch * p.q_heads + row;
        for (uint d = lane; d < DQ; d += WG) {
            float mx = dcp_neg_inf();
            for (uint s2 = 0u; s2 < TS; s2++) mx = max(mx, slot_m[s2]);
            vec4 sum = vec4(0.0);
            float lsum = 0.0;
            if (!dcp_is_neg_inf(mx)) {
                for (uint s2 = 0u; s2 < TS; s2++) {
                    if (dcp_is_neg_inf(slot_m[s2])) continue;
                    float w = exp(slot_m[s2] - mx);
                    sum += w * slot_o[s2 * DQ + d];
                    lsum += w * slot_l[s2];
                }
            }
            o[orow * DQ + d] = lsum > 0.0 ? sum / lsum : vec4(0.0);
            if (d == 0u) lse[orow] = lsum > 0.0 ? mx + log(lsum) : dcp_neg_inf();
        }
        barrier(); // slot_* reads -> next head's writes
    }
}
