/* Exit codes under repetition (issue 16): the apps started again and again as a user starts them,
 * every exit code checked; a crash at exit (139) or any death by a signal fails. Before the fix in
 * dcp_sem_destroy about 1 run of dcp-vk-run in 20 ended with a segfault after its correct output,
 * and dcp-vk-serve on a busy port in most runs with LP_NUM_THREADS=0.
 *   test_stress_exit <folder of the apps> [group]
 * groups: run (50 runs of dcp-vk-run: 25 at TP 1, 25 at TP 8 / DCP 2 over 8 logical devices, the
 * same greedy text every time), serve (20 starts of dcp-vk-serve on a busy port: exit 2 with its
 * message; 20 stopped by SIGTERM, half while loading and half once listening: exit 0); all (default).
 * The apps run without the validation layer, as users run them (the GPU tests run them with it). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

static const char *apps_dir;

typedef struct proc {
    pid_t pid;
    int out, err;       /* read ends of its stdout and stderr */
    char *obuf, *ebuf;  /* what it wrote so far */
    size_t olen, elen;
} proc;

static void append(int fd, char **buf, size_t *len)
{
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) return;
    char *b = realloc(*buf, *len + (size_t)n + 1);
    assert_non_null(b);
    memcpy(b + *len, chunk, (size_t)n);
    *len += (size_t)n;
    b[*len] = 0;
    *buf = b;
}

/* Starts apps_dir/app with argv (after the program name) and env (NULL-terminated "K=V" entries
 * added to the environment). */
static proc start(const char *app, const char *const *args, const char *const *env)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", apps_dir, app);
    const char *argv[32];
    int n = 0;
    argv[n++] = path;
    for (int i = 0; args[i] && n < 31; i++) argv[n++] = args[i];
    argv[n] = NULL;
    int po[2], pe[2];
    assert_int_equal(pipe(po), 0);
    assert_int_equal(pipe(pe), 0);
    proc p = {0};
    p.pid = fork();
    assert_true(p.pid >= 0);
    if (p.pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]);
        close(pe[0]);
        close(po[1]);
        close(pe[1]);
        for (int i = 0; env && env[i]; i++) {
            char kv[256];
            snprintf(kv, sizeof kv, "%s", env[i]);
            char *eq = strchr(kv, '=');
            if (eq) {
                *eq = 0;
                setenv(kv, eq + 1, 1);
            }
        }
        execv(path, (char *const *)argv);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    p.out = po[0];
    p.err = pe[0];
    return p;
}

/* Reads what p writes for up to ms milliseconds (forever if ms < 0) or until its stderr holds
 * `until` (NULL: until both pipes close). Returns 1 if `until` was seen. */
