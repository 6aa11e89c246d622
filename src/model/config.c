/* Model hyperparameters from GGUF metadata, and the MoE routing arguments of a config
 * (include/dcpvk/model_config.h). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/model_config.h"

typedef unsigned long long ull;

/* Reads <arch>.<suffix> as a u32 in [1, 2^31). required == false: *out = def when absent. */
static dcp_status get_u32(const dcp_gguf *g, const char *arch, const char *suffix, bool required,
                          uint32_t def, uint32_t *out)
{
    char key[128];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!dcp_gguf_kv_find(g, key)) {
        if (required)
            return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key '%s'", dcp_gguf_name(g), key);
        *out = def;
        return DCP_OK;
    }
    dcp_status st = dcp_gguf_get_uint(g, key, &v);
    if (st) return st;
    if (v == 0 || v > 0x7fffffffu)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: key '%s' = %llu is out of range "
                        "[1, 2^31)", dcp_gguf_name(g), (ull)dcp_gguf_kv_find(g, key)->offset, key,
                        (ull)v);
    *out = (uint32_t)v;
    return DCP_OK;
}

static dcp_status get_f32(const dcp_gguf *g, const char *arch, const char *suffix, bool required,
                          float def, float *out)
{
    char key[128];
    double v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!dcp_gguf_kv_find(g, key)) {
        if (required)
            return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key '%s'", dcp_gguf_name(g), key);
        *out = def;
        return DCP_OK;
    }
    dcp_status st = dcp_gguf_get_float(g, key, &v);
    if (st) return st;
    if (!(v > 0.0) || v > 1e30)
        return dcp_fail(DCP_ERR_FORMAT, "%s: key '%s' = %g is not a positive finite number",
                        dcp_gguf_name(g), key, v);
    *out = (float)v;
    return DCP_OK;
}

/* Reads <arch>.<suffix> as a u32 in [0, 2^31); *out = def when absent. */
static dcp_status get_u32_or_zero(const dcp_gguf *g, const char *arch, const char *suffix, uint32_t def,
                                  uint32_t *out)
{
    char key[128];
    uint64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!dcp_gguf_kv_find(g, key)) {
        *out = def;
        return DCP_OK;
    }
    dcp_status st = dcp_gguf_get_uint(g, key, &v);
    if (st) return st;
    if (v > 0x7fffffffu)
        return dcp_fail(DCP_ERR_FORMAT, "%s: key '%s' = %llu is out of range [0, 2^31)", dcp_gguf_name(g), key,
                        (ull)v);
    *out = (uint32_t)v;
    return DCP_OK;
}

/* Reads <arch>.<suffix> as a finite float >= 0; *out = def when absent. */
static dcp_status get_f32_or_zero(const dcp_gguf *g, const char *arch, const char *suffix, float def, float *out)
{
    char key[128];
    double v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!dcp_gguf_kv_find(g, key)) {
        *out = def;
        return DCP_OK;
    }
    dcp_status st = dcp_gguf_get_float(g, key, &v);
    if (st) return st;
    if (!(v >= 0.0) || v > 1e30)
        return dcp_fail(DCP_ERR_FORMAT, "%s: key '%s' = %g is not a finite number >= 0", dcp_gguf_name(g), key, v);
    *out = (float)v;
    return DCP_OK;
}

static bool has_key(const dcp_gguf *g, const char *arch, const char *suffix)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return dcp_gguf_kv_find(g, key) != NULL;
}

