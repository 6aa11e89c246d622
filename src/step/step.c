/* The step layer (see src/step/step.h): rounds of every local rank's commands, the exchanges
 * between them, and record-once-and-replay of keyed steps. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "step/step.h"
#include "vk/external.h"

enum { DCP_STEP_MAX_COMMS = 64 };

/* An exchange of a kept recording, run after round `round`. */
typedef struct step_action {
    uint32_t round;
    dcp_comm_xchg x;
} step_action;

typedef enum step_mode {
    STEP_IDLE = 0,
    STEP_ONCE = 1,      /* key 0: the ranks' own commands, nothing kept */
    STEP_RECORDING = 2, /* a keyed step being recorded into kept */
} step_mode;

/* Recordings kept besides the current one: a step of another shape (a speculative verification
 * between one-row decode steps, a prompt chunk) replays its own instead of re-recording both. */
enum { STEP_SAVED = 4 };

/* A kept recording: the step's current one (dcp_step.kept) or one moved aside (dcp_step.saved). */
typedef struct step_rec {
    dcp_cmd **rc;                   /* [rc_cap][n] its rounds' commands */
    uint32_t rc_cap;                /* rounds allocated */
    uint32_t rc_rounds;             /* rounds recorded (0: none) */
    uint64_t rc_key;                /* its key (mixed with the communicators' generations) */
    step_action *act;               /* [act_count] its exchanges */
    uint32_t act_count, act_cap;
    uint64_t used;                  /* moved aside: when it was last current (the least recent is reused) */
} step_rec;

/* Commands of a sequence of rounds, [cap][n], created on first use. */
typedef struct round_cmds {
    dcp_cmd **c;
    uint32_t cap;
} round_cmds;

struct dcp_step {
    uint32_t n;                     /* local ranks */
    dcp_device **devs;              /* [n] borrowed */
    dcp_cmd **own;                  /* [n] commands of unkeyed steps (host mode) */
    round_cmds once;                /* commands of unkeyed steps (gpu mode: one set per round) */
    step_rec kept;                  /* the current kept recording (kept.rc_rounds 0: none) */
    step_rec saved[STEP_SAVED];     /* other keys' recordings (rc_rounds 0: none) */
    uint64_t clock;                 /* counts the recordings made current */
    dcp_comm *comms[DCP_STEP_MAX_COMMS];
    uint32_t comm_count;
    /* the step in progress */
    step_mode mode;
    uint64_t key;                   /* key of the step being recorded */
    uint32_t round;                 /* current round */
    dcp_cmd **cur;                  /* [n] the current round's commands */
    /* synchronisation */
    bool sync_ready;                /* decided for the current communicators */
    dcp_step_sync sync;
    char sync_why[320];
    dcp_sem **sem;                  /* [n] each rank's timeline semaphore (gpu mode) */
    dcp_sem ***waits;               /* [n][nwait[i]] what rank i's submissions wait on */
    uint32_t *nwait;                /* [n] */
    dcp_sem **owned;                /* imported semaphores to destroy */
    uint32_t owned_count;
    uint64_t tl;                    /* timeline value every rank's semaphore reached (host count) */
    /* timing */
    bool timed;
    uint32_t *ts;                   /* [rounds][n][2] timestamp slots of the kept recording / once rounds */
    uint32_t ts_cap;                /* rounds allocated in ts */
    double t0, last_total_ns, last_compute_ns;
    /* the last step */
    uint32_t host_waits;            /* host waits of the step in progress (counted where they happen) */
    uint32_t last_rounds, last_host_waits;
    uint32_t *disp;                 /* [3][n] dispatches per rank: the step in progress, the kept
                                     * recording, the last step */
    bool last_replayed;
};

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

/* Drops every kept recording (their commands stay for reuse). */
static void forget_recordings(dcp_step *s)
{
    s->kept.rc_rounds = 0;
    for (uint32_t j = 0; j < STEP_SAVED; j++) s->saved[j].rc_rounds = 0;
}

/* Exchanges the current recording with r. */
static void swap_recording(dcp_step *s, step_rec *r)
{
    step_rec cur = s->kept;
    cur.used = ++s->clock;
    s->kept = *r;
    *r = cur;
}

void dcp_step_set_timing(dcp_step *s, bool on)
{
    if (s->timed == on) return;
    s->timed = on;
    forget_recordings(s); /* recordings with (or without) the timestamps */
}

