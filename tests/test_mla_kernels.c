/* The MLA model kernels against their double-precision references: head_matmul (absorption and
 * W_UV shapes, weight dtypes, token batches, accumulation), mla_rope (YaRN tables past the
 * original context), mla_kv_store (f32 / f16 latent pools, skipped slots); then one MLA attention
 * layer built from them (latent RMSNorm, latent-cache write through a dcp_kv_cache with the
 * interleaved DCP placement, absorbed query, latent decode per rank, lse_merge over the ranks,
 * W_UV) against the NON-absorbed attention computed in double: DCP sizes 1, 2, 4, interleave 1 and
 * the page size, sequences shorter than the group (empty shards). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/attn.h"
#include "dcpvk/kv.h"
#include "dcpvk/model_config.h"
#include "dcpvk/ops.h"
#include "kernels/kv_params.h"
#include "ref/deepseek2_ref.h"
#include "ref/mla_ref.h"
#include "ref/model_ref.h"
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

/* A weight matrix [rows][k] in `type` from f32 values; *deq receives the dequantised values. */
static void make_matrix(dcp_device *dev, dcp_ggml_type type, uint32_t rows, uint32_t k, const float *vals,
                        dcp_matrix *m, float *deq)
{
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    uint64_t bytes = (uint64_t)rows * k / be * bb;
    void *q = malloc(bytes);
    DCP_ASSERT_OK(dcp_ggml_from_f32(type, vals, q, (uint64_t)rows * k));
    DCP_ASSERT_OK(dcp_ggml_to_f32(type, q, deq, (uint64_t)rows * k));
    const void *parts[1] = {q};
    uint32_t pr[1] = {rows};
    DCP_ASSERT_OK(dcp_matrix_create(dev, type, k, 1, parts, pr, m));
    free(q);
}

static void check_close(const char *what, const float *got, const float *want, uint64_t n, double tol_rel)
{
    for (uint64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= tol_rel * (1.0 + fabs((double)want[i]))))
            fail_msg("%s: [%llu] = %.9g, reference %.9g", what, (unsigned long long)i, got[i], want[i]);
    }
}

