#version 450
// mla_decode: paged flash-decoding of MLA (DeepSeek-V2/V3 latent attention) in its absorbed form:
// every query head q = [q_lat (DV) | q_pe] against the one latent cache of rows [c_kv (DV) | k_pe]
// (DK = DV + rope entries), i.e. multi-query attention with values = the first DV entries of each
// row. score = scale * q . row; O = softmax-weighted sum of c_kv (normalised, f32); LSE natural log;
// an empty key set gives O = 0, LSE = -inf.
//
// One workgroup per (chunk of the sequence, group of HG heads, sequence). Lanes form a grid of HG
// heads x C dim parts (C = WG / HG): lane (g, part) holds its part of head g's query (QPL quads)
// and of head g's latent output (OPL quads) in registers. The chunk is walked in tiles of T tokens:
//   1. the workgroup loads the T rows into shared memory: each cache row is read once for all HG
//      heads of the group, each row by one subgroup (its page and address computed once by that
//      subgroup; on lavapipe the whole workgroup on each row, every invocation walking all T rows,
//      took 1.1-1.2x the step);
//   2. partial scores: lane (g, part) dots its query part with each row's part, S rows at a time
//      (each query quad read once for S rows, 4 S independent FMA chains);
//   3. the scores: the workgroup sums the C partial scores of each (head, row) once into shared
//      memory (scaled; -inf for a missing row), then every lane of head g keeps the running max and
//      sum of its head itself (the same values on each) from those scores. Every lane summing the C
//      partials of each row itself, twice (no barrier between), took 1.2x the step;
//   4. lane (g, part) adds the probability-weighted row parts to its output part, S rows at a time (each output
//      quad read and written once for S rows).
// Four barriers per tile. The tile keeps the cache's element type in shared memory (f32 for q8_0).
// In phases 2 and 4 the lanes of one subgroup share a part when UNIFORM_PART (HG a multiple of the
// fixed subgroup size; the part then follows from gl_SubgroupID alone). Then (BW = the subgroup
// size) each lane reads one of BW consecutive quads of the part from shared memory and
// subgroupBroadcast hands each quad to all lanes: one shared-memory read per BW quads instead of
// one per quad and lane (on lavapipe those reads, not the FMAs, bounded the kernel: this halved
// the step at 32K tokens). Without UNIFORM_PART every lane reads each quad itself (BW = 0).
// The bounds checks fold to constants when the grid fills the workgroup and the parts divide the
// row, so that no FMA runs under a lane mask.
// Work per invocation is bounded by chunk_tokens (Mesa 22 lavapipe ends loops after 65,535
// iterations per invocation; the plan sizes chunks from the per-tile iteration count). Long loops
// over T are kept rolled (unrolled they made lavapipe's compile take minutes); the loops over the
// register arrays are unrolled so that they stay registers (indexed arrays become if-ladders).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_EXT_control_flow_attributes : require
#include "kv_pool.glsl"
#include "kernels/attn_params.h"
#include "kernels/mla_params.h"
#include "dcp_math.glsl"
#include "out_groups.glsl"

layout(constant_id = 0) const uint WG = 64;   // invocations
layout(constant_id = 1) const uint HG = 16;   // heads per workgroup (divides the heads; <= WG)
layout(constant_id = 2) const uint DK = 576;  // row width (DV + rope), multiple of 4
layout(constant_id = 3) const uint DV = 512;  // latent width (values), multiple of 4, < DK
layout(constant_id = 4) const uint T = 8;     // tokens per tile
layout(constant_id = 5) const uint UNIFORM_PART = 0; // 1: lane = subgroup * subgroup size + invocation,
                                                     // and HG is a multiple of the subgroup size
layout(constant_id = 6) const uint BW = 0;    // 0: phases 2 and 4 read the tile directly; else the
                                              // (fixed) subgroup size, with UNIFORM_PART: each lane
                                              // reads one of BW consecutive quads of the part and
                                              // subgroupBroadcast hands it to the others
layout(local_size_x_id = 0) in;

