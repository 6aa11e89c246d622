/* KV cache of a DCP group: the kv_append shader against its reference (exact, f32 and f16), page
 * accounting per rank (bytes held = ceil(L_r / page) pages), out-of-pages without side effects,
 * freeing, and configuration errors. Ranks are the logical devices of $DCP_VK_DEVICES. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/kv.h"
#include "ref/kv_ref.h"
#include "vkutil.h"

static int setup(void **state)
{
    *state = dcp_test_context();
    return 0;
}

static int teardown(void **state)
{
    dcp_test_context_done(*state);
    return 0;
}

/* f16-exact random value, so that f16 pools can be compared exactly. */
static float rnd(dcp_test_rng *rng)
{
    return dcp_f16_to_f32(dcp_f32_to_f16(dcp_test_rng_uniform(rng, -2.0f, 2.0f)));
}

/* Reads a pool back as floats [num_pages][2][Hkv][B][D] (q8_0 rows dequantized). */
static float *read_pool(dcp_kv_pool *pool)
{
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(pool);
    const uint64_t pb = dcp_kv_pool_page_bytes(pool), rb = dcp_kv_row_bytes(pc->dtype, pc->head_dim);
    const uint64_t floats = pb / rb * pc->head_dim;
    float *out = malloc(pc->num_pages * floats * sizeof(float));
    char *raw = malloc(pc->num_pages * pb);
    uint32_t pps = dcp_kv_pool_pages_per_segment(pool);
    for (uint32_t s = 0; s < dcp_kv_pool_segment_count(pool); s++) {
        dcp_buffer *b = dcp_kv_pool_segment(pool, s);
        DCP_ASSERT_OK(dcp_buffer_download(b, 0, raw + (uint64_t)s * pps * pb, dcp_buffer_size(b)));
    }
    for (uint64_t i = 0; i < pc->num_pages * floats; i++) {
        if (pc->dtype == DCP_DTYPE_Q8_0)
            out[i] = (float)dcp_ref_q8_0_value((const uint32_t *)(raw + i / pc->head_dim * rb), pc->head_dim,
                                               (uint32_t)(i % pc->head_dim));
        else
            out[i] = pc->dtype == DCP_DTYPE_F16 ? dcp_f16_to_f32(((uint16_t *)raw)[i]) : ((float *)raw)[i];
    }
    free(raw);
    return out;
}

typedef struct kv_fixture {
    dcp_device *devs[16];
    uint32_t n;
    dcp_kv_cache *cache;
    dcp_buffer *k[16], *v[16];
    dcp_cmd *cmd[16];
    uint32_t max_tokens;
} kv_fixture;

static void fixture_init(kv_fixture *f, dcp_context *ctx, const dcp_kv_cache_config *cfg, uint32_t max_tokens)
{
    memset(f, 0, sizeof *f);
    f->n = (uint32_t)dcp_context_device_count(ctx);
    assert_true(f->n <= 16);
    for (uint32_t i = 0; i < f->n; i++) f->devs[i] = dcp_context_device(ctx, (int)i);
    DCP_ASSERT_OK(dcp_kv_cache_create(f->devs, f->n, cfg, &f->cache));
    f->max_tokens = max_tokens;
    uint64_t bytes = (uint64_t)max_tokens * cfg->pool.kv_heads * cfg->pool.head_dim * 4;
    for (uint32_t i = 0; i < f->n; i++) {
        DCP_ASSERT_OK(dcp_buffer_create(f->devs[i], bytes, DCP_MEMORY_DEVICE, &f->k[i]));
        DCP_ASSERT_OK(dcp_buffer_create(f->devs[i], bytes, DCP_MEMORY_DEVICE, &f->v[i]));
        DCP_ASSERT_OK(dcp_cmd_create(f->devs[i], &f->cmd[i]));
    }
}

static void fixture_done(kv_fixture *f)
{
    for (uint32_t i = 0; i < f->n; i++) {
        dcp_buffer_destroy(f->k[i]);
        dcp_buffer_destroy(f->v[i]);
        dcp_cmd_destroy(f->cmd[i]);
    }
    dcp_kv_cache_destroy(f->cache);
}

