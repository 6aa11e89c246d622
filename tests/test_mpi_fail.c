/* MPI processes that fail (argv[1] mpiexec, argv[2] the build folder holding the apps): every
 * process's failure ends every process of the job within seconds, exit non-zero, with a message
 * that names the process and the cause. Real mpiexec (MPICH's Hydra), real kills:
 *  - dcp-vk-run at TP 2 over 2 processes: process 1 killed (SIGKILL) mid-generation; process 0
 *    killed mid-generation; process 1 killed under `mpiexec -disable-auto-cleanup` with process 0
 *    in a session of its own (`setsid -w`), so that no launcher ends it: the apps' own watch does;
 *    process 1 given a model file it cannot read (a truncated copy, a folder) while process 0
 *    reads it: both fail at load with process 1's message;
 *  - dcp-vk-serve at TP 2 over 2 processes: process 1 killed mid-request (a streaming completion
 *    in progress, whose stream then ends without [DONE]) and while idle; process 0 killed
 *    mid-request; process 1 given an unreadable model.
 * Which process is which pid comes from the apps' own line (under MPI process 0 prints "process K
 * pid P on HOST" for each); the processes killed are those pids, children of the test's mpiexec.
 * After each case every pid of the job must be gone. The time from the kill to the end of mpiexec
 * is printed; more than 30 s (a loaded machine) fails. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testutil.h"

enum { MAX_PROCS = 8, END_LIMIT_S = 30 };

static const char *mpiexec;
static char run_app[4096], serve_app[4096], work[4096];

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void nap_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

static const char *in_work(const char *name)
{
    static char buf[8][8192];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", work, name);
    return buf[k];
}

static const char *stories(void) { return dcp_test_data_path("stories260K.gguf"); }

/* ---- one mpiexec job ------------------------------------------------------------------------ */

typedef struct job {
    pid_t pid;           /* mpiexec */
    char out[8192], err[8192];
    int status;          /* waitpid status once ended */
    int npids;
    pid_t pids[MAX_PROCS]; /* process k's pid, from the app's line */
} job;

