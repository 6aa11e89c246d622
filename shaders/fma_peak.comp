#version 450
// The benchmark's compute yardstick: independent chains of f32 fused multiply-adds and nothing
// else, the ceiling a kernel's FLOP rate is compared with. Every invocation runs DCP_FMA_CHAINS
// chains (DCP_FMA_VEC4 vec4s) x <- fma(x, mul, add), DCP_FMA_UNROLL steps per loop iteration, so
// that enough independent FMAs are in flight to hide their latency; it writes the sum of its
// chains, so no chain can be removed. Chain j of invocation i starts at
// float(((i * DCP_FMA_CHAINS + j) * 2654435761) >> 16) / 32768 - 1, exact in f32 (the reference,
// dcp_ref_fma_peak in src/ref/yardstick_ref.c, starts from the same values).
#extension GL_GOOGLE_include_directive : require
#include "kernels/yardstick_params.h"

layout(constant_id = 0) const uint WG = 64;
layout(local_size_x_id = 0) in;
layout(push_constant) uniform PC { dcp_fma_peak_params p; };
layout(std430, binding = 0) writeonly buffer Dst { float dst[]; };

vec4 start(uint base)
{
    uvec4 h = (uvec4(base) + uvec4(0u, 1u, 2u, 3u)) * 2654435761u;
    return vec4(h >> 16u) * (1.0 / 32768.0) - 1.0;
}

void main()
{
    uint inv = gl_GlobalInvocationID.x;
    vec4 x[DCP_FMA_VEC4];
    for (uint j = 0u; j < DCP_FMA_VEC4; j++) x[j] = start(inv * DCP_FMA_CHAINS + 4u * j);
    vec4 m = vec4(p.mul), c = vec4(p.add);
    for (uint n = 0u; n < p.iters; n++) {
        for (uint u = 0u; u < DCP_FMA_UNROLL; u++) {
            for (uint j = 0u; j < DCP_FMA_VEC4; j++) x[j] = fma(x[j], m, c);
        }
    }
    vec4 s = vec4(0.0);
    for (uint j = 0u; j < DCP_FMA_VEC4; j++) s += x[j];
    dst[inv] = (s.x + s.y) + (s.z + s.w);
}
