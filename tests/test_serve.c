/* dcp-vk-serve end to end (argv: the server executable, the folder of the Node client): the server
 * runs stories260K at TP 8 / DCP 2 on a free loopback port, and real clients talk to it:
 *  - 16 greedy completions of different lengths sent at once as streams (curl) give the same texts
 *    as one at a time (curl, non-streaming), and the requests did run together (/metrics);
 *  - the official OpenAI JavaScript client (npm `openai`, installed by scripts/setup.sh) streams the
 *    same 16 at once with the same texts, a chat completion (chatml), and lists the model;
 *  - malformed JSON, wrong types, a 10 MB body, max_tokens beyond the context, a negative
 *    temperature, an unknown model, an unknown route, a wrong method: each gets its 4xx with an
 *    OpenAI-style error body, and the server still serves;
 *  - a client that disconnects mid-stream: its request is cancelled and every rank's KV pages are
 *    free again (/metrics);
 *  - SIGTERM during a stream: the stream ends properly ([DONE]), new connections are refused, the
 *    server exits 0;
 *  - the sampling parameters (min_p, logit_bias, presence / frequency / repetition penalties,
 *    min_tokens, stop_token_ids, include_stop_str_in_output, ignore_eos) through the OpenAI client
 *    on both endpoints, streaming and not, with the texts of curl alone, a forced token stopping
 *    where min_tokens lets it, and a 400 naming the parameter for each value out of range;
 *  - logprobs through the OpenAI client (tests/serve/logprobs.mjs): completions' logprobs: N and
 *    chat's logprobs + top_logprobs, streaming and not, greedy and sampled: shapes, token texts
 *    concatenating to the text, exp of the top ones summing to <= 1, 400s for values out of range;
 *  - echo and prompt_logprobs through the OpenAI client (tests/serve/echo.mjs): the prompt text
 *    first, its entries first in the logprobs (the first null), max_tokens 0, raw values unchanged
 *    by sampling, no cached blocks taken, vLLM's prompt_logprobs agreeing with echo's, a stream's
 *    first chunk carrying the prompt; prompt_logprobs -1 (the whole vocabulary: every position's
 *    probabilities summing to 1, ranked, agreeing with k's) and its --max-prompt-logprobs-entries
 *    400; prompt_logprobs on chat beside the choices, streamed and not, -1 included;
 *  - n choices through the OpenAI client (tests/serve/choices.mjs): n = 3 on both endpoints,
 *    streaming and not: indexes, greedy choices equal to the n = 1 text, seeded choices
 *    reproducible (choice 0 the n = 1 one), usage with the prompt once and the completions summed;
 *  - JSON output through the OpenAI client (tests/serve/json_output.mjs): response_format
 *    json_schema output parses and matches its schema (both endpoints, streamed and not, greedy and
 *    sampled), json_object output that ends with "stop" parses as an object, "length" when
 *    max_tokens cuts it, unsupported keywords (pattern, minLength, anyOf, format) a 400 naming them;
 *  - every unknown field and every known-but-unsupported parameter (n: 17, prompt_logprobs 21,
 *    guided_json, a response_format schema keyword, ...) is refused with a 400 naming it, on both endpoints; their
 *    neutral values change nothing; \u0000 in a string, a NUL byte, data after the object, a
 *    stream_options without stream, seed -2 are refused; seed -1 is random; error bodies are valid
 *    UTF-8 and JSON whatever the request held (a model name cut mid-character, GET /%FF);
 *  - protocol: a Content-Length over the limit gets its 413 before the body (and instead of 100
 *    Continue), HEAD works where GET does, 405s carry their route's Allow, GET /v1/models/{id};
 *    one access-log line per request on stderr;
 *  - a second server (TP 1) with an API key (401 without it), without a chat template (chat: 400
 *    naming why; completions work), with a prompt limit (400 context_length_exceeded) and one slot
 *    without a queue (429 with Retry-After), logging JSON lines;
 *  - a third (TP 1, --no-enable-prefix-caching: nothing looked up) under hostile clients: 500 idle sockets from five loopback addresses, and still
 *    /health, /metrics and a completion answer at once; the idle ones are closed by
 *    --request-timeout, a client sending a byte now and then too; one address gets at most
 *    --max-connections-per-ip.
 *  - servers with --speculative-config (n-gram drafts; a draft model) give the 16 texts of the
 *    server without it, and count their drafts in /metrics;
 *  - vLLM's metrics (vllm:*, histograms of TTFT, ITL, e2e, queue, prefill, decode, token counts)
 *    parsed as a Prometheus scraper does, on a fresh server, against what the OpenAI client saw;
 *    every series vLLM's Grafana dashboard queries is there;
 *  - prefix caching (on by default): a long prompt sent twice reports usage.prompt_tokens_details.
 *    cached_tokens 0, then whole blocks of 16 x 2 tokens, with the same text; /metrics counts
 *    vllm:prefix_cache_queries_total and _hits_total in tokens (under mpiexec too);
 *  - KV offload (--kv-offloading-size, a fourth server, TP 1, 16 pages): a prompt's blocks evicted
 *    by another's go to host memory and come back for its second run (cached_tokens, the
 *    dcpvk_kv_offload_* counters), with the same text; the host pool's blocks are the size over the
 *    TP group's bytes of a block.
 * With MPIEXEC NPROCS after them, the TP 8 / DCP 2 server runs under `mpiexec -n NPROCS` (process 0
 * serves HTTP and plans, the others apply its steps): the texts, concurrency, disconnect and SIGTERM
 * checks again, KV offload's with the fourth server at TP 2 under mpiexec too, and speculative decoding's
 * (n-gram drafts and a draft model) with servers at TP 8 / DCP 2 under mpiexec. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <errno.h>
#include <poll.h>

#include "testutil.h"

/* A literal body and its length. */
#define BODY(s) s, strlen(s)

static const char *server_exe, *node_dir;
static const char *mpiexec, *nprocs; /* set: the shared server runs under `mpiexec -n nprocs` */

enum { NREQ = 16 };

typedef struct server {
    pid_t pid;
    int port;
    char err_path[256];
} server;

static server srv; /* the TP 8 / DCP 2 server the group shares */

