/* dcp-vk's compute kernels: the ids of the one kernel list (kernels.def), their pipeline
 * descriptions for the vk layer, and every kernel's parameter block (the *_params.h headers here,
 * shared with the shaders). Included by the layers that record kernels (kv, attn, ops); includes
 * only vk and common. */
#ifndef DCP_KERNELS_KERNELS_H
#define DCP_KERNELS_KERNELS_H

#include "kernels/attn_params.h"
#include "kernels/cp_params.h"
#include "kernels/ds2_params.h"
#include "kernels/kv_params.h"
#include "kernels/mla_params.h"
#include "kernels/ops_params.h"
#include "kernels/weight_types.h"
#include "kernels/yardstick_params.h"
#include "vk/pipelines.h"

/* The weight types of weight_types.h, in its order: DCP_WEIGHT_<T>. */
typedef enum dcp_weight_type {
#define DCP_WEIGHT_ENUM_(t, ...) DCP_WEIGHT_##t,
    DCP_WEIGHT_TYPES(DCP_WEIGHT_ENUM_, )
#undef DCP_WEIGHT_ENUM_
    DCP_WEIGHT_COUNT
} dcp_weight_type;

/* One id per kernel of kernels.def: DCP_KERNEL_<ID>. A DCP_KERNEL_WEIGHTS entry OP gives
 * DCP_KERNEL_<OP>_<T> for every weight type T, consecutive in weight order, and DCP_KERNEL_<OP>,
 * equal to the first of them (dcp_kernel_weighted). */
typedef enum dcp_kernel_id {
#define DCP_KERNEL(id, ...) DCP_KERNEL_##id,
#define DCP_KERNEL_ID_W_(t, op) DCP_KERNEL_##op##_##t,
#define DCP_KERNEL_WEIGHTS(op, ...)                                                                \
    DCP_KERNEL_##op, DCP_KERNEL_##op##_BLOCK_ = DCP_KERNEL_##op - 1, DCP_WEIGHT_TYPES(DCP_KERNEL_ID_W_, op)
#include "kernels/kernels.def"
#undef DCP_KERNEL_ID_W_
    DCP_KERNEL_COUNT
} dcp_kernel_id;

/* The kernel of weight op `op` (a DCP_KERNEL_<OP> of a DCP_KERNEL_WEIGHTS entry) for weight type w. */
static inline dcp_kernel_id dcp_kernel_weighted(dcp_kernel_id op, dcp_weight_type w)
{
    return (dcp_kernel_id)((int)op + (int)w);
}

/* The pipeline description of kernel id (static; thread-safe). */
const dcp_pipeline_desc *dcp_kernel_desc(dcp_kernel_id id);

/* Records a dispatch of kernel id: dcp_cmd_dispatch with its description (see vk/pipelines.h:
 * spec holds the kernel's spec constants, bindings its buffers in order, a KV pool's array binding
 * as DCP_KV_MAX_SEGMENTS entries; push its parameter block). */
dcp_status dcp_kernel_dispatch(dcp_cmd *cmd, dcp_kernel_id id, const uint32_t *spec, const dcp_binding *bindings,
                               const void *push, uint32_t groups_x, uint32_t groups_y, uint32_t groups_z);

#endif
