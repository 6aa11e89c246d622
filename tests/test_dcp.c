/* The DCP attention step against the single-device reference: the KV cache filled through
 * kv_append (prompts, then tokens one at a time across shard boundaries), a batch of different
 * lengths including ones shorter than N * I (empty shards), I in {1, 16, page size}, f32 and f16,
 * both backends, gather and q_replicate, every transport this machine offers (staging / mpi, hostmem,
 * peer, auto; devgroup on a group-of-one VkDevice), in one process or over MPI (--mpi): every
 * transport gives bitwise the same O and LSE, and the step's host waits are its rounds, or one when
 * its rounds wait on each other on the GPU (one rank on one VkDevice). a2a and ag_rs must agree
 * within 1e-5; exchange bytes are checked; config errors, and a caller's step that does not match
 * the groups recorded into it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/cp_internal.h"
#include "dcpvk/cp.h"
#include "ref/ref.h"
#include "step/step.h"
#include "vkutil.h"

static int use_mpi;
static double worst_a2a_vs_agrs, worst_o, worst_lse;

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

typedef struct dcp_case {
    uint32_t interleave, page, kv_heads, heads_local, head_dim;
    dcp_dtype dtype;
    uint32_t chunk_tokens;
    uint32_t batch;
    uint32_t prompt[4], extra[4]; /* tokens appended at once, then one at a time */
} dcp_case;

static float rnd16(dcp_test_rng *r) { return dcp_f16_to_f32(dcp_f32_to_f16(dcp_test_rng_uniform(r, -1.0f, 1.0f))); }

static void open_devices(dcp_context *ctx, dcp_device **devs, int *n)
{
    *n = dcp_context_device_count(ctx);
    assert_true(*n <= 16);
    for (int i = 0; i < *n; i++) devs[i] = dcp_context_device(ctx, i);
}

static dcp_status open_comm(dcp_context *ctx, dcp_transport t, dcp_comm **out)
{
    dcp_device *devs[16];
    int n;
    open_devices(ctx, devs, &n);
    dcp_comm_config cfg = DCP_COMM_CONFIG_DEFAULT;
    cfg.transport = t;
    return use_mpi ? dcp_comm_init_mpi(devs, n, &cfg, out) : dcp_comm_init_local(devs, n, &cfg, out);
}

/* Rounds of a DCP step: the Q all-gather (without q_replicate), then a2a 1 or ag_rs 2 exchanges. */
static uint32_t dcp_cp_attn_phases_of(int ag_rs, int q_replicate) { return (q_replicate ? 1u : 2u) + (ag_rs ? 2u : 1u); }

