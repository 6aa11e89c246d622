/* The model apps (dcp-vk-run, dcp-vk-serve) under an MPI launcher (`mpiexec -n P`): which process
 * this is, the devices of its TP ranks, one exit code agreed by every process at each phase, so
 * that none is left waiting in a collective, and the end of every process after a failure that
 * the others cannot see (run_world_abort). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "cli/run.h"
#include "dcpvk/comm.h"

int run_world_init(int *argc, char ***argv, run_world *w, const char *prog)
{
    *w = (run_world){1, 0, false};
    int announced;
    if (!dcp_cli_mpi_launched(&announced)) {
        dcp_cli_release_mpi_signals(); /* MPI stays unstarted: nothing of it may act on a crash */
        return DCP_EXIT_OK;
    }
    int rank = 0, size = 1;
    dcp_status st = dcp_mpi_init(argc, argv, &rank, &size);
    if (st == DCP_ERR_UNSUPPORTED && announced <= 1) return DCP_EXIT_OK; /* built without MPI, mpiexec -n 1 */
    if (st != DCP_OK) {
        fprintf(stderr, "%s: started by an MPI launcher, but: %s: %s\n", prog, dcp_status_string(st),
                dcp_last_error());
        return DCP_EXIT_RUNTIME;
    }
    w->nproc = size;
    w->proc = rank;
    w->mpi = true;
    return DCP_EXIT_OK;
}

void run_world_finalize(const run_world *w)
{
    if (w->mpi) dcp_mpi_finalize();
}

int run_world_abort(const run_world *w, int rc)
{
    fflush(stdout);
    fflush(stderr);
    if (w->nproc > 1) dcp_mpi_abort(rc);
    return rc;
}

/* The other processes of this node, as run_world_describe found them, for the watch. */
enum { WATCH_MAX = 1024, WATCH_PERIOD_MS = 200 };
static struct {
    int count;
    int proc[WATCH_MAX];
    pid_t pid[WATCH_MAX];
    char host[64];
    const char *prog;
    int me;
    atomic_int off; /* run_world_unwatch: the processes end together now */
} watch;

/* Whether pid is a live process (a zombie, dead but not yet reaped by its launcher, is not). */
static bool alive(pid_t pid)
{
    if (kill(pid, 0) != 0 && errno == ESRCH) return false;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return true; /* no /proc: kill() said it exists */
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *close = strrchr(buf, ')'); /* "pid (name) S ..." */
    return !(close && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X'));
}

int run_world_describe(const run_world *w, char *out, size_t cap)
{
    if (cap) out[0] = 0;
    watch.count = 0;
    if (w->nproc < 2) return DCP_EXIT_OK;
    char host[60] = {0};
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
    /* One broadcast from each process: its pid and host name. */
    size_t k = 0;
    for (int p = 0; p < w->nproc; p++) {
        struct {
            int32_t pid;
            char host[60];
        } them = {0, {0}};
        if (p == w->proc) {
            them.pid = (int32_t)getpid();
            memcpy(them.host, host, sizeof them.host);
        }
        dcp_status st = dcp_mpi_bcast(&them, sizeof them, p);
        if (st != DCP_OK) return DCP_EXIT_RUNTIME;
        them.host[sizeof them.host - 1] = 0;
        if (w->proc == 0 && k < cap) {
            int m = snprintf(out + k, cap - k, "%sprocess %d pid %d on %s", p ? ", " : "", p, (int)them.pid, them.host);
            if (m > 0) k += (size_t)m < cap - k ? (size_t)m : cap - k - 1;
        }
        /* Watched: the others of this host that this process can see (a process of another pid
         * namespace with the same host name is not). */
        if (p != w->proc && strcmp(them.host, host) == 0 && watch.count < WATCH_MAX && alive((pid_t)them.pid)) {
            watch.proc[watch.count] = p;
            watch.pid[watch.count++] = (pid_t)them.pid;
        }
    }
    snprintf(watch.host, sizeof watch.host, "%s", host);
    return DCP_EXIT_OK;
}

static void *watch_main(void *arg)
{
    (void)arg;
    const struct timespec period = {0, WATCH_PERIOD_MS * 1000000L};
    for (;;) {
        nanosleep(&period, NULL);
        for (int i = 0; i < watch.count; i++) {
            if (alive(watch.pid[i]) || atomic_load(&watch.off)) continue;
            /* The others may wait for it in a collective that never ends: say so and end this one
             * (every process of the node does the same; the launcher ends the rest). */
            char msg[512];
            int n = snprintf(msg, sizeof msg,
                             "%s: process %d: process %d (pid %d on %s) is gone (killed, crashed or ended alone) "
                             "while the others wait for it: ending process %d too (exit %d)\n",
                             watch.prog, watch.me, watch.proc[i], (int)watch.pid[i], watch.host, watch.me,
                             DCP_EXIT_RUNTIME);
            if (n > 0) (void)!write(2, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
            _exit(DCP_EXIT_RUNTIME);
        }
    }
    return NULL;
}

void run_world_unwatch(void) { atomic_store(&watch.off, 1); }

int run_world_watch(const run_world *w, const char *prog)
{
    atomic_store(&watch.off, 0);
    if (w->nproc < 2 || watch.count == 0) return DCP_EXIT_OK;
    watch.prog = prog;
    watch.me = w->proc;
    pthread_attr_t at;
    pthread_t t;
    sigset_t all, old;
    /* The watch takes no signal (SIGINT and SIGTERM stay the main thread's). */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &at, watch_main, NULL);
    pthread_attr_destroy(&at);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e) {
        fprintf(stderr, "%s: process %d: cannot start the watch of the other processes: %s\n", prog, w->proc,
                strerror(e));
        return DCP_EXIT_RUNTIME;
    }
    return DCP_EXIT_OK;
}

