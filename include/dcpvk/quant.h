/* ggml tensor types: codes, names, block layouts, and the conversions between f32 and the types
 * whose data dcp-vk reads (include/dcpvk/gguf.h names them in a file's tensor directory).
 * The block layouts of the quantized types are written down in src/quant/quants.h. */
#ifndef DCPVK_QUANT_H
#define DCPVK_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Tensor element types (ggml type codes). F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS can be read as data (DCP_GGML_SUPPORTED_LIST); the others are known by
 * name and size so that a directory can be listed and checked, and reading their data fails with
 * DCP_ERR_UNSUPPORTED naming the type. */
typedef enum dcp_ggml_type {
    DCP_GGML_TYPE_F32 = 0,
    DCP_GGML_TYPE_F16 = 1,
    DCP_GGML_TYPE_Q4_0 = 2,
    DCP_GGML_TYPE_Q4_1 = 3,
    DCP_GGML_TYPE_Q5_0 = 6,
    DCP_GGML_TYPE_Q5_1 = 7,
    DCP_GGML_TYPE_Q8_0 = 8,
    DCP_GGML_TYPE_Q8_1 = 9,
    DCP_GGML_TYPE_Q2_K = 10,
    DCP_GGML_TYPE_Q3_K = 11,
    DCP_GGML_TYPE_Q4_K = 12,
    DCP_GGML_TYPE_Q5_K = 13,
    DCP_GGML_TYPE_Q6_K = 14,
    DCP_GGML_TYPE_Q8_K = 15,
    DCP_GGML_TYPE_IQ2_XXS = 16,
    DCP_GGML_TYPE_IQ2_XS = 17,
    DCP_GGML_TYPE_IQ3_XXS = 18,
    DCP_GGML_TYPE_IQ1_S = 19,
    DCP_GGML_TYPE_IQ4_NL = 20,
    DCP_GGML_TYPE_IQ3_S = 21,
    DCP_GGML_TYPE_IQ2_S = 22,
    DCP_GGML_TYPE_IQ4_XS = 23,
    DCP_GGML_TYPE_I8 = 24,
    DCP_GGML_TYPE_I16 = 25,
    DCP_GGML_TYPE_I32 = 26,
    DCP_GGML_TYPE_I64 = 27,
    DCP_GGML_TYPE_F64 = 28,
    DCP_GGML_TYPE_IQ1_M = 29,
    DCP_GGML_TYPE_BF16 = 30,
    DCP_GGML_TYPE_TQ1_0 = 34,
    DCP_GGML_TYPE_TQ2_0 = 35,
    DCP_GGML_TYPE_MXFP4 = 39,
} dcp_ggml_type;

/* Q8_0 block: 32 weights = d * qs[i], d stored as IEEE half. 34 bytes, no padding. */
enum { DCP_Q8_0_BLOCK = 32, DCP_Q8_0_BYTES = 34 };

/* The tensor types whose data dcp-vk reads, for messages. */
#define DCP_GGML_SUPPORTED_LIST "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS"

/* Name of a ggml type ("F32", "Q4_K", ...), or NULL when the code is not a known ggml type.
 * Thread-safe. */
DCP_API const char *dcp_ggml_type_name(dcp_ggml_type type);

/* Looks up a ggml type by name (case-insensitive, e.g. "q8_0"). Returns DCP_ERR_INVALID_ARGUMENT
 * for an unknown name. */
DCP_API dcp_status dcp_ggml_type_from_name(const char *name, dcp_ggml_type *out);

/* Block layout of a ggml type: *block_elems elements are stored in *block_bytes bytes. Returns
 * false (outputs 0) for an unknown code. Thread-safe. */
DCP_API bool dcp_ggml_type_block(dcp_ggml_type type, uint32_t *block_elems, uint32_t *block_bytes);

/* True for the types whose data dcp-vk reads (DCP_GGML_SUPPORTED_LIST). */
DCP_API bool dcp_ggml_type_supported(dcp_ggml_type type);

/* Converts n elements of a supported type to f32. n must be a multiple of the block size.
 * src: n elements of `type` (any alignment); dst: [n] f32. Thread-safe. */
DCP_API dcp_status dcp_ggml_to_f32(dcp_ggml_type type, const void *src, float *dst, uint64_t n);

/* Converts n f32 values to a supported type (round to nearest even; Q8_0 scale = max|x|/127 per
 * block; the other quantized types by the reference quantizers of src/quant/quants.h). n must be
 * a multiple of the block size. dst: n / block elements * block bytes. */
DCP_API dcp_status dcp_ggml_from_f32(dcp_ggml_type type, const float *src, void *dst, uint64_t n);

#ifdef __cplusplus
}
#endif
#endif
