#version 450
// mla_kv_store: the write of MLA's latent cache (src/kernels/ds2_params.h). A token's row of the
// K-only pool (one head, kv_lora + n_rot entries) becomes [c | rope(k_pe)]: c the RMS-normed
// latent (rmsnorm's output), k_pe the rope part of the kv_a projection, rotated in llama.cpp's NORM
// mode with the host's (cos, sin) table. Only the owner of a token writes it (slot 0xffffffff: another
// DCP rank's token; slots past the pool are not written either). One invocation per (token, pair):
// each writes one f16 word or one f32 pair, so no two invocations share a word.
#extension GL_GOOGLE_include_directive : require
#include "kv_pool.glsl"
#include "kernels/attn_params.h"
#include "kernels/ds2_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_mla_kv_store_params p; };
layout(std430, binding = 0) readonly buffer Cn { vec2 c[]; };     // [tokens][c_stride/2]
layout(std430, binding = 1) readonly buffer Kpe { vec2 kpe[]; };  // [tokens][kpe_stride/2]
layout(std430, binding = 2) readonly buffer CS { vec2 cs[]; };    // [tokens][n_rot/2] (cos, sin)
layout(std430, binding = 3) readonly buffer Slot { uint slot[]; };// [tokens]
#if defined(KV_Q8)
// q8_0 (src/kernels/kv_params.h): one invocation per (token, pair of blocks of 32 entries) computes the
// entries of its blocks, quantizes each block (d = max|x| / 127, q = round(x / d), halves away
// from zero) and writes their values and the word holding both scales.
layout(std430, binding = 4) writeonly buffer KV { uint data[]; } kv[DCP_KV_ARRAY];

float row_value(uint t, uint i)
{
    if (i < p.kv_lora) {
        const uint f = t * p.c_stride + p.c_offset + i;
        return c[f / 2u][f % 2u];
    }
    const uint r = i - p.kv_lora, half_r = p.n_rot / 2u;
    const vec2 x = kpe[(t * p.kpe_stride + p.kpe_offset) / 2u + r / 2u];
    const vec2 cr = cs[t * half_r + r / 2u];
    const vec2 v = vec2(x.x * cr.x - x.y * cr.y, x.x * cr.y + x.y * cr.x);
    return v[r % 2u];
}

uint quant_block(uint t, uint seg, uint row, uint b)
{
    float x[32];
    float amax = 0.0;
    for (uint j = 0u; j < 32u; j++) {
        x[j] = row_value(t, 32u * b + j);
        amax = max(amax, abs(x[j]));
    }
    const float d = amax / 127.0;
    const float id = d != 0.0 ? 1.0 / d : 0.0;
    for (uint w = 0u; w < 8u; w++) {
        uint word = 0u;
        for (uint j = 0u; j < 4u; j++) {
            const float v = x[4u * w + j] * id;
            const int q = int(clamp(sign(v) * floor(abs(v) + 0.5), -127.0, 127.0));
            word |= uint(q & 0xff) << (8u * j);
        }
        kv[DCP_KV_SEG(seg)].data[row + 8u * b + w] = word;
    }
    return packHalf2x16(vec2(d, 0.0)) & 0xffffu;
}

void main()
{
    const uint t = gl_WorkGroupID.y;
    const uint dk = p.kv_lora + p.n_rot, blocks = dk / 32u, pairs = (dk + 63u) / 64u;
    const uint pr = gl_GlobalInvocationID.x;
    if (pr >= pairs) return;
    const uint s = slot[t];
    const uint page = s / p.page_size;
    if (s == 0xffffffffu || page >= p.total_pages) return;
    const uint seg = page / p.pages_per_segment;
    const uint row = ((page % p.pages_per_segment) * p.page_size + s % p.page_size) * DCP_KV_Q8_ROW_WORDS(dk);
    uint sw = quant_block(t, seg, row, 2u * pr);
    if (2u * pr + 1u < blocks) sw |= quant_block(t, seg, row, 2u * pr + 1u) << 16u;
    kv[DCP_KV_SEG(seg)].data[row + dk / 4u + pr] = sw;
}
#else
#ifdef KV_F16
layout(std430, binding = 4) writeonly buffer KV { uint data[]; } kv[DCP_KV_ARRAY];
#else
layout(std430, binding = 4) writeonly buffer KV { vec2 data[]; } kv[DCP_KV_ARRAY];
#endif

void main()
{
    const uint t = gl_WorkGroupID.y;
    const uint half_c = p.kv_lora / 2u, half_r = p.n_rot / 2u, row_pairs = half_c + half_r;
    const uint i = gl_GlobalInvocationID.x;
    if (i >= row_pairs) return;
    const uint s = slot[t];
    const uint page = s / p.page_size;
    if (s == 0xffffffffu || page >= p.total_pages) return;
    vec2 v;
    if (i < half_c) {
        v = c[(t * p.c_stride + p.c_offset) / 2u + i];
    } else {
        const uint r = i - half_c;
        const vec2 x = kpe[(t * p.kpe_stride + p.kpe_offset) / 2u + r];
        const vec2 cr = cs[t * half_r + r];
        v = vec2(x.x * cr.x - x.y * cr.y, x.x * cr.y + x.y * cr.x);
    }
    const uint seg = page / p.pages_per_segment;
    const uint pi = ((page % p.pages_per_segment) * p.page_size + s % p.page_size) * row_pairs + i;
#ifdef KV_F16
    kv[DCP_KV_SEG(seg)].data[pi] = packHalf2x16(v);
#else
    kv[DCP_KV_SEG(seg)].data[pi] = v;
#endif
}
#endif
