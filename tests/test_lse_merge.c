/* lse_merge against the double-precision reference: one state, equal states, a dominant state,
 * empty states (-inf), NaN and +inf LSE, all empty. Runs on every device of $DCP_VK_DEVICES. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
