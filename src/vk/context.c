/* Instance and logical devices: device-list parsing, properties, queues, pools, caches. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vk/internal.h"

static VKAPI_ATTR VkBool32 VKAPI_CALL on_validation(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                     VkDebugUtilsMessageTypeFlagsEXT types,
                                                     const VkDebugUtilsMessengerCallbackDataEXT *data,
                                                     void *user)
{
    dcp_context *ctx = user;
    if (severity & (VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                    VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT)) {
        ctx->validation_count++;
        dcp_log("dcp-vk: validation %s: %s",
                (severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT) ? "error" : "warning",
                data && data->pMessage ? data->pMessage : "(no message)");
    }
    (void)types;
    return VK_FALSE;
}

dcp_status dcp_parse_device_list(const char *list, int *indices, int max, int *count)
{
    *count = 0;
    const char *p = list;
    while (*p) {
        char *end = NULL;
        while (*p == ' ') p++;
        long v = strtol(p, &end, 10);
        if (end == p || v < 0 || v > 1024)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "device list \"%s\": entry %d is not a device index (expected "
                            "comma-separated integers such as 0,0,1)",
                            list, *count);
        if (*count >= max)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device list \"%s\": more than %d devices",
                            list, max);
        indices[(*count)++] = (int)v;
        p = end;
        while (*p == ' ') p++;
        if (*p == ',') {
            p++;
            if (!*p)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device list \"%s\": trailing comma", list);
        } else if (*p) {
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "device list \"%s\": unexpected '%c' (expected comma-separated integers)",
                            list, *p);
        }
    }
    if (*count == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device list is empty");
    return DCP_OK;
}

static const char *type_name(VkPhysicalDeviceType t)
{
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual-gpu";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "cpu";
    default: return "other";
    }
}

static int has_extension(const VkExtensionProperties *exts, uint32_t n, const char *name)
{
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(exts[i].extensionName, name) == 0) return 1;
    return 0;
}

static void device_destroy(dcp_device *dev)
{
    if (!dev) return;
    if (dev->device) {
        dev->vk.vkDeviceWaitIdle(dev->device);
        dcp_cmd_destroy(dev->transfer_cmd);
        dcp_buffer_destroy(dev->staging);
        dcp_device_destroy_pipelines(dev);
        for (uint32_t i = 0; i < dev->desc_pool_count; i++)
            dev->vk.vkDestroyDescriptorPool(dev->device, dev->desc_pools[i], NULL);
        if (dev->pipeline_cache) dev->vk.vkDestroyPipelineCache(dev->device, dev->pipeline_cache, NULL);
        if (dev->cmd_pool) dev->vk.vkDestroyCommandPool(dev->device, dev->cmd_pool, NULL);
        if (dev->owner == dev) dev->vk.vkDestroyDevice(dev->device, NULL); /* shared ones: by the owner */
    }
    free(dev->desc_pools);
    free(dev);
}

/* The external-handle capabilities of a physical device for storage/transfer buffers and
 * semaphores, restricted to the extensions enabled (ext: bits of the enabled ones). */
