/* A model on one device, or on a tensor-parallel group of devices in one process or spread over
 * MPI processes, with optional DCP groups (include/dcpvk/cp.h): the device weights (dcp_model)
 * and a run state (dcp_model_state) that holds the KV caches of up to max_seqs sequences and
 * runs steps over any mix of them (decode tokens and chunks of prompts), plus the host sampler
 * (implemented in src/engine/sampler.c). Architectures (DCP_ARCH_SUPPORTED_LIST): the llama family
 * with GQA attention and a SwiGLU FFN, llama, qwen2, qwen3 and phi3 (src/model/arch/llama.c), and
 * deepseek2 with MLA attention over a latent KV cache and a MoE FFN (src/model/arch/deepseek2.c).
 * The graph of each architecture sits behind the same API.
 *
 * Model state is config (dcp_model_config, read from GGUF by include/dcpvk/model_config.h) /
 * weights (dcp_model) / run state (dcp_model_state), each created and destroyed on its own. A
 * step runs on the step layer (src/step/step.h): on one device the whole step (every layer, the
 * output head and the argmax) is one command buffer submitted once; with TP > 1 the step is split
 * into rounds at its exchanges (each all-reduce; each exchange of the DCP attention step), one
 * submit and wait per round and rank. Steps are recorded once and replayed while their shape
 * (rows, rows with logits, attention chunking) stays the same.
 *
 * Threading: one thread at a time per run state; weights are read-only after creation. */
#ifndef DCPVK_MODEL_H
#define DCPVK_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/cp.h"
#include "dcpvk/dtype.h"
#include "dcpvk/export.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights ------------------------------------------------------------------------------- */

typedef struct dcp_model dcp_model;

/* Called while weights load: done / total bytes (see dcp_model_load_config.progress). */
typedef void (*dcp_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Where the weights go: the TP ranks this process holds and the parallel layout of the group. */
typedef struct dcp_model_load_config {
    dcp_device *const *devices; /* [count] devices[i] holds TP rank first_rank + i: distinct
                                 * dcp_devices, which must outlive the model (no default) */
    uint32_t count;             /* TP ranks this process holds (default 1) */
    uint32_t first_rank;        /* the first of them (default 0) */
    uint32_t tp;                /* TP size of the whole group; 0 (default): count (one process) */
    uint32_t dcp;               /* DCP group size: groups of dcp consecutive TP ranks share their KV
                                 * heads and shard the KV cache along the sequence (default 1: none) */
    bool q_replicate;           /* dcp > 1: every rank projects its whole group's query heads itself
                                 * (dcp times the Q weights) instead of all-gathering Q (default false) */
    dcp_progress_fn progress;   /* called while weights load with the bytes of the file read so far
                                 * and in all (dcp_model_file_bytes; deepseek2: of all tensors, the
                                 * count rising layer by layer); NULL (default): none */
    void *progress_user;        /* passed to progress (default NULL) */
    bool count_only;            /* check the model and count each rank's weight bytes without
                                 * allocating or uploading anything: such a model holds no device
                                 * memory and serves dcp_model_rank_bytes and dcp_model_state_bytes
                                 * only (default false) */
} dcp_model_load_config;

#define DCP_MODEL_LOAD_CONFIG_DEFAULT {.devices = NULL, .count = 1, .first_rank = 0, .tp = 0, .dcp = 1, \
                                       .q_replicate = false, .progress = NULL, .progress_user = NULL, \
                                       .count_only = false}