int run_world_agree(const run_world *w, int rc)
{
    if (w->nproc < 2) return rc;
    return (int)dcp_mpi_max((double)rc);
}

int run_world_split(const run_world *w, uint32_t tp, uint32_t dcp, uint32_t *first, uint32_t *count,
                    const char *prog)
{
    const uint32_t P = (uint32_t)w->nproc;
    *first = 0;
    *count = tp;
    if (P < 2) return DCP_EXIT_OK;
    if (tp % P) {
        if (w->proc == 0)
            fprintf(stderr, "%s: --tensor-parallel-size %u over %u MPI processes: every process holds the same "
                            "number of TP ranks, so the size must divide by the processes (mpiexec -n %u runs "
                            "one rank per process)\n", prog, tp, P, tp);
        return DCP_EXIT_USAGE;
    }
    *count = tp / P;
    *first = (uint32_t)w->proc * *count;
    if (dcp > 1 && *count % dcp && dcp % *count) {
        if (w->proc == 0)
            fprintf(stderr, "%s: %u TP ranks per process with --decode-context-parallel-size %u: a process must "
                            "hold whole DCP groups or an equal part of one (%u must divide by %u or divide it)\n",
                    prog, *count, dcp, *count, dcp);
        return DCP_EXIT_USAGE;
    }
    return DCP_EXIT_OK;
}

int run_world_devices(const run_world *w, const char *list, uint32_t first, uint32_t count, uint32_t tp,
                      char *out, size_t cap, const char *prog)
{
    /* Entries of the list, comma-separated. */
    const char *e[1024];
    size_t len[1024];
    uint32_t n = 0;
    for (const char *p = list;;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (n == 1024) break;
        e[n] = p;
        len[n++] = l;
        if (!c) break;
        p = c + 1;
    }
    uint32_t from;
    if (n == 1) from = 0; /* every rank on entry 0 (logical devices of it) */
    else if (n >= tp) from = first;
    else {
        if (w->proc == 0)
            fprintf(stderr, "%s: the device list '%s' has %u entries: under mpiexec -n %d with "
                            "--tensor-parallel-size %u give one entry (every rank uses it) or %u (process k uses "
                            "entries [k %u, (k+1) %u))\n", prog, list, n, w->nproc, tp, tp, count, count);
        return DCP_EXIT_USAGE;
    }
    size_t k = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < count; i++) {
        uint32_t j = n == 1 ? 0 : from + i;
        int m = snprintf(out + k, cap - k, "%s%.*s", i ? "," : "", (int)len[j], e[j]);
        if (m < 0 || (size_t)m >= cap - k) {
            fprintf(stderr, "%s: device list too long\n", prog);
            return DCP_EXIT_USAGE;
        }
        k += (size_t)m;
    }
    return DCP_EXIT_OK;
}

