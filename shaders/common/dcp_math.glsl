// Shared helpers of the shaders: IEEE special values by bit pattern (drivers may optimise float
// compares that assume no NaN or infinity; integer tests cannot be folded away), and the four
// int8 values of a word (q8_0 weights and KV caches).
#ifndef DCP_MATH_GLSL
#define DCP_MATH_GLSL

const uint DCP_NEG_INF_BITS = 0xff800000u;

// The 4 signed bytes of w (byte 0 first) as f32.
vec4 dcp_unpack_i8x4(uint w)
{
    const int s = int(w);
    return vec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8), bitfieldExtract(s, 24, 8));
}

float dcp_neg_inf() { return uintBitsToFloat(DCP_NEG_INF_BITS); }

bool dcp_is_neg_inf(float x) { return floatBitsToUint(x) == DCP_NEG_INF_BITS; }

// NaN and +inf log-sum-exp values count as -inf (an empty partial state).
float dcp_sanitize_lse(float x)
{
    uint u = floatBitsToUint(x);
    bool special = (u & 0x7f800000u) == 0x7f800000u; // inf or NaN
    return (special && u != DCP_NEG_INF_BITS) ? dcp_neg_inf() : x;
}

#endif
