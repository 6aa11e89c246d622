/* The serving engine: continuous batching of many requests over one run state
 * (include/dcpvk/model.h). Requests (prompt token ids, max tokens, per-request sampling, stop
 * conditions) are submitted; each dcp_engine_step schedules and runs one model step: one decode
 * row for every running sequence, then chunks of the prompts of new (or recomputed) sequences
 * under a per-step token budget, so a long prompt does not stall the others. Every sequence
 * samples with its own seeded sampler, so its tokens do not depend on what else is in the batch.
 * What a step produces comes out as events (a token with its text piece; finished, with a
 * reason), read with dcp_engine_poll.
 *
 * Pages: a sequence takes KV pages as it grows (the run state's pools are shared). When a step
 * does not fit, the newest running sequence is preempted: its pages are freed and it goes back to
 * the queue, to be recomputed later from its prompt and the tokens it had generated (its client
 * sees only latency: the recomputed logits are bitwise the same, and its sampler stream goes on
 * where it was). A request that could never fit (prompt + max_tokens beyond n_ctx, or beyond the
 * whole pool) is refused by dcp_engine_submit with a message; no other request is affected.
 *
 * Several processes (MPI): one process (the leader) runs the engine; the others hold the rest of
 * the TP group and must run exactly the same steps. The engine hands each step's plan (the
 * changes to the sequence slots since the last plan, in order: shortened, freed, attached to
 * cached blocks, committed to the cache; then the rows) to a callback before it runs the step,
 * and a draft model's steps the same way (speculative decoding); the leader broadcasts them and
 * the followers apply them with dcp_engine_plan_apply.
 *
 * Lifetimes: dcp_engine_create borrows the run state and the tokenizer, which must outlive the
 * engine; the engine owns its sequences (it frees their slots in the state when they end, and
 * all of them in dcp_engine_destroy). Request data (prompt, stop strings) is copied at submit.
 *
 * Threading: not thread-safe. One thread makes every call on an engine (and on its run state
 * while the engine exists); a server drives it from one thread and hands requests, cancellations
 * and events over to its connection threads itself. */
#ifndef DCPVK_ENGINE_H
#define DCPVK_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/model.h"
#include "dcpvk/status.h"
#include "dcpvk/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dcp_engine dcp_engine;

/* One change the engine made to the run state's slots, outside the steps' rows. */
typedef enum dcp_engine_op_kind {
    DCP_ENGINE_OP_TRUNCATE = 1, /* slot shortened to its first n tokens (speculative decoding's
                                 * roll-back of rejected drafts: dcp_model_state_truncate_seq) */
    DCP_ENGINE_OP_FREE = 2,     /* slot freed (dcp_model_state_free_seq) */
    DCP_ENGINE_OP_ATTACH = 3,   /* empty slot started with n cached tokens: prefix caching's
                                 * dcp_model_state_prefix_attach of the plan's tokens
                                 * [first, first + len), which must give n again */
    DCP_ENGINE_OP_COMMIT = 4,   /* slot's first n tokens final (dcp_model_state_prefix_commit) */
    DCP_ENGINE_OP_FORK = 5,     /* empty slot made a fork of slot n (n > 1 choices:
                                 * dcp_model_state_fork_seq), sharing len tokens */
    DCP_ENGINE_OP_DRAFT_TRUNCATE = 6, /* the draft model's slot shortened to its first n tokens
                                       * (speculative decoding with a draft model) */
    DCP_ENGINE_OP_DRAFT_FREE = 7,     /* the draft model's slot freed */
} dcp_engine_op_kind;

typedef struct dcp_engine_op {
    uint32_t kind; /* dcp_engine_op_kind */
    uint32_t slot;
    uint32_t n;
    uint32_t first, len; /* ATTACH: its tokens in the plan's tokens; FORK: len the shared tokens */
} dcp_engine_op;

/* What one step runs, for the other processes of an MPI group: first the changes to the slots
 * since the last plan, ops[0 .. n_ops) in the order the engine made them (the prefix cache's
 * index and pages follow from that order, so every process's cache stays the leader's), then the
 * rows (dcp_model_state_step): in the target's run state, or with `draft` (speculative decoding
 * with a draft model: the draft's own steps, planned like the target's) in the draft model's. */
