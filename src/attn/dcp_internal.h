/* Recording of the DCP step's own shaders (dcp_scale, dcp_permute), shared with their tests. */
#ifndef DCP_ATTN_DCP_INTERNAL_H
#define DCP_ATTN_DCP_INTERNAL_H

#include "attn/dcp_params.h"
#include "dcpvk/vk.h"

/* dcp_scale (see src/attn/dcp_params.h): o_in [batch][N*Hl][D] f32, lse_all [N][batch][N*Hl] f32
 * -> send [N][batch][Hl][D] f32, lse_out [batch][Hl] f32. Offsets in bytes. */
dcp_status dcp_scale_record(dcp_cmd *cmd, const dcp_scale_params *p, dcp_buffer *o_in, uint64_t o_in_offset,
                            dcp_buffer *lse_all, uint64_t lse_all_offset, dcp_buffer *send, uint64_t send_offset,
                            dcp_buffer *lse_out, uint64_t lse_out_offset);
/* dcp_permute (see src/attn/dcp_params.h) from src to dst, offsets in bytes. */
dcp_status dcp_permute_record(dcp_cmd *cmd, const dcp_permute_params *p, dcp_buffer *src, uint64_t src_offset,
                              dcp_buffer *dst, uint64_t dst_offset);

#endif
