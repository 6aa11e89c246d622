/* Llama-family model on one device, or on a tensor-parallel group of devices in one process or
 * spread over MPI processes, with optional DCP groups (include/dcpvk/cp.h): device weights, run
 * state (KV cache pages, attention plans, activations, command buffers) and the forward pass
 * (batched causal prefill and single-token decode), plus the host sampler.
 *
 * Model state is config (dcp_model_config, read from GGUF by include/dcpvk/model_config.h) /
 * weights (dcp_llama_weights) / run state (dcp_llama_state), each created and destroyed on its
 * own. A forward call runs each chunk of tokens as one step of the step layer (src/step/step.h):
 * on one device the whole step (every layer, the output head and the argmax) is one command
 * buffer submitted once; with TP > 1 the step is split into rounds at its exchanges (each
 * all-reduce; each exchange of the DCP attention step), one submit and wait per round and rank.
 * Decode steps are recorded once and replayed.
 *
 * Threading: one thread at a time per run state; weights are read-only after creation. */
#ifndef DCPVK_MODEL_H
#define DCPVK_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/cp.h"
#include "dcpvk/dtype.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "dcpvk/status.h"
#include "dcpvk/vk.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- weights ------------------------------------------------------------------------------- */

typedef struct dcp_llama_weights dcp_llama_weights;

/* Called while weights load: done / total bytes uploaded so far. */
typedef void (*dcp_progress_fn)(void *user, uint64_t done, uint64_t total);

/* Where the weights go: the TP ranks this process holds and the parallel layout of the group. */
typedef struct dcp_llama_weights_config {
    dcp_device *const *devices; /* [count] devices[i] holds TP rank first_rank + i: distinct
                                 * dcp_devices, which must outlive the weights (no default) */
    uint32_t count;             /* TP ranks this process holds (default 1) */
    uint32_t first_rank;        /* the first of them (default 0) */
    uint32_t tp;                /* TP size of the whole group; 0 (default): count (one process) */
    uint32_t dcp;               /* DCP group size: groups of dcp consecutive TP ranks share their KV
                                 * heads and shard the KV cache along the sequence (default 1: none) */
    bool q_replicate;           /* dcp > 1: every rank projects its whole group's query heads itself
                                 * (dcp times the Q weights) instead of all-gathering Q (default false) */
    dcp_progress_fn progress;   /* called while weights load; NULL (default): none */
    void *progress_user;        /* passed to progress (default NULL) */
} dcp_llama_weights_config;

#define DCP_LLAMA_WEIGHTS_CONFIG_DEFAULT {.devices = NULL, .count = 1, .first_rank = 0, .tp = 0, .dcp = 1, \
                                          .q_replicate = false, .progress = NULL, .progress_user = NULL}

/* Uploads the weights of a `llama` GGUF (described by cfg, from dcp_model_config_read) to the
 * devices of wc. Matrices keep their GGUF type (F32, F16, BF16, Q8_0; Q8_0 repacked, see
 * src/model/ops.h); Q|K|V and gate|up are fused into one matrix each (converted to F32 when their
 * types differ); norms become F32; a missing output.weight means it is tied to token_embd.weight.
 *
 * Sharding over the TP group (size T): query heads split evenly; KV heads split when they divide
 * by T, else replicated (T must then be a multiple of them: vLLM's rule); FFN rows split unevenly
 * when T does not divide n_ff; attn_output and ffn_down split by input columns (zero-padded to
 * multiples of 4; a column slice that is not Q8_0-block aligned is uploaded as F32); embedding and
 * norms replicated; the output head on the first rank held (every process computes the logits
 * itself, from the same all-reduced activations). DCP (dcp > 1): see the config's fields.
 *
 * A group spread over processes (MPI, one process per device under `mpiexec -n T`, or several
 * devices per process): every process passes the same count, and with dcp > 1 a process holds
 * whole DCP groups (first_rank and count multiples of dcp) or an equal part of one (dcp a multiple
 * of count, first_rank a multiple of count).
 *
 * Errors name the tensor: missing or wrong shape (DCP_ERR_FORMAT), unsupported type
 * (DCP_ERR_UNSUPPORTED); DCP_ERR_CONFIG for sizes the heads do not allow (vLLM's rules) or a rank
 * layout that is not one of the above. g and cfg need not outlive the weights (they copy what
 * they need). Destroy with dcp_llama_weights_destroy, before the devices. */
dcp_status dcp_llama_weights_create(const dcp_llama_weights_config *wc, const dcp_gguf *g,
                                    const dcp_model_config *cfg, dcp_llama_weights **out);
void dcp_llama_weights_destroy(dcp_llama_weights *w);
/* Tensor-parallel and DCP sizes of the weights (the whole group's, wherever its ranks are). */
uint32_t dcp_llama_weights_tp(const dcp_llama_weights *w);
uint32_t dcp_llama_weights_dcp(const dcp_llama_weights *w);
/* Whether every rank projects its DCP group's query heads itself (dcp_llama_weights_config). */
bool dcp_llama_weights_q_replicate(const dcp_llama_weights *w);
/* TP ranks held by this process: [first_rank, first_rank + local_count). */
uint32_t dcp_llama_weights_first_rank(const dcp_llama_weights *w);
uint32_t dcp_llama_weights_local_count(const dcp_llama_weights *w);
const dcp_model_config *dcp_llama_weights_model(const dcp_llama_weights *w);
/* Bytes of device memory the weights use. */
uint64_t dcp_llama_weights_bytes(const dcp_llama_weights *w);

