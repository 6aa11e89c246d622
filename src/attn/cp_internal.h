/* Recording of the DCP step's own shaders (cp_scale, permute, part_sum), shared with their tests
 * and dcp-vk-bench comm, and the DCP attention step recorded into a caller's step (one
 * exchange round between each two of its phases). */
#ifndef DCP_ATTN_CP_INTERNAL_H
#define DCP_ATTN_CP_INTERNAL_H

#include "kernels/cp_params.h"
#include "comm/put.h"
#include "dcpvk/cp.h"
#include "dcpvk/vk.h"
#include "step/step.h"

/* cp_scale (see src/kernels/cp_params.h): o_in [batch][N*Hl][D] f32, lse_all [N][batch][N*Hl] f32
 * (rank n's at n * lse_stride floats)
 * -> send [N][batch][Hl][D] f32, lse_out [batch][Hl] f32. Offsets in bytes. */
dcp_status dcp_cp_scale_record(dcp_cmd *cmd, const dcp_cp_scale_params *p, dcp_buffer *o_in, uint64_t o_in_offset,
                            dcp_buffer *lse_all, uint64_t lse_all_offset, dcp_buffer *send, uint64_t send_offset,
                            dcp_buffer *lse_out, uint64_t lse_out_offset);
/* permute (see src/kernels/cp_params.h) from src to dst, offsets in bytes. */
dcp_status dcp_permute_record(dcp_cmd *cmd, const dcp_permute_params *p, dcp_buffer *src, uint64_t src_offset,
                              dcp_buffer *dst, uint64_t dst_offset);

/* part_sum (see src/kernels/cp_params.h): y = (accumulate ? y : 0) + the rank-ordered sum of parts of
 * x, f32; x_offset / y_offset in bytes are binding offsets (the params' offsets are in floats). */
dcp_status dcp_part_sum_record(dcp_cmd *cmd, const dcp_part_sum_params *p, dcp_buffer *x, uint64_t x_offset,
                               dcp_buffer *y, uint64_t y_offset);

/* ---- the DCP attention of one layer recorded into a caller's step ------------------------ */

/* Most DCP groups one dcp_cp_attn_record takes. */
#define DCP_CP_MAX_GROUPS 64

/* Records the DCP attention step of `groups` DCP groups held by this process into `step`, a step
 * of the step layer (src/step/step.h) that the caller created, began and ends (the model records
 * a whole layer around it; dcp_cp_attn_run a step of its own). The step is cut at its exchanges
 * into phases: [Q put (without q_replicate)], local decode and put, [ag_rs: scale and put],
 * merge; between two phases it ends the round with every group's exchange (all groups exchange in
 * the same rounds: a2a 1 round, ag_rs 2, the Q all-gather 1 more), so recording it once and
 * replaying it, and the synchronisation between rounds, are the step's. Group g's local rank i
 * is the step's rank g * L + i (L: the groups' local rank count, the same for every group; the
 * step's rank must be on that rank's device); q, o, lse are indexed by step rank:
 *   q[r]   own heads [rows][Hl][QD] f32, or with q_replicate the group's [rows][N*Hl][QD]
 *   o[r]   [rows][Hl][OD] f32, lse[r] [rows][Hl] f32: merged, own heads
 * (QD, OD and rows as in include/dcpvk/cp.h, rows of each group's last set). Returns with every
 * rank's command of the final round recording, after the merge: the caller orders o and lse
 * before their readers with dcp_cmd_barrier. Later phases read the communicator's put areas in
 * place (no copies). Errors: DCP_ERR_INVALID_ARGUMENT when the groups do not match the step. Not
 * thread-safe. */
dcp_status dcp_cp_attn_record(dcp_step *step, dcp_cp_attn *const *attns, uint32_t groups, const dcp_comm_buf *q,
                              const dcp_comm_buf *o, const dcp_comm_buf *lse);

#endif
