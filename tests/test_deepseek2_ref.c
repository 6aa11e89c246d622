/* deepseek2 on the host (no device): the hyperparameters of the test models A, B, C; the
 * double-precision reference (non-absorbed oracle against the absorbed form, layouts A and C
 * giving the same logits, softmaxes neither flat nor one-hot, YaRN angles against the host
 * (cos, sin) tables); the loader's tensor checks (missing, mis-shaped, unsupported type: errors
 * naming the tensor) and the tensor-parallel slices (concatenated over the ranks they give back
 * the tensors; the legacy layout's split equals the MLA layout). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/tokenizer.h"
#include "testmodel/testmodel.h"
#include "ref_deepseek2.h"
#include "vkutil.h"

static char path_a[512], path_b[512], path_c[512];

static int setup(void **state)
{
    (void)state;
    dcp_test_ds2_make(dcp_test_ds2_tmp("ds2-A.gguf", path_a, sizeof path_a), 'A', 0);
    dcp_test_ds2_make(dcp_test_ds2_tmp("ds2-B.gguf", path_b, sizeof path_b), 'B', 0);
    dcp_test_ds2_make(dcp_test_ds2_tmp("ds2-C.gguf", path_c, sizeof path_c), 'C', 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    remove(path_a);
    remove(path_b);
    remove(path_c);
    return 0;
}

static void read_config(const char *path, dcp_model_config *c)
{
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open(path, &g));
    DCP_ASSERT_OK(dcp_model_config_read(g, c));
    dcp_gguf_close(g);
}

static void test_config(void **state)
{
    (void)state;
    dcp_model_config a, b, c;
    read_config(path_a, &a);
    read_config(path_b, &b);
    read_config(path_c, &c);
    assert_int_equal(a.arch, DCP_ARCH_DEEPSEEK2);
    assert_int_equal(a.mla_layout, 1);
    assert_int_equal(c.mla_layout, 0);
    assert_int_equal(a.head_dim, 48); /* key_length = kv_lora + rope in the MLA layout */
    assert_int_equal(a.head_dim_v, 32);
    assert_int_equal(c.head_dim, 40); /* nope + rope in the legacy layout */
    assert_int_equal(c.head_dim_v, 20);
    const dcp_model_config *all[3] = {&a, &b, &c};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(all[i]->kv_lora_rank, 32);
        assert_int_equal(all[i]->n_rot, 16);
        assert_int_equal(all[i]->head_dim_nope, 24);
        assert_int_equal(all[i]->head_dim_qk, 40);
        assert_int_equal(all[i]->head_dim_v_mla, 20);
        assert_int_equal(all[i]->n_expert, 6);
        assert_int_equal(all[i]->n_expert_used, 2);
        assert_int_equal(all[i]->n_expert_shared, 1);
        assert_int_equal(all[i]->n_ff_exp, 56);
        assert_int_equal(all[i]->n_layer_dense_lead, 1);
        assert_int_equal(all[i]->n_vocab, dcp_test_model_vocab_size());
    }
    assert_int_equal(a.q_lora_rank, 0);
    assert_int_equal(a.expert_gating, DCP_EXPERT_GATING_SOFTMAX);
    assert_int_equal(a.rope_scaling, DCP_ROPE_SCALING_NONE);
    assert_int_equal(a.expert_weights_norm, 0);
    assert_true(fabsf(a.attn_scale - 1.0f / sqrtf(40.0f)) < 1e-7f); /* 1/sqrt(nope + rope), not 1/sqrt(48) */
    assert_int_equal(b.q_lora_rank, 40);
    assert_int_equal(b.expert_gating, DCP_EXPERT_GATING_SIGMOID);
    assert_int_equal(b.expert_weights_norm, 1);
    assert_true(b.expert_weights_scale == 2.5f);
    assert_int_equal(b.n_expert_groups, 3);
    assert_int_equal(b.n_expert_groups_used, 2);
    assert_int_equal(b.rope_scaling, DCP_ROPE_SCALING_YARN);
    assert_int_equal(b.rope_n_ctx_orig, 32);
    assert_true(b.rope_scaling_factor == 4.0f);
    assert_true(b.rope_attn_factor == 1.0f);
    double mscale = 1.0 + (double)0.0707f * log(4.0);
    assert_true(fabs(b.attn_scale - mscale * mscale / sqrt(40.0)) < 1e-7);

    /* Host (cos, sin) tables against the reference angles, with and without YaRN, past the
     * original context; the YaRN ramp moves the interpolated pairs only. */
    for (int v = 0; v < 2; v++) {
        const dcp_model_config *cf = v ? &b : &a;
        dcp_rope_params rp;
        dcp_rope_params_from_config(cf, &rp);
        uint32_t pos[5] = {0, 1, 31, 32, 4000};
        float cs[5 * 8 * 2];
        dcp_rope_cs(&rp, pos, 5, cs);
        for (int t = 0; t < 5; t++)
            for (uint32_t i = 0; i < 8; i++) {
                double ang = dcp_ref_rope_angle(cf, pos[t], i);
                assert_true(fabs(cs[(t * 8 + i) * 2] - cos(ang)) < 1e-6);
                assert_true(fabs(cs[(t * 8 + i) * 2 + 1] - sin(ang)) < 1e-6);
            }
    }
    /* B: pair 0 extrapolates (unscaled), pairs from 2 on are interpolated (angle / 4), pair 1 mixes. */
    assert_true(fabs(dcp_ref_rope_angle(&b, 100, 0) - 100.0) < 1e-12);
    double plain1 = 100.0 * pow(10000.0, -2.0 / 16), plain5 = 100.0 * pow(10000.0, -10.0 / 16);
    assert_true(fabs(dcp_ref_rope_angle(&b, 100, 5) - plain5 / 4) < 1e-12);
    double mid = dcp_ref_rope_angle(&b, 100, 1);
    assert_true(mid < plain1 && mid > plain1 / 4);
}

