/* Model kernels against the double-precision CPU references (src/ref/model_ref.c): matmul for
 * F32, F16, BF16 and Q8_0 weights over several shapes and token counts (plain and accumulating,
 * with row offsets), get_rows, rmsnorm, rmsnorm_heads, add_rows, rope_store (RoPE + KV page write,
 * f32 and f16 pools, NORM and NEOX pairs), swiglu, add and argmax; matmul through a column window
 * (Q8_0, Q4_K, Q6_K, Q4_0); matmul with the SwiGLU fused into its store (bitwise the unfused ops)
 * and with the RMSNorm fused into its load (F32, F16, Q8_0, Q4_1, Q4_K, Q6_K, IQ4_XS). Prints the
 * max error of every kernel. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/dtype.h"
#include "dcpvk/gguf.h"
#include "dcpvk/kv.h"
#include "kernels/kv_params.h"
#include "ops/ops_internal.h"
#include "dcpvk/ops.h"
#include "ref/cp_ref.h"
#include "ref/kv_ref.h"
#include "ref/model_ref.h"
#include "vkutil.h"

/* Tolerances of this file: matmul |y - y_ref| <= MATMUL_REL * sum_k |w x| (f32 accumulation);
 * rmsnorm and swiglu relative to 1 + |y_ref|; RoPE absolute (values in [-1, 1]). */
#define MATMUL_REL 2e-6
#define ELEM_REL 2e-6
#define ROPE_ABS 2e-6

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

static void run(dcp_cmd *cmd) { DCP_ASSERT_OK(dcp_cmd_run(cmd)); }

/* Encodes w [rows][k] f32 into GGUF bytes of type, uploads as a matrix, returns the dequantised
 * values the reference uses in *deq. */
static void make_matrix(dcp_device *dev, dcp_ggml_type type, uint32_t rows, uint32_t k, const float *w,
                        dcp_matrix *m, float **deq)
{
    uint32_t be, bb;
    assert_true(dcp_ggml_type_block(type, &be, &bb));
    uint64_t bytes = (uint64_t)rows * k / be * bb;
    void *raw = malloc(bytes);
    DCP_ASSERT_OK(dcp_ggml_from_f32(type, w, raw, (uint64_t)rows * k));
    *deq = malloc((uint64_t)rows * k * sizeof(float));
    DCP_ASSERT_OK(dcp_ggml_to_f32(type, raw, *deq, (uint64_t)rows * k));
    /* Two parts, to exercise the fused upload. */
    uint32_t r0 = rows / 3, prow[2] = {r0, rows - r0};
    const void *parts[2] = {raw, (const uint8_t *)raw + (uint64_t)r0 * k / be * bb};
    DCP_ASSERT_OK(dcp_matrix_create(dev, type, k, r0 ? 2 : 1, r0 ? parts : parts + 1, r0 ? prow : prow + 1, m));
    free(raw);
}

static void test_matmul(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    static const dcp_ggml_type types[4] = {DCP_GGML_TYPE_F32, DCP_GGML_TYPE_F16, DCP_GGML_TYPE_BF16,
                                           DCP_GGML_TYPE_Q8_0};
    static const uint32_t shapes[][3] = {/* rows, k, tokens */
                                         {64, 64, 1}, {172, 64, 3}, {64, 160, 9}, {513, 256, 17},
                                         {7, 4096, 2}, {1000, 128, 8}};
    dcp_test_rng rng = {11};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    for (int ti = 0; ti < 4; ti++) {
        dcp_test_matmul_worst worst = {0};
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int acc = 0; acc < 2; acc++) {
                const uint32_t N = shapes[si][0], K = shapes[si][1], T = shapes[si][2];
                const uint32_t xoff = acc ? 8 : 0, xs = K + (acc ? 4 : 0), ys = N + (acc ? 3 : 0);
                float *w = dcp_test_rand_floats(&rng, (uint64_t)N * K, -1, 1), *deq;
                float *x = dcp_test_rand_floats(&rng, xoff + (uint64_t)T * xs, -1, 1);
                float *y0 = dcp_test_rand_floats(&rng, (uint64_t)T * ys, -1, 1);
                dcp_matrix m;
                make_matrix(dev, types[ti], N, K, w, &m, &deq);
                char what[96];
                snprintf(what, sizeof what, "matmul %s %ux%u T %u acc %d", dcp_ggml_type_name(types[ti]), N, K, T, acc);
                dcp_test_check_matmul(cmd,
                                      &(dcp_test_matmul_case){.w = &m, .ref = deq, .ref_stride = K, .cols = K, .x = x,
                                                              .x_offset = xoff, .x_stride = xs, .y0 = y0, .y_stride = ys,
                                                              .tokens = T, .accumulate = acc, .rel_tol = MATMUL_REL,
                                                              .abs_tol = 1e-7, .what = what},
                                      &worst);
                dcp_matrix_destroy(&m);
                free(w);
                free(deq);
                free(x);
                free(y0);
            }
        printf("matmul %s: max abs error %.3g\n", dcp_ggml_type_name(types[ti]), worst.abs);
    }
    dcp_cmd_destroy(cmd);
}

/* Column windows (dcp_matrix_window: a row-parallel slice held as the whole blocks covering its
 * columns): y (+)= W[:, col0 .. col0 + cols) x against the double reference of those columns
 * only, for a legacy block type (Q8_0: 32), k-quants with and without a min (Q4_K, Q6_K: 256)
 * and a legacy 4-bit type (Q4_0), windows cutting the first block, the last, both, and neither
 * (a narrower window inside whole blocks), at 1 and 9 tokens, plain and accumulating, x from an
 * offset. x's columns past the window hold NaN: a read of one would show. A full window is no
 * window (the same dispatch, bitwise). Windows that do not fit, and the other weight ops, refuse. */
