#version 450
// paged_decode: batched paged flash-decoding with grouped-query attention.
// One workgroup per (chunk of the sequence, KV head x head split, sequence). It reads each K and V
// row of its chunk once and scores all HG query heads that share the KV head against it, with an
// online softmax in fp32. It writes the normalised O and the LSE (natural log) of its chunk: the
// final state when the sequence has one chunk (direct), else a partial that lse_merge combines.
//
// Work split: the workgroup is cut into clusters of C invocations (C a power of two no larger than
// the subgroup). A cluster (token slot: WG / C per workgroup) owns a run of consecutive tokens of
// the chunk, its 1 / (WG / C) share, and walks it one token at a time; its lanes split the head
// dim in quads, hold their quads of the HG queries in registers, and reduce the dot products with
// subgroup shuffles. Each cluster keeps its own online-softmax state; the slots are merged once at
// the end of the chunk. No shared memory is touched in the token loop. Consecutive tokens make a
// cluster read a page's K rows (and its V rows) as one run: lavapipe runs a workgroup's subgroups
// one after another, and with the slots interleaved (slot s on tokens s, s + WG / C, ...) each
// subgroup read 2 of a page's 16 rows (8 slots) and the next ones read the rest later: 1.2-3.3x
// the step at 32K with f16, up to 1.7x with q8_0 (docs/design.md section 6).
//
// Page layout (pool of equal pages, split over up to DCP_KV_MAX_SEGMENTS buffers), f16, f32 or q8_0:
//   page = K[kv_heads][page_size][row] followed by V[kv_heads][page_size][row]; addressing in
//   shaders/common/kv_pool.glsl, in units of one load here (f32, f16), or of 32-bit words for q8_0
//   (KV_Q8), whose rows are D int8 values then the f16 scales of the blocks of 32
//   (src/kernels/kv_params.h): a unit of 8 values is two words of values, whose quants enter the
//   products as f32 with the block's scale applied once per unit and head (d (q . k), (p d) v);
//   a lane's units are adjacent, so one scale load serves them where they share a block.
// Work per invocation is bounded by chunk_tokens (lavapipe on Mesa 22 ends loops after 65,535
// iterations per invocation; GPUs kill long dispatches).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "kv_pool.glsl"
#include "kernels/attn_params.h"
#include "dcp_math.glsl"
#include "out_groups.glsl"

layout(constant_id = 0) const uint WG = 64;  // invocations, a multiple of C
layout(constant_id = 1) const uint HG = 1;   // query heads per workgroup (divides Hq / Hkv)
layout(constant_id = 2) const uint D = 128;  // head dim, multiple of 4 (of 8 with KV_X8, of 32 with KV_Q8)
layout(constant_id = 3) const uint C = 8;    // cluster size: power of two <= subgroup size
layout(local_size_x_id = 0) in;

// A unit is one 16-byte (f32, f16 x8) or 8-byte (f16 x4, q8_0 x8) load of NV4 vec4s of a K or V row.
#if (defined(KV_F16) && defined(KV_X8)) || defined(KV_Q8)
const uint NV4 = 2u;
#else
const uint NV4 = 1u;
#endif
const uint DQ = D / 4u;              // vec4 quads per row
const uint DU = DQ / NV4;            // units per row
#ifdef KV_Q8
const uint RU = DCP_KV_Q8_ROW_WORDS(D); // addressing units (words) per stored row
#else
const uint RU = DU;                  // addressing units per stored row: the load units
#endif
const uint UPL = (DU + C - 1u) / C;  // units per lane
const uint TS = WG / C;              // token slots per workgroup
#ifdef KV_Q8
// q8_0: a lane's units are adjacent (k UPL + i), so where UPL divides the 4 units of a block of
// 32 they share one block and its scale is loaded once per row.
const bool ONE_BLOCK = 4u % UPL == 0u;
uint lane_unit(uint k, uint i) { return k * UPL + i; }
#else
uint lane_unit(uint k, uint i) { return k + i * C; } // lanes interleaved: a cluster's loads adjacent
#endif

