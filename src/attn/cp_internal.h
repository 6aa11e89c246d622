/* Recording of the DCP step's own shaders (cp_scale, permute, part_sum), shared with their tests,
 * and the phases of a DCP step recorded into a caller's commands (one exchange round each). */
#ifndef DCP_ATTN_CP_INTERNAL_H
#define DCP_ATTN_CP_INTERNAL_H

#include "attn/cp_params.h"
#include "dcpvk/cp.h"
#include "dcpvk/vk.h"

/* cp_scale (see src/attn/cp_params.h): o_in [batch][N*Hl][D] f32, lse_all [N][batch][N*Hl] f32
 * (rank n's at n * lse_stride floats)
 * -> send [N][batch][Hl][D] f32, lse_out [batch][Hl] f32. Offsets in bytes. */
dcp_status dcp_cp_scale_record(dcp_cmd *cmd, const dcp_cp_scale_params *p, dcp_buffer *o_in, uint64_t o_in_offset,
                            dcp_buffer *lse_all, uint64_t lse_all_offset, dcp_buffer *send, uint64_t send_offset,
                            dcp_buffer *lse_out, uint64_t lse_out_offset);
/* permute (see src/attn/cp_params.h) from src to dst, offsets in bytes. */
dcp_status dcp_permute_record(dcp_cmd *cmd, const dcp_permute_params *p, dcp_buffer *src, uint64_t src_offset,
                              dcp_buffer *dst, uint64_t dst_offset);

/* part_sum (see src/attn/cp_params.h): y = (accumulate ? y : 0) + the rank-ordered sum of parts of
 * x, f32; x_offset / y_offset in bytes are binding offsets (the params' offsets are in floats). */
dcp_status dcp_part_sum_record(dcp_cmd *cmd, const dcp_part_sum_params *p, dcp_buffer *x, uint64_t x_offset,
                               dcp_buffer *y, uint64_t y_offset);

/* The DCP step of dcp_cp_attn_run split at its exchanges, recorded into the caller's commands (the
 * model records a whole layer around them). Input with q_replicate semantics whatever the
 * config: q of local rank i is the group's [batch][N * Hl][D] f32. The step has
 * dcp_cp_attn_exchanges(a) exchanges (a2a 1, ag_rs 2). For phase p = 0 .. exchanges - 1: record
 * phase p on every local rank (phase 0 reads q and the plan of the last dcp_cp_attn_set), submit and
 * wait for all, then call dcp_cp_attn_exchange(a, p); phase `exchanges` then writes o [batch][Hl][D]
 * and lse [batch][Hl] f32 (merged, own heads). Later phases read the communicator's mailboxes in
 * place (no copies). Each phase ends with its sends' barrier towards the host; the last phase
 * leaves o and lse to the caller's next barrier. Not thread-safe. */
uint32_t dcp_cp_attn_exchanges(const dcp_cp_attn *a);
dcp_status dcp_cp_attn_record_phase(dcp_cp_attn *a, uint32_t phase, uint32_t local, dcp_cmd *cmd, dcp_comm_buf q,
                                 dcp_comm_buf o, dcp_comm_buf lse);
dcp_status dcp_cp_attn_exchange(dcp_cp_attn *a, uint32_t phase);
/* Split-KV chunks of local rank i's decode plan (set by the last dcp_cp_attn_set): recordings of phase
 * 0 stay valid while this and the communicator's mailboxes (dcp_comm_generation) do not change. */
uint32_t dcp_cp_attn_plan_chunks(const dcp_cp_attn *a, uint32_t local);

#endif
