/* lse_merge against the double-precision reference: one state, equal states, a dominant state,
 * empty states (-inf), NaN and +inf LSE, all empty. Runs on every device of $DCP_VK_DEVICES. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_internal.h"
#include "dcpvk/attn.h"
#include "ref/ref.h"
#include "vkutil.h"

enum { ROWS = 6, D = 12 };

/* Merges parts x ROWS states on dev: o_in [parts][ROWS][D], lse_in [parts][ROWS]. */
static void gpu_merge(dcp_device *dev, uint32_t parts, const float *o_in, const float *lse_in,
                      float *o_out, float *lse_out)
{
    dcp_buffer *oi, *li, *oo, *lo;
    DCP_ASSERT_OK(dcp_buffer_create(dev, parts * ROWS * D * 4, DCP_MEMORY_DEVICE, &oi));
    DCP_ASSERT_OK(dcp_buffer_create(dev, parts * ROWS * 4, DCP_MEMORY_DEVICE, &li));
    DCP_ASSERT_OK(dcp_buffer_create(dev, ROWS * D * 4, DCP_MEMORY_DEVICE, &oo));
    DCP_ASSERT_OK(dcp_buffer_create(dev, ROWS * 4, DCP_MEMORY_DEVICE, &lo));
    DCP_ASSERT_OK(dcp_buffer_upload(oi, 0, o_in, parts * ROWS * D * 4));
    DCP_ASSERT_OK(dcp_buffer_upload(li, 0, lse_in, parts * ROWS * 4));
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    dcp_merge_args a = {.parts = parts, .rows = ROWS, .head_dim = D, .o_part_stride = ROWS * D,
                        .lse_part_stride = ROWS, .o_in = oi, .lse_in = li, .o_out = oo, .lse_out = lo};
    DCP_ASSERT_OK(dcp_lse_merge_record(cmd, &a));
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    DCP_ASSERT_OK(dcp_buffer_download(oo, 0, o_out, ROWS * D * 4));
    DCP_ASSERT_OK(dcp_buffer_download(lo, 0, lse_out, ROWS * 4));
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(oi);
    dcp_buffer_destroy(li);
    dcp_buffer_destroy(oo);
    dcp_buffer_destroy(lo);
}

/* Merges on every device and checks against the reference. Returns nothing; out gets device 0's. */
static void check(void **state, const char *name, uint32_t parts, const float *o_in, const float *lse_in,
                  float *o_out, float *lse_out)
{
    dcp_context *ctx = *state;
    float o_ref[ROWS * D], lse_ref[ROWS];
    dcp_ref_lse_merge(parts, ROWS, D, o_in, lse_in, o_ref, lse_ref);
    for (int d = dcp_context_device_count(ctx) - 1; d >= 0; d--) {
        gpu_merge(dcp_context_device(ctx, d), parts, o_in, lse_in, o_out, lse_out);
        char what[128];
        snprintf(what, sizeof what, "%s (device %d)", name, d);
        dcp_test_check_o(what, o_out, o_ref, ROWS * D);
        dcp_test_check_lse(what, lse_out, lse_ref, ROWS);
    }
}

static void fill(dcp_test_rng *rng, float *o, float *lse, uint32_t parts)
{
    for (uint32_t i = 0; i < parts * ROWS * D; i++) o[i] = dcp_test_rng_uniform(rng, -1, 1);
    for (uint32_t i = 0; i < parts * ROWS; i++) lse[i] = dcp_test_rng_uniform(rng, -5, 5);
}

static void test_one_state(void **state)
{
    dcp_test_rng rng = {1};
    float o[ROWS * D], lse[ROWS], out[ROWS * D], lout[ROWS];
    fill(&rng, o, lse, 1);
    check(state, "one state", 1, o, lse, out, lout);
    for (int i = 0; i < ROWS * D; i++) assert_true(fabsf(out[i] - o[i]) <= 1e-6f);
    for (int i = 0; i < ROWS; i++) assert_true(fabsf(lout[i] - lse[i]) <= 1e-6f * (1 + fabsf(lse[i])));
}

static void test_equal_states(void **state)
{
    dcp_test_rng rng = {2};
    enum { P = 4 };
    float o[P * ROWS * D], lse[P * ROWS], out[ROWS * D], lout[ROWS];
    fill(&rng, o, lse, 1);
    for (int p = 1; p < P; p++) {
        memcpy(o + p * ROWS * D, o, sizeof(float) * ROWS * D);
        memcpy(lse + p * ROWS, lse, sizeof(float) * ROWS);
    }
    check(state, "equal states", P, o, lse, out, lout);
    /* Same O; LSE grows by ln(P). */
    for (int i = 0; i < ROWS * D; i++) assert_true(fabsf(out[i] - o[i]) <= 1e-5f);
    for (int i = 0; i < ROWS; i++) assert_true(fabsf(lout[i] - (lse[i] + logf((float)P))) <= 1e-5f * (1 + fabsf(lse[i])));
}

