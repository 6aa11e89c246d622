/* dcp-vk-serve's HTTP side with libmicrohttpd: a pool of --http-threads workers, each an epoll loop
 * over its share of the connections, so that idle sockets cost a file descriptor and a little
 * memory, not a thread. Routes, the API key, the body limit, OpenAI-style errors, the access log,
 * and the generating requests: parsed (serve/api.c), handed to the engine thread (serve/hub.c),
 * then answered as one JSON object or as server-sent events while the text comes.
 *
 * No worker ever waits on the engine: once a request is handed over its connection is suspended
 * (MHD_suspend_connection), and the hub's on_change resumes it when there is something to send
 * (a stream's new text, the end, a refusal). A stream's content reader suspends the same way when
 * it has nothing yet.
 *
 * Hostile clients: at most --max-connections connections (the file limit is raised to fit), at
 * most --max-connections-per-ip from one address (libmicrohttpd closes the others at once), a
 * connection silent for --idle-timeout seconds is closed (libmicrohttpd; not while its request
 * waits for the engine), and a request must arrive whole within --request-timeout seconds: of the
 * connection's start for its first request, of its request line for the next ones on a kept-alive
 * connection (and within idle + request timeout of the previous response), so that a client
 * sending a byte now and then cannot hold a socket. The watcher thread enforces that deadline (it
 * shuts the socket down: libmicrohttpd then closes it) and, every 100 ms, peeks at the sockets of
 * suspended requests: a client gone has its request cancelled, which frees its KV pages at once.
 *
 * The listening socket is the gate's (serve/gate.c): it accepts, checks each connection's first
 * request head and answers a bad one in JSON itself (libmicrohttpd 0.9.75 would answer it with its
 * fixed HTML bodies and has no hook to replace them), then hands good connections to libmicrohttpd
 * (MHD_add_connection; the daemon has no listening socket of its own). Every error this server
 * decides (400, 401, 404, 405, 413, 429, 431, 500, 503, 505) is JSON; libmicrohttpd's own HTML is
 * left for what the gate does not see: a malformed later request of a kept-alive connection, and
 * broken chunked framing of a body.
 *
 * CORS (--allowed-origins): a preflight OPTIONS of an allowed origin gets 204 with
 * Access-Control-Allow-Origin/-Methods/-Headers/-Max-Age; every response to an allowed origin
 * (errors and streams too) carries Access-Control-Allow-Origin, and Vary: Origin unless the list is
 * '*'. An origin not allowed gets no CORS headers. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "serve/serve.h"

enum { WATCH_MS = 100, FD_RESERVE = 128 /* files the process needs besides the connections */ };

/* One open connection (libmicrohttpd's socket context), from accept to close. Hub mutex. */
typedef struct conn_track conn_track;
struct conn_track {
    conn_track *prev, *next;
    int fd;
    double deadline;     /* CLOCK_MONOTONIC seconds by which the request being read must be whole
                          * (0: none: it is whole, or being answered) */
    bool timed_out;      /* the watcher shut it down at its deadline */
    serve_req *req;      /* its generating request while it has one */
    char addr[INET6_ADDRSTRLEN];
};

struct serve_http {
    struct MHD_Daemon *d;
    serve_gate *gate;
    double *fd_deadline; /* hub mutex: [fd_cap] the deadline the gate gave a socket being handed over (0: none) */
    size_t fd_cap;
    serve_hub *h;
    const char *prog;
    pthread_t watcher;
    bool watching;
    bool quit;           /* hub mutex: the watcher ends */
    bool closing;        /* hub mutex: the daemon stops; no connection suspends any more */
    conn_track *conns;   /* hub mutex */
    double request_timeout, idle_timeout;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- routes ---------------------------------------------------------------------------------- */

typedef enum route_id { R_HEALTH, R_METRICS, R_MODELS, R_MODEL, R_COMPLETIONS, R_CHAT } route_id;

typedef struct route {
    const char *path;
    bool prefix;         /* path is a prefix followed by an id (/v1/models/{id}) */
    route_id id;
    bool post;           /* POST; else GET and HEAD */
    const char *allow;   /* the Allow header of its 405 and OPTIONS */
} route;

static const route routes[] = {
    {"/health", false, R_HEALTH, false, "GET, HEAD, OPTIONS"},
    {"/metrics", false, R_METRICS, false, "GET, HEAD, OPTIONS"},
    {"/v1/models", false, R_MODELS, false, "GET, HEAD, OPTIONS"},
    {"/v1/models/", true, R_MODEL, false, "GET, HEAD, OPTIONS"},
    {"/v1/completions", false, R_COMPLETIONS, true, "POST, OPTIONS"},
    {"/v1/chat/completions", false, R_CHAT, true, "POST, OPTIONS"},
};

static const route *find_route(const char *url)
{
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        const route *r = &routes[i];
        size_t n = strlen(r->path);
        if (r->prefix ? strncmp(url, r->path, n) == 0 && url[n] : strcmp(url, r->path) == 0) return r;
    }
    return NULL;
}

/* ---- one HTTP request -------------------------------------------------------------------------- */

/* Per HTTP request (libmicrohttpd's con_cls), made at its request line (the URI callback), freed
 * when it completes. */
