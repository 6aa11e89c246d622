/* The engine's requests (submit, cancel), its event queue (poll) and its statistics; the step is
 * in schedule.c, the output text in text.c. See include/dcpvk/engine.h. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/splitmix.h"
#include "engine/engine_internal.h"

uint64_t dcp_engine_choice_seed(uint64_t seed, uint32_t i)
{
    if (i == 0) return seed;
    uint64_t state = seed + (uint64_t)(i - 1) * 0x9E3779B97F4A7C15ull;
    return dcp_splitmix64_next(&state);
}

const char *dcp_engine_finish_name(dcp_engine_finish f)
{
    switch (f) {
    case DCP_ENGINE_FINISH_STOP: return "stop";
    case DCP_ENGINE_FINISH_LENGTH: return "length";
    case DCP_ENGINE_FINISH_CANCELLED: return "cancelled";
    case DCP_ENGINE_FINISH_ERROR: return "error";
    default: return "";
    }
}

dcp_status dcp_engine_create(dcp_model_state *s, const dcp_tokenizer *tok, const dcp_engine_config *config,
                             dcp_engine **out)
{
    *out = NULL;
    const dcp_model_state_config *sc = dcp_model_state_get_config(s);
    const dcp_model *m = dcp_model_state_get_model(s);
    for (uint32_t q = 0; q < sc->max_seqs; q++)
        if (dcp_model_state_seq_length(s, q))
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: the run state holds sequence %u already (%u tokens); "
                                                      "an engine starts from an empty state", q,
                            dcp_model_state_seq_length(s, q));
    dcp_engine *e = calloc(1, sizeof *e);
    if (!e) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    e->s = s;
    e->tok = tok;
    e->cfg = *config;
    e->n_vocab = dcp_model_get_config(m)->n_vocab;
    e->n_ctx = dcp_model_state_n_ctx(s);
    e->max_seqs = sc->max_seqs;
    e->max_rows = sc->max_rows;
    e->dcp = dcp_model_dcp(m);
    e->kv_pages = dcp_model_state_pages_total(s);
    if (e->cfg.step_tokens == 0 || e->cfg.step_tokens > e->max_rows) e->cfg.step_tokens = e->max_rows;
    e->eos = dcp_tokenizer_eos(tok);
    e->next_id = 1;
    const uint32_t max_out = e->max_logits = dcp_model_state_max_logits(s);
    e->slot_seq = calloc(e->max_seqs, sizeof *e->slot_seq);
    e->ops = calloc(DCP_ENGINE_PLAN_MAX_OPS(e->max_seqs), sizeof *e->ops);
    e->rows = calloc(e->max_rows, sizeof *e->rows);
    e->sched = calloc(e->max_seqs, sizeof *e->sched);
    e->need = calloc(e->dcp, sizeof *e->need);
    e->future = calloc(e->dcp, sizeof *e->future);
    e->logits = malloc((size_t)max_out * e->n_vocab * sizeof *e->logits);
    e->next = calloc(max_out, sizeof *e->next);
    if (!e->slot_seq || !e->ops || !e->rows || !e->sched || !e->need || !e->future || !e->logits || !e->next) {
        dcp_engine_destroy(e);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    dcp_status st = dcp_model_state_set_prefix_caching(s, config->enable_prefix_caching);
    if (st == DCP_OK) st = eng_spec_create(e, config);
    if (st != DCP_OK) {
        dcp_engine_destroy(e);
        return st;
    }
    *out = e;
    return DCP_OK;
}

static void seq_free(eng_seq *q)
{
    if (!q) return;
    free(q->toks);
    free(q->stop_tokens);
    for (uint32_t i = 0; q->stop && i < q->n_stop; i++) free(q->stop[i]);
    free(q->stop);
    free(q->stop_len);
    dcp_sampler_destroy(q->smp);
    dcp_detokenizer_destroy(q->detok);
    dcp_detokenizer_destroy(q->pdetok);
    free(q->held);
    free(q->lp);
    free(q->piece);
    eng_spec_seq_free(q);
    free(q);
}

static void unlink_seq(dcp_engine *e, eng_seq *q)
{
    if (q->prev) q->prev->next = q->next;
    else e->head = q->next;
    if (q->next) q->next->prev = q->prev;
    else e->tail = q->prev;
    q->prev = q->next = NULL;
}

void dcp_engine_destroy(dcp_engine *e)
{
    if (!e) return;
    for (eng_seq *q = e->head, *n; q; q = n) {
        n = q->next;
        if (q->slot >= 0) {
            dcp_model_state_free_seq(e->s, (uint32_t)q->slot);
            eng_spec_release(e, q);
        }
        seq_free(q);
    }
    /* The cached blocks go with the engine: the state is left as it was given. */
    if (e->cfg.enable_prefix_caching) (void)dcp_model_state_set_prefix_caching(e->s, false);
    eng_drop_polled(e);
    for (size_t i = 0; i < e->ev_count; i++) {
        eng_event *x = &e->events[(e->ev_head + i) % e->ev_cap];
        free(x->text);
        free(x->message);
        free(x->piece);
        free(x->all);
    }
    free(e->events);
    free(e->slot_seq);
    free(e->ops);
    free(e->op_toks);
    free(e->rows);
    free(e->sched);
    free(e->need);
    free(e->future);
    free(e->logits);
    free(e->next);
    eng_spec_destroy(e);
    free(e);
}

