/* Command buffers: recording state, barriers, copies, timestamps, submission and waiting. This is
 * the one module that submits to a queue and waits. */
#include <stdlib.h>

#include "vk/external.h"
#include "vk/internal.h"

enum { DCP_MAX_TIMESTAMPS = 64 };

dcp_status dcp_cmd_create(dcp_device *dev, dcp_cmd **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    dcp_cmd *c = calloc(1, sizeof *c);
    if (!c) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    c->dev = dev;
    VkCommandBufferAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                      .commandPool = dev->cmd_pool,
                                      .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY, .commandBufferCount = 1};
    DCP_VK_TRY(dev, dev->vk.vkAllocateCommandBuffers(dev->device, &ai, &c->cb));
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    DCP_VK_TRY(dev, dev->vk.vkCreateFence(dev->device, &fi, NULL, &c->fence));
    if (dev->timestamp_valid_bits) {
        VkQueryPoolCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                                    .queryType = VK_QUERY_TYPE_TIMESTAMP, .queryCount = DCP_MAX_TIMESTAMPS};
        DCP_VK_TRY(dev, dev->vk.vkCreateQueryPool(dev->device, &qi, NULL, &c->queries));
    }
    DCP_TRY(dcp_cmd_reset(c));
    *out = c;
    return DCP_OK;
fail:
    dcp_cmd_destroy(c);
    return st;
}

static void free_sets(dcp_cmd *c)
{
    for (uint32_t i = 0; i < c->set_total; i++)
        c->dev->vk.vkFreeDescriptorSets(c->dev->device, c->dev->desc_pools[c->sets[i].pool], 1, &c->sets[i].set);
    c->set_count = c->set_total = 0;
}

void dcp_cmd_destroy(dcp_cmd *c)
{
    if (!c) return;
    dcp_device *dev = c->dev;
    if (c->pending) dev->vk.vkWaitForFences(dev->device, 1, &c->fence, VK_TRUE, UINT64_MAX);
    free_sets(c);
    free(c->sets);
    if (c->queries) dev->vk.vkDestroyQueryPool(dev->device, c->queries, NULL);
    if (c->fence) dev->vk.vkDestroyFence(dev->device, c->fence, NULL);
    if (c->cb) dev->vk.vkFreeCommandBuffers(dev->device, dev->cmd_pool, 1, &c->cb);
    free(c);
}

dcp_device *dcp_cmd_device(const dcp_cmd *c) { return c->dev; }

dcp_status dcp_cmd_reset(dcp_cmd *c)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = c->dev;
    if (c->pending) DCP_TRY(dcp_cmd_wait(c));
    c->set_count = 0; /* the sets stay allocated for the next recording */
    DCP_VK_TRY(dev, dev->vk.vkResetCommandBuffer(c->cb, 0));
    /* On a device-group VkDevice the commands run on this device's physical device only. */
    VkDeviceGroupCommandBufferBeginInfo gbi = {.sType = VK_STRUCTURE_TYPE_DEVICE_GROUP_COMMAND_BUFFER_BEGIN_INFO,
                                               .deviceMask = dev->device_mask};
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .pNext = dev->device_mask ? &gbi : NULL};
    DCP_VK_TRY(dev, dev->vk.vkBeginCommandBuffer(c->cb, &bi));
    c->recording = 1;
    c->query_count = 0;
    if (c->queries) dev->vk.vkCmdResetQueryPool(c->cb, c->queries, 0, DCP_MAX_TIMESTAMPS);
    return DCP_OK;
fail:
    c->recording = 0;
    return st;
}

/* Submits c waiting for waits[k] >= wait_values[k] and signalling signal = signal_value (timeline
 * semaphores of c's device; none when nwait is 0 and signal NULL). */
