// Decoders of the block-quantized weight types in their device layout (src/quant/quants.h):
// [blocks][body words] u32 (each GGUF block without its f16 field(s)), then at word
// wscale_offset the f16 fields [blocks][1 or 2] packed two to a word (Q4_K, Q5_K: [blocks][16 bytes]:
// d | dmin, then the 12 scale bytes; IQ4_XS: [blocks][8 bytes]: d | scales_h, then scales_l[4]).
// Blocks are numbered row * (k / block) + b. Included by weights.glsl for one of W_Q4_0, W_Q4_1,
// W_Q5_0, W_Q5_1, W_Q2_K, W_Q3_K, W_Q4_K, W_Q5_K, W_Q6_K, W_IQ4_NL, W_IQ4_XS.
//
// A row is read in units of W_UNIT_GROUPS groups of 16 consecutive weights with one scale (and
// min) each: w_group(row, u, g, k, wv) dequantizes group g of unit u into wv[W_GROUP_VEC4 = 4]
// (f32, in registers), the weights at vec4 indices w_group_x4(u, g) .. + 3 of the row. A unit's
// groups read the same 4 consecutive body words (plus the high bits / scales they need):
//   Q4_0, Q4_1, Q5_0, Q5_1: one block of 32 (2 groups: low nibbles = weights 0..15, high = 16..31)
//   Q4_K, Q5_K: 16 bytes of qs = 32 weights of sub-blocks 2c (low nibbles) and 2c+1 (high)
//   Q2_K, Q3_K: 16 bytes of qs = 64 weights, one group per 2-bit shift s (4 groups)
//   Q6_K: 16 bytes of each ql half and of qh = 64 weights (4 groups)
//   IQ4_NL, IQ4_XS: 16 bytes of qs = 32 weights of one (sub-)block (low nibbles = weights 0..15,
//   high = 16..31), each nibble an index into the 16 levels q_iq4_words (the format's table); the
//   weight is (d * (IQ4_XS: sub-block scale - 32)) * level
// Each weight is (scale * q - min) with q the integer quant as f32, as the CPU dequantizer
// (src/quant/quants.c) computes it.
#ifndef DCP_QUANTS_GLSL
#define DCP_QUANTS_GLSL

// Bytes, nibbles, 2-bit fields and single bits of the 4 bytes of a word, as 4 lanes (byte 0 first).
uvec4 q_bytes(uint v) { return uvec4(v, v >> 8, v >> 16, v >> 24) & 255u; }
vec4 q_lo4(uint v) { return vec4(uvec4(v, v >> 8, v >> 16, v >> 24) & 15u); }
vec4 q_hi4(uint v) { return vec4(uvec4(v >> 4, v >> 12, v >> 20, v >> 28) & 15u); }
vec4 q_2bit(uint v, uint s) { return vec4((uvec4(v, v >> 8, v >> 16, v >> 24) >> s) & 3u); }
vec4 q_bit(uint v, uint b) { return vec4((uvec4(v, v >> 8, v >> 16, v >> 24) >> b) & 1u); }
// Byte i (0..) of the words starting at word o.
uint q_byte(uint o, uint i) { return (w[o + i / 4u] >> (8u * (i % 4u))) & 255u; }
// Byte i (0..11) of 3 words held in registers.
uint q_k4_byte(uvec3 sc, uint i) { return (sc[i / 4u] >> (8u * (i % 4u))) & 255u; }

// The f16 field(s) of block bi: d, or (d, dmin / m).
float q_d(uint bi) { return unpackHalf2x16(w[wscale_offset + bi / 2u])[bi & 1u]; }
vec2 q_dm(uint bi) { return unpackHalf2x16(w[wscale_offset + bi]); }