/* Greedy run of `steps` tokens after the prompt on the oracle; the absorbed form and (for A) the
 * legacy layout alongside. */
static void run_variant(const char *path, const char *path_legacy, uint32_t steps, uint32_t min_distinct)
{
    const uint32_t n_ctx = 96;
    dcp_test_ds2 o, ab, lg;
    dcp_test_ds2_load(&o, path, 0, n_ctx);
    dcp_test_ds2_load(&ab, path, 1, n_ctx);
    if (path_legacy) dcp_test_ds2_load(&lg, path_legacy, 0, n_ctx);
    const dcp_model_config *c = &o.cfg;
    o.ref.probe_attn = calloc((size_t)c->n_layer * c->n_head * n_ctx, sizeof(double));
    o.ref.probe_router = calloc((size_t)c->n_layer * c->n_expert, sizeof(double));
    assert_true(o.ref.probe_attn && o.ref.probe_router);
    dcp_tokenizer *tok;
    DCP_ASSERT_OK(dcp_tokenizer_create(o.g, &tok));
    int32_t *ids;
    size_t n_prompt;
    DCP_ASSERT_OK(dcp_tokenizer_encode(tok, "Once upon a time", 16, DCP_TOKENIZE_ADD_BOS, &ids, &n_prompt));
    assert_true(n_prompt >= 3);
    double *lo = malloc(c->n_vocab * sizeof *lo), *la = malloc(c->n_vocab * sizeof *la);
    double *ll = malloc(c->n_vocab * sizeof *ll);
    int32_t seen[128] = {0};
    uint32_t distinct = 0, pos = 0;
    int32_t token = ids[0];
    double max_abs = 0.0, attn_peak_sum = 0.0, router_peak_sum = 0.0;
    uint32_t attn_samples = 0, router_samples = 0;
    for (; pos < n_prompt + steps; pos++) {
        dcp_ref_ds2_step(&o.ref, token, pos, lo);
        dcp_ref_ds2_step(&ab.ref, token, pos, la);
        for (uint32_t v = 0; v < c->n_vocab; v++) {
            double d = fabs(lo[v] - la[v]);
            if (d > max_abs) max_abs = d;
        }
        if (path_legacy) {
            dcp_ref_ds2_step(&lg.ref, token, pos, ll);
            if (memcmp(lo, ll, c->n_vocab * sizeof *lo) != 0) fail_msg("layouts A and C differ at position %u", pos);
        }
        if (pos >= 8) {
            for (uint32_t l = 0; l < c->n_layer; l++)
                for (uint32_t h = 0; h < c->n_head; h++) {
                    double mx = 0.0;
                    for (uint32_t t = 0; t <= pos; t++) {
                        double p = o.ref.probe_attn[((size_t)l * c->n_head + h) * n_ctx + t];
                        mx = p > mx ? p : mx;
                    }
                    attn_peak_sum += mx;
                    attn_samples++;
                }
            double mx = 0.0, sum = 0.0;
            for (uint32_t e = 0; e < c->n_expert; e++) {
                double p = o.ref.probe_router[(size_t)(c->n_layer - 1) * c->n_expert + e];
                mx = p > mx ? p : mx;
                sum += p;
            }
            router_peak_sum += mx / sum;
            router_samples++;
        }
        if (pos + 1 < n_prompt) {
            token = ids[pos + 1];
            continue;
        }
        uint32_t best = 0;
        for (uint32_t v = 1; v < c->n_vocab; v++)
            if (lo[v] > lo[best]) best = v;
        token = (int32_t)best;
        int found = 0;
        for (uint32_t k = 0; k < distinct; k++) found |= seen[k] == token;
        if (!found && distinct < 128) seen[distinct++] = token;
    }
    double attn_peak = attn_peak_sum / attn_samples, router_peak = router_peak_sum / router_samples;
    printf("%s: %u positions, |oracle - absorbed| <= %.3g, mean attention peak %.3f, mean router peak %.3f "
           "(share of the largest expert), %u distinct greedy tokens\n",
           path, pos, max_abs, attn_peak, router_peak, distinct);
    assert_true(max_abs <= 1e-10);
    /* Neither flat (peak ~ 1/positions, under 0.05 here) nor one-hot. */
    assert_true(attn_peak > 0.15 && attn_peak < 0.85);
    assert_true(router_peak > 1.3 / c->n_expert && router_peak < 0.9);
    assert_true(distinct >= min_distinct);
    free(ids);
    free(lo);
    free(la);
    free(ll);
    free(o.ref.probe_attn);
    free(o.ref.probe_router);
    dcp_tokenizer_destroy(tok);
    dcp_test_ds2_free(&o);
    dcp_test_ds2_free(&ab);
    if (path_legacy) dcp_test_ds2_free(&lg);
}