typedef struct conn_ctx {
    serve_http *s;
    conn_track *t;       /* its connection (NULL if that could not be tracked) */
    double t0;           /* monotonic seconds at the request line */
    char method[16];
    char uri[256];       /* as sent (cut), for the log */
    char cors[256];      /* its Access-Control-Allow-Origin ("": none) */
    bool started;        /* the handler saw the headers */
    const route *route;  /* NULL: none matched */
    serve_error early;   /* a refusal found from the headers (status 0: none) */
    char *body;          /* [len] + NUL */
    size_t len, cap;
    bool too_big;        /* a chunked body beyond --max-body-bytes: read and dropped */
    serve_req *r;        /* the generating request (one reference), once handed over */
    bool generating;     /* counted in the hub's open_responses until completed */
    unsigned status;     /* the status queued (0: none) */
} conn_ctx;

static void count_response(serve_hub *h, unsigned status)
{
    pthread_mutex_lock(&h->mu);
    h->m.http_requests++;
    if (status >= 400) h->m.http_errors++;
    pthread_mutex_unlock(&h->mu);
}

/* CORS headers of a response to cc's request (see the top of the file). */
static void add_cors(const conn_ctx *cc, struct MHD_Response *resp)
{
    const char *list = cc->s->h->o->allowed_origins;
    if (!list) return;
    if (cc->cors[0]) MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, cc->cors);
    if (strcmp(list, "*")) MHD_add_response_header(resp, MHD_HTTP_HEADER_VARY, "Origin");
}

const char *serve_cors_origin(const serve_options *o, const char *origin, size_t n, char *buf, size_t cap)
{
    const char *list = o->allowed_origins;
    if (!list) return NULL;
    if (strcmp(list, "*") == 0) return "*";
    if (!origin || !n || n >= cap) return NULL;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        while (k && (*p == ' ')) p++, k--;
        while (k && p[k - 1] == ' ') k--;
        if (k == n && strncasecmp(p, origin, n) == 0) {
            memcpy(buf, origin, n);
            buf[n] = 0;
            return buf;
        }
        if (!e) break;
        p = e + 1;
    }
    return NULL;
}

/* Queues body (malloc'd, taken) with a status and content type (NULL: none); e (may be NULL) adds
 * its headers. */