// Bits start..start+3 of v, as 4 lanes.
vec4 q_bits4(uint v, uint start) { return vec4((uvec4(v >> start) >> uvec4(0u, 1u, 2u, 3u)) & 1u); }
// The 4 bytes of v as 4 lanes of f32 (byte 0 first). The matmul's units build each byte's whole
// quant (low bits | high bits) in one word first and convert once: a few word operations for 4
// weights, where converting each field apart and combining them in f32 took twice the operations
// (on a CPU driver each is a vector instruction per lane group).
vec4 q_u8x4(uint v) { return vec4(uvec4(v, v >> 8, v >> 16, v >> 24) & 255u); }
// Bits b .. b + 3 of v moved to bit 0 of bytes 0 .. 3 (the multiply places bit j at bit 8 j).
uint q_bits_to_bytes(uint v, uint b) { return (((v >> b) & 15u) * 0x00204081u) & 0x01010101u; }

#if defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1)
// ---- blocks of 32: unit = block; group 0 = weights 0..15 (low nibbles of qs), 1 = 16..31 (high)
#define W_UNIT_GROUPS 2
uint w_units(uint k) { return k / 32u; }
uint w_group_x4(uint u, uint g) { return 8u * u + 4u * g; }
uint w_group_rel4(uint h, uint g) { return 8u * h + 4u * g; }

void w_group(uint row, uint u, uint g, uint k, out vec4 wv[W_GROUP_VEC4])
{
    const uint bi = row * (k / 32u) + u;
#if defined(W_Q4_0) || defined(W_Q4_1)
    const uint o = 4u * bi;           // qs[16]
#else
    const uint o = 5u * bi + 1u;      // qh (word 5 bi: bit e = high bit of weight e), then qs[16]
    const uint qh = w[o - 1u];
#endif
#if defined(W_Q4_0) || defined(W_Q5_0)
    const float d = q_d(bi);
#else
    const vec2 dm = q_dm(bi);         // (d, m)
#endif
    for (uint i = 0u; i < 4u; i++) {
        const uint q = w[o + i];      // bytes 4i..4i+3: weights 4i.. (low nibbles), 16+4i.. (high)
        vec4 a = g == 0u ? q_lo4(q) : q_hi4(q);
#if defined(W_Q5_0) || defined(W_Q5_1)
        a += 16.0 * q_bits4(qh, 16u * g + 4u * i);
#endif
#if defined(W_Q4_0)
        wv[i] = (a - 8.0) * d;
#elif defined(W_Q5_0)
        wv[i] = (a - 16.0) * d;
#else
        wv[i] = a * dm.x + dm.y;
#endif
    }
}

#elif defined(W_Q4_K) || defined(W_Q5_K)
// ---- Q4_K / Q5_K: unit r = 2c + h of 8 per super-block reads qs bytes 32c + 16h .. +16;
// group 0 = weights 64c + 16h + l (low nibbles, sub-block 2c), 1 = 64c + 32 + 16h + l (high
// nibbles, sub-block 2c+1), l < 16
#define W_UNIT_GROUPS 2
uint w_units(uint k) { return k / 32u; }
uint w_group_x4(uint u, uint g)
{
    const uint r = u % 8u;
    return 64u * (u / 8u) + 16u * (r / 2u) + 4u * (r % 2u) + 8u * g;
}
uint w_group_rel4(uint h, uint g) { return 4u * h + 8u * g; }

// 6-bit scale (x) and min (y) of sub-block j from the 12 scale bytes sc (3 words, byte 0 first).
vec2 q_k4_scale_min(uvec3 sc, uint j)
{
    if (j < 4u) return vec2(q_k4_byte(sc, j) & 63u, q_k4_byte(sc, j + 4u) & 63u);
    const uint b = q_k4_byte(sc, j + 4u);
    return vec2((b & 15u) | (q_k4_byte(sc, j - 4u) >> 6) << 4, (b >> 4) | (q_k4_byte(sc, j) >> 6) << 4);
}
// The 16 bytes moved out of block bi: (d | dmin) word, then scales[12].
uvec4 q_k4_meta(uint bi)
{
    const uint o = wscale_offset + 4u * bi;
    return uvec4(w[o], w[o + 1u], w[o + 2u], w[o + 3u]);
}

