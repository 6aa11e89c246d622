/* Push constants of the benchmark's yardstick shaders (stream_read, fma_peak), shared by C and GLSL. */
#ifndef DCP_VK_YARDSTICK_PARAMS_H
#define DCP_VK_YARDSTICK_PARAMS_H
#include "common/params_begin.h"

/* stream_read: sums the 32-bit words [0, words) of a buffer, words_per_group per workgroup. */
DCP_PARAMS_STRUCT(dcp_stream_read_params) {
    DCP_U32 words;            /* 32-bit words to read (multiple of 4) */
    DCP_U32 words_per_group;  /* words each workgroup reads */
};
DCP_PARAMS_END(dcp_stream_read_params)

/* fma_peak: every invocation runs DCP_FMA_CHAINS independent f32 chains x <- fma(x, mul, add),
 * DCP_FMA_UNROLL steps per loop iteration, and writes the sum of its chains. */
#define DCP_FMA_VEC4 8                    /* vec4 chains per invocation */
#define DCP_FMA_CHAINS (4 * DCP_FMA_VEC4) /* scalar chains per invocation */
#define DCP_FMA_UNROLL 4                  /* steps of every chain per loop iteration */
DCP_PARAMS_STRUCT(dcp_fma_peak_params) {
    DCP_U32 iters;            /* loop iterations (each DCP_FMA_UNROLL steps of every chain) */
    DCP_F32 mul;              /* the chains' multiplier */
    DCP_F32 add;              /* the chains' addend */
};
DCP_PARAMS_END(dcp_fma_peak_params)

#endif
