/* deepseek2 (MLA + MoE) weights: the loader-side description and validation of a GGUF's tensors
 * (both attention layouts), each tensor-parallel rank's host slices, and their upload.
 *
 * Layouts (GGUF shapes, ne0 first; H heads, E n_embd, R kv_lora, P rope, N nope, V v, X experts):
 *   attn_q {E, H (N+P)}, or attn_q_a {E, q_lora} + attn_q_a_norm {q_lora} + attn_q_b {q_lora, H (N+P)};
 *   attn_kv_a_mqa {E, R + P} (outputs [latent | k_pe]), attn_kv_a_norm {R};
 *   MLA layout: attn_k_b {N, R, H} and attn_v_b {R, V, H}; legacy: attn_kv_b {R, H (N+V)}, where
 *   rows h (N+V) + [0, N) of head h are k_nope and the next V rows v, split into k_b / v_b here;
 *   attn_output {H V, E}; ffn_norm {E};
 *   dense layers (the first leading_dense_block_count): ffn_gate / ffn_up {E, n_ff}, ffn_down {n_ff, E};
 *   MoE layers: ffn_gate_inp {E, X}, optional exp_probs_b.bias {X}, ffn_gate_exps / ffn_up_exps
 *   {E, n_ff_exp, X}, ffn_down_exps {n_ff_exp, E, X}, and with shared experts ffn_gate_shexp /
 *   ffn_up_shexp {E, n_ff_exp n_shared}, ffn_down_shexp {n_ff_exp n_shared, E}.
 *
 * Tensor parallelism (vLLM's scheme for MLA): heads split over TP for q (q_b), k_b, v_b and the
 * columns of attn_output; q_a, kv_a and their norms replicated; the FFN width of the dense layers,
 * of every routed expert and of the shared experts split over TP (the first width % tp ranks one
 * row more); router, embeddings and norms replicated. With DCP and q_replicate a rank also
 * projects (and absorbs) the query heads of its whole DCP group.
 *
 * The graph loads a model layer by layer: dcp_ds2_layer_slice (host, GGUF bytes sliced and
 * repacked) then dcp_ds2_layer_upload (device), so that host memory holds one layer at a time. */
#ifndef DCP_MODEL_ARCH_DEEPSEEK2_WEIGHTS_H
#define DCP_MODEL_ARCH_DEEPSEEK2_WEIGHTS_H

#include <stdint.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model_config.h"
#include "dcpvk/ops.h"

/* ---- description and validation ------------------------------------------------------------- */

/* The tensors of one layer (borrowed from the open GGUF; NULL where the layout has none). */
typedef struct dcp_ds2_layer_tensors {
    const dcp_gguf_tensor *attn_norm;   /* {E} */
    const dcp_gguf_tensor *q;           /* attn_q {E, H (N+P)} (q_lora_rank 0) */
    const dcp_gguf_tensor *q_a;         /* attn_q_a {E, q_lora} */
    const dcp_gguf_tensor *q_a_norm;    /* attn_q_a_norm {q_lora} */
    const dcp_gguf_tensor *q_b;         /* attn_q_b {q_lora, H (N+P)} */
    const dcp_gguf_tensor *kv_a;        /* attn_kv_a_mqa {E, R + P} */
    const dcp_gguf_tensor *kv_a_norm;   /* attn_kv_a_norm {R} */
    const dcp_gguf_tensor *k_b;         /* attn_k_b {N, R, H} (MLA layout) */
    const dcp_gguf_tensor *v_b;         /* attn_v_b {R, V, H} (MLA layout) */
    const dcp_gguf_tensor *kv_b;        /* attn_kv_b {R, H (N+V)} (legacy layout) */
    const dcp_gguf_tensor *attn_output; /* {H V, E} */
    const dcp_gguf_tensor *ffn_norm;    /* {E} */
    const dcp_gguf_tensor *ffn_gate, *ffn_up, *ffn_down;       /* dense layers */
    const dcp_gguf_tensor *gate_inp;    /* ffn_gate_inp {E, X} (MoE layers) */
    const dcp_gguf_tensor *exp_probs_b; /* exp_probs_b.bias {X}, optional */
    const dcp_gguf_tensor *gate_exps, *up_exps, *down_exps;    /* MoE layers */
    const dcp_gguf_tensor *gate_shexp, *up_shexp, *down_shexp; /* MoE layers with shared experts */
    int moe;                            /* 1: MoE layer; 0: dense */
} dcp_ds2_layer_tensors;