static void test_head_matmul(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_test_rng rng = {11};
    /* heads, rows, k, x head stride, x offset, y head stride, y offset */
    static const struct { uint32_t heads, rows, k, xhs, xoff, yhs, yoff; } shapes[] = {
        {4, 32, 24, 40, 0, 48, 0},    /* test model absorption: q_nope (24 of 40) -> q_lat (32 of 48) */
        {4, 20, 32, 32, 0, 20, 0},    /* test model W_UV: o_lat 32 -> o 20 */
        {2, 12, 8, 16, 4, 16, 2},     /* offsets inside the heads */
        {16, 512, 128, 192, 0, 576, 0}, /* DeepSeek absorption */
        {16, 128, 512, 512, 0, 128, 0}, /* DeepSeek W_UV */
    };
    static const dcp_ggml_type types[] = {DCP_GGML_TYPE_F32,  DCP_GGML_TYPE_F16,  DCP_GGML_TYPE_BF16,
                                          DCP_GGML_TYPE_Q8_0, DCP_GGML_TYPE_Q4_0, DCP_GGML_TYPE_Q4_K,
                                          DCP_GGML_TYPE_IQ4_NL, DCP_GGML_TYPE_IQ4_XS};
    static const uint32_t tokens[] = {1, 9};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
            for (size_t ni = 0; ni < 2; ni++) {
                const uint32_t H = shapes[si].heads, R = shapes[si].rows, K = shapes[si].k, T = tokens[ni];
                uint32_t be, bb;
                dcp_ggml_type_block(types[ti], &be, &bb);
                if (K % be) continue; /* rows must be whole blocks */
                if (si >= 3 && (ti == 2 || ti == 4 || ni == 1)) continue; /* keep the big shapes few */
                const uint32_t xs = H * shapes[si].xhs + 4, ys = H * shapes[si].yhs + 2;
                float *wv = dcp_test_rand_floats(&rng, (uint64_t)H * R * K, -0.5f, 0.5f);
                float *wd = malloc((uint64_t)H * R * K * 4);
                dcp_matrix m;
                make_matrix(dev, types[ti], H * R, K, wv, &m, wd);
                float *x = dcp_test_rand_floats(&rng, (uint64_t)T * xs, -1, 1);
                float *y = dcp_test_rand_floats(&rng, (uint64_t)T * ys, -1, 1);
                float *yr = malloc((uint64_t)T * ys * 4), *yg = malloc((uint64_t)T * ys * 4);
                memcpy(yr, y, (uint64_t)T * ys * 4);
                int acc = (int)(si % 2);
                dcp_buffer *xb = dcp_test_upload(dev, x, (uint64_t)T * xs * 4);
                dcp_buffer *yb = dcp_test_upload(dev, y, (uint64_t)T * ys * 4);
                dcp_cmd *cmd;
                DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
                dcp_head_matmul_args a = {.w = &m, .heads = H, .rows = R, .tokens = T, .x = xb, .x_stride = xs,
                                          .x_head_stride = shapes[si].xhs, .x_offset = shapes[si].xoff, .y = yb,
                                          .y_stride = ys, .y_head_stride = shapes[si].yhs, .y_offset = shapes[si].yoff,
                                          .accumulate = acc};
                DCP_ASSERT_OK(dcp_op_head_matmul(cmd, &a));
                DCP_ASSERT_OK(dcp_cmd_run(cmd));
                DCP_ASSERT_OK(dcp_buffer_download(yb, 0, yg, (uint64_t)T * ys * 4));
                dcp_ref_head_matmul(H, R, K, T, wd, x, xs, shapes[si].xhs, shapes[si].xoff, yr, ys, shapes[si].yhs,
                                    shapes[si].yoff, acc);
                char what[128];
                snprintf(what, sizeof what, "head_matmul %u x %u x %u %s, %u tokens", H, R, K,
                         dcp_ggml_type_name(types[ti]), T);
                check_close(what, yg, yr, (uint64_t)T * ys, 2e-5); /* untouched places must stay too */
                dcp_cmd_destroy(cmd);
                dcp_buffer_destroy(xb);
                dcp_buffer_destroy(yb);
                dcp_matrix_destroy(&m);
                free(wv);
                free(wd);
                free(x);
                free(y);
                free(yr);
                free(yg);
            }
    /* A matrix whose rows do not match the heads. */
    float z[8 * 4] = {0}, zd[8 * 4];
    dcp_matrix m;
    make_matrix(dev, DCP_GGML_TYPE_F32, 8, 4, z, &m, zd);
    dcp_buffer *b = dcp_test_upload(dev, NULL, 1024);
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    dcp_head_matmul_args bad = {.w = &m, .heads = 3, .rows = 3, .tokens = 1, .x = b, .x_stride = 16, .x_head_stride = 4,
                                .y = b, .y_stride = 16, .y_head_stride = 4};
    assert_int_equal(dcp_op_head_matmul(cmd, &bad), DCP_ERR_INVALID_ARGUMENT);
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(b);
    dcp_matrix_destroy(&m);
}

/* A deepseek2 config with test model B's rope (YaRN factor 4 from an original context of 32). */
static dcp_model_config yarn_config(void)
{
    dcp_model_config c;
    memset(&c, 0, sizeof c);
    c.arch = DCP_ARCH_DEEPSEEK2;
    c.n_rot = 16;
    c.rope_freq_base = 10000.0f;
    c.rope_scaling = DCP_ROPE_SCALING_YARN;
    c.rope_scaling_factor = 4.0f;
    c.rope_n_ctx_orig = 32;
    c.rope_yarn_beta_fast = 32.0f;
    c.rope_yarn_beta_slow = 1.0f;
    c.rope_attn_factor = 1.0f;
    return c;
}

