/* dcp-vk-serve: an OpenAI-compatible HTTP server over the engine (include/dcpvk/engine.h).
 *
 * Threads (process 0): the main thread owns the engine and runs its loop (serve/hub.c): it submits
 * the requests the HTTP workers hand over, cancels those whose client went away, steps the engine
 * and hands each request's events (text, finish) back. libmicrohttpd serves every connection from
 * a small pool of worker threads, each an epoll loop (serve/http.c): a worker reads and checks a
 * request (serve/api.c) and hands it over, then suspends the connection; the engine thread's events
 * resume it, and the worker writes the response (JSON, or server-sent events) without ever waiting
 * on the engine. A gate thread (serve/gate.c) accepts the connections first and answers requests
 * that are not HTTP/1.x in JSON itself. A watcher thread closes connections that do not deliver a request in time and
 * notices clients that leave while their request waits. The hub's one mutex guards everything the
 * sides share. Under mpiexec the other processes run the follower (cli/follow.c, shared with
 * dcp-vk-run): they apply every step the engine plans, broadcast by process 0.
 *
 * Files: options.c (serve's options; the model, parallel and device options are dcp-vk-run's, in
 * cli/), api.c (OpenAI JSON in and out), chat prompts through include/dcpvk/chat.h, http.c (routes,
 * limits, streaming, CORS), gate.c (accepting, the first request head's check), hub.c (engine loop,
 * metrics). */
#ifndef DCP_APPS_SERVE_H
#define DCP_APPS_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/chat.h"
#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/json_constraint.h"
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
    uint32_t max_plp_entries;    /* --max-prompt-logprobs-entries: prompt tokens x vocabulary allowed
                                  * for prompt_logprobs -1 (default 262144: about 17 MB of JSON) */
    uint32_t max_queued;         /* --max-queued: requests waiting beyond max-seqs (default 64) */
    uint32_t shutdown_timeout;   /* --shutdown-timeout seconds for in-flight requests at SIGTERM (default 30) */
    uint32_t http_threads;       /* --http-threads: libmicrohttpd workers, each an epoll loop (default 4) */
    uint32_t max_connections;    /* --max-connections: open connections at most (default 4096) */
    uint32_t max_conns_per_ip;   /* --max-connections-per-ip: per client address (default 128; 0: no limit) */
    uint32_t idle_timeout;       /* --idle-timeout: seconds without traffic before a connection is
                                  * closed; not while its request waits for the engine (default 15) */
    uint32_t request_timeout;    /* --request-timeout: seconds a client has to send a whole request,
                                  * headers and body (default 10; see serve/http.c) */
    uint32_t max_header;         /* --max-header-bytes: a request's line and headers at most (default
                                  * 16384; more get 431) */
    const char *allowed_origins; /* --allowed-origins: comma-separated origins, or "*", that browsers
                                  * may call from (CORS; default none: no CORS headers) */
    bool log_json;               /* --log-format json (default text): the access log's lines */
    bool prefix_caching;         /* --enable-prefix-caching / --no-enable-prefix-caching (default on,
                                  * under MPI too) */
    uint64_t kv_offload_bytes;   /* --kv-offloading-size GIB (vLLM's flag): host memory for cached KV
                                  * blocks evicted from the device pages (default 0: off; needs prefix
                                  * caching); the whole TP group's, under mpiexec split over the
                                  * processes by their ranks */
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

/* One generated token's log-probabilities (requests with logprobs; dcp_engine_event's). */
typedef struct serve_lp {
    int32_t token;
    bool has_lp;                 /* false: a prompt's first token (no logprob: null) */
    uint32_t rank;               /* prompt tokens: 1 + the tokens more likely (vLLM's rank) */
    float logprob;
    uint32_t n_top;
    int32_t top_ids[DCP_ENGINE_MAX_LOGPROBS];
    float top_lps[DCP_ENGINE_MAX_LOGPROBS];
    uint32_t n_all;              /* prompt_logprobs -1: the whole vocabulary, most likely first */
    int32_t *all_ids;            /* [n_all] (malloc'd, with all_lps) */
    float *all_lps;              /* [n_all] */
    char *piece;                 /* its text in the output (NUL-terminated) [piece_len] */
    size_t piece_len;
    size_t offset;               /* characters (code points) of output text before it (the pieces
                                  * before; of the generated tokens' alone, the prompt's alone) */
} serve_lp;