static char *tmp_path(const char *tag)
{
    static char buf[8][256];
    static int k;
    char *p = buf[k++ % 8];
    const char *t = getenv("TMPDIR");
    snprintf(p, 256, "%s/dcp-vk-serve-test-%s-XXXXXX", t && *t ? t : "/tmp", tag);
    int fd = mkstemp(p);
    assert_true(fd >= 0);
    close(fd);
    return p;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static void write_file(const char *path, const char *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    fclose(f);
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Starts the server with extra args (NULL-terminated) on a free port; waits until it listens. */
/* Starts dcp-vk-serve on stories260K with args (NULL-terminated), under `mpiexec -n NPROCS` when
 * under_mpi and the test runs with MPIEXEC; waits until it listens. */
static void server_start_as(server *s, const char *const *args, bool under_mpi)
{
    const char *argv[48];
    int n = 0;
    if (mpiexec && under_mpi) {
        argv[n++] = mpiexec;
        argv[n++] = "-n";
        argv[n++] = nprocs;
    }
    argv[n++] = server_exe;
    argv[n++] = "-m";
    argv[n++] = dcp_test_data_path("stories260K.gguf");
    argv[n++] = "--port";
    argv[n++] = "0";
    for (int i = 0; args[i]; i++) argv[n++] = args[i];
    argv[n] = NULL;
    snprintf(s->err_path, sizeof s->err_path, "%s", tmp_path("stderr"));
    fflush(NULL);
    s->pid = fork();
    if (s->pid == 0) {
        int fd = open(s->err_path, O_WRONLY | O_TRUNC);
        int nul = open("/dev/null", O_WRONLY);
        dup2(fd, 2);
        dup2(nul, 1);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    const double t0 = now_s();
    for (;;) {
        char *err = slurp(s->err_path);
        const char *at = strstr(err, "listening on http://127.0.0.1:");
        if (at) {
            s->port = atoi(at + strlen("listening on http://127.0.0.1:"));
            free(err);
            break;
        }
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) fail_msg("dcp-vk-serve exited before listening: %s", err);
        free(err);
        if (now_s() - t0 > 300) fail_msg("dcp-vk-serve did not listen within 300 s");
        nap_ms(100);
    }
    assert_true(s->port > 0);
}

/* The shared server (srv) runs under mpiexec with MPIEXEC, the others in one process. */
static void server_start(server *s, const char *const *args) { server_start_as(s, args, s == &srv); }

/* SIGTERM; returns the exit code (fails after 120 s). */
static int server_stop(server *s)
{
    kill(s->pid, SIGTERM);
    const double t0 = now_s();
    int status = 0;
    while (waitpid(s->pid, &status, WNOHANG) != s->pid) {
        if (now_s() - t0 > 120) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            fail_msg("dcp-vk-serve did not stop within 120 s of SIGTERM");
        }
        nap_ms(50);
    }
    s->pid = 0;
    char *err = slurp(s->err_path);
    if (strstr(err, "dcp-vk: validation")) fail_msg("the server reported Vulkan validation messages:\n%s", err);
    if (!strstr(err, "stopped:")) fail_msg("the server did not say it stopped:\n%s", err);
    free(err);
    unlink(s->err_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- clients ---------------------------------------------------------------------------------- */

/* curl METHOD path [body]: returns the HTTP status (0: no connection); *resp the body (malloc'd);
 * *headers the response's header lines (malloc'd) when headers is not NULL. */
static int http_full(const server *s, const char *method, const char *path, const char *body, size_t body_len,
                     const char *extra_header, char **resp, char **headers)
{
    char url[256], *out = tmp_path("out"), *in = NULL, *hdr = headers ? tmp_path("hdr") : NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    const char *argv[24];
    int n = 0;
    argv[n++] = "curl";
    argv[n++] = "-sS";
    argv[n++] = "--max-time"; /* a server that hangs fails the test, not the test run */
    argv[n++] = "120";
    argv[n++] = "-o";
    argv[n++] = out;
    argv[n++] = "-w";
    argv[n++] = "%{http_code}";
    if (strcmp(method, "HEAD") == 0) {
        argv[n++] = "-I"; /* curl -X HEAD would wait for a body */
    } else {
        argv[n++] = "-X";
        argv[n++] = method;
    }
    if (hdr) {
        argv[n++] = "-D";
        argv[n++] = hdr;
    }
    if (body) {
        in = tmp_path("in");
        write_file(in, body, body_len);
        static char at[300];
        snprintf(at, sizeof at, "@%s", in);
        argv[n++] = "-H";
        argv[n++] = "Content-Type: application/json";
        argv[n++] = "--data-binary";
        argv[n++] = at;
    }
    if (extra_header) {
        argv[n++] = "-H";
        argv[n++] = extra_header;
    }
    argv[n++] = url;
    argv[n] = NULL;
    dcp_test_result r = dcp_test_spawn(argv);
    int status = atoi(r.out);
    dcp_test_result_free(&r);
    *resp = slurp(out);
    unlink(out);
    if (in) unlink(in);
    if (hdr) {
        *headers = slurp(hdr);
        unlink(hdr);
    }
    return status;
}

static int http(const server *s, const char *method, const char *path, const char *body, size_t body_len,
                const char *extra_header, char **resp)
{
    return http_full(s, method, path, body, body_len, extra_header, resp, NULL);
}

static int post(const server *s, const char *path, const char *body, char **resp)
{
    return http(s, "POST", path, body, strlen(body), NULL, resp);
}

/* A started curl streaming a completion into a file. */
typedef struct async_curl {
    pid_t pid;
    char out[256], in[256];
} async_curl;

static void curl_start(const server *s, const char *path, const char *body, async_curl *a)
{
    snprintf(a->out, sizeof a->out, "%s", tmp_path("sse"));
    snprintf(a->in, sizeof a->in, "%s", tmp_path("in"));
    write_file(a->in, body, strlen(body));
    char url[256], at[300];
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    snprintf(at, sizeof at, "@%s", a->in);
    fflush(NULL);
    a->pid = fork();
    if (a->pid == 0) {
        execlp("curl", "curl", "-sN", "-o", a->out, "-H", "Content-Type: application/json", "--data-binary", at, url,
               (char *)NULL);
        _exit(127);
    }
}

/* Waits for the curl; returns what it wrote. */
static char *curl_finish(async_curl *a)
{
    int status;
    waitpid(a->pid, &status, 0);
    char *s = slurp(a->out);
    unlink(a->out);
    unlink(a->in);
    return s;
}

/* The text of a completion (choices[0].text) and its finish reason; fails on other bodies. */
static char *completion_text(const char *json, char *finish, size_t cap)
{
    cJSON *j = cJSON_Parse(json);
    if (!j) fail_msg("not JSON: %s", json);
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItem(c, "text"), *f = cJSON_GetObjectItem(c, "finish_reason");
    if (!cJSON_IsString(t)) fail_msg("no choices[0].text in %s", json);
    char *text = strdup(t->valuestring);
    if (finish) snprintf(finish, cap, "%s", cJSON_IsString(f) ? f->valuestring : "");
    cJSON_Delete(j);
    return text;
}

/* The text of a completions event stream; checks the [DONE] end and one finish reason. */
static char *sse_text(const char *sse, char *finish, size_t cap)
{
    size_t len = 0;
    char *text = calloc(1, 1);
    bool done = false;
    finish[0] = 0;
    for (const char *p = sse; (p = strstr(p, "data: ")); p += 6) {
        const char *e = strstr(p, "\n\n");
        if (!e) fail_msg("an event without its blank line: %s", p);
        if (strncmp(p + 6, "[DONE]", 6) == 0) {
            done = true;
            break;
        }
        char *one = strndup(p + 6, (size_t)(e - p - 6));
        char f[32];
        char *t = completion_text(one, f, sizeof f);
        text = realloc(text, len + strlen(t) + 1);
        memcpy(text + len, t, strlen(t) + 1);
        len += strlen(t);
        if (f[0]) snprintf(finish, cap, "%s", f);
        free(t);
        free(one);
    }
    if (!done) fail_msg("the stream did not end with data: [DONE]: %s", sse);
    return text;
}

/* A metric's value (the first line starting with name + ' ' or name + '{' ... '} '). */
static double metric(const char *text, const char *name)
{
    const char *p = text;
    size_t n = strlen(name);
    while ((p = strstr(p, name))) {
        if ((p == text || p[-1] == '\n') && (p[n] == ' ' || p[n] == '{')) {
            const char *sp = strchr(p, ' ');
            return atof(sp + 1);
        }
        p += n;
    }
    fail_msg("no metric %s in:\n%s", name, text);
    return 0;
}

/* Sum of the per-rank KV pages in use. */
static double pages_used(const char *text)
{
    double sum = 0;
    for (const char *p = text; (p = strstr(p, "\ndcpvk_kv_pages_used{")); p++) sum += atof(strchr(p, '}') + 2);
    return sum;
}

/* usage.prompt_tokens_details.cached_tokens of a completion response (-1: missing). */
static int cached_tokens_of(const char *json)
{
    cJSON *j = cJSON_Parse(json);
    assert_non_null(j);
    const cJSON *d = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details");
    const cJSON *c = cJSON_GetObjectItem(d, "cached_tokens");
    const int v = cJSON_IsNumber(c) ? c->valueint : -1;
    cJSON_Delete(j);
    return v;
}

__attribute__((noinline)) static char *metrics(const server *s)
{
    char *m;
    assert_int_equal(http(s, "GET", "/metrics", NULL, 0, NULL, &m), 200);
    return m;
}

static void expect_healthy(const server *s)
{
    char *r;
    int st = http(s, "GET", "/health", NULL, 0, NULL, &r);
    if (st != 200) fail_msg("/health after the bad request: %d %s", st, r);
    free(r);
}

/* ---- the requests ------------------------------------------------------------------------------ */

static const char *const prompts[NREQ] = {
    "Once upon a time", "Lily saw a big", "The cat", "One day, Tom went to the park", "She was",
    "The little bird", "Sam and his mom", "In the garden there was", "Ben liked", "The sun",
    "A dog named Max", "They played", "The girl was sad because", "Mom said", "At night", "He wanted to"};

static int max_tokens_of(int i) { return 10 + 2 * i; }

static char *seq_texts[NREQ]; /* one at a time */

static char *body_of(int i, bool stream)
{
    char *b = malloc(512);
    snprintf(b, 512, "{\"model\": \"stories260K\", \"prompt\": \"%s\", \"max_tokens\": %d, \"temperature\": 0%s}",
             prompts[i], max_tokens_of(i), stream ? ", \"stream\": true" : "");
    return b;
}

static void test_one_at_a_time(void **state)
{
    (void)state;
    for (int i = 0; i < NREQ; i++) {
        char *b = body_of(i, false), *resp, finish[32];
        int st = post(&srv, "/v1/completions", b, &resp);
        if (st != 200) fail_msg("request %d: %d %s", i, st, resp);
        seq_texts[i] = completion_text(resp, finish, sizeof finish);
        assert_string_equal(finish, "length");
        assert_true(strlen(seq_texts[i]) > 0);
        free(resp);
        free(b);
    }
    /* The greedy story of the reference (stories260K README). */
    assert_non_null(strstr(seq_texts[0], ", there was a little girl named Lily"));
    /* What the decode steps took: dispatches over process 0's ranks and on its busiest one, host
     * waits (at least one a step: the host reads the sampled tokens). */
    char *m = metrics(&srv);
    const double steps = metric(m, "dcpvk_decode_steps_total"), waits = metric(m, "dcpvk_decode_step_host_waits_total");
    const double disp = metric(m, "dcpvk_decode_step_dispatches_total");
    const double rank_disp = metric(m, "dcpvk_decode_step_rank_dispatches_total");
    const double last = metric(m, "dcpvk_decode_step_dispatches"), last_rank = metric(m, "dcpvk_decode_step_rank_dispatches");
    const double last_waits = metric(m, "dcpvk_decode_step_host_waits");
    printf("%.0f decode steps: %.1f dispatches (busiest rank %.1f), %.1f host waits per step; the last %.0f (%.0f), %.0f\n",
           steps, disp / steps, rank_disp / steps, waits / steps, last, last_rank, last_waits);
    assert_true(steps >= NREQ);
    assert_true(waits >= steps && last_waits >= 1);
    assert_true(rank_disp > 0 && rank_disp <= disp && last_rank > 0 && last_rank <= last);
    assert_true(last_rank * 8 >= last); /* process 0 holds 8 ranks at most */
    free(m);
}

static void test_concurrent_curl(void **state)
{
    (void)state;
    char *m0 = metrics(&srv);
    const double steps0 = metric(m0, "dcpvk_steps_total"), seqs0 = metric(m0, "dcpvk_step_sequences_total");
    free(m0);
    async_curl a[NREQ];
    for (int i = 0; i < NREQ; i++) {
        char *b = body_of(i, true);
        curl_start(&srv, "/v1/completions", b, &a[i]);
        free(b);
    }
    for (int i = 0; i < NREQ; i++) {
        char *sse = curl_finish(&a[i]), finish[32];
        char *t = sse_text(sse, finish, sizeof finish);
        if (strcmp(t, seq_texts[i]))
            fail_msg("request %d: streamed among 16 '%s', alone '%s'", i, t, seq_texts[i]);
        assert_string_equal(finish, "length");
        free(t);
        free(sse);
    }
    char *m = metrics(&srv);
    const double steps = metric(m, "dcpvk_steps_total") - steps0, seqs = metric(m, "dcpvk_step_sequences_total") - seqs0;
    printf("16 concurrent streams: %.0f steps, %.1f requests per step on average, peak %.0f running\n", steps,
           seqs / steps, metric(m, "dcpvk_requests_running_peak"));
    assert_true(metric(m, "dcpvk_requests_running_peak") >= 4);
    assert_true(seqs / steps > 2.0); /* they ran together, not one after the other */
    assert_true(pages_used(m) == 0);
    free(m);
}

/* The 16 greedy completions again, at once as streams, from servers with speculative decoding (TP
 * 8 / DCP 2 like the shared one, under mpiexec too with MPIEXEC): n-gram drafts, and a draft model
 * (stories260K drafting for itself: its drafts are all accepted); the same texts as without, the
 * drafts counted in /metrics (vLLM's spec_decode counters). */
static void test_speculative(void **state)
{
    (void)state;
    char draft_cfg[512];
    snprintf(draft_cfg, sizeof draft_cfg, "{\"model\": \"%s\", \"num_speculative_tokens\": 3}",
             dcp_test_data_path("stories260K.gguf"));
    const char *configs[] = {
        "{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}",
        draft_cfg,
    };
    for (int c = 0; c < 2; c++) {
        const char *args[] = {"--tensor-parallel-size", "8", "--decode-context-parallel-size", "2", "--max-seqs", "16",
                              "-c", "256", "--speculative-config", configs[c], NULL};
        server s = {0};
        server_start_as(&s, args, true); /* under mpiexec too, with MPIEXEC: the draft's steps planned */
        async_curl a[NREQ];
        for (int i = 0; i < NREQ; i++) {
            char *b = body_of(i, true);
            curl_start(&s, "/v1/completions", b, &a[i]);
            free(b);
        }
        for (int i = 0; i < NREQ; i++) {
            char *sse = curl_finish(&a[i]), finish[32];
            char *t = sse_text(sse, finish, sizeof finish);
            if (strcmp(t, seq_texts[i]))
                fail_msg("%s: request %d: '%s', without speculation '%s'", configs[c], i, t, seq_texts[i]);
            assert_string_equal(finish, "length");
            free(t);
            free(sse);
        }
        char *m = metrics(&s);
        const double drafts = metric(m, "dcpvk_spec_decode_num_drafts_total"),
                     tokens = metric(m, "dcpvk_spec_decode_num_draft_tokens_total"),
                     acc = metric(m, "dcpvk_spec_decode_num_accepted_tokens_total"),
                     emitted = metric(m, "dcpvk_spec_decode_num_emitted_tokens_total"),
                     mean = metric(m, "dcpvk_spec_decode_mean_accepted_length");
        printf("%s: the 16 texts as without speculation; %.0f drafts, %.0f draft tokens, %.0f accepted, %.0f emitted, "
               "mean accepted length %.2f\n", configs[c], drafts, tokens, acc, emitted, mean);
        assert_true(drafts > 0 && acc > 0 && acc <= tokens);
        assert_true(emitted == acc + drafts);
        assert_true(fabs(mean - (1.0 + acc / drafts)) < 1e-3);
        if (c == 1) assert_true(acc == tokens); /* the model drafting for itself */
        assert_true(pages_used(m) == 0);
        free(m);
        assert_int_equal(server_stop(&s), 0);
    }
}

/* ---- the sampling parameters through the OpenAI client ----------------------------------------- */

/* A body for the client (model and stream added by it), and what it must give: a 400 naming
 * `param`; or 200 with the text of the same body sent alone by curl, the same streaming, finish
 * reason `finish` and completion_tokens `tokens` when given (0: any). Token 300 is some token of
 * stories260K's 512; 2 is its EOS. */
typedef struct param_case {
    bool chat;
    const char *body;
    const char *param;   /* refused: the param named */
    const char *finish;  /* NULL: any */
    int tokens;
} param_case;

#define CHAT_MSG "\"messages\": [{\"role\": \"user\", \"content\": \"Tell me about a dog.\"}]"
static const param_case param_cases[] = {
    {false, "{\"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"temperature\": 0, \"presence_penalty\": 1.5, "
            "\"frequency_penalty\": 0.5, \"repetition_penalty\": 2}", NULL, "length", 16},
    {true, "{" CHAT_MSG ", \"max_tokens\": 16, \"temperature\": 0, \"repetition_penalty\": 1.8}", NULL, NULL, 0},
    {false, "{\"prompt\": \"The cat\", \"max_tokens\": 20, \"temperature\": 0.9, \"seed\": 4, \"min_p\": 0.1, "
            "\"top_k\": 50, \"logit_bias\": {\"13\": -100, \"29\": 2.5}, \"repetition_penalty\": 1.2}", NULL, "length", 20},
    {true, "{" CHAT_MSG ", \"max_tokens\": 14, \"temperature\": 0.7, \"seed\": 9, \"frequency_penalty\": -0.5, "
           "\"presence_penalty\": 0.25, \"min_p\": 0.05}", NULL, NULL, 0},
    /* token 300 forced, as a stop token: masked by min_tokens 3, so the 4th token stops */
    {false, "{\"prompt\": \"Once\", \"max_tokens\": 10, \"temperature\": 0, \"logit_bias\": {\"300\": 100}, "
            "\"stop_token_ids\": [300], \"min_tokens\": 3}", NULL, "stop", 4},
    {true, "{" CHAT_MSG ", \"max_tokens\": 10, \"temperature\": 0, \"logit_bias\": {\"300\": 100}, "
           "\"stop_token_ids\": [300], \"min_tokens\": 3, \"include_stop_str_in_output\": true}", NULL, "stop", 4},
    /* EOS forced: stops at once, or not with ignore_eos */
    {false, "{\"prompt\": \"Once\", \"max_tokens\": 6, \"temperature\": 0, \"logit_bias\": {\"2\": 100}}", NULL, "stop", 1},
    {false, "{\"prompt\": \"Once\", \"max_tokens\": 6, \"temperature\": 0, \"logit_bias\": {\"2\": 100}, "
            "\"ignore_eos\": true}", NULL, "length", 6},
    {false, "{\"prompt\": \"Once\", \"max_tokens\": 6, \"temperature\": 0, \"logit_bias\": {\"2\": 100}, "
            "\"min_tokens\": 2}", NULL, "stop", 3},
    /* a stop string kept */
    {false, "{\"prompt\": \"Once upon a time\", \"max_tokens\": 30, \"temperature\": 0, \"stop\": [\"little\"], "
            "\"include_stop_str_in_output\": true}", NULL, "stop", 0},
    /* out of range: 400 naming the parameter */
    {false, "{\"prompt\": \"Once\", \"min_p\": 1.5}", "min_p", NULL, 0},
    {true, "{" CHAT_MSG ", \"presence_penalty\": -2.5}", "presence_penalty", NULL, 0},
    {false, "{\"prompt\": \"Once\", \"frequency_penalty\": 3}", "frequency_penalty", NULL, 0},
    {true, "{" CHAT_MSG ", \"repetition_penalty\": 0}", "repetition_penalty", NULL, 0},
    {false, "{\"prompt\": \"Once\", \"logit_bias\": {\"300\": 101}}", "logit_bias", NULL, 0},
    {true, "{" CHAT_MSG ", \"logit_bias\": {\"512\": 1}}", "logit_bias", NULL, 0},
    {false, "{\"prompt\": \"Once\", \"max_tokens\": 4, \"min_tokens\": 5}", "min_tokens", NULL, 0},
    {true, "{" CHAT_MSG ", \"stop_token_ids\": [-1]}", "stop_token_ids", NULL, 0},
    {false, "{\"prompt\": \"Once\", \"include_stop_str_in_output\": 1}", "include_stop_str_in_output", NULL, 0},
};
enum { NPARAM = sizeof param_cases / sizeof param_cases[0] };

static const char *str_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItem(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* The client's results against curl's answers to the same bodies, one at a time. */
static void check_param_cases(const cJSON *res)
{
    if (cJSON_GetArraySize(res) != NPARAM) fail_msg("the client gave %d results for %d bodies", cJSON_GetArraySize(res), NPARAM);
    char *plain_once = NULL;
    for (int i = 0; i < NPARAM; i++) {
        const param_case *c = &param_cases[i];
        const cJSON *x = cJSON_GetArrayItem(res, i);
        char *out = cJSON_PrintUnformatted(x);
        if (c->param) {
            const cJSON *stv = cJSON_GetObjectItem(x, "status");
            if (!cJSON_IsNumber(stv) || stv->valueint != 400 || strcmp(str_of(x, "param"), c->param))
                fail_msg("%s: want a 400 naming %s, got %s", c->body, c->param, out);
            free(out);
            continue;
        }
        if (cJSON_GetObjectItem(x, "status")) fail_msg("%s: refused: %s", c->body, out);
        const char *text = str_of(x, "text");
        if (strcmp(text, str_of(x, "stream_text")) || strcmp(str_of(x, "finish"), str_of(x, "stream_finish")))
            fail_msg("%s: streaming gave another answer: %s", c->body, out);
        if (c->finish && strcmp(str_of(x, "finish"), c->finish)) fail_msg("%s: finish is not %s: %s", c->body, c->finish, out);
        const cJSON *u = cJSON_GetObjectItem(cJSON_GetObjectItem(x, "usage"), "completion_tokens");
        if (c->tokens && !(cJSON_IsNumber(u) && u->valueint == c->tokens))
            fail_msg("%s: completion_tokens is not %d: %s", c->body, c->tokens, out);
        /* alone, through curl: the same text (batch invariance through the server) */
        char *resp;
        int st = post(&srv, c->chat ? "/v1/chat/completions" : "/v1/completions", c->body, &resp);
        if (st != 200) fail_msg("%s: curl got %d: %s", c->body, st, resp);
        cJSON *j = cJSON_Parse(resp);
        const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
        const char *alone = c->chat ? str_of(cJSON_GetObjectItem(ch, "message"), "content") : str_of(ch, "text");
        if (strcmp(alone, text)) fail_msg("%s: alone '%s', with the client's others '%s'", c->body, alone, text);
        if (i == 9 && !(strlen(text) >= 6 && strcmp(text + strlen(text) - 6, "little") == 0))
            fail_msg("include_stop_str_in_output: '%s' does not end with the stop string", text);
        if (i == 0) { /* the penalties change the greedy text */
            const char *plain = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 16, \"temperature\": 0}";
            char *r2;
            assert_int_equal(post(&srv, "/v1/completions", plain, &r2), 200);
            plain_once = completion_text(r2, NULL, 0);
            if (!strcmp(plain_once, text)) fail_msg("the penalties changed nothing: '%s'", text);
            free(r2);
        }
        cJSON_Delete(j);
        free(resp);
        free(out);
    }
    printf("sampling parameters through the OpenAI client: %d bodies; greedy with penalties '%s', without '%s'\n",
           NPARAM, str_of(cJSON_GetArrayItem(res, 0), "text"), plain_once ? plain_once : "");
    free(plain_once);
}

static void test_openai_client(void **state)
{
    (void)state;
    char *reqs = tmp_path("reqs"), script[512], base[128];
    {
        cJSON *arr = cJSON_CreateArray();
        for (int i = 0; i < NREQ; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "prompt", prompts[i]);
            cJSON_AddNumberToObject(o, "max_tokens", max_tokens_of(i));
            cJSON_AddItemToArray(arr, o);
        }
        char *s = cJSON_PrintUnformatted(arr);
        write_file(reqs, s, strlen(s));
        free(s);
        cJSON_Delete(arr);
    }
    snprintf(script, sizeof script, "%s/openai_client.mjs", node_dir);
    char mod[512];
    snprintf(mod, sizeof mod, "%s/node_modules/openai/package.json", node_dir);
    struct stat stt;
    if (stat(mod, &stt) != 0)
        fail_msg("the OpenAI JavaScript client is not installed in %s/node_modules (scripts/setup.sh runs npm ci "
                 "there)", node_dir);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    char *params = tmp_path("params");
    {
        char *txt = NULL;
        size_t n = 0;
        FILE *m = open_memstream(&txt, &n);
        fputc('[', m);
        for (size_t i = 0; i < NPARAM; i++)
            fprintf(m, "%s{\"chat\": %s, \"body\": %s}", i ? ", " : "", param_cases[i].chat ? "true" : "false",
                    param_cases[i].body);
        fputc(']', m);
        fclose(m);
        write_file(params, txt, n);
        free(txt);
    }
    const char *argv[] = {"node", script, base, "stories260K", reqs, params, NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    unlink(reqs);
    unlink(params);
    if (r.code != 0) fail_msg("node openai_client.mjs: exit %d: %s %s", r.code, r.err, r.out);
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("node printed no JSON: %s", r.out);
    const cJSON *texts = cJSON_GetObjectItem(j, "texts"), *fin = cJSON_GetObjectItem(j, "finish");
    assert_int_equal(cJSON_GetArraySize(texts), NREQ);
    for (int i = 0; i < NREQ; i++) {
        const char *t = cJSON_GetArrayItem(texts, i)->valuestring;
        if (strcmp(t, seq_texts[i])) fail_msg("OpenAI client, request %d: '%s', alone '%s'", i, t, seq_texts[i]);
        assert_string_equal(cJSON_GetArrayItem(fin, i)->valuestring, "length");
    }
    const cJSON *chat = cJSON_GetObjectItem(j, "chat");
    assert_true(cJSON_IsString(chat) && strlen(chat->valuestring) > 0);
    assert_string_equal(cJSON_GetObjectItem(j, "chat_finish")->valuestring, "length");
    assert_string_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "models"), 0)->valuestring, "stories260K");
    /* models.retrieve, its 404, and a refused parameter as the client sees them */
    assert_string_equal(cJSON_GetObjectItem(j, "retrieved")->valuestring, "stories260K");
    const cJSON *missing = cJSON_GetObjectItem(j, "missing"), *refused = cJSON_GetObjectItem(j, "refused");
    if (!cJSON_IsObject(missing) || cJSON_GetObjectItem(missing, "status")->valueint != 404 ||
        strcmp(cJSON_GetObjectItem(missing, "code")->valuestring, "model_not_found"))
        fail_msg("models.retrieve of a missing model: %s", r.out);
    if (!cJSON_IsObject(refused) || cJSON_GetObjectItem(refused, "status")->valueint != 400 ||
        strcmp(cJSON_GetObjectItem(refused, "param")->valuestring, "n"))
        fail_msg("n: 17 through the client: %s", r.out);
    check_param_cases(cJSON_GetObjectItem(j, "params"));
    /* The chat text is the greedy continuation of the chatml rendering (the same as a completion of it). */
    char *resp, finish[32];
    const char *chatml = "{\"prompt\": \"<|im_start|>system\\nYou tell stories.<|im_end|>\\n<|im_start|>user\\nTell "
                         "me about a cat.<|im_end|>\\n<|im_start|>assistant\\n\", \"max_tokens\": 12, \"temperature\": 0}";
    assert_int_equal(post(&srv, "/v1/completions", chatml, &resp), 200);
    char *want = completion_text(resp, finish, sizeof finish);
    assert_string_equal(chat->valuestring, want);
    free(want);
    free(resp);
    cJSON_Delete(j);
    dcp_test_result_free(&r);
}

/* vLLM's metrics on a fresh TP 1 server with two slots (so that some of the 6 requests queue): the
 * Node script (tests/serve/vllm_metrics.mjs) parses /metrics as a Prometheus scraper does, before
 * and after 6 streams sent at once with the OpenAI client, and checks names, labels, buckets,
 * counts and sums against what the client saw. */
static void test_vllm_metrics(void **state)
{
    (void)state;
    server s;
    const char *args[] = {"--max-seqs", "2", "-c", "256", NULL};
    server_start(&s, args);
    char script[512], root[128];
    snprintf(script, sizeof script, "%s/vllm_metrics.mjs", node_dir);
    snprintf(root, sizeof root, "http://127.0.0.1:%d", s.port);
    const char *argv[] = {"node", script, root, "stories260K", "6", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("node vllm_metrics.mjs: exit %d: %s %s", r.code, r.err, r.out);
    printf("vllm metrics: %s", r.out);
    dcp_test_result_free(&r);
    assert_int_equal(server_stop(&s), 0);
}

/* logprobs through the OpenAI client on the shared server (tests/serve/logprobs.mjs checks it all). */
static void test_logprobs(void **state)
{
    (void)state;
    char script[512], base[128];
    snprintf(script, sizeof script, "%s/logprobs.mjs", node_dir);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    const char *argv[] = {"node", script, base, "stories260K", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("node logprobs.mjs: exit %d: %s %s", r.code, r.err, r.out);
    printf("logprobs: %s", r.out);
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("node printed no JSON: %s", r.out);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "refused")), 7);
    cJSON_Delete(j);
    dcp_test_result_free(&r);
    expect_healthy(&srv);
}