static enum MHD_Result send_text(conn_ctx *cc, struct MHD_Connection *c, unsigned status, char *body,
                                 const char *type, const serve_error *e)
{
    if (!body) {
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                                  "\"param\": null, \"code\": null}}";
        body = strdup(oom);
        status = 500;
        type = "application/json";
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    if (type) MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    add_cors(cc, resp);
    if (status == 405 && cc->route) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, cc->route->allow);
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (e && e->retry_after) {
        char v[16];
        snprintf(v, sizeof v, "%u", e->retry_after);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    cc->status = status;
    count_response(cc->s->h, status);
    return ret;
}

static enum MHD_Result send_error(conn_ctx *cc, struct MHD_Connection *c, const serve_error *e)
{
    return send_text(cc, c, e->status, serve_error_json(e), "application/json", e);
}

/* The request is whole (headers, and body if any): its deadline ends. */
static void request_read(conn_ctx *cc)
{
    if (!cc->t) return;
    pthread_mutex_lock(&cc->s->h->mu);
    cc->t->deadline = 0;
    pthread_mutex_unlock(&cc->s->h->mu);
}

/* True when the client has closed its side (an orderly shutdown seen by a non-blocking peek). */
static bool client_gone(int fd)
{
    if (fd < 0) return false;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Marks r cancelled and wakes the engine thread. Hub mutex held. */
static void cancel_locked(serve_hub *h, serve_req *r)
{
    if (r->state == SREQ_DONE || r->state == SREQ_REFUSED) return;
    r->cancel = true;
    pthread_cond_signal(&h->wake);
}

/* Hub mutex held. A connection suspends only from its own handler or content reader. */
static void suspend_locked(serve_req *r, struct MHD_Connection *c)
{
    r->conn = c;
    r->suspended = true;
    MHD_suspend_connection(c);
}

static void resume_locked(serve_req *r)
{
    r->suspended = false;
    MHD_resume_connection(r->conn);
}

/* The hub's on_change (hub mutex held): resume the connection waiting for r when it has something
 * to send: a whole response waits for the end, a stream for anything. */
static void on_change(void *user, serve_req *r)
{
    (void)user;
    const bool finished = r->state == SREQ_DONE || r->state == SREQ_REFUSED;
    if (r->suspended && (finished || r->stream)) resume_locked(r);
}

/* ---- streaming (server-sent events) ----------------------------------------------------------- */

typedef struct stream_ctx {
    serve_http *s;
    struct MHD_Connection *c;
    serve_req *r;     /* one reference */
    size_t sent[DCP_ENGINE_MAX_CHOICES];    /* per choice: bytes of its text already formatted */
    size_t lp_sent[DCP_ENGINE_MAX_CHOICES]; /* per choice: entries of its lps already formatted */
    bool fin_sent[DCP_ENGINE_MAX_CHOICES];  /* per choice: its finish chunk formatted */
    bool role_sent;   /* chat: the first chunk of each choice (assistant role; with prompt_logprobs
                       * once they are whole); completions with
                       * echo or prompt_logprobs: the first chunk (the prompt) */
    bool ended;       /* [DONE] formatted */
    char *out;        /* formatted, not yet handed to MHD */
    size_t out_len, out_off;
} stream_ctx;

static void out_add(stream_ctx *x, char *s)
{
    if (!s) return;
    size_t n = strlen(s);
    char *p = realloc(x->out, x->out_len + n + 1);
    if (p) {
        memcpy(p + x->out_len, s, n + 1);
        x->out = p;
        x->out_len += n;
    }
    free(s);
}

/* Formats what came since the last call (hub mutex held); false when nothing did. */
static bool stream_format(stream_ctx *x)
{
    serve_hub *h = x->s->h;
    serve_req *r = x->r;
    bool any = false;
    const uint32_t n = r->n_choices ? r->n_choices : 1;
    if (!x->role_sent && r->kind == SERVE_CHAT) {
        if (r->prompt_lp >= 0 && serve_api_prompt_pending(r)) return false; /* its prompt_logprobs come first */
        for (uint32_t i = 0; i < n; i++) out_add(x, serve_api_chunk_role(h, serve_choice(r, i)));
        any = true;
    }
    if (!x->role_sent && r->kind == SERVE_COMPLETION && (r->echo || r->prompt_lp >= 0)) {
        if (serve_api_prompt_pending(r)) return false; /* the prompt's chunk first, once it is whole */
        out_add(x, serve_api_chunk_prompt(h, r));
        any = true;
    }
    x->role_sent = true;
    /* a chunk carries the logprobs of the tokens since the last one (their text may still be held
     * back: a stop string could start there); each choice its own chunks, with its index */
    const bool error = r->state == SREQ_DONE && (r->finish == DCP_ENGINE_FINISH_ERROR || r->oom);
    for (uint32_t i = 0; i < n; i++) {
        const serve_req *c = serve_choice(r, i);
        if (x->fin_sent[i]) continue;
        if (c->text_len > x->sent[i] || (c->n_lps > x->lp_sent[i] && !c->choice_done)) {
            out_add(x, serve_api_chunk_lp(h, c, c->text + x->sent[i], c->text_len - x->sent[i],
                                          DCP_ENGINE_FINISH_NONE, x->lp_sent[i], c->n_lps));
            x->sent[i] = c->text_len;
            x->lp_sent[i] = c->n_lps;
            any = true;
        }
        if (c->choice_done && !error) {
            out_add(x, serve_api_chunk_lp(h, c, "", 0, c->finish, x->lp_sent[i], c->n_lps));
            x->fin_sent[i] = true;
            any = true;
        }
    }
    if (r->state == SREQ_DONE) {
        if (error) out_add(x, serve_api_chunk_error(r));
        if (r->include_usage) out_add(x, serve_api_chunk_usage(h, r));
        out_add(x, strdup("data: [DONE]\n\n"));
        x->ended = true;
        any = true;
    }
    return any;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_ctx *x = cls;
    serve_hub *h = x->s->h;
    serve_req *r = x->r;
    (void)pos;
    pthread_mutex_lock(&h->mu);
    while (x->out_off == x->out_len) {
        free(x->out);
        x->out = NULL;
        x->out_len = x->out_off = 0;
        if (x->ended) {
            pthread_mutex_unlock(&h->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        if (r->gone || x->s->closing) {
            pthread_mutex_unlock(&h->mu);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (!stream_format(x)) { /* nothing new: wait without holding the worker */
            suspend_locked(r, x->c);
            pthread_mutex_unlock(&h->mu);
            return 0;
        }
    }
    pthread_mutex_unlock(&h->mu);
    size_t n = x->out_len - x->out_off < max ? x->out_len - x->out_off : max;
    memcpy(buf, x->out + x->out_off, n);
    x->out_off += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the connection failed): a request still running is cancelled. */
static void stream_free(void *cls)
{
    stream_ctx *x = cls;
    serve_hub *h = x->s->h;
    pthread_mutex_lock(&h->mu);
    cancel_locked(h, x->r);
    serve_req_unref(x->r);
    pthread_mutex_unlock(&h->mu);
    free(x->out);
    free(x);
}

static enum MHD_Result start_stream(conn_ctx *cc, struct MHD_Connection *c)
{
    serve_hub *h = cc->s->h;
    stream_ctx *x = calloc(1, sizeof *x);
    if (!x) return MHD_NO;
    x->s = cc->s;
    x->c = c;
    x->r = cc->r;
    pthread_mutex_lock(&h->mu);
    x->r->refs++; /* the stream's */
    pthread_mutex_unlock(&h->mu);
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, x, stream_free);
    if (!resp) {
        stream_free(x);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    add_cors(cc, resp);
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    cc->status = 200;
    count_response(h, 200);
    return ret;
}

/* ---- generating requests ----------------------------------------------------------------------- */

/* The handed-over request's next move, on its worker: wait (suspended) until there is something to
 * send, then the refusal, the stream, or the whole response. */
static enum MHD_Result advance(conn_ctx *cc, struct MHD_Connection *c)
{
    serve_http *s = cc->s;
    serve_hub *h = s->h;
    serve_req *r = cc->r;
    serve_error err;
    pthread_mutex_lock(&h->mu);
    const bool finished = r->state == SREQ_DONE || r->state == SREQ_REFUSED;
    if (r->gone || (s->closing && !finished)) { /* nobody to answer, or no time left */
        pthread_mutex_unlock(&h->mu);
        return MHD_NO;
    }
    if (r->state == SREQ_NEW || (r->state == SREQ_RUNNING && !r->stream)) {
        suspend_locked(r, c);
        pthread_mutex_unlock(&h->mu);
        return MHD_YES;
    }
    if (r->state == SREQ_REFUSED) {
        bool client = r->status == DCP_ERR_INVALID_ARGUMENT || r->status == DCP_ERR_OUT_OF_PAGES;
        serve_error_set(&err, client ? 400 : 500, client ? "invalid_request_error" : "server_error", NULL,
                        r->status == DCP_ERR_OUT_OF_PAGES ? "kv_cache_too_small" : NULL, "%s", r->message);
        pthread_mutex_unlock(&h->mu);
        return send_error(cc, c, &err);
    }
    if (r->stream) {
        pthread_mutex_unlock(&h->mu);
        return start_stream(cc, c);
    }
    char *body;
    unsigned status = 200;
    if (r->finish == DCP_ENGINE_FINISH_ERROR || r->oom) {
        serve_error_set(&err, 500, "server_error", NULL, NULL, "%s", r->oom ? "out of memory" : r->message);
        body = serve_error_json(&err);
        status = 500;
    } else {
        body = serve_api_response(h, r);
    }
    pthread_mutex_unlock(&h->mu);
    return send_text(cc, c, status, body, "application/json", NULL);
}

static enum MHD_Result generate(conn_ctx *cc, struct MHD_Connection *c, serve_kind kind)
{
    serve_hub *h = cc->s->h;
    serve_error err;
    serve_req *r = cc->t ? serve_req_new() : NULL; /* untracked, it could not be resumed at the stop */
    if (!r) return send_text(cc, c, 500, NULL, "application/json", NULL);
    r->created = (long long)time(NULL);
    pthread_mutex_lock(&h->mu);
    r->number = h->next_id++;
    pthread_mutex_unlock(&h->mu);
    snprintf(r->id, sizeof r->id, "%s-%llx%06llx", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)r->created, (unsigned long long)r->number);
    if (serve_api_parse(h, kind, cc->body ? cc->body : "", cc->len, r, &err)) {
        serve_req_unref(r);
        return send_error(cc, c, &err);
    }
    int rc = serve_hub_submit(h, r);
    if (rc) {
        if (rc == 429) {
            serve_error_set(&err, 429, "rate_limit_error", NULL, "queue_full",
                            "too many requests in flight (%u running + %u queued at most); try again later",
                            h->max_seqs, h->o->max_queued);
            err.retry_after = 1;
        } else {
            serve_error_set(&err, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        }
        serve_req_unref(r);
        return send_error(cc, c, &err);
    }
    pthread_mutex_lock(&h->mu);
    cc->r = r; /* the connection's reference */
    cc->t->req = r;
    cc->generating = true; /* the server waits for its response before it stops */
    h->open_responses++;
    pthread_mutex_unlock(&h->mu);
    return advance(cc, c);
}

/* ---- routing ------------------------------------------------------------------------------------ */

static bool authorized(const serve_hub *h, struct MHD_Connection *c)
{
    const char *key = h->o->api_key;
    if (!key) return true;
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!v || strncmp(v, "Bearer ", 7) != 0) return false;
    v += 7;
    size_t a = strlen(v), b = strlen(key);
    unsigned diff = a != b;
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)(v[i] ^ key[i]);
    return diff == 0;
}

/* The headers are in: the checks that need no body (API key, route, method, size). A refusal of a
 * request with a body goes out now, before the body is read (a 413 for a Content-Length over the
 * limit goes instead of 100 Continue; libmicrohttpd then closes the connection); one without a
 * body waits for the next call, so that the connection may stay open (libmicrohttpd 0.9.75 closes
 * a connection whose response is queued in this first call). */
static enum MHD_Result headers_in(conn_ctx *cc, struct MHD_Connection *c, const char *url, const char *method)
{
    serve_hub *h = cc->s->h;
    serve_error *err = &cc->early;
    snprintf(cc->method, sizeof cc->method, "%s", method);
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    unsigned long long n = cl ? strtoull(cl, NULL, 10) : 0; /* libmicrohttpd checked that it is a number */
    const bool body = n > 0 || MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
    const route *rt = cc->route = find_route(url);
    const bool get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0, post = strcmp(method, "POST") == 0;
    const bool options = strcmp(method, "OPTIONS") == 0; /* a CORS preflight carries no API key */
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ORIGIN);
    const char *co = serve_cors_origin(h->o, origin, origin ? strlen(origin) : 0, cc->cors, sizeof cc->cors);
    if (co && co != cc->cors) snprintf(cc->cors, sizeof cc->cors, "%s", co);
    if (!options && (strncmp(url, "/v1/", 4) == 0 || strcmp(url, "/v1") == 0) && !authorized(h, c))
        serve_error_set(err, 401, "invalid_request_error", NULL, "invalid_api_key",
                        "missing or incorrect API key (send 'Authorization: Bearer KEY')");
    else if (!rt)
        serve_error_set(err, 404, "invalid_request_error", NULL, "not_found",
                        "%.16s %.200s: no such route (routes: POST /v1/completions, POST /v1/chat/completions, "
                        "GET /v1/models, GET /v1/models/{id}, GET /health, GET /metrics)", method, url);
    else if (!options && (rt->post ? !post : !get))
        serve_error_set(err, 405, "invalid_request_error", NULL, "method_not_allowed",
                        "%.16s %.200s: the method is not allowed (allowed: %s)", method, url, rt->allow);
    else if (n > h->o->max_body)
        serve_error_set(err, 413, "invalid_request_error", NULL, "body_too_large",
                        "the request body is %llu bytes; at most %u are allowed (--max-body-bytes)", n, h->o->max_body);
    if (err->status && body) return send_error(cc, c, err);
    return MHD_YES;
}

/* OPTIONS of a route: 204 with its Allow; for an allowed origin the CORS preflight's answer too. */
static enum MHD_Result answer_options(conn_ctx *cc, struct MHD_Connection *c)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, cc->route->allow);
    add_cors(cc, resp);
    if (cc->cors[0]) {
        const char *rh = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCESS_CONTROL_REQUEST_HEADERS);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_METHODS, cc->route->allow);
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_HEADERS,
                                rh && *rh ? rh : "Authorization, Content-Type");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCESS_CONTROL_MAX_AGE, "600");
    }
    enum MHD_Result ret = MHD_queue_response(c, 204, resp);
    MHD_destroy_response(resp);
    cc->status = 204;
    count_response(cc->s->h, 204);
    return ret;
}

