/* Compute pipelines: ids from the one table (pipelines.def), lazy creation per device and per
 * specialization values, and dispatch recording. */
#ifndef DCP_VK_PIPELINES_H
#define DCP_VK_PIPELINES_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/vk.h"
#include "attn/attn_params.h"
#include "kv/kv_params.h"
#include "attn/cp_params.h"
#include "model/model_params.h"
#include "vk/yardstick_params.h"

#define DCP_MAX_SPEC 8
#define DCP_MAX_BINDINGS 8

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
    const uint32_t *binding_counts; /* descriptors per binding */
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
 * size). bindings holds the descriptors of every binding in order, arrays flattened (the sum of
 * binding_counts entries). push points at the pipeline's push-constant struct. */
dcp_status dcp_cmd_dispatch(dcp_cmd *cmd, dcp_pipeline_id id, const uint32_t *spec,
                            const dcp_binding *bindings, const void *push, uint32_t groups_x,
                            uint32_t groups_y, uint32_t groups_z);

/* Creates (if needed) the pipeline so that later recording does not compile. */
dcp_status dcp_device_prepare_pipeline(dcp_device *dev, dcp_pipeline_id id, const uint32_t *spec);

#endif
