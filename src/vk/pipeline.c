/* The pipeline table and lazy per-device pipeline creation into the device's pipeline cache. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vk/internal.h"

#include "dcp_spv_all.h"

static const dcp_pipeline_desc table[DCP_PIPELINE_COUNT] = {
#define DCP_PIPELINE(id, spv, push, nspec, ...)                                                    \
    [DCP_PIPE_##id] = {#id,                                                                        \
                       dcp_spv_##spv,                                                              \
                       sizeof(dcp_spv_##spv),                                                      \
                       sizeof(push),                                                               \
                       nspec,                                                                      \
                       sizeof((const uint32_t[]){__VA_ARGS__}) / sizeof(uint32_t),                 \
                       (const uint32_t[]){__VA_ARGS__}},
#include "vk/pipelines.def"
#undef DCP_PIPELINE
};

/* Modules built with KV_ONE_SEGMENT, for devices without non-uniform descriptor indexing. */
static const struct {
    const uint32_t *spv;
    size_t spv_size;
} one_segment[DCP_PIPELINE_COUNT] = {
#define DCP_PIPELINE(...)
#define DCP_PIPELINE_ONE_SEGMENT(id, spv) [DCP_PIPE_##id] = {dcp_spv_##spv, sizeof(dcp_spv_##spv)},
#include "vk/pipelines.def"
#undef DCP_PIPELINE
};

const dcp_pipeline_desc *dcp_pipeline_get_desc(dcp_pipeline_id id) { return &table[id]; }

uint32_t dcp_vk_workgroup_size(const dcp_device *dev)
{
    const dcp_device_info *info = &dev->info;
    uint32_t wg = info->subgroup_size > 64 ? info->subgroup_size : 64;
    if (wg > info->max_workgroup_invocations) wg = info->max_workgroup_invocations;
    if (wg > info->max_workgroup_size[0]) wg = info->max_workgroup_size[0];
    return wg;
}

void dcp_device_destroy_pipelines(dcp_device *dev)
{
    for (uint32_t i = 0; i < dev->pipeline_count; i++)
        dev->vk.vkDestroyPipeline(dev->device, dev->pipelines[i].pipeline, NULL);
    free(dev->pipelines);
    dev->pipelines = NULL;
    dev->pipeline_count = dev->pipeline_cap = 0;
    for (int i = 0; i < DCP_PIPELINE_COUNT; i++) {
        if (dev->pipe_layouts[i]) dev->vk.vkDestroyPipelineLayout(dev->device, dev->pipe_layouts[i], NULL);
        if (dev->set_layouts[i]) dev->vk.vkDestroyDescriptorSetLayout(dev->device, dev->set_layouts[i], NULL);
        if (dev->modules[i]) dev->vk.vkDestroyShaderModule(dev->device, dev->modules[i], NULL);
        dev->pipe_layouts[i] = VK_NULL_HANDLE;
        dev->set_layouts[i] = VK_NULL_HANDLE;
        dev->modules[i] = VK_NULL_HANDLE;
    }
}

/* Descriptors the caller passes for binding i of pipeline id (n for DCP_ARRAY(n)). */
static uint32_t table_count(dcp_pipeline_id id, uint32_t i)
{
    return table[id].bindings[i] & ~DCP_BINDING_ARRAY;
}

/* Descriptors of binding i of pipeline id on dev: an array binding holds one buffer where the
 * device uses the one-segment variant. */
static uint32_t binding_count(const dcp_device *dev, dcp_pipeline_id id, uint32_t i)
{
    if ((table[id].bindings[i] & DCP_BINDING_ARRAY) && one_segment[id].spv && !dev->info.kv_multi_segment)
        return 1;
    return table_count(id, i);
}

