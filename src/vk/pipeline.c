/* Pipelines by description (vk/pipelines.h): lazy per-device creation into the device's pipeline
 * cache, and dispatch recording. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vk/internal.h"

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
    for (uint32_t i = 0; i < dev->program_count; i++) {
        dcp_pipeline_program *p = &dev->programs[i];
        if (p->layout) dev->vk.vkDestroyPipelineLayout(dev->device, p->layout, NULL);
        if (p->set_layout) dev->vk.vkDestroyDescriptorSetLayout(dev->device, p->set_layout, NULL);
        if (p->module) dev->vk.vkDestroyShaderModule(dev->device, p->module, NULL);
    }
    free(dev->programs);
    dev->programs = NULL;
    dev->program_count = dev->program_cap = 0;
}

/* Room for one more item of `size` bytes in the array *items of `count` items and capacity *cap. */
static dcp_status reserve(void **items, uint32_t count, uint32_t *cap, size_t size)
{
    if (count < *cap) return DCP_OK;
    uint32_t n = *cap ? *cap * 2 : 16;
    void *p = realloc(*items, n * size);
    if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    *items = p;
    *cap = n;
    return DCP_OK;
}

/* Descriptors the caller passes for binding i of d (array_size for the array binding). */
static uint32_t desc_count(const dcp_pipeline_desc *d, uint32_t i)
{
    return d->array_size && i == d->binding_count - 1 ? d->array_size : 1;
}

/* The device uses the description's one-buffer module (no non-uniform indexing of arrays). */
static bool uses_single(const dcp_device *dev, const dcp_pipeline_desc *d)
{
    return d->array_size && d->spv_single && !dev->info.kv_multi_segment;
}

/* Descriptors of binding i of d on dev: an array binding holds one buffer where the device uses
 * the one-buffer module. */
static uint32_t binding_count(const dcp_device *dev, const dcp_pipeline_desc *d, uint32_t i)
{
    return uses_single(dev, d) ? 1 : desc_count(d, i);
}

/* The program (layouts and shader module) of d on dev, created once per device: its index. */
static dcp_status program(dcp_device *dev, const dcp_pipeline_desc *d, uint32_t *out)
{
    dcp_status st = DCP_OK;
    for (uint32_t i = 0; i < dev->program_count; i++)
        if (dev->programs[i].desc == d) {
            *out = i;
            return DCP_OK;
        }
    if (d->spec_count == 0 || d->spec_count > DCP_MAX_SPEC || d->binding_count == 0 ||
        d->binding_count > DCP_MAX_BINDINGS || d->array_size > DCP_MAX_ARRAY || d->push_size > 128)
        return dcp_fail(DCP_ERR_INTERNAL,
                        "pipeline %s: %u specialization constants (1..%d), %u bindings (1..%d), array of %u "
                        "(at most %d), %u bytes of push constants (at most 128)", d->name, d->spec_count,
                        DCP_MAX_SPEC, d->binding_count, DCP_MAX_BINDINGS, d->array_size, DCP_MAX_ARRAY,
                        d->push_size);
    st = reserve((void **)&dev->programs, dev->program_count, &dev->program_cap, sizeof *dev->programs);
    if (st != DCP_OK) return st;
    dcp_pipeline_program *p = &dev->programs[dev->program_count];
    memset(p, 0, sizeof *p);
    p->desc = d;
    VkDescriptorSetLayoutBinding b[DCP_MAX_BINDINGS];
    for (uint32_t i = 0; i < d->binding_count; i++)
        b[i] = (VkDescriptorSetLayoutBinding){.binding = i,
                                              .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                              .descriptorCount = binding_count(dev, d, i),
                                              .stageFlags = VK_SHADER_STAGE_COMPUTE_BIT};
    VkDescriptorSetLayoutCreateInfo dl = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = d->binding_count, .pBindings = b};
    DCP_VK_TRY(dev, dev->vk.vkCreateDescriptorSetLayout(dev->device, &dl, NULL, &p->set_layout));
    VkPushConstantRange pr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = d->push_size};
    VkPipelineLayoutCreateInfo pl = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                     .setLayoutCount = 1, .pSetLayouts = &p->set_layout,
                                     .pushConstantRangeCount = 1, .pPushConstantRanges = &pr};
    DCP_VK_TRY(dev, dev->vk.vkCreatePipelineLayout(dev->device, &pl, NULL, &p->layout));
    VkShaderModuleCreateInfo sm = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                   .codeSize = d->spv_size, .pCode = d->spv};
    if (uses_single(dev, d)) {
        sm.codeSize = d->spv_single_size;
        sm.pCode = d->spv_single;
    }
    DCP_VK_TRY(dev, dev->vk.vkCreateShaderModule(dev->device, &sm, NULL, &p->module));
    *out = dev->program_count++;
    return DCP_OK;
fail:
    if (p->layout) dev->vk.vkDestroyPipelineLayout(dev->device, p->layout, NULL);
    if (p->set_layout) dev->vk.vkDestroyDescriptorSetLayout(dev->device, p->set_layout, NULL);
    return dcp_fail_context(st, "pipeline %s", d->name);
}

