/* Vulkan helpers for the tests. */
#include "vkutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

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

void dcp_test_check_matmul(dcp_cmd *cmd, const dcp_test_matmul_case *c, dcp_test_matmul_worst *worst)
{
    dcp_device *dev = dcp_cmd_device(cmd);
    const uint32_t N = c->w->rows, T = c->tokens, xs = c->x_stride, ys = c->y_stride, xoff = c->x_offset;
    dcp_buffer *xb = dcp_test_upload(dev, c->x, (xoff + (uint64_t)T * xs) * 4);
    dcp_buffer *yb = dcp_test_upload(dev, c->y0, (uint64_t)T * ys * 4);
    DCP_ASSERT_OK(dcp_cmd_reset(cmd));
    DCP_ASSERT_OK(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = c->w, .x = xb, .x_offset = xoff, .x_stride = xs, .y = yb,
                                                        .y_stride = ys, .tokens = T, .accumulate = c->accumulate}));
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    float *y = malloc((uint64_t)T * ys * 4);
    DCP_ASSERT_OK(dcp_buffer_download(yb, 0, y, (uint64_t)T * ys * 4));
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t n = 0; n < N; n++) {
            double s = c->accumulate ? c->y0[t * ys + n] : 0.0, mag = fabs(s);
            for (uint32_t k = 0; k < c->cols; k++) {
                double p = (double)c->ref[(uint64_t)n * c->ref_stride + c->ref_col0 + k] * c->x[xoff + t * xs + k];
                s += p;
                mag += fabs(p);
            }
            double err = fabs(y[t * ys + n] - s);
            if (err > worst->abs) worst->abs = err;
            if (err / (mag + 1e-30) > worst->rel) worst->rel = err / (mag + 1e-30);
            if (!(err <= c->rel_tol * mag + c->abs_tol))
                fail_msg("%s: y[%u][%u] = %.9g, reference %.9g", c->what, t, n, y[t * ys + n], s);
        }
    for (uint32_t t = 0; t < T; t++) /* the padding columns of y are never written */
        for (uint32_t n = N; n < ys; n++) assert_true(y[t * ys + n] == c->y0[t * ys + n]);
    dcp_buffer_destroy(xb);
    dcp_buffer_destroy(yb);
    free(y);
}
