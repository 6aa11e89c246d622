/* Compute pipelines: ids from the one table (pipelines.def), lazy creation per device and per
 * specialization values, and dispatch recording. */
#ifndef DCP_VK_PIPELINES_H
#define DCP_VK_PIPELINES_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/vk.h"
#include "kernels/attn_params.h"
#include "kernels/kv_params.h"
#include "kernels/cp_params.h"
#include "kernels/ops_params.h"
#include "kernels/yardstick_params.h"
#include "kernels/mla_params.h"
#include "kernels/ds2_params.h"

#define DCP_MAX_SPEC 8
#define DCP_MAX_BINDINGS 8

/* A binding cell of the table: 1 (one storage buffer), or DCP_ARRAY(n), an array binding of n
 * storage buffers (the KV pool's segments), which holds one buffer on devices that use the
 * pipeline's one-segment variant. */
#define DCP_BINDING_ARRAY 0x80000000u
#define DCP_ARRAY(n) (DCP_BINDING_ARRAY | (uint32_t)(n))

typedef enum dcp_pipeline_id {
#define DCP_PIPELINE(id, ...) DCP_PIPE_##id,
#include "vk/pipelines.def"
#undef DCP_PIPELINE
    DCP_PIPELINE_COUNT
} dcp_pipeline_id;

typedef struct dcp_pipeline_desc {
    const char *name;
    const uint32_t *spv;
    size_t spv_size;         /* bytes */
    uint32_t push_size;      /* bytes */
    uint32_t spec_count;
    uint32_t binding_count;
    const uint32_t *bindings; /* per binding: its cell of the table (descriptors, | DCP_BINDING_ARRAY) */
} dcp_pipeline_desc;

const dcp_pipeline_desc *dcp_pipeline_get_desc(dcp_pipeline_id id);

/* One storage-buffer descriptor: [offset, offset + range) of buffer; range 0 means to the end. */
typedef struct dcp_binding {
    dcp_buffer *buffer;
    uint64_t offset;
    uint64_t range;
} dcp_binding;

/* Workgroup size (specialization constant 0) of the project's 1-D kernels on dev: the subgroup
 * size, at least 64, within the device's limits (maxComputeWorkGroupInvocations and
 * maxComputeWorkGroupSize[0]); a multiple of the subgroup size whenever the limits allow.
 * From the device properties; thread-safe. */
uint32_t dcp_vk_workgroup_size(const dcp_device *dev);

/* Records a dispatch of pipeline id specialised with spec[0..spec_count) (spec[0] = workgroup
 * size). bindings holds the descriptors of every binding in order, arrays flattened (n entries for a
 * DCP_ARRAY(n) binding, whatever the device). push points at the pipeline's push-constant struct. */
dcp_status dcp_cmd_dispatch(dcp_cmd *cmd, dcp_pipeline_id id, const uint32_t *spec,
                            const dcp_binding *bindings, const void *push, uint32_t groups_x,
                            uint32_t groups_y, uint32_t groups_z);

/* Creates (if needed) the pipeline so that later recording does not compile. */
dcp_status dcp_device_prepare_pipeline(dcp_device *dev, dcp_pipeline_id id, const uint32_t *spec);

#endif
