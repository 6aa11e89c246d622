/* External memory (opaque fd, dma-buf), device-group peer views, ownership transfers and timeline
 * semaphores (see src/vk/external.h). */
#include <stdlib.h>
#include <unistd.h>

#include "vk/external.h"
#include "vk/internal.h"

static VkExternalMemoryHandleTypeFlagBits mem_handle(uint32_t h)
{
    return h == DCP_HANDLE_DMA_BUF ? VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT
                                   : VK_EXTERNAL_MEMORY_HANDLE_TYPE_OPAQUE_FD_BIT;
}

static const char *handle_name(uint32_t h) { return h == DCP_HANDLE_DMA_BUF ? "dma-buf" : "opaque fd"; }

dcp_status dcp_buffer_create_exportable(dcp_device *dev, uint64_t size, dcp_memory memory, uint32_t handles,
                                        dcp_buffer **out)
{
    *out = NULL;
    if (handles & ~(uint32_t)(DCP_HANDLE_OPAQUE_FD | DCP_HANDLE_DMA_BUF))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "exportable buffer: handle bits 0x%x (opaque fd 1, dma-buf 2)", handles);
    return dcp_vk_buffer_create(dev, size, memory, handles, out);
}

dcp_status dcp_buffer_export_fd(dcp_buffer *b, uint32_t handle, int *fd)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = b->dev;
    *fd = -1;
    if (!(b->export_handles & handle) || !dev->vk.vkGetMemoryFdKHR)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: buffer memory was not allocated exportable as %s",
                        dev->info.logical_index, handle_name(handle));
    VkMemoryGetFdInfoKHR gi = {.sType = VK_STRUCTURE_TYPE_MEMORY_GET_FD_INFO_KHR, .memory = b->memory,
                               .handleType = mem_handle(handle)};
    DCP_VK_TRY(dev, dev->vk.vkGetMemoryFdKHR(dev->device, &gi, fd));
    return DCP_OK;
fail:
    return st;
}

uint64_t dcp_buffer_alloc_size(const dcp_buffer *b) { return b->alloc_size; }
uint32_t dcp_buffer_memory_type(const dcp_buffer *b) { return b->type_index; }