void dcp_step_last_timing(const dcp_step *s, double *compute_ns, double *total_ns)
{
    *compute_ns = s->timed ? s->last_compute_ns : 0.0;
    *total_ns = s->timed ? s->last_total_ns : 0.0;
}

/* Timestamp slot pair of rank i in round k (grown on demand); NULL when out of memory. */
static uint32_t *ts_slot(dcp_step *s, uint32_t k, uint32_t i)
{
    if (k >= s->ts_cap) {
        uint32_t cap = s->ts_cap ? 2 * s->ts_cap : 64;
        while (cap <= k) cap *= 2;
        uint32_t *t = realloc(s->ts, (size_t)cap * s->n * 2 * sizeof *t);
        if (!t) return NULL;
        memset(t + (size_t)s->ts_cap * s->n * 2, 0xff, (size_t)(cap - s->ts_cap) * s->n * 2 * sizeof *t);
        s->ts = t;
        s->ts_cap = cap;
    }
    return s->ts + ((size_t)k * s->n + i) * 2;
}

/* A timestamp at the start (end = 0) or end of rank i's command of the current round. */
static void stamp(dcp_step *s, uint32_t i, int end)
{
    if (!s->timed) return;
    uint32_t *slot = ts_slot(s, s->round, i);
    if (!slot) return;
    slot[end] = UINT32_MAX;
    if (dcp_device_get_info(s->devs[i])->timestamp_period_ns == 0.0f) return;
    if (dcp_cmd_timestamp(s->cur[i], &slot[end]) != DCP_OK) {
        slot[end] = UINT32_MAX;
        dcp_clear_error();
    }
}

/* The sum over rounds of the slowest rank's time between its round's timestamps. */
static double compute_time(dcp_step *s, dcp_cmd **rows, uint32_t rounds)
{
    double sum = 0.0;
    for (uint32_t k = 0; rows && k < rounds && k < s->ts_cap; k++) {
        double worst = 0.0;
        for (uint32_t i = 0; i < s->n; i++) {
            const uint32_t *slot = s->ts + ((size_t)k * s->n + i) * 2;
            double ns = 0.0;
            if (slot[0] == UINT32_MAX || slot[1] == UINT32_MAX) continue;
            if (dcp_cmd_elapsed_ns(rows[(size_t)k * s->n + i], slot[0], slot[1], &ns) != DCP_OK) dcp_clear_error();
            if (ns > worst) worst = ns;
        }
        sum += worst;
    }
    return sum;
}

static void free_sync(dcp_step *s)
{
    for (uint32_t k = 0; k < s->owned_count; k++) dcp_sem_destroy(s->owned[k]);
    free(s->owned);
    s->owned = NULL;
    s->owned_count = 0;
    for (uint32_t i = 0; s->waits && i < s->n; i++) free(s->waits[i]);
    free(s->waits);
    free(s->nwait);
    s->waits = NULL;
    s->nwait = NULL;
    for (uint32_t i = 0; s->sem && i < s->n; i++) dcp_sem_destroy(s->sem[i]);
    free(s->sem);
    s->sem = NULL;
    s->tl = 0;
}

static void free_rounds(dcp_step *s, round_cmds *r)
{
    for (uint64_t i = 0; r->c && i < (uint64_t)r->cap * s->n; i++) dcp_cmd_destroy(r->c[i]);
    free(r->c);
    r->c = NULL;
    r->cap = 0;
}