static void start(job *j, const char *tag, const char *const *argv)
{
    memset(j, 0, sizeof *j);
    snprintf(j->out, sizeof j->out, "%s", in_work(tag));
    strncat(j->out, ".out", sizeof j->out - strlen(j->out) - 1);
    snprintf(j->err, sizeof j->err, "%s", in_work(tag));
    strncat(j->err, ".err", sizeof j->err - strlen(j->err) - 1);
    fflush(NULL);
    j->pid = fork();
    assert_true(j->pid >= 0);
    if (j->pid == 0) {
        int fo = open(j->out, O_WRONLY | O_CREAT | O_TRUNC, 0600), fe = open(j->err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int nul = open("/dev/null", O_RDONLY);
        if (fo < 0 || fe < 0 || nul < 0) _exit(126);
        dup2(nul, 0);
        dup2(fo, 1);
        dup2(fe, 2);
        setenv("DCP_VK_DEVICES", "0", 1);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
}

/* Waits until the job's stderr (err) or stdout holds needle; fails after limit seconds or when the
 * job ends first. */
static void wait_text(job *j, bool in_err, const char *needle, double limit)
{
    const double t0 = now_s();
    for (;;) {
        char *s = slurp(in_err ? j->err : j->out);
        bool found = strstr(s, needle) != NULL;
        free(s);
        if (found) return;
        int status;
        if (waitpid(j->pid, &status, WNOHANG) == j->pid) {
            char *e = slurp(j->err);
            fail_msg("the job ended (status %#x) before \"%s\":\n%s", status, needle, e);
        }
        if (now_s() - t0 > limit) fail_msg("no \"%s\" after %.0f s", needle, limit);
        nap_ms(50);
    }
}

/* The pids of the job's processes from the app's line "process K pid P on HOST". */
static void read_pids(job *j, int nproc)
{
    char *e = slurp(j->err);
    for (int k = 0; k < nproc; k++) {
        char key[64];
        snprintf(key, sizeof key, "process %d pid ", k);
        const char *at = strstr(e, key);
        if (!at) fail_msg("no \"%s\" in:\n%s", key, e);
        j->pids[k] = (pid_t)atoi(at + strlen(key));
        assert_true(j->pids[k] > 1);
    }
    j->npids = nproc;
    free(e);
}

static bool alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    char path[64], buf[256] = {0};
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close = strrchr(buf, ')');
    return !(close && (close[2] == 'Z' || close[2] == 'X'));
}

/* Waits for mpiexec to end (at most END_LIMIT_S); returns the seconds it took after t0. Then
 * every pid of the job must be gone (at once: the launcher has ended). On a hang the job's
 * processes are killed and the test fails. */
static int exit_code(const job *j);

static double wait_end(job *j, double t0, const char *what)
{
    for (;;) {
        if (waitpid(j->pid, &j->status, WNOHANG) == j->pid) break;
        if (now_s() - t0 > END_LIMIT_S) {
            for (int k = 0; k < j->npids; k++) kill(j->pids[k], SIGKILL);
            kill(j->pid, SIGKILL);
            waitpid(j->pid, &j->status, 0);
            char *e = slurp(j->err);
            fail_msg("%s: mpiexec still running %d s after the failure:\n%s", what, END_LIMIT_S, e);
        }
        nap_ms(20);
    }
    const double t = now_s() - t0;
    nap_ms(500); /* a process reparented away from the launcher would still run now */
    for (int k = 0; k < j->npids; k++)
        if (alive(j->pids[k])) {
            kill(j->pids[k], SIGKILL);
            fail_msg("%s: process %d (pid %d) still runs after mpiexec ended", what, k, (int)j->pids[k]);
        }
    printf("%s: every process ended %.2f s after the %s, mpiexec exit %d\n", what, t, j->npids ? "kill" : "start",
           exit_code(j));
    return t;
}

static int exit_code(const job *j) { return WIFEXITED(j->status) ? WEXITSTATUS(j->status) : 128 + WTERMSIG(j->status); }

/* Fails unless the job's output names process k (pid) as the one that ended and says why: the
 * apps' watch ("process K (pid P on HOST) is gone"), or the launcher's report of pid P killed by
 * signal 9 beside the app's line that pid P is process K. */
static void expect_named_kill(const job *j, int k, const char *what)
{
    char *o = slurp(j->out), *e = slurp(j->err);
    char watch[96], hydra[64], map[64];
    snprintf(watch, sizeof watch, "process %d (pid %d on ", k, (int)j->pids[k]);
    snprintf(hydra, sizeof hydra, "PID %d ", (int)j->pids[k]);
    snprintf(map, sizeof map, "process %d pid %d ", k, (int)j->pids[k]);
    const bool by_watch = strstr(e, watch) && strstr(e, "is gone");
    const bool by_launcher = (strstr(o, hydra) || strstr(e, hydra)) && strstr(e, map) &&
                             (strstr(o, "signal 9") || strstr(o, "EXIT CODE: 9") || strstr(e, "signal 9"));
    if (!by_watch && !by_launcher)
        fail_msg("%s: nothing names process %d (pid %d) and its end:\nstdout:\n%s\nstderr:\n%s", what, k,
                 (int)j->pids[k], o, e);
    printf("%s: named by %s\n", what, by_watch ? "the apps' watch" : "mpiexec (pid) and the apps' pid line");
    free(o);
    free(e);
}

static void expect_failed(const job *j, const char *what)
{
    if (exit_code(j) == 0) {
        char *e = slurp(j->err);
        fail_msg("%s: mpiexec exited 0 after a process failed:\n%s", what, e);
    }
}

static void job_done(job *j)
{
    unlink(j->out);
    unlink(j->err);
}

/* ---- dcp-vk-run ----------------------------------------------------------------------------- */

/* A long greedy generation at TP 2 over the processes (stopped by the failure, never finished). */
#define RUN_LONG run_app, "-m", stories(), "--tensor-parallel-size", "2", "-n", "4000", "-c", "4096", "--temp", "0"

/* Starts the long generation, waits until it generates, kills process victim; checks the end. */
static void run_kill(const char *const *argv, int victim, const char *what)
{
    job j;
    start(&j, "run-kill", argv);
    wait_text(&j, true, "process 1 pid ", 300);
    read_pids(&j, 2);
    wait_text(&j, false, "Once upon a time, there was", 300); /* generating */
    const double t0 = now_s();
    assert_int_equal(kill(j.pids[victim], SIGKILL), 0);
    wait_end(&j, t0, what);
    expect_failed(&j, what);
    expect_named_kill(&j, victim, what);
    job_done(&j);
}

static void test_run_follower_killed(void **state)
{
    (void)state;
    const char *argv[] = {mpiexec, "-n", "2", RUN_LONG, NULL};
    run_kill(argv, 1, "dcp-vk-run, process 1 killed mid-generation");
}

static void test_run_leader_killed(void **state)
{
    (void)state;
    const char *argv[] = {mpiexec, "-n", "2", RUN_LONG, NULL};
    run_kill(argv, 0, "dcp-vk-run, process 0 killed mid-generation");
}

static void test_run_no_cleanup(void **state)
{
    (void)state;
    /* The launcher does not end the others here: process 0 runs in a session of its own, which
     * mpiexec's cleanup does not reach, and -disable-auto-cleanup asks it not to try. Without the
     * apps' watch process 0 waits in the step's collective forever. */
    const char *argv[] = {mpiexec, "-disable-auto-cleanup", "-n", "1", "setsid", "-w", RUN_LONG, ":", "-n", "1",
                          RUN_LONG, NULL};
    job j;
    start(&j, "run-nocleanup", argv);
    wait_text(&j, true, "process 1 pid ", 300);
    read_pids(&j, 2);
    wait_text(&j, false, "Once upon a time, there was", 300);
    const double t0 = now_s();
    assert_int_equal(kill(j.pids[1], SIGKILL), 0);
    const char *what = "dcp-vk-run under mpiexec -disable-auto-cleanup, process 1 killed";
    wait_end(&j, t0, what);
    expect_failed(&j, what);
    char *e = slurp(j.err), want[128];
    snprintf(want, sizeof want, "process 0: process 1 (pid %d on ", (int)j.pids[1]);
    if (!strstr(e, want) || !strstr(e, "is gone")) fail_msg("%s: the watch did not say it:\n%s", what, e);
    free(e);
    job_done(&j);
}

/* A copy of stories260K cut inside its tensor data (the header reads, the weights do not). */
static const char *truncated_model(void)
{
    const char *path = in_work("truncated.gguf");
    size_t n;
    char *data = dcp_test_read_file(stories(), &n);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n / 2, f), n / 2);
    assert_int_equal(fclose(f), 0);
    free(data);
    return path;
}