static void test_reference_a_c(void **state)
{
    (void)state;
    run_variant(path_a, path_c, 24, 3);
}

static void test_reference_b(void **state)
{
    (void)state;
    /* Past YaRN's original context of 32. */
    run_variant(path_b, NULL, 40, 3);
}

/* Value (row, col) of a host matrix as f32. */
static float hm_at(const dcp_ds2_host_matrix *m, uint32_t row, uint32_t col)
{
    uint32_t be, bb;
    dcp_ggml_type_block(m->type, &be, &bb);
    uint64_t rb = (uint64_t)m->k / be * bb;
    float *tmp = malloc(m->k * sizeof *tmp);
    assert_non_null(tmp);
    DCP_ASSERT_OK(dcp_ggml_to_f32(m->type, m->data + row * rb, tmp, m->k));
    float v = tmp[col];
    free(tmp);
    return v;
}

/* Rows [r0, r0 + n) of `part` equal rows [f0, f0 + n) of `full`, over the first `cols` columns. */
static void same_rows(const char *what, const dcp_ds2_host_matrix *part, uint32_t r0, const dcp_ds2_host_matrix *full,
                      uint32_t f0, uint32_t n, uint32_t cols)
{
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t k = 0; k < cols; k++)
            if (hm_at(part, r0 + r, k) != hm_at(full, f0 + r, k))
                fail_msg("%s: row %u col %u differs from the full tensor's row %u", what, r0 + r, k, f0 + r);
}