static void test_dominant_state(void **state)
{
    dcp_test_rng rng = {3};
    enum { P = 3 };
    float o[P * ROWS * D], lse[P * ROWS], out[ROWS * D], lout[ROWS];
    fill(&rng, o, lse, P);
    for (int r = 0; r < ROWS; r++) lse[1 * ROWS + r] = 80.0f; /* part 1 dominates by e^75 */
    check(state, "dominant state", P, o, lse, out, lout);
    for (int r = 0; r < ROWS; r++)
        for (int d = 0; d < D; d++) assert_true(fabsf(out[r * D + d] - o[(1 * ROWS + r) * D + d]) <= 1e-6f);
}

static void test_empty_and_special(void **state)
{
    dcp_test_rng rng = {4};
    enum { P = 5 };
    float o[P * ROWS * D], lse[P * ROWS], out[ROWS * D], lout[ROWS];
    fill(&rng, o, lse, P);
    /* Row r: part r % P empty (-inf, with garbage O), part (r+1) % P NaN, part (r+2) % P +inf. */
    for (int r = 0; r < ROWS; r++) {
        lse[(r % P) * ROWS + r] = -INFINITY;
        lse[((r + 1) % P) * ROWS + r] = NAN;
        lse[((r + 2) % P) * ROWS + r] = INFINITY;
        for (int d = 0; d < D; d++) {
            o[((r % P) * ROWS + r) * D + d] = NAN;
            o[(((r + 1) % P) * ROWS + r) * D + d] = 1e30f;
            o[(((r + 2) % P) * ROWS + r) * D + d] = -INFINITY;
        }
    }
    check(state, "empty, NaN and +inf states", P, o, lse, out, lout);
    for (int i = 0; i < ROWS * D; i++) assert_true(isfinite(out[i]));
}

static void test_all_empty(void **state)
{
    enum { P = 3 };
    float o[P * ROWS * D], lse[P * ROWS], out[ROWS * D], lout[ROWS];
    for (int i = 0; i < P * ROWS * D; i++) o[i] = NAN;
    for (int i = 0; i < P * ROWS; i++) lse[i] = (i % 3 == 0) ? -INFINITY : (i % 3 == 1 ? NAN : INFINITY);
    check(state, "all empty", P, o, lse, out, lout);
    for (int i = 0; i < ROWS * D; i++) assert_true(out[i] == 0.0f);
    for (int i = 0; i < ROWS; i++) assert_true(isinf(lout[i]) && lout[i] < 0);
}

/* Output groups (the DCP a2a's messages written in place): 2 tokens x 6 heads in 3 groups of 2,
 * each group's O at 256-byte and LSE at 64-byte strides. Every row is bitwise the plain layout's,
 * at its grouped place; the gaps between groups keep their bytes; bad groups are refused. */
