/* The MoE kernels against their double-precision references: moe_route (softmax and sigmoid
 * gating, selection bias, group limits, renormalisation, scale; the routing shapes of the test
 * models, DeepSeek-V2-Lite, V2 and V3), moe_gate_up / moe_down (weight dtypes, padded widths, an
 * out-of-range id; column windows cutting the blocks of block-quantized types), and a whole MoE feed-forward of test model B's MoE layer split over TP 1, 2, 4
 * (router, experts and shared expert from dcp_ds2_layer_slice / dcp_ds2_layer_upload; the ranks'
 * partial outputs summed) against the double-precision FFN. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/arch/deepseek2_weights.h"
#include "dcpvk/ops.h"
#include "ref/deepseek2_ref.h"
#include "ref/mla_ref.h"
#include "ref/model_ref.h"
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

static void test_route(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_test_rng rng = {41};
    static const struct {
        uint32_t X, K, G, GU;
        dcp_expert_gating gating;
        int bias, norm;
        float scale;
    } cases[] = {
        {6, 2, 1, 1, DCP_EXPERT_GATING_SOFTMAX, 0, 0, 1.0f},   /* test model A */
        {6, 2, 3, 2, DCP_EXPERT_GATING_SIGMOID, 1, 1, 2.5f},   /* test model B */
        {64, 6, 1, 1, DCP_EXPERT_GATING_SOFTMAX, 0, 0, 1.0f},  /* DeepSeek-V2-Lite */
        {160, 6, 8, 3, DCP_EXPERT_GATING_SOFTMAX, 0, 0, 16.0f},/* DeepSeek-V2 */
        {256, 8, 8, 4, DCP_EXPERT_GATING_SIGMOID, 1, 1, 2.5f}, /* DeepSeek-V3 */
        {8, 8, 2, 2, DCP_EXPERT_GATING_SOFTMAX, 1, 1, 1.0f},   /* every expert */
    };
    const uint32_t T = 7, stride = 260;
    uint32_t bias_matters = 0, groups_matter = 0; /* choices the bias / the group limit changed */
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        const uint32_t X = cases[ci].X, K = cases[ci].K;
        float *logits = malloc((size_t)T * stride * 4), *bias = malloc(X * 4);
        for (uint32_t i = 0; i < T * stride; i++) logits[i] = dcp_test_rng_uniform(&rng, -3, 3);
        for (uint32_t e = 0; e < X; e++) bias[e] = dcp_test_rng_uniform(&rng, -0.1f, 0.1f);
        dcp_buffer *lb = dcp_test_upload(dev, logits, (uint64_t)T * stride * 4);
        dcp_buffer *bb = dcp_test_upload(dev, bias, X * 4);
        dcp_buffer *ib = dcp_test_upload(dev, NULL, (uint64_t)T * K * 4);
        dcp_buffer *wb = dcp_test_upload(dev, NULL, (uint64_t)T * K * 4);
        dcp_cmd *cmd;
        DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
        dcp_moe_route_args a = {.tokens = T, .n_expert = X, .n_used = K, .n_groups = cases[ci].G,
                                .n_groups_used = cases[ci].GU, .gating = cases[ci].gating, .norm = cases[ci].norm,
                                .scale = cases[ci].scale, .logits = lb, .logits_stride = stride,
                                .bias = cases[ci].bias ? bb : NULL, .ids = ib, .weights = wb};
        DCP_ASSERT_OK(dcp_op_moe_route(cmd, &a));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        uint32_t ids[8 * 7];
        float w[8 * 7];
        DCP_ASSERT_OK(dcp_buffer_download(ib, 0, ids, (uint64_t)T * K * 4));
        DCP_ASSERT_OK(dcp_buffer_download(wb, 0, w, (uint64_t)T * K * 4));
        dcp_ref_moe_route_args ra = {.n_expert = X, .n_used = K, .n_groups = cases[ci].G,
            .n_groups_used = cases[ci].GU, .sigmoid = cases[ci].gating == DCP_EXPERT_GATING_SIGMOID,
            .norm = cases[ci].norm, .scale = cases[ci].scale};
        double *ld = malloc(X * sizeof *ld), rw[8];
        uint32_t rid[8];
        for (uint32_t t = 0; t < T; t++) {
            for (uint32_t e = 0; e < X; e++) ld[e] = logits[(size_t)t * stride + e];
            dcp_ref_moe_route(&ra, ld, cases[ci].bias ? bias : NULL, rid, rw, NULL);
            uint32_t alt[8];
            double aw[8];
            if (cases[ci].bias) {
                dcp_ref_moe_route(&ra, ld, NULL, alt, aw, NULL);
                bias_matters += memcmp(alt, rid, K * sizeof *alt) != 0;
            }
            if (cases[ci].G > 1 && cases[ci].K < cases[ci].X) {
                dcp_ref_moe_route_args flat = ra;
                flat.n_groups = 1;
                dcp_ref_moe_route(&flat, ld, cases[ci].bias ? bias : NULL, alt, aw, NULL);
                groups_matter += memcmp(alt, rid, K * sizeof *alt) != 0;
            }
            for (uint32_t k = 0; k < K; k++) {
                if (ids[t * K + k] != rid[k])
                    fail_msg("route case %zu token %u: slot %u chose expert %u, reference %u", ci, t, k, ids[t * K + k],
                             rid[k]);
                if (fabs(w[t * K + k] - rw[k]) > 1e-6 * (1.0 + fabs(rw[k])))
                    fail_msg("route case %zu token %u: weight %u = %.9g, reference %.9g", ci, t, k, w[t * K + k], rw[k]);
            }
        }
        dcp_cmd_destroy(cmd);
        dcp_buffer_destroy(lb);
        dcp_buffer_destroy(bb);
        dcp_buffer_destroy(ib);
        dcp_buffer_destroy(wb);
        free(logits);
        free(bias);
        free(ld);
    }
    /* The cases exercise the bias and the group limit: they change some choices. */
    printf("choices changed by the selection bias: %u, by the group limit: %u\n", bias_matters, groups_matter);
    assert_true(bias_matters > 0 && groups_matter > 0);
    /* Bad routing shapes. */
    dcp_buffer *b = dcp_test_upload(dev, NULL, 4096);
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    dcp_moe_route_args bad = {.tokens = 1, .n_expert = 6, .n_used = 2, .n_groups = 4, .n_groups_used = 2,
                              .gating = DCP_EXPERT_GATING_SOFTMAX, .scale = 1.0f, .logits = b, .logits_stride = 6,
                              .ids = b, .weights = b};
    assert_int_equal(dcp_op_moe_route(cmd, &bad), DCP_ERR_INVALID_ARGUMENT);
    bad.n_groups = 1;
    bad.n_expert = 600;
    bad.logits_stride = 600;
    assert_int_equal(dcp_op_moe_route(cmd, &bad), DCP_ERR_INVALID_ARGUMENT);
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(b);
}

