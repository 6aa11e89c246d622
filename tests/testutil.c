/* Shared helpers for the CMocka tests. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/splitmix.h"

const char *dcp_test_data_path(const char *name)
{
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s/%s", DCP_TEST_DATA_DIR, name);
    return buf;
}

char *dcp_test_read_file(const char *path, size_t *size_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) fail_msg("cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    if (size_out) *size_out = (size_t)n;
    return buf;
}

int dcp_test_valid_utf8(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
        if (!len || i + len > n) return 0;
        uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
        for (size_t k = 1; k < len; k++) {
            if ((u[i + k] & 0xc0) != 0x80) return 0;
            cp = cp << 6 | (u[i + k] & 0x3f);
        }
        static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min_cp[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += len;
    }
    return 1;
}

uint64_t dcp_test_rng_next(dcp_test_rng *rng) { return dcp_splitmix64_next(&rng->state); }

float dcp_test_rng_uniform(dcp_test_rng *rng, float lo, float hi)
{
    double u = (double)(dcp_test_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(lo + (hi - lo) * u);
}

float *dcp_test_rand_floats(dcp_test_rng *rng, uint64_t n, float lo, float hi)
{
    float *v = malloc((n ? n : 1) * sizeof *v);
    assert_non_null(v);
    for (uint64_t i = 0; i < n; i++) v[i] = dcp_test_rng_uniform(rng, lo, hi);
    return v;
}

static char *slurp(FILE *f)
{
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    return s;
}

dcp_test_result dcp_test_spawn(const char *const *argv)
{
    FILE *fo = tmpfile(), *fe = tmpfile();
    assert_true(fo && fe);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fileno(fo), 1);
        dup2(fileno(fe), 2);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    dcp_test_result r = {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(fo), slurp(fe)};
    fclose(fo);
    fclose(fe);
    return r;
}

void dcp_test_result_free(dcp_test_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

void dcp_test_drain(dcp_engine *e)
{
    dcp_engine_event ev;
    while (dcp_engine_poll(e, &ev)) {
        assert_non_null(ev.user);
        assert_true(ev.index < DCP_ENGINE_MAX_CHOICES);
        dcp_test_out *o = (dcp_test_out *)ev.user + ev.index;
        assert_false(o->done);
        if (ev.token >= 0) {
            assert_true(o->n < DCP_TEST_OUT_MAXT);
            o->toks[o->n++] = ev.token;
        }
        assert_true(o->len + ev.len < sizeof o->text);
        memcpy(o->text + o->len, ev.text, ev.len);
        o->len += ev.len;
        o->text[o->len] = 0;
        o->completion = ev.completion_tokens;
        if (ev.kind == DCP_ENGINE_EVENT_FINISHED) {
            o->done = true;
            o->finish = ev.finish;
            o->cached = ev.cached_tokens;
            if (ev.finish == DCP_ENGINE_FINISH_ERROR)
                fail_msg("request %llu failed: %s", (unsigned long long)ev.id, ev.message);
        }
    }
}