/* Layouts and shader module of pipeline id, created once per device. */
static dcp_status layouts(dcp_device *dev, dcp_pipeline_id id)
{
    dcp_status st = DCP_OK;
    if (dev->pipe_layouts[id]) return DCP_OK;
    const dcp_pipeline_desc *d = &table[id];
    VkDescriptorSetLayoutBinding b[DCP_MAX_BINDINGS];
    for (uint32_t i = 0; i < d->binding_count; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = binding_count(dev, id, i),
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dl = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = d->binding_count, .pBindings = b};
    DCP_VK_TRY(dev, dev->vk.vkCreateDescriptorSetLayout(dev->device, &dl, NULL, &dev->set_layouts[id]));
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = d->push_size};
    VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1, .pSetLayouts = &dev->set_layouts[id],
                                     .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    DCP_VK_TRY(dev, dev->vk.vkCreatePipelineLayout(dev->device, &pl, NULL, &dev->pipe_layouts[id]));
    VkShaderModuleCreateInfo sm = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = d->spv_size, .pCode = d->spv};
    if (!dev->info.kv_multi_segment && one_segment[id].spv) {
        sm.codeSize = one_segment[id].spv_size;
        sm.pCode = one_segment[id].spv;
    }
    DCP_VK_TRY(dev, dev->vk.vkCreateShaderModule(dev->device, &sm, NULL, &dev->modules[id]));
    return DCP_OK;
fail:
    return dcp_fail_context(st, "pipeline %s", d->name);
}

static dcp_status get_pipeline(dcp_device *dev, dcp_pipeline_id id, const uint32_t *spec, VkPipeline *out)
{
    dcp_status st = DCP_OK;
    const dcp_pipeline_desc *d = &table[id];
    for (uint32_t i = 0; i < dev->pipeline_count; i++) {
        dcp_pipeline_entry *e = &dev->pipelines[i];
        if (e->id == id && memcmp(e->spec, spec, d->spec_count * sizeof(uint32_t)) == 0) {
            *out = e->pipeline;
            return DCP_OK;
        }
    }
    DCP_TRY(layouts(dev, id));
    if (spec[0] == 0 || spec[0] > dev->info.max_workgroup_invocations ||
        spec[0] > dev->info.max_workgroup_size[0])
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "device %d (%s): pipeline %s: workgroup size %u exceeds the device limit %u",
                        dev->info.logical_index, dev->info.name, d->name, spec[0],
                        dev->info.max_workgroup_size[0]);
    VkSpecializationMapEntry map[DCP_MAX_SPEC];
    for (uint32_t i = 0; i < d->spec_count; i++)
        map[i] = (VkSpecializationMapEntry){.constantID = i, .offset = i * 4, .size = 4};
    VkSpecializationInfo si = {.mapEntryCount = d->spec_count, .pMapEntries = map,
                               .dataSize = d->spec_count * 4, .pData = spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = dev->modules[id], .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = dev->pipe_layouts[id]};
    if (dev->pipeline_count == dev->pipeline_cap) {
        uint32_t cap = dev->pipeline_cap ? dev->pipeline_cap * 2 : 16;
        dcp_pipeline_entry *p = realloc(dev->pipelines, cap * sizeof *p);
        if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        dev->pipelines = p;
        dev->pipeline_cap = cap;
    }
    dcp_pipeline_entry *e = &dev->pipelines[dev->pipeline_count];
    memset(e, 0, sizeof *e);
    e->id = id;
    e->spec_count = d->spec_count;
    memcpy(e->spec, spec, d->spec_count * sizeof(uint32_t));
    DCP_VK_TRY(dev, dev->vk.vkCreateComputePipelines(dev->device, dev->pipeline_cache, 1, &ci, NULL,
                                                     &e->pipeline));
    dev->pipeline_count++;
    *out = e->pipeline;
    return DCP_OK;
fail:
    return dcp_fail_context(st, "creating pipeline %s", d->name);
}

dcp_status dcp_device_prepare_pipeline(dcp_device *dev, dcp_pipeline_id id, const uint32_t *spec)
{
    VkPipeline p;
    return get_pipeline(dev, id, spec, &p);
}

