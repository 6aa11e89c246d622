/* What each DCP rank sees in a speculative verification step, against a brute-force deal of the
 * positions. A sequence of L tokens appends its last token and k drafts as one run (rows j = 0..k at
 * global positions L + j, as the run state appends a verification); on every rank r, query j
 * attends over the local prefix of length local_len(L + j + 1, r) of r's shard:
 *  - that prefix is exactly r's positions p < L + j + 1 (none later, none missing), including ranks
 *    that own none of the k + 1 new tokens;
 *  - the prefix lies in pages the rank's block table holds, and the new token at L + j is written
 *    to its owner only, at the slot its local index names (no two tokens share a slot);
 *  - rolling back to L + 1 + a (a = k .. 0 accepted) leaves on every rank the pages a sequence of
 *    that length holds, its kept block-table entries unchanged, and the pool's free count whole.
 * Every N in 1..8, interleave I in {1, 2, 4, 8} dividing pages of 4 and 8 tokens, k in 1..8 and
 * L from 0 over three rounds of pages on every rank, so that queries start and end on and across
 * page and interleave boundaries. The sweep also counts how often deriving a query's length from
 * the rank's final length (minus the drafts after it) would be wrong: that rule differs from the
 * placement rule, so this test tells them apart. Host-only caches (page accounting, no device). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/kv.h"
#include "testutil.h"

enum { MAX_N = 8, MAX_K = 8 };

typedef struct tally {
    uint64_t queries;         /* (rank, j) pairs checked */
    uint64_t idle_ranks;      /* verifications x ranks owning none of the new tokens */
    uint64_t page_crossings;  /* verifications x ranks whose new tokens start a page */
    uint64_t wrong_rule;      /* queries where local_len(L + k + 1) - (k - j) is not the visible count */
} tally;

static dcp_kv_cache *host_cache(uint32_t N, uint32_t I, uint32_t B, uint32_t pages)
{
    dcp_kv_cache_config c = DCP_KV_CACHE_CONFIG_DEFAULT;
    c.pool.kv_heads = 1;
    c.pool.head_dim = 4;
    c.pool.page_size = B;
    c.pool.num_pages = pages;
    c.dcp_size = N;
    c.interleave = I;
    c.max_seqs = 1;
    c.max_blocks = pages;
    c.host_only = true;
    dcp_device *none[MAX_N] = {NULL};
    dcp_kv_cache *cache;
    assert_int_equal(dcp_kv_cache_create(none, N, &c, &cache), DCP_OK);
    return cache;
}

/* Rank r's pages of the sequence and their free count add up to the pool; the pages are those a
 * sequence of its length needs. */
static void check_pages(const dcp_kv_cache *c, uint32_t N, uint32_t I, uint32_t B, uint32_t pages, const char *what)
{
    const uint64_t len = dcp_kv_cache_seq_length(c, 0);
    for (uint32_t r = 0; r < N; r++) {
        const uint64_t want = (dcp_kv_local_length(len, r, N, I) + B - 1) / B;
        if (dcp_kv_cache_pages_used(c, r) != want || dcp_kv_cache_pages_free(c, r) + want != pages)
            fail_msg("%s: length %llu rank %u holds %u pages (%u free of %u); a sequence of that length holds %llu",
                     what, (unsigned long long)len, r, dcp_kv_cache_pages_used(c, r), dcp_kv_cache_pages_free(c, r),
                     pages, (unsigned long long)want);
    }
}