/* MPMD: process 0 given app_args with stories260K, process 1 the same with bad instead. */
static void load_failure(const char *app, const char *bad, const char *const *extra, const char *msg, const char *what)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = mpiexec;
    for (int side = 0; side < 2; side++) {
        if (side) argv[n++] = ":";
        argv[n++] = "-n";
        argv[n++] = "1";
        argv[n++] = app;
        argv[n++] = "-m";
        argv[n++] = side ? bad : stories();
        for (int i = 0; extra[i]; i++) argv[n++] = extra[i];
    }
    argv[n] = NULL;
    job j;
    const double t0 = now_s();
    start(&j, "load", argv);
    wait_end(&j, t0, what); /* from the start: the whole job, load included */
    if (exit_code(&j) != 1) {
        char *e = slurp(j.err);
        fail_msg("%s: exit %d (want 1):\n%s", what, exit_code(&j), e);
    }
    char *e = slurp(j.err), *o = slurp(j.out), want[4200];
    snprintf(want, sizeof want, "process 1: reading the model: ");
    if (!strstr(e, want) || !strstr(e, bad) || !strstr(e, msg))
        fail_msg("%s: no message naming process 1, the file and \"%s\":\n%s", what, msg, e);
    if (strstr(e, "process 0: reading")) fail_msg("%s: process 0 failed too:\n%s", what, e);
    if (strstr(o, "Once upon a time,")) fail_msg("%s: text printed after all:\n%s", what, o);
    free(e);
    free(o);
    job_done(&j);
}

static void test_run_load_failure(void **state)
{
    (void)state;
    const char *extra[] = {"--tensor-parallel-size", "2", "-n", "16", "--temp", "0", NULL};
    load_failure(run_app, truncated_model(), extra, "extends past end of file",
                 "dcp-vk-run, process 1 given a truncated model");
    const char *dir = in_work("folder.gguf");
    assert_true(mkdir(dir, 0700) == 0 || errno == EEXIST);
    load_failure(run_app, dir, extra, "not a regular file", "dcp-vk-run, process 1 given a folder as the model");
    rmdir(dir);
}