static dcp_status submit(dcp_cmd *c, uint32_t nwait, dcp_sem *const *waits, const uint64_t *wait_values,
                         dcp_sem *signal, uint64_t signal_value)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = c->dev;
    enum { MAX_WAITS = 256 };
    VkSemaphore wsem[MAX_WAITS];
    VkPipelineStageFlags wstage[MAX_WAITS];
    uint32_t windex[MAX_WAITS];
    if (c->pending)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: command submitted twice without a wait",
                        dev->info.logical_index);
    if (nwait > MAX_WAITS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: a submission waits on %u semaphores (at most %d)",
                        dev->info.logical_index, nwait, MAX_WAITS);
    for (uint32_t k = 0; k < nwait; k++) {
        if (waits[k]->dev->device != dev->device)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: waits on a semaphore of device %d",
                            dev->info.logical_index, waits[k]->dev->info.logical_index);
        wsem[k] = waits[k]->sem;
        wstage[k] = VK_PIPELINE_STAGE_ALL_COMMANDS_BIT;
        windex[k] = dev->info.group_device_index;
    }
    if (signal && signal->dev->device != dev->device)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: signals a semaphore of device %d",
                        dev->info.logical_index, signal->dev->info.logical_index);
    if (c->recording) {
        DCP_VK_TRY(dev, dev->vk.vkEndCommandBuffer(c->cb));
        c->recording = 0;
    }
    DCP_VK_TRY(dev, dev->vk.vkResetFences(dev->device, 1, &c->fence));
    uint32_t sindex = dev->info.group_device_index;
    VkTimelineSemaphoreSubmitInfo ti = {.sType = VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                        .waitSemaphoreValueCount = nwait, .pWaitSemaphoreValues = wait_values,
                                        .signalSemaphoreValueCount = signal ? 1 : 0,
                                        .pSignalSemaphoreValues = &signal_value};
    VkDeviceGroupSubmitInfo gi = {.sType = VK_STRUCTURE_TYPE_DEVICE_GROUP_SUBMIT_INFO,
                                  .pNext = (nwait || signal) ? &ti : NULL,
                                  .waitSemaphoreCount = nwait, .pWaitSemaphoreDeviceIndices = windex,
                                  .commandBufferCount = 1, .pCommandBufferDeviceMasks = &dev->device_mask,
                                  .signalSemaphoreCount = signal ? 1 : 0, .pSignalSemaphoreDeviceIndices = &sindex};
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
                       .pNext = dev->device_mask ? (const void *)&gi : (nwait || signal) ? (const void *)&ti : NULL,
                       .waitSemaphoreCount = nwait, .pWaitSemaphores = wsem, .pWaitDstStageMask = wstage,
                       .commandBufferCount = 1, .pCommandBuffers = &c->cb,
                       .signalSemaphoreCount = signal ? 1 : 0, .pSignalSemaphores = signal ? &signal->sem : NULL};
    DCP_VK_TRY(dev, dev->vk.vkQueueSubmit(dev->queue, 1, &si, c->fence));
    c->pending = 1;
    for (uint32_t k = 0; k < nwait; k++) waits[k]->submitted = true;
    if (signal) signal->submitted = true;
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_cmd_submit(dcp_cmd *c) { return submit(c, 0, NULL, NULL, NULL, 0); }

dcp_status dcp_cmd_submit_timeline(dcp_cmd *c, uint32_t nwait, dcp_sem *const *waits, const uint64_t *wait_values,
                                   dcp_sem *signal, uint64_t signal_value)
{
    return submit(c, nwait, waits, wait_values, signal, signal_value);
}

int dcp_cmd_pending(const dcp_cmd *c) { return c->pending; }

dcp_status dcp_cmd_wait(dcp_cmd *c)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = c->dev;
    if (!c->pending) return DCP_OK;
    c->pending = 0;
    DCP_VK_TRY(dev, dev->vk.vkWaitForFences(dev->device, 1, &c->fence, VK_TRUE, UINT64_MAX));
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_cmd_run(dcp_cmd *c)
{
    dcp_status st = dcp_cmd_submit(c);
    if (st != DCP_OK) return st;
    return dcp_cmd_wait(c);
}

dcp_status dcp_cmd_run_all(dcp_cmd *const *cmds, uint32_t n)
{
    dcp_status st = DCP_OK;
    for (uint32_t i = 0; i < n; i++) DCP_TRY(dcp_cmd_submit(cmds[i]));
    for (uint32_t i = 0; i < n; i++) DCP_TRY(dcp_cmd_wait(cmds[i]));
    return DCP_OK;
fail:
    for (uint32_t i = 0; i < n; i++) (void)dcp_cmd_wait(cmds[i]);
    return st;
}

