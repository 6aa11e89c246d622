/* Buffers: device-local and host-visible storage buffers, staged upload and download. */
#include <stdlib.h>
#include <string.h>

#include "vk/internal.h"

uint32_t dcp_vk_memory_type(const dcp_device *dev, uint32_t type_bits, VkMemoryPropertyFlags required,
                            VkMemoryPropertyFlags preferred)
{
    uint32_t fallback = UINT32_MAX;
    for (uint32_t i = 0; i < dev->mem_props.memoryTypeCount; i++) {
        if (!(type_bits & (1u << i))) continue;
        VkMemoryPropertyFlags f = dev->mem_props.memoryTypes[i].propertyFlags;
        if ((f & required) != required) continue;
        if ((f & preferred) == preferred) return i;
        if (fallback == UINT32_MAX) fallback = i;
    }
    return fallback;
}

void dcp_vk_chain_device_mask(const dcp_device *dev, VkMemoryAllocateInfo *mai, VkMemoryAllocateFlagsInfo *flags)
{
    if (!dev->device_mask) return;
    *flags = (VkMemoryAllocateFlagsInfo){.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO, .pNext = mai->pNext,
                                         .flags = VK_MEMORY_ALLOCATE_DEVICE_MASK_BIT, .deviceMask = dev->device_mask};
    mai->pNext = flags;
}

static VkExternalMemoryHandleTypeFlags vk_handles(uint32_t handles)
{
    VkExternalMemoryHandleTypeFlags f = 0;
    if (handles & DCP_HANDLE_OPAQUE_FD) f |= VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
    if (handles & DCP_HANDLE_DMA_BUF) f |= VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT;
    return f;
}

dcp_status dcp_buffer_create(dcp_device *dev, uint64_t size, dcp_memory memory, dcp_buffer **out)
{
    return dcp_vk_buffer_create(dev, size, memory, 0, out);
}

dcp_status dcp_vk_buffer_create(dcp_device *dev, uint64_t size, dcp_memory memory, uint32_t export_handles,
                                dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    if (size == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: buffer size 0", dev->info.logical_index);
    if (size > dev->info.max_storage_buffer_range)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "device %d (%s): buffer of %llu bytes exceeds maxStorageBufferRange %llu "
                        "(split it, e.g. a KV pool into segments)",
                        dev->info.logical_index, dev->info.name, (unsigned long long)size,
                        (unsigned long long)dev->info.max_storage_buffer_range);
    if (size > dev->info.max_allocation_size)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "device %d (%s): buffer of %llu bytes exceeds maxMemoryAllocationSize %llu",
                        dev->info.logical_index, dev->info.name, (unsigned long long)size,
                        (unsigned long long)dev->info.max_allocation_size);
    if (export_handles & ~dev->info.mem_export)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s): cannot export buffer memory as handle type(s) 0x%x",
                        dev->info.logical_index, dev->info.name, export_handles & ~dev->info.mem_export);
    dcp_buffer *b = calloc(1, sizeof *b);
    if (!b) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    b->dev = dev;
    b->size = size;
    b->kind = memory;
    b->export_handles = export_handles;
    VkExternalMemoryBufferCreateInfo ext = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
                                            .handleTypes = vk_handles(export_handles)};
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = export_handles ? &ext : NULL,
                              .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    DCP_VK_TRY(dev, dev->vk.vkCreateBuffer(dev->device, &bci, NULL, &b->buffer));
    VkMemoryRequirements req;
    dev->vk.vkGetBufferMemoryRequirements(dev->device, b->buffer, &req);
    uint32_t type;
    if (memory == DCP_MEMORY_HOST)
        type = dcp_vk_memory_type(dev, req.memoryTypeBits,
                                  VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                                  VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    else
        type = dcp_vk_memory_type(dev, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    if (type == UINT32_MAX)
        type = dcp_vk_memory_type(dev, req.memoryTypeBits, 0, 0);
    if (type == UINT32_MAX) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s): no memory type for a storage buffer",
                      dev->info.logical_index, dev->info.name);
        goto fail;
    }
    VkExportMemoryAllocateInfo exi = {.sType = VK_STRUCTURE_TYPE_EXPORT_MEMORY_ALLOCATE_INFO,
                                      .handleTypes = vk_handles(export_handles)};
    VkMemoryDedicatedAllocateInfo ded = {.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO, .pNext = &exi,
                                         .buffer = b->buffer};
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = export_handles ? &ded : NULL,
                                .allocationSize = req.size, .memoryTypeIndex = type};
    VkMemoryAllocateFlagsInfo flags;
    dcp_vk_chain_device_mask(dev, &mai, &flags);
    DCP_VK_TRY(dev, dev->vk.vkAllocateMemory(dev->device, &mai, NULL, &b->memory));
    b->alloc_size = req.size;
    b->type_index = type;
    DCP_VK_TRY(dev, dev->vk.vkBindBufferMemory(dev->device, b->buffer, b->memory, 0));
    if (memory == DCP_MEMORY_HOST)
        DCP_VK_TRY(dev, dev->vk.vkMapMemory(dev->device, b->memory, 0, VK_WHOLE_SIZE, 0, &b->mapped));
    b->counted = true;
    dev->allocated += size;
    *out = b;
    return DCP_OK;