dcp_status dcp_buffer_import_fd(dcp_device *dev, uint32_t handle, int fd, uint64_t alloc_size, uint32_t type,
                                uint64_t size, dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    dcp_buffer *b = NULL;
    if (!(dev->info.mem_import & handle) || (handle != DCP_HANDLE_OPAQUE_FD && handle != DCP_HANDLE_DMA_BUF)) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s) cannot import buffer memory as %s", dev->info.logical_index,
                      dev->info.name, handle_name(handle));
        goto fail;
    }
    if (size == 0 || size > alloc_size) {
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: import of %llu bytes from an allocation of %llu",
                      dev->info.logical_index, (unsigned long long)size, (unsigned long long)alloc_size);
        goto fail;
    }
    b = calloc(1, sizeof *b);
    if (!b) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    b->dev = dev;
    b->size = size;
    b->kind = DCP_MEMORY_DEVICE;
    VkExternalMemoryBufferCreateInfo ext = {.sType = VK_STRUCTURE_TYPE_EXTERNAL_MEMORY_BUFFER_CREATE_INFO,
                                            .handleTypes = mem_handle(handle)};
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .pNext = &ext, .size = size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    DCP_VK_TRY(dev, dev->vk.vkCreateBuffer(dev->device, &bci, NULL, &b->buffer));
    VkMemoryRequirements req;
    dev->vk.vkGetBufferMemoryRequirements(dev->device, b->buffer, &req);
    uint32_t bits = req.memoryTypeBits;
    if (handle == DCP_HANDLE_DMA_BUF) {
        /* What this device makes of the dma-buf: the memory types it can import it as. */
        VkMemoryFdPropertiesKHR fp = {.sType = VK_STRUCTURE_TYPE_MEMORY_FD_PROPERTIES_KHR};
        if (!dev->vk.vkGetMemoryFdPropertiesKHR) {
            st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d lacks vkGetMemoryFdPropertiesKHR", dev->info.logical_index);
            goto fail;
        }
        VkResult r = dev->vk.vkGetMemoryFdPropertiesKHR(dev->device, VK_EXTERNAL_MEMORY_HANDLE_TYPE_DMA_BUF_BIT_EXT, fd,
                                                        &fp);
        if (r != VK_SUCCESS || !(fp.memoryTypeBits & bits)) {
            st = dcp_fail(DCP_ERR_UNSUPPORTED,
                          "device %d (%s) refuses the dma-buf: vkGetMemoryFdPropertiesKHR %s, memory types 0x%x "
                          "(a buffer accepts 0x%x)",
                          dev->info.logical_index, dev->info.name, dcp_vk_result_string(r), fp.memoryTypeBits, bits);
            goto fail;
        }
        bits &= fp.memoryTypeBits;
        type = dcp_vk_memory_type(dev, bits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
        if (type == UINT32_MAX) type = dcp_vk_memory_type(dev, bits, 0, 0);
    } else if (type >= 32 || !(bits & (1u << type))) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s): memory type %u of the exported memory does not suit a buffer "
                                           "here (types 0x%x)",
                      dev->info.logical_index, dev->info.name, type, bits);
        goto fail;
    }
    if (alloc_size < req.size) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d: imported allocation of %llu bytes, a %llu-byte buffer needs %llu",
                      dev->info.logical_index, (unsigned long long)alloc_size, (unsigned long long)size,
                      (unsigned long long)req.size);
        goto fail;
    }
    VkImportMemoryFdInfoKHR imp = {.sType = VK_STRUCTURE_TYPE_IMPORT_MEMORY_FD_INFO_KHR, .handleType = mem_handle(handle),
                                   .fd = fd};
    VkMemoryDedicatedAllocateInfo ded = {.sType = VK_STRUCTURE_TYPE_MEMORY_DEDICATED_ALLOCATE_INFO, .pNext = &imp,
                                         .buffer = b->buffer};
    VkMemoryAllocateInfo mai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .pNext = &ded,
                                .allocationSize = alloc_size, .memoryTypeIndex = type};
    VkMemoryAllocateFlagsInfo flags;
    dcp_vk_chain_device_mask(dev, &mai, &flags);
    DCP_VK_TRY(dev, dev->vk.vkAllocateMemory(dev->device, &mai, NULL, &b->memory));
    fd = -1; /* Vulkan owns it now */
    b->alloc_size = alloc_size;
    b->type_index = type;
    DCP_VK_TRY(dev, dev->vk.vkBindBufferMemory(dev->device, b->buffer, b->memory, 0));
    *out = b;
    return DCP_OK;
fail:
    if (fd >= 0) close(fd);
    dcp_buffer_destroy(b);
    return dcp_fail_context(st, "importing %s memory", handle_name(handle));
}

int dcp_device_shares_vkdevice(const dcp_device *a, const dcp_device *b) { return a->device == b->device; }
uint64_t dcp_device_vkdevice_id(const dcp_device *dev) { return (uint64_t)(uintptr_t)dev->device; }

dcp_status dcp_device_peer_copy_check(const dcp_device *src, const dcp_device *dst)
{
    if (src->device != dst->device || !src->device_mask)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "devices %d and %d are not device indices of one device-group VkDevice (set "
                        "DCP_VK_DEVICE_GROUPS=1 and list distinct members of one Vulkan device group)",
                        src->info.logical_index, dst->info.logical_index);
    if (src == dst || src->info.group_device_index == dst->info.group_device_index) return DCP_OK;
    /* Peer features of every device-local heap the buffers may use. */
    for (uint32_t h = 0; h < dst->mem_props.memoryHeapCount; h++) {
        if (!(dst->mem_props.memoryHeaps[h].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)) continue;
        VkPeerMemoryFeatureFlags f = 0;
        src->vk.vkGetDeviceGroupPeerMemoryFeatures(src->device, h, src->info.group_device_index,
                                                   dst->info.group_device_index, &f);
        if (!(f & VK_PEER_MEMORY_FEATURE_COPY_DST_BIT))
            return dcp_fail(DCP_ERR_UNSUPPORTED,
                            "device-group VkDevice: device index %u cannot copy into heap %u of device index %u "
                            "(peer memory features 0x%x lack COPY_DST)",
                            src->info.group_device_index, h, dst->info.group_device_index, (unsigned)f);
    }
    return DCP_OK;
}