void w_group(uint row, uint u, uint g, uint k, out vec4 wv[W_GROUP_VEC4])
{
    const uint bi = row * (k / 256u) + u / 8u, r = u % 8u, c = r / 2u, h = r % 2u;
#if defined(W_Q4_K)
    const uint oq = 32u * bi + 8u * c + 4u * h;    // qs[128]
#else
    const uint oq = 40u * bi + 8u + 8u * c + 4u * h; // qh[32] | qs[128]
    const uint oh = 40u * bi + 4u * h;
#endif
    const uvec4 m = q_k4_meta(bi);
    const vec2 dm = unpackHalf2x16(m.x);           // (d, dmin)
    const vec2 sm = q_k4_scale_min(m.yzw, 2u * c + g);
    const float dl = dm.x * sm.x, ml = dm.y * sm.y;
    for (uint i = 0u; i < 4u; i++) {
        const uint q = w[oq + i];
        vec4 a = g == 0u ? q_lo4(q) : q_hi4(q);
#if defined(W_Q5_K)
        a += 16.0 * q_bit(w[oh + i], 2u * c + g);
#endif
        wv[i] = dl * a - ml;
    }
}

#elif defined(W_Q2_K) || defined(W_Q3_K) || defined(W_Q6_K)
// ---- Q2_K / Q3_K / Q6_K: unit r = 2n + h of 4 per super-block, l = 16h + 0..15; group g (0..3)
// holds weights 128n + 32g + l (Q2_K/Q3_K: 2-bit field g of qs[32n + l]; Q6_K: ql / qh as below)
#define W_UNIT_GROUPS 4
uint w_units(uint k) { return k / 64u; }
uint w_group_x4(uint u, uint g)
{
    const uint r = u % 4u;
    return 64u * (u / 4u) + 32u * (r / 2u) + 4u * (r % 2u) + 8u * g;
}
uint w_group_rel4(uint h, uint g) { return 4u * h + 8u * g; }

void w_group(uint row, uint u, uint g, uint k, out vec4 wv[W_GROUP_VEC4])
{
    const uint bi = row * (k / 256u) + u / 4u, r = u % 4u, n = r / 2u, h = r % 2u;
    const uint j = 8u * n + 2u * g + h;            // 16-weight sub-block
#if defined(W_Q2_K)
    const uint o = 20u * bi;                       // scales[16] | qs[64]
    const vec2 dm = q_dm(bi);                      // (d, dmin)
    const uint sc = q_byte(o, j);
    const float dl = dm.x * float(sc & 15u), ml = dm.y * float(sc >> 4);
    for (uint i = 0u; i < 4u; i++) wv[i] = dl * q_2bit(w[o + 4u + 8u * n + 4u * h + i], 2u * g) - ml;
#elif defined(W_Q3_K)
    const uint o = 27u * bi;                       // hmask[32] | qs[64] | scales[12]
    const uint lo = (q_byte(o + 24u, j % 8u) >> (4u * n)) & 15u;
    const uint hi = (q_byte(o + 26u, j % 4u) >> (2u * (j / 4u))) & 3u;
    const float dl = q_d(bi) * float(int(lo | hi << 4) - 32);
    for (uint i = 0u; i < 4u; i++)
        wv[i] = dl * (q_2bit(w[o + 8u + 8u * n + 4u * h + i], 2u * g) + 4.0 * q_bit(w[o + 4u * h + i], 4u * n + g) - 4.0);
#else
    const uint o = 52u * bi;                       // ql[128] | qh[64] | scales[16] (int8)
    const float dl = q_d(bi) * float(bitfieldExtract(int(w[o + 48u + j / 4u]), int(8u * (j % 4u)), 8));
    for (uint i = 0u; i < 4u; i++) {
        const uint ql = w[o + 16u * n + 8u * (g % 2u) + 4u * h + i];
        const vec4 lo = g < 2u ? q_lo4(ql) : q_hi4(ql);
        wv[i] = dl * (lo + 16.0 * q_2bit(w[o + 32u + 8u * n + 4u * h + i], 2u * g) - 32.0);
    }
#endif
}

#elif defined(W_IQ4_NL) || defined(W_IQ4_XS)
// ---- IQ4_NL (blocks of 32) / IQ4_XS (sub-blocks of 32 of a 256 super-block): unit = 32 weights;
// group 0 = weights 0..15 (low nibbles of its 16 qs bytes), 1 = 16..31 (high nibbles)
#define W_UNIT_GROUPS 2
uint w_units(uint k) { return k / 32u; }
uint w_group_x4(uint u, uint g) { return 8u * u + 4u * g; }
uint w_group_rel4(uint h, uint g) { return 8u * h + 4u * g; }