static void test_matmul_window(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    static const dcp_ggml_type types[4] = {DCP_GGML_TYPE_Q8_0, DCP_GGML_TYPE_Q4_K, DCP_GGML_TYPE_Q6_K,
                                           DCP_GGML_TYPE_Q4_0};
    /* blocks held, col0, cols in units of 1/8 block plus a few columns: (blocks, col0, cols) */
    static const uint32_t wins[][3] = {{3, 37, 600}, {2, 0, 301}, {2, 200, 312}, {1, 5, 100}, {3, 256, 256}};
    dcp_test_rng rng = {29};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    for (int ti = 0; ti < 4; ti++) {
        uint32_t be, bb;
        assert_true(dcp_ggml_type_block(types[ti], &be, &bb));
        dcp_test_matmul_worst worst = {0};
        for (size_t wi = 0; wi < sizeof wins / sizeof wins[0]; wi++)
            for (int acc = 0; acc < 2; acc++) {
                /* the window scaled to the type's block (256 for the k-quants, 32 otherwise) */
                const uint32_t held = wins[wi][0] * be, col0 = wins[wi][1] * be / 256, cols = wins[wi][2] * be / 256;
                const uint32_t N = acc ? 37 : 64, T = acc ? 9 : 1, K = (cols + 3) / 4 * 4 + (acc ? 4 : 0);
                const uint32_t xoff = acc ? 8 : 0, xs = K + 4, ys = N + 3;
                float *w = dcp_test_rand_floats(&rng, (uint64_t)N * held, -1, 1), *deq;
                float *x = dcp_test_rand_floats(&rng, xoff + (uint64_t)T * xs, -1, 1);
                float *y0 = dcp_test_rand_floats(&rng, (uint64_t)T * ys, -1, 1);
                for (uint32_t t = 0; t < T; t++)
                    for (uint32_t c = cols; c < xs; c++) x[xoff + t * xs + c] = NAN;
                dcp_matrix m;
                make_matrix(dev, types[ti], N, held, w, &m, &deq);
                DCP_ASSERT_OK(dcp_matrix_window(&m, K, col0, cols));
                assert_int_equal(m.k, K);
                assert_int_equal(m.held_k, held);
                assert_int_equal(m.cols, cols);
                char what[96];
                snprintf(what, sizeof what, "matmul %s window [%u, %u) of %u T %u acc %d", dcp_ggml_type_name(types[ti]),
                         col0, col0 + cols, held, T, acc);
                dcp_test_check_matmul(cmd,
                                      &(dcp_test_matmul_case){.w = &m, .ref = deq, .ref_stride = held, .ref_col0 = col0,
                                                              .cols = cols, .x = x, .x_offset = xoff, .x_stride = xs,
                                                              .y0 = y0, .y_stride = ys, .tokens = T, .accumulate = acc,
                                                              .rel_tol = MATMUL_REL, .abs_tol = 1e-6, .what = what},
                                      &worst);
                dcp_matrix_destroy(&m);
                free(w);
                free(deq);
                free(x);
                free(y0);
            }
        printf("matmul %s with column windows: max abs error %.3g\n", dcp_ggml_type_name(types[ti]), worst.abs);
    }
    /* A full window is no window: bitwise the unwindowed product. */
    {
        const uint32_t N = 16, K = 512, T = 3;
        float *w = dcp_test_rand_floats(&rng, (uint64_t)N * K, -1, 1), *deq;
        float *x = dcp_test_rand_floats(&rng, (uint64_t)T * K, -1, 1);
        dcp_matrix a, b;
        make_matrix(dev, DCP_GGML_TYPE_Q4_K, N, K, w, &a, &deq);
        free(deq);
        make_matrix(dev, DCP_GGML_TYPE_Q4_K, N, K, w, &b, &deq);
        DCP_ASSERT_OK(dcp_matrix_window(&b, K, 0, K));
        assert_int_equal(b.cols, 0);
        dcp_buffer *xb = dcp_test_upload(dev, x, (uint64_t)T * K * 4);
        dcp_buffer *ya = dcp_test_upload(dev, NULL, (uint64_t)T * N * 4), *yb = dcp_test_upload(dev, NULL, (uint64_t)T * N * 4);
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &a, .x = xb, .x_stride = K, .y = ya, .y_stride = N, .tokens = T}));
        DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &b, .x = xb, .x_stride = K, .y = yb, .y_stride = N, .tokens = T}));
        run(cmd);
        float *ga = malloc((uint64_t)T * N * 4), *gb = malloc((uint64_t)T * N * 4);
        DCP_ASSERT_OK(dcp_buffer_download(ya, 0, ga, (uint64_t)T * N * 4));
        DCP_ASSERT_OK(dcp_buffer_download(yb, 0, gb, (uint64_t)T * N * 4));
        assert_memory_equal(ga, gb, (size_t)T * N * 4);
        /* Windows that do not fit are refused, the matrix unchanged; get_rows refuses a window. */
        assert_int_equal(dcp_matrix_window(&a, 256, 0, 300), DCP_ERR_INVALID_ARGUMENT); /* cols > k */
        assert_int_equal(dcp_matrix_window(&a, 512, 300, 256), DCP_ERR_INVALID_ARGUMENT); /* past the held k */
        assert_int_equal(dcp_matrix_window(&a, 512, 0, 0), DCP_ERR_INVALID_ARGUMENT);
        assert_int_equal(a.k, K);
        assert_int_equal(a.cols, 0);
        DCP_ASSERT_OK(dcp_matrix_window(&a, 256, 100, 200));
        assert_int_equal(a.held_k, K);
        dcp_buffer *ids = dcp_test_upload(dev, NULL, 4);
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        assert_int_equal(dcp_op_get_rows(cmd, &(dcp_get_rows_args){.w = &a, .ids = ids, .y = ya, .y_stride = 256, .tokens = 1}),
                         DCP_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(dcp_last_error(), "window"));
        dcp_buffer_destroy(ids);
        dcp_matrix_destroy(&a);
        dcp_matrix_destroy(&b);
        dcp_buffer_destroy(xb);
        dcp_buffer_destroy(ya);
        dcp_buffer_destroy(yb);
        free(w);
        free(deq);
        free(x);
        free(ga);
        free(gb);
    }
    dcp_cmd_destroy(cmd);
}

/* Downloads floats [n] of b into a new array. */
static float *download(dcp_buffer *b, uint64_t n)
{
    float *v = malloc(n * 4);
    DCP_ASSERT_OK(dcp_buffer_download(b, 0, v, n * 4));
    return v;
}

static const dcp_ggml_type fused_types[7] = {DCP_GGML_TYPE_F32,  DCP_GGML_TYPE_F16,  DCP_GGML_TYPE_Q8_0,
                                             DCP_GGML_TYPE_Q4_1, DCP_GGML_TYPE_Q4_K, DCP_GGML_TYPE_Q6_K,
                                             DCP_GGML_TYPE_IQ4_XS};
static const uint32_t fused_shapes[][3] = {/* f (outputs), k, tokens: 1, one workgroup's, more */
                                           {13, 256, 1}, {64, 512, 3}, {37, 256, 19}};

