/* A whole deepseek2 forward on one device (TP 1, no DCP), composed from the loader's slices and the
 * kernels the graph will use, against the double-precision NON-absorbed oracle: test models A
 * (attn_q, attn_k_b / attn_v_b, softmax gating), B (q_lora, YaRN past its original context of 32,
 * sigmoid gating with selection bias, groups, normalised and scaled weights) and C (A in the
 * legacy attn_kv_b layout): logits within 1e-4 of the oracle at every position of the prompt
 * "Once upon a time" and greedy continuation, the same greedy tokens, and A and C bitwise equal.
 * The latent cache is f32 here (an f16 cache rounds c_kv and k_pe to 11 bits). This is not the
 * graph (no TP, DCP or batching): it checks that the pieces compose into the model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/attn.h"
#include "dcpvk/tokenizer.h"
#include "model/arch/deepseek2_weights.h"
#include "dcpvk/ops.h"
#include "testmodel/testmodel.h"
#include "ref_deepseek2.h"
#include "vkutil.h"

static int setup(void **state)
{
    *state = dcp_test_context();
    return 0;
}

static int teardown(void **state)
{
    dcp_test_context_done(*state);
    return 0;
}

enum { MAX_CTX = 96, PAGE = 16 };

/* Device state of the one-device forward. */
typedef struct fwd {
    const dcp_model_config *c;
    dcp_device *dev;
    dcp_matrix tok_embd, output;
    dcp_buffer *out_norm;
    dcp_ds2_layer_dev *L;
    dcp_ds2_shard s;
    uint32_t f_pad, fe_pad, fs_pad;
    dcp_kv_pool **pools;
    dcp_decode_plan **plans;
    uint32_t bt[MAX_CTX / PAGE];
    /* activations, f32 */
    dcp_buffer *ids, *x, *xn, *qa, *qan, *q, *kv, *cn, *Q, *olat, *lse, *o, *gu, *h, *logits_r, *rids, *rw, *egu, *eh,
        *sgu, *sh, *logits, *slot, *cs;
    dcp_cmd *cmd;
} fwd;

static dcp_buffer *buf(dcp_device *dev, uint64_t floats)
{
    dcp_buffer *b;
    DCP_ASSERT_OK(dcp_buffer_create(dev, (floats ? floats : 1) * 4, DCP_MEMORY_DEVICE, &b));
    DCP_ASSERT_OK(dcp_buffer_fill(b, 0, (floats ? floats : 1) * 4, 0));
    return b;
}

