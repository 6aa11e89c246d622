/* dcp-vk-serve's HTTP side with libmicrohttpd: one thread per connection. Routes, the API key,
 * the body limit (a larger body is read and dropped, then answered 413), OpenAI-style errors, and
 * the generating requests: parsed (serve/api.c), handed to the engine thread (serve/hub.c), then
 * answered as one JSON object or as server-sent events while the text comes. A client that goes
 * away (its socket closed: found by peeking while waiting, or by a failed write) has its request
 * cancelled, which frees its KV pages at once. */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve/serve.h"

struct serve_http {
    struct MHD_Daemon *d;
    serve_hub *h;
};

/* Per HTTP request (MHD's con_cls): the body as it comes. */
typedef struct conn_ctx {
    char *body;
    size_t len, cap;
    bool too_big;
    bool generating;  /* a generating request was accepted: counted in the hub's open_responses
                       * until MHD has sent its response (completed) */
    serve_hub *h;
} conn_ctx;

/* ---- responses -------------------------------------------------------------------------------- */

static void count_response(serve_hub *h, unsigned status)
{
    pthread_mutex_lock(&h->mu);
    h->m.http_requests++;
    if (status >= 400) h->m.http_errors++;
    pthread_mutex_unlock(&h->mu);
}

/* Sends body (malloc'd, taken) with a status and content type. */
static enum MHD_Result send_text(serve_hub *h, struct MHD_Connection *c, unsigned status, char *body,
                                 const char *type)
{
    if (!body) {
        static const char oom[] = "{\"error\": {\"message\": \"out of memory\", \"type\": \"server_error\", "
                                  "\"param\": null, \"code\": null}}";
        body = strdup(oom);
        status = 500;
        if (!body) return MHD_NO;
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == 405) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, POST");
    if (status == 401) MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    count_response(h, status);
    return ret;
}

static enum MHD_Result send_error(serve_hub *h, struct MHD_Connection *c, const serve_error *e)
{
    return send_text(h, c, e->status, serve_error_json(e), "application/json");
}

