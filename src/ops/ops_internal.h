/* Private helpers shared by the model kernels' host side (ops.c, ds2_ops.c). */
#ifndef DCP_OPS_INTERNAL_H
#define DCP_OPS_INTERNAL_H

#include "dcpvk/quant.h"
#include "kernels/kernels.h"

/* The kernel of weight op `op` (DCP_KERNEL_MATMUL, _GET_ROWS, _HEAD_MATMUL, _MOE_MATMUL or
 * _MOE_DOWN) for a matrix of `type` into *out: DCP_OK, or DCP_ERR_UNSUPPORTED naming `what` and
 * the type when it is not a weight type (kernels/weight_types.h). Thread-safe. */
dcp_status dcp_ops_weight_kernel(const char *what, dcp_kernel_id op, dcp_ggml_type type, dcp_kernel_id *out);

#endif