/* The deepseek2 part: MLA head sizes, MoE, rope scaling (see include/dcpvk/model_config.h). */
static dcp_status read_deepseek2(const dcp_gguf *g, const char *arch, dcp_model_config *c)
{
    dcp_status st;
    const char *name = dcp_gguf_name(g);
    if (!has_key(g, arch, "rope.dimension_count"))
        return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key '%s.rope.dimension_count' (the rope part "
                        "of a deepseek2 head)", name, arch);
    if (!has_key(g, arch, "attention.key_length") || !has_key(g, arch, "attention.value_length"))
        return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key '%s.attention.%s'", name, arch,
                        has_key(g, arch, "attention.key_length") ? "value_length" : "key_length");
    if ((st = get_u32_or_zero(g, arch, "attention.q_lora_rank", 0, &c->q_lora_rank))) return st;
    if ((st = get_u32(g, arch, "attention.kv_lora_rank", true, 0, &c->kv_lora_rank))) return st;
    c->mla_layout = has_key(g, arch, "attention.key_length_mla") ? 1u : 0u;
    if (c->mla_layout != (has_key(g, arch, "attention.value_length_mla") ? 1u : 0u))
        return dcp_fail(DCP_ERR_FORMAT, "%s: '%s.attention.key_length_mla' and '%s.attention.value_length_mla' "
                        "must be present together", name, arch, arch);
    if (c->mla_layout) {
        if ((st = get_u32(g, arch, "attention.key_length_mla", true, 0, &c->head_dim_qk))) return st;
        if ((st = get_u32(g, arch, "attention.value_length_mla", true, 0, &c->head_dim_v_mla))) return st;
        if (c->head_dim != c->kv_lora_rank + c->n_rot || c->head_dim_v != c->kv_lora_rank)
            return dcp_fail(DCP_ERR_FORMAT, "%s: %s.attention.key_length = %u and value_length = %u must be "
                            "kv_lora_rank + rope = %u and kv_lora_rank = %u in a file with key_length_mla",
                            name, arch, c->head_dim, c->head_dim_v, c->kv_lora_rank + c->n_rot, c->kv_lora_rank);
    } else {
        c->head_dim_qk = c->head_dim;
        c->head_dim_v_mla = c->head_dim_v;
    }
    if (c->head_dim_qk <= c->n_rot)
        return dcp_fail(DCP_ERR_FORMAT, "%s: %s.rope.dimension_count = %u leaves no non-rope part of the %u-wide "
                        "query/key head", name, arch, c->n_rot, c->head_dim_qk);
    c->head_dim_nope = c->head_dim_qk - c->n_rot;

    if ((st = get_u32_or_zero(g, arch, "expert_count", 0, &c->n_expert))) return st;
    if ((st = get_u32_or_zero(g, arch, "leading_dense_block_count", 0, &c->n_layer_dense_lead))) return st;
    if ((st = get_u32_or_zero(g, arch, "expert_shared_count", 0, &c->n_expert_shared))) return st;
    if (c->n_layer_dense_lead > c->n_layer)
        return dcp_fail(DCP_ERR_FORMAT, "%s: %s.leading_dense_block_count = %u exceeds block_count = %u", name, arch,
                        c->n_layer_dense_lead, c->n_layer);
    c->expert_weights_scale = 1.0f;
    c->expert_gating = DCP_EXPERT_GATING_SOFTMAX;
    c->n_expert_groups = 1;
    c->n_expert_groups_used = 1;
    if (c->n_layer_dense_lead < c->n_layer && c->n_expert == 0)
        return dcp_fail(DCP_ERR_FORMAT, "%s: layers %u..%u are MoE layers (leading_dense_block_count = %u) but "
                        "'%s.expert_count' is missing or 0", name, c->n_layer_dense_lead, c->n_layer - 1,
                        c->n_layer_dense_lead, arch);
    if (c->n_expert) {
        if ((st = get_u32(g, arch, "expert_used_count", true, 0, &c->n_expert_used))) return st;
        if ((st = get_u32(g, arch, "expert_feed_forward_length", true, 0, &c->n_ff_exp))) return st;
        if (c->n_expert_used > c->n_expert)
            return dcp_fail(DCP_ERR_FORMAT, "%s: %s.expert_used_count = %u exceeds expert_count = %u", name, arch,
                            c->n_expert_used, c->n_expert);
        float sc = 1.0f;
        if ((st = get_f32_or_zero(g, arch, "expert_weights_scale", 1.0f, &sc))) return st;
        c->expert_weights_scale = sc > 0.0f ? sc : 1.0f;
        char key[128];
        snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
        if (dcp_gguf_kv_find(g, key)) {
            bool b;
            if ((st = dcp_gguf_get_bool(g, key, &b))) return st;
            c->expert_weights_norm = b ? 1u : 0u;
        }
        uint32_t gf;
        if ((st = get_u32_or_zero(g, arch, "expert_gating_func", 0, &gf))) return st;
        if (gf > 2)
            return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: %s.expert_gating_func = %u is not supported (1 softmax, "
                            "2 sigmoid)", name, arch, gf);
        c->expert_gating = gf == 2 ? DCP_EXPERT_GATING_SIGMOID : DCP_EXPERT_GATING_SOFTMAX;
        if ((st = get_u32_or_zero(g, arch, "expert_group_count", 1, &c->n_expert_groups))) return st;
        if (c->n_expert_groups == 0) c->n_expert_groups = 1;
        if ((st = get_u32_or_zero(g, arch, "expert_group_used_count", c->n_expert_groups,
                                  &c->n_expert_groups_used)))
            return st;
        uint32_t ng = c->n_expert_groups, per = c->n_expert / ng;
        if (c->n_expert % ng || (ng > 1 && per < 2))
            return dcp_fail(DCP_ERR_FORMAT, "%s: %s.expert_group_count = %u must divide expert_count = %u into "
                            "groups of at least 2 experts", name, arch, ng, c->n_expert);
        if (c->n_expert_groups_used == 0 || c->n_expert_groups_used > ng ||
            c->n_expert_used > c->n_expert_groups_used * per)
            return dcp_fail(DCP_ERR_FORMAT, "%s: %s.expert_group_used_count = %u must be in 1..%u and keep at "
                            "least expert_used_count = %u experts (%u per group)", name, arch,
                            c->n_expert_groups_used, ng, c->n_expert_used, per);
    }

    /* Attention scale, as llama.cpp's deepseek2 graph computes it: a yarn_log_multiplier of
     * 0.1 * mscale_all_dim gives mscale = 1 + 0.1 mscale_all_dim ln(factor) (the rotation
     * magnitude is then 1, read_rope_scaling); without it mscale is the magnitude
     * 1 + 0.1 ln(factor) (factor > 1). */
    double f = c->rope_scaling_factor, mscale = 1.0;
    if (c->rope_scaling == DCP_ROPE_SCALING_YARN)
        mscale = c->rope_attn_factor * (1.0 + (double)c->rope_yarn_log_mul * log(f));
    c->attn_scale = (float)(mscale * mscale / sqrt((double)c->head_dim_qk));
    return DCP_OK;
}

