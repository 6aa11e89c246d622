/* dcp-vk-run end to end (the executable is argv[1]): exit codes and messages of usage,
 * configuration and model errors; --help lists every option; stories260K greedy from BOS gives the
 * 256 reference ids; the same prompt gives the same greedy text for every prefill chunk size;
 * same seed, same sampled text; the generated test model runs without -m. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"

static const char *app;

typedef dcp_test_result result;

/* Runs app with args (NULL-terminated), captures stdout and stderr. */
static result run_app(const char *const *args)
{
    const char *argv[48];
    int n = 0;
    argv[n++] = app;
    for (; args[n - 1]; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    return dcp_test_spawn(argv);
}

static void done(result *r) { dcp_test_result_free(r); }

static const char *stories(void) { return dcp_test_data_path("stories260K.gguf"); }

static void test_help(void **state)
{
    const char *a[] = {"--help", NULL};
    result r = run_app(a);
    assert_int_equal(r.code, 0);
    static const char *opts[] = {"-m", "-p", "-n", "--temp", "--top-k", "--top-p", "--seed", "-c",
                                 "--tensor-parallel-size", "--decode-context-parallel-size", "--dcp-comm-backend",
                                 "--cp-kv-cache-interleave-size", "--dcp-q-replicate", "--block-size",
                                 "--kv-dtype", "--devices", "--json", "--prefill-chunk"};
    for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
        if (!strstr(r.out, opts[i])) fail_msg("--help does not mention %s", opts[i]);
    assert_non_null(strstr(r.out, "default"));
    done(&r);
}

static void expect(const char *const *args, int code, const char *msg)
{
    result r = run_app(args);
    if (r.code != code || (msg && !strstr(r.err, msg)))
        fail_msg("%s %s ...: exit %d (want %d), stderr: %s", args[0], args[1] ? args[1] : "", r.code, code, r.err);
    done(&r);
}

static void test_errors(void **state)
{
    const char *s = stories();
    expect((const char *[]){"--bogus", NULL}, 2, "unknown option");
    expect((const char *[]){"-n", "x", NULL}, 2, "not a decimal integer");
    expect((const char *[]){"--temp", "-1", NULL}, 2, "--temp");
    expect((const char *[]){"--top-p", "0", NULL}, 2, "--top-p");
    expect((const char *[]){"--kv-dtype", "f8", NULL}, 2, "f16, f32");
    expect((const char *[]){"--dcp-comm-backend", "nccl", NULL}, 2, "a2a, ag_rs");
    expect((const char *[]){"-m", NULL}, 2, "needs a value");
    expect((const char *[]){"-m", "/nonexistent/model.gguf", "-n", "1", NULL}, 1, "/nonexistent/model.gguf");
    /* A file that is not GGUF. */
    char bad[] = "/tmp/dcp-vk-run-bad-XXXXXX";
    int fd = mkstemp(bad);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "not a gguf file", 15), 15);
    close(fd);
    expect((const char *[]){"-m", bad, NULL}, 1, bad);
    unlink(bad);
    /* vLLM's rules on stories260K (8 query heads, 4 KV heads). */
    expect((const char *[]){"-m", s, "--tensor-parallel-size", "3", NULL}, 2, "allows");
    expect((const char *[]){"-m", s, "--tensor-parallel-size", "8", "--decode-context-parallel-size", "3", NULL},
           2, "must divide --tensor-parallel-size");
    expect((const char *[]){"-m", s, "--tensor-parallel-size", "8", "--decode-context-parallel-size", "4", NULL},
           2, "TP / KV heads");
    expect((const char *[]){"-m", s, "--tensor-parallel-size", "4", "--decode-context-parallel-size", "2", NULL},
           2, "TP / KV heads");
    expect((const char *[]){"-m", s, "--cp-kv-cache-interleave-size", "3", NULL}, 2, "must divide --block-size");
    expect((const char *[]){"-m", s, "--tensor-parallel-size", "4", "--devices", "0,0", NULL}, 2, "needs 4 devices");
    expect((const char *[]){"-m", s, "-c", "16", "-n", "20", NULL}, 2, "exceed the context");
    expect((const char *[]){"-m", s, "--devices", "0,99", NULL}, 1, "99");
}

static void test_stories_reference(void **state)
{
    /* Empty prompt: BOS only; f32 KV; 256 greedy ids. */
    const char *a[] = {"-m", stories(), "-p", "", "-n", "256", "--temp", "0", "--kv-dtype", "f32", "--json", NULL};
    result r = run_app(a);
    if (r.code) fail_msg("exit %d: %s", r.code, r.err);
    static const char *want =
        "\"tokens\": [403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, "
        "337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, "
        "268, 388, 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, "
        "310, 439, 419, 357, 336, 432, 313, 438, 310, 432, 278, 316, 439, 419, 298, 414, 267, 265, 282, 295, 433, 426, "
        "436, 317, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400, 426, 338, 336, "
        "432, 313, 442, 391, 267, 337, 335, 364, 420, 268, 388, 432, 398, 359, 280, 303, 439, 413, 272, 417, 264, 312, "
        "426, 436, 13, 438, 310, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294, 267, 400, "
        "426, 338, 336, 432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 317, 426, 359, 279, 292, 416, 439, 413, 409, "
        "416, 327, 263, 415, 294, 267, 400, 426, 436, 13, 438, 310, 279, 292, 416, 439, 413, 391, 267, 281, 421, 427, "
        "311, 357, 432, 384, 358, 336, 432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 357, 426, 359, 279, 292, 416, "
        "439, 413, 409, 416, 327, 263, 415, 294, 267, 400, 426, 436, 320, 285, 357, 336, 432, 313, 455, 289, 439, 413, "
        "263, 304, 420, 422, 432, 317, 426, 410, 448, 411, 280, 303, 281, 421, 427, 364, 426]";
    if (!strstr(r.out, want)) fail_msg("tokens differ from the reference: %s", r.out);
    assert_non_null(strstr(r.out, "\"text\": \"Once upon a time, there was a little girl named Lily."));
    assert_non_null(strstr(r.out, "\"generated_tokens_per_s\": "));
    assert_non_null(strstr(r.out, "\"kv_bytes_per_rank\": "));
    done(&r);
}

