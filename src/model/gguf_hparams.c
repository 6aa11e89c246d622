/* Model hyperparameters from GGUF metadata (include/dcpvk/model_config.h). */
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
    if (strcmp(arch, "llama") == 0) c.arch = DCP_ARCH_LLAMA;
    else if (strcmp(arch, "deepseek2") == 0)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: architecture deepseek2 is not supported yet", name);
    else
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: architecture '%.64s' is not supported (supported: "
                        "llama)", name, arch);
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
    *out = c;
    return DCP_OK;
}