/* echo and prompt_logprobs through the OpenAI client on the shared server (tests/serve/echo.mjs). */
static void test_echo(void **state)
{
    (void)state;
    char script[512], base[128];
    snprintf(script, sizeof script, "%s/echo.mjs", node_dir);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    const char *argv[] = {"node", script, base, "stories260K", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("node echo.mjs: exit %d: %s %s", r.code, r.err, r.out);
    printf("echo: %s", r.out);
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("node printed no JSON: %s", r.out);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "refused")), 8);
    cJSON_Delete(j);
    dcp_test_result_free(&r);
    expect_healthy(&srv);
}

/* n choices through the OpenAI client on the shared server (tests/serve/choices.mjs checks it all). */
static void test_choices(void **state)
{
    (void)state;
    char script[512], base[128];
    snprintf(script, sizeof script, "%s/choices.mjs", node_dir);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    const char *argv[] = {"node", script, base, "stories260K", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("node choices.mjs: exit %d: %s %s", r.code, r.err, r.out);
    printf("choices: %s", r.out);
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("node printed no JSON: %s", r.out);
    assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "chat"), "seeded")), 3);
    cJSON_Delete(j);
    dcp_test_result_free(&r);
    expect_healthy(&srv);
}

/* JSON output through the OpenAI client on the shared server (tests/serve/json_output.mjs checks it:
 * json_object parses, json_schema matches its schema, unsupported keywords are a 400 naming them). */