/* GET and HEAD routes (HEAD: libmicrohttpd sends the headers only). */
static enum MHD_Result answer_get(conn_ctx *cc, struct MHD_Connection *c, const char *url)
{
    serve_hub *h = cc->s->h;
    serve_error err;
    switch (cc->route->id) {
    case R_HEALTH: {
        pthread_mutex_lock(&h->mu);
        bool stopping = h->stopping;
        pthread_mutex_unlock(&h->mu);
        return send_text(cc, c, stopping ? 503 : 200,
                         strdup(stopping ? "{\"status\": \"stopping\"}" : "{\"status\": \"ok\"}"), "application/json",
                         NULL);
    }
    case R_METRICS: return send_text(cc, c, 200, serve_metrics_text(h), "text/plain; version=0.0.4", NULL);
    case R_MODELS: return send_text(cc, c, 200, serve_api_models(h), "application/json", NULL);
    case R_MODEL: {
        const char *id = url + strlen(cc->route->path);
        if (strcmp(id, h->model_name) == 0) return send_text(cc, c, 200, serve_api_model(h), "application/json", NULL);
        serve_error_set(&err, 404, "invalid_request_error", "model", "model_not_found",
                        "The model '%.200s' does not exist; this server serves '%.200s'", id, h->model_name);
        return send_error(cc, c, &err);
    }
    default: return MHD_NO; /* POST routes are not here */
    }
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    serve_http *s = cls;
    serve_hub *h = s->h;
    (void)version;
    conn_ctx *cc = *con_cls;
    if (!cc) return MHD_NO; /* out of memory at the request line */
    if (cc->r) return advance(cc, c); /* resumed */
    if (!cc->started) {
        cc->started = true;
        return headers_in(cc, c, url, method);
    }
    if (*upload_size) { /* body data (chunked has no Content-Length): keep it within the limit, drop the rest */
        if (!cc->too_big && cc->len + *upload_size > h->o->max_body) {
            cc->too_big = true;
            free(cc->body);
            cc->body = NULL;
            cc->len = cc->cap = 0;
        }
        if (!cc->too_big) {
            if (cc->len + *upload_size + 1 > cc->cap) {
                size_t cap = cc->cap ? cc->cap : 4096;
                while (cap < cc->len + *upload_size + 1) cap *= 2;
                char *p = realloc(cc->body, cap);
                if (!p) return MHD_NO;
                cc->body = p;
                cc->cap = cap;
            }
            memcpy(cc->body + cc->len, upload, *upload_size);
            cc->len += *upload_size;
            cc->body[cc->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    request_read(cc); /* whole: headers, and the body if any */
    if (cc->early.status) return send_error(cc, c, &cc->early);
    if (cc->too_big) {
        serve_error err;
        serve_error_set(&err, 413, "invalid_request_error", NULL, "body_too_large",
                        "the request body is larger than %u bytes (--max-body-bytes)", h->o->max_body);
        return send_error(cc, c, &err);
    }
    if (strcmp(cc->method, "OPTIONS") == 0) return answer_options(cc, c);
    if (!cc->route->post) return answer_get(cc, c, url);
    return generate(cc, c, cc->route->id == R_CHAT ? SERVE_CHAT : SERVE_COMPLETION);
}

/* ---- connections, requests, the access log ----------------------------------------------------- */

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    serve_http *s = cls;
    serve_hub *h = s->h;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        conn_track *t = calloc(1, sizeof *t);
        if (!t) return; /* untracked: libmicrohttpd's idle timeout still applies */
        const union MHD_ConnectionInfo *fi = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        const union MHD_ConnectionInfo *ai = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        t->fd = fi ? fi->connect_fd : -1;
        snprintf(t->addr, sizeof t->addr, "?");
        if (ai && ai->client_addr) {
            const struct sockaddr *sa = ai->client_addr;
            if (sa->sa_family == AF_INET)
                inet_ntop(AF_INET, &((const struct sockaddr_in *)(const void *)sa)->sin_addr, t->addr, sizeof t->addr);
            else if (sa->sa_family == AF_INET6)
                inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)(const void *)sa)->sin6_addr, t->addr, sizeof t->addr);
        }
        pthread_mutex_lock(&h->mu);
        t->deadline = now_s() + s->request_timeout;
        if (t->fd >= 0 && (size_t)t->fd < s->fd_cap && s->fd_deadline[t->fd] > 0) { /* the gate's, from accept */
            t->deadline = s->fd_deadline[t->fd];
            s->fd_deadline[t->fd] = 0;
        }
        t->next = s->conns;
        if (s->conns) s->conns->prev = t;
        s->conns = t;
        h->m.http_connections++;
        pthread_mutex_unlock(&h->mu);
        *socket_context = t;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        conn_track *t = *socket_context;
        if (!t) return;
        pthread_mutex_lock(&h->mu);
        if (t->prev) t->prev->next = t->next;
        else s->conns = t->next;
        if (t->next) t->next->prev = t->prev;
        h->m.http_connections--;
        pthread_mutex_unlock(&h->mu);
        free(t);
        *socket_context = NULL;
    }
}

