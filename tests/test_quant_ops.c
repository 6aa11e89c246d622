/* The block-quantized weight types on the device (shaders/common/quants.glsl through matmul and
 * get_rows) against the CPU reference: the reference dequantizer (src/quant/quants.c) times a
 * double-precision matmul. Per type: several shapes and token counts (plain and accumulating,
 * offset x rows, matrices uploaded in 1 to 3 parts as the loader's fused Q|K|V does), a token's
 * result bitwise the same whatever batch it is in (T = 1, 7, 8, 9, 17), get_rows, and shapes
 * the layout cannot hold refused by name. The validation layer and robust buffer access are on,
 * and every matrix buffer is exactly its layout's size: a read past a row or the scales would
 * read zeros (or be reported) and show as an error here.
 *
 * Error bounds (one table for every quantized type; the weights are the reference's dequantized
 * values, so only the arithmetic differs):
 *   matmul    |y - y_ref| <= 2e-6 * sum_k |w_k x_k| + 1e-6   (f32 accumulation over k in lanes
 *             and a subgroup reduction; the shader may fuse the dequantizing multiply-add)
 *   get_rows  exact for Q4_0, Q5_0, Q3_K, Q6_K, IQ4_NL (w = scale * q: one rounding, as on the
 *             CPU) and IQ4_XS (w = (d * (ls - 32)) * level: the same two roundings as the CPU);
 *             Q4_1, Q5_1, Q2_K, Q4_K, Q5_K (w = scale * q - min) within 2^-21 of the row's
 *             largest |w| (one fused multiply-add instead of a product and a subtraction)
 * The measured worst error of each type is printed (the table in the closing note of issue 11). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/ops.h"
#include "kernels/weight_types.h"
#include "quant/quants.h"
#include "vkutil.h"

#define MATMUL_REL 2e-6
#define MATMUL_ABS 1e-6

static const dcp_ggml_type qtypes[] = {DCP_GGML_TYPE_Q4_0, DCP_GGML_TYPE_Q4_1, DCP_GGML_TYPE_Q5_0,
                                       DCP_GGML_TYPE_Q5_1, DCP_GGML_TYPE_Q2_K, DCP_GGML_TYPE_Q3_K,
                                       DCP_GGML_TYPE_Q4_K, DCP_GGML_TYPE_Q5_K, DCP_GGML_TYPE_Q6_K,
                                       DCP_GGML_TYPE_IQ4_NL, DCP_GGML_TYPE_IQ4_XS};
enum { NTYPES = sizeof qtypes / sizeof qtypes[0] };

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

/* Quantizes w [rows][k] to GGUF blocks of type, uploads them in `parts` row ranges, and returns
 * the reference dequantization in *deq [rows][k]. */
static void make_matrix(dcp_device *dev, dcp_ggml_type type, uint32_t rows, uint32_t k, uint32_t parts,
                        const float *w, dcp_matrix *m, float **deq)
{
    const dcp_quant_layout *l = dcp_quant_layout_of(type);
    assert_non_null(l);
    uint64_t row_bytes = (uint64_t)k / l->block_elems * l->block_bytes;
    uint8_t *raw = malloc(rows * row_bytes);
    DCP_ASSERT_OK(dcp_ggml_from_f32(type, w, raw, (uint64_t)rows * k));
    *deq = malloc((uint64_t)rows * k * sizeof(float));
    DCP_ASSERT_OK(dcp_ggml_to_f32(type, raw, *deq, (uint64_t)rows * k));
    const void *data[3];
    uint32_t prow[3], r0 = 0;
    if (parts > rows) parts = rows;
    for (uint32_t i = 0; i < parts; i++) {
        prow[i] = i + 1 < parts ? rows / parts : rows - r0;
        data[i] = raw + (uint64_t)r0 * row_bytes;
        r0 += prow[i];
    }
    DCP_ASSERT_OK(dcp_matrix_create(dev, type, k, parts, data, prow, m));
    assert_int_equal(dcp_buffer_size(m->buf), dcp_quant_device_bytes(l, (uint64_t)rows * k / l->block_elems));
    free(raw);
}

static float *download(dcp_buffer *b, uint64_t floats)
{
    float *v = malloc(floats * 4);
    DCP_ASSERT_OK(dcp_buffer_download(b, 0, v, floats * 4));
    return v;
}

/* Per type and shape: y (+)= W x against the reference (dcp_test_check_matmul); prints each
 * type's worst error, absolute and relative to sum |w x|. */