static void test_json_output(void **state)
{
    (void)state;
    char script[512], base[128];
    snprintf(script, sizeof script, "%s/json_output.mjs", node_dir);
    snprintf(base, sizeof base, "http://127.0.0.1:%d/v1", srv.port);
    const char *argv[] = {"node", script, base, "stories260K", NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    if (r.code != 0) fail_msg("node json_output.mjs: exit %d: %s %s", r.code, r.err, r.out);
    printf("json_output: %s", r.out);
    cJSON *j = cJSON_Parse(r.out);
    if (!j) fail_msg("node printed no JSON: %s", r.out);
    assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(j, "refused")) >= 4);
    assert_true(cJSON_GetObjectItem(j, "parsed")->valueint >= 8);
    cJSON_Delete(j);
    dcp_test_result_free(&r);
    expect_healthy(&srv);
}

/* One bad request: its status, an OpenAI error body (error.message containing msg, error.param when
 * given), then the server still serves. */
static void expect_error(const char *method, const char *path, const char *body, size_t len, int status,
                         const char *param, const char *msg)
{
    char *resp;
    int st = http(&srv, method, path, body, len, NULL, &resp);
    if (st != status) fail_msg("%s %s: status %d (want %d): %s", method, path, st, status, resp);
    if (!dcp_test_valid_utf8(resp, strlen(resp))) fail_msg("%s %s: the error body is not UTF-8: %s", method, path, resp);
    cJSON *j = cJSON_Parse(resp);
    const cJSON *e = j ? cJSON_GetObjectItem(j, "error") : NULL;
    const cJSON *m = e ? cJSON_GetObjectItem(e, "message") : NULL, *p = e ? cJSON_GetObjectItem(e, "param") : NULL;
    if (!cJSON_IsString(m) || !cJSON_IsString(cJSON_GetObjectItem(e, "type")))
        fail_msg("%s %s: not an OpenAI error body: %s", method, path, resp);
    if (msg && !strstr(m->valuestring, msg)) fail_msg("%s %s: message '%s' lacks '%s'", method, path, m->valuestring, msg);
    if (param && !(cJSON_IsString(p) && strcmp(p->valuestring, param) == 0))
        fail_msg("%s %s: param is not '%s': %s", method, path, param, resp);
    cJSON_Delete(j);
    free(resp);
    expect_healthy(&srv);
}

static void test_bad_requests(void **state)
{
    (void)state;
    const char *bad_json = "{\"prompt\": \"Once\", \"max_tokens\": ";
    expect_error("POST", "/v1/completions", bad_json, strlen(bad_json), 400, NULL, "could not parse the JSON");
    expect_error("POST", "/v1/completions", BODY("[1, 2]"), 400, NULL, "must be a JSON object");
    const char *types[][2] = {
        {"{\"prompt\": \"Once\", \"max_tokens\": \"ten\"}", "max_tokens"},
        {"{\"prompt\": \"Once\", \"stream\": \"yes\"}", "stream"},
        {"{\"prompt\": {\"text\": \"Once\"}}", "prompt"},
        {"{\"prompt\": \"Once\", \"stop\": 7}", "stop"},
        {"{\"prompt\": \"Once\", \"max_tokens\": 2.5}", "max_tokens"},
        {"{\"prompt\": [1, 99999]}", "prompt"},
        {"{\"max_tokens\": 4}", "prompt"},
        {"{\"messages\": \"hi\"}", "messages"},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
        const char *path = strstr(types[i][0], "messages") ? "/v1/chat/completions" : "/v1/completions";
        expect_error("POST", path, types[i][0], strlen(types[i][0]), 400, types[i][1], NULL);
    }
    /* 10 MB of JSON. */
    const size_t big = 10u << 20;
    char *huge = malloc(big + 64);
    size_t k = (size_t)sprintf(huge, "{\"prompt\": \"");
    memset(huge + k, 'a', big - k - 2);
    memcpy(huge + big - 2, "\"}", 2);
    expect_error("POST", "/v1/completions", huge, big, 413, NULL, "at most 1048576 are allowed (--max-body-bytes)");
    free(huge);
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"max_tokens\": 256}"), 400, "max_tokens",
                 "maximum context length is 256");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"max_tokens\": 100000}"), 400, "max_tokens",
                 "at most 256");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"temperature\": -0.5}"), 400, "temperature",
                 NULL);
    expect_error("POST", "/v1/completions", BODY("{\"model\": \"gpt-4\", \"prompt\": \"Once\"}"), 404, "model",
                 "does not exist");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"n\": 17}"), 400, "n", "[1, 16]");
    expect_error("GET", "/v1/nothing", NULL, 0, 404, NULL, "no such route");
    expect_error("GET", "/v1/completions", NULL, 0, 405, NULL, "not allowed");
    /* Still serving, with the reference text. */
    char *resp, finish[32];
    char *b = body_of(0, false);
    assert_int_equal(post(&srv, "/v1/completions", b, &resp), 200);
    char *t = completion_text(resp, finish, sizeof finish);
    assert_string_equal(t, seq_texts[0]);
    free(t);
    free(resp);
    free(b);
}

/* ---- fields: unknown ones and known ones not implemented ------------------------------------- */

/* Every parameter the server knows and does not implement (apps/serve/api.c, `refused`), with a
 * value that asks for something; and names it does not know at all. */
static const char *const refused_fields[][2] = {
    {"n", "17"}, {"n", "0"}, {"best_of", "3"}, {"use_beam_search", "true"}, {"length_penalty", "0.5"}, {"echo", "\"yes\""},
    {"suffix", "\"the end\""}, {"logprobs", "21"}, {"logprobs", "\"5\""}, {"top_logprobs", "2"},
    {"prompt_logprobs", "21"}, {"typical_p", "0.5"}, {"skip_special_tokens", "false"},
    {"spaces_between_special_tokens", "false"}, {"truncate_prompt_tokens", "4"},
    {"response_format", "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"pattern\": \"a\"}}}"},
    {"response_format", "{\"type\": \"xml\"}"}, {"grammar", "\"root ::= \\\"a\\\"\""},
    {"json_schema", "{\"type\": \"object\"}"}, {"guided_json", "{\"type\": \"object\"}"}, {"guided_regex", "\"a+\""},
    {"guided_choice", "[\"a\", \"b\"]"}, {"guided_grammar", "\"root ::= \\\"a\\\"\""},
    {"guided_decoding_backend", "\"xgrammar\""}, {"tools", "[{\"type\": \"function\"}]"}, {"tool_choice", "\"auto\""},
    {"parallel_tool_calls", "true"}, {"functions", "[{\"name\": \"f\"}]"}, {"function_call", "\"auto\""},
    {"chat_template", "\"{{ messages }}\""}, {"chat_template_kwargs", "{}"}, {"add_generation_prompt", "false"},
    {"continue_final_message", "true"}, {"reasoning_effort", "\"low\""}, {"modalities", "[\"audio\"]"},
    {"audio", "{}"}, {"prediction", "{}"},
    /* unknown */
    {"foo", "1"}, {"max_new_tokens", "5"}, {"Temperature", "0"}, {"mirostat", "2"}, {"stream_option", "{}"},
    {"", "1"}, {"\xff\xfe", "1"}, {"top\\u00e9", "1"},
};

