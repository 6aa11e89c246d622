// Loads of weight matrices stored as 32-bit words, one dtype per shader variant (-D W_F32,
// W_F16, W_BF16, W_Q8_0). w4(row, q, k) returns elements [4q, 4q+4) of row `row` of a matrix
// with k elements per row, as f32.
//   W_F32  [rows][k] f32;  W_F16 [rows][k] IEEE half, 2 per word (element 2j in the low half);
//   W_BF16 [rows][k] bfloat16, 2 per word;
//   W_Q8_0 quants [rows][k] int8, 4 per word (element 4j in the low byte), then at word
//          wscale_offset the block scales [rows][k/32] f32 (the GGUF f16 scale, widened on upload).
// Requires: a buffer block `W { uint w[]; }` and a uint `wscale_offset` declared before inclusion.
#ifndef DCP_WEIGHTS_GLSL
#define DCP_WEIGHTS_GLSL

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
    int v = int(w[row * (k / 4u) + q]);
    float d = uintBitsToFloat(w[wscale_offset + row * (k / 32u) + q / 8u]);
    return d * vec4(bitfieldExtract(v, 0, 8), bitfieldExtract(v, 8, 8), bitfieldExtract(v, 16, 8),
                    bitfieldExtract(v, 24, 8));
#else
#error "define one of W_F32, W_F16, W_BF16, W_Q8_0"
#endif
}

#endif
