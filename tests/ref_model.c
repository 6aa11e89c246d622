/* The llama reference model built from a GGUF file (see ref_model.h). */
#include "ref_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void dcp_test_ref_model_load(dcp_test_ref_model *m, const dcp_gguf *g, const dcp_model_config *c, uint32_t n_ctx)
{
    memset(m, 0, sizeof *m);
    dcp_ref_llama *r = &m->ref;
    *r = (dcp_ref_llama){c->n_embd, c->n_layer, c->n_head, c->n_head_kv, c->head_dim, c->n_ff, c->n_vocab,
                         c->n_rot, n_ctx, c->rms_eps, c->rope_freq_base, NULL, NULL, NULL, NULL, NULL, NULL};
    r->tok_embd = host_tensor(m, g, "token_embd.weight");
    r->output_norm = host_tensor(m, g, "output_norm.weight");
    r->output = host_tensor(m, g, "output.weight");
    m->layers = calloc(c->n_layer, sizeof *m->layers);
    assert_non_null(m->layers);
    for (uint32_t l = 0; l < c->n_layer; l++) {
        char n[64];
#define T(field, suffix) (snprintf(n, sizeof n, "blk.%u." suffix, l), m->layers[l].field = host_tensor(m, g, n))
        T(attn_norm, "attn_norm.weight");
        T(wq, "attn_q.weight");
        T(wk, "attn_k.weight");
        T(wv, "attn_v.weight");
        T(wo, "attn_output.weight");
        T(ffn_norm, "ffn_norm.weight");
        T(w_gate, "ffn_gate.weight");
        T(w_up, "ffn_up.weight");
        T(w_down, "ffn_down.weight");
#undef T
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
