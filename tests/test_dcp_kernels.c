/* The DCP step's own shaders against their CPU references: cp_scale (ag_rs weights, empty shards,
 * NaN / +inf LSE, all-empty rows, strided LSE rows), permute (exact, with strides and offsets)
 * and part_sum (exact: f32 in rank order; and within f32 rounding of a double sum). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/cp_internal.h"
#include "ref/cp_ref.h"
#include "vkutil.h"

/* Offsets the tests bind at: multiples of the device's storage-buffer offset alignment (16 on
 * lavapipe; 256 under DCP_VK_MIN_STORAGE_ALIGN=256, as on some GPUs). OFF(k): k of them, bytes;
 * PAD(k): in floats. */
static uint64_t align_bytes = 16;
#define OFF(k) ((k) * align_bytes)
#define PAD(k) ((k) * align_bytes / 4)

static int setup(void **state)
{
    *state = dcp_test_context();
    uint64_t a = dcp_device_get_info(dcp_context_device(*state, 0))->min_storage_offset_alignment;
    align_bytes = a > 16 ? a : 16;
    return 0;
}

static int teardown(void **state)
{
    dcp_test_context_done(*state);
    return 0;
}

/* n f32 values after `extra` zero values (NULL data: all zeros). */
static dcp_buffer *upload(dcp_device *dev, const float *data, uint64_t n, uint64_t extra)
{
    return dcp_test_upload_padded(dev, data, n * 4, extra * 4);
}

static void test_scale(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, dcp_context_device_count(ctx) - 1);
    const uint32_t shapes[][4] = {{1, 1, 1, 4}, {3, 2, 4, 16}, {2, 4, 3, 128}, {5, 1, 8, 8}};
    dcp_test_rng rng = {5};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const uint32_t batch = shapes[k][0], Hl = shapes[k][1], N = shapes[k][2], D = shapes[k][3];
        const uint64_t NH = (uint64_t)N * Hl, rows = batch * NH;
        float *o = malloc(rows * D * 4), *lse = malloc(N * rows * 4);
        for (uint64_t i = 0; i < rows * D; i++) o[i] = dcp_test_rng_uniform(&rng, -1, 1);
        for (uint64_t i = 0; i < N * rows; i++) {
            uint64_t r = dcp_test_rng_next(&rng) % 10;
            lse[i] = r == 0 ? -INFINITY : r == 1 ? NAN : r == 2 ? INFINITY : dcp_test_rng_uniform(&rng, -20, 20);
        }
        for (uint32_t n = 0; n < N; n++) lse[n * rows] = -INFINITY; /* row 0: every shard empty */
        for (uint32_t rank = 0; rank < N; rank++) {
            float *send = malloc(rows * D * 4), *lout = malloc(batch * Hl * 4);
            float *send_ref = malloc(rows * D * 4), *lout_ref = malloc(batch * Hl * 4);
            dcp_ref_cp_scale(batch, Hl, N, rank, D, o, lse, send_ref, lout_ref);
            dcp_buffer *ob = upload(dev, o, rows * D, PAD(1)), *lb = upload(dev, lse, N * rows, PAD(2));
            dcp_buffer *sb = upload(dev, NULL, rows * D, 0), *lo = upload(dev, NULL, batch * Hl, PAD(1));
            dcp_cmd *cmd;
            DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
            dcp_cp_scale_params p = {batch, Hl, N, rank, D, 0};
            if (rank == N - 1 && N > 1) {
                /* The same LSEs with 3 padding floats after each rank's rows (lse_stride). */
                const uint32_t ls = (uint32_t)rows + 3;
                float *pad = calloc((uint64_t)N * ls, 4);
                for (uint32_t n = 0; n < N; n++) memcpy(pad + (uint64_t)n * ls, lse + n * rows, rows * 4);
                dcp_buffer_destroy(lb);
                lb = upload(dev, pad, (uint64_t)N * ls, PAD(2));
                p.lse_stride = ls;
                free(pad);
            }
            DCP_ASSERT_OK(dcp_cp_scale_record(cmd, &p, ob, OFF(1), lb, OFF(2), sb, 0, lo, OFF(1)));
            DCP_ASSERT_OK(dcp_cmd_run(cmd));
            DCP_ASSERT_OK(dcp_buffer_download(sb, 0, send, rows * D * 4));
            DCP_ASSERT_OK(dcp_buffer_download(lo, OFF(1), lout, batch * Hl * 4));
            dcp_test_check_o("cp_scale O", send, send_ref, rows * D);
            dcp_test_check_lse("cp_scale LSE", lout, lout_ref, batch * Hl);
            dcp_cmd_destroy(cmd);
            dcp_buffer_destroy(ob);
            dcp_buffer_destroy(lb);
            dcp_buffer_destroy(sb);
            dcp_buffer_destroy(lo);
            free(send); free(lout); free(send_ref); free(lout_ref);
        }
        free(o);
        free(lse);
    }
}