dcp_engine_op *eng_log_op(dcp_engine *e, dcp_engine_op_kind kind, uint32_t slot, uint32_t n)
{
    if (!e->cfg.on_plan) return NULL;
    if (e->n_ops == DCP_ENGINE_PLAN_MAX_OPS(e->max_seqs)) {
        e->ops_overflow = true;
        return NULL;
    }
    dcp_engine_op *op = &e->ops[e->n_ops++];
    *op = (dcp_engine_op){.kind = (uint32_t)kind, .slot = slot, .n = n};
    return op;
}

dcp_status eng_send_plan(dcp_engine *e, bool draft, const dcp_model_row *rows, uint32_t n_rows)
{
    dcp_status st = DCP_OK;
    if (e->cfg.on_plan) {
        const dcp_engine_plan plan = {.n_ops = e->n_ops, .ops = e->ops, .n_tokens = e->n_op_toks,
                                      .tokens = e->op_toks, .n_rows = n_rows, .rows = rows, .draft = draft};
        st = e->ops_overflow ? dcp_fail(DCP_ERR_INTERNAL, "engine: more than %u changes to the slots in one step "
                                        "plan", DCP_ENGINE_PLAN_MAX_OPS(e->max_seqs))
                             : e->cfg.on_plan(e->cfg.plan_user, &plan);
    }
    e->n_ops = 0;
    e->n_op_toks = 0;
    e->ops_overflow = false;
    return st;
}

void eng_release_slot(dcp_engine *e, eng_seq *q)
{
    if (q->slot < 0) return;
    const uint32_t slot = (uint32_t)q->slot;
    dcp_model_state_free_seq(e->s, slot);
    eng_spec_release(e, q);
    eng_log_op(e, DCP_ENGINE_OP_FREE, slot, 0);
    e->slot_seq[slot] = NULL;
    q->slot = -1;
    q->fed = 0;
    e->running--;
}

/* Room for one more event in the queue. */
static dcp_status reserve_event(dcp_engine *e)
{
    if (e->ev_count == e->ev_cap) {
        size_t cap = e->ev_cap ? e->ev_cap * 2 : 64;
        eng_event *ne = malloc(cap * sizeof *ne);
        if (!ne) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        for (size_t i = 0; i < e->ev_count; i++) ne[i] = e->events[(e->ev_head + i) % e->ev_cap];
        free(e->events);
        e->events = ne;
        e->ev_cap = cap;
        e->ev_head = 0;
    }
    return DCP_OK;
}