const uint DQ = DK / 4u;                       // quads per row
const uint DVQ = DV / 4u;                      // quads of the latent
const uint C = WG / HG;                        // dim parts (lanes per head)
const uint QPL = (DQ + C - 1u) / C;            // query quads per lane
const uint OPL = (DVQ + C - 1u) / C;           // output quads per lane
const uint S = T < 4u ? T : 4u;                // rows per sub-tile (T is a power of two)
const uint BWS = BW == 0u ? 1u : BW;           // the broadcast loops' step
// Constant bounds (DeepSeek's 576 = 512 + 64 at 4 parts: all true).
const bool FULL_GRID = WG % HG == 0u;
const bool Q_EVEN = DQ % C == 0u;
const bool O_EVEN = DVQ % C == 0u;

layout(push_constant) uniform PC { dcp_mla_decode_params p; };
layout(std430, binding = 0) readonly buffer Q { vec4 q[]; };          // [batch][heads][DK/4] f32
layout(std430, binding = 1) readonly buffer BT { uint bt[]; };        // [batch][bt_stride] page ids
layout(std430, binding = 2) readonly buffer Len { uint lens[]; };     // [batch] tokens
layout(std430, binding = 3) writeonly buffer O { vec4 o[]; };         // [(chunk)][batch][heads][DV/4] (direct: or grouped)
layout(std430, binding = 4) writeonly buffer L { float lse[]; };      // [(chunk)][batch][heads] (direct: or grouped)
// The tile keeps the cache's element type: f16 rows as 4 halves per uvec2 (twice the tokens per
// tile in the same shared memory), f32 rows as vec4.
// q8_0 rows (KV_Q8, src/kernels/kv_params.h: DK int8 values then the f16 scales of the blocks of 32)
// are dequantized while loading: their tile is f32. load_quad(seg, row, d): quad d of the row whose
// first unit (of the binding's type) is `row`; ROW_UNITS: units per stored row.
#if defined(KV_Q8)
layout(std430, binding = 5) readonly buffer KV { uint data[]; } kv[DCP_KV_ARRAY];
#define TILE_T vec4
const uint ROW_UNITS = DCP_KV_Q8_ROW_WORDS(DK);
TILE_T load_quad(uint seg, uint row, uint d)
{
    const int w = int(kv[DCP_KV_SEG(seg)].data[row + d]);
    const uint blk = d / 8u; // 8 quads per block of 32
    const float sc = unpackHalf2x16(kv[DCP_KV_SEG(seg)].data[row + DQ + blk / 2u])[blk & 1u];
    return sc * vec4(bitfieldExtract(w, 0, 8), bitfieldExtract(w, 8, 8), bitfieldExtract(w, 16, 8), bitfieldExtract(w, 24, 8));
}
vec4 unpack_quad(TILE_T w) { return w; }
#elif defined(KV_F16)
layout(std430, binding = 5) readonly buffer KV { uvec2 data[]; } kv[DCP_KV_ARRAY]; // 4 halves per unit
#define TILE_T uvec2
const uint ROW_UNITS = DQ;
TILE_T load_quad(uint seg, uint row, uint d) { return kv[DCP_KV_SEG(seg)].data[row + d]; }
vec4 unpack_quad(TILE_T w) { return vec4(unpackHalf2x16(w.x), unpackHalf2x16(w.y)); }
#else
layout(std430, binding = 5) readonly buffer KV { vec4 data[]; } kv[DCP_KV_ARRAY];
#define TILE_T vec4
const uint ROW_UNITS = DQ;
TILE_T load_quad(uint seg, uint row, uint d) { return kv[DCP_KV_SEG(seg)].data[row + d]; }
vec4 unpack_quad(TILE_T w) { return w; }
#endif

shared TILE_T tile[T * DQ];  // the tile's rows
shared uint tile_ok[T];      // 1: the row exists (inside the chunk, page inside the pool)
shared float part_s[WG * T]; // partial scores [part][head][token]
shared float score[HG * T];  // scaled scores [head][token]; -inf: no row

