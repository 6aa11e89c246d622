// Loads of weight matrices stored as 32-bit words, one dtype per shader variant (-D W_F32,
// W_F16, W_BF16, W_Q8_0, or a block-quantized type of quants.glsl: W_Q4_0, W_Q4_1, W_Q5_0, W_Q5_1,
// W_Q2_K, W_Q3_K, W_Q4_K, W_Q5_K, W_Q6_K, W_IQ4_NL, W_IQ4_XS). w4(row, q, k) returns elements
// [4q, 4q+4) of row `row` of a matrix with k elements per row, as f32 (not for the block-quantized
// types).
// Every type also reads a row in units of W_UNIT_GROUPS groups (what matmul and get_rows use):
// w_units(k) units per row; w_group(row, u, g, k, wv) puts group g of unit u in
// wv[W_GROUP_VEC4], the elements at vec4 indices w_group_x4(u, g) .. + W_GROUP_VEC4 - 1 of the
// row. Here a unit is one group of one w4 quad (F32, F16, BF16) or a Q8_0 block of 32 in two
// groups of 16 (a quad, like F32's, where the shader defines W_QUAD_UNITS: head_matmul, whose
// rows of 128 would be 4 blocks, leaving most lanes of a subgroup without one); quants.glsl defines
// the other block types' units.
// With W_UNIT_DOT defined (matmul), also w_unit_load / w_unit_group: a unit loaded once into a
// struct w_raw, then decoded group by group (quants.glsl).
//   W_F32  [rows][k] f32;  W_F16 [rows][k] IEEE half, 2 per word (element 2j in the low half);
//   W_BF16 [rows][k] bfloat16, 2 per word;
//   W_Q8_0 quants [rows][k] int8, 4 per word (element 4j in the low byte), then at word
//          wscale_offset the block scales [rows][k/32] f32 (the GGUF f16 scale, widened on upload).
// Requires: a buffer block `W { uint w[]; }` and a uint `wscale_offset` declared before inclusion.
#ifndef DCP_WEIGHTS_GLSL
#define DCP_WEIGHTS_GLSL
#include "dcp_math.glsl"

vec4 w4(uint row, uint q, uint k)
{
#if defined(W_F32)
    uint i = row * k + 4u * q;
    return vec4(uintBitsToFloat(w[i]), uintBitsToFloat(w[i + 1u]), uintBitsToFloat(w[i + 2u]),
                uintBitsToFloat(w[i + 3u]));
#elif defined(W_F16)
    uint i = row * (k / 2u) + 2u * q;
    return vec4(unpackHalf2x16(w[i]), unpackHalf2x16(w[i + 1u]));
#elif defined(W_BF16)
    uint i = row * (k / 2u) + 2u * q;
    uint a = w[i], b = w[i + 1u];
    return vec4(uintBitsToFloat(a << 16), uintBitsToFloat(a & 0xffff0000u), uintBitsToFloat(b << 16),
                uintBitsToFloat(b & 0xffff0000u));
#elif defined(W_Q8_0)
    float d = uintBitsToFloat(w[wscale_offset + row * (k / 32u) + q / 8u]);
    return d * dcp_unpack_i8x4(w[row * (k / 4u) + q]);
#else
    return vec4(0.0); // block-quantized types: read through w_unit
#endif
}

#if defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_Q2_K) || \
    defined(W_Q3_K) || defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K) || defined(W_IQ4_NL) ||   \
    defined(W_IQ4_XS)
#define W_GROUP_VEC4 4
#include "quants.glsl"
#elif defined(W_Q8_0) && !defined(W_QUAD_UNITS)
// A unit is one block of 32 (8 quant words, 32-byte aligned as k is a multiple of 32, and its
// scale): group g = weights 16g .. 16g + 15.
#define W_GROUP_VEC4 4
#define W_UNIT_GROUPS 2
uint w_units(uint k) { return k / 32u; }
uint w_group_x4(uint u, uint g) { return 8u * u + 4u * g; }
uint w_group_rel4(uint h, uint g) { return 8u * h + 4u * g; }
void w_group(uint row, uint u, uint g, uint k, out vec4 wv[W_GROUP_VEC4])
{
    const float d = uintBitsToFloat(w[wscale_offset + row * (k / 32u) + u]); // the block's scale, once
    const uint q0 = row * (k / 4u) + w_group_x4(u, g);
    for (uint i = 0u; i < 4u; i++) wv[i] = d * dcp_unpack_i8x4(w[q0 + i]);
}
#ifdef W_UNIT_DOT
#define W_GROUP_SCALED 1 // the block's scale sc.x multiplies each group's sum
struct w_raw { uvec4 q[2]; float d; };
void w_unit_load(uint row, uint u, uint k, out w_raw r)
{
    const uint b = row * (k / 32u) + u; // block: quant words 8 b .. 8 b + 7 of the matrix
    r.q[0] = wq4[2u * b];
    r.q[1] = wq4[2u * b + 1u];
    r.d = uintBitsToFloat(w[wscale_offset + b]);
}
void w_unit_group(w_raw r, uint g, out vec4 q[W_GROUP_VEC4], out vec2 sc)
{
    const uvec4 v = g == 0u ? r.q[0] : r.q[1];
    [[unroll]] for (uint i = 0u; i < 4u; i++) q[i] = dcp_unpack_i8x4(v[i]);
    sc = vec2(r.d, 0.0);
}
#endif
#elif defined(W_F32) || defined(W_F16) || defined(W_BF16) || defined(W_Q8_0)
#define W_UNIT_GROUPS 1
#define W_GROUP_VEC4 1
uint w_units(uint k) { return k / 4u; }
uint w_group_x4(uint u, uint g) { return u; }
uint w_group_rel4(uint h, uint g) { return h; }
void w_group(uint row, uint u, uint g, uint k, out vec4 wv[W_GROUP_VEC4]) { wv[0] = w4(row, u, k); }
#ifdef W_UNIT_DOT
struct w_raw { vec4 v; };
void w_unit_load(uint row, uint u, uint k, out w_raw r) { r.v = w4(row, u, k); }
void w_unit_group(w_raw r, uint g, out vec4 q[W_GROUP_VEC4], out vec2 sc)
{
    q[0] = r.v;
    sc = vec2(1.0, 0.0);
}
#endif
#else
#error "define one of the W_* weight types"
#endif

#endif
