/* dcp-vk-serve: an OpenAI-compatible HTTP server over the engine (include/dcpvk/engine.h).
 *
 * Threads (process 0): the main thread owns the engine and runs its loop (serve/hub.c): it submits
 * the requests the HTTP workers hand over, cancels those whose client went away, steps the engine
 * and hands each request's events (text, finish) back. libmicrohttpd serves every connection from
 * a small pool of worker threads, each an epoll loop (serve/http.c): a worker reads and checks a
 * request (serve/api.c) and hands it over, then suspends the connection; the engine thread's events
 * resume it, and the worker writes the response (JSON, or server-sent events) without ever waiting
 * on the engine. A watcher thread closes connections that do not deliver a request in time and
 * notices clients that leave while their request waits. The hub's one mutex guards everything the
 * sides share. Under mpiexec the other processes run the follower (cli/follow.c, shared with
 * dcp-vk-run): they apply every step the engine plans, broadcast by process 0.
 *
 * Files: options.c (serve's options; the model, parallel and device options are dcp-vk-run's, in
 * cli/), api.c (OpenAI JSON in and out), chat prompts through include/dcpvk/chat.h, http.c (routes,
 * limits, streaming), hub.c (engine loop, metrics). */
#ifndef DCP_APPS_SERVE_H
#define DCP_APPS_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/chat.h"
#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "cli/run.h"

/* ---- options (serve/options.c) ---------------------------------------------------------------- */

typedef struct serve_options {
    run_options run;             /* model, TP/DCP, device and KV options, as dcp-vk-run's; -n is the
                                  * default max_tokens, --temp/--top-k/--top-p/--seed the defaults of
                                  * requests that leave them out */
    const char *host;            /* --host (default 127.0.0.1) */
    uint32_t port;               /* --port (default 8080; 0: any free port, printed) */
    const char *api_key;         /* --api-key (default none: no authentication) */
    const char *served_name;     /* --served-model-name (default: the model file's name without .gguf) */
    const char *chat_template;   /* --chat-template NAME (default: recognised from the model) */
    uint32_t max_seqs;           /* --max-seqs: sequences running at once (default 16) */
    uint32_t kv_pages;           /* --kv-pages: KV pages per rank pool (default 0: max-seqs full contexts) */
    uint32_t max_body;           /* --max-body-bytes (default 1 MiB) */
    uint32_t max_prompt;         /* --max-prompt-tokens (default 0: the context) */
    uint32_t max_tokens_limit;   /* --max-tokens-limit: the largest max_tokens (default 0: the context) */
    uint32_t max_queued;         /* --max-queued: requests waiting beyond max-seqs (default 64) */
    uint32_t shutdown_timeout;   /* --shutdown-timeout seconds for in-flight requests at SIGTERM (default 30) */
    uint32_t http_threads;       /* --http-threads: libmicrohttpd workers, each an epoll loop (default 4) */
    uint32_t max_connections;    /* --max-connections: open connections at most (default 4096) */
    uint32_t max_conns_per_ip;   /* --max-connections-per-ip: per client address (default 128; 0: no limit) */
    uint32_t idle_timeout;       /* --idle-timeout: seconds without traffic before a connection is
                                  * closed; not while its request waits for the engine (default 15) */
    uint32_t request_timeout;    /* --request-timeout: seconds a client has to send a whole request,
                                  * headers and body (default 10; see serve/http.c) */
    bool log_json;               /* --log-format json (default text): the access log's lines */
    int help, version;
} serve_options;

/* Parses argv: serve's own options here, the rest through run_parse. Returns 0 or DCP_EXIT_USAGE
 * after printing why (quiet processes print nothing: run_quiet). */
int serve_parse(int argc, char **argv, serve_options *o);
void serve_print_help(const char *prog);
/* quiet 1: serve_parse prints nothing (MPI processes other than 0; pair with run_quiet). */
void serve_quiet(int quiet);

/* ---- one HTTP request that generates (serve/api.c parses it, hub.c runs it) ------------------- */

typedef enum serve_kind { SERVE_COMPLETION = 0, SERVE_CHAT = 1 } serve_kind;

