/* Speculative decoding in the engine (include/dcpvk/engine.h, docs/design.md section 17): the
 * drafts (n-gram prompt lookup, or a draft model's run state driven step by step beside the
 * target's), the verification of a sequence's k + 1 scored rows (greedy, sampling with a point-mass
 * draft, sampling with a draft distribution), and the roll-back of rejected drafts in both states.
 *
 * The target's rows of a verification are ordinary rows of one sequence (its last token, then the
 * drafts, all with logits): the model step attends each causally over its sequence up to itself,
 * under DCP every rank over its share by the placement rule (src/attn), so row j computes what a
 * one-token step at position L + j computes, to the bit (the model is batch-invariant). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "common/splitmix.h"
#include "engine/engine_internal.h"

/* Uniform purposes of a strict sequence's position: the draft's sample, the acceptance test, the
 * token drawn from the residual (or from p when no draft was made there). */
enum { U_DRAFT = 0, U_ACCEPT = 1, U_TOKEN = 2 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

const char *dcp_spec_method_name(dcp_spec_method m)
{
    switch (m) {
    case DCP_SPEC_NONE: return "none";
    case DCP_SPEC_NGRAM: return "ngram";
    case DCP_SPEC_DRAFT: return "draft_model";
    default: return "?";
    }
}

/* A token's text for a message: at most 24 bytes, non-printable bytes as \xNN. */
static void token_quote(const char *t, size_t n, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && i < 24 && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)t[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    out[o] = 0;
}

dcp_status dcp_engine_spec_check_vocab(const dcp_tokenizer *target, const dcp_tokenizer *draft)
{
    const uint32_t n = dcp_tokenizer_n_vocab(target), m = dcp_tokenizer_n_vocab(draft);
    if (n != m)
        return dcp_fail(DCP_ERR_CONFIG,
                        "speculative decoding: the draft model's vocabulary has %u tokens and the target's %u; a draft "
                        "model needs the target's vocabulary",
                        m, n);
    for (uint32_t id = 0; id < n; id++) {
        size_t la, lb;
        const char *a = dcp_tokenizer_token_text(target, (int32_t)id, &la);
        const char *b = dcp_tokenizer_token_text(draft, (int32_t)id, &lb);
        if (la == lb && (la == 0 || memcmp(a, b, la) == 0)) continue;
        char qa[128], qb[128];
        token_quote(a, la, qa, sizeof qa);
        token_quote(b, lb, qb, sizeof qb);
        return dcp_fail(DCP_ERR_CONFIG,
                        "speculative decoding: token %u is \"%s\" in the target's vocabulary and \"%s\" in the draft "
                        "model's; a draft model needs the target's vocabulary",
                        id, qa, qb);
    }
    return DCP_OK;
}

/* The draft state's checks: empty, enough slots, context and pages, the same vocabulary. */
static dcp_status check_draft(const dcp_engine *e, const dcp_spec_config *sp)
{
    dcp_model_state *d = sp->draft;
    if (!d)
        return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: method draft_model needs the draft model's run state "
                                        "(spec.draft)");
    if (!sp->draft_tokenizer)
        return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: method draft_model needs the draft model's tokenizer "
                                        "(spec.draft_tokenizer) to check its vocabulary");
    if (d == e->s)
        return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: the draft state is the target's run state; the draft "
                                        "model needs a run state of its own");
    dcp_status st = dcp_engine_spec_check_vocab(e->tok, sp->draft_tokenizer);
    if (st != DCP_OK) return st;
    const uint32_t dv = dcp_model_get_config(dcp_model_state_get_model(d))->n_vocab;
    if (dv != e->n_vocab)
        return dcp_fail(DCP_ERR_CONFIG,
                        "speculative decoding: the draft model's output head has %u rows and the target's %u", dv,
                        e->n_vocab);
    const dcp_model_state_config *dc = dcp_model_state_get_config(d);
    if (dc->max_seqs < e->max_seqs)
        return dcp_fail(DCP_ERR_CONFIG,
                        "speculative decoding: the draft state has %u sequence slots; the target's has %u (max_seqs)",
                        dc->max_seqs, e->max_seqs);
    if (dcp_model_state_n_ctx(d) < e->n_ctx)
        return dcp_fail(DCP_ERR_CONFIG,
                        "speculative decoding: the draft state's context is %u tokens; the target's is %u (n_ctx)",
                        dcp_model_state_n_ctx(d), e->n_ctx);
    for (uint32_t q = 0; q < dc->max_seqs; q++)
        if (dcp_model_state_seq_length(d, q))
            return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: the draft state holds sequence %u already", q);
    const uint32_t dd = dcp_model_dcp(dcp_model_state_get_model(d));
    for (uint32_t r = 0; r < dd; r++) {
        const uint64_t need = (uint64_t)dcp_model_state_shard_pages(d, e->n_ctx, r) * e->max_seqs;
        if (need > dcp_model_state_pages_total(d))
            return dcp_fail(DCP_ERR_CONFIG,
                            "speculative decoding: the draft state's pools have %u KV pages per rank; %u sequences of "
                            "%u tokens need %llu on its DCP rank %u (the draft model never waits for pages)",
                            dcp_model_state_pages_total(d), e->max_seqs, e->n_ctx, (unsigned long long)need, r);
    }
    return DCP_OK;
}

