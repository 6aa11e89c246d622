/* The engine thread of dcp-vk-serve and what it shares with the connection threads: requests handed
 * over (submitted to the engine here), cancellations (a client gone, or the shutdown's deadline),
 * each request's output as the engine's events bring it, and the metrics. The engine itself is
 * touched by this thread only; the hub's mutex guards the rest, and is not held while a step runs. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/serve.h"

const double serve_step_bounds[SERVE_STEP_BUCKETS] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                      0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};

/* vLLM's bucket bounds (seconds; vllm/v1/metrics/loggers.py), so that its dashboards' quantiles
 * read the same here. */
static const double ttft_bounds[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,   0.25,  0.5,   0.75,
                                     1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double token_bounds[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double request_bounds[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                        30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
#define NB(a) (uint32_t)(sizeof(a) / sizeof(a)[0])

static void hist_init(serve_hist *hg, const double *bounds, uint32_t n)
{
    hg->bounds = bounds;
    hg->n_bounds = n;
}

static void hist_observe(serve_hist *hg, double v)
{
    if (v < 0) v = 0; /* a monotonic clock never goes back; guards the arithmetic */
    uint32_t k = 0;
    while (k < hg->n_bounds && v > hg->bounds[k]) k++;
    hg->counts[k]++;
    hg->sum += v;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int serve_hub_init(serve_hub *h, const serve_options *o, const dcp_tokenizer *tok, uint32_t n_ctx, uint32_t tp,
                   uint32_t dcp, uint32_t kv_pages, uint32_t max_seqs)
{
    memset(h, 0, sizeof *h);
    h->o = o;
    h->tok = tok;
    h->n_ctx = n_ctx;
    h->tp = tp;
    h->dcp = dcp;
    h->kv_pages = kv_pages;
    h->max_seqs = max_seqs;
    h->max_prompt = o->max_prompt && o->max_prompt < n_ctx ? o->max_prompt : n_ctx;
    h->max_tokens_limit = o->max_tokens_limit && o->max_tokens_limit < n_ctx ? o->max_tokens_limit : n_ctx;
    h->chat_eot = -1;
    h->next_id = 1;
    if (tok && dcp_json_vocab_create(tok, &h->json_vocab) != DCP_OK) return -1;
    h->m.pages_free = calloc(dcp, sizeof *h->m.pages_free);
    if (!h->m.pages_free) return -1;
    for (uint32_t r = 0; r < dcp; r++) h->m.pages_free[r] = kv_pages;
    serve_hist *v = h->m.vllm;
    hist_init(&v[SERVE_H_TTFT], ttft_bounds, NB(ttft_bounds));
    hist_init(&v[SERVE_H_ITL], token_bounds, NB(token_bounds));
    hist_init(&v[SERVE_H_TPOT], token_bounds, NB(token_bounds));
    for (int k = SERVE_H_E2E; k <= SERVE_H_DECODE; k++) hist_init(&v[k], request_bounds, NB(request_bounds));
    uint32_t nb = 0; /* vLLM's build_1_2_5_buckets(max_model_len) */
    for (double p10 = 1; nb < SERVE_HIST_MAX_BUCKETS; p10 *= 10) {
        static const double mant[3] = {1, 2, 5};
        int k = 0;
        for (; k < 3 && nb < SERVE_HIST_MAX_BUCKETS && mant[k] * p10 <= (double)(n_ctx ? n_ctx : 1); k++)
            h->m.count_bounds[nb++] = mant[k] * p10;
        if (k < 3) break;
    }
    for (int k = SERVE_H_PROMPT_TOKENS; k <= SERVE_H_MAX_GEN_TOKENS; k++) hist_init(&v[k], h->m.count_bounds, nb);
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->wake, NULL);
    return 0;
}

void serve_hub_free(serve_hub *h)
{
    free(h->incoming);
    free(h->active);
    free(h->m.pages_free);
    dcp_json_vocab_destroy(h->json_vocab);
    pthread_mutex_destroy(&h->mu);
    pthread_cond_destroy(&h->wake);
}

serve_req *serve_req_new(void)
{
    serve_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->refs = 1;
    return r;
}

void serve_req_unref(serve_req *r)
{
    if (!r || --r->refs > 0) return;
    free(r->prompt);
    for (uint32_t i = 0; r->stops && i < r->er.n_stop; i++) free(r->stops[i]);
    free(r->stops);
    free(r->stop_tokens);
    free(r->bias);
    dcp_json_schema_destroy(r->json);
    free(r->text);
    for (size_t i = 0; i < r->n_lps; i++) free(r->lps[i].piece);
    free(r->lps);
    for (size_t i = 0; i < r->n_plps; i++) {
        free(r->plps[i].piece);
        free(r->plps[i].all_ids);
    }
    free(r->plps);
    free(r->echo_text);
    for (uint32_t i = 0; i + 1 < r->n_choices; i++) serve_req_unref(r->choice[i]);
    free(r);
}

static int push(serve_req ***arr, size_t *n, size_t *cap, serve_req *r)
{
    if (*n == *cap) {
        size_t c = *cap ? *cap * 2 : 32;
        serve_req **a = realloc(*arr, c * sizeof *a);
        if (!a) return -1;
        *arr = a;
        *cap = c;
    }
    (*arr)[(*n)++] = r;
    return 0;
}

int serve_hub_submit(serve_hub *h, serve_req *r)
{
    pthread_mutex_lock(&h->mu);
    int rc = 0;
    if (h->stopping) rc = 503;
    else if (h->in_flight >= h->max_seqs + h->o->max_queued) rc = 429;
    else if (push(&h->incoming, &h->n_incoming, &h->cap_incoming, r)) rc = 503;
    if (rc == 0) {
        r->t_arrival = now_s();
        r->refs++;
        h->in_flight++;
        pthread_cond_signal(&h->wake);
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* ---- the engine side (hub mutex held) ------------------------------------------------------- */

static void changed(serve_hub *h, serve_req *r)
{
    if (h->on_change) h->on_change(h->on_change_user, r);
}

static void take_incoming(serve_hub *h, dcp_engine *e)
{
    for (size_t i = 0; i < h->n_incoming; i++) {
        serve_req *r = h->incoming[i];
        uint64_t id;
        dcp_status st = r->cancel ? DCP_ERR_INVALID_ARGUMENT : dcp_engine_submit(e, &r->er, &id);
        if (st == DCP_OK && push(&h->active, &h->n_active, &h->cap_active, r) == 0) {
            r->t_queued = now_s();
            r->state = SREQ_RUNNING;
            r->engine_id = id;
            changed(h, r);
        } else {
            if (st == DCP_OK) { /* no room to track it: take it back (every choice) */
                for (uint32_t c = 0; c < (r->er.n ? r->er.n : 1); c++) dcp_engine_cancel(e, id + c);
                st = DCP_ERR_OUT_OF_MEMORY;
            }
            r->state = SREQ_REFUSED;
            r->status = st;
            snprintf(r->message, sizeof r->message, "%s", r->cancel ? "cancelled" : dcp_last_error());
            h->in_flight--;
            changed(h, r);
            serve_req_unref(r);
        }
    }
    h->n_incoming = 0;
}

static void take_cancels(serve_hub *h, dcp_engine *e, bool all)
{
    for (size_t i = 0; i < h->n_active; i++) {
        serve_req *r = h->active[i];
        if (r->state == SREQ_RUNNING && (r->cancel || all)) {
            for (uint32_t c = 0; c < (r->n_choices ? r->n_choices : 1); c++)
                if (!serve_choice(r, c)->choice_done) dcp_engine_cancel(e, r->engine_id + c);
            r->cancel = true;
        }
    }
}

static void append_text(serve_req *r, const char *t, size_t n)
{
    if (!n) return;
    if (r->text_len + n + 1 > r->text_cap) {
        size_t cap = r->text_cap ? r->text_cap : 256;
        while (cap < r->text_len + n + 1) cap *= 2;
        char *p = realloc(r->text, cap);
        if (!p) {
            r->oom = true;
            return;
        }
        r->text = p;
        r->text_cap = cap;
    }
    memcpy(r->text + r->text_len, t, n);
    r->text_len += n;
    r->text[r->text_len] = 0;
}

/* The logprobs an event carries, as r's next entry (of its prompt's for a PROMPT event). */
static void append_lp(serve_req *r, const dcp_engine_event *ev)
{
    const bool prompt = ev->kind == DCP_ENGINE_EVENT_PROMPT;
    if (!ev->has_logprob && !prompt) return;
    serve_lp **arr = prompt ? &r->plps : &r->lps;
    size_t *n = prompt ? &r->n_plps : &r->n_lps, *capp = prompt ? &r->plps_cap : &r->lps_cap;
    if (*n == *capp) {
        size_t cap = *capp ? *capp * 2 : 16;
        serve_lp *p = realloc(*arr, cap * sizeof *p);
        if (!p) {
            r->oom = true;
            return;
        }
        *arr = p;
        *capp = cap;
    }
    serve_lp *x = &(*arr)[*n];
    if (!(x->piece = malloc(ev->piece_len + 1))) {
        r->oom = true;
        return;
    }
    if (ev->piece_len) memcpy(x->piece, ev->piece, ev->piece_len);
    x->piece[ev->piece_len] = 0;
    x->piece_len = ev->piece_len;
    x->offset = 0; /* characters (code points) of the pieces before, as vLLM counts them */
    if (*n) {
        const serve_lp *y = &(*arr)[*n - 1];
        x->offset = y->offset;
        for (size_t i = 0; i < y->piece_len; i++) x->offset += ((unsigned char)y->piece[i] & 0xC0) != 0x80;
    }
    x->token = ev->token;
    x->has_lp = ev->has_logprob;
    x->rank = ev->rank;
    x->logprob = ev->logprob;
    x->n_top = ev->n_top;
    memcpy(x->top_ids, ev->top_ids, ev->n_top * sizeof *ev->top_ids);
    memcpy(x->top_lps, ev->top_logprobs, ev->n_top * sizeof *ev->top_logprobs);
    x->n_all = 0;
    x->all_ids = NULL;
    x->all_lps = NULL;
    if (ev->n_all) { /* one block: ids, then logprobs */
        if (!(x->all_ids = malloc((size_t)ev->n_all * (sizeof *x->all_ids + sizeof *x->all_lps)))) {
            free(x->piece);
            r->oom = true;
            return;
        }
        x->all_lps = (float *)(x->all_ids + ev->n_all);
        memcpy(x->all_ids, ev->all_ids, ev->n_all * sizeof *ev->all_ids);
        memcpy(x->all_lps, ev->all_logprobs, ev->n_all * sizeof *ev->all_logprobs);
        x->n_all = ev->n_all;
    }
    (*n)++;
}

/* Request r's new tokens, seen at t (one time for every request of a step: vLLM's iteration
 * timestamp): its TTFT at the first, else one ITL observation for the step. */
static void note_tokens(serve_hub *h, serve_req *r, uint32_t tokens, double t)
{
    if (tokens <= r->tokens_seen) return;
    if (r->tokens_seen == 0) {
        r->t_first = t;
        hist_observe(&h->m.vllm[SERVE_H_TTFT], t - r->t_arrival);
    } else if (t > r->t_last) {
        hist_observe(&h->m.vllm[SERVE_H_ITL], t - r->t_last);
    }
    r->t_last = t;
    r->tokens_seen = tokens;
}

/* Request r ended at t: its request histograms (the phases it went through) and its reason. */
static void note_finish(serve_hub *h, serve_req *r, dcp_engine_finish f, double t)
{
    serve_hist *v = h->m.vllm;
    if ((unsigned)f <= DCP_ENGINE_FINISH_ERROR) h->m.finished[f]++;
    hist_observe(&v[SERVE_H_E2E], t - r->t_arrival);
    hist_observe(&v[SERVE_H_PROMPT_TOKENS], r->n_prompt);
    hist_observe(&v[SERVE_H_GEN_TOKENS], r->tokens_seen);
    hist_observe(&v[SERVE_H_MAX_GEN_TOKENS], r->tokens_seen);
    if (r->tokens_seen == 0) return; /* never got a token: no phases to time */
    hist_observe(&v[SERVE_H_QUEUE], r->t_scheduled - r->t_queued);
    hist_observe(&v[SERVE_H_PREFILL], r->t_first - r->t_scheduled);
    hist_observe(&v[SERVE_H_DECODE], r->t_last - r->t_first);
    hist_observe(&v[SERVE_H_INFERENCE], r->t_last - r->t_scheduled);
    if (r->tokens_seen >= 2) hist_observe(&v[SERVE_H_TPOT], (r->t_last - r->t_first) / (r->tokens_seen - 1));
}

/* Routes the engine's events to their requests; t: now, and t_step: the start of the step that
 * made them (0: no step ran), the first scheduling of a request that shows up in them. */
static void route_events(serve_hub *h, dcp_engine *e, double t, double t_step)
{
    if (t_step > 0)
        for (size_t i = 0; i < h->n_active; i++) {
            serve_req *r = h->active[i];
            if (r->t_scheduled == 0 && dcp_engine_request_slot(e, r->engine_id) >= 0) r->t_scheduled = t_step;
        }
    dcp_engine_event ev;
    while (dcp_engine_poll(e, &ev)) {
        serve_req *r = ev.user;
        serve_req *c = ev.index < (r->n_choices ? r->n_choices : 1) ? serve_choice(r, ev.index) : r;
        if (r->t_scheduled == 0 && ev.completion_tokens > 0) r->t_scheduled = t_step > 0 ? t_step : t;
        if (ev.index == 0) note_tokens(h, r, ev.completion_tokens, t); /* timed on choice 0 */
        append_text(c, ev.text, ev.len);
        if (c->oom) r->oom = true;
        append_lp(c, &ev);
        c->completion_tokens = ev.completion_tokens;
        r->cached_tokens = ev.index == 0 ? ev.cached_tokens : r->cached_tokens;
        if (ev.kind == DCP_ENGINE_EVENT_FINISHED) {
            c->choice_done = true;
            c->finish = ev.finish;
            if (ev.finish == DCP_ENGINE_FINISH_ERROR) {
                r->status = ev.status;
                if (ev.message && ev.message[0]) snprintf(r->message, sizeof r->message, "%s", ev.message);
            }
            bool all = true;
            for (uint32_t i = 0; i < (r->n_choices ? r->n_choices : 1); i++) all &= serve_choice(r, i)->choice_done;
            if (!all) {
                changed(h, r);
                continue;
            }
            bool err = false;
            for (uint32_t i = 0; i < (r->n_choices ? r->n_choices : 1); i++)
                err |= serve_choice(r, i)->finish == DCP_ENGINE_FINISH_ERROR;
            if (err) r->finish = DCP_ENGINE_FINISH_ERROR;
            note_finish(h, r, r->finish, t);
            r->state = SREQ_DONE;
            for (size_t i = 0; i < h->n_active; i++)
                if (h->active[i] == r) {
                    h->active[i] = h->active[--h->n_active];
                    break;
                }
            h->in_flight--;
            changed(h, r);
            serve_req_unref(r);
        } else {
            changed(h, r);
        }
    }
}

static void snapshot(serve_hub *h, dcp_engine *e)
{
    dcp_engine_get_stats(e, &h->m.engine);
    dcp_model_state *s = dcp_engine_state(e);
    for (uint32_t r = 0; r < h->dcp; r++) h->m.pages_free[r] = dcp_model_state_rank_pages_free(s, r);
}

int serve_hub_run(serve_hub *h, dcp_engine *e, volatile int *stop_flag, void (*on_stopping)(void *), void *user)
{
    double deadline = 0.0;
    bool cancelled_all = false;
    int rc = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        if (*stop_flag && !h->stopping) {
            h->stopping = true;
            deadline = now_s() + h->o->shutdown_timeout;
            pthread_mutex_unlock(&h->mu);
            if (on_stopping) on_stopping(user);
            pthread_mutex_lock(&h->mu);
        }
        take_incoming(h, e);
        const bool late = h->stopping && now_s() >= deadline;
        take_cancels(h, e, late && !cancelled_all);
        cancelled_all |= late;
        route_events(h, e, now_s(), 0.0);
        snapshot(h, e);
        if (!dcp_engine_busy(e)) {
            if (h->stopping && h->n_incoming == 0 && h->n_active == 0 &&
                (h->open_responses == 0 || now_s() >= deadline + 10.0))
                break;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 50 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (h->n_incoming == 0) pthread_cond_timedwait(&h->wake, &h->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&h->mu);
        const double t_step = now_s();
        dcp_status st = dcp_engine_step(e);
        pthread_mutex_lock(&h->mu);
        if (st != DCP_OK) {
            fprintf(stderr, "dcp-vk-serve: a step failed: %s: %s\n", dcp_status_string(st), dcp_last_error());
            if (st == DCP_ERR_MPI || h->lockstep) { /* the processes are out of step: end */
                rc = 1;
                route_events(h, e, now_s(), t_step);
                break;
            }
        }
        dcp_engine_stats es;
        dcp_engine_get_stats(e, &es);
        if (st == DCP_OK && es.steps != h->m.engine.steps) {
            const double t = es.last_step_seconds;
            uint32_t b = 0;
            while (b < SERVE_STEP_BUCKETS && t > serve_step_bounds[b]) b++;
            h->m.step_hist[b]++;
            h->m.step_sum += t;
        }
        route_events(h, e, now_s(), t_step);
        snapshot(h, e);
    }
    pthread_mutex_unlock(&h->mu);
    return rc;
}

/* ---- metrics -------------------------------------------------------------------------------- */

typedef struct tbuf {
    char *p;
    size_t len, cap;
    bool failed;
} tbuf;

static void tprintf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void tprintf(tbuf *b, const char *fmt, ...)
{
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n + 64;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

/* A bucket bound as Python writes a float (vLLM's le="1.0", le="0.005"). */
static void bound_text(char *out, size_t n, double v)
{
    snprintf(out, n, "%.15g", v);
    if (!strpbrk(out, ".e")) snprintf(out + strlen(out), n - strlen(out), ".0");
}

static void vllm_hist(tbuf *b, const char *labels, const char *name, const char *help, const serve_hist *hg)
{
    tprintf(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    char le[32];
    for (uint32_t k = 0; k < hg->n_bounds; k++) {
        cum += hg->counts[k];
        bound_text(le, sizeof le, hg->bounds[k]);
        tprintf(b, "%s_bucket{%s,le=\"%s\"} %llu\n", name, labels, le, (unsigned long long)cum);
    }
    cum += hg->counts[hg->n_bounds];
    tprintf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, labels, (unsigned long long)cum);
    tprintf(b, "%s_sum{%s} %.9g\n%s_count{%s} %llu\n", name, labels, hg->sum, name, labels, (unsigned long long)cum);
}

/* vLLM's metrics (its names, types, labels model_name and engine, and bucket bounds; vllm/v1/metrics/
 * loggers.py), so that dashboards made for vLLM read this server. */
static void vllm_metrics(tbuf *b, const serve_hub *h)
{
    const serve_metrics *m = &h->m;
    const dcp_engine_stats *s = &m->engine;
    /* label value: \ " and newline escaped (the text format's rule) */
    char name[256], labels[300];
    size_t n = 0;
    for (const char *p = h->model_name ? h->model_name : ""; *p && n + 3 < sizeof name; p++) {
        if (*p == '\\' || *p == '"') name[n++] = '\\';
        if (*p == '\n') {
            name[n++] = '\\';
            name[n++] = 'n';
            continue;
        }
        name[n++] = *p;
    }
    name[n] = 0;
    snprintf(labels, sizeof labels, "model_name=\"%s\",engine=\"0\"", name);
    uint64_t used = 0;
    for (uint32_t r = 0; r < h->dcp; r++) used += h->kv_pages - m->pages_free[r];
    const double usage = h->kv_pages ? (double)used / ((double)h->kv_pages * h->dcp) : 0.0;
#define VGAUGE(nm, help, fmt, v) \
    tprintf(b, "# HELP " nm " " help "\n# TYPE " nm " gauge\n" nm "{%s} " fmt "\n", labels, v)
#define VCOUNTER(nm, help, v)                                                                              \
    tprintf(b, "# HELP " nm " " help "\n# TYPE " nm " counter\n" nm "{%s} %llu\n", labels,                 \
            (unsigned long long)(v))
    VGAUGE("vllm:num_requests_running", "Number of requests in model execution batches.", "%u", s->running);
    VGAUGE("vllm:num_requests_waiting", "Number of requests waiting to be processed.", "%u",
           s->waiting + (uint32_t)h->n_incoming);
    VGAUGE("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage (mean over the DCP ranks' pools).",
           "%.6f", usage);
    VCOUNTER("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", s->preemptions);
    VCOUNTER("vllm:prompt_tokens_total", "Number of prefill tokens processed.", s->prompt_tokens);
    VCOUNTER("vllm:generation_tokens_total", "Number of generation tokens processed.", s->generated_tokens);
    VCOUNTER("vllm:prefix_cache_queries_total",
             "Prefix cache queries, in terms of number of queried tokens.", s->prefix_queries);
    VCOUNTER("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", s->prefix_hits);
#undef VGAUGE
#undef VCOUNTER
    /* vLLM's finish reasons: stop, length, abort (cancelled), error */
    static const char *const reason[DCP_ENGINE_FINISH_ERROR + 1] = {"", "stop", "length", "abort", "error"};
    tprintf(b, "# HELP vllm:request_success_total Count of successfully processed requests.\n"
               "# TYPE vllm:request_success_total counter\n");
    for (int k = DCP_ENGINE_FINISH_STOP; k <= DCP_ENGINE_FINISH_ERROR; k++)
        tprintf(b, "vllm:request_success_total{%s,finished_reason=\"%s\"} %llu\n", labels, reason[k],
                (unsigned long long)m->finished[k]);
    static const struct {
        const char *name, *help;
    } hists[SERVE_H_COUNT] = {
        [SERVE_H_TTFT] = {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds."},
        [SERVE_H_ITL] = {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds."},
        [SERVE_H_TPOT] = {"vllm:request_time_per_output_token_seconds",
                          "Histogram of time_per_output_token_seconds per request."},
        [SERVE_H_E2E] = {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds."},
        [SERVE_H_QUEUE] = {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request."},
        [SERVE_H_INFERENCE] = {"vllm:request_inference_time_seconds",
                               "Histogram of time spent in RUNNING phase for request."},
        [SERVE_H_PREFILL] = {"vllm:request_prefill_time_seconds",
                             "Histogram of time spent in PREFILL phase for request."},
        [SERVE_H_DECODE] = {"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request."},
        [SERVE_H_PROMPT_TOKENS] = {"vllm:request_prompt_tokens", "Number of prefill tokens processed."},
        [SERVE_H_GEN_TOKENS] = {"vllm:request_generation_tokens", "Number of generation tokens processed."},
        [SERVE_H_MAX_GEN_TOKENS] = {"vllm:request_max_num_generation_tokens",
                                    "Histogram of maximum number of requested generation tokens."},
    };
    for (int k = 0; k < SERVE_H_COUNT; k++) vllm_hist(b, labels, hists[k].name, hists[k].help, &m->vllm[k]);
}

char *serve_metrics_text(serve_hub *h)
{
    tbuf b = {malloc(4096), 0, 4096, false};
    if (!b.p) return NULL;
    b.p[0] = 0;
    pthread_mutex_lock(&h->mu);
    const serve_metrics *m = &h->m;
    const dcp_engine_stats *s = &m->engine;
#define GAUGE(name, help, fmt, v) tprintf(&b, "# HELP " name " " help "\n# TYPE " name " gauge\n" name " " fmt "\n", v)
#define COUNTER(name, help, v)                                                                           \
    tprintf(&b, "# HELP " name " " help "\n# TYPE " name " counter\n" name " %llu\n", (unsigned long long)(v))
    GAUGE("dcpvk_requests_running", "Requests holding a sequence slot (decoding or prefilling).", "%u", s->running);
    GAUGE("dcpvk_requests_waiting", "Requests queued for a slot (preempted ones included).", "%u",
          s->waiting + (uint32_t)h->n_incoming);
    GAUGE("dcpvk_requests_running_peak", "The most requests running at once since the start.", "%u", s->running_peak);
    COUNTER("dcpvk_prompt_tokens_total", "Prompt tokens of the requests accepted.", s->prompt_tokens);
    COUNTER("dcpvk_generation_tokens_total", "Tokens generated.", s->generated_tokens);
    COUNTER("dcpvk_recomputed_tokens_total", "Tokens run again after preemptions.", s->recomputed_tokens);
    COUNTER("dcpvk_preemptions_total", "Requests preempted for lack of KV pages.", s->preemptions);
    COUNTER("dcpvk_steps_total", "Model steps run.", s->steps);
    COUNTER("dcpvk_step_sequences_total", "Sum over steps of the requests in each step.", s->step_sequences);
    COUNTER("dcpvk_step_rows_total", "Rows (tokens) run in steps.", s->rows);
    COUNTER("dcpvk_decode_steps_total", "Decode steps run (one row per request in the step).", s->decode_steps);
    COUNTER("dcpvk_decode_step_dispatches_total",
            "Compute dispatches of the decode steps, over every rank of process 0.", s->decode_dispatches);
    COUNTER("dcpvk_decode_step_rank_dispatches_total",
            "Compute dispatches of the decode steps on process 0's busiest rank.", s->decode_rank_dispatches);
    COUNTER("dcpvk_decode_step_host_waits_total", "Host waits on the GPU in the decode steps.", s->decode_host_waits);
    GAUGE("dcpvk_decode_step_dispatches", "Compute dispatches of the last decode step, every rank of process 0.",
          "%u", s->last_decode_dispatches);
    GAUGE("dcpvk_decode_step_rank_dispatches", "Compute dispatches of the last decode step on the busiest rank.",
          "%u", s->last_decode_rank_dispatches);
    GAUGE("dcpvk_decode_step_host_waits", "Host waits on the GPU in the last decode step.", "%u",
          s->last_decode_host_waits);
    tprintf(&b, "# HELP dcpvk_requests_finished_total Requests ended, by reason.\n"
                "# TYPE dcpvk_requests_finished_total counter\n");
    for (int k = 1; k <= DCP_ENGINE_FINISH_ERROR; k++)
        tprintf(&b, "dcpvk_requests_finished_total{reason=\"%s\"} %llu\n", dcp_engine_finish_name((dcp_engine_finish)k),
                (unsigned long long)s->finished[k]);
    /* speculative decoding: vLLM's spec_decode counters */
    COUNTER("dcpvk_spec_decode_num_drafts_total", "Verifications of a request with at least one draft token.",
            s->spec_drafts);
    COUNTER("dcpvk_spec_decode_num_draft_tokens_total", "Draft tokens verified.", s->spec_draft_tokens);
    COUNTER("dcpvk_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", s->spec_accepted_tokens);
    COUNTER("dcpvk_spec_decode_num_emitted_tokens_total",
            "Tokens emitted by verifications (the accepted drafts and one of the target's own each).",
            s->spec_accepted_tokens + s->spec_drafts);
    GAUGE("dcpvk_spec_decode_mean_accepted_length", "Tokens emitted per verification (1 + accepted / drafts).", "%.4f",
          s->spec_drafts ? 1.0 + (double)s->spec_accepted_tokens / (double)s->spec_drafts : 0.0);
    tprintf(&b, "# HELP dcpvk_spec_decode_num_accepted_tokens_per_pos_total Draft tokens accepted at each draft "
                "position.\n# TYPE dcpvk_spec_decode_num_accepted_tokens_per_pos_total counter\n");
    for (uint32_t j = 0; j < DCP_SPEC_MAX_TOKENS && (j < 1 || s->spec_accepted_per_pos[j]); j++)
        tprintf(&b, "dcpvk_spec_decode_num_accepted_tokens_per_pos_total{position=\"%u\"} %llu\n", j,
                (unsigned long long)s->spec_accepted_per_pos[j]);
    /* automatic prefix caching (vLLM's counters are with the vllm:* series) */
    COUNTER("dcpvk_prefix_cache_queries_total", "Tokens looked up in the prefix cache at admissions.",
            s->prefix_queries);
    COUNTER("dcpvk_prefix_cache_hits_total", "Tokens taken from the prefix cache instead of prefilled.",
            s->prefix_hits);
    GAUGE("dcpvk_prefix_cache_blocks", "Cached KV blocks (block_size x DCP tokens; a page on every rank).", "%u",
          s->prefix_blocks);
    GAUGE("dcpvk_prefix_cache_blocks_reclaimable", "Cached KV blocks no request uses (evicted LRU when needed).",
          "%u", s->prefix_blocks_unreferenced);
    COUNTER("dcpvk_prefix_cache_evictions_total", "Cached KV blocks evicted from the device pages (to host or gone).",
            s->prefix_evictions);
    COUNTER("dcpvk_forked_choices_total",
            "Choices of n > 1 requests started as a fork of choice 0's prompt KV (no prompt row computed).",
            s->forked_choices);
    /* KV offload to host memory (--kv-offloading-size; vLLM has no stable metric names for it) */
    tprintf(&b, "# HELP dcpvk_kv_offload_blocks_total Cached KV blocks copied between device pages and host "
                "memory.\n# TYPE dcpvk_kv_offload_blocks_total counter\n"
                "dcpvk_kv_offload_blocks_total{direction=\"to_host\"} %llu\n"
                "dcpvk_kv_offload_blocks_total{direction=\"to_device\"} %llu\n",
            (unsigned long long)s->offload_to_host_blocks, (unsigned long long)s->offload_to_device_blocks);
    tprintf(&b, "# HELP dcpvk_kv_offload_bytes_total Bytes of cached KV blocks copied between device pages and host "
                "memory (every layer of every rank of the TP group, under mpiexec too).\n"
                "# TYPE dcpvk_kv_offload_bytes_total counter\n"
                "dcpvk_kv_offload_bytes_total{direction=\"to_host\"} %llu\n"
                "dcpvk_kv_offload_bytes_total{direction=\"to_device\"} %llu\n",
            (unsigned long long)s->offload_to_host_bytes, (unsigned long long)s->offload_to_device_bytes);
    GAUGE("dcpvk_kv_offload_host_blocks", "Cached KV blocks held in host memory now.", "%u", s->offload_host_blocks);
    GAUGE("dcpvk_kv_offload_host_capacity_blocks", "Cached KV blocks the host pool holds (0: offload off).", "%u",
          s->offload_host_capacity);
    COUNTER("dcpvk_kv_offload_host_evictions_total", "Host-resident KV blocks evicted (the host pool full).",
            s->offload_host_evictions);
    COUNTER("dcpvk_http_responses_total", "HTTP responses sent.", m->http_requests);
    COUNTER("dcpvk_http_errors_total", "HTTP responses with a 4xx or 5xx status.", m->http_errors);
    GAUGE("dcpvk_http_connections", "HTTP connections open now.", "%u", m->http_connections);
    COUNTER("dcpvk_http_request_timeouts_total",
            "Connections closed because a request did not arrive whole within --request-timeout.", m->http_timeouts);
    GAUGE("dcpvk_kv_pages_total", "KV pages of each rank's pool (per layer).", "%u", h->kv_pages);
    tprintf(&b, "# HELP dcpvk_kv_pages_used KV pages in use on each TP rank (per layer).\n"
                "# TYPE dcpvk_kv_pages_used gauge\n");
    for (uint32_t r = 0; r < h->tp; r++)
        tprintf(&b, "dcpvk_kv_pages_used{rank=\"%u\"} %u\n", r, h->kv_pages - m->pages_free[r % h->dcp]);
    tprintf(&b, "# HELP dcpvk_kv_pages_free Free KV pages on each TP rank (per layer).\n"
                "# TYPE dcpvk_kv_pages_free gauge\n");
    for (uint32_t r = 0; r < h->tp; r++) tprintf(&b, "dcpvk_kv_pages_free{rank=\"%u\"} %u\n", r, m->pages_free[r % h->dcp]);
    tprintf(&b, "# HELP dcpvk_step_seconds Wall time of each model step.\n# TYPE dcpvk_step_seconds histogram\n");
    uint64_t cum = 0;
    for (int k = 0; k < SERVE_STEP_BUCKETS; k++) {
        cum += m->step_hist[k];
        tprintf(&b, "dcpvk_step_seconds_bucket{le=\"%g\"} %llu\n", serve_step_bounds[k], (unsigned long long)cum);
    }
    cum += m->step_hist[SERVE_STEP_BUCKETS];
    tprintf(&b, "dcpvk_step_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    tprintf(&b, "dcpvk_step_seconds_sum %.6f\ndcpvk_step_seconds_count %llu\n", m->step_sum, (unsigned long long)cum);
#undef GAUGE
#undef COUNTER
    vllm_metrics(&b, h);
    pthread_mutex_unlock(&h->mu);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