/* <arch>.rope.scaling.*: the type (none, linear, yarn; deepseek2: none, yarn), its factor and the
 * YaRN parameters, and the rotation magnitude (1; under YaRN without a yarn_log_multiplier
 * 1 + 0.1 ln(factor), as ggml's YaRN rotation scales cos and sin). */
static dcp_status read_rope_scaling(const dcp_gguf *g, const char *arch, dcp_model_config *c)
{
    dcp_status st;
    const char *name = dcp_gguf_name(g);
    c->rope_scaling = DCP_ROPE_SCALING_NONE;
    c->rope_scaling_factor = 1.0f;
    c->rope_n_ctx_orig = c->n_ctx_train;
    c->rope_yarn_beta_fast = 32.0f;
    c->rope_yarn_beta_slow = 1.0f;
    c->rope_attn_factor = 1.0f;
    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if (dcp_gguf_kv_find(g, key)) {
        const char *type;
        const bool ds2 = c->arch == DCP_ARCH_DEEPSEEK2;
        if ((st = dcp_gguf_get_string(g, key, &type, NULL))) return st;
        if (strcmp(type, "yarn") == 0) c->rope_scaling = DCP_ROPE_SCALING_YARN;
        else if (strcmp(type, "linear") == 0 && !ds2) c->rope_scaling = DCP_ROPE_SCALING_LINEAR;
        else if (strcmp(type, "none") != 0)
            return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: %s = '%.32s' is not supported for %s (%s)", name, key, type,
                            arch, ds2 ? "none, yarn" : "none, linear, yarn");
    }
    if (c->rope_scaling == DCP_ROPE_SCALING_NONE) return DCP_OK;
    if ((st = get_f32(g, arch, "rope.scaling.factor", false, 1.0f, &c->rope_scaling_factor))) return st;
    if (c->rope_scaling == DCP_ROPE_SCALING_LINEAR) return DCP_OK;
    if ((st = get_u32(g, arch, "rope.scaling.original_context_length", false, c->n_ctx_train, &c->rope_n_ctx_orig)))
        return st;
    if ((st = get_f32_or_zero(g, arch, "rope.scaling.yarn_log_multiplier", 0.0f, &c->rope_yarn_log_mul))) return st;
    if ((st = get_f32(g, arch, "rope.scaling.yarn_beta_fast", false, 32.0f, &c->rope_yarn_beta_fast))) return st;
    if ((st = get_f32(g, arch, "rope.scaling.yarn_beta_slow", false, 1.0f, &c->rope_yarn_beta_slow))) return st;
    double f = c->rope_scaling_factor;
    if (c->rope_yarn_log_mul == 0.0f && f > 1.0) c->rope_attn_factor = (float)(1.0 + 0.1 * log(f));
    return DCP_OK;
}

