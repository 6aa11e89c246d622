/* Model hyperparameters read from GGUF metadata (`<arch>.*` keys).
 *
 * Filled for the `llama`, `qwen2`, `qwen3`, `phi3` (the llama family: GQA attention, SwiGLU FFN,
 * RMSNorm) and `deepseek2` architectures. The deepseek2 part (MLA attention and MoE feed-forward)
 * is zero for the llama family. */
#ifndef DCPVK_MODEL_CONFIG_H
#define DCPVK_MODEL_CONFIG_H

#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/gguf.h"
#include "dcpvk/ops.h" /* dcp_expert_gating, dcp_moe_route_args */
#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_model_arch {
    DCP_ARCH_LLAMA = 0,
    DCP_ARCH_DEEPSEEK2 = 1, /* MLA attention + MoE (DeepSeek-V2/V3, Kimi) */
    DCP_ARCH_QWEN2 = 2,     /* llama + Q/K/V biases, NEOX RoPE (Qwen2, Qwen2.5) */
    DCP_ARCH_QWEN3 = 3,     /* llama + per-head RMSNorm of Q and K before RoPE, NEOX RoPE */
    DCP_ARCH_PHI3 = 4,      /* llama with fused attn_qkv and gate|up (ffn_up), NEOX RoPE */
} dcp_model_arch;

/* The architectures dcp_model_config_read accepts, for messages. */
#define DCP_ARCH_SUPPORTED_LIST "llama, qwen2, qwen3, phi3, deepseek2"

/* RoPE frequency scaling (<arch>.rope.scaling.type). */
typedef enum dcp_rope_scaling {
    DCP_ROPE_SCALING_NONE = 0,   /* angle = pos * base^(-2i/n_rot) */
    DCP_ROPE_SCALING_LINEAR = 1, /* angle / factor (positions interpolated) */
    DCP_ROPE_SCALING_YARN = 2,   /* YaRN: per pair a ramp between the scaled and unscaled angle */
} dcp_rope_scaling;

typedef struct dcp_model_config {
    dcp_model_arch arch;
    char arch_name[32];      /* general.architecture */
    uint32_t n_embd;         /* <arch>.embedding_length */
    uint32_t n_layer;        /* <arch>.block_count */
    uint32_t n_head;         /* <arch>.attention.head_count (query heads) */
    uint32_t n_head_kv;      /* <arch>.attention.head_count_kv; default n_head */
    uint32_t head_dim;       /* <arch>.attention.key_length; default n_embd / n_head */
    uint32_t head_dim_v;     /* <arch>.attention.value_length; default head_dim */
    uint32_t n_ff;           /* <arch>.feed_forward_length */
    uint32_t n_ctx_train;    /* <arch>.context_length */
    uint32_t n_vocab;        /* <arch>.vocab_size, else length of tokenizer.ggml.tokens */
    uint32_t n_rot;          /* <arch>.rope.dimension_count; default head_dim */
    float rms_eps;           /* <arch>.attention.layer_norm_rms_epsilon */
    float rope_freq_base;    /* <arch>.rope.freq_base; default 10000 */
    /* deepseek2 (MLA + MoE), zero for llama. For deepseek2, head_dim / head_dim_v above are the
     * file's key_length / value_length: kv_lora + rope and kv_lora in files of the MLA layout
     * (attn_k_b / attn_v_b, with key_length_mla), nope + rope and v in legacy files (attn_kv_b);
     * n_head_kv is 1 (MLA layout) or n_head (legacy) and is not used. n_rot is the rope part of a
     * head (rope.dimension_count, required). The per-head sizes of the attention are below. */
    uint32_t q_lora_rank;    /* <arch>.attention.q_lora_rank; 0 (absent): no Q compression (attn_q) */
    uint32_t kv_lora_rank;   /* <arch>.attention.kv_lora_rank (required): latent width */
    uint32_t n_expert;       /* <arch>.expert_count: routed experts; 0 (absent): no MoE layers */
    uint32_t n_expert_used;  /* <arch>.expert_used_count: experts per token (required with experts) */
    uint32_t head_dim_qk;    /* nope + rope per query/key head: key_length_mla, else key_length */
    uint32_t head_dim_nope;  /* head_dim_qk - n_rot (> 0) */
    uint32_t head_dim_v_mla; /* value head size: value_length_mla, else value_length */
    uint32_t mla_layout;     /* 1: the file has key_length_mla (attn_k_b / attn_v_b tensors);
                              * 0: legacy (attn_kv_b, split into k_b / v_b at load) */
    uint32_t n_layer_dense_lead; /* <arch>.leading_dense_block_count: layers [0, n) have a dense
                                  * FFN (ffn_gate/up/down, n_ff wide), the rest MoE. Default 0 */
    uint32_t n_ff_exp;       /* <arch>.expert_feed_forward_length: one expert's FFN width
                              * (required with experts); a shared expert is n_ff_exp *
                              * n_expert_shared wide */
    uint32_t n_expert_shared;/* <arch>.expert_shared_count. Default 0 */
    float expert_weights_scale; /* <arch>.expert_weights_scale: routed weights multiplied by it.
                                 * Default (absent or 0) 1 */
    uint32_t expert_weights_norm; /* <arch>.expert_weights_norm: 1 renormalises the selected
                                   * weights to sum 1 (sum clamped below at 2^-14). Default 0 */
    dcp_expert_gating expert_gating; /* <arch>.expert_gating_func (1 softmax, 2 sigmoid; absent
                                      * or 0: softmax) */
    uint32_t n_expert_groups;      /* <arch>.expert_group_count: experts in groups of n_expert /
                                    * n_expert_groups; default 1 (no group limit) */
    uint32_t n_expert_groups_used; /* <arch>.expert_group_used_count: groups kept per token (by
                                    * the sum of each group's top 2 selection scores); default
                                    * n_expert_groups */
    /* RoPE scaling, every architecture (deepseek2: none or yarn): */
    dcp_rope_scaling rope_scaling; /* <arch>.rope.scaling.type ("none", "linear", "yarn"); default none */
    float rope_scaling_factor;     /* <arch>.rope.scaling.factor (context extension, >= 1 usually);
                                    * default 1 */
    uint32_t rope_n_ctx_orig;      /* <arch>.rope.scaling.original_context_length, tokens; default
                                    * n_ctx_train */
    float rope_yarn_log_mul;       /* <arch>.rope.scaling.yarn_log_multiplier as stored:
                                    * 0.1 * mscale_all_dim. Default 0 */
    float rope_yarn_beta_fast;     /* <arch>.rope.scaling.yarn_beta_fast, default 32 */
    float rope_yarn_beta_slow;     /* <arch>.rope.scaling.yarn_beta_slow, default 1 */
    /* Derived (deepseek2): */
    float attn_scale;        /* softmax scale of q.k: mscale^2 / sqrt(head_dim_qk), mscale = 1
                              * without YaRN, else rope_attn_factor * (1 + rope_yarn_log_mul *
                              * ln(factor)) (llama.cpp's deepseek2 convention). Never
                              * 1/sqrt(kv_lora + rope) */
    float rope_attn_factor;  /* magnitude of the rotation (cos, sin multiplied by it): 1, except
                              * under YaRN without a yarn_log_multiplier, where llama.cpp uses
                              * 1 + 0.1 ln(factor) */
    /* The llama family: */
    uint32_t rope_neox;      /* 1: NEOX RoPE, pairs (i, i + n_rot/2) (qwen2, qwen3, phi3); 0: NORM
                              * RoPE, adjacent pairs (llama, deepseek2) */
    uint32_t sliding_window; /* <arch>.attention.sliding_window, tokens; 0 (absent): none. The
                              * engine runs full attention, which is the same while the context
                              * fits in the window: a run state with a longer context is refused */
} dcp_model_config;

