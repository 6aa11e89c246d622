/* Vulkan helpers for the tests. */
#include "vkutil.h"

#include <math.h>
#include <stdio.h>

/* The library's warnings and validation messages on the test's stderr, as the apps print them. */
static void log_stderr(void *user, const char *message)
{
    (void)user;
    fprintf(stderr, "%s\n", message);
}

dcp_context *dcp_test_context(void)
{
    dcp_set_log_callback(log_stderr, NULL);
    dcp_context_config cfg = DCP_CONTEXT_CONFIG_DEFAULT;
    cfg.validation = 1;
    dcp_context *ctx = NULL;
    dcp_status st = dcp_context_create(&cfg, &ctx);
    if (st != DCP_OK) fail_msg("dcp_context_create: %s: %s", dcp_status_string(st), dcp_last_error());
    assert_true(dcp_context_device_count(ctx) >= 1);
    return ctx;
}

void dcp_test_context_done(dcp_context *ctx)
{
    uint64_t n = dcp_context_validation_count(ctx);
    dcp_context_destroy(ctx);
    if (n) fail_msg("the validation layer reported %llu message(s) (see stderr)", (unsigned long long)n);
}

dcp_context *dcp_test_context_of(uint32_t n)
{
    dcp_set_log_callback(log_stderr, NULL);
    char list[2 * 64];
    assert_true(n >= 1 && n <= 64);
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) k += (size_t)snprintf(list + k, sizeof list - k, i ? ",0" : "0");
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = list;
    cc.validation = 1;
    dcp_context *ctx = NULL;
    DCP_ASSERT_OK(dcp_context_create(&cc, &ctx));
    assert_true(dcp_context_device_count(ctx) == (int)n);
    return ctx;
}

dcp_buffer *dcp_test_upload_padded(dcp_device *dev, const void *data, uint64_t bytes, uint64_t pad)
{
    const uint64_t size = pad + bytes < 4 ? 4 : (pad + bytes + 3) / 4 * 4; /* fills go by words */
    dcp_buffer *b = NULL;
    DCP_ASSERT_OK(dcp_buffer_create(dev, size, DCP_MEMORY_DEVICE, &b));
    if (!data || pad || bytes < size) DCP_ASSERT_OK(dcp_buffer_fill(b, 0, size, 0));
    if (data && bytes) DCP_ASSERT_OK(dcp_buffer_upload(b, pad, data, bytes));
    return b;
}

dcp_buffer *dcp_test_upload(dcp_device *dev, const void *data, uint64_t bytes)
{
    return dcp_test_upload_padded(dev, data, bytes, 0);
}

double dcp_test_check_o(const char *what, const float *got, const float *want, uint64_t n)
{
    double worst = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)want[i]);
        if (!(e <= DCP_TOL_O_ABS))
            fail_msg("%s: O[%llu] = %.9g, reference %.9g (error %.3g > %.1g)", what, (unsigned long long)i,
                     got[i], want[i], e, DCP_TOL_O_ABS);
        if (e > worst) worst = e;
    }
    return worst;
}

double dcp_test_check_lse(const char *what, const float *got, const float *want, uint64_t n)
{
    double worst = 0.0;
    for (uint64_t i = 0; i < n; i++) {
        if (isinf(want[i]) && want[i] < 0) {
            if (!(isinf(got[i]) && got[i] < 0))
                fail_msg("%s: LSE[%llu] = %.9g, reference -inf", what, (unsigned long long)i, got[i]);
            continue;
        }
        double e = fabs((double)got[i] - (double)want[i]);
        double tol = DCP_TOL_LSE_REL * (1.0 + fabs((double)want[i]));
        if (!(e <= tol))
            fail_msg("%s: LSE[%llu] = %.9g, reference %.9g (error %.3g > %.3g)", what,
                     (unsigned long long)i, got[i], want[i], e, tol);
        if (e > worst) worst = e;
    }
    return worst;
}