static void test_rope_and_store(void **state)
{
    dcp_context *ctx = *state;
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_test_rng rng = {21};
    const dcp_model_config cfg = yarn_config();
    dcp_rope_params rp;
    dcp_rope_params_from_config(&cfg, &rp);
    const uint32_t T = 6, H = 4, N = 24, P = 16, R = 32, QW = N + P, DK = R + P;
    uint32_t pos[6] = {0, 3, 31, 32, 33, 1000};
    float cs[6 * 8 * 2];
    dcp_rope_cs(&rp, pos, T, cs);
    /* mla_rope: q_pe of [T][H][N+P] into [T][H][R+P] at R. */
    float *q = dcp_test_rand_floats(&rng, (uint64_t)T * H * QW, -1, 1), *qo = calloc((size_t)T * H * DK, 4);
    float *qr = calloc((size_t)T * H * DK, 4);
    dcp_buffer *qb = dcp_test_upload(dev, q, (uint64_t)T * H * QW * 4);
    dcp_buffer *ob = dcp_test_upload(dev, NULL, (uint64_t)T * H * DK * 4);
    dcp_buffer *csb = dcp_test_upload(dev, cs, sizeof cs);
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    dcp_mla_rope_args ra = {.tokens = T, .heads = H, .n_rot = P, .src = qb, .src_stride = H * QW, .src_head_stride = QW,
                            .src_offset = N, .dst = ob, .dst_stride = H * DK, .dst_head_stride = DK, .dst_offset = R,
                            .cs = csb};
    DCP_ASSERT_OK(dcp_op_mla_rope(cmd, &ra));
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    DCP_ASSERT_OK(dcp_buffer_download(ob, 0, qo, (uint64_t)T * H * DK * 4));
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t h = 0; h < H; h++) {
            /* the reference rotation from the reference angles, not from the table */
            float cs_ref[16];
            for (uint32_t i = 0; i < P / 2; i++) {
                double a = dcp_ref_rope_angle(&cfg, pos[t], i);
                cs_ref[2 * i] = (float)cos(a);
                cs_ref[2 * i + 1] = (float)sin(a);
            }
            dcp_ref_rope_pairs(P, cs_ref, q + ((uint64_t)t * H + h) * QW + N, qr + ((uint64_t)t * H + h) * DK + R);
        }
    check_close("mla_rope", qo, qr, (uint64_t)T * H * DK, 1e-6);

    /* mla_kv_store into f32 and f16 latent pools: c from a [T][R + 8] buffer at 4, k_pe from the
     * kv rows [T][R + P] at R; tokens 1 and 4 belong to another rank. */
    for (int f16 = 0; f16 < 2; f16++) {
        const uint32_t B = 4, pages = 5, cst = R + 8;
        float *c = dcp_test_rand_floats(&rng, (uint64_t)T * cst, -2, 2);
        float *kv = dcp_test_rand_floats(&rng, (uint64_t)T * (R + P), -2, 2);
        uint32_t slots[6] = {5, DCP_KV_NO_SLOT, 0, 19, DCP_KV_NO_SLOT, 12};
        dcp_kv_pool_config pc = {.kv_heads = 1, .head_dim = DK, .page_size = B,
                                 .dtype = f16 ? DCP_DTYPE_F16 : DCP_DTYPE_F32, .num_pages = pages, .k_only = 1};
        dcp_kv_pool *pool;
        DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
        dcp_buffer *cb = dcp_test_upload(dev, c, (uint64_t)T * cst * 4);
        dcp_buffer *kvb = dcp_test_upload(dev, kv, (uint64_t)T * (R + P) * 4);
        dcp_buffer *sb = dcp_test_upload(dev, slots, sizeof slots);
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        dcp_mla_kv_store_args sa = {.tokens = T, .kv_lora = R, .n_rot = P, .c = cb, .c_stride = cst, .c_offset = 4,
                                    .kpe = kvb, .kpe_stride = R + P, .kpe_offset = R, .cs = csb, .slot = sb,
                                    .pool = pool};
        DCP_ASSERT_OK(dcp_op_mla_kv_store(cmd, &sa));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        uint64_t elems = (uint64_t)pages * B * DK;
        float *ref = calloc(elems, 4), *got = malloc(elems * 4);
        void *raw = malloc(elems * dcp_dtype_size(pc.dtype));
        DCP_ASSERT_OK(dcp_buffer_download(dcp_kv_pool_segment(pool, 0), 0, raw, elems * dcp_dtype_size(pc.dtype)));
        for (uint64_t i = 0; i < elems; i++) got[i] = f16 ? dcp_f16_to_f32(((uint16_t *)raw)[i]) : ((float *)raw)[i];
        dcp_ref_mla_kv_store(ref, pages, B, R, P, slots, T, c, cst, 4, kv, R + P, R, cs);
        if (f16)
            for (uint64_t i = 0; i < elems; i++) ref[i] = dcp_f16_to_f32(dcp_f32_to_f16(ref[i]));
        check_close(f16 ? "mla_kv_store f16" : "mla_kv_store f32", got, ref, elems, f16 ? 1e-3 : 1e-6);
        /* A K+V pool, or one of another width, is refused. */
        dcp_mla_kv_store_args bad = sa;
        bad.n_rot = 8;
        assert_int_equal(dcp_op_mla_kv_store(cmd, &bad), DCP_ERR_INVALID_ARGUMENT);
        dcp_buffer_destroy(cb);
        dcp_buffer_destroy(kvb);
        dcp_buffer_destroy(sb);
        dcp_kv_pool_destroy(pool);
        free(c);
        free(kv);
        free(ref);
        free(got);
        free(raw);
    }
    {
        /* mla_kv_store into a q8_0 latent pool: kv_lora 48 + rope 16 = two blocks of 32, the second
         * straddling c and k_pe; every entry within the q8_0 bound of its block (0.57 max|x| / 127),
         * the rows of skipped tokens left 0. */
        const uint32_t B = 4, pages = 5, R2 = 48, DK2 = R2 + P, cst = R2 + 8;
        float *c = dcp_test_rand_floats(&rng, (uint64_t)T * cst, -2, 2);
        float *kv = dcp_test_rand_floats(&rng, (uint64_t)T * (R2 + P), -2, 2);
        uint32_t slots[6] = {5, DCP_KV_NO_SLOT, 0, 19, DCP_KV_NO_SLOT, 12};
        dcp_kv_pool_config pc = {.kv_heads = 1, .head_dim = DK2, .page_size = B, .dtype = DCP_DTYPE_Q8_0,
                                 .num_pages = pages, .k_only = 1};
        dcp_kv_pool *pool;
        DCP_ASSERT_OK(dcp_kv_pool_create(dev, &pc, &pool));
        dcp_buffer *cb = dcp_test_upload(dev, c, (uint64_t)T * cst * 4);
        dcp_buffer *kvb = dcp_test_upload(dev, kv, (uint64_t)T * (R2 + P) * 4);
        dcp_buffer *sb = dcp_test_upload(dev, slots, sizeof slots);
        DCP_ASSERT_OK(dcp_cmd_reset(cmd));
        dcp_mla_kv_store_args sa = {.tokens = T, .kv_lora = R2, .n_rot = P, .c = cb, .c_stride = cst, .c_offset = 4,
                                    .kpe = kvb, .kpe_stride = R2 + P, .kpe_offset = R2, .cs = csb, .slot = sb,
                                    .pool = pool};
        DCP_ASSERT_OK(dcp_op_mla_kv_store(cmd, &sa));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        const uint64_t rows = (uint64_t)pages * B, rb = dcp_kv_row_bytes(DCP_DTYPE_Q8_0, DK2);
        float *ref = calloc(rows * DK2, 4);
        uint32_t *raw = malloc(rows * rb);
        DCP_ASSERT_OK(dcp_buffer_download(dcp_kv_pool_segment(pool, 0), 0, raw, rows * rb));
        dcp_ref_mla_kv_store(ref, pages, B, R2, P, slots, T, c, cst, 4, kv, R2 + P, R2, cs);
        double worst = 0;
        for (uint64_t r = 0; r < rows; r++)
            for (uint32_t d = 0; d < DK2; d++) {
                float amax = 0;
                for (uint32_t j = d / 32 * 32; j < d / 32 * 32 + 32; j++) amax = fmaxf(amax, fabsf(ref[r * DK2 + j]));
                double got = dcp_ref_q8_0_value(raw + r * (rb / 4), DK2, d), err = fabs(got - ref[r * DK2 + d]);
                if (err > worst) worst = err;
                if (!(err <= DCP_REF_Q8_ERR(amax) + 1e-6))
                    fail_msg("mla_kv_store q8_0: row %llu entry %u: %g vs %g", (unsigned long long)r, d, got,
                             ref[r * DK2 + d]);
            }
        printf("mla_kv_store q8_0: max abs error %.3g (values in [-2, 2])\n", worst);
        dcp_buffer_destroy(cb);
        dcp_buffer_destroy(kvb);
        dcp_buffer_destroy(sb);
        dcp_kv_pool_destroy(pool);
        free(c);
        free(kv);
        free(ref);
        free(raw);
    }
    dcp_cmd_destroy(cmd);
    dcp_buffer_destroy(qb);
    dcp_buffer_destroy(ob);
    dcp_buffer_destroy(csb);
    free(q);
    free(qo);
    free(qr);
}

