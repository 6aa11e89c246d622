/* The step layer (see src/step/step.h): rounds of every local rank's commands, the exchanges
 * between them, and record-once-and-replay of keyed steps. */
#include <stdlib.h>
#include <string.h>

#include "attn/cp_internal.h"
#include "common/error.h"
#include "step/step.h"

enum { DCP_STEP_MAX_COMMS = 64 };

/* An exchange of a kept recording, run after round `round`. */
typedef struct step_action {
    uint32_t round;
    dcp_comm_xchg x;
} step_action;

typedef enum step_mode {
    STEP_IDLE = 0,
    STEP_ONCE = 1,      /* key 0: the ranks' own commands, nothing kept */
    STEP_RECORDING = 2, /* a keyed step being recorded into rc */
} step_mode;

struct dcp_step {
    uint32_t n;                     /* local ranks */
    dcp_device **devs;              /* [n] borrowed */
    dcp_cmd **own;                  /* [n] commands of unkeyed steps */
    dcp_cmd **rc;                   /* [rc_cap][n] rounds of the kept recording */
    uint32_t rc_cap;                /* rounds allocated */
    uint32_t rc_rounds;             /* rounds of the kept recording (0: none) */
    uint64_t rc_key;                /* its key (mixed with the communicators' generations) */
    step_action *act;               /* [act_count] exchanges of the kept recording */
    uint32_t act_count, act_cap;
    dcp_comm *comms[DCP_STEP_MAX_COMMS];
    uint32_t comm_count;
    /* the step in progress */
    step_mode mode;
    uint64_t key;                   /* key of the step being recorded */
    uint32_t round;                 /* current round */
    dcp_cmd **cur;                  /* [n] the current round's commands */
    /* the last step */
    uint32_t last_rounds;
    bool last_replayed;
};

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
    if (!s->devs || !s->own) {
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
    for (uint32_t i = 0; s->own && i < s->n; i++) dcp_cmd_destroy(s->own[i]);
    for (uint64_t i = 0; s->rc && i < (uint64_t)s->rc_cap * s->n; i++) dcp_cmd_destroy(s->rc[i]);
    free(s->own);
    free(s->rc);
    free(s->act);
    free(s->devs);
    free(s);
}

