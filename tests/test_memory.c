/* Memory counted before allocation (include/dcpvk/model.h): dcp_model_rank_bytes of a count_only
 * load and dcp_model_state_bytes against what the devices actually allocate
 * (dcp_device_memory_allocated), byte for byte, on small cases (TP 1, TP 2, TP 4 with DCP 2 a2a
 * and ag_rs, q_replicate, several sequences, f32 KV), after a prefill to the full context (the
 * split-KV workspace at its largest). The staging transport keeps the mailboxes in device-visible
 * buffers, so that they are counted too. Then dcp_model_state_check: a context beyond the storage
 * range or the memory is refused with the longest context that fits, which fits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "testmodel/testmodel.h"
#include "vkutil.h"

typedef struct mem_case {
    const char *name;
    bool gen;             /* the generated model (8 heads, 2 KV heads) instead of stories260K */
    uint32_t tp, dcp;
    dcp_cp_backend backend;
    bool q_replicate;
    uint32_t n_ctx, max_seqs, max_rows, block, interleave;
    dcp_dtype kv;
} mem_case;

static dcp_gguf *open_model(bool gen)
{
    dcp_gguf *g;
    if (gen) {
        dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
        mc.n_embd = 64;
        mc.n_layer = 2;
        mc.n_head = 8;
        mc.n_head_kv = 2;
        mc.head_dim = 8;
        mc.n_ff = 96;
        DCP_ASSERT_OK(dcp_gguf_open_test_model(&mc, &g));
    } else {
        DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &g));
    }
    return g;
}

static void run_case(const mem_case *mc)
{
    dcp_context *ctx = dcp_test_context_of(mc->tp);
    dcp_gguf *g = open_model(mc->gen);
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_device *devs[8];
    for (uint32_t i = 0; i < mc->tp; i++) devs[i] = dcp_context_device(ctx, (int)i);
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = devs;
    lc.count = mc->tp;
    lc.dcp = mc->dcp;
    lc.q_replicate = mc->q_replicate;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = mc->n_ctx;
    sc.max_seqs = mc->max_seqs;
    sc.max_rows = mc->max_rows;
    sc.block_size = mc->block;
    sc.interleave = mc->interleave;
    sc.kv_dtype = mc->kv;
    sc.backend = mc->backend;
    sc.chunk_tokens = 16; /* several split-KV chunks even at this small context */

    /* Counted: nothing allocated. */
    uint64_t before[8];
    for (uint32_t i = 0; i < mc->tp; i++) before[i] = dcp_device_memory_allocated(devs[i]);
    lc.count_only = true;
    dcp_model *counted;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, &cfg, &counted));
    dcp_model_memory est[8];
    DCP_ASSERT_OK(dcp_model_state_bytes(counted, &sc, est));
    for (uint32_t i = 0; i < mc->tp; i++) assert_true(dcp_device_memory_allocated(devs[i]) == before[i]);
    uint32_t fits = 0;
    DCP_ASSERT_OK(dcp_model_state_check(counted, &sc, &fits));
    assert_int_equal(fits, mc->n_ctx);

    /* Loaded: the weights and the staging buffer, as counted. */
    lc.count_only = false;
    dcp_model *m;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, &cfg, &m));
    for (uint32_t i = 0; i < mc->tp; i++) {
        uint64_t got = dcp_device_memory_allocated(devs[i]) - before[i];
        assert_true(dcp_model_rank_bytes(m, i) == dcp_model_rank_bytes(counted, i));
        if (got != est[i].weights + est[i].transfer)
            fail_msg("%s rank %u: the weights allocated %llu bytes, counted %llu + staging %llu", mc->name, i,
                     (unsigned long long)got, (unsigned long long)est[i].weights, (unsigned long long)est[i].transfer);
        before[i] += got;
    }
    dcp_model_destroy(counted);

    /* The run state, then sequence 0 prefilled to the full context: every lazily grown buffer at
     * its largest (split-KV workspace, KV slot tables). */
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &s));
    int32_t *tokens = malloc(mc->n_ctx * sizeof *tokens);
    assert_non_null(tokens);
    for (uint32_t t = 0; t < mc->n_ctx; t++) tokens[t] = (int32_t)(1 + t * 7 % (cfg.n_vocab - 1));
    DCP_ASSERT_OK(dcp_model_state_forward(s, tokens, mc->n_ctx, NULL, NULL));
    free(tokens);
    for (uint32_t i = 0; i < mc->tp; i++) {
        uint64_t got = dcp_device_memory_allocated(devs[i]) - before[i];
        uint64_t want = est[i].total - est[i].weights - est[i].transfer;
        if (got != want)
            fail_msg("%s rank %u: the run state allocated %llu bytes, counted %llu (KV %llu, activations %llu, "
                     "attention %llu, exchange %llu)", mc->name, i, (unsigned long long)got, (unsigned long long)want,
                     (unsigned long long)est[i].kv, (unsigned long long)est[i].activations,
                     (unsigned long long)est[i].attention, (unsigned long long)est[i].exchange);
    }
    printf("%-28s rank 0: weights %llu, KV %llu, activations %llu, attention %llu, exchange %llu, staging %llu "
           "bytes: as allocated\n", mc->name, (unsigned long long)est[0].weights, (unsigned long long)est[0].kv,
           (unsigned long long)est[0].activations, (unsigned long long)est[0].attention,
           (unsigned long long)est[0].exchange, (unsigned long long)est[0].transfer);
    dcp_model_state_destroy(s);
    dcp_model_destroy(m);
    dcp_gguf_close(g);
    dcp_test_context_done(ctx);
}

