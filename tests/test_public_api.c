/* A user's program: only the public header, the way an application embeds dcp-vk. Decodes one
 * sequence through the public API and checks the result against a direct computation. */
#include <math.h>
#include <stdlib.h>

#include "dcpvk/dcpvk.h"
#include "testutil.h"

static void test_decode_through_public_api(void **state)
{
    (void)state;
    enum { HKV = 1, HQ = 2, D = 8, PAGE = 16, LEN = 40, PAGES = 3 };
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.validation = 1;
    dcp_context *ctx = NULL;
    assert_int_equal(dcp_context_create(&cc, &ctx), DCP_OK);
    dcp_device *dev = dcp_context_device(ctx, 0);

    dcp_kv_pool_config pc = DCP_KV_POOL_CONFIG_DEFAULT;
    pc.kv_heads = HKV;
    pc.head_dim = D;
    pc.page_size = PAGE;
    pc.dtype = DCP_DTYPE_F32;
    pc.num_pages = PAGES;
    dcp_kv_pool *pool = NULL;
    assert_int_equal(dcp_kv_pool_create(dev, &pc, &pool), DCP_OK);
    /* Page p: K = all (p+1)/10 in token order, V row of token t = t. Block table: pages 2, 0, 1. */
    float pages[PAGES][2][PAGE][D];
    static const uint32_t bt[PAGES] = {2, 0, 1};
    for (int k = 0; k < PAGES; k++)
        for (int t = 0; t < PAGE; t++)
            for (int d = 0; d < D; d++) {
                pages[bt[k]][0][t][d] = (float)(k * PAGE + t) / 40.0f;
                pages[bt[k]][1][t][d] = (float)(k * PAGE + t);
            }
    assert_int_equal(dcp_kv_pool_write_pages(pool, 0, PAGES, pages), DCP_OK);

    dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
    dc.batch = 1;
    dc.q_heads = HQ;
    dc.max_blocks = PAGES;
    dcp_decode_plan *plan = NULL;
    assert_int_equal(dcp_decode_plan_create(pool, &dc, &plan), DCP_OK);
    const uint32_t len = LEN;
    assert_int_equal(dcp_decode_plan_set(plan, &len, bt), DCP_OK);

    float q[HQ][D];
    for (int h = 0; h < HQ; h++)
        for (int d = 0; d < D; d++) q[h][d] = h ? 1.0f : 0.0f; /* head 0: uniform weights */
    dcp_buffer *qb, *ob, *lb;
    assert_int_equal(dcp_buffer_create(dev, sizeof q, DCP_MEMORY_DEVICE, &qb), DCP_OK);
    assert_int_equal(dcp_buffer_create(dev, sizeof q, DCP_MEMORY_DEVICE, &ob), DCP_OK);
    assert_int_equal(dcp_buffer_create(dev, HQ * 4, DCP_MEMORY_DEVICE, &lb), DCP_OK);
    assert_int_equal(dcp_buffer_upload(qb, 0, q, sizeof q), DCP_OK);
    dcp_cmd *cmd;
    assert_int_equal(dcp_cmd_create(dev, &cmd), DCP_OK);
    assert_int_equal(dcp_decode_record(cmd, plan, qb, 0, ob, 0, lb, 0), DCP_OK);
    assert_int_equal(dcp_cmd_run(cmd), DCP_OK);
    float o[HQ][D], lse[HQ];
    assert_int_equal(dcp_buffer_download(ob, 0, o, sizeof o), DCP_OK);
    assert_int_equal(dcp_buffer_download(lb, 0, lse, sizeof lse), DCP_OK);

    /* Head 0: all scores 0, so O = mean of t over 0..39 = 19.5 and LSE = ln(40). */
    for (int d = 0; d < D; d++) assert_true(fabsf(o[0][d] - 19.5f) < 1e-4f);
    assert_true(fabsf(lse[0] - logf(40.0f)) < 1e-5f);
    /* Head 1: score of token t is sqrt(8) * t / 40 (scale 1/sqrt(8) times 8 * t/40). */
    double w = 0, acc = 0;
    for (int t = 0; t < LEN; t++) {
        double x = sqrt(8.0) * t / 40.0;
        w += exp(x);
        acc += exp(x) * t;
    }
    for (int d = 0; d < D; d++) assert_true(fabs(o[1][d] - acc / w) < 1e-4);
    assert_true(fabs(lse[1] - log(w)) < 1e-5 * (1 + log(w)));

    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(qb);
    dcp_buffer_destroy(ob);
    dcp_buffer_destroy(lb);
    dcp_decode_plan_destroy(plan);
    dcp_kv_pool_destroy(pool);
    assert_int_equal(dcp_context_validation_count(ctx), 0);
    dcp_context_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_decode_through_public_api)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
