/* The deepseek2 reference model built from a GGUF file (see ref_deepseek2.h). */
#include "ref_deepseek2.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testmodel/testmodel.h"
#include "vkutil.h"

const char *dcp_test_ds2_tmp(const char *name, char *buf, size_t cap)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(buf, cap, "%s/dcp-vk-%ld-%s", tmp && *tmp ? tmp : "/tmp", (long)getpid(), name);
    return buf;
}

void dcp_test_ds2_make(const char *path, char variant, int f16)
{
    dcp_test_deepseek2_config c;
    DCP_ASSERT_OK(dcp_test_deepseek2_preset(variant, &c));
    if (f16) c.weight_type = DCP_GGML_TYPE_F16;
    DCP_ASSERT_OK(dcp_gguf_make_test_model_deepseek2(path, &c));
}

static const float *arr(dcp_test_ds2 *m, const dcp_gguf_tensor *t)
{
    if (!t) return NULL;
    float *v = malloc(t->n_elements * sizeof *v);
    assert_non_null(v);
    DCP_ASSERT_OK(dcp_gguf_tensor_to_f32(m->g, t, v));
    m->arrays = realloc(m->arrays, (m->n_arrays + 1) * sizeof *m->arrays);
    assert_non_null(m->arrays);
    m->arrays[m->n_arrays++] = v;
    return v;
}

void dcp_test_ds2_load(dcp_test_ds2 *m, const char *path, int absorbed, uint32_t n_ctx)
{
    memset(m, 0, sizeof *m);
    DCP_ASSERT_OK(dcp_gguf_open(path, &m->g));
    DCP_ASSERT_OK(dcp_model_config_read(m->g, &m->cfg));
    assert_int_equal(m->cfg.arch, DCP_ARCH_DEEPSEEK2);
    DCP_ASSERT_OK(dcp_ds2_tensors_find(m->g, &m->cfg, &m->t));
    m->layers = calloc(m->cfg.n_layer, sizeof *m->layers);
    assert_non_null(m->layers);
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        const dcp_ds2_layer_tensors *T = &m->t.layers[l];
        dcp_ref_ds2_layer *L = &m->layers[l];
        L->attn_norm = arr(m, T->attn_norm);
        L->wq = arr(m, T->q);
        L->wq_a = arr(m, T->q_a);
        L->q_a_norm = arr(m, T->q_a_norm);
        L->wq_b = arr(m, T->q_b);
        L->wkv_a = arr(m, T->kv_a);
        L->kv_a_norm = arr(m, T->kv_a_norm);
        L->k_b = arr(m, T->k_b);
        L->v_b = arr(m, T->v_b);
        L->kv_b = arr(m, T->kv_b);
        L->wo = arr(m, T->attn_output);
        L->ffn_norm = arr(m, T->ffn_norm);
        L->w_gate = arr(m, T->ffn_gate);
        L->w_up = arr(m, T->ffn_up);
        L->w_down = arr(m, T->ffn_down);
        L->gate_inp = arr(m, T->gate_inp);
        L->exp_probs_b = arr(m, T->exp_probs_b);
        L->gate_exps = arr(m, T->gate_exps);
        L->up_exps = arr(m, T->up_exps);
        L->down_exps = arr(m, T->down_exps);
        L->gate_sh = arr(m, T->gate_shexp);
        L->up_sh = arr(m, T->up_shexp);
        L->down_sh = arr(m, T->down_shexp);
    }
    m->ref.cfg = m->cfg;
    m->ref.tok_embd = arr(m, m->t.tok_embd);
    m->ref.output_norm = arr(m, m->t.output_norm);
    m->ref.output = arr(m, m->t.output);
    m->ref.layers = m->layers;
    m->ref.absorbed = absorbed;
    assert_int_equal(dcp_ref_ds2_init(&m->ref, n_ctx), 0);
}

void dcp_test_ds2_free(dcp_test_ds2 *m)
{
    for (size_t i = 0; i < m->n_arrays; i++) free(m->arrays[i]);
    free(m->arrays);
    free(m->layers);
    dcp_ref_ds2_free(&m->ref);
    dcp_ds2_tensors_free(&m->t);
    dcp_gguf_close(m->g);
    memset(m, 0, sizeof *m);
}
