/* The pipeline descriptions of the kernels of kernels.def, over the SPIR-V modules that the build
 * compiles from the same list (shaders/shaders.cmake) and embeds. */
#include "kernels/kernels.h"

#include "dcp_spv_all.h"

_Static_assert(DCP_KV_MAX_SEGMENTS <= DCP_MAX_ARRAY, "a KV pool's segments exceed the vk layer's array bindings");

/* Every entry within the vk layer's limits (one more binding for a KV pool's array). */
#define DCP_KERNEL(id, shader, defines, push, spec, buffers)                                       \
    _Static_assert((spec) >= 1 && (spec) <= DCP_MAX_SPEC && (buffers) >= 1 && (buffers) <= DCP_MAX_BINDINGS, \
                   #id ": specialization constants or bindings outside the vk layer's limits");
#define DCP_KERNEL_KV(id, shader, defines, push, spec, buffers)                                    \
    _Static_assert((spec) >= 1 && (spec) <= DCP_MAX_SPEC && (buffers) + 1 <= DCP_MAX_BINDINGS,     \
                   #id ": specialization constants or bindings outside the vk layer's limits");
#include "kernels/kernels.def"

static const dcp_pipeline_desc descs[DCP_KERNEL_COUNT] = {
#define DCP_KERNEL(id, shader, defines, push, spec, buffers)                                       \
    [DCP_KERNEL_##id] = {.name = #id,                                                              \
                         .spv = dcp_spv_##id,                                                      \
                         .spv_size = sizeof(dcp_spv_##id),                                         \
                         .push_size = sizeof(push),                                                \
                         .spec_count = (spec),                                                     \
                         .binding_count = (buffers)},
#define DCP_KERNEL_KV(id, shader, defines, push, spec, buffers)                                    \
    [DCP_KERNEL_##id] = {.name = #id,                                                              \
                         .spv = dcp_spv_##id,                                                      \
                         .spv_size = sizeof(dcp_spv_##id),                                         \
                         .spv_single = dcp_spv_##id##_1SEG,                                        \
                         .spv_single_size = sizeof(dcp_spv_##id##_1SEG),                           \
                         .push_size = sizeof(push),                                                \
                         .spec_count = (spec),                                                     \
                         .binding_count = (buffers) + 1,                                           \
                         .array_size = DCP_KV_MAX_SEGMENTS},
#include "kernels/kernels.def"
};

const dcp_pipeline_desc *dcp_kernel_desc(dcp_kernel_id id) { return &descs[id]; }

dcp_status dcp_kernel_dispatch(dcp_cmd *cmd, dcp_kernel_id id, const uint32_t *spec, const dcp_binding *bindings,
                               const void *push, uint32_t groups_x, uint32_t groups_y, uint32_t groups_z)
{
    return dcp_cmd_dispatch(cmd, &descs[id], spec, bindings, push, groups_x, groups_y, groups_z);
}