static void fwd_create(fwd *f, dcp_device *dev, const dcp_test_ds2 *m)
{
    memset(f, 0, sizeof *f);
    const dcp_model_config *c = &m->cfg;
    f->c = c;
    f->dev = dev;
    DCP_ASSERT_OK(dcp_ds2_shard_for_rank(c, 1, 0, 1, 0, &f->s));
    dcp_ds2_global_host gh;
    DCP_ASSERT_OK(dcp_ds2_global_slice(c, &m->t, &gh));
    DCP_ASSERT_OK(dcp_ds2_matrix_upload(dev, &gh.tok_embd, "token_embd", &f->tok_embd));
    DCP_ASSERT_OK(dcp_ds2_matrix_upload(dev, &gh.output, "output", &f->output));
    DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)c->n_embd * 4, DCP_MEMORY_DEVICE, &f->out_norm));
    DCP_ASSERT_OK(dcp_buffer_upload(f->out_norm, 0, gh.output_norm, (uint64_t)c->n_embd * 4));
    dcp_ds2_global_host_free(&gh);
    f->L = calloc(c->n_layer, sizeof *f->L);
    f->pools = calloc(c->n_layer, sizeof *f->pools);
    f->plans = calloc(c->n_layer, sizeof *f->plans);
    const uint32_t R = c->kv_lora_rank, P = c->n_rot;
    for (uint32_t i = 0; i < MAX_CTX / PAGE; i++) f->bt[i] = i;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        dcp_ds2_layer_host h;
        DCP_ASSERT_OK(dcp_ds2_layer_slice(c, &m->t, l, &f->s, &h));
        DCP_ASSERT_OK(dcp_ds2_layer_upload(dev, &h, l, &f->L[l]));
        if (h.moe) {
            f->fe_pad = h.w_down_exps.k;
            f->fs_pad = h.w_down_sh.k;
        } else {
            f->f_pad = h.w_down.k;
        }
        dcp_ds2_layer_host_free(&h);
        dcp_kv_pool_config pc = {.kv_heads = 1, .head_dim = R + P, .page_size = PAGE, .dtype = DCP_DTYPE_F32,
                                 .num_pages = MAX_CTX / PAGE, .k_only = 1};
        DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &f->pools[l]));
        dcp_decode_config mc = {.kind = DCP_DECODE_LATENT, .batch = 1, .q_heads = c->n_head, .latent = R,
                                .max_blocks = MAX_CTX / PAGE, .scale = c->attn_scale};
        DCP_ASSERT_OK(dcp_decode_plan_create(f->pools[l], &mc, &f->plans[l]));
    }
    const uint32_t E = c->n_embd, H = c->n_head, QW = c->head_dim_qk, V = c->head_dim_v_mla, X = c->n_expert;
    const uint32_t U = c->n_expert_used;
    f->ids = buf(dev, 1);
    f->x = buf(dev, E);
    f->xn = buf(dev, E);
    f->qa = buf(dev, c->q_lora_rank);
    f->qan = buf(dev, c->q_lora_rank);
    f->q = buf(dev, (uint64_t)H * QW);
    f->kv = buf(dev, R + P);
    f->cn = buf(dev, R);
    f->Q = buf(dev, (uint64_t)H * (R + P));
    f->olat = buf(dev, (uint64_t)H * R);
    f->lse = buf(dev, H);
    f->o = buf(dev, (H * V + 3) / 4 * 4);
    f->gu = buf(dev, 2ull * c->n_ff);
    f->h = buf(dev, f->f_pad);
    f->logits_r = buf(dev, X);
    f->rids = buf(dev, U);
    f->rw = buf(dev, U);
    f->egu = buf(dev, (uint64_t)U * 2 * f->s.fe);
    f->eh = buf(dev, (uint64_t)U * f->fe_pad);
    f->sgu = buf(dev, 2ull * f->s.fs);
    f->sh = buf(dev, f->fs_pad);
    f->logits = buf(dev, c->n_vocab);
    f->slot = buf(dev, 1);
    f->cs = buf(dev, P);
    DCP_ASSERT_OK(dcp_cmd_create(dev, &f->cmd));
}

static void fwd_destroy(fwd *f)
{
    for (uint32_t l = 0; l < f->c->n_layer; l++) {
        dcp_decode_plan_destroy(f->plans[l]);
        dcp_kv_pool_destroy(f->pools[l]);
        dcp_ds2_layer_dev_destroy(&f->L[l]);
    }
    free(f->plans);
    free(f->pools);
    free(f->L);
    dcp_matrix_destroy(&f->tok_embd);
    dcp_matrix_destroy(&f->output);
    dcp_buffer *b[] = {f->out_norm, f->ids, f->x, f->xn, f->qa, f->qan, f->q, f->kv, f->cn, f->Q, f->olat, f->lse,
                       f->o, f->gu, f->h, f->logits_r, f->rids, f->rw, f->egu, f->eh, f->sgu, f->sh, f->logits,
                       f->slot, f->cs};
    for (size_t i = 0; i < sizeof b / sizeof b[0]; i++) dcp_buffer_destroy(b[i]);
    dcp_cmd_destroy(f->cmd);
}

