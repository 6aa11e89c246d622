/* paged_decode against the double-precision reference: shapes, lengths, page sizes, dtypes,
 * shuffled block tables, mixed-length batches, split-KV chunking, bad input. Sequences are spread
 * over every device of $DCP_VK_DEVICES (sequence b runs on device b % devices). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/attn.h"
#include "dcpvk/dtype.h"
#include "dcpvk/kv.h"
#include "kernels/kv_params.h"
#include "ref/kv_ref.h"
#include "ref/ref.h"
#include "vkutil.h"

typedef struct decode_case {
    uint32_t batch, q_heads, kv_heads, head_dim, page_size;
    dcp_dtype dtype;
    const uint32_t *lengths; /* [batch] */
    uint32_t chunk_tokens;   /* 0: automatic */
} decode_case;

/* Runs one case on one device for the sequences `seqs` (count n) and checks it. */
static void run_on_device(dcp_device *dev, const decode_case *c, const uint32_t *seqs, uint32_t n,
                          dcp_test_rng *rng)
{
    const uint32_t D = c->head_dim, B = c->page_size;
    uint32_t max_blocks = 1, total_pages = 0;
    uint32_t *lengths = calloc(n, sizeof *lengths);
    for (uint32_t i = 0; i < n; i++) {
        lengths[i] = c->lengths[seqs[i]];
        uint32_t pages = (lengths[i] + B - 1) / B;
        if (pages > max_blocks) max_blocks = pages;
        total_pages += pages;
    }
    uint32_t num_pages = total_pages + 3; /* a few pages nobody uses */
    uint64_t page_floats = 2ull * c->kv_heads * B * D;
    void *bytes = malloc(num_pages * 2ull * c->kv_heads * B * dcp_kv_row_bytes(c->dtype, D));
    if (c->dtype == DCP_DTYPE_Q8_0) { /* rows quantized by the reference quantizer */
        const uint64_t rw = DCP_KV_Q8_ROW_WORDS(D);
        float *x = malloc(D * sizeof *x);
        for (uint64_t r = 0; r < num_pages * page_floats / D; r++) {
            for (uint32_t d = 0; d < D; d++) x[d] = dcp_test_rng_uniform(rng, -1.0f, 1.0f);
            dcp_ref_q8_0_quantize_row(x, D, (uint32_t *)bytes + r * rw);
        }
        free(x);
    } else {
        for (uint64_t i = 0; i < num_pages * page_floats; i++) {
            float v = dcp_test_rng_uniform(rng, -1.0f, 1.0f);
            if (c->dtype == DCP_DTYPE_F16)
                ((uint16_t *)bytes)[i] = dcp_f32_to_f16(v);
            else
                ((float *)bytes)[i] = v;
        }
    }
    /* Shuffled block tables: a random permutation of the pool's pages. */
    uint32_t *perm = malloc(num_pages * sizeof *perm);
    for (uint32_t i = 0; i < num_pages; i++) perm[i] = i;
    for (uint32_t i = num_pages - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(dcp_test_rng_next(rng) % (i + 1));
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    uint32_t *bt = calloc((size_t)n * max_blocks, sizeof *bt);
    uint32_t next = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < (lengths[i] + B - 1) / B; k++) bt[i * max_blocks + k] = perm[next++];

    uint64_t rows = (uint64_t)n * c->q_heads;
    float *q = malloc(rows * D * sizeof(float));
    for (uint64_t i = 0; i < rows * D; i++) q[i] = dcp_test_rng_uniform(rng, -1.0f, 1.0f);
    float *o = malloc(rows * D * sizeof(float)), *lse = malloc(rows * sizeof(float));
    float *o_ref = malloc(rows * D * sizeof(float)), *lse_ref = malloc(rows * sizeof(float));

    dcp_kv_pool_config pc = {.kv_heads = c->kv_heads, .head_dim = D, .page_size = B, .dtype = c->dtype,
                             .num_pages = num_pages};
    dcp_kv_pool *pool;
    DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
    DCP_ASSERT_OK(dcp_kv_pool_write_pages(pool, 0, num_pages, bytes));
    dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
    dc.batch = n;
    dc.q_heads = c->q_heads;
    dc.max_blocks = max_blocks;
    dc.chunk_tokens = c->chunk_tokens;
    dcp_decode_plan *plan;
    DCP_ASSERT_OK(dcp_decode_plan_create(pool, &dc, &plan));
    DCP_ASSERT_OK(dcp_decode_plan_set(plan, lengths, bt));
    dcp_buffer *qb, *ob, *lb;
    DCP_ASSERT_OK(dcp_buffer_create(dev, rows * D * 4, DCP_MEMORY_DEVICE, &qb));
    DCP_ASSERT_OK(dcp_buffer_create(dev, rows * D * 4, DCP_MEMORY_DEVICE, &ob));
    DCP_ASSERT_OK(dcp_buffer_create(dev, rows * 4, DCP_MEMORY_DEVICE, &lb));
    DCP_ASSERT_OK(dcp_buffer_upload(qb, 0, q, rows * D * 4));
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    DCP_ASSERT_OK(dcp_decode_record(cmd, plan, qb, 0, ob, 0, lb, 0));
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    DCP_ASSERT_OK(dcp_buffer_download(ob, 0, o, rows * D * 4));
    DCP_ASSERT_OK(dcp_buffer_download(lb, 0, lse, rows * 4));

    dcp_ref_decode_args ra = {.batch = n, .q_heads = c->q_heads, .kv_heads = c->kv_heads, .head_dim = D,
        .page_size = B, .max_blocks = max_blocks, .scale = 1.0f / sqrtf((float)D), .dtype = c->dtype,
        .pages = bytes, .q = q, .lengths = lengths, .block_tables = bt, .o = o_ref, .lse = lse_ref};
    dcp_ref_paged_decode(&ra);
    char what[256];
    snprintf(what, sizeof what, "device %d: batch %u Hq %u Hkv %u D %u page %u %s chunks %u",
             dcp_device_get_info(dev)->logical_index, n, c->q_heads, c->kv_heads, D, B,
             dcp_dtype_name(c->dtype), dcp_decode_plan_chunks(plan));
    dcp_test_check_o(what, o, o_ref, rows * D);
    dcp_test_check_lse(what, lse, lse_ref, rows);

    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(qb);
    dcp_buffer_destroy(ob);
    dcp_buffer_destroy(lb);
    dcp_decode_plan_destroy(plan);
    dcp_kv_pool_destroy(pool);
    free(lengths);
    free(bytes);
    free(perm);
    free(bt);
    free(q);
    free(o);
    free(lse);
    free(o_ref);
    free(lse_ref);
}

