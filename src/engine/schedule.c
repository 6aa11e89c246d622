/* One engine step: choose the rows, account the pages, preempt when they do not fit, run the
 * model step, sample every sequence that got logits.
 *
 * The rows of a step, in this order, under the step's token budget (config step_tokens):
 *   1. one decode row for every running sequence whose tokens are all in KV but the last (oldest
 *      first). When its page does not fit, the newest running sequence not yet in the step is
 *      preempted (possibly itself), until it fits. With speculation (spec.c) each decode row brings
 *      the drafts that fit beside one row for every later decoding sequence, under the budget, the
 *      state's rows with logits and the free pages (drafts are cut short rather than preempt
 *      anyone, except for the strict ones of a draft model with sampling, which run with all their
 *      drafts or wait for the next step, where they come first);
 *   2. a chunk of the rest of every running sequence that is still prefilling (a prompt, or a
 *      preempted sequence being recomputed), oldest first, as much as the budget and the pages
 *      allow; when not one token fits, a newer running sequence is preempted for it;
 *   3. unless this step preempted: new sequences from the queue (oldest first: preempted ones come
 *      back before younger ones), each into a free slot with a first chunk. A sequence is admitted
 *      only when all the tokens it has (its prompt, and what it had generated when preempted) fit
 *      beside what the running ones will hold once their own known tokens are in, keeping one page
 *      per running sequence free on every rank for their next decode rows: a prompt is never
 *      admitted only to be preempted before its prefill ends, the expensive kind of thrashing.
 *      Generation stays optimistic (max_tokens is not reserved; preemption handles the rest). The
 *      first that does not fit stops the admissions (first come, first served).
 * A sequence's rows are consecutive; only its last row of a step can want logits, and only when
 * it is the sequence's last known token (prefill chunks before the last want none); its draft rows
 * all want logits. A chunk whose last token would want logits when the drafts took every logits
 * row stops one token short. The rows are laid out once a draft model has drafted (spec.c).
 *
 * Pages are counted per DCP rank with the placement formulas (dcp_model_state_shard_pages), the
 * same sums dcp_model_state_step checks, so a planned step always fits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/error.h"
#include "engine/engine_internal.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Largest k <= want such that growing a sequence of length len by k tokens fits on every DCP
 * rank beside the step's pages so far, keeping `reserve` pages free on each. */
