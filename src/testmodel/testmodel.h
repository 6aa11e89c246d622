/* The project's deterministic test models: llama-family and deepseek2 GGUF files generated from a
 * seed (library dcpvk_testmodel, src/testmodel/; not part of libdcpvk and not installed). Used by
 * the tests, dcp-vk-gguf --make-model, dcp-vk-run without -m, the benchmarks and the fuzz targets. */
#ifndef DCP_TESTMODEL_TESTMODEL_H
#define DCP_TESTMODEL_TESTMODEL_H

#include <stdint.h>

#include "dcpvk/gguf.h"

/* Shapes of a generated model. Weights are drawn from a SplitMix64 stream seeded by `seed`,
 * uniform in [-1/sqrt(fan_in), +1/sqrt(fan_in)); norm weights are 1 + U(-0.1, 0.1). The same
 * config gives the same bytes on every machine. The vocabulary is built in (see
 * dcp_test_model_vocab_size): <unk>, <s>, </s>, 256 byte tokens, printable ASCII characters and
 * common English word pieces, SentencePiece style (`llama` tokenizer), padded with <unused_N>
 * tokens to a multiple of 64. */
typedef struct dcp_test_model_config {
    const char *arch;         /* architecture: "llama", "qwen2" (+ Q/K/V biases), "qwen3" (+ Q/K
                                 per-head norms), "phi3" (fused attn_qkv, gate|up in ffn_up).
                                 Default "llama" */
    const char *name;         /* general.name. Default "dcp-vk-test" */
    uint32_t n_embd;          /* embedding size. Default 256 */
    uint32_t n_layer;         /* blocks. Default 4 */
    uint32_t n_head;          /* query heads. Default 16 */
    uint32_t n_head_kv;       /* KV heads (divides n_head). Default 4: TP 8 with DCP 2 fits vLLM's rules */
    uint32_t head_dim;        /* per head; 0 = n_embd / n_head. Default 16 */
    uint32_t n_ff;            /* FFN hidden size. Default 768 */
    uint32_t n_ctx;           /* context_length. Default 4096 */
    float rms_eps;            /* RMS norm epsilon. Default 1e-5 */
    float rope_base;          /* RoPE frequency base. Default 10000 */
    dcp_ggml_type weight_type;/* matrices (norms stay F32): any type of DCP_GGML_SUPPORTED_LIST whose
                                 block divides n_embd, n_ff and n_head*head_dim. Default F32 */
    uint64_t seed;            /* Default 1234 */
    int ffn_up_own_type;      /* 1: ffn_up.weight in ffn_up_type instead (llama, qwen2, qwen3: gate
                                 and up of different types; its block divides n_embd). Default 0 */
    dcp_ggml_type ffn_up_type;
    /* RoPE scaling and Mistral's window (every llama-family arch): */
    int rope_freqs;           /* 1: write rope_freqs.weight [head_dim/2], Llama 3.x-style factors
                                 rising from 1 (fast pairs) to 8 (slow pairs). Default 0 */
    const char *rope_scaling; /* NULL or "none", "linear", "yarn": <arch>.rope.scaling.type.
                                 Default NULL (not written) */
    float rope_scale;         /* rope.scaling.factor with rope_scaling (yarn: original context
                                 n_ctx / factor). Default 0 */
    uint32_t sliding_window;  /* > 0: <arch>.attention.sliding_window (Mistral). Default 0 */
    int tie_output;           /* 1: no output.weight, the head reads token_embd.weight (Llama 3.2
                                 1B, Qwen2.5 0.5B). Default 0 */
} dcp_test_model_config;

#define DCP_TEST_MODEL_CONFIG_DEFAULT                                                              \
    {.arch = "llama", .name = "dcp-vk-test", .n_embd = 256, .n_layer = 4, .n_head = 16,            \
     .n_head_kv = 4, .head_dim = 16, .n_ff = 768, .n_ctx = 4096, .rms_eps = 1e-5f,                 \
     .rope_base = 10000.0f, .weight_type = DCP_GGML_TYPE_F32, .seed = 1234}

/* Number of tokens of the built-in vocabulary. */
uint32_t dcp_test_model_vocab_size(void);

/* Generates a test model and writes it to path as GGUF v3. cfg NULL = defaults. Checks the
 * config (DCP_ERR_INVALID_ARGUMENT naming the field). Thread-safe. */
dcp_status dcp_gguf_make_test_model(const char *path, const dcp_test_model_config *cfg);

/* Same, into a writer the caller then writes or inspects (the caller destroys it). */
dcp_status dcp_gguf_build_test_model(const dcp_test_model_config *cfg, dcp_gguf_writer **out);

/* ---- deepseek2 test models (MLA attention + MoE) --------------------------------------------- */

/* Shapes and features of a generated deepseek2 model. The defaults (variant A) have pairwise
 * distinct dimensions so that a swapped axis fails: n_embd 64, 4 heads (TP up to 4 splits them),
 * kv_lora 32, rope 16, nope 24, v 20, dense FFN 72, 6 experts of width 56 (2 used, 1 shared),
 * 2 layers (one dense, one MoE), the built-in vocabulary. Weights are drawn from one SplitMix64
 * stream in the same order for every layout, scaled so that the attention and router softmaxes
 * are neither flat nor one-hot. Matrices in weight_type (F32 or F16), norms and router in F32. */