/* Appends through the shader on every rank and mirrors it in reference pages (one array per rank). */
static void append(kv_fixture *f, float **ref, uint32_t n, const uint32_t *seqs, const uint32_t *counts,
                   dcp_test_rng *rng)
{
    const dcp_kv_cache_config *c = dcp_kv_cache_get_config(f->cache);
    DCP_ASSERT_OK(dcp_kv_cache_append(f->cache, n, seqs, counts));
    uint32_t T = dcp_kv_cache_append_tokens(f->cache);
    assert_true(T <= f->max_tokens);
    uint64_t rows = (uint64_t)T * c->pool.kv_heads * c->pool.head_dim;
    float *k = malloc(rows * sizeof(float) + 4), *v = malloc(rows * sizeof(float) + 4);
    for (uint64_t i = 0; i < rows; i++) {
        k[i] = rnd(rng);
        v[i] = rnd(rng);
    }
    for (uint32_t i = 0; i < f->n; i++) {
        if (T) {
            DCP_ASSERT_OK(dcp_buffer_upload(f->k[i], 0, k, rows * 4));
            DCP_ASSERT_OK(dcp_buffer_upload(f->v[i], 0, v, rows * 4));
        }
        DCP_ASSERT_OK(dcp_cmd_reset(f->cmd[i]));
        DCP_ASSERT_OK(dcp_kv_cache_record_append(f->cmd[i], f->cache, i, f->k[i], 0, f->v[i], 0));
        DCP_ASSERT_OK(dcp_cmd_run(f->cmd[i]));
        dcp_ref_kv_append(ref[i], c->pool.num_pages, c->pool.kv_heads, c->pool.page_size, c->pool.head_dim,
                          dcp_kv_cache_append_slots(f->cache, i), T, k, v);
    }
    free(k);
    free(v);
}

static double q8_worst; /* largest q8_0 error seen by check_pools */

static void check_pools(kv_fixture *f, float **ref, const char *what)
{
    const dcp_kv_cache_config *c = dcp_kv_cache_get_config(f->cache);
    uint64_t floats = (uint64_t)c->pool.num_pages * 2 * c->pool.kv_heads * c->pool.page_size * c->pool.head_dim;
    for (uint32_t i = 0; i < f->n; i++) {
        float *got = read_pool(dcp_kv_cache_pool(f->cache, i));
        for (uint64_t e = 0; e < floats; e++)
            if (c->pool.dtype == DCP_DTYPE_Q8_0) { /* within the q8_0 bound of its block; rows never written stay 0 */
                float amax = 0;
                for (uint64_t j = e / 32 * 32; j < e / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(ref[i][j]));
                double err = fabs((double)got[e] - ref[i][e]);
                if (err > q8_worst) q8_worst = err;
                if (!(err <= DCP_REF_Q8_ERR(amax)))
                    fail_msg("%s: rank %u pool value %llu = %g, reference %g (q8_0 bound %g)", what, i,
                             (unsigned long long)e, got[e], ref[i][e], DCP_REF_Q8_ERR(amax));
            } else if (memcmp(&got[e], &ref[i][e], 4) != 0)
                fail_msg("%s: rank %u pool float %llu = %g, reference %g", what, i, (unsigned long long)e, got[e],
                         ref[i][e]);
        free(got);
    }
}

/* Pages each rank holds equal the pages its shards need. */
static void check_accounting(kv_fixture *f, uint32_t max_seqs)
{
    const dcp_kv_cache_config *c = dcp_kv_cache_get_config(f->cache);
    for (uint32_t i = 0; i < f->n; i++) {
        uint64_t pages = 0;
        for (uint32_t s = 0; s < max_seqs; s++) {
            uint64_t L = dcp_kv_local_length(dcp_kv_cache_seq_length(f->cache, s), i, c->dcp_size, c->interleave);
            assert_int_equal(dcp_kv_cache_seq_local_length(f->cache, i, s), L);
            pages += (L + c->pool.page_size - 1) / c->pool.page_size;
        }
        assert_int_equal(dcp_kv_cache_pages_used(f->cache, i), pages);
        assert_int_equal(dcp_kv_cache_pages_free(f->cache, i), c->pool.num_pages - pages);
        assert_int_equal(dcp_kv_cache_bytes_used(f->cache, i),
                         pages * dcp_kv_pool_page_bytes(dcp_kv_cache_pool(f->cache, i)));
    }
}

/* Prompts, then tokens one at a time across shard and page boundaries, three interleave sizes,
 * both dtypes: every rank's pool equals the reference, bytes held equal the shards' pages. */
