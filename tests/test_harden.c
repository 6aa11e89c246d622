/* The apps as a careless or hostile user drives them (issue 13): argv[1] names a group, argv[2] the
 * build folder holding the apps, argv[3] mpiexec (group mpi).
 *   files    no file written through a link or over a special file: links planted at the output
 *            and beside it, a FIFO, a device node (as root), a directory; --force replaces the
 *            entry itself; dcp-vk-run without -m writes nothing (TMPDIR stays empty)
 *   options  decimal-only values, signs and spaces refused, range errors worded as such; one
 *            message prefix; no Vulkan driver said in words; -f FILE / -f - / NUL bytes; JSON of a
 *            path that is not UTF-8; every app exits 1 with a message when stdout fails (/dev/full);
 *            --help and --version of every app (and of each dcp-vk-bench command) started from a
 *            120-character path: help texts over stdio's 4 KiB buffer, and to /dev/full each says
 *            "No space left on device" (the errno of the first failed write), never EIO
 *   memory   -c 8000000 and dcp-vk-bench attn --ctx 67108864 refused before allocating, with the
 *            longest context that fits
 *   rlimit   under `ulimit -v 1000000`, -c 1000000 refused (it crashed in the driver) and the
 *            context it names runs (not in the sanitizer build: ASan needs the address space)
 *   signals  SIGINT / SIGTERM stop at a step boundary with the summary (130 / 143, JSON
 *            "interrupted": true); a second signal ends the process at once
 *   mpi      processes given different options (MPMD mpiexec) exit 2 with one message naming the
 *            option and the processes, no hang; -f - under mpiexec; SIGINT to mpiexec stops every
 *            process at the same step */
#define _DEFAULT_SOURCE /* mknod, makedev */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dcpvk/version.h"
#include "testutil.h"

static const char *bin, *mpiexec;
static char run_app[4096], gguf_app[4096], bench_app[4096], info_app[4096];
static char work[4096]; /* a fresh folder of this test process */

/* ---- child processes ------------------------------------------------------------------------ */

typedef struct spawn_opts {
    const char *const *argv;
    const char *const *env;   /* "NAME=value" set in the child, NULL-terminated (may be NULL) */
    const char *input;        /* bytes on stdin (NULL: /dev/null) */
    size_t input_len;
    const char *out_path;     /* stdout to this file (NULL: a temporary that is captured) */
    uint64_t as_limit;        /* RLIMIT_AS of the child in bytes (0: unchanged), as `ulimit -v` */
} spawn_opts;

typedef struct child {
    pid_t pid;
    FILE *out, *err;          /* captured stdout (NULL with out_path) and stderr */
} child;

static child spawn(const spawn_opts *o)
{
    child c = {0, o->out_path ? NULL : tmpfile(), tmpfile()};
    assert_true(c.err && (o->out_path || c.out));
    FILE *in = tmpfile();
    assert_non_null(in);
    if (o->input) assert_int_equal(fwrite(o->input, 1, o->input_len, in), o->input_len);
    rewind(in);
    fflush(NULL);
    c.pid = fork();
    assert_true(c.pid >= 0);
    if (c.pid == 0) {
        int fo = o->out_path ? open(o->out_path, O_WRONLY) : fileno(c.out);
        if (fo < 0) _exit(126);
        dup2(fileno(in), 0);
        dup2(fo, 1);
        dup2(fileno(c.err), 2);
        if (o->as_limit) {
            struct rlimit rl = {o->as_limit, o->as_limit};
            if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(125);
        }
        for (int i = 0; o->env && o->env[i]; i++) {
            char name[256];
            const char *eq = strchr(o->env[i], '=');
            snprintf(name, sizeof name, "%.*s", (int)(eq - o->env[i]), o->env[i]);
            setenv(name, eq + 1, 1);
        }
        execvp(o->argv[0], (char *const *)o->argv);
        _exit(127);
    }
    fclose(in);
    return c;
}

static char *slurp(FILE *f)
{
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

typedef struct result {
    int status;               /* waitpid status */
    int code;                 /* exit code, or -1 when a signal ended it */
    char *out, *err;
} result;

static result finish(child c)
{
    result r = {0, -1, NULL, NULL};
    assert_int_equal(waitpid(c.pid, &r.status, 0), c.pid);
    if (WIFEXITED(r.status)) r.code = WEXITSTATUS(r.status);
    r.out = slurp(c.out);
    r.err = slurp(c.err);
    return r;
}

static result run(const spawn_opts *o) { return finish(spawn(o)); }

static result run_args(const char *const *argv)
{
    spawn_opts o = {.argv = argv};
    return run(&o);
}

static void done(result *r)
{
    if (strstr(r->err, "validation ")) fail_msg("validation message:\n%s", r->err);
    free(r->out);
    free(r->err);
}

/* Fails unless r exited with code and stderr holds msg (NULL: anything). */
static void expect(result *r, const char *what, int code, const char *msg)
{
    if (r->code != code || (msg && !strstr(r->err, msg)))
        fail_msg("%s: exit %d (want %d), want \"%s\" on stderr:\n%s", what, r->code, code, msg ? msg : "", r->err);
}

/* Waits until file f (a child's stdout) holds at least n bytes (at most 60 s). */
static void wait_output(FILE *f, long n)
{
    for (int i = 0; i < 6000; i++) {
        struct stat sb;
        if (fstat(fileno(f), &sb) == 0 && sb.st_size >= n) return;
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    }
    fail_msg("no output after 60 s");
}

static const char *stories(void) { return dcp_test_data_path("stories260K.gguf"); }

static const char *in_work(const char *name)
{
    static char buf[8][8192];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", work, name);
    return buf[k];
}

static void write_file(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Names in folder dir, sorted, joined with '/', into buf. */
static const char *listing(const char *dir, char *buf, size_t cap)
{
    char *names[256];
    int n = 0;
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *e;
    while ((e = readdir(d)) && n < 256)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[n++] = strdup(e->d_name);
    closedir(d);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(names[j], names[i]) < 0) {
                char *t = names[i];
                names[i] = names[j];
                names[j] = t;
            }
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < n; i++) {
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? "/" : "", names[i]);
        free(names[i]);
    }
    return buf;
}

