/* External memory and semaphores, and device-group peer memory: the Vulkan pieces that the
 * communicator's transports (src/comm/) and the step layer's GPU-synchronised rounds (src/step/)
 * need. Handle kinds are the DCP_HANDLE_* bits of include/dcpvk/vk.h; a device's
 * dcp_device_info says which it can export and import (read from the driver at creation).
 *
 * File descriptors: an export returns a new descriptor that the caller owns; an import always
 * consumes the descriptor (Vulkan owns it on success, it is closed on failure). */
#ifndef DCP_VK_EXTERNAL_H
#define DCP_VK_EXTERNAL_H

#include <stdint.h>

#include "dcpvk/vk.h"

/* ---- memory ------------------------------------------------------------------------------- */

/* A storage/transfer buffer like dcp_buffer_create whose memory (a dedicated allocation) is
 * exportable as the DCP_HANDLE_OPAQUE_FD / DCP_HANDLE_DMA_BUF bits of `handles`.
 * DCP_ERR_UNSUPPORTED naming the device when it cannot export them. */
dcp_status dcp_buffer_create_exportable(dcp_device *dev, uint64_t size, dcp_memory memory, uint32_t handles,
                                        dcp_buffer **out);
/* A new file descriptor of b's memory as handle kind `handle` (one bit). */
dcp_status dcp_buffer_export_fd(dcp_buffer *b, uint32_t handle, int *fd);
/* Bytes and memory type index of b's allocation: what an importer passes. */
uint64_t dcp_buffer_alloc_size(const dcp_buffer *b);
uint32_t dcp_buffer_memory_type(const dcp_buffer *b);
/* A buffer of `size` bytes on dev over imported memory of alloc_size bytes. Opaque fds: type is
 * the exporter's memory type index (same physical device). dma-buf: type is ignored; the memory
 * types come from vkGetMemoryFdPropertiesKHR, and a dma-buf the device cannot import is refused
 * with DCP_ERR_UNSUPPORTED saying why. Consumes fd. */
dcp_status dcp_buffer_import_fd(dcp_device *dev, uint32_t handle, int fd, uint64_t alloc_size, uint32_t type,
                                uint64_t size, dcp_buffer **out);

/* ---- device groups ------------------------------------------------------------------------ */

/* 1 when a and b run on the same VkDevice (a device-group VkDevice, or the same device). */
int dcp_device_shares_vkdevice(const dcp_device *a, const dcp_device *b);
/* An identity of dev's VkDevice, unique within the process. */
uint64_t dcp_device_vkdevice_id(const dcp_device *dev);
/* DCP_OK when src may copy into memory of dst through a peer view (same device-group VkDevice,
 * VK_PEER_MEMORY_FEATURE_COPY_DST_BIT for dst's memory heap); else DCP_ERR_UNSUPPORTED saying why. */
dcp_status dcp_device_peer_copy_check(const dcp_device *src, const dcp_device *dst);
/* A buffer of dev (a device of target's device-group VkDevice) bound to target's memory instance
 * (VkBindBufferMemoryDeviceGroupInfo): copies recorded on dev into it land in target's device's
 * memory. Destroy before target. */
dcp_status dcp_buffer_peer_view(dcp_device *dev, dcp_buffer *target, dcp_buffer **out);

/* ---- queue family ownership of shared memory -------------------------------------------------- */

/* Transfer writes to [offset, offset + size) of b released to VK_QUEUE_FAMILY_EXTERNAL (the
 * writer's side of memory another VkDevice reads). */
void dcp_cmd_release_external(dcp_cmd *cmd, dcp_buffer *b, uint64_t offset, uint64_t size);
/* The reader's side: acquired from VK_QUEUE_FAMILY_EXTERNAL for transfer and shader reads. */
void dcp_cmd_acquire_external(dcp_cmd *cmd, dcp_buffer *b, uint64_t offset, uint64_t size);

/* ---- timeline semaphores ---------------------------------------------------------------------- */

typedef struct dcp_sem dcp_sem;

/* A timeline semaphore of dev starting at 0, exportable as `handles` (0 or DCP_HANDLE_OPAQUE_FD).
 * DCP_ERR_UNSUPPORTED without timeline semaphores or the export. */
dcp_status dcp_sem_create(dcp_device *dev, uint32_t handles, dcp_sem **out);
/* A new opaque file descriptor of s. */
dcp_status dcp_sem_export_fd(dcp_sem *s, int *fd);
/* A timeline semaphore of dev sharing the payload of an exported one (same physical device).
 * Consumes fd. */
dcp_status dcp_sem_import_fd(dcp_device *dev, int fd, dcp_sem **out);
void dcp_sem_destroy(dcp_sem *s);
dcp_device *dcp_sem_device(const dcp_sem *s);
/* Host side: waits until s reaches value; reads its value. */
dcp_status dcp_sem_wait(dcp_sem *s, uint64_t value);
dcp_status dcp_sem_value(dcp_sem *s, uint64_t *value);

/* Submits cmd (as dcp_cmd_submit) after every waits[k] reaches wait_values[k] (semaphores of
 * cmd's device) and signals `signal` (of cmd's device, may be NULL) to signal_value when it
 * completes. dcp_cmd_wait waits for it as usual. */
dcp_status dcp_cmd_submit_timeline(dcp_cmd *cmd, uint32_t nwait, dcp_sem *const *waits, const uint64_t *wait_values,
                                   dcp_sem *signal, uint64_t signal_value);
/* 1 between a submission and its wait. */
int dcp_cmd_pending(const dcp_cmd *cmd);

#endif