static void test_expert_matmuls(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_test_rng rng = {51};
    enum { X = 5, E = 256, FE = 14, FP = 16, U = 2, T = 3 }; /* E: whole blocks of 256 for IQ4_XS */
    const uint32_t rows_gu = X * 2 * FE, rows_d = X * E;
    static const dcp_ggml_type types[] = {DCP_GGML_TYPE_F32,  DCP_GGML_TYPE_F16,    DCP_GGML_TYPE_Q8_0,
                                          DCP_GGML_TYPE_Q4_1, DCP_GGML_TYPE_IQ4_NL, DCP_GGML_TYPE_IQ4_XS};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        /* gate|up: [X 2 FE][E]; down: [X E][FP] with zero pad columns. */
        float *wgu = malloc((size_t)rows_gu * E * 4), *wd = calloc((size_t)rows_d * FP, 4);
        for (size_t i = 0; i < (size_t)rows_gu * E; i++) wgu[i] = dcp_test_rng_uniform(&rng, -0.2f, 0.2f);
        for (size_t r = 0; r < rows_d; r++)
            for (uint32_t k = 0; k < FE; k++) wd[r * FP + k] = dcp_test_rng_uniform(&rng, -0.3f, 0.3f);
        /* The padded expert width (16) is no whole block of the 32-element types: their down is F32. */
        dcp_ggml_type tdown = types[ti] == DCP_GGML_TYPE_F16 ? DCP_GGML_TYPE_F16 : DCP_GGML_TYPE_F32;
        uint32_t be, bb;
        dcp_ggml_type_block(types[ti], &be, &bb);
        void *qgu = malloc((size_t)rows_gu * E / be * bb);
        DCP_ASSERT_OK(dcp_ggml_from_f32(types[ti], wgu, qgu, (uint64_t)rows_gu * E));
        DCP_ASSERT_OK(dcp_ggml_to_f32(types[ti], qgu, wgu, (uint64_t)rows_gu * E));
        dcp_ggml_type_block(tdown, &be, &bb);
        void *qd = malloc((size_t)rows_d * FP / be * bb);
        DCP_ASSERT_OK(dcp_ggml_from_f32(tdown, wd, qd, (uint64_t)rows_d * FP));
        DCP_ASSERT_OK(dcp_ggml_to_f32(tdown, qd, wd, (uint64_t)rows_d * FP));
        dcp_matrix mgu, md;
        const void *p1[1] = {qgu}, *p2[1] = {qd};
        DCP_ASSERT_OK(dcp_matrix_create(dev, types[ti], E, 1, p1, &rows_gu, &mgu));
        DCP_ASSERT_OK(dcp_matrix_create(dev, tdown, FP, 1, p2, &rows_d, &md));
        const uint32_t ids[T * U] = {4, 0, 2, 3, 9 /* out of range: contributes 0 */, 1};
        float wts[T * U], x[T * E], y0[T * E];
        for (uint32_t i = 0; i < T * U; i++) wts[i] = dcp_test_rng_uniform(&rng, 0.1f, 1.0f);
        for (uint32_t i = 0; i < T * E; i++) x[i] = dcp_test_rng_uniform(&rng, -1, 1);
        for (uint32_t i = 0; i < T * E; i++) y0[i] = dcp_test_rng_uniform(&rng, -1, 1);
        dcp_buffer *ib = dcp_test_upload(dev, ids, sizeof ids), *wb = dcp_test_upload(dev, wts, sizeof wts);
        dcp_buffer *xb = dcp_test_upload(dev, x, sizeof x);
        dcp_buffer *gub = dcp_test_upload(dev, NULL, (uint64_t)T * U * 2 * FE * 4);
        dcp_buffer *hb = dcp_test_upload(dev, NULL, (uint64_t)T * U * FP * 4);
        dcp_buffer *yb = dcp_test_upload(dev, y0, sizeof y0);
        dcp_cmd *cmd;
        DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
        dcp_moe_matmul_args gu = {.w = &mgu, .n_expert = X, .rows = 2 * FE, .tokens = T, .n_used = U, .ids = ib,
                                  .weights = wb, .x = xb, .x_stride = E, .y = gub, .y_stride = U * 2 * FE,
                                  .y_used_stride = 2 * FE};
        DCP_ASSERT_OK(dcp_op_moe_gate_up(cmd, &gu));
        dcp_cmd_barrier(cmd); /* gate|up -> swiglu */
        DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = gub, .x_stride = 2 * FE, .y = hb, .y_stride = FP,
                                                            .n = FE, .tokens = T * U}));
        dcp_cmd_barrier(cmd); /* swiglu -> down */
        dcp_moe_matmul_args dn = {.w = &md, .n_expert = X, .rows = E, .tokens = T, .n_used = U, .ids = ib,
                                  .weights = wb, .x = hb, .x_stride = U * FP, .x_used_stride = FP, .y = yb,
                                  .y_stride = E, .accumulate = 1};
        DCP_ASSERT_OK(dcp_op_moe_down(cmd, &dn));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        float gug[T * U * 2 * FE], yg[T * E], gur[T * U * 2 * FE], h[T * U * FP], yr[T * E];
        DCP_ASSERT_OK(dcp_buffer_download(gub, 0, gug, sizeof gug));
        DCP_ASSERT_OK(dcp_buffer_download(yb, 0, yg, sizeof yg));
        dcp_ref_moe_gate_up(X, 2 * FE, E, T, U, wgu, ids, x, E, 0, gur, U * 2 * FE, 2 * FE);
        memset(h, 0, sizeof h);
        for (uint32_t r = 0; r < T * U; r++) dcp_ref_swiglu(FE, 1, gug + r * 2 * FE, h + r * FP);
        memcpy(yr, y0, sizeof yr);
        dcp_ref_moe_down(X, E, FP, T, U, wd, ids, wts, h, U * FP, FP, yr, E, 1);
        for (uint32_t i = 0; i < T * U * 2 * FE; i++)
            if (fabs(gug[i] - gur[i]) > 2e-5 * (1 + fabs(gur[i]))) fail_msg("gate_up %s [%u]: %g vs %g",
                                                                           dcp_ggml_type_name(types[ti]), i, gug[i], gur[i]);
        for (uint32_t i = 0; i < T * E; i++)
            if (fabs(yg[i] - yr[i]) > 2e-5 * (1 + fabs(yr[i]))) fail_msg("down %s [%u]: %g vs %g",
                                                                        dcp_ggml_type_name(types[ti]), i, yg[i], yr[i]);
        dcp_cmd_destroy(cmd);
        dcp_buffer *bufs[] = {ib, wb, xb, gub, hb, yb};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
        dcp_matrix_destroy(&mgu);
        dcp_matrix_destroy(&md);
        free(wgu);
        free(wd);
        free(qgu);
        free(qd);
    }
}

