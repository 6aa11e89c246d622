/* The llama-family architectures through the apps (argv[1] = dcp-vk-gguf, argv[2] = dcp-vk-run,
 * argv[3] = a scratch directory): `dcp-vk-gguf --make-model --arch qwen2|qwen3|phi3|llama` (llama
 * with --rope-freqs and YaRN) and dcp-vk-run gives the same greedy text at TP 1 and TP 8 / DCP 2
 * a2a; a Mistral-style file (sliding window) runs with a warning inside its window and is refused
 * beyond it; an architecture the writer does not make is refused naming the ones it makes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"

static const char *gguf_app, *run_app, *dir;

static const char *path_in(const char *name)
{
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 1024, "%s/%s", dir, name);
    return p;
}

/* Writes a small model of arch with the extra options (NULL-terminated, up to 6). */
static const char *make(const char *file, const char *arch, const char *const *extra)
{
    const char *out = path_in(file);
    const char *argv[24] = {gguf_app, "--make-model", out, "--force", "--arch", arch, "--n-embd", "64",
                            "--n-layer", "2", "--n-head", "8", "--n-head-kv", "4", "--head-dim", "16",
                            "--n-ff", "96"};
    int n = 18;
    for (int i = 0; extra && extra[i]; i++) argv[n++] = extra[i];
    argv[n] = NULL;
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("--make-model --arch %s: exit %d: %s", arch, r.code, r.err);
    dcp_test_result_free(&r);
    return out;
}

static dcp_test_result run(const char *model, const char *tp, const char *dcp, const char *ctx)
{
    const char *argv[] = {run_app, "-m", model, "--temp", "0", "-n", "16", "-c", ctx, "--tensor-parallel-size", tp,
                          "--decode-context-parallel-size", dcp, "--dcp-comm-backend", "a2a", NULL};
    return dcp_test_spawn(argv);
}

static void same_text(const char *model, const char *ctx)
{
    dcp_test_result a = run(model, "1", "1", ctx), b = run(model, "8", "2", ctx);
    if (a.code != 0) fail_msg("dcp-vk-run %s TP 1: exit %d: %s", model, a.code, a.err);
    if (b.code != 0) fail_msg("dcp-vk-run %s TP 8 / DCP 2: exit %d: %s", model, b.code, b.err);
    printf("%s: %s\n", model, a.out);
    assert_true(strlen(a.out) > 16);
    if (strcmp(a.out, b.out)) fail_msg("%s: TP 1 gave\n%s\nTP 8 / DCP 2 gave\n%s", model, a.out, b.out);
    dcp_test_result_free(&a);
    dcp_test_result_free(&b);
}

static void test_qwen2(void **state)
{
    (void)state;
    same_text(make("archs-qwen2.gguf", "qwen2", NULL), "64");
}

static void test_qwen3(void **state)
{
    (void)state;
    same_text(make("archs-qwen3.gguf", "qwen3", NULL), "64");
}

static void test_phi3(void **state)
{
    (void)state;
    same_text(make("archs-phi3.gguf", "phi3", NULL), "64");
}

static void test_llama_rope_freqs_yarn(void **state)
{
    (void)state;
    const char *extra[] = {"--rope-freqs", "--rope-scaling", "yarn", "--rope-scale", "4", NULL};
    same_text(make("archs-llama3.gguf", "llama", extra), "64");
}

static void test_mistral_window(void **state)
{
    (void)state;
    const char *extra[] = {"--sliding-window", "48", NULL};
    const char *m = make("archs-mistral.gguf", "llama", extra);
    dcp_test_result r = run(m, "1", "1", "48");
    if (r.code != 0) fail_msg("dcp-vk-run inside the window: exit %d: %s", r.code, r.err);
    assert_non_null(strstr(r.err, "warning: llama.attention.sliding_window = 48 is ignored"));
    dcp_test_result_free(&r);
    r = run(m, "1", "1", "49");
    if (r.code == 0) fail_msg("dcp-vk-run beyond the window ran: %s", r.out);
    printf("refused (exit %d): %s\n", r.code, r.err);
    assert_non_null(strstr(r.err, "sliding attention window of 48 tokens"));
    dcp_test_result_free(&r);
}

static void test_unknown_arch(void **state)
{
    (void)state;
    const char *argv[] = {gguf_app, "--make-model", path_in("archs-gemma.gguf"), "--force", "--arch", "gemma", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    assert_int_not_equal(r.code, 0);
    printf("refused (exit %d): %s\n", r.code, r.err);
    assert_non_null(strstr(r.err, "'gemma'"));
    assert_non_null(strstr(r.err, "llama, qwen2, qwen3, phi3"));
    dcp_test_result_free(&r);
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: test_archs_apps DCP_VK_GGUF DCP_VK_RUN SCRATCH_DIR\n");
        return 2;
    }
    gguf_app = argv[1];
    run_app = argv[2];
    dir = argv[3];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_arch),   cmocka_unit_test(test_mistral_window),
        cmocka_unit_test(test_qwen2),          cmocka_unit_test(test_qwen3),
        cmocka_unit_test(test_phi3),           cmocka_unit_test(test_llama_rope_freqs_yarn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