static void run_case(dcp_context *ctx, const dcp_case *c, uint64_t seed)
{
    dcp_device *devs[16];
    int L;
    open_devices(ctx, devs, &L);
    /* Group size and this process's ranks: from a communicator (MPI: processes x local devices). */
    dcp_comm *probe;
    DCP_ASSERT_OK(open_comm(ctx, DCP_TRANSPORT_STAGING, &probe));
    const uint32_t N = (uint32_t)dcp_comm_size(probe), first = (uint32_t)dcp_comm_first_rank(probe);
    dcp_comm_destroy(probe);
    const uint32_t B = c->page, D = c->head_dim, Hkv = c->kv_heads, Hl = c->heads_local, NH = N * Hl;
    const uint32_t batch = c->batch;
    uint32_t len[4], max_len = 0;
    for (uint32_t b = 0; b < batch; b++) {
        len[b] = c->prompt[b] + c->extra[b];
        if (len[b] > max_len) max_len = len[b];
    }
    dcp_test_rng rng = {seed};
    /* Global K/V of every sequence [b][pos][Hkv][D] and Q [b][NH][D]. */
    const uint64_t row = (uint64_t)Hkv * D;
    float *k = malloc((uint64_t)batch * max_len * row * 4 + 4), *v = malloc((uint64_t)batch * max_len * row * 4 + 4);
    for (uint64_t i = 0; i < (uint64_t)batch * max_len * row; i++) {
        k[i] = rnd16(&rng);
        v[i] = rnd16(&rng);
    }
    float *q = malloc((uint64_t)batch * NH * D * 4);
    for (uint64_t i = 0; i < (uint64_t)batch * NH * D; i++) q[i] = dcp_test_rng_uniform(&rng, -1.0f, 1.0f);

    /* Reference: the single-device decode over the whole sequences. */
    uint32_t ref_blocks = max_len / B + 1;
    float *pages = calloc((uint64_t)batch * ref_blocks * 2 * row * B, 4);
    uint32_t *ref_bt = malloc((uint64_t)batch * ref_blocks * 4);
    for (uint32_t b = 0; b < batch; b++)
        for (uint32_t j = 0; j < ref_blocks; j++) ref_bt[b * ref_blocks + j] = b * ref_blocks + j;
    for (uint32_t b = 0; b < batch; b++)
        for (uint32_t p = 0; p < len[b]; p++)
            for (uint32_t h = 0; h < Hkv; h++) {
                float *dst = pages + ((uint64_t)(b * ref_blocks + p / B) * 2 * Hkv + h) * B * D + (p % B) * D;
                const float *src = k + (((uint64_t)b * max_len + p) * Hkv + h) * D;
                memcpy(dst, src, D * 4);
                memcpy(dst + (uint64_t)Hkv * B * D, v + (((uint64_t)b * max_len + p) * Hkv + h) * D, D * 4);
            }
    float *o_ref = malloc((uint64_t)batch * NH * D * 4), *lse_ref = malloc((uint64_t)batch * NH * 4);
    dcp_ref_decode_args ra = {.batch = batch, .q_heads = NH, .kv_heads = Hkv, .head_dim = D, .page_size = B,
        .max_blocks = ref_blocks, .scale = 1.0f / sqrtf((float)D), .dtype = DCP_DTYPE_F32, .pages = pages, .q = q,
        .lengths = len, .block_tables = ref_bt, .o = o_ref, .lse = lse_ref};
    dcp_ref_paged_decode(&ra);

    /* The DCP KV cache, filled through kv_append. */
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool = (dcp_kv_pool_config){.kv_heads = Hkv, .head_dim = D, .page_size = B,
                                   .dtype = c->dtype, .num_pages = batch * (max_len / B + 1)};
    kc.dcp_size = N;
    kc.first_rank = first;
    kc.interleave = c->interleave;
    kc.max_seqs = batch;
    kc.max_blocks = max_len / B + 1;
    dcp_kv_cache *cache;
    DCP_ASSERT_OK(dcp_kv_cache_create(devs, (uint32_t)L, &kc, &cache));
    dcp_buffer *kb[16], *vb[16], *qb[16], *ob[16], *lb[16];
    dcp_cmd *cmd[16];
    uint64_t kv_cap = (uint64_t)batch * max_len * row * 4 + 4;
    for (int i = 0; i < L; i++) {
        DCP_ASSERT_OK(dcp_buffer_create(devs[i], kv_cap, DCP_MEMORY_DEVICE, &kb[i]));
        DCP_ASSERT_OK(dcp_buffer_create(devs[i], kv_cap, DCP_MEMORY_DEVICE, &vb[i]));
        DCP_ASSERT_OK(dcp_buffer_create(devs[i], (uint64_t)batch * NH * D * 4, DCP_MEMORY_DEVICE, &qb[i]));
        DCP_ASSERT_OK(dcp_buffer_create(devs[i], (uint64_t)batch * Hl * D * 4, DCP_MEMORY_DEVICE, &ob[i]));
        DCP_ASSERT_OK(dcp_buffer_create(devs[i], (uint64_t)batch * Hl * 4, DCP_MEMORY_DEVICE, &lb[i]));
        DCP_ASSERT_OK(dcp_cmd_create(devs[i], &cmd[i]));
    }
    uint32_t done[4] = {0};
    float *kt = malloc(kv_cap), *vt = malloc(kv_cap);
    for (uint32_t round = 0;; round++) {
        uint32_t seqs[4], counts[4], n = 0, T = 0;
        for (uint32_t b = 0; b < batch; b++) {
            uint32_t want = round == 0 ? c->prompt[b] : (done[b] < len[b] ? 1 : 0);
            if (!want) continue;
            seqs[n] = b;
            counts[n++] = want;
            memcpy(kt + (uint64_t)T * row, k + ((uint64_t)b * max_len + done[b]) * row, (uint64_t)want * row * 4);
            memcpy(vt + (uint64_t)T * row, v + ((uint64_t)b * max_len + done[b]) * row, (uint64_t)want * row * 4);
            T += want;
            done[b] += want;
        }
        if (round > 0 && n == 0) break;
        if (n == 0) continue;
        DCP_ASSERT_OK(dcp_kv_cache_append(cache, n, seqs, counts));
        for (int i = 0; i < L; i++) {
            DCP_ASSERT_OK(dcp_buffer_upload(kb[i], 0, kt, (uint64_t)T * row * 4));
            DCP_ASSERT_OK(dcp_buffer_upload(vb[i], 0, vt, (uint64_t)T * row * 4));
            DCP_ASSERT_OK(dcp_cmd_reset(cmd[i]));
            DCP_ASSERT_OK(dcp_kv_cache_record_append(cmd[i], cache, (uint32_t)i, kb[i], 0, vb[i], 0));
            DCP_ASSERT_OK(dcp_cmd_run(cmd[i]));
        }
    }
    /* KV bytes each rank holds: the pages its shards need. */
    for (int i = 0; i < L; i++) {
        uint64_t pages = 0;
        for (uint32_t b = 0; b < batch; b++)
            pages += (dcp_kv_local_length(len[b], first + i, N, c->interleave) + B - 1) / B;
        assert_int_equal(dcp_kv_cache_pages_used(cache, (uint32_t)i), pages);
    }

    /* Staging first: the others must match its bits. */
    const dcp_transport ts[5] = {DCP_TRANSPORT_STAGING, DCP_TRANSPORT_HOSTMEM, DCP_TRANSPORT_PEER, DCP_TRANSPORT_AUTO,
                                 DCP_TRANSPORT_DEVGROUP};
    const int group_of_one = dcp_device_get_info(devs[0])->group_device_count > 0 && L == 1 && !use_mpi;
    uint32_t seq_ids[4] = {0, 1, 2, 3};
    float *o = malloc((uint64_t)batch * Hl * D * 4), *lse = malloc((uint64_t)batch * Hl * 4);
    float *o_a2a = malloc((uint64_t)L * batch * Hl * D * 4);
    const uint64_t per = (uint64_t)batch * Hl * (D + 1); /* O then LSE of one rank, one configuration */
    float *base = malloc((uint64_t)4 * L * per * 4);
    for (int t = 0; t < 5; t++) {
        dcp_comm *comm;
        if (ts[t] == DCP_TRANSPORT_DEVGROUP && !group_of_one) continue;
        DCP_ASSERT_OK(open_comm(ctx, ts[t], &comm));
        for (int qr = 0; qr < 2; qr++)
            for (int be = 0; be < 2; be++) {
                dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
                ac.batch = batch;
                ac.heads_local = Hl;
                ac.backend = be ? DCP_CP_AG_RS : DCP_CP_A2A;
                ac.q_replicate = qr;
                ac.chunk_tokens = c->chunk_tokens;
                dcp_cp_attn *attn = NULL;
                if (N == 1 && !be) {
                    assert_int_equal(dcp_cp_attn_create(comm, cache, &ac, &attn), DCP_ERR_CONFIG);
                    assert_non_null(strstr(dcp_last_error(), "a2a needs a DCP size > 1"));
                    continue;
                }
                DCP_ASSERT_OK(dcp_cp_attn_create(comm, cache, &ac, &attn));
                DCP_ASSERT_OK(dcp_cp_attn_set(attn, seq_ids));
                dcp_comm_buf qv[16], ov[16], lv[16];
                for (int i = 0; i < L; i++) {
                    uint32_t g = first + (uint32_t)i;
                    if (qr) {
                        DCP_ASSERT_OK(dcp_buffer_upload(qb[i], 0, q, (uint64_t)batch * NH * D * 4));
                    } else {
                        for (uint32_t b = 0; b < batch; b++)
                            DCP_ASSERT_OK(dcp_buffer_upload(qb[i], (uint64_t)b * Hl * D * 4,
                                                            q + ((uint64_t)b * NH + g * Hl) * D, (uint64_t)Hl * D * 4));
                    }
                    qv[i] = (dcp_comm_buf){qb[i], 0};
                    ov[i] = (dcp_comm_buf){ob[i], 0};
                    lv[i] = (dcp_comm_buf){lb[i], 0};
                }
                dcp_cp_attn_timing tm;
                DCP_ASSERT_OK(dcp_cp_attn_run(attn, qv, ov, lv, &tm));
                /* Host waits: one per round, or one for the step when the ranks share a VkDevice
                 * and no exchange needs the host (one rank here; lavapipe has no external semaphores). */
                int gpu = N == 1 && ts[t] != DCP_TRANSPORT_STAGING && !getenv("DCP_VK_STEP_SYNC");
                assert_int_equal(tm.rounds, dcp_cp_attn_phases_of(be, qr));
                assert_int_equal(tm.host_waits, gpu ? 1 : tm.rounds);
                /* Bytes local rank 0 sent in the step. */
                uint64_t want_bytes = be ? (uint64_t)(N - 1) * (batch * NH * 4 + (uint64_t)batch * Hl * D * 4)
                                         : (uint64_t)(N - 1) * batch * Hl * (D + 1) * 4;
                if (!qr) want_bytes += (uint64_t)(N - 1) * batch * Hl * D * 4;
                assert_int_equal(tm.bytes_sent, want_bytes);
                for (int i = 0; i < L; i++) {
                    uint32_t g = first + (uint32_t)i;
                    DCP_ASSERT_OK(dcp_buffer_download(ob[i], 0, o, (uint64_t)batch * Hl * D * 4));
                    DCP_ASSERT_OK(dcp_buffer_download(lb[i], 0, lse, (uint64_t)batch * Hl * 4));
                    char what[256];
                    snprintf(what, sizeof what, "N %u rank %u I %u page %u %s %s %s%s", N, g, c->interleave, B,
                             dcp_dtype_name(c->dtype), dcp_cp_backend_name(ac.backend),
                             dcp_transport_name(dcp_comm_transport(comm)), qr ? " q_replicate" : "");
                    for (uint32_t b = 0; b < batch; b++) {
                        double e = dcp_test_check_o(what, o + (uint64_t)b * Hl * D,
                                                    o_ref + ((uint64_t)b * NH + g * Hl) * D, (uint64_t)Hl * D);
                        if (e > worst_o) worst_o = e;
                        e = dcp_test_check_lse(what, lse + (uint64_t)b * Hl, lse_ref + (uint64_t)b * NH + g * Hl, Hl);
                        if (e > worst_lse) worst_lse = e;
                    }
                    /* Every transport: the same bits as staging. */
                    float *b0 = base + ((uint64_t)(qr * 2 + be) * L + i) * per;
                    if (t == 0) {
                        memcpy(b0, o, (uint64_t)batch * Hl * D * 4);
                        memcpy(b0 + (uint64_t)batch * Hl * D, lse, (uint64_t)batch * Hl * 4);
                    } else if (memcmp(b0, o, (uint64_t)batch * Hl * D * 4) ||
                               memcmp(b0 + (uint64_t)batch * Hl * D, lse, (uint64_t)batch * Hl * 4)) {
                        fail_msg("%s: O or LSE differs from the staging transport's bits", what);
                    }
                    float *mine = o_a2a + (uint64_t)i * batch * Hl * D;
                    if (!be) {
                        memcpy(mine, o, (uint64_t)batch * Hl * D * 4);
                    } else if (N > 1) {
                        for (uint64_t e = 0; e < (uint64_t)batch * Hl * D; e++) {
                            double d = fabs((double)mine[e] - (double)o[e]);
                            if (!(d <= 1e-5)) fail_msg("%s: a2a and ag_rs differ by %g at %llu", what, d, (unsigned long long)e);
                            if (d > worst_a2a_vs_agrs) worst_a2a_vs_agrs = d;
                        }
                    }
                }
                dcp_cp_attn_destroy(attn);
            }
        dcp_comm_destroy(comm);
    }
    for (int i = 0; i < L; i++) {
        dcp_buffer_destroy(kb[i]);
        dcp_buffer_destroy(vb[i]);
        dcp_buffer_destroy(qb[i]);
        dcp_buffer_destroy(ob[i]);
        dcp_buffer_destroy(lb[i]);
        dcp_cmd_destroy(cmd[i]);
    }
    dcp_kv_cache_destroy(cache);
    free(k); free(v); free(q); free(pages); free(ref_bt); free(o_ref); free(lse_ref);
    free(kt); free(vt); free(o); free(lse); free(o_a2a); free(base);
}