static uint32_t fit_tokens(const dcp_engine *e, uint32_t len, uint32_t want, uint32_t reserve)
{
    uint32_t lo = 0, hi = want; /* lo fits; find the largest */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        bool ok = true;
        for (uint32_t r = 0; r < e->dcp && ok; r++) {
            uint64_t grow = dcp_model_state_shard_pages(e->s, (uint64_t)len + mid, r) -
                            dcp_model_state_shard_pages(e->s, len, r);
            uint64_t avail = dcp_model_state_rank_pages_free(e->s, r);
            ok = (uint64_t)e->need[r] + grow + reserve <= avail;
        }
        if (ok) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

/* Whether a waiting sequence q with all its known tokens fits beside the step's pages (need) and
 * the known tokens still to come of the running sequences (future), keeping `reserve` pages. With
 * prefix caching its first `hit` blocks are cached (no page of its own), of which `revived` are
 * reclaimable now (attaching them takes them out of the free count). */
static bool admit_fits(const dcp_engine *e, const eng_seq *q, const uint32_t *future, uint32_t reserve, uint32_t hit,
                       uint32_t revived)
{
    for (uint32_t r = 0; r < e->dcp; r++) {
        uint64_t full = (uint64_t)dcp_model_state_shard_pages(e->s, q->n_toks, r) - hit + revived;
        if ((uint64_t)e->need[r] + future[r] + reserve + full > dcp_model_state_rank_pages_free(e->s, r)) return false;
    }
    return true;
}

/* Prompt logprobs: whether q still has PROMPT events to give, and the first row whose logits it
 * wants (row p gives position p + 1's; position 0's needs none). */
static bool plp_pending(const eng_seq *q) { return q->plp && q->plp_done < q->n_prompt; }
static uint32_t plp_lo(const eng_seq *q) { return q->plp_done ? q->plp_done - 1 : 0; }

/* Of q's k token rows from q->fed, the first that wants logits for a prompt position, and how many
 * do (rows plp_lo .. n_prompt - 2). */
static uint32_t plp_rows(const eng_seq *q, uint32_t k, uint32_t *first)
{
    *first = 0;
    if (!plp_pending(q) || q->n_prompt < 2) return 0;
    const uint32_t a = plp_lo(q) > q->fed ? plp_lo(q) : q->fed, b = q->fed + k < q->n_prompt - 1 ? q->fed + k : q->n_prompt - 1;
    if (a >= b) return 0;
    *first = a - q->fed;
    return b - a;
}

/* A chunk of k rows of q cut so that its rows with logits (prompt positions, and its last token's)
 * fit in the step's rows with logits left. */
static uint32_t plp_cap(const dcp_engine *e, const eng_seq *q, uint32_t k)
{
    if (!plp_pending(q)) return k;
    const uint32_t avail = e->max_logits - e->logits_used;
    uint32_t first;
    while (k && plp_rows(q, k, &first) + (q->fed + k == q->n_toks) > avail) k--;
    return k;
}

/* Adds k rows of q (tokens toks[fed ...]) and `drafts` draft rows to the step, their pages to need.
 * The rows are laid out by layout_rows once the drafts are known. */
static void add_rows(dcp_engine *e, eng_seq *q, uint32_t k, uint32_t drafts)
{
    const uint32_t len = q->fed;
    for (uint32_t r = 0; r < e->dcp; r++)
        e->need[r] += dcp_model_state_shard_pages(e->s, (uint64_t)len + k + drafts, r) -
                      dcp_model_state_shard_pages(e->s, len, r);
    const bool logits = q->fed + k == q->n_toks;
    uint32_t first;
    const uint32_t plp = plp_rows(q, k, &first);
    e->sched[e->n_sched++] = (eng_sched){q, k, logits, drafts, first, plp};
    e->logits_used += logits + drafts + plp;
    q->step_rows = k + drafts;
}

/* The step's rows from its entries: a sequence's token rows, then its drafts (all with logits). */
static void layout_rows(dcp_engine *e)
{
    e->n_rows = 0;
    for (uint32_t i = 0; i < e->n_sched; i++) {
        const eng_sched *x = &e->sched[i];
        const eng_seq *q = x->seq;
        for (uint32_t t = 0; t < x->rows; t++)
            e->rows[e->n_rows++] = (dcp_model_row){q->toks[q->fed + t], (uint32_t)q->slot,
                                                   (x->logits && t + 1 == x->rows) ||
                                                       (t >= x->plp_first && t < x->plp_first + x->plp)};
        for (uint32_t t = 0; t < x->drafts; t++) e->rows[e->n_rows++] = (dcp_model_row){q->draft[t], (uint32_t)q->slot, true};
    }
}

/* Token rows of a prompt chunk of q: k, less its last when that one wants logits and either the
 * step has no logits row left (speculation's drafts took them) or q is a strict speculative
 * sequence being recomputed (its next token is decided by a decode step, with its drafts, as it
 * would have been had it not been preempted: spec.c). */
static uint32_t chunk_with_logits(const dcp_engine *e, const eng_seq *q, uint32_t k)
{
    const bool last = k && q->fed + k == q->n_toks;
    return last && (e->logits_used == e->max_logits || (q->spec_strict && q->generated)) ? k - 1 : k;
}

/* The newest running sequence not in the step (NULL: none). */
static eng_seq *newest_unscheduled(dcp_engine *e)
{
    for (eng_seq *q = e->tail; q; q = q->prev)
        if (q->slot >= 0 && q->step_rows == 0) return q;
    return NULL;
}

static void preempt(dcp_engine *e, eng_seq *q)
{
    eng_release_slot(e, q);
    e->waiting++;
    e->stats.preemptions++;
}

static int32_t free_slot(const dcp_engine *e)
{
    for (uint32_t i = 0; i < e->max_seqs; i++)
        if (!e->slot_seq[i]) return (int32_t)i;
    return -1;
}

/* Choice 1 .. n-1 of a request while choice 0 has not yet had the whole prompt in KV once: it
 * waits, to be forked from choice 0 when its prompt's last row runs (fork_choices: nothing of the
 * prompt computed again). Choice 0 comes just before it in the list (consecutive ids) unless it
 * ended already. */
static bool waits_for_parent(const eng_seq *q)
{
    if (!q->parent) return false;
    for (const eng_seq *p = q->prev; p && p->id >= q->parent; p = p->prev)
        if (p->id == q->parent) return p->seen < p->n_prompt;
    return false;
}

/* Fills rows and sched; returns whether anything is scheduled. */
static bool schedule(dcp_engine *e)
{
    uint32_t budget = e->cfg.step_tokens;
    bool preempted = false;
    e->n_rows = e->n_sched = e->logits_used = 0;
    memset(e->need, 0, e->dcp * sizeof *e->need);
    uint32_t decoders = 0; /* decoding sequences not yet given their row */
    for (eng_seq *q = e->head; q; q = q->next) {
        q->step_rows = 0;
        decoders += q->slot >= 0 && q->n_toks - q->fed == 1;
    }
    /* 1. decode rows, each with the drafts that fit beside one row for every later decoding
     * sequence (speculation; strict ones left out of the last step first: spec.c) */
    for (int pass = 0; pass < 2; pass++)
        for (eng_seq *q = e->head; q && budget; q = q->next) {
            if (q->slot < 0 || q->step_rows || q->n_toks - q->fed != 1 || q->spec_wait != (pass == 0)) continue;
            decoders--;
            const uint32_t later = q->spec_wait ? 0 : decoders;
            const uint32_t left = budget < e->max_logits - e->logits_used ? budget : e->max_logits - e->logits_used;
            uint32_t d = e->spec_k ? eng_spec_propose(e, q, left > later ? left - 1 - later : 0) : 0;
            if (d == ENG_SPEC_DEFER) continue;
            uint32_t fit;
            while ((fit = fit_tokens(e, q->fed, 1 + d, 0)) < 1 + d) {
                if (fit >= 1 && !q->spec_strict) { /* drafts never preempt */
                    d = fit - 1;
                    break;
                }
                eng_seq *v = newest_unscheduled(e);
                preempt(e, v);
                preempted = true;
                if (v == q) break;
            }
            if (q->slot < 0) continue;
            add_rows(e, q, 1, d);
            budget -= 1 + d;
        }
    /* 2. running prefills */
    for (eng_seq *q = e->head; q && budget; q = q->next) {
        if (q->slot < 0 || q->step_rows || q->n_toks - q->fed <= 1) continue;
        const uint32_t want =
            plp_cap(e, q, chunk_with_logits(e, q, q->n_toks - q->fed < budget ? q->n_toks - q->fed : budget));
        if (want == 0) continue;
        uint32_t k;
        while ((k = fit_tokens(e, q->fed, want, 0)) == 0) {
            eng_seq *v = newest_unscheduled(e);
            if (v == q) break; /* nothing newer to make room: wait for pages */
            preempt(e, v);
            preempted = true;
        }
        if (k == 0) continue;
        add_rows(e, q, k, 0);
        budget -= k;
    }
    /* 3. admissions: future[r] = pages the running sequences will still take on rank r for the tokens
     * they already have, after this step */
    uint32_t *future = e->future;
    memset(future, 0, e->dcp * sizeof *future);
    for (eng_seq *q = e->head; q && budget && !preempted; q = q->next)
        if (q->slot >= 0 && q->fed + q->step_rows < q->n_toks) /* drafts may run past n_toks */
            for (uint32_t r = 0; r < e->dcp; r++)
                future[r] += dcp_model_state_shard_pages(e->s, q->n_toks, r) -
                             dcp_model_state_shard_pages(e->s, (uint64_t)q->fed + q->step_rows, r);
    for (eng_seq *q = e->head; q && budget && !preempted; q = q->next) {
        if (q->slot >= 0 || waits_for_parent(q)) continue;
        int32_t slot = free_slot(e);
        if (slot < 0) break;
        /* Prefix caching: the cached blocks of its tokens are attached, the rest prefilled. */
        /* A request still owing prompt logprobs takes none: it needs the logits of every row. */
        /* A strict speculative sequence being recomputed keeps its last token for a decode row
         * (chunk_with_logits), so its cached prefix must leave it one more row to prefill: looked
         * up and attached over its tokens less the last (else a hit of all but one would leave it
         * no row, and it would wait for ever). */
        const uint32_t n_look = q->spec_strict && q->generated ? q->n_toks - 1 : q->n_toks;
        uint32_t revived = 0;
        const uint32_t hit = plp_pending(q) ? 0 : dcp_model_state_prefix_lookup(e->s, q->toks, n_look, &revived);
        const uint32_t hit_blocks = hit / (dcp_model_state_get_config(e->s)->block_size * e->dcp);
        if (!admit_fits(e, q, future, e->running, hit_blocks, revived)) break;
        const uint32_t rest = q->n_toks - hit;
        q->fed = hit; /* chunk_with_logits counts from there */
        const uint32_t k = plp_cap(e, q, chunk_with_logits(e, q, rest < budget ? rest : budget));
        q->fed = 0;
        if (k == 0) break;
        uint32_t cached = 0;
        if (hit && eng_attach_slot(e, q, (uint32_t)slot, n_look, &cached) != DCP_OK) break;
        for (uint32_t r = 0; r < e->dcp; r++)
            future[r] += dcp_model_state_shard_pages(e->s, q->n_toks, r) -
                         dcp_model_state_shard_pages(e->s, (uint64_t)cached + k, r);
        if (e->cfg.enable_prefix_caching) {
            e->stats.prefix_queries += q->n_toks;
            e->stats.prefix_hits += cached;
        }
        if (!q->admitted) q->cached = cached;
        q->admitted = true;
        q->slot = slot;
        q->fed = cached;
        if (q->seen < cached) q->seen = cached;
        e->slot_seq[slot] = q;
        e->running++;
        e->waiting--;
        if (e->running > e->stats.running_peak) e->stats.running_peak = e->running;
        add_rows(e, q, k, 0);
        budget -= k;
    }
    return e->n_sched > 0;
}

/* q's next token from logits row k of the step (e->logits, or the device argmax e->next), accepted
 * and added to its text (which may end it and free it). */
static dcp_status take_token(dcp_engine *e, eng_seq *q, uint32_t k)
{
    const float *row = e->logits + (size_t)k * e->n_vocab;
    int32_t tok;
    if (q->logprobs && !q->spec_strict) { /* q->greedy is false with logprobs */
        tok = eng_sampler_sample_logprobs(q->smp, row, q->top_logprobs, &q->lp[0]);
    } else {
        tok = q->greedy ? e->next[k] : q->spec_strict ? eng_spec_sample(e, q, row) : dcp_sampler_sample(q->smp, row);
        /* before the token is accepted: the penalties it was drawn under */
        if (q->logprobs) eng_sampler_logprobs(q->smp, row, tok, q->top_logprobs, &q->lp[0]);
    }
    if (q->logprobs) q->lp_cur = &q->lp[0];
    dcp_sampler_accept(q->smp, &tok, 1, true);
    bool ended;
    return eng_text_token(e, q, tok, &ended);
}

/* Choice 0 q has just run its prompt's last row: each of its choices still waiting for it (never
 * admitted) that finds a free slot and the pages of its copies (keeping one page per running
 * sequence free on every rank, as an admission does) becomes a fork of q's slot
 * (dcp_model_state_fork_seq: q's full blocks shared, the last partial one copied on the device),
 * running with the whole prompt in KV and no prompt row computed. Returns them in kids, in order;
 * the others are admitted later as any request (with prefix caching the cached blocks, then a
 * prefill of the rest). */
static uint32_t fork_choices(dcp_engine *e, eng_seq *q, eng_seq **kids)
{
    uint32_t n = 0;
    for (eng_seq *c = q->next; c && c->parent == q->id; c = c->next) {
        if (c->slot >= 0 || c->admitted) continue;
        if (c->greedy && !q->greedy) break; /* its row has no argmax (cannot happen: one request's config) */
        if (!c->greedy && q->greedy) break; /* nor logits */
        const int32_t slot = free_slot(e);
        if (slot < 0) break;
        bool fits = true;
        for (uint32_t r = 0; r < e->dcp && fits; r++)
            fits = (uint64_t)dcp_model_state_fork_pages(e->s, (uint32_t)q->slot, r) + e->running <=
                   dcp_model_state_rank_pages_free(e->s, r);
        uint32_t shared = 0;
        if (!fits || eng_fork_slot(e, (uint32_t)q->slot, (uint32_t)slot, &shared) != DCP_OK) break;
        if (e->cfg.enable_prefix_caching) {
            e->stats.prefix_queries += c->n_toks;
            e->stats.prefix_hits += shared;
            c->cached = shared; /* the blocks taken from the cache, as an admission would report */
        }
        c->admitted = true;
        c->slot = slot;
        c->fed = c->seen = c->n_prompt;
        e->slot_seq[slot] = c;
        e->running++;
        e->waiting--;
        if (e->running > e->stats.running_peak) e->stats.running_peak = e->running;
        e->stats.forked_choices++;
        kids[n++] = c;
    }
    return n;
}

/* The step failed: every sequence in it ends with an error. */
static void fail_step(dcp_engine *e, dcp_status st)
{
    const char *msg = dcp_last_error();
    char copy[512];
    snprintf(copy, sizeof copy, "%s", msg);
    for (uint32_t i = 0; i < e->n_sched; i++)
        eng_finish(e, e->sched[i].seq, DCP_ENGINE_FINISH_ERROR, -1, NULL, 0, st, copy);
    e->n_sched = 0;
}

dcp_status dcp_engine_step(dcp_engine *e)
{
    if (!e->head) return DCP_OK;
    if (!schedule(e)) {
        /* Cannot happen (submit refuses what could never fit, and the oldest sequence always gets
         * room); rather than spin, end the oldest request with an explanation. */
        eng_finish(e, e->head, DCP_ENGINE_FINISH_ERROR, -1, NULL, 0, DCP_ERR_INTERNAL,
                   "engine: no row could be scheduled for the oldest request");
        return dcp_fail(DCP_ERR_INTERNAL, "engine: no row could be scheduled for the oldest request");
    }
    dcp_status st = e->draft ? eng_spec_draft(e) : DCP_OK;
    if (st != DCP_OK) {
        fail_step(e, st);
        return st;
    }
    layout_rows(e);
    st = eng_send_plan(e, false, e->rows, e->n_rows);
    if (st != DCP_OK) {
        fail_step(e, st);
        return st;
    }
    bool want_logits = false;
    for (uint32_t i = 0; i < e->n_sched; i++)
        want_logits |= ((e->sched[i].logits || e->sched[i].drafts) && !e->sched[i].seq->greedy) || e->sched[i].plp;
    const double t0 = now_s();
    st = dcp_model_state_step(e->s, e->rows, e->n_rows, want_logits ? e->logits : NULL, e->next);
    e->stats.last_step_seconds = now_s() - t0;
    if (st != DCP_OK) {
        fail_step(e, st);
        return st;
    }
    e->stats.steps++;
    e->stats.step_sequences += e->n_sched;
    e->stats.rows += e->n_rows;
    e->stats.last_rows = e->n_rows;
    if (e->n_rows == e->n_sched) { /* one row per sequence: a decode step */
        dcp_engine_stats *t = &e->stats;
        t->last_decode_dispatches = dcp_model_state_last_dispatches(e->s);
        t->last_decode_rank_dispatches = dcp_model_state_last_rank_dispatches(e->s);
        t->last_decode_host_waits = dcp_model_state_last_host_waits(e->s);
        t->decode_steps++;
        t->decode_dispatches += t->last_decode_dispatches;
        t->decode_rank_dispatches += t->last_decode_rank_dispatches;
        t->decode_host_waits += t->last_decode_host_waits;
    }
    /* Advance every scheduled sequence, then sample in row order (k-th logits row). Sampling may
     * end a sequence (and free it), so each entry is read before its token is added. */
    uint32_t k = 0;
    dcp_status first = DCP_OK;
    for (uint32_t i = 0; i < e->n_sched; i++) {
        eng_sched *x = &e->sched[i];
        eng_seq *q = x->seq;
        if (q->fed < q->seen) {
            uint32_t redo = q->seen - q->fed < x->rows ? q->seen - q->fed : x->rows;
            e->stats.recomputed_tokens += redo;
        }
        q->step_rows = 0;
        /* Prefix caching: its tokens before the step's drafts are final; full blocks get cached. */
        const dcp_status cs = eng_commit_slot(e, q, q->fed + x->rows);
        if (cs != DCP_OK && first == DCP_OK) first = cs;
        if (x->drafts) { /* speculation: the tokens kept, the rest rolled back (spec.c) */
            dcp_status vs = eng_spec_verify(e, x, k);
            k += 1 + x->drafts;
            if (vs != DCP_OK && first == DCP_OK) first = vs;
            continue;
        }
        if (plp_pending(q)) { /* prompt logprobs: position 0's, then those of the chunk's rows */
            dcp_status ps = q->plp_done == 0 ? eng_emit_prompt(e, q, NULL) : DCP_OK;
            for (uint32_t t = 0; t < x->plp && ps == DCP_OK; t++, k++)
                ps = eng_emit_prompt(e, q, e->logits + (size_t)k * e->n_vocab);
            if (ps != DCP_OK && first == DCP_OK) first = ps;
        }
        q->fed += x->rows;
        if (q->fed > q->seen) q->seen = q->fed;
        if (!x->logits) continue;
        if (q->max_tokens == 0) { /* prompt logprobs only: the prompt is done */
            k++;
            eng_finish(e, q, DCP_ENGINE_FINISH_LENGTH, -1, NULL, 0, DCP_OK, NULL);
            continue;
        }
        /* n choices: the waiting ones fork from choice 0 now that its prompt is in KV, before its
         * token (which may end it), and draw their first tokens from the same logits row */
        eng_seq *kids[DCP_ENGINE_MAX_CHOICES];
        const uint32_t n_kids = q->generated == 0 && q->fed == q->n_prompt ? fork_choices(e, q, kids) : 0;
        dcp_status ts = take_token(e, q, k);
        if (ts != DCP_OK && first == DCP_OK) first = ts;
        for (uint32_t c = 0; c < n_kids; c++)
            if ((ts = take_token(e, kids[c], k)) != DCP_OK && first == DCP_OK) first = ts;
        k++;
    }
    e->n_sched = 0;
    return first;
}