static int pump(proc *p, int ms, const char *until)
{
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        if (until && p->ebuf && strstr(p->ebuf, until)) return 1;
        struct pollfd f[2];
        nfds_t nf = 0;
        if (p->out >= 0) f[nf++] = (struct pollfd){p->out, POLLIN, 0};
        if (p->err >= 0) f[nf++] = (struct pollfd){p->err, POLLIN, 0};
        if (nf == 0) return 0;
        int wait = 100;
        if (ms >= 0) {
            struct timespec t;
            clock_gettime(CLOCK_MONOTONIC, &t);
            long spent = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
            if (spent >= ms) return 0;
            if (ms - spent < wait) wait = (int)(ms - spent);
        }
        if (poll(f, nf, wait) < 0 && errno != EINTR) fail_msg("poll: %s", strerror(errno));
        for (nfds_t i = 0; i < nf; i++) {
            if (!(f[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            const int is_out = f[i].fd == p->out;
            size_t *len = is_out ? &p->olen : &p->elen;
            const size_t before = *len;
            append(f[i].fd, is_out ? &p->obuf : &p->ebuf, len);
            if (*len == before) { /* the end of that pipe */
                close(f[i].fd);
                if (is_out) p->out = -1;
                else p->err = -1;
            }
        }
    }
}

/* Waits for p to end (reading its output); returns its wait status. */
static int finish(proc *p)
{
    pump(p, -1, NULL);
    int status = 0;
    while (waitpid(p->pid, &status, 0) < 0 && errno == EINTR) {
    }
    return status;
}

static void proc_free(proc *p)
{
    if (p->out >= 0) close(p->out);
    if (p->err >= 0) close(p->err);
    free(p->obuf);
    free(p->ebuf);
}

/* Fails unless status is a normal exit with `code`; names the run and shows its stderr. */
static void expect_exit(const proc *p, int status, int code, const char *what, int run)
{
    if (WIFSIGNALED(status))
        fail_msg("%s, run %d: killed by signal %d (%s); stderr:\n%s", what, run, WTERMSIG(status),
                 strsignal(WTERMSIG(status)), p->ebuf ? p->ebuf : "");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != code)
        fail_msg("%s, run %d: exit code %d, expected %d (139 would be a segfault caught by a handler); stderr:\n%s",
                 what, run, WIFEXITED(status) ? WEXITSTATUS(status) : -1, code, p->ebuf ? p->ebuf : "");
}

static const char *const no_validation[] = {"DCP_VK_VALIDATION=0", NULL};

/* n runs of dcp-vk-run with the TP / DCP options; the same text each time, *text keeping it. */
static void runs(int n, const char *tp, const char *dcp, const char *devices, char **text)
{
    char devs[64];
    snprintf(devs, sizeof devs, "DCP_VK_DEVICES=%s", devices);
    const char *env[] = {no_validation[0], devs, NULL};
    const char *args[] = {"-m", dcp_test_data_path("stories260K.gguf"), "-p", "Once upon a time", "-n", "16",
                          "--temp", "0", "--tensor-parallel-size", tp, "--decode-context-parallel-size", dcp, NULL};
    char what[64];
    snprintf(what, sizeof what, "dcp-vk-run at TP %s / DCP %s", tp, dcp);
    for (int i = 0; i < n; i++) {
        proc p = start("dcp-vk-run", args, env);
        int status = finish(&p);
        expect_exit(&p, status, 0, what, i + 1);
        assert_non_null(p.obuf);
        if (!*text) *text = strdup(p.obuf);
        else if (strcmp(*text, p.obuf) != 0)
            fail_msg("%s, run %d: the text differs:\n%s\nagainst\n%s", what, i + 1, p.obuf, *text);
        proc_free(&p);
    }
}

static void test_run(void **state)
{
    (void)state;
    char *tp1 = NULL, *tp8 = NULL;
    runs(25, "1", "1", "0", &tp1);
    runs(25, "8", "2", "0,0,0,0,0,0,0,0", &tp8);
    assert_string_equal(tp1, tp8); /* greedy: TP 8 / DCP 2 gives the text of TP 1 */
    free(tp1);
    free(tp8);
}

/* A listening TCP socket on 127.0.0.1 at a free port. */
static int busy_port(int *port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(s, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s, 4), 0);
    socklen_t len = sizeof a;
    assert_int_equal(getsockname(s, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return s;
}

/* Whether process pid catches SIGTERM yet (its SigCgt in /proc). */
static int catches_sigterm(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int yes = 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "SigCgt:", 7) == 0) yes = (strtoull(line + 7, NULL, 16) >> (SIGTERM - 1)) & 1;
    fclose(f);
    return yes;
}

static void test_serve(void **state)
{
    (void)state;
    const char *model = dcp_test_data_path("stories260K.gguf");
    int port = 0;
    int s = busy_port(&port);
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    const char *busy[] = {"-m", model, "--port", port_s, NULL};
    for (int i = 0; i < 20; i++) {
        proc p = start("dcp-vk-serve", busy, no_validation);
        int status = finish(&p);
        expect_exit(&p, status, 2, "dcp-vk-serve on a busy port", i + 1);
        if (!p.ebuf || !strstr(p.ebuf, "cannot listen on 127.0.0.1 port") || !strstr(p.ebuf, "Address already in use"))
            fail_msg("dcp-vk-serve on a busy port, run %d: no message naming the port; stderr:\n%s", i + 1,
                     p.ebuf ? p.ebuf : "");
        proc_free(&p);
    }
    close(s);
    const char *any[] = {"-m", model, "--port", "0", NULL};
    for (int i = 0; i < 20; i++) {
        proc p = start("dcp-vk-serve", any, no_validation);
        const int loading = i % 2 == 0;
        if (loading) { /* as soon as it catches SIGTERM: while it loads */
            for (int k = 0; k < 30000 && !catches_sigterm(p.pid); k++) pump(&p, 1, NULL);
        } else if (!pump(&p, 120000, "listening on http://")) {
            kill(p.pid, SIGKILL);
            finish(&p);
            fail_msg("dcp-vk-serve, run %d: not listening after 120 s; stderr:\n%s", i + 1, p.ebuf ? p.ebuf : "");
        }
        kill(p.pid, SIGTERM);
        int status = finish(&p);
        expect_exit(&p, status, 0, loading ? "dcp-vk-serve stopped by SIGTERM while loading"
                                           : "dcp-vk-serve stopped by SIGTERM once listening", i + 1);
        proc_free(&p);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <folder of the apps> [run|serve|all]\n", argv[0]);
        return 2;
    }
    apps_dir = argv[1];
    const char *group = argc > 2 ? argv[2] : "all";
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest run_tests[] = {cmocka_unit_test(test_run)};
    const struct CMUnitTest serve_tests[] = {cmocka_unit_test(test_serve)};
    int failed = 0;
    if (!strcmp(group, "run") || !strcmp(group, "all")) failed |= cmocka_run_group_tests(run_tests, NULL, NULL);
    if (!strcmp(group, "serve") || !strcmp(group, "all")) failed |= cmocka_run_group_tests(serve_tests, NULL, NULL);
    return failed;
}