typedef struct dcp_engine_plan {
    uint32_t n_ops;
    const dcp_engine_op *ops;  /* [n_ops], at most DCP_ENGINE_PLAN_MAX_OPS(max_seqs) */
    uint32_t n_tokens;
    const int32_t *tokens;     /* [n_tokens] the ATTACH ops' tokens */
    uint32_t n_rows;           /* 1 .. max_rows */
    const dcp_model_row *rows; /* [n_rows] */
    bool draft;                /* the rows are a step of the draft model's state */
} dcp_engine_plan;

/* The most ops one plan holds for a run state of max_seqs slots (between two steps a slot is at
 * most committed, shortened, freed, forked or attached, and freed again; its draft slot shortened
 * and freed, and freed again). */
#define DCP_ENGINE_PLAN_MAX_OPS(max_seqs) (12u * (max_seqs))

/* Called by dcp_engine_step with the step's plan before it runs the step (the pointers are
 * valid during the call). A status other than DCP_OK aborts the step (every sequence of the
 * step ends with an error). */
typedef dcp_status (*dcp_engine_plan_fn)(void *user, const dcp_engine_plan *plan);

/* ---- speculative decoding (docs/design.md section 17) -----------------------------------------
 * Each step, every decoding sequence may run k + 1 rows instead of one: its last token and k draft
 * tokens, all with logits, causal among themselves (rows of one sequence, as in a prefill chunk;
 * under DCP each rank's share of the draft positions follows the placement rule). Verification
 * keeps the drafts the target agrees with and one more token of the target's own, and rolls the
 * rejected drafts back out of the KV cache (dcp_model_state_truncate_seq), so the cache holds what
 * decoding one token at a time would hold.
 *   greedy: a draft is kept while it equals the target's argmax: the tokens are bitwise those of
 *           decoding without speculation (every verified row computes what a one-row step does).
 *   sampling with n-gram drafts (a point mass q): row j draws the target's token x_j from p_j with
 *           the request's own sampler stream, one draw per token as without speculation, and the
 *           draft is kept when it equals x_j, which happens with probability p_j(draft): the
 *           tokens are those of decoding without speculation.
 *   sampling with a draft model: the draft samples d ~ q; it is kept with probability
 *           min(1, p(d) / q(d)), else the token is drawn from max(0, p - q) normalised, and after
 *           k kept drafts one more from p: the target distribution exactly. The uniforms come from
 *           the request's seed and the token's position, and such a sequence runs a step with all
 *           its drafts or waits for the next step, so its tokens do not depend on the batch. */
typedef enum dcp_spec_method {
    DCP_SPEC_NONE = 0,  /* no speculation */
    DCP_SPEC_NGRAM = 1, /* prompt lookup: the tokens that followed the last n tokens' most recent earlier
                         * match in the sequence's own prompt and output, n from prompt_lookup_max
                         * down to prompt_lookup_min */
    DCP_SPEC_DRAFT = 2, /* a draft model of the same vocabulary drafts k tokens autoregressively */
} dcp_spec_method;

/* The most draft tokens per step and sequence. */
#define DCP_SPEC_MAX_TOKENS 32

typedef struct dcp_spec_config {
    dcp_spec_method method;           /* default DCP_SPEC_NONE */
    uint32_t num_speculative_tokens;  /* k, 1 .. DCP_SPEC_MAX_TOKENS (no default; required with a
                                       * method); k + 1 rows must fit the step (step_tokens, the state's
                                       * max_logits) */
    uint32_t prompt_lookup_max;       /* n-gram: longest suffix matched, tokens; 0 (default): as
                                       * prompt_lookup_min, or 5 when both are 0 (vLLM's rule) */
    uint32_t prompt_lookup_min;       /* n-gram: shortest suffix matched; 0 (default): as
                                       * prompt_lookup_max */
    dcp_model_state *draft;           /* draft model: its run state (borrowed; empty, at least the
                                       * target's slots and context, pages for all of them) */
    const dcp_tokenizer *draft_tokenizer; /* draft model: its tokenizer, checked against the target's
                                       * (dcp_engine_spec_check_vocab) */
} dcp_spec_config;

