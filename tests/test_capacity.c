/* Capacity planning counts instead of allocating: dcp_kv_max_length (what dcp-vk-bench capacity
 * prints) against the KV cache's own page allocator (an accounting-only dcp_kv_cache, the longest
 * sequence found by all-or-nothing appends) on small cases, and its answer for sizes no allocator
 * could walk page by page. CPU only. */
#include <stdlib.h>

#include "dcpvk/kv.h"
#include "testutil.h"
#include "vkutil.h"

/* Longest single sequence the allocator accepts on N ranks of `pages` pages each: every length
 * from 0 up is appended to a fresh sequence until one is refused. */
static uint64_t allocator_longest(uint32_t pages, uint32_t page_size, uint32_t N, uint32_t I)
{
    dcp_kv_cache_config c = DCP_KV_CACHE_CONFIG_DEFAULT;
    c.pool = (dcp_kv_pool_config){.kv_heads = 1, .head_dim = 4, .page_size = page_size, .dtype = DCP_DTYPE_F16, .num_pages = pages};
    c.dcp_size = N;
    c.interleave = I;
    c.max_seqs = 1;
    c.max_blocks = pages + 1;
    c.host_only = true;
    dcp_device *none[8] = {NULL};
    dcp_kv_cache *cache;
    DCP_ASSERT_OK(dcp_kv_cache_create(none, N, &c, &cache));
    uint32_t seq = 0;
    uint64_t len = 0;
    for (;; len++) {
        uint32_t count = (uint32_t)len + 1;
        dcp_status st = dcp_kv_cache_append(cache, 1, &seq, &count);
        if (st == DCP_ERR_OUT_OF_PAGES) break;
        DCP_ASSERT_OK(st);
        dcp_kv_cache_free_seq(cache, seq);
    }
    dcp_kv_cache_destroy(cache);
    dcp_clear_error();
    return len;
}

static void test_count_equals_allocator(void **state)
{
    (void)state;
    const uint32_t sizes[] = {4, 16};
    const uint32_t interleaves[] = {1, 2, 4, 16};
    int cases = 0;
    for (uint32_t N = 1; N <= 8; N++)
        for (size_t s = 0; s < 2; s++)
            for (size_t k = 0; k < 4; k++) {
                uint32_t P = sizes[s], I = interleaves[k];
                if (P % I) continue;
                for (uint32_t pages = 1; pages <= 9; pages++) {
                    uint64_t want = allocator_longest(pages, P, N, I);
                    uint64_t got = dcp_kv_max_length(pages, P, N, I);
                    if (got != want)
                        fail_msg("N %u I %u page %u, %u pages: counted %llu tokens, the allocator takes %llu", N, I,
                                 P, pages, (unsigned long long)got, (unsigned long long)want);
                    cases++;
                }
            }
    assert_true(cases > 300);
}

static void test_large(void **state)
{
    (void)state;
    /* 2^32 - 1 pages of 4096 tokens over 1024 ranks: no overflow, rank 0 holds the most. */
    const uint64_t pages = 0xffffffffull;
    uint64_t n = dcp_kv_max_length(pages, 4096, 1024, 1);
    assert_true(n == pages * 4096 * 1024);
    assert_true(dcp_kv_local_length(n, 0, 1024, 1) == pages * 4096);
    assert_true(dcp_kv_local_length(n + 1, 0, 1024, 1) == pages * 4096 + 1);
    /* Interleave 16 on pages of 16: whole pages per rank in turn. */
    n = dcp_kv_max_length(1000003, 16, 512, 16);
    assert_true(dcp_kv_local_length(n, 0, 512, 16) <= 1000003ull * 16);
    assert_true(dcp_kv_local_length(n + 1, 0, 512, 16) > 1000003ull * 16);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_equals_allocator),
        cmocka_unit_test(test_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