/* The SwiGLU fused into the matmul (glu) against the plain product followed by dcp_op_swiglu:
 * bitwise, with and without the fused RMSNorm, for several weight types, odd output counts and
 * batches of 1, 3 and 19 tokens (more than one workgroup's); h's padding columns never written.
 * The fusion's refusals: a matrix of parts, accumulate. */
static void test_matmul_glu(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {41};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    for (int ti = 0; ti < 7; ti++)
        for (size_t si = 0; si < sizeof fused_shapes / sizeof fused_shapes[0]; si++)
            for (int norm = 0; norm < 2; norm++) {
                const uint32_t F = fused_shapes[si][0], K = fused_shapes[si][1], T = fused_shapes[si][2];
                const uint32_t xoff = 4, xs = K + 8, hs = F + 3;
                float *w = dcp_test_rand_floats(&rng, 2ull * F * K, -1, 1), *deq;
                float *x = dcp_test_rand_floats(&rng, xoff + (uint64_t)T * xs, -2, 2);
                float *nw = dcp_test_rand_floats(&rng, K, 0.5f, 1.5f);
                float *h0 = dcp_test_rand_floats(&rng, (uint64_t)T * hs, -1, 1);
                dcp_matrix m;
                make_matrix(dev, fused_types[ti], 2 * F, K, w, &m, &deq);
                dcp_buffer *xb = dcp_test_upload(dev, x, (xoff + (uint64_t)T * xs) * 4);
                dcp_buffer *nb = dcp_test_upload(dev, nw, (uint64_t)K * 4);
                dcp_buffer *gub = dcp_test_upload(dev, NULL, (uint64_t)T * 2 * F * 4);
                dcp_buffer *hb = dcp_test_upload(dev, h0, (uint64_t)T * hs * 4);
                dcp_buffer *fb = dcp_test_upload(dev, h0, (uint64_t)T * hs * 4);
                dcp_matmul_args a = {.w = &m, .x = xb, .x_offset = xoff, .x_stride = xs, .y = gub, .y_stride = 2 * F,
                                     .tokens = T, .norm = norm ? nb : NULL, .norm_eps = 1e-5f};
                DCP_ASSERT_OK(dcp_cmd_reset(cmd));
                DCP_ASSERT_OK(dcp_op_matmul(cmd, &a));
                dcp_cmd_barrier(cmd); /* gate|up -> swiglu */
                DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = gub, .x_stride = 2 * F, .y = hb, .y_stride = hs,
                                                                    .n = F, .tokens = T}));
                a.y = fb;
                a.y_stride = hs;
                a.glu = 1;
                DCP_ASSERT_OK(dcp_op_matmul(cmd, &a));
                run(cmd);
                float *h = download(hb, (uint64_t)T * hs), *fh = download(fb, (uint64_t)T * hs);
                for (uint32_t t = 0; t < T; t++)
                    for (uint32_t j = 0; j < hs; j++) {
                        const uint64_t i = (uint64_t)t * hs + j;
                        if (j >= F) assert_true(fh[i] == h0[i]);
                        else if (memcmp(&fh[i], &h[i], 4))
                            fail_msg("matmul %s %ux%u T %u norm %d with SwiGLU: h[%u][%u] = %.9g, unfused %.9g",
                                     dcp_ggml_type_name(fused_types[ti]), 2 * F, K, T, norm, t, j, fh[i], h[i]);
                    }
                if (ti == 0 && si == 0 && norm == 0) {
                    a.accumulate = 1;
                    assert_int_equal(dcp_op_matmul(cmd, &a), DCP_ERR_INVALID_ARGUMENT);
                    a.accumulate = 0;
                    /* gate and up as two parts (of one type here; of different ones in a model) */
                    dcp_matrix parts[2], joined;
                    float *d2;
                    make_matrix(dev, fused_types[0], F, K, w, &parts[0], &d2);
                    free(d2);
                    make_matrix(dev, fused_types[0], F, K, w + (uint64_t)F * K, &parts[1], &d2);
                    free(d2);
                    DCP_ASSERT_OK(dcp_matrix_join(2, parts, &joined)); /* moves the parts */
                    a.w = &joined;
                    assert_int_equal(dcp_op_matmul(cmd, &a), DCP_ERR_INVALID_ARGUMENT);
                    assert_non_null(strstr(dcp_last_error(), "SwiGLU"));
                    dcp_matrix_destroy(&joined);
                }
                dcp_matrix_destroy(&m);
                dcp_buffer_destroy(xb);
                dcp_buffer_destroy(nb);
                dcp_buffer_destroy(gub);
                dcp_buffer_destroy(hb);
                dcp_buffer_destroy(fb);
                free(w);
                free(deq);
                free(x);
                free(nw);
                free(h0);
                free(h);
                free(fh);
            }
    printf("matmul with SwiGLU: bitwise the product then swiglu (7 types, 3 shapes, with and without RMSNorm)\n");
    dcp_cmd_destroy(cmd);
}

/* The RMSNorm fused into the matmul's load (norm) against a double reference of rmsnorm then the
 * product, for several weight types and batches of 1 to 19 tokens (plain and accumulating), and
 * batch invariance: every token's row of a 19-token dispatch is bitwise its row computed alone
 * (the sum of squares does not depend on the dispatch). A column window is refused. */