void dcp_cmd_barrier(dcp_cmd *c)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT};
    VkPipelineStageFlags stages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    c->dev->vk.vkCmdPipelineBarrier(c->cb, stages, stages, 0, 1, &mb, 0, NULL, 0, NULL);
}

void dcp_cmd_barrier_host(dcp_cmd *c)
{
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
                          .srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_SHADER_WRITE_BIT,
                          .dstAccessMask = VK_ACCESS_HOST_READ_BIT};
    c->dev->vk.vkCmdPipelineBarrier(c->cb, VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                                    VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
}

static dcp_status check_copy(const dcp_cmd *c, const dcp_buffer *b, uint64_t off, uint64_t size)
{
    if (!c->recording)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: command is not recording",
                        c->dev->info.logical_index);
    if (b->dev != c->dev)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "device %d: buffer belongs to device %d",
                        c->dev->info.logical_index, b->dev->info.logical_index);
    if (off > b->size || size > b->size - off)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "device %d: range [%llu, %llu) outside the %llu-byte buffer",
                        c->dev->info.logical_index, (unsigned long long)off,
                        (unsigned long long)(off + size), (unsigned long long)b->size);
    return DCP_OK;
}

dcp_status dcp_cmd_copy(dcp_cmd *c, dcp_buffer *src, uint64_t src_offset, dcp_buffer *dst,
                        uint64_t dst_offset, uint64_t size)
{
    dcp_status st = check_copy(c, src, src_offset, size);
    if (st == DCP_OK) st = check_copy(c, dst, dst_offset, size);
    if (st != DCP_OK || size == 0) return st;
    VkBufferCopy r = {src_offset, dst_offset, size};
    c->dev->vk.vkCmdCopyBuffer(c->cb, src->buffer, dst->buffer, 1, &r);
    return DCP_OK;
}

dcp_status dcp_cmd_fill(dcp_cmd *c, dcp_buffer *dst, uint64_t offset, uint64_t size, uint32_t value)
{
    dcp_status st = check_copy(c, dst, offset, size);
    if (st != DCP_OK || size == 0) return st;
    if (offset % 4 || size % 4)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "fill offset %llu and size %llu must be multiples of 4",
                        (unsigned long long)offset, (unsigned long long)size);
    c->dev->vk.vkCmdFillBuffer(c->cb, dst->buffer, offset, size, value);
    return DCP_OK;
}

dcp_status dcp_cmd_timestamp(dcp_cmd *c, uint32_t *slot)
{
    if (!c->queries)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "device %d (%s): the compute queue has no timestamps",
                        c->dev->info.logical_index, c->dev->info.name);
    if (c->query_count >= DCP_MAX_TIMESTAMPS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "more than %d timestamps in one recording",
                        DCP_MAX_TIMESTAMPS);
    *slot = c->query_count++;
    c->dev->vk.vkCmdWriteTimestamp(c->cb, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c->queries, *slot);
    return DCP_OK;
}

dcp_status dcp_cmd_elapsed_ns(dcp_cmd *c, uint32_t a, uint32_t b, double *ns)
{
    dcp_status st = DCP_OK;
    dcp_device *dev = c->dev;
    if (a >= c->query_count || b >= c->query_count)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "timestamp slot out of range");
    uint64_t t[2];
    DCP_VK_TRY(dev, dev->vk.vkGetQueryPoolResults(dev->device, c->queries, a, 1, sizeof t[0], &t[0],
                                                  sizeof t[0], VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    DCP_VK_TRY(dev, dev->vk.vkGetQueryPoolResults(dev->device, c->queries, b, 1, sizeof t[1], &t[1],
                                                  sizeof t[1], VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT));
    uint64_t mask = dev->timestamp_valid_bits >= 64 ? ~0ull : ((1ull << dev->timestamp_valid_bits) - 1);
    *ns = (double)((t[1] - t[0]) & mask) * dev->info.timestamp_period_ns;
    return DCP_OK;
fail:
    return st;
}