/* One verification of k + 1 rows at length L; c holds L tokens, and holds L + 1 after. */
static void verify_once(dcp_kv_cache *c, uint32_t N, uint32_t I, uint32_t B, uint32_t pages, uint32_t L, uint32_t k,
                        tally *t)
{
    char what[96];
    snprintf(what, sizeof what, "N %u I %u page %u k %u L %u", N, I, B, k, L);
    const uint32_t seq = 0, count = k + 1;
    assert_int_equal(dcp_kv_cache_append(c, 1, &seq, &count), DCP_OK);
    assert_int_equal(dcp_kv_cache_append_tokens(c), k + 1);
    static uint32_t bt_before[MAX_N][64];
    for (uint32_t r = 0; r < N; r++) {
        const uint32_t *bt = dcp_kv_cache_block_table(c, r, 0), *slots = dcp_kv_cache_append_slots(c, r);
        const uint32_t held = dcp_kv_cache_pages_used(c, r);
        memcpy(bt_before[r], bt, held * sizeof *bt);
        uint32_t owned = 0;
        for (uint32_t j = 0; j <= k; j++) {
            /* The new token at L + j: on its owner at the slot of its local index, nowhere else. */
            const uint64_t pos = (uint64_t)L + j;
            if (dcp_kv_owner(pos, N, I) == r) {
                const uint64_t li = dcp_kv_local_index(pos, N, I);
                if (li / B >= held) fail_msg("%s: rank %u row %u: local index %llu beyond its %u pages", what, r, j, (unsigned long long)li, held);
                if (slots[j] != bt[li / B] * B + li % B)
                    fail_msg("%s: rank %u row %u: slot %u, its local index %llu names %u", what, r, j, slots[j],
                             (unsigned long long)li, bt[li / B] * B + (uint32_t)(li % B));
                for (uint32_t i = 0; i < j; i++)
                    if (slots[i] == slots[j]) fail_msg("%s: rank %u rows %u and %u share slot %u", what, r, i, j, slots[j]);
                if (li % B == 0) t->page_crossings++;
                owned++;
            } else if (slots[j] != UINT32_MAX) {
                fail_msg("%s: rank %u row %u: slot %u for a token rank %u owns", what, r, j, slots[j],
                         dcp_kv_owner(pos, N, I));
            }
            /* Query j sees the local prefix [0, vis): brute force, the positions of r before L + j + 1
             * in position order; the prefix must be exactly them. */
            const uint64_t vis = dcp_kv_local_length(pos + 1, r, N, I);
            uint64_t brute = 0;
            for (uint64_t p = 0; p <= pos; p++) {
                if (dcp_kv_owner(p, N, I) != r) continue;
                if (dcp_kv_local_index(p, N, I) != brute)
                    fail_msg("%s: rank %u position %llu: local index %llu, brute force %llu", what, r,
                             (unsigned long long)p, (unsigned long long)dcp_kv_local_index(p, N, I),
                             (unsigned long long)brute);
                brute++;
            }
            if (vis != brute)
                fail_msg("%s: rank %u query %u (global position %llu): sees %llu local tokens; it owns %llu before "
                         "position %llu",
                         what, r, j, (unsigned long long)pos, (unsigned long long)vis, (unsigned long long)brute,
                         (unsigned long long)pos + 1);
            if ((vis + B - 1) / B > held) fail_msg("%s: rank %u query %u: %llu visible tokens beyond its %u pages", what, r, j, (unsigned long long)vis, held);
            const uint64_t fin = dcp_kv_local_length((uint64_t)L + k + 1, r, N, I);
            if (fin < k - j || fin - (k - j) != vis) t->wrong_rule++;
            t->queries++;
        }
        if (owned == 0) t->idle_ranks++;
    }
    /* Roll back to L + 1 + a for a = k .. 0: pages of that length, kept entries unchanged. */
    for (uint32_t a = k + 1; a-- > 0;) {
        assert_int_equal(dcp_kv_cache_truncate_seq(c, 0, (uint64_t)L + 1 + a), DCP_OK);
        check_pages(c, N, I, B, pages, what);
        for (uint32_t r = 0; r < N; r++)
            if (memcmp(dcp_kv_cache_block_table(c, r, 0), bt_before[r], dcp_kv_cache_pages_used(c, r) * sizeof(uint32_t)))
                fail_msg("%s: rank %u: rolling back to %u accepted changed a kept block-table entry", what, r, a);
    }
}

static void test_every_rank_and_query(void **state)
{
    (void)state;
    static const uint32_t pages_of[] = {4, 8}, interleaves[] = {1, 2, 4, 8};
    tally t = {0};
    uint64_t verifications = 0;
    for (uint32_t N = 1; N <= MAX_N; N++)
        for (size_t b = 0; b < 2; b++)
            for (size_t i = 0; i < 4; i++) {
                const uint32_t B = pages_of[b], I = interleaves[i];
                if (B % I) continue;
                const uint32_t rounds = 3 * B * N, pages = 8; /* 3 pages a rank plus the drafts */
                for (uint32_t k = 1; k <= MAX_K; k++) {
                    dcp_kv_cache *c = host_cache(N, I, B, pages);
                    for (uint32_t L = 0; L < rounds; L++) {
                        verify_once(c, N, I, B, pages, L, k, &t);
                        verifications++;
                    }
                    /* Back to empty: every page home. */
                    assert_int_equal(dcp_kv_cache_truncate_seq(c, 0, 0), DCP_OK);
                    for (uint32_t r = 0; r < N; r++) assert_int_equal(dcp_kv_cache_pages_free(c, r), pages);
                    dcp_kv_cache_destroy(c);
                }
            }
    printf("%llu verifications, %llu (rank, query) pairs: every query sees exactly its rank's tokens before it; "
           "%llu times a rank owned none of the new tokens, %llu times the new tokens started a page; the "
           "final-length rule would be wrong for %llu queries\n",
           (unsigned long long)verifications, (unsigned long long)t.queries, (unsigned long long)t.idle_ranks,
           (unsigned long long)t.page_crossings, (unsigned long long)t.wrong_rule);
    assert_true(t.idle_ranks > 0);
    assert_true(t.page_crossings > 0);
    assert_true(t.wrong_rule > 0);
}

/* Truncation refuses a longer length and a slot outside the cache, changing nothing. */
static void test_truncate_refusals(void **state)
{
    (void)state;
    dcp_kv_cache *c = host_cache(2, 1, 4, 4);
    const uint32_t seq = 0, count = 5;
    assert_int_equal(dcp_kv_cache_append(c, 1, &seq, &count), DCP_OK);
    assert_int_equal(dcp_kv_cache_truncate_seq(c, 0, 6), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "of 5 tokens to 6 (longer)"));
    assert_int_equal(dcp_kv_cache_truncate_seq(c, 1, 0), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "outside the 1 slots"));
    assert_int_equal(dcp_kv_cache_seq_length(c, 0), 5);
    check_pages(c, 2, 1, 4, 4, "refused truncations");
    dcp_kv_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_rank_and_query),
        cmocka_unit_test(test_truncate_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
