#version 450
// kv_append: writes new tokens' K and V rows (f32 input) into their slots of a paged pool
// (f32, or f16 with KV_F16). One invocation per (token, KV head, 4 dims); a token whose slot is
// DCP_KV_NO_SLOT belongs to another rank and is skipped: only the owner writes.
// Page layout and addressing: shaders/common/kv_pool.glsl.
#extension GL_GOOGLE_include_directive : require
#include "kv_pool.glsl"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_kv_append_params p; };
layout(std430, binding = 0) readonly buffer Slots { uint slots[]; };  // [tokens]
layout(std430, binding = 1) readonly buffer K { vec4 k[]; };          // [tokens][Hkv][D/4] f32
layout(std430, binding = 2) readonly buffer V { vec4 v[]; };          // [tokens][Hkv][D/4] f32
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
    store_kv(a.seg, a.unit + q, k[idx]);
    store_kv(a.seg, a.unit + dcp_kv_half_units(p.kv_heads, p.page_size, dq) + q, v[idx]);
}