/* Columns [0, n) of `part` equal columns [f0, f0 + n) of `full` on rows [0, rows); padding zero. */
static void same_cols(const char *what, const dcp_ds2_host_matrix *part, const dcp_ds2_host_matrix *full,
                      uint32_t f0, uint32_t n, uint32_t rows, uint32_t part_row0, uint32_t full_row0)
{
    assert_int_equal(part->k % 4, 0);
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t k = 0; k < part->k; k++) {
            float want = k < n ? hm_at(full, full_row0 + r, f0 + k) : 0.0f;
            if (hm_at(part, part_row0 + r, k) != want) fail_msg("%s: row %u col %u", what, part_row0 + r, k);
        }
}

static void check_slices(const char *path)
{
    dcp_test_ds2 m;
    dcp_test_ds2_load(&m, path, 0, 4);
    const dcp_model_config *c = &m.cfg;
    const uint32_t E = c->n_embd, R = c->kv_lora_rank, V = c->head_dim_v_mla, QW = c->head_dim_qk;
    dcp_ds2_shard s1;
    DCP_ASSERT_OK(dcp_ds2_shard_for_rank(c, 1, 0, 1, 0, &s1));
    for (uint32_t l = 0; l < c->n_layer; l++) {
        dcp_ds2_layer_host full;
        DCP_ASSERT_OK(dcp_ds2_layer_slice(c, &m.t, l, &s1, &full));
        for (uint32_t tp = 1; tp <= 4; tp *= 2)
            for (uint32_t dcp = 1; dcp <= tp; dcp *= 2)
                for (uint32_t rank = 0; rank < tp; rank++) {
                    dcp_ds2_shard s;
                    DCP_ASSERT_OK(dcp_ds2_shard_for_rank(c, tp, rank, dcp, dcp > 1, &s));
                    const uint32_t hl = c->n_head / tp;
                    assert_int_equal(s.o_head0, rank * hl);
                    assert_int_equal(s.q_heads, dcp > 1 ? dcp * hl : hl);
                    dcp_ds2_layer_host h;
                    DCP_ASSERT_OK(dcp_ds2_layer_slice(c, &m.t, l, &s, &h));
                    same_rows("wq", &h.wq, 0, &full.wq, s.q_head0 * QW, s.q_heads * QW, h.wq.k);
                    same_rows("wk_b", &h.wk_b, 0, &full.wk_b, s.q_head0 * R, s.q_heads * R, h.wk_b.k);
                    same_rows("wv_b", &h.wv_b, 0, &full.wv_b, s.o_head0 * V, s.o_heads * V, R);
                    same_rows("wkv_a", &h.wkv_a, 0, &full.wkv_a, 0, full.wkv_a.rows, E);
                    same_cols("wo", &h.wo, &full.wo, s.o_head0 * V, s.o_heads * V, E, 0, 0);
                    if (!h.moe) {
                        const uint32_t F = c->n_ff;
                        same_rows("gate", &h.w_gu, 0, &full.w_gu, s.ff0, s.ff, E);
                        same_rows("up", &h.w_gu, s.ff, &full.w_gu, F + s.ff0, s.ff, E);
                        same_cols("down", &h.w_down, &full.w_down, s.ff0, s.ff, E, 0, 0);
                    } else {
                        const uint32_t FE = c->n_ff_exp;
                        same_rows("router", &h.gate_inp, 0, &full.gate_inp, 0, c->n_expert, E);
                        for (uint32_t e = 0; e < c->n_expert; e++) {
                            same_rows("gate_exps", &h.w_gu_exps, 2 * s.fe * e, &full.w_gu_exps, 2 * FE * e + s.fe0, s.fe, E);
                            same_rows("up_exps", &h.w_gu_exps, 2 * s.fe * e + s.fe, &full.w_gu_exps,
                                      2 * FE * e + FE + s.fe0, s.fe, E);
                            same_cols("down_exps", &h.w_down_exps, &full.w_down_exps, s.fe0, s.fe, E, E * e, E * e);
                        }
                        same_rows("gate_shexp", &h.w_gu_sh, 0, &full.w_gu_sh, s.fs0, s.fs, E);
                        same_cols("down_shexp", &h.w_down_sh, &full.w_down_sh, s.fs0, s.fs, E, 0, 0);
                    }
                    dcp_ds2_layer_host_free(&h);
                }
        dcp_ds2_layer_host_free(&full);
    }
    dcp_test_ds2_free(&m);
}