/* One token at position pos: records the whole step into one command, runs it, reads the logits. */
static void fwd_step(fwd *f, int32_t token, uint32_t pos, float *logits)
{
    const dcp_model_config *c = f->c;
    const uint32_t E = c->n_embd, H = c->n_head, R = c->kv_lora_rank, P = c->n_rot, N = c->head_dim_nope;
    const uint32_t QW = c->head_dim_qk, V = c->head_dim_v_mla, X = c->n_expert, U = c->n_expert_used;
    const float eps = c->rms_eps;
    dcp_cmd *cmd = f->cmd;
    uint32_t id = (uint32_t)token, slot = pos, len = pos + 1;
    float cs[64];
    dcp_rope_params rp;
    dcp_rope_params_from_config(c, &rp);
    dcp_rope_cs(&rp, &pos, 1, cs);
    DCP_ASSERT_OK(dcp_buffer_upload(f->ids, 0, &id, 4));
    DCP_ASSERT_OK(dcp_buffer_upload(f->slot, 0, &slot, 4));
    DCP_ASSERT_OK(dcp_buffer_upload(f->cs, 0, cs, P * 4));
    DCP_ASSERT_OK(dcp_cmd_reset(cmd));
    DCP_ASSERT_OK(dcp_op_get_rows(cmd, &(dcp_get_rows_args){.w = &f->tok_embd, .ids = f->ids, .y = f->x, .y_stride = E,
                                                            .tokens = 1}));
    for (uint32_t l = 0; l < c->n_layer; l++) {
        const dcp_ds2_layer_dev *L = &f->L[l];
        DCP_ASSERT_OK(dcp_decode_plan_set(f->plans[l], &len, f->bt));
        dcp_cmd_barrier(cmd); /* x -> attn norm */
        DCP_ASSERT_OK(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = f->x, .x_stride = E, .w = L->attn_norm, .n = E,
                                                              .y = f->xn, .y_stride = E, .tokens = 1, .eps = eps}));
        dcp_cmd_barrier(cmd); /* xn -> projections */
        DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->wkv_a, .x = f->xn, .x_stride = E, .y = f->kv,
                                                            .y_stride = R + P, .tokens = 1}));
        if (c->q_lora_rank) {
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->wq_a, .x = f->xn, .x_stride = E, .y = f->qa,
                                                                .y_stride = c->q_lora_rank, .tokens = 1}));
            dcp_cmd_barrier(cmd); /* q_a -> its norm */
            DCP_ASSERT_OK(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = f->qa, .x_stride = c->q_lora_rank,
                                                                  .w = L->q_a_norm, .n = c->q_lora_rank, .y = f->qan,
                                                                  .y_stride = c->q_lora_rank, .tokens = 1,
                                                                  .eps = eps}));
            dcp_cmd_barrier(cmd); /* q_a norm -> q_b */
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->wq, .x = f->qan, .x_stride = c->q_lora_rank,
                                                                .y = f->q, .y_stride = H * QW, .tokens = 1}));
        } else {
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->wq, .x = f->xn, .x_stride = E, .y = f->q,
                                                                .y_stride = H * QW, .tokens = 1}));
        }
        dcp_cmd_barrier(cmd); /* kv, q -> latent norm, absorption, rope */
        DCP_ASSERT_OK(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = f->kv, .x_stride = R + P, .w = L->kv_a_norm, .n = R,
                                                              .y = f->cn, .y_stride = R, .tokens = 1, .eps = eps}));
        dcp_head_matmul_args ab = {.w = &L->wk_b, .heads = H, .rows = R, .tokens = 1, .x = f->q, .x_stride = H * QW,
                                   .x_head_stride = QW, .y = f->Q, .y_stride = H * (R + P), .y_head_stride = R + P};
        DCP_ASSERT_OK(dcp_op_head_matmul(cmd, &ab));
        dcp_mla_rope_args qr = {.tokens = 1, .heads = H, .n_rot = P, .src = f->q, .src_stride = H * QW,
                                .src_head_stride = QW, .src_offset = N, .dst = f->Q, .dst_stride = H * (R + P),
                                .dst_head_stride = R + P, .dst_offset = R, .cs = f->cs};
        DCP_ASSERT_OK(dcp_op_mla_rope(cmd, &qr));
        dcp_cmd_barrier(cmd); /* latent norm -> store */
        dcp_mla_kv_store_args ks = {.tokens = 1, .kv_lora = R, .n_rot = P, .c = f->cn, .c_stride = R, .kpe = f->kv,
                                    .kpe_stride = R + P, .kpe_offset = R, .cs = f->cs, .slot = f->slot,
                                    .pool = f->pools[l]};
        DCP_ASSERT_OK(dcp_op_mla_kv_store(cmd, &ks));
        dcp_cmd_barrier(cmd); /* store, Q -> decode */
        DCP_ASSERT_OK(dcp_decode_record(cmd, f->plans[l], f->Q, 0, f->olat, 0, f->lse, 0));
        dcp_cmd_barrier(cmd); /* o_lat -> W_UV */
        dcp_head_matmul_args uv = {.w = &L->wv_b, .heads = H, .rows = V, .tokens = 1, .x = f->olat, .x_stride = H * R,
                                   .x_head_stride = R, .y = f->o, .y_stride = H * V, .y_head_stride = V};
        DCP_ASSERT_OK(dcp_op_head_matmul(cmd, &uv));
        dcp_cmd_barrier(cmd); /* o -> attn_output */
        DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->wo, .x = f->o, .x_stride = L->wo.k, .y = f->x,
                                                            .y_stride = E, .tokens = 1, .accumulate = 1}));
        dcp_cmd_barrier(cmd); /* x -> ffn norm */
        DCP_ASSERT_OK(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = f->x, .x_stride = E, .w = L->ffn_norm, .n = E,
                                                              .y = f->xn, .y_stride = E, .tokens = 1, .eps = eps}));
        dcp_cmd_barrier(cmd); /* xn -> FFN */
        if (!L->moe) {
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->w_gu, .x = f->xn, .x_stride = E, .y = f->gu,
                                                                .y_stride = 2 * f->s.ff, .tokens = 1}));
            dcp_cmd_barrier(cmd); /* gate|up -> swiglu */
            DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = f->gu, .x_stride = 2 * f->s.ff, .y = f->h,
                                                                .y_stride = f->f_pad, .n = f->s.ff, .tokens = 1}));
            dcp_cmd_barrier(cmd); /* swiglu -> down */
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->w_down, .x = f->h, .x_stride = f->f_pad,
                                                                .y = f->x, .y_stride = E, .tokens = 1,
                                                                .accumulate = 1}));
            continue;
        }
        DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->gate_inp, .x = f->xn, .x_stride = E,
                                                            .y = f->logits_r, .y_stride = X, .tokens = 1}));
        DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->w_gu_sh, .x = f->xn, .x_stride = E, .y = f->sgu,
                                                            .y_stride = 2 * f->s.fs, .tokens = 1}));
        dcp_cmd_barrier(cmd); /* router logits -> route; shared gate|up -> swiglu */
        dcp_moe_route_args ra;
        dcp_moe_route_args_from_config(c, &ra);
        ra.tokens = 1;
        ra.logits = f->logits_r;
        ra.logits_stride = X;
        ra.bias = L->exp_probs_b;
        ra.ids = f->rids;
        ra.weights = f->rw;
        DCP_ASSERT_OK(dcp_op_moe_route(cmd, &ra));
        DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = f->sgu, .x_stride = 2 * f->s.fs, .y = f->sh,
                                                            .y_stride = f->fs_pad, .n = f->s.fs, .tokens = 1}));
        dcp_cmd_barrier(cmd); /* ids -> experts; shared h -> shared down */
        dcp_moe_matmul_args gu = {.w = &L->w_gu_exps, .n_expert = X, .rows = 2 * f->s.fe, .tokens = 1, .n_used = U,
                                  .ids = f->rids, .weights = f->rw, .x = f->xn, .x_stride = E, .y = f->egu,
                                  .y_stride = U * 2 * f->s.fe, .y_used_stride = 2 * f->s.fe};
        DCP_ASSERT_OK(dcp_op_moe_gate_up(cmd, &gu));
        DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &L->w_down_sh, .x = f->sh, .x_stride = f->fs_pad,
                                                            .y = f->x, .y_stride = E, .tokens = 1, .accumulate = 1}));
        dcp_cmd_barrier(cmd); /* experts' gate|up -> swiglu; shared down -> routed down (both add to x) */
        DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = f->egu, .x_stride = 2 * f->s.fe, .y = f->eh,
                                                            .y_stride = f->fe_pad, .n = f->s.fe, .tokens = U}));
        dcp_cmd_barrier(cmd); /* swiglu -> down */
        dcp_moe_matmul_args dn = {.w = &L->w_down_exps, .n_expert = X, .rows = E, .tokens = 1, .n_used = U,
                                  .ids = f->rids, .weights = f->rw, .x = f->eh, .x_stride = U * f->fe_pad,
                                  .x_used_stride = f->fe_pad, .y = f->x, .y_stride = E, .accumulate = 1};
        DCP_ASSERT_OK(dcp_op_moe_down(cmd, &dn));
    }
    dcp_cmd_barrier(cmd); /* x -> output norm */
    DCP_ASSERT_OK(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = f->x, .x_stride = E, .w = f->out_norm, .n = E,
                                                          .y = f->xn, .y_stride = E, .tokens = 1, .eps = eps}));
    dcp_cmd_barrier(cmd); /* xn -> output head */
    DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &f->output, .x = f->xn, .x_stride = E, .y = f->logits,
                                                        .y_stride = c->n_vocab, .tokens = 1}));
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    DCP_ASSERT_OK(dcp_buffer_download(f->logits, 0, logits, (uint64_t)c->n_vocab * 4));
}