/* Uploads the weights of a GGUF model (described by cfg, from dcp_model_config_read) to the
 * devices of lc. Matrices keep their GGUF type, any of the 15 of DCP_GGML_SUPPORTED_LIST (F32,
 * F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS; the
 * quantized ones repacked into the device layout of include/dcpvk/ops.h; fused Q|K|V and gate|up
 * parts of different types each in its own); norms
 * (and deepseek2's router) become F32; a missing output.weight means it is tied to
 * token_embd.weight.
 *
 * Sharding over the TP group (size T): query heads split evenly; KV heads split when they divide
 * by T, else replicated (T must then be a multiple of them: vLLM's rule); FFN rows split unevenly
 * when T does not divide n_ff; attention output and FFN down projections split by input columns
 * (row-parallel; zero-padded to multiples of 4; a column slice that is not block aligned is
 * held in its type as the whole blocks covering it, with a column window: dcp_matrix_window);
 * embedding and norms replicated; the output head on the first rank held (every
 * process computes the logits itself, from the same all-reduced activations).
 *
 * A group spread over processes (MPI, one process per device under `mpiexec -n T`, or several
 * devices per process): every process passes the same count, and with dcp > 1 a process holds
 * whole DCP groups (first_rank and count multiples of dcp) or an equal part of one (dcp a multiple
 * of count, first_rank a multiple of count).
 *
 * Errors name the tensor: missing or wrong shape (DCP_ERR_FORMAT), unsupported type
 * (DCP_ERR_UNSUPPORTED); DCP_ERR_UNSUPPORTED for an architecture this build does not run;
 * DCP_ERR_CONFIG for sizes the heads do not allow (vLLM's rules) or a rank layout that is not one
 * of the above. g and cfg need not outlive the model (it copies what it needs). Destroy with
 * dcp_model_destroy, before the devices. */
DCP_API dcp_status dcp_model_load(const dcp_model_load_config *lc, const dcp_gguf *g, const dcp_model_config *cfg,
                                  dcp_model **out);
DCP_API void dcp_model_destroy(dcp_model *m);
/* Tensor-parallel and DCP sizes of the model (the whole group's, wherever its ranks are), and
 * whether every rank projects its DCP group's query heads itself. */
DCP_API uint32_t dcp_model_tp(const dcp_model *m);
DCP_API uint32_t dcp_model_dcp(const dcp_model *m);
DCP_API bool dcp_model_q_replicate(const dcp_model *m);
/* TP ranks held by this process: [first_rank, first_rank + local_count). */
DCP_API uint32_t dcp_model_first_rank(const dcp_model *m);
DCP_API uint32_t dcp_model_local_count(const dcp_model *m);
DCP_API const dcp_model_config *dcp_model_get_config(const dcp_model *m);
/* Bytes of device memory the weights use (all ranks held here). */
DCP_API uint64_t dcp_model_bytes(const dcp_model *m);
/* Bytes of the GGUF file (all parts of a split model) read to build the weights of the ranks
 * held here: each rank reads its own tensor-parallel slices (rows, and for row-parallel matrices
 * the blocks covering its columns) and the replicated tensors, nothing else of the mapped file.
 * Counted by a count_only load too (which reads no tensor data). */
DCP_API uint64_t dcp_model_file_bytes(const dcp_model *m);
/* Bytes of device memory the weights of local rank i use (counted by a count_only load too). */
DCP_API uint64_t dcp_model_rank_bytes(const dcp_model *m, uint32_t local);

/* Quantized matrices a rank holds as F32 instead of their file's type. The loader holds none: a
 * tensor-parallel slice that does not start and end on the type's blocks (k-quants: 256 weights;
 * at TP 8 the row-parallel attn_output / ffn_down often cut them) stays in its type as the whole
 * blocks covering its columns with a column window (dcp_matrix_window), and fused parts of
 * different types (a Q4_K_M file's Q6_K attn_v beside Q4_K attn_q / attn_k) each stay in theirs
 * (a matrix of parts, include/dcpvk/ops.h): a llama-family model holds none. deepseek2 holds
 * its attn_output, dense / shared-expert ffn_down and routed experts' ffn_down_exps slices with a
 * window too, but still expands to F32 a fused gate|up of parts of different types: those are
 * counted here. */
typedef struct dcp_model_fallback {
    uint32_t count;          /* matrices (rank by rank) held as F32 */
    char first[128];         /* the first: "blk.1.ffn_gate_exps.weight (Q4_K): fused parts of
                              * different types on TP rank 3" */
    uint64_t f32_bytes;      /* device bytes they take as F32 */
    uint64_t native_bytes;   /* what they would take in their own type */
} dcp_model_fallback;
/* What was held as F32 (count 0: nothing). */
DCP_API const dcp_model_fallback *dcp_model_fallbacks(const dcp_model *m);

/* ---- run state ----------------------------------------------------------------------------- */