dcp_status dcp_device_alloc_set(dcp_device *dev, VkDescriptorSetLayout layout, VkDescriptorSet *set,
                                uint32_t *pool_index)
{
    dcp_status st = DCP_OK;
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorSetCount = 1, .pSetLayouts = &layout};
    if (dev->desc_pool_count) {
        ai.descriptorPool = dev->desc_pools[dev->desc_pool_count - 1];
        VkResult r = dev->vk.vkAllocateDescriptorSets(dev->device, &ai, set);
        if (r == VK_SUCCESS) {
            *pool_index = dev->desc_pool_count - 1;
            return DCP_OK;
        }
        if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL)
            return dcp_vk_check(r, dev, "vkAllocateDescriptorSets");
    }
    /* The last pool is full: add one. */
    VkDescriptorPool *pools = realloc(dev->desc_pools, (dev->desc_pool_count + 1) * sizeof *pools);
    if (!pools) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dev->desc_pools = pools;
    VkDescriptorPoolSize size = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 16384};
    VkDescriptorPoolCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                      .flags = VK_DESCRIPTOR_POOL_CREATE_FREE_DESCRIPTOR_SET_BIT,
                                      .maxSets = 512, .poolSizeCount = 1, .pPoolSizes = &size};
    DCP_VK_TRY(dev, dev->vk.vkCreateDescriptorPool(dev->device, &pci, NULL, &pools[dev->desc_pool_count]));
    dev->desc_pool_count++;
    ai.descriptorPool = pools[dev->desc_pool_count - 1];
    DCP_VK_TRY(dev, dev->vk.vkAllocateDescriptorSets(dev->device, &ai, set));
    *pool_index = dev->desc_pool_count - 1;
    return DCP_OK;
fail:
    return st;
}

/* $DCP_VK_DISPATCH_LOG (a file path): the name of every pipeline is appended to it, one line, the
 * first time a device records a dispatch of it. scripts/setup.sh test checks with it that the
 * GPU-assisted validation job dispatches every pipeline of the table. Best effort: a file that
 * cannot be opened (or is a symbolic link) is skipped, which that check then reports. */
static void log_dispatch(dcp_device *dev, dcp_pipeline_id id)
{
    if (dev->dispatched[id]) return;
    dev->dispatched[id] = true;
    const char *path = getenv("DCP_VK_DISPATCH_LOG");
    if (!path || !*path) return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[96];
    int n = snprintf(line, sizeof line, "%s\n", table[id].name);
    if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) != n) { /* skipped, as above */ }
    close(fd);
}