fail:
    if (st == DCP_ERR_OUT_OF_MEMORY)
        dcp_fail_context(st, "allocating a %llu-byte %s buffer", (unsigned long long)size,
                         memory == DCP_MEMORY_HOST ? "host-visible" : "device-local");
    dcp_buffer_destroy(b);
    return st;
}

void dcp_buffer_destroy(dcp_buffer *b)
{
    if (!b) return;
    dcp_device *dev = b->dev;
    if (b->mapped) dev->vk.vkUnmapMemory(dev->device, b->memory);
    if (b->buffer) dev->vk.vkDestroyBuffer(dev->device, b->buffer, NULL);
    if (b->memory) dev->vk.vkFreeMemory(dev->device, b->memory, NULL);
    if (b->counted) dev->allocated -= b->size;
    free(b);
}

uint64_t dcp_buffer_size(const dcp_buffer *b) { return b ? b->size : 0; }
uint64_t dcp_device_memory_allocated(const dcp_device *dev) { return dev->allocated; }

uint64_t dcp_device_staging_bytes(const dcp_device *dev, uint64_t largest)
{
    uint64_t cap = dev->info.max_storage_buffer_range;
    if (cap > (64ull << 20)) cap = 64ull << 20;
    uint64_t want = largest < (1u << 20) ? (1u << 20) : largest;
    return want > cap ? cap : want;
}
dcp_device *dcp_buffer_device(const dcp_buffer *b) { return b->dev; }
void *dcp_buffer_map(dcp_buffer *b) { return b->mapped; }

static dcp_status check_range(const dcp_buffer *b, uint64_t offset, uint64_t size, const char *what)
{
    if (offset > b->size || size > b->size - offset)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "device %d: %s of [%llu, %llu) is outside the %llu-byte buffer",
                        b->dev->info.logical_index, what, (unsigned long long)offset,
                        (unsigned long long)(offset + size), (unsigned long long)b->size);
    return DCP_OK;
}

/* The device's staging buffer, grown to at least size bytes (capped at the max range). */
static dcp_status staging(dcp_device *dev, uint64_t size, dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    uint64_t want = dcp_device_staging_bytes(dev, size);
    if (!dev->staging || dev->staging->size < want) {
        dcp_buffer_destroy(dev->staging);
        dev->staging = NULL;
        DCP_TRY(dcp_buffer_create(dev, want, DCP_MEMORY_HOST, &dev->staging));
    }
    if (!dev->transfer_cmd) DCP_TRY(dcp_cmd_create(dev, &dev->transfer_cmd));
    *out = dev->staging;
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_buffer_upload(dcp_buffer *b, uint64_t offset, const void *data, uint64_t size)
{
    dcp_status st = check_range(b, offset, size, "upload");
    if (st != DCP_OK || size == 0) return st;
    if (b->mapped) {
        memcpy((char *)b->mapped + offset, data, size);
        return DCP_OK;
    }
    dcp_buffer *stg;
    DCP_TRY(staging(b->dev, size, &stg));
    for (uint64_t done = 0; done < size;) {
        uint64_t n = size - done < stg->size ? size - done : stg->size;
        memcpy(stg->mapped, (const char *)data + done, n);
        DCP_TRY(dcp_cmd_reset(b->dev->transfer_cmd));
        DCP_TRY(dcp_cmd_copy(b->dev->transfer_cmd, stg, 0, b, offset + done, n));
        DCP_TRY(dcp_cmd_run(b->dev->transfer_cmd));
        done += n;
    }
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_buffer_download(dcp_buffer *b, uint64_t offset, void *data, uint64_t size)
{
    dcp_status st = check_range(b, offset, size, "download");
    if (st != DCP_OK || size == 0) return st;
    if (b->mapped) {
        memcpy(data, (const char *)b->mapped + offset, size);
        return DCP_OK;
    }
    dcp_buffer *stg;
    DCP_TRY(staging(b->dev, size, &stg));
    for (uint64_t done = 0; done < size;) {
        uint64_t n = size - done < stg->size ? size - done : stg->size;
        DCP_TRY(dcp_cmd_reset(b->dev->transfer_cmd));
        DCP_TRY(dcp_cmd_copy(b->dev->transfer_cmd, b, offset + done, stg, 0, n));
        DCP_TRY(dcp_cmd_run(b->dev->transfer_cmd));
        memcpy((char *)data + done, stg->mapped, n);
        done += n;
    }
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_buffer_fill(dcp_buffer *b, uint64_t offset, uint64_t size, uint32_t value)
{
    dcp_status st = check_range(b, offset, size, "fill");
    if (st != DCP_OK || size == 0) return st;
    if (b->mapped) {
        if (offset % 4 || size % 4)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "fill offset and size must be multiples of 4");
        uint32_t *p = (uint32_t *)((char *)b->mapped + offset);
        for (uint64_t i = 0; i < size / 4; i++) p[i] = value;
        return DCP_OK;
    }
    dcp_buffer *stg;
    DCP_TRY(staging(b->dev, 1, &stg));
    DCP_TRY(dcp_cmd_reset(b->dev->transfer_cmd));
    DCP_TRY(dcp_cmd_fill(b->dev->transfer_cmd, b, offset, size, value));
    DCP_TRY(dcp_cmd_run(b->dev->transfer_cmd));
    return DCP_OK;
fail:
    return st;
}
