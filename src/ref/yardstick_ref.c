/* CPU reference of the FMA yardstick (see src/ref/yardstick_ref.h). */
#include <math.h>

#include "ref/yardstick_ref.h"
#include "kernels/yardstick_params.h"

double dcp_ref_fma_peak(uint64_t invocations, uint32_t iters, float mul, float add, double *out)
{
    double top = 0.0;
    uint64_t steps = (uint64_t)iters * DCP_FMA_UNROLL;
    for (uint64_t i = 0; i < invocations; i++) {
        double sum = 0.0;
        for (uint32_t j = 0; j < DCP_FMA_CHAINS; j++) {
            uint32_t h = (uint32_t)(i * DCP_FMA_CHAINS + j) * 2654435761u; /* wraps as the shader's uint */
            double x = (double)(h >> 16) / 32768.0 - 1.0;
            if (fabs(x) > top) top = fabs(x);
            for (uint64_t n = 0; n < steps; n++) {
                x = fma(x, (double)mul, (double)add);
                if (fabs(x) > top) top = fabs(x);
            }
            sum += x;
        }
        out[i] = sum;
    }
    return top;
}
