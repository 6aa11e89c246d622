// Shared helpers of the attention shaders: IEEE special values by bit pattern (drivers may
// optimise float compares that assume no NaN or infinity; integer tests cannot be folded away).
#ifndef DCP_MATH_GLSL
#define DCP_MATH_GLSL

const uint DCP_NEG_INF_BITS = 0xff800000u;

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