/* True when the client has closed its side (an orderly shutdown seen by a non-blocking peek). */
static bool client_gone(int fd)
{
    if (fd < 0) return false;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static void deadline_in(struct timespec *ts, long ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_nsec += ms * 1000000L;
    while (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* Marks r cancelled (its client is gone) and wakes the engine thread. Hub mutex held. */
static void cancel_locked(serve_hub *h, serve_req *r)
{
    if (r->state == SREQ_DONE || r->state == SREQ_REFUSED) return;
    r->cancel = true;
    pthread_cond_signal(&h->wake);
}

/* ---- streaming (server-sent events) ----------------------------------------------------------- */

typedef struct stream_ctx {
    serve_hub *h;
    serve_req *r;
    size_t sent;      /* bytes of r->text already sent */
    bool role_sent;   /* chat: the first chunk (assistant role) */
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

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    stream_ctx *x = cls;
    serve_hub *h = x->h;
    serve_req *r = x->r;
    (void)pos;
    while (x->out_off == x->out_len) {
        if (x->ended) return MHD_CONTENT_READER_END_OF_STREAM;
        free(x->out);
        x->out = NULL;
        x->out_len = x->out_off = 0;
        pthread_mutex_lock(&h->mu);
        while (r->state != SREQ_DONE && r->text_len == x->sent && (x->role_sent || r->kind != SERVE_CHAT)) {
            struct timespec ts;
            deadline_in(&ts, 100);
            pthread_cond_timedwait(&r->cond, &h->mu, &ts);
            if (r->state != SREQ_DONE && client_gone(r->fd)) {
                cancel_locked(h, r);
                pthread_mutex_unlock(&h->mu);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
        if (!x->role_sent && r->kind == SERVE_CHAT) out_add(x, serve_api_chunk_role(h, r));
        x->role_sent = true;
        if (r->text_len > x->sent)
            out_add(x, serve_api_chunk(h, r, r->text + x->sent, r->text_len - x->sent, DCP_ENGINE_FINISH_NONE));
        x->sent = r->text_len;
        if (r->state == SREQ_DONE) {
            if (r->finish == DCP_ENGINE_FINISH_ERROR || r->oom) out_add(x, serve_api_chunk_error(r));
            else out_add(x, serve_api_chunk(h, r, "", 0, r->finish));
            if (r->include_usage) out_add(x, serve_api_chunk_usage(h, r));
            out_add(x, strdup("data: [DONE]\n\n"));
            x->ended = true;
        }
        pthread_mutex_unlock(&h->mu);
    }
    size_t n = x->out_len - x->out_off < max ? x->out_len - x->out_off : max;
    memcpy(buf, x->out + x->out_off, n);
    x->out_off += n;
    return (ssize_t)n;
}

/* The response is gone (sent, or the connection failed): a request still running is cancelled. */
static void stream_free(void *cls)
{
    stream_ctx *x = cls;
    serve_hub *h = x->h;
    pthread_mutex_lock(&h->mu);
    cancel_locked(h, x->r);
    serve_req_unref(x->r);
    pthread_mutex_unlock(&h->mu);
    free(x->out);
    free(x);
}

/* ---- generating requests ----------------------------------------------------------------------- */

static enum MHD_Result generate(serve_hub *h, struct MHD_Connection *c, serve_kind kind, conn_ctx *cc)
{
    serve_error err;
    serve_req *r = serve_req_new();
    if (!r) return send_text(h, c, 500, NULL, "application/json");
    r->created = (long long)time(NULL);
    pthread_mutex_lock(&h->mu);
    r->number = h->next_id++;
    pthread_mutex_unlock(&h->mu);
    snprintf(r->id, sizeof r->id, "%s-%llx%06llx", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)r->created, (unsigned long long)r->number);
    if (serve_api_parse(h, kind, cc->body ? cc->body : "", cc->len, r, &err)) {
        serve_req_unref(r);
        return send_error(h, c, &err);
    }
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->fd = ci ? ci->connect_fd : -1;
    int rc = serve_hub_submit(h, r);
    if (rc) {
        if (rc == 429)
            serve_error_set(&err, 429, "rate_limit_error", NULL, "queue_full",
                            "too many requests in flight (%u running + %u queued at most); try again later",
                            h->max_seqs, h->o->max_queued);
        else
            serve_error_set(&err, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
        serve_req_unref(r);
        return send_error(h, c, &err);
    }
    pthread_mutex_lock(&h->mu);
    cc->generating = true; /* the server waits for its response before it stops */
    h->open_responses++;
    while (r->state == SREQ_NEW) pthread_cond_wait(&r->cond, &h->mu);
    if (r->state == SREQ_REFUSED) {
        bool client = r->status == DCP_ERR_INVALID_ARGUMENT || r->status == DCP_ERR_OUT_OF_PAGES;
        serve_error_set(&err, client ? 400 : 500, client ? "invalid_request_error" : "server_error", NULL,
                        r->status == DCP_ERR_OUT_OF_PAGES ? "kv_cache_too_small" : NULL, "%s", r->message);
        serve_req_unref(r);
        pthread_mutex_unlock(&h->mu);
        return send_error(h, c, &err);
    }
    if (r->stream) {
        pthread_mutex_unlock(&h->mu);
        stream_ctx *x = calloc(1, sizeof *x);
        struct MHD_Response *resp =
            x ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, x, stream_free) : NULL;
        if (!resp) {
            pthread_mutex_lock(&h->mu);
            cancel_locked(h, r);
            serve_req_unref(r);
            pthread_mutex_unlock(&h->mu);
            free(x);
            return MHD_NO;
        }
        x->h = h;
        x->r = r; /* the stream owns the connection's reference now */
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, 200, resp);
        MHD_destroy_response(resp);
        count_response(h, 200);
        return ret;
    }
    /* Whole response: wait for the end, watching the client. */
    bool gone = false;
    while (r->state != SREQ_DONE) {
        struct timespec ts;
        deadline_in(&ts, 100);
        pthread_cond_timedwait(&r->cond, &h->mu, &ts);
        if (r->state != SREQ_DONE && !gone && client_gone(r->fd)) {
            gone = true;
            cancel_locked(h, r);
        }
    }
    char *body = NULL;
    unsigned status = 200;
    if (gone) { /* nobody to answer */
        serve_req_unref(r);
        pthread_mutex_unlock(&h->mu);
        return MHD_NO;
    }
    if (r->finish == DCP_ENGINE_FINISH_ERROR || r->oom) {
        serve_error_set(&err, 500, "server_error", NULL, NULL, "%s", r->oom ? "out of memory" : r->message);
        body = serve_error_json(&err);
        status = 500;
    } else {
        body = serve_api_response(h, r);
    }
    serve_req_unref(r);
    pthread_mutex_unlock(&h->mu);
    return send_text(h, c, status, body, "application/json");
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

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
    serve_http *s = cls;
    serve_hub *h = s->h;
    (void)version;
    conn_ctx *cc = *con_cls;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        cc->h = h;
        *con_cls = cc;
        return MHD_YES;
    }
    if (*upload_size) { /* body data: keep it within the limit, drop the rest */
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
    serve_error err;
    const bool get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    const bool v1 = strncmp(url, "/v1/", 4) == 0;
    if (v1 && !authorized(h, c)) {
        serve_error_set(&err, 401, "invalid_request_error", NULL, "invalid_api_key",
                        "missing or incorrect API key (send 'Authorization: Bearer KEY')");
        return send_error(h, c, &err);
    }
    if (cc->too_big) {
        serve_error_set(&err, 413, "invalid_request_error", NULL, "body_too_large",
                        "the request body is larger than %u bytes (--max-body-bytes)", h->o->max_body);
        return send_error(h, c, &err);
    }
    static const struct {
        const char *url;
        bool post;
    } routes[] = {{"/health", false}, {"/metrics", false}, {"/v1/models", false},
                  {"/v1/completions", true}, {"/v1/chat/completions", true}};
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++) {
        if (strcmp(url, routes[i].url) != 0) continue;
        if (routes[i].post ? !post : !get) {
            serve_error_set(&err, 405, "invalid_request_error", NULL, "method_not_allowed",
                            "%s %s: the method is not allowed (use %s)", method, url, routes[i].post ? "POST" : "GET");
            return send_error(h, c, &err);
        }
        switch (i) {
        case 0: {
            pthread_mutex_lock(&h->mu);
            bool stopping = h->stopping;
            pthread_mutex_unlock(&h->mu);
            return send_text(h, c, stopping ? 503 : 200,
                             strdup(stopping ? "{\"status\": \"stopping\"}" : "{\"status\": \"ok\"}"),
                             "application/json");
        }
        case 1: return send_text(h, c, 200, serve_metrics_text(h), "text/plain; version=0.0.4");
        case 2: return send_text(h, c, 200, serve_api_models(h), "application/json");
        case 3: return generate(h, c, SERVE_COMPLETION, cc);
        default: return generate(h, c, SERVE_CHAT, cc);
        }
    }
    serve_error_set(&err, 404, "invalid_request_error", NULL, "not_found",
                    "%.16s %.200s: no such route (routes: POST /v1/completions, POST /v1/chat/completions, "
                    "GET /v1/models, /health, /metrics)", method, url);
    return send_error(h, c, &err);
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode why)
{
    (void)cls;
    (void)c;
    (void)why;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    if (cc->generating) {
        pthread_mutex_lock(&cc->h->mu);
        cc->h->open_responses--;
        pthread_mutex_unlock(&cc->h->mu);
    }
    free(cc->body);
    free(cc);
    *con_cls = NULL;
}

serve_http *serve_http_start(serve_hub *h, const char *prog, uint32_t *port)
{
    const serve_options *o = h->o;
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    int gai = getaddrinfo(o->host, NULL, &hints, &ai);
    if (gai != 0 || !ai) {
        fprintf(stderr, "%s: --host %s: %s\n", prog, o->host, gai ? gai_strerror(gai) : "no address");
        return NULL;
    }
    struct sockaddr_storage sa;
    memset(&sa, 0, sizeof sa);
    memcpy(&sa, ai->ai_addr, ai->ai_addrlen);
    const bool v6 = ai->ai_family == AF_INET6;
    freeaddrinfo(ai);
    if (v6) ((struct sockaddr_in6 *)&sa)->sin6_port = htons((uint16_t)o->port);
    else ((struct sockaddr_in *)&sa)->sin_port = htons((uint16_t)o->port);
    serve_http *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->h = h;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL | MHD_USE_ITC;
    if (v6) flags |= MHD_USE_IPv6;
    errno = 0;
    s->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, s, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&sa, MHD_OPTION_NOTIFY_COMPLETED, completed, NULL,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)(h->max_seqs + o->max_queued + 64),
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_END);
    if (!s->d) {
        fprintf(stderr, "%s: cannot listen on %s port %u: %s\n", prog, o->host, o->port,
                errno ? strerror(errno) : "libmicrohttpd could not start (address in use?)");
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    *port = di ? di->port : o->port;
    return s;
}

void serve_http_quiesce(serve_http *s)
{
    MHD_socket fd = MHD_quiesce_daemon(s->d);
    if (fd != MHD_INVALID_SOCKET) close(fd);
}

void serve_http_stop(serve_http *s)
{
    if (!s) return;
    MHD_stop_daemon(s->d);
    free(s);
}