dcp_status eng_spec_create(dcp_engine *e, const dcp_engine_config *config)
{
    const dcp_spec_config *sp = &config->spec;
    if (sp->method == DCP_SPEC_NONE) return DCP_OK;
    if (sp->method != DCP_SPEC_NGRAM && sp->method != DCP_SPEC_DRAFT)
        return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: method %d (allowed: ngram, draft_model)", (int)sp->method);
    const uint32_t k = sp->num_speculative_tokens;
    if (k < 1 || k > DCP_SPEC_MAX_TOKENS)
        return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: num_speculative_tokens %u (allowed 1..%u)", k,
                        DCP_SPEC_MAX_TOKENS);
    if (k + 1 > e->cfg.step_tokens)
        return dcp_fail(DCP_ERR_CONFIG,
                        "speculative decoding: num_speculative_tokens %u needs %u rows per step; the engine runs %u "
                        "(step_tokens, at most the state's max_rows)",
                        k, k + 1, e->cfg.step_tokens);
    if (k + 1 > e->max_logits)
        return dcp_fail(DCP_ERR_CONFIG,
                        "speculative decoding: num_speculative_tokens %u needs %u rows with logits per step; the run "
                        "state allows %u (create it with max_logits >= %u)",
                        k, k + 1, e->max_logits, k + 1);
    if (sp->method == DCP_SPEC_NGRAM) {
        uint32_t lo = sp->prompt_lookup_min, hi = sp->prompt_lookup_max;
        if (lo == 0 && hi == 0) lo = hi = 5;
        else if (lo == 0) lo = hi;
        else if (hi == 0) hi = lo;
        if (lo > hi)
            return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: prompt_lookup_min %u exceeds prompt_lookup_max %u",
                            lo, hi);
        if (hi > 1024)
            return dcp_fail(DCP_ERR_CONFIG, "speculative decoding: prompt_lookup_max %u (allowed 1..1024)", hi);
        e->ngram_min = lo;
        e->ngram_max = hi;
    } else {
        dcp_status st = check_draft(e, sp);
        if (st != DCP_OK) return st;
        e->draft = sp->draft;
        e->draft_rows = dcp_model_state_get_config(e->draft)->max_rows;
        e->draft_logits = dcp_model_state_max_logits(e->draft);
        e->drows = calloc(e->draft_rows, sizeof *e->drows);
        e->dlogits = malloc((size_t)e->draft_logits * e->n_vocab * sizeof *e->dlogits);
        e->dnext = calloc(e->draft_logits, sizeof *e->dnext);
        e->dseq = calloc(e->draft_logits, sizeof *e->dseq);
        if (!e->drows || !e->dlogits || !e->dnext || !e->dseq)
            return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    e->pbuf = malloc((size_t)e->n_vocab * sizeof *e->pbuf);
    e->rbuf = malloc((size_t)e->n_vocab * sizeof *e->rbuf);
    if (!e->pbuf || !e->rbuf) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    e->spec_k = k;
    return DCP_OK;
}

