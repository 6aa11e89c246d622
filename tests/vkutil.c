/* Vulkan helpers for the tests. */
#include "vkutil.h"

#include <math.h>
#include <stdio.h>

dcp_context *dcp_test_context(void)
{
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