static void test_slices(void **state)
{
    (void)state;
    check_slices(path_a);
    check_slices(path_b);
    check_slices(path_c);
    /* The legacy layout's k_b / v_b equal the MLA layout's, bit for bit, in F32 and F16. */
    for (int f16 = 0; f16 < 2; f16++) {
        char pa[512], pc[512];
        if (f16) {
            dcp_test_ds2_make(dcp_test_ds2_tmp("ds2-A16.gguf", pa, sizeof pa), 'A', 1);
            dcp_test_ds2_make(dcp_test_ds2_tmp("ds2-C16.gguf", pc, sizeof pc), 'C', 1);
        } else {
            snprintf(pa, sizeof pa, "%s", path_a);
            snprintf(pc, sizeof pc, "%s", path_c);
        }
        dcp_test_ds2 a, cc;
        dcp_test_ds2_load(&a, pa, 0, 4);
        dcp_test_ds2_load(&cc, pc, 0, 4);
        for (uint32_t tp = 1; tp <= 4; tp *= 2)
            for (uint32_t rank = 0; rank < tp; rank++) {
                dcp_ds2_shard s;
                DCP_ASSERT_OK(dcp_ds2_shard_for_rank(&a.cfg, tp, rank, 1, 0, &s));
                dcp_ds2_layer_host ha, hc;
                DCP_ASSERT_OK(dcp_ds2_layer_slice(&a.cfg, &a.t, 1, &s, &ha));
                DCP_ASSERT_OK(dcp_ds2_layer_slice(&cc.cfg, &cc.t, 1, &s, &hc));
                assert_int_equal(ha.wk_b.type, f16 ? DCP_GGML_TYPE_F16 : DCP_GGML_TYPE_F32);
                assert_int_equal(hc.wk_b.type, ha.wk_b.type);
                assert_int_equal(hc.wv_b.type, ha.wv_b.type);
                assert_int_equal(hc.wk_b.rows, ha.wk_b.rows);
                assert_int_equal(hc.wv_b.rows, ha.wv_b.rows);
                uint32_t es = f16 ? 2 : 4;
                assert_memory_equal(ha.wk_b.data, hc.wk_b.data, (size_t)ha.wk_b.rows * ha.wk_b.k * es);
                assert_memory_equal(ha.wv_b.data, hc.wv_b.data, (size_t)ha.wv_b.rows * ha.wv_b.k * es);
                dcp_ds2_layer_host_free(&ha);
                dcp_ds2_layer_host_free(&hc);
            }
        dcp_test_ds2_free(&a);
        dcp_test_ds2_free(&cc);
        if (f16) {
            remove(pa);
            remove(pc);
        }
    }
    /* vLLM's rules. */
    dcp_model_config c;
    read_config(path_a, &c);
    dcp_ds2_shard s;
    assert_int_equal(dcp_ds2_shard_for_rank(&c, 3, 0, 1, 0, &s), DCP_ERR_CONFIG);
    assert_non_null(strstr(dcp_last_error(), "4 heads"));
    assert_int_equal(dcp_ds2_shard_for_rank(&c, 2, 0, 4, 0, &s), DCP_ERR_CONFIG);
    assert_non_null(strstr(dcp_last_error(), "dcp <= tp"));
}

