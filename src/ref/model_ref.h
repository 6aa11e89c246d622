/* CPU references of the model kernels and of a whole llama-family decode step (llama, qwen2,
 * qwen3, phi3: biases, Q/K norms, NEOX RoPE and scaled frequencies), accumulating in double:
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

/* RoPE with the frequency scaling of GGUF models, angles in double (the reference of
 * src/model/rope.c and of rope_store's NEOX mode). Pair i < n_rot/2 turns by
 *   theta_i = pos * base^(-2i/n_rot) / freq_factors[i]    (factor 1 without freq_factors)
 * divided by `factor` for linear scaling; under YaRN mixed per pair between theta_i / factor and
 * theta_i by the ramp r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) with lo = max(0,
 * floor(c(beta_fast))), hi = min(n_rot - 1, ceil(c(beta_slow))), c(b) = n_rot ln(n_ctx_orig /
 * (2 pi b)) / (2 ln base): theta_i ((1 - r_i) / factor + r_i). cos and sin are multiplied by
 * mscale. NORM mode rotates elements (2i, 2i+1), NEOX mode (i, i + n_rot/2). */
typedef struct dcp_ref_rope_cfg {
    uint32_t n_rot;
    double base;
    int neox;                  /* 0 NORM, 1 NEOX */
    const float *freq_factors; /* [n_rot/2] or NULL */
    int scaling;               /* 0 none, 1 linear, 2 yarn */
    double factor;             /* linear / yarn factor (1 for none) */
    uint32_t n_ctx_orig;       /* yarn: original context */
    double beta_fast, beta_slow;
    double mscale;             /* magnitude of cos and sin (1 unless yarn) */
} dcp_ref_rope_cfg;

/* Rotates x [heads][head_dim] in place at position pos. */
void dcp_ref_rope_ex(const dcp_ref_rope_cfg *c, uint32_t heads, uint32_t head_dim, uint32_t pos, float *x);

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
    /* llama-family variants, NULL when absent: */
    const float *bq, *bk, *bv;     /* qwen2: biases [n_head * head_dim], [n_head_kv * head_dim] x 2 */
    const float *q_norm, *k_norm;  /* qwen3: per-head RMSNorm weights [head_dim], before RoPE */
} dcp_ref_llama_layer;

typedef struct dcp_ref_llama {
    uint32_t n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_rot, n_ctx;
    float rms_eps, rope_base;
    const float *tok_embd;             /* [n_vocab][n_embd] */
    const float *output_norm;          /* [n_embd] */
    const float *output;               /* [n_vocab][n_embd] */
    const dcp_ref_llama_layer *layers; /* [n_layer] */
    float *k_cache, *v_cache;          /* [n_layer][n_ctx][n_head_kv][head_dim] each */
    /* RoPE beyond plain NORM mode with base rope_base (all zero: that; rope.base unused, n_rot
     * and rope_base above rule): */
    dcp_ref_rope_cfg rope;             /* used when rope.n_rot != 0 */
} dcp_ref_llama;

/* One decode step: token at position pos (< n_ctx; positions 0..pos-1 must have been stepped);
 * writes its K/V into the cache and logits [n_vocab] f32. */
void dcp_ref_llama_step(dcp_ref_llama *m, int32_t token, uint32_t pos, float *logits);

#endif