/* serve_req.prompt_lp for vLLM's prompt_logprobs -1. */
#define SERVE_PLP_ALL INT32_MAX

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
    bool echo;                   /* completions' echo: the prompt text comes first */
    int32_t prompt_lp;           /* vLLM's prompt_logprobs k (0 .. 20), SERVE_PLP_ALL (its -1: the
                                  * whole vocabulary), -1: not asked */
    char *echo_text;             /* echo: the prompt as given (a text prompt), or its ids decoded
                                  * (NUL-terminated) [echo_len] */
    size_t echo_len;
    dcp_json_schema *json;       /* response_format json_object / json_schema (er.sampling.json), or NULL */
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
    uint32_t cached_tokens;      /* prompt tokens from the prefix cache (usage.prompt_tokens_details) */
    dcp_status status;           /* REFUSED or ERROR */
    char message[512];
    bool cancel;                 /* the client is gone (or the server ends it): cancel it */
    bool oom;                    /* the output could not grow */
    int refs;                    /* connection + engine thread + response stream */
    /* timing for the vllm: histograms, CLOCK_MONOTONIC seconds (0: not yet); t_arrival is set by
     * serve_hub_submit, the rest by the engine thread (serve/hub.c) */
    double t_arrival;            /* handed to the hub (the request parsed) */
    double t_queued;             /* submitted to the engine */
    double t_scheduled;          /* the start of the first step that ran its rows */
    double t_first, t_last;      /* after the steps that brought its first and its latest token */
    uint32_t tokens_seen;        /* completion_tokens at t_last */
    /* logprobs (er.logprobs): one entry per token with logprobs, under the hub's mutex */
    serve_lp *lps;               /* [n_lps] */
    size_t n_lps, lps_cap;
    /* prompt logprobs (er.prompt_logprobs): one entry per prompt token, under the hub's mutex */
    serve_lp *plps;              /* [n_plps] */
    size_t n_plps, plps_cap;
    /* n choices (er.n): this request is choice 0 and holds the others' outputs (their text, lps,
     * finish and completion_tokens, under the hub's mutex) in choice[0 .. n_choices - 2]; engine
     * ids engine_id + i. state turns DONE when every choice has finished. */
    uint32_t index;              /* the choice (0 for the request itself) */
    struct serve_req *parent;    /* choices 1 .. n-1: the request (borrowed); NULL for it */
    uint32_t n_choices;          /* er.n (1 .. DCP_ENGINE_MAX_CHOICES) */
    bool choice_done;            /* this choice finished */
    struct serve_req *choice[DCP_ENGINE_MAX_CHOICES - 1]; /* choices 1 .. n-1, owned */
} serve_req;

/* Choice i of r (r itself for 0). */
static inline serve_req *serve_choice(const serve_req *r, uint32_t i)
{
    return i ? r->choice[i - 1] : (serve_req *)r;
}

/* ---- the hub: what the threads share (serve/hub.c) --------------------------------------------- */

enum { SERVE_STEP_BUCKETS = 14, SERVE_HIST_MAX_BUCKETS = 24 };

/* One Prometheus histogram: counts[k] observations in (bounds[k-1], bounds[k]] (not cumulative;
 * counts[n_bounds]: above the last bound), their sum (seconds). */
typedef struct serve_hist {
    const double *bounds;        /* [n_bounds], ascending */
    uint32_t n_bounds;           /* <= SERVE_HIST_MAX_BUCKETS */
    uint64_t counts[SERVE_HIST_MAX_BUCKETS + 1];
    double sum;
} serve_hist;

/* vLLM's request histograms (vllm/v1/metrics/loggers.py: the same names and bucket bounds); each
 * request is observed once at its end (TPOT with >= 2 tokens; queue, prefill, decode, inference
 * with >= 1; the token counts always), TTFT at its first token, ITL once per step that brings a
 * request more tokens. */
typedef enum serve_vllm_hist {
    SERVE_H_TTFT = 0,   /* vllm:time_to_first_token_seconds: arrival -> first token */
    SERVE_H_ITL,        /* vllm:inter_token_latency_seconds: between the steps bringing tokens */
    SERVE_H_TPOT,       /* vllm:request_time_per_output_token_seconds: decode / (tokens - 1) */
    SERVE_H_E2E,        /* vllm:e2e_request_latency_seconds: arrival -> finish */
    SERVE_H_QUEUE,      /* vllm:request_queue_time_seconds: submitted -> first scheduled */
    SERVE_H_INFERENCE,  /* vllm:request_inference_time_seconds: first scheduled -> last token */
    SERVE_H_PREFILL,    /* vllm:request_prefill_time_seconds: first scheduled -> first token */
    SERVE_H_DECODE,     /* vllm:request_decode_time_seconds: first token -> last token */
    /* token counts per request (tokens, not seconds; 1-2-5 bounds up to the context) */
    SERVE_H_PROMPT_TOKENS,  /* vllm:request_prompt_tokens */
    SERVE_H_GEN_TOKENS,     /* vllm:request_generation_tokens */
    SERVE_H_MAX_GEN_TOKENS, /* vllm:request_max_num_generation_tokens (one sequence a request: the same) */
    SERVE_H_COUNT
} serve_vllm_hist;

typedef struct serve_metrics {
    dcp_engine_stats engine;
    uint64_t step_hist[SERVE_STEP_BUCKETS + 1]; /* counts of steps <= each bound, then +Inf */
    double step_sum;                            /* seconds */
    uint64_t http_requests, http_errors;         /* responses sent, of which 4xx/5xx */
    uint64_t http_timeouts;                      /* connections closed by --request-timeout */
    uint32_t http_connections;                   /* open now */
    uint32_t *pages_free;                       /* [dcp] free pages of each DCP rank's pools */
    serve_hist vllm[SERVE_H_COUNT];             /* vLLM's request histograms */
    double count_bounds[SERVE_HIST_MAX_BUCKETS]; /* 1, 2, 5, 10, ... <= the context: the token counts' */
    uint64_t finished[DCP_ENGINE_FINISH_ERROR + 1]; /* requests ended, by reason (the hub's count) */
} serve_metrics;