/* ---- run state ----------------------------------------------------------------------------- */

typedef struct dcp_llama_config {
    uint32_t n_ctx;         /* tokens of context (KV capacity); 0 (default): min(model's, 4096) */
    uint32_t block_size;    /* tokens per KV page (default 16) */
    dcp_dtype kv_dtype;     /* KV cache element type (default f16) */
    uint32_t prefill_chunk; /* prompt tokens per prefill step (default 128) */
    /* DCP (weights with dcp > 1 only): */
    uint32_t interleave;    /* cp_kv_cache_interleave_size: tokens in a row per rank (default 1) */
    dcp_cp_backend backend; /* attention exchange, a2a or ag_rs (default a2a) */
} dcp_llama_config;

#define DCP_LLAMA_CONFIG_DEFAULT {.n_ctx = 0, .block_size = 16, .kv_dtype = DCP_DTYPE_F16, .prefill_chunk = 128, \
                                  .interleave = 1, .backend = DCP_CP_A2A}

typedef struct dcp_llama_state dcp_llama_state;

/* Creates the run state of one sequence over w (which must outlive it): per rank, one KV page
 * pool per layer (DCP: one dcp_kv_cache per layer and group, interleaved placement, and one DCP
 * attention step, include/dcpvk/cp.h), attention plans for decode and prefill, activations; the
 * communicators of the TP group and of each DCP group; the step over the ranks held here; then
 * runs a 2-token warm-up (which creates every pipeline) and forgets it.
 * DCP_ERR_CONFIG for a bad interleave / block size pair.
 * Weights of part of the group (count < tp): collective over MPI_COMM_WORLD
 * (MPI initialised, every process calls it with the same config): the TP communicator spans the
 * world (its size must be tp: DCP_ERR_CONFIG otherwise), a DCP group spread over processes gets a
 * sub-communicator (dcp_comm_init_mpi_split), and a failure on any process fails it on every
 * process (DCP_ERR_MPI on the others), so that none waits in a collective. Forward calls are then
 * collective too: every process passes the same tokens. Destroy with dcp_llama_state_destroy. */
dcp_status dcp_llama_state_create(dcp_llama_weights *w, const dcp_llama_config *config,
                                  dcp_llama_state **out);
void dcp_llama_state_destroy(dcp_llama_state *s);
/* Forgets the sequence (position back to 0). */
void dcp_llama_state_reset(dcp_llama_state *s);
/* Tokens processed so far (the position of the next token). */
uint32_t dcp_llama_state_pos(const dcp_llama_state *s);
/* The context capacity in tokens (config n_ctx after defaults). */
uint32_t dcp_llama_state_n_ctx(const dcp_llama_state *s);
/* Bytes of the KV cache pools of one rank (K and V, all layers). */
uint64_t dcp_llama_state_kv_bytes(const dcp_llama_state *s);
/* Bytes rank 0 has sent to other ranks (all-reduces) since creation, and tokens run since then
 * (the warm-up excluded): their ratio is the exchange volume per token. */
uint64_t dcp_llama_state_exchange_bytes(const dcp_llama_state *s);
uint64_t dcp_llama_state_tokens_run(const dcp_llama_state *s);

/* Runs tokens [n] at positions pos .. pos+n-1 (prefill in chunks of prefill_chunk tokens, causal;
 * n == 1 is a decode step) and advances the position. On success, if logits is not NULL it
 * receives the last token's logits [n_vocab] f32, and if next is not NULL the argmax of those
 * logits (ties: smallest id). Errors: a token id outside the vocabulary or a context overflow
 * (DCP_ERR_INVALID_ARGUMENT; nothing is run), Vulkan failures. */
dcp_status dcp_llama_forward(dcp_llama_state *s, const int32_t *tokens, uint32_t n, float *logits,
                             int32_t *next);

/* ---- sampling (host) ----------------------------------------------------------------------- */

/* Sampling runs on the host over the downloaded logits: it needs a sort (top-k / top-p) of one
 * row per step, which is a few dozen microseconds on the CPU for vocabularies of 10^5 while the
 * logits download is one small copy; greedy decoding uses the device argmax and downloads
 * nothing but the id. */
typedef struct dcp_sampler_config {
    float temperature;  /* 0 (default): greedy argmax; > 0: softmax(logits / temperature) */
    uint32_t top_k;     /* keep the k most likely tokens; 0 (default): all */
    float top_p;        /* keep the smallest set with probability >= top_p; 1 (default): all */
    uint64_t seed;      /* random stream seed (default 0); same seed and config: same choices */
} dcp_sampler_config;

#define DCP_SAMPLER_CONFIG_DEFAULT {0.0f, 0, 1.0f, 0}

typedef struct dcp_sampler dcp_sampler;

/* DCP_ERR_INVALID_ARGUMENT for temperature < 0, top_p outside (0, 1]. Destroy with
 * dcp_sampler_destroy. */
dcp_status dcp_sampler_create(const dcp_sampler_config *config, uint32_t n_vocab, dcp_sampler **out);
void dcp_sampler_destroy(dcp_sampler *s);
/* True when the sampler is greedy (the caller may use the device argmax instead of logits). */
int dcp_sampler_is_greedy(const dcp_sampler *s);
/* Chooses a token from logits [n_vocab] f32 (NaN counts as -inf); advances the random stream. */
int32_t dcp_sampler_sample(dcp_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif
#endif
