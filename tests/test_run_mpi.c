/* dcp-vk-run under `mpiexec -n P` as a user runs it (argv[1] mpiexec, argv[2] dcp-vk-run): at TP 8 /
 * DCP 2 over 8 processes (one rank each) the greedy text of "Once upon a time" is the single-process
 * TP 1 text, printed once (process 0); ag_rs over 4 processes of 2 ranks gives it too, with the
 * JSON summary naming the processes; rejected configurations exit 2 on every process with one
 * message; a device one process lacks and an unreadable model exit 1 on every process; n-gram
 * speculation and a draft model under mpiexec give the tokens of TP 1 without speculation. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dcpvk/gguf.h"
#include "testmodel/testmodel.h"
#include "testutil.h"

static const char *mpiexec, *app;

typedef dcp_test_result result;

/* Runs `mpiexec -n nproc env DCP_VK_DEVICES=devices app args...` (nproc 0: app alone, with
 * DCP_VK_DEVICES=devices) and captures stdout and stderr. */
static result run(int nproc, const char *devices, const char *const *args)
{
    const char *argv[64];
    char np[16], dev[64];
    snprintf(np, sizeof np, "%d", nproc);
    snprintf(dev, sizeof dev, "DCP_VK_DEVICES=%s", devices);
    int n = 0;
    if (nproc > 0) {
        argv[n++] = mpiexec;
        argv[n++] = "-n";
        argv[n++] = np;
    }
    argv[n++] = "env";
    argv[n++] = dev;
    argv[n++] = app;
    for (int i = 0; args[i]; i++) argv[n++] = args[i];
    argv[n] = NULL;
    return dcp_test_spawn(argv);
}

