/* Interleaved placement (owner, local index, local length) against a brute-force deal of the
 * positions, and the placement configuration errors. CPU only. */
#include <stdlib.h>
#include <string.h>

#include "dcpvk/kv.h"
#include "testutil.h"

static void test_against_brute_force(void **state)
{
    (void)state;
    enum { MAX_LEN = 1000 };
    static const uint32_t page = 32;
    const uint32_t interleaves[] = {1, 2, 4, 16, page};
    for (uint32_t N = 1; N <= 8; N++)
        for (size_t k = 0; k < sizeof interleaves / sizeof interleaves[0]; k++) {
            uint32_t I = interleaves[k];
            assert_int_equal(dcp_kv_placement_check(N, I, page), DCP_OK);
            /* Deal positions: I tokens to rank 0, the next I to rank 1, ... wrapping around. */
            uint64_t count[8] = {0};
            uint32_t rank = 0, run = 0;
            for (uint64_t p = 0; p <= MAX_LEN; p++) {
                /* Lengths: before position p is placed, the sequence has p tokens. */
                for (uint32_t r = 0; r < N; r++)
                    if (dcp_kv_local_length(p, r, N, I) != count[r])
                        fail_msg("N %u I %u length %llu rank %u: local length %llu, brute force %llu", N, I,
                                 (unsigned long long)p, r, (unsigned long long)dcp_kv_local_length(p, r, N, I),
                                 (unsigned long long)count[r]);
                if (p == MAX_LEN) break;
                assert_int_equal(dcp_kv_owner(p, N, I), rank);
                if (dcp_kv_local_index(p, N, I) != count[rank])
                    fail_msg("N %u I %u position %llu: local index %llu, brute force %llu", N, I,
                             (unsigned long long)p, (unsigned long long)dcp_kv_local_index(p, N, I),
                             (unsigned long long)count[rank]);
                count[rank]++;
                if (++run == I) {
                    run = 0;
                    rank = (rank + 1) % N;
                }
            }
        }
}

static void test_config_errors(void **state)
{
    (void)state;
    assert_int_equal(dcp_kv_placement_check(4, 3, 16), DCP_ERR_CONFIG);
    assert_non_null(strstr(dcp_last_error(), "interleave size 3 does not divide the page size 16"));
    assert_int_equal(dcp_kv_placement_check(4, 32, 16), DCP_ERR_CONFIG);
    assert_int_equal(dcp_kv_placement_check(4, 0, 16), DCP_ERR_CONFIG);
    assert_int_equal(dcp_kv_placement_check(0, 1, 16), DCP_ERR_CONFIG);
    assert_int_equal(dcp_kv_placement_check(3, 16, 16), DCP_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_brute_force),
        cmocka_unit_test(test_config_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