dcp_status eng_emit_prompt(dcp_engine *e, eng_seq *q, const float *logits)
{
    const uint32_t pos = q->plp_done;
    const int32_t token = q->toks[pos];
    dcp_status st = reserve_event(e);
    const char *t1 = NULL, *t2 = NULL;
    size_t n1 = 0, n2 = 0;
    if (st == DCP_OK) st = dcp_detokenizer_push(q->pdetok, token, &t1, &n1);
    if (st != DCP_OK) return st;
    char *piece = malloc(n1 + 1);
    if (!piece) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    if (n1) memcpy(piece, t1, n1);
    if (pos + 1 == q->n_prompt) { /* the prompt's last: what the detokenizer still holds */
        st = dcp_detokenizer_flush(q->pdetok, &t2, &n2);
        char *p2 = st == DCP_OK ? realloc(piece, n1 + n2 + 1) : NULL;
        if (!p2) {
            free(piece);
            return st != DCP_OK ? st : dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        }
        piece = p2;
        if (n2) memcpy(piece + n1, t2, n2);
    }
    piece[n1 + n2] = 0;
    eng_event x = {0};
    x.piece = piece;
    if (!(x.text = calloc(1, 1))) {
        free(piece);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    x.ev = (dcp_engine_event){.kind = DCP_ENGINE_EVENT_PROMPT, .id = q->id, .user = q->user, .token = token,
                              .text = x.text, .len = 0, .message = "", .prompt_tokens = q->n_prompt,
                              .cached_tokens = q->cached, .position = pos, .piece = piece, .piece_len = n1 + n2};
    const bool all = q->plp_top == DCP_ENGINE_PROMPT_LOGPROBS_ALL;
    if (logits && all) { /* the whole vocabulary, ranked */
        x.all = malloc((size_t)e->n_vocab * (sizeof *x.ev.all_ids + sizeof *x.ev.all_logprobs));
        st = x.all ? eng_raw_logprobs_all(logits, e->n_vocab, x.all, (float *)((int32_t *)x.all + e->n_vocab))
                   : dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory (prompt logprobs of %u tokens)", e->n_vocab);
        if (st != DCP_OK) {
            free(x.all);
            free(x.text);
            free(piece);
            return st;
        }
        x.ev.n_all = e->n_vocab;
        x.ev.all_ids = x.all;
        x.ev.all_logprobs = (const float *)((const int32_t *)x.all + e->n_vocab);
    }
    if (logits) {
        eng_lp lp;
        eng_raw_logprobs(logits, e->n_vocab, token, all ? DCP_ENGINE_MAX_LOGPROBS : q->plp_top, &lp, &x.ev.rank);
        x.ev.has_logprob = true;
        x.ev.logprob = lp.logprob;
        x.ev.n_top = lp.n_top;
        memcpy(x.ev.top_ids, lp.ids, lp.n_top * sizeof *lp.ids);
        memcpy(x.ev.top_logprobs, lp.lps, lp.n_top * sizeof *lp.lps);
    }
    e->events[(e->ev_head + e->ev_count) % e->ev_cap] = x;
    e->ev_count++;
    q->plp_done++;
    return DCP_OK;
}

dcp_status eng_emit(dcp_engine *e, eng_seq *q, dcp_engine_event_kind kind, int32_t token, const char *text,
                    size_t len, dcp_engine_finish finish, dcp_status status, const char *message)
{
    dcp_status st = reserve_event(e);
    if (st != DCP_OK) return st;
    eng_event x = {0};
    const eng_lp *lp = kind == DCP_ENGINE_EVENT_TOKEN || token >= 0 ? q->lp_cur : NULL;
    x.text = malloc(len + 1);
    x.message = message ? strdup(message) : NULL;
    if (lp) x.piece = malloc(q->piece_len + 1);
    if (!x.text || (message && !x.message) || (lp && !x.piece)) {
        free(x.text);
        free(x.message);
        free(x.piece);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    if (len) memcpy(x.text, text, len);
    x.text[len] = 0;
    x.ev = (dcp_engine_event){.kind = kind,
                              .id = q->id,
                              .user = q->user,
                              .index = q->index,
                              .token = token,
                              .text = x.text,
                              .len = len,
                              .finish = finish,
                              .status = status,
                              .message = x.message ? x.message : "",
                              .prompt_tokens = q->n_prompt,
                              .completion_tokens = q->generated,
                              .cached_tokens = q->cached};
    if (lp) { /* the token's log-probabilities go with the event that carries it */
        if (q->piece_len) memcpy(x.piece, q->piece, q->piece_len);
        x.piece[q->piece_len] = 0;
        x.ev.has_logprob = true;
        x.ev.logprob = lp->logprob;
        x.ev.n_top = lp->n_top;
        memcpy(x.ev.top_ids, lp->ids, lp->n_top * sizeof *lp->ids);
        memcpy(x.ev.top_logprobs, lp->lps, lp->n_top * sizeof *lp->lps);
        x.ev.piece = x.piece;
        x.ev.piece_len = q->piece_len;
    }
    q->lp_cur = NULL;
    q->piece_len = 0;
    e->events[(e->ev_head + e->ev_count) % e->ev_cap] = x;
    e->ev_count++;
    return DCP_OK;
}

void eng_finish(dcp_engine *e, eng_seq *q, dcp_engine_finish why, int32_t token, const char *text, size_t len,
                dcp_status status, const char *message)
{
    if (q->slot >= 0) eng_release_slot(e, q);
    else e->waiting--;
    /* Out of host memory for the event itself: the request still ends (its client then never
     * hears of it, which only a machine out of memory can cause). */
    (void)eng_emit(e, q, DCP_ENGINE_EVENT_FINISHED, token, text, len, why, status, message);
    e->stats.finished[why]++;
    unlink_seq(e, q);
    seq_free(q);
}

/* Copies the request into a new sequence for choice `index` (not yet linked). */
static dcp_status seq_new(dcp_engine *e, const dcp_engine_request *r, uint32_t index, eng_seq **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    eng_seq *q = calloc(1, sizeof *q);
    if (!q) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    q->user = r->user;
    q->index = index;
    q->slot = -1;
    q->n_prompt = q->n_toks = r->n_prompt;
    q->max_tokens = r->max_tokens;
    q->ignore_eos = r->ignore_eos;
    q->toks = malloc(((size_t)r->n_prompt + r->max_tokens) * sizeof *q->toks);
    if (!q->toks) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    memcpy(q->toks, r->prompt, r->n_prompt * sizeof *q->toks);
    if (r->n_stop_tokens) {
        q->stop_tokens = malloc(r->n_stop_tokens * sizeof *q->stop_tokens);
        if (!q->stop_tokens) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        memcpy(q->stop_tokens, r->stop_tokens, r->n_stop_tokens * sizeof *q->stop_tokens);
        q->n_stop_tokens = r->n_stop_tokens;
    }
    if (r->n_stop) {
        q->stop = calloc(r->n_stop, sizeof *q->stop);
        q->stop_len = calloc(r->n_stop, sizeof *q->stop_len);
        if (!q->stop || !q->stop_len) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        q->n_stop = r->n_stop;
        for (uint32_t i = 0; i < r->n_stop; i++) {
            if (!(q->stop[i] = strdup(r->stop[i]))) {
                st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
                goto fail;
            }
            q->stop_len[i] = strlen(r->stop[i]);
            if (q->stop_len[i] > q->stop_max) q->stop_max = q->stop_len[i];
        }
    }
    q->include_stop = r->include_stop_str_in_output;
    { /* min_tokens masks the request's own ids, EOS (unless ignored) and the stop tokens */
        dcp_sampler_config sc = r->sampling;
        sc.seed = dcp_engine_choice_seed(r->sampling.seed, index);
        int32_t *ids = NULL;
        uint32_t n = 0;
        if (sc.min_tokens > 0) {
            ids = malloc(((size_t)sc.n_min_tokens_ids + r->n_stop_tokens + 1) * sizeof *ids);
            if (!ids) {
                st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
                goto fail;
            }
            for (uint32_t i = 0; i < sc.n_min_tokens_ids; i++) ids[n++] = sc.min_tokens_ids[i];
            if (!r->ignore_eos && e->eos >= 0 && (uint32_t)e->eos < e->n_vocab) ids[n++] = e->eos;
            for (uint32_t i = 0; i < r->n_stop_tokens; i++) ids[n++] = r->stop_tokens[i];
        }
        sc.min_tokens_ids = ids;
        sc.n_min_tokens_ids = n;
        int32_t *ends = NULL; /* JSON output: EOS (unless ignored) and the stop tokens end a complete value */
        uint32_t n_ends = 0;
        if (sc.json) {
            if (!(ends = malloc(((size_t)r->n_stop_tokens + 1) * sizeof *ends))) {
                free(ids);
                st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
                goto fail;
            }
            if (!r->ignore_eos && e->eos >= 0 && (uint32_t)e->eos < e->n_vocab) ends[n_ends++] = e->eos;
            for (uint32_t i = 0; i < r->n_stop_tokens; i++) ends[n_ends++] = r->stop_tokens[i];
        }
        sc.json_end_ids = ends;
        sc.n_json_end_ids = n_ends;
        st = dcp_sampler_create(&sc, e->n_vocab, &q->smp);
        free(ids);
        free(ends);
        if (st != DCP_OK) goto fail;
    }
    dcp_sampler_accept(q->smp, q->toks, q->n_prompt, false);
    q->logprobs = r->logprobs;
    q->top_logprobs = r->top_logprobs;
    if (q->logprobs && !(q->lp = malloc((1 + DCP_SPEC_MAX_TOKENS) * sizeof *q->lp))) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    /* logprobs need the logits row: such a request never takes the device argmax alone */
    q->greedy = dcp_sampler_is_greedy(q->smp) && !q->logprobs;
    q->plp = r->prompt_logprobs;
    q->plp_top = r->prompt_top_logprobs;
    /* the prompt's pieces as a text of their own: special tokens as the request shows them */
    if (q->plp && (st = dcp_detokenizer_create(e->tok, r->decode_flags & DCP_DECODE_SPECIAL, &q->pdetok)) != DCP_OK)
        goto fail;
    q->seed = dcp_engine_choice_seed(r->sampling.seed, index);
    DCP_TRY(dcp_detokenizer_create(e->tok, r->decode_flags, &q->detok));
    DCP_TRY(eng_spec_seq_init(e, q));
    *out = q;
    return DCP_OK;
fail:
    seq_free(q);
    return st;
}

dcp_status dcp_engine_submit(dcp_engine *e, const dcp_engine_request *r, uint64_t *id)
{
    *id = 0;
    const uint32_t n = r->n ? r->n : 1;
    if (n > DCP_ENGINE_MAX_CHOICES)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: n is %u choices, above the limit of %d", n,
                        DCP_ENGINE_MAX_CHOICES);
    if (!r->prompt || r->n_prompt == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: a request needs at least one prompt token");
    for (uint32_t i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || (uint32_t)r->prompt[i] >= e->n_vocab)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: prompt token %u is %d, outside the vocabulary of %u", i,
                            r->prompt[i], e->n_vocab);
    for (uint32_t i = 0; i < r->n_stop_tokens; i++)
        if (r->stop_tokens[i] < 0 || (uint32_t)r->stop_tokens[i] >= e->n_vocab)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: stop token %u is %d, outside the vocabulary of %u", i,
                            r->stop_tokens[i], e->n_vocab);
    if (r->top_logprobs > DCP_ENGINE_MAX_LOGPROBS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: top_logprobs %u exceeds %d", r->top_logprobs,
                        DCP_ENGINE_MAX_LOGPROBS);
    if (r->top_logprobs && !r->logprobs)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: top_logprobs %u without logprobs", r->top_logprobs);
    if (r->prompt_top_logprobs > DCP_ENGINE_MAX_LOGPROBS && r->prompt_top_logprobs != DCP_ENGINE_PROMPT_LOGPROBS_ALL)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "engine: prompt_top_logprobs %u exceeds %d (DCP_ENGINE_PROMPT_LOGPROBS_ALL: the whole vocabulary)",
                        r->prompt_top_logprobs, DCP_ENGINE_MAX_LOGPROBS);
    if (r->prompt_top_logprobs && !r->prompt_logprobs)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: prompt_top_logprobs %u without prompt_logprobs",
                        r->prompt_top_logprobs);
    if (n > 1 && r->prompt_logprobs)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: prompt_logprobs with n %u choices (one choice only)", n);
    if (r->sampling.min_tokens > r->max_tokens)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: min_tokens %u exceeds max_tokens %u", r->sampling.min_tokens,
                        r->max_tokens);
    for (uint32_t i = 0; i < r->n_stop; i++)
        if (!r->stop[i] || !r->stop[i][0])
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: stop string %u is empty", i);
    const uint64_t total = (uint64_t)r->n_prompt + r->max_tokens;
    if (total > e->n_ctx)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "engine: %u prompt tokens + %u max tokens = %llu exceed the context of %u tokens", r->n_prompt,
                        r->max_tokens, (unsigned long long)total, e->n_ctx);
    for (uint32_t k = 0; k < e->dcp; k++) {
        uint32_t pages = dcp_model_state_shard_pages(e->s, total, k);
        if (pages > e->kv_pages)
            return dcp_fail(DCP_ERR_OUT_OF_PAGES,
                            "engine: %llu tokens (prompt %u + max tokens %u) need %u KV pages on DCP rank %u; its pool "
                            "has %u in all, so the request can never run",
                            (unsigned long long)total, r->n_prompt, r->max_tokens, pages, k, e->kv_pages);
    }
    eng_seq *qs[DCP_ENGINE_MAX_CHOICES] = {0};
    for (uint32_t i = 0; i < n; i++) {
        dcp_status st = seq_new(e, r, i, &qs[i]);
        if (st != DCP_OK) {
            while (i-- > 0) seq_free(qs[i]);
            return st;
        }
    }
    *id = e->next_id;
    for (uint32_t i = 0; i < n; i++) {
        eng_seq *q = qs[i];
        q->id = e->next_id++;
        q->parent = i ? *id : 0;
        q->prev = e->tail;
        if (e->tail) e->tail->next = q;
        else e->head = q;
        e->tail = q;
        e->waiting++;
    }
    e->stats.prompt_tokens += r->n_prompt; /* once: the choices share it */
    if (r->max_tokens == 0 && !r->prompt_logprobs)
        for (uint32_t i = 0; i < n; i++) eng_finish(e, qs[i], DCP_ENGINE_FINISH_LENGTH, -1, NULL, 0, DCP_OK, NULL);
    return DCP_OK;
}

