/* Whole quantized models end to end (argv[1] = dcp-vk-gguf, argv[2] = dcp-vk-run, argv[3] = a
 * scratch directory): `dcp-vk-gguf --quantize stories260K.gguf --type q4_0` and a generated model
 * made as Q4_K_M run in dcp-vk-run with the same greedy text at TP 1 and at TP 8 / DCP 2 (a2a and
 * ag_rs); the quantized stories260K still tells its story; its Q2_K (IQ4_NL: rows of 64) runs the
 * same at every layout; the files carry the mix's types. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "testutil.h"

static const char *gguf_app, *run_app, *dir;

static char *path_in(const char *name)
{
    static char buf[4][1024];
    static int k;
    char *p = buf[k++ % 4];
    snprintf(p, 1024, "%s/%s", dir, name);
    return p;
}

static char *run_text(const char *model, const char *tp, const char *dcp, const char *backend)
{
    const char *argv[] = {run_app, "-m", model, "--temp", "0", "-n", "40", "--tensor-parallel-size", tp,
                          "--decode-context-parallel-size", dcp, "--dcp-comm-backend", backend, NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("dcp-vk-run %s TP %s DCP %s %s: exit %d: %s", model, tp, dcp, backend, r.code, r.err);
    char *text = strdup(r.out);
    dcp_test_result_free(&r);
    return text;
}

static void expect_type(const char *model, const char *tensor, dcp_ggml_type type)
{
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open(model, &g), DCP_OK);
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, tensor);
    assert_non_null(t);
    if (t->type != type)
        fail_msg("%s: %s is %s, want %s", model, tensor, dcp_ggml_type_name(t->type), dcp_ggml_type_name(type));
    dcp_gguf_close(g);
}

static void same_text_tp1_tp8(const char *model)
{
    char *t1 = run_text(model, "1", "1", "a2a");
    char *t8 = run_text(model, "8", "2", "a2a");
    char *t8r = run_text(model, "8", "2", "ag_rs");
    printf("%s: %s\n", model, t1);
    assert_true(strlen(t1) > 16);
    if (strcmp(t1, t8) || strcmp(t1, t8r))
        fail_msg("%s: TP 1 gave\n%s\nTP 8 / DCP 2 a2a gave\n%s\nag_rs gave\n%s", model, t1, t8, t8r);
    free(t1);
    free(t8);
    free(t8r);
}

static void test_stories_q4_0(void **state)
{
    (void)state;
    const char *out = path_in("stories260K-q4_0.gguf");
    const char *argv[] = {gguf_app, "--quantize", dcp_test_data_path("stories260K.gguf"), out, "--type", "q4_0", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("--quantize: exit %d: %s", r.code, r.err);
    assert_non_null(strstr(r.out, "blk.0.ffn_down.weight"));
    assert_non_null(strstr(r.out, "(fallback")); /* ffn_down rows of 172 are not blocks of 32 */
    dcp_test_result_free(&r);
    expect_type(out, "blk.0.attn_q.weight", DCP_GGML_TYPE_Q4_0);
    expect_type(out, "blk.0.ffn_down.weight", DCP_GGML_TYPE_F16);
    expect_type(out, "output.weight", DCP_GGML_TYPE_Q8_0); /* the mix's Q6_K, but rows of 64 are not blocks of 256 */
    expect_type(out, "output_norm.weight", DCP_GGML_TYPE_F32);
    /* Every matrix in its own type at TP 1 (Q4_0 parts of one type, whole rows): no F32 notice. */
    const char *tp1[] = {run_app, "-m", out, "--temp", "0", "-n", "2", NULL};
    r = dcp_test_spawn(tp1);
    if (r.code != 0 || strstr(r.err, "held as F32")) fail_msg("TP 1: exit %d, or an F32 notice:\n%s", r.code, r.err);
    dcp_test_result_free(&r);
    char *t = run_text(out, "1", "1", "a2a");
    assert_non_null(strstr(t, "Once upon a time"));
    assert_non_null(strstr(t, "Lily"));
    free(t);
    same_text_tp1_tp8(out);
}