static void test_append_and_accounting(void **state)
{
    dcp_context *ctx = *state;
    uint32_t N = (uint32_t)dcp_context_device_count(ctx);
    const uint32_t B = 8, interleaves[3] = {1, 4, B};
    dcp_test_rng rng = {7};
    static const dcp_dtype types[3] = {DCP_DTYPE_F32, DCP_DTYPE_F16, DCP_DTYPE_Q8_0};
    for (int t = 0; t < 3; t++)
        for (int k = 0; k < 3; k++) {
            /* q8_0: head dim 96, three blocks (a pair and a lone block in the last scale word) */
            const uint32_t D = types[t] == DCP_DTYPE_Q8_0 ? 96 : 8;
            dcp_kv_cache_config c = DCP_KV_CACHE_CONFIG_DEFAULT;
            c.pool = (dcp_kv_pool_config){.kv_heads = 2, .head_dim = D, .page_size = B, .dtype = types[t],
                                          .num_pages = 40};
            c.dcp_size = N;
            c.interleave = interleaves[k];
            c.max_seqs = 3;
            c.max_blocks = 16;
            kv_fixture f;
            fixture_init(&f, ctx, &c, 64);
            float *ref[16];
            uint64_t floats = (uint64_t)c.pool.num_pages * 2 * 2 * B * D;
            for (uint32_t i = 0; i < N; i++) ref[i] = calloc(floats, sizeof(float));
            uint32_t seqs[3] = {0, 1, 2}, prompt[3] = {5, 0, 23};
            append(&f, ref, 3, seqs, prompt, &rng);
            check_accounting(&f, 3);
            for (int step = 0; step < 20; step++) {
                uint32_t one[2] = {1, 1}, which[2] = {(uint32_t)step % 3, ((uint32_t)step + 1) % 3};
                append(&f, ref, 2, which, one, &rng);
            }
            check_accounting(&f, 3);
            check_pools(&f, ref, dcp_dtype_name(types[t]));
            /* Freeing returns a sequence's pages; its slot can be reused. */
            dcp_kv_cache_free_seq(f.cache, 2);
            assert_int_equal(dcp_kv_cache_seq_length(f.cache, 2), 0);
            check_accounting(&f, 3);
            uint32_t again = 9;
            append(&f, ref, 1, &seqs[2], &again, &rng);
            check_accounting(&f, 3);
            check_pools(&f, ref, "after free and reuse");
            for (uint32_t i = 0; i < N; i++) free(ref[i]);
            fixture_done(&f);
        }
    printf("kv_append q8_0: largest |dequantized - value| %.3g (values in [-2, 2]; bound 0.57 max|x| / 127)\n",
           q8_worst);
}

/* A sequence that needs a page when its rank has none: DCP_ERR_OUT_OF_PAGES, nothing changes. */
static void test_out_of_pages(void **state)
{
    dcp_context *ctx = *state;
    uint32_t N = (uint32_t)dcp_context_device_count(ctx);
    dcp_kv_cache_config c = DCP_KV_CACHE_CONFIG_DEFAULT;
    c.pool = (dcp_kv_pool_config){.kv_heads = 1, .head_dim = 4, .page_size = 4,
                                  .dtype = DCP_DTYPE_F32, .num_pages = 3};
    c.dcp_size = N;
    c.interleave = 4;
    c.max_seqs = 2;
    c.max_blocks = 8;
    kv_fixture f;
    fixture_init(&f, ctx, &c, 64);
    float *ref[16];
    for (uint32_t i = 0; i < N; i++) ref[i] = calloc(3 * 2 * 4 * 4, sizeof(float));
    dcp_test_rng rng = {11};
    /* Sequence 0 takes 2 pages on every rank (8 tokens each), sequence 1 one page on rank 0. */
    uint32_t s0 = 0, n0 = 8 * N, s1 = 1, n1 = 3;
    append(&f, ref, 1, &s0, &n0, &rng);
    append(&f, ref, 1, &s1, &n1, &rng);
    assert_int_equal(dcp_kv_cache_pages_free(f.cache, 0), 0);
    /* Growing sequence 1 to 4N + 1 tokens gives rank 0 a 5th token, which needs a second page on
     * rank 0 (the other ranks would each take their free page): refused as a whole. */
    uint32_t two = 4 * N - 2;
    uint32_t used0 = dcp_kv_cache_pages_used(f.cache, 0);
    assert_int_equal(dcp_kv_cache_append(f.cache, 1, &s1, &two), DCP_ERR_OUT_OF_PAGES);
    assert_non_null(strstr(dcp_last_error(), "rank 0"));
    assert_int_equal(dcp_kv_cache_seq_length(f.cache, 1), 3);
    assert_int_equal(dcp_kv_cache_pages_used(f.cache, 0), used0);
    check_accounting(&f, 2);
    check_pools(&f, ref, "after out of pages");
    /* One more token still fits in the page. */
    uint32_t one = 1;
    append(&f, ref, 1, &s1, &one, &rng);
    check_pools(&f, ref, "after the fitting append");
    /* Freeing sequence 0 makes room. */
    dcp_kv_cache_free_seq(f.cache, 0);
    two = 4 * N - 3;
    append(&f, ref, 1, &s1, &two, &rng);
    assert_int_equal(dcp_kv_cache_seq_local_length(f.cache, 0, 1), 5);
    check_accounting(&f, 2);
    for (uint32_t i = 0; i < N; i++) free(ref[i]);
    fixture_done(&f);
}