enum { EXT_MEM_FD = 1, EXT_DMA_BUF = 2, EXT_SEM_FD = 4 };
static void external_caps(const dcp_vk_instance_table *vk, VkPhysicalDevice phys, unsigned ext, int timeline,
                          dcp_device_info *info)
{
    static const struct { VkExternalMemoryHandleTypeFlagBits vk; uint32_t bit; unsigned needs; } mem[2] = {
        {VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT, DCP_HANDLE_OPAQUE_FD, EXT_MEM_FD},
        {VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT, DCP_HANDLE_DMA_BUF, EXT_MEM_FD | EXT_DMA_BUF},
    };
    for (int k = 0; k < 2; k++) {
        if ((ext & mem[k].needs) != mem[k].needs || !vk->vkGetPhysicalDeviceExternalBufferProperties) continue;
        VkPhysicalDeviceExternalBufferInfo bi = {
            .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_BUFFER_INFO,
            .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                     VK_BUFFER_USAGE_TRANSFER_DST_BIT,
            .handleType = mem[k].vk};
        VkExternalBufferProperties bp = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_BUFFER_PROPERTIES};
        vk->vkGetPhysicalDeviceExternalBufferProperties(phys, &bi, &bp);
        VkExternalMemoryFeatureFlags f = bp.externalMemoryProperties.externalMemoryFeatures;
        if (f & VK_EXTERNAL_MEMORY_FEATURE_EXPORTABLE_BIT) info->mem_export |= mem[k].bit;
        if (f & VK_EXTERNAL_MEMORY_FEATURE_IMPORTABLE_BIT) info->mem_import |= mem[k].bit;
    }
    if (info->has_external_memory_host) info->mem_import |= DCP_HANDLE_HOST;
    static const struct { VkExternalSemaphoreHandleTypeFlagBits vk; uint32_t bit; int timeline; } sem[2] = {
        {VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT, DCP_HANDLE_OPAQUE_FD, 1},
        {VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_SYNC_FD_BIT, DCP_HANDLE_SYNC_FD, 0},
    };
    for (int k = 0; k < 2; k++) {
        if (!(ext & EXT_SEM_FD) || (sem[k].timeline && !timeline) ||
            !vk->vkGetPhysicalDeviceExternalSemaphoreProperties)
            continue;
        VkSemaphoreTypeCreateInfo ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                        .semaphoreType = sem[k].timeline ? VK_SEMAPHORE_TYPE_TIMELINE
                                                                         : VK_SEMAPHORE_TYPE_BINARY};
        VkPhysicalDeviceExternalSemaphoreInfo si = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_SEMAPHORE_INFO,
                                                    .pNext = &ti, .handleType = sem[k].vk};
        VkExternalSemaphoreProperties sp = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_SEMAPHORE_PROPERTIES};
        vk->vkGetPhysicalDeviceExternalSemaphoreProperties(phys, &si, &sp);
        if (sp.externalSemaphoreFeatures & VK_EXTERNAL_SEMAPHORE_FEATURE_EXPORTABLE_BIT) info->sem_export |= sem[k].bit;
        if (sp.externalSemaphoreFeatures & VK_EXTERNAL_SEMAPHORE_FEATURE_IMPORTABLE_BIT) info->sem_import |= sem[k].bit;
    }
}

/* A logical device on phys. group (count > 0): create the VkDevice over these physical devices
 * (VkDeviceGroupDeviceCreateInfo), this device being group index `index` of it; share: instead
 * run on share's device-group VkDevice as its index `index`. */
