/* A model of real 7B widths (n_embd 4096, 32 query heads of 128, n_ff 11008; 2 layers, the
 * built-in vocabulary, Q8_0 matrices, generated in memory with dcp_gguf_open_test_model) at TP 8 /
 * DCP 2 on eight logical devices against TP 1: every buffer of every rank, the communicator
 * mailboxes and put areas included, fits the device's storage-buffer binding range (counted for
 * a prefill of 512 rows, and for the run state used here), and greedy decoding gives the same
 * tokens. 4 KV heads: DCP 2 at TP 8 needs TP / KV heads >= 2 (vLLM's rule, dcp_cp_check).
 * Registered with DCP_VK_DEVICES=0,0,0,0,0,0,0,0 (tests/model.cmake). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "testmodel/testmodel.h"
#include "vkutil.h"

#define PROMPT 5
#define GEN 4

/* Every rank's largest buffer within its device's binding range, for config sc over m. */
static void check_fits(dcp_model *m, dcp_device *const *devs, uint32_t n, const dcp_model_state_config *sc,
                       const char *what)
{
    dcp_model_memory mem[8];
    DCP_ASSERT_OK(dcp_model_state_bytes(m, sc, mem));
    for (uint32_t i = 0; i < n; i++) {
        uint64_t range = dcp_device_get_info(devs[i])->max_storage_buffer_range;
        printf("%s rank %u: weights %llu, KV %llu, activations %llu, attention %llu, exchange %llu bytes; "
               "largest buffer %llu (%s), binding range %llu\n", what, i, (unsigned long long)mem[i].weights,
               (unsigned long long)mem[i].kv, (unsigned long long)mem[i].activations,
               (unsigned long long)mem[i].attention, (unsigned long long)mem[i].exchange,
               (unsigned long long)mem[i].largest, mem[i].largest_what ? mem[i].largest_what : "-",
               (unsigned long long)range);
        if (mem[i].largest > range)
            fail_msg("%s rank %u: %s is %llu bytes, over the %llu-byte storage-buffer range", what, i,
                     mem[i].largest_what, (unsigned long long)mem[i].largest, (unsigned long long)range);
    }
    uint32_t fits = 0;
    DCP_ASSERT_OK(dcp_model_state_check(m, sc, &fits));
    assert_int_equal(fits, sc->n_ctx);
}

/* Greedy tokens after the prompt on devs[0 .. tp) with DCP dcp. */
static void run(dcp_gguf *g, const dcp_model_config *cfg, dcp_device *const *devs, uint32_t tp, uint32_t dcp,
                int32_t out[GEN])
{
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = (dcp_device **)devs;
    lc.count = tp;
    lc.dcp = dcp;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_rows = 8;
    char what[32];
    snprintf(what, sizeof what, "TP %u DCP %u", tp, dcp);

    /* Counted first (nothing allocated): a prefill of 512 rows at 4096 tokens must fit the
     * binding range too, mailboxes and put areas included. */
    lc.count_only = true;
    dcp_model *counted;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, cfg, &counted));
    dcp_model_state_config big = sc;
    big.n_ctx = 4096;
    big.max_rows = 512;
    char bwhat[48];
    snprintf(bwhat, sizeof bwhat, "%s, 512 rows", what);
    check_fits(counted, devs, tp, &big, bwhat);
    dcp_model_destroy(counted);

    lc.count_only = false;
    dcp_model *m;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, cfg, &m));
    check_fits(m, devs, tp, &sc, what);
    dcp_model_state *s;
    DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &s));
    int32_t prompt[PROMPT] = {1, 300, 301, 302, 303}, next;
    DCP_ASSERT_OK(dcp_model_state_forward(s, prompt, PROMPT, NULL, &next));
    for (int t = 0; t < GEN; t++) {
        out[t] = next;
        if (t + 1 < GEN) DCP_ASSERT_OK(dcp_model_state_forward(s, &out[t], 1, NULL, &next));
    }
    printf("%s: greedy tokens %d %d %d %d\n", what, out[0], out[1], out[2], out[3]);
    dcp_model_state_destroy(s);
    dcp_model_destroy(m);
}

static void test_7b_shaped_tp8_dcp2(void **state)
{
    (void)state;
    dcp_context *ctx = dcp_test_context();
    if (dcp_context_device_count(ctx) < 8)
        fail_msg("this test needs 8 logical devices (DCP_VK_DEVICES=0,0,0,0,0,0,0,0), has %d",
                 dcp_context_device_count(ctx));
    dcp_device *devs[8];
    for (int i = 0; i < 8; i++) devs[i] = dcp_context_device(ctx, i);
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.name = "dcp-vk-test-7b-shaped";
    mc.n_embd = 4096;
    mc.n_layer = 2;
    mc.n_head = 32;
    mc.n_head_kv = 4;
    mc.head_dim = 128;
    mc.n_ff = 11008;
    mc.weight_type = DCP_GGML_TYPE_Q8_0;
    dcp_gguf *g;
    DCP_ASSERT_OK(dcp_gguf_open_test_model(&mc, &g));
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    assert_int_equal(cfg.n_embd, 4096);
    assert_int_equal(cfg.n_ff, 11008);
    int32_t one[GEN], eight[GEN];
    run(g, &cfg, devs, 1, 1, one);
    run(g, &cfg, devs, 8, 2, eight);
    for (int t = 0; t < GEN; t++)
        if (one[t] != eight[t]) fail_msg("token %d: TP 8 / DCP 2 gives %d, TP 1 %d", t, eight[t], one[t]);
    /* The prompt's tokens are not all the answer: the model computes something. */
    assert_true(one[0] >= 0 && (uint32_t)one[0] < cfg.n_vocab);
    dcp_gguf_close(g);
    dcp_test_context_done(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_7b_shaped_tp8_dcp2)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