/* Column windows (dcp_matrix_window: a row-parallel expert slice held as the whole blocks covering
 * its columns, as the loader holds a TP rank's ffn_down_exps): moe_gate_up and moe_down through a
 * window against the double references of the window's columns only (dcp_ref_moe_gate_up /
 * dcp_ref_moe_down of W[:, col0 .. col0 + cols)), for a legacy block type (Q8_0, Q4_0: 32) and
 * k-quants with and without a min (Q4_K, Q6_K: 256), windows cutting the blocks at both ends, the
 * last only and the first only; an out-of-range id; down accumulating. x's columns past the window
 * (its pad to 4 and the slot stride's, as far as any stored column would reach) hold NaN: a read
 * of one would show. */
static void test_expert_matmuls_window(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_test_rng rng = {53};
    enum { X = 3, RG = 10, RD = 19, U = 2, T = 4 };
    static const dcp_ggml_type types[] = {DCP_GGML_TYPE_Q8_0, DCP_GGML_TYPE_Q4_0, DCP_GGML_TYPE_Q4_K,
                                          DCP_GGML_TYPE_Q6_K};
    /* (blocks held, col0, cols), col0 and cols in 1/256 of a block: both ends, the last, the first */
    static const uint32_t wins[][3] = {{3, 37, 600}, {2, 0, 301}, {2, 200, 312}};
    const uint32_t ids[T * U] = {2, 0, 1, 7 /* out of range: contributes 0 */, 0, 2, 1, 1};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        uint32_t be, bb;
        assert_true(dcp_ggml_type_block(types[ti], &be, &bb));
        double worst = 0.0;
        for (size_t wi = 0; wi < sizeof wins / sizeof wins[0]; wi++) {
            const uint32_t held = wins[wi][0] * be, col0 = wins[wi][1] * be / 256, cols = wins[wi][2] * be / 256;
            /* x's slot stride past every stored column's place: a read outside the window meets NaN */
            const uint32_t K = (cols + 3) / 4 * 4, xus = held + 4, xs = U * xus;
            assert_true(col0 % be != 0 || (col0 + cols) % be != 0); /* the window cuts a block */
            /* W: gate|up [X RG][held], down [X RD][held]; deq their dequantized values */
            const uint32_t rows[2] = {X * RG, X * RD};
            dcp_matrix m[2];
            float *win[2];
            for (int d = 0; d < 2; d++) {
                float *w = dcp_test_rand_floats(&rng, (uint64_t)rows[d] * held, -1, 1);
                void *q = malloc((uint64_t)rows[d] * held / be * bb);
                DCP_ASSERT_OK(dcp_ggml_from_f32(types[ti], w, q, (uint64_t)rows[d] * held));
                DCP_ASSERT_OK(dcp_ggml_to_f32(types[ti], q, w, (uint64_t)rows[d] * held));
                const void *parts[1] = {q};
                DCP_ASSERT_OK(dcp_matrix_create(dev, types[ti], held, 1, parts, &rows[d], &m[d]));
                DCP_ASSERT_OK(dcp_matrix_window(&m[d], K, col0, cols));
                assert_int_equal(m[d].cols, cols);
                win[d] = malloc((uint64_t)rows[d] * cols * sizeof(float)); /* the window's columns */
                for (uint32_t r = 0; r < rows[d]; r++)
                    memcpy(win[d] + (uint64_t)r * cols, w + (uint64_t)r * held + col0, cols * sizeof(float));
                free(w);
                free(q);
            }
            /* x: gate|up reads slot 0 of [T][U][xus] (one input per token), down every slot */
            float *x = dcp_test_rand_floats(&rng, (uint64_t)T * xs, -1, 1);
            float *y0 = dcp_test_rand_floats(&rng, (uint64_t)T * RD, -1, 1);
            float *wts = dcp_test_rand_floats(&rng, T * U, 0.1f, 1.0f);
            for (uint32_t s = 0; s < T * U; s++)
                for (uint32_t c = cols; c < xus; c++) x[(uint64_t)s * xus + c] = NAN;
            dcp_buffer *ib = dcp_test_upload(dev, ids, sizeof ids), *wb = dcp_test_upload(dev, wts, T * U * 4);
            dcp_buffer *xb = dcp_test_upload(dev, x, (uint64_t)T * xs * 4);
            dcp_buffer *gub = dcp_test_upload(dev, NULL, (uint64_t)T * U * RG * 4);
            dcp_buffer *yb = dcp_test_upload(dev, y0, (uint64_t)T * RD * 4);
            dcp_cmd *cmd;
            DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
            dcp_moe_matmul_args gu = {.w = &m[0], .n_expert = X, .rows = RG, .tokens = T, .n_used = U, .ids = ib,
                                      .weights = wb, .x = xb, .x_stride = xs, .y = gub, .y_stride = U * RG,
                                      .y_used_stride = RG};
            DCP_ASSERT_OK(dcp_op_moe_gate_up(cmd, &gu));
            dcp_moe_matmul_args dn = {.w = &m[1], .n_expert = X, .rows = RD, .tokens = T, .n_used = U, .ids = ib,
                                      .weights = wb, .x = xb, .x_stride = xs, .x_used_stride = xus, .y = yb,
                                      .y_stride = RD, .accumulate = 1};
            DCP_ASSERT_OK(dcp_op_moe_down(cmd, &dn));
            DCP_ASSERT_OK(dcp_cmd_run(cmd));
            float gug[T * U * RG], yg[T * RD], gur[T * U * RG], yr[T * RD];
            DCP_ASSERT_OK(dcp_buffer_download(gub, 0, gug, sizeof gug));
            DCP_ASSERT_OK(dcp_buffer_download(yb, 0, yg, sizeof yg));
            dcp_ref_moe_gate_up(X, RG, cols, T, U, win[0], ids, x, xs, 0, gur, U * RG, RG);
            memcpy(yr, y0, sizeof yr);
            dcp_ref_moe_down(X, RD, cols, T, U, win[1], ids, wts, x, xs, xus, yr, RD, 1);
            /* f32 accumulation over up to 600 products of magnitude <= 1 */
            const double tol = 2e-6 * cols + 1e-6;
            for (uint32_t i = 0; i < T * U * RG; i++) {
                const double e = fabs(gug[i] - gur[i]);
                worst = fmax(worst, e);
                if (!(e <= tol))
                    fail_msg("gate_up %s window [%u, %u) of %u: [%u] = %g, reference %g", dcp_ggml_type_name(types[ti]),
                             col0, col0 + cols, held, i, gug[i], gur[i]);
            }
            for (uint32_t i = 0; i < T * RD; i++) {
                const double e = fabs(yg[i] - yr[i]);
                worst = fmax(worst, e);
                if (!(e <= tol))
                    fail_msg("down %s window [%u, %u) of %u: [%u] = %g, reference %g", dcp_ggml_type_name(types[ti]),
                             col0, col0 + cols, held, i, yg[i], yr[i]);
            }
            dcp_cmd_destroy(cmd);
            dcp_buffer *bufs[] = {ib, wb, xb, gub, yb};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
            for (int d = 0; d < 2; d++) {
                dcp_matrix_destroy(&m[d]);
                free(win[d]);
            }
            free(x);
            free(y0);
            free(wts);
        }
        printf("moe_gate_up / moe_down %s with column windows: max abs error %.3g\n", dcp_ggml_type_name(types[ti]),
               worst);
    }
}

