/* GPU-assisted validation (context validation 2, DCP_VK_VALIDATION=gpuav) finds what it is run
 * for: a shader writing past the range of its binding is reported (a validation message, which
 * fails any test run under it), and the same dispatch within its range is not. The CI job that
 * runs the GPU tests under DCP_VK_VALIDATION=gpuav (scripts/setup.sh test) relies on this. */
#include <stdint.h>
#include <stdio.h>

#include "dcpvk/dcpvk.h"
#include "kernels/kernels.h"
#include "vk/internal.h"
#include "vkutil.h"

enum { N = 1024 };

/* y = a + b over n floats, y a buffer of y_bytes bytes; returns the layer's messages. */
static uint64_t add_into(dcp_context *ctx, uint64_t y_bytes, uint32_t n)
{
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_buffer *a, *b, *y;
    DCP_ASSERT_OK(dcp_buffer_create(dev, N * 4, DCP_MEMORY_HOST, &a));
    DCP_ASSERT_OK(dcp_buffer_create(dev, N * 4, DCP_MEMORY_HOST, &b));
    DCP_ASSERT_OK(dcp_buffer_create(dev, y_bytes, DCP_MEMORY_HOST, &y));
    float *pa = dcp_buffer_map(a), *pb = dcp_buffer_map(b), *py = dcp_buffer_map(y);
    for (int i = 0; i < N; i++) {
        pa[i] = (float)i;
        pb[i] = 1.0f;
    }
    for (uint64_t i = 0; i < y_bytes / 4; i++) py[i] = -1.0f;
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    const uint32_t wg = dcp_vk_workgroup_size(dev), spec[1] = {wg};
    const dcp_binding bind[3] = {{a, 0, 0}, {b, 0, 0}, {y, 0, 0}};
    const dcp_add_params p = {n};
    const uint64_t before = dcp_context_validation_count(ctx);
    DCP_ASSERT_OK(dcp_kernel_dispatch(cmd, DCP_KERNEL_ADD, spec, bind, &p, (n + wg - 1) / wg, 1, 1));
    dcp_cmd_barrier_host(cmd);
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    const uint64_t said = dcp_context_validation_count(ctx) - before;
    /* Within the buffer the kernel did its work. */
    for (uint64_t i = 0; i < y_bytes / 4 && i < n; i++) assert_true(py[i] == (float)i + 1.0f);
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(y);
    dcp_buffer_destroy(b);
    dcp_buffer_destroy(a);
    return said;
}

static void test_out_of_bounds_write_reported(void **state)
{
    (void)state;
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = "0";
    cc.validation = 2;
    dcp_context *ctx = NULL;
    DCP_ASSERT_OK(dcp_context_create(&cc, &ctx));
    /* In bounds: nothing to say. */
    assert_int_equal(add_into(ctx, N * 4, N), 0);
    /* 64 invocations writing y[i] into a 252-byte (63-float) buffer: one float past its end (the
     * 1.3.239 layer checks an access against the end of the bound buffer, not the descriptor's
     * range; lavapipe rounds the allocation up, so even unchecked the write stays in it). */
    const uint64_t said = add_into(ctx, 252, 64);
    fprintf(stderr, "test_gpuav: the layer reported %llu message(s) for the out-of-bounds writes (expected)\n",
            (unsigned long long)said);
    assert_true(said > 0);
    dcp_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_out_of_bounds_write_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
