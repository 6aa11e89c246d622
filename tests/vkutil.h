/* Vulkan helpers for the tests: one context per test group, validation on, zero messages required. */
#ifndef DCP_VKUTIL_H
#define DCP_VKUTIL_H

#include "dcpvk/ops.h"
#include "dcpvk/vk.h"
#include "testutil.h"

/* Creates a context from $DCP_VK_DEVICES with the validation layer on and the library's log
 * messages on stderr (fails the test if that is impossible: a missing device is a failure, never a
 * skip). */
dcp_context *dcp_test_context(void);
/* Asserts that the validation layer said nothing, then destroys the context. */
void dcp_test_context_done(dcp_context *ctx);
/* A context of n logical devices on physical device 0 (devices "0,0,...", n <= 64), validation on;
 * destroy it with dcp_test_context_done. */
dcp_context *dcp_test_context_of(uint32_t n);

/* A device-local buffer of `bytes` (rounded up to whole words, at least 4) holding data[0, bytes)
 * and zeros after it, or only zeros when data is NULL. */
dcp_buffer *dcp_test_upload(dcp_device *dev, const void *data, uint64_t bytes);
/* The same with `pad` zero bytes before the data: pad + bytes in all, data at offset pad. */
dcp_buffer *dcp_test_upload_padded(dcp_device *dev, const void *data, uint64_t bytes, uint64_t pad);

/* Tolerances, one table for all tests: |O - O_ref| <= o_abs; |LSE - LSE_ref| <= lse_rel * (1 + |LSE_ref|). */
#define DCP_TOL_O_ABS 1e-4
#define DCP_TOL_LSE_REL 1e-5
/* fma_peak against its double reference: each of the s steps of a chain and each of the sum's
 * terms rounds at most twice (fused or not) by 2^-24 of the largest |x|: per invocation,
 * |got - want| <= DCP_TOL_FMA_ROUNDINGS * 2^-24 * chains * (steps + chains) * max|x|. */
#define DCP_TOL_FMA_ROUNDINGS 2.0

/* Compares n values of a partial state against the reference; names `what` on failure.
 * -inf must match -inf exactly. Returns the max abs error seen. */
double dcp_test_check_o(const char *what, const float *got, const float *want, uint64_t n);
double dcp_test_check_lse(const char *what, const float *got, const float *want, uint64_t n);

/* One y (+)= W x of dcp_op_matmul for dcp_test_check_matmul, and its double-precision reference:
 * y[t][n] (+)= sum over c < cols of ref[n][ref_col0 + c] * x[x_offset + t x_stride + c] (ref_col0 0
 * and cols w->k without a column window; the window's held columns with one). */
typedef struct dcp_test_matmul_case {
    const dcp_matrix *w;
    const float *ref;          /* [w->rows][ref_stride] f32: w's dequantized values */
    uint32_t ref_stride, ref_col0, cols;
    const float *x;            /* [x_offset + tokens x_stride] f32 */
    uint32_t x_offset, x_stride;
    const float *y0;           /* [tokens][y_stride] f32: y before the op (added to when accumulating) */
    uint32_t y_stride, tokens;
    int accumulate;
    double rel_tol, abs_tol;   /* |y - y_ref| <= rel_tol * sum |terms| + abs_tol (y0's term included) */
    const char *what;          /* names the case on failure */
} dcp_test_matmul_case;

/* The worst errors dcp_test_check_matmul saw: |y - y_ref| and |y - y_ref| / sum |terms|. */
typedef struct dcp_test_matmul_worst {
    double abs, rel;
} dcp_test_matmul_worst;

/* Uploads c's x and y0, records the matmul on cmd (reset first), runs it and checks every y[t][n]
 * against the reference within c's tolerance, and that y's padding columns (n >= rows) are
 * unchanged; fails the test naming c->what. Raises *worst to the errors seen. */
void dcp_test_check_matmul(dcp_cmd *cmd, const dcp_test_matmul_case *c, dcp_test_matmul_worst *worst);

#define DCP_ASSERT_OK(expr)                                                                        \
    do {                                                                                           \
        dcp_status st_ = (expr);                                                                   \
        if (st_ != DCP_OK)                                                                         \
            fail_msg("%s failed: %s: %s", #expr, dcp_status_string(st_), dcp_last_error());       \
    } while (0)

#endif