dcp_status dcp_model_config_read(const dcp_gguf *g, dcp_model_config *out)
{
    dcp_status st;
    dcp_model_config c;
    const char *arch;
    const char *name = dcp_gguf_name(g);
    memset(&c, 0, sizeof c);
    if (!dcp_gguf_kv_find(g, "general.architecture"))
        return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key 'general.architecture'", name);
    if ((st = dcp_gguf_get_string(g, "general.architecture", &arch, NULL))) return st;
    static const struct { const char *name; dcp_model_arch arch; } archs[] = {
        {"llama", DCP_ARCH_LLAMA}, {"qwen2", DCP_ARCH_QWEN2}, {"qwen3", DCP_ARCH_QWEN3},
        {"phi3", DCP_ARCH_PHI3},   {"deepseek2", DCP_ARCH_DEEPSEEK2}};
    size_t ai = 0;
    while (ai < sizeof archs / sizeof archs[0] && strcmp(arch, archs[ai].name) != 0) ai++;
    if (ai == sizeof archs / sizeof archs[0])
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: architecture '%.64s' is not supported (supported: "
                        DCP_ARCH_SUPPORTED_LIST ")", name, arch);
    c.arch = archs[ai].arch;
    snprintf(c.arch_name, sizeof c.arch_name, "%s", arch);

    if ((st = get_u32(g, arch, "embedding_length", true, 0, &c.n_embd))) return st;
    if ((st = get_u32(g, arch, "block_count", true, 0, &c.n_layer))) return st;
    if ((st = get_u32(g, arch, "attention.head_count", true, 0, &c.n_head))) return st;
    if ((st = get_u32(g, arch, "attention.head_count_kv", false, c.n_head, &c.n_head_kv))) return st;
    if ((st = get_u32(g, arch, "feed_forward_length", true, 0, &c.n_ff))) return st;
    if ((st = get_u32(g, arch, "context_length", true, 0, &c.n_ctx_train))) return st;
    if ((st = get_f32(g, arch, "attention.layer_norm_rms_epsilon", true, 0, &c.rms_eps))) return st;
    if ((st = get_f32(g, arch, "rope.freq_base", false, 10000.0f, &c.rope_freq_base))) return st;
    if (c.n_head % c.n_head_kv)
        return dcp_fail(DCP_ERR_FORMAT, "%s: %s.attention.head_count_kv = %u does not divide "
                        "head_count = %u", name, arch, c.n_head_kv, c.n_head);
    bool has_kl = false;
    {
        char key[128];
        snprintf(key, sizeof key, "%s.attention.key_length", arch);
        has_kl = dcp_gguf_kv_find(g, key) != NULL;
    }
    if (!has_kl && c.n_embd % c.n_head)
        return dcp_fail(DCP_ERR_FORMAT, "%s: embedding_length %u is not a multiple of head_count %u "
                        "and %s.attention.key_length is absent", name, c.n_embd, c.n_head, arch);
    if ((st = get_u32(g, arch, "attention.key_length", false, c.n_embd / c.n_head, &c.head_dim))) return st;
    if ((st = get_u32(g, arch, "attention.value_length", false, c.head_dim, &c.head_dim_v))) return st;
    if ((st = get_u32(g, arch, "rope.dimension_count", false, c.head_dim, &c.n_rot))) return st;
    if (c.n_rot > c.head_dim || c.n_rot % 2)
        return dcp_fail(DCP_ERR_FORMAT, "%s: %s.rope.dimension_count = %u must be even and at most "
                        "the head size %u", name, arch, c.n_rot, c.head_dim);
    const dcp_gguf_kv *tokens = dcp_gguf_kv_find(g, "tokenizer.ggml.tokens");
    uint32_t n_vocab_tok = 0;
    if (tokens && tokens->type == DCP_GGUF_TYPE_ARRAY && tokens->array_len <= 0x7fffffffu)
        n_vocab_tok = (uint32_t)tokens->array_len;
    if ((st = get_u32(g, arch, "vocab_size", false, n_vocab_tok, &c.n_vocab))) return st;
    if (c.n_vocab == 0)
        return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key '%s.vocab_size' (and no "
                        "tokenizer.ggml.tokens array)", name, arch);
    if ((st = read_rope_scaling(g, arch, &c))) return st;
    c.attn_scale = (float)(1.0 / sqrt((double)c.head_dim));
    c.rope_neox = c.arch == DCP_ARCH_QWEN2 || c.arch == DCP_ARCH_QWEN3 || c.arch == DCP_ARCH_PHI3;
    if (c.arch != DCP_ARCH_DEEPSEEK2 &&
        (st = get_u32_or_zero(g, arch, "attention.sliding_window", 0, &c.sliding_window)))
        return st;
    if (c.arch == DCP_ARCH_DEEPSEEK2 && (st = read_deepseek2(g, arch, &c))) return st;
    *out = c;
    return DCP_OK;
}

void dcp_moe_route_args_from_config(const dcp_model_config *c, dcp_moe_route_args *out)
{
    memset(out, 0, sizeof *out);
    out->n_expert = c->n_expert;
    out->n_used = c->n_expert_used;
    out->n_groups = c->n_expert_groups ? c->n_expert_groups : 1;
    out->n_groups_used = c->n_expert_groups_used ? c->n_expert_groups_used : out->n_groups;
    out->gating = c->expert_gating;
    out->norm = (int)c->expert_weights_norm;
    out->scale = c->expert_weights_scale;
}
