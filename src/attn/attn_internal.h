/* Internals shared by the attention recording code: none left (the workgroup-size rule moved to
 * src/vk/pipelines.h, dcp_vk_workgroup_size). Kept only while src/attn/cp_attn.c still includes
 * it; delete it together with that include. */
#ifndef DCP_ATTN_INTERNAL_H
#define DCP_ATTN_INTERNAL_H

#include "dcpvk/vk.h"

#endif
