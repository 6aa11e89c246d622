/* Private helpers shared by the model kernels' host side (ops.c, ds2_ops.c). */
#ifndef DCP_OPS_INTERNAL_H
#define DCP_OPS_INTERNAL_H

#include "dcpvk/ops.h"
#include "dcpvk/quant.h"
#include "kernels/kernels.h"

/* The kernel of weight op `op` (DCP_KERNEL_MATMUL, _GET_ROWS, _HEAD_MATMUL, _MOE_MATMUL or
 * _MOE_DOWN) for a matrix of `type` into *out: DCP_OK, or DCP_ERR_UNSUPPORTED naming `what` and
 * the type when it is not a weight type (kernels/weight_types.h). Thread-safe. */
dcp_status dcp_ops_weight_kernel(const char *what, dcp_kernel_id op, dcp_ggml_type type, dcp_kernel_id *out);

/* Makes *out the matrix of parts parts[0 .. n) (rows in that order; the same k; each a one-part
 * matrix, moved into out: the caller no longer destroys them). n == 1: *out is parts[0] itself.
 * DCP_ERR_INVALID_ARGUMENT for n == 0, more than 255, a part of parts, different k or more than
 * 2^32 - 1 rows; DCP_ERR_OUT_OF_MEMORY. On failure the parts are destroyed and *out is zeroed. */
dcp_status dcp_matrix_join(uint32_t n, dcp_matrix *parts, dcp_matrix *out);
/* Device bytes of a matrix (every part of a matrix of parts; 0 for an empty one). */
uint64_t dcp_matrix_device_bytes(const dcp_matrix *m);

#endif