void eng_spec_destroy(dcp_engine *e)
{
    free(e->drows);
    free(e->dlogits);
    free(e->dnext);
    free(e->dseq);
    free(e->pbuf);
    free(e->rbuf);
}

dcp_status eng_spec_seq_init(dcp_engine *e, eng_seq *q)
{
    if (!e->spec_k) return DCP_OK;
    q->draft = malloc(e->spec_k * sizeof *q->draft);
    if (!q->draft) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    q->spec_strict = e->draft && !q->greedy;
    if (q->spec_strict) {
        q->qprob = malloc((size_t)e->spec_k * e->n_vocab * sizeof *q->qprob);
        if (!q->qprob) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    return DCP_OK;
}

void eng_spec_seq_free(eng_seq *q)
{
    free(q->draft);
    free(q->qprob);
}

void eng_spec_release(dcp_engine *e, eng_seq *q)
{
    if (e->draft && q->slot >= 0) {
        dcp_model_state_free_seq(e->draft, (uint32_t)q->slot);
        eng_log_op(e, DCP_ENGINE_OP_DRAFT_FREE, (uint32_t)q->slot, 0);
    }
    q->dfed = 0;
    q->spec_wait = false;
}

/* ---- drafts ---------------------------------------------------------------------------------- */

/* Prompt lookup: the last n tokens (n from ngram_max down to ngram_min) matched at their most recent
 * earlier place in q's tokens; what followed it, up to cap tokens, goes into q->draft. */
static uint32_t ngram_find(const dcp_engine *e, eng_seq *q, uint32_t cap)
{
    const int32_t *t = q->toks;
    const uint32_t n = q->n_toks;
    for (uint32_t len = e->ngram_max; len >= e->ngram_min; len--) {
        if (len >= n) continue;
        const int32_t *suffix = t + n - len;
        for (uint32_t i = n - len; i-- > 0;) {
            if (t[i] != suffix[0] || memcmp(t + i, suffix, (size_t)len * sizeof *t) != 0) continue;
            uint32_t c = n - (i + len); /* >= 1: the match ends before the suffix does */
            if (c > cap) c = cap;
            memcpy(q->draft, t + i + len, (size_t)c * sizeof *t);
            return c;
        }
    }
    return 0;
}

uint32_t eng_spec_propose(dcp_engine *e, eng_seq *q, uint32_t room)
{
    /* Never past max_tokens: the last token the request may have is the target's own. (The context
     * holds it too: submit checked n_prompt + max_tokens <= n_ctx.) */
    uint32_t cap = e->spec_k;
    if (cap > q->max_tokens - q->generated - 1) cap = q->max_tokens - q->generated - 1;
    /* A strict sequence's first token is never drafted: it comes from its prompt's last row, which
     * a prompt chunk may or may not include depending on the batch (eng_spec_sample then), so a
     * decode row left over from a chunk must decide it the same way. Its later tokens always come
     * from decode rows with drafts (chunk_with_logits keeps a recomputation short of its last). */
    if (q->spec_strict && q->generated == 0) cap = 0;
    if (cap == 0) {
        q->spec_wait = false;
        return 0;
    }
    if (!e->draft) {
        uint32_t d = ngram_find(e, q, cap);
        return d < room ? d : room;
    }
    if (q->spec_strict) {
        if (cap > room) {
            q->spec_wait = true;
            return ENG_SPEC_DEFER;
        }
        q->spec_wait = false;
        return cap;
    }
    return cap < room ? cap : room;
}

/* A uniform in [0, 1) from q's seed, a position and a purpose: the same wherever and whenever the
 * position is decided. */
static double spec_uniform(uint64_t seed, uint32_t pos, uint32_t purpose)
{
    uint64_t x = seed ^ (0xD1B54A32D192ED03ull * ((uint64_t)pos * 4u + purpose + 1u));
    (void)dcp_splitmix64_next(&x);
    return (double)(dcp_splitmix64_next(&x) >> 11) * (1.0 / 9007199254740992.0);
}

static double sum_of(const double *p, uint32_t n)
{
    double s = 0.0;
    for (uint32_t i = 0; i < n; i++) s += p[i];
    return s;
}

int32_t eng_spec_sample(dcp_engine *e, eng_seq *q, const float *logits)
{
    eng_sampler_probs(q->smp, logits, e->pbuf);
    return eng_pick(e->pbuf, e->n_vocab, sum_of(e->pbuf, e->n_vocab), spec_uniform(q->seed, q->n_toks, U_TOKEN));
}

/* The rows gathered for one step of the draft model. */
typedef struct dstep {
    uint32_t rows, outs;
    bool want_logits;
} dstep;

/* The draft token j of q from the draft's logits row k of the last draft step. */
static void take_draft(dcp_engine *e, eng_seq *q, uint32_t j, uint32_t k)
{
    if (!q->spec_strict) {
        q->draft[j] = e->dnext[k];
        return;
    }
    double *qp = q->qprob + (size_t)j * e->n_vocab;
    eng_sampler_probs(q->smp, e->dlogits + (size_t)k * e->n_vocab, qp);
    q->draft[j] = eng_pick(qp, e->n_vocab, sum_of(qp, e->n_vocab), spec_uniform(q->seed, q->n_toks + j, U_DRAFT));
}

/* Runs the gathered draft rows; each logits row k gives draft token j of dseq[k]. */
static dcp_status dstep_run(dcp_engine *e, dstep *ds, uint32_t j)
{
    if (ds->rows == 0) return DCP_OK;
    dcp_status st = eng_send_plan(e, true, e->drows, ds->rows); /* MPI followers run it too */
    if (st != DCP_OK) return dcp_fail_context(st, "draft model step plan");
    const double t0 = now_s();
    st = dcp_model_state_step(e->draft, e->drows, ds->rows, ds->want_logits ? e->dlogits : NULL, e->dnext);
    e->stats.spec_draft_seconds += now_s() - t0;
    e->stats.spec_draft_steps++;
    if (st != DCP_OK) return dcp_fail_context(st, "draft model step");
    for (uint32_t k = 0; k < ds->outs; k++) take_draft(e, e->dseq[k], j, k);
    *ds = (dstep){0};
    return DCP_OK;
}

/* Adds a row of q with token tok to the draft step (running it first when it is full). */
static dcp_status dstep_add(dcp_engine *e, dstep *ds, eng_seq *q, int32_t tok, bool logits, uint32_t j)
{
    if (ds->rows == e->draft_rows || (logits && ds->outs == e->draft_logits)) {
        dcp_status st = dstep_run(e, ds, j);
        if (st != DCP_OK) return st;
    }
    e->drows[ds->rows++] = (dcp_model_row){tok, (uint32_t)q->slot, logits};
    if (logits) {
        e->dseq[ds->outs++] = q;
        ds->want_logits |= q->spec_strict;
    }
    q->dfed++;
    return DCP_OK;
}

dcp_status eng_spec_draft(dcp_engine *e)
{
    dcp_status st = DCP_OK;
    dstep ds = {0};
    uint32_t most = 0;
    /* Catch up: a drafting sequence feeds its tokens up to its last (whose logits give the first
     * draft); every other one of the step mirrors the target's rows, short of its last token. */
    for (uint32_t i = 0; i < e->n_sched; i++) {
        const eng_sched *x = &e->sched[i];
        eng_seq *q = x->seq;
        const uint32_t upto = x->drafts ? q->n_toks : q->fed + x->rows < q->n_toks ? q->fed + x->rows : q->n_toks - 1;
        while (q->dfed < upto) DCP_TRY(dstep_add(e, &ds, q, q->toks[q->dfed], x->drafts && q->dfed + 1 == upto, 0));
        if (x->drafts > most) most = x->drafts;
    }
    DCP_TRY(dstep_run(e, &ds, 0));
    /* Then draft j + 1 from draft j, one row per sequence with drafts left. */
    for (uint32_t j = 1; j < most; j++) {
        for (uint32_t i = 0; i < e->n_sched; i++) {
            const eng_sched *x = &e->sched[i];
            if (x->drafts > j) DCP_TRY(dstep_add(e, &ds, x->seq, x->seq->draft[j - 1], true, j));
        }
        DCP_TRY(dstep_run(e, &ds, j));
    }
fail:
    return st;
}

/* ---- verification ---------------------------------------------------------------------------- */

dcp_status eng_spec_verify(dcp_engine *e, eng_sched *x, uint32_t k)
{
    eng_seq *q = x->seq;
    const uint32_t d = x->drafts, V = e->n_vocab, n0 = q->n_toks, fed0 = q->fed, slot = (uint32_t)q->slot;
    int32_t out[DCP_SPEC_MAX_TOKENS + 1];
    uint32_t a = 0; /* drafts accepted */
    for (uint32_t j = 0;; j++) {
        const float *row = e->logits + (size_t)(k + j) * V;
        int32_t t;
        if (q->greedy) {
            t = e->next[k + j];
        } else if (!q->spec_strict) {
            /* A point-mass draft: x ~ p with the request's stream, kept when it is the draft. */
            t = q->logprobs ? eng_sampler_sample_logprobs(q->smp, row, q->top_logprobs, &q->lp[j])
                            : dcp_sampler_sample(q->smp, row);
        } else {
            const uint32_t pos = n0 + j;
            double *p = e->pbuf;
            eng_sampler_probs(q->smp, row, p);
            if (j < d) {
                const double *qp = q->qprob + (size_t)j * V;
                const int32_t dj = q->draft[j];
                if (spec_uniform(q->seed, pos, U_ACCEPT) * qp[dj] < p[dj]) {
                    out[j] = dj;
                    if (q->logprobs) eng_sampler_logprobs(q->smp, row, dj, q->top_logprobs, &q->lp[j]);
                    dcp_sampler_accept(q->smp, &dj, 1, true); /* row j + 1's penalties see it */
                    a++;
                    continue;
                }
                double *r = e->rbuf, sum = 0.0;
                for (uint32_t i = 0; i < V; i++) {
                    r[i] = p[i] > qp[i] ? p[i] - qp[i] : 0.0;
                    sum += r[i];
                }
                t = sum > 0.0 ? eng_pick(r, V, sum, spec_uniform(q->seed, pos, U_TOKEN))
                              : eng_pick(p, V, sum_of(p, V), spec_uniform(q->seed, pos, U_TOKEN));
            } else {
                t = eng_pick(p, V, sum_of(p, V), spec_uniform(q->seed, pos, U_TOKEN));
            }
            out[j] = t;
            if (q->logprobs) eng_sampler_logprobs(q->smp, row, t, q->top_logprobs, &q->lp[j]);
            dcp_sampler_accept(q->smp, &t, 1, true);
            break;
        }
        out[j] = t; /* its logprobs (never greedy then) were computed from its own row above */
        dcp_sampler_accept(q->smp, &t, 1, true); /* before row j + 1's distribution */
        if (j == d || t != q->draft[j]) break;
        a++;
    }
    e->stats.spec_drafts++;
    e->stats.spec_draft_tokens += d;
    e->stats.spec_accepted_tokens += a;
    for (uint32_t j = 0; j < a; j++) e->stats.spec_accepted_per_pos[j]++;
    /* Roll back: the target keeps the last token and the accepted drafts; the draft model keeps the
     * tokens up to the first draft it was not fed (or rejected). */
    const uint32_t keep = fed0 + 1 + a;
    dcp_status st = DCP_OK;
    if (keep < dcp_model_state_seq_length(e->s, slot)) st = eng_truncate_slot(e, q, keep);
    if (st == DCP_OK && e->draft) {
        const uint32_t dkeep = n0 + (a + 1 < d ? a : d - 1); /* d >= 1 here */
        if (dkeep < q->dfed) {
            st = dcp_model_state_truncate_seq(e->draft, slot, dkeep);
            if (st == DCP_OK) eng_log_op(e, DCP_ENGINE_OP_DRAFT_TRUNCATE, slot, dkeep);
            q->dfed = dkeep;
        }
    }
    if (st != DCP_OK) {
        eng_finish(e, q, DCP_ENGINE_FINISH_ERROR, -1, NULL, 0, st, dcp_last_error());
        return st;
    }
    q->fed = keep;
    if (q->fed > q->seen) q->seen = q->fed;
    for (uint32_t j = 0; j <= a; j++) {
        bool ended;
        if (q->logprobs) q->lp_cur = &q->lp[j];
        st = eng_text_token(e, q, out[j], &ended);
        if (ended) break;
    }
    return st;
}
