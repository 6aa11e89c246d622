/* The llama model's private structures, shared by its three parts:
 *   llama_weights.c  sharding of the GGUF tensors over the TP ranks and their upload;
 *   llama_state.c    the run state: KV pools or DCP caches, plans, activations, communicators, step;
 *   llama_forward.c  the forward pass, recorded on the step layer (src/step/step.h).
 *
 * Sharding (TP size T, rank r): query heads [r Hq/T, (r+1) Hq/T); KV heads split when Hkv % T == 0,
 * else replicated (rank r holds KV head r / (T / Hkv)); FFN rows split unevenly (the first F % T
 * ranks get one more); o_proj and ffn_down split by input columns (row-parallel), their partial
 * outputs summed by an all-reduce over the group; embedding and norms replicated; the output head
 * on the first rank held. DCP (size N > 1): groups of N consecutive TP ranks share their KV heads;
 * with q_replicate every rank also projects the query heads of its whole group.
 *
 * Over MPI (weights of TP ranks [first, first + nl)) the arrays below hold this process's ranks
 * only. */
#ifndef DCP_MODEL_LLAMA_INTERNAL_H
#define DCP_MODEL_LLAMA_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/attn.h"
#include "dcpvk/comm.h"
#include "dcpvk/cp.h"
#include "dcpvk/kv.h"
#include "dcpvk/model.h"
#include "model/ops.h"
#include "step/step.h"

/* ---- weights ------------------------------------------------------------------------------- */

typedef struct llama_layer {
    dcp_buffer *attn_norm, *ffn_norm; /* [n_embd] f32 */
    dcp_matrix wqkv;                  /* [(qh + 2 hkv) D][n_embd]: projected Q heads, local K, V heads */
    dcp_matrix wo;                    /* [n_embd][hq D]: the rank's input columns */
    dcp_matrix wgu;                   /* [2 f][n_embd]: local gate rows then up rows */
    dcp_matrix wdown;                 /* [n_embd][f_pad]: local input columns, zero-padded */
} llama_layer;

typedef struct llama_rank_weights {
    dcp_device *dev;
    uint32_t hq, hkv;      /* own query heads, local KV heads */
    uint32_t q0, kv0;      /* first own query head, first local KV head */
    uint32_t qh, qh0;      /* query heads this rank projects (own, or its DCP group's with
                            * q_replicate) and the first */
    uint32_t f, f0, f_pad; /* local FFN rows, first row, padded to a multiple of 4 */
    dcp_matrix tok_embd;   /* [n_vocab][n_embd] */
    dcp_matrix output;     /* [n_vocab][n_embd] (first rank held only) */
    dcp_buffer *out_norm;  /* [n_embd] f32 */
    llama_layer *layers;   /* [n_layer] */
} llama_rank_weights;

struct dcp_llama_weights {
    dcp_model_config cfg;
    uint32_t tp, dcp;         /* TP and DCP sizes of the whole group */
    bool q_replicate;
    uint32_t first, nl;       /* TP ranks held here: [first, first + nl) (one process: 0, tp) */
    llama_rank_weights *ranks;/* [nl]: ranks[i] is TP rank first + i */
    uint64_t bytes;
};

/* ---- run state ----------------------------------------------------------------------------- */

typedef struct llama_rank_state {
    dcp_device *dev;
    uint32_t qkv4;                  /* qkv row stride (floats, a multiple of 4) */
    uint32_t g, gr;                 /* DCP group (among those held here) and rank inside it */
    uint32_t gl;                    /* index among the group's ranks held here (its cache's and
                                     * attention step's local rank; gr in one process) */
    dcp_kv_pool **pools;            /* [n_layer] (owned when DCP = 1, else the group caches' pools) */
    dcp_decode_plan **dplans;       /* [n_layer] DCP = 1: decode, batch 1 */
    dcp_decode_plan **pplans;       /* [n_layer] DCP = 1: prefill, batch prefill_chunk (NULL if 1) */
    /* activations [prefill_chunk][row] f32: */
    dcp_buffer *x;                  /* [n_embd] the residual stream */
    dcp_buffer *xn;                 /* [n_embd] normed */
    dcp_buffer *qkv;                /* [qkv4] projected Q | K | V */
    dcp_buffer *q;                  /* [qh][D] roped queries */
    dcp_buffer *o, *lse;            /* [hq][D], [hq] attention of the own heads */
    dcp_buffer *gu, *h;             /* [2 f], [f_pad] FFN */
    dcp_buffer *part;               /* [n_embd] row-parallel partial output (TP > 1) */
    dcp_buffer **slots;             /* [n_layer] host-visible [chunk] u32 KV slots */
    dcp_buffer *ids, *cs;           /* host-visible step inputs: [chunk] u32, [chunk][n_rot/2][2] f32 */
    dcp_buffer *logits, *next;      /* host-visible outputs: [n_vocab] f32, [1] u32 */
} llama_rank_state;

struct dcp_llama_state {
    dcp_llama_weights *w;
    dcp_llama_config cfg;
    uint32_t pos;
    uint32_t pages;                 /* pages per layer pool (DCP = 1: identity block table) */
    uint32_t *bt;                   /* [prefill_chunk][pages] identity block tables (DCP = 1) */
    uint32_t *lens;                 /* [prefill_chunk] scratch */
    uint32_t *seqs;                 /* [prefill_chunk] zeros: every row is sequence 0 */
    uint64_t *glens;                /* [prefill_chunk] scratch: global lengths of the rows */
    llama_rank_state *r;            /* [nl] the ranks held here (all tp in one process) */
    uint32_t ng, gn;                /* DCP groups held here (wholly or in part), and ranks of each
                                     * held here: one process: tp / dcp, dcp */
    dcp_comm *comm;                 /* TP group (tp > 1) */
    dcp_comm **gcomm;               /* [ng] DCP group communicators (dcp > 1) */
    dcp_kv_cache **caches;          /* [n_layer][ng] (dcp > 1) */
    dcp_cp_attn **attns;            /* [n_layer][ng] (dcp > 1) */
    dcp_comm_buf *qv, *ov, *lv;     /* [nl] each rank's q, o, lse (for dcp_step_cp_attn) */
    dcp_step *step;                 /* rounds over the nl ranks held here */
    uint32_t ar_tokens;             /* > 0: an all-reduce of that many rows awaits its sum (norm) */
    uint64_t tokens_run;            /* tokens processed (for the exchange statistics) */
};

/* The forward pass of one chunk (llama_forward.c). */
dcp_status dcp_llama_forward_chunk(dcp_llama_state *s, const int32_t *tokens, uint32_t T, bool want_logits);

#endif
