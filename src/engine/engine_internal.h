/* The engine's private parts (include/dcpvk/engine.h): sequences, the event queue, and the three
 * concerns split over files: engine.c (requests, events, stats), schedule.c (one step: which
 * rows, page accounting, preemption, running it), text.c (a sequence's output text: tokens to
 * UTF-8 pieces, stop strings, what is held back). */
#ifndef DCP_ENGINE_INTERNAL_H
#define DCP_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/engine.h"

/* One request from submit to its FINISHED event. */
typedef struct eng_seq {
    uint64_t id;                 /* also its priority: smaller is older, scheduled first */
    void *user;
    int32_t *toks;               /* [n_toks] prompt then generated ids (capacity n_prompt + max_tokens) */
    uint32_t n_toks, n_prompt;
    uint32_t max_tokens, generated;
    uint32_t fed;                /* tokens of toks in the state's KV (0 while waiting) */
    uint32_t seen;               /* the most tokens it ever had in KV (rows below it are recomputed) */
    int32_t slot;                /* the state's sequence slot, -1 while waiting */
    bool ignore_eos;
    int32_t *stop_tokens;        /* [n_stop_tokens] */
    uint32_t n_stop_tokens;
    char **stop;                 /* [n_stop] NUL-terminated copies */
    size_t *stop_len;            /* [n_stop] */
    uint32_t n_stop;
    size_t stop_max;             /* longest stop string (bytes) */
    dcp_sampler *smp;
    bool greedy;                 /* the device argmax picks its tokens */
    dcp_detokenizer *detok;
    char *held;                  /* text not yet released (could still start a stop string) */
    size_t held_len, held_cap;
    uint32_t step_rows;          /* rows in the step being scheduled (0: not in it) */
    struct eng_seq *prev, *next; /* the engine's list, by id */
} eng_seq;

/* A queued event; text and message are owned. */
typedef struct eng_event {
    dcp_engine_event ev;
    char *text, *message;
} eng_event;

/* A sequence's part of the step being run: its rows are consecutive, `logits` is set on its last. */
typedef struct eng_sched {
    eng_seq *seq;
    uint32_t rows;
    bool logits;
} eng_sched;

struct dcp_engine {
    dcp_model_state *s;
    const dcp_tokenizer *tok;
    dcp_engine_config cfg;
    uint32_t n_vocab, n_ctx, max_seqs, max_rows, dcp, kv_pages;
    int32_t eos;
    uint64_t next_id;
    eng_seq *head, *tail;        /* every queued or running sequence, by id */
    eng_seq **slot_seq;          /* [max_seqs] the sequence holding each slot, or NULL */
    uint32_t running, waiting;
    /* freed slots not yet in a plan (for the followers) */
    uint32_t *pending_free;      /* [max_seqs] */
    uint32_t n_pending_free;
    /* the step being scheduled */
    dcp_model_row *rows;         /* [max_rows] */
    uint32_t n_rows;
    eng_sched *sched;            /* [max_seqs] in row order */
    uint32_t n_sched;
    uint32_t *need;              /* [dcp] pages the step takes on each DCP rank */
    uint32_t *future;            /* [dcp] scratch of the admissions */
    float *logits;               /* [min(max_rows, max_seqs)][n_vocab] */
    int32_t *next;               /* [min(max_rows, max_seqs)] */
    /* events */
    eng_event *events;
    size_t ev_head, ev_count, ev_cap;
    eng_event polled;            /* the event handed out last (freed at the next call) */
    dcp_engine_stats stats;
};

/* engine.c */
/* Frees the state's slot of a running sequence at once and remembers it for the next plan; the
 * sequence is then waiting (preemption) or about to end. */
void eng_release_slot(dcp_engine *e, eng_seq *q);
/* Queues an event for q (text copied; message may be NULL). DCP_ERR_OUT_OF_MEMORY. */
dcp_status eng_emit(dcp_engine *e, eng_seq *q, dcp_engine_event_kind kind, int32_t token, const char *text,
                    size_t len, dcp_engine_finish finish, dcp_status status, const char *message);
/* Ends q: releases its slot, queues FINISHED (with text), unlinks and frees it. */
void eng_finish(dcp_engine *e, eng_seq *q, dcp_engine_finish why, int32_t token, const char *text, size_t len,
                dcp_status status, const char *message);
/* Frees the frees of the last, drops the last polled event's strings. */
void eng_drop_polled(dcp_engine *e);

/* text.c */
/* Adds a generated token to q's output: ends q (STOP, LENGTH) or queues its TOKEN event. */
dcp_status eng_text_token(dcp_engine *e, eng_seq *q, int32_t token);

/* schedule.c: dcp_engine_step lives there. */

#endif
