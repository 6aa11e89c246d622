/* Llama-family model on one device, or on a tensor-parallel group of devices in one process or
 * spread over MPI processes, with optional DCP groups (include/dcpvk/cp.h): device weights, run
 * state (KV cache pages, attention plans, activations, command buffers) and the forward pass
 * (batched causal prefill and single-token decode), plus the host sampler.
 *
 * Model state is config (dcp_model_config, read from GGUF by include/dcpvk/model_config.h) /
 * weights (dcp_llama_weights) / run state (dcp_llama_state), each created and destroyed on its
 * own. On one device a forward call records the whole step (every layer, the output head and the
 * argmax) into one command buffer and submits it once; with TP > 1 each layer is split around the
 * communicator's host-synchronous all-reduces (2 submits per layer and rank), and DCP decode
 * steps run the DCP attention step between them.
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

/* Uploads the weights of a `llama` GGUF (described by cfg, from dcp_model_config_read) to dev.
 * Matrices keep their GGUF type (F32, F16, BF16, Q8_0; Q8_0 repacked, see src/model/ops.h); Q|K|V
 * and gate|up are fused into one matrix each (converted to F32 when their types differ); norms
 * become F32; a missing output.weight means it is tied to token_embd.weight. Errors name the
 * tensor: missing (DCP_ERR_FORMAT), wrong shape (DCP_ERR_FORMAT), unsupported type
 * (DCP_ERR_UNSUPPORTED). progress may be NULL. g, cfg and dev must outlive nothing: the weights
 * copy what they need; dev must outlive the weights. Destroy with dcp_llama_weights_destroy. */
dcp_status dcp_llama_weights_create(dcp_device *dev, const dcp_gguf *g, const dcp_model_config *cfg,
                                    dcp_progress_fn progress, void *user, dcp_llama_weights **out);
/* Same over a tensor-parallel group: devs [tp] distinct devices (rank r on devs[r]). Sharding:
 * query heads split evenly; KV heads split when they divide by tp, else replicated (tp must then
 * be a multiple of them: vLLM's rule); FFN rows split unevenly when tp does not divide n_ff;
 * attn_output and ffn_down split by input columns (zero-padded to multiples of 4; a column slice
 * that is not Q8_0-block aligned is uploaded as F32); embedding and norms replicated; output head
 * on rank 0 only. dcp: DCP group size (1: none); with dcp > 1 every rank also holds the Q rows of
 * its group's heads. DCP_ERR_CONFIG for sizes the heads do not allow (vLLM's rules). */
dcp_status dcp_llama_weights_create_tp(dcp_device *const *devs, uint32_t tp, uint32_t dcp, const dcp_gguf *g,
                                       const dcp_model_config *cfg, dcp_progress_fn progress, void *user,
                                       dcp_llama_weights **out);
/* Same for the part of a TP group this process holds, when the group spans processes (MPI, one
 * process per device under `mpiexec -n T`, or several devices per process): devs [count] hold TP
 * ranks [first, first + count) of a group of tp ranks. Every process passes the same count, and
 * with dcp > 1 a process holds whole DCP groups (first and count multiples of dcp) or a part of one
 * (dcp a multiple of count, first a multiple of count); DCP_ERR_CONFIG otherwise. The output head
 * is uploaded on the first rank held (devs[0]): every process computes the logits itself, from
 * the same all-reduced activations. first 0, count tp: exactly dcp_llama_weights_create_tp. */
dcp_status dcp_llama_weights_create_ranks(dcp_device *const *devs, uint32_t first, uint32_t count, uint32_t tp,
                                          uint32_t dcp, const dcp_gguf *g, const dcp_model_config *cfg,
                                          dcp_progress_fn progress, void *user, dcp_llama_weights **out);
void dcp_llama_weights_destroy(dcp_llama_weights *w);
/* Tensor-parallel and DCP sizes of the weights (the whole group's, wherever its ranks are). */
uint32_t dcp_llama_weights_tp(const dcp_llama_weights *w);
uint32_t dcp_llama_weights_dcp(const dcp_llama_weights *w);
/* TP ranks held by this process: [first_rank, first_rank + local_count). */
uint32_t dcp_llama_weights_first_rank(const dcp_llama_weights *w);
uint32_t dcp_llama_weights_local_count(const dcp_llama_weights *w);
const dcp_model_config *dcp_llama_weights_config(const dcp_llama_weights *w);
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
    dcp_cp_backend backend;    /* decode exchange, a2a or ag_rs (default a2a) */
    bool q_replicate;       /* ranks use their own copy of the group's Q, no gather (default false) */
} dcp_llama_config;

#define DCP_LLAMA_CONFIG_DEFAULT                                                                   \
    {.n_ctx = 0, .block_size = 16, .kv_dtype = DCP_DTYPE_F16, .prefill_chunk = 128,                \
     .interleave = 1, .backend = DCP_CP_A2A, .q_replicate = false}

typedef struct dcp_llama_state dcp_llama_state;

/* Creates the run state of one sequence over w (which must outlive it): per rank, one KV page
 * pool per layer (DCP: one dcp_kv_cache per layer and group, interleaved placement), attention
 * plans for decode and prefill, activations; the communicators of the TP group and of each DCP
 * group; then runs a 2-token warm-up (which creates every pipeline) and forgets it.
 * DCP_ERR_CONFIG for a bad interleave / block size pair.
 * Weights of part of the group (dcp_llama_weights_create_ranks): collective over MPI_COMM_WORLD
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

#define DCP_SAMPLER_CONFIG_DEFAULT {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0}

typedef struct dcp_sampler dcp_sampler;

/* DCP_ERR_INVALID_ARGUMENT for temperature < 0, top_p outside (0, 1]. Destroy with
 * dcp_sampler_destroy. */
dcp_status dcp_sampler_create(const dcp_sampler_config *config, uint32_t n_vocab, dcp_sampler **out);
void dcp_sampler_destroy(dcp_sampler *s);
/* True when the sampler is greedy (the caller may use the device argmax instead of logits). */
bool dcp_sampler_is_greedy(const dcp_sampler *s);
/* Chooses a token from logits [n_vocab] f32 (NaN counts as -inf); advances the random stream. */
int32_t dcp_sampler_sample(dcp_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif
#endif