// The format's 16 levels, as int8 packed four to a word (level 4i + b in byte b of word i):
// -127, -104, -83, -65 | -49, -35, -22, -10 | 1, 13, 25, 38 | 53, 69, 89, 113. A nibble picks its
// word by two selects and its byte by a shift: no table indexed per lane (a CPU driver reads such
// a table a lane at a time).
const uvec4 q_iq4_words = uvec4(0xbfad9881u, 0xf6eaddcfu, 0x26190d01u, 0x71594535u);
// The levels of the 4 low (hi = 0) or high nibbles of a word's bytes, as 4 lanes (byte 0 first).
vec4 q_iq4_levels(uint v, uint hi)
{
    const uvec4 n = (uvec4(v, v >> 8, v >> 16, v >> 24) >> (4u * hi)) & 15u;
    const bvec4 hi8 = greaterThanEqual(n, uvec4(8u)), hi4 = notEqual(n & 4u, uvec4(0u));
    const uvec4 word = mix(mix(uvec4(q_iq4_words.x), uvec4(q_iq4_words.y), hi4),
                           mix(uvec4(q_iq4_words.z), uvec4(q_iq4_words.w), hi4), hi8);
    return vec4(ivec4(word << (24u - 8u * (n & 3u))) >> 24);
}
// Word offset of unit u's 16 qs bytes and its scale (d, or d * (sub-block scale - 32)).
void q_iq4_unit(uint row, uint u, uint k, out uint o, out float dl)
{
#if defined(W_IQ4_NL)
    const uint bi = row * (k / 32u) + u;
    o = 4u * bi;                                   // qs[16]
    dl = q_d(bi);
#else
    const uint bi = row * (k / 256u) + u / 8u, j = u % 8u;
    o = 32u * bi + 4u * j;                         // qs[128]: 16 bytes a sub-block
    const uint f = w[wscale_offset + 2u * bi];     // d (low half) | scales_h (high half, raw bits)
    const uint sl = w[wscale_offset + 2u * bi + 1u]; // scales_l[4]
    const uint ls = ((sl >> (4u * j)) & 15u) | ((f >> (16u + 2u * j)) & 3u) << 4;
    dl = unpackHalf2x16(f).x * float(int(ls) - 32);
#endif
}

void w_group(uint row, uint u, uint g, uint k, out vec4 wv[W_GROUP_VEC4])
{
    uint o;
    float dl;
    q_iq4_unit(row, u, k, o, dl);
    for (uint i = 0u; i < 4u; i++) wv[i] = dl * q_iq4_levels(w[o + i], g);
}
#endif

#ifdef W_UNIT_DOT
// ---- Unit dot products (matmul): w_unit_load(row, u, k, raw) loads unit u of a row once, with
// 16-byte loads where the layout allows (buffer block `W4 { uvec4 wq4[]; }` aliasing W), and
// w_unit_group(raw, g, q, sc) gives group g's 16 weights as q[0..3] (the integer quants minus
// their offset, as f32; the elements at vec4 indices w_group_x4(u, g)..) and sc = (scale, min):
// sum over the group of w * x = sc.x * sum(q * x) - sc.y * sum(x) (sc.y only for W_UNIT_MIN
// types), the scale applied once per group and token.
#if defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1) || defined(W_Q2_K) || defined(W_Q3_K) || \
    defined(W_Q4_K) || defined(W_Q5_K) || defined(W_Q6_K)
#define W_UNIT_MIN 1 // an offset (Q4_0 8, Q5_0 16, Q3_K 4, Q6_K 32) is summed as the min: -d off sum(x)
#endif
#define W_GROUP_SCALED 1 // the group's scale sc.x multiplies its sum