dcp_status dcp_step_add_comm(dcp_step *s, dcp_comm *c)
{
    if (s->comm_count == DCP_STEP_MAX_COMMS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: more than %d communicators", DCP_STEP_MAX_COMMS);
    s->comms[s->comm_count++] = c;
    s->rc_rounds = 0; /* the key's inputs changed */
    return DCP_OK;
}

uint32_t dcp_step_count(const dcp_step *s) { return s->n; }

dcp_cmd *dcp_step_recorded_cmd(const dcp_step *s, uint32_t round, uint32_t i)
{
    return round < s->rc_rounds && i < s->n ? s->rc[(size_t)round * s->n + i] : NULL;
}
dcp_cmd *dcp_step_cmd(const dcp_step *s, uint32_t i) { return i < s->n && s->cur ? s->cur[i] : NULL; }
uint32_t dcp_step_last_rounds(const dcp_step *s) { return s->last_rounds; }
bool dcp_step_last_replayed(const dcp_step *s) { return s->last_replayed; }

/* The commands of recorded round k (created on first use). */
static dcp_status rc_round(dcp_step *s, uint32_t k, dcp_cmd ***out)
{
    if (k >= s->rc_cap) {
        uint32_t cap = s->rc_cap ? 2 * s->rc_cap : 16;
        dcp_cmd **rc = realloc(s->rc, (size_t)cap * s->n * sizeof *rc);
        if (!rc) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        memset(rc + (size_t)s->rc_cap * s->n, 0, (size_t)(cap - s->rc_cap) * s->n * sizeof *rc);
        s->rc = rc;
        s->rc_cap = cap;
    }
    dcp_cmd **row = s->rc + (size_t)k * s->n;
    for (uint32_t i = 0; i < s->n; i++)
        if (!row[i]) {
            dcp_status st = dcp_cmd_create(s->devs[i], &row[i]);
            if (st != DCP_OK) return st;
        }
    *out = row;
    return DCP_OK;
}

static dcp_status reset_cur(dcp_step *s)
{
    dcp_status st = DCP_OK;
    for (uint32_t i = 0; i < s->n; i++) DCP_TRY(dcp_cmd_reset(s->cur[i]));
fail:
    return st;
}

static dcp_status log_exchange(dcp_step *s, const dcp_comm_xchg *x)
{
    if (s->act_count == s->act_cap) {
        uint32_t cap = s->act_cap ? 2 * s->act_cap : 64;
        step_action *a = realloc(s->act, cap * sizeof *a);
        if (!a) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        s->act = a;
        s->act_cap = cap;
    }
    s->act[s->act_count++] = (step_action){s->round, *x};
    return DCP_OK;
}

/* Resubmits the kept rounds with their exchanges in between. */
static dcp_status replay(dcp_step *s)
{
    dcp_status st = DCP_OK;
    uint32_t a = 0;
    for (uint32_t k = 0; k < s->rc_rounds; k++) {
        DCP_TRY(dcp_cmd_run_all(s->rc + (size_t)k * s->n, s->n));
        for (; a < s->act_count && s->act[a].round == k; a++) {
            const dcp_comm_xchg *x = &s->act[a].x;
            DCP_TRY(dcp_comm_put_exchange(x->comm, x->kind, x->slot, x->payload));
        }
    }
    s->last_rounds = s->rc_rounds;
    s->last_replayed = true;
    return DCP_OK;
fail:
    s->rc_rounds = 0;
    return dcp_fail_context(st, "step replay");
}

dcp_status dcp_step_begin(dcp_step *s, uint64_t key, bool *replayed)
{
    *replayed = false;
    if (s->mode != STEP_IDLE) dcp_step_abort(s);
    for (uint32_t c = 0; c < s->comm_count; c++) dcp_comm_reset_banks(s->comms[c]);
    s->round = 0;
    if (key == 0) {
        s->mode = STEP_ONCE;
        s->cur = s->own;
        return reset_cur(s);
    }
    for (uint32_t c = 0; c < s->comm_count; c++) key = dcp_step_key_mix(key, dcp_comm_generation(s->comms[c]));
    if (s->rc_rounds && key == s->rc_key) {
        *replayed = true;
        return replay(s);
    }
    s->rc_rounds = 0;
    s->act_count = 0;
    s->key = key;
    s->mode = STEP_RECORDING;
    dcp_status st = rc_round(s, 0, &s->cur);
    if (st == DCP_OK) st = reset_cur(s);
    if (st != DCP_OK) dcp_step_abort(s);
    return st;
}

dcp_status dcp_step_round(dcp_step *s, uint32_t n, const dcp_comm_xchg *x)
{
    dcp_status st = DCP_OK;
    if (s->mode == STEP_IDLE) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: round outside a step");
    DCP_TRY(dcp_cmd_run_all(s->cur, s->n));
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(dcp_comm_put_exchange(x[i].comm, x[i].kind, x[i].slot, x[i].payload));
        if (s->mode == STEP_RECORDING) DCP_TRY(log_exchange(s, &x[i]));
    }
    s->round++;
    if (s->mode == STEP_RECORDING) DCP_TRY(rc_round(s, s->round, &s->cur));
    DCP_TRY(reset_cur(s));
    return DCP_OK;
fail:
    dcp_step_abort(s);
    return dcp_fail_context(st, "step round %u", s->round);
}

dcp_status dcp_step_end(dcp_step *s)
{
    if (s->mode == STEP_IDLE) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: end outside a step");
    dcp_status st = dcp_cmd_run_all(s->cur, s->n);
    if (st != DCP_OK) {
        dcp_step_abort(s);
        return dcp_fail_context(st, "step round %u", s->round);
    }
    if (s->mode == STEP_RECORDING) {
        s->rc_rounds = s->round + 1;
        s->rc_key = s->key;
    }
    s->last_rounds = s->round + 1;
    s->last_replayed = false;
    s->mode = STEP_IDLE;
    s->cur = NULL;
    return DCP_OK;
}

void dcp_step_abort(dcp_step *s)
{
    if (s->mode == STEP_IDLE) return;
    for (uint32_t i = 0; s->cur && i < s->n; i++) (void)dcp_cmd_wait(s->cur[i]);
    if (s->mode == STEP_RECORDING) s->rc_rounds = 0;
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

dcp_status dcp_step_cp_attn(dcp_step *s, dcp_cp_attn *const *attns, uint32_t G, const dcp_comm_buf *q,
                            const dcp_comm_buf *o, const dcp_comm_buf *lse)
{
    dcp_status st = DCP_OK;
    if (G == 0) return DCP_OK;
    const uint32_t per = s->n / G, P = dcp_cp_attn_phases(attns[0]);
    dcp_comm_xchg x[64];
    if (G > 64) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step: %u DCP groups in one process (at most 64)", G);
    for (uint32_t p = 0; p < P; p++) {
        if (p > 0) {
            for (uint32_t g = 0; g < G; g++) x[g] = dcp_cp_attn_xchg(attns[g], p - 1);
            DCP_TRY(dcp_step_round(s, G, x));
        }
        for (uint32_t g = 0; g < G; g++)
            for (uint32_t i = 0; i < per; i++) {
                uint32_t r = g * per + i;
                DCP_TRY(dcp_cp_attn_record_phase(attns[g], p, i, s->cur[r], q[r], o[r], lse[r]));
            }
    }
    return DCP_OK;
fail:
    return st;
}
