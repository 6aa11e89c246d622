/* Attention kernels on one device: paged flash-decoding over a KV pool, and the exact log-sum-exp
 * merge of partial states. Both produce a partial state (O normalised, f32; LSE natural log, f32);
 * an empty key set gives O = 0, LSE = -inf.
 *
 * Plan, then run: a dcp_decode_plan holds the per-step host decisions (chunking, block tables,
 * workspace); recording only reads it. Not thread-safe: one thread per plan. */
#ifndef DCPVK_ATTN_H
#define DCPVK_ATTN_H

#include <stdint.h>

#include "dcpvk/kv.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_decode_plan dcp_decode_plan;

typedef struct dcp_decode_config {
    uint32_t batch;             /* sequences per step (no default; >= 1) */
    uint32_t q_heads;           /* Hq, a multiple of the pool's kv_heads (no default) */
    uint32_t max_blocks;        /* block-table entries per sequence (no default; >= 1) */
    float scale;                /* softmax scale; 0 (default): 1/sqrt(head_dim) */
    uint32_t chunk_tokens;      /* tokens per split-KV chunk; 0 (default): chosen per step */
    uint32_t target_workgroups; /* parallelism the chunking aims at; 0 (default): by device type */
} dcp_decode_config;

#define DCP_DECODE_CONFIG_DEFAULT {.scale = 0.0f, .chunk_tokens = 0, .target_workgroups = 0}

/* Creates a plan for decoding over pool (which must outlive the plan). Checks the shapes against
 * the pool and the device (shared memory, workgroup size). */
dcp_status dcp_decode_plan_create(dcp_kv_pool *pool, const dcp_decode_config *config,
                                  dcp_decode_plan **out);
void dcp_decode_plan_destroy(dcp_decode_plan *plan);
/* Device bytes a plan for config over a pool of `pool` holds once its sequences reach max_length
 * tokens (its tables, and the split-KV workspace, which grows to the longest rows): *bytes in all,
 * *largest the largest buffer. Allocates nothing. DCP_ERR_CONFIG when max_length needs more
 * split-KV chunks than a plan allows (the longest sequence a plan can decode). */
dcp_status dcp_decode_plan_bytes(const dcp_kv_pool_config *pool, const dcp_decode_config *config,
                                 uint64_t max_length, uint64_t *bytes, uint64_t *largest);

/* Sets the step's sequences: lengths [batch] tokens, block_tables [batch][max_blocks] page ids
 * (entries past a sequence's last page are ignored). Validates every used entry against the pool
 * and every length against max_blocks * page_size, then writes them into the plan's host-visible
 * tables (a memcpy, no submit: no command that reads the plan may be in flight) and chooses the
 * chunking. On failure the plan keeps its previous state. */
dcp_status dcp_decode_plan_set(dcp_decode_plan *plan, const uint32_t *lengths,
                               const uint32_t *block_tables);
/* The same for the first `rows` (1 .. batch) rows only: the step decodes rows x q_heads queries,
 * q, o and lse hold `rows` rows (lengths [rows], block_tables [rows][max_blocks]). */
dcp_status dcp_decode_plan_set_rows(dcp_decode_plan *plan, uint32_t rows, const uint32_t *lengths,
                                    const uint32_t *block_tables);
/* Rows of the last set (the config's batch after dcp_decode_plan_set). */
uint32_t dcp_decode_plan_rows(const dcp_decode_plan *plan);
/* A value that changes whenever a recording of the plan would differ (rows, chunking, workspace
 * reallocation): commands recorded once and replayed stay valid while it does not change. */
uint64_t dcp_decode_plan_key(const dcp_decode_plan *plan);

/* Split-KV chunks per sequence chosen by the last dcp_decode_plan_set, and their size in tokens. */
uint32_t dcp_decode_plan_chunks(const dcp_decode_plan *plan);
uint32_t dcp_decode_plan_chunk_tokens(const dcp_decode_plan *plan);

/* Records the decode of the rows of the last set: q [rows][q_heads][head_dim] f32 at q_offset;
 * writes o [rows][q_heads][head_dim] f32 and lse [rows][q_heads] f32. Buffers must be on the plan's device. When the
 * plan has several chunks it records the chunk pass, a barrier and the merge. The caller orders
 * writes of q before and reads of o/lse after with dcp_cmd_barrier. */
dcp_status dcp_decode_record(dcp_cmd *cmd, const dcp_decode_plan *plan, dcp_buffer *q,
                             uint64_t q_offset, dcp_buffer *o, uint64_t o_offset, dcp_buffer *lse,
                             uint64_t lse_offset);

/* Records the merge of `parts` partial states per row: part p of row r is
 * o_in[p * o_part_stride + r * head_dim ...] (f32, floats) and lse_in[p * lse_part_stride + r].
 * Writes o_out [rows][head_dim] f32 and lse_out [rows] f32. NaN or +inf LSE counts as empty.
 * parts in 1..32767, head_dim a multiple of 4. Offsets are in bytes. */
typedef struct dcp_merge_args {
    uint32_t parts, rows, head_dim;
    uint32_t o_part_stride, lse_part_stride; /* floats */
    dcp_buffer *o_in;
    uint64_t o_in_offset;
    dcp_buffer *lse_in;
    uint64_t lse_in_offset;
    dcp_buffer *o_out;
    uint64_t o_out_offset;
    dcp_buffer *lse_out;
    uint64_t lse_out_offset;
} dcp_merge_args;

dcp_status dcp_lse_merge_record(dcp_cmd *cmd, const dcp_merge_args *args);

#ifdef __cplusplus
}
#endif
#endif
