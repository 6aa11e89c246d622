/* Element types of device tensors, and IEEE half-precision conversion. */
#ifndef DCPVK_DTYPE_H
#define DCPVK_DTYPE_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_dtype {
    DCP_DTYPE_F32 = 0,
    DCP_DTYPE_F16 = 1,
    /* KV caches only: ggml's Q8_0 quantization, blocks of 32 values along a row, each with an f16
     * scale d = max|x| / 127 and int8 values q = round(x / d) (x ~ d q). Rows of a multiple of 32
     * values; the layout of a row in a KV pool: include/dcpvk/kv.h (dcp_kv_row_bytes). */
    DCP_DTYPE_Q8_0 = 2,
} dcp_dtype;

/* Bytes per element: 4, 2, or 1 for q8_0 (its int8 values; the block scales come on top, see
 * dcp_kv_row_bytes). */
DCP_API uint32_t dcp_dtype_size(dcp_dtype t);
/* "f32" / "f16" / "q8_0". */
DCP_API const char *dcp_dtype_name(dcp_dtype t);

/* Round-to-nearest-even float -> half (overflow gives +-inf, NaN stays NaN). Thread-safe. */
DCP_API uint16_t dcp_f32_to_f16(float f);
DCP_API float dcp_f16_to_f32(uint16_t h);
/* Parses "f32", "f16" or "q8_0"; returns false for anything else (*out unchanged). */
DCP_API bool dcp_dtype_parse(const char *name, dcp_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
