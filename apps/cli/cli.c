/* Command-line helpers shared by the apps. */
#define _GNU_SOURCE /* dladdr */
#include "cli/cli.h"

#include <dlfcn.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dcpvk/utf8.h"
#include "dcpvk/version.h"

static FILE *diag_stream; /* NULL: stderr */
static int stdout_errno;   /* the first failed write's errno on stdout */

FILE *dcp_cli_diag(void) { return diag_stream ? diag_stream : stderr; }

void dcp_cli_log_stderr(void *user, const char *message)
{
    (void)user;
    fprintf(stderr, "%s\n", message);
}

void dcp_cli_quiet(bool quiet)
{
    if (quiet && !diag_stream) diag_stream = fopen("/dev/null", "w");
    if (!quiet && diag_stream) {
        fclose(diag_stream);
        diag_stream = NULL;
    }
}

bool dcp_cli_parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s) return false;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return false;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

bool dcp_cli_parse_double(const char *s, double *out, bool *range)
{
    *range = false;
    if (!s) return false;
    /* The syntax first, so that strtod's extras (space, hex, inf, nan) never pass. */
    const char *p = s;
    if (*p == '+' || *p == '-') p++;
    size_t digits = 0;
    while (*p >= '0' && *p <= '9') p++, digits++;
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') p++, digits++;
    }
    if (!digits) return false;
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-') p++;
        if (!(*p >= '0' && *p <= '9')) return false;
        while (*p >= '0' && *p <= '9') p++;
    }
    if (*p) return false;
    errno = 0;
    char *end;
    double v = strtod(s, &end);
    if (*end) return false;
    if (errno == ERANGE && isinf(v)) {
        *range = true;
        return false;
    }
    /* ERANGE with a tiny result is underflow: the value is that tiny result (or 0). */
    *out = v;
    return true;
}

int dcp_cli_u64(const char *prog, const char *name, const char *value, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t v;
    bool digits = value && *value;
    for (const char *p = value; digits && *p; p++) digits = *p >= '0' && *p <= '9';
    if (!dcp_cli_parse_u64(value, &v)) {
        if (digits) /* only digits, too many of them */
            fprintf(dcp_cli_diag(), "%s: option %s: %s is out of range (allowed: %llu .. %llu)\n", prog, name, value,
                    (unsigned long long)min, (unsigned long long)max);
        else
            fprintf(dcp_cli_diag(), "%s: option %s: '%s' is not a decimal integer (allowed: %llu .. %llu)\n", prog,
                    name, value ? value : "", (unsigned long long)min, (unsigned long long)max);
        return 0;
    }
    if (v < min || v > max) {
        fprintf(dcp_cli_diag(), "%s: option %s: %s is out of range (allowed: %llu .. %llu)\n", prog, name, value,
                (unsigned long long)min, (unsigned long long)max);
        return 0;
    }
    *out = v;
    return 1;
}

int dcp_cli_u32(const char *prog, const char *name, const char *value, uint32_t min, uint32_t max, uint32_t *out)
{
    uint64_t v;
    if (!dcp_cli_u64(prog, name, value, min, max, &v)) return 0;
    *out = (uint32_t)v;
    return 1;
}

int dcp_cli_f64(const char *prog, const char *name, const char *value, double min, double max, double *out)
{
    double v;
    bool range;
    if (!dcp_cli_parse_double(value, &v, &range) || !(v >= min && v <= max)) {
        if (range || dcp_cli_parse_double(value, &v, &range))
            fprintf(dcp_cli_diag(), "%s: option %s: %s is out of range (allowed: %g .. %g)\n", prog, name, value,
                    min, max);
        else
            fprintf(dcp_cli_diag(), "%s: option %s: '%s' is not a decimal number (allowed: %g .. %g)\n", prog, name,
                    value ? value : "", min, max);
        return 0;
    }
    *out = v;
    return 1;
}

int dcp_cli_f32(const char *prog, const char *name, const char *value, float min, float max, float *out)
{
    double v;
    if (!dcp_cli_f64(prog, name, value, min, max, &v)) return 0;
    float f = (float)v;
    if (v != 0 && f == 0 && min > 0) { /* below the smallest float: 0 is not allowed here */
        fprintf(dcp_cli_diag(), "%s: option %s: %s is out of range (allowed: %g .. %g)\n", prog, name, value,
                (double)min, (double)max);
        return 0;
    }
    *out = f;
    return 1;
}

int dcp_cli_choice(const char *prog, const char *name, const char *value, const char *const *choices)
{
    for (int i = 0; choices[i]; i++)
        if (strcmp(value, choices[i]) == 0) return i;
    FILE *f = dcp_cli_diag();
    fprintf(f, "%s: option %s: '%s' is not allowed (allowed:", prog, name, value);
    for (int i = 0; choices[i]; i++) fprintf(f, " %s", choices[i]);
    fprintf(f, ")\n");
    return -1;
}

