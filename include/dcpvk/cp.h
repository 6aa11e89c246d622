/* The DCP attention step of one layer (docs/design.md section 7): Q all-gather inside the DCP
 * group (or q_replicate), paged decode of all gathered heads over each rank's KV shard, then
 * exchange and exact merge with one of vLLM's two patterns:
 *   a2a    per destination rank, the O and LSE of its heads in one message; one all-to-all; the
 *          receiver merges its N partial states with the lse_merge shader;
 *   ag_rs  all-gather of the LSEs; cp_scale scales each rank's O by exp(LSE_r - LSE_global)
 *          (0 for an empty shard); reduce-scatter (sum) along heads.
 * Each rank ends with the merged O and LSE of its own heads [rank * Hl, (rank + 1) * Hl), in the
 * order the row-parallel output projection expects.
 * Not thread-safe: one thread per dcp_cp_attn. */
#ifndef DCPVK_CP_H
#define DCPVK_CP_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/comm.h"
#include "dcpvk/export.h"
#include "dcpvk/kv.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_cp_backend {
    DCP_CP_A2A = 0,
    DCP_CP_AG_RS = 1,
} dcp_cp_backend;

/* "a2a" / "ag_rs". */
DCP_API const char *dcp_cp_backend_name(dcp_cp_backend b);
DCP_API dcp_status dcp_cp_backend_parse(const char *name, dcp_cp_backend *out);

/* vLLM's constraints on a TP group of tp_size ranks with DCP groups of dcp_size ranks, for a model
 * of q_heads query heads and kv_heads KV heads: T % N == 0 and, when N > 1, N <= T / Hkv and
 * (Hq / Hkv) % N == 0. DCP_ERR_CONFIG names the broken rule. */
DCP_API dcp_status dcp_cp_check(uint32_t tp_size, uint32_t dcp_size, uint32_t q_heads, uint32_t kv_heads);
/* The DCP group of TP rank tp_rank: group index and first TP rank of its run of N ranks. */
DCP_API void dcp_cp_group_of(uint32_t tp_rank, uint32_t dcp_size, uint32_t *group, uint32_t *first);

/* Created by dcp_cp_attn_create, destroyed by dcp_cp_attn_destroy; its communicator and KV cache
 * must outlive it. It owns one decode plan per local rank and the step's buffers; the step that
 * dcp_cp_attn_run records into is its own too, created at the first run (a model records the same
 * phases into the step it owns instead and never makes this one). */
typedef struct dcp_cp_attn dcp_cp_attn;

typedef struct dcp_cp_attn_config {
    uint32_t batch;        /* sequences per step (no default; >= 1) */
    uint32_t heads_local;  /* Hl: query heads each rank ends with; N * Hl heads are decoded (no default) */
    dcp_cp_backend backend; /* default a2a; a2a with N = 1 is DCP_ERR_CONFIG, as in vLLM */
    bool q_replicate;      /* every rank gets the group's full Q, no gather (default false) */
    float scale;           /* softmax scale; 0 (default): 1/sqrt(head_dim) (GQA only: MLA needs the
                            * model's) */
    uint32_t chunk_tokens; /* split-KV chunk of the local decode; 0 (default): automatic */
    uint32_t latent;       /* 0 (default): GQA, the decode plan's GQA kind over K and V (query and
                            * output heads of the pool's head_dim). > 0: MLA, its latent kind
                            * (include/dcpvk/attn.h) over a K-only pool of one head: queries of the
                            * pool's head_dim (kv_lora + rope), outputs and exchanges of `latent`
                            * (kv_lora) values per head */
} dcp_cp_attn_config;

#define DCP_CP_ATTN_CONFIG_DEFAULT                                                                 \
    {.backend = DCP_CP_A2A, .q_replicate = false, .scale = 0.0f, .chunk_tokens = 0, .latent = 0}

/* Creates the step for comm's local ranks over cache (same group size, same local ranks on the
 * same devices; both must outlive the step), reserving comm's mailboxes for its largest block.
 * Checks N * Hl % Hkv == 0 and (N * Hl / Hkv) % N == 0 (DCP_ERR_CONFIG). Records nothing and
 * creates no commands. Destroy with dcp_cp_attn_destroy. */
DCP_API dcp_status dcp_cp_attn_create(dcp_comm *comm, dcp_kv_cache *cache, const dcp_cp_attn_config *config,
                                      dcp_cp_attn **out);