/* The whole model's tensors. Created by dcp_ds2_tensors_find, freed by dcp_ds2_tensors_free; the
 * GGUF must outlive it. */
typedef struct dcp_ds2_tensors {
    const dcp_gguf_tensor *tok_embd;    /* {E, n_vocab} */
    const dcp_gguf_tensor *output_norm; /* {E} */
    const dcp_gguf_tensor *output;      /* {E, n_vocab}; tok_embd when the file has no output.weight */
    uint32_t n_layer;
    dcp_ds2_layer_tensors *layers;      /* [n_layer] */
    int legacy_kv_b;                    /* 1: attn_kv_b layout */
} dcp_ds2_tensors;

/* Finds and checks every tensor of a deepseek2 file described by cfg (dcp_model_config_read):
 * present (DCP_ERR_FORMAT "tensor blk.3.attn_k_b.weight is missing"), exact shape (DCP_ERR_FORMAT
 * naming the tensor, its shape and the expected one) and a type dcp-vk reads (DCP_ERR_UNSUPPORTED
 * naming the tensor and type). The layout follows cfg->mla_layout (attn_k_b / attn_v_b, else
 * attn_kv_b); a q_lora_rank > 0 needs attn_q_a / attn_q_a_norm / attn_q_b, else attn_q; layers
 * below n_layer_dense_lead need the dense FFN, the others the MoE tensors (shared-expert tensors
 * when n_expert_shared > 0). Tensors the model does not use are ignored. */
dcp_status dcp_ds2_tensors_find(const dcp_gguf *g, const dcp_model_config *cfg, dcp_ds2_tensors *out);
void dcp_ds2_tensors_free(dcp_ds2_tensors *t);

/* ---- tensor-parallel slices ------------------------------------------------------------------ */

/* What one rank holds: ranges of heads and of FFN rows (first index, count). */
typedef struct dcp_ds2_shard {
    uint32_t q_head0, q_heads;   /* heads of attn_q / attn_q_b rows and of k_b (query projection and
                                  * absorption): the rank's own heads, or its DCP group's with
                                  * q_replicate */
    uint32_t o_head0, o_heads;   /* the rank's own heads: v_b and attn_output's columns */
    uint32_t ff0, ff;            /* dense FFN rows */
    uint32_t fe0, fe;            /* rows of every routed expert's FFN */
    uint32_t fs0, fs;            /* rows of the shared experts' FFN (0 without shared experts) */
} dcp_ds2_shard;

/* The shard of TP rank `rank` of `tp`, with DCP groups of `dcp` consecutive ranks. Checks vLLM's
 * MLA rules: n_head % tp == 0, tp % dcp == 0 (DCP_ERR_CONFIG naming the sizes). */
dcp_status dcp_ds2_shard_for_rank(const dcp_model_config *cfg, uint32_t tp, uint32_t rank, uint32_t dcp,
                                  int q_replicate, dcp_ds2_shard *out);

/* A matrix in the byte layout dcp_matrix_create takes (rows of k elements of `type`, GGUF block
 * layout, rows contiguous). */
typedef struct dcp_ds2_host_matrix {
    dcp_ggml_type type;          /* the tensor's own type, or F32 where fused parts differ in type
                                  * (`expanded`) or a legacy k_b was transposed from a
                                  * block-quantised attn_kv_b */
    uint32_t rows, k;            /* k: columns of a stored row (with a window, the covering blocks) */
    uint8_t *data;               /* malloc'd */
    uint64_t file_bytes;         /* bytes of the file read to build it */
    uint32_t win_k, win_col0, win_cols; /* win_cols > 0: a column window (dcp_matrix_window): x of
                                  * win_k columns, its column c < win_cols meets stored column
                                  * win_col0 + c (a row-parallel slice that cuts its type's blocks) */
    int expanded;                /* 1: a quantized type held as F32 (fused parts of different types,
                                  * columns cutting its blocks, or the legacy attn_kv_b's k_b) */
    char expanded_why[112];      /* "blk.1.ffn_gate_exps.weight (Q4_K): fused parts of different types" */
    uint64_t native_bytes;       /* expanded: what its rows would take in their own types */
} dcp_ds2_host_matrix;

/* One layer's host slices for one shard. Shapes use the shard's counts: hq = q_heads,
 * ho = o_heads; *_pad = the column count rounded up to a multiple of 4 (zero columns). */