void run_field_set(run_field *f, const char *name, const void *bytes, size_t n, const char *shown, ...)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char *)bytes)[i]) * 0x100000001b3ull;
    f->name = name;
    f->hash = h;
    char raw[256];
    va_list ap;
    va_start(ap, shown);
    int k = vsnprintf(raw, sizeof raw, shown, ap);
    va_end(ap);
    /* Printable ASCII only (prompts may hold anything); long values end in "...". */
    size_t i = 0, j = 0;
    for (; raw[i] && j + 4 < sizeof f->shown; i++) {
        unsigned char c = (unsigned char)raw[i];
        f->shown[j++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    if ((k > 0 && (size_t)k >= sizeof raw) || raw[i] != 0) {
        memcpy(f->shown + j, "...", 3);
        j += 3;
    }
    f->shown[j] = 0;
}

int run_world_same(const run_world *w, const run_field *fields, uint32_t n, const char *what, const char *prog)
{
    if (w->nproc < 2) return DCP_EXIT_OK;
    typedef struct wire {
        uint64_t hash;
        char shown[64];
    } wire;
    wire *ref = calloc(n ? n : 1, sizeof *ref);
    int rc = DCP_EXIT_OK;
    if (!ref) rc = DCP_EXIT_RUNTIME;
    if (run_world_agree(w, rc)) { /* every process takes part in the same collectives below */
        free(ref);
        return DCP_EXIT_RUNTIME;
    }
    if (w->proc == 0)
        for (uint32_t i = 0; i < n; i++) {
            ref[i].hash = fields[i].hash;
            memcpy(ref[i].shown, fields[i].shown, sizeof ref[i].shown);
        }
    dcp_status st = dcp_mpi_bcast(ref, (uint64_t)n * sizeof *ref, 0);
    if (st != DCP_OK) {
        fprintf(stderr, "%s: process %d: comparing the %s with process 0's: %s: %s\n", prog, w->proc, what,
                dcp_status_string(st), dcp_last_error());
        free(ref);
        return DCP_EXIT_RUNTIME;
    }
    uint32_t diff = n;
    for (uint32_t i = 0; i < n && diff == n; i++)
        if (fields[i].hash != ref[i].hash) diff = i;
    /* The lowest process that differs speaks: max of (nproc - proc) over those that differ. */
    int first = (int)dcp_mpi_max(diff < n ? (double)(w->nproc - w->proc) : 0.0);
    if (first > 0 && w->nproc - first == w->proc) {
        const char *theirs = fields[diff].shown, *ours = ref[diff].shown;
        bool same_shown = strcmp(theirs, ours) == 0;
        fprintf(stderr, "%s: the MPI processes of this run were given different %s: %s is %s on process %d but %s "
                        "on process 0%s; every process of one mpiexec run (MPMD `-n 1 ... : -n 1 ...` too) must be "
                        "given the same (only --devices may differ)\n",
                prog, what, fields[diff].name, theirs, w->proc, ours,
                same_shown ? " (they read alike but differ further on)" : "");
        fflush(stderr);
    }
    free(ref);
    return first > 0 ? DCP_EXIT_USAGE : DCP_EXIT_OK;
}

int run_world_bcast_bytes(const run_world *w, char **buf, size_t *len, const char *prog)
{
    if (w->nproc < 2) return DCP_EXIT_OK;
    uint64_t n = w->proc == 0 ? (uint64_t)*len : 0;
    dcp_status st = dcp_mpi_bcast(&n, sizeof n, 0);
    char *p = NULL;
    int rc = DCP_EXIT_OK;
    if (st == DCP_OK && w->proc != 0 && !(p = malloc(n + 1))) rc = DCP_EXIT_RUNTIME;
    if (st != DCP_OK) rc = DCP_EXIT_RUNTIME;
    if ((rc = run_world_agree(w, rc))) {
        free(p);
        fprintf(stderr, "%s: process %d: cannot receive process 0's prompt\n", prog, w->proc);
        return rc;
    }
    if (w->proc == 0) return dcp_mpi_bcast(*buf, n, 0) == DCP_OK ? DCP_EXIT_OK : DCP_EXIT_RUNTIME;
    st = dcp_mpi_bcast(p, n, 0);
    p[n] = 0;
    free(*buf);
    *buf = p;
    *len = (size_t)n;
    return st == DCP_OK ? DCP_EXIT_OK : DCP_EXIT_RUNTIME;
}