dcp_status dcp_step_create(dcp_device *const *devs, uint32_t count, dcp_step **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    if (count == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: no local ranks");
    dcp_step *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->n = count;
    s->devs = calloc(count, sizeof *s->devs);
    s->own = calloc(count, sizeof *s->own);
    s->disp = calloc(3 * (size_t)count, sizeof *s->disp);
    if (!s->devs || !s->own || !s->disp) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (uint32_t i = 0; i < count; i++) {
        s->devs[i] = devs[i];
        DCP_TRY(dcp_cmd_create(devs[i], &s->own[i]));
    }
    *out = s;
    return DCP_OK;
fail:
    dcp_step_destroy(s);
    return st;
}

void dcp_step_destroy(dcp_step *s)
{
    if (!s) return;
    dcp_step_abort(s);
    for (uint32_t i = 0; s->own && i < s->n; i++) dcp_cmd_destroy(s->own[i]);
    for (uint64_t i = 0; s->kept.rc && i < (uint64_t)s->kept.rc_cap * s->n; i++) dcp_cmd_destroy(s->kept.rc[i]);
    for (uint32_t j = 0; j < STEP_SAVED; j++) {
        step_rec *r = &s->saved[j];
        for (uint64_t i = 0; r->rc && i < (uint64_t)r->rc_cap * s->n; i++) dcp_cmd_destroy(r->rc[i]);
        free(r->rc);
        free(r->act);
    }
    free_rounds(s, &s->once);
    free_sync(s);
    free(s->ts);
    free(s->own);
    free(s->kept.rc);
    free(s->kept.act);
    free(s->devs);
    free(s->disp);
    free(s);
}

dcp_status dcp_step_add_comm(dcp_step *s, dcp_comm *c)
{
    if (s->comm_count == DCP_STEP_MAX_COMMS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: more than %d communicators", DCP_STEP_MAX_COMMS);
    s->comms[s->comm_count++] = c;
    forget_recordings(s); /* the key's inputs changed */
    s->sync_ready = false;
    return DCP_OK;
}

uint32_t dcp_step_count(const dcp_step *s) { return s->n; }

dcp_cmd *dcp_step_recorded_cmd(const dcp_step *s, uint32_t round, uint32_t i)
{
    return round < s->kept.rc_rounds && i < s->n ? s->kept.rc[(size_t)round * s->n + i] : NULL;
}
dcp_cmd *dcp_step_cmd(const dcp_step *s, uint32_t i) { return i < s->n && s->cur ? s->cur[i] : NULL; }
uint32_t dcp_step_last_rounds(const dcp_step *s) { return s->last_rounds; }
uint32_t dcp_step_last_host_waits(const dcp_step *s) { return s->last_host_waits; }

uint32_t dcp_step_last_dispatches(const dcp_step *s)
{
    uint32_t total = 0;
    for (uint32_t i = 0; i < s->n; i++) total += s->disp[2 * s->n + i];
    return total;
}

uint32_t dcp_step_last_rank_dispatches(const dcp_step *s, uint32_t local)
{
    return local < s->n ? s->disp[2 * s->n + local] : 0;
}
dcp_step_sync dcp_step_sync_mode(const dcp_step *s, const char **why)
{
    if (why) *why = s->sync_ready ? s->sync_why : "not decided yet (no step has run)";
    return s->sync;
}
bool dcp_step_last_replayed(const dcp_step *s) { return s->last_replayed; }

/* The commands of round k of r (created on first use). */
static dcp_status round_row(dcp_step *s, round_cmds *r, uint32_t k, dcp_cmd ***out)
{
    if (k >= r->cap) {
        uint32_t cap = r->cap ? 2 * r->cap : 16;
        while (cap <= k) cap *= 2;
        dcp_cmd **c = realloc(r->c, (size_t)cap * s->n * sizeof *c);
        if (!c) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        memset(c + (size_t)r->cap * s->n, 0, (size_t)(cap - r->cap) * s->n * sizeof *c);
        r->c = c;
        r->cap = cap;
    }
    dcp_cmd **row = r->c + (size_t)k * s->n;
    for (uint32_t i = 0; i < s->n; i++)
        if (!row[i]) {
            dcp_status st = dcp_cmd_create(s->devs[i], &row[i]);
            if (st != DCP_OK) return st;
        }
    *out = row;
    return DCP_OK;
}

/* The commands of recorded round k of the kept recording. */
static dcp_status rc_round(dcp_step *s, uint32_t k, dcp_cmd ***out)
{
    round_cmds r = {s->kept.rc, s->kept.rc_cap};
    dcp_status st = round_row(s, &r, k, out);
    s->kept.rc = r.c;
    s->kept.rc_cap = r.cap;
    return st;
}

/* ---- synchronisation ---------------------------------------------------------------------- */

dcp_status dcp_step_sync_choose(int requested, const dcp_comm_sync_caps *caps, uint32_t ncomm, bool timeline,
                                dcp_step_sync *out, char *why, size_t cap)
{
    *out = DCP_STEP_SYNC_HOST;
    if (requested == 0) {
        snprintf(why, cap, "host waits between rounds (DCP_VK_STEP_SYNC=host)");
        return DCP_OK;
    }
    const char *no = NULL;
    char buf[300];
    if (!timeline) no = "a device lacks timeline semaphores";
    for (uint32_t k = 0; !no && k < ncomm; k++)
        if (caps[k].host_work || caps[k].share == DCP_SEM_SHARE_NONE) {
            snprintf(buf, sizeof buf, "%s", caps[k].why);
            no = buf;
        }
    if (no) {
        snprintf(why, cap, "host waits between rounds: %s", no);
        if (requested == 1)
            return dcp_fail(DCP_ERR_UNSUPPORTED, "DCP_VK_STEP_SYNC=gpu: rounds cannot wait on each other on the GPU: %s",
                            no);
        return DCP_OK;
    }
    dcp_sem_share least = DCP_SEM_SHARE_NATIVE;
    for (uint32_t k = 0; k < ncomm; k++)
        if (caps[k].share < least) least = caps[k].share;
    *out = DCP_STEP_SYNC_GPU;
    if (ncomm == 0)
        snprintf(why, cap, "no exchanges: each rank's rounds follow each other on its queue, one host wait per step");
    else
        snprintf(why, cap, "rounds wait on each other on the GPU (%s; no exchange needs the host)",
                 least == DCP_SEM_SHARE_NATIVE ? "every rank on one VkDevice" : "timeline semaphores shared as opaque fds");
    return DCP_OK;
}

/* Step rank of a communicator's local rank (by device). */
static uint32_t rank_of(const dcp_step *s, dcp_comm *c, int local)
{
    dcp_device *d = dcp_comm_device(c, local);
    for (uint32_t r = 0; r < s->n; r++)
        if (s->devs[r] == d) return r;
    return UINT32_MAX;
}

/* Decides the mode for the current communicators and, for gpu mode, shares the semaphores. */
static dcp_status setup_sync(dcp_step *s)
{
    dcp_status st = DCP_OK;
    free_sync(s);
    int requested = -1;
    const char *env = getenv("DCP_VK_STEP_SYNC");
    if (env && *env) {
        if (!strcmp(env, "host")) requested = 0;
        else if (!strcmp(env, "gpu")) requested = 1;
        else if (strcmp(env, "auto") != 0)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "$DCP_VK_STEP_SYNC is \"%s\" (allowed: auto, host, gpu)", env);
    }
    dcp_comm_sync_caps caps[DCP_STEP_MAX_COMMS];
    bool timeline = true;
    int opaque = 0;
    for (uint32_t c = 0; c < s->comm_count; c++) {
        dcp_comm_sync_caps_get(s->comms[c], &caps[c]);
        opaque |= caps[c].share == DCP_SEM_SHARE_OPAQUE_FD;
    }
    for (uint32_t i = 0; i < s->n; i++) timeline &= dcp_device_get_info(s->devs[i])->timeline_semaphore != 0;
    DCP_TRY(dcp_step_sync_choose(requested, caps, s->comm_count, timeline, &s->sync, s->sync_why, sizeof s->sync_why));
    if (s->sync == DCP_STEP_SYNC_GPU) {
        s->sem = calloc(s->n, sizeof *s->sem);
        s->waits = calloc(s->n, sizeof *s->waits);
        s->nwait = calloc(s->n, sizeof *s->nwait);
        if (!s->sem || !s->waits || !s->nwait) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        for (uint32_t i = 0; i < s->n; i++) {
            DCP_TRY(dcp_sem_create(s->devs[i], opaque ? DCP_HANDLE_OPAQUE_FD : 0, &s->sem[i]));
            uint32_t cap = 1;
            for (uint32_t c = 0; c < s->comm_count; c++) cap += (uint32_t)dcp_comm_size(s->comms[c]);
            s->waits[i] = calloc(cap, sizeof *s->waits[i]);
            if (!s->waits[i]) {
                st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
                goto fail;
            }
            s->waits[i][s->nwait[i]++] = s->sem[i]; /* its own previous round */
        }
        /* Every peer of every communicator, as a semaphore on each local rank's device. */
        for (uint32_t c = 0; c < s->comm_count; c++) {
            dcp_comm *cm = s->comms[c];
            const int L = dcp_comm_local_count(cm), N = dcp_comm_size(cm);
            dcp_sem **mine = calloc(L, sizeof *mine), **peers = calloc((size_t)L * N, sizeof *peers);
            uint8_t *own = calloc((size_t)L * N, 1);
            dcp_sem **grown = realloc(s->owned, (s->owned_count + (size_t)L * N) * sizeof *grown);
            if (grown) s->owned = grown;
            if (!mine || !peers || !own || !grown) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            for (int l = 0; st == DCP_OK && l < L; l++) {
                uint32_t r = rank_of(s, cm, l);
                if (r == UINT32_MAX) st = dcp_fail(DCP_ERR_INTERNAL, "step: a communicator's device is not a step rank");
                else mine[l] = s->sem[r];
            }
            if (st == DCP_OK) st = dcp_comm_share_semaphores(cm, mine, peers, own);
            for (int l = 0; st == DCP_OK && l < L; l++) {
                uint32_t r = rank_of(s, cm, l);
                for (int g = 0; g < N; g++) {
                    dcp_sem *p = peers[l * N + g];
                    if (own[l * N + g]) s->owned[s->owned_count++] = p;
                    int dup = 0;
                    for (uint32_t k = 0; k < s->nwait[r]; k++) dup |= s->waits[r][k] == p;
                    if (p && !dup) s->waits[r][s->nwait[r]++] = p;
                }
            }
            free(mine);
            free(peers);
            free(own);
            if (st != DCP_OK) goto fail;
        }
    }
    s->sync_ready = true;
    return DCP_OK;
fail:
    free_sync(s);
    s->sync = DCP_STEP_SYNC_HOST;
    return dcp_fail_context(st, "step synchronisation");
}

/* Submits round `cmds` of every rank: host mode submits and waits; gpu mode submits each rank
 * after its peers' previous round, signalling its own. */
static dcp_status run_round(dcp_step *s, dcp_cmd **cmds)
{
    if (s->sync == DCP_STEP_SYNC_HOST) {
        s->host_waits++; /* the host waits for every rank's fence of the round */
        return dcp_cmd_run_all(cmds, s->n);
    }
    dcp_status st = DCP_OK;
    uint64_t values[256];
    for (uint32_t i = 0; i < s->n; i++) {
        if (s->nwait[i] > 256) return dcp_fail(DCP_ERR_INTERNAL, "step: %u semaphores to wait on", s->nwait[i]);
        for (uint32_t k = 0; k < s->nwait[i]; k++) values[k] = s->tl;
        DCP_TRY(dcp_cmd_submit_timeline(cmds[i], s->nwait[i], s->waits[i], values, s->sem[i], s->tl + 1));
    }
    s->tl++;
fail:
    return st;
}

/* The host part of an exchange (host mode) or its bookkeeping (gpu mode). */
static dcp_status exchange(dcp_step *s, const dcp_comm_xchg *x)
{
    if (s->sync == DCP_STEP_SYNC_GPU) {
        dcp_comm_put_advance(x->comm, x->kind, x->slot, x->payload);
        return DCP_OK;
    }
    return dcp_comm_put_exchange(x->comm, x->kind, x->slot, x->payload);
}

/* The pushes (end of a round) or pulls (start of the next) of exchanges x[0..n) on every rank. */
static dcp_status record_sides(dcp_step *s, uint32_t n, const dcp_comm_xchg *x, int pull)
{
    dcp_status st = DCP_OK;
    for (uint32_t k = 0; k < n; k++)
        for (int l = 0; l < dcp_comm_local_count(x[k].comm); l++) {
            uint32_t r = rank_of(s, x[k].comm, l);
            if (r == UINT32_MAX) return dcp_fail(DCP_ERR_INTERNAL, "step: a communicator's device is not a step rank");
            if (pull) DCP_TRY(dcp_comm_record_pull(x[k].comm, l, s->cur[r], x[k].kind, x[k].slot));
            else DCP_TRY(dcp_comm_record_push(x[k].comm, l, s->cur[r], x[k].kind, x[k].slot));
        }
fail:
    return st;
}

/* Waits for every submitted command of rounds [0, rounds) of `rows` (gpu mode: the step's one host
 * wait; the earlier rounds have completed when the last has). */
static dcp_status wait_rounds(dcp_step *s, dcp_cmd **rows, uint32_t rounds)
{
    dcp_status st = DCP_OK;
    s->host_waits++;
    for (uint32_t k = rounds; k-- > 0;)
        for (uint32_t i = 0; i < s->n; i++) {
            dcp_status w = dcp_cmd_wait(rows[(size_t)k * s->n + i]);
            if (st == DCP_OK) st = w;
        }
    return st;
}

static dcp_status reset_cur(dcp_step *s)
{
    dcp_status st = DCP_OK;
    for (uint32_t i = 0; i < s->n; i++) {
        DCP_TRY(dcp_cmd_reset(s->cur[i]));
        stamp(s, i, 0);
    }
fail:
    return st;
}

/* Ends the current round's recordings (the timestamps closing them) and counts their dispatches. */
static void close_cur(dcp_step *s)
{
    for (uint32_t i = 0; i < s->n; i++) {
        stamp(s, i, 1);
        s->disp[i] += dcp_cmd_dispatches(s->cur[i]);
    }
}

static dcp_status log_exchange(dcp_step *s, const dcp_comm_xchg *x)
{
    if (s->kept.act_count == s->kept.act_cap) {
        uint32_t cap = s->kept.act_cap ? 2 * s->kept.act_cap : 64;
        step_action *a = realloc(s->kept.act, cap * sizeof *a);
        if (!a) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        s->kept.act = a;
        s->kept.act_cap = cap;
    }
    s->kept.act[s->kept.act_count++] = (step_action){s->round, *x};
    return DCP_OK;
}

/* Resubmits the current recording's rounds with their exchanges in between. */
static dcp_status replay(dcp_step *s)
{
    dcp_status st = DCP_OK;
    uint32_t a = 0;
    for (uint32_t k = 0; k < s->kept.rc_rounds; k++) {
        DCP_TRY(run_round(s, s->kept.rc + (size_t)k * s->n));
        for (; a < s->kept.act_count && s->kept.act[a].round == k; a++) DCP_TRY(exchange(s, &s->kept.act[a].x));
    }
    if (s->sync == DCP_STEP_SYNC_GPU) DCP_TRY(wait_rounds(s, s->kept.rc, s->kept.rc_rounds));
    s->last_total_ns = now_ns() - s->t0;
    if (s->timed) s->last_compute_ns = compute_time(s, s->kept.rc, s->kept.rc_rounds);
    s->last_rounds = s->kept.rc_rounds;
    s->last_host_waits = s->host_waits;
    memcpy(s->disp + 2 * s->n, s->disp + s->n, s->n * sizeof *s->disp);
    s->last_replayed = true;
    return DCP_OK;
fail:
    if (s->sync == DCP_STEP_SYNC_GPU) (void)wait_rounds(s, s->kept.rc, s->kept.rc_rounds);
    s->kept.rc_rounds = 0;
    return dcp_fail_context(st, "step replay");
}

dcp_status dcp_step_begin(dcp_step *s, uint64_t key, bool *replayed)
{
    dcp_status st = DCP_OK;
    *replayed = false;
    if (s->mode != STEP_IDLE) dcp_step_abort(s);
    s->t0 = now_ns();
    s->host_waits = 0;
    memset(s->disp, 0, s->n * sizeof *s->disp);
    if (!s->sync_ready) DCP_TRY(setup_sync(s));
    for (uint32_t c = 0; c < s->comm_count; c++)
        DCP_TRY(dcp_comm_reset_banks(s->comms[c], s->sync == DCP_STEP_SYNC_HOST));
    s->round = 0;
    if (key == 0) {
        s->mode = STEP_ONCE;
        if (s->sync == DCP_STEP_SYNC_GPU) DCP_TRY(round_row(s, &s->once, 0, &s->cur));
        else s->cur = s->own;
        st = reset_cur(s);
        if (st != DCP_OK) dcp_step_abort(s);
        return st;
    }
    for (uint32_t c = 0; c < s->comm_count; c++) key = dcp_step_key_mix(key, dcp_comm_generation(s->comms[c]));
    if (s->kept.rc_rounds && key == s->kept.rc_key) {
        *replayed = true;
        return replay(s);
    }
    /* Another key: its kept recording if there is one, else record into the least recently used
     * slot's commands, the current recording kept aside. */
    step_rec *victim = &s->saved[0];
    for (uint32_t j = 0; j < STEP_SAVED; j++) {
        step_rec *r = &s->saved[j];
        if (r->rc_rounds && r->rc_key == key) {
            swap_recording(s, r);
            *replayed = true;
            return replay(s);
        }
        if (r->used < victim->used) victim = r;
    }
    if (s->kept.rc_rounds) swap_recording(s, victim);
    s->kept.rc_rounds = 0;
    s->kept.act_count = 0;
    s->key = key;
    s->mode = STEP_RECORDING;
    st = rc_round(s, 0, &s->cur);
    if (st == DCP_OK) st = reset_cur(s);
    if (st != DCP_OK) dcp_step_abort(s);
fail:
    return st;
}

/* The current sequence of round commands (gpu mode and recordings keep one set per round). */
static dcp_cmd **rows_of(dcp_step *s)
{
    if (s->mode == STEP_RECORDING) return s->kept.rc;
    return s->sync == DCP_STEP_SYNC_GPU ? s->once.c : NULL;
}

dcp_status dcp_step_round(dcp_step *s, uint32_t n, const dcp_comm_xchg *x)
{
    dcp_status st = DCP_OK;
    if (s->mode == STEP_IDLE) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: round outside a step");
    DCP_TRY(record_sides(s, n, x, 0));
    close_cur(s);
    DCP_TRY(run_round(s, s->cur));
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(exchange(s, &x[i]));
        if (s->mode == STEP_RECORDING) DCP_TRY(log_exchange(s, &x[i]));
    }
    s->round++;
    if (s->mode == STEP_RECORDING) DCP_TRY(rc_round(s, s->round, &s->cur));
    else if (s->sync == DCP_STEP_SYNC_GPU) DCP_TRY(round_row(s, &s->once, s->round, &s->cur));
    DCP_TRY(reset_cur(s));
    DCP_TRY(record_sides(s, n, x, 1));
    return DCP_OK;
fail:
    dcp_step_abort(s);
    return dcp_fail_context(st, "step round %u", s->round);
}

