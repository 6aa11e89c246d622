/* Double-precision CPU reference of the whole deepseek2 forward (MLA attention + MoE): the oracle
 * of the deepseek2 tests. Every activation, the KV cache and the logits are doubles.
 *
 * The oracle form is the NON-absorbed one: per head h and cached token t,
 *   K[h][t] = [W_UK[h]^T c_t | k_pe_t]  (nope + rope),  V[h][t] = W_UV[h] c_t  (v),
 * scores scale * q[h] . K[h][t], softmax over t <= pos, o[h] = sum_t p_t V[h][t]; so a GPU
 * computing the absorbed form (q_lat = W_UK q_nope against the latent cache, W_UV after the merge)
 * is checked against the algebra it relies on. `absorbed` = 1 computes that absorbed form in
 * double instead (the self-consistency check of the tests).
 *
 * RoPE: llama.cpp's NORM mode (adjacent pairs) on q_pe and k_pe only, angles with YaRN when the
 * config says so (recomputed here from the formula, independently of dcp_rope_cs). MoE routing as
 * dcp_ref_moe_route. Single-threaded, no global state. */
#ifndef DCP_REF_DEEPSEEK2_REF_H
#define DCP_REF_DEEPSEEK2_REF_H

#include <stdint.h>

#include "dcpvk/model_config.h"

/* One layer's weights as f32 host arrays (dequantised), in GGUF layouts ([out][in], in
 * contiguous). H heads, E n_embd, R kv_lora, P rope, N nope, V v, X experts, FE expert width,
 * FS = FE * shared experts. Pointers are borrowed; NULL where the layout or layer has none. */
typedef struct dcp_ref_ds2_layer {
    const float *attn_norm;   /* [E] */
    const float *wq;          /* [H (N+P)][E] (q_lora_rank 0) */
    const float *wq_a;        /* [q_lora][E] */
    const float *q_a_norm;    /* [q_lora] */
    const float *wq_b;        /* [H (N+P)][q_lora] */
    const float *wkv_a;       /* [R + P][E] */
    const float *kv_a_norm;   /* [R] */
    const float *k_b;         /* [H][R][N] (MLA layout: attn_k_b) */
    const float *v_b;         /* [H][V][R] (attn_v_b) */
    const float *kv_b;        /* [H (N+V)][R] (legacy: attn_kv_b; used when k_b is NULL) */
    const float *wo;          /* [E][H V] */
    const float *ffn_norm;    /* [E] */
    const float *w_gate, *w_up; /* [n_ff][E] (dense layers) */
    const float *w_down;      /* [E][n_ff] */
    const float *gate_inp;    /* [X][E] (MoE layers) */
    const float *exp_probs_b; /* [X] or NULL */
    const float *gate_exps, *up_exps; /* [X][FE][E] */
    const float *down_exps;   /* [X][E][FE] */
    const float *gate_sh, *up_sh; /* [FS][E] or NULL */
    const float *down_sh;     /* [E][FS] */
} dcp_ref_ds2_layer;

typedef struct dcp_ref_ds2 {
    dcp_model_config cfg;           /* hyperparameters (from dcp_model_config_read) */
    const float *tok_embd;          /* [n_vocab][E] */
    const float *output_norm;       /* [E] */
    const float *output;            /* [n_vocab][E] */
    const dcp_ref_ds2_layer *layers;/* [n_layer] */
    int absorbed;                   /* 0: the oracle (per-head K, V); 1: absorbed, latent cache */
    /* Negative controls (0: off), deliberate errors that the tests must detect: */
    int control_neox;               /* RoPE in NEOX mode (pairs (i, i + n_rot/2)) instead of NORM */
    double control_scale;           /* > 0: this softmax scale instead of cfg.attn_scale */
    uint32_t control_base2_shards;  /* > 1: the keys split over that many interleaved shards whose
                                     * partial states are merged with base-2 LSEs taken as natural */
    /* Optional probes of the last step (NULL: not written): */
    double *probe_attn;             /* [n_layer][H][n_ctx]: attention probabilities over t <= pos */
    double *probe_router;           /* [n_layer][X]: gate probabilities (softmax or sigmoid) */
    /* Set by dcp_ref_ds2_init: */
    uint32_t n_ctx;
    double *cache;                  /* per layer and token: oracle [H][N+P+V]; absorbed [R+P] */
} dcp_ref_ds2;

/* Allocates the cache for n_ctx tokens (returns 0, or -1 when out of memory). */
int dcp_ref_ds2_init(dcp_ref_ds2 *m, uint32_t n_ctx);
void dcp_ref_ds2_free(dcp_ref_ds2 *m);

/* One token at position pos (< n_ctx; positions 0..pos-1 must have been stepped): caches its
 * keys and values and writes logits [n_vocab] (double). */
void dcp_ref_ds2_step(dcp_ref_ds2 *m, int32_t token, uint32_t pos, double *logits);

/* The RoPE angle of pair i (< n_rot/2) at position pos under the config's scaling (radians); the
 * rotation's magnitude is cfg->rope_attn_factor. */
double dcp_ref_rope_angle(const dcp_model_config *cfg, uint32_t pos, uint32_t i);

/* MoE routing of one token (DESIGN of issue 9, llama.cpp's build_moe_ffn):
 *   probs = softmax(logits) or sigmoid(logits); selection = probs + bias (bias may be NULL);
 *   with n_groups > 1: group score = sum of the group's 2 largest selection values, keep the
 *   n_groups_used best groups (ties: lower group), others excluded;
 *   ids = the n_used largest selection values among the kept experts, in descending order (ties:
 *   lower expert id); w = probs[ids] (unbiased), divided by max(sum, 2^-14) when norm, times scale.
 * logits [n_expert]; ids [n_used]; w [n_used]; probs (optional, may be NULL) [n_expert]. */
typedef struct dcp_ref_moe_route_args {
    uint32_t n_expert, n_used, n_groups, n_groups_used;
    int sigmoid, norm;
    double scale;
} dcp_ref_moe_route_args;

void dcp_ref_moe_route(const dcp_ref_moe_route_args *a, const double *logits, const float *bias, uint32_t *ids,
                       double *w, double *probs);

#endif