/* The pipeline of d specialised with spec on dev, created on first use: its entry's index. */
static dcp_status get_pipeline(dcp_device *dev, const dcp_pipeline_desc *d, const uint32_t *spec, uint32_t *out)
{
    dcp_status st = DCP_OK;
    for (uint32_t i = 0; i < dev->pipeline_count; i++) {
        const dcp_pipeline_entry *e = &dev->pipelines[i];
        if (e->desc == d && memcmp(e->spec, spec, d->spec_count * sizeof(uint32_t)) == 0) {
            *out = i;
            return DCP_OK;
        }
    }
    uint32_t prog = 0;
    DCP_TRY(program(dev, d, &prog));
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
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT, .module = dev->programs[prog].module, .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = dev->programs[prog].layout};
    st = reserve((void **)&dev->pipelines, dev->pipeline_count, &dev->pipeline_cap, sizeof *dev->pipelines);
    if (st != DCP_OK) return st;
    dcp_pipeline_entry *e = &dev->pipelines[dev->pipeline_count];
    memset(e, 0, sizeof *e);
    e->desc = d;
    e->program = prog;
    memcpy(e->spec, spec, d->spec_count * sizeof(uint32_t));
    DCP_VK_TRY(dev, dev->vk.vkCreateComputePipelines(dev->device, dev->pipeline_cache, 1, &ci, NULL,
                                                     &e->pipeline));
    *out = dev->pipeline_count++;
    return DCP_OK;
fail:
    return dcp_fail_context(st, "creating pipeline %s", d->name);
}

dcp_status dcp_device_prepare_pipeline(dcp_device *dev, const dcp_pipeline_desc *d, const uint32_t *spec)
{
    uint32_t e;
    return get_pipeline(dev, d, spec, &e);
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

/* $DCP_VK_DISPATCH_LOG (a file path): the name of every pipeline description is appended to it,
 * one line, the first time a device records a dispatch of it. scripts/setup.sh test checks with
 * it that the GPU-assisted validation job dispatches every shader of the kernel list. Best effort:
 * a file that cannot be opened (or is a symbolic link) is skipped, which that check then reports. */
static void log_dispatch(dcp_pipeline_program *prog)
{
    if (prog->dispatched) return;
    prog->dispatched = true;
    const char *path = getenv("DCP_VK_DISPATCH_LOG");
    if (!path || !*path) return;
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[96];
    int n = snprintf(line, sizeof line, "%s\n", prog->desc->name);
    if (n > 0 && (size_t)n < sizeof line && write(fd, line, (size_t)n) != n) { /* skipped, as above */ }
    close(fd);
}

dcp_status dcp_cmd_dispatch(dcp_cmd *cmd, const dcp_pipeline_desc *d, const uint32_t *spec,
                            const dcp_binding *bindings, const void *push, uint32_t gx, uint32_t gy,
                            uint32_t gz)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = cmd->dev;
    if (!cmd->recording)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "dispatch %s: command is not recording (reset it)", d->name);
    if (gx == 0 || gy == 0 || gz == 0) return DCP_OK;
    uint32_t entry = 0;
    DCP_TRY(get_pipeline(dev, d, spec, &entry));
    const VkPipeline pipe = dev->pipelines[entry].pipeline;
    dcp_pipeline_program *prog = &dev->programs[dev->pipelines[entry].program];

    uint32_t total = 0;
    for (uint32_t i = 0; i < d->binding_count; i++) total += desc_count(d, i);
    VkDescriptorBufferInfo infos[DCP_MAX_ARRAY + DCP_MAX_BINDINGS];
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
        if (cmd->sets[i].desc == d) {
            dcp_cmd_set t = cmd->sets[i];
            cmd->sets[i] = cmd->sets[cmd->set_count];
            cmd->sets[cmd->set_count] = t;
            cs = &cmd->sets[cmd->set_count];
        }
    if (!cs) {
        DCP_TRY(reserve((void **)&cmd->sets, cmd->set_total, &cmd->set_cap, sizeof *cmd->sets));
        dcp_cmd_set fresh = {VK_NULL_HANDLE, 0, d};
        DCP_TRY(dcp_device_alloc_set(dev, prog->set_layout, &fresh.set, &fresh.pool));
        cmd->sets[cmd->set_total++] = cmd->sets[cmd->set_count];
        cmd->sets[cmd->set_count] = fresh;
        cs = &cmd->sets[cmd->set_count];
    }
    cmd->set_count++;
    uint32_t k = 0; /* the caller's bindings always hold the description's count per binding */
    for (uint32_t i = 0; i < d->binding_count; i++) {
        writes[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                           .dstSet = cs->set, .dstBinding = i,
                                           .descriptorCount = binding_count(dev, d, i),
                                           .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                           .pBufferInfo = &infos[k]};
        k += desc_count(d, i);
    }
    dev->vk.vkUpdateDescriptorSets(dev->device, d->binding_count, writes, 0, NULL);
    dev->vk.vkCmdBindPipeline(cmd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    dev->vk.vkCmdBindDescriptorSets(cmd->cb, VK_PIPELINE_BIND_POINT_COMPUTE, prog->layout, 0, 1,
                                    &cs->set, 0, NULL);
    dev->vk.vkCmdPushConstants(cmd->cb, prog->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0,
                               d->push_size, push);
    dev->vk.vkCmdDispatch(cmd->cb, gx, gy, gz);
    log_dispatch(prog);
    return DCP_OK;
fail:
    return st;
}