/* Test model B's MoE layer: the whole feed-forward over TP ranks against the double FFN. */
static void test_moe_ffn_tp(void **state)
{
    dcp_context *ctx = *state;
    char path[512];
    dcp_test_ds2_make(dcp_test_ds2_tmp("moe-B.gguf", path, sizeof path), 'B', 0);
    dcp_test_ds2 m;
    dcp_test_ds2_load(&m, path, 0, 4);
    const dcp_model_config *c = &m.cfg;
    const dcp_ref_ds2_layer *L = &m.layers[1];
    const uint32_t E = c->n_embd, X = c->n_expert, U = c->n_expert_used, FE = c->n_ff_exp, FS = FE * c->n_expert_shared;
    const uint32_t T = 5;
    dcp_test_rng rng = {61};
    float xn[5 * 64];
    for (uint32_t i = 0; i < T * E; i++) xn[i] = dcp_test_rng_uniform(&rng, -1.5f, 1.5f);
    /* The double FFN: router, routed experts, shared expert. */
    double want[5 * 64];
    dcp_ref_moe_route_args ra = {.n_expert = X, .n_used = U, .n_groups = c->n_expert_groups,
        .n_groups_used = c->n_expert_groups_used, .sigmoid = c->expert_gating == DCP_EXPERT_GATING_SIGMOID,
        .norm = (int)c->expert_weights_norm, .scale = c->expert_weights_scale};
    uint32_t want_ids[5 * 8];
    for (uint32_t t = 0; t < T; t++) {
        const float *x = xn + t * E;
        double lg[64], rw[8];
        uint32_t ids[8];
        for (uint32_t e = 0; e < X; e++) {
            double s = 0;
            for (uint32_t i = 0; i < E; i++) s += (double)L->gate_inp[(size_t)e * E + i] * x[i];
            lg[e] = s;
        }
        dcp_ref_moe_route(&ra, lg, L->exp_probs_b, ids, rw, NULL);
        memcpy(want_ids + t * U, ids, U * sizeof *ids);
        for (uint32_t i = 0; i < E; i++) want[t * E + i] = 0.0;
        for (uint32_t j = 0; j <= U; j++) {
            const int shared = j == U;
            const uint32_t F = shared ? FS : FE, e = shared ? 0 : ids[j];
            const float *wg = shared ? L->gate_sh : L->gate_exps + (size_t)e * FE * E;
            const float *wu = shared ? L->up_sh : L->up_exps + (size_t)e * FE * E;
            const float *wdn = shared ? L->down_sh : L->down_exps + (size_t)e * E * FE;
            double hh[128];
            for (uint32_t f = 0; f < F; f++) {
                double g = 0, u = 0;
                for (uint32_t i = 0; i < E; i++) {
                    g += (double)wg[(size_t)f * E + i] * x[i];
                    u += (double)wu[(size_t)f * E + i] * x[i];
                }
                hh[f] = g / (1 + exp(-g)) * u;
            }
            for (uint32_t i = 0; i < E; i++) {
                double s = 0;
                for (uint32_t f = 0; f < F; f++) s += (double)wdn[(size_t)i * F + f] * hh[f];
                want[t * E + i] += (shared ? 1.0 : rw[j]) * s;
            }
        }
    }
    const int ndev = dcp_context_device_count(ctx);
    for (uint32_t tp = 1; tp <= 4; tp *= 2) {
        double got[5 * 64] = {0};
        for (uint32_t rank = 0; rank < tp; rank++) {
            dcp_device *dev = dcp_context_device(ctx, (int)(rank % (uint32_t)ndev));
            dcp_ds2_shard s;
            DCP_ASSERT_OK(dcp_ds2_shard_for_rank(c, tp, rank, 1, 0, &s));
            dcp_ds2_layer_host h;
            dcp_ds2_layer_dev d;
            DCP_ASSERT_OK(dcp_ds2_layer_slice(c, &m.t, 1, &s, &h));
            DCP_ASSERT_OK(dcp_ds2_layer_upload(dev, &h, 1, &d));
            const uint32_t fp = d.w_down_exps.k, fsp = d.w_down_sh.k; /* x widths (a window's k) */
            dcp_buffer *xb = dcp_test_upload(dev, xn, sizeof xn);
            dcp_buffer *lgb = dcp_test_upload(dev, NULL, (uint64_t)T * X * 4);
            dcp_buffer *ib = dcp_test_upload(dev, NULL, (uint64_t)T * U * 4);
            dcp_buffer *wb = dcp_test_upload(dev, NULL, (uint64_t)T * U * 4);
            dcp_buffer *gub = dcp_test_upload(dev, NULL, (uint64_t)T * U * 2 * s.fe * 4);
            dcp_buffer *hb = dcp_test_upload(dev, NULL, (uint64_t)T * U * fp * 4);
            dcp_buffer *sgu = dcp_test_upload(dev, NULL, (uint64_t)T * 2 * s.fs * 4);
            dcp_buffer *sh = dcp_test_upload(dev, NULL, (uint64_t)T * fsp * 4);
            dcp_buffer *yb = dcp_test_upload(dev, NULL, (uint64_t)T * E * 4);
            dcp_cmd *cmd;
            DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &d.gate_inp, .x = xb, .x_stride = E, .y = lgb,
                                                                .y_stride = X, .tokens = T}));
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &d.w_gu_sh, .x = xb, .x_stride = E, .y = sgu,
                                                                .y_stride = 2 * s.fs, .tokens = T}));
            dcp_cmd_barrier(cmd); /* router logits, shared gate|up -> route, swiglu */
            dcp_moe_route_args ra2;
            dcp_moe_route_args_from_config(c, &ra2);
            ra2.tokens = T;
            ra2.logits = lgb;
            ra2.logits_stride = X;
            ra2.bias = d.exp_probs_b;
            ra2.ids = ib;
            ra2.weights = wb;
            DCP_ASSERT_OK(dcp_op_moe_route(cmd, &ra2));
            DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = sgu, .x_stride = 2 * s.fs, .y = sh,
                                                                .y_stride = fsp, .n = s.fs, .tokens = T}));
            dcp_cmd_barrier(cmd); /* route -> experts; shared swiglu -> shared down */
            dcp_moe_matmul_args gu = {.w = &d.w_gu_exps, .n_expert = X, .rows = 2 * s.fe, .tokens = T, .n_used = U,
                                      .ids = ib, .weights = wb, .x = xb, .x_stride = E, .y = gub,
                                      .y_stride = U * 2 * s.fe, .y_used_stride = 2 * s.fe};
            DCP_ASSERT_OK(dcp_op_moe_gate_up(cmd, &gu));
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &d.w_down_sh, .x = sh, .x_stride = fsp, .y = yb,
                                                                .y_stride = E, .tokens = T}));
            dcp_cmd_barrier(cmd); /* experts' gate|up -> swiglu; shared down -> routed down (accumulates) */
            DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = gub, .x_stride = 2 * s.fe, .y = hb, .y_stride = fp,
                                                                .n = s.fe, .tokens = T * U}));
            dcp_cmd_barrier(cmd); /* swiglu -> down */
            dcp_moe_matmul_args dn = {.w = &d.w_down_exps, .n_expert = X, .rows = E, .tokens = T, .n_used = U,
                                      .ids = ib, .weights = wb, .x = hb, .x_stride = U * fp, .x_used_stride = fp,
                                      .y = yb, .y_stride = E, .accumulate = 1};
            DCP_ASSERT_OK(dcp_op_moe_down(cmd, &dn));
            DCP_ASSERT_OK(dcp_cmd_run(cmd));
            float y[5 * 64];
            uint32_t ids[5 * 8];
            DCP_ASSERT_OK(dcp_buffer_download(yb, 0, y, sizeof y));
            DCP_ASSERT_OK(dcp_buffer_download(ib, 0, ids, (uint64_t)T * U * 4));
            assert_memory_equal(ids, want_ids, (size_t)T * U * 4);
            for (uint32_t i = 0; i < T * E; i++) got[i] += y[i];
            dcp_cmd_destroy(cmd);
            dcp_buffer *bufs[] = {xb, lgb, ib, wb, gub, hb, sgu, sh, yb};
            for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
            dcp_ds2_layer_dev_destroy(&d);
            dcp_ds2_layer_host_free(&h);
        }
        double err = 0;
        for (uint32_t i = 0; i < T * E; i++) err = fmax(err, fabs(got[i] - want[i]));
        printf("MoE FFN of test model B at TP %u: max error %.3g\n", tp, err);
        assert_true(err < 2e-5);
    }
    dcp_test_ds2_free(&m);
    remove(path);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_route),
        cmocka_unit_test(test_expert_matmuls),
        cmocka_unit_test(test_expert_matmuls_window),
        cmocka_unit_test(test_moe_ffn_tp),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