static dcp_status device_create(dcp_context *ctx, VkPhysicalDevice phys, int phys_index,
                                int logical_index, int robust, const VkPhysicalDevice *group,
                                uint32_t group_count, uint32_t index, dcp_device *share, dcp_device **out)
{
    dcp_status st = DCP_OK;
    VkExtensionProperties *exts = NULL;
    VkQueueFamilyProperties *qf = NULL;
    dcp_device *dev = calloc(1, sizeof *dev);
    if (!dev) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory creating a device");
    dev->ctx = ctx;
    dev->phys = phys;
    dcp_vk_instance_table *vk = &ctx->vk;
    dcp_device_info *info = &dev->info;
    info->physical_index = phys_index;
    info->logical_index = logical_index;

    /* Properties. */
    VkPhysicalDeviceDriverProperties drv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
    VkPhysicalDeviceSubgroupProperties sub = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES,
                                              .pNext = &drv};
    VkPhysicalDeviceIDProperties idp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES,
                                        .pNext = &sub};
    VkPhysicalDeviceMaintenance3Properties m3 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES,
                                                 .pNext = &idp};
    /* Subgroup size control is core in 1.3 (or VK_EXT_subgroup_size_control): chain it only then. */
    VkPhysicalDeviceSubgroupSizeControlProperties ssc = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
    {
        VkPhysicalDeviceProperties p1;
        vk->vkGetPhysicalDeviceProperties(phys, &p1);
        if (VK_API_VERSION_MINOR(p1.apiVersion) >= 3 || VK_API_VERSION_MAJOR(p1.apiVersion) > 1) {
            ssc.pNext = m3.pNext;
            m3.pNext = &ssc;
        }
    }
    VkPhysicalDeviceProperties2 props = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &m3};
    vk->vkGetPhysicalDeviceProperties2(phys, &props);
    const VkPhysicalDeviceLimits *lim = &props.properties.limits;
    snprintf(info->name, sizeof info->name, "%s", props.properties.deviceName);
    snprintf(info->driver_name, sizeof info->driver_name, "%s", drv.driverName);
    snprintf(info->driver_info, sizeof info->driver_info, "%s", drv.driverInfo);
    info->type = type_name(props.properties.deviceType);
    info->vendor_id = props.properties.vendorID;
    info->device_id = props.properties.deviceID;
    info->api_version = props.properties.apiVersion;
    info->driver_version = props.properties.driverVersion;
    memcpy(info->device_uuid, idp.deviceUUID, 16);
    memcpy(info->driver_uuid, idp.driverUUID, 16);
    info->subgroup_size = sub.subgroupSize;
    info->min_subgroup_size = ssc.minSubgroupSize ? ssc.minSubgroupSize : sub.subgroupSize;
    info->subgroup_shuffle = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                             (sub.supportedOperations & VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    info->subgroup_arithmetic = (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
                                (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                                (sub.supportedOperations & VK_SUBGROUP_FEATURE_BASIC_BIT);
    /* matmul's layout (src/ops/ops.c): lanes owning rows where a lane's load is a scalar loop (a
     * CPU driver), lanes splitting a row on GPUs; forced either way to test both on one driver. */
    info->matmul_lane_rows = strcmp(info->type, "cpu") == 0;
    const char *layout_env = getenv("DCP_VK_MATMUL_LAYOUT");
    if (layout_env && *layout_env) {
        if (strcmp(layout_env, "rows") != 0 && strcmp(layout_env, "split") != 0) {
            st = dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                          "$DCP_VK_MATMUL_LAYOUT '%s' is not one of rows (a lane owns whole rows), split (a "
                          "subgroup's lanes split each row)", layout_env);
            goto fail;
        }
        info->matmul_lane_rows = layout_env[0] == 'r';
    }
    info->max_storage_buffer_range = lim->maxStorageBufferRange;
    /* A stricter storage-buffer offset alignment than the driver's, for testing on CPU drivers
     * (lavapipe says 16; some GPUs 256): every binding offset is checked against the larger. */
    info->min_storage_offset_alignment = lim->minStorageBufferOffsetAlignment ? lim->minStorageBufferOffsetAlignment : 1;
    const char *align_env = getenv("DCP_VK_MIN_STORAGE_ALIGN");
    if (align_env && *align_env) {
        char *end;
        unsigned long long a = strtoull(align_env, &end, 10);
        if (*end || a == 0 || (a & (a - 1)) || a > DCP_STORAGE_ALIGN_MAX) {
            st = dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                          "$DCP_VK_MIN_STORAGE_ALIGN '%s' is not a power of two in 1 .. %u (the largest "
                          "minStorageBufferOffsetAlignment Vulkan allows)", align_env, DCP_STORAGE_ALIGN_MAX);
            goto fail;
        }
        if (a > info->min_storage_offset_alignment) info->min_storage_offset_alignment = a;
    }
    /* A smaller storage-buffer range than the driver's, for testing on CPU drivers (lavapipe says
     * 128 MiB): every buffer the library splits by that limit (KV pool and host-pool segments,
     * cross-device areas) splits at small sizes. Larger values leave the driver's limit. */
    enum { RANGE_MIN = 65536 }; /* below every real device's (Vulkan asks at least 2^27) */
    const char *range_env = getenv("DCP_VK_MAX_STORAGE_RANGE");
    if (range_env && *range_env) {
        char *end;
        errno = 0;
        unsigned long long r = strtoull(range_env, &end, 10);
        if (*end || errno || range_env[0] == '-' || r < RANGE_MIN || r > UINT32_MAX) {
            st = dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                          "$DCP_VK_MAX_STORAGE_RANGE '%s' is not a byte count in %u .. %u", range_env,
                          (unsigned)RANGE_MIN, (unsigned)UINT32_MAX);
            goto fail;
        }
        if (r < info->max_storage_buffer_range) info->max_storage_buffer_range = r;
    }
    info->max_allocation_size = m3.maxMemoryAllocationSize;
    info->max_buffer_size = m3.maxMemoryAllocationSize;
    info->max_shared_memory = lim->maxComputeSharedMemorySize;
    info->max_workgroup_invocations = lim->maxComputeWorkGroupInvocations;
    memcpy(info->max_workgroup_size, lim->maxComputeWorkGroupSize, sizeof info->max_workgroup_size);
    info->max_push_constants = lim->maxPushConstantsSize;
    info->max_storage_buffers_per_stage = lim->maxPerStageDescriptorStorageBuffers;
    vk->vkGetPhysicalDeviceMemoryProperties(phys, &dev->mem_props);
    info->heap_count = dev->mem_props.memoryHeapCount < DCP_MAX_HEAPS ? dev->mem_props.memoryHeapCount
                                                                      : DCP_MAX_HEAPS;
    for (uint32_t i = 0; i < info->heap_count; i++) {
        info->heap_size[i] = dev->mem_props.memoryHeaps[i].size;
        info->heap_device_local[i] =
            (dev->mem_props.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) != 0;
    }
    info->physical_group_size = 1;

    if (VK_API_VERSION_MINOR(info->api_version) < 2 && VK_API_VERSION_MAJOR(info->api_version) == 1) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s): Vulkan %u.%u, dcp-vk needs 1.2",
                      logical_index, info->name, VK_API_VERSION_MAJOR(info->api_version),
                      VK_API_VERSION_MINOR(info->api_version));
        goto fail;
    }
    if (!info->subgroup_arithmetic || !info->subgroup_shuffle) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED,
                      "device %d (%s): compute shaders lack subgroup arithmetic or shuffle operations",
                      logical_index, info->name);
        goto fail;
    }

    /* Features. */
    VkPhysicalDeviceVulkan12Features f12 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &f12};
    vk->vkGetPhysicalDeviceFeatures2(phys, &f2);
    /* Non-uniform indexing lets a KV pool span several buffers; without it (Mesa 22 lavapipe)
     * pools keep to one buffer and the KV shaders use their one-segment variants. */
    info->nonuniform_indexing = f12.shaderStorageBufferArrayNonUniformIndexing &&
                                f2.features.shaderStorageBufferArrayDynamicIndexing;
    info->kv_multi_segment = info->nonuniform_indexing &&
                             info->max_storage_buffers_per_stage >= DCP_MAX_ARRAY + DCP_MAX_BINDINGS;
    VkPhysicalDeviceVulkan12Features en12 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES,
        .shaderStorageBufferArrayNonUniformIndexing = info->nonuniform_indexing,
        .hostQueryReset = f12.hostQueryReset,
        .timelineSemaphore = f12.timelineSemaphore,
    };
    VkPhysicalDeviceFeatures2 en = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &en12};
    en.features.shaderStorageBufferArrayDynamicIndexing = f2.features.shaderStorageBufferArrayDynamicIndexing;
    en.features.robustBufferAccess = robust && f2.features.robustBufferAccess;
    en.features.shaderInt64 = f2.features.shaderInt64;

    /* Extensions. */
    uint32_t next = 0;
    vk->vkEnumerateDeviceExtensionProperties(phys, NULL, &next, NULL);
    exts = calloc(next ? next : 1, sizeof *exts);
    if (!exts) { st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory"); goto fail; }
    vk->vkEnumerateDeviceExtensionProperties(phys, NULL, &next, exts);
    const char *enable[8];
    uint32_t nenable = 0;
    unsigned ext = 0;
    if (has_extension(exts, next, VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME)) {
        enable[nenable++] = VK_EXT_EXTERNAL_MEMORY_HOST_EXTENSION_NAME;
        info->has_external_memory_host = true;
    }
    if (has_extension(exts, next, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME)) {
        enable[nenable++] = VK_EXT_MEMORY_BUDGET_EXTENSION_NAME;
        info->has_memory_budget = true;
    }
    /* External memory and semaphores as file descriptors: the communicator's peer and dma-buf
     * transports and the GPU-synchronised steps (each used only where the driver offers it). */
    if (has_extension(exts, next, VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME)) {
        enable[nenable++] = VK_KHR_EXTERNAL_MEMORY_FD_EXTENSION_NAME;
        ext |= EXT_MEM_FD;
        if (has_extension(exts, next, VK_EXT_EXTERNAL_MEMORY_DMA_BUF_EXTENSION_NAME)) {
            enable[nenable++] = VK_EXT_EXTERNAL_MEMORY_DMA_BUF_EXTENSION_NAME;
            ext |= EXT_DMA_BUF;
        }
    }
    if (has_extension(exts, next, VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME)) {
        enable[nenable++] = VK_KHR_EXTERNAL_SEMAPHORE_FD_EXTENSION_NAME;
        ext |= EXT_SEM_FD;
    }
    info->timeline_semaphore = f12.timelineSemaphore ? 1 : 0;
    external_caps(vk, phys, ext, f12.timelineSemaphore, info);

    /* A compute queue (prefer a compute-only family). */
    uint32_t nqf = 0;
    vk->vkGetPhysicalDeviceQueueFamilyProperties(phys, &nqf, NULL);
    qf = calloc(nqf ? nqf : 1, sizeof *qf);
    if (!qf) { st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory"); goto fail; }
    vk->vkGetPhysicalDeviceQueueFamilyProperties(phys, &nqf, qf);
    uint32_t family = UINT32_MAX;
    for (uint32_t i = 0; i < nqf; i++) {
        if (!(qf[i].queueFlags & VK_QUEUE_COMPUTE_BIT)) continue;
        if (family == UINT32_MAX || !(qf[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) family = i;
    }
    if (family == UINT32_MAX) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s): no compute queue", logical_index, info->name);
        goto fail;
    }
    dev->queue_family = family;
    dev->timestamp_valid_bits = qf[family].timestampValidBits;
    info->timestamp_period_ns = dev->timestamp_valid_bits ? lim->timestampPeriod : 0.0f;

    float prio = 1.0f;
    if (group_count > 0) {
        info->group_device_count = share ? share->info.group_device_count : group_count;
        info->group_device_index = index;
        dev->device_mask = 1u << index;
    }
    if (share) {
        dev->owner = share;
        dev->device = share->device;
        dev->vk = share->vk;
        dev->queue = share->queue;
    } else {
        VkDeviceGroupDeviceCreateInfo dg = {.sType = VK_STRUCTURE_TYPE_DEVICE_GROUP_DEVICE_CREATE_INFO,
                                            .pNext = en.pNext, .physicalDeviceCount = group_count,
                                            .pPhysicalDevices = group};
        if (group_count > 0) en.pNext = &dg;
        VkDeviceQueueCreateInfo qci = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                       .queueFamilyIndex = family, .queueCount = 1, .pQueuePriorities = &prio};
        VkDeviceCreateInfo dci = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, .pNext = &en,
                                  .queueCreateInfoCount = 1, .pQueueCreateInfos = &qci,
                                  .enabledExtensionCount = nenable, .ppEnabledExtensionNames = enable};
        DCP_VK_TRY(dev, vk->vkCreateDevice(phys, &dci, NULL, &dev->device));
        dev->owner = dev;
        dcp_vk_load_device(vk, dev->device, &dev->vk);
        dev->vk.vkGetDeviceQueue(dev->device, family, 0, &dev->queue);
    }

    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = family};
    DCP_VK_TRY(dev, dev->vk.vkCreateCommandPool(dev->device, &cpi, NULL, &dev->cmd_pool));
    VkPipelineCacheCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    DCP_VK_TRY(dev, dev->vk.vkCreatePipelineCache(dev->device, &pci, NULL, &dev->pipeline_cache));

    free(exts);
    free(qf);
    *out = dev;
    return DCP_OK;