typedef struct dcp_test_deepseek2_config {
    const char *name;          /* general.name. Default "dcp-vk-test-deepseek2" */
    uint32_t n_embd;           /* Default 64 */
    uint32_t n_layer;          /* Default 2 */
    uint32_t n_layer_dense;    /* leading dense layers (<= n_layer). Default 1 */
    uint32_t n_head;           /* Default 4 */
    uint32_t q_lora_rank;      /* 0: attn_q; else attn_q_a / attn_q_a_norm / attn_q_b. Default 0 */
    uint32_t kv_lora_rank;     /* latent width, multiple of 4. Default 32 */
    uint32_t n_rot;            /* rope part of a head, multiple of 4. Default 16 */
    uint32_t head_dim_nope;    /* non-rope part of a query/key head, multiple of 4. Default 24 */
    uint32_t head_dim_v;       /* value head, multiple of 4. Default 20 */
    uint32_t n_ff;             /* dense FFN width. Default 72 */
    uint32_t n_expert;         /* routed experts. Default 6 */
    uint32_t n_expert_used;    /* Default 2 */
    uint32_t n_expert_shared;  /* Default 1 */
    uint32_t n_ff_exp;         /* expert FFN width. Default 56 */
    uint32_t n_ctx;            /* context_length. Default 4096 */
    int legacy_kv_b;           /* 1: the legacy layout (attn_kv_b, no key_length_mla). Default 0 */
    uint32_t gating_func;      /* expert_gating_func: 1 softmax, 2 sigmoid. Default 1 */
    int exp_probs_b;           /* 1: write exp_probs_b.bias (selection bias). Default 0 */
    int weights_norm;          /* expert_weights_norm. Default 0 */
    float weights_scale;       /* expert_weights_scale. Default 1 */
    uint32_t n_expert_groups;  /* expert_group_count (0 or 1: not written). Default 0 */
    uint32_t n_expert_groups_used; /* expert_group_used_count. Default 0 */
    float yarn_factor;         /* > 0: rope.scaling.type yarn with this factor. Default 0 (none) */
    uint32_t yarn_orig_ctx;    /* rope.scaling.original_context_length. Default 0 */
    float yarn_log_mul;        /* rope.scaling.yarn_log_multiplier (0.1 * mscale_all_dim). Default 0 */
    float yarn_beta_fast, yarn_beta_slow; /* Defaults 32, 1 */
    float rms_eps;             /* Default 1e-6 */
    float rope_base;           /* Default 10000 */
    dcp_ggml_type weight_type; /* F32 or F16. Default F32 */
    uint64_t seed;             /* Default 4242 */
} dcp_test_deepseek2_config;

/* The named configurations of the deepseek2 tests:
 *   'A': the DeepSeek-V2-Lite layout: attn_q, attn_k_b / attn_v_b, softmax gating, no YaRN;
 *   'B': every feature: q_lora 40, YaRN (factor 4, original context 32, log multiplier 0.0707,
 *        beta 32 / 1), sigmoid gating with exp_probs_b, expert_weights_norm, scale 2.5, 3 expert
 *        groups of 2 with 2 used;
 *   'C': A in the legacy attn_kv_b layout, from the same draw (the same logits as A).
 * DCP_ERR_INVALID_ARGUMENT for another letter. */
dcp_status dcp_test_deepseek2_preset(char variant, dcp_test_deepseek2_config *out);

/* Generates a deepseek2 test model into a writer (the caller destroys it) or a file. Checks the
 * config (DCP_ERR_INVALID_ARGUMENT naming the field). Thread-safe. */
dcp_status dcp_gguf_build_test_model_deepseek2(const dcp_test_deepseek2_config *cfg, dcp_gguf_writer **out);
dcp_status dcp_gguf_make_test_model_deepseek2(const char *path, const dcp_test_deepseek2_config *cfg);
/* Generates a test model in memory and opens it, writing nothing to disk: the handle owns the
 * bytes (freed by dcp_gguf_close); its name is "<generated test model>". cfg NULL = defaults. */
dcp_status dcp_gguf_open_test_model(const dcp_test_model_config *cfg, dcp_gguf **out);

/* ---- draft models (speculative decoding) ----------------------------------------------------- */

/* A copy of the model src cut to its first n_layer blocks (every key copied but block_count, and
 * leading_dense_block_count when it exceeds n_layer; the tensors of later blocks left out): the
 * same embedding, output head and vocabulary, so a cheap draft that often agrees with src. With
 * rename_token >= 0, that token's text in tokenizer.ggml.tokens becomes "<dcp-vk-renamed>" (a
 * vocabulary a draft must be refused for). Into a writer the caller writes and destroys.
 * DCP_ERR_INVALID_ARGUMENT for n_layer 0 or more than src has. */
dcp_status dcp_test_model_cut_layers(const dcp_gguf *src, uint32_t n_layer, int64_t rename_token,
                                     dcp_gguf_writer **out);

#endif
