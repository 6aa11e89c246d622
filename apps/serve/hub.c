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
    h->m.pages_free = calloc(dcp, sizeof *h->m.pages_free);
    if (!h->m.pages_free) return -1;
    for (uint32_t r = 0; r < dcp; r++) h->m.pages_free[r] = kv_pages;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->wake, NULL);
    return 0;
}

void serve_hub_free(serve_hub *h)
{
    free(h->incoming);
    free(h->active);
    free(h->m.pages_free);
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
    free(r->text);
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
            r->state = SREQ_RUNNING;
            r->engine_id = id;
            changed(h, r);
        } else {
            if (st == DCP_OK) { /* no room to track it: take it back */
                dcp_engine_cancel(e, id);
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
            dcp_engine_cancel(e, r->engine_id);
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

static void route_events(serve_hub *h, dcp_engine *e)
{
    dcp_engine_event ev;
    while (dcp_engine_poll(e, &ev)) {
        serve_req *r = ev.user;
        append_text(r, ev.text, ev.len);
        r->completion_tokens = ev.completion_tokens;
        if (ev.kind == DCP_ENGINE_EVENT_FINISHED) {
            r->finish = ev.finish;
            r->status = ev.status;
            if (ev.message && ev.message[0]) snprintf(r->message, sizeof r->message, "%s", ev.message);
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
        route_events(h, e);
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
        dcp_status st = dcp_engine_step(e);
        pthread_mutex_lock(&h->mu);
        if (st != DCP_OK) {
            fprintf(stderr, "dcp-vk-serve: a step failed: %s: %s\n", dcp_status_string(st), dcp_last_error());
            if (st == DCP_ERR_MPI || h->lockstep) { /* the processes are out of step: end */
                rc = 1;
                route_events(h, e);
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
        route_events(h, e);
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
    pthread_mutex_unlock(&h->mu);
    if (b.failed) {
        free(b.p);
        return NULL;
    }
    return b.p;
}