/* The runs inherit DCP_VK_VALIDATION=1 from CTest: any validation message fails the test. */
static void done(result *r)
{
    if (strstr(r->err, "dcp-vk: validation ")) fail_msg("validation message:\n%s", r->err);
    dcp_test_result_free(r);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static const char *stories(void) { return dcp_test_data_path("stories260K.gguf"); }

/* The "tokens" array of a --json summary (a pointer into s), or fails. */
static const char *json_tokens(const char *s, const char *what)
{
    const char *t = strstr(s, "\"tokens\": [");
    if (!t) fail_msg("%s: no tokens in the JSON summary:\n%s", what, s);
    return t;
}

/* The value of "key": N in s (a --json summary), or fails. */
static long json_count(const char *s, const char *key, const char *what)
{
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *t = strstr(s, pat);
    if (!t) fail_msg("%s: no %s in the JSON summary:\n%s", what, key, s);
    return strtol(t + strlen(pat), NULL, 10);
}

/* The "tokens" of run r's --json summary are those of ref's (TP 1 without speculation), or fails. */
static void same_tokens(const result *ref, const result *r, const char *what)
{
    const char *want = json_tokens(ref->out, "TP 1"), *got = json_tokens(r->out, what);
    const size_t wl = strcspn(want, "]");
    if (strncmp(want, got, wl + 1) != 0)
        fail_msg("%s: tokens\n%.*s\ninstead of TP 1's\n%.*s", what, (int)strcspn(got, "]") + 1, got, (int)wl + 1, want);
}

/* n-gram speculation under mpiexec -n 4 (TP 8 / DCP 2, 2 ranks each): the followers run every
 * verification step and shorten their shards by the drafts the leader rejected (the plan carries
 * the roll-backs), so the greedy tokens are those of TP 1 without speculation; drafts are both
 * accepted and rejected on this self-quoting prompt. */
static void test_spec_ngram(void **state)
{
    (void)state;
    const char *prompt = "Once upon a time, there was a little girl named Lily. She loved to play outside. "
                         "Once upon a time, there was a little girl named";
    const char *one[] = {"-m", stories(), "-p", prompt, "-n", "48", "--temp", "0", "--json", NULL};
    result ref = run(0, "0", one);
    if (ref.code != 0) fail_msg("TP 1 run: exit %d\n%s", ref.code, ref.err);
    const char *spec[] = {"-m", stories(), "-p", prompt, "-n", "48", "--temp", "0", "--tensor-parallel-size", "8",
                          "--decode-context-parallel-size", "2", "--speculative-config",
                          "{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, "
                          "\"prompt_lookup_min\": 2}",
                          "--json", NULL};
    result r = run(4, "0", spec);
    if (r.code != 0) fail_msg("mpiexec -n 4 TP 8 DCP 2 n-gram: exit %d\n%s", r.code, r.err);
    same_tokens(&ref, &r, "mpiexec -n 4 n-gram");
    const long drafted = json_count(r.out, "num_draft_tokens", "n-gram"), accepted = json_count(r.out, "num_accepted_tokens", "n-gram");
    printf("mpiexec -n 4, TP 8 DCP 2, n-gram k 4: TP 1's 48 tokens; %ld draft tokens, %ld accepted\n", drafted, accepted);
    assert_true(accepted > 0);
    assert_true(drafted > accepted); /* some were rolled back on every process */
    done(&r);
    done(&ref);
}

/* A draft model under mpiexec -n 4 (TP 8 / DCP 2, 2 ranks each): stories260K cut to its first 4
 * layers (same vocabulary), loaded beside the target with the same layout; its own steps and
 * roll-backs go to the followers as plans of their own, so every process runs the same draft
 * steps, and the greedy tokens are those of TP 1 without speculation, with drafts accepted. */
static void test_spec_draft(void **state)
{
    (void)state;
    const char *tmp = getenv("TMPDIR");
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/dcp-vk-test-draft-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir)) fail_msg("mkdtemp %s: %s", dir, strerror(errno));
    snprintf(path, sizeof path, "%s/draft.gguf", dir);
    dcp_gguf *g = NULL;
    dcp_gguf_writer *w = NULL;
    dcp_status st = dcp_gguf_open(stories(), &g);
    if (st == DCP_OK) st = dcp_test_model_cut_layers(g, 4, -1, &w);
    if (st == DCP_OK) st = dcp_gguf_writer_write(w, path);
    if (st != DCP_OK) fail_msg("writing the draft model %s: %s: %s", path, dcp_status_string(st), dcp_last_error());
    dcp_gguf_writer_destroy(w);
    dcp_gguf_close(g);
    const char *prompt = "Once upon a time, there was a little girl named Lily.";
    const char *one[] = {"-m", stories(), "-p", prompt, "-n", "32", "--temp", "0", "--json", NULL};
    result ref = run(0, "0", one);
    if (ref.code != 0) fail_msg("TP 1 run: exit %d\n%s", ref.code, ref.err);
    char cfg[1024];
    snprintf(cfg, sizeof cfg, "{\"model\": \"%s\", \"num_speculative_tokens\": 3}", path);
    const char *spec[] = {"-m", stories(), "-p", prompt, "-n", "32", "--temp", "0", "--tensor-parallel-size", "8",
                          "--decode-context-parallel-size", "2", "--speculative-config", cfg, "--json", NULL};
    result r = run(4, "0", spec), one8 = run(0, "0,0,0,0,0,0,0,0", spec);
    unlink(path);
    rmdir(dir);
    if (r.code != 0) fail_msg("mpiexec -n 4 TP 8 DCP 2 draft model: exit %d\n%s", r.code, r.err);
    if (one8.code != 0) fail_msg("one process, TP 8 DCP 2 draft model: exit %d\n%s", one8.code, one8.err);
    same_tokens(&ref, &r, "mpiexec -n 4 draft model");
    /* The draft ran the same steps over the same shards as in one process: the same drafts (a
     * follower whose draft state missed a step or a roll-back would draft from other KV). */
    const long drafted = json_count(r.out, "num_draft_tokens", "draft model"),
               accepted = json_count(r.out, "num_accepted_tokens", "draft model");
    const long drafted1 = json_count(one8.out, "num_draft_tokens", "draft model, one process"),
               accepted1 = json_count(one8.out, "num_accepted_tokens", "draft model, one process");
    printf("mpiexec -n 4, TP 8 DCP 2, draft model (4 of 5 layers) k 3: TP 1's 32 tokens; %ld draft tokens, %ld "
           "accepted (one process: %ld, %ld)\n", drafted, accepted, drafted1, accepted1);
    assert_true(accepted > 0);
    assert_true(drafted > accepted); /* some were rolled back on every process, in both states */
    assert_int_equal(drafted, drafted1);
    assert_int_equal(accepted, accepted1);
    done(&one8);
    done(&r);
    done(&ref);
}