/* Copies src to dst with changes: one tensor dropped, one written with its first two axes swapped,
 * one 1-D tensor written as {n/2, 2}, one replaced by zeros of the same shape in a type dcp-vk does
 * not read (Q8_1), one key dropped, one u32 key and one string key set. */
typedef struct rewrite {
    const char *drop_tensor, *swap_tensor, *fold_tensor, *q81_tensor, *drop_key, *u32_key, *str_key, *str_val;
    uint32_t u32_val;
} rewrite;

static void rewrite_file(const char *src, const char *dst, const rewrite *rw)
{
    dcp_gguf *g;
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_open(src, &g));
    DCP_ASSERT_OK(dcp_gguf_writer_create(32, &w));
    for (uint64_t i = 0; i < dcp_gguf_kv_count(g); i++) {
        const dcp_gguf_kv *kv = dcp_gguf_kv_at(g, i);
        if ((rw->drop_key && !strcmp(kv->key, rw->drop_key)) || (rw->u32_key && !strcmp(kv->key, rw->u32_key)) ||
            (rw->str_key && !strcmp(kv->key, rw->str_key)))
            continue;
        DCP_ASSERT_OK(dcp_gguf_writer_copy_kv(w, kv));
    }
    if (rw->u32_key) DCP_ASSERT_OK(dcp_gguf_writer_set_uint(w, rw->u32_key, DCP_GGUF_TYPE_UINT32, rw->u32_val));
    if (rw->str_key) DCP_ASSERT_OK(dcp_gguf_writer_set_string(w, rw->str_key, rw->str_val, strlen(rw->str_val)));
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) {
        const dcp_gguf_tensor *t = dcp_gguf_tensor_at(g, i);
        uint64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (rw->drop_tensor && !strcmp(t->name, rw->drop_tensor)) continue;
        if (rw->swap_tensor && !strcmp(t->name, rw->swap_tensor)) {
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        if (rw->fold_tensor && !strcmp(t->name, rw->fold_tensor)) {
            ne[0] = t->ne[0] / 2;
            ne[1] = 2;
            DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, t->name, t->type, 2, ne, t->data, t->size));
            continue;
        }
        if (rw->q81_tensor && !strcmp(t->name, rw->q81_tensor)) {
            uint32_t be, bb;
            assert_false(dcp_ggml_type_supported(DCP_GGML_TYPE_Q8_1));
            dcp_ggml_type_block(DCP_GGML_TYPE_Q8_1, &be, &bb);
            uint64_t bytes = t->n_elements / be * bb;
            void *z = calloc(1, bytes);
            DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, t->name, DCP_GGML_TYPE_Q8_1, t->n_dims, ne, z, bytes));
            free(z);
            continue;
        }
        DCP_ASSERT_OK(dcp_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, t->data, t->size));
    }
    DCP_ASSERT_OK(dcp_gguf_writer_write(w, dst));
    dcp_gguf_writer_destroy(w);
    dcp_gguf_close(g);
}

/* The rewritten file fails dcp_model_config_read (at_config) or dcp_ds2_tensors_find with `want`
 * and a message holding `needle`. */
static void expect_fail(const char *src, const rewrite *rw, int at_config, dcp_status want, const char *needle)
{
    char dst[512];
    dcp_test_ds2_tmp("ds2-bad.gguf", dst, sizeof dst);
    rewrite_file(src, dst, rw);
    dcp_gguf *g;
    dcp_model_config c;
    DCP_ASSERT_OK(dcp_gguf_open(dst, &g));
    dcp_status st = dcp_model_config_read(g, &c);
    if (!at_config) {
        if (st) fail_msg("config of the rewritten file: %s", dcp_last_error());
        dcp_ds2_tensors t;
        st = dcp_ds2_tensors_find(g, &c, &t);
        if (st == DCP_OK) dcp_ds2_tensors_free(&t);
    }
    if (st != want) fail_msg("expected %s, got %s (%s)", dcp_status_string(want), dcp_status_string(st), dcp_last_error());
    if (!strstr(dcp_last_error(), needle)) fail_msg("message '%s' lacks '%s'", dcp_last_error(), needle);
    dcp_gguf_close(g);
    remove(dst);
}

