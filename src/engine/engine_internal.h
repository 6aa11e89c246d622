/* The engine's private parts (include/dcpvk/engine.h): sequences, the event queue, and the
 * concerns split over files: engine.c (requests, events, stats), schedule.c (one step: which
 * rows, page accounting, preemption, running it), text.c (a sequence's output text: tokens to
 * UTF-8 pieces, stop strings, what is held back), spec.c (speculative decoding: drafts, the draft
 * model's steps, verification and roll-back), sampler.c (the host sampler). */
#ifndef DCP_ENGINE_INTERNAL_H
#define DCP_ENGINE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/engine.h"

/* One token's log-probabilities (dcp_engine_event's fields). */
typedef struct eng_lp {
    float logprob;
    uint32_t n_top;
    int32_t ids[DCP_ENGINE_MAX_LOGPROBS];
    float lps[DCP_ENGINE_MAX_LOGPROBS];
} eng_lp;

/* One request from submit to its FINISHED event. */
typedef struct eng_seq {
    uint64_t id;                 /* also its priority: smaller is older, scheduled first */
    void *user;
    uint32_t index;              /* its choice of the request (0 .. n-1) */
    uint64_t parent;             /* choices 1 .. n-1 (no MPI followers): choice 0's id, which
                                  * prefills the prompt and is forked (0: none) */
    int32_t *toks;               /* [n_toks] prompt then generated ids (capacity n_prompt + max_tokens) */
    uint32_t n_toks, n_prompt;
    uint32_t max_tokens, generated;
    uint32_t fed;                /* tokens of toks in the state's KV (0 while waiting) */
    uint32_t seen;               /* the most tokens it ever had in KV (rows below it are recomputed) */
    uint32_t cached;             /* prompt tokens from the prefix cache at its first admission */
    bool admitted;               /* admitted once (cached is set) */
    int32_t slot;                /* the state's sequence slot, -1 while waiting */
    bool ignore_eos;
    bool include_stop;           /* include_stop_str_in_output */
    int32_t *stop_tokens;        /* [n_stop_tokens] */
    uint32_t n_stop_tokens;
    char **stop;                 /* [n_stop] NUL-terminated copies */
    size_t *stop_len;            /* [n_stop] */
    uint32_t n_stop;
    size_t stop_max;             /* longest stop string (bytes) */
    dcp_sampler *smp;
    uint64_t seed;               /* the request's sampling seed */
    bool greedy;                 /* the device argmax picks its tokens */
    dcp_detokenizer *detok;
    char *held;                  /* text not yet released (could still start a stop string) */
    size_t held_len, held_cap;
    uint32_t step_rows;          /* rows in the step being scheduled (0: not in it) */
    /* speculative decoding (spec.c) */
    int32_t *draft;              /* [k] draft tokens of the step being scheduled */
    bool spec_strict;            /* draft model and sampling: runs a step with all its drafts or none */
    bool spec_wait;              /* strict, and left out of the last step: scheduled first */
    uint32_t dfed;               /* draft model: tokens of toks in the draft state's KV */
    double *qprob;               /* draft model and sampling: [k][n_vocab] the draft's distributions */
    /* logprobs */
    bool logprobs;
    uint32_t top_logprobs;
    eng_lp *lp;                  /* [1 + DCP_SPEC_MAX_TOKENS] per token of a step (logprobs only) */
    const eng_lp *lp_cur;        /* the next emitted token's, or NULL (consumed by eng_emit) */
    char *piece;                 /* that token's detokenized text [piece_len] (text.c; eng_emit copies
                                  * it and empties it); capacity piece_cap */
    size_t piece_len, piece_cap;
    /* prompt logprobs (dcp_engine_request.prompt_logprobs) */
    bool plp;
    uint32_t plp_top;            /* prompt_top_logprobs */
    uint32_t plp_done;           /* PROMPT events out (prompt positions 0 .. plp_done - 1) */
    dcp_detokenizer *pdetok;     /* the prompt's pieces (plp only) */
    struct eng_seq *prev, *next; /* the engine's list, by id */
} eng_seq;

/* A queued event; text and message are owned. */
typedef struct eng_event {
    dcp_engine_event ev;
    char *text, *message, *piece;
    void *all;                   /* PROMPT with the whole vocabulary: ev.all_ids then ev.all_logprobs */
} eng_event;

/* A sequence's part of the step being run: its rows are consecutive, tokens toks[fed ..
 * fed + rows) and then its drafts; `logits` is set on its last token row, and on every draft row. */