/* deepseek2 (MLA): the project's test model B (q_lora, YaRN, MoE) generated by dcp-vk-gguf; TP 4 /
 * DCP 4 over 4 processes (a2a) and TP 4 / DCP 2 over 2 processes of 2 ranks (ag_rs, interleave 4,
 * q_replicate) give the greedy tokens of TP 1 in one process. */
static void test_deepseek2(void **state)
{
    (void)state;
    char model[512];
    const char *tmp = getenv("TMPDIR");
    snprintf(model, sizeof model, "%s/dcp-vk-test-run-mpi-ds2-%ld.gguf", tmp && *tmp ? tmp : "/tmp", (long)getpid());
    char gguf_app[4096];
    snprintf(gguf_app, sizeof gguf_app, "%s", app);
    char *slash = strrchr(gguf_app, '/');
    snprintf(slash ? slash + 1 : gguf_app, sizeof gguf_app - (size_t)(slash ? slash + 1 - gguf_app : 0), "dcp-vk-gguf");
    const char *make[] = {gguf_app, "--make-model", model, "--arch", "deepseek2", "--mla-config", "B", NULL};
    result mk = dcp_test_spawn(make);
    if (mk.code != 0) fail_msg("dcp-vk-gguf --make-model: exit %d\n%s", mk.code, mk.err);
    dcp_test_result_free(&mk);
    const char *one[] = {"-m", model, "-p", "Once upon a time", "-n", "48", "--temp", "0", "--kv-dtype", "f32",
                         "--json", NULL};
    result ref = run(0, "0", one);
    if (ref.code != 0) fail_msg("deepseek2 TP 1: exit %d\n%s", ref.code, ref.err);
    const char *want = json_tokens(ref.out, "TP 1");
    const char *a2a[] = {"-m", model, "-p", "Once upon a time", "-n", "48", "--temp", "0", "--kv-dtype", "f32",
                         "--tensor-parallel-size", "4", "--decode-context-parallel-size", "4", "--json", NULL};
    result r = run(4, "0", a2a);
    if (r.code != 0) fail_msg("deepseek2 mpiexec -n 4 TP 4 DCP 4: exit %d\n%s", r.code, r.err);
    if (strncmp(json_tokens(r.out, "TP 4 DCP 4"), want, strcspn(want, "]")) != 0)
        fail_msg("deepseek2 mpiexec -n 4 TP 4 DCP 4 a2a:\n%s\nTP 1:\n%s", r.out, ref.out);
    done(&r);
    const char *agrs[] = {"-m", model, "-p", "Once upon a time", "-n", "48", "--temp", "0", "--kv-dtype", "f32",
                          "--tensor-parallel-size", "4", "--decode-context-parallel-size", "2", "--dcp-comm-backend",
                          "ag_rs", "--cp-kv-cache-interleave-size", "4", "--dcp-q-replicate", "--json", NULL};
    r = run(2, "0", agrs);
    if (r.code != 0) fail_msg("deepseek2 mpiexec -n 2 TP 4 DCP 2 ag_rs: exit %d\n%s", r.code, r.err);
    if (strncmp(json_tokens(r.out, "TP 4 DCP 2"), want, strcspn(want, "]")) != 0)
        fail_msg("deepseek2 mpiexec -n 2 TP 4 DCP 2 ag_rs:\n%s\nTP 1:\n%s", r.out, ref.out);
    printf("deepseek2 test model B: mpiexec -n 4 (TP 4 / DCP 4 a2a) and -n 2 (TP 4 / DCP 2 ag_rs, q_replicate) give "
           "the TP 1 tokens\n");
    done(&r);
    dcp_test_result_free(&ref);
    remove(model);
}