static void test_refused_fields(void **state)
{
    (void)state;
    for (int chat = 0; chat < 2; chat++) {
        const char *path = chat ? "/v1/chat/completions" : "/v1/completions";
        const char *base = chat ? "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]" : "\"prompt\": \"Once\"";
        for (size_t i = 0; i < sizeof refused_fields / sizeof refused_fields[0]; i++) {
            char body[512], *resp;
            snprintf(body, sizeof body, "{%s, \"max_tokens\": 4, \"%s\": %s}", base, refused_fields[i][0],
                     refused_fields[i][1]);
            int st = http(&srv, "POST", path, body, strlen(body), NULL, &resp);
            if (st != 400) fail_msg("%s %s: status %d, want 400: %s", path, body, st, resp);
            if (!dcp_test_valid_utf8(resp, strlen(resp))) fail_msg("%s %s: not UTF-8: %s", path, body, resp);
            cJSON *j = cJSON_Parse(resp);
            const cJSON *e = cJSON_GetObjectItem(j, "error"), *p = cJSON_GetObjectItem(e, "param");
            const cJSON *m = cJSON_GetObjectItem(e, "message");
            if (!cJSON_IsString(m)) fail_msg("%s %s: not an OpenAI error: %s", path, body, resp);
            /* the param names the field (a name that is not UTF-8 comes back as U+FFFD) */
            const char *want = refused_fields[i][0];
            if (strcmp(want, "\xff\xfe") == 0) want = "\xef\xbf\xbd\xef\xbf\xbd";
            if (strcmp(want, "top\\u00e9") == 0) want = "top\xc3\xa9";
            if (want[0] ? !(cJSON_IsString(p) && strcmp(p->valuestring, want) == 0) : !cJSON_IsNull(p))
                fail_msg("%s %s: param is not '%s': %s", path, body, want, resp);
            cJSON_Delete(j);
            free(resp);
        }
        /* the other endpoint's prompt field */
        char *resp;
        const char *other = chat ? "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"prompt\": \"Once\"}"
                                 : "{\"prompt\": \"Once\", \"messages\": []}";
        assert_int_equal(http(&srv, "POST", path, other, strlen(other), NULL, &resp), 400);
        assert_non_null(strstr(resp, chat ? "\"param\":\"prompt\"" : "\"param\":\"messages\""));
        free(resp);
    }
    /* Neutral values ask for nothing: the greedy text is the one of the plain request. */
    char *resp, finish[32];
    const char *neutral = "{\"model\": \"stories260K\", \"prompt\": \"Once upon a time\", \"max_tokens\": 10, "
                          "\"temperature\": 0, \"n\": 1, \"best_of\": 1, \"echo\": false, \"logprobs\": null, "
                          "\"logit_bias\": {}, \"presence_penalty\": 0, \"frequency_penalty\": 0, "
                          "\"repetition_penalty\": 1, \"min_p\": 0, \"min_tokens\": 0, \"stop_token_ids\": [], "
                          "\"include_stop_str_in_output\": false, \"response_format\": {\"type\": \"text\"}, "
                          "\"tools\": [], \"suffix\": \"\", \"user\": \"test\", \"stream_options\": null}";
    int st = post(&srv, "/v1/completions", neutral, &resp);
    if (st != 200) fail_msg("neutral values: %d %s", st, resp);
    char *t = completion_text(resp, finish, sizeof finish);
    assert_string_equal(t, seq_texts[0]);
    free(t);
    free(resp);
    expect_healthy(&srv);
}

/* Bodies that cJSON alone would take wrongly, and the smaller checks. */
static void test_body_checks(void **state)
{
    (void)state;
    /* "Once\u0000 upon" was 2 prompt tokens: cJSON ends the string at the NUL */
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\\u0000 upon\", \"max_tokens\": 2}"), 400, "prompt",
                 "\\u0000");
    expect_error("POST", "/v1/completions", BODY("{\"pro\\u0000mpt\": \"Once\", \"max_tokens\": 2}"), 400, NULL,
                 "\\u0000");
    expect_error("POST", "/v1/chat/completions",
                 BODY("{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000b\"}]}"), 400, "messages", "\\u0000");
    const char nul_body[] = "{\"prompt\": \"Once\", \"max_tokens\": 2}\0{\"x\": 1}";
    expect_error("POST", "/v1/completions", nul_body, sizeof nul_body - 1, 400, NULL, "NUL byte at offset");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"max_tokens\": 2} {\"prompt\": \"x\"}"), 400,
                 NULL, "data after the object");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"max_tokens\": 2}]"), 400, NULL,
                 "data after the object");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"max_tokens\": 2, \"max_tokens\": 200}"), 400,
                 "max_tokens", "given twice");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"stream_options\": {\"include_usage\": true}}"),
                 400, "stream_options", "only allowed with");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"seed\": -2}"), 400, "seed", "-1 for a random");
    /* A model name of 70 three-byte characters, cut by the message mid-character. */
    char body[512];
    int k = snprintf(body, sizeof body, "{\"model\": \"");
    for (int i = 0; i < 70; i++) k += snprintf(body + k, sizeof body - (size_t)k, "\xe3\x83\xad");
    snprintf(body + k, sizeof body - (size_t)k, "\", \"prompt\": \"Once\"}");
    expect_error("POST", "/v1/completions", body, strlen(body), 404, "model", "does not exist");
    /* Whitespace after the object is fine. */
    char *resp, finish[32];
    assert_int_equal(post(&srv, "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 10, "
                                                   "\"temperature\": 0}\r\n\t \n", &resp), 200);
    char *t = completion_text(resp, finish, sizeof finish);
    assert_string_equal(t, seq_texts[0]);
    free(t);
    free(resp);
    /* seed: a given one repeats its text; -1 draws a new one each time (three sampled texts of 24
     * tokens at temperature 1 that are all equal: not with random seeds). */
    char *texts[3];
    for (int i = 0; i < 3; i++) {
        const char *b = i < 2 ? "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 1, \"top_k\": 0, "
                                "\"ignore_eos\": true, \"seed\": 7}"
                              : "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, \"temperature\": 1, \"top_k\": 0, "
                                "\"ignore_eos\": true, \"seed\": 8}";
        assert_int_equal(post(&srv, "/v1/completions", b, &resp), 200);
        texts[i] = completion_text(resp, finish, sizeof finish);
        free(resp);
    }
    assert_string_equal(texts[0], texts[1]);
    assert_string_not_equal(texts[0], texts[2]);
    for (int i = 0; i < 3; i++) {
        free(texts[i]);
        assert_int_equal(post(&srv, "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 24, "
                                                       "\"temperature\": 1, \"top_k\": 0, \"ignore_eos\": true, "
                                                       "\"seed\": -1}", &resp), 200);
        texts[i] = completion_text(resp, finish, sizeof finish);
        free(resp);
    }
    if (strcmp(texts[0], texts[1]) == 0 && strcmp(texts[1], texts[2]) == 0)
        fail_msg("seed -1 gave the same text three times: '%s'", texts[0]);
    for (int i = 0; i < 3; i++) free(texts[i]);
}

/* ---- raw sockets ------------------------------------------------------------------------------ */

/* A connection to s from source address src (NULL: any); -1 when it could not connect. */
static int connect_from(const server *s, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    if (src) {
        assert_int_equal(inet_pton(AF_INET, src, &sa.sin_addr), 1);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) fail_msg("bind %s: %s", src, strerror(errno));
    }
    sa.sin_port = htons((uint16_t)s->port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Whether the server has closed fd (end of stream or reset), waiting at most ms for it. */
static bool closed_by_server(int fd, int ms)
{
    struct pollfd p = {fd, POLLIN, 0};
    if (poll(&p, 1, ms) <= 0) return false;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Sends req on a new connection and reads until the server closes it (at most timeout s). */
static char *exchange(const server *s, const char *req, size_t len, double timeout)
{
    int fd = connect_from(s, NULL);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, req, len), (ssize_t)len);
    size_t cap = 1 << 16, got = 0;
    char *buf = malloc(cap);
    const double t0 = now_s();
    while (got + 1 < cap && now_s() - t0 < timeout) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = read(fd, buf + got, cap - 1 - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    buf[got] = 0;
    close(fd);
    return buf;
}

/* The body of a raw response: valid UTF-8, an OpenAI error with this code. */
static void expect_raw_error(const char *what, const char *resp, const char *status_line, const char *code)
{
    if (strncmp(resp, status_line, strlen(status_line))) fail_msg("%s: '%s', want '%s'", what, resp, status_line);
    const char *b = strstr(resp, "\r\n\r\n");
    if (!b) fail_msg("%s: no body: %s", what, resp);
    b += 4;
    if (!dcp_test_valid_utf8(b, strlen(b))) fail_msg("%s: the body is not UTF-8: %s", what, b);
    cJSON *j = cJSON_Parse(b);
    const cJSON *c = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "code");
    if (!cJSON_IsString(c) || strcmp(c->valuestring, code)) fail_msg("%s: not a JSON error '%s': %s", what, code, b);
    cJSON_Delete(j);
}

/* HTTP that is not HTTP/1.x (the gate answers it, serve/gate.c): each gets its status with a JSON
 * error naming what was wrong, the connection closes, and s serves on. */