typedef struct dcp_model_state_config {
    uint32_t n_ctx;         /* tokens of context per sequence at most; 0 (default): min(model's, 4096) */
    uint32_t max_seqs;      /* sequence slots 0 .. max_seqs - 1 (default 1) */
    uint32_t kv_pages;      /* KV pages of each rank's pool, per layer, shared by the sequences;
                             * 0 (default): enough for max_seqs sequences of n_ctx tokens */
    uint32_t max_rows;      /* tokens (rows) per step: the prefill chunk and the batch (default 128) */
    uint32_t block_size;    /* tokens per KV page (default 16) */
    dcp_dtype kv_dtype;     /* KV cache element type (default f16) */
    uint32_t chunk_tokens;  /* split-KV chunk of the attention (tokens); 0 (default): 512. Fixed,
                             * so that a row's result depends on its own sequence only */
    /* DCP (models with dcp > 1 only): */
    uint32_t interleave;    /* cp_kv_cache_interleave_size: tokens in a row per rank (default 1) */
    dcp_cp_backend backend; /* attention exchange, a2a or ag_rs (default a2a) */
    uint32_t max_logits;    /* rows with logits per step at most (at most max_rows); 0 (default):
                             * min(max_rows, max_seqs), one per sequence. Speculative decoding
                             * scores k + 1 rows of each sequence: up to max_rows */
    uint64_t kv_offload_bytes; /* KV offload: bytes of host memory for the whole TP group (host-
                             * visible, on the devices of the ranks, each rank holding its shards'
                             * share: with the TP group over MPI processes each process allocates
                             * its ranks' part, nl / tp of it; the same value on every process) for
                             * prefix-cache blocks evicted from the device pages, restored from
                             * there on a hit instead of recomputed (docs/design.md section 18);
                             * read when prefix caching is turned on. 0 (default): off */
    const dcp_model *draft; /* a draft model (speculative decoding) loaded or counted (count_only)
                             * on the same devices and ranks, whose run state of this config's slots
                             * and context (kv_pages 0: every slot at full context; max_logits 0)
                             * will be created beside this one: dcp_model_state_check counts its
                             * weights (when count_only) and that state at every context it tries.
                             * Read during the check only, never kept (the state's own config has
                             * NULL). NULL (default): none */
} dcp_model_state_config;

#define DCP_MODEL_STATE_CONFIG_DEFAULT {.n_ctx = 0, .max_seqs = 1, .kv_pages = 0, .max_rows = 128, \
                                        .block_size = 16, .kv_dtype = DCP_DTYPE_F16, .chunk_tokens = 0, \
                                        .interleave = 1, .backend = DCP_CP_A2A, .max_logits = 0, .kv_offload_bytes = 0, \
                                        .draft = NULL}

typedef struct dcp_model_state dcp_model_state;

/* Creates a run state over m (which must outlive it): per rank and layer a KV page pool shared
 * by the sequences (DCP: one dcp_kv_cache per layer and group, interleaved placement, and one DCP
 * attention step), attention plans, activations for max_rows rows; the communicators of the TP
 * group and of each DCP group; the step over the ranks held here; then runs a 2-token warm-up
 * (which creates every pipeline) and forgets it. DCP_ERR_CONFIG for a bad interleave / block size
 * pair. A model of part of the group (local_count < tp): collective over MPI_COMM_WORLD (MPI
 * initialised, every process calls it with the same config): the TP communicator spans the
 * world (its size must be tp: DCP_ERR_CONFIG otherwise), a DCP group spread over processes gets a
 * sub-communicator (dcp_comm_init_mpi_split), and a failure on any process fails it on every
 * process (DCP_ERR_MPI on the others), so that none waits in a collective. Steps are then
 * collective too: every process passes the same rows. Destroy with dcp_model_state_destroy. */
DCP_API dcp_status dcp_model_state_create(dcp_model *m, const dcp_model_state_config *config, dcp_model_state **out);
DCP_API void dcp_model_state_destroy(dcp_model_state *s);
DCP_API const dcp_model_state_config *dcp_model_state_get_config(const dcp_model_state *s);
/* The model the state runs (what dcp_model_state_create was given). */
DCP_API dcp_model *dcp_model_state_get_model(const dcp_model_state *s);

/* One row of a step: the next token of sequence seq (its position is the sequence's length so far,
 * plus the rows of the same sequence before it in the step). logits: whether the step returns
 * this row's logits and argmax. */