/* I = 1: every rank holds every N-th token; short sequences leave ranks empty. */
static void test_interleave_1(void **state)
{
    dcp_case c = {1, 16, 2, 2, 16, DCP_DTYPE_F32, 0, 3, {0, 3, 40}, {2, 5, 17}};
    run_case(*state, &c, 1);
}

/* I = 16 inside pages of 32, split-KV chunks of 64 inside each rank, one empty sequence. */
static void test_interleave_16(void **state)
{
    dcp_case c = {16, 32, 2, 2, 16, DCP_DTYPE_F32, 64, 4, {5, 0, 150, 0}, {3, 20, 9, 0}};
    run_case(*state, &c, 2);
}

/* I = page size (Helix), f16 cache, one KV head, one head per rank. */
static void test_interleave_page_f16(void **state)
{
    dcp_case c = {16, 16, 1, 1, 32, DCP_DTYPE_F16, 0, 3, {1, 30, 200}, {0, 40, 3}};
    run_case(*state, &c, 3);
}

static void test_config_errors(void **state)
{
    assert_int_equal(dcp_cp_check(6, 4, 32, 2), DCP_ERR_CONFIG);
    assert_non_null(strstr(dcp_last_error(), "not a multiple of the DCP size"));
    assert_int_equal(dcp_cp_check(8, 8, 32, 2), DCP_ERR_CONFIG);  /* N > T / Hkv */
    assert_int_equal(dcp_cp_check(8, 4, 12, 2), DCP_ERR_CONFIG);  /* (Hq / Hkv) % N */
    assert_int_equal(dcp_cp_check(8, 4, 32, 2), DCP_OK);
    assert_int_equal(dcp_cp_check(8, 1, 32, 16), DCP_OK);
    uint32_t g, f;
    dcp_cp_group_of(5, 2, &g, &f);
    assert_int_equal(g, 2);
    assert_int_equal(f, 4);
    dcp_cp_backend be;
    assert_int_equal(dcp_cp_backend_parse("ag_rs", &be), DCP_OK);
    assert_int_equal(be, DCP_CP_AG_RS);
    assert_int_equal(dcp_cp_backend_parse("a2b", &be), DCP_ERR_INVALID_ARGUMENT);
    /* Gathered heads incompatible with the KV heads: Hl 1 over N ranks with 2 KV heads and N > 1. */
    dcp_device *devs[16];
    int L;
    open_devices(*state, devs, &L);
    dcp_comm *comm;
    DCP_ASSERT_OK(open_comm(*state, DCP_TRANSPORT_STAGING, &comm));
    uint32_t N = (uint32_t)dcp_comm_size(comm);
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool = (dcp_kv_pool_config){.kv_heads = 2 * N, .head_dim = 8, .page_size = 16,
                                   .dtype = DCP_DTYPE_F32, .num_pages = 4};
    kc.dcp_size = N;
    kc.first_rank = (uint32_t)dcp_comm_first_rank(comm);
    kc.max_seqs = 1;
    kc.max_blocks = 2;
    dcp_kv_cache *cache;
    DCP_ASSERT_OK(dcp_kv_cache_create(devs, (uint32_t)L, &kc, &cache));
    dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
    ac.batch = 1;
    ac.heads_local = 1;
    ac.backend = DCP_CP_AG_RS;
    dcp_cp_attn *attn = NULL;
    assert_int_equal(dcp_cp_attn_create(comm, cache, &ac, &attn), DCP_ERR_CONFIG);
    assert_null(attn);
    dcp_kv_cache_destroy(cache);
    dcp_comm_destroy(comm);
}