/* The request line is in: a request begins (its context; the log's raw URI). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    serve_http *s = cls;
    conn_ctx *cc = calloc(1, sizeof *cc);
    if (!cc) return NULL;
    cc->s = s;
    cc->t0 = now_s();
    snprintf(cc->uri, sizeof cc->uri, "%s", uri ? uri : "");
    const union MHD_ConnectionInfo *si = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    cc->t = si ? si->socket_context : NULL;
    if (cc->t) {
        pthread_mutex_lock(&s->h->mu);
        double d = cc->t0 + s->request_timeout;
        if (!cc->t->deadline || d < cc->t->deadline) cc->t->deadline = d;
        pthread_mutex_unlock(&s->h->mu);
    }
    return cc;
}

static const char *termination_name(enum MHD_RequestTerminationCode why, bool timed_out)
{
    if (timed_out) return "request_timeout";
    switch (why) {
    case MHD_REQUEST_TERMINATED_COMPLETED_OK: return "ok";
    case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED: return "idle_timeout";
    case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN: return "shutdown";
    case MHD_REQUEST_TERMINATED_READ_ERROR: return "read_error";
    case MHD_REQUEST_TERMINATED_CLIENT_ABORT: return "client_abort";
    default: return "error";
    }
}

/* One access-log line on stderr, written in one call so that lines of several workers never mix. */
static void log_request(serve_http *s, const char *addr, double t0, const char *uri, const char *method,
                        unsigned status, uint32_t prompt, uint32_t completion, const char *finish, const char *end)
{
    const double ms = (now_s() - t0) * 1e3;
    char *m = serve_utf8(method, strlen(method)), *u = serve_utf8(uri, strlen(uri));
    char *line = NULL;
    if (m && u && s->h->o->log_json) {
        cJSON *o = cJSON_CreateObject();
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        struct tm tm;
        gmtime_r(&ts.tv_sec, &tm);
        char day[32], when[48];
        strftime(day, sizeof day, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(when, sizeof when, "%s.%03dZ", day, (int)(ts.tv_nsec / 1000000L));
        cJSON_AddStringToObject(o, "time", when);
        cJSON_AddStringToObject(o, "client", addr);
        cJSON_AddStringToObject(o, "method", m);
        cJSON_AddStringToObject(o, "path", u);
        cJSON_AddNumberToObject(o, "status", status);
        cJSON_AddNumberToObject(o, "prompt_tokens", prompt);
        cJSON_AddNumberToObject(o, "completion_tokens", completion);
        cJSON_AddNumberToObject(o, "time_ms", (double)(long long)(ms * 10.0 + 0.5) / 10.0);
        finish ? (void)cJSON_AddStringToObject(o, "finish_reason", finish) : (void)cJSON_AddNullToObject(o, "finish_reason");
        cJSON_AddStringToObject(o, "end", end);
        char *j = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (j && (line = malloc(strlen(j) + 2))) sprintf(line, "%s\n", j);
        free(j);
    } else if (m && u) {
        /* text: the path's control characters and spaces as %XX, so that a line stays one line of
         * space-separated fields */
        char path[3 * 256 + 1];
        size_t k = 0;
        for (const unsigned char *p = (const unsigned char *)u; *p && k + 4 < sizeof path; p++) {
            if (*p <= 0x20 || *p == 0x7f) k += (size_t)snprintf(path + k, sizeof path - k, "%%%02X", *p);
            else path[k++] = (char)*p;
        }
        path[k] = 0;
        size_t cap = strlen(s->prog) + strlen(m) + k + 256;
        if ((line = malloc(cap)))
            snprintf(line, cap, "%s: %s %s %s %u prompt_tokens=%u completion_tokens=%u time_ms=%.1f%s%s end=%s\n",
                     s->prog, addr, m, path, status, prompt, completion, ms, finish ? " finish_reason=" : "",
                     finish ? finish : "", end);
    }
    if (line) {
        size_t n = strlen(line), off = 0;
        while (off < n) {
            ssize_t w = write(STDERR_FILENO, line + off, n - off);
            if (w > 0) off += (size_t)w;
            else if (!(w < 0 && errno == EINTR)) break;
        }
    }
    free(line);
    free(m);
    free(u);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    serve_http *s = cls;
    serve_hub *h = s->h;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    unsigned status = cc->status;
    if (!status) { /* a response libmicrohttpd made itself (a request it could not parse) */
        const union MHD_ConnectionInfo *si = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
        status = si ? si->http_status : 0;
    }
    uint32_t prompt = 0, completion = 0;
    const char *finish = NULL;
    bool timed_out = false;
    pthread_mutex_lock(&h->mu);
    if (cc->r) {
        serve_req *r = cc->r;
        prompt = r->n_prompt;
        completion = r->completion_tokens;
        if (r->state == SREQ_DONE) finish = serve_api_finish_reason(r->finish);
        cancel_locked(h, r); /* still running: its client is gone */
        if (cc->t && cc->t->req == r) cc->t->req = NULL;
        serve_req_unref(r);
    }
    if (cc->generating) h->open_responses--;
    if (cc->t) {
        timed_out = cc->t->timed_out;
        /* kept alive: the next request must come within the idle timeout and arrive whole */
        cc->t->deadline = now_s() + s->idle_timeout + s->request_timeout;
    }
    pthread_mutex_unlock(&h->mu);
    log_request(s, cc->t ? cc->t->addr : "?", cc->t0, cc->uri, cc->method[0] ? cc->method : "-", status, prompt,
                completion, finish, termination_name(why, timed_out));
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

/* ---- the watcher ------------------------------------------------------------------------------- */

static void *watch(void *arg)
{
    serve_http *s = arg;
    serve_hub *h = s->h;
    pthread_mutex_lock(&h->mu);
    while (!s->quit) {
        const double now = now_s();
        for (conn_track *t = s->conns; t; t = t->next) {
            if (t->deadline && now > t->deadline && t->fd >= 0) { /* a request not whole in time */
                t->deadline = 0;
                t->timed_out = true;
                h->m.http_timeouts++;
                shutdown(t->fd, SHUT_RDWR); /* libmicrohttpd sees the end and closes it */
            }
            serve_req *r = t->req;
            if (r && r->suspended && !r->gone && r->state != SREQ_DONE && r->state != SREQ_REFUSED &&
                client_gone(t->fd)) {
                r->gone = true;
                cancel_locked(h, r); /* the engine's end resumes the connection, which closes */
            }
        }
        pthread_mutex_unlock(&h->mu);
        struct timespec ts = {0, WATCH_MS * 1000000L};
        nanosleep(&ts, NULL);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

/* ---- start and stop ----------------------------------------------------------------------------- */

/* Raises the open-file limit to hold *max_conns connections; lowers *max_conns to what the hard
 * limit allows (and says so). */
static void fit_file_limit(const char *prog, uint32_t *max_conns)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
    const rlim_t need = (rlim_t)*max_conns + FD_RESERVE;
    if (rl.rlim_cur < need) {
        struct rlimit want = {rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= need ? need : rl.rlim_max, rl.rlim_max};
        if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl.rlim_cur = want.rlim_cur;
    }
    if (rl.rlim_cur < need) {
        uint32_t fit = rl.rlim_cur > 2 * FD_RESERVE ? (uint32_t)(rl.rlim_cur - FD_RESERVE) : FD_RESERVE;
        fprintf(stderr, "%s: --max-connections %u needs %llu open files; the limit is %llu: serving at most %u\n",
                prog, *max_conns, (unsigned long long)need, (unsigned long long)rl.rlim_cur, fit);
        *max_conns = fit;
    }
}

/* ---- the gate's side ---------------------------------------------------------------------------- */

static void gate_hand(void *user, int fd, const struct sockaddr *sa, unsigned sa_len, double deadline)
{
    serve_http *s = user;
    pthread_mutex_lock(&s->h->mu);
    if (fd >= 0 && (size_t)fd < s->fd_cap) s->fd_deadline[fd] = deadline;
    pthread_mutex_unlock(&s->h->mu);
    /* It closes fd when it cannot take it (a connection limit reached meanwhile, out of memory). */
    if (MHD_add_connection(s->d, fd, sa, (socklen_t)sa_len) != MHD_YES) {
        pthread_mutex_lock(&s->h->mu);
        if (fd >= 0 && (size_t)fd < s->fd_cap) s->fd_deadline[fd] = 0;
        pthread_mutex_unlock(&s->h->mu);
    }
}

static uint32_t gate_count_addr(void *user, const char *addr)
{
    serve_http *s = user;
    uint32_t n = 0;
    for (const conn_track *t = s->conns; t; t = t->next) n += strcmp(t->addr, addr) == 0;
    return n;
}

static void gate_log(void *user, const char *addr, double t0, const serve_head *hd, unsigned status)
{
    log_request(user, addr, t0, hd->target[0] ? hd->target : "-", hd->method[0] ? hd->method : "-", status, 0, 0, NULL,
                "bad_request");
}

/* The listening socket on o->host:o->port (non-blocking, with room for a head in its receive
 * buffer); -1 after printing why. */
static int listen_on(const serve_options *o, const char *prog, uint32_t *port)
{
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char service[16];
    snprintf(service, sizeof service, "%u", o->port);
    int gai = getaddrinfo(o->host, service, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "%s: --host %s: %s\n", prog, o->host, gai ? gai_strerror(gai) : "no address");
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int one = 1, rcvbuf = (int)(4 * o->max_header);
    int cur = 0;
    socklen_t cl = sizeof cur;
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
        if (getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &cur, &cl) == 0 && cur < rcvbuf)
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf); /* accepted sockets inherit it */
    }
    if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
        fprintf(stderr, "%s: cannot listen on %s port %u: %s\n", prog, o->host, o->port, strerror(errno));
        if (fd >= 0) close(fd);
        freeaddrinfo(ai);
        return -1;
    }
    freeaddrinfo(ai);
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    *port = o->port;
    if (getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
        *port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                               : ((struct sockaddr_in *)&sa)->sin_port);
    return fd;
}