/* ---- one MLA attention layer over a DCP group ----------------------------------------------- */

typedef struct layer_case {
    uint32_t dcp, interleave, page_size, seq;
    dcp_dtype dtype;
} layer_case;

/* Shapes of test model A's attention: 4 heads, kv_lora 32, rope 16, nope 24, v 20. */
enum { LH = 4, LR = 32, LP = 16, LN = 24, LV = 20 };

static void run_layer(dcp_context *ctx, const layer_case *lc, dcp_test_rng *rng)
{
    const uint32_t N = lc->dcp, S = lc->seq, B = lc->page_size, DK = LR + LP, QW = LN + LP;
    const int ndev = dcp_context_device_count(ctx);
    dcp_device *devs[4];
    for (uint32_t r = 0; r < N; r++) devs[r] = dcp_context_device(ctx, (int)(r % (uint32_t)ndev));
    const dcp_model_config cfg = yarn_config();
    dcp_rope_params rp;
    dcp_rope_params_from_config(&cfg, &rp);
    const float scale = 1.0f / sqrtf((float)QW);
    /* Inputs: kv rows [S][R + P] (pre-norm latent | k_pe), the norm, W_UK [H R][N], W_UV [H V][R],
     * the query [H][N + P] of the last position. */
    float *kv = dcp_test_rand_floats(rng, (uint64_t)S * DK, -1.5f, 1.5f);
    float *nw = dcp_test_rand_floats(rng, LR, 0.8f, 1.2f);
    float *wk = dcp_test_rand_floats(rng, (uint64_t)LH * LR * LN, -0.6f, 0.6f);
    float *wvv = dcp_test_rand_floats(rng, (uint64_t)LH * LV * LR, -0.3f, 0.3f);
    float *q = dcp_test_rand_floats(rng, (uint64_t)LH * QW, -1.5f, 1.5f);
    uint32_t *pos = malloc(S * sizeof *pos);
    for (uint32_t t = 0; t < S; t++) pos[t] = t;
    float *cs = malloc((size_t)S * LP * 4);
    dcp_rope_cs(&rp, pos, S, cs);

    /* The KV cache of the group: one K-only pool per rank, interleaved placement. */
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool = (dcp_kv_pool_config){.kv_heads = 1, .head_dim = DK, .page_size = B, .dtype = lc->dtype,
                                   .num_pages = S / B + 4, .k_only = 1};
    kc.dcp_size = N;
    kc.interleave = lc->interleave;
    kc.max_seqs = 1;
    kc.max_blocks = S / B + 4;
    dcp_kv_cache *cache;
    DCP_ASSERT_OK(dcp_kv_cache_create(devs, N, &kc, &cache));
    uint32_t seq = 0, count = S;
    DCP_ASSERT_OK(dcp_kv_cache_append(cache, 1, &seq, &count));

    float *o_all = malloc((size_t)N * LH * LR * 4), *lse_all = malloc((size_t)N * LH * 4);
    for (uint32_t r = 0; r < N; r++) {
        dcp_device *dev = devs[r];
        dcp_cmd *cmd;
        DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
        dcp_buffer *kvb = dcp_test_upload(dev, kv, (uint64_t)S * DK * 4), *nb = dcp_test_upload(dev, nw, LR * 4);
        dcp_buffer *cb = dcp_test_upload(dev, NULL, (uint64_t)S * LR * 4);
        dcp_buffer *csb = dcp_test_upload(dev, cs, (uint64_t)S * LP * 4);
        dcp_buffer *sb = dcp_test_upload(dev, dcp_kv_cache_append_slots(cache, r), (uint64_t)S * 4);
        dcp_buffer *qb = dcp_test_upload(dev, q, (uint64_t)LH * QW * 4);
        dcp_buffer *qlat = dcp_test_upload(dev, NULL, (uint64_t)LH * DK * 4);
        dcp_buffer *ob = dcp_test_upload(dev, NULL, (uint64_t)LH * LR * 4), *lb = dcp_test_upload(dev, NULL, LH * 4);
        float *wkd = malloc((size_t)LH * LR * LN * 4);
        dcp_matrix mk;
        make_matrix(dev, DCP_GGML_TYPE_F32, LH * LR, LN, wk, &mk, wkd);
        /* c = rmsnorm(kv[:, :R]); the owned rows into the latent pool. */
        DCP_ASSERT_OK(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = kvb, .x_stride = DK, .w = nb, .n = LR, .y = cb,
                                                              .y_stride = LR, .tokens = S, .eps = 1e-6f}));
        dcp_cmd_barrier(cmd); /* rmsnorm -> mla_kv_store */
        dcp_mla_kv_store_args sa = {.tokens = S, .kv_lora = LR, .n_rot = LP, .c = cb, .c_stride = LR, .kpe = kvb,
                                    .kpe_stride = DK, .kpe_offset = LR, .cs = csb, .slot = sb,
                                    .pool = dcp_kv_cache_pool(cache, r)};
        DCP_ASSERT_OK(dcp_op_mla_kv_store(cmd, &sa));
        /* Q = [W_UK q_nope | rope(q_pe)] at the last position (cs row S - 1). */
        dcp_head_matmul_args ha = {.w = &mk, .heads = LH, .rows = LR, .tokens = 1, .x = qb, .x_stride = LH * QW,
                                   .x_head_stride = QW, .y = qlat, .y_stride = LH * DK, .y_head_stride = DK};
        DCP_ASSERT_OK(dcp_op_head_matmul(cmd, &ha));
        dcp_buffer *cs_last = dcp_test_upload(dev, cs + (size_t)(S - 1) * LP, LP * 4);
        dcp_mla_rope_args ra = {.tokens = 1, .heads = LH, .n_rot = LP, .src = qb, .src_stride = LH * QW,
                                .src_head_stride = QW, .src_offset = LN, .dst = qlat, .dst_stride = LH * DK,
                                .dst_head_stride = DK, .dst_offset = LR, .cs = cs_last};
        DCP_ASSERT_OK(dcp_op_mla_rope(cmd, &ra));
        dcp_cmd_barrier(cmd); /* kv store, Q -> decode */
        dcp_decode_config mc = {.kind = DCP_DECODE_LATENT, .batch = 1, .q_heads = LH, .latent = LR,
                                .max_blocks = kc.max_blocks, .scale = scale};
        dcp_decode_plan *plan;
        DCP_ASSERT_OK(dcp_decode_plan_create(dcp_kv_cache_pool(cache, r), &mc, &plan));
        uint32_t len = dcp_kv_cache_seq_local_length(cache, r, 0);
        DCP_ASSERT_OK(dcp_decode_plan_set(plan, &len, dcp_kv_cache_block_table(cache, r, 0)));
        DCP_ASSERT_OK(dcp_decode_record(cmd, plan, qlat, 0, ob, 0, lb, 0));
        DCP_ASSERT_OK(dcp_cmd_run(cmd));
        DCP_ASSERT_OK(dcp_buffer_download(ob, 0, o_all + (size_t)r * LH * LR, (uint64_t)LH * LR * 4));
        DCP_ASSERT_OK(dcp_buffer_download(lb, 0, lse_all + (size_t)r * LH, LH * 4));
        dcp_decode_plan_destroy(plan);
        dcp_cmd_destroy(cmd);
        dcp_buffer *bufs[] = {kvb, nb, cb, csb, sb, qb, qlat, ob, lb, cs_last};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
        dcp_matrix_destroy(&mk);
        free(wkd);
    }
    /* Merge the ranks' states (lse_merge on rank 0's device), then o = W_UV o_lat per head. */
    dcp_device *dev = devs[0];
    dcp_cmd *cmd;
    DCP_ASSERT_OK(dcp_cmd_create(dev, &cmd));
    dcp_buffer *oin = dcp_test_upload(dev, o_all, (uint64_t)N * LH * LR * 4);
    dcp_buffer *lin = dcp_test_upload(dev, lse_all, (uint64_t)N * LH * 4);
    dcp_buffer *om = dcp_test_upload(dev, NULL, (uint64_t)LH * LR * 4), *lm = dcp_test_upload(dev, NULL, LH * 4);
    dcp_buffer *out = dcp_test_upload(dev, NULL, (uint64_t)LH * LV * 4);
    dcp_merge_args m = {.parts = N, .rows = LH, .head_dim = LR, .o_part_stride = LH * LR, .lse_part_stride = LH,
                        .o_in = oin, .lse_in = lin, .o_out = om, .lse_out = lm};
    DCP_ASSERT_OK(dcp_lse_merge_record(cmd, &m));
    dcp_cmd_barrier(cmd); /* lse_merge -> W_UV */
    float *wvd = malloc((size_t)LH * LV * LR * 4);
    dcp_matrix mv;
    make_matrix(dev, DCP_GGML_TYPE_F32, LH * LV, LR, wvv, &mv, wvd);
    dcp_head_matmul_args ua = {.w = &mv, .heads = LH, .rows = LV, .tokens = 1, .x = om, .x_stride = LH * LR,
                               .x_head_stride = LR, .y = out, .y_stride = LH * LV, .y_head_stride = LV};
    DCP_ASSERT_OK(dcp_op_head_matmul(cmd, &ua));
    DCP_ASSERT_OK(dcp_cmd_run(cmd));
    float got[LH * LV];
    DCP_ASSERT_OK(dcp_buffer_download(out, 0, got, sizeof got));

    /* The non-absorbed attention in double: K[h][t] = [W_UK[h]^T c_t | rope(k_pe_t)],
     * V[h][t] = W_UV[h] c_t, q = [q_nope | rope(q_pe)]. */
    double *c = malloc((size_t)S * LR * 8), *kpe = malloc((size_t)S * LP * 8), want[LH * LV];
    for (uint32_t t = 0; t < S; t++) {
        double ss = 0.0;
        for (uint32_t i = 0; i < LR; i++) ss += (double)kv[t * DK + i] * kv[t * DK + i];
        double inv = 1.0 / sqrt(ss / LR + 1e-6);
        for (uint32_t i = 0; i < LR; i++) c[t * LR + i] = kv[t * DK + i] * inv * nw[i];
        for (uint32_t i = 0; i < LP / 2; i++) {
            double a = dcp_ref_rope_angle(&cfg, t, i), x0 = kv[t * DK + LR + 2 * i], x1 = kv[t * DK + LR + 2 * i + 1];
            kpe[t * LP + 2 * i] = x0 * cos(a) - x1 * sin(a);
            kpe[t * LP + 2 * i + 1] = x0 * sin(a) + x1 * cos(a);
        }
    }
    double *sc = malloc(S * sizeof *sc);
    for (uint32_t h = 0; h < LH; h++) {
        double qh[LN + LP];
        for (uint32_t i = 0; i < LN; i++) qh[i] = q[h * QW + i];
        for (uint32_t i = 0; i < LP / 2; i++) {
            double a = dcp_ref_rope_angle(&cfg, S - 1, i), x0 = q[h * QW + LN + 2 * i], x1 = q[h * QW + LN + 2 * i + 1];
            qh[LN + 2 * i] = x0 * cos(a) - x1 * sin(a);
            qh[LN + 2 * i + 1] = x0 * sin(a) + x1 * cos(a);
        }
        double mx = -INFINITY, sum = 0.0;
        for (uint32_t t = 0; t < S; t++) {
            double s = 0.0;
            for (uint32_t n = 0; n < LN; n++) {
                double k = 0.0;
                for (uint32_t r = 0; r < LR; r++) k += (double)wk[((size_t)h * LR + r) * LN + n] * c[t * LR + r];
                s += qh[n] * k;
            }
            for (uint32_t i = 0; i < LP; i++) s += qh[LN + i] * kpe[t * LP + i];
            sc[t] = s * scale;
            mx = sc[t] > mx ? sc[t] : mx;
        }
        for (uint32_t t = 0; t < S; t++) sum += (sc[t] = exp(sc[t] - mx));
        for (uint32_t j = 0; j < LV; j++) {
            double o = 0.0;
            for (uint32_t t = 0; t < S; t++) {
                double v = 0.0;
                for (uint32_t r = 0; r < LR; r++) v += (double)wvv[((size_t)h * LV + j) * LR + r] * c[t * LR + r];
                o += sc[t] / sum * v;
            }
            want[h * LV + j] = o;
        }
    }
    double err = 0.0, tol = lc->dtype == DCP_DTYPE_F16 ? 3e-3 : 2e-5;
    for (uint32_t i = 0; i < LH * LV; i++) err = fmax(err, fabs(got[i] - want[i]));
    printf("MLA layer: DCP %u, interleave %u, page %u, %u tokens, %s cache: max |o - o_ref| = %.3g\n", N,
           lc->interleave, B, S, dcp_dtype_name(lc->dtype), err);
    if (!(err <= tol)) fail_msg("MLA layer error %.3g > %.3g", err, tol);
    dcp_cmd_destroy(cmd);
    dcp_buffer *bufs[] = {oin, lin, om, lm, out};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
    dcp_matrix_destroy(&mv);
    dcp_kv_cache_destroy(cache);
    free(wvd);
    free(kv);
    free(nw);
    free(wk);
    free(wvv);
    free(q);
    free(pos);
    free(cs);
    free(o_all);
    free(lse_all);
    free(c);
    free(kpe);
    free(sc);
}

static void test_mla_layer_dcp(void **state)
{
    dcp_test_rng rng = {31};
    static const layer_case cases[] = {
        {1, 1, 16, 70, DCP_DTYPE_F32}, {2, 1, 4, 70, DCP_DTYPE_F32}, {2, 4, 4, 37, DCP_DTYPE_F32},
        {4, 1, 4, 70, DCP_DTYPE_F32},  {4, 4, 4, 70, DCP_DTYPE_F32}, {4, 1, 4, 2, DCP_DTYPE_F32},
        {4, 4, 4, 3, DCP_DTYPE_F32},   {2, 2, 4, 45, DCP_DTYPE_F16}, {1, 1, 16, 1, DCP_DTYPE_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_layer(*state, &cases[i], &rng);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_head_matmul),
        cmocka_unit_test(test_rope_and_store),
        cmocka_unit_test(test_mla_layer_dcp),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