static void test_permute(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    /* A, B, C, extra src stride, extra dst stride */
    const uint32_t shapes[][5] = {{1, 1, 1, 0, 0}, {4, 3, 32, 0, 0}, {3, 4, 7, 5, 9}, {8, 2, 129, 0, 16}, {2, 300, 64, 0, 0}};
    dcp_test_rng rng = {9};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const uint32_t A = shapes[k][0], B = shapes[k][1], C = shapes[k][2];
        const uint32_t sa = B * C + shapes[k][3], db = A * C + shapes[k][4];
        uint64_t src_n = (uint64_t)A * sa, dst_n = (uint64_t)B * db;
        float *src = malloc(src_n * 4), *dst = malloc(dst_n * 4), *ref = calloc(dst_n, 4);
        for (uint64_t i = 0; i < src_n; i++) src[i] = dcp_test_rng_uniform(&rng, -5, 5);
        dcp_ref_permute(A, B, C, sa, db, src, ref);
        dcp_buffer *sb = upload(dev, src, src_n, PAD(1)), *outb = upload(dev, NULL, dst_n, PAD(1));
        dcp_cmd *cmd;
        DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
        dcp_permute_params p = {A, B, C, sa, db};
        DCP_ASSERT_OK(dcp_permute_record(cmd, &p, sb, OFF(1), outb, OFF(1)));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        DCP_ASSERT_OK(dcp_buffer_download(outb, OFF(1), dst, dst_n * 4));
        if (memcmp(dst, ref, dst_n * 4) != 0) fail_msg("permute %u x %u x %u differs from the reference", A, B, C);
        dcp_permute_params bad = {A, B, C, B * C - 1, db};
        if (B * C > 1) assert_int_equal(dcp_permute_record(cmd, &bad, sb, 0, outb, 0), DCP_ERR_INVALID_ARGUMENT);
        /* a binding offset off the device's storage-buffer offset alignment is refused, naming it */
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        assert_int_equal(dcp_permute_record(cmd, &p, sb, align_bytes / 2, outb, 0), DCP_ERR_INTERNAL);
        assert_non_null(strstr(dcp_last_error(), "offset alignment"));
        dcp_clear_error();
        dcp_cmd_destroy(cmd);
        dcp_buffer_destroy(sb);
        dcp_buffer_destroy(outb);
        free(src); free(dst); free(ref);
    }
}

static void test_part_sum(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    /* n, parts, extra stride, x_offset, y_offset, accumulate; one n over 65,535 workgroups of 64 */
    const uint32_t shapes[][6] = {{1, 1, 0, 0, 0, 0}, {64, 8, 0, 0, 0, 1}, {37, 3, 11, 5, 3, 1},
                                  {1000, 2, 24, 0, 7, 0}, {4200000, 2, 0, 3, 0, 1}};
    dcp_test_rng rng = {11};
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const uint32_t n = shapes[k][0], P = shapes[k][1], stride = n + shapes[k][2], xo = shapes[k][3];
        const uint32_t yo = shapes[k][4];
        const int accumulate = (int)shapes[k][5];
        const uint64_t xn = xo + (uint64_t)(P - 1) * stride + n, yn = (uint64_t)yo + n;
        float *x = malloc(xn * 4), *y0 = malloc(yn * 4), *y = malloc(yn * 4), *ref = malloc(yn * 4);
        for (uint64_t i = 0; i < xn; i++) x[i] = dcp_test_rng_uniform(&rng, -3, 3);
        for (uint64_t i = 0; i < yn; i++) y0[i] = dcp_test_rng_uniform(&rng, -3, 3);
        memcpy(ref, y0, yn * 4);
        dcp_ref_part_sum(n, P, stride, xo, yo, accumulate, x, ref);
        for (uint32_t i = 0; i < n; i++) { /* the f32 order stays within rounding of a double sum */
            double d = accumulate ? y0[yo + i] : 0.0, e = 0.0;
            for (uint32_t s = 0; s < P; s++) d += x[xo + (uint64_t)s * stride + i];
            for (uint32_t s = 0; s < P; s++) e += fabs(x[xo + (uint64_t)s * stride + i]);
            if (fabs(ref[yo + i] - d) > 1e-6 * (e + fabs(y0[yo + i])) + 1e-7)
                fail_msg("part_sum reference: element %u is %g, double sum %g", i, ref[yo + i], d);
        }
        dcp_buffer *xb = upload(dev, x, xn, PAD(1)), *yb = upload(dev, y0, yn, PAD(1));
        dcp_cmd *cmd;
        DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
        dcp_part_sum_params p = {n, P, stride, xo, yo, (uint32_t)accumulate};
        DCP_ASSERT_OK(dcp_part_sum_record(cmd, &p, xb, OFF(1), yb, OFF(1)));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        DCP_ASSERT_OK(dcp_buffer_download(yb, OFF(1), y, yn * 4));
        if (memcmp(y, ref, yn * 4) != 0) fail_msg("part_sum n %u, %u parts differs from the reference", n, P);
        dcp_part_sum_params bad = {n, P, n - 1, 0, 0, 0};
        if (P > 1) assert_int_equal(dcp_part_sum_record(cmd, &bad, xb, 0, yb, 0), DCP_ERR_INVALID_ARGUMENT);
        dcp_cmd_destroy(cmd);
        dcp_buffer_destroy(xb);
        dcp_buffer_destroy(yb);
        free(x); free(y0); free(y); free(ref);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_scale),
        cmocka_unit_test(test_permute),
        cmocka_unit_test(test_part_sum),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
