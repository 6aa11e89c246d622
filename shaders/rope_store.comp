#version 450
// rope_store: llama "normal" RoPE on the Q and K heads of a token row and the KV-cache write.
//   src row [q_heads + 2 kv_heads][D] f32: Q heads, then K heads, then V heads.
//   Pair i < n_rot/2 of a Q or K head: (x0, x1) = (src[2i], src[2i+1]) (NORM mode) or
//   (src[i], src[i + n_rot/2]) (NEOX mode, neox = 1) becomes (x0 c - x1 s, x0 s + x1 c),
//   (c, s) = cs[t][i] (computed on the host in double); elements from n_rot on are copied. Q goes to q_out [tokens][q_heads][D]; rotated K and plain V go to the KV page row
//   of slot[t] (page layout and addressing: shaders/common/kv_pool.glsl); a slot of
//   DCP_KV_NO_SLOT (a token another rank owns) or past the pool is not written.
// One invocation per (token, head, output pair of adjacent elements 2j, 2j+1): each writes one
// pair, i.e. exactly one word of an f16 pool, so no two invocations share a word (in NEOX mode it
// reads the partners of its two elements).
#extension GL_GOOGLE_include_directive : require
#include "kv_pool.glsl"
#include "kernels/ops_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_rope_store_params p; };
layout(std430, binding = 0) readonly buffer Src { vec2 src[]; };    // [tokens][src_stride/2]
layout(std430, binding = 1) readonly buffer Slot { uint slot[]; };  // [tokens]
layout(std430, binding = 2) readonly buffer CS { vec2 cs[]; };      // [tokens][n_rot/2] (cos, sin)
layout(std430, binding = 3) writeonly buffer QOut { vec2 q_out[]; };// [tokens][q_heads][D/2]
#ifdef KV_F16
layout(std430, binding = 4) writeonly buffer KV { uint data[]; } kv[DCP_KV_ARRAY];
#else
layout(std430, binding = 4) writeonly buffer KV { vec2 data[]; } kv[DCP_KV_ARRAY];
#endif

void main()
{
    const uint t = gl_WorkGroupID.y;
    const uint half_d = p.head_dim / 2u;
    const uint heads = p.q_heads + 2u * p.kv_heads;
    const uint idx = gl_GlobalInvocationID.x;
    if (idx >= heads * half_d) return;
    const uint h = idx / half_d;
    const uint i = idx % half_d;
    const uint row = t * (p.src_stride / 2u);
    vec2 v = src[row + idx];
    const uint hr = p.n_rot / 2u;
    if (h < p.q_heads + p.kv_heads && p.neox == 0u && i < hr) {
        const vec2 c = cs[t * hr + i];
        v = vec2(v.x * c.x - v.y * c.y, v.x * c.y + v.y * c.x);
    } else if (h < p.q_heads + p.kv_heads && 2u * i < p.n_rot) {
        // NEOX: element e < n_rot pairs with e + n_rot/2 (e < n_rot/2) or e - n_rot/2 (angle of
        // pair e mod n_rot/2): out[e] = x[e] c - x[e + hr] s, out[e + hr] = x[e + hr] c + x[e] s.
        vec2 o;
        for (uint k = 0u; k < 2u; k++) {
            const uint e = 2u * i + k;
            const bool lo = e < hr;
            const uint pe = h * half_d * 2u + (lo ? e + hr : e - hr); // partner element in the row
            const float xp = src[row + pe / 2u][pe % 2u];
            const vec2 c = cs[t * hr + (lo ? e : e - hr)];
            o[k] = lo ? v[k] * c.x - xp * c.y : v[k] * c.x + xp * c.y;
        }
        v = o;
    }
    if (h < p.q_heads) {
        q_out[(t * p.q_heads + h) * half_d + i] = v;
        return;
    }
    const uint s = slot[t];
    if (!dcp_kv_slot_stored(s, p.page_size, p.total_pages)) return; // another rank's token
    const bool is_v = h >= p.q_heads + p.kv_heads;
    const uint kvh = h - p.q_heads - (is_v ? p.kv_heads : 0u);
    // Units are pairs (vec2, or one f16x2 word): a row holds D/2 of them.
    const dcp_kv_addr a = dcp_kv_slot_addr(s, kvh, p.kv_heads, p.page_size, p.pages_per_segment, half_d);
    const uint seg = a.seg;
    const uint pi = a.unit + (is_v ? dcp_kv_half_units(p.kv_heads, p.page_size, half_d) : 0u) + i;
#ifdef KV_F16
    kv[DCP_KV_SEG(seg)].data[pi] = packHalf2x16(v);
#else
    kv[DCP_KV_SEG(seg)].data[pi] = v;
#endif
}