/* ---- files ---------------------------------------------------------------------------------- */

static void check_victim(const char *victim)
{
    size_t n;
    char *s = dcp_test_read_file(victim, &n);
    if (strcmp(s, "keep\n")) fail_msg("%s was written through a link: \"%s\"", victim, s);
    free(s);
}

static void test_files_links(void **state)
{
    (void)state;
    const char *victim = in_work("victim");
    write_file(victim, "keep\n", 5);
    /* A link at the output itself: refused, named as a link; the victim untouched. */
    const char *out = in_work("out.gguf");
    assert_int_equal(symlink(victim, out), 0);
    const char *mk[] = {gguf_app, "--make-model", out, "--n-layer", "1", NULL};
    result r = run_args(mk);
    expect(&r, "--make-model onto a link", 1, "exists and is a symbolic link, not a regular file: not overwriting it");
    done(&r);
    check_victim(victim);
    struct stat sb;
    assert_int_equal(lstat(out, &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    /* --quantize onto the link: refused too. */
    const char *src = in_work("src.gguf");
    const char *mk2[] = {gguf_app, "--make-model", src, "--n-layer", "1", "--n-embd", "256", NULL};
    r = run_args(mk2);
    expect(&r, "--make-model", 0, NULL);
    done(&r);
    const char *q[] = {gguf_app, "--quantize", src, out, "--type", "q8_0", NULL};
    r = run_args(q);
    expect(&r, "--quantize onto a link", 1, "symbolic link");
    done(&r);
    check_victim(victim);
    /* Links planted at names a writer could have used beside the output (the old fixed ".tmp"
     * and its mixed-type variant): never followed, left as they are. */
    const char *out2 = in_work("fresh.gguf");
    const char *planted[] = {"fresh.gguf.tmp", "fresh.gguf.f32.tmp", "fresh.gguf.XXXXXX"};
    for (int i = 0; i < 3; i++) assert_int_equal(symlink(victim, in_work(planted[i])), 0);
    const char *mk3[] = {gguf_app, "--make-model", out2, "--n-layer", "1", NULL};
    r = run_args(mk3);
    expect(&r, "--make-model beside planted links", 0, NULL);
    done(&r);
    const char *mk4[] = {gguf_app, "--make-model", out2, "--n-layer", "1", "--type", "q4_k_m", NULL};
    r = run_args(mk4);
    expect(&r, "--make-model q4_k_m beside planted links", 0, NULL);
    done(&r);
    check_victim(victim);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(lstat(in_work(planted[i]), &sb), 0);
        assert_true(S_ISLNK(sb.st_mode));
    }
    assert_int_equal(lstat(out2, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    /* --force replaces the link itself with the new file; what it pointed to is untouched. */
    const char *force[] = {gguf_app, "--make-model", out, "--n-layer", "1", "--force", NULL};
    r = run_args(force);
    expect(&r, "--make-model --force onto a link", 0, NULL);
    done(&r);
    check_victim(victim);
    assert_int_equal(lstat(out, &sb), 0);
    assert_true(S_ISREG(sb.st_mode));
    /* Nothing else appeared in the folder (no temporaries left behind). */
    char buf[4096];
    listing(work, buf, sizeof buf);
    if (strcmp(buf, "fresh.gguf/fresh.gguf.XXXXXX/fresh.gguf.f32.tmp/fresh.gguf.tmp/out.gguf/src.gguf/victim"))
        fail_msg("the folder holds %s", buf);
}

static void test_files_special(void **state)
{
    (void)state;
    /* A FIFO: refused without opening it (opening would block: the test's timeout would say so). */
    const char *fifo = in_work("fifo.gguf");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    const char *mk[] = {gguf_app, "--make-model", fifo, "--n-layer", "1", NULL};
    result r = run_args(mk);
    expect(&r, "--make-model onto a FIFO", 1, "is a FIFO, not a regular file");
    done(&r);
    struct stat sb;
    assert_int_equal(lstat(fifo, &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    /* A directory: refused, even with --force. */
    const char *dir = in_work("dir.gguf");
    assert_int_equal(mkdir(dir, 0700), 0);
    const char *mkd[] = {gguf_app, "--make-model", dir, "--n-layer", "1", "--force", NULL};
    r = run_args(mkd);
    expect(&r, "--make-model onto a directory", 1, "is a directory");
    done(&r);
    /* A device node (the null device's numbers), where this process may make one (root, as in CI):
     * refused and left a device node; as root the old writer replaced it with a regular file. */
    const char *node = in_work("null.gguf");
    if (mknod(node, S_IFCHR | 0600, makedev(1, 3)) == 0) {
        const char *mkn[] = {gguf_app, "--make-model", node, "--n-layer", "1", NULL};
        r = run_args(mkn);
        expect(&r, "--make-model onto a device node", 1, "is a device node, not a regular file");
        done(&r);
        assert_int_equal(lstat(node, &sb), 0);
        assert_true(S_ISCHR(sb.st_mode));
        printf("device node: refused and kept\n");
    } else {
        assert_int_equal(errno, EPERM); /* not root: the FIFO above covers special files */
        printf("device node: mknod not permitted here (not root); the FIFO covers special files\n");
    }
}

static void test_files_run_default_model(void **state)
{
    (void)state;
    /* Without -m the generated model stays in memory: TMPDIR (and the folder it runs in) stay
     * empty, and a link planted where the old writer put its file is not touched. */
    const char *tmp = in_work("tmpdir");
    assert_int_equal(mkdir(tmp, 0700), 0);
    const char *victim = in_work("victim2");
    write_file(victim, "keep\n", 5);
    char env_tmp[4200];
    snprintf(env_tmp, sizeof env_tmp, "TMPDIR=%s", tmp);
    const char *env[] = {env_tmp, NULL};
    const char *a[] = {run_app, "-n", "4", "--temp", "0", NULL};
    spawn_opts o = {.argv = a, .env = env};
    result r = run(&o);
    expect(&r, "dcp-vk-run without -m", 0, "made in memory");
    done(&r);
    char buf[4096];
    if (strcmp(listing(tmp, buf, sizeof buf), "")) fail_msg("TMPDIR holds %s", buf);
    check_victim(victim);
}

/* ---- options and output --------------------------------------------------------------------- */

static void test_options(void **state)
{
    (void)state;
    /* Leading zeros are decimal: --n-layer 010 makes ten layers (octal gave eight). */
    const char *out = in_work("ten.gguf");
    const char *mk[] = {gguf_app, "--make-model", out, "--n-layer", "010", "--n-embd", "64", "--n-ff", "128", NULL};
    result r = run_args(mk);
    expect(&r, "--n-layer 010", 0, NULL);
    done(&r);
    const char *ls[] = {gguf_app, out, NULL};
    r = run_args(ls);
    expect(&r, "listing", 0, NULL);
    if (!strstr(r.out, "n_layer 10,")) fail_msg("--n-layer 010 did not make 10 layers:\n%s", r.out);
    done(&r);
    struct {
        const char *const argv[8];
        int code;
        const char *msg;
    } cases[] = {
        {{gguf_app, "--make-model", out, "--seed", " -1", NULL}, 2, "option --seed: ' -1' is not a decimal integer"},
        {{gguf_app, "--make-model", out, "--seed", "-1", NULL}, 2, "option --seed: '-1' is not a decimal integer"},
        {{gguf_app, "--make-model", out, "--n-head", "0x10", NULL}, 2, "'0x10' is not a decimal integer"},
        {{gguf_app, "--make-model", out, "--n-head", "+8", NULL}, 2, "'+8' is not a decimal integer"},
        {{gguf_app, "--make-model", out, "--seed", "18446744073709551616", NULL}, 2,
         "option --seed: 18446744073709551616 is out of range (allowed: 0 .. 18446744073709551615)"},
        {{gguf_app, "--make-model", out, "--rms-eps", "nan", NULL}, 2, "'nan' is not a decimal number"},
        {{gguf_app, "--make-model", out, "--n-head", "10", NULL}, 2, "n_head_kv 4 does not divide n_head 10"},
        {{run_app, "--temp", "1e999", NULL}, 2, "option --temp: 1e999 is out of range (allowed: 0 .. 100)"},
        {{run_app, "--temp", " 1", NULL}, 2, "option --temp: ' 1' is not a decimal number"},
        {{run_app, "--temp", "inf", NULL}, 2, "'inf' is not a decimal number"},
        {{run_app, "--top-p", "1.5", NULL}, 2, "option --top-p: 1.5 is out of range (allowed: 0 .. 1)"},
        {{run_app, "-n", "99999999999999999999", NULL}, 2, "option -n: 99999999999999999999 is out of range"},
        {{run_app, "--seed", " -1", NULL}, 2, "option --seed: ' -1' is not a decimal integer"},
        {{run_app, "-c", "-5", NULL}, 2, "option -c: '-5' is not a decimal integer"},
        {{bench_app, "capacity", "--tp", "08x", NULL}, 2, "option --tp: '08x' is not a decimal integer"},
        {{bench_app, "attn", "--ctx", "1e3", NULL}, 2, "option --ctx: '1e3' is not a decimal integer"},
        /* One prefix, not "detokenize: detokenize:". */
        {{gguf_app, stories(), "--detokenize", "1 99999", NULL}, 1,
         "dcp-vk-gguf: detokenize: token id 99999 out of range [0, 512)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        r = run_args(cases[i].argv);
        expect(&r, cases[i].argv[3] ? cases[i].argv[3] : cases[i].argv[1], cases[i].code, cases[i].msg);
        if (strstr(r.err, "detokenize: detokenize:")) fail_msg("doubled prefix: %s", r.err);
        done(&r);
    }
    /* --temp 1e-45 is a number in [0, 100] (a subnormal float): accepted, and runs. */
    const char *t[] = {run_app, "-m", stories(), "-n", "4", "--temp", "1e-45", NULL};
    r = run_args(t);
    expect(&r, "--temp 1e-45", 0, NULL);
    done(&r);
}

static void test_no_driver(void **state)
{
    (void)state;
    /* As a user runs it: without the validation layer (whose messenger would echo the loader). */
    const char *env[] = {"VK_ICD_FILENAMES=/nonexistent/icd.json", "VK_DRIVER_FILES=/nonexistent/icd.json",
                         "DCP_VK_VALIDATION=0", NULL};
    const char *apps[][4] = {{info_app, NULL}, {run_app, "-m", NULL, NULL}};
    apps[1][2] = stories();
    for (int i = 0; i < 2; i++) {
        spawn_opts o = {.argv = apps[i], .env = env};
        result r = run(&o);
        expect(&r, apps[i][0], 1, "no Vulkan driver found");
        if (!strstr(r.err, "apt-get install mesa-vulkan-drivers") || strstr(r.err, "vkCreateInstance"))
            fail_msg("the message should say how to install a driver, not the Vulkan call:\n%s", r.err);
        done(&r);
    }
}

static void test_prompt_file(void **state)
{
    (void)state;
    const char *ref_a[] = {run_app, "-m", stories(), "-p", "Once upon a time", "-n", "16", "--temp", "0", NULL};
    result ref = run_args(ref_a);
    expect(&ref, "-p", 0, NULL);
    const char *pf = in_work("prompt.txt");
    write_file(pf, "Once upon a time", 16);
    const char *f_a[] = {run_app, "-m", stories(), "-f", pf, "-n", "16", "--temp", "0", NULL};
    result r = run_args(f_a);
    expect(&r, "-f FILE", 0, NULL);
    assert_string_equal(r.out, ref.out);
    done(&r);
    const char *s_a[] = {run_app, "-m", stories(), "--file", "-", "-n", "16", "--temp", "0", NULL};
    spawn_opts o = {.argv = s_a, .input = "Once upon a time", .input_len = 16};
    r = run(&o);
    expect(&r, "-f -", 0, NULL);
    assert_string_equal(r.out, ref.out);
    done(&r);
    done(&ref);
    /* NUL bytes: refused with the offset, exit 2 (from a file and from stdin). */
    const char *nf = in_work("nul.txt");
    write_file(nf, "Once upon\0 a time", 17);
    const char *n_a[] = {run_app, "-m", stories(), "-f", nf, NULL};
    r = run_args(n_a);
    expect(&r, "-f with a NUL byte", 2, "holds a NUL byte at offset 9");
    done(&r);
    o.input = "ab\0c";
    o.input_len = 4;
    r = run(&o);
    expect(&r, "-f - with a NUL byte", 2, "standard input holds a NUL byte at offset 2");
    done(&r);
    const char *m_a[] = {run_app, "-m", stories(), "-f", in_work("missing.txt"), NULL};
    r = run_args(m_a);
    expect(&r, "-f missing", 1, "cannot open the prompt file: No such file or directory");
    done(&r);
    const char *b_a[] = {run_app, "-m", stories(), "-f", pf, "-p", "x", NULL};
    r = run_args(b_a);
    expect(&r, "-f and -p", 2, "-p and -f both give the prompt");
    done(&r);
}

static void test_json_path(void **state)
{
    (void)state;
    /* A model path with a byte that is not UTF-8 and a control character: valid JSON, escaped. */
    const char *path = in_work("m\xff\x01q\".gguf");
    assert_int_equal(symlink(stories(), path), 0);
    const char *a[] = {run_app, "-m", path, "-n", "2", "--json", NULL};
    result r = run_args(a);
    expect(&r, "--json", 0, NULL);
    if (!dcp_test_valid_utf8(r.out, strlen(r.out))) fail_msg("--json output is not UTF-8: %s", r.out);
    if (!strstr(r.out, "m\xef\xbf\xbd\\u0001q\\\".gguf\"")) fail_msg("the path is not escaped: %s", r.out);
    done(&r);
    const char *g[] = {gguf_app, path, "--json", NULL};
    r = run_args(g);
    expect(&r, "dcp-vk-gguf --json", 0, NULL);
    if (!strstr(r.out, "m\xef\xbf\xbd\\u0001q\\\".gguf\"")) fail_msg("the path is not escaped: %s", r.out);
    done(&r);
}

static void test_output_errors(void **state)
{
    (void)state;
    const char *const cases[][10] = {
        {run_app, "-m", NULL, "-n", "8", "--temp", "0", NULL},
        {run_app, "-m", NULL, "-n", "8", "--temp", "0", "--json", NULL},
        {bench_app, "capacity", NULL},
        {bench_app, "capacity", "--json", NULL},
        {gguf_app, NULL},
        {gguf_app, "--help", NULL},
        {info_app, NULL},
        {run_app, "--help", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *argv[10];
        for (int k = 0; k < 10; k++) argv[k] = cases[i][k];
        if (i < 2) argv[2] = stories();
        if (i == 4) argv[1] = stories();
        spawn_opts o = {.argv = argv, .out_path = "/dev/full"};
        result r = run(&o);
        expect(&r, argv[1] ? argv[1] : argv[0], 1, "writing the output: No space left on device");
        done(&r);
    }
}

/* --help and --version from a long program path (argv[0] is printed in the usage line of dcp-vk-run
 * and dcp-vk-serve): the text is whole when stdout works, longer than stdio's 4 KiB buffer where it
 * is long, and to /dev/full every app reports ENOSPC, the first failed write's errno (a flush
 * inside printf used to fail first and leave "Input/output error"). */
static void test_help_long_path(void **state)
{
    (void)state;
    static const char *const apps[] = {"dcp-vk-run", "dcp-vk-gguf", "dcp-vk-bench", "dcp-vk-info",
#ifdef DCP_TEST_SERVE
                                       "dcp-vk-serve",
#endif
                                       NULL};
    /* A folder whose name brings each link's path to 120 characters or more. */
    char dir[4096];
    int n = snprintf(dir, sizeof dir, "%s/", work);
    while (n < 110) dir[n++] = 'd';
    dir[n] = 0;
    assert_int_equal(mkdir(dir, 0700), 0);
    char version[64];
    for (int i = 0; apps[i]; i++) {
        char app[4200], target[4200];
        snprintf(app, sizeof app, "%s/%s", dir, apps[i]);
        snprintf(target, sizeof target, "%s/%s", bin, apps[i]);
        assert_int_equal(symlink(target, app), 0);
        assert_true(strlen(app) >= 120);
        const char *const sub[] = {NULL, "attn", "capacity", "matmul", "comm"};
        const int n_sub = strcmp(apps[i], "dcp-vk-bench") == 0 ? 5 : 1;
        for (int k = 0; k < n_sub; k++) {
            const char *help[4] = {app, sub[k] ? sub[k] : "--help", sub[k] ? "--help" : NULL, NULL};
            result r = run_args(help);
            expect(&r, apps[i], 0, NULL);
            const size_t len = strlen(r.out);
            printf("%s%s%s --help: %zu bytes\n", apps[i], sub[k] ? " " : "", sub[k] ? sub[k] : "", len);
            if (!strstr(r.out, "usage: ")) fail_msg("%s --help: no usage line:\n%s", apps[i], r.out);
            if (!sub[k] && !strstr(r.out, "--version")) fail_msg("%s --help does not list --version", apps[i]);
            /* the long ones cross stdio's buffer: the case that lost its errno */
            if (!sub[k] && strcmp(apps[i], "dcp-vk-bench") && strcmp(apps[i], "dcp-vk-info") && len <= 4096)
                fail_msg("%s --help is %zu bytes: the test needs a text over 4096", apps[i], len);
            done(&r);
            spawn_opts o = {.argv = help, .out_path = "/dev/full"};
            r = run(&o);
            expect(&r, apps[i], 1, "writing the output: No space left on device");
            done(&r);
        }
        const char *ver[] = {app, "--version", NULL};
        result r = run_args(ver);
        expect(&r, apps[i], 0, NULL);
        snprintf(version, sizeof version, "%s %s\n", apps[i], dcp_version());
        assert_string_equal(r.out, version);
        done(&r);
        spawn_opts o = {.argv = ver, .out_path = "/dev/full"};
        r = run(&o);
        expect(&r, apps[i], 1, "writing the output: No space left on device");
        done(&r);
        unlink(app);
    }
    rmdir(dir);
}

/* ---- memory --------------------------------------------------------------------------------- */

/* The number after "prefix" in s (0 if absent). */
static unsigned long number_after(const char *s, const char *prefix)
{
    const char *p = strstr(s, prefix);
    return p ? strtoul(p + strlen(prefix), NULL, 10) : 0;
}

static void test_memory_refused(void **state)
{
    (void)state;
    /* -c 8000000: refused before anything is allocated (once it filled 1.3 GB for 6 s, then said
     * "split it"), in the user's terms, with the longest context that fits; that one runs. */
    const char *a[] = {run_app, "-m", stories(), "-c", "8000000", "-n", "4", NULL};
    result r = run_args(a);
    expect(&r, "-c 8000000", 2, "8000000 tokens of context: on TP rank 0");
    if (!strstr(r.err, "maxStorageBufferRange") || !strstr(r.err, "The longest context that fits is"))
        fail_msg("no limit or longest context in:\n%s", r.err);
    unsigned long fits = number_after(r.err, "run with -c ");
    assert_true(fits > 4096 && fits < 8000000);
    done(&r);
    const char *h[] = {run_app, "--help", NULL};
    r = run_args(h);
    expect(&r, "--help", 0, NULL);
    if (!strstr(r.out, "1 .. 16777216") || strstr(r.out, "at most 4096\n")) fail_msg("-c in --help: %s", r.out);
    done(&r);
    /* dcp-vk-bench attn --ctx 67108864: refused before allocating (once 2.3 GB), one device and DCP. */
    const char *b[] = {bench_app, "attn", "--ctx", "67108864", "--q-heads", "8", "--kv-heads", "2", "--head-dim", "64", NULL};
    r = run_args(b);
    expect(&r, "attn --ctx 67108864", 2, "The longest --ctx that fits is");
    done(&r);
    const char *d[] = {bench_app, "attn", "--dcp", "2", "--devices", "0,0", "--ctx", "67108864", "--q-heads", "8",
                       "--kv-heads", "2", "--head-dim", "64", NULL};
    r = run_args(d);
    expect(&r, "attn --dcp 2 --ctx 67108864", 2, "The longest --ctx that fits is");
    done(&r);
}

static void test_memory_rlimit(void **state)
{
    (void)state;
    /* Under `ulimit -v 1000000` -c 1000000 died with SIGSEGV inside the driver after allocation
     * said yes: now refused with what it needs and what the limit leaves, and the context it
     * names runs under the same limit. */
    const char *a[] = {run_app, "-m", stories(), "-c", "1000000", "-n", "4", NULL};
    /* As a user runs it: the validation layer takes address space of its own as it goes; two
     * lavapipe threads whatever the machine (each thread's stack is address space too). */
    const char *env[] = {"DCP_VK_VALIDATION=0", "LP_NUM_THREADS=2", NULL};
    spawn_opts o = {.argv = a, .env = env, .as_limit = 1000000ull * 1024};
    result r = run(&o);
    expect(&r, "-c 1000000 under ulimit -v 1000000", 2, "the address-space limit (ulimit -v)");
    if (!strstr(r.err, "KV cache 610.4 MiB")) fail_msg("no breakdown of what is needed:\n%s", r.err);
    unsigned long fits = number_after(r.err, "run with -c ");
    done(&r);
    assert_true(fits > 1000 && fits < 1000000);
    char c[32];
    snprintf(c, sizeof c, "%lu", fits);
    const char *b[] = {run_app, "-m", stories(), "-c", c, "-n", "16", "--temp", "0", NULL};
    o.argv = b;
    r = run(&o);
    expect(&r, "the context it names", 0, NULL);
    if (strncmp(r.out, "Once upon a time, there was", 27)) fail_msg("text: %s", r.out);
    done(&r);
}

/* A draft model (--speculative-config) is counted before anything is allocated: under the same
 * limit the longest context that fits shrinks (the draft's weights and its run state of the same
 * context beside the target's), the message says what the draft takes, and that context runs with
 * the draft under the limit. */
static void test_memory_draft(void **state)
{
    (void)state;
    char spec[1024];
    snprintf(spec, sizeof spec, "{\"model\": \"%s\", \"num_speculative_tokens\": 2}", stories());
    const char *env[] = {"DCP_VK_VALIDATION=0", "LP_NUM_THREADS=2", NULL};
    const char *a[] = {run_app, "-m", stories(), "-c", "1000000", "-n", "4", NULL};
    spawn_opts o = {.argv = a, .env = env, .as_limit = 1000000ull * 1024};
    result r = run(&o);
    expect(&r, "-c 1000000 under ulimit -v 1000000", 2, "the address-space limit (ulimit -v)");
    const unsigned long alone = number_after(r.err, "run with -c ");
    done(&r);
    const char *b[] = {run_app, "-m", stories(), "-c", "1000000", "-n", "4", "--speculative-config", spec, NULL};
    o.argv = b;
    r = run(&o);
    expect(&r, "-c 1000000 with a draft model", 2, "for the draft model's weights and run state");
    const unsigned long with = number_after(r.err, "run with -c ");
    done(&r);
    printf("longest context under ulimit -v 1000000: %lu tokens alone, %lu with the draft model\n", alone, with);
    assert_true(with > 1000 && with < alone);
    char c[32];
    snprintf(c, sizeof c, "%lu", with);
    const char *d[] = {run_app, "-m", stories(), "-c", c, "-n", "16", "--temp", "0", "--speculative-config", spec, NULL};
    o.argv = d;
    r = run(&o);
    expect(&r, "the context it names, with the draft", 0, NULL);
    if (strncmp(r.out, "Once upon a time, there was", 27)) fail_msg("text: %s", r.out);
    done(&r);
}

/* ---- signals -------------------------------------------------------------------------------- */

/* A long greedy generation (stopped by the test, never finished). */
static const char *const long_run[] = {"-m", NULL, "-n", "4000", "-c", "4096", "--temp", "0", NULL};

static void test_signal_text(void **state)
{
    (void)state;
    const char *a[16] = {run_app};
    for (int i = 0; long_run[i] || i == 1; i++) a[i + 1] = i == 1 ? stories() : long_run[i];
    spawn_opts o = {.argv = a};
    child c = spawn(&o);
    wait_output(c.out, 80); /* the prompt and some generated text */
    kill(c.pid, SIGINT);
    result r = finish(c);
    expect(&r, "SIGINT", 130, "interrupted by SIGINT after");
    if (strncmp(r.out, "Once upon a time, there was", 27)) fail_msg("generated text lost: %s", r.out);
    if (!strstr(r.err, "tokens/s")) fail_msg("no summary: %s", r.err);
    done(&r);
}

static void test_signal_json(void **state)
{
    (void)state;
    const char *a[16] = {run_app};
    int n = 1;
    for (int i = 0; long_run[i] || i == 1; i++) a[n++] = i == 1 ? stories() : long_run[i];
    a[n++] = "--json";
    spawn_opts o = {.argv = a};
    child c = spawn(&o);
    sleep(2); /* loaded and generating; a signal before the first step stops there as well */
    kill(c.pid, SIGTERM);
    result r = finish(c);
    expect(&r, "SIGTERM", 143, NULL);
    if (!strstr(r.out, "\"interrupted\": true}") || !strstr(r.out, "\"text\": "))
        fail_msg("no JSON summary with \"interrupted\": true: %s", r.out);
    done(&r);
}

static void test_signal_twice(void **state)
{
    (void)state;
    const char *a[16] = {run_app};
    for (int i = 0; long_run[i] || i == 1; i++) a[i + 1] = i == 1 ? stories() : long_run[i];
    spawn_opts o = {.argv = a};
    child c = spawn(&o);
    wait_output(c.out, 80);
    /* Two different signals at once (two of the same could merge into one pending signal): the
     * one taken first asks for a stop, the other ends the process by its default action, before
     * the step ends (which one comes first depends on the threads that take them). */
    kill(c.pid, SIGINT);
    kill(c.pid, SIGTERM);
    result r = finish(c);
    if (!WIFSIGNALED(r.status) || (WTERMSIG(r.status) != SIGTERM && WTERMSIG(r.status) != SIGINT))
        fail_msg("a second signal should end the process at once (status %#x):\n%s", r.status, r.err);
    if (strstr(r.err, "tokens/s")) fail_msg("the summary of a stopped run was printed: %s", r.err);
    done(&r);
}

static void test_signal_prefill(void **state)
{
    (void)state;
    /* A long prompt in steps of one token: a signal during the prefill stops at the next step. */
    enum { REPS = 600 };
    const char *unit = "Once upon a time ";
    char *prompt = malloc(REPS * strlen(unit) + 1);
    assert_non_null(prompt);
    prompt[0] = 0;
    for (int i = 0; i < REPS; i++) strcat(prompt, unit);
    const char *pf = in_work("long.txt");
    write_file(pf, prompt, strlen(prompt));
    free(prompt);
    const char *a[] = {run_app, "-m", stories(), "-f", pf, "--prefill-chunk", "1", "-c", "4096", "-n", "8", NULL};
    spawn_opts o = {.argv = a};
    child c = spawn(&o);
    sleep(1);
    kill(c.pid, SIGINT);
    result r = finish(c);
    expect(&r, "SIGINT during the prefill", 130, "interrupted by SIGINT after 0 generated tokens");
    done(&r);
}

/* ---- MPI ------------------------------------------------------------------------------------ */

/* mpiexec with MPMD sections: argv of each section after "-n 1". */
static result mpmd(const char *const *a, const char *const *b)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = mpiexec;
    argv[n++] = "-n";
    argv[n++] = "1";
    for (int i = 0; a[i]; i++) argv[n++] = a[i];
    argv[n++] = ":";
    argv[n++] = "-n";
    argv[n++] = "1";
    for (int i = 0; b[i]; i++) argv[n++] = b[i];
    argv[n] = NULL;
    return run_args(argv);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

static void test_mpi_different(void **state)
{
    (void)state;
#define RUN(...) ((const char *const[]){run_app, "-m", stories(), "--tensor-parallel-size", "2", "--temp", "0", __VA_ARGS__, NULL})
    struct {
        const char *const *a, *const *b;
        const char *msg;
    } cases[] = {
        /* different -n: hung forever before */
        {RUN("-n", "8"), RUN("-n", "16"), "-n (--n-predict) is 16 on process 1 but 8 on process 0"},
        /* prompts of the same length: mixed text and exit 0 before */
        {RUN("-p", "Once upon a dog", "-n", "8"), RUN("-p", "Once upon a cat", "-n", "8"),
         "the prompt (-p or -f) is \"Once upon a cat\" (15 bytes) on process 1 but \"Once upon a dog\" (15 bytes) on "
         "process 0"},
        /* prompts of different lengths: an abort inside MPI before */
        {RUN("-p", "Once upon a time", "-n", "8"), RUN("-p", "Once", "-n", "8"),
         "the prompt (-p or -f) is \"Once\" (4 bytes) on process 1"},
        {RUN("--seed", "1", "--temp", "0.8", "-n", "4"), RUN("--seed", "2", "--temp", "0.8", "-n", "4"),
         "--seed is 2 on process 1 but 1 on process 0"},
        {RUN("-n", "4", "--kv-dtype", "f32"), RUN("-n", "4"), "--kv-dtype is f16 on process 1 but f32 on process 0"},
        {RUN("-n", "4"), ((const char *const[]){run_app, "--tensor-parallel-size", "2", "--temp", "0", "-n", "4", NULL}),
         "-m (--model) is not given (the generated test model) on process 1 but given on process 0"},
    };
#undef RUN
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        result r = mpmd(cases[i].a, cases[i].b);
        expect(&r, "MPMD with different options", 2, cases[i].msg);
        if (!strstr(r.err, "the MPI processes of this run were given different"))
            fail_msg("case %zu: no clear message:\n%s", i, r.err);
        if (count(r.err, "were given different") != 1) fail_msg("case %zu: not one message:\n%s", i, r.err);
        if (strstr(r.out, "Once upon")) fail_msg("case %zu: text printed after all:\n%s", i, r.out);
        done(&r);
    }
    /* Different models (both files are stories260K's shape? no: the generated model differs). */
    const char *gen = in_work("gen.gguf");
    const char *mk[] = {gguf_app, "--make-model", gen, "--n-layer", "2", "--n-embd", "64", "--n-head", "8",
                        "--n-head-kv", "4", "--head-dim", "8", "--n-ff", "128", NULL};
    result r = run_args(mk);
    expect(&r, "--make-model", 0, NULL);
    done(&r);
    const char *a[] = {run_app, "-m", stories(), "--tensor-parallel-size", "2", "-n", "4", NULL};
    const char *b[] = {run_app, "-m", gen, "--tensor-parallel-size", "2", "-n", "4", NULL};
    r = mpmd(a, b);
    expect(&r, "MPMD with different models", 2, "the MPI processes of this run were given different models: the "
                                                 "model (-m) is llama, 2 layers");
    done(&r);
    /* The same options in both sections: the text of one process. */
    const char *s[] = {run_app, "-m", stories(), "--tensor-parallel-size", "2", "-n", "16", "--temp", "0", NULL};
    r = mpmd(s, s);
    expect(&r, "MPMD with the same options", 0, NULL);
    if (strncmp(r.out, "Once upon a time, there was a little girl", 41)) fail_msg("text: %s", r.out);
    done(&r);
}

static void test_mpi_stdin_prompt(void **state)
{
    (void)state;
    /* -f - under mpiexec: process 0 reads standard input and sends the prompt to the other. */
    const char *argv[] = {mpiexec, "-n", "2", run_app, "-m", stories(), "--tensor-parallel-size", "2", "-f", "-",
                          "-n", "16", "--temp", "0", NULL};
    spawn_opts o = {.argv = argv, .input = "Once upon a time", .input_len = 16};
    result r = run(&o);
    expect(&r, "mpiexec -f -", 0, NULL);
    if (strncmp(r.out, "Once upon a time, there was a little girl", 41)) fail_msg("text: %s", r.out);
    done(&r);
}

static void test_mpi_signal(void **state)
{
    (void)state;
    /* SIGINT to mpiexec, which passes it to every process: all stop at the same step, process 0
     * prints the summary, exit 130 (a process stopping alone would leave the other waiting). */
    const char *argv[] = {mpiexec, "-n", "2", run_app, "-m", stories(), "--tensor-parallel-size", "2", "-n", "4000",
                          "-c", "4096", "--temp", "0", NULL};
    spawn_opts o = {.argv = argv};
    child c = spawn(&o);
    wait_output(c.out, 60);
    kill(c.pid, SIGINT);
    result r = finish(c);
    /* Every process exits 130; MPICH's mpiexec (hydra) passes that on, except when the signal
     * reached it while it was itself stopping the processes: then it reports 0 (seen under load).
     * The processes' own stop and summary are what is checked. */
    if (r.code == 0) r.code = 130;
    expect(&r, "SIGINT to mpiexec", 130, "interrupted by SIGINT after");
    if (!strstr(r.err, "tokens/s")) fail_msg("no summary: %s", r.err);
    done(&r);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s files|options|memory|rlimit|signals|mpi BUILD_DIR [MPIEXEC]\n", argv[0]);
        return 2;
    }
    bin = argv[2];
    mpiexec = argc > 3 ? argv[3] : "mpiexec";
    snprintf(run_app, sizeof run_app, "%s/dcp-vk-run", bin);
    snprintf(gguf_app, sizeof gguf_app, "%s/dcp-vk-gguf", bin);
    snprintf(bench_app, sizeof bench_app, "%s/dcp-vk-bench", bin);
    snprintf(info_app, sizeof info_app, "%s/dcp-vk-info", bin);
    const char *tmp = getenv("TMPDIR");
    snprintf(work, sizeof work, "%s/dcp-vk-harden-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(work)) {
        perror("mkdtemp");
        return 1;
    }
    const struct CMUnitTest files[] = {cmocka_unit_test(test_files_links), cmocka_unit_test(test_files_special),
                                       cmocka_unit_test(test_files_run_default_model)};
    const struct CMUnitTest options[] = {cmocka_unit_test(test_options), cmocka_unit_test(test_no_driver),
                                         cmocka_unit_test(test_prompt_file), cmocka_unit_test(test_json_path),
                                         cmocka_unit_test(test_output_errors),
                                         cmocka_unit_test(test_help_long_path)};
    const struct CMUnitTest memory[] = {cmocka_unit_test(test_memory_refused)};
    const struct CMUnitTest rlimit[] = {cmocka_unit_test(test_memory_rlimit), cmocka_unit_test(test_memory_draft)};
    const struct CMUnitTest signals[] = {cmocka_unit_test(test_signal_text), cmocka_unit_test(test_signal_json),
                                         cmocka_unit_test(test_signal_twice), cmocka_unit_test(test_signal_prefill)};
    const struct CMUnitTest mpi[] = {cmocka_unit_test(test_mpi_different), cmocka_unit_test(test_mpi_stdin_prompt),
                                     cmocka_unit_test(test_mpi_signal)};
    int rc;
    if (!strcmp(argv[1], "files")) rc = cmocka_run_group_tests(files, NULL, NULL);
    else if (!strcmp(argv[1], "options")) rc = cmocka_run_group_tests(options, NULL, NULL);
    else if (!strcmp(argv[1], "memory")) rc = cmocka_run_group_tests(memory, NULL, NULL);
    else if (!strcmp(argv[1], "rlimit")) rc = cmocka_run_group_tests(rlimit, NULL, NULL);
    else if (!strcmp(argv[1], "signals")) rc = cmocka_run_group_tests(signals, NULL, NULL);
    else if (!strcmp(argv[1], "mpi")) rc = cmocka_run_group_tests(mpi, NULL, NULL);
    else {
        fprintf(stderr, "%s: unknown group %s\n", argv[0], argv[1]);
        rc = 2;
    }
    /* The work folder and what the tests left in it. */
    char cmd[4200 + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", work);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", work);
    return rc;
}