static eng_seq *find(const dcp_engine *e, uint64_t id)
{
    for (eng_seq *q = e->head; q; q = q->next)
        if (q->id == id) return q;
    return NULL;
}

dcp_status dcp_engine_cancel(dcp_engine *e, uint64_t id)
{
    eng_seq *q = find(e, id);
    if (!q)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "engine: request %llu is neither queued nor running",
                        (unsigned long long)id);
    eng_finish(e, q, DCP_ENGINE_FINISH_CANCELLED, -1, NULL, 0, DCP_OK, NULL);
    return DCP_OK;
}

bool dcp_engine_busy(const dcp_engine *e) { return e->head != NULL; }

void eng_drop_polled(dcp_engine *e)
{
    free(e->polled.text);
    free(e->polled.message);
    free(e->polled.piece);
    free(e->polled.all);
    e->polled.text = e->polled.message = e->polled.piece = NULL;
    e->polled.all = NULL;
}

bool dcp_engine_poll(dcp_engine *e, dcp_engine_event *ev)
{
    eng_drop_polled(e);
    if (e->ev_count == 0) return false;
    e->polled = e->events[e->ev_head];
    e->ev_head = (e->ev_head + 1) % e->ev_cap;
    e->ev_count--;
    *ev = e->polled.ev;
    return true;
}