dcp_status dcp_cmd_dispatch(dcp_cmd *cmd, dcp_pipeline_id id, const uint32_t *spec,
                            const dcp_binding *bindings, const void *push, uint32_t gx, uint32_t gy,
                            uint32_t gz)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = cmd->dev;
    const dcp_pipeline_desc *d = &table[id];
    if (!cmd->recording)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "dispatch %s: command is not recording (reset it)", d->name);
    if (gx == 0 || gy == 0 || gz == 0) return DCP_OK;
    VkPipeline pipe;
    DCP_TRY(get_pipeline(dev, id, spec, &pipe));

    uint32_t total = 0;
    for (uint32_t i = 0; i < d->binding_count; i++) total += table_count(id, i);
    VkDescriptorBufferInfo infos[DCP_KV_MAX_SEGMENTS + DCP_MAX_BINDINGS];
    VkWriteDescriptorSet writes[DCP_MAX_BINDINGS];
    if (total > sizeof infos / sizeof infos[0])
        return dcp_fail(DCP_ERR_INTERNAL, "pipeline %s: too many descriptors", d->name);
    for (uint32_t i = 0; i < total; i++) {
        const dcp_binding *b = &bindings[i];
        if (!b->buffer || b->buffer->dev != dev)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "dispatch %s: descriptor %u is %s", d->name, i,
                            b->buffer ? "a buffer of another device" : "NULL");
        /* Whole buffer from the offset, at most the device's storage-buffer range (large shared
         * mailboxes are bound from an offset). */
        uint64_t range = b->range ? b->range : b->buffer->size - b->offset;
        if (!b->range && range > dev->info.max_storage_buffer_range) range = dev->info.max_storage_buffer_range;
        if (b->offset >= b->buffer->size || range > b->buffer->size - b->offset)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "dispatch %s: descriptor %u range [%llu, +%llu) outside its %llu-byte buffer",
                            d->name, i, (unsigned long long)b->offset, (unsigned long long)range,
                            (unsigned long long)b->buffer->size);
        /* Every binding offset a multiple of the device's minStorageBufferOffsetAlignment (or of
         * the stricter $DCP_VK_MIN_STORAGE_ALIGN): GPUs ask up to 256 bytes. */
        if (b->offset % dev->info.min_storage_offset_alignment)
            return dcp_fail(DCP_ERR_INTERNAL,
                            "dispatch %s: descriptor %u binds offset %llu, not a multiple of the storage-buffer "
                            "offset alignment %llu of device %d%s", d->name, i, (unsigned long long)b->offset,
                            (unsigned long long)dev->info.min_storage_offset_alignment, dev->info.logical_index,
                            getenv("DCP_VK_MIN_STORAGE_ALIGN") ? " ($DCP_VK_MIN_STORAGE_ALIGN)" : "");
        infos[i] = (VkDescriptorBufferInfo){b->buffer->buffer, b->offset, range};
    }
    /* A set of this layout kept from an earlier recording, else a new one. */
    dcp_cmd_set *cs = NULL;
    for (uint32_t i = cmd->set_count; i < cmd->set_total && !cs; i++)
        if (cmd->sets[i].id == id) {
            dcp_cmd_set t = cmd->sets[i];
            cmd->sets[i] = cmd->sets[cmd->set_count];
            cmd->sets[cmd->set_count] = t;
            cs = &cmd->sets[cmd->set_count];
        }
    if (!cs) {
        if (cmd->set_total == cmd->set_cap) {
            uint32_t cap = cmd->set_cap ? cmd->set_cap * 2 : 16;
            dcp_cmd_set *sets = realloc(cmd->sets, cap * sizeof *sets);
            if (!sets) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            cmd->sets = sets;
            cmd->set_cap = cap;
        }
        dcp_cmd_set fresh = {VK_NULL_HANDLE, 0, id};
        DCP_TRY(dcp_device_alloc_set(dev, dev->set_layouts[id], &fresh.set, &fresh.pool));
        cmd->sets[cmd->set_total++] = cmd->sets[cmd->set_count];
        cmd->sets[cmd->set_count] = fresh;
        cs = &cmd->sets[cmd->set_count];
    }
    cmd->set_count++;
    uint32_t k = 0; /* the caller's bindings always hold the table's count per binding */
    for (uint32_t i = 0; i < d->binding_count; i++) {
        writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                           .dstSet = cs->set, .dstBinding = i,
                                           .descriptorCount = binding_count(dev, id, i),
                                           .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                           .pBufferInfo = &infos[k]};
        k += table_count(id, i);
    }
    dev->vk.vkUpdateDescriptorSets(dev->device, d->binding_count, writes, 0, NULL);
    dev->vk.vkCmdBindPipeline(cmd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    dev->vk.vkCmdBindDescriptorSets(cmd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, dev->pipe_layouts[id], 0, 1,
                                    &cs->set, 0, NULL);
    dev->vk.vkCmdPushConstants(cmd->cb, dev->pipe_layouts[id], VK_SHADER_STAGE_COMPUTE_BIT, 0,
                               d->push_size, push);
    dev->vk.vkCmdDispatch(cmd->cb, gx, gy, gz);
    log_dispatch(dev, id);
    return DCP_OK;
fail:
    return st;
}
