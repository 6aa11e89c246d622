/* Private definitions of the Vulkan layer: dispatch tables, devices, buffers, commands. */
#ifndef DCP_VK_INTERNAL_H
#define DCP_VK_INTERNAL_H

#include <vulkan/vulkan.h>

#include "common/error.h"
#include "dcpvk/vk.h"
#include "vk/pipelines.h"

/* Per-instance function table (global + instance-level entry points). */
typedef struct dcp_vk_instance_table {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
#define DCP_VK_GLOBAL(name) PFN_##name name;
#define DCP_VK_INSTANCE(name) PFN_##name name;
#include "vk/functions.def"
} dcp_vk_instance_table;

/* Per-device function table: owned by one dcp_device, loaded with vkGetDeviceProcAddr. */
typedef struct dcp_vk_device_table {
#define DCP_VK_DEVICE(name) PFN_##name name;
#include "vk/functions.def"
} dcp_vk_device_table;

/* Loads the Vulkan loader and the global entry points (volk-style). */
dcp_status dcp_vk_loader_open(dcp_vk_instance_table *t, void **lib_handle);
void dcp_vk_loader_close(void *lib_handle);
void dcp_vk_load_instance(dcp_vk_instance_table *t, VkInstance instance);
void dcp_vk_load_device(const dcp_vk_instance_table *it, VkDevice device, dcp_vk_device_table *dt);

/* Translates a VkResult into a status and a message naming the device and the call. */
dcp_status dcp_vk_check(VkResult r, const dcp_device *dev, const char *call);
const char *dcp_vk_result_string(VkResult r);

#define DCP_VK_TRY(dev, call)                                                                      \
    do {                                                                                           \
        VkResult vr_ = (call);                                                                     \
        if (vr_ != VK_SUCCESS) {                                                                   \
            st = dcp_vk_check(vr_, (dev), #call);                                                  \
            goto fail;                                                                             \
        }                                                                                          \
    } while (0)

/* What a device made of one pipeline description (vk/pipelines.h): layouts and shader module,
 * created with its first pipeline. */
typedef struct dcp_pipeline_program {
    const dcp_pipeline_desc *desc;
    VkDescriptorSetLayout set_layout;
    VkPipelineLayout layout;
    VkShaderModule module;
    bool dispatched; /* recorded at least once ($DCP_VK_DISPATCH_LOG) */
} dcp_pipeline_program;

/* A created pipeline: a description's program specialised with spec[0..desc->spec_count). */
typedef struct dcp_pipeline_entry {
    const dcp_pipeline_desc *desc;
    uint32_t program;       /* index in the device's programs */
    uint32_t spec[DCP_MAX_SPEC];
    VkPipeline pipeline;
} dcp_pipeline_entry;

struct dcp_device {
    dcp_context *ctx;
    dcp_device_info info;
    VkPhysicalDevice phys;
    VkDevice device;
    dcp_device *owner;      /* the device that created `device` and destroys it (itself, or the
                               first device of a device-group VkDevice that others share) */
    uint32_t device_mask;   /* 1 << info.group_device_index when info.group_device_count > 0, else 0 */
    dcp_vk_device_table vk;
    uint32_t queue_family;
    VkQueue queue;
    VkCommandPool cmd_pool;
    VkPipelineCache pipeline_cache;
    VkPhysicalDeviceMemoryProperties mem_props;
    uint32_t timestamp_valid_bits;
    /* Descriptor pools: a chain, a new pool is added when the last one is full. */
    VkDescriptorPool *desc_pools;
    uint32_t desc_pool_count;
    /* Per pipeline description dispatched here: layouts and module. */
    dcp_pipeline_program *programs;
    uint32_t program_count, program_cap;
    /* Created pipelines, one per (description, specialization values). */
    dcp_pipeline_entry *pipelines;
    uint32_t pipeline_count, pipeline_cap;
    /* Staging buffer for uploads and downloads (grown on demand). */
    dcp_buffer *staging;
    uint64_t allocated;              /* bytes of live dcp_buffer_create buffers (accounting) */
    dcp_cmd *transfer_cmd;
};

struct dcp_context {
    void *loader;
    dcp_vk_instance_table vk;
    VkInstance instance;
    VkDebugUtilsMessengerEXT messenger;
    uint64_t validation_count;
    int validation;
    int physical_count;
    dcp_device **devices;
    int device_count;
};

struct dcp_buffer {
    dcp_device *dev;
    VkBuffer buffer;
    VkDeviceMemory memory;  /* VK_NULL_HANDLE for a peer view (bound to another buffer's memory) */
    uint64_t size;
    uint64_t alloc_size;    /* bytes of memory (what an importer of an exported handle allocates) */
    uint32_t export_handles;/* DCP_HANDLE_* the memory was allocated exportable as */
    uint32_t type_index;    /* memory type index */
    dcp_memory kind;
    void *mapped;
    bool counted;                    /* in dev->allocated (dcp_buffer_create) */
};

/* A timeline semaphore of one device (src/vk/external.c). */
struct dcp_sem {
    dcp_device *dev;
    VkSemaphore sem;
    uint32_t export_handles;
    bool submitted; /* a submission waited on or signalled it: destroyed after its queue is idle */
};

typedef struct dcp_cmd_set {
    VkDescriptorSet set;
    uint32_t pool;        /* index in the device's descriptor pools */
    const dcp_pipeline_desc *desc; /* the set's layout is that of this description */
} dcp_cmd_set;

struct dcp_cmd {
    dcp_device *dev;
    VkCommandBuffer cb;
    VkFence fence;
    int recording;  /* 1 while commands may be recorded */
    int pending;    /* 1 between submit and wait */
    dcp_cmd_set *sets;
    /* Descriptor sets: [0, set_count) are used by the current recording, [set_count, set_total)
     * are kept from earlier recordings for reuse (allocating and freeing sets per step is costly
     * on some drivers: lavapipe maps and unmaps memory for each). */
    uint32_t set_count, set_total, set_cap;
    VkQueryPool queries;
    uint32_t query_count;
};

/* Chains VkMemoryAllocateFlagsInfo (the device's mask) into *mai when the device runs on a
 * device-group VkDevice; flags must outlive the allocation call. */
void dcp_vk_chain_device_mask(const dcp_device *dev, VkMemoryAllocateInfo *mai, VkMemoryAllocateFlagsInfo *flags);

/* Creates a buffer (see dcp_buffer_create) whose memory is exportable as export_handles
 * (DCP_HANDLE_* bits, 0: an ordinary buffer; exportable memory is a dedicated allocation). */
dcp_status dcp_vk_buffer_create(dcp_device *dev, uint64_t size, dcp_memory memory, uint32_t export_handles,
                                dcp_buffer **out);

/* Memory type index with all of `required` flags (preferring `preferred` too), or UINT32_MAX. */
uint32_t dcp_vk_memory_type(const dcp_device *dev, uint32_t type_bits, VkMemoryPropertyFlags required,
                            VkMemoryPropertyFlags preferred);

/* Device-level internals used by cmd.c / pipeline.c. */
dcp_status dcp_device_alloc_set(dcp_device *dev, VkDescriptorSetLayout layout, VkDescriptorSet *set,
                                uint32_t *pool_index);
void dcp_device_destroy_pipelines(dcp_device *dev);

#endif