static void test_grouped_output(void **state)
{
    enum { T = 2, H = 6, G = 2, NG = 3, P = 3, OS = 256, LS = 64 };
    dcp_device *dev = dcp_context_device(*state, 0);
    dcp_test_rng rng = {77};
    float o_in[P * T * H * D], lse_in[P * T * H];
    for (uint32_t i = 0; i < P * T * H * D; i++) o_in[i] = dcp_test_rng_uniform(&rng, -1, 1);
    for (uint32_t i = 0; i < P * T * H; i++) lse_in[i] = dcp_test_rng_uniform(&rng, -5, 5);
    lse_in[T * H + 3] = -INFINITY; /* an empty part of one row */
    dcp_buffer *oi, *li, *oo, *lo, *go, *gl;
    DCP_ASSERT_OK(dcp_buffer_create(dev, sizeof o_in, DCP_MEMORY_DEVICE, &oi));
    DCP_ASSERT_OK(dcp_buffer_create(dev, sizeof lse_in, DCP_MEMORY_DEVICE, &li));
    DCP_ASSERT_OK(dcp_buffer_create(dev, T * H * D * 4, DCP_MEMORY_DEVICE, &oo));
    DCP_ASSERT_OK(dcp_buffer_create(dev, T * H * 4, DCP_MEMORY_DEVICE, &lo));
    DCP_ASSERT_OK(dcp_buffer_create(dev, NG * OS, DCP_MEMORY_DEVICE, &go));
    DCP_ASSERT_OK(dcp_buffer_create(dev, NG * LS, DCP_MEMORY_DEVICE, &gl));
    DCP_ASSERT_OK(dcp_buffer_upload(oi, 0, o_in, sizeof o_in));
    DCP_ASSERT_OK(dcp_buffer_upload(li, 0, lse_in, sizeof lse_in));
    float fill_o[NG * OS / 4], fill_l[NG * LS / 4];
    for (uint32_t i = 0; i < NG * OS / 4; i++) fill_o[i] = 777.0f;
    for (uint32_t i = 0; i < NG * LS / 4; i++) fill_l[i] = 777.0f;
    DCP_ASSERT_OK(dcp_buffer_upload(go, 0, fill_o, sizeof fill_o));
    DCP_ASSERT_OK(dcp_buffer_upload(gl, 0, fill_l, sizeof fill_l));
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    dcp_merge_args a = {.parts = P, .rows = T * H, .head_dim = D, .o_part_stride = T * H * D,
                        .lse_part_stride = T * H, .o_in = oi, .lse_in = li, .o_out = oo, .lse_out = lo};
    DCP_ASSERT_OK(dcp_lse_merge_record(cmd, &a));
    dcp_merge_args ag = a;
    ag.o_out = go;
    ag.lse_out = gl;
    const dcp_out_groups g = {NG, G, OS, LS};
    DCP_ASSERT_OK(dcp_lse_merge_record_grouped(cmd, &ag, H, &g));
    /* refused: groups that do not make the row's heads, a stride below a group's rows, unaligned */
    const dcp_out_groups bad[3] = {{NG, 3, OS, LS}, {NG, G, T * G * D * 4 - 16, LS}, {NG, G, OS, LS + 2}};
    for (int k = 0; k < 3; k++) {
        assert_int_equal(dcp_lse_merge_record_grouped(cmd, &ag, H, &bad[k]), DCP_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(dcp_last_error(), "output groups"));
    }
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    float po[T * H * D], pl[T * H], xo[NG * OS / 4], xl[NG * LS / 4];
    DCP_ASSERT_OK(dcp_buffer_download(oo, 0, po, sizeof po));
    DCP_ASSERT_OK(dcp_buffer_download(lo, 0, pl, sizeof pl));
    DCP_ASSERT_OK(dcp_buffer_download(go, 0, xo, sizeof xo));
    DCP_ASSERT_OK(dcp_buffer_download(gl, 0, xl, sizeof xl));
    uint8_t o_seen[NG * OS / 4] = {0}, l_seen[NG * LS / 4] = {0};
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t h = 0; h < H; h++) {
            const uint32_t n = h / G, w = t * G + h % G;
            assert_memory_equal(&xo[n * OS / 4 + w * D], &po[(t * H + h) * D], D * 4);
            assert_memory_equal(&xl[n * LS / 4 + w], &pl[t * H + h], 4);
            memset(&o_seen[n * OS / 4 + w * D], 1, D);
            l_seen[n * LS / 4 + w] = 1;
        }
    for (uint32_t i = 0; i < NG * OS / 4; i++)
        if (!o_seen[i]) assert_true(xo[i] == 777.0f);
    for (uint32_t i = 0; i < NG * LS / 4; i++)
        if (!l_seen[i]) assert_true(xl[i] == 777.0f);
    dcp_cmd_destroy(cmd);
    dcp_buffer *all[6] = {oi, li, oo, lo, go, gl};
    for (int k = 0; k < 6; k++) dcp_buffer_destroy(all[k]);
}

static void test_bad_args(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_cmd *cmd;
    dcp_buffer *b;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    DCP_ASSERT_OK(dcp_buffer_create(dev, 4096, DCP_MEMORY_DEVICE, &b));
    dcp_merge_args a = {.parts = 0, .rows = 1, .head_dim = 8, .o_in = b, .lse_in = b, .o_out = b, .lse_out = b};
    assert_int_equal(dcp_lse_merge_record(cmd, &a), DCP_ERR_INVALID_ARGUMENT);
    a.parts = 2;
    a.head_dim = 6;
    assert_int_equal(dcp_lse_merge_record(cmd, &a), DCP_ERR_UNSUPPORTED);
    a.head_dim = 8;
    a.rows = 1000; /* needs more than the 4096-byte buffer */
    a.o_part_stride = 8000;
    assert_int_equal(dcp_lse_merge_record(cmd, &a), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "outside"));
    dcp_buffer_destroy(b);
    dcp_cmd_destroy(cmd);
}

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_state),     cmocka_unit_test(test_equal_states),
        cmocka_unit_test(test_dominant_state), cmocka_unit_test(test_empty_and_special),
        cmocka_unit_test(test_all_empty),     cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_grouped_output),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