#define DCP_SPEC_CONFIG_DEFAULT {.method = DCP_SPEC_NONE, .num_speculative_tokens = 0, .prompt_lookup_max = 0, \
                                 .prompt_lookup_min = 0, .draft = NULL, .draft_tokenizer = NULL}

/* "none", "ngram", "draft_model". */
DCP_API const char *dcp_spec_method_name(dcp_spec_method m);
/* DCP_OK when the draft's vocabulary is the target's: the same number of tokens and the same text
 * of every token. DCP_ERR_CONFIG naming the first difference (the counts, or the token id and both
 * texts). Thread-safe. */
DCP_API dcp_status dcp_engine_spec_check_vocab(const dcp_tokenizer *target, const dcp_tokenizer *draft);

typedef struct dcp_engine_config {
    uint32_t step_tokens;       /* rows per step at most (decode rows + prompt chunks); 0 (default):
                                 * the state's max_rows, and never more than it */
    dcp_engine_plan_fn on_plan; /* NULL (default): none */
    void *plan_user;            /* passed to on_plan (default NULL) */
    dcp_spec_config spec;       /* speculative decoding (default none) */
    bool enable_prefix_caching; /* automatic prefix caching (dcp_model_state_set_prefix_caching):
                                 * a request starts with the longest cached prefix of its tokens
                                 * and prefills only the rest; default false (dcp-vk-serve turns it
                                 * on). With on_plan (MPI followers), the followers' states must
                                 * have it on too, with the same kv_offload_bytes (KV offload works
                                 * there: every process's host pool has the same blocks) */
} dcp_engine_config;

#define DCP_ENGINE_CONFIG_DEFAULT {.step_tokens = 0, .on_plan = NULL, .plan_user = NULL, \
                                   .spec = DCP_SPEC_CONFIG_DEFAULT, .enable_prefix_caching = false}

/* Creates an engine over the run state s (all its slots free; the engine uses every slot) and the
 * model's tokenizer tok (for EOS and the text of the tokens). Both must outlive the engine (and
 * config->spec's draft state and tokenizer too). Destroy with dcp_engine_destroy.
 * DCP_ERR_INVALID_ARGUMENT when the state holds sequences already; with speculation,
 * DCP_ERR_CONFIG naming the field for k or n-gram sizes out of range, k + 1 rows beyond step_tokens
 * or the state's max_logits, a missing, busy or too small draft state, or another vocabulary. */
DCP_API dcp_status dcp_engine_create(dcp_model_state *s, const dcp_tokenizer *tok, const dcp_engine_config *config,
                                     dcp_engine **out);
/* Ends every sequence (their slots freed in the state; no events) and frees the engine. */
DCP_API void dcp_engine_destroy(dcp_engine *e);