static void run_case(dcp_context *ctx, const decode_case *c, uint64_t seed)
{
    dcp_test_rng rng = {seed};
    int ndev = dcp_context_device_count(ctx);
    uint32_t *seqs = malloc(c->batch * sizeof *seqs);
    for (int d = 0; d < ndev; d++) {
        uint32_t n = 0;
        for (uint32_t b = 0; b < c->batch; b++)
            if ((int)(b % (uint32_t)ndev) == d) seqs[n++] = b;
        if (n) run_on_device(dcp_context_device(ctx, d), c, seqs, n, &rng);
    }
    free(seqs);
}

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

static const dcp_dtype dtypes[3] = {DCP_DTYPE_F32, DCP_DTYPE_F16, DCP_DTYPE_Q8_0};

/* Every head dim x every group size x every dtype (q8_0: head dims of whole blocks of 32), batch
 * 3 of mixed lengths. q8_0 pages hold the reference quantizer's rows and the reference decodes
 * the same bytes, so the bound is the one of f32 and f16 (the dequantized values are exact in f32). */
static void test_shapes(void **state)
{
    static const uint32_t dims[] = {8, 64, 128, 256, 32, 96, 192};
    static const uint32_t groups[] = {1, 2, 4, 8};
    static const uint32_t lengths[] = {17, 0, 1000};
    uint64_t seed = 1;
    for (int t = 0; t < 3; t++)
        for (size_t d = 0; d < 7; d++)
            for (size_t g = 0; g < 4; g++) {
                /* q8_0 lanes hold adjacent units of 8 values: 96, 128 (2 a lane at 8 lanes) and
                 * 256 (4) keep a lane in one block of 32, 192 (3) straddles blocks */
                const bool q8_dim = dims[d] % 32 == 0;
                if (t == 2 ? !q8_dim : (dims[d] == 32 || dims[d] == 96 || dims[d] == 192)) continue;
                decode_case c = {3, 2 * groups[g], 2, dims[d], 16, dtypes[t], lengths, 0};
                run_case(*state, &c, seed++);
            }
}