typedef struct dcp_ds2_layer_host {
    int moe;
    float *attn_norm;                /* [E] */
    dcp_ds2_host_matrix wq;          /* [hq (N+P)][E] (attn_q rows) or [hq (N+P)][q_lora] (attn_q_b) */
    dcp_ds2_host_matrix wq_a;        /* [q_lora][E], replicated (q_lora_rank > 0; else empty) */
    float *q_a_norm;                 /* [q_lora] or NULL */
    dcp_ds2_host_matrix wkv_a;       /* [R + P][E], replicated: kv = [latent | k_pe] */
    float *kv_a_norm;                /* [R] */
    dcp_ds2_host_matrix wk_b;        /* [hq R][N]: head h's W_UK^T, q_lat[h] = W_UK[h] q_nope[h] */
    dcp_ds2_host_matrix wv_b;        /* [ho V][R]: head h's W_UV, o[h] = W_UV[h] o_lat[h] */
    dcp_ds2_host_matrix wo;          /* [E][ho V pad]: attn_output columns of the own heads */
    float *ffn_norm;                 /* [E] */
    /* dense layers */
    dcp_ds2_host_matrix w_gu;        /* [2 ff][E]: gate rows then up rows */
    dcp_ds2_host_matrix w_down;      /* [E][ff pad] */
    /* MoE layers */
    dcp_ds2_host_matrix gate_inp;    /* [X][E] F32 (router logits; replicated) */
    float *exp_probs_b;              /* [X] or NULL */
    dcp_ds2_host_matrix w_gu_exps;   /* [X 2 fe][E]: expert e's gate rows then up rows at row 2 fe e */
    dcp_ds2_host_matrix w_down_exps; /* [X E][fe pad]: expert e's rows at row E e */
    dcp_ds2_host_matrix w_gu_sh;     /* [2 fs][E] (empty without shared experts) */
    dcp_ds2_host_matrix w_down_sh;   /* [E][fs pad] */
} dcp_ds2_layer_host;

/* Slices layer `layer` for shard s (host memory only). Errors name the tensor. */
dcp_status dcp_ds2_layer_slice(const dcp_model_config *cfg, const dcp_ds2_tensors *t, uint32_t layer,
                               const dcp_ds2_shard *s, dcp_ds2_layer_host *out);
void dcp_ds2_layer_host_free(dcp_ds2_layer_host *h);
/* Bytes of the file the slices of h read (its matrices; the norm vectors are read whole). */
uint64_t dcp_ds2_layer_file_bytes(const dcp_ds2_layer_host *h);

/* The replicated model-wide tensors. */
typedef struct dcp_ds2_global_host {
    dcp_ds2_host_matrix tok_embd;    /* [n_vocab][E] */
    float *output_norm;              /* [E] */
    dcp_ds2_host_matrix output;      /* [n_vocab][E] */
} dcp_ds2_global_host;

dcp_status dcp_ds2_global_slice(const dcp_model_config *cfg, const dcp_ds2_tensors *t, dcp_ds2_global_host *out);
void dcp_ds2_global_host_free(dcp_ds2_global_host *h);

/* ---- device weights --------------------------------------------------------------------------- */

/* One layer on one device (matrices as in dcp_ds2_layer_host; vectors f32 buffers). Created by
 * dcp_ds2_layer_upload, destroyed by dcp_ds2_layer_dev_destroy before the device. */
typedef struct dcp_ds2_layer_dev {
    int moe;
    dcp_buffer *attn_norm, *q_a_norm, *kv_a_norm, *ffn_norm, *exp_probs_b; /* NULL where absent */
    dcp_matrix wq, wq_a, wkv_a, wk_b, wv_b, wo;
    dcp_matrix w_gu, w_down;                               /* dense */
    dcp_matrix gate_inp, w_gu_exps, w_down_exps, w_gu_sh, w_down_sh; /* MoE */
} dcp_ds2_layer_dev;

dcp_status dcp_ds2_layer_upload(dcp_device *dev, const dcp_ds2_layer_host *h, uint32_t layer,
                                dcp_ds2_layer_dev *out);
void dcp_ds2_layer_dev_destroy(dcp_ds2_layer_dev *d);

/* Uploads one host matrix (error messages name `what`). */
dcp_status dcp_ds2_matrix_upload(dcp_device *dev, const dcp_ds2_host_matrix *m, const char *what, dcp_matrix *out);

#endif
