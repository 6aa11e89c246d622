/* Attention on one device: the decode plan (paged flash-decoding over a KV pool, of one of two
 * kinds) and the exact log-sum-exp merge of partial states. Both produce a partial state (O
 * normalised, f32; LSE natural log, f32); an empty key set gives O = 0, LSE = -inf, and the merge
 * gives such a state weight 0.
 *
 * The two kinds of decode (dcp_decode_config.kind):
 *   DCP_DECODE_GQA     grouped-query attention over a K+V pool: every query head of
 *                      [q_heads][head_dim] against its KV head (q_heads / kv_heads query heads
 *                      share one read of K and V); o [q_heads][head_dim].
 *   DCP_DECODE_LATENT  MLA (multi-head latent attention, DeepSeek-V2/V3) in the absorbed form:
 *                      every query head q = [q_lat | q_pe] of the pool's head_dim (kv_lora + rope)
 *                      against the one latent cache of a K-only pool of one head (rows
 *                      [c_kv | k_pe]): multi-query attention whose values are the first `latent`
 *                      (kv_lora) entries of each row; o is the latent O [q_heads][latent], which
 *                      W_UV up-projects per head after the merge.
 * Sharded over DCP ranks by the interleaved placement (include/dcpvk/kv.h), the states of either
 * kind merge exactly with dcp_lse_merge_record (include/dcpvk/cp.h runs the whole DCP step).
 *
 * Rows: a plan is created for up to `batch` rows and each step sets the rows it runs; a row is one
 * query token over its own length and block table. Rows of one sequence at consecutive lengths
 * are how causal masking among a sequence's new tokens is expressed (a prefill chunk; likewise the
 * k + 1 positions a speculative verification scores); a serving step mixes rows of many sequences.
 *
 * Plan, then run: a dcp_decode_plan holds the per-step host decisions (chunking, block tables,
 * workspace); recording only reads it. Not thread-safe: one thread per plan. */
#ifndef DCPVK_ATTN_H
#define DCPVK_ATTN_H

#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/kv.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_decode_kind {
    DCP_DECODE_GQA = 0,    /* K+V pool, query heads grouped over KV heads (shaders/paged_decode.comp) */
    DCP_DECODE_LATENT = 1, /* K-only latent pool of one head, MLA absorbed (shaders/mla_decode.comp) */
} dcp_decode_kind;

/* Created by dcp_decode_plan_create, destroyed by dcp_decode_plan_destroy; its pool (and the
 * pool's device) must outlive it. */
typedef struct dcp_decode_plan dcp_decode_plan;

typedef struct dcp_decode_config {
    dcp_decode_kind kind;       /* default DCP_DECODE_GQA */
    uint32_t batch;             /* rows per step at most (no default; >= 1) */
    uint32_t q_heads;           /* query heads per row (no default; >= 1): GQA a multiple of the
                                 * pool's kv_heads; latent the rank's, or its DCP group's after the
                                 * Q gather */
    uint32_t max_blocks;        /* block-table entries per row (no default; >= 1) */
    uint32_t latent;            /* latent only: kv_lora, values per head of o, the first `latent`
                                 * entries of each cache row (no default; a multiple of 4 below the
                                 * pool's head_dim). GQA: 0 (default) */
    float scale;                /* softmax scale. GQA: 0 (default) means 1/sqrt(head_dim). Latent:
                                 * required (> 0), the model's, for DeepSeek mscale^2 / sqrt(nope +
                                 * rope), never 1/sqrt(kv_lora + rope) */
    uint32_t chunk_tokens;      /* tokens per split-KV chunk; 0 (default): chosen per step */
    uint32_t target_workgroups; /* parallelism the automatic chunking aims at; 0 (default): by
                                 * device type and kind */
} dcp_decode_config;

#define DCP_DECODE_CONFIG_DEFAULT                                                                  \
    {.kind = DCP_DECODE_GQA, .latent = 0, .scale = 0.0f, .chunk_tokens = 0, .target_workgroups = 0}

