/* The FMA yardstick (shaders/fma_peak.comp) against its double reference, on every device of
 * $DCP_VK_DEVICES: the chains' starting values alone, a few steps that each shrink the distance to
 * the fixed point by a quarter (a missing or extra step is far outside the tolerance), a longer
 * loop, workgroups laid out on y, and the arguments it refuses. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref/yardstick_ref.h"
#include "kernels/yardstick.h"
#include "vkutil.h"

/* Runs fma_peak with (groups, iters, mul, add) on every device and checks every invocation. */
static void check(void **state, uint32_t groups, uint32_t iters, float mul, float add)
{
    dcp_context *ctx = *state;
    for (int d = 0; d < dcp_context_device_count(ctx); d++) {
        dcp_device *dev = dcp_context_device(ctx, d);
        uint64_t n = dcp_fma_peak_invocations(dev, groups);
        float *got = malloc(n * sizeof *got);
        double *want = malloc(n * sizeof *want);
        assert_non_null(got);
        assert_non_null(want);
        dcp_buffer *dst;
        dcp_cmd *cmd;
        DCP_ASSERT_OK(dcp_buffer_create(dev, n * 4, DCP_MEMORY_DEVICE, &dst));
        DCP_ASSERT_OK(dcp_buffer_fill(dst, 0, n * 4, 0x7fc00000u)); /* NaN: an unwritten value fails */
        DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
        DCP_ASSERT_OK(dcp_cmd_fma_peak(cmd, dst, groups, iters, mul, add));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        DCP_ASSERT_OK(dcp_buffer_download(dst, 0, got, n * 4));
        double top = dcp_ref_fma_peak(n, iters, mul, add, want);
        double steps = (double)iters * DCP_FMA_UNROLL;
        double tol = DCP_TOL_FMA_ROUNDINGS * ldexp(1.0, -24) * DCP_FMA_CHAINS * (steps + DCP_FMA_CHAINS) * top;
        for (uint64_t i = 0; i < n; i++)
            if (!(fabs((double)got[i] - want[i]) <= tol))
                fail_msg("device %d, %u groups, %u iterations: invocation %llu gave %.9g, reference %.9g "
                         "(error %.3g > %.3g)", d, groups, iters, (unsigned long long)i, got[i], want[i],
                         fabs((double)got[i] - want[i]), tol);
        double flops = dcp_fma_peak_flops(dev, groups, iters);
        assert_true(flops == 2.0 * (double)n * DCP_FMA_CHAINS * steps);
        dcp_cmd_destroy(cmd);
        dcp_buffer_destroy(dst);
        free(got);
        free(want);
    }
}

static void test_start_values(void **state) { check(state, 3, 0, 0.75f, 0.25f); }

/* x <- 0.75 x + 0.25 moves x a quarter of the way to 1 per step: 12 steps. */
static void test_few_steps(void **state) { check(state, 5, 3, 0.75f, 0.25f); }

/* 400 steps of x <- (1 - 2^-10) x + 2^-8 (fixed point 4, about a third of the way there). */
static void test_long_loop(void **state) { check(state, 7, 100, 1.0f - 0x1p-10f, 0x1p-8f); }

static void test_bad_args(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_buffer *dst;
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_buffer_create(dev, 4096, DCP_MEMORY_DEVICE, &dst));
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    assert_int_equal(dcp_cmd_fma_peak(cmd, dst, 0, 1, 1.0f, 0.0f), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "0 workgroups"));
    assert_int_equal(dcp_cmd_fma_peak(cmd, dst, 65536, 1, 1.0f, 0.0f), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_cmd_fma_peak(cmd, dst, 1, DCP_FMA_MAX_ITERS + 1, 1.0f, 0.0f), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "iterations"));
    uint32_t too_many = (uint32_t)(4096 / 4 / dcp_fma_peak_invocations(dev, 1)) + 1;
    assert_int_equal(dcp_cmd_fma_peak(cmd, dst, too_many, 1, 1.0f, 0.0f), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "the buffer holds 4096"));
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(dst);
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
        cmocka_unit_test(test_start_values), cmocka_unit_test(test_few_steps),
        cmocka_unit_test(test_long_loop),    cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
