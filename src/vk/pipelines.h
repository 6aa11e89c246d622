/* Compute pipelines by description: a caller describes a pipeline (SPIR-V, bindings, push-constant
 * size, specialization constants) and records dispatches of it; the pipeline is created lazily, on
 * its first dispatch on a device and per specialization values, into the device's pipeline cache.
 * The vk layer knows no kernel: the descriptions of dcp-vk's kernels are src/kernels/. */
#ifndef DCP_VK_PIPELINES_H
#define DCP_VK_PIPELINES_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/vk.h"

#define DCP_MAX_SPEC 9      /* specialization constants of one pipeline */
#define DCP_MAX_BINDINGS 8  /* storage-buffer bindings of one pipeline */
#define DCP_MAX_ARRAY 64    /* buffers of an array binding */

/* What a pipeline is: its SPIR-V and the interface the module declares. Set 0 holds
 * binding_count storage-buffer bindings, one buffer each, except that when array_size > 0 the last
 * binding is an array of array_size buffers. On devices without non-uniform descriptor indexing
 * of such arrays (dcp_device_info.kv_multi_segment false) the module spv_single is used instead
 * when given, and there the array binding holds one buffer. Push constants: push_size bytes from
 * offset 0. Specialization constants 0 .. spec_count-1 are 32-bit, constant 0 is the workgroup
 * size (local_size_x_id = 0), so spec_count >= 1.
 * Lifetime: a description must outlive every device it was dispatched on (the devices keep
 * pipelines keyed by its address); the descriptions of src/kernels/ are static. */
typedef struct dcp_pipeline_desc {
    const char *name;            /* in error messages */
    const uint32_t *spv;         /* SPIR-V words */
    size_t spv_size;             /* bytes */
    const uint32_t *spv_single;  /* the module whose array binding holds one buffer, or NULL */
    size_t spv_single_size;      /* bytes */
    uint32_t push_size;          /* bytes, at most 128 */
    uint32_t spec_count;         /* 1 .. DCP_MAX_SPEC */
    uint32_t binding_count;      /* 1 .. DCP_MAX_BINDINGS */
    uint32_t array_size;         /* 0, or the buffers of the last binding (at most DCP_MAX_ARRAY) */
} dcp_pipeline_desc;

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

/* Records a dispatch of the pipeline `desc` specialised with spec[0..spec_count) (spec[0] =
 * workgroup size). bindings holds the descriptors of every binding in order, the array binding's
 * array_size entries included whatever the device. push points at push_size bytes. Creates the
 * pipeline on the command's device first if needed (not thread-safe per device).
 * DCP_ERR_INVALID_ARGUMENT for a command that is not recording, a NULL buffer, one of another
 * device or a range outside its buffer; DCP_ERR_UNSUPPORTED for a workgroup size over the
 * device's limits; DCP_ERR_INTERNAL for a description outside the limits above. */
dcp_status dcp_cmd_dispatch(dcp_cmd *cmd, const dcp_pipeline_desc *desc, const uint32_t *spec,
                            const dcp_binding *bindings, const void *push, uint32_t groups_x,
                            uint32_t groups_y, uint32_t groups_z);

/* Creates (if needed) the pipeline on dev so that later recording does not compile. */
dcp_status dcp_device_prepare_pipeline(dcp_device *dev, const dcp_pipeline_desc *desc, const uint32_t *spec);

#endif
