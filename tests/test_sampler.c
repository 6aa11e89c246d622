/* Host sampler: greedy, determinism per seed, top-k and top-p sets, the temperature-softmax
 * distribution, invalid configurations. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/model.h"
#include "testutil.h"

#define V 1000

static void fill(float *l, uint64_t seed)
{
    dcp_test_rng r = {seed};
    for (int i = 0; i < V; i++) l[i] = dcp_test_rng_uniform(&r, -4, 4);
}

static dcp_sampler *make(float temp, uint32_t k, float p, uint64_t seed)
{
    dcp_sampler_config c = {temp, k, p, seed};
    dcp_sampler *s = NULL;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_OK);
    return s;
}

static void test_greedy(void **state)
{
    float l[V];
    fill(l, 1);
    l[321] = 10.0f;
    l[700] = 10.0f;
    l[5] = NAN;
    dcp_sampler *s = make(0.0f, 0, 1.0f, 0);
    assert_true(dcp_sampler_is_greedy(s));
    assert_int_equal(dcp_sampler_sample(s, l), 321);
    dcp_sampler_destroy(s);
    s = make(0.8f, 1, 1.0f, 9); /* top-k 1 is greedy too */
    assert_int_equal(dcp_sampler_sample(s, l), 321);
    dcp_sampler_destroy(s);
}

static void test_seeded(void **state)
{
    float l[V];
    fill(l, 2);
    int32_t a[64], b[64], c[64];
    dcp_sampler *s1 = make(1.0f, 40, 0.95f, 42), *s2 = make(1.0f, 40, 0.95f, 42), *s3 = make(1.0f, 40, 0.95f, 43);
    for (int i = 0; i < 64; i++) {
        a[i] = dcp_sampler_sample(s1, l);
        b[i] = dcp_sampler_sample(s2, l);
        c[i] = dcp_sampler_sample(s3, l);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    dcp_sampler_destroy(s1);
    dcp_sampler_destroy(s2);
    dcp_sampler_destroy(s3);
}

static int rank_of(const float *l, int32_t id)
{
    int r = 0;
    for (int i = 0; i < V; i++)
        if (l[i] > l[id] || (l[i] == l[id] && i < id)) r++;
    return r;
}

static void test_top_k_top_p(void **state)
{
    float l[V];
    fill(l, 3);
    dcp_sampler *s = make(2.0f, 5, 1.0f, 7);
    for (int i = 0; i < 2000; i++) assert_true(rank_of(l, dcp_sampler_sample(s, l)) < 5);
    dcp_sampler_destroy(s);
    /* top-p: probabilities 0.5, 0.3, 0.2 (+ negligible): p = 0.6 keeps the first two. */
    for (int i = 0; i < V; i++) l[i] = -1e9f;
    l[10] = logf(0.5f);
    l[20] = logf(0.3f);
    l[30] = logf(0.2f);
    s = make(1.0f, 0, 0.6f, 8);
    int count[3] = {0, 0, 0};
    for (int i = 0; i < 20000; i++) {
        int32_t id = dcp_sampler_sample(s, l);
        assert_true(id == 10 || id == 20);
        count[id / 10 - 1]++;
    }
    /* Renormalised 0.625 / 0.375. */
    assert_true(fabs(count[0] / 20000.0 - 0.625) < 0.02);
    dcp_sampler_destroy(s);
    /* Full distribution at temperature 1: 0.5 / 0.3 / 0.2. */
    s = make(1.0f, 0, 1.0f, 9);
    memset(count, 0, sizeof count);
    for (int i = 0; i < 20000; i++) count[dcp_sampler_sample(s, l) / 10 - 1]++;
    assert_true(fabs(count[0] / 20000.0 - 0.5) < 0.02);
    assert_true(fabs(count[1] / 20000.0 - 0.3) < 0.02);
    assert_true(fabs(count[2] / 20000.0 - 0.2) < 0.02);
    dcp_sampler_destroy(s);
}

static void test_bad_config(void **state)
{
    dcp_sampler *s = NULL;
    dcp_sampler_config c = DCP_SAMPLER_CONFIG_DEFAULT;
    c.temperature = -1.0f;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "temperature"));
    c.temperature = 1.0f;
    c.top_p = 0.0f;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "top-p"));
    c.top_p = 1.5f;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy), cmocka_unit_test(test_seeded), cmocka_unit_test(test_top_k_top_p),
        cmocka_unit_test(test_bad_config)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
