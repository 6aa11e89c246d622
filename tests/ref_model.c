/* The llama reference model built from a GGUF file (see ref_model.h). */
#include "ref_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testmodel/testmodel.h"
#include "vkutil.h"

static const float *host_tensor(dcp_test_ref_model *m, const dcp_gguf *g, const char *name)
{
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, name);
    if (!t) fail_msg("tensor %s is missing", name);
    float *v = malloc(t->n_elements * sizeof *v);
    assert_non_null(v);
    DCP_ASSERT_OK(dcp_gguf_tensor_to_f32(g, t, v));
    m->tensors = realloc(m->tensors, (m->n_tensors + 1) * sizeof *m->tensors);
    assert_non_null(m->tensors);
    m->tensors[m->n_tensors++] = v;
    return v;
}

/* A host copy of rows [r0, r0 + nr) of the matrix src [.][k] (a part of a fused tensor). */
static const float *host_rows(dcp_test_ref_model *m, const float *src, uint64_t k, uint64_t r0, uint64_t nr)
{
    float *v = malloc(nr * k * sizeof *v);
    assert_non_null(v);
    memcpy(v, src + r0 * k, nr * k * sizeof *v);
    m->tensors = realloc(m->tensors, (m->n_tensors + 1) * sizeof *m->tensors);
    assert_non_null(m->tensors);
    m->tensors[m->n_tensors++] = v;
    return v;
}

void dcp_test_ref_model_load(dcp_test_ref_model *m, const dcp_gguf *g, const dcp_model_config *c, uint32_t n_ctx)
{
    memset(m, 0, sizeof *m);
    dcp_ref_llama *r = &m->ref;
    *r = (dcp_ref_llama){.n_embd = c->n_embd, .n_layer = c->n_layer, .n_head = c->n_head,
                         .n_head_kv = c->n_head_kv, .head_dim = c->head_dim, .n_ff = c->n_ff,
                         .n_vocab = c->n_vocab, .n_rot = c->n_rot, .n_ctx = n_ctx, .rms_eps = c->rms_eps,
                         .rope_base = c->rope_freq_base};
    /* RoPE as the file describes it, from the keys and rope_freqs.weight directly (not through
     * the engine's dcp_rope_params). */
    r->rope = (dcp_ref_rope_cfg){.n_rot = c->n_rot, .base = c->rope_freq_base, .neox = c->rope_neox != 0,
                                 .scaling = (int)c->rope_scaling, .factor = c->rope_scaling_factor,
                                 .n_ctx_orig = c->rope_n_ctx_orig, .beta_fast = c->rope_yarn_beta_fast,
                                 .beta_slow = c->rope_yarn_beta_slow,
                                 .mscale = c->rope_attn_factor > 0.0f ? c->rope_attn_factor : 1.0f};
    if (c->rope_scaling == DCP_ROPE_SCALING_NONE) r->rope.factor = 1.0;
    if (dcp_gguf_tensor_find(g, "rope_freqs.weight")) r->rope.freq_factors = host_tensor(m, g, "rope_freqs.weight");
    r->tok_embd = host_tensor(m, g, "token_embd.weight");
    r->output_norm = host_tensor(m, g, "output_norm.weight");
    r->output = dcp_gguf_tensor_find(g, "output.weight") ? host_tensor(m, g, "output.weight") : r->tok_embd;
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    assert_non_null(m->layers);
    const uint64_t E = c->n_embd, qd = (uint64_t)c->n_head * c->head_dim, kd = (uint64_t)c->n_head_kv * c->head_dim;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        char n[64];
        dcp_ref_llama_layer *L = &m->layers[l];
#define NAME(suffix) (snprintf(n, sizeof n, "blk.%u." suffix, l), n)
#define T(field, suffix) (L->field = host_tensor(m, g, NAME(suffix)))
        T(attn_norm, "attn_norm.weight");
        if (dcp_gguf_tensor_find(g, NAME("attn_qkv.weight"))) { /* phi3: Q | K | V rows */
            const float *qkv = host_tensor(m, g, n);
            L->wq = host_rows(m, qkv, E, 0, qd);
            L->wk = host_rows(m, qkv, E, qd, kd);
            L->wv = host_rows(m, qkv, E, qd + kd, kd);
            if (dcp_gguf_tensor_find(g, NAME("attn_qkv.bias"))) {
                const float *b = host_tensor(m, g, n);
                L->bq = b;
                L->bk = b + qd;
                L->bv = b + qd + kd;
            }
        } else {
            T(wq, "attn_q.weight");
            T(wk, "attn_k.weight");
            T(wv, "attn_v.weight");
            if (dcp_gguf_tensor_find(g, NAME("attn_q.bias"))) {
                T(bq, "attn_q.bias");
                T(bk, "attn_k.bias");
                T(bv, "attn_v.bias");
            }
        }
        if (dcp_gguf_tensor_find(g, NAME("attn_q_norm.weight"))) {
            T(q_norm, "attn_q_norm.weight");
            T(k_norm, "attn_k_norm.weight");
        }
        T(wo, "attn_output.weight");
        T(ffn_norm, "ffn_norm.weight");
        if (dcp_gguf_tensor_find(g, NAME("ffn_gate.weight"))) {
            T(w_gate, "ffn_gate.weight");
            T(w_up, "ffn_up.weight");
        } else { /* phi3: ffn_up holds gate rows [0, n_ff), then up rows */
            const float *gu = host_tensor(m, g, NAME("ffn_up.weight"));
            L->w_gate = host_rows(m, gu, E, 0, c->n_ff);
            L->w_up = host_rows(m, gu, E, c->n_ff, c->n_ff);
        }
        T(w_down, "ffn_down.weight");
#undef T
#undef NAME
    }
    r->layers = m->layers;
    size_t kv = (size_t)c->n_layer * n_ctx * c->n_head_kv * c->head_dim;
    r->k_cache = calloc(kv, sizeof(float));
    r->v_cache = calloc(kv, sizeof(float));
    assert_true(r->k_cache && r->v_cache);
}