static void test_matmul_norm(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {43};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    for (int ti = 0; ti < 7; ti++) {
        double worst = 0.0;
        for (size_t si = 0; si < sizeof fused_shapes / sizeof fused_shapes[0]; si++) {
            const uint32_t N = 2 * fused_shapes[si][0] + 1, K = fused_shapes[si][1], T = fused_shapes[si][2];
            const int acc = si == 1;
            const uint32_t xoff = 8, xs = K + 4, ys = N + 2;
            const float eps = 1e-5f;
            float *w = dcp_test_rand_floats(&rng, (uint64_t)N * K, -1, 1), *deq;
            float *x = dcp_test_rand_floats(&rng, xoff + (uint64_t)T * xs, -3, 3);
            float *nw = dcp_test_rand_floats(&rng, K, 0.5f, 1.5f);
            float *y0 = dcp_test_rand_floats(&rng, (uint64_t)T * ys, -1, 1);
            dcp_matrix m;
            make_matrix(dev, fused_types[ti], N, K, w, &m, &deq);
            dcp_buffer *xb = dcp_test_upload(dev, x, (xoff + (uint64_t)T * xs) * 4);
            dcp_buffer *nb = dcp_test_upload(dev, nw, (uint64_t)K * 4);
            dcp_buffer *yb = dcp_test_upload(dev, y0, (uint64_t)T * ys * 4);
            dcp_buffer *ab = dcp_test_upload(dev, y0, (uint64_t)T * ys * 4); /* each token alone */
            DCP_ASSERT_OK(dcp_cmd_reset(cmd));
            DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &m, .x = xb, .x_offset = xoff, .x_stride = xs,
                                                                .y = yb, .y_stride = ys, .tokens = T, .accumulate = acc,
                                                                .norm = nb, .norm_eps = eps}));
            run(cmd);
            for (uint32_t t = 0; t < T; t++) {
                DCP_ASSERT_OK(dcp_cmd_reset(cmd));
                /* token t alone: its row as row 0 of a dispatch (x from its offset, y a row of ab) */
                dcp_buffer *yt = dcp_test_upload(dev, y0 + (uint64_t)t * ys, (uint64_t)ys * 4);
                DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &m, .x = xb, .x_offset = xoff + t * xs,
                                                                    .x_stride = xs, .y = yt, .y_stride = ys,
                                                                    .tokens = 1, .accumulate = acc, .norm = nb,
                                                                    .norm_eps = eps}));
                run(cmd);
                DCP_ASSERT_OK(dcp_cmd_reset(cmd));
                DCP_ASSERT_OK(dcp_cmd_copy(cmd, yt, 0, ab, (uint64_t)t * ys * 4, (uint64_t)ys * 4));
                run(cmd);
                dcp_buffer_destroy(yt);
            }
            float *y = download(yb, (uint64_t)T * ys), *ya = download(ab, (uint64_t)T * ys);
            assert_memory_equal(y, ya, (size_t)T * ys * 4);
            for (uint32_t t = 0; t < T; t++) {
                const float *xt = x + xoff + (uint64_t)t * xs;
                double ss = 0.0;
                for (uint32_t k = 0; k < K; k++) ss += (double)xt[k] * xt[k];
                const double inv = 1.0 / sqrt(ss / K + eps);
                for (uint32_t n = 0; n < N; n++) {
                    double r = acc ? y0[t * ys + n] : 0.0, mag = fabs(r);
                    for (uint32_t k = 0; k < K; k++) {
                        double p = (double)deq[(uint64_t)n * K + k] * (xt[k] * inv * nw[k]);
                        r += p;
                        mag += fabs(p);
                    }
                    double err = fabs(y[t * ys + n] - r);
                    if (err > worst) worst = err;
                    if (!(err <= MATMUL_REL * mag + 1e-6))
                        fail_msg("matmul %s %ux%u T %u acc %d with RMSNorm: y[%u][%u] = %g, reference %g",
                                 dcp_ggml_type_name(fused_types[ti]), N, K, T, acc, t, n, y[t * ys + n], r);
                }
                for (uint32_t n = N; n < ys; n++) assert_true(y[t * ys + n] == y0[t * ys + n]);
            }
            if (ti == 4 && si == 0) { /* a column window is refused */
                DCP_ASSERT_OK(dcp_matrix_window(&m, K, 0, K - 32));
                DCP_ASSERT_OK(dcp_cmd_reset(cmd));
                assert_int_equal(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &m, .x = xb, .x_stride = xs, .y = yb,
                                                                       .y_stride = ys, .tokens = 1, .norm = nb}),
                                 DCP_ERR_INVALID_ARGUMENT);
                assert_non_null(strstr(dcp_last_error(), "RMSNorm"));
            }
            dcp_matrix_destroy(&m);
            dcp_buffer_destroy(xb);
            dcp_buffer_destroy(nb);
            dcp_buffer_destroy(yb);
            dcp_buffer_destroy(ab);
            free(w);
            free(deq);
            free(x);
            free(nw);
            free(y0);
            free(y);
            free(ya);
        }
        printf("matmul %s with RMSNorm: max abs error %.3g\n", dcp_ggml_type_name(fused_types[ti]), worst);
    }
    dcp_cmd_destroy(cmd);
}

/* dcp_matmul_norm_pays: on a GPU always; on a CPU driver while a token's re-reads (x twice and
 * the norm weights per 4 rows: ceil(rows / 4) k 12 bytes, summed over the parts) stay within
 * 256 KiB; the same answer whatever the batch (it takes none). */
static void test_matmul_norm_pays(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    const dcp_device_info *info = dcp_device_get_info(dev);
    const bool cpu = info->type && strcmp(info->type, "cpu") == 0;
    const uint32_t k = 1024;
    float *zeros = calloc((size_t)128 * k, sizeof(float));
    assert_non_null(zeros);
    struct {
        uint32_t rows;
        bool pays_on_cpu;
    } cases[] = {
        {64, true},   /* 16 x 1024 x 12 = 192 KiB */
        {84, true},   /* 21 x 1024 x 12 = 252 KiB */
        {85, false},  /* 22 subgroups (the last of one row) x 1024 x 12 = 264 KiB */
        {128, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const void *data[1] = {zeros};
        dcp_matrix m;
        DCP_ASSERT_OK(dcp_matrix_create(dev, DCP_GGML_TYPE_F32, k, 1, data, &cases[c].rows, &m));
        const bool want = cpu ? cases[c].pays_on_cpu : true;
        if (dcp_matmul_norm_pays(dev, &m) != want)
            fail_msg("%u x %u on a %s device: norm fusion pays %d, expected %d", cases[c].rows, k, cpu ? "CPU" : "GPU",
                     !want, want);
        dcp_matrix_destroy(&m);
    }
    /* A matrix of parts, 42 F32 rows then 42 F16 rows: each part counted in its own whole
     * subgroups, (11 + 11) x 1024 x 12 = 264 KiB, where 84 rows of one part take 252. */
    {
        const uint32_t r = 42;
        dcp_matrix parts[2], joined;
        const void *data[1] = {zeros};
        DCP_ASSERT_OK(dcp_matrix_create(dev, DCP_GGML_TYPE_F32, k, 1, data, &r, &parts[0]));
        uint16_t *h = calloc((size_t)r * k, 2);
        assert_non_null(h);
        const void *hd[1] = {h};
        DCP_ASSERT_OK(dcp_matrix_create(dev, DCP_GGML_TYPE_F16, k, 1, hd, &r, &parts[1]));
        free(h);
        DCP_ASSERT_OK(dcp_matrix_join(2, parts, &joined));
        assert_int_equal(joined.n_parts, 2);
        assert_int_equal(dcp_matmul_norm_pays(dev, &joined), !cpu);
        dcp_matrix_destroy(&joined);
    }
    free(zeros);
}

static void test_matrix_bad(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_matrix m;
    uint8_t data[64] = {0};
    const void *parts[1] = {data};
    uint32_t rows[1] = {1};
    assert_int_equal(dcp_matrix_create(dev, DCP_GGML_TYPE_IQ2_XXS, 256, 1, parts, rows, &m), DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "IQ2_XXS"));
    assert_int_equal(dcp_matrix_create(dev, DCP_GGML_TYPE_Q4_K, 128, 1, parts, rows, &m), DCP_ERR_UNSUPPORTED);
    assert_non_null(strstr(dcp_last_error(), "multiple of 256"));
    assert_int_equal(dcp_matrix_create(dev, DCP_GGML_TYPE_Q8_0, 16, 1, parts, rows, &m), DCP_ERR_UNSUPPORTED);
    assert_int_equal(dcp_matrix_create(dev, DCP_GGML_TYPE_F32, 6, 1, parts, rows, &m), DCP_ERR_UNSUPPORTED);
    assert_null(m.buf);
}