/* llama-quantize's Q2_K on rows that are not whole blocks of 256 (stories260K: 64) writes
 * IQ4_NL: such a file runs, the same text at every layout. */
static void test_stories_q2_k_iq4_nl(void **state)
{
    (void)state;
    const char *out = path_in("stories260K-q2_k.gguf");
    const char *argv[] = {gguf_app, "--quantize", dcp_test_data_path("stories260K.gguf"), out, "--type", "q2_k", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("--quantize: exit %d: %s", r.code, r.err);
    dcp_test_result_free(&r);
    expect_type(out, "blk.0.attn_output.weight", DCP_GGML_TYPE_IQ4_NL);
    expect_type(out, "blk.0.attn_q.weight", DCP_GGML_TYPE_IQ4_NL);
    expect_type(out, "blk.4.ffn_gate.weight", DCP_GGML_TYPE_IQ4_NL);
    const char *tp1[] = {run_app, "-m", out, "--temp", "0", "-n", "2", NULL};
    r = dcp_test_spawn(tp1);
    if (r.code != 0 || strstr(r.err, "held as F32")) fail_msg("TP 1: exit %d, or an F32 notice:\n%s", r.code, r.err);
    dcp_test_result_free(&r);
    char *t = run_text(out, "1", "1", "a2a");
    assert_non_null(strstr(t, "Once upon a time"));
    free(t);
    same_text_tp1_tp8(out);
}

static void test_generated_q4_k_m(void **state)
{
    (void)state;
    const char *out = path_in("dcp-vk-test-q4_k_m.gguf");
    const char *argv[] = {gguf_app, "--make-model", out, "--type", "q4_k_m", "--n-layer", "8", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("--make-model: exit %d: %s", r.code, r.err);
    dcp_test_result_free(&r);
    expect_type(out, "output.weight", DCP_GGML_TYPE_Q6_K);
    expect_type(out, "blk.0.attn_v.weight", DCP_GGML_TYPE_Q6_K);
    expect_type(out, "blk.1.attn_v.weight", DCP_GGML_TYPE_Q4_K);
    expect_type(out, "blk.3.ffn_down.weight", DCP_GGML_TYPE_Q6_K);
    expect_type(out, "blk.4.ffn_down.weight", DCP_GGML_TYPE_Q4_K);
    expect_type(out, "blk.2.ffn_gate.weight", DCP_GGML_TYPE_Q4_K);
    same_text_tp1_tp8(out);
    /* Q4_K_M keeps attn_v of some layers in Q6_K: the fused Q|K|V of such a layer mixes types,
     * and each part stays in its own (a matrix of parts): nothing held as F32 at TP 1. At TP 8
     * the row-parallel attn_output's 32 columns a rank cut its 256-weight blocks: each rank holds
     * the covering block in Q4_K with a column window, so nothing is held as F32 there either
     * (no notice), and the text above was the same. */
    const char *tp1[] = {run_app, "-m", out, "--temp", "0", "-n", "2", NULL};
    r = dcp_test_spawn(tp1);
    if (r.code != 0 || strstr(r.err, "held as F32")) fail_msg("TP 1: exit %d, or an F32 notice:\n%s", r.code, r.err);
    dcp_test_result_free(&r);
    const char *tp8[] = {run_app, "-m", out, "--temp", "0", "-n", "2", "--tensor-parallel-size", "8",
                         "--decode-context-parallel-size", "2", NULL};
    r = dcp_test_spawn(tp8);
    if (r.code != 0 || strstr(r.err, "held as F32"))
        fail_msg("TP 8: exit %d, or an F32 notice:\n%s", r.code, r.err);
    dcp_test_result_free(&r);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s DCP-VK-GGUF DCP-VK-RUN SCRATCH-DIR\n", argv[0]);
        return 2;
    }
    gguf_app = argv[1];
    run_app = argv[2];
    dir = argv[3];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories_q4_0),
        cmocka_unit_test(test_stories_q2_k_iq4_nl),
        cmocka_unit_test(test_generated_q4_k_m),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