dcp_status dcp_step_end(dcp_step *s)
{
    if (s->mode == STEP_IDLE) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: end outside a step");
    close_cur(s);
    dcp_status st = run_round(s, s->cur);
    if (st == DCP_OK && s->sync == DCP_STEP_SYNC_GPU) st = wait_rounds(s, rows_of(s), s->round + 1);
    if (st == DCP_OK) {
        s->last_total_ns = now_ns() - s->t0;
        /* Host mode without a kept recording reuses one set of commands: only the last round's
         * timestamps survive, so the split needs a keyed step (or gpu mode). */
        if (s->timed) s->last_compute_ns = compute_time(s, rows_of(s), s->round + 1);
    }
    if (st != DCP_OK) {
        dcp_step_abort(s);
        return dcp_fail_context(st, "step round %u", s->round);
    }
    if (s->mode == STEP_RECORDING) {
        s->kept.rc_rounds = s->round + 1;
        s->kept.rc_key = s->key;
        memcpy(s->disp + s->n, s->disp, s->n * sizeof *s->disp);
    }
    memcpy(s->disp + 2 * s->n, s->disp, s->n * sizeof *s->disp);
    s->last_rounds = s->round + 1;
    s->last_host_waits = s->host_waits;
    s->last_replayed = false;
    s->mode = STEP_IDLE;
    s->cur = NULL;
    return DCP_OK;
}

void dcp_step_abort(dcp_step *s)
{
    if (s->mode == STEP_IDLE) return;
    dcp_cmd **rows = rows_of(s);
    if (rows) (void)wait_rounds(s, rows, s->round + 1);
    for (uint32_t i = 0; s->cur && i < s->n; i++) (void)dcp_cmd_wait(s->cur[i]);
    if (s->mode == STEP_RECORDING) s->kept.rc_rounds = 0;
    s->mode = STEP_IDLE;
    s->cur = NULL;
}

dcp_status dcp_step_put_copy(dcp_cmd *cmd, dcp_comm *comm, int local, dcp_buffer *src, uint64_t src_offset,
                             uint64_t bytes)
{
    dcp_comm_buf out = dcp_comm_put_area(comm, local);
    dcp_status st = dcp_cmd_copy(cmd, src, src_offset, out.buffer, out.offset, bytes);
    if (st != DCP_OK) return dcp_fail_context(st, "put of %llu bytes", (unsigned long long)bytes);
    dcp_comm_record_put(cmd); /* copy -> peers' reads after the round */
    return DCP_OK;
}