layout(push_constant) uniform PC { dcp_paged_decode_params p; };
layout(std430, binding = 0) readonly buffer Q { vec4 q[]; };          // [batch][Hq][D/4] f32
layout(std430, binding = 1) readonly buffer BT { uint bt[]; };        // [batch][bt_stride] page ids
layout(std430, binding = 2) readonly buffer Len { uint lens[]; };     // [batch] tokens
layout(std430, binding = 3) writeonly buffer O { vec4 o[]; };         // [(chunk)][batch][Hq][D/4] (direct: or grouped)
layout(std430, binding = 4) writeonly buffer L { float lse[]; };      // [(chunk)][batch][Hq] (direct: or grouped)
// load_unit(seg, row, u, v): unit u of the row whose first addressing unit is `row`.
#if defined(KV_Q8)
layout(std430, binding = 5) readonly buffer KV { uint data[]; } kv[DCP_KV_ARRAY];
// The scale of block blk (4 units of 8 values) of the row.
float q8_scale(uint seg, uint row, uint blk)
{
    return unpackHalf2x16(kv[DCP_KV_SEG(seg)].data[row + DQ + blk / 2u])[blk & 1u];
}
// The scale of this lane's block when its units share one (ONE_BLOCK; 0 for a lane past the row).
float lane_scale(uint seg, uint row, uint k)
{
    return ONE_BLOCK && k * UPL < DU ? q8_scale(seg, row, k * UPL / 4u) : 0.0;
}
// Unit u's 8 quants as f32, unscaled: the caller multiplies by its block's scale once per unit.
void load_unit(uint seg, uint row, uint u, out vec4 v[NV4])
{
    v[0] = dcp_unpack_i8x4(kv[DCP_KV_SEG(seg)].data[row + 2u * u]);
    v[1] = dcp_unpack_i8x4(kv[DCP_KV_SEG(seg)].data[row + 2u * u + 1u]);
}
#elif defined(KV_F16) && defined(KV_X8)
layout(std430, binding = 5) readonly buffer KV { uvec4 data[]; } kv[DCP_KV_ARRAY];
void load_unit(uint seg, uint row, uint u, out vec4 v[NV4])
{
    uvec4 w = kv[DCP_KV_SEG(seg)].data[row + u];
    v[0] = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
    v[1] = vec4(unpackHalf2x16(w.z), unpackHalf2x16(w.w));
}
#elif defined(KV_F16)
layout(std430, binding = 5) readonly buffer KV { uvec2 data[]; } kv[DCP_KV_ARRAY];
void load_unit(uint seg, uint row, uint u, out vec4 v[NV4])
{
    uvec2 w = kv[DCP_KV_SEG(seg)].data[row + u];
    v[0] = vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y));
}
#else
layout(std430, binding = 5) readonly buffer KV { vec4 data[]; } kv[DCP_KV_ARRAY];
void load_unit(uint seg, uint row, uint u, out vec4 v[NV4]) { v[0] = kv[DCP_KV_SEG(seg)].data[row + u]; }
#endif

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

    // This lane's units of the HG (pre-scaled) queries: unit u = lane_unit(k, i) holds quads
    // u * NV4 .. u * NV4 + NV4 - 1 of the row.
    const uint R = UPL * NV4; // vec4 registers per head
    vec4 qr[HG * R];
    vec4 acc[HG * R];
    float m[HG];
    float l[HG];
    for (uint g = 0u; g < HG; g++) {
        for (uint i = 0u; i < UPL; i++)
            for (uint j = 0u; j < NV4; j++) {
                uint u = lane_unit(k, i);
                uint qd = u * NV4 + j;
                qr[g * R + i * NV4 + j] = u < DU ? q[(b * p.q_heads + hq0 + g) * DQ + qd] * p.scale : vec4(0.0);
                acc[g * R + i * NV4 + j] = vec4(0.0);
            }
        m[g] = dcp_neg_inf();
        l[g] = 0.0;
    }
    const uint page_units = dcp_kv_page_units(p.kv_heads, p.page_size, RU);
    const uint v_off = dcp_kv_half_units(p.kv_heads, p.page_size, RU);

    // Slot `slot` owns the run of `per` consecutive tokens t0 + slot * per ... of the chunk (the
    // last runs may be shorter or empty). Every lane runs the same number of iterations, so the
    // shuffles see the whole subgroup. The token's page is looked up once per page; its offset
    // advances without a division.
    const uint n = t1 > t0 ? t1 - t0 : 0u;
    const uint per = (n + TS - 1u) / TS;
    uint t = t0 + slot * per;
    const uint te = min(t + per, t1);
    uint lp = t / p.page_size;
    uint off = t % p.page_size;
    const uint seg_mask = (1u << p.segment_shift) - 1u;
    uint page = t < te ? bt[b * p.bt_stride + lp] : p.total_pages; // looked up once per page
    for (uint it = 0u; it < per; it++) {
        const bool valid = t < te && page < p.total_pages;
        const uint seg = valid ? page >> p.segment_shift : 0u;
        const uint kq = (page & seg_mask) * page_units + dcp_kv_row_in_page(kvh, off, p.page_size, RU);
        t++;
        if (++off == p.page_size) {
            off = 0u;
            lp++;
            page = t < te ? bt[b * p.bt_stride + lp] : p.total_pages;
        }
        float s[HG];
        for (uint g = 0u; g < HG; g++) s[g] = 0.0;
        if (valid) {
#ifdef KV_Q8
            const float d1 = lane_scale(seg, kq, k);
#endif
            for (uint i = 0u; i < UPL; i++) {
                uint u = lane_unit(k, i);
                if (u < DU) {
                    vec4 kk[NV4];
                    load_unit(seg, kq, u, kk);
#ifdef KV_Q8
                    const float d = ONE_BLOCK ? d1 : q8_scale(seg, kq, u / 4u);
                    for (uint g = 0u; g < HG; g++) {
                        float su = 0.0;
                        for (uint j = 0u; j < NV4; j++) su += dot(qr[g * R + i * NV4 + j], kk[j]);
                        s[g] += d * su;
                    }
#else
                    for (uint g = 0u; g < HG; g++)
                        for (uint j = 0u; j < NV4; j++) s[g] += dot(qr[g * R + i * NV4 + j], kk[j]);
#endif
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
                    for (uint i = 0u; i < R; i++) acc[g * R + i] *= alpha;
                    m[g] = s[g];
                }
                pr[g] = exp(s[g] - m[g]);
                l[g] += pr[g];
            }
#ifdef KV_Q8
            const float d1 = lane_scale(seg, kq + v_off, k);
#endif
            for (uint i = 0u; i < UPL; i++) {
                uint u = lane_unit(k, i);
                if (u < DU) {
                    vec4 v[NV4];
                    load_unit(seg, kq + v_off, u, v);
#ifdef KV_Q8
                    const float d = ONE_BLOCK ? d1 : q8_scale(seg, kq + v_off, u / 4u);
                    for (uint g = 0u; g < HG; g++) {
                        const float w = pr[g] * d;
                        for (uint j = 0u; j < NV4; j++) acc[g * R + i * NV4 + j] += w * v[j];
                    }
#else
                    for (uint g = 0u; g < HG; g++)
                        for (uint j = 0u; j < NV4; j++) acc[g * R + i * NV4 + j] += pr[g] * v[j];
#endif
                }
            }
        }
    }

    // Merge the token slots, one head at a time.
    for (uint g = 0u; g < HG; g++) {
        for (uint i = 0u; i < UPL; i++)
            for (uint j = 0u; j < NV4; j++) {
                uint u = lane_unit(k, i);
                if (u < DU) slot_o[slot * DQ + u * NV4 + j] = acc[g * R + i * NV4 + j];
            }
        if (k == 0u) {
            slot_m[slot] = m[g];
            slot_l[slot] = l[g];
        }
        barrier(); // slot_* writes -> reads
        const uint row = b * p.q_heads + hq0 + g;
        const uint orow = p.direct != 0u ? row : chunk * p.batch * p.q_heads + row;
        const uint ob = dcp_out_at(orow, p.q_heads, p.out_group, p.o_group_stride, DQ);
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
            o[ob + d] = lsum > 0.0 ? sum / lsum : vec4(0.0);
            if (d == 0u)
                lse[dcp_out_at(orow, p.q_heads, p.out_group, p.lse_group_stride, 1u)] =
                    lsum > 0.0 ? mx + log(lsum) : dcp_neg_inf();
        }
        barrier(); // slot_* reads -> next head's writes
    }
}