/* A request. Everything it points to is copied by dcp_engine_submit. */
typedef struct dcp_engine_request {
    const int32_t *prompt;         /* [n_prompt] token ids (BOS included if wanted) */
    uint32_t n_prompt;             /* >= 1 */
    uint32_t max_tokens;           /* tokens to generate at most (default 16); 0: finishes at once */
    dcp_sampler_config sampling;   /* temperature, top-k, top-p, min-p, seed, biases, penalties
                                    * (default greedy). The penalties see the prompt and the tokens
                                    * generated. sampling.min_tokens (<= max_tokens): EOS (unless
                                    * ignore_eos) and the stop tokens cannot be generated before
                                    * that many tokens are; the engine adds them to
                                    * sampling.min_tokens_ids itself */
    bool ignore_eos;               /* true: EOS does not stop generation (default false) */
    const int32_t *stop_tokens;    /* [n_stop_tokens] more ids that stop generation like EOS (a
                                    * chat template's end-of-turn, a request's stop_token_ids); their
                                    * text is not shown */
    uint32_t n_stop_tokens;
    const char *const *stop;       /* [n_stop] stop strings (UTF-8, non-empty): the text ends before
                                    * the first place where one of them appears; text that could
                                    * still become one is held back until it cannot */
    uint32_t n_stop;
    bool include_stop_str_in_output; /* true: the text ends after the stop string instead, and a stop
                                    * token's (or EOS's) text is shown (empty for special tokens
                                    * unless DCP_DECODE_SPECIAL); default false */
    unsigned decode_flags;         /* DCP_DECODE_* for the text pieces (default 0) */
    void *user;                    /* handed back in the request's events (default NULL) */
    bool logprobs;                 /* true: every TOKEN event (and a FINISHED event with a shown token)
                                    * carries the token's log-probability and top_logprobs
                                    * alternatives (dcp_engine_event.has_logprob); default false.
                                    * The request's logits are then downloaded every step (never the
                                    * device argmax alone) */
    uint32_t top_logprobs;         /* 0 .. DCP_ENGINE_MAX_LOGPROBS most likely tokens with each
                                    * (default 0: only the chosen token's) */
    bool prompt_logprobs;          /* true: one PROMPT event per prompt token, in order, before any
                                    * TOKEN event: the first without a log-probability (nothing comes
                                    * before it), each other with the log-probability of that prompt
                                    * token given the ones before it and the prompt_top_logprobs most
                                    * likely tokens there, from the raw model distribution (the
                                    * log-softmax of the logits: no bias, penalty, mask or temperature).
                                    * The prefill then downloads the logits of every prompt row (its
                                    * chunks get no more rows with logits than the state's max_logits),
                                    * and the request takes no prefix-cache blocks until its PROMPT
                                    * events are out (they are recomputed; its own blocks are still
                                    * cached for others). With max_tokens 0 the request runs its
                                    * prefill and finishes (LENGTH) after its last PROMPT event.
                                    * Default false */
    uint32_t prompt_top_logprobs;  /* 0 .. DCP_ENGINE_MAX_LOGPROBS, or DCP_ENGINE_PROMPT_LOGPROBS_ALL: the
                                    * whole vocabulary at each position (vLLM's prompt_logprobs -1, in
                                    * the events' all_ids / all_logprobs); default 0. ALL holds
                                    * n_vocab * 8 bytes per PROMPT event until it is polled (at most the
                                    * rows with logits of one step: the state's max_logits) */
    uint32_t n;                    /* choices from the one prompt, 1 .. DCP_ENGINE_MAX_CHOICES (default
                                    * 1; 0 reads as 1): n sequences with consecutive ids, choice i
                                    * sampling with seed dcp_engine_choice_seed(sampling.seed, i).
                                    * Choices 1 .. n-1 wait until choice 0 has prefilled the prompt
                                    * and are then forked from it (dcp_model_state_fork_seq: its full
                                    * blocks shared, its last partial page copied on the device) as
                                    * far as slots and pages allow, drawing their first tokens from
                                    * its last prompt row's logits: they compute nothing of the
                                    * prompt (those that did not fit are admitted later as any
                                    * request; with MPI followers the plan carries the fork).
                                    * n > 1 with prompt_logprobs is refused */
} dcp_engine_request;

/* The most choices per request (dcp_engine_request.n). */
#define DCP_ENGINE_MAX_CHOICES 16

/* The sampling seed of choice i of a request seeded with seed: seed itself for choice 0 (so a
 * request with n = 1 and its choice 0 draw the same tokens), else SplitMix64's mixing of
 * seed + i * 0x9E3779B97F4A7C15 (dcp_splitmix64_next of state seed + (i - 1) * that increment).
 * Depends on nothing else: choice i of a seeded request is reproducible whatever the batch.
 * Thread-safe. */
DCP_API uint64_t dcp_engine_choice_seed(uint64_t seed, uint32_t i);

/* The most alternatives per token (OpenAI's limit for top_logprobs). */
#define DCP_ENGINE_MAX_LOGPROBS 20

/* dcp_engine_request.prompt_top_logprobs: every token of the vocabulary, ranked. */
#define DCP_ENGINE_PROMPT_LOGPROBS_ALL UINT32_MAX