void dcp_test_ref_model_reset(dcp_test_ref_model *m)
{
    const dcp_ref_llama *r = &m->ref;
    size_t kv = (size_t)r->n_layer * r->n_ctx * r->n_head_kv * r->head_dim;
    memset(r->k_cache, 0, kv * sizeof(float));
    memset(r->v_cache, 0, kv * sizeof(float));
}

void dcp_test_ref_model_free(dcp_test_ref_model *m)
{
    for (size_t i = 0; i < m->n_tensors; i++) free(m->tensors[i]);
    free(m->tensors);
    free(m->layers);
    free(m->ref.k_cache);
    free(m->ref.v_cache);
    memset(m, 0, sizeof *m);
}

dcp_status dcp_test_model_load(dcp_device *const *devs, uint32_t first, uint32_t count, uint32_t tp, uint32_t dcp,
                                  bool q_replicate, const dcp_gguf *g, const dcp_model_config *cfg,
                                  dcp_model **out)
{
    dcp_model_load_config wc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    wc.devices = devs;
    wc.first_rank = first;
    wc.count = count;
    wc.tp = tp;
    wc.dcp = dcp;
    wc.q_replicate = q_replicate;
    return dcp_model_load(&wc, g, cfg, out);
}

dcp_gguf *dcp_test_gguf_of_writer(dcp_gguf_writer *w, void **bytes, const char *name)
{
    size_t size;
    DCP_ASSERT_OK(dcp_gguf_writer_write_memory(w, bytes, &size));
    dcp_gguf_writer_destroy(w);
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open_memory(*bytes, size, name, &g));
    return g;
}

void dcp_test_model_open(dcp_context *ctx, const dcp_gguf *g, uint32_t tp, uint32_t dcp, bool q_replicate,
                         dcp_model_config *cfg, dcp_tokenizer **tok, dcp_model **m)
{
    DCP_ASSERT_OK(dcp_model_config_read(g, cfg));
    DCP_ASSERT_OK(dcp_tokenizer_create(g, tok));
    dcp_device *devs[64];
    assert_true(tp <= 64);
    for (uint32_t r = 0; r < tp; r++) devs[r] = dcp_context_device(ctx, (int)r);
    DCP_ASSERT_OK(dcp_test_model_load(devs, 0, tp, tp, dcp, q_replicate, g, cfg, m));
}

void dcp_test_model_close(dcp_context *ctx, dcp_model *m, dcp_tokenizer *tok, dcp_gguf *g)
{
    dcp_model_destroy(m);
    dcp_test_context_done(ctx);
    dcp_tokenizer_destroy(tok);
    dcp_gguf_close(g);
}

dcp_gguf *dcp_test_open_deepseek2(bool q8_rows, void **bytes)
{
    dcp_test_deepseek2_config dc;
    DCP_ASSERT_OK(dcp_test_deepseek2_preset('A', &dc));
    if (q8_rows) dc.kv_lora_rank = 48;
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_build_test_model_deepseek2(&dc, &w));
    return dcp_test_gguf_of_writer(w, bytes, "<generated test model>");
}

void dcp_test_engine_open(dcp_test_engine *f, uint32_t tp, uint32_t dcp, const dcp_model_state_config *sc,
                          const dcp_engine_config *ec)
{
    f->ctx = dcp_test_context_of(tp);
    dcp_test_model_open(f->ctx, f->g, tp, dcp, false, &f->cfg, &f->tok, &f->m);
    DCP_ASSERT_OK(dcp_model_state_create(f->m, sc, &f->s));
    DCP_ASSERT_OK(dcp_engine_create(f->s, f->tok, ec, &f->e));
}

void dcp_test_engine_close(dcp_test_engine *f)
{
    dcp_engine_destroy(f->e);
    dcp_model_state_destroy(f->s);
    dcp_test_model_close(f->ctx, f->m, f->tok, f->g);
    free(f->bytes);
}