void dcp_engine_get_stats(const dcp_engine *e, dcp_engine_stats *out)
{
    *out = e->stats;
    out->running = e->running;
    out->waiting = e->waiting;
    dcp_prefix_cache_stats ps;
    dcp_model_state_prefix_stats(e->s, &ps);
    out->prefix_blocks = ps.blocks;
    out->prefix_blocks_unreferenced = ps.blocks_unreferenced;
    out->prefix_evictions = ps.evictions;
    out->offload_host_blocks = ps.host_blocks;
    out->offload_host_capacity = ps.host_capacity;
    out->offload_host_evictions = ps.host_evictions;
    out->offload_to_host_blocks = ps.offloaded_blocks;
    out->offload_to_host_bytes = ps.offloaded_bytes;
    out->offload_to_device_blocks = ps.restored_blocks;
    out->offload_to_device_bytes = ps.restored_bytes;
}

int32_t dcp_engine_request_slot(const dcp_engine *e, uint64_t id)
{
    const eng_seq *q = find(e, id);
    return q ? q->slot : -1;
}

dcp_model_state *dcp_engine_state(dcp_engine *e) { return e->s; }

dcp_status eng_truncate_slot(dcp_engine *e, eng_seq *q, uint32_t length)
{
    const uint32_t slot = (uint32_t)q->slot;
    dcp_status st = dcp_model_state_truncate_seq(e->s, slot, length);
    if (st == DCP_OK) eng_log_op(e, DCP_ENGINE_OP_TRUNCATE, slot, length);
    return st;
}

