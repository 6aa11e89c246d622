/* Lifetimes and teardown (docs/design.md, "Teardown and lifetimes"): objects that submissions used
 * destroyed right after their fences were waited, and whole public-API lives (context, model, run
 * state, prefill, decode, destroy) again and again. Before the fix in dcp_sem_destroy, the first
 * crashed on lavapipe in nearly every run and the second about once in twenty: Mesa's emulated
 * timeline semaphores are retired by the queue's submit thread after the fence has signalled. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/dcpvk.h"
#include "stories_ref.h"
#include "vk/external.h"
#include "vkutil.h"

/* A timeline semaphore signalled by one submission and waited on by the next, destroyed as soon as
 * the second one's fence is waited (valid usage: every batch that refers to it has completed), on
 * every device of the context; many times, so that the submit thread's late retirement shows. */
static void test_semaphore_after_fence(void **state)
{
    (void)state;
    dcp_context *ctx = dcp_test_context();
    const int n = dcp_context_device_count(ctx);
    dcp_cmd *cmd[8] = {0};
    for (int d = 0; d < n && d < 8; d++) DCP_ASSERT_OK(dcp_cmd_create(dcp_context_device(ctx, d), &cmd[d]));
    for (int it = 0; it < 1500; it++) {
        for (int d = 0; d < n && d < 8; d++) {
            dcp_sem *s = NULL;
            DCP_ASSERT_OK(dcp_sem_create(dcp_context_device(ctx, d), 0, &s));
            DCP_ASSERT_OK(dcp_cmd_reset(cmd[d]));
            DCP_ASSERT_OK(dcp_cmd_submit_timeline(cmd[d], 0, NULL, NULL, s, 1));
            DCP_ASSERT_OK(dcp_cmd_wait(cmd[d]));
            const uint64_t one = 1;
            DCP_ASSERT_OK(dcp_cmd_reset(cmd[d]));
            DCP_ASSERT_OK(dcp_cmd_submit_timeline(cmd[d], 1, &s, &one, s, 2));
            DCP_ASSERT_OK(dcp_cmd_wait(cmd[d]));
            /* No counter check here: lavapipe may still report 1 now, as the submit thread
             * installs the signalled point only after the fence (the same late retirement). */
            dcp_sem_destroy(s);
        }
    }
    for (int d = 0; d < n && d < 8; d++) dcp_cmd_destroy(cmd[d]);
    dcp_test_context_done(ctx);
}

/* One life on the public API: a context over `devices`, stories260K at TP tp / DCP dcp, a run
 * state (its warm-up runs GPU-synchronised steps), a prefill of BOS + 3 reference ids and 12
 * greedy decode steps that must give the reference, then everything destroyed. */
static void one_life(const char *devices, uint32_t tp, uint32_t dcp)
{
    dcp_context_config cc = DCP_CONTEXT_CONFIG_DEFAULT;
    cc.devices = devices;
    cc.validation = 1; /* GPU-assisted too under DCP_VK_VALIDATION=gpuav */
    dcp_context *ctx = NULL;
    DCP_ASSERT_OK(dcp_context_create(&cc, &ctx));
    assert_true(dcp_context_device_count(ctx) >= (int)tp);
    dcp_gguf *g = NULL;
    DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &g));
    dcp_model_config cfg;
    DCP_ASSERT_OK(dcp_model_config_read(g, &cfg));
    dcp_device *devs[8];
    for (uint32_t i = 0; i < tp; i++) devs[i] = dcp_context_device(ctx, (int)i);
    dcp_model_load_config lc = DCP_MODEL_LOAD_CONFIG_DEFAULT;
    lc.devices = devs;
    lc.count = tp;
    lc.dcp = dcp;
    dcp_model *m = NULL;
    DCP_ASSERT_OK(dcp_model_load(&lc, g, &cfg, &m));
    dcp_gguf_close(g);
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_rows = 16;
    dcp_model_state *s = NULL;
    DCP_ASSERT_OK(dcp_model_state_create(m, &sc, &s));
    enum { PROMPT = 4, DECODE = 12 };
    int32_t next = -1;
    DCP_ASSERT_OK(dcp_model_state_forward(s, stories_ref, PROMPT, NULL, &next));
    for (int k = 0; k < DECODE; k++) {
        if (next != stories_ref[PROMPT + k])
            fail_msg("TP %u / DCP %u: token %d is %d, reference %d", tp, dcp, PROMPT + k, next,
                     stories_ref[PROMPT + k]);
        int32_t t = next;
        DCP_ASSERT_OK(dcp_model_state_forward(s, &t, 1, NULL, &next));
    }
    dcp_model_state_destroy(s);
    dcp_model_destroy(m);
    dcp_test_context_done(ctx);
}

static void test_lives_tp1(void **state)
{
    (void)state;
    for (int i = 0; i < 12; i++) one_life("0", 1, 1);
}

static void test_lives_tp8_dcp2(void **state)
{
    (void)state;
    for (int i = 0; i < 2; i++) one_life("0,0,0,0,0,0,0,0", 8, 2);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_semaphore_after_fence),
        cmocka_unit_test(test_lives_tp1),
        cmocka_unit_test(test_lives_tp8_dcp2),
    };
    /* "tp1": the first two only (the LP_NUM_THREADS=0 run, where TP 8 would take minutes). */
    const size_t n = argc > 1 && strcmp(argv[1], "tp1") == 0 ? 2 : sizeof tests / sizeof tests[0];
    return _cmocka_run_group_tests("test_lifetime", tests, n, NULL, NULL);
}