static void test_get_rows(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    static const dcp_ggml_type types[4] = {DCP_GGML_TYPE_F32, DCP_GGML_TYPE_F16, DCP_GGML_TYPE_BF16,
                                           DCP_GGML_TYPE_Q8_0};
    dcp_test_rng rng = {21};
    const uint32_t V = 97, K = 96, T = 6;
    uint32_t ids[6] = {0, 96, 5, 5, 200 /* out of range: zero row */, 42};
    dcp_buffer *ib = dcp_test_upload(dev, ids, sizeof ids);
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    for (int ti = 0; ti < 4; ti++) {
        float *w = dcp_test_rand_floats(&rng, (uint64_t)V * K, -2, 2), *deq;
        dcp_matrix m;
        make_matrix(dev, types[ti], V, K, w, &m, &deq);
        dcp_buffer *yb;
        DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)T * (K + 4) * 4, DCP_MEMORY_DEVICE, &yb));
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        DCP_ASSERT_OK(dcp_op_get_rows(cmd, &(dcp_get_rows_args){.w = &m, .ids = ib, .y = yb, .y_stride = K + 4,
                                                                .tokens = T}));
        run(cmd);
        float *y = malloc((uint64_t)T * (K + 4) * 4);
        DCP_ASSERT_OK(dcp_buffer_download(yb, 0, y, (uint64_t)T * (K + 4) * 4));
        for (uint32_t t = 0; t < T; t++)
            for (uint32_t k = 0; k < K; k++) {
                float want = ids[t] < V ? deq[(uint64_t)ids[t] * K + k] : 0.0f;
                if (y[t * (K + 4) + k] != want)
                    fail_msg("get_rows %s: row %u col %u = %g, want %g", dcp_ggml_type_name(types[ti]), t, k,
                             y[t * (K + 4) + k], want);
            }
        printf("get_rows %s: exact\n", dcp_ggml_type_name(types[ti]));
        dcp_matrix_destroy(&m);
        dcp_buffer_destroy(yb);
        free(w);
        free(deq);
        free(y);
    }
    dcp_buffer_destroy(ib);
    dcp_cmd_destroy(cmd);
}

/* rmsnorm_parts: x += the rank-ordered f32 sum of the parts (exact, as part_sum), then rmsnorm
 * (ELEM_REL against the double reference); with 1, 3 and 8 parts and a strided part layout. */
static void test_rmsnorm_parts(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {37};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    static const uint32_t cases[][3] = {{8, 1, 0}, {64, 8, 0}, {172, 3, 13}, {4096, 2, 4}}; /* n, parts, pad */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const uint32_t n = cases[i][0], P = cases[i][1], T = 3, xo = 5, po = 7;
        const uint32_t stride = T * n + cases[i][2];
        const uint64_t xn = xo + (uint64_t)T * n, pn = po + (uint64_t)(P - 1) * stride + (uint64_t)T * n;
        float *x = dcp_test_rand_floats(&rng, xn, -3, 3), *w = dcp_test_rand_floats(&rng, n, 0.5f, 1.5f);
        float *pt = dcp_test_rand_floats(&rng, pn, -1, 1), *x2 = malloc(xn * 4), *xr = malloc(xn * 4);
        float *ref = malloc((uint64_t)T * n * 4), *y = malloc((uint64_t)T * n * 4);
        dcp_buffer *xb = dcp_test_upload(dev, x, xn * 4), *wb = dcp_test_upload(dev, w, n * 4);
        dcp_buffer *pb = dcp_test_upload(dev, pt, pn * 4), *yb;
        DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)T * n * 4, DCP_MEMORY_DEVICE, &yb));
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        const dcp_rmsnorm_parts_args pa = {
            .norm = {.x = xb, .x_offset = xo, .x_stride = n, .w = wb, .n = n, .y = yb, .y_stride = n, .tokens = T,
                     .eps = 1e-5f},
            .p = pb, .parts = P, .part_stride = stride, .part_offset = po};
        DCP_ASSERT_OK(dcp_op_rmsnorm_parts(cmd, &pa));
        run(cmd);
        DCP_ASSERT_OK(dcp_buffer_download(yb, 0, y, (uint64_t)T * n * 4));
        DCP_ASSERT_OK(dcp_buffer_download(xb, 0, x2, xn * 4));
        memcpy(xr, x, xn * 4);
        dcp_ref_part_sum(T * n, P, stride, po, xo, 1, pt, xr);
        if (memcmp(x2, xr, xn * 4) != 0) fail_msg("rmsnorm_parts n %u, %u parts: x differs from part_sum", n, P);
        dcp_ref_rmsnorm(n, T, xr + xo, w, 1e-5f, ref);
        for (uint64_t j = 0; j < (uint64_t)T * n; j++) {
            double e = fabs(y[j] - ref[j]) / (1 + fabs(ref[j]));
            if (!(e <= ELEM_REL)) fail_msg("rmsnorm_parts n %u: [%llu] %g vs %g", n, (unsigned long long)j, y[j], ref[j]);
        }
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        dcp_rmsnorm_parts_args tight = pa; /* a part stride under tokens * n: rejected */
        tight.part_stride = T * n - 1;
        assert_int_equal(dcp_op_rmsnorm_parts(cmd, &tight), DCP_ERR_INVALID_ARGUMENT);
        dcp_buffer_destroy(xb);
        dcp_buffer_destroy(wb);
        dcp_buffer_destroy(pb);
        dcp_buffer_destroy(yb);
        free(x); free(w); free(pt); free(x2); free(xr); free(ref); free(y);
    }
    dcp_cmd_destroy(cmd);
}

