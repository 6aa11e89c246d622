/* Host memory shared with devices (VK_EXT_external_memory_host): the Vulkan piece the
 * communicator's hostmem transport needs. */
#ifndef DCP_VK_HOSTMEM_H
#define DCP_VK_HOSTMEM_H

#include <stdint.h>

#include "dcpvk/vk.h"

/* minImportedHostPointerAlignment of dev (bytes); DCP_ERR_UNSUPPORTED (and *align 0) without the
 * extension. */
dcp_status dcp_vk_host_import_alignment(dcp_device *dev, uint64_t *align);
/* A storage/transfer buffer of dev over [ptr, ptr + size) of host memory; ptr and size aligned to
 * the import alignment. The host memory must outlive the buffer (dcp_buffer_destroy frees only the
 * Vulkan objects). dcp_buffer_map returns NULL for it. */
dcp_status dcp_buffer_import_host(dcp_device *dev, void *ptr, uint64_t size, dcp_buffer **out);

#endif