static void test_config_errors(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_kv_cache *cache = NULL;
    dcp_kv_cache_config c = DCP_KV_CACHE_CONFIG_DEFAULT;
    c.pool = (dcp_kv_pool_config){.kv_heads = 1, .head_dim = 4, .page_size = 16,
                                  .dtype = DCP_DTYPE_F32, .num_pages = 4};
    c.max_seqs = 1;
    c.max_blocks = 1;
    c.interleave = 3;
    assert_int_equal(dcp_kv_cache_create(&dev, 1, &c, &cache), DCP_ERR_CONFIG);
    assert_null(cache);
    assert_non_null(strstr(dcp_last_error(), "does not divide the page size"));
    c.interleave = 4;
    c.dcp_size = 2;
    c.first_rank = 2;
    assert_int_equal(dcp_kv_cache_create(&dev, 1, &c, &cache), DCP_ERR_CONFIG);
    c.first_rank = 1;
    DCP_ASSERT_OK(dcp_kv_cache_create(&dev, 1, &c, &cache));
    /* More tokens than the block table covers: 2 ranks x I 4 -> rank 1 holds tokens 4..7 of 16. */
    uint32_t s = 0, n = 40;
    assert_int_equal(dcp_kv_cache_append(cache, 1, &s, &n), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "block-table entries"));
    uint32_t bad = 5;
    assert_int_equal(dcp_kv_cache_append(cache, 1, &bad, &n), DCP_ERR_INVALID_ARGUMENT);
    dcp_kv_cache_destroy(cache);
}

/* Accounting-only cache (capacity planning): no devices, same page arithmetic. */
static void test_host_only(void **state)
{
    (void)state;
    dcp_kv_cache_config c = DCP_KV_CACHE_CONFIG_DEFAULT;
    c.pool = (dcp_kv_pool_config){.kv_heads = 2, .head_dim = 64, .page_size = 16,
                                  .dtype = DCP_DTYPE_F16, .num_pages = 10};
    c.dcp_size = 4;
    c.interleave = 16;
    c.max_seqs = 1;
    c.max_blocks = 11;
    c.host_only = true;
    dcp_device *none[4] = {NULL, NULL, NULL, NULL};
    dcp_kv_cache *cache = NULL;
    DCP_ASSERT_OK(dcp_kv_cache_create(none, 4, &c, &cache));
    assert_null(dcp_kv_cache_pool(cache, 0));
    uint32_t s = 0, n = 4 * 10 * 16; /* exactly fills every rank */
    DCP_ASSERT_OK(dcp_kv_cache_append(cache, 1, &s, &n));
    for (uint32_t i = 0; i < 4; i++) {
        assert_int_equal(dcp_kv_cache_pages_free(cache, i), 0);
        assert_int_equal(dcp_kv_cache_bytes_used(cache, i), 10ull * 2 * 2 * 16 * 64 * 2);
    }
    uint32_t one = 1;
    assert_int_equal(dcp_kv_cache_append(cache, 1, &s, &one), DCP_ERR_OUT_OF_PAGES);
    dcp_kv_cache_destroy(cache);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_host_only),
        cmocka_unit_test(test_append_and_accounting),
        cmocka_unit_test(test_out_of_pages),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