static void test_rmsnorm_swiglu_add(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {31};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    static const uint32_t ns[] = {8, 64, 172, 4096};
    double w_rms = 0, w_sw = 0;
    for (size_t i = 0; i < 4; i++) {
        const uint32_t n = ns[i], T = 5, xo = 3;
        float *x = dcp_test_rand_floats(&rng, xo + (uint64_t)T * n, -3, 3);
        float *w = dcp_test_rand_floats(&rng, n, 0.5f, 1.5f);
        float *ref = malloc((uint64_t)T * n * 4), *y = malloc((uint64_t)T * n * 4);
        dcp_buffer *xb = dcp_test_upload(dev, x, (xo + (uint64_t)T * n) * 4), *wb = dcp_test_upload(dev, w, n * 4), *yb;
        DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)T * n * 4, DCP_MEMORY_DEVICE, &yb));
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        DCP_ASSERT_OK(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = xb, .x_offset = xo, .x_stride = n, .w = wb, .n = n,
                                                              .y = yb, .y_stride = n, .tokens = T, .eps = 1e-5f}));
        run(cmd);
        DCP_ASSERT_OK(dcp_buffer_download(yb, 0, y, (uint64_t)T * n * 4));
        dcp_ref_rmsnorm(n, T, x + xo, w, 1e-5f, ref);
        for (uint64_t j = 0; j < (uint64_t)T * n; j++) {
            double e = fabs(y[j] - ref[j]) / (1 + fabs(ref[j]));
            if (e > w_rms) w_rms = e;
            if (!(e <= ELEM_REL)) fail_msg("rmsnorm n %u: [%llu] %g vs %g", n, (unsigned long long)j, y[j], ref[j]);
        }
        /* swiglu over the same x seen as [T][2 * (n/2)] */
        const uint32_t h = n / 2;
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        DCP_ASSERT_OK(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = xb, .x_stride = n, .y = yb, .y_stride = h, .n = h,
                                                            .tokens = T}));
        run(cmd);
        DCP_ASSERT_OK(dcp_buffer_download(yb, 0, y, (uint64_t)T * h * 4));
        dcp_ref_swiglu(h, T, x, ref);
        for (uint64_t j = 0; j < (uint64_t)T * h; j++) {
            double e = fabs(y[j] - ref[j]) / (1 + fabs(ref[j]));
            if (e > w_sw) w_sw = e;
            if (!(e <= ELEM_REL)) fail_msg("swiglu n %u: [%llu] %g vs %g", h, (unsigned long long)j, y[j], ref[j]);
        }
        /* add in place: x = x + x */
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        DCP_ASSERT_OK(dcp_op_add(cmd, xb, xb, xb, T * n));
        run(cmd);
        DCP_ASSERT_OK(dcp_buffer_download(xb, 0, y, (uint64_t)T * n * 4));
        for (uint64_t j = 0; j < (uint64_t)T * n; j++) assert_true(y[j] == x[j] + x[j]);
        dcp_buffer_destroy(xb);
        dcp_buffer_destroy(wb);
        dcp_buffer_destroy(yb);
        free(x);
        free(w);
        free(ref);
        free(y);
    }
    printf("rmsnorm: max rel error %.3g; swiglu: max rel error %.3g; add: exact\n", w_rms, w_sw);
    dcp_cmd_destroy(cmd);
}

/* The llama-family additions: rmsnorm_heads (qwen3's per-head Q/K norm, in place over a row of
 * [Q heads | K heads | V heads] with a row stride; V untouched) and add_rows (qwen2's Q|K|V bias
 * on every token row), against dcp_ref_rmsnorm per head and a plain sum. */
static void test_rmsnorm_heads_add_rows(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {37};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    static const uint32_t shapes[][3] = {/* Hq, Hkv, D */ {8, 4, 16}, {2, 1, 128}, {16, 2, 96}};
    double w_rms = 0;
    for (size_t c = 0; c < 3; c++) {
        const uint32_t Hq = shapes[c][0], Hkv = shapes[c][1], D = shapes[c][2], T = 5;
        const uint32_t width = (Hq + 2 * Hkv) * D, stride = width + 4;
        float *x = dcp_test_rand_floats(&rng, (uint64_t)T * stride, -3, 3);
        float *w = dcp_test_rand_floats(&rng, 2 * D, 0.5f, 1.5f);
        float *b = dcp_test_rand_floats(&rng, width, -1, 1), *y = malloc((uint64_t)T * stride * 4);
        float *ref = malloc((uint64_t)T * stride * 4);
        dcp_buffer *xb = dcp_test_upload(dev, x, (uint64_t)T * stride * 4), *wb = dcp_test_upload(dev, w, 2 * D * 4);
        dcp_buffer *bb = dcp_test_upload(dev, b, width * 4);
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        DCP_ASSERT_OK(dcp_op_add_rows(cmd, &(dcp_add_rows_args){.y = xb, .y_stride = stride, .b = bb, .n = width,
                                                                .tokens = T}));
        dcp_cmd_barrier(cmd);
        DCP_ASSERT_OK(dcp_op_rmsnorm_heads(cmd, &(dcp_rmsnorm_heads_args){.x = xb, .x_stride = stride,
                                                                          .heads = Hq + Hkv, .head_dim = D,
                                                                          .w_split = Hq, .w = wb, .tokens = T,
                                                                          .eps = 1e-6f}));
        run(cmd);
        DCP_ASSERT_OK(dcp_buffer_download(xb, 0, y, (uint64_t)T * stride * 4));
        memcpy(ref, x, (uint64_t)T * stride * 4);
        for (uint32_t t = 0; t < T; t++) {
            float *row = ref + (uint64_t)t * stride;
            for (uint32_t i = 0; i < width; i++) row[i] += b[i];
            dcp_ref_rmsnorm(D, Hq, row, w, 1e-6f, row);
            dcp_ref_rmsnorm(D, Hkv, row + (uint64_t)Hq * D, w + D, 1e-6f, row + (uint64_t)Hq * D);
        }
        for (uint64_t j = 0; j < (uint64_t)T * stride; j++) {
            const uint64_t i = j % stride;
            if (i >= (uint64_t)(Hq + Hkv) * D) { /* V (biased only) and the padding: exact */
                if (y[j] != ref[j]) fail_msg("add_rows: [%llu] %g vs %g", (unsigned long long)j, y[j], ref[j]);
                continue;
            }
            double e = fabs(y[j] - ref[j]) / (1 + fabs(ref[j]));
            if (e > w_rms) w_rms = e;
            if (!(e <= ELEM_REL))
                fail_msg("rmsnorm_heads Hq %u Hkv %u D %u: [%llu] %g vs %g", Hq, Hkv, D, (unsigned long long)j, y[j],
                         ref[j]);
        }
        dcp_buffer_destroy(xb);
        dcp_buffer_destroy(wb);
        dcp_buffer_destroy(bb);
        free(x); free(w); free(b); free(y); free(ref);
    }
    printf("rmsnorm_heads: max rel error %.3g; add_rows: exact\n", w_rms);
    dcp_cmd_destroy(cmd);
}