void main()
{
    const uint lane = gl_LocalInvocationID.x;
    const uint chunk = gl_WorkGroupID.x;
    const uint h0 = gl_WorkGroupID.y * HG;
    const uint b = gl_WorkGroupID.z;
    const uint len = lens[b];
    const uint t0 = chunk * p.chunk_tokens;
    const uint t1 = min(t0 + p.chunk_tokens, len);
    const uint seg_mask = (1u << p.segment_shift) - 1u;

    // This lane's head g and dim part (computed from the subgroup id when that makes the part
    // subgroup-uniform).
    uint g, part;
    if (UNIFORM_PART != 0u) {
        const uint first = gl_SubgroupID * gl_SubgroupSize;
        part = first / HG;
        g = first % HG + gl_SubgroupInvocationID;
    } else {
        part = lane / HG;
        g = lane % HG;
    }
    const bool in_grid = FULL_GRID || part < C;
    const uint slot = part * HG + g; // this lane's row of part_s
    vec4 qr[QPL];
    [[unroll]] for (uint i = 0u; i < QPL; i++) {
        const uint d = part * QPL + i;
        qr[i] = in_grid && (Q_EVEN || d < DQ) ? q[(b * p.heads + h0 + g) * DQ + d] : vec4(0.0);
    }
    vec4 acc[OPL];
    [[unroll]] for (uint j = 0u; j < OPL; j++) acc[j] = vec4(0.0);
    // Online-softmax state of head g, kept by each of its C lanes alike (same inputs, same order).
    float m = dcp_neg_inf(), l = 0.0;

    [[dont_unroll]] for (uint base = t0; base < t1; base += T) {
        const uint n = min(T, t1 - base);
        // 1. Load the tile, a row per subgroup (rows past the chunk or on a page outside the pool
        //    load as zeros): the row's page and address are computed once per row and not per quad.
        [[dont_unroll]] for (uint tt = gl_SubgroupID; tt < T; tt += gl_NumSubgroups) {
            const uint t = base + tt;
            const uint page = tt < n ? bt[b * p.bt_stride + t / p.page_size] : p.total_pages;
            const bool ok = page < p.total_pages;
            const uint row = ((page & seg_mask) * p.page_size + t % p.page_size) * ROW_UNITS;
            [[dont_unroll]] for (uint d = gl_SubgroupInvocationID; d < DQ; d += gl_SubgroupSize) {
                TILE_T v = TILE_T(0);
                if (ok) v = load_quad(page >> p.segment_shift, row, d);
                tile[tt * DQ + d] = v;
            }
            if (subgroupElect()) tile_ok[tt] = ok ? 1u : 0u;
        }
        barrier(); // tile writes -> score reads

        // 2. Partial scores of this lane's head and dim part, S rows at a time: each query quad
        //    (spilled registers on CPU drivers) is read once for the S rows' FMAs.
        if (in_grid) {
            [[dont_unroll]] for (uint t0s = 0u; t0s < n; t0s += S) {
                vec4 s[S]; // 4 S independent FMA chains: the FMA latency hides behind the others
                [[unroll]] for (uint k = 0u; k < S; k++) s[k] = vec4(0.0);
                if (BW != 0u) {
                    // One tile read per lane for BW quads (the lanes of a subgroup share the part).
                    [[unroll]] for (uint k = 0u; k < S; k++) {
                        [[unroll]] for (uint i0 = 0u; i0 < QPL; i0 += BWS) {
                            const uint dl = min(part * QPL + min(i0 + gl_SubgroupInvocationID, QPL - 1u), DQ - 1u);
                            const vec4 mine = unpack_quad(tile[(t0s + k) * DQ + dl]);
                            [[unroll]] for (uint j = 0u; j < BWS; j++) {
                                const vec4 r = subgroupBroadcast(mine, j);
                                if (i0 + j < QPL && (Q_EVEN || part * QPL + i0 + j < DQ))
                                    s[k] = fma(qr[i0 + j], r, s[k]);
                            }
                        }
                    }
                } else {
                    [[unroll]] for (uint i = 0u; i < QPL; i++) {
                        const uint d = part * QPL + i;
                        if (Q_EVEN || d < DQ) {
                            const vec4 qv = qr[i];
                            [[unroll]] for (uint k = 0u; k < S; k++) {
                                const vec4 r = unpack_quad(tile[(t0s + k) * DQ + d]);
                                s[k] = fma(qv, r, s[k]);
                            }
                        }
                    }
                }
                [[unroll]] for (uint k = 0u; k < S; k++)
                    part_s[slot * T + t0s + k] = (s[k].x + s[k].y) + (s[k].z + s[k].w);
            }
        }
        barrier(); // partial scores -> their sums

        // 3. The scores: lane i sums the C parts of (head, row) pairs i, i + WG, ...
        [[dont_unroll]] for (uint i = lane; i < HG * T; i += WG) {
            const uint gi = i / T, tt = i % T;
            float s = 0.0;
            [[dont_unroll]] for (uint c = 0u; c < C; c++) s += part_s[(c * HG + gi) * T + tt];
            score[i] = tt < n && tile_ok[tt] != 0u ? s * p.scale : dcp_neg_inf();
        }
        barrier(); // scores -> softmax

        //    Online softmax of head g (each of its lanes alike) and 4. the O update of this lane's
        //    head and part over the tile's rows (their first DV entries).
        if (in_grid) {
            float mx = m;
            [[dont_unroll]] for (uint tt = 0u; tt < n; tt++) mx = max(mx, score[g * T + tt]);
            // live: this head has a row so far. With BW the subgroup stays together for its
            // broadcasts (a head without rows then adds zero probabilities).
            const bool live = !dcp_is_neg_inf(mx);
            if (BW != 0u ? subgroupAny(live) : live) {
                const float alpha = dcp_is_neg_inf(m) ? 0.0 : exp(m - mx);
                l *= alpha;
                [[unroll]] for (uint j = 0u; j < OPL; j++) acc[j] *= alpha;
                m = mx;
                // S rows at a time: each output quad is read and written once for the S rows'
                // FMAs (rows past n or not ok get probability 0; their tile entries are zeros).
                [[dont_unroll]] for (uint t0s = 0u; t0s < n; t0s += S) {
                    float pr[S];
                    [[unroll]] for (uint k = 0u; k < S; k++) {
                        const uint tt = t0s + k;
                        pr[k] = 0.0;
                        const float s = score[g * T + tt];
                        if (live && tt < n && !dcp_is_neg_inf(s)) {
                            pr[k] = exp(s - mx);
                            l += pr[k];
                        }
                    }
                    if (BW != 0u) {
                        [[unroll]] for (uint k = 0u; k < S; k++) {
                            [[unroll]] for (uint j0 = 0u; j0 < OPL; j0 += BWS) {
                                const uint dl = min(part * OPL + min(j0 + gl_SubgroupInvocationID, OPL - 1u), DVQ - 1u);
                                const vec4 mine = unpack_quad(tile[(t0s + k) * DQ + dl]);
                                [[unroll]] for (uint j = 0u; j < BWS; j++) {
                                    const vec4 r = subgroupBroadcast(mine, j);
                                    if (j0 + j < OPL && (O_EVEN || part * OPL + j0 + j < DVQ))
                                        acc[j0 + j] = fma(vec4(pr[k]), r, acc[j0 + j]);
                                }
                            }
                        }
                    } else {
                        [[unroll]] for (uint j = 0u; j < OPL; j++) {
                            const uint dq = part * OPL + j;
                            if (O_EVEN || dq < DVQ) {
                                vec4 a = acc[j];
                                [[unroll]] for (uint k = 0u; k < S; k++)
                                    a = fma(vec4(pr[k]), unpack_quad(tile[(t0s + k) * DQ + dq]), a);
                                acc[j] = a;
                            }
                        }
                    }
                }
            }
        }
        barrier(); // tile / part_s reads -> the next tile's writes
    }

    if (in_grid) {
        const uint row = b * p.heads + h0 + g;
        const uint orow = p.direct != 0u ? row : chunk * p.batch * p.heads + row;
        const uint ob = dcp_out_at(orow, p.heads, p.out_group, p.o_group_stride, DVQ);
        [[unroll]] for (uint j = 0u; j < OPL; j++) {
            const uint dq = part * OPL + j;
            if (O_EVEN || dq < DVQ) o[ob + dq] = l > 0.0 ? acc[j] / l : vec4(0.0);
        }
        if (part == 0u) lse[dcp_out_at(orow, p.heads, p.out_group, p.lse_group_stride, 1u)] = l > 0.0 ? m + log(l) : dcp_neg_inf();
    }
}