DCP_API void dcp_cp_attn_destroy(dcp_cp_attn *attn);
/* Device bytes the step for config over a cache configured as kc holds on each local rank once
 * its sequences reach max_length tokens: *bytes (the local decode plan over the rank's shard,
 * gathered Q, partial O and LSE), *largest its largest buffer, and *mailbox_block, the block its
 * communicator's mailboxes are reserved for. Allocates nothing; DCP_ERR_CONFIG as
 * dcp_decode_plan_bytes. */
DCP_API dcp_status dcp_cp_attn_bytes(const dcp_kv_cache_config *kc, const dcp_cp_attn_config *config,
                                     uint64_t max_length, uint64_t *bytes, uint64_t *largest,
                                     uint64_t *mailbox_block);

/* Sets the step's sequences: seqs [batch] sequence slots of the cache (their current lengths and
 * block tables on every local rank). Call again after the cache changed (append, free). */
DCP_API dcp_status dcp_cp_attn_set(dcp_cp_attn *attn, const uint32_t *seqs);
/* Sets the step's rows: rows (1 .. batch) queries; row b attends over the first lengths[b] tokens
 * (global positions) of sequence seqs[b] (each rank over its share of them, by the interleaved
 * placement). A sequence may appear in several rows: the causal rows of a prefill chunk (or of the
 * k + 1 positions a speculative verification scores) are the same sequence at growing lengths.
 * lengths NULL: every row over its sequence's whole length. */
DCP_API dcp_status dcp_cp_attn_set_rows(dcp_cp_attn *attn, uint32_t rows, const uint32_t *seqs,
                                        const uint64_t *lengths);
/* Rows of the last set. */
DCP_API uint32_t dcp_cp_attn_rows(const dcp_cp_attn *attn);
/* Split-KV chunks of local rank i's decode plan chosen by the last set. */
DCP_API uint32_t dcp_cp_attn_plan_chunks(const dcp_cp_attn *attn, uint32_t local);
/* A value that changes whenever a recording of the step would differ (rows, every local rank's
 * dcp_decode_plan_key): recorded steps stay valid while it and the communicator's mailboxes do. */
DCP_API uint64_t dcp_cp_attn_key(const dcp_cp_attn *attn);

/* Per-step figures (nanoseconds; max over local ranks for device phases; host clock for total). */
typedef struct dcp_cp_attn_timing {
    double local_ns;     /* decode of the local shard (device timestamps; 0 if unavailable) */
    double merge_ns;     /* a2a: lse_merge; ag_rs: cp_scale (device timestamps) */
    double exchange_ns;  /* total - local - merge: Q gather, packing, transfers, host exchange */
    double total_ns;     /* the whole dcp_cp_attn_run */
    uint64_t bytes_sent; /* bytes local rank 0 sent to other ranks in this step (Q gather included) */
    uint64_t q_bytes_sent; /* of which the Q all-gather (0 with q_replicate) */
    uint32_t rounds;     /* rounds of the step (its exchanges + 1) */
    uint32_t host_waits; /* host waits it took: rounds when the host synchronises them, 1 when the
                            ranks wait on each other on the GPU */
} dcp_cp_attn_timing;

/* Runs one step over the rows of the last set alone, synchronously (the writes of q must have
 * completed; on return o and lse hold the result): the benchmark's and the tests' way; a model
 * records the step inside its own (src/attn/cp_internal.h). Per local rank i, on its device:
 *   q[i]   q_replicate ? [rows][N * Hl][head_dim] : [rows][Hl][head_dim] f32 (own heads)
 *   o[i]   [rows][Hl][head_dim] f32 merged O of the rank's own heads (MLA: [rows][Hl][latent],
 *          the latent O, up-projected by W_UV after the step)
 *   lse[i] [rows][Hl] f32 merged LSE (natural log; -inf for an empty sequence)
 * The step's commands are recorded once and replayed while the rows, the chunking and the buffers
 * stay the same. timing may be NULL. */
DCP_API dcp_status dcp_cp_attn_run(dcp_cp_attn *attn, const dcp_comm_buf *q, const dcp_comm_buf *o,
                                   const dcp_comm_buf *lse, dcp_cp_attn_timing *timing);

#ifdef __cplusplus
}
#endif
#endif