typedef struct dcp_model_row {
    int32_t token;
    uint32_t seq;
    bool logits;
} dcp_model_row;

/* Runs one step of rows [n] (1 .. max_rows; the rows of a sequence consecutive): appends every
 * row's K/V to its sequence and runs the model over all rows as one batch, each row attending
 * causally over its sequence up to itself. For the k-th row with logits set (k = 0, 1, ...):
 * logits + k * n_vocab receives its logits [n_vocab] f32 (if logits is not NULL) and next[k] their
 * argmax (ties: smallest id; if next is not NULL). A row's results depend on its sequence only,
 * never on the other rows of the step (bitwise). Errors, with nothing run and nothing changed:
 * DCP_ERR_INVALID_ARGUMENT (a token outside the vocabulary, a sequence outside the slots, rows of
 * a sequence not consecutive, a sequence beyond n_ctx), DCP_ERR_OUT_OF_PAGES (the pools cannot
 * hold the new tokens: dcp_model_state_pages_needed tells what a step needs); Vulkan failures. */
DCP_API dcp_status dcp_model_state_step(dcp_model_state *s, const dcp_model_row *rows, uint32_t n, float *logits,
                                        int32_t *next);
/* Sequence 0 as one stream: runs tokens [n] in steps of up to max_rows rows; logits (if not NULL)
 * receives the last token's logits [n_vocab], next (if not NULL) their argmax. */
DCP_API dcp_status dcp_model_state_forward(dcp_model_state *s, const int32_t *tokens, uint32_t n, float *logits,
                                           int32_t *next);
/* Empty slot child becomes a copy of sequence parent (its length, every layer's K and V or latent
 * cache, q8_0 scales included), without computing anything (docs/design.md section 18): parent's
 * full global blocks are shared, not copied (one more holder on each page; with prefix caching on,
 * the ones that are cache entries, by reference; off, the sequences of a fork share them as a
 * group the page accounting counts once), and the pages of the blocks after them (the last,
 * partial one; with prefix caching on, also full ones that did not become entries) are copied on
 * the device into fresh pages of child's own (copy on write: the shared pages are full, never
 * written again). The next step of child goes on from parent's length. *shared (if not NULL):
 * the tokens of the shared blocks. Blocks only shared with a group parent is in already stay
 * the group's; a parent in a fork group shares only those. Waits for the copies.
 * DCP_ERR_INVALID_ARGUMENT (nothing changed) for a slot outside the state, a busy child, an empty
 * parent or child == parent; DCP_ERR_OUT_OF_PAGES when the copies do not fit on some rank
 * (dcp_model_state_fork_pages). With the TP group spread over MPI processes every process forks
 * alike (the engine's step plan carries the fork: DCP_ENGINE_OP_FORK). */
DCP_API dcp_status dcp_model_state_fork_seq(dcp_model_state *s, uint32_t parent, uint32_t child, uint32_t *shared);
/* Pages of DCP rank r's pool a fork of sequence parent takes (those copied; 0 for an empty
 * parent or r outside the group). */
DCP_API uint32_t dcp_model_state_fork_pages(const dcp_model_state *s, uint32_t parent, uint32_t r);
/* Ends sequence seq: its pages go back to the pools at once; its length becomes 0. */
DCP_API void dcp_model_state_free_seq(dcp_model_state *s, uint32_t seq);
/* Shortens sequence seq to its first `length` tokens, in every layer's cache on every rank held
 * here: each DCP rank keeps the pages its shard of `length` tokens needs (the placement rule) and
 * frees the rest, so the page accounting is that of a sequence that never held more. The KV of
 * the kept positions is untouched (the next step writes from position `length` on). Speculative
 * decoding rolls rejected drafts back with it. Over MPI every process truncates alike (host only,
 * no communication). DCP_ERR_INVALID_ARGUMENT (nothing changed) for a slot outside the state or a
 * length beyond the sequence's. */
DCP_API dcp_status dcp_model_state_truncate_seq(dcp_model_state *s, uint32_t seq, uint32_t length);
/* Rows with logits a step may have (config max_logits after defaults). */
DCP_API uint32_t dcp_model_state_max_logits(const dcp_model_state *s);
/* Forgets every sequence. */
DCP_API void dcp_model_state_reset(dcp_model_state *s);
/* Tokens held of sequence seq (the position of its next token). */
DCP_API uint32_t dcp_model_state_seq_length(const dcp_model_state *s, uint32_t seq);
/* The context capacity per sequence in tokens (config n_ctx after defaults). */
DCP_API uint32_t dcp_model_state_n_ctx(const dcp_model_state *s);