serve_http *serve_http_start(serve_hub *h, const char *prog, uint32_t *port)
{
    const serve_options *o = h->o;
    const int lfd = listen_on(o, prog, port);
    if (lfd < 0) return NULL;
    serve_http *s = calloc(1, sizeof *s);
    if (!s) {
        close(lfd);
        return NULL;
    }
    s->h = h;
    s->prog = prog;
    s->request_timeout = o->request_timeout;
    s->idle_timeout = o->idle_timeout;
    uint32_t max_conns = o->max_connections;
    fit_file_limit(prog, &max_conns);
    if (max_conns < o->http_threads) max_conns = o->http_threads; /* each worker holds its share */
    struct rlimit rl;
    s->fd_cap = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < (1u << 24)
                    ? (size_t)rl.rlim_cur : (size_t)max_conns + FD_RESERVE;
    s->fd_deadline = calloc(s->fd_cap, sizeof *s->fd_deadline);
    if (!s->fd_deadline) {
        close(lfd);
        free(s);
        return NULL;
    }
    pthread_mutex_lock(&h->mu);
    h->on_change = on_change;
    h->on_change_user = s;
    pthread_mutex_unlock(&h->mu);
    /* No listening socket: the gate hands connections over. A head up to --max-header-bytes must
     * fit the connection's memory, with room for the body's buffer. */
    const unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_NO_LISTEN_SOCKET | MHD_USE_ITC;
    errno = 0;
    s->d = MHD_start_daemon(flags, 0, NULL, NULL, handle, s, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)o->http_threads,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
                            (unsigned)o->max_conns_per_ip, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)o->idle_timeout,
                            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(2 * o->max_header + 32768),
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s, MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, s, MHD_OPTION_END);
    if (!s->d) {
        fprintf(stderr, "%s: libmicrohttpd could not start: %s\n", prog, errno ? strerror(errno) : "unknown error");
        pthread_mutex_lock(&h->mu);
        h->on_change = NULL;
        pthread_mutex_unlock(&h->mu);
        close(lfd);
        free(s->fd_deadline);
        free(s);
        return NULL;
    }
    s->watching = pthread_create(&s->watcher, NULL, watch, s) == 0;
    if (!s->watching) fprintf(stderr, "%s: cannot start the connection watcher thread\n", prog);
    const serve_gate_config gc = {.h = h, .listen_fd = lfd, .request_timeout = o->request_timeout,
                                  .max_conns = max_conns, .max_per_ip = o->max_conns_per_ip, .hand = gate_hand,
                                  .count_addr = gate_count_addr, .log = gate_log, .user = s};
    if (s->watching) s->gate = serve_gate_start(&gc, prog); /* it takes lfd */
    else close(lfd);
    if (!s->gate) {
        serve_http_stop(s);
        return NULL;
    }
    return s;
}

void serve_http_quiesce(serve_http *s)
{
    serve_gate_quiesce(s->gate);
}

void serve_http_stop(serve_http *s)
{
    if (!s) return;
    serve_hub *h = s->h;
    serve_gate_stop(s->gate); /* nothing is handed over any more */
    /* libmicrohttpd must not stop with suspended connections: resume each (it ends: closing) and
     * let none suspend again. */
    pthread_mutex_lock(&h->mu);
    s->closing = true;
    s->quit = true;
    for (conn_track *t = s->conns; t; t = t->next)
        if (t->req && t->req->suspended) resume_locked(t->req);
    h->on_change = NULL;
    pthread_mutex_unlock(&h->mu);
    if (s->watching) pthread_join(s->watcher, NULL);
    MHD_stop_daemon(s->d);
    free(s->fd_deadline);
    free(s);
}