/* Creates a plan for decoding over pool. Checks the shapes against the pool (GQA: K+V of head dim
 * <= 256; latent: K-only, one head) and the device (shared memory, workgroup size, registers), and
 * chooses the work per workgroup: GQA the query heads of a KV head that share a read, lanes per
 * token; latent the heads per workgroup (all of them when the registers allow: each cache row is
 * then read once per step), the tile, and the longest chunk one workgroup may scan (the Mesa 22
 * loop bound). Errors: DCP_ERR_INVALID_ARGUMENT for bad shapes (naming them),
 * DCP_ERR_UNSUPPORTED for what the kind or the device cannot do. *out is NULL on failure. */
DCP_API dcp_status dcp_decode_plan_create(dcp_kv_pool *pool, const dcp_decode_config *config, dcp_decode_plan **out);
/* Destroys a plan (NULL is ignored). No command that reads it may be in flight. */
DCP_API void dcp_decode_plan_destroy(dcp_decode_plan *plan);
/* Device bytes a plan for config over a pool of `pool` holds once its rows reach max_length tokens
 * (its tables, and the split-KV workspace, which grows to the longest rows: chunks of
 * config->chunk_tokens, or at most one per 256 tokens when automatic, an upper bound then):
 * *bytes in all, *largest the largest buffer. Allocates nothing. DCP_ERR_CONFIG when max_length
 * needs more split-KV chunks than the merge takes (the longest row a plan can decode). */
DCP_API dcp_status dcp_decode_plan_bytes(const dcp_kv_pool_config *pool, const dcp_decode_config *config,
                                         uint64_t max_length, uint64_t *bytes, uint64_t *largest);

/* Sets the step's rows: the first `rows` (1 .. batch) rows, lengths [rows] tokens, block_tables
 * [rows][max_blocks] page ids (entries past a row's last page are ignored). Validates every used
 * entry against the pool and every length against max_blocks * page_size, then writes them into
 * the plan's host-visible tables (a memcpy, no submit: no command that reads the plan may be in
 * flight) and chooses the chunking. The step decodes rows x q_heads queries; q, o and lse of the
 * recording hold `rows` rows. On failure the plan keeps its previous state. */
DCP_API dcp_status dcp_decode_plan_set_rows(dcp_decode_plan *plan, uint32_t rows, const uint32_t *lengths,
                                            const uint32_t *block_tables);
/* dcp_decode_plan_set_rows for all `batch` rows of the config. */
DCP_API dcp_status dcp_decode_plan_set(dcp_decode_plan *plan, const uint32_t *lengths, const uint32_t *block_tables);
/* Rows of the last set (the config's batch before the first). */
DCP_API uint32_t dcp_decode_plan_rows(const dcp_decode_plan *plan);
/* A value that changes whenever a recording of the plan would differ (rows, chunking, workspace
 * reallocation): commands recorded once and replayed stay valid while it does not change. */
DCP_API uint64_t dcp_decode_plan_key(const dcp_decode_plan *plan);

/* Split-KV chunks per row chosen by the last set, and their size in tokens. */
DCP_API uint32_t dcp_decode_plan_chunks(const dcp_decode_plan *plan);
DCP_API uint32_t dcp_decode_plan_chunk_tokens(const dcp_decode_plan *plan);
/* Query heads one workgroup serves (each cache row is read q_heads / heads_per_group times per
 * step), and the longest chunk the plan allows (tokens). */
DCP_API uint32_t dcp_decode_plan_heads_per_group(const dcp_decode_plan *plan);
DCP_API uint32_t dcp_decode_plan_max_chunk(const dcp_decode_plan *plan);

/* Records the decode of the rows of the last set into cmd (on the plan's device):
 *   q   [rows][q_heads][head_dim] f32 at byte q_offset (head_dim: the pool's; latent kv_lora + rope)
 *   o   [rows][q_heads][od] f32 at byte o_offset (od: GQA head_dim, latent `latent`)
 *   lse [rows][q_heads] f32 at byte lse_offset (natural log)
 * When the plan has several chunks it records the chunk pass, a barrier and the merge. The caller
 * orders the writes of q before and the reads of o / lse after with dcp_cmd_barrier. */
DCP_API dcp_status dcp_decode_record(dcp_cmd *cmd, const dcp_decode_plan *plan, dcp_buffer *q, uint64_t q_offset,
                                     dcp_buffer *o, uint64_t o_offset, dcp_buffer *lse, uint64_t lse_offset);

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

DCP_API dcp_status dcp_lse_merge_record(dcp_cmd *cmd, const dcp_merge_args *args);

#ifdef __cplusplus
}
#endif
#endif
