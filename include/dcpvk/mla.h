/* MLA (multi-head latent attention, DeepSeek-V2/V3) decode on one device, in the absorbed form:
 * every query head q = [q_lat | q_pe] (kv_lora + rope values, f32) against the one latent cache of
 * a K-only pool (include/dcpvk/kv.h, kv_heads 1, rows [c_kv | k_pe] of kv_lora + rope values, f16
 * or f32): multi-query attention whose values are the first kv_lora entries of each row. Produces
 * the partial state of the keys it sees: the latent O [heads][kv_lora] (normalised, f32) and the
 * LSE [heads] (natural log, f32); an empty key set gives O = 0, LSE = -inf. Sharded over DCP ranks
 * by the interleaved placement, the states merge exactly with dcp_lse_merge_record (head_dim =
 * kv_lora), and W_UV up-projects the merged latent per head afterwards.
 *
 * Plan, then run, as dcp_decode_plan: the plan holds the step's chunking, block tables and
 * workspace; recording only reads it. Not thread-safe: one thread per plan. */
#ifndef DCPVK_MLA_H
#define DCPVK_MLA_H

#include <stdint.h>

#include "dcpvk/kv.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_mla_decode_plan dcp_mla_decode_plan;

typedef struct dcp_mla_decode_config {
    uint32_t batch;             /* sequences per step (no default; >= 1) */
    uint32_t heads;             /* query heads per sequence (no default; >= 1): the rank's, or its
                                 * DCP group's after the Q gather */
    uint32_t kv_lora;           /* latent width = value width: the first kv_lora entries of a row
                                 * (no default; multiple of 4, < the pool's head_dim) */
    uint32_t max_blocks;        /* block-table entries per sequence (no default; >= 1) */
    float scale;                /* softmax scale (no default, > 0): the model's, for DeepSeek
                                 * mscale^2 / sqrt(nope + rope), never 1/sqrt(kv_lora + rope) */
    uint32_t chunk_tokens;      /* tokens per split-KV chunk; 0 (default): chosen per step */
    uint32_t target_workgroups; /* parallelism the chunking aims at; 0 (default): by device type */
} dcp_mla_decode_config;

#define DCP_MLA_DECODE_CONFIG_DEFAULT {0, 0, 0, 0, 0.0f, 0, 0}

/* Creates a plan over pool (K-only, one head; it must outlive the plan). Chooses the heads per
 * workgroup (all of them when the registers allow: each cache row is then read once per step), the
 * tile and the longest chunk one workgroup may scan (the Mesa 22 loop bound). Errors:
 * DCP_ERR_INVALID_ARGUMENT for bad shapes (naming them), DCP_ERR_UNSUPPORTED when the device's
 * shared memory cannot hold one tile. Destroy with dcp_mla_decode_plan_destroy. */
dcp_status dcp_mla_decode_plan_create(dcp_kv_pool *pool, const dcp_mla_decode_config *config,
                                      dcp_mla_decode_plan **out);
void dcp_mla_decode_plan_destroy(dcp_mla_decode_plan *plan);

/* Bytes dcp_mla_decode_plan_create allocates for pool and config, plus the split-KV workspace a
 * set grows to for rows of at most max_length tokens (chunks of config->chunk_tokens, or at most
 * one chunk per 256 tokens when automatic: an upper bound then): *bytes in all, *largest the
 * biggest single buffer. DCP_ERR_CONFIG when max_length needs more chunks than the merge takes. */
dcp_status dcp_mla_decode_plan_bytes(const dcp_kv_pool_config *pool, const dcp_mla_decode_config *config,
                                     uint64_t max_length, uint64_t *bytes, uint64_t *largest);

/* Sets the step's sequences, as dcp_decode_plan_set: lengths [batch] tokens, block_tables
 * [batch][max_blocks] page ids (entries past a sequence's last page ignored). Validates them, writes
 * them into the plan's host-visible tables (no command that reads the plan may be in flight) and
 * chooses the chunking. On failure the plan keeps its previous state. */
dcp_status dcp_mla_decode_plan_set(dcp_mla_decode_plan *plan, const uint32_t *lengths,
                                   const uint32_t *block_tables);

/* The same for the first `rows` (1 .. batch) rows only: q, o and lse hold `rows` rows (lengths
 * [rows], block_tables [rows][max_blocks]); a row is one query token over its own length and
 * block table, so prefill rows are the same sequence at growing lengths. */
dcp_status dcp_mla_decode_plan_set_rows(dcp_mla_decode_plan *plan, uint32_t rows, const uint32_t *lengths,
                                        const uint32_t *block_tables);
/* Rows of the last set; a value that changes whenever a recording of the plan would differ
 * (rows, chunking, workspace reallocation). */
uint32_t dcp_mla_decode_plan_rows(const dcp_mla_decode_plan *plan);
uint64_t dcp_mla_decode_plan_key(const dcp_mla_decode_plan *plan);

/* The chunking of the last set (chunks per sequence, tokens per chunk), the heads one workgroup
 * scores (each cache row is read heads / heads_per_group times per step) and the longest chunk
 * the plan allows. */
uint32_t dcp_mla_decode_plan_chunks(const dcp_mla_decode_plan *plan);
uint32_t dcp_mla_decode_plan_chunk_tokens(const dcp_mla_decode_plan *plan);
uint32_t dcp_mla_decode_plan_heads_per_group(const dcp_mla_decode_plan *plan);
uint32_t dcp_mla_decode_plan_max_chunk(const dcp_mla_decode_plan *plan);

/* Records the decode of the rows of the last set: q [rows][heads][kv_lora + rope] f32 at byte
 * q_offset; writes o [rows][heads][kv_lora] f32 and lse [rows][heads] f32 (byte offsets). With several chunks it
 * records the chunk pass, a barrier and lse_merge. The caller orders the writes of q before and
 * the reads of o / lse after with dcp_cmd_barrier. */
dcp_status dcp_mla_decode_record(dcp_cmd *cmd, const dcp_mla_decode_plan *plan, dcp_buffer *q,
                                 uint64_t q_offset, dcp_buffer *o, uint64_t o_offset, dcp_buffer *lse,
                                 uint64_t lse_offset);

#ifdef __cplusplus
}
#endif
#endif