extern const double serve_step_bounds[SERVE_STEP_BUCKETS];

typedef struct serve_hub {
    pthread_mutex_t mu;
    pthread_cond_t wake;        /* the engine thread waits on it for work */
    /* static after start */
    const serve_options *o;
    const char *model_name;
    const dcp_tokenizer *tok;
    dcp_json_vocab *json_vocab; /* the tokens' bytes for response_format (made at init) */
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
/* serve_api_chunk with the logprobs of the tokens r->lps [lp_from, lp_to) (requests with logprobs). */
char *serve_api_chunk_lp(const serve_hub *h, const serve_req *r, const char *delta, size_t n, dcp_engine_finish f,
                         size_t lp_from, size_t lp_to);
char *serve_api_chunk_role(const serve_hub *h, const serve_req *r);
/* Completions with echo or prompt_logprobs: the first event, with the prompt (echo: its text, and
 * with logprobs its tokens' entries) and vLLM's prompt_logprobs when asked. */
char *serve_api_chunk_prompt(const serve_hub *h, const serve_req *r);
/* Whether r's first stream event waits for prompt logprobs still to come. */
bool serve_api_prompt_pending(const serve_req *r);
char *serve_api_chunk_usage(const serve_hub *h, const serve_req *r);
char *serve_api_chunk_error(const serve_req *r);
/* "stop", "length", "abort" (cancelled) for the OpenAI finish_reason. */
const char *serve_api_finish_reason(dcp_engine_finish f);
/* GET /v1/models, and GET /v1/models/{id} of the served model (malloc'd). */
char *serve_api_models(const serve_hub *h);
char *serve_api_model(const serve_hub *h);

/* ---- CORS (serve/http.c) ---------------------------------------------------------------------- */

/* The Access-Control-Allow-Origin value for a request from origin[0, n) (NULL: no Origin header):
 * "*" under --allowed-origins '*', the origin itself when it is listed, else NULL (no CORS headers). */
const char *serve_cors_origin(const serve_options *o, const char *origin, size_t n, char *buf, size_t cap);

/* ---- the gate: accepted connections before libmicrohttpd (serve/gate.c) -------------------------- */

/* What serve_head_check saw of a request's head. */
typedef struct serve_head {
    char method[16];          /* cut; "" before the request line is whole */
    char target[256];         /* cut */
    const char *origin;       /* the Origin header's value in the buffer, or NULL */
    size_t origin_len;
} serve_head;

/* Checks the head (request line and header lines, up to the empty line) of the first request of a
 * connection: buf[0, n) as peeked so far, of which the head must end within limit bytes. The
 * request line must be METHOD SP TARGET SP HTTP/1.0 or HTTP/1.1 (a method token, a target without
 * spaces or control bytes), each header line a field-name token, a colon and a value without
 * control bytes; HTTP/1.1 needs a Host header, Content-Length must be a number. Lines end in LF or
 * CRLF. Returns 0 (a whole, valid head), 1 (valid so far, not whole yet) or -1 with *err: 400 (a bad
 * request or header line, naming it), 431 (no end within limit bytes), 505 (another HTTP version). */
int serve_head_check(const char *buf, size_t n, size_t limit, serve_head *hd, serve_error *err);

struct sockaddr;
typedef struct serve_gate serve_gate;
typedef struct serve_gate_config {
    serve_hub *h;
    int listen_fd;            /* listening, taken (closed by serve_gate_stop) */
    double request_timeout;   /* seconds from accept for the head to arrive */
    uint32_t max_conns;       /* open connections at most (the hub's http_connections) */
    uint32_t max_per_ip;      /* 0: no limit */
    /* A connection whose first head is whole and valid: fd (non-blocking, nothing read from it),
     * its deadline for the whole request (CLOCK_MONOTONIC seconds). */
    void (*hand)(void *user, int fd, const struct sockaddr *sa, unsigned sa_len, double deadline);
    /* Connections from addr handed over and still open (hub mutex held). */
    uint32_t (*count_addr)(void *user, const char *addr);
    /* One answered request: the access log. */
    void (*log)(void *user, const char *addr, double t0, const serve_head *hd, unsigned status);
    void *user;
} serve_gate_config;

/* Starts the gate's thread: it accepts connections (closing at once those beyond the connection
 * limits), peeks at each until its first request's head is whole (within --max-header-bytes and
 * --request-timeout), answers a bad head with a JSON error and closes, and hands a good connection,
 * untouched, to c->hand. NULL after printing why (prog). */
serve_gate *serve_gate_start(const serve_gate_config *c, const char *prog);
/* Stops listening: new connections are refused; those accepted go on. */
void serve_gate_quiesce(serve_gate *g);
/* Ends the thread, closes the connections not handed over, frees. */
void serve_gate_stop(serve_gate *g);

#endif
