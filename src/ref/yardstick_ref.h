/* CPU reference of the FMA yardstick (shaders/fma_peak.comp), in double: the oracle of
 * tests/test_yardstick.c. */
#ifndef DCP_REF_YARDSTICK_REF_H
#define DCP_REF_YARDSTICK_REF_H

#include <stdint.h>

/* Runs the chains of invocations [0, invocations) in double: chain j of invocation i starts at the
 * shader's f32 value (exact in double), takes steps = iters * DCP_FMA_UNROLL steps
 * x <- x mul + add, and out[i] = the sum of its DCP_FMA_CHAINS chains. Returns the largest |x| any
 * chain reached (for the f32 rounding bound of a test). */
double dcp_ref_fma_peak(uint64_t invocations, uint32_t iters, float mul, float add, double *out);

#endif