typedef struct eng_sched {
    eng_seq *seq;
    uint32_t rows;
    bool logits;
    uint32_t drafts;             /* draft tokens after its token rows (speculation: rows is 1) */
    uint32_t plp_first, plp;     /* prompt logprobs: token rows plp_first .. plp_first + plp - 1 of
                                  * the chunk want logits too (row p gives prompt position p + 1's) */
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
    /* With on_plan (MPI followers): the changes to the slots not yet in a plan, in order */
    dcp_engine_op *ops;          /* [DCP_ENGINE_PLAN_MAX_OPS(max_seqs)] */
    uint32_t n_ops;
    bool ops_overflow;           /* more than the bound (cannot happen): the next plan fails */
    int32_t *op_toks;            /* the ATTACH ops' tokens */
    uint32_t n_op_toks, cap_op_toks;
    /* the step being scheduled */
    dcp_model_row *rows;         /* [max_rows] */
    uint32_t n_rows;
    eng_sched *sched;            /* [max_seqs] in row order */
    uint32_t n_sched;
    uint32_t *need;              /* [dcp] pages the step takes on each DCP rank */
    uint32_t *future;            /* [dcp] scratch of the admissions */
    uint32_t max_logits;         /* rows with logits per step (the state's) */
    uint32_t logits_used;        /* of which the step being scheduled takes */
    float *logits;               /* [max_logits][n_vocab] */
    int32_t *next;               /* [max_logits] */
    /* speculative decoding (spec.c) */
    uint32_t spec_k;             /* num_speculative_tokens (0: none) */
    uint32_t ngram_min, ngram_max;
    dcp_model_state *draft;      /* the draft model's state (borrowed) or NULL */
    uint32_t draft_rows, draft_logits; /* its max_rows, max_logits */
    dcp_model_row *drows;        /* [draft_rows] */
    float *dlogits;              /* [draft_logits][n_vocab] */
    int32_t *dnext;              /* [draft_logits] */
    eng_seq **dseq;              /* [draft_logits] the sequence of each draft logits row */
    double *pbuf, *rbuf;         /* [n_vocab] scratch distributions of a verification */
    /* events */
    eng_event *events;
    size_t ev_head, ev_count, ev_cap;
    eng_event polled;            /* the event handed out last (freed at the next call) */
    dcp_engine_stats stats;
};

/* engine.c */
/* Notes a change to a slot for the next plan (with on_plan); returns the op, or NULL without
 * on_plan or past the bound (the next plan then fails: cannot happen, DCP_ENGINE_PLAN_MAX_OPS). */
dcp_engine_op *eng_log_op(dcp_engine *e, dcp_engine_op_kind kind, uint32_t slot, uint32_t n);
/* Hands the changes noted since the last plan and rows [n_rows] (a step of the target, or of the
 * draft model with draft) to on_plan, if any, and forgets the changes. */
dcp_status eng_send_plan(dcp_engine *e, bool draft, const dcp_model_row *rows, uint32_t n_rows);
/* Frees the state's slot of a running sequence at once and remembers it for the next plan; the
 * sequence is then waiting (preemption) or about to end. */
void eng_release_slot(dcp_engine *e, eng_seq *q);
/* Shortens q's slot in the state to its first `length` tokens and remembers it for the next plan. */
dcp_status eng_truncate_slot(dcp_engine *e, eng_seq *q, uint32_t length);
/* Prefix caching's attach of q's first n tokens to slot, and commit of q's slot (for the followers
 * too, with on_plan). */
dcp_status eng_attach_slot(dcp_engine *e, eng_seq *q, uint32_t slot, uint32_t n, uint32_t *cached);
dcp_status eng_commit_slot(dcp_engine *e, eng_seq *q, uint32_t n);
/* dcp_model_state_fork_seq of parent's slot into child's (for the followers too, with on_plan). */
dcp_status eng_fork_slot(dcp_engine *e, uint32_t parent, uint32_t child, uint32_t *shared);
/* Queues an event for q (text copied; message may be NULL). DCP_ERR_OUT_OF_MEMORY. */
dcp_status eng_emit(dcp_engine *e, eng_seq *q, dcp_engine_event_kind kind, int32_t token, const char *text,
                    size_t len, dcp_engine_finish finish, dcp_status status, const char *message);
/* Queues q's PROMPT event for prompt position q->plp_done (and advances it): with the raw
 * log-probabilities of logits [n_vocab] (the row before it), or without (NULL: position 0). */