static void test_same_text(void **state)
{
    const char *one[] = {"-m", stories(), "-p", "Once upon a time", "-n", "32", "--temp", "0", NULL};
    result ref = run(0, "0", one);
    if (ref.code != 0) fail_msg("TP 1 run: exit %d\n%s", ref.code, ref.err);
    assert_true(strlen(ref.out) > 40);
    const char *a2a[] = {"-m", stories(), "-p", "Once upon a time", "-n", "32", "--temp", "0",
                         "--tensor-parallel-size", "8", "--decode-context-parallel-size", "2", NULL};
    result r = run(8, "0", a2a);
    if (r.code != 0) fail_msg("mpiexec -n 8 TP 8 DCP 2: exit %d\n%s", r.code, r.err);
    if (strcmp(r.out, ref.out) != 0)
        fail_msg("mpiexec -n 8 TP 8 DCP 2 a2a prints\n%s\ninstead of the TP 1 text\n%s", r.out, ref.out);
    assert_int_equal(count(r.err, "generation:"), 1); /* one summary: process 0's */
    assert_non_null(strstr(r.err, "8 MPI processes, 1 TP ranks each"));
    printf("mpiexec -n 8, TP 8 DCP 2 a2a: same text as TP 1 in one process\n%s%s", r.out,
           strstr(r.err, "generation:") ? strstr(r.err, "generation:") : "");
    done(&r);
    /* ag_rs, 4 processes of 2 ranks on logical devices of the one entry, JSON summary. */
    const char *agrs[] = {"-m", stories(), "-p", "Once upon a time", "-n", "32", "--temp", "0",
                          "--tensor-parallel-size", "8", "--decode-context-parallel-size", "2",
                          "--dcp-comm-backend", "ag_rs", "--cp-kv-cache-interleave-size", "4", "--json", NULL};
    r = run(4, "0", agrs);
    if (r.code != 0) fail_msg("mpiexec -n 4 TP 8 DCP 2 ag_rs: exit %d\n%s", r.code, r.err);
    assert_int_equal(count(r.out, "\"processes\": 4"), 1);
    /* The JSON text is the streamed text without the echoed prompt, escaped. */
    const char *t = strstr(r.out, "\"text\": \"");
    assert_non_null(t);
    t += strlen("\"text\": \"");
    const char *want = ref.out + strlen("Once upon a time");
    size_t wl = strlen(want);
    while (wl && want[wl - 1] == '\n') wl--;
    if (strncmp(t, want, wl) != 0 || t[wl] != '"')
        fail_msg("mpiexec -n 4 TP 8 DCP 2 ag_rs JSON text differs:\n%s\nwanted\n%.*s", r.out, (int)wl, want);
    done(&r);
    done(&ref);
}

static void test_errors(void **state)
{
    /* DCP 4 at TP 8: the 4 KV heads allow DCP <= 2 (vLLM's rule): exit 2, said once. */
    const char *bad_dcp[] = {"-m", stories(), "-n", "1", "--tensor-parallel-size", "8",
                             "--decode-context-parallel-size", "4", NULL};
    result r = run(4, "0", bad_dcp);
    assert_int_equal(r.code, 2);
    assert_int_equal(count(r.err, "exceeds TP / KV heads"), 1);
    done(&r);
    /* TP 8 over 3 processes. */
    const char *tp8[] = {"-m", stories(), "-n", "1", "--tensor-parallel-size", "8", NULL};
    r = run(3, "0", tp8);
    assert_int_equal(r.code, 2);
    assert_int_equal(count(r.err, "must divide by the processes"), 1);
    done(&r);
    /* A device list that is neither one entry nor one per rank. */
    r = run(2, "0,0,0", tp8);
    assert_int_equal(r.code, 2);
    assert_int_equal(count(r.err, "has 3 entries"), 1);
    done(&r);
    /* A device only process 1 lacks: it says so, and every process stops with exit 1 (none waits). */
    const char *tp2[] = {"-m", stories(), "-n", "1", "--tensor-parallel-size", "2", NULL};
    r = run(2, "0,99", tp2);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "process 1: creating the Vulkan devices"));
    assert_null(strstr(r.err, "process 0:"));
    done(&r);
    /* An unreadable model: every process fails alike, exit 1. */
    const char *missing[] = {"-m", "/nonexistent/model.gguf", "-n", "1", "--tensor-parallel-size", "2", NULL};
    r = run(2, "0", missing);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.err, "/nonexistent/model.gguf"));
    done(&r);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MPIEXEC PATH/dcp-vk-run [TEST-NAME-PATTERN]\n", argv[0]);
        return 2;
    }
    mpiexec = argv[1];
    app = argv[2];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_same_text),
        cmocka_unit_test(test_deepseek2),
        cmocka_unit_test(test_spec_ngram),
        cmocka_unit_test(test_spec_draft),
    };
    if (argc > 3) cmocka_set_test_filter(argv[3]); /* one test by name */
    return cmocka_run_group_tests(tests, NULL, NULL);
}