const char *dcp_cli_value(const char *prog, int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(dcp_cli_diag(), "%s: option %s needs a value (see --help)\n", prog, argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

void dcp_cli_report(const char *prog, const char *what, dcp_status st)
{
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, dcp_status_string(st), dcp_last_error());
}

/* Streams s through the UTF-8 sanitizer in pieces of bounded size, handing each sanitized piece
 * to put (which writes it to f). */
static void sanitized(FILE *f, const char *s, size_t n, void (*put)(FILE *f, const char *p, size_t n))
{
    enum { PIECE = 256 };
    char buf[DCP_UTF8_OUT_MAX(PIECE)];
    dcp_utf8_stream u = DCP_UTF8_STREAM_INIT;
    for (size_t i = 0; i < n; i += PIECE) put(f, buf, dcp_utf8_push(&u, s + i, n - i < PIECE ? n - i : PIECE, buf));
    put(f, buf, dcp_utf8_flush(&u, buf));
}

static void put_raw(FILE *f, const char *p, size_t n) { fwrite(p, 1, n, f); }

static void put_json_escaped(FILE *f, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c == '\n') fputs("\\n", f);
        else if (c == '\t') fputs("\\t", f);
        else if (c == '\r') fputs("\\r", f);
        else if (c < 0x20 || c == 0x7f) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
}

void dcp_cli_json_string(FILE *f, const char *s, size_t n)
{
    fputc('"', f);
    sanitized(f, s, n, put_json_escaped);
    fputc('"', f);
}

void dcp_cli_put_text(FILE *f, const char *s, size_t n) { sanitized(f, s, n, put_raw); }

bool dcp_cli_stdout_ok(void)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout)) return stdout_errno == 0; /* a dcp_cli_print_text may have failed */
    if (!stdout_errno) stdout_errno = errno ? errno : EIO;
    return false;
}

bool dcp_cli_print_text(FILE *f, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    int err = n < 0 ? EINVAL : buf ? 0 : ENOMEM;
    if (buf) {
        va_start(ap, fmt);
        vsnprintf(buf, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    /* What f holds goes first; then the text in as few writes as the file takes, each checked. */
    errno = 0;
    if (!err && (fflush(f) != 0 || ferror(f))) err = errno ? errno : EIO;
    for (size_t off = 0; !err && off < (size_t)n;) {
        ssize_t w = write(fileno(f), buf + off, (size_t)n - off);
        if (w > 0) off += (size_t)w;
        else if (w < 0 && errno == EINTR) continue;
        else err = w < 0 ? errno : EIO;
    }
    free(buf);
    if (err && f == stdout && !stdout_errno) stdout_errno = err;
    return err == 0;
}

bool dcp_cli_print_version(const char *name) { return dcp_cli_print_text(stdout, "%s %s\n", name, dcp_version()); }

int dcp_cli_finish_stdout(const char *prog, int rc)
{
    if (dcp_cli_stdout_ok()) return rc;
    fprintf(stderr, "%s: writing the output: %s\n", prog, strerror(stdout_errno));
    return rc == DCP_EXIT_OK ? DCP_EXIT_RUNTIME : rc;
}

static volatile sig_atomic_t stop_signal;
static atomic_int signals_seen; /* lock-free: the driver's threads may take a signal at the same time */

static void on_stop_signal(int sig)
{
    if (atomic_fetch_add(&signals_seen, 1)) { /* the second one: end now, by the signal's default action */
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    stop_signal = sig;
}

void dcp_cli_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int dcp_cli_stop_signal(void) { return (int)stop_signal; }

bool dcp_cli_mpi_launched(int *size)
{
    static const char *const rank_vars[] = {"PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", NULL};
    static const char *const size_vars[] = {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE", NULL};
    bool launched = false;
    for (int i = 0; rank_vars[i] && !launched; i++) {
        const char *v = getenv(rank_vars[i]);
        launched = v && *v;
    }
    *size = 1;
    for (int i = 0; size_vars[i]; i++) {
        const char *v = getenv(size_vars[i]);
        uint64_t n;
        if (v && *v) {
            *size = dcp_cli_parse_u64(v, &n) && n >= 1 && n <= 1u << 20 ? (int)n : 1;
            break;
        }
    }
    return launched;
}

void dcp_cli_progress_init(dcp_cli_progress *p, const char *what)
{
    p->what = what;
    p->tty = isatty(STDERR_FILENO);
    p->last = -1;
}

void dcp_cli_progress_fn(void *user, uint64_t done, uint64_t total)
{
    dcp_cli_progress *p = user;
    if (!p->tty) return;
    if (done > total) done = total;
    const int pct = total ? (int)(100.0 * (double)done / (double)total) : 100;
    if (pct == p->last) return;
    p->last = pct;
    enum { WIDTH = 30 };
    char bar[WIDTH + 1];
    const int fill = pct * WIDTH / 100;
    for (int i = 0; i < WIDTH; i++) bar[i] = i < fill ? '#' : '.';
    bar[WIDTH] = '\0';
    fprintf(stderr, "\r%s [%s] %3d%% (%llu / %llu MiB)", p->what, bar, pct, (unsigned long long)(done >> 20),
            (unsigned long long)(total >> 20));
    if (pct >= 100) fputc('\n', stderr);
    fflush(stderr);
}

void dcp_cli_release_mpi_signals(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0) continue;
        if (!(old.sa_flags & SA_SIGINFO) && (old.sa_handler == SIG_DFL || old.sa_handler == SIG_IGN)) continue;
        const void *fn;
        if (old.sa_flags & SA_SIGINFO) memcpy(&fn, &old.sa_sigaction, sizeof fn);
        else memcpy(&fn, &old.sa_handler, sizeof fn);
        Dl_info where;
        if (!dladdr(fn, &where) || !where.dli_fname || !strstr(where.dli_fname, "libucs")) continue;
        struct sigaction dfl;
        memset(&dfl, 0, sizeof dfl);
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        sigaction(sigs[i], &dfl, NULL);
    }
}