#define DCP_ENGINE_REQUEST_DEFAULT {.prompt = NULL, .n_prompt = 0, .max_tokens = 16, \
                                    .sampling = DCP_SAMPLER_CONFIG_DEFAULT, .ignore_eos = false, \
                                    .stop_tokens = NULL, .n_stop_tokens = 0, .stop = NULL, .n_stop = 0, \
                                    .include_stop_str_in_output = false, .decode_flags = 0, .user = NULL, \
                                    .logprobs = false, .top_logprobs = 0, .prompt_logprobs = false, \
                                    .prompt_top_logprobs = 0, .n = 1}

/* Queues a request; *id receives its id (> 0, unique for the engine's life); with n choices, choice
 * i has id *id + i (each its own events, dcp_engine_event.index i; cancel each by its id). Errors,
 * with nothing queued: DCP_ERR_INVALID_ARGUMENT (n above DCP_ENGINE_MAX_CHOICES, no prompt, a token outside the vocabulary, bad sampling
 * values, a stop token outside the vocabulary, min_tokens > max_tokens, an empty stop string,
 * n_prompt + max_tokens beyond the context n_ctx),
 * DCP_ERR_OUT_OF_PAGES (the sequence would not fit in the whole pool even alone),
 * DCP_ERR_OUT_OF_MEMORY. Each message names the value and the limit. */
DCP_API dcp_status dcp_engine_submit(dcp_engine *e, const dcp_engine_request *r, uint64_t *id);

/* Ends request id now: its slot's pages go back to the pool at once and a FINISHED event with
 * reason CANCELLED follows. DCP_ERR_INVALID_ARGUMENT for an id that is not queued or running
 * (finished already, or never submitted). */
DCP_API dcp_status dcp_engine_cancel(dcp_engine *e, uint64_t id);

/* Schedules and runs one step (nothing when no request is queued or running). Returns DCP_OK when
 * the step ran or there was nothing to run; a failure of the model step (or of on_plan) ends every
 * sequence of that step with an ERROR event and is returned (the others go on). */
DCP_API dcp_status dcp_engine_step(dcp_engine *e);
/* True while requests are queued or running (more steps to run). */
DCP_API bool dcp_engine_busy(const dcp_engine *e);

typedef enum dcp_engine_event_kind {
    DCP_ENGINE_EVENT_TOKEN = 0,    /* a token was generated */
    DCP_ENGINE_EVENT_FINISHED = 1, /* the request ended; its last event */
    DCP_ENGINE_EVENT_PROMPT = 2,   /* a prompt token's log-probabilities (requests with prompt_logprobs):
                                    * token, position, piece (the token's text in the prompt decoded
                                    * alone from its start, special tokens shown as the request's
                                    * decode_flags say), has_logprob (false at position 0), logprob,
                                    * rank, top_ids / top_logprobs (n_top = prompt_top_logprobs;
                                    * DCP_ENGINE_MAX_LOGPROBS for ..._ALL, whose whole vocabulary is in
                                    * all_ids / all_logprobs); no text (len 0) */
} dcp_engine_event_kind;

typedef enum dcp_engine_finish {
    DCP_ENGINE_FINISH_NONE = 0,      /* (TOKEN events) */
    DCP_ENGINE_FINISH_STOP = 1,      /* EOS, a stop token or a stop string */
    DCP_ENGINE_FINISH_LENGTH = 2,    /* max_tokens generated */
    DCP_ENGINE_FINISH_CANCELLED = 3, /* dcp_engine_cancel */
    DCP_ENGINE_FINISH_ERROR = 4,     /* the model step failed (status, message) */
} dcp_engine_finish;

/* "stop", "length", "cancelled", "error" ("" for NONE). */
DCP_API const char *dcp_engine_finish_name(dcp_engine_finish f);