/* Lengths {0, 1, page-1, page, page+1, 1000, 10007} in one batch of 8, for each page size. */
static void test_lengths_and_pages(void **state)
{
    static const uint32_t page_sizes[] = {16, 32, 64, 128};
    uint64_t seed = 100;
    for (size_t i = 0; i < 4; i++) {
        uint32_t P = page_sizes[i];
        uint32_t lengths[8] = {0, 1, P - 1, P, P + 1, 1000, 10007, 3 * P + 5};
        for (int t = 0; t < 3; t++) {
            decode_case c = {8, 8, 2, 64, P, dtypes[t], lengths, 0};
            run_case(*state, &c, seed++);
        }
    }
}

/* Batch 1 and batch 8, long sequences, the common head dim 128 with 4 query heads per KV head. */
static void test_batches(void **state)
{
    static const uint32_t one[1] = {10007};
    static const uint32_t eight[8] = {10007, 1, 4096, 0, 2047, 2048, 2049, 333};
    decode_case c1 = {1, 8, 2, 128, 16, DCP_DTYPE_F16, one, 0};
    run_case(*state, &c1, 200);
    decode_case c8 = {8, 4, 1, 128, 32, DCP_DTYPE_F32, eight, 0};
    run_case(*state, &c8, 201);
}

/* Explicit chunk sizes: one workgroup per sequence up to the limit, and tiny chunks that need a
 * merge of many parts. */
static void test_chunking(void **state)
{
    static const uint32_t lengths[3] = {1999, 64, 2048};
    static const uint32_t chunks[] = {64, 128, 2048};
    for (size_t i = 0; i < 3; i++) {
        decode_case c = {3, 4, 2, 32, 16, DCP_DTYPE_F32, lengths, chunks[i]};
        run_case(*state, &c, 300 + i);
    }
}

/* 70,000 tokens in one sequence: a design with one invocation per head scanning the whole sequence
 * would run past lavapipe's (Mesa 22) 65,535 loop iterations per invocation and be silently wrong. */
static void test_past_loop_limit(void **state)
{
    static const uint32_t lengths[1] = {70000};
    decode_case c = {1, 1, 1, 8, 64, DCP_DTYPE_F32, lengths, 0};
    run_case(*state, &c, 400);
    decode_case c16 = {1, 2, 1, 8, 128, DCP_DTYPE_F16, lengths, 0};
    run_case(*state, &c16, 401);
    decode_case cq8 = {1, 2, 1, 32, 128, DCP_DTYPE_Q8_0, lengths, 0};
    run_case(*state, &cq8, 402);
}