dcp_status dcp_buffer_peer_view(dcp_device *dev, dcp_buffer *target, dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    dcp_device *tdev = target->dev;
    if ((st = dcp_device_peer_copy_check(dev, tdev)) != DCP_OK) return st;
    if (!target->memory)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "peer view of a peer view");
    dcp_buffer *b = calloc(1, sizeof *b);
    if (!b) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    b->dev = dev;
    b->size = target->size;
    b->kind = DCP_MEMORY_DEVICE;
    VkBufferCreateInfo bci = {.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, .size = target->size,
                              .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT |
                                       VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT,
                              .sharingMode = VK_SHARING_MODE_EXCLUSIVE};
    DCP_VK_TRY(dev, dev->vk.vkCreateBuffer(dev->device, &bci, NULL, &b->buffer));
    /* Every device index of the VkDevice sees the target device's memory instance. */
    uint32_t n = dev->info.group_device_count, idx[32];
    if (n > 32) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device group of %u devices (at most 32)", n);
        goto fail;
    }
    for (uint32_t k = 0; k < n; k++) idx[k] = tdev->info.group_device_index;
    VkBindBufferMemoryDeviceGroupInfo dg = {.sType = VK_STRUCTURE_TYPE_BIND_BUFFER_MEMORY_DEVICE_GROUP_INFO,
                                            .deviceIndexCount = n, .pDeviceIndices = idx};
    VkBindBufferMemoryInfo bi = {.sType = VK_STRUCTURE_TYPE_BIND_BUFFER_MEMORY_INFO, .pNext = &dg,
                                 .buffer = b->buffer, .memory = target->memory, .memoryOffset = 0};
    DCP_VK_TRY(dev, dev->vk.vkBindBufferMemory2(dev->device, 1, &bi));
    *out = b;
    return DCP_OK;
fail:
    dcp_buffer_destroy(b);
    return dcp_fail_context(st, "device-group peer view");
}

static void ownership(dcp_cmd *c, dcp_buffer *b, uint64_t offset, uint64_t size, int release)
{
    dcp_device *dev = c->dev;
    VkBufferMemoryBarrier bb = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
        .srcAccessMask = release ? VK_ACCESS_TRANSFER_WRITE_BIT : 0,
        .dstAccessMask = release ? 0 : VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT,
        .srcQueueFamilyIndex = release ? dev->queue_family : VK_QUEUE_FAMILY_EXTERNAL,
        .dstQueueFamilyIndex = release ? VK_QUEUE_FAMILY_EXTERNAL : dev->queue_family,
        .buffer = b->buffer, .offset = offset, .size = size};
    VkPipelineStageFlags src = release ? VK_PIPELINE_STAGE_TRANSFER_BIT : VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT;
    VkPipelineStageFlags dst = release ? VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
                                       : VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    dev->vk.vkCmdPipelineBarrier(c->cb, src, dst, 0, 0, NULL, 1, &bb, 0, NULL);
}

void dcp_cmd_release_external(dcp_cmd *cmd, dcp_buffer *b, uint64_t offset, uint64_t size)
{
    ownership(cmd, b, offset, size, 1);
}

void dcp_cmd_acquire_external(dcp_cmd *cmd, dcp_buffer *b, uint64_t offset, uint64_t size)
{
    ownership(cmd, b, offset, size, 0);
}

/* ---- timeline semaphores ---------------------------------------------------------------------- */

static dcp_status sem_new(dcp_device *dev, uint32_t handles, dcp_sem **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    if (!dev->info.timeline_semaphore)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s) has no timeline semaphores", dev->info.logical_index,
                        dev->info.name);
    if (handles & ~dev->info.sem_export & DCP_HANDLE_OPAQUE_FD)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s) cannot export timeline semaphores as opaque fds",
                        dev->info.logical_index, dev->info.name);
    dcp_sem *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->dev = dev;
    s->export_handles = handles;
    VkExportSemaphoreCreateInfo ex = {.sType = VK_STRUCTURE_TYPE_EXPORT_SEMAPHORE_CREATE_INFO,
                                      .handleTypes = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT};
    VkSemaphoreTypeCreateInfo ti = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                                    .pNext = handles ? &ex : NULL, .semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE,
                                    .initialValue = 0};
    VkSemaphoreCreateInfo ci = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, .pNext = &ti};
    DCP_VK_TRY(dev, dev->vk.vkCreateSemaphore(dev->device, &ci, NULL, &s->sem));
    *out = s;
    return DCP_OK;