/* Page accounting (per rank and layer; every layer holds the same pages). Free pages count the
 * prefix cache's unreferenced blocks as free (they are evicted when needed). Free pages of the
 * fullest rank held here; pages per rank pool; the pages sequence seq would take on its busiest
 * rank to grow by `add` tokens (0 when it fits in the pages it holds). */
DCP_API uint32_t dcp_model_state_pages_free(const dcp_model_state *s);
DCP_API uint32_t dcp_model_state_pages_total(const dcp_model_state *s);
DCP_API uint32_t dcp_model_state_pages_needed(const dcp_model_state *s, uint32_t seq, uint32_t add);
/* Pages held by sequence seq on local rank i (per layer). */
DCP_API uint32_t dcp_model_state_seq_pages(const dcp_model_state *s, uint32_t seq, uint32_t local);
/* Per DCP rank r of a group (0 <= r < dcp; 0 without DCP), by the placement formulas, so the same
 * on every process: the pages a sequence of `length` tokens holds there, and the free pages of
 * rank r's pools (the ranks r of every DCP group hold the same pages). A scheduler that adds up
 * the growth of a step per rank knows exactly whether dcp_model_state_step will fit. */
DCP_API uint32_t dcp_model_state_shard_pages(const dcp_model_state *s, uint64_t length, uint32_t r);
DCP_API uint32_t dcp_model_state_rank_pages_free(const dcp_model_state *s, uint32_t r);

/* ---- automatic prefix caching (docs/design.md section 18) ---------------------------------------
 * Full global blocks of block_size x dcp tokens (block b: page b of a sequence's block table on
 * every rank of its DCP group, whatever the interleave) are cache entries identified by a hash
 * chain: dcp_prefix_block_hash(hash of block b - 1, its token ids), starting from a seed over what
 * else changes the KV (the model's shape, file size and RoPE settings, the KV dtype, block size,
 * TP, DCP and interleave). An entry holds its page on every rank and layer and counts the
 * sequences that list it; a sequence that starts with cached blocks shares their pages (no copy)
 * and computes only the rest. Entries no sequence lists stay until a step needs their pages, then
 * are evicted least recently released first. Partial blocks are never shared, and a sequence's
 * last token is always computed. Off by default; the engine turns it on (engine config
 * enable_prefix_caching). With a TP group spread over MPI processes every process turns it on and
 * applies the leader's attaches and commits in its order (dcp_engine_plan_apply); KV offload is
 * refused there. */

/* Turns caching on (allocating its index: per slot n_ctx token ids) or off (every cached block
 * evicted). DCP_ERR_INVALID_ARGUMENT unless the state holds no sequence. With KV offload
 * (kv_offload_bytes) it allocates the host pool: host slots of the whole TP group's bytes of one
 * block, the same on every MPI process; an allocation that fails fails this call. With the TP
 * group over MPI processes every process turns caching on before the first step and the callers
 * agree on the result (dcp-vk-serve does), so that a failure on one stops them all. */
DCP_API dcp_status dcp_model_state_set_prefix_caching(dcp_model_state *s, bool on);
DCP_API bool dcp_model_state_prefix_caching(const dcp_model_state *s);
/* The hash of a block of tokens [n] after a block of hash `parent` (the seed for block 0).
 * Thread-safe. */
DCP_API uint64_t dcp_prefix_block_hash(uint64_t parent, const int32_t *tokens, uint32_t n);
/* Tokens of tokens [n] that attaching would take from the cache: whole blocks, at most n - 1
 * tokens; *revived (if not NULL): how many of those blocks no sequence references now (attaching
 * takes them out of the reclaimable pages, or, for blocks offloaded to host memory, takes a free
 * page to restore each into). 0 when caching is off. Changes nothing. */
DCP_API uint32_t dcp_model_state_prefix_lookup(const dcp_model_state *s, const int32_t *tokens, uint32_t n,
                                               uint32_t *revived);
