/* CPU references of the model kernels and of a whole llama decode step, accumulating in double:
 * the oracle of tests/test_ops.c and tests/test_llama.c. Single-threaded, no global state. */
#ifndef DCP_MODEL_REF_H
#define DCP_MODEL_REF_H

#include <stdint.h>

/* y [tokens][rows] (+)= x [tokens][k] times W^T, W [rows][k] f32 (dequantised). */
void dcp_ref_matmul(uint32_t rows, uint32_t k, uint32_t tokens, const float *w, const float *x,
                    float *y, int accumulate);

/* y [tokens][n] = x / sqrt(mean(x^2) + eps) * w, x [tokens][n], w [n]. */
void dcp_ref_rmsnorm(uint32_t n, uint32_t tokens, const float *x, const float *w, float eps, float *y);

/* llama "normal" RoPE in place on x [heads][head_dim] at position pos: pair (2i, 2i+1),
 * i < n_rot/2, rotated by pos * base^(-2i/n_rot) radians (angle in double). */
void dcp_ref_rope(uint32_t heads, uint32_t head_dim, uint32_t n_rot, uint32_t pos, float base, float *x);

/* y [tokens][n] = silu(x[:, :n]) * x[:, n:2n], x [tokens][2n]. */
void dcp_ref_swiglu(uint32_t n, uint32_t tokens, const float *x, float *y);

/* Smallest index of the largest non-NaN value of x [n] (0 if all NaN). */
uint32_t dcp_ref_argmax(uint32_t n, const float *x);

/* A llama model held as f32 host arrays (GGUF layouts: every matrix [out][in], in contiguous),
 * and its KV cache. The pointers are borrowed; k_cache/v_cache are written by the step. */
typedef struct dcp_ref_llama_layer {
    const float *attn_norm;  /* [n_embd] */
    const float *wq;         /* [n_head * head_dim][n_embd] */
    const float *wk, *wv;    /* [n_head_kv * head_dim][n_embd] */
    const float *wo;         /* [n_embd][n_head * head_dim] */
    const float *ffn_norm;   /* [n_embd] */
    const float *w_gate;     /* [n_ff][n_embd] */
    const float *w_up;       /* [n_ff][n_embd] */
    const float *w_down;     /* [n_embd][n_ff] */
} dcp_ref_llama_layer;

typedef struct dcp_ref_llama {
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_rot, n_ctx;
    float rms_eps, rope_base;
    const float *tok_embd;             /* [n_vocab][n_embd] */
    const float *output_norm;          /* [n_embd] */
    const float *output;               /* [n_vocab][n_embd] */
    const dcp_ref_llama_layer *layers; /* [n_layer] */
    float *k_cache, *v_cache;          /* [n_layer][n_ctx][n_head_kv][head_dim] each */
} dcp_ref_llama;

/* One decode step: token at position pos (< n_ctx; positions 0..pos-1 must have been stepped);
 * writes its K/V into the cache and logits [n_vocab] f32. */
void dcp_ref_llama_step(dcp_ref_llama *m, int32_t token, uint32_t pos, float *logits);

#endif