/* RoPE of one head part, in llama.cpp's NORM mode (adjacent pairs (2i, 2i+1), i < n_rot/2),
 * with the frequency scaling of the file. Filled from a config by dcp_rope_params_from_config. */
typedef struct dcp_rope_params {
    uint32_t n_rot;          /* rotated dims (even) */
    float freq_base;         /* theta_i = pos * freq_base^(-2i / n_rot) (unscaled angle) */
    dcp_rope_scaling scaling;
    float factor;            /* YaRN: context extension factor (the angle of an interpolated pair is
                              * divided by it); 1 for none */
    uint32_t n_ctx_orig;     /* YaRN: original context, tokens */
    float beta_fast, beta_slow; /* YaRN: correction dims of the ramp */
    float attn_factor;       /* magnitude multiplying cos and sin (config rope_attn_factor) */
    const float *freq_factors; /* [n_rot/2] f32 or NULL: each pair's unscaled angle is divided by
                              * its factor (Llama 3.x rope_freqs.weight); borrowed */
} dcp_rope_params;

/* The RoPE parameters of cfg (no frequency factors: the caller sets freq_factors). */
DCP_API void dcp_rope_params_from_config(const dcp_model_config *cfg, dcp_rope_params *out);

/* The (cos, sin) table of positions pos[0..n): cs [n][n_rot/2][2] f32, computed in double and
 * rounded once. Pair i at position p has angle theta = p * base^(-2i/n_rot) (divided by
 * freq_factors[i] when given); linear scaling divides it by factor; under YaRN, with
 * the correction dims [lo, hi] = [max(0, floor(c(beta_fast))),
 * min(n_rot - 1, ceil(c(beta_slow)))], c(b) = n_rot ln(n_ctx_orig / (2 pi b)) / (2 ln base), and
 * ramp r = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1): theta (1 - r) / factor + theta r
 * (no magnitude scaling beyond attn_factor). cos and sin are multiplied by attn_factor.
 * Thread-safe. */
DCP_API void dcp_rope_cs(const dcp_rope_params *rope, const uint32_t *pos, uint32_t n, float *cs);

/* Reads and checks the hyperparameters (all counts > 0, n_head_kv divides n_head, head sizes
 * consistent, n_rot <= head_dim and even; deepseek2: the MLA and MoE keys above, key_length =
 * kv_lora + rope and value_length = kv_lora when key_length_mla is present, expert counts and
 * groups consistent). A missing required key or an inconsistent value gives DCP_ERR_FORMAT naming
 * the key and the file; an architecture other than those of DCP_ARCH_SUPPORTED_LIST (named, with
 * the list), or a rope scaling type or gating function (dcp_expert_gating) other than those above, gives
 * DCP_ERR_UNSUPPORTED. */
DCP_API dcp_status dcp_model_config_read(const dcp_gguf *g, dcp_model_config *out);

/* The routing of a model config's MoE layer (tokens, logits and outputs still to be set). */
DCP_API void dcp_moe_route_args_from_config(const dcp_model_config *cfg, dcp_moe_route_args *out);

#ifdef __cplusplus
}
#endif
#endif