/* Empty slot seq starts with the longest cached prefix of tokens [n] (as lookup): its length
 * becomes *cached tokens, their KV shared with the cache (blocks offloaded to host memory copied
 * back into fresh pages first; the prefix ends before them when no page can be had); the next step
 * goes on from there. Nothing happens when caching is off. DCP_ERR_INVALID_ARGUMENT for a busy slot or n beyond n_ctx. */
DCP_API dcp_status dcp_model_state_prefix_attach(dcp_model_state *s, uint32_t seq, const int32_t *tokens, uint32_t n,
                                                 uint32_t *cached);
/* The first n tokens of seq (run by steps, or attached) are final: its full blocks among them
 * become cache entries (unless another sequence cached the same block first). Tokens past n may
 * still be rolled back (speculative drafts); a truncation below the committed blocks is refused.
 * DCP_ERR_INVALID_ARGUMENT when seq holds fewer than n tokens. Nothing happens when caching is off. */
DCP_API dcp_status dcp_model_state_prefix_commit(dcp_model_state *s, uint32_t seq, uint32_t n);

typedef struct dcp_prefix_cache_stats {
    bool enabled;
    uint32_t block_tokens;        /* tokens per cached block: block_size x dcp */
    uint32_t blocks;              /* cached blocks (each one page on every rank, per layer) */
    uint32_t blocks_unreferenced; /* of which no sequence lists: reclaimable */
    uint64_t evictions;           /* blocks evicted from the device pages so far (to host or gone) */
    /* KV offload (dcp_model_state_config.kv_offload_bytes): */
    uint32_t host_blocks;         /* blocks host-resident now (no device page; restored on a hit) */
    uint32_t host_capacity;       /* blocks the host pool holds (0: offload off) */
    uint64_t host_evictions;      /* host-resident blocks evicted (LRU, the host pool full) */
    uint32_t host_segments;       /* buffers the host pool takes per local rank (the most of any rank),
                                   * each within the device's storage-buffer range */
    uint32_t host_segment_blocks; /* blocks one segment holds (the fewest of any rank); slots are taken
                                   * lowest first, so more host-resident blocks than this fill a 2nd */
    uint64_t offloaded_blocks, offloaded_bytes; /* copied device -> host (bytes: every layer of every rank of the
                                                 * TP group, under MPI too) */
    uint64_t restored_blocks, restored_bytes;   /* copied host -> device on a hit */
    uint64_t seed;                /* the seed of the hash chains */
} dcp_prefix_cache_stats;

DCP_API void dcp_model_state_prefix_stats(const dcp_model_state *s, dcp_prefix_cache_stats *out);

/* Device memory of one TP rank, by use, in bytes: what the weights and a run state allocate,
 * counted from the same sizes the allocations use (src/model/graph_state.c). */
typedef struct dcp_model_memory {
    uint64_t weights;         /* the rank's weights (dcp_model_rank_bytes) */
    uint64_t kv;              /* KV page pools: kv_pages pages per layer */
    uint64_t activations;     /* residual stream, layer activations, step inputs and outputs (logits) */
    uint64_t attention;       /* attention plans (block tables [max_rows][blocks], lengths, the
                               * split-KV workspace for rows at n_ctx), DCP steps (gathered Q,
                               * partial O and LSE) */
    uint64_t exchange;        /* communicator mailboxes (TP all-reduce, DCP exchanges) */
    uint64_t transfer;        /* the device's staging buffer for uploads */
    uint64_t total;           /* the sum */
    uint64_t largest;         /* the largest single buffer (KV pools count by segment) */
    const char *largest_what; /* which buffer that is, for messages */
} dcp_model_memory;

/* What a run state for config over m needs on each local rank, without allocating anything:
 * per_rank [dcp_model_local_count(m)]. m may be a count_only model (weights counted, not loaded).
 * Errors as dcp_model_state_create's configuration checks (DCP_ERR_CONFIG: interleave, a context
 * longer than the split-KV chunking allows). Thread-safe. */
DCP_API dcp_status dcp_model_state_bytes(const dcp_model *m, const dcp_model_state_config *config,
                                         dcp_model_memory *per_rank);
/* config with every default applied as dcp_model_state_create applies them for m (n_ctx, kv_pages,
 * chunk_tokens, max_logits), into *out (draft copied). Errors as dcp_model_state_bytes. Thread-safe. */