typedef enum serve_state {
    SREQ_NEW = 0,    /* made by the connection thread, queued for the engine thread */
    SREQ_RUNNING,    /* submitted to the engine */
    SREQ_REFUSED,    /* the engine refused it (status, message) */
    SREQ_DONE,       /* finished (finish, text complete) */
} serve_state;

typedef struct serve_req {
    /* set by the connection thread before handing over; read-only afterwards */
    serve_kind kind;
    bool stream, include_usage;
    char id[40];                 /* "cmpl-..." / "chatcmpl-..." */
    uint64_t number;             /* 1, 2, ... in arrival order (the seed of unseeded sampling adds it) */
    long long created;           /* Unix seconds */
    int32_t *prompt;             /* [n_prompt] */
    uint32_t n_prompt;
    dcp_engine_request er;       /* points into prompt, stops, stop_tokens, bias */
    char **stops;                /* [n_stop] */
    int32_t *stop_tokens;        /* [er.n_stop_tokens] stop_token_ids, then the chat end-of-turn */
    dcp_logit_bias *bias;        /* [er.sampling.n_logit_bias] */
    /* shared, under the hub's mutex */
    void *conn;                  /* the MHD connection answering it (serve/http.c) */
    bool suspended;              /* that connection waits for a change of this request: the hub's
                                  * on_change resumes it */
    bool gone;                   /* its client closed the connection while it waited */
    serve_state state;
    uint64_t engine_id;
    char *text;                  /* output so far [text_len] */
    size_t text_len, text_cap;
    dcp_engine_finish finish;
    uint32_t completion_tokens;
    dcp_status status;           /* REFUSED or ERROR */
    char message[512];
    bool cancel;                 /* the client is gone (or the server ends it): cancel it */
    bool oom;                    /* the output could not grow */
    int refs;                    /* connection + engine thread + response stream */
} serve_req;

/* ---- the hub: what the threads share (serve/hub.c) --------------------------------------------- */

enum { SERVE_STEP_BUCKETS = 14 };

typedef struct serve_metrics {
    dcp_engine_stats engine;
    uint64_t step_hist[SERVE_STEP_BUCKETS + 1]; /* counts of steps <= each bound, then +Inf */
    double step_sum;                            /* seconds */
    uint64_t http_requests, http_errors;         /* responses sent, of which 4xx/5xx */
    uint64_t http_timeouts;                      /* connections closed by --request-timeout */
    uint32_t http_connections;                   /* open now */
    uint32_t *pages_free;                       /* [dcp] free pages of each DCP rank's pools */
} serve_metrics;

extern const double serve_step_bounds[SERVE_STEP_BUCKETS];

typedef struct serve_hub {
    pthread_mutex_t mu;
    pthread_cond_t wake;        /* the engine thread waits on it for work */
    /* static after start */
    const serve_options *o;
    const char *model_name;
    const dcp_tokenizer *tok;
    dcp_chat_template chat;     /* DCP_CHAT_UNKNOWN: chat requests are refused */
    const char *chat_why;       /* why, when unknown */
    int32_t chat_eot;           /* the chat template's end-of-turn token, or -1 */
    uint32_t n_ctx, max_prompt, max_tokens_limit, tp, dcp, kv_pages, max_seqs;
    bool lockstep;              /* other processes run every step (MPI): a failed step ends the loop */
    /* shared */
    serve_req **incoming;       /* made, not yet submitted */
    size_t n_incoming, cap_incoming;
    serve_req **active;         /* submitted, not finished */
    size_t n_active, cap_active;
    uint32_t in_flight;         /* incoming + active: for the queue limit */
    uint32_t open_responses;    /* connections with a request being answered */
    bool stopping;              /* SIGTERM seen: no new requests */
    uint64_t next_id;
    serve_metrics m;
    /* Called (mutex held) whenever a request's state, text or finish changes; set before the
     * engine loop runs (serve/http.c resumes the connection waiting for it). */
    void (*on_change)(void *user, serve_req *r);
    void *on_change_user;
} serve_hub;

/* Initialises the hub (mutex, condition, metrics). 0 or -1 (out of memory). */
int serve_hub_init(serve_hub *h, const serve_options *o, const dcp_tokenizer *tok, uint32_t n_ctx, uint32_t tp,
                   uint32_t dcp, uint32_t kv_pages, uint32_t max_seqs);