static void test_matmul(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    static const uint32_t shapes[][4] = {/* rows, k (x 256 for k-quants, x 32 otherwise), tokens, parts */
                                         {1, 1, 1, 1}, {13, 2, 3, 2}, {64, 3, 9, 3}, {100, 1, 17, 1}, {7, 16, 2, 1}};
    dcp_test_rng rng = {101};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    for (int ti = 0; ti < NTYPES; ti++) {
        const dcp_quant_layout *l = dcp_quant_layout_of(qtypes[ti]);
        dcp_test_matmul_worst worst = {0};
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
            for (int acc = 0; acc < 2; acc++) {
                const uint32_t N = shapes[si][0], K = shapes[si][1] * l->block_elems, T = shapes[si][2];
                const uint32_t xoff = acc ? 8 : 0, xs = K + (acc ? 4 : 0), ys = N + (acc ? 3 : 0);
                float *w = dcp_test_rand_floats(&rng, (uint64_t)N * K, -1, 1), *deq;
                float *x = dcp_test_rand_floats(&rng, xoff + (uint64_t)T * xs, -1, 1);
                float *y0 = dcp_test_rand_floats(&rng, (uint64_t)T * ys, -1, 1);
                dcp_matrix m;
                make_matrix(dev, qtypes[ti], N, K, shapes[si][3], w, &m, &deq);
                char what[96];
                snprintf(what, sizeof what, "matmul %s %ux%u T %u acc %d", dcp_ggml_type_name(qtypes[ti]), N, K, T, acc);
                dcp_test_check_matmul(cmd,
                                      &(dcp_test_matmul_case){.w = &m, .ref = deq, .ref_stride = K, .cols = K, .x = x,
                                                              .x_offset = xoff, .x_stride = xs, .y0 = y0, .y_stride = ys,
                                                              .tokens = T, .accumulate = acc, .rel_tol = MATMUL_REL,
                                                              .abs_tol = MATMUL_ABS, .what = what},
                                      &worst);
                dcp_matrix_destroy(&m);
                free(w);
                free(deq);
                free(x);
                free(y0);
            }
        printf("matmul %-6s: max |y - y_ref| %.3g, max |y - y_ref| / sum|w x| %.3g\n",
               dcp_ggml_type_name(qtypes[ti]), worst.abs, worst.rel);
    }
    dcp_cmd_destroy(cmd);
}

/* A token's outputs are bitwise the same alone (T = 1) and inside batches of 7, 8, 9 and 17 at
 * any position (the batching of decode and prefill relies on it). */
static void test_batch_invariance(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {202};
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    static const uint32_t batches[] = {17, 9, 8, 7, 1};
    for (int ti = 0; ti < NTYPES; ti++) {
        const dcp_quant_layout *l = dcp_quant_layout_of(qtypes[ti]);
        const uint32_t N = 37, K = 2 * l->block_elems * (l->block_elems == 32 ? 4 : 1), TMAX = 17;
        float *w = dcp_test_rand_floats(&rng, (uint64_t)N * K, -1, 1), *deq;
        float *x = dcp_test_rand_floats(&rng, (uint64_t)TMAX * K, -1, 1);
        dcp_matrix m;
        make_matrix(dev, qtypes[ti], N, K, 1, w, &m, &deq);
        dcp_buffer *xb = dcp_test_upload(dev, x, (uint64_t)TMAX * K * 4), *yb;
        DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)TMAX * N * 4, DCP_MEMORY_DEVICE, &yb));
        float *ref = NULL;
        for (size_t bi = 0; bi < sizeof batches / sizeof batches[0]; bi++)
            for (uint32_t first = 0; first + batches[bi] <= TMAX; first += batches[bi] == TMAX ? TMAX : 5) {
                const uint32_t T = batches[bi];
                DCP_ASSERT_OK(dcp_cmd_reset(cmd));
                DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &m, .x = xb, .x_offset = first * K,
                                                                    .x_stride = K, .y = yb, .y_stride = N,
                                                                    .tokens = T}));
                DCP_ASSERT_OK(dcp_cmd_run(cmd));
                float *y = download(yb, (uint64_t)T * N);
                if (!ref) {
                    ref = y; /* the batch of all 17 */
                    continue;
                }
                for (uint32_t t = 0; t < T; t++)
                    if (memcmp(y + (uint64_t)t * N, ref + (uint64_t)(first + t) * N, (size_t)N * 4) != 0)
                        fail_msg("matmul %s: token %u alone in a batch of %u (at %u) differs from the batch of %u",
                                 dcp_ggml_type_name(qtypes[ti]), first + t, T, t, TMAX);
                free(y);
            }
        dcp_matrix_destroy(&m);
        dcp_buffer_destroy(xb);
        dcp_buffer_destroy(yb);
        free(w);
        free(deq);
        free(x);
        free(ref);
    }
    printf("matmul: every quantized type bitwise batch-invariant at T = 1, 7, 8, 9, 17\n");
    dcp_cmd_destroy(cmd);
}