fail:
    free(s);
    return st;
}

dcp_status dcp_sem_create(dcp_device *dev, uint32_t handles, dcp_sem **out)
{
    if (handles & ~(uint32_t)DCP_HANDLE_OPAQUE_FD)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "timeline semaphore: handle bits 0x%x (opaque fd only)", handles);
    return sem_new(dev, handles, out);
}

dcp_status dcp_sem_export_fd(dcp_sem *s, int *fd)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = s->dev;
    *fd = -1;
    if (!(s->export_handles & DCP_HANDLE_OPAQUE_FD) || !dev->vk.vkGetSemaphoreFdKHR)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: semaphore not created exportable", dev->info.logical_index);
    VkSemaphoreGetFdInfoKHR gi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_GET_FD_INFO_KHR, .semaphore = s->sem,
                                  .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT};
    DCP_VK_TRY(dev, dev->vk.vkGetSemaphoreFdKHR(dev->device, &gi, fd));
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_sem_import_fd(dcp_device *dev, int fd, dcp_sem **out)
{
    dcp_status st = DCP_OK;
    dcp_sem *s = NULL;
    *out = NULL;
    if (!(dev->info.sem_import & DCP_HANDLE_OPAQUE_FD) || !dev->vk.vkImportSemaphoreFdKHR) {
        st = dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s) cannot import timeline semaphores as opaque fds",
                      dev->info.logical_index, dev->info.name);
        goto fail;
    }
    if ((st = sem_new(dev, 0, &s)) != DCP_OK) goto fail;
    VkImportSemaphoreFdInfoKHR ii = {.sType = VK_STRUCTURE_TYPE_IMPORT_SEMAPHORE_FD_INFO_KHR, .semaphore = s->sem,
                                     .handleType = VK_EXTERNAL_SEMAPHORE_HANDLE_TYPE_OPAQUE_FD_BIT, .fd = fd};
    DCP_VK_TRY(dev, dev->vk.vkImportSemaphoreFdKHR(dev->device, &ii));
    *out = s;
    return DCP_OK;
fail:
    if (fd >= 0) close(fd);
    dcp_sem_destroy(s);
    return st;
}

/* A semaphore that a submission used is destroyed only once its queue is idle, although the fences
 * of every such submission have been waited (which Vulkan says is enough). Mesa's common runtime
 * (lavapipe, Mesa 22 and 25) emulates timeline semaphores on the queue's submit thread, which
 * installs the batch's signalled time point and releases the time points it waited on *after* the
 * driver has signalled the batch's fence: a semaphore destroyed as soon as the fence is waited is
 * freed under that thread, which then locks a mutex in freed memory (a segfault in
 * pthread_mutex_lock on a lavapipe thread, or heap corruption that kills the process later).
 * vkQueueWaitIdle returns only after the submit thread has retired every earlier batch
 * (docs/design.md, "Teardown and lifetimes"). Imported semaphores are waited on by their own
 * device's queue, so that queue is the one to drain. */
void dcp_sem_destroy(dcp_sem *s)
{
    if (!s) return;
    if (s->sem) {
        if (s->submitted) (void)s->dev->vk.vkQueueWaitIdle(s->dev->queue);
        s->dev->vk.vkDestroySemaphore(s->dev->device, s->sem, NULL);
    }
    free(s);
}

dcp_device *dcp_sem_device(const dcp_sem *s) { return s->dev; }

dcp_status dcp_sem_wait(dcp_sem *s, uint64_t value)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = s->dev;
    VkSemaphoreWaitInfo wi = {.sType = VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, .semaphoreCount = 1,
                              .pSemaphores = &s->sem, .pValues = &value};
    DCP_VK_TRY(dev, dev->vk.vkWaitSemaphores(dev->device, &wi, UINT64_MAX));
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_sem_value(dcp_sem *s, uint64_t *value)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = s->dev;
    DCP_VK_TRY(dev, dev->vk.vkGetSemaphoreCounterValue(dev->device, s->sem, value));
    return DCP_OK;
fail:
    return st;
}