/* ---- dcp-vk-serve --------------------------------------------------------------------------- */

static int port_of(const job *j)
{
    char *e = slurp(j->err);
    const char *key = "listening on http://127.0.0.1:", *at = strstr(e, key);
    int port = at ? atoi(at + strlen(key)) : 0;
    free(e);
    assert_true(port > 0);
    return port;
}

/* A streaming completion long enough to be running when its server fails; curl writes the
 * stream to out. */
static pid_t stream_start(int port, const char *out)
{
    char url[128];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1/completions", port);
    const char *body = "{\"model\": \"stories260K\", \"prompt\": \"Once upon a time\", \"max_tokens\": 3000, "
                       "\"temperature\": 0, \"stream\": true}";
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int nul = open("/dev/null", O_WRONLY);
        dup2(nul, 2);
        execlp("curl", "curl", "-sN", "-o", out, "-H", "Content-Type: application/json", "-d", body, url, (char *)NULL);
        _exit(127);
    }
    return pid;
}

static void serve_kill(int victim, bool mid_request, const char *what)
{
    const char *argv[] = {mpiexec, "-n", "2", serve_app, "-m", stories(), "--tensor-parallel-size", "2", "-c", "4096",
                          "--port", "0", NULL};
    job j;
    start(&j, "serve-kill", argv);
    wait_text(&j, true, "listening on http://127.0.0.1:", 300);
    read_pids(&j, 2);
    const int port = port_of(&j);
    const char *out = in_work("stream.out");
    pid_t curl = 0;
    if (mid_request) {
        curl = stream_start(port, out);
        const double t0 = now_s();
        for (;;) { /* some of the stream has come: the request runs */
            struct stat sb;
            if (stat(out, &sb) == 0 && sb.st_size > 400) break;
            if (now_s() - t0 > 120) fail_msg("%s: the stream did not start", what);
            nap_ms(20);
        }
    }
    const double t0 = now_s();
    assert_int_equal(kill(j.pids[victim], SIGKILL), 0);
    wait_end(&j, t0, what);
    expect_failed(&j, what);
    expect_named_kill(&j, victim, what);
    if (curl) {
        int status;
        assert_int_equal(waitpid(curl, &status, 0), curl);
        char *s = slurp(out);
        if (strstr(s, "[DONE]")) fail_msg("%s: the stream ended as if complete:\n%s", what, s);
        free(s);
        unlink(out);
    }
    job_done(&j);
}

static void test_serve_follower_killed_mid_request(void **state)
{
    (void)state;
    serve_kill(1, true, "dcp-vk-serve, process 1 killed mid-request");
}

static void test_serve_leader_killed_mid_request(void **state)
{
    (void)state;
    serve_kill(0, true, "dcp-vk-serve, process 0 killed mid-request");
}

static void test_serve_follower_killed_idle(void **state)
{
    (void)state;
    serve_kill(1, false, "dcp-vk-serve, process 1 killed between requests");
}

static void test_serve_load_failure(void **state)
{
    (void)state;
    const char *extra[] = {"--tensor-parallel-size", "2", "--port", "0", NULL};
    load_failure(serve_app, truncated_model(), extra, "extends past end of file",
                 "dcp-vk-serve, process 1 given a truncated model");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MPIEXEC BUILD_DIR\n", argv[0]);
        return 2;
    }
    mpiexec = argv[1];
    snprintf(run_app, sizeof run_app, "%s/dcp-vk-run", argv[2]);
    snprintf(serve_app, sizeof serve_app, "%s/dcp-vk-serve", argv[2]);
    const char *tmp = getenv("TMPDIR");
    snprintf(work, sizeof work, "%s/dcp-vk-test-mpi-fail-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(work)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_run_load_failure),
        cmocka_unit_test(test_run_follower_killed),
        cmocka_unit_test(test_run_leader_killed),
        cmocka_unit_test(test_run_no_cleanup),
        cmocka_unit_test(test_serve_load_failure),
        cmocka_unit_test(test_serve_follower_killed_mid_request),
        cmocka_unit_test(test_serve_leader_killed_mid_request),
        cmocka_unit_test(test_serve_follower_killed_idle),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(in_work("truncated.gguf"));
    rmdir(work);
    return rc;
}