fail:
    free(exts);
    free(qf);
    device_destroy(dev);
    *out = NULL;
    return st;
}

/* Index of the device group holding p (and p's index in it), or -1. */
static int group_of(const VkPhysicalDeviceGroupProperties *groups, uint32_t n, VkPhysicalDevice p, uint32_t *member)
{
    for (uint32_t g = 0; g < n; g++)
        for (uint32_t k = 0; k < groups[g].physicalDeviceCount; k++)
            if (groups[g].physicalDevices[k] == p) {
                if (member) *member = k;
                return (int)g;
            }
    return -1;
}

static int env_flag(const char *name, int def)
{
    const char *v = getenv(name);
    if (!v || !*v) return def;
    return strcmp(v, "0") != 0 && strcmp(v, "off") != 0 && strcmp(v, "false") != 0;
}

/* The validation level (0 off, 1 on, 2 GPU-assisted) from config and $DCP_VK_VALIDATION. */
static dcp_status validation_level(int requested, int *level)
{
    const char *v = getenv("DCP_VK_VALIDATION");
    int gpuav = v && strcmp(v, "gpuav") == 0;
    if (requested < -1 || requested > 2)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "context validation %d (allowed: -1, 0, 1, 2)", requested);
    if (requested == 1 || requested == -1) {
        if (gpuav) *level = 2;
        else *level = requested == 1 ? 1 : env_flag("DCP_VK_VALIDATION", 0);
    } else {
        *level = requested;
    }
    return DCP_OK;
}