static int has_min(dcp_ggml_type t)
{
    return t == DCP_GGML_TYPE_Q4_1 || t == DCP_GGML_TYPE_Q5_1 || t == DCP_GGML_TYPE_Q2_K || t == DCP_GGML_TYPE_Q4_K ||
           t == DCP_GGML_TYPE_Q5_K;
}

static void test_get_rows(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {303};
    const uint32_t V = 41, T = 6, PAD = 4;
    uint32_t ids[6] = {0, 40, 5, 5, 200 /* out of range: zero row */, 17};
    dcp_buffer *ib = dcp_test_upload(dev, ids, sizeof ids);
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    for (int ti = 0; ti < NTYPES; ti++) {
        const dcp_quant_layout *l = dcp_quant_layout_of(qtypes[ti]);
        const uint32_t K = l->block_elems == 32 ? 96 : 512, ys = K + PAD;
        float *w = dcp_test_rand_floats(&rng, (uint64_t)V * K, -2, 2), *deq;
        dcp_matrix m;
        make_matrix(dev, qtypes[ti], V, K, 2, w, &m, &deq);
        dcp_buffer *yb;
        DCP_ASSERT_OK(dcp_buffer_create(dev, (uint64_t)T * ys * 4, DCP_MEMORY_DEVICE, &yb));
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        DCP_ASSERT_OK(dcp_op_get_rows(cmd, &(dcp_get_rows_args){.w = &m, .ids = ib, .y = yb, .y_stride = ys,
                                                                .tokens = T}));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        float *y = download(yb, (uint64_t)T * ys);
        double worst = 0.0;
        for (uint32_t t = 0; t < T; t++) {
            double rowmax = 0.0;
            for (uint32_t k = 0; ids[t] < V && k < K; k++) rowmax = fmax(rowmax, fabs(deq[(uint64_t)ids[t] * K + k]));
            double tol = has_min(qtypes[ti]) ? ldexp(rowmax, -21) : 0.0;
            for (uint32_t k = 0; k < K; k++) {
                float want = ids[t] < V ? deq[(uint64_t)ids[t] * K + k] : 0.0f, got = y[t * ys + k];
                double err = fabs((double)got - want);
                if (err > worst) worst = err;
                if (!(err <= tol))
                    fail_msg("get_rows %s: row %u col %u = %.9g, want %.9g", dcp_ggml_type_name(qtypes[ti]), t, k, got, want);
            }
        }
        printf("get_rows %-6s: max error %.3g%s\n", dcp_ggml_type_name(qtypes[ti]), worst, worst == 0.0 ? " (exact)" : "");
        dcp_matrix_destroy(&m);
        dcp_buffer_destroy(yb);
        free(w);
        free(deq);
        free(y);
    }
    dcp_buffer_destroy(ib);
    dcp_cmd_destroy(cmd);
}

/* Rows that are not whole blocks cannot be held: refused with the block size named. */
static void test_odd_shapes(void **state)
{
    dcp_device *dev = dcp_context_device(*state, 0);
    uint8_t data[4 * 210] = {0};
    const void *parts[1] = {data};
    uint32_t rows[1] = {1};
    for (int ti = 0; ti < NTYPES; ti++) {
        const dcp_quant_layout *l = dcp_quant_layout_of(qtypes[ti]);
        const uint32_t bad[] = {l->block_elems / 2, l->block_elems + 16, 3 * l->block_elems - 4};
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            dcp_matrix m;
            assert_int_equal(dcp_matrix_create(dev, qtypes[ti], bad[i], 1, parts, rows, &m), DCP_ERR_UNSUPPORTED);
            char want[32];
            snprintf(want, sizeof want, "multiple of %u", l->block_elems);
            assert_non_null(strstr(dcp_last_error(), want));
            assert_null(m.buf);
        }
    }
}

/* The weight kernels' type list (src/kernels/weight_types.h, which the shaders, the kernel ids and
 * the ops' type choice are generated from) is the supported list the library names in its errors,
 * in the same order; each of its types has a name and a matrix layout. */
static void test_weight_list(void **state)
{
    (void)state;
#define NAME_(t, ...) #t ", "
    static const char listed[] = DCP_WEIGHT_TYPES(NAME_, );
#undef NAME_
    char want[sizeof listed + 2];
    snprintf(want, sizeof want, "%s, ", DCP_GGML_SUPPORTED_LIST);
    assert_string_equal(listed, want);
#define CHECK_(t, ...)                                                                             \
    assert_string_equal(dcp_ggml_type_name(DCP_GGML_TYPE_##t), #t);                                \
    assert_true(dcp_matrix_bytes(DCP_GGML_TYPE_##t, 256, 2) > 0);
    DCP_WEIGHT_TYPES(CHECK_, )
#undef CHECK_
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_batch_invariance),
        cmocka_unit_test(test_get_rows),
        cmocka_unit_test(test_odd_shapes),
        cmocka_unit_test(test_weight_list),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
