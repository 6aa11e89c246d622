/* Element types of device tensors, and IEEE half-precision conversion. */
#ifndef DCPVK_DTYPE_H
#define DCPVK_DTYPE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_dtype {
    DCP_DTYPE_F32 = 0,
    DCP_DTYPE_F16 = 1,
} dcp_dtype;

/* Bytes per element (4 or 2). */
uint32_t dcp_dtype_size(dcp_dtype t);
/* "f32" / "f16". */
const char *dcp_dtype_name(dcp_dtype t);

/* Round-to-nearest-even float -> half (overflow gives +-inf, NaN stays NaN). Thread-safe. */
uint16_t dcp_f32_to_f16(float f);
float dcp_f16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif
#endif