typedef struct dcp_engine_event {
    dcp_engine_event_kind kind;
    uint64_t id;               /* the request */
    void *user;                /* its dcp_engine_request.user */
    uint32_t index;            /* the choice, 0 .. n-1 (id - the request's first id) */
    int32_t token;             /* TOKEN: the id generated; FINISHED: the token that ended the request
                                * (EOS, a stop token, the one completing a stop string, the
                                * max_tokens-th), or -1 when it ended without one (cancelled, an
                                * error of the step, max_tokens 0) */
    const char *text;          /* text released by this event, UTF-8, [len] bytes (not NUL-terminated
                                * when len is 0 it may be NULL): TOKEN: the new text that can no longer
                                * be part of a stop string (possibly empty: held back, or half a
                                * character); FINISHED (STOP or LENGTH): the rest, up to the stop
                                * string. Valid until the next call on the engine. The texts of a
                                * request's events, concatenated, are its output. */
    size_t len;
    dcp_engine_finish finish;  /* FINISHED: why */
    dcp_status status;         /* FINISHED with ERROR: the failure; else DCP_OK */
    const char *message;       /* FINISHED with ERROR: what failed (valid like text); else "" */
    uint32_t prompt_tokens;    /* the request's prompt tokens */
    uint32_t completion_tokens; /* tokens generated so far (stop tokens and EOS included) */
    uint32_t cached_tokens;    /* prompt tokens taken from the prefix cache when the request was
                                * first admitted (0 with caching off) */
    /* Log-probabilities (requests with logprobs; PROMPT events: of the raw distribution, see
     * prompt_logprobs), natural log, of the distribution the token was
     * drawn from: the logits after the min_tokens mask, the biases and the penalties, divided by the
     * temperature, with the tokens that top-k, top-p and min-p cut at -inf (vLLM's
     * processed_logprobs). Greedy requests (temperature 0 or top-k 1): the log-softmax of the
     * changed logits at temperature 1, nothing cut. Under speculation each token's come from its own
     * verified row. has_logprob is false for events without a generated token, and for a stop
     * token (or EOS) whose text is not shown. */
    bool has_logprob;
    float logprob;             /* the token's (finite) */
    uint32_t n_top;            /* the request's top_logprobs */
    int32_t top_ids[DCP_ENGINE_MAX_LOGPROBS];    /* [n_top] the most likely tokens, most likely first
                                * (ties: smaller id first) */
    float top_logprobs[DCP_ENGINE_MAX_LOGPROBS]; /* [n_top] theirs (-inf for cut tokens) */
    /* PROMPT events with has_logprob of requests with prompt_top_logprobs
     * DCP_ENGINE_PROMPT_LOGPROBS_ALL: the whole vocabulary (n_all = n_vocab), most likely first
     * (ties: smaller id first; top_ids / top_logprobs then hold its first DCP_ENGINE_MAX_LOGPROBS,
     * the same values), valid like text; else n_all 0 and NULL. */
    uint32_t n_all;
    const int32_t *all_ids;    /* [n_all] */
    const float *all_logprobs; /* [n_all] */
    uint32_t position;         /* PROMPT: the token's index in the prompt */
    uint32_t rank;             /* PROMPT with has_logprob: 1 + the tokens with a larger logit (vLLM's
                                * rank); else 0 */
    const char *piece;         /* has_logprob (and every PROMPT event): the text this token added to
                                * the decoded output (the decoded prompt for PROMPT)
                                * (before stop strings are held back or cut; may be empty, mid
                                * character), [piece_len] bytes, valid like text */
    size_t piece_len;
} dcp_engine_event;

/* Takes the oldest pending event into *ev; false when there is none. Events of one request come
 * in order; its FINISHED event is its last. */
DCP_API bool dcp_engine_poll(dcp_engine *e, dcp_engine_event *ev);

