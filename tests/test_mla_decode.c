/* mla_decode against the double-precision reference: latent widths of the test models and of
 * DeepSeek (kv_lora 512 + rope 64), head counts that divide into groups or not, f16 and f32 caches,
 * empty / short / long sequences, shuffled block tables, forced split-KV chunking merged by
 * lse_merge, a length past what one invocation may loop over on Mesa 22, bad input, and a
 * negative control (a 1/sqrt(kv_lora + rope) scale must fail the comparison). Sequences are spread
 * over the devices of $DCP_VK_DEVICES. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/attn.h"
#include "dcpvk/dtype.h"
#include "dcpvk/kv.h"
#include "ref/mla_ref.h"
#include "ref/kv_ref.h"
#include "vkutil.h"

typedef struct mla_case {
    uint32_t batch, heads, dk, dv, page_size;
    dcp_dtype dtype;
    const uint32_t *lengths; /* [batch] */
    uint32_t chunk_tokens;   /* 0: automatic */
    float scale;
} mla_case;

/* Runs the sequences seqs[0..n) of a case on dev; returns the max |O - O_ref| (after checking). */
static double run_on_device(dcp_device *dev, const mla_case *c, const uint32_t *seqs, uint32_t n, dcp_test_rng *rng,
                            int expect_match, float ref_scale)
{
    const uint32_t DK = c->dk, DV = c->dv, B = c->page_size;
    uint32_t max_blocks = 1, total_pages = 0;
    uint32_t *lengths = calloc(n, sizeof *lengths);
    for (uint32_t i = 0; i < n; i++) {
        lengths[i] = c->lengths[seqs[i]];
        uint32_t pages = (lengths[i] + B - 1) / B;
        if (pages > max_blocks) max_blocks = pages;
        total_pages += pages;
    }
    const uint32_t num_pages = total_pages + 3;
    const uint64_t elems = (uint64_t)num_pages * B * DK;
    void *bytes = malloc((uint64_t)num_pages * B * dcp_kv_row_bytes(c->dtype, DK));
    if (c->dtype == DCP_DTYPE_Q8_0) { /* rows quantized by the reference quantizer */
        float *x = malloc(DK * sizeof *x);
        for (uint64_t r = 0; r < (uint64_t)num_pages * B; r++) {
            for (uint32_t d = 0; d < DK; d++) x[d] = dcp_test_rng_uniform(rng, -1.0f, 1.0f);
            dcp_ref_q8_0_quantize_row(x, DK, (uint32_t *)bytes + r * (dcp_kv_row_bytes(c->dtype, DK) / 4));
        }
        free(x);
    } else {
        for (uint64_t i = 0; i < elems; i++) {
            float v = dcp_test_rng_uniform(rng, -1.0f, 1.0f);
            if (c->dtype == DCP_DTYPE_F16) ((uint16_t *)bytes)[i] = dcp_f32_to_f16(v);
            else ((float *)bytes)[i] = v;
        }
    }
    uint32_t *perm = malloc(num_pages * sizeof *perm);
    for (uint32_t i = 0; i < num_pages; i++) perm[i] = i;
    for (uint32_t i = num_pages - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(dcp_test_rng_next(rng) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    uint32_t *bt = calloc((size_t)n * max_blocks, sizeof *bt);
    uint32_t next = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < (lengths[i] + B - 1) / B; k++) bt[i * max_blocks + k] = perm[next++];
    const uint64_t rows = (uint64_t)n * c->heads;
    float *q = malloc(rows * DK * sizeof *q), *o = malloc(rows * DV * sizeof *o), *lse = malloc(rows * sizeof *lse);
    float *o_ref = malloc(rows * DV * sizeof *o_ref), *lse_ref = malloc(rows * sizeof *lse_ref);
    for (uint64_t i = 0; i < rows * DK; i++) q[i] = dcp_test_rng_uniform(rng, -1.0f, 1.0f);

    dcp_kv_pool_config pc = {.kv_heads = 1, .head_dim = DK, .page_size = B, .dtype = c->dtype, .num_pages = num_pages,
                             .k_only = 1};
    dcp_kv_pool *pool;
    DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
    DCP_ASSERT_OK(dcp_kv_pool_write_pages(pool, 0, num_pages, bytes));
    dcp_decode_config mc = DCP_DECODE_CONFIG_DEFAULT;
    mc.kind = DCP_DECODE_LATENT;
    mc.batch = n;
    mc.q_heads = c->heads;
    mc.latent = DV;
    mc.max_blocks = max_blocks;
    mc.scale = c->scale;
    mc.chunk_tokens = c->chunk_tokens;
    dcp_decode_plan *plan;
    DCP_ASSERT_OK(dcp_decode_plan_create(pool, &mc, &plan));
    DCP_ASSERT_OK(dcp_decode_plan_set(plan, lengths, bt));
    dcp_buffer *qb, *ob, *lb;
    DCP_ASSERT_OK(dcp_buffer_create(dev, rows * DK * 4, DCP_MEMORY_DEVICE, &qb));
    DCP_ASSERT_OK(dcp_buffer_create(dev, rows * DV * 4, DCP_MEMORY_DEVICE, &ob));
    DCP_ASSERT_OK(dcp_buffer_create(dev, rows * 4, DCP_MEMORY_DEVICE, &lb));
    DCP_ASSERT_OK(dcp_buffer_upload(qb, 0, q, rows * DK * 4));
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    DCP_ASSERT_OK(dcp_decode_record(cmd, plan, qb, 0, ob, 0, lb, 0));
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    DCP_ASSERT_OK(dcp_buffer_download(ob, 0, o, rows * DV * 4));
    DCP_ASSERT_OK(dcp_buffer_download(lb, 0, lse, rows * 4));

    dcp_ref_mla_decode_args ra = {.batch = n, .heads = c->heads, .dk = DK, .dv = DV, .page_size = B,
        .max_blocks = max_blocks, .scale = ref_scale, .dtype = c->dtype, .pages = bytes, .q = q, .lengths = lengths,
        .block_tables = bt, .o = o_ref, .lse = lse_ref};
    dcp_ref_mla_decode(&ra);
    char what[256];
    snprintf(what, sizeof what, "device %d: batch %u heads %u (%u per group) dk %u dv %u page %u %s chunks %u x %u",
             dcp_device_get_info(dev)->logical_index, n, c->heads, dcp_decode_plan_heads_per_group(plan), DK, DV, B,
             dcp_dtype_name(c->dtype), dcp_decode_plan_chunks(plan), dcp_decode_plan_chunk_tokens(plan));
    double err = 0.0;
    for (uint64_t i = 0; i < rows * DV; i++) err = fmax(err, fabs((double)o[i] - o_ref[i]));
    for (uint64_t i = 0; i < rows; i++)
        if (isfinite(lse_ref[i])) err = fmax(err, fabs((double)lse[i] - lse_ref[i]) / (1.0 + fabs(lse_ref[i])));
    printf("%s: max error %.3g\n", what, err);
    fflush(stdout);
    if (expect_match) {
        dcp_test_check_o(what, o, o_ref, rows * DV);
        dcp_test_check_lse(what, lse, lse_ref, rows);
    }
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
    return err;
}

static void run_case(dcp_context *ctx, const mla_case *c, uint64_t seed)
{
    dcp_test_rng rng = {seed};
    int ndev = dcp_context_device_count(ctx);
    uint32_t *seqs = malloc(c->batch * sizeof *seqs);
    for (int d = 0; d < ndev; d++) {
        uint32_t n = 0;
        for (uint32_t b = 0; b < c->batch; b++)
            if ((int)(b % (uint32_t)ndev) == d) seqs[n++] = b;
        if (n) run_on_device(dcp_context_device(ctx, d), c, seqs, n, &rng, 1, c->scale);
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

/* The test models' latent (kv_lora 32 + rope 16), odd head counts and widths, DeepSeek's. */
static void test_shapes(void **state)
{
    static const uint32_t lens[3] = {37, 0, 130};
    static const struct { uint32_t heads, dk, dv; } shapes[] = {
        {4, 48, 32}, {1, 48, 32}, {6, 72, 64}, {3, 20, 12}, {16, 576, 512},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int f16 = 0; f16 < 2; f16++) {
            mla_case c = {3, shapes[i].heads, shapes[i].dk, shapes[i].dv, 16, f16 ? DCP_DTYPE_F16 : DCP_DTYPE_F32,
                          lens, 0, 1.0f / sqrtf(40.0f)};
            run_case(*state, &c, 100 + i * 2 + (uint64_t)f16);
        }
}

/* q8_0 latent caches (rows of whole blocks of 32, dequantized into the f32 tile): DeepSeek's row,
 * a small one with forced chunks, and a sequence of several automatic chunks (the chunk bound keeps
 * each invocation under Mesa 22's loop limit; the f32 tile holds fewer rows than f16's). The pages hold the reference
 * quantizer's rows and the reference decodes the same bytes, so the f32/f16 bound applies. */
static void test_q8_0(void **state)
{
    static const uint32_t lens[3] = {37, 0, 130};
    mla_case c = {3, 16, 576, 512, 16, DCP_DTYPE_Q8_0, lens, 0, 0.0722f};
    run_case(*state, &c, 600);
    mla_case small = {3, 4, 64, 32, 16, DCP_DTYPE_Q8_0, lens, 8, 0.19f};
    run_case(*state, &small, 601);
    static const uint32_t longl[1] = {1200};
    mla_case lng = {1, 16, 576, 512, 16, DCP_DTYPE_Q8_0, longl, 0, 0.0722f};
    run_case(*state, &lng, 602);
}

/* Lengths around tiles and pages, page sizes, forced small chunks (several partials merged). */
static void test_lengths_and_chunks(void **state)
{
    static const uint32_t lens[6] = {1, 2, 15, 16, 17, 301};
    static const uint32_t pages[3] = {1, 16, 64};
    static const uint32_t chunks[3] = {0, 8, 24};
    for (int pi = 0; pi < 3; pi++)
        for (int ci = 0; ci < 3; ci++) {
            mla_case c = {6, 4, 48, 32, pages[pi], ci == 1 ? DCP_DTYPE_F32 : DCP_DTYPE_F16, lens, chunks[ci], 0.19f};
            run_case(*state, &c, 200 + (uint64_t)pi * 3 + (uint64_t)ci);
        }
    /* DeepSeek's row with forced chunks, 16 heads in one group. */
    static const uint32_t lens2[2] = {200, 77};
    mla_case d = {2, 16, 576, 512, 16, DCP_DTYPE_F16, lens2, 64, 0.0722f};
    run_case(*state, &d, 300);
}

/* One sequence of DeepSeek's shape far longer than one invocation may loop over on Mesa 22 (about
 * 800 tokens at 16 heads): the plan's chunks bound the work and lse_merge joins them. */
static void test_past_loop_limit(void **state)
{
    dcp_context *ctx = *state;
    static const uint32_t lens[1] = {6000};
    mla_case c = {1, 16, 576, 512, 16, DCP_DTYPE_F16, lens, 0, 0.0722f};
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_kv_pool_config pc = {.kv_heads = 1, .head_dim = 576, .page_size = 16, .dtype = DCP_DTYPE_F16,
                             .num_pages = 8, .k_only = 1};
    dcp_kv_pool *pool;
    DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
    dcp_decode_config mc = {.kind = DCP_DECODE_LATENT, .batch = 1, .q_heads = 16, .latent = 512, .max_blocks = 1,
                            .scale = 0.1f};
    dcp_decode_plan *plan;
    DCP_ASSERT_OK(dcp_decode_plan_create(pool, &mc, &plan));
    uint32_t max_chunk = dcp_decode_plan_max_chunk(plan);
    printf("DeepSeek shape: %u heads per workgroup, at most %u tokens per chunk\n",
           dcp_decode_plan_heads_per_group(plan), max_chunk);
    assert_int_equal(dcp_decode_plan_heads_per_group(plan), 16); /* each row read once per step */
    assert_true(max_chunk < lens[0] / 4);
    dcp_decode_plan_destroy(plan);
    dcp_kv_pool_destroy(pool);
    run_case(ctx, &c, 400);
}

/* The comparison must catch a wrong scale: 1/sqrt(kv_lora + rope) instead of the model's. */
static void test_negative_control(void **state)
{
    dcp_context *ctx = *state;
    static const uint32_t lens[1] = {90};
    mla_case c = {1, 4, 48, 32, 16, DCP_DTYPE_F32, lens, 0, 1.0f / sqrtf(48.0f)};
    uint32_t seq = 0;
    dcp_test_rng rng = {500};
    double err = run_on_device(dcp_context_device(ctx, 0), &c, &seq, 1, &rng, 0, 1.0f / sqrtf(40.0f));
    printf("wrong scale: max error %.3g\n", err);
    assert_true(err > 10 * DCP_TOL_O_ABS);
}

static void test_bad_input(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_kv_pool *kv, *lat;
    dcp_kv_pool_config pc = {.kv_heads = 1, .head_dim = 48, .page_size = 16, .dtype = DCP_DTYPE_F16, .num_pages = 4};
    DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &kv));
    pc.k_only = 1;
    DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &lat));
    dcp_decode_config mc = {.kind = DCP_DECODE_LATENT, .batch = 1, .q_heads = 4, .latent = 32, .max_blocks = 2,
                            .scale = 0.2f};
    dcp_decode_plan *plan = NULL;
    assert_int_equal(dcp_decode_plan_create(kv, &mc, &plan), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "K-only"));
    mc.scale = 0.0f;
    assert_int_equal(dcp_decode_plan_create(lat, &mc, &plan), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "scale"));
    mc.scale = 0.2f;
    mc.latent = 48;
    assert_int_equal(dcp_decode_plan_create(lat, &mc, &plan), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "kv_lora 48"));
    mc.latent = 32;
    mc.chunk_tokens = 1000000;
    assert_int_equal(dcp_decode_plan_create(lat, &mc, &plan), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "chunk_tokens"));
    mc.chunk_tokens = 0;
    DCP_ASSERT_OK(dcp_decode_plan_create(lat, &mc, &plan));
    uint32_t len[1] = {20}, bt_bad[2] = {0, 7}, too_long[1] = {33}, bt[2] = {0, 1};
    assert_int_equal(dcp_decode_plan_set(plan, len, bt_bad), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "outside the pool"));
    assert_int_equal(dcp_decode_plan_set(plan, too_long, bt), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "covers only 32 tokens"));
    dcp_decode_plan_destroy(plan);
    /* The GQA decode and kv_append refuse a latent pool. */
    dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
    dc.batch = 1;
    dc.q_heads = 1;
    dc.max_blocks = 1;
    dcp_decode_plan *gp = NULL;
    assert_int_equal(dcp_decode_plan_create(lat, &dc, &gp), DCP_ERR_UNSUPPORTED);
    dcp_kv_pool_destroy(kv);
    dcp_kv_pool_destroy(lat);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_shapes),
        cmocka_unit_test(test_lengths_and_chunks),
        cmocka_unit_test(test_past_loop_limit),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_negative_control),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
