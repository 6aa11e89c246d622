/* Imported host memory (VK_EXT_external_memory_host), for the communicator's hostmem transport. */
#include <stdlib.h>

#include "vk/hostmem.h"
#include "vk/internal.h"

dcp_status dcp_vk_host_import_alignment(dcp_device *dev, uint64_t *align)
{
    *align = 0;
    if (!dev->info.has_external_memory_host || !dev->vk.vkGetMemoryHostPointerPropertiesEXT)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s) lacks VK_EXT_external_memory_host",
                        dev->info.logical_index, dev->info.name);
    VkPhysicalDeviceExternalMemoryHostPropertiesEXT hp = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_EXTERNAL_MEMORY_HOST_PROPERTIES_EXT};
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &hp};
    dev->ctx->vk.vkGetPhysicalDeviceProperties2(dev->phys, &p2);
    *align = hp.minImportedHostPointerAlignment ? hp.minImportedHostPointerAlignment : 4096;
    return DCP_OK;
}

dcp_status dcp_buffer_import_host(dcp_device *dev, void *ptr, uint64_t size, dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    uint64_t align;
    st = dcp_vk_host_import_alignment(dev, &align);
    if (st != DCP_OK) return st;
    if ((uintptr_t)ptr % align || size % align || size == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "device %d: host import of %llu bytes at %p is not aligned to %llu bytes",
                        dev->info.logical_index, (unsigned long long)size, ptr, (unsigned long long)align);
    dcp_buffer *b = calloc(1, sizeof *b);
    if (!b) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    b->dev = dev;
    b->size = size;
    b->kind = DCP_MEMORY_HOST;
    VkExternalMemoryBufferCreateInfo ext = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
                                            .handleTypes = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT};
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &ext, .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    DCP_VK_TRY(dev, dev->vk.vkCreateBuffer(dev->device, &bci, NULL, &b->buffer));
    VkMemoryRequirements req;
    dev->vk.vkGetBufferMemoryRequirements(dev->device, b->buffer, &req);
    VkMemoryHostPointerPropertiesEXT hp = {.sType = VK_STRUCTURE_TYPE_MEMORY_HOST_POINTER_PROPERTIES_EXT};
    DCP_VK_TRY(dev, dev->vk.vkGetMemoryHostPointerPropertiesEXT(
                        dev->device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT, ptr, &hp));
    uint32_t type = dcp_vk_memory_type(dev, req.memoryTypeBits & hp.memoryTypeBits,
                                       VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, 0);
    if (type == UINT32_MAX) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED,
                      "device %d (%s): no host-coherent memory type accepts imported host memory",
                      dev->info.logical_index, dev->info.name);
        goto fail;
    }
    VkImportMemoryHostPointerInfoEXT imp = {.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_HOST_POINTER_INFO_EXT,
                                            .handleType = VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT,
                                            .pHostPointer = ptr};
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &imp,
                                .allocationSize = size, .memoryTypeIndex = type};
    DCP_VK_TRY(dev, dev->vk.vkAllocateMemory(dev->device, &mai, NULL, &b->memory));
    DCP_VK_TRY(dev, dev->vk.vkBindBufferMemory(dev->device, b->buffer, b->memory, 0));
    *out = b;
    return DCP_OK;
fail:
    dcp_buffer_destroy(b);
    return dcp_fail_context(st, "importing %llu bytes of host memory", (unsigned long long)size);
}
