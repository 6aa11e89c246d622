/* Recording of the DCP step's own shaders (cp_scale, permute, part_sum), shared with their tests,
 * and the phases of a DCP step recorded into a caller's commands (one exchange round each). */
#ifndef DCP_ATTN_CP_INTERNAL_H
#define DCP_ATTN_CP_INTERNAL_H

#include "kernels/cp_params.h"
#include "comm/put.h"
#include "dcpvk/cp.h"
#include "dcpvk/vk.h"

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

/* The DCP step of dcp_cp_attn_run split at its exchanges into phases, recorded into the commands
 * of a step of the step layer (src/step/step.h; the model records a whole layer around them):
 *   for p = 0 .. dcp_cp_attn_phases(a) - 1:
 *       if p > 0: end the round with the exchange dcp_cp_attn_xchg(a, p - 1);
 *       record phase p on every local rank.
 * Phases: [Q put (without q_replicate)], local decode and put, [ag_rs: scale and put], merge.
 * Phase 0 reads q: own heads [rows][Hl][D] f32, or with q_replicate the group's [rows][N*Hl][D];
 * the last phase writes o [rows][Hl][D] and lse [rows][Hl] f32 (merged, own heads), which the
 * caller orders before its readers with a barrier. Rows and plans are those of the last set.
 * Later phases read the communicator's put areas in place (no copies). Not thread-safe. */
uint32_t dcp_cp_attn_phases(const dcp_cp_attn *a);
dcp_comm_xchg dcp_cp_attn_xchg(const dcp_cp_attn *a, uint32_t phase);
dcp_status dcp_cp_attn_record_phase(dcp_cp_attn *a, uint32_t phase, uint32_t local, dcp_cmd *cmd, dcp_comm_buf q,
                                    dcp_comm_buf o, dcp_comm_buf lse);

#endif