static void test_bad_input(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_kv_pool *pool = NULL;

    /* Unsupported head dims: for any pool, and beyond 256 for the GQA decode. */
    static const uint32_t bad_dims[] = {0, 6, 1028, 2048};
    for (size_t i = 0; i < 4; i++) {
        dcp_kv_pool_config pc = {.kv_heads = 2, .head_dim = bad_dims[i], .page_size = 16, .dtype = DCP_DTYPE_F16,
                                 .num_pages = 4};
        assert_int_equal(dcp_kv_pool_create(dev, &pc, &pool), DCP_ERR_UNSUPPORTED);
        assert_null(pool);
        assert_non_null(strstr(dcp_last_error(), "head dim"));
    }
    for (int k_only = 0; k_only < 2; k_only++) {
        dcp_kv_pool_config pc = {.kv_heads = 2, .head_dim = k_only ? 8 : 260, .page_size = 16,
                                 .dtype = DCP_DTYPE_F16, .num_pages = 4, .k_only = (uint32_t)k_only};
        DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
        dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
        dc.batch = 1;
        dc.q_heads = 2;
        dc.max_blocks = 2;
        dcp_decode_plan *plan = NULL;
        assert_int_equal(dcp_decode_plan_create(pool, &dc, &plan), DCP_ERR_UNSUPPORTED);
        assert_null(plan);
        assert_non_null(strstr(dcp_last_error(), k_only ? "K-only" : "head dim 260"));
        dcp_kv_pool_destroy(pool);
        pool = NULL;
    }

    /* q8_0 quantizes blocks of 32 along the head dim: other head dims are refused by name. */
    static const uint32_t q8_bad[] = {8, 48, 100};
    for (size_t i = 0; i < 3; i++) {
        dcp_kv_pool_config pc = {.kv_heads = 2, .head_dim = q8_bad[i], .page_size = 16, .dtype = DCP_DTYPE_Q8_0,
                                 .num_pages = 4};
        assert_int_equal(dcp_kv_pool_create(dev, &pc, &pool), DCP_ERR_UNSUPPORTED);
        assert_null(pool);
        assert_non_null(strstr(dcp_last_error(), "q8_0"));
        assert_non_null(strstr(dcp_last_error(), "not a multiple of 32"));
        uint64_t bytes, largest;
        assert_int_equal(dcp_kv_pool_bytes(dev, &pc, &bytes, &largest), DCP_ERR_UNSUPPORTED);
    }
    /* Page bytes of q8_0: head_dim int8 values and head_dim / 32 f16 scales (padded to a word) per row. */
    assert_int_equal(dcp_kv_row_bytes(DCP_DTYPE_Q8_0, 128), 136);
    assert_int_equal(dcp_kv_row_bytes(DCP_DTYPE_Q8_0, 32), 36);
    assert_int_equal(dcp_kv_row_bytes(DCP_DTYPE_Q8_0, 576), 612);
    {
        dcp_kv_pool_config pc = {.kv_heads = 2, .head_dim = 128, .page_size = 16, .dtype = DCP_DTYPE_Q8_0,
                                 .num_pages = 4};
        uint64_t bytes, largest;
        DCP_ASSERT_OK(dcp_kv_pool_bytes(dev, &pc, &bytes, &largest));
        assert_int_equal(bytes, 4ull * 2 * 2 * 16 * 136);
    }

    dcp_kv_pool_config pc = {.kv_heads = 2, .head_dim = 8, .page_size = 16, .dtype = DCP_DTYPE_F16, .num_pages = 4};
    DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
    dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
    dc.batch = 2;
    dc.q_heads = 3; /* not a multiple of 2 KV heads */
    dc.max_blocks = 2;
    dcp_decode_plan *plan = NULL;
    assert_int_equal(dcp_decode_plan_create(pool, &dc, &plan), DCP_ERR_INVALID_ARGUMENT);
    assert_null(plan);
    dc.q_heads = 4;
    /* A latent width, or a kind that does not exist, on the GQA plan. */
    dc.latent = 4;
    assert_int_equal(dcp_decode_plan_create(pool, &dc, &plan), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "latent 4"));
    dc.latent = 0;
    dc.kind = (dcp_decode_kind)7;
    assert_int_equal(dcp_decode_plan_create(pool, &dc, &plan), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "kind 7"));
    assert_null(plan);
    dc.kind = DCP_DECODE_GQA;
    DCP_ASSERT_OK(dcp_decode_plan_create(pool, &dc, &plan));

    /* A block-table entry outside the pool. */
    uint32_t lengths[2] = {20, 5};
    uint32_t bt[4] = {0, 9, 2, 0};
    assert_int_equal(dcp_decode_plan_set(plan, lengths, bt), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "outside the pool"));
    /* The unused entry after a sequence's last page is not checked. */
    uint32_t bt_ok[4] = {0, 1, 2, 99};
    DCP_ASSERT_OK(dcp_decode_plan_set(plan, lengths, bt_ok));
    /* A length longer than the block table covers (2 blocks of 16). */
    uint32_t too_long[2] = {33, 5};
    assert_int_equal(dcp_decode_plan_set(plan, too_long, bt_ok), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "covers only 32 tokens"));
    /* Chunks longer than the per-workgroup bound are refused. */
    dcp_decode_plan *p2 = NULL;
    dc.chunk_tokens = 100000;
    assert_int_equal(dcp_decode_plan_create(pool, &dc, &p2), DCP_ERR_INVALID_ARGUMENT);
    assert_null(p2);

    dcp_decode_plan_destroy(plan);
    dcp_kv_pool_destroy(pool);

    /* A device index that does not exist. */
    dcp_context_config cfg = DCP_CONTEXT_CONFIG_DEFAULT;
    cfg.devices = "0,57";
    dcp_context *bad = NULL;
    assert_int_equal(dcp_context_create(&cfg, &bad), DCP_ERR_NO_DEVICE);
    assert_null(bad);
    assert_non_null(strstr(dcp_last_error(), "device 57 does not exist"));
    cfg.devices = "0,x";
    assert_int_equal(dcp_context_create(&cfg, &bad), DCP_ERR_INVALID_ARGUMENT);
    assert_null(bad);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_lengths_and_pages),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_chunking),
        cmocka_unit_test(test_past_loop_limit),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