static void test_errors(void **state)
{
    (void)state;
    expect_fail(path_a, &(rewrite){.drop_tensor = "blk.1.attn_k_b.weight"}, 0, DCP_ERR_FORMAT,
                "tensor blk.1.attn_k_b.weight is missing");
    expect_fail(path_c, &(rewrite){.drop_tensor = "blk.0.attn_kv_b.weight"}, 0, DCP_ERR_FORMAT,
                "tensor blk.0.attn_kv_b.weight is missing");
    expect_fail(path_b, &(rewrite){.drop_tensor = "blk.1.attn_q_b.weight"}, 0, DCP_ERR_FORMAT,
                "blk.1.attn_q_b.weight is missing");
    expect_fail(path_b, &(rewrite){.drop_tensor = "blk.1.ffn_down_shexp.weight"}, 0, DCP_ERR_FORMAT,
                "blk.1.ffn_down_shexp.weight is missing");
    expect_fail(path_a, &(rewrite){.drop_tensor = "blk.0.ffn_up.weight"}, 0, DCP_ERR_FORMAT,
                "blk.0.ffn_up.weight is missing");
    expect_fail(path_a, &(rewrite){.swap_tensor = "blk.0.attn_k_b.weight"}, 0, DCP_ERR_FORMAT,
                "tensor blk.0.attn_k_b.weight has shape [32, 24, 4, 1], expected [24, 32, 4]");
    expect_fail(path_a, &(rewrite){.swap_tensor = "blk.1.ffn_down_exps.weight"}, 0, DCP_ERR_FORMAT,
                "blk.1.ffn_down_exps.weight has shape");
    expect_fail(path_a, &(rewrite){.q81_tensor = "blk.0.attn_kv_a_norm.weight"}, 0, DCP_ERR_UNSUPPORTED,
                "tensor blk.0.attn_kv_a_norm.weight has type Q8_1; supported: F32");
    /* The optional selection bias may be absent (A has none); present with a wrong shape it fails. */
    expect_fail(path_b, &(rewrite){.fold_tensor = "blk.1.exp_probs_b.bias"}, 0, DCP_ERR_FORMAT,
                "tensor blk.1.exp_probs_b.bias has shape [3, 2, 1, 1], expected [6, 1, 1]");
    /* Hyperparameters. */
    expect_fail(path_a, &(rewrite){.drop_key = "deepseek2.attention.kv_lora_rank"}, 1, DCP_ERR_FORMAT,
                "missing required key 'deepseek2.attention.kv_lora_rank'");
    expect_fail(path_a, &(rewrite){.u32_key = "deepseek2.attention.key_length", .u32_val = 40}, 1, DCP_ERR_FORMAT,
                "must be kv_lora_rank + rope = 48");
    expect_fail(path_a, &(rewrite){.u32_key = "deepseek2.expert_gating_func", .u32_val = 3}, 1, DCP_ERR_UNSUPPORTED,
                "expert_gating_func = 3");
    expect_fail(path_b, &(rewrite){.str_key = "deepseek2.rope.scaling.type", .str_val = "longrope"}, 1,
                DCP_ERR_UNSUPPORTED, "'longrope' is not supported");
    expect_fail(path_b, &(rewrite){.u32_key = "deepseek2.expert_group_count", .u32_val = 4}, 1, DCP_ERR_FORMAT,
                "expert_group_count = 4");
    expect_fail(path_a, &(rewrite){.drop_key = "deepseek2.expert_feed_forward_length"}, 1, DCP_ERR_FORMAT,
                "deepseek2.expert_feed_forward_length");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_reference_a_c),
        cmocka_unit_test(test_reference_b),
        cmocka_unit_test(test_slices),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