dcp_status dcp_context_create(const dcp_context_config *config, dcp_context **out)
{
    dcp_status st = DCP_OK;
    dcp_context_config defaults = DCP_CONTEXT_CONFIG_DEFAULT;
    VkPhysicalDevice *phys = NULL;
    VkLayerProperties *layers = NULL;
    VkPhysicalDeviceGroupProperties *groups = NULL;
    if (!config) config = &defaults;
    *out = NULL;
    dcp_context *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory creating a context");
    DCP_TRY(dcp_vk_loader_open(&ctx->vk, &ctx->loader));

    DCP_TRY(validation_level(config->validation, &ctx->validation));
    /* GPU-assisted validation checks buffer bounds only where robust access does not already
     * define out-of-bounds accesses: off by default there. */
    int robust = config->robust_access >= 0 ? config->robust_access
                                            : env_flag("DCP_VK_ROBUST", ctx->validation == 1);

    const char *layer_names[1];
    const char *ext_names[2];
    uint32_t nlayers = 0, nexts = 0;
    if (ctx->validation) {
        uint32_t n = 0;
        ctx->vk.vkEnumerateInstanceLayerProperties(&n, NULL);
        layers = calloc(n ? n : 1, sizeof *layers);
        if (!layers) { st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory"); goto fail; }
        ctx->vk.vkEnumerateInstanceLayerProperties(&n, layers);
        int found = 0;
        for (uint32_t i = 0; i < n; i++)
            if (strcmp(layers[i].layerName, "VK_LAYER_KHRONOS_validation") == 0) found = 1;
        if (!found) {
            st = dcp_fail(DCP_ERR_UNSUPPORTED,
                          "validation requested (DCP_VK_VALIDATION) but VK_LAYER_KHRONOS_validation "
                          "is not installed (Debian: vulkan-validationlayers)");
            goto fail;
        }
        layer_names[nlayers++] = "VK_LAYER_KHRONOS_validation";
        ext_names[nexts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        if (ctx->validation == 2) {
            uint32_t ne = 0;
            ctx->vk.vkEnumerateInstanceExtensionProperties("VK_LAYER_KHRONOS_validation", &ne, NULL);
            VkExtensionProperties *le = calloc(ne ? ne : 1, sizeof *le);
            if (!le) { st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory"); goto fail; }
            ctx->vk.vkEnumerateInstanceExtensionProperties("VK_LAYER_KHRONOS_validation", &ne, le);
            int has = has_extension(le, ne, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
            free(le);
            if (!has) {
                st = dcp_fail(DCP_ERR_UNSUPPORTED,
                              "GPU-assisted validation requested (DCP_VK_VALIDATION=gpuav) but the installed "
                              "VK_LAYER_KHRONOS_validation lacks " VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME);
                goto fail;
            }
            ext_names[nexts++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
        }
    }
    uint32_t loader_version = VK_API_VERSION_1_0;
    if (ctx->vk.vkEnumerateInstanceVersion) ctx->vk.vkEnumerateInstanceVersion(&loader_version);
    if (loader_version < VK_API_VERSION_1_2) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "the Vulkan loader supports %u.%u; dcp-vk needs 1.2",
                      VK_API_VERSION_MAJOR(loader_version), VK_API_VERSION_MINOR(loader_version));
        goto fail;
    }
    VkApplicationInfo app = {.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO, .pApplicationName = "dcp-vk",
                             .pEngineName = "dcp-vk", .apiVersion = VK_API_VERSION_1_2};
    VkDebugUtilsMessengerCreateInfoEXT dmi = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = on_validation,
        .pUserData = ctx};
    /* GPU-assisted: the layer instruments every shader with bounds checks of its descriptor
     * accesses and reports a violation as a validation error when the submission completes. */
    static const VkValidationFeatureEnableEXT gpuav[] = {VK_VALIDATION_FEATURE_ENABLE_GPU_ASSISTED_EXT};
    VkValidationFeaturesEXT vf = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT, .pNext = &dmi,
                                  .enabledValidationFeatureCount = 1, .pEnabledValidationFeatures = gpuav};
    VkInstanceCreateInfo ici = {.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                                .pNext = ctx->validation == 2 ? (const void *)&vf
                                         : ctx->validation ? (const void *)&dmi : NULL,
                                .pApplicationInfo = &app,
                                .enabledLayerCount = nlayers, .ppEnabledLayerNames = layer_names,
                                .enabledExtensionCount = nexts, .ppEnabledExtensionNames = ext_names};
    VkResult ir = ctx->vk.vkCreateInstance(&ici, NULL, &ctx->instance);
    if (ir == VK_ERROR_INCOMPATIBLE_DRIVER) { /* the loader found no driver (ICD) for Vulkan 1.2 */
        const char *icd = getenv("VK_DRIVER_FILES");
        if (!icd || !*icd) icd = getenv("VK_ICD_FILENAMES");
        st = dcp_fail(DCP_ERR_NO_DEVICE,
                      "no Vulkan driver found: the Vulkan loader has no driver (ICD) for Vulkan 1.2%s%s%s. "
                      "Install one: on Debian `apt-get install mesa-vulkan-drivers` (lavapipe, runs on the "
                      "CPU) or your GPU vendor's Vulkan driver; `vulkaninfo --summary` (vulkan-tools) lists "
                      "what the loader sees",
                      icd && *icd ? " (the environment points it to " : "", icd && *icd ? icd : "",
                      icd && *icd ? ")" : "");
        goto fail;
    }
    DCP_VK_TRY(NULL, ir);
    dcp_vk_load_instance(&ctx->vk, ctx->instance);
    if (ctx->validation)
        DCP_VK_TRY(NULL, ctx->vk.vkCreateDebugUtilsMessengerEXT(ctx->instance, &dmi, NULL, &ctx->messenger));

    uint32_t nphys = 0;
    DCP_VK_TRY(NULL, ctx->vk.vkEnumeratePhysicalDevices(ctx->instance, &nphys, NULL));
    if (nphys == 0) {
        st = dcp_fail(DCP_ERR_NO_DEVICE, "no Vulkan device: the driver found no device. Install a driver: on "
                                         "Debian `apt-get install mesa-vulkan-drivers` (lavapipe, runs on the CPU) "
                                         "or your GPU vendor's Vulkan driver");
        goto fail;
    }
    phys = calloc(nphys, sizeof *phys);
    if (!phys) { st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory"); goto fail; }
    DCP_VK_TRY(NULL, ctx->vk.vkEnumeratePhysicalDevices(ctx->instance, &nphys, phys));
    ctx->physical_count = (int)nphys;

    int indices[256];
    int count = 0;
    const char *list = config->devices;
    if (!list || !*list) list = getenv("DCP_VK_DEVICES");
    if (list && *list) {
        DCP_TRY(dcp_parse_device_list(list, indices, 256, &count));
        for (int i = 0; i < count; i++)
            if (indices[i] >= (int)nphys) {
                st = dcp_fail(DCP_ERR_NO_DEVICE,
                              "device list \"%s\": device %d does not exist (this machine has %u "
                              "physical device%s: 0..%u)",
                              list, indices[i], nphys, nphys == 1 ? "" : "s", nphys - 1);
                goto fail;
            }
    } else {
        count = (int)(nphys < 256 ? nphys : 256);
        for (int i = 0; i < count; i++) indices[i] = i;
    }

    /* Vulkan device groups: how many physical devices share a group with each one. */
    uint32_t ngroups = 0;
    ctx->vk.vkEnumeratePhysicalDeviceGroups(ctx->instance, &ngroups, NULL);
    groups = calloc(ngroups ? ngroups : 1, sizeof *groups);
    if (!groups) { st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory"); goto fail; }
    for (uint32_t i = 0; i < ngroups; i++) groups[i].sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_GROUP_PROPERTIES;
    ctx->vk.vkEnumeratePhysicalDeviceGroups(ctx->instance, &ngroups, groups);

    /* Device-group VkDevices: on request, or when the list names distinct members of one group. */
    int use_groups = config->device_groups;
    if (use_groups < 0) {
        const char *env = getenv("DCP_VK_DEVICE_GROUPS");
        if (env && *env) {
            if (strcmp(env, "0") != 0 && strcmp(env, "1") != 0) {
                st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "$DCP_VK_DEVICE_GROUPS is \"%s\" (allowed: 0, 1)", env);
                goto fail;
            }
            use_groups = env[0] == '1';
        } else {
            use_groups = 0;
            for (int i = 0; i < count; i++)
                for (int j = 0; j < i; j++) {
                    int gi = group_of(groups, ngroups, phys[indices[i]], NULL);
                    if (indices[i] != indices[j] && gi >= 0 && gi == group_of(groups, ngroups, phys[indices[j]], NULL) &&
                        groups[gi].physicalDeviceCount > 1)
                        use_groups = 1;
                }
        }
    }

    if (count < 1 || count > 256) { st = dcp_fail(DCP_ERR_INTERNAL, "device count %d", count); goto fail; }
    ctx->devices = calloc((size_t)count, sizeof *ctx->devices);
    if (!ctx->devices) { st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory"); goto fail; }
    for (int i = 0; i < count; i++) {
        VkPhysicalDevice p = phys[indices[i]];
        uint32_t member = 0;
        int g = group_of(groups, ngroups, p, &member);
        if (use_groups && g >= 0) {
            /* Share an earlier VkDevice over the same group whose member `member` is still free. */
            dcp_device *share = NULL;
            for (int j = 0; j < i && !share; j++) {
                dcp_device *o = ctx->devices[j];
                if (o->owner != o || group_of(groups, ngroups, o->phys, NULL) != g) continue;
                int taken = 0;
                for (int k = 0; k < i; k++)
                    if (ctx->devices[k]->owner == o && ctx->devices[k]->info.group_device_index == member) taken = 1;
                if (!taken) share = o;
            }
            DCP_TRY(device_create(ctx, p, indices[i], i, robust, groups[g].physicalDevices,
                                  groups[g].physicalDeviceCount, member, share, &ctx->devices[i]));
        } else {
            DCP_TRY(device_create(ctx, p, indices[i], i, robust, NULL, 0, 0, NULL, &ctx->devices[i]));
        }
        ctx->device_count = i + 1;
        if (g >= 0) ctx->devices[i]->info.physical_group_size = groups[g].physicalDeviceCount;
    }
    free(phys);
    free(layers);
    free(groups);
    *out = ctx;
    return DCP_OK;
fail:
    free(phys);
    free(layers);
    free(groups);
    dcp_context_destroy(ctx);
    return st;
}

void dcp_context_destroy(dcp_context *ctx)
{
    if (!ctx) return;
    /* Reverse order: a device-group VkDevice's owner comes before the devices that share it. */
    for (int i = ctx->device_count - 1; i >= 0; i--) device_destroy(ctx->devices[i]);
    free(ctx->devices);
    if (ctx->messenger) ctx->vk.vkDestroyDebugUtilsMessengerEXT(ctx->instance, ctx->messenger, NULL);
    if (ctx->instance) ctx->vk.vkDestroyInstance(ctx->instance, NULL);
    dcp_vk_loader_close(ctx->loader);
    free(ctx);
}

int dcp_context_device_count(const dcp_context *ctx) { return ctx->device_count; }
dcp_device *dcp_context_device(const dcp_context *ctx, int i)
{
    return (i >= 0 && i < ctx->device_count) ? ctx->devices[i] : NULL;
}
int dcp_context_physical_device_count(const dcp_context *ctx) { return ctx->physical_count; }
uint64_t dcp_context_validation_count(const dcp_context *ctx) { return ctx->validation_count; }
const dcp_device_info *dcp_device_get_info(const dcp_device *dev) { return &dev->info; }
dcp_context *dcp_device_context(const dcp_device *dev) { return dev->ctx; }