DCP_API dcp_status dcp_model_state_config_resolve(const dcp_model *m, const dcp_model_state_config *config,
                                                  dcp_model_state_config *out);

/* Checks config against the devices before anything is allocated: every buffer within its
 * device's storage-buffer range, and the ranks on one physical device (all CPU devices together:
 * host memory) within what it may still allocate (dcp_device_memory_budget; the weights of a
 * count_only model included, those of a loaded model already held). DCP_ERR_OUT_OF_MEMORY or
 * DCP_ERR_CONFIG with a message saying what is needed (by use), what is available (and what sets
 * that), and the longest context that fits; *max_ctx (may be NULL) receives that context in
 * tokens (0: none fits, the weights alone are too large), or config's n_ctx when it fits.
 * dcp_model_state_create runs this check first. */
DCP_API dcp_status dcp_model_state_check(const dcp_model *m, const dcp_model_state_config *config, uint32_t *max_ctx);

/* Bytes of the KV cache pools of one rank (all layers). */
DCP_API uint64_t dcp_model_state_kv_bytes(const dcp_model_state *s);
/* Bytes rank 0 has sent to other ranks (all-reduces, DCP exchanges) since creation, and tokens run
 * since then (the warm-up excluded): their ratio is the exchange volume per token. */
DCP_API uint64_t dcp_model_state_exchange_bytes(const dcp_model_state *s);
DCP_API uint64_t dcp_model_state_tokens_run(const dcp_model_state *s);
/* Rounds of the last step (one per exchange point, plus one), the host waits it took (every round
 * when the host synchronises the rounds, 1 when they wait on each other on the GPU), and whether
 * it was replayed from a kept recording. */
DCP_API uint32_t dcp_model_state_last_rounds(const dcp_model_state *s);
DCP_API uint32_t dcp_model_state_last_host_waits(const dcp_model_state *s);
DCP_API bool dcp_model_state_last_replayed(const dcp_model_state *s);
/* Compute dispatches of the last step (recorded or replayed, every round): over all the ranks
 * this process holds, and of its busiest rank alone. */
DCP_API uint32_t dcp_model_state_last_dispatches(const dcp_model_state *s);
DCP_API uint32_t dcp_model_state_last_rank_dispatches(const dcp_model_state *s);
/* Step timing (off by default; turning it on makes the next step record again): after a step,
 * compute_ns = the GPU time of its rounds (device timestamps, the slowest rank of each round) and
 * exchange_ns = its wall-clock time minus that (host round trips, waits, host moves). */
DCP_API void dcp_model_state_set_timing(dcp_model_state *s, bool on);
DCP_API void dcp_model_state_last_timing(const dcp_model_state *s, double *compute_ns, double *exchange_ns);
/* How the state's exchanges move: each communicator's transports per pair with their reasons, and
 * how the rounds are synchronised (host or GPU) and why; written into buf (cap bytes, lines);
 * returns buf. Complete after the first step (the state's warm-up runs one). */
DCP_API const char *dcp_model_state_describe_exchange(const dcp_model_state *s, char *buf, size_t cap);

/* ---- sampling (host) ----------------------------------------------------------------------- */

/* Sampling runs on the host over the downloaded logits: it needs a sort (top-k / top-p) of one
 * row per step, which is a few dozen microseconds on the CPU for vocabularies of 10^5 while the
 * logits download is one small copy; greedy decoding uses the device argmax and downloads
 * nothing but the id (unless a bias, a penalty or min_tokens changes the logits first).
 *
 * The order is vLLM's: on the logits (f32) the min_tokens mask, then logit_bias, then the
 * repetition, frequency and presence penalties; then the temperature; then top-k, top-p and min-p
 * (the order of vLLM's V0 sampler); greedy takes the argmax of the changed logits. */
typedef struct dcp_logit_bias {
    int32_t token;      /* a token id of the vocabulary */
    float bias;         /* added to its logit, in [-100, 100]; -100 bans it (its logit becomes -inf) */
} dcp_logit_bias;