#if defined(W_Q4_0) || defined(W_Q4_1) || defined(W_Q5_0) || defined(W_Q5_1)
struct w_raw { uvec4 q; uint qh; vec2 dm; };   // dm: (d, m); Q4_0 (d, -8 d), Q5_0 (d, -16 d)
void w_unit_load(uint row, uint u, uint k, out w_raw r)
{
    const uint bi = row * (k / 32u) + u;
#if defined(W_Q4_0) || defined(W_Q4_1)
    r.q = wq4[bi];
    r.qh = 0u;
#else
    const uint o = 5u * bi;
    r.qh = w[o];
    r.q = uvec4(w[o + 1u], w[o + 2u], w[o + 3u], w[o + 4u]);
#endif
#if defined(W_Q4_0)
    const float d = q_d(bi);
    r.dm = vec2(d, -8.0 * d);                     // w = d (q - 8): the offset as the group's min
#elif defined(W_Q5_0)
    const float d = q_d(bi);
    r.dm = vec2(d, -16.0 * d);                    // w = d (q - 16)
#else
    r.dm = q_dm(bi);
#endif
}
void w_unit_group(w_raw r, uint g, out vec4 q[W_GROUP_VEC4], out vec2 sc)
{
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
#if defined(W_Q5_0) || defined(W_Q5_1)
        // nibble | the high bit (qh bit 16 g + 4 i + byte) at bit 4
        q[i] = q_u8x4(((r.q[i] >> (4u * g)) & 0x0f0f0f0fu) | q_bits_to_bytes(r.qh, 16u * g + 4u * i) << 4);
#else
        q[i] = g == 0u ? q_lo4(r.q[i]) : q_hi4(r.q[i]);
#endif
    }
    sc = vec2(r.dm.x, -r.dm.y);
}

#elif defined(W_Q4_K) || defined(W_Q5_K)
struct w_raw { uvec4 q; uvec4 qh; vec2 dl; vec2 ml; };  // dl, ml: d * scale, dmin * min of groups 0, 1
void w_unit_load(uint row, uint u, uint k, out w_raw r)
{
    const uint bi = row * (k / 256u) + u / 8u, ur = u % 8u, c = ur / 2u, h = ur % 2u;
#if defined(W_Q4_K)
    r.q = wq4[8u * bi + 2u * c + h];
    r.qh = uvec4(0u);
#else
    r.q = wq4[10u * bi + 2u + 2u * c + h];
    r.qh = wq4[10u * bi + h];
#endif
    const uvec4 m = wq4[wscale_offset / 4u + bi];
    const vec2 dm = unpackHalf2x16(m.x);
    const vec2 s0 = q_k4_scale_min(m.yzw, 2u * c), s1 = q_k4_scale_min(m.yzw, 2u * c + 1u);
    r.dl = dm.x * vec2(s0.x, s1.x);
    r.ml = dm.y * vec2(s0.y, s1.y);
#if defined(W_Q5_K)
    r.qh = (r.qh >> (2u * c)) & 0x03030303u;   // bit 0 of each byte: group 0's high bit, bit 1: group 1's
#endif
}
void w_unit_group(w_raw r, uint g, out vec4 q[W_GROUP_VEC4], out vec2 sc)
{
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
#if defined(W_Q5_K)
        q[i] = q_u8x4(((r.q[i] >> (4u * g)) & 0x0f0f0f0fu) | ((r.qh[i] >> g) & 0x01010101u) << 4);
#else
        q[i] = g == 0u ? q_lo4(r.q[i]) : q_hi4(r.q[i]);
#endif
    }
    sc = vec2(r.dl[g], r.ml[g]);
}