/* dcp_cp_attn_record into a caller's step refuses a step that does not match its groups: one not
 * recording, one of another rank count, one whose ranks sit on other devices. */
static void test_record_errors(void **state)
{
    dcp_device *devs[16], *rev[16];
    int L;
    open_devices(*state, devs, &L);
    dcp_comm *comm;
    DCP_ASSERT_OK(open_comm(*state, DCP_TRANSPORT_STAGING, &comm));
    dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
    kc.pool = (dcp_kv_pool_config){.kv_heads = 1, .head_dim = 8, .page_size = 16, .dtype = DCP_DTYPE_F32,
                                   .num_pages = 4};
    kc.dcp_size = (uint32_t)dcp_comm_size(comm);
    kc.first_rank = (uint32_t)dcp_comm_first_rank(comm);
    kc.max_seqs = 1;
    kc.max_blocks = 2;
    dcp_kv_cache *cache;
    DCP_ASSERT_OK(dcp_kv_cache_create(devs, (uint32_t)L, &kc, &cache));
    dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
    ac.batch = 1;
    ac.heads_local = 1;
    ac.backend = DCP_CP_AG_RS;
    dcp_cp_attn *attn;
    DCP_ASSERT_OK(dcp_cp_attn_create(comm, cache, &ac, &attn));
    dcp_comm_buf bufs[16] = {{0}};
    dcp_step *step;
    DCP_ASSERT_OK(dcp_step_create(devs, (uint32_t)L, &step));
    assert_int_equal(dcp_cp_attn_record(step, &attn, 1, bufs, bufs, bufs), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "not recording"));
    bool replayed;
    DCP_ASSERT_OK(dcp_step_begin(step, 0, &replayed));
    dcp_cp_attn *two[2] = {attn, attn};
    assert_int_equal(dcp_cp_attn_record(step, two, 2, bufs, bufs, bufs), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "in a step of"));
    dcp_step_abort(step);
    dcp_step_destroy(step);
    if (L > 1) {
        for (int i = 0; i < L; i++) rev[i] = devs[L - 1 - i];
        DCP_ASSERT_OK(dcp_step_create(rev, (uint32_t)L, &step));
        DCP_ASSERT_OK(dcp_step_begin(step, 0, &replayed));
        assert_int_equal(dcp_cp_attn_record(step, &attn, 1, bufs, bufs, bufs), DCP_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(dcp_last_error(), "not on the device"));
        dcp_step_abort(step);
        dcp_step_destroy(step);
    }
    dcp_cp_attn_destroy(attn);
    dcp_kv_cache_destroy(cache);
    dcp_comm_destroy(comm);
}

int main(int argc, char **argv)
{
    int rank = 0, size = 1;
    use_mpi = argc > 1 && strcmp(argv[1], "--mpi") == 0;
    if (use_mpi && dcp_mpi_init(&argc, &argv, &rank, &size) != DCP_OK) {
        fprintf(stderr, "dcp_mpi_init: %s\n", dcp_last_error());
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_errors),
        cmocka_unit_test(test_record_errors),
        cmocka_unit_test(test_interleave_1),
        cmocka_unit_test(test_interleave_16),
        cmocka_unit_test(test_interleave_page_f16),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    printf("rank %d: max |O - ref| %.3g, max |LSE - ref| %.3g, max |a2a - ag_rs| %.3g\n", rank, worst_o, worst_lse,
           worst_a2a_vs_agrs);
    if (use_mpi) dcp_mpi_finalize();
    return rc;
}