typedef struct dcp_sampler_config {
    float temperature;  /* 0 (default): greedy argmax; > 0: softmax(logits / temperature) */
    uint32_t top_k;     /* keep the k most likely tokens; 0 (default): all */
    float top_p;        /* keep the smallest set with probability >= top_p; 1 (default): all */
    uint64_t seed;      /* random stream seed (default 0); same seed and config: same choices */
    float min_p;        /* after top-k and top-p, keep the tokens with p >= min_p * (the largest p);
                         * in [0, 1]; 0 (default): all */
    float presence_penalty;   /* subtracted from the logit of every token generated at least once;
                               * in [-2, 2]; 0 (default): none (OpenAI's and vLLM's definition) */
    float frequency_penalty;  /* times the number of times a token was generated, subtracted from its
                               * logit; in [-2, 2]; 0 (default): none */
    float repetition_penalty; /* vLLM's (and the CTRL paper's): the logit l of every token of the
                               * prompt or the output becomes l / r when l > 0 and l * r otherwise;
                               * > 0; 1 (default): none, and 0 counts as 1 (a zeroed struct is the
                               * default) */
    const dcp_logit_bias *logit_bias; /* [n_logit_bias] (copied at create; default NULL); a token
                               * given twice: the biases add */
    uint32_t n_logit_bias;
    uint32_t min_tokens;      /* the tokens min_tokens_ids get logit -inf while fewer than min_tokens
                               * tokens were generated (dcp_sampler_accept); 0 (default): never */
    const int32_t *min_tokens_ids; /* [n_min_tokens_ids] (copied at create; the engine passes EOS and
                               * the request's stop tokens) */
    uint32_t n_min_tokens_ids;
    /* JSON output (include/dcpvk/json_constraint.h): with json set, every step first gives -inf to
     * the tokens whose bytes (json_vocab) would not keep the generated text a valid prefix of a
     * JSON text matching json, and to the json_end_ids (EOS, stop tokens; the engine adds them)
     * while the value is incomplete. Both borrowed: they must outlive the sampler. Default NULL. */
    const struct dcp_json_schema *json;
    const struct dcp_json_vocab *json_vocab;
    const int32_t *json_end_ids;   /* [n_json_end_ids] (copied at create) */
    uint32_t n_json_end_ids;
} dcp_sampler_config;

#define DCP_SAMPLER_CONFIG_DEFAULT {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0, .min_p = 0.0f, \
                                    .presence_penalty = 0.0f, .frequency_penalty = 0.0f, \
                                    .repetition_penalty = 1.0f, .logit_bias = NULL, .n_logit_bias = 0, \
                                    .min_tokens = 0, .min_tokens_ids = NULL, .n_min_tokens_ids = 0, \
                                    .json = NULL, .json_vocab = NULL, .json_end_ids = NULL, \
                                    .n_json_end_ids = 0}

typedef struct dcp_sampler dcp_sampler;

/* DCP_ERR_INVALID_ARGUMENT naming the field for temperature < 0, top_p outside (0, 1], min_p
 * outside [0, 1], a presence or frequency penalty outside [-2, 2], a repetition penalty < 0, a bias
 * outside [-100, 100] or a bias or min_tokens id outside the vocabulary. Destroy with
 * dcp_sampler_destroy. Not thread-safe (one sampler per sequence). */
DCP_API dcp_status dcp_sampler_create(const dcp_sampler_config *config, uint32_t n_vocab, dcp_sampler **out);
DCP_API void dcp_sampler_destroy(dcp_sampler *s);
/* True when the sampler's choice is the argmax of the logits as they are (the caller may use the
 * device argmax instead of the logits): greedy (temperature 0 or top-k 1) with no bias, no penalty
 * and no min_tokens. */
DCP_API bool dcp_sampler_is_greedy(const dcp_sampler *s);
/* Records tokens [n] of the sequence for the penalties and min_tokens: the prompt's (generated
 * false: only the repetition penalty looks at them) or generated ones, in order. Call it with the
 * prompt once, and with every generated token after it is chosen (by this sampler or not). Ids
 * outside the vocabulary are ignored. Does not touch the random stream. */
DCP_API void dcp_sampler_accept(dcp_sampler *s, const int32_t *tokens, uint32_t n, bool generated);
/* Chooses a token from logits [n_vocab] f32 (NaN counts as -inf); advances the random stream
 * (one draw, unless greedy). Does not record the token (dcp_sampler_accept). */
DCP_API int32_t dcp_sampler_sample(dcp_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif
#endif