static void test_rope_store(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {41};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    static const uint32_t cfgs[][4] = {/* Hq, Hkv, D, n_rot */ {8, 4, 8, 8}, {4, 1, 64, 32}, {6, 2, 128, 128}};
    double worst = 0;
    double worst_q8 = 0;
    for (int neox = 0; neox < 2; neox++) /* NORM (llama) and NEOX (qwen2, qwen3, phi3) pairs */
    for (size_t ci = 0; ci < 3; ci++)
        for (int dt = 0; dt < 3; dt++) {
            const uint32_t Hq = cfgs[ci][0], Hkv = cfgs[ci][1], D = cfgs[ci][2], R = cfgs[ci][3];
            const int f16 = dt == 1, q8 = dt == 2; /* q8_0: two passes through a stage (dcp_op_rope_store) */
            if (q8 && D % 32) continue;
            const uint32_t T = 7, B = 16, pages = 5, width = (Hq + 2 * Hkv) * D, stride = width + 2;
            const float base = ci == 1 ? 500000.0f : 10000.0f;
            float *src = dcp_test_rand_floats(&rng, (uint64_t)T * stride, -1, 1);
            uint32_t pos[7] = {0, 1, 15, 16, 4999, 77, 3}, slot[7] = {0, 1, 15, 16, 79, DCP_KV_NO_SLOT, 40};
            float *cs = malloc((uint64_t)T * (R / 2) * 8);
            for (uint32_t t = 0; t < T; t++)
                for (uint32_t i = 0; i < R / 2; i++) {
                    double a = pos[t] * pow((double)base, -2.0 * i / R);
                    cs[(t * (R / 2) + i) * 2] = (float)cos(a);
                    cs[(t * (R / 2) + i) * 2 + 1] = (float)sin(a);
                }
            dcp_kv_pool_config pc = {.kv_heads = Hkv, .head_dim = D, .page_size = B,
                                     .dtype = q8 ? DCP_DTYPE_Q8_0 : f16 ? DCP_DTYPE_F16 : DCP_DTYPE_F32,
                                     .num_pages = pages};
            dcp_kv_pool *pool;
            DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
            uint32_t ids[7] = {0, 1, 2, 3, 4, 5, 6};
            dcp_buffer *stage = NULL, *stage_slots = NULL;
            if (q8) {
                DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)T * 2 * Hkv * D * 4, DCP_MEMORY_DEVICE, &stage));
                stage_slots = dcp_test_upload(dev, ids, sizeof ids);
            }
            dcp_buffer *sb = dcp_test_upload(dev, src, (uint64_t)T * stride * 4);
            dcp_buffer *slb = dcp_test_upload(dev, slot, sizeof slot);
            dcp_buffer *csb = dcp_test_upload(dev, cs, (uint64_t)T * (R / 2) * 8), *qb;
            DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)T * Hq * D * 4, DCP_MEMORY_DEVICE, &qb));
            dcp_rope_store_args a = {.tokens = T, .q_heads = Hq, .kv_heads = Hkv, .head_dim = D, .n_rot = R,
                                     .src_stride = stride, .src = sb, .slot = slb, .cs = csb, .q_out = qb, .pool = pool,
                                     .neox = (uint32_t)neox, .kv_stage = stage, .stage_slots = stage_slots};
            if (q8) { /* without the stage a q8_0 pool is refused */
                dcp_rope_store_args bad = a;
                bad.kv_stage = NULL;
                DCP_ASSERT_OK(dcp_cmd_reset(cmd));
                assert_int_equal(dcp_op_rope_store(cmd, &bad), DCP_ERR_INVALID_ARGUMENT);
            }
            DCP_ASSERT_OK(dcp_cmd_reset(cmd));
            DCP_ASSERT_OK(dcp_op_rope_store(cmd, &a));
            run(cmd);
            float *q = malloc((uint64_t)T * Hq * D * 4);
            DCP_ASSERT_OK(dcp_buffer_download(qb, 0, q, (uint64_t)T * Hq * D * 4));
            uint64_t page_bytes = dcp_kv_pool_page_bytes(pool), es = f16 ? 2 : 4;
            uint8_t *kv = malloc(page_bytes * pages);
            assert_int_equal(dcp_kv_pool_segment_count(pool), 1);
            DCP_ASSERT_OK(dcp_buffer_download(dcp_kv_pool_segment(pool, 0), 0, kv, page_bytes * pages));
            uint8_t *written = calloc(page_bytes * pages, 1);
            float *row = malloc((uint64_t)width * 4);
            for (uint32_t t = 0; t < T; t++) {
                memcpy(row, src + (uint64_t)t * stride, (uint64_t)width * 4);
                const dcp_ref_rope_cfg rc = {.n_rot = R, .base = base, .neox = 1, .factor = 1.0, .mscale = 1.0};
                if (neox) dcp_ref_rope_ex(&rc, Hq + Hkv, D, pos[t], row);
                else dcp_ref_rope(Hq + Hkv, D, R, pos[t], base, row);
                for (uint32_t i = 0; i < Hq * D; i++) {
                    double e = fabs(q[(uint64_t)t * Hq * D + i] - row[i]);
                    if (e > worst) worst = e;
                    if (!(e <= ROPE_ABS)) fail_msg("rope q: token %u elem %u: %g vs %g", t, i, q[t * Hq * D + i], row[i]);
                }
                if (slot[t] == DCP_KV_NO_SLOT) continue;
                uint32_t pg = slot[t] / B, r = slot[t] % B;
                if (q8) { /* dequantized rows within the q8_0 bound of the reference K (rotated) and V */
                    const uint64_t rb = dcp_kv_row_bytes(DCP_DTYPE_Q8_0, D);
                    for (uint32_t kvh = 0; kvh < Hkv; kvh++)
                        for (int isv = 0; isv < 2; isv++) {
                            const uint64_t off = (uint64_t)pg * page_bytes + ((uint64_t)isv * Hkv * B + (uint64_t)kvh * B + r) * rb;
                            const float *want = row + (Hq + isv * Hkv + kvh) * D;
                            uint32_t *words = malloc(rb);
                            memcpy(words, kv + off, rb);
                            for (uint32_t d = 0; d < D; d++) {
                                float amax = 0;
                                for (uint32_t j = d / 32 * 32; j < d / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(want[j]));
                                double err = fabs(dcp_ref_q8_0_value(words, D, d) - want[d]);
                                if (err > worst_q8) worst_q8 = err;
                                if (!(err <= DCP_REF_Q8_ERR(amax) + ROPE_ABS))
                                    fail_msg("rope_store q8_0: token %u kvh %u d %u %s: %g vs %g (bound %g)", t, kvh, d,
                                             isv ? "V" : "K", dcp_ref_q8_0_value(words, D, d), want[d],
                                             DCP_REF_Q8_ERR(amax) + ROPE_ABS);
                            }
                            free(words);
                            memset(written + off, 1, rb);
                        }
                    continue;
                }
                for (uint32_t kvh = 0; kvh < Hkv; kvh++)
                    for (uint32_t d = 0; d < D; d++)
                        for (int isv = 0; isv < 2; isv++) {
                            uint64_t e = (uint64_t)pg * (page_bytes / es) + (uint64_t)isv * Hkv * B * D +
                                         ((uint64_t)kvh * B + r) * D + d;
                            float want = row[(Hq + isv * Hkv + kvh) * D + d];
                            float got;
                            if (f16) {
                                uint16_t h;
                                memcpy(&h, kv + e * 2, 2);
                                got = dcp_f16_to_f32(h);
                                want = dcp_f16_to_f32(dcp_f32_to_f16(want));
                                if (!(fabs(got - want) <= 1e-3)) /* f16 rounding of a value 1e-6 off */
                                    fail_msg("rope_store f16: token %u kvh %u d %u %s: %g vs %g", t, kvh, d,
                                             isv ? "V" : "K", got, want);
                            } else {
                                memcpy(&got, kv + e * 4, 4);
                                double err = fabs(got - want);
                                if (err > worst) worst = err;
                                if (!(err <= ROPE_ABS))
                                    fail_msg("rope_store f32: token %u kvh %u d %u %s: %g vs %g", t, kvh, d,
                                             isv ? "V" : "K", got, want);
                            }
                            memset(written + e * es, 1, es);
                        }
            }
            for (uint64_t b = 0; b < page_bytes * pages; b++)
                if (!written[b] && kv[b]) fail_msg("rope_store wrote byte %llu that no stored token owns", (unsigned long long)b);
            dcp_kv_pool_destroy(pool);
            dcp_buffer_destroy(stage);
            dcp_buffer_destroy(stage_slots);
            dcp_buffer_destroy(sb);
            dcp_buffer_destroy(slb);
            dcp_buffer_destroy(csb);
            dcp_buffer_destroy(qb);
            free(src);
            free(cs);
            free(q);
            free(kv);
            free(written);
            free(row);
        }
    printf("rope_store: max abs error %.3g (q and f32 K, NORM and NEOX pairs), q8_0 K/V %.3g\n", worst, worst_q8);
    dcp_cmd_destroy(cmd);
}

