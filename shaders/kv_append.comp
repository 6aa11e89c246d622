#version 450
// kv_append: writes new tokens' K and V rows (f32 input) into their slots of a paged pool: f32, f16
// with KV_F16, or q8_0 with KV_Q8 (quantized here). A token whose slot is DCP_KV_NO_SLOT belongs to
// another rank and is skipped: only the owner writes.
//   f32 / f16: one invocation per (token, KV head, 4 dims).
//   q8_0: one invocation per (token, KV head, pair of blocks of 32): per block d = max|x| / 127,
//     q = round(x / d) (halves away from zero, as ggml's roundf), stored as the row's int8 values and
//     one word holding both blocks' f16 scales, so no two invocations share a word.
// Row t of k and of v starts at float t * src_stride. Page layout and addressing:
// shaders/common/kv_pool.glsl; q8_0 rows: src/kernels/kv_params.h.
#extension GL_GOOGLE_include_directive : require
#include "kv_pool.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_kv_append_params p; };
layout(std430, binding = 0) readonly buffer Slots { uint slots[]; };  // [tokens]
#ifdef KV_Q8
layout(std430, binding = 1) readonly buffer K { float k[]; };         // [tokens][src_stride] f32
layout(std430, binding = 2) readonly buffer V { float v[]; };         // [tokens][src_stride] f32
layout(std430, binding = 3) writeonly buffer KV { uint data[]; } kv[DCP_KV_ARRAY];

// Quantizes block b (32 values from src index i0) into the row at word `row`; returns its f16 scale
// bits.
uint quant_block(bool is_v, uint i0, uint seg, uint row, uint b)
{
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) amax = max(amax, abs(is_v ? v[i0 + j] : k[i0 + j]));
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    for (uint w = 0u; w < 8u; w++) {
        uint word = 0u;
        for (uint j = 0u; j < 4u; j++) {
            float x = (is_v ? v[i0 + 4u * w + j] : k[i0 + 4u * w + j]) * id;
            int q = int(clamp(sign(x) * floor(abs(x) + 0.5), -127.0, 127.0));
            word |= uint(q & 0xff) << (8u * j);
        }
        kv[DCP_KV_SEG(seg)].data[row + 8u * b + w] = word;
    }
    return packHalf2x16(vec2(d, 0.0)) & 0xffffu;
}

void main()
{
    const uint D = p.head_dim;
    const uint pairs = (D + 63u) / 64u;
    const uint blocks = D / 32u;
    const uint RW = DCP_KV_Q8_ROW_WORDS(D);
    uint idx = gl_GlobalInvocationID.x;
    if (idx >= p.tokens * p.kv_heads * pairs) return;
    uint t = idx / (p.kv_heads * pairs);
    uint h = (idx / pairs) % p.kv_heads;
    uint pr = idx % pairs;
    uint slot = slots[t];
    if (!dcp_kv_slot_stored(slot, p.page_size, p.total_pages)) return; // another rank's token
    dcp_kv_addr a = dcp_kv_slot_addr(slot, h, p.kv_heads, p.page_size, p.pages_per_segment, RW);
    for (uint half_ = 0u; half_ < 2u; half_++) {
        const bool is_v = half_ == 1u;
        const uint row = a.unit + (is_v ? dcp_kv_half_units(p.kv_heads, p.page_size, RW) : 0u);
        const uint i0 = t * p.src_stride + h * D;
        uint sw = quant_block(is_v, i0 + 64u * pr, a.seg, row, 2u * pr);
        if (2u * pr + 1u < blocks) sw |= quant_block(is_v, i0 + 64u * pr + 32u, a.seg, row, 2u * pr + 1u) << 16u;
        kv[DCP_KV_SEG(a.seg)].data[row + D / 4u + pr] = sw;
    }
}
#else
layout(std430, binding = 1) readonly buffer K { vec4 k[]; };          // [tokens][src_stride / 4] f32
layout(std430, binding = 2) readonly buffer V { vec4 v[]; };          // [tokens][src_stride / 4] f32
#ifdef KV_F16
layout(std430, binding = 3) writeonly buffer KV { uvec2 data[]; } kv[DCP_KV_ARRAY];
void store_kv(uint seg, uint i, vec4 x)
{
    kv[DCP_KV_SEG(seg)].data[i] = uvec2(packHalf2x16(x.xy), packHalf2x16(x.zw));
}
#else
layout(std430, binding = 3) writeonly buffer KV { vec4 data[]; } kv[DCP_KV_ARRAY];
void store_kv(uint seg, uint i, vec4 x) { kv[DCP_KV_SEG(seg)].data[i] = x; }
#endif

void main()
{
    uint dq = p.head_dim / 4u;
    uint idx = gl_GlobalInvocationID.x;
    if (idx >= p.tokens * p.kv_heads * dq) return;
    uint t = idx / (p.kv_heads * dq);
    uint h = (idx / dq) % p.kv_heads;
    uint q = idx % dq;
    uint slot = slots[t];
    if (!dcp_kv_slot_stored(slot, p.page_size, p.total_pages)) return; // another rank's token
    // Units are quads (vec4): a row holds D/4 of them.
    dcp_kv_addr a = dcp_kv_slot_addr(slot, h, p.kv_heads, p.page_size, p.pages_per_segment, dq);
    const uint src = t * (p.src_stride / 4u) + h * dq + q;
    store_kv(a.seg, a.unit + q, k[src]);
    store_kv(a.seg, a.unit + dcp_kv_half_units(p.kv_heads, p.page_size, dq) + q, v[src]);
}
#endif