dcp_status eng_attach_slot(dcp_engine *e, eng_seq *q, uint32_t slot, uint32_t n, uint32_t *cached)
{
    const dcp_status st = dcp_model_state_prefix_attach(e->s, slot, q->toks, n, cached);
    if (st != DCP_OK || !e->cfg.on_plan) return st;
    /* The followers need the cached blocks' tokens and one more (an attach takes at most n - 1). */
    const uint32_t len = *cached < n ? *cached + 1 : n;
    if (e->n_op_toks + len > e->cap_op_toks) {
        uint32_t cap = e->cap_op_toks ? e->cap_op_toks : 1024;
        while (cap < e->n_op_toks + len) cap *= 2;
        int32_t *t = realloc(e->op_toks, (size_t)cap * sizeof *t);
        if (!t) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory for the step plan's tokens");
        e->op_toks = t;
        e->cap_op_toks = cap;
    }
    dcp_engine_op *op = eng_log_op(e, DCP_ENGINE_OP_ATTACH, slot, *cached);
    if (op) {
        op->first = e->n_op_toks;
        op->len = len;
        memcpy(e->op_toks + e->n_op_toks, q->toks, (size_t)len * sizeof *q->toks);
        e->n_op_toks += len;
    }
    return DCP_OK;
}

dcp_status eng_fork_slot(dcp_engine *e, uint32_t parent, uint32_t child, uint32_t *shared)
{
    const dcp_status st = dcp_model_state_fork_seq(e->s, parent, child, shared);
    dcp_engine_op *op = st == DCP_OK ? eng_log_op(e, DCP_ENGINE_OP_FORK, child, parent) : NULL;
    if (op) op->len = *shared;
    return st;
}

