/* Model hyperparameters read from GGUF metadata (`<arch>.*` keys).
 *
 * Filled for the `llama` architecture today; the MLA fields are laid out for `deepseek2`, whose
 * reader will fill them later (they are zero for llama). */
#ifndef DCPVK_MODEL_CONFIG_H
#define DCPVK_MODEL_CONFIG_H

#include <stdint.h>

#include "dcpvk/gguf.h"
#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dcp_model_arch {
    DCP_ARCH_LLAMA = 0,
    DCP_ARCH_DEEPSEEK2 = 1, /* recognised by name; not read yet (DCP_ERR_UNSUPPORTED) */
} dcp_model_arch;

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
    /* deepseek2 (MLA), zero for llama: */
    uint32_t q_lora_rank;    /* <arch>.attention.q_lora_rank */
    uint32_t kv_lora_rank;   /* <arch>.attention.kv_lora_rank */
    uint32_t n_expert;       /* <arch>.expert_count */
    uint32_t n_expert_used;  /* <arch>.expert_used_count */
} dcp_model_config;

/* Reads and checks the hyperparameters (all counts > 0, n_head_kv divides n_head, head sizes
 * consistent, n_rot <= head_dim and even). A missing required key gives DCP_ERR_FORMAT naming
 * the key and the file; an architecture other than llama gives DCP_ERR_UNSUPPORTED. */
dcp_status dcp_model_config_read(const dcp_gguf *g, dcp_model_config *out);

#ifdef __cplusplus
}
#endif
#endif