void serve_hub_free(serve_hub *h);
/* New request (one reference, the caller's); NULL when out of memory. */
serve_req *serve_req_new(void);
/* Drops a reference (hub mutex held); frees at zero. */
void serve_req_unref(serve_req *r);
/* Hands r to the engine thread (takes a reference for it). 0, or 429 when the queue is full, 503
 * when stopping. */
int serve_hub_submit(serve_hub *h, serve_req *r);

/* Runs the engine loop until a stop (*stop_flag set by SIGTERM) has been served: stops taking
 * requests, lets those in flight finish for up to shutdown_timeout seconds, cancels the rest, and
 * returns once every response has been written. Returns 0, or 1 when a step failed in a way that
 * leaves the processes out of step (an MPI error; any failure with lockstep). */
int serve_hub_run(serve_hub *h, dcp_engine *e, volatile int *stop_flag, void (*on_stopping)(void *), void *user);

/* Prometheus text of the metrics (malloc'd; NULL when out of memory). */
char *serve_metrics_text(serve_hub *h);

/* ---- HTTP (serve/http.c) ----------------------------------------------------------------------- */

typedef struct serve_http serve_http;
/* Starts listening on o->host:o->port with libmicrohttpd (--http-threads epoll workers) and the
 * watcher thread; sets h->on_change. *port receives the port bound. NULL after printing why. */
serve_http *serve_http_start(serve_hub *h, const char *prog, uint32_t *port);
/* Stops accepting new connections (the ones open go on). */
void serve_http_quiesce(serve_http *s);
/* Resumes every waiting connection (each ends), closes every connection and frees. */
void serve_http_stop(serve_http *s);

/* ---- OpenAI JSON (serve/api.c) ----------------------------------------------------------------- */

/* An HTTP error to send: status and an OpenAI-style body {"error": {message, type, param, code}}.
 * Message and param may hold any bytes (a client's field names and values): the body turns what is
 * not UTF-8 into U+FFFD, so that it is valid UTF-8 and valid JSON whatever the request held. */
typedef struct serve_error {
    unsigned status;
    char message[600];
    const char *type;  /* "invalid_request_error", ... */
    char param[72];    /* "": null */
    const char *code;  /* NULL: null */
    unsigned retry_after; /* seconds for a Retry-After header (429); 0: none */
} serve_error;

void serve_error_set(serve_error *e, unsigned status, const char *type, const char *param, const char *code,
                     const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* The error body (malloc'd; NULL when out of memory). */
char *serve_error_json(const serve_error *e);
/* s[0, n) as valid UTF-8 (malloc'd, NUL-terminated; bytes that do not form a character become
 * U+FFFD); NULL when out of memory. */
char *serve_utf8(const char *s, size_t n);

/* Parses and checks a completions or chat body into r (prompt tokens, engine request): one JSON
 * object and nothing after it, no NUL in it, every field one this server implements (the others
 * are refused by name: see `refused` in serve/api.c). Returns 0, or -1 with *err set (400 / 404). */
int serve_api_parse(serve_hub *h, serve_kind kind, const char *body, size_t len, serve_req *r, serve_error *err);
/* Response texts (malloc'd): the whole JSON of a finished non-streaming request; one SSE event
 * ("data: {...}\n\n") of a streaming one with `delta` text [n] and a finish reason (NONE: none yet);
 * the first chat event (the assistant role); the usage event; the error event. */
char *serve_api_response(const serve_hub *h, const serve_req *r);
char *serve_api_chunk(const serve_hub *h, const serve_req *r, const char *delta, size_t n, dcp_engine_finish f);
char *serve_api_chunk_role(const serve_hub *h, const serve_req *r);
char *serve_api_chunk_usage(const serve_hub *h, const serve_req *r);
char *serve_api_chunk_error(const serve_req *r);
/* "stop", "length", "abort" (cancelled) for the OpenAI finish_reason. */
const char *serve_api_finish_reason(dcp_engine_finish f);
/* GET /v1/models, and GET /v1/models/{id} of the served model (malloc'd). */
char *serve_api_models(const serve_hub *h);
char *serve_api_model(const serve_hub *h);

#endif
