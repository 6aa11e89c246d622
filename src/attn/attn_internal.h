/* Decode and merge writing their outputs grouped (shaders/common/out_groups.glsl): the heads in
 * groups, each group's rows [tokens][heads of the group] at a stride of their own, so that the
 * DCP a2a's local decode writes each destination's message in place (src/attn/cp_attn.c) instead
 * of a copy into the message layout after it. */
#ifndef DCP_ATTN_ATTN_INTERNAL_H
#define DCP_ATTN_ATTN_INTERNAL_H

#include "dcpvk/attn.h"

/* `count` groups of `group` heads (count x group = the heads of a row); group n's O at o_offset +
 * n o_stride, its LSE at lse_offset + n lse_stride (bytes; o_stride a multiple of 16, lse_stride
 * of 4, each at least one group's rows). count 0: the plain layout. */
typedef struct dcp_out_groups {
    uint32_t count, group;
    uint64_t o_stride, lse_stride;
} dcp_out_groups;

/* Checks g for rows of `tokens` x `heads` outputs of `width` floats: the bytes the O and LSE
 * bindings need and the push constants (out_group, o_group_stride in vec4s, lse_group_stride in
 * floats). g NULL or count 0: the plain layout. DCP_ERR_INVALID_ARGUMENT naming what is wrong. */
dcp_status dcp_out_groups_check(const char *what, const dcp_out_groups *g, uint64_t tokens, uint32_t heads,
                                uint32_t width, uint64_t *o_bytes, uint64_t *lse_bytes, uint32_t pc[3]);

/* dcp_decode_record with o and lse written grouped (g NULL or count 0: plain). */
dcp_status dcp_decode_record_grouped(dcp_cmd *cmd, const dcp_decode_plan *plan, dcp_buffer *q, uint64_t q_offset,
                                     dcp_buffer *o, uint64_t o_offset, dcp_buffer *lse, uint64_t lse_offset,
                                     const dcp_out_groups *g);
/* dcp_lse_merge_record with o_out and lse_out written grouped, rows = tokens x heads. */
dcp_status dcp_lse_merge_record_grouped(dcp_cmd *cmd, const dcp_merge_args *a, uint32_t heads,
                                        const dcp_out_groups *g);

#endif