static void test_prompt_same_text(void **state)
{
    /* Prefill chunk sizes at TP 1, then TP 2, TP 8, and TP 8 with DCP 2 (a2a, interleave 1; ag_rs,
     * interleave 16), on logical devices of device 0. The TP 8 / DCP 2 a2a run is what
     * `scripts/setup.sh run` prints (64 greedy tokens, default block size and KV type). */
    static const char *chunks[] = {"1", "3", "128", "128", "4", "128", "2"};
    static const char *tps[] = {"1", "1", "1", "2", "8", "8", "8"};
    static const char *dcps[] = {"1", "1", "1", "1", "1", "2", "2"};
    static const char *backends[] = {"a2a", "a2a", "a2a", "a2a", "a2a", "a2a", "ag_rs"};
    static const char *interleaves[] = {"1", "1", "1", "1", "1", "1", "16"};
    char *first = NULL;
    for (int i = 0; i < 7; i++) {
        const char *a[] = {"-m", stories(), "-p", "Once upon a time", "-n", "64", "--temp", "0", "--prefill-chunk",
                           chunks[i], "--tensor-parallel-size", tps[i], "--decode-context-parallel-size", dcps[i],
                           "--dcp-comm-backend", backends[i], "--cp-kv-cache-interleave-size", interleaves[i],
                           "--devices", i >= 3 ? "0,0,0,0,0,0,0,0" : "0", NULL};
        result r = run_app(a);
        if (r.code) fail_msg("exit %d: %s", r.code, r.err);
        assert_non_null(strstr(r.err, "tokens/s"));
        if (!first) {
            first = strdup(r.out);
            /* the story of the greedy reference ids (tests/data/README.md) */
            static const char story[] = "Once upon a time, there was a little girl named Lily. She loved to play "
                                        "outside in the park. One day, she saw a big, red ball.";
            if (strncmp(first, story, strlen(story))) fail_msg("TP 1 text is not the reference story: %s", first);
        } else if (strcmp(first, r.out)) {
            fail_msg("prefill chunk %s TP %s DCP %s %s gives\n%s\ninstead of\n%s", chunks[i], tps[i], dcps[i],
                     backends[i], r.out, first);
        }
        done(&r);
    }
    free(first);
}

static void test_seeded_sampling(void **state)
{
    const char *a[] = {"-m", stories(), "-n", "40", "--temp", "1.0", "--top-k", "20", "--top-p", "0.9", "--seed",
                       "7", NULL};
    result r1 = run_app(a), r2 = run_app(a);
    assert_int_equal(r1.code, 0);
    assert_int_equal(r2.code, 0);
    assert_string_equal(r1.out, r2.out);
    const char *b[] = {"-m", stories(), "-n", "40", "--temp", "1.0", "--top-k", "20", "--top-p", "0.9", "--seed",
                       "8", NULL};
    result r3 = run_app(b);
    assert_int_equal(r3.code, 0);
    assert_string_not_equal(r1.out, r3.out);
    done(&r1);
    done(&r2);
    done(&r3);
}

static void test_generated_model(void **state)
{
    const char *a[] = {"-n", "8", "--temp", "0", "--json", NULL};
    result r = run_app(a);
    if (r.code) fail_msg("exit %d: %s", r.code, r.err);
    assert_non_null(strstr(r.err, "generated test model"));
    assert_non_null(strstr(r.out, "\"generated_tokens\": 8"));
    done(&r);
    /* The generated model's text is noise, often byte tokens that do not form characters: printed,
     * it is still valid UTF-8 (U+FFFD for such bytes), sampled or greedy, at TP 8 / DCP 2 as
     * scripts/setup.sh ran it before; an ill-formed prompt is echoed the same way. */
    static const char *const temps[] = {"0", "1.5"};
    for (int i = 0; i < 2; i++) {
        const char *b[] = {"-p", "\xff\xe2\x82 tale", "-n", "96", "--temp", temps[i], "--seed", "3",
                           "--tensor-parallel-size", "8", "--decode-context-parallel-size", "2", "--devices",
                           "0,0,0,0,0,0,0,0", NULL};
        r = run_app(b);
        if (r.code) fail_msg("exit %d: %s", r.code, r.err);
        if (!dcp_test_valid_utf8(r.out, strlen(r.out))) fail_msg("--temp %s: output is not valid UTF-8", temps[i]);
        if (strncmp(r.out, "\xef\xbf\xbd\xef\xbf\xbd tale", 11))
            fail_msg("the prompt is not echoed as U+FFFD U+FFFD \" tale\": %s", r.out);
        done(&r);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/dcp-vk-run\n", argv[0]);
        return 2;
    }
    app = argv[1];
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),          cmocka_unit_test(test_errors),
        cmocka_unit_test(test_stories_reference), cmocka_unit_test(test_prompt_same_text),
        cmocka_unit_test(test_seeded_sampling), cmocka_unit_test(test_generated_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