#elif defined(W_Q2_K) || defined(W_Q3_K) || defined(W_Q6_K)
struct w_raw { uvec4 q; uvec4 q2; uvec4 qh; vec4 dl; vec4 ml; };
void w_unit_load(uint row, uint u, uint k, out w_raw r)
{
    const uint bi = row * (k / 256u) + u / 4u, ur = u % 4u, n = ur / 2u, h = ur % 2u;
    // sub-block of group g: j = 8n + 2g + h
#if defined(W_Q2_K)
    r.q = wq4[5u * bi + 1u + 2u * n + h];           // qs words 4 + 8n + 4h ..
    r.q2 = uvec4(0u);
    r.qh = uvec4(0u);
    const uvec4 sc = wq4[5u * bi];                  // scales[16]
    const vec2 dm = q_dm(bi);
    [[unroll]] for (uint g = 0u; g < 4u; g++) {
        const uint b = (sc[2u * n + g / 2u] >> (8u * (2u * (g % 2u) + h))) & 255u;
        r.dl[g] = dm.x * float(b & 15u);
        r.ml[g] = dm.y * float(b >> 4);
    }
#elif defined(W_Q3_K)
    const uint o = 27u * bi;                        // hmask[32] | qs[64] | scales[12]
    r.qh = uvec4(w[o + 4u * h], w[o + 4u * h + 1u], w[o + 4u * h + 2u], w[o + 4u * h + 3u]);
    const uint oq = o + 8u + 8u * n + 4u * h;
    r.q = uvec4(w[oq], w[oq + 1u], w[oq + 2u], w[oq + 3u]);
    r.q2 = uvec4(0u);
    const uvec3 sc = uvec3(w[o + 24u], w[o + 25u], w[o + 26u]);
    const float d = q_d(bi);
    [[unroll]] for (uint g = 0u; g < 4u; g++) {
        const uint j = 8u * n + 2u * g + h;
        const uint lo = (q_k4_byte(sc, j % 8u) >> (4u * n)) & 15u;
        const uint hi = (q_k4_byte(sc, 8u + j % 4u) >> (2u * (j / 4u))) & 3u;
        r.dl[g] = d * float(int(lo | hi << 4) - 32);
    }
    r.ml = 4.0 * r.dl;                             // w = dl (q - 4)
    r.qh = r.qh >> (4u * n);                        // bit g of each byte: group g's high bit
#else
    r.q = wq4[13u * bi + 4u * n + h];               // ql words 16n + 4h .. (groups 0, 2)
    r.q2 = wq4[13u * bi + 4u * n + 2u + h];         // ql words 16n + 8 + 4h .. (groups 1, 3)
    r.qh = wq4[13u * bi + 8u + 2u * n + h];         // qh words 32 + 8n + 4h ..
    const uvec4 sc = wq4[13u * bi + 12u];           // scales[16], int8
    const float d = q_d(bi);
    [[unroll]] for (uint g = 0u; g < 4u; g++)
        r.dl[g] = d * float(bitfieldExtract(int(sc[2u * n + g / 2u]), int(8u * (2u * (g % 2u) + h)), 8));
    r.ml = 32.0 * r.dl;                            // w = dl (q - 32)
#endif
}
void w_unit_group(w_raw r, uint g, out vec4 q[W_GROUP_VEC4], out vec2 sc)
{
    [[unroll]] for (uint i = 0u; i < 4u; i++) {
#if defined(W_Q2_K)
        q[i] = q_2bit(r.q[i], 2u * g);
#elif defined(W_Q3_K)
        q[i] = q_u8x4(((r.q[i] >> (2u * g)) & 0x03030303u) | ((r.qh[i] >> g) & 0x01010101u) << 2); // + 4 (ml)
#else
        const uint ql = g % 2u == 0u ? r.q[i] : r.q2[i];
        q[i] = q_u8x4(((ql >> (g < 2u ? 0u : 4u)) & 0x0f0f0f0fu) | ((r.qh[i] >> (2u * g)) & 0x03030303u) << 4); // + 32 (ml)
#endif
    }
    sc = vec2(r.dl[g], r.ml[g]);
}

#elif defined(W_IQ4_NL) || defined(W_IQ4_XS)
struct w_raw { uvec4 q; float dl; };
void w_unit_load(uint row, uint u, uint k, out w_raw r)
{
    uint o;
    q_iq4_unit(row, u, k, o, r.dl);
    r.q = wq4[o / 4u];                             // 16 bytes of qs, 16-byte aligned
}
void w_unit_group(w_raw r, uint g, out vec4 q[W_GROUP_VEC4], out vec2 sc)
{
    [[unroll]] for (uint i = 0u; i < 4u; i++) q[i] = q_iq4_levels(r.q[i], g);
    sc = vec2(r.dl, 0.0);
}
#endif
#endif // W_UNIT_DOT

#endif