/* Runs the prompt and `steps` greedy tokens on the device and on the oracle; returns the logits of
 * every position in *all (malloc'd, [positions][n_vocab]). */
static uint32_t run_model(dcp_context *ctx, const char *path, uint32_t steps, float **all)
{
    dcp_test_ds2 m;
    dcp_test_ds2_load(&m, path, 0, MAX_CTX);
    const dcp_model_config *c = &m.cfg;
    fwd f;
    fwd_create(&f, dcp_context_device(ctx, 0), &m);
    dcp_tokenizer *tok;
    DCP_ASSERT_OK(dcp_tokenizer_create(m.g, &tok));
    int32_t *ids;
    size_t n_prompt;
    DCP_ASSERT_OK(dcp_tokenizer_encode(tok, "Once upon a time", 16, DCP_TOKENIZE_ADD_BOS, &ids, &n_prompt));
    const uint32_t total = (uint32_t)n_prompt + steps;
    assert_true(total <= MAX_CTX);
    *all = malloc((size_t)total * c->n_vocab * sizeof **all);
    double *ref = malloc(c->n_vocab * sizeof *ref);
    int32_t tg = ids[0], tr = ids[0];
    double worst = 0.0;
    for (uint32_t pos = 0; pos < total; pos++) {
        float *lg = *all + (size_t)pos * c->n_vocab;
        fwd_step(&f, tg, pos, lg);
        dcp_ref_ds2_step(&m.ref, tr, pos, ref);
        for (uint32_t v = 0; v < c->n_vocab; v++) worst = fmax(worst, fabs(lg[v] - ref[v]));
        if (pos + 1 < n_prompt) {
            tg = tr = ids[pos + 1];
            continue;
        }
        uint32_t bg = 0, br = 0;
        for (uint32_t v = 1; v < c->n_vocab; v++) {
            if (lg[v] > lg[bg]) bg = v;
            if (ref[v] > ref[br]) br = v;
        }
        if (bg != br) fail_msg("%s: position %u: the device chose token %u, the oracle %u", path, pos, bg, br);
        tg = tr = (int32_t)bg;
    }
    printf("%s: %u positions (prompt %zu), max |logit - oracle| = %.3g\n", path, total, n_prompt, worst);
    if (!(worst <= 1e-4)) fail_msg("%s: logits differ from the oracle by %.3g > 1e-4", path, worst);
    free(ids);
    free(ref);
    dcp_tokenizer_destroy(tok);
    fwd_destroy(&f);
    dcp_test_ds2_free(&m);
    return total;
}

static void test_forward(void **state)
{
    dcp_context *ctx = *state;
    char pa[512], pb[512], pc[512];
    dcp_test_ds2_make(dcp_test_ds2_tmp("fwd-A.gguf", pa, sizeof pa), 'A', 0);
    dcp_test_ds2_make(dcp_test_ds2_tmp("fwd-B.gguf", pb, sizeof pb), 'B', 0);
    dcp_test_ds2_make(dcp_test_ds2_tmp("fwd-C.gguf", pc, sizeof pc), 'C', 0);
    float *la, *lb, *lc;
    uint32_t na = run_model(ctx, pa, 24, &la);
    run_model(ctx, pb, 40, &lb); /* past YaRN's original context of 32 */
    uint32_t nc = run_model(ctx, pc, 24, &lc);
    assert_int_equal(na, nc);
    if (memcmp(la, lc, (size_t)na * dcp_test_model_vocab_size() * sizeof *la) != 0)
        fail_msg("layouts A and C give different logits on the device");
    free(la);
    free(lb);
    free(lc);
    remove(pa);
    remove(pb);
    remove(pc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
