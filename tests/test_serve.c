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
 *  - a second server (TP 1) with an API key (401 without it), without a chat template (chat: 400
 *    naming why; completions work), with a prompt limit (400) and one slot without a queue (429).
 * With MPIEXEC NPROCS after them, the TP 8 / DCP 2 server runs under `mpiexec -n NPROCS` (process 0
 * serves HTTP and plans, the others apply its steps): the texts, concurrency, disconnect and SIGTERM
 * checks again. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
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
static void server_start(server *s, const char *const *args)
{
    const char *argv[48];
    int n = 0;
    if (mpiexec && s == &srv) {
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

/* curl METHOD path [body]: returns the HTTP status (0: no connection); *resp the body (malloc'd). */
static int http(const server *s, const char *method, const char *path, const char *body, size_t body_len,
                const char *extra_header, char **resp)
{
    char url[256], *out = tmp_path("out"), *in = NULL;
    snprintf(url, sizeof url, "http://127.0.0.1:%d%s", s->port, path);
    const char *argv[24];
    int n = 0;
    argv[n++] = "curl";
    argv[n++] = "-sS";
    argv[n++] = "-o";
    argv[n++] = out;
    argv[n++] = "-w";
    argv[n++] = "%{http_code}";
    argv[n++] = "-X";
    argv[n++] = method;
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
    return status;
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
    const char *argv[] = {"node", script, base, "stories260K", reqs, NULL};
    dcp_test_result r = dcp_test_spawn(argv);
    unlink(reqs);
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

/* One bad request: its status, an OpenAI error body (error.message containing msg, error.param when
 * given), then the server still serves. */
static void expect_error(const char *method, const char *path, const char *body, size_t len, int status,
                         const char *param, const char *msg)
{
    char *resp;
    int st = http(&srv, method, path, body, len, NULL, &resp);
    if (st != status) fail_msg("%s %s: status %d (want %d): %s", method, path, st, status, resp);
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
    expect_error("POST", "/v1/completions", huge, big, 413, NULL, "larger than");
    free(huge);
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"max_tokens\": 256}"), 400, "max_tokens",
                 "maximum context length is 256");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"max_tokens\": 100000}"), 400, "max_tokens",
                 "at most 256");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"temperature\": -0.5}"), 400, "temperature",
                 NULL);
    expect_error("POST", "/v1/completions", BODY("{\"model\": \"gpt-4\", \"prompt\": \"Once\"}"), 404, "model",
                 "does not exist");
    expect_error("POST", "/v1/completions", BODY("{\"prompt\": \"Once\", \"n\": 3}"), 400, "n", NULL);
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

/* A TP 1 server with an API key, no chat template, one slot, no queue and short prompts. */
static void test_key_and_no_template(void **state)
{
    (void)state;
    server s;
    const char *args[] = {"--api-key", "sesame", "-c", "2048", "--max-seqs", "1", "--max-queued", "0",
                          "--max-prompt-tokens", "16", NULL};
    server_start(&s, args);
    char *resp;
    const char *body = "{\"prompt\": \"Once upon a time\", \"max_tokens\": 8, \"temperature\": 0}";
    assert_int_equal(http(&s, "POST", "/v1/completions", body, strlen(body), NULL, &resp), 401);
    assert_non_null(strstr(resp, "invalid_api_key"));
    free(resp);
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
    assert_int_equal(http(&s, "POST", "/v1/completions", body, strlen(body), "Authorization: Bearer sesame", &resp), 429);
    assert_non_null(strstr(resp, "queue_full"));
    free(resp);
    kill(runner, SIGTERM);
    waitpid(runner, NULL, 0);
    unlink(out);
    assert_int_equal(server_stop(&s), 0);
}

static int group_setup(void **state)
{
    (void)state;
    const char *args[] = {"--tensor-parallel-size", "8", "--decode-context-parallel-size", "2", "--max-seqs", "16",
                          "-c", "256", "--chat-template", "chatml", NULL};
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
        cmocka_unit_test(test_openai_client), cmocka_unit_test(test_bad_requests),
        cmocka_unit_test(test_disconnect),    cmocka_unit_test(test_sigterm),
        cmocka_unit_test(test_key_and_no_template),
    };
    /* Under MPI: what depends on the processes following process 0's steps. */
    const struct CMUnitTest mpi_tests[] = {
        cmocka_unit_test(test_one_at_a_time), cmocka_unit_test(test_concurrent_curl),
        cmocka_unit_test(test_disconnect),    cmocka_unit_test(test_sigterm),
    };
    if (mpiexec) return cmocka_run_group_tests(mpi_tests, group_setup, group_teardown);
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