static void test_unparsable(const server *s)
{
    char big[40000];
    int k = snprintf(big, sizeof big, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ");
    memset(big + k, 'a', sizeof big - (size_t)k - 5);
    memcpy(big + sizeof big - 5, "\r\n\r\n", 5); /* the NUL ends the string */
    const struct {
        const char *what, *req, *status, *code, *msg;
    } cases[] = {
        {"a malformed header line", "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nThis is not a header\r\n\r\n",
         "HTTP/1.1 400", "bad_request", "'This is not a header'"},
        {"a space before the colon", "GET /health HTTP/1.1\r\nHost : 127.0.0.1\r\n\r\n", "HTTP/1.1 400",
         "bad_request", "not a field name, a colon"},
        {"a header block over --max-header-bytes", big, "HTTP/1.1 431", "headers_too_large", "16384 bytes"},
        {"HTTP/2.0", "GET /health HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 505",
         "http_version_not_supported", "'HTTP/2.0'"},
        {"HTTP/9.9", "GET /health HTTP/9.9\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 505",
         "http_version_not_supported", "'HTTP/9.9'"},
        {"a garbage request line", "\x16\x03\x01 hello there\r\n\r\n", "HTTP/1.1 400", "bad_request",
         "the request line"},
        {"a request line without a version", "GET /health\r\nHost: 127.0.0.1\r\n\r\n", "HTTP/1.1 400",
         "bad_request", "no HTTP version"},
        {"HTTP/1.1 without Host", "GET /health HTTP/1.1\r\n\r\n", "HTTP/1.1 400", "bad_request", "Host header"},
        {"a Content-Length that is not a number",
         "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 12a\r\n\r\n{}", "HTTP/1.1 400",
         "bad_request", "Content-Length is not a number"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const double t0 = now_s();
        char *r = exchange(s, cases[i].req, strlen(cases[i].req), 10);
        const double t = now_s() - t0;
        expect_raw_error(cases[i].what, r, cases[i].status, cases[i].code);
        if (!strstr(r, "Content-Type: application/json")) fail_msg("%s: not JSON: %s", cases[i].what, r);
        if (!strstr(r, cases[i].msg)) fail_msg("%s: the message does not say '%s': %s", cases[i].what, cases[i].msg, r);
        if (t > 5) fail_msg("%s: answered and closed after %.1f s", cases[i].what, t); /* not by a timeout */
        free(r);
        expect_healthy(s);
    }
    /* The gate's answers are in the access log. */
    char *err = slurp(s->err_path);
    if (!strstr(err, " GET /health 505 prompt_tokens=0 completion_tokens=0 time_ms=") || !strstr(err, "end=bad_request"))
        fail_msg("no access-log line for the 505:\n%.4000s", err);
    free(err);
}

static void test_protocol(void **state)
{
    (void)state;
    /* A body over --max-body-bytes: refused from its Content-Length, before the body (none is sent
     * here), and answered 413 instead of 100 Continue. */
    const char *expect100 = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                            "Content-Length: 10000000\r\nExpect: 100-continue\r\n\r\n";
    const double t0 = now_s();
    char *r = exchange(&srv, expect100, strlen(expect100), 30);
    printf("Expect: 100-continue with Content-Length 10000000: answered in %.0f ms\n", (now_s() - t0) * 1e3);
    if (strstr(r, "100 Continue")) fail_msg("100 Continue for a body over the limit: %s", r);
    expect_raw_error("Expect: 100-continue", r, "HTTP/1.1 413", "body_too_large");
    free(r);
    const char *big = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n{\"pro";
    r = exchange(&srv, big, strlen(big), 30);
    expect_raw_error("Content-Length 10000000", r, "HTTP/1.1 413", "body_too_large");
    free(r);
    /* GET /%FF: the URL is the byte FF; the error body stays UTF-8 and JSON. */
    const char *ff = "GET /%FF HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    r = exchange(&srv, ff, strlen(ff), 30);
    expect_raw_error("GET /%FF", r, "HTTP/1.1 404", "not_found");
    free(r);
    /* HEAD where GET; each route's own methods in Allow. */
    static const char *const heads[] = {"/health", "/metrics", "/v1/models", "/v1/models/stories260K"};
    for (size_t i = 0; i < sizeof heads / sizeof heads[0]; i++) {
        char *resp;
        int st = http(&srv, "HEAD", heads[i], NULL, 0, NULL, &resp);
        if (st != 200) fail_msg("HEAD %s: %d %s", heads[i], st, resp);
        free(resp);
    }
    static const char *const allow[][3] = {{"POST", "/health", "Allow: GET, HEAD"},
                                           {"DELETE", "/v1/models", "Allow: GET, HEAD"},
                                           {"POST", "/v1/models/stories260K", "Allow: GET, HEAD"},
                                           {"GET", "/v1/completions", "Allow: POST"},
                                           {"PUT", "/v1/chat/completions", "Allow: POST"}};
    for (size_t i = 0; i < sizeof allow / sizeof allow[0]; i++) {
        char *resp, *hdr;
        int st = http_full(&srv, allow[i][0], allow[i][1], NULL, 0, NULL, &resp, &hdr);
        if (st != 405 || !strstr(hdr, allow[i][2]))
            fail_msg("%s %s: %d, want 405 with '%s':\n%s%s", allow[i][0], allow[i][1], st, allow[i][2], hdr, resp);
        if (!strstr(hdr, "Content-Type: application/json")) fail_msg("%s %s: not JSON:\n%s", allow[i][0], allow[i][1], hdr);
        free(resp);
        free(hdr);
    }
    /* GET /v1/models/{id}. */
    char *resp;
    assert_int_equal(http(&srv, "GET", "/v1/models/stories260K", NULL, 0, NULL, &resp), 200);
    cJSON *j = cJSON_Parse(resp);
    assert_string_equal(cJSON_GetObjectItem(j, "id")->valuestring, "stories260K");
    assert_string_equal(cJSON_GetObjectItem(j, "object")->valuestring, "model");
    cJSON_Delete(j);
    free(resp);
    expect_error("GET", "/v1/models/gpt-4", NULL, 0, 404, "model", "does not exist");
    expect_error("GET", "/v1/models/", NULL, 0, 404, NULL, "no such route");
    test_unparsable(&srv);
}

/* One access-log line per request on stderr, with its tokens and time. */
static void test_access_log(void **state)
{
    (void)state;
    char *resp;
    assert_int_equal(post(&srv, "/v1/completions", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 7, "
                                                   "\"temperature\": 0}", &resp), 200);
    free(resp);
    assert_int_equal(http(&srv, "GET", "/v1/nothing-here", NULL, 0, NULL, &resp), 404);
    free(resp);
    char *err = slurp(srv.err_path);
    static const char *const want[] = {
        " 127.0.0.1 POST /v1/completions 200 prompt_tokens=5 completion_tokens=7 time_ms=",
        " 127.0.0.1 GET /v1/nothing-here 404 prompt_tokens=0 completion_tokens=0 time_ms=",
        " 127.0.0.1 GET /health 200 prompt_tokens=0 completion_tokens=0 time_ms=",
        " 127.0.0.1 GET /v1/completions 405 ",
        " 127.0.0.1 HEAD /metrics 200 ",
        " finish_reason=length end=ok\n",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (!strstr(err, want[i])) fail_msg("no access-log line with '%s' in:\n%.4000s", want[i], err);
    free(err);
}

/* ---- hostile clients -------------------------------------------------------------------------- */

static void test_hostile_clients(void **state)
{
    (void)state;
    enum { IDLE = 500, ADDRS = 5, PER_IP = 128, TIMEOUT = 5 };
    server s;
    const char *args[] = {"-c", "128", "--request-timeout", "5", "--idle-timeout", "8", "--max-connections-per-ip",
                          "128", "--log-format", "json", "--no-enable-prefix-caching", NULL};
    server_start(&s, args);
    /* 500 idle sockets, 100 from each of five loopback addresses (the per-address limit is 128). */
    static int fds[IDLE];
    const double t_open = now_s();
    for (int i = 0; i < IDLE; i++) {
        char src[32];
        snprintf(src, sizeof src, "127.0.0.%d", 1 + i % ADDRS);
        fds[i] = connect_from(&s, src);
        if (fds[i] < 0) fail_msg("idle socket %d from %s: %s", i, src, strerror(errno));
    }
    nap_ms(200);
    for (int i = 0; i < IDLE; i++)
        if (closed_by_server(fds[i], 0)) fail_msg("idle socket %d was closed at once", i);
    /* Everyone else is still served at once. */
    char *resp;
    double t = now_s();
    assert_int_equal(http(&s, "GET", "/health", NULL, 0, NULL, &resp), 200);
    const double t_health = now_s() - t;
    free(resp);
    const char *health = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    t = now_s();
    char *raw = exchange(&s, health, strlen(health), 5); /* without curl's own start */
    const double t_health_raw = now_s() - t;
    if (strncmp(raw, "HTTP/1.1 200", 12)) fail_msg("raw GET /health: %s", raw);
    free(raw);
    t = now_s();
    assert_int_equal(http(&s, "GET", "/metrics", NULL, 0, NULL, &resp), 200);
    const double t_metrics = now_s() - t;
    const double open_conns = metric(resp, "dcpvk_http_connections");
    free(resp);
    t = now_s();
    const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4, \"temperature\": 0}";
    assert_int_equal(post(&s, "/v1/completions", body, &resp), 200);
    const double t_completion = now_s() - t;
    char finish[32], *text = completion_text(resp, finish, sizeof finish);
    assert_true(strncmp(seq_texts[0], text, strlen(text)) == 0);
    assert_int_equal(cached_tokens_of(resp), 0);
    free(text);
    free(resp);
    /* --no-enable-prefix-caching: nothing looked up. */
    assert_int_equal(http(&s, "GET", "/metrics", NULL, 0, NULL, &resp), 200);
    assert_true(metric(resp, "vllm:prefix_cache_queries_total") == 0);
    assert_true(metric(resp, "dcpvk_prefix_cache_blocks") == 0);
    free(resp);
    printf("with %d idle sockets open (%g connections): /health %.1f ms (curl; %.2f ms on a raw socket), /metrics "
           "%.1f ms, a 4-token completion %.1f ms\n", IDLE, open_conns, t_health * 1e3, t_health_raw * 1e3,
           t_metrics * 1e3, t_completion * 1e3);
    assert_true(open_conns >= IDLE);
    assert_true(t_health < 1.0 && t_health_raw < 1.0 && t_completion < 1.0);
    /* The idle ones are closed by --request-timeout (5 s): nothing came in time. */
    int left = IDLE;
    while (left > 0 && now_s() - t_open < TIMEOUT + 15) {
        left = 0;
        for (int i = 0; i < IDLE; i++) left += !closed_by_server(fds[i], 0);
        if (left) nap_ms(100);
    }
    const double t_closed = now_s() - t_open;
    for (int i = 0; i < IDLE; i++) close(fds[i]);
    if (left) fail_msg("%d idle sockets still open %.1f s after they connected (--request-timeout 5)", left, t_closed);
    printf("the %d idle sockets were closed %.1f s after they connected (--request-timeout %d)\n", IDLE, t_closed,
           TIMEOUT);
    assert_true(t_closed >= TIMEOUT - 0.5);
    /* A slow client: one byte every 500 ms of a request that would take 30 s. Dropped at its deadline. */
    const char *slow = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: a-very-slow-client/1.0\r\n\r\n";
    int fd = connect_from(&s, NULL);
    assert_true(fd >= 0);
    t = now_s();
    size_t sent = 0;
    while (sent < strlen(slow) && !closed_by_server(fd, 500)) {
        if (send(fd, slow + sent, 1, MSG_NOSIGNAL) != 1) break;
        sent++;
    }
    const double t_slow = now_s() - t;
    close(fd);
    printf("a client sending a byte every 500 ms was dropped after %.1f s, %zu of %zu bytes sent\n", t_slow, sent,
           strlen(slow));
    if (sent == strlen(slow)) fail_msg("the slow client sent its whole request in %.1f s: not dropped", t_slow);
    assert_true(t_slow < TIMEOUT + 5);
    /* One byte, then silence: closed too (a byte a minute holds nothing). */
    fd = connect_from(&s, NULL);
    assert_int_equal(send(fd, "G", 1, MSG_NOSIGNAL), 1);
    t = now_s();
    if (!closed_by_server(fd, (TIMEOUT + 10) * 1000)) fail_msg("a silent client after one byte was not dropped");
    printf("a client silent after one byte was dropped after %.1f s\n", now_s() - t);
    close(fd);
    /* One address: at most --max-connections-per-ip; the others are closed at once. */
    static int mine[PER_IP + 4];
    for (int i = 0; i < PER_IP + 4; i++) mine[i] = connect_from(&s, "127.0.0.9");
    nap_ms(500);
    int refused = 0;
    for (int i = 0; i < PER_IP + 4; i++) refused += mine[i] < 0 || closed_by_server(mine[i], 0);
    for (int i = 0; i < PER_IP + 4; i++)
        if (mine[i] >= 0) close(mine[i]);
    printf("%d connections from one address: %d closed at once (--max-connections-per-ip %d)\n", PER_IP + 4, refused,
           PER_IP);
    assert_int_equal(refused, 4);
    assert_int_equal(http(&s, "GET", "/metrics", NULL, 0, NULL, &resp), 200);
    assert_true(metric(resp, "dcpvk_http_request_timeouts_total") >= IDLE + 2);
    free(resp);
    /* --log-format json: every access-log line is one JSON object with the request's numbers. */
    char *err = slurp(s.err_path);
    int lines = 0, completions = 0;
    for (char *line = err, *nl; (nl = strchr(line, '\n')); line = nl + 1) {
        *nl = 0;
        if (line[0] != '{') continue;
        cJSON *j = cJSON_Parse(line);
        if (!j) fail_msg("a JSON log line that is not JSON: %s", line);
        static const char *const keys[] = {"time", "client", "method", "path", "status", "prompt_tokens",
                                           "completion_tokens", "time_ms", "end"};
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            if (!cJSON_GetObjectItem(j, keys[k])) fail_msg("log line without '%s': %s", keys[k], line);
        const cJSON *path = cJSON_GetObjectItem(j, "path");
        if (strcmp(path->valuestring, "/v1/completions") == 0) {
            completions++;
            assert_int_equal(cJSON_GetObjectItem(j, "prompt_tokens")->valueint, 5);
            assert_int_equal(cJSON_GetObjectItem(j, "completion_tokens")->valueint, 4);
            assert_int_equal(cJSON_GetObjectItem(j, "status")->valueint, 200);
            assert_string_equal(cJSON_GetObjectItem(j, "finish_reason")->valuestring, "length");
        }
        lines++;
        cJSON_Delete(j);
    }
    free(err);
    assert_int_equal(completions, 1);
    assert_true(lines >= 4); /* /health, /metrics twice, the completion */
    assert_int_equal(server_stop(&s), 0);
}

/* Requests cancelled so far. */
static double cancelled(const server *s)
{
    char *m = metrics(s);
    const char *key = "dcpvk_requests_finished_total{reason=\"cancelled\"} ";
    const char *q = strstr(m, key);
    double c = q ? atof(q + strlen(key)) : -1;
    free(m);
    return c;
}

static void test_disconnect(void **state)
{
    (void)state;
    const double c0 = cancelled(&srv);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {0};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)srv.port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 240, \"temperature\": 0, \"stream\": true}";
    char req[512];
    int n = snprintf(req, sizeof req,
                     "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     "Content-Length: %zu\r\n\r\n%s", strlen(body), body);
    assert_int_equal(write(fd, req, (size_t)n), n);
    /* Read until three events have come, then hang up. */
    char buf[8192];
    size_t got = 0;
    int events = 0;
    while (events < 3) {
        ssize_t r = read(fd, buf + got, sizeof buf - 1 - got);
        assert_true(r > 0);
        got += (size_t)r;
        buf[got] = 0;
        events = 0;
        for (const char *q = buf; (q = strstr(q, "data: ")); q += 6) events++;
        assert_true(got < sizeof buf - 1);
    }
    close(fd);
    const double t0 = now_s();
    for (;;) {
        char *m = metrics(&srv);
        double running = metric(m, "dcpvk_requests_running"), used = pages_used(m);
        free(m);
        double c = cancelled(&srv);
        if (running == 0 && used == 0 && c == c0 + 1) break;
        if (now_s() - t0 > 20) fail_msg("20 s after the client left: %g running, %g pages used, %g cancelled", running, used, c);
        nap_ms(100);
    }
    expect_healthy(&srv);
}

/* SIGTERM during a stream: the stream finishes with [DONE], the port closes, exit 0. */
static void test_sigterm(void **state)
{
    (void)state;
    async_curl a;
    curl_start(&srv, "/v1/completions",
               "{\"prompt\": \"Once upon a time\", \"max_tokens\": 40, \"temperature\": 0, \"stream\": true}", &a);
    /* Wait until the request runs. */
    const double t0 = now_s();
    for (;;) {
        char *m = metrics(&srv);
        double running = metric(m, "dcpvk_requests_running");
        free(m);
        if (running >= 1) break;
        assert_true(now_s() - t0 < 30);
        nap_ms(20);
    }
    server s = srv;
    int code = server_stop(&srv);
    char *sse = curl_finish(&a), finish[32];
    char *t = sse_text(sse, finish, sizeof finish);
    assert_string_equal(finish, "length");
    assert_true(strncmp(t, seq_texts[0], strlen(seq_texts[0])) == 0); /* the greedy story, longer */
    free(t);
    free(sse);
    assert_int_equal(code, 0);
    char *resp;
    assert_int_equal(http(&s, "GET", "/health", NULL, 0, NULL, &resp), 0); /* nobody listens */
    free(resp);
}

/* The head of a raw response (up to its empty line), for header checks. */
static void expect_head(const char *what, const char *resp, const char *status_line, const char *const *has,
                        const char *const *lacks)
{
    const char *e = strstr(resp, "\r\n\r\n");
    char *head = strndup(resp, e ? (size_t)(e - resp) + 2 : strlen(resp));
    if (strncmp(head, status_line, strlen(status_line))) fail_msg("%s: '%s', want '%s'", what, resp, status_line);
    for (int i = 0; has && has[i]; i++)
        if (!strstr(head, has[i])) fail_msg("%s: no '%s' in:\n%s", what, has[i], head);
    for (int i = 0; lacks && lacks[i]; i++)
        if (strstr(head, lacks[i])) fail_msg("%s: '%s' should not be in:\n%s", what, lacks[i], head);
    free(head);
}

/* CORS (--allowed-origins a list): preflights, and Access-Control-Allow-Origin on every response to
 * a listed origin (whole, streamed, errors, the gate's), none for another origin. */
static void test_cors(void **state)
{
    (void)state;
    server s;
    const char *args[] = {"--allowed-origins", "http://a.example,http://b.example:8080", NULL};
    server_start(&s, args);
    const char *pre = "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://a.example\r\n"
                      "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type, "
                      "authorization\r\nConnection: close\r\n\r\n";
    char *r = exchange(&s, pre, strlen(pre), 10);
    const char *const pre_has[] = {"Access-Control-Allow-Origin: http://a.example\r\n",
                                   "Access-Control-Allow-Methods: POST, OPTIONS\r\n",
                                   "Access-Control-Allow-Headers: content-type, authorization\r\n",
                                   "Access-Control-Max-Age: 600\r\n", "Vary: Origin\r\n", NULL};
    expect_head("a preflight of a listed origin", r, "HTTP/1.1 204", pre_has, NULL);
    free(r);
    const char *pre_evil = "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
                           "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n";
    r = exchange(&s, pre_evil, strlen(pre_evil), 10);
    const char *const no_cors[] = {"Access-Control-", NULL};
    expect_head("a preflight of another origin", r, "HTTP/1.1 204", NULL, no_cors);
    free(r);
    const char *const b_has[] = {"Access-Control-Allow-Origin: http://b.example:8080\r\n", "Vary: Origin\r\n", NULL};
    const char *models = "GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://b.example:8080\r\n"
                         "Connection: close\r\n\r\n";
    r = exchange(&s, models, strlen(models), 10);
    expect_head("GET /v1/models from a listed origin", r, "HTTP/1.1 200", b_has, NULL);
    free(r);
    const char *const a_has[] = {"Access-Control-Allow-Origin: http://a.example\r\n", "Vary: Origin\r\n", NULL};
    const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 4, \"temperature\": 0, \"stream\": true}";
    char req[1024];
    snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://a.example\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(body), body);
    r = exchange(&s, req, strlen(req), 60);
    expect_head("a stream to a listed origin", r, "HTTP/1.1 200", a_has, NULL);
    if (!strstr(r, "data: [DONE]")) fail_msg("the stream did not end: %s", r);
    free(r);
    const char *bad = "{\"prompt\": 1}";
    snprintf(req, sizeof req, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://a.example\r\n"
             "Content-Type: application/json\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s", strlen(bad), bad);
    r = exchange(&s, req, strlen(req), 30);
    expect_head("an error to a listed origin", r, "HTTP/1.1 400", a_has, NULL);
    free(r);
    const char *gate = "GET /health HTTP/9.9\r\nHost: 127.0.0.1\r\nOrigin: http://a.example\r\n\r\n";
    r = exchange(&s, gate, strlen(gate), 10);
    expect_head("the gate's error to a listed origin", r, "HTTP/1.1 505", a_has, NULL);
    free(r);
    const char *evil = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\nConnection: close\r\n\r\n";
    r = exchange(&s, evil, strlen(evil), 10);
    const char *const vary[] = {"Vary: Origin\r\n", NULL};
    expect_head("GET /health from another origin", r, "HTTP/1.1 200", vary, no_cors);
    free(r);
    const char *none = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    r = exchange(&s, none, strlen(none), 10);
    expect_head("GET /health without Origin", r, "HTTP/1.1 200", vary, no_cors);
    free(r);
    assert_int_equal(server_stop(&s), 0);
}

/* A TP 1 server with an API key, no chat template, one slot, no queue and short prompts. */
static void test_key_and_no_template(void **state)
{
    (void)state;
    server s;
    const char *args[] = {"--api-key", "sesame", "-c", "2048", "--max-seqs", "1", "--max-queued", "0",
                          "--max-prompt-tokens", "16", "--allowed-origins", "*", NULL};
    server_start(&s, args);
    char *resp, *hdr;
    const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 8, \"temperature\": 0}";
    assert_int_equal(http_full(&s, "POST", "/v1/completions", body, strlen(body), "Origin: http://x.example", &resp, &hdr),
                     401);
    assert_non_null(strstr(resp, "invalid_api_key"));
    /* --allowed-origins '*': every response says so, and varies by nothing. */
    if (!strstr(hdr, "Access-Control-Allow-Origin: *\r\n") || strstr(hdr, "Vary: Origin"))
        fail_msg("a 401 under --allowed-origins '*': %s", hdr);
    free(resp);
    free(hdr);
    /* A preflight carries no API key: answered without one. */
    const char *pre = "OPTIONS /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://x.example\r\n"
                      "Access-Control-Request-Method: POST\r\nConnection: close\r\n\r\n";
    char *raw = exchange(&s, pre, strlen(pre), 10);
    const char *const pre_has[] = {"Access-Control-Allow-Origin: *\r\n", "Access-Control-Allow-Methods: POST, OPTIONS",
                                   "Access-Control-Allow-Headers: Authorization, Content-Type", NULL};
    expect_head("a preflight under --allowed-origins '*' and --api-key", raw, "HTTP/1.1 204", pre_has, NULL);
    free(raw);
    assert_int_equal(http(&s, "POST", "/v1/completions", body, strlen(body), "Authorization: Bearer wrong", &resp), 401);
    free(resp);
    assert_int_equal(http(&s, "GET", "/health", NULL, 0, NULL, &resp), 200); /* open */
    free(resp);
    assert_int_equal(http(&s, "POST", "/v1/completions", body, strlen(body), "Authorization: Bearer sesame", &resp), 200);
    char finish[32], *t = completion_text(resp, finish, sizeof finish);
    assert_true(strlen(t) > 0 && strncmp(t, seq_texts[0], strlen(t)) == 0); /* the same greedy story */
    free(t);
    free(resp);
    const char *chat = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}";
    assert_int_equal(http(&s, "POST", "/v1/chat/completions", chat, strlen(chat), "Authorization: Bearer sesame", &resp),
                     400);
    assert_non_null(strstr(resp, "no tokenizer.chat_template"));
    free(resp);
    /* A prompt longer than --max-prompt-tokens. */
    const char *longp = "{\"prompt\": \"Once upon a time there was a little girl named Lily who loved to play in "
                        "the park with her friends\", \"max_tokens\": 4}";
    assert_int_equal(http(&s, "POST", "/v1/completions", longp, strlen(longp), "Authorization: Bearer sesame", &resp), 400);
    assert_non_null(strstr(resp, "at most 16"));
    assert_non_null(strstr(resp, "\"code\":\"context_length_exceeded\""));
    free(resp);
    /* One slot and no queue: while a request runs, another gets 429. The running one is long (2000
     * tokens, seconds even on a fast machine) so that it still runs when the second comes. */
    char url[128], *out = tmp_path("sse");
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", s.port);
    fflush(NULL);
    pid_t runner = fork();
    if (runner == 0) {
        execlp("curl", "curl", "-sN", "-o", out, "-H", "Authorization: Bearer sesame", "-d",
               "{\"prompt\": \"Once\", \"max_tokens\": 2000, \"ignore_eos\": true, \"stream\": true}", url, (char *)NULL);
        _exit(127);
    }
    const double t0 = now_s();
    for (;;) { /* until it runs */
        char *m;
        assert_int_equal(http(&s, "GET", "/metrics", NULL, 0, NULL, &m), 200);
        double running = metric(m, "dcpvk_requests_running");
        free(m);
        if (running >= 1) break;
        assert_true(now_s() - t0 < 30);
        nap_ms(20);
    }
    hdr = NULL;
    assert_int_equal(
        http_full(&s, "POST", "/v1/completions", body, strlen(body), "Authorization: Bearer sesame", &resp, &hdr), 429);
    assert_non_null(strstr(resp, "queue_full"));
    if (!strstr(hdr, "Retry-After: 1\r\n")) fail_msg("429 without Retry-After:\n%s", hdr);
    free(hdr);
    free(resp);
    kill(runner, SIGTERM);
    waitpid(runner, NULL, 0);
    unlink(out);
    assert_int_equal(server_stop(&s), 0);
}

static void test_prefix_cache(void **state)
{
    (void)state;
    char *m0 = metrics(&srv);
    const double q0 = metric(m0, "vllm:prefix_cache_queries_total"), h0 = metric(m0, "vllm:prefix_cache_hits_total");
    free(m0);
    const char *body = "{\"model\": \"stories260K\", \"prompt\": \"Once upon a time, there was a little girl named "
                       "Lily. She loved to play outside in the sun. One day, she saw a big red ball in the park. She "
                       "ran to it and\", \"max_tokens\": 8, \"temperature\": 0}";
    char *r1, *r2, f1[32], f2[32];
    assert_int_equal(post(&srv, "/v1/completions", body, &r1), 200);
    assert_int_equal(post(&srv, "/v1/completions", body, &r2), 200);
    const int c1 = cached_tokens_of(r1), c2 = cached_tokens_of(r2);
    char *t1 = completion_text(r1, f1, sizeof f1), *t2 = completion_text(r2, f2, sizeof f2);
    assert_string_equal(t1, t2);
    char *m = metrics(&srv);
    const double q = metric(m, "vllm:prefix_cache_queries_total") - q0, h = metric(m, "vllm:prefix_cache_hits_total") - h0;
    printf("prefix cache: cached_tokens %d then %d; %.0f of %.0f queried tokens hit\n", c1, c2, h, q);
    /* under mpiexec too: the other processes keep the same cache (they apply process 0's attaches
     * and commits in its order) */
    assert_true(q > 0);
    assert_int_equal(c1, 0);
    assert_true(c2 >= 32 && c2 % 32 == 0); /* whole blocks of 16 tokens x DCP 2 */
    assert_true(h == c2);
    assert_true(metric(m, "dcpvk_prefix_cache_blocks") >= c2 / 32);
    free(m);
    free(t1);
    free(t2);
    free(r1);
    free(r2);
}

/* n = 3 greedy choices: each is the n = 1 text (under mpiexec the choices are forks of choice 0's
 * KV on every process: the step plans carry them), and seeded n = 2 twice gives the same texts. */
static void test_choices_fork(void **state)
{
    (void)state;
    const char *one = "{\"model\": \"stories260K\", \"prompt\": \"Tom and his dog ran to the park. They saw a big\", "
                      "\"max_tokens\": 12, \"temperature\": 0}";
    const char *three = "{\"model\": \"stories260K\", \"prompt\": \"Tom and his dog ran to the park. They saw a big\", "
                        "\"max_tokens\": 12, \"temperature\": 0, \"n\": 3}";
    const char *two = "{\"model\": \"stories260K\", \"prompt\": \"Tom and his dog ran to the park. They saw a big\", "
                      "\"max_tokens\": 12, \"temperature\": 0.9, \"seed\": 31, \"n\": 2}";
    char *r1, *r3, *s1, *s2, f1[32];
    char *m0 = metrics(&srv);
    const double k0 = metric(m0, "dcpvk_forked_choices_total");
    free(m0);
    assert_int_equal(post(&srv, "/v1/completions", one, &r1), 200);
    assert_int_equal(post(&srv, "/v1/completions", three, &r3), 200);
    assert_int_equal(post(&srv, "/v1/completions", two, &s1), 200);
    assert_int_equal(post(&srv, "/v1/completions", two, &s2), 200);
    char *t1 = completion_text(r1, f1, sizeof f1);
    cJSON *j3 = cJSON_Parse(r3), *a = cJSON_Parse(s1), *b = cJSON_Parse(s2);
    assert_non_null(j3);
    assert_non_null(a);
    assert_non_null(b);
    const cJSON *c3 = cJSON_GetObjectItem(j3, "choices");
    assert_int_equal(cJSON_GetArraySize(c3), 3);
    for (int i = 0; i < 3; i++) {
        const cJSON *c = cJSON_GetArrayItem(c3, i);
        const cJSON *t = cJSON_GetObjectItem(c, "text");
        assert_true(cJSON_IsString(t));
        assert_int_equal(cJSON_GetObjectItem(c, "index")->valueint, i);
        if (strcmp(t->valuestring, t1)) fail_msg("greedy choice %d '%s' is not the n = 1 text '%s'", i, t->valuestring, t1);
    }
    const cJSON *ca = cJSON_GetObjectItem(a, "choices"), *cb = cJSON_GetObjectItem(b, "choices");
    assert_int_equal(cJSON_GetArraySize(ca), 2);
    for (int i = 0; i < 2; i++) {
        const char *x = cJSON_GetObjectItem(cJSON_GetArrayItem(ca, i), "text")->valuestring;
        const char *y = cJSON_GetObjectItem(cJSON_GetArrayItem(cb, i), "text")->valuestring;
        if (strcmp(x, y)) fail_msg("seeded choice %d: '%s' then '%s'", i, x, y);
    }
    char *m = metrics(&srv);
    const double forked = metric(m, "dcpvk_forked_choices_total") - k0;
    free(m);
    printf("choices: greedy n = 3 all '%s'; %.0f choices forked\n", t1, forked);
    assert_true(forked == 4); /* one request at a time, slots free: every choice past the first (2 + 1 + 1) */
    cJSON_Delete(j3);
    cJSON_Delete(a);
    cJSON_Delete(b);
    free(t1);
    free(r1);
    free(r3);
    free(s1);
    free(s2);
}

/* --kv-offloading-size: a pool of 16 pages (TP 1; under mpiexec TP 2, one rank per process: the
 * TP group spread over the processes; stories260K's 4 KV heads allow DCP 2 from TP 8 on only)
 * holds one of two long prompts; A, then B (evicting A's blocks to host memory), then A again:
 * its blocks come back from host (cached_tokens, the dcpvk_kv_offload_* counters) and its text is
 * the first one's, computed without the cache. The
 * size is the whole TP group's: the host pool's blocks are 0.01 GiB over the bytes of a block on
 * every process (process 0's bytes of a block, from the counters, times the processes). Under
 * mpiexec the other process keeps the same host pool (it applies process 0's steps: a restore it
 * could not make stops the server). */
static void test_kv_offload(void **state)
{
    (void)state;
    server s;
    const char *args1[] = {"-c", "128", "--max-seqs", "1", "--kv-pages", "16", "--block-size", "8",
                           "--kv-offloading-size", "0.01", "--kv-offloading-backend", "native", NULL};
    const char *args_mpi[] = {"--tensor-parallel-size", "2", "-c", "128", "--max-seqs", "1", "--kv-pages", "16",
                              "--block-size", "8", "--kv-offloading-size", "0.01", "--kv-offloading-backend",
                              "native", NULL};
    server_start_as(&s, mpiexec ? args_mpi : args1, mpiexec != NULL);
    const char *a = "{\"prompt\": \"Once upon a time, there was a little girl named Lily. She loved to play outside "
                    "in the sun. One day, she saw a big red ball in the park. She ran to it and kicked it high. "
                    "The ball flew over the tree and\", \"max_tokens\": 8, \"temperature\": 0}";
    const char *b = "{\"prompt\": \"Tom had a small dog called Max. Every morning they walked to the river and "
                    "looked at the fish. One day Max jumped into the water and swam after a duck. Tom laughed "
                    "and called him back, but Max\", \"max_tokens\": 8, \"temperature\": 0}";
    char *r1, *r2, *r3, f1[32], f3[32];
    assert_int_equal(post(&s, "/v1/completions", a, &r1), 200);
    assert_int_equal(post(&s, "/v1/completions", b, &r2), 200);
    assert_int_equal(post(&s, "/v1/completions", a, &r3), 200);
    const int c1 = cached_tokens_of(r1), c3 = cached_tokens_of(r3);
    char *t1 = completion_text(r1, f1, sizeof f1), *t3 = completion_text(r3, f3, sizeof f3);
    assert_string_equal(t1, t3);
    char *m = metrics(&s);
    const double to_host = metric(m, "dcpvk_kv_offload_blocks_total{direction=\"to_host\"}"),
                 to_dev = metric(m, "dcpvk_kv_offload_blocks_total{direction=\"to_device\"}"),
                 bytes_dev = metric(m, "dcpvk_kv_offload_bytes_total{direction=\"to_device\"}"),
                 cap = metric(m, "dcpvk_kv_offload_host_capacity_blocks");
    printf("kv offload%s: cached_tokens %d then %d; %.0f blocks to host, %.0f back (%.0f bytes, the whole TP group), "
           "host capacity %.0f blocks\n", mpiexec ? " under mpiexec, TP 2" : "", c1, c3, to_host, to_dev,
           bytes_dev, cap);
    assert_int_equal(c1, 0);
    assert_true(c3 > 0 && c3 % 8 == 0);
    assert_true(to_host > 0 && to_dev > 0 && bytes_dev > 0);
    const double group_block = bytes_dev / to_dev; /* the metric counts the whole TP group's bytes */
    assert_true(cap > 0 && cap == floor(floor(0.01 * (double)(1ull << 30)) / group_block));
    free(m);
    free(t1);
    free(t3);
    free(r1);
    free(r2);
    free(r3);
    assert_int_equal(server_stop(&s), 0);
}

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--tensor-parallel-size", "8", "--decode-context-parallel-size", "2", "--max-seqs", "16",
                          "-c", "256", "--chat-template", "chatml", "--max-prompt-logprobs-entries", "32768", NULL};
    server_start(&srv, args);
    printf("dcp-vk-serve TP 8 / DCP 2%s%s%s listening on port %d\n", mpiexec ? " under mpiexec -n " : "",
           mpiexec ? nprocs : "", mpiexec ? " (process 0 serves, the others follow)" : "", srv.port);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (srv.pid > 0) {
        kill(srv.pid, SIGKILL);
        waitpid(srv.pid, NULL, 0);
    }
    for (int i = 0; i < NREQ; i++) free(seq_texts[i]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: %s DCP-VK-SERVE NODE-CLIENT-DIR [MPIEXEC NPROCS]\n", argv[0]);
        return 2;
    }
    server_exe = argv[1];
    node_dir = argv[2];
    if (argc == 5) {
        mpiexec = argv[3];
        nprocs = argv[4];
    }
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_at_a_time), cmocka_unit_test(test_concurrent_curl),
        cmocka_unit_test(test_prefix_cache),  cmocka_unit_test(test_openai_client), cmocka_unit_test(test_logprobs),
        cmocka_unit_test(test_echo),          cmocka_unit_test(test_choices),       cmocka_unit_test(test_choices_fork),
        cmocka_unit_test(test_json_output),
        cmocka_unit_test(test_bad_requests),  cmocka_unit_test(test_refused_fields), cmocka_unit_test(test_body_checks),
        cmocka_unit_test(test_protocol),      cmocka_unit_test(test_access_log),
        cmocka_unit_test(test_disconnect),    cmocka_unit_test(test_sigterm),
        cmocka_unit_test(test_key_and_no_template), cmocka_unit_test(test_hostile_clients),
        cmocka_unit_test(test_speculative),   cmocka_unit_test(test_vllm_metrics),
        cmocka_unit_test(test_cors),          cmocka_unit_test(test_kv_offload),
    };
    /* Under MPI: what depends on the processes following process 0's steps. */
    const struct CMUnitTest mpi_tests[] = {
        cmocka_unit_test(test_one_at_a_time), cmocka_unit_test(test_concurrent_curl),
        cmocka_unit_test(test_prefix_cache),  cmocka_unit_test(test_choices_fork),  cmocka_unit_test(test_disconnect),
        cmocka_unit_test(test_kv_offload),    cmocka_unit_test(test_speculative), cmocka_unit_test(test_sigterm),
    };
    if (mpiexec) return cmocka_run_group_tests(mpi_tests, group_setup, group_teardown);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
