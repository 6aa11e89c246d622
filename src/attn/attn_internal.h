/* Internals shared by the attention recording code. */
#ifndef DCP_ATTN_INTERNAL_H
#define DCP_ATTN_INTERNAL_H

#include "dcpvk/vk.h"

/* Workgroup size for the attention kernels: a multiple of the subgroup size, at least 64, within
 * the device's limits. */
uint32_t dcp_attn_workgroup_size(const dcp_device *dev);

#endif