dcp_status eng_commit_slot(dcp_engine *e, eng_seq *q, uint32_t n)
{
    const uint32_t slot = (uint32_t)q->slot;
    const dcp_status st = dcp_model_state_prefix_commit(e->s, slot, n);
    if (st == DCP_OK && e->cfg.enable_prefix_caching) eng_log_op(e, DCP_ENGINE_OP_COMMIT, slot, n);
    return st;
}

dcp_status dcp_engine_plan_apply(dcp_model_state *s, dcp_model_state *draft, const dcp_engine_plan *plan)
{
    if (plan->draft && !draft)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "step plan: a draft model's step, and this process has no draft "
                                                  "model state");
    for (uint32_t i = 0; i < plan->n_ops; i++) {
        const dcp_engine_op *op = &plan->ops[i];
        dcp_status st = DCP_OK;
        uint32_t got = 0;
        switch (op->kind) {
        case DCP_ENGINE_OP_TRUNCATE:
            st = dcp_model_state_truncate_seq(s, op->slot, op->n);
            break;
        case DCP_ENGINE_OP_FREE:
            dcp_model_state_free_seq(s, op->slot);
            break;
        case DCP_ENGINE_OP_ATTACH:
            if (op->first > plan->n_tokens || op->len > plan->n_tokens - op->first) {
                st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "tokens [%u, +%u) beyond the plan's %u", op->first,
                              op->len, plan->n_tokens);
                break;
            }
            st = dcp_model_state_prefix_attach(s, op->slot, plan->tokens + op->first, op->len, &got);
            if (st == DCP_OK && got != op->n)
                st = dcp_fail(DCP_ERR_INTERNAL, "%u cached tokens here, %u on the leader: the prefix caches "
                              "diverged", got, op->n);
            break;
        case DCP_ENGINE_OP_COMMIT:
            st = dcp_model_state_prefix_commit(s, op->slot, op->n);
            break;
        case DCP_ENGINE_OP_DRAFT_TRUNCATE:
        case DCP_ENGINE_OP_DRAFT_FREE:
            if (!draft)
                st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "a draft model's slot change, and this process has no draft "
                              "model state");
            else if (op->kind == DCP_ENGINE_OP_DRAFT_FREE)
                dcp_model_state_free_seq(draft, op->slot);
            else
                st = dcp_model_state_truncate_seq(draft, op->slot, op->n);
            break;
        case DCP_ENGINE_OP_FORK:
            st = dcp_model_state_fork_seq(s, op->n, op->slot, &got);
            if (st == DCP_OK && got != op->len)
                st = dcp_fail(DCP_ERR_INTERNAL, "fork of slot %u: %u shared tokens here, %u on the leader", op->n,
                              got, op->len);
            break;
        default:
            st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "unknown kind %u", op->kind);
        }
        if (st != DCP_OK) return dcp_fail_context(st, "step plan: op %u of %u (slot %u)", i, plan->n_ops, op->slot);
    }
    if (plan->n_rows == 0) return DCP_OK;
    return dcp_model_state_step(plan->draft ? draft : s, plan->rows, plan->n_rows, NULL, NULL);
}