static void test_argmax(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {51};
    const uint32_t n = 100003, rows = 5, stride = n + 1;
    float *x = dcp_test_rand_floats(&rng, (uint64_t)rows * stride, -5, 5);
    x[0 * stride + 70000] = 9.0f;     /* row 0: one maximum */
    x[1 * stride + 12345] = 9.0f;     /* row 1: tie, smallest index wins */
    x[1 * stride + 99999] = 9.0f;
    x[1 * stride + 50] = NAN;
    for (uint32_t i = 0; i < n; i++) x[2 * stride + i] = -INFINITY; /* row 2: all -inf -> 0 */
    for (uint32_t i = 0; i < n; i++) x[3 * stride + i] = NAN;       /* row 3: all NaN -> 0 */
    x[3 * stride + 777] = -1e30f;
    x[4 * stride + n - 1] = 6.0f;     /* row 4: last element */
    dcp_buffer *xb = dcp_test_upload(dev, x, (uint64_t)rows * stride * 4), *ob;
    DCP_ASSERT_OK(dcp_buffer_create(dev, rows * 4, DCP_MEMORY_DEVICE, &ob));
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    DCP_ASSERT_OK(dcp_op_argmax(cmd, &(dcp_argmax_args){.x = xb, .n = n, .stride = stride, .rows = rows, .out = ob}));
    run(cmd);
    uint32_t got[5];
    DCP_ASSERT_OK(dcp_buffer_download(ob, 0, got, sizeof got));
    for (uint32_t r = 0; r < rows; r++) assert_int_equal(got[r], dcp_ref_argmax(n, x + (uint64_t)r * stride));
    assert_int_equal(got[0], 70000);
    assert_int_equal(got[1], 12345);
    assert_int_equal(got[2], 0);
    assert_int_equal(got[3], 777);
    assert_int_equal(got[4], n - 1);
    printf("argmax: exact\n");
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(xb);
    dcp_buffer_destroy(ob);
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matrix_bad),  cmocka_unit_test(test_matmul), cmocka_unit_test(test_matmul_window),
        cmocka_unit_test(test_matmul_glu),  cmocka_unit_test(test_matmul_norm),
        cmocka_unit_test(test_matmul_norm_pays),
        cmocka_unit_test(test_get_rows),    cmocka_unit_test(test_rmsnorm_swiglu_add), cmocka_unit_test(test_rmsnorm_parts),
        cmocka_unit_test(test_rmsnorm_heads_add_rows),
        cmocka_unit_test(test_rope_store),  cmocka_unit_test(test_argmax),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