dcp_status eng_emit_prompt(dcp_engine *e, eng_seq *q, const float *logits);
/* Ends q: releases its slot, queues FINISHED (with text), unlinks and frees it. */
void eng_finish(dcp_engine *e, eng_seq *q, dcp_engine_finish why, int32_t token, const char *text, size_t len,
                dcp_status status, const char *message);
/* Frees the frees of the last, drops the last polled event's strings. */
void eng_drop_polled(dcp_engine *e);

/* text.c */
/* Adds a generated token to q's output: ends q (STOP, LENGTH; *ended set, q freed) or queues its
 * TOKEN event. */
dcp_status eng_text_token(dcp_engine *e, eng_seq *q, int32_t token, bool *ended);

/* sampler.c */
/* The distribution sampler s draws from for logits [n_vocab] (the mask, biases and penalties of
 * its history, then temperature, top-k, top-p, min-p; greedy: all on the argmax of the changed
 * logits), dense into p [n_vocab], summing to 1. Does not advance the stream. */
void eng_sampler_probs(dcp_sampler *s, const float *logits, double *p);
/* With a JSON constraint: true when the generated text is a complete value that nothing can
 * continue (the request then stops). */
bool eng_sampler_json_done(const dcp_sampler *s);
/* The log-probabilities of token (chosen from logits [n_vocab] by s, before it is accepted) and of
 * the n_top most likely tokens, into *out (dcp_engine_event's definition). Does not advance the
 * stream. */
void eng_sampler_logprobs(dcp_sampler *s, const float *logits, int32_t token, uint32_t n_top, eng_lp *out);
/* dcp_sampler_sample (the same token, the same draw) and eng_sampler_logprobs of that token in
 * one pass over the candidates. */
int32_t eng_sampler_sample_logprobs(dcp_sampler *s, const float *logits, uint32_t n_top, eng_lp *out);
/* The raw model distribution's log-probabilities (the log-softmax of logits [n_vocab] in double,
 * NaN as -inf) of token and of the n_top most likely tokens (ties: smaller id first), into *out;
 * *rank = 1 + the tokens whose logit is larger than token's. */
void eng_raw_logprobs(const float *logits, uint32_t n_vocab, int32_t token, uint32_t n_top, eng_lp *out,
                      uint32_t *rank);
/* The raw log-probabilities of every token, as eng_raw_logprobs computes them, most likely first
 * (ties: smaller id first): ids [n_vocab], lps [n_vocab]. DCP_ERR_OUT_OF_MEMORY. */
dcp_status eng_raw_logprobs_all(const float *logits, uint32_t n_vocab, int32_t *ids, float *lps);
/* Index of the token that a uniform u in [0, 1) picks from the weights w [n] (summing to sum > 0)
 * by their cumulative sums. */
int32_t eng_pick(const double *w, uint32_t n, double sum, double u);

/* spec.c */
/* Checks config->spec against the state and sets up speculation in e (after e's own fields). */
dcp_status eng_spec_create(dcp_engine *e, const dcp_engine_config *config);
void eng_spec_destroy(dcp_engine *e);
/* Allocates a new sequence's draft buffers and flags. */
dcp_status eng_spec_seq_init(dcp_engine *e, eng_seq *q);
void eng_spec_seq_free(eng_seq *q);
/* The drafts decoding sequence q may run this step with room more rows: n-gram tokens are found
 * now (in q->draft), a draft model's are counted (and drafted by eng_spec_draft). Strict sequences
 * return ENG_SPEC_DEFER when room holds fewer than all of theirs. */
#define ENG_SPEC_DEFER UINT32_MAX
uint32_t eng_spec_propose(dcp_engine *e, eng_seq *q, uint32_t room);
/* Runs the draft model over the step's sequences: catches its KV up to theirs (prompt chunks of the
 * step mirrored) and drafts the scheduled drafts into q->draft. */
dcp_status eng_spec_draft(dcp_engine *e);
/* Verifies sequence x->seq of the step whose rows' logits start at logits row k (logits, next):
 * emits the tokens (which may end it), rolls the rejected drafts back in the target and draft
 * states. */
dcp_status eng_spec_verify(dcp_engine *e, eng_sched *x, uint32_t k);
/* A strict sequence's next token from logits [n_vocab] without a draft: drawn with the uniform of
 * its seed and position (never its sampler stream). */
int32_t eng_spec_sample(dcp_engine *e, eng_seq *q, const float *logits);
/* q lost its slot (preempted or ended): the draft state forgets it too. */
void eng_spec_release(dcp_engine *e, eng_seq *q);

/* schedule.c: dcp_engine_step lives there. */

#endif