/* Counters and gauges, for metrics. */
typedef struct dcp_engine_stats {
    uint32_t running;           /* sequences holding a slot (decoding or with a prompt chunk run) */
    uint32_t waiting;           /* queued, including preempted ones */
    uint32_t running_peak;      /* the most sequences running at once since creation */
    uint64_t steps;             /* steps run */
    uint64_t step_sequences;    /* sum over steps of the sequences in each step */
    uint64_t rows;              /* rows run (prompt, recomputed and decode tokens) */
    uint64_t prompt_tokens;     /* prompt tokens of the requests submitted */
    uint64_t generated_tokens;  /* tokens generated */
    uint64_t recomputed_tokens; /* rows run again after preemptions */
    uint64_t preemptions;       /* sequences preempted */
    uint64_t forked_choices;    /* choices 1 .. n-1 that started as a fork of choice 0's prompt KV
                                 * (dcp_model_state_fork_seq), running none of its rows */
    uint64_t finished[5];       /* requests ended, by dcp_engine_finish reason */
    uint32_t last_rows;         /* rows of the last step */
    double last_step_seconds;   /* wall time of the last step's model call */
    /* Decode steps (one row per sequence in the step: decode tokens, or prompts of one token) and
     * what they took, summed over them and of the last one: compute dispatches over every rank of
     * this process and of its busiest rank (dcp_model_state_last_dispatches, _rank_dispatches),
     * host waits (dcp_model_state_last_host_waits). */
    uint64_t decode_steps;
    uint64_t decode_dispatches, decode_rank_dispatches, decode_host_waits;
    uint32_t last_decode_dispatches, last_decode_rank_dispatches, last_decode_host_waits;
    /* speculative decoding (vLLM's vllm:spec_decode_* counters): */
    uint64_t spec_drafts;       /* verifications of a sequence with >= 1 draft token (num_drafts) */
    uint64_t spec_draft_tokens; /* draft tokens verified (num_draft_tokens) */
    uint64_t spec_accepted_tokens; /* of which accepted (num_accepted_tokens); mean accepted length
                                 * = 1 + spec_accepted_tokens / spec_drafts */
    uint64_t spec_accepted_per_pos[DCP_SPEC_MAX_TOKENS]; /* accepted at draft position j
                                 * (num_accepted_tokens_per_pos) */
    uint64_t spec_draft_steps;  /* steps of the draft model (its drafting and catching up) */
    double spec_draft_seconds;  /* wall time of the draft model's steps */
    /* automatic prefix caching (vLLM's vllm:prefix_cache_queries / _hits, in tokens): every
     * admission (recomputations after preemption too) queries its tokens and hits the cached ones */
    uint64_t prefix_queries;    /* tokens looked up */
    uint64_t prefix_hits;       /* of which taken from the cache (not prefilled) */
    uint32_t prefix_blocks;     /* cached blocks now (dcp_prefix_cache_stats.blocks) */
    uint32_t prefix_blocks_unreferenced; /* of which reclaimable */
    uint64_t prefix_evictions;  /* cached blocks evicted from the device pages (to host or gone) */
    /* KV offload to host memory (dcp_model_state_config.kv_offload_bytes; dcp_prefix_cache_stats) */
    uint32_t offload_host_blocks;       /* cached blocks host-resident now */
    uint32_t offload_host_capacity;     /* blocks the host pool holds (0: off) */
    uint64_t offload_host_evictions;    /* host-resident blocks evicted (host pool full) */
    uint64_t offload_to_host_blocks, offload_to_host_bytes; /* copied device -> host */
    uint64_t offload_to_device_blocks, offload_to_device_bytes; /* restored host -> device on a hit */
} dcp_engine_stats;

DCP_API void dcp_engine_get_stats(const dcp_engine *e, dcp_engine_stats *out);

/* The state's slot that request id holds, or -1 (queued, finished or unknown). */
DCP_API int32_t dcp_engine_request_slot(const dcp_engine *e, uint64_t id);
/* The run state the engine drives. */
DCP_API dcp_model_state *dcp_engine_state(dcp_engine *e);

/* Follower side of a plan (the processes other than the leader): applies the plan's ops in order
 * (the DRAFT_ ones to draft), then runs its rows without logits in s, or in draft for a draft plan.
 * draft is this process's part of the draft model's state, or NULL without one (a plan that needs
 * it is then DCP_ERR_INVALID_ARGUMENT). Every process must apply every plan, in order; an ATTACH
 * that gives another count than the leader's (the caches diverged) is DCP_ERR_INTERNAL. */
DCP_API dcp_status dcp_engine_plan_apply(dcp_model_state *s, dcp_model_state *draft, const dcp_engine_plan *plan);

#ifdef __cplusplus
}
#endif
#endif