static void test_estimate_equals_allocation(void **state)
{
    (void)state;
    static const mem_case cases[] = {
        {"TP 1", false, 1, 1, DCP_CP_A2A, false, 96, 1, 8, 16, 1, DCP_DTYPE_F16},
        {"TP 1, 3 sequences, f32 KV", false, 1, 1, DCP_CP_A2A, false, 80, 3, 5, 8, 1, DCP_DTYPE_F32},
        {"TP 2", false, 2, 1, DCP_CP_A2A, false, 64, 2, 8, 16, 1, DCP_DTYPE_F16},
        {"TP 4 / DCP 2 a2a", true, 4, 2, DCP_CP_A2A, false, 100, 2, 8, 16, 1, DCP_DTYPE_F16},
        {"TP 4 / DCP 2 ag_rs I 8 qrep", true, 4, 2, DCP_CP_AG_RS, true, 90, 1, 6, 16, 8, DCP_DTYPE_F16},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

static void test_check_refuses(void **state)
{
    (void)state;
    dcp_context *ctx = dcp_test_context_of(1);
    dcp_gguf *g = open_model(false);
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_device *dev = dcp_context_device(ctx, 0);
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = &dev;
    lc.count_only = true;
    dcp_model *m;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, &cfg, &m));
    assert_true(dcp_model_bytes(m) > 0);
    /* 8 M tokens: the block tables of 128 rows would be 256 MB, beyond lavapipe's 128 MiB range. */
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 8000000;
    uint32_t fits = 1;
    assert_int_equal(dcp_model_state_check(m, &sc, &fits), DCP_ERR_CONFIG);
    if (!strstr(dcp_last_error(), "maxStorageBufferRange") || !strstr(dcp_last_error(), "The longest context that fits is"))
        fail_msg("message: %s", dcp_last_error());
    assert_true(fits > 4096 && fits < 8000000);
    /* The context it names fits (its largest buffer within the range), one more token does not. */
    sc.n_ctx = fits;
    dcp_model_memory mem;
    DCP_ASSERT_OK(dcp_model_state_bytes(m, &sc, &mem));
    const uint64_t range = dcp_device_get_info(dev)->max_storage_buffer_range;
    assert_true(mem.largest <= range);
    uint32_t again = 0;
    DCP_ASSERT_OK(dcp_model_state_check(m, &sc, &again));
    assert_int_equal(again, fits);
    sc.n_ctx = fits + 1;
    DCP_ASSERT_OK(dcp_model_state_bytes(m, &sc, &mem));
    assert_true(mem.largest > range);
    printf("8000000 tokens refused: %s\n", dcp_last_error());
    /* A state the model does not allow is refused as before. */
    dcp_model_state *s;
    assert_int_equal(dcp_model_state_create(m, &sc, &s), DCP_ERR_INVALID_ARGUMENT); /* count_only */
    dcp_model_destroy(m);
    dcp_gguf_close(g);
    dcp_test_context_done(ctx);
}

int main(void)
{
    /* Mailboxes in device-visible buffers (counted), not imported host memory. */
    setenv("DCP_VK_TRANSPORT", "staging", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_estimate_equals_allocation),
        cmocka_unit_test(test_check_refuses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
