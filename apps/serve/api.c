/* The OpenAI API's JSON (with cJSON): completions and chat completions bodies checked field by field
 * into an engine request (tokenized prompt, sampling, stops, limits), and the responses: whole
 * objects, server-sent event chunks, errors in OpenAI's shape. A field this server does not read is
 * refused by name, never ignored (the tables `implemented` and `refused` below). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "dcpvk/utf8.h"
#include "serve/serve.h"

char *serve_utf8(const char *s, size_t n)
{
    char *out = malloc(DCP_UTF8_OUT_MAX(n) + 1);
    if (!out) return NULL;
    out[dcp_utf8_sanitize(s, n, out)] = 0;
    return out;
}

static void set_param(serve_error *e, const char *param)
{
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
}

void serve_error_set(serve_error *e, unsigned status, const char *type, const char *param, const char *code,
                     const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    set_param(e, param);
    e->code = code;
    e->retry_after = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

char *serve_error_json(const serve_error *e)
{
    /* The message and param may quote the request (a model name cut short mid-character, a URL
     * holding %FF, a field name): valid UTF-8 first, cJSON escapes the rest. */
    char *msg = serve_utf8(e->message, strlen(e->message)), *param = serve_utf8(e->param, strlen(e->param));
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    char *s = NULL;
    if (msg && param && err) {
        cJSON_AddStringToObject(err, "message", msg);
        cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
        param[0] ? (void)cJSON_AddStringToObject(err, "param", param) : (void)cJSON_AddNullToObject(err, "param");
        e->code ? (void)cJSON_AddStringToObject(err, "code", e->code) : (void)cJSON_AddNullToObject(err, "code");
        s = cJSON_PrintUnformatted(root);
    }
    cJSON_Delete(root);
    free(msg);
    free(param);
    return s;
}

/* A 400 invalid_request_error about param; returns -1. */
static int bad(serve_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(serve_error *err, const char *param, const char *fmt, ...)
{
    err->status = 400;
    err->type = "invalid_request_error";
    set_param(err, param);
    err->code = NULL;
    err->retry_after = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return -1;
}
#define BAD(param, ...) bad(err, param, __VA_ARGS__)

/* A JSON number that is an integer in [min, max]. */
static int get_int(const cJSON *v, double min, double max, long long *out)
{
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= min && d <= max) || floor(d) != d) return -1;
    *out = (long long)d;
    return 0;
}

/* Field `name` of object o when present and not null. */
static const cJSON *field(const cJSON *o, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int tokenize(serve_hub *h, const char *text, size_t len, bool special, serve_req *r, serve_error *err)
{
    unsigned flags = (dcp_tokenizer_wants_bos(h->tok) ? DCP_TOKENIZE_ADD_BOS : 0) | (special ? DCP_TOKENIZE_PARSE_SPECIAL : 0);
    int32_t *ids = NULL;
    size_t n = 0;
    dcp_status st = dcp_tokenizer_encode(h->tok, text, len, flags, &ids, &n);
    if (st != DCP_OK) {
        serve_error_set(err, 500, "server_error", "prompt", NULL, "tokenizing the prompt failed: %s", dcp_last_error());
        return -1;
    }
    if (n > UINT32_MAX) n = UINT32_MAX;
    r->prompt = ids;
    r->n_prompt = (uint32_t)n;
    return 0;
}

/* Completions: "prompt" is a string, a list of token ids, or a list of one of either. */
static int completion_prompt(serve_hub *h, const cJSON *j, serve_req *r, serve_error *err)
{
    const cJSON *p = field(j, "prompt");
    if (!p) return BAD("prompt", "'prompt' is required");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(p->child) || cJSON_IsArray(p->child)))
        p = p->child; /* ["text"] or [[ids]] */
    if (cJSON_IsString(p)) {
        if (r->echo && !(r->echo_text = strdup(p->valuestring))) {
            serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            return -1;
        }
        r->echo_len = r->echo ? strlen(p->valuestring) : 0;
        return tokenize(h, p->valuestring, strlen(p->valuestring), false, r, err);
    }
    if (!cJSON_IsArray(p))
        return BAD("prompt", "'prompt' must be a string or a list of token ids (one prompt per request)");
    int n = cJSON_GetArraySize(p);
    if (n == 0) return BAD("prompt", "'prompt' is an empty list");
    r->prompt = malloc((size_t)n * sizeof *r->prompt);
    if (!r->prompt) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    const uint32_t V = dcp_tokenizer_n_vocab(h->tok);
    int i = 0;
    for (const cJSON *x = p->child; x; x = x->next, i++) {
        long long id;
        if (get_int(x, 0, (double)V - 1, &id))
            return BAD("prompt", "'prompt' element %d is not a token id in [0, %u] (one prompt per request: a "
                                 "string or a list of ids)", i, V - 1);
        r->prompt[i] = (int32_t)id;
    }
    r->n_prompt = (uint32_t)n;
    if (r->echo) { /* the ids decoded, special tokens not shown */
        char *t = NULL;
        size_t tn = 0;
        if (dcp_tokenizer_decode(h->tok, r->prompt, r->n_prompt, 0, &t, &tn) != DCP_OK || !(r->echo_text = serve_utf8(t, tn))) {
            free(t);
            serve_error_set(err, 500, "server_error", "prompt", NULL, "decoding the prompt failed: %s", dcp_last_error());
            return -1;
        }
        free(t);
        r->echo_len = strlen(r->echo_text);
    }
    return 0;
}

/* Chat: "messages" rendered with the model's chat template. */
static int chat_prompt(serve_hub *h, const cJSON *j, serve_req *r, serve_error *err)
{
    const cJSON *ms = field(j, "messages");
    if (!ms) return BAD("messages", "'messages' is required");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) == 0)
        return BAD("messages", "'messages' must be a non-empty list of {role, content} objects");
    if (h->chat == DCP_CHAT_UNKNOWN)
        return BAD("messages", "this model has no chat template dcp-vk-serve knows (%s); use /v1/completions, or "
                               "start the server with --chat-template NAME", h->chat_why);
    int n = cJSON_GetArraySize(ms), rc = -1;
    dcp_chat_message *msg = calloc((size_t)n, sizeof *msg);
    char **owned = calloc((size_t)n, sizeof *owned);
    if (!msg || !owned) {
        serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        goto done;
    }
    int i = 0;
    for (const cJSON *m = ms->child; m; m = m->next, i++) {
        if (!cJSON_IsObject(m)) {
            BAD("messages", "message %d is not an object", i);
            goto done;
        }
        const cJSON *role = field(m, "role"), *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsString(role)) {
            BAD("messages", "message %d: 'role' must be a string (system, user or assistant)", i);
            goto done;
        }
        if (strcmp(role->valuestring, "system") && strcmp(role->valuestring, "user") &&
            strcmp(role->valuestring, "assistant") && strcmp(role->valuestring, "developer")) {
            BAD("messages", "message %d: role '%.40s' is not one of system, developer, user, assistant", i,
                role->valuestring);
            goto done;
        }
        msg[i].role = strcmp(role->valuestring, "developer") == 0 ? "system" : role->valuestring;
        if (cJSON_IsString(content)) {
            msg[i].content = content->valuestring;
        } else if (!content || cJSON_IsNull(content)) {
            msg[i].content = "";
        } else if (cJSON_IsArray(content)) { /* parts: [{type: "text", text: ...}] */
            size_t len = 0;
            for (const cJSON *p = content->child; p; p = p->next) {
                const cJSON *type = field(p, "type"), *text = field(p, "text");
                if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") || !cJSON_IsString(text)) {
                    BAD("messages", "message %d: content parts must be {\"type\": \"text\", \"text\": string}", i);
                    goto done;
                }
                len += strlen(text->valuestring);
            }
            if (!(owned[i] = malloc(len + 1))) {
                serve_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
                goto done;
            }
            owned[i][0] = 0;
            for (const cJSON *p = content->child; p; p = p->next) strcat(owned[i], field(p, "text")->valuestring);
            msg[i].content = owned[i];
        } else {
            BAD("messages", "message %d: 'content' must be a string or a list of text parts", i);
            goto done;
        }
    }
    char *text;
    size_t len;
    if (dcp_chat_apply(h->chat, msg, (size_t)n, true, &text, &len) != DCP_OK) {
        BAD("messages", "%s", dcp_last_error());
        goto done;
    }
    rc = tokenize(h, text, len, true, r, err);
    free(text);
done:
    for (int k = 0; owned && k < n; k++) free(owned[k]);
    free(owned);
    free(msg);
    return rc;
}

static int parse_stop(const cJSON *j, serve_req *r, serve_error *err)
{
    const cJSON *s = field(j, "stop");
    if (!s) return 0;
    int n = cJSON_IsString(s) ? 1 : cJSON_IsArray(s) ? cJSON_GetArraySize(s) : -1;
    if (n < 0) return BAD("stop", "'stop' must be a string or a list of strings");
    if (n > 16) return BAD("stop", "'stop' has %d strings; at most 16", n);
    if (n == 0) return 0;
    r->stops = calloc((size_t)n, sizeof *r->stops);
    if (!r->stops) return BAD("stop", "out of memory");
    const cJSON *x = cJSON_IsString(s) ? s : s->child;
    for (int i = 0; i < n; i++, x = x->next) {
        if (!cJSON_IsString(x)) return BAD("stop", "'stop' element %d is not a string", i);
        if (!x->valuestring[0]) return BAD("stop", "'stop' element %d is empty", i);
        if (!(r->stops[i] = strdup(x->valuestring))) return BAD("stop", "out of memory");
        r->er.n_stop = (uint32_t)i + 1;
    }
    r->er.stop = (const char *const *)r->stops;
    return 0;
}

/* "stop_token_ids": a list of token ids (at most 64), into r->stop_tokens with room for one more
 * (the chat template's end-of-turn). */
static int parse_stop_token_ids(serve_hub *h, const cJSON *j, serve_req *r, serve_error *err)
{
    const cJSON *s = field(j, "stop_token_ids");
    const uint32_t V = dcp_tokenizer_n_vocab(h->tok);
    int n = 0;
    if (s) {
        if (!cJSON_IsArray(s)) return BAD("stop_token_ids", "'stop_token_ids' must be a list of token ids");
        n = cJSON_GetArraySize(s);
        if (n > 64) return BAD("stop_token_ids", "'stop_token_ids' has %d ids; at most 64", n);
    }
    if (!(r->stop_tokens = malloc(((size_t)n + 1) * sizeof *r->stop_tokens))) return BAD("stop_token_ids", "out of memory");
    int i = 0;
    for (const cJSON *x = s ? s->child : NULL; x; x = x->next, i++) {
        long long t;
        if (get_int(x, 0, (double)V - 1, &t))
            return BAD("stop_token_ids", "'stop_token_ids' element %d must be a token id in [0, %u)", i, V);
        r->stop_tokens[i] = (int32_t)t;
    }
    r->er.stop_tokens = r->stop_tokens;
    r->er.n_stop_tokens = (uint32_t)n;
    return 0;
}

/* "response_format": {"type": "text"} (nothing), {"type": "json_object"} or {"type": "json_schema",
 * "json_schema": {"name": ..., "schema": {...}, "strict": ..., "description": ...}}: compiled into
 * r->json (the schema's refusals name the keyword). */
static int parse_response_format(serve_hub *h, const cJSON *j, serve_req *r, serve_error *err)
{
    const cJSON *f = field(j, "response_format");
    if (!f || cJSON_IsNull(f)) return 0;
    const cJSON *t = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
    if (!cJSON_IsString(t))
        return BAD("response_format", "'response_format' must be an object with a 'type' (text, json_object or "
                   "json_schema)");
    for (const cJSON *m = f->child; m; m = m->next)
        if (!m->string || (strcmp(m->string, "type") != 0 && strcmp(m->string, "json_schema") != 0))
            return BAD("response_format", "unknown field '%.64s' in 'response_format'", m->string ? m->string : "");
    dcp_status st;
    if (strcmp(t->valuestring, "text") == 0) {
        return 0;
    } else if (strcmp(t->valuestring, "json_object") == 0) {
        st = dcp_json_schema_compile(NULL, 0, &r->json);
    } else if (strcmp(t->valuestring, "json_schema") == 0) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
        if (!cJSON_IsObject(js))
            return BAD("response_format", "'response_format' of type json_schema needs a 'json_schema' object "
                       "({\"name\": ..., \"schema\": {...}})");
        for (const cJSON *m = js->child; m; m = m->next)
            if (!m->string || (strcmp(m->string, "name") && strcmp(m->string, "schema") && strcmp(m->string, "strict") &&
                               strcmp(m->string, "description")))
                return BAD("response_format", "unknown field '%.64s' in 'response_format.json_schema'",
                           m->string ? m->string : "");
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(js, "schema");
        if (!cJSON_IsObject(sc) && !cJSON_IsBool(sc))
            return BAD("response_format", "'response_format.json_schema.schema' must be a JSON Schema object");
        char *text = cJSON_PrintUnformatted(sc);
        if (!text) return BAD("response_format", "out of memory");
        st = dcp_json_schema_compile(text, strlen(text), &r->json);
        free(text);
    } else {
        return BAD("response_format", "'response_format' type '%.32s' is not supported (text, json_object, "
                   "json_schema)", t->valuestring);
    }
    if (st != DCP_OK) return BAD("response_format", "'response_format': %s", dcp_last_error());
    r->er.sampling.json = r->json;
    r->er.sampling.json_vocab = h->json_vocab;
    return 0;
}

/* "logit_bias": {"token id": bias in [-100, 100], ...} (at most 1024), into r->bias. */
static int parse_logit_bias(serve_hub *h, const cJSON *j, serve_req *r, serve_error *err)
{
    const cJSON *b = field(j, "logit_bias");
    if (!b) return 0;
    if (!cJSON_IsObject(b))
        return BAD("logit_bias", "'logit_bias' must be an object mapping token ids to biases in [-100, 100]");
    const int n = cJSON_GetArraySize(b);
    if (n > 1024) return BAD("logit_bias", "'logit_bias' has %d entries; at most 1024", n);
    if (n == 0) return 0;
    if (!(r->bias = calloc((size_t)n, sizeof *r->bias))) return BAD("logit_bias", "out of memory");
    const uint32_t V = dcp_tokenizer_n_vocab(h->tok);
    int i = 0;
    for (const cJSON *x = b->child; x; x = x->next, i++) {
        const char *k = x->string ? x->string : "";
        char *end = NULL;
        long t = strtol(k, &end, 10);
        if (!k[0] || *end || k[0] == '-' || k[0] == '+' || k[0] == ' ' || t < 0 || (unsigned long)t >= V)
            return BAD("logit_bias", "'logit_bias' key '%.32s' is not a token id in [0, %u)", k, V);
        if (!cJSON_IsNumber(x) || !(x->valuedouble >= -100.0 && x->valuedouble <= 100.0))
            return BAD("logit_bias", "'logit_bias' value for token %ld must be a number in [-100, 100]", t);
        r->bias[i] = (dcp_logit_bias){(int32_t)t, (float)x->valuedouble};
    }
    r->er.sampling.logit_bias = r->bias;
    r->er.sampling.n_logit_bias = (uint32_t)n;
    return 0;
}

/* A seed from the kernel's random source (seed -1). */
static uint64_t random_seed(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) { /* no entropy source: the clock */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        v = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    }
    return v;
}

/* ---- the fields a request may carry ------------------------------------------------------------ */

enum { FOR_COMPLETIONS = 1, FOR_CHAT = 2, FOR_BOTH = 3 };

/* The fields serve_api_parse reads, by endpoint. A field in neither this table nor `refused` is
 * refused as unknown; null counts as absent for these and for `refused`. */
static const struct {
    const char *name;
    unsigned kinds;
} implemented[] = {
    {"model", FOR_BOTH},       {"prompt", FOR_COMPLETIONS},     {"messages", FOR_CHAT},
    {"max_tokens", FOR_BOTH},  {"max_completion_tokens", FOR_CHAT}, {"temperature", FOR_BOTH},
    {"top_p", FOR_BOTH},       {"top_k", FOR_BOTH},             {"seed", FOR_BOTH},
    {"stream", FOR_BOTH},      {"stream_options", FOR_BOTH},    {"stop", FOR_BOTH},
    {"ignore_eos", FOR_BOTH},  {"user", FOR_BOTH} /* an end-user id: no effect on the output */,
    {"min_p", FOR_BOTH},       {"logit_bias", FOR_BOTH},        {"presence_penalty", FOR_BOTH},
    {"frequency_penalty", FOR_BOTH}, {"repetition_penalty", FOR_BOTH}, {"min_tokens", FOR_BOTH},
    {"stop_token_ids", FOR_BOTH}, {"include_stop_str_in_output", FOR_BOTH},
    {"logprobs", FOR_BOTH} /* completions: an integer 0 .. 20; chat: a bool */, {"top_logprobs", FOR_CHAT},
    {"echo", FOR_COMPLETIONS}, {"prompt_logprobs", FOR_BOTH} /* -1 .. 20 */,
    {"n", FOR_BOTH} /* choices, 1 .. DCP_ENGINE_MAX_CHOICES */,
    {"response_format", FOR_BOTH} /* text, json_object, json_schema */,
};

/* The value of a refused field that asks for nothing (what this server does anyway). */
typedef enum neutral {
    NEUTRAL_NONE = 0, /* any value is refused */
    NEUTRAL_FALSE,    /* false */
    NEUTRAL_ZERO,     /* 0 */
    NEUTRAL_ONE,      /* 1 */
    NEUTRAL_EMPTY,    /* "", [] or {} */
} neutral;

/* Parameters of the OpenAI, vLLM and llama.cpp APIs that would change the output and that this
 * server does not implement (yet): a request giving one is refused with a 400 naming it, unless it
 * gives the neutral value. Implementing one is taking its line out of this table, adding it to
 * `implemented` and reading it in serve_api_parse. */
static const struct {
    const char *name;
    unsigned kinds;
    neutral ok;
    const char *what;
} refused[] = {
    {"best_of", FOR_COMPLETIONS, NEUTRAL_ONE, "best-of sampling"},
    {"use_beam_search", FOR_BOTH, NEUTRAL_FALSE, "beam search"},
    {"length_penalty", FOR_BOTH, NEUTRAL_ONE, "beam search"},
    {"suffix", FOR_COMPLETIONS, NEUTRAL_EMPTY, "text after the completion (insertion)"},
    {"top_logprobs", FOR_COMPLETIONS, NEUTRAL_ZERO, "chat's form of logprobs; completions take \"logprobs\": N"},
    {"typical_p", FOR_BOTH, NEUTRAL_ONE, "locally typical sampling"},
    {"skip_special_tokens", FOR_BOTH, NEUTRAL_NONE, "a choice of special-token output"},
    {"spaces_between_special_tokens", FOR_BOTH, NEUTRAL_NONE, "a choice of special-token output"},
    {"truncate_prompt_tokens", FOR_BOTH, NEUTRAL_NONE, "prompt truncation"},
    {"grammar", FOR_BOTH, NEUTRAL_NONE, "grammar-constrained output"},
    {"json_schema", FOR_BOTH, NEUTRAL_NONE, "structured output"},
    {"guided_json", FOR_BOTH, NEUTRAL_NONE, "structured output"},
    {"guided_regex", FOR_BOTH, NEUTRAL_NONE, "structured output"},
    {"guided_choice", FOR_BOTH, NEUTRAL_NONE, "structured output"},
    {"guided_grammar", FOR_BOTH, NEUTRAL_NONE, "structured output"},
    {"guided_decoding_backend", FOR_BOTH, NEUTRAL_NONE, "structured output"},
    {"tools", FOR_BOTH, NEUTRAL_EMPTY, "tool calls"},
    {"tool_choice", FOR_BOTH, NEUTRAL_NONE, "tool calls"},
    {"parallel_tool_calls", FOR_BOTH, NEUTRAL_NONE, "tool calls"},
    {"functions", FOR_BOTH, NEUTRAL_EMPTY, "function calls"},
    {"function_call", FOR_BOTH, NEUTRAL_NONE, "function calls"},
    {"chat_template", FOR_CHAT, NEUTRAL_NONE, "a per-request chat template (see --chat-template)"},
    {"chat_template_kwargs", FOR_CHAT, NEUTRAL_NONE, "chat template arguments"},
    {"add_generation_prompt", FOR_CHAT, NEUTRAL_NONE, "a choice of generation prompt"},
    {"continue_final_message", FOR_CHAT, NEUTRAL_NONE, "continuing the last message"},
    {"reasoning_effort", FOR_CHAT, NEUTRAL_NONE, "reasoning controls"},
    {"modalities", FOR_CHAT, NEUTRAL_NONE, "other output modalities"},
    {"audio", FOR_CHAT, NEUTRAL_NONE, "audio output"},
    {"prediction", FOR_CHAT, NEUTRAL_NONE, "predicted outputs"},
};

static bool is_neutral(const cJSON *v, neutral ok)
{
    switch (ok) {
    case NEUTRAL_FALSE: return cJSON_IsFalse(v);
    case NEUTRAL_ZERO: return cJSON_IsNumber(v) && v->valuedouble == 0.0;
    case NEUTRAL_ONE: return cJSON_IsNumber(v) && v->valuedouble == 1.0;
    case NEUTRAL_EMPTY:
        return (cJSON_IsString(v) && !v->valuestring[0]) || ((cJSON_IsArray(v) || cJSON_IsObject(v)) && !v->child);
    default: return false;
    }
}

/* Every top-level field: implemented for this endpoint, or refused by name (unknown, given twice,
 * or in `refused` with a value that is not neutral). */
static int check_fields(const cJSON *j, serve_kind kind, serve_error *err)
{
    const unsigned k = kind == SERVE_CHAT ? FOR_CHAT : FOR_COMPLETIONS;
    int n = 0;
    for (const cJSON *f = j->child; f; f = f->next, n++) {
        const char *name = f->string ? f->string : "";
        if (n >= 64) return BAD(NULL, "the body has more than 64 fields");
        for (const cJSON *g = j->child; g != f; g = g->next)
            if (g->string && strcmp(g->string, name) == 0) return BAD(name, "'%.64s' is given twice", name);
        bool known = false;
        for (size_t i = 0; i < sizeof implemented / sizeof implemented[0] && !known; i++)
            known = (implemented[i].kinds & k) && strcmp(implemented[i].name, name) == 0;
        if (known) continue;
        for (size_t i = 0; i < sizeof refused / sizeof refused[0] && !known; i++) {
            if (!(refused[i].kinds & k) || strcmp(refused[i].name, name) != 0) continue;
            known = true;
            if (!cJSON_IsNull(f) && !is_neutral(f, refused[i].ok))
                return BAD(name, "'%s' is not supported by this server (%s); leave it out", name, refused[i].what);
        }
        if (!known)
            return BAD(name, "unknown field '%.64s' for %s (this server reads: %s)", name,
                       kind == SERVE_CHAT ? "/v1/chat/completions" : "/v1/completions",
                       kind == SERVE_CHAT ? "model, messages, max_tokens, max_completion_tokens, temperature, top_p, "
                                            "top_k, min_p, seed, logit_bias, presence_penalty, frequency_penalty, "
                                            "repetition_penalty, min_tokens, stream, stream_options, stop, "
                                            "stop_token_ids, include_stop_str_in_output, ignore_eos, logprobs, "
                                            "top_logprobs, prompt_logprobs, response_format, user"
                                          : "model, prompt, max_tokens, temperature, top_p, top_k, min_p, seed, "
                                            "logit_bias, presence_penalty, frequency_penalty, repetition_penalty, "
                                            "min_tokens, stream, stream_options, stop, stop_token_ids, "
                                            "include_stop_str_in_output, ignore_eos, logprobs, echo, "
                                            "prompt_logprobs, response_format, user");
    }
    return 0;
}

/* The first NUL that a parsed string would hold: a \u0000 escape in the JSON text s[0, n) (valid
 * JSON: cJSON parsed it, and would end the string there). Returns its offset, or -1; key receives
 * the top-level field it is in (its raw text, cut to cap). */
static long nul_escape(const char *s, size_t n, char *key, size_t cap)
{
    int depth = 0;
    bool in_str = false, key_next = false, str_is_key = false;
    size_t start = 0;
    key[0] = 0;
    for (size_t i = 0; i < n; i++) {
        const char c = s[i];
        if (in_str) {
            if (c == '\\') {
                if (i + 5 < n && memcmp(s + i + 1, "u0000", 5) == 0) {
                    if (str_is_key) snprintf(key, cap, "%.*s", (int)(i - start), s + start);
                    return (long)i;
                }
                i++; /* the escaped character */
            } else if (c == '"') {
                in_str = false;
                if (str_is_key) snprintf(key, cap, "%.*s", (int)(i - start), s + start);
            }
            continue;
        }
        if (c == '"') {
            in_str = true;
            start = i + 1;
            str_is_key = depth == 1 && key_next;
        } else if (c == '{' || c == '[') {
            key_next = ++depth == 1;
        } else if (c == '}' || c == ']') {
            depth--;
        } else if (depth == 1 && (c == ',' || c == ':')) {
            key_next = c == ',';
        }
    }
    return -1;
}

int serve_api_parse(serve_hub *h, serve_kind kind, const char *body, size_t len, serve_req *r, serve_error *err)
{
    const serve_options *o = h->o;
    const char *nul = memchr(body, 0, len);
    if (nul) return BAD(NULL, "the body holds a NUL byte at offset %zu", (size_t)(nul - body));
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    int rc = -1;
    if (!j) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return BAD(NULL, "could not parse the JSON body (error near byte %zu of %zu)", at, len);
    }
    size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : len;
    while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' || body[at] == '\r')) at++;
    if (at < len) {
        BAD(NULL, "the body holds more than one JSON value: data after the object at byte %zu of %zu", at, len);
        goto done;
    }
    if (!cJSON_IsObject(j)) {
        BAD(NULL, "the body must be a JSON object");
        goto done;
    }
    char key[72];
    long z = nul_escape(body, len, key, sizeof key);
    if (z >= 0) { /* cJSON would cut the string there */
        BAD(key, "a string holds \\u0000 (NUL) at byte %ld; NUL is not allowed in any string", z);
        goto done;
    }
    r->kind = kind;
    if (check_fields(j, kind, err)) goto done;
    const cJSON *v;
    if ((v = field(j, "model"))) {
        if (!cJSON_IsString(v)) {
            BAD("model", "'model' must be a string");
            goto done;
        }
        if (strcmp(v->valuestring, h->model_name)) {
            serve_error_set(err, 404, "invalid_request_error", "model", "model_not_found",
                            "The model '%.200s' does not exist; this server serves '%.200s'", v->valuestring,
                            h->model_name);
            goto done;
        }
    }
    if ((v = field(j, "stream"))) {
        if (!cJSON_IsBool(v)) {
            BAD("stream", "'stream' must be true or false");
            goto done;
        }
        r->stream = cJSON_IsTrue(v);
    }
    if ((v = field(j, "stream_options"))) {
        if (!r->stream) { /* as vLLM */
            BAD("stream_options", "'stream_options' is only allowed with \"stream\": true");
            goto done;
        }
        const cJSON *u = cJSON_IsObject(v) ? field(v, "include_usage") : NULL;
        if (!cJSON_IsObject(v) || (u && !cJSON_IsBool(u))) {
            BAD("stream_options", "'stream_options' must be an object {\"include_usage\": bool}");
            goto done;
        }
        r->include_usage = u && cJSON_IsTrue(u);
    }
    dcp_engine_request er = DCP_ENGINE_REQUEST_DEFAULT;
    er.sampling.temperature = o->run.temp;
    er.sampling.top_k = o->run.top_k;
    er.sampling.top_p = o->run.top_p;
    er.sampling.seed = o->run.seed + r->number;
    long long k;
    if ((v = field(j, "temperature"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0.0 && v->valuedouble <= 100.0)) {
            BAD("temperature", "'temperature' must be a number in [0, 100] (0: greedy)");
            goto done;
        }
        er.sampling.temperature = (float)v->valuedouble;
    }
    if ((v = field(j, "top_p"))) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble > 0.0 && v->valuedouble <= 1.0)) {
            BAD("top_p", "'top_p' must be a number in (0, 1]");
            goto done;
        }
        er.sampling.top_p = (float)v->valuedouble;
    }
    if ((v = field(j, "top_k"))) {
        if (get_int(v, -1, 1e9, &k)) {
            BAD("top_k", "'top_k' must be an integer >= -1 (-1 or 0: all tokens)");
            goto done;
        }
        er.sampling.top_k = k < 0 ? 0 : (uint32_t)k;
    }
    if ((v = field(j, "seed"))) {
        if (get_int(v, -1, 9.2e18, &k)) {
            BAD("seed", "'seed' must be an integer >= 0, or -1 for a random seed");
            goto done;
        }
        er.sampling.seed = k >= 0 ? (uint64_t)k : random_seed(); /* -1: random, as llama.cpp */
    }
    if ((v = field(j, "ignore_eos"))) {
        if (!cJSON_IsBool(v)) {
            BAD("ignore_eos", "'ignore_eos' must be true or false");
            goto done;
        }
        er.ignore_eos = cJSON_IsTrue(v);
    }
    /* vLLM's ranges (and OpenAI's for the presence and frequency penalties). */
    static const struct {
        const char *name;
        double lo, hi;
        bool lo_open;
        const char *range;
    } nums[] = {{"min_p", 0.0, 1.0, false, "[0, 1]"},
                {"presence_penalty", -2.0, 2.0, false, "[-2, 2]"},
                {"frequency_penalty", -2.0, 2.0, false, "[-2, 2]"},
                {"repetition_penalty", 0.0, 1e30, true, "> 0 (1: none)"}};
    float *dst[] = {&er.sampling.min_p, &er.sampling.presence_penalty, &er.sampling.frequency_penalty,
                    &er.sampling.repetition_penalty};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        if (!(v = field(j, nums[i].name))) continue;
        const double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
        if (!(d >= nums[i].lo && d <= nums[i].hi) || (nums[i].lo_open && d == nums[i].lo)) {
            BAD(nums[i].name, "'%s' must be a number %s%s", nums[i].name, nums[i].range[0] == '[' ? "in " : "",
                nums[i].range);
            goto done;
        }
        *dst[i] = (float)d;
    }
    long long min_tokens = 0;
    if ((v = field(j, "min_tokens")) && get_int(v, 0, 1e12, &min_tokens)) {
        BAD("min_tokens", "'min_tokens' must be an integer >= 0");
        goto done;
    }
    if ((v = field(j, "include_stop_str_in_output"))) {
        if (!cJSON_IsBool(v)) {
            BAD("include_stop_str_in_output", "'include_stop_str_in_output' must be true or false");
            goto done;
        }
        er.include_stop_str_in_output = cJSON_IsTrue(v);
    }
    /* logprobs: completions' integer (the alternatives wanted; 0: the chosen token's only), chat's
     * bool with top_logprobs (OpenAI's and vLLM's limit of 20) */
    if ((v = field(j, "logprobs")) && !cJSON_IsNull(v)) {
        if (kind == SERVE_CHAT) {
            if (!cJSON_IsBool(v)) {
                BAD("logprobs", "'logprobs' must be true or false (the alternatives: top_logprobs)");
                goto done;
            }
            er.logprobs = cJSON_IsTrue(v);
        } else {
            if (get_int(v, 0, DCP_ENGINE_MAX_LOGPROBS, &k)) {
                BAD("logprobs", "'logprobs' must be an integer in [0, %d] (the most likely tokens shown with each)",
                    DCP_ENGINE_MAX_LOGPROBS);
                goto done;
            }
            er.logprobs = true;
            er.top_logprobs = (uint32_t)k;
        }
    }
    /* echo (completions): the prompt's text first, and with logprobs its tokens' entries first (the
     * first without a logprob, OpenAI's legacy form); prompt_logprobs: vLLM's per-token dicts */
    r->prompt_lp = -1;
    if ((v = field(j, "echo"))) {
        if (!cJSON_IsBool(v)) {
            BAD("echo", "'echo' must be true or false");
            goto done;
        }
        r->echo = cJSON_IsTrue(v);
    }
    if ((v = field(j, "prompt_logprobs")) && !cJSON_IsNull(v)) {
        if (get_int(v, -1, DCP_ENGINE_MAX_LOGPROBS, &k)) {
            BAD("prompt_logprobs", "'prompt_logprobs' must be an integer in [-1, %d] (the most likely tokens shown "
                                   "with each prompt token; -1: the whole vocabulary)", DCP_ENGINE_MAX_LOGPROBS);
            goto done;
        }
        r->prompt_lp = k < 0 ? SERVE_PLP_ALL : (int32_t)k;
    }
    if (r->prompt_lp >= 0 || (r->echo && er.logprobs)) {
        er.prompt_logprobs = true;
        er.prompt_top_logprobs = r->prompt_lp == SERVE_PLP_ALL ? DCP_ENGINE_PROMPT_LOGPROBS_ALL
                                 : r->prompt_lp > 0            ? (uint32_t)r->prompt_lp
                                                               : 0;
        if (r->echo && er.logprobs && er.top_logprobs > er.prompt_top_logprobs) er.prompt_top_logprobs = er.top_logprobs;
    }
    if (kind == SERVE_CHAT && (v = field(j, "top_logprobs")) && !cJSON_IsNull(v)) {
        if (get_int(v, 0, DCP_ENGINE_MAX_LOGPROBS, &k)) {
            BAD("top_logprobs", "'top_logprobs' must be an integer in [0, %d]", DCP_ENGINE_MAX_LOGPROBS);
            goto done;
        }
        if (k > 0 && !er.logprobs) {
            BAD("top_logprobs", "'top_logprobs' needs \"logprobs\": true");
            goto done;
        }
        er.top_logprobs = (uint32_t)k;
    }
    const char *mt_name = "max_tokens";
    v = field(j, "max_tokens");
    if (!v && kind == SERVE_CHAT && (v = field(j, "max_completion_tokens"))) mt_name = "max_completion_tokens";
    long long max_tokens = -1;
    const bool prompt_only = r->echo || r->prompt_lp >= 0; /* max_tokens 0: the prompt alone */
    if (v && get_int(v, prompt_only ? 0 : 1, 1e12, &max_tokens)) {
        BAD(mt_name, "'%s' must be an integer >= %d", mt_name, prompt_only ? 0 : 1);
        goto done;
    }
    if (max_tokens > (long long)h->max_tokens_limit) {
        BAD(mt_name, "'%s' is %lld; this server allows at most %u (--max-tokens-limit)", mt_name, max_tokens,
            h->max_tokens_limit);
        goto done;
    }
    long long n_choices = 1;
    if ((v = field(j, "n")) && get_int(v, 1, DCP_ENGINE_MAX_CHOICES, &n_choices)) {
        BAD("n", "'n' must be an integer in [1, %d] (choices per request)", DCP_ENGINE_MAX_CHOICES);
        goto done;
    }
    if (n_choices > 1 && (r->echo || r->prompt_lp >= 0)) {
        BAD("n", "'n' is %lld; echo and prompt_logprobs take one choice (n: 1)", n_choices);
        goto done;
    }
    er.n = (uint32_t)n_choices;
    r->er = er;
    if (parse_stop(j, r, err) || parse_stop_token_ids(h, j, r, err) || parse_logit_bias(h, j, r, err) ||
        parse_response_format(h, j, r, err))
        goto done;
    if ((kind == SERVE_CHAT ? chat_prompt(h, j, r, err) : completion_prompt(h, j, r, err))) goto done;
    if (r->n_prompt == 0) { /* an empty text without BOS */
        int32_t bos = dcp_tokenizer_bos(h->tok);
        free(r->prompt);
        if (!(r->prompt = malloc(sizeof *r->prompt))) {
            BAD("prompt", "out of memory");
            goto done;
        }
        r->prompt[0] = bos >= 0 ? bos : 0;
        r->n_prompt = 1;
    }
    if (r->n_prompt > h->max_prompt) {
        serve_error_set(err, 400, "invalid_request_error", kind == SERVE_CHAT ? "messages" : "prompt",
                        "context_length_exceeded", "the prompt is %u tokens; this server allows at most %u%s",
                        r->n_prompt, h->max_prompt, h->max_prompt < h->n_ctx ? " (--max-prompt-tokens)" : "");
        goto done;
    }
    if (r->prompt_lp == SERVE_PLP_ALL) { /* n_vocab entries per prompt token: bounded */
        const uint64_t V = dcp_tokenizer_n_vocab(h->tok), entries = (uint64_t)r->n_prompt * V;
        if (entries > o->max_plp_entries) {
            BAD("prompt_logprobs", "'prompt_logprobs' -1 asks for %u prompt tokens x %llu vocabulary = %llu entries; "
                                   "this server allows at most %u (--max-prompt-logprobs-entries): use 0 .. %d or "
                                   "a shorter prompt", r->n_prompt, (unsigned long long)V, (unsigned long long)entries,
                o->max_plp_entries, DCP_ENGINE_MAX_LOGPROBS);
            goto done;
        }
    }
    if (max_tokens < 0) { /* the default, within the context */
        max_tokens = o->run.n_predict;
        if (max_tokens > (long long)h->n_ctx - r->n_prompt) max_tokens = (long long)h->n_ctx - r->n_prompt;
        if (max_tokens > (long long)h->max_tokens_limit) max_tokens = h->max_tokens_limit;
    }
    if ((max_tokens == 0 && !prompt_only) || max_tokens < 0 || (long long)r->n_prompt + max_tokens > (long long)h->n_ctx) {
        serve_error_set(err, 400, "invalid_request_error", mt_name, "context_length_exceeded",
                        "This model's maximum context length is %u tokens. However, you requested %lld tokens "
                        "(%u in the prompt, %lld for the completion). Please reduce the prompt or %s.",
                        h->n_ctx, (long long)r->n_prompt + (max_tokens > 0 ? max_tokens : 0), r->n_prompt,
                        max_tokens > 0 ? max_tokens : 0, mt_name);
        goto done;
    }
    r->er.prompt = r->prompt;
    r->er.n_prompt = r->n_prompt;
    r->er.max_tokens = (uint32_t)max_tokens;
    if (min_tokens > max_tokens) {
        BAD("min_tokens", "'min_tokens' is %lld; it must not exceed %s (%lld)", min_tokens, mt_name, max_tokens);
        goto done;
    }
    r->er.sampling.min_tokens = (uint32_t)min_tokens;
    if (kind == SERVE_CHAT && h->chat_eot >= 0) r->stop_tokens[r->er.n_stop_tokens++] = h->chat_eot;
    /* The text continues the prompt: keep the first piece's leading space unless the prompt is BOS. */
    const int32_t bos = dcp_tokenizer_bos(h->tok);
    r->er.decode_flags = (r->n_prompt > 1 || r->prompt[0] != bos) ? DCP_DECODE_KEEP_LEADING_SPACE : 0;
    r->er.user = r;
    r->n_choices = 1;
    for (uint32_t i = 1; i < r->er.n; i++) { /* the other choices' outputs */
        serve_req *c = serve_req_new();
        if (!c) {
            BAD("n", "out of memory");
            goto done;
        }
        c->kind = kind;
        c->index = i;
        c->parent = r;
        r->choice[r->n_choices++ - 1] = c;
    }
    rc = 0;
done:
    cJSON_Delete(j);
    return rc;
}

const char *serve_api_finish_reason(dcp_engine_finish f)
{
    switch (f) {
    case DCP_ENGINE_FINISH_STOP: return "stop";
    case DCP_ENGINE_FINISH_LENGTH: return "length";
    case DCP_ENGINE_FINISH_CANCELLED: return "abort";
    case DCP_ENGINE_FINISH_ERROR: return "error";
    default: return NULL;
    }
}

static cJSON *envelope(const serve_hub *h, const serve_req *r, const char *object)
{
    if (r->parent) r = r->parent; /* a choice: the request's id and time */
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", h->model_name);
    return o;
}

static void add_usage(cJSON *o, const serve_req *r)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", r->n_prompt);
    uint32_t completion = 0; /* summed over the choices; the prompt counts once */
    for (uint32_t i = 0; i < (r->n_choices ? r->n_choices : 1); i++) completion += serve_choice(r, i)->completion_tokens;
    cJSON_AddNumberToObject(u, "completion_tokens", completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)r->n_prompt + completion);
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", r->cached_tokens);
}

/* A cJSON string of n bytes (the text is not NUL-terminated where it is cut). */
static cJSON *string_n(const char *s, size_t n)
{
    char *c = malloc(n + 1);
    if (!c) return cJSON_CreateNull();
    memcpy(c, s, n);
    c[n] = 0;
    cJSON *v = cJSON_CreateString(c);
    free(c);
    return v;
}

/* ---- logprobs ------------------------------------------------------------------------------------ */

/* A log-probability for JSON: -inf (a token top-k, top-p or min-p cut) as vLLM writes it. */
static double lp_value(float lp) { return isinf(lp) || lp < -9999.0f ? -9999.0 : (double)lp; }

/* The text of alternative id of entry x: the chosen token's piece, else the token decoded alone
 * (its leading space kept), valid UTF-8; malloc'd. */
static char *alt_text(const serve_hub *h, const serve_lp *x, int32_t id)
{
    if (id == x->token) return strdup(x->piece);
    char *t = NULL;
    size_t n = 0;
    if (dcp_tokenizer_decode(h->tok, &id, 1, DCP_DECODE_KEEP_LEADING_SPACE, &t, &n) != DCP_OK) return strdup("");
    char *u = serve_utf8(t, n);
    free(t);
    return u;
}

static cJSON *bytes_of(const char *s)
{
    cJSON *a = cJSON_CreateArray();
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) cJSON_AddItemToArray(a, cJSON_CreateNumber(*p));
    return a;
}

/* Characters (code points) of the prompt's pieces: where the generated tokens' text_offset starts
 * after an echoed prompt. */
static size_t prompt_chars(const serve_req *r)
{
    if (!r->n_plps) return 0;
    const serve_lp *y = &r->plps[r->n_plps - 1];
    size_t n = y->offset;
    for (size_t i = 0; i < y->piece_len; i++) n += ((unsigned char)y->piece[i] & 0xC0) != 0x80;
    return n;
}

/* One entry of completions' logprobs: x's text, logprob, {text: logprob} of its n_show most likely
 * and itself (both null for a prompt's first token), text offset. */
static void completion_entry(const serve_hub *h, cJSON *toks, cJSON *lps, cJSON *tops, cJSON *offs, const serve_lp *x,
                             uint32_t n_show, size_t offset)
{
    cJSON_AddItemToArray(toks, cJSON_CreateString(x->piece));
    cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)offset));
    if (!x->has_lp) {
        cJSON_AddItemToArray(lps, cJSON_CreateNull());
        cJSON_AddItemToArray(tops, cJSON_CreateNull());
        return;
    }
    cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp_value(x->logprob)));
    if (n_show > x->n_top) n_show = x->n_top;
    cJSON *t = cJSON_CreateObject();
    bool chosen = false;
    for (uint32_t k = 0; k <= n_show; k++) { /* the chosen one last unless among them */
        if (k == n_show && chosen) break;
        const int32_t id = k < n_show ? x->top_ids[k] : x->token;
        const float lp = k < n_show ? x->top_lps[k] : x->logprob;
        chosen |= id == x->token;
        char *text = alt_text(h, x, id);
        if (text && !cJSON_GetObjectItemCaseSensitive(t, text)) /* two ids of one text: the likelier */
            cJSON_AddNumberToObject(t, text, lp_value(lp));
        free(text);
    }
    cJSON_AddItemToArray(tops, t);
}

/* Completions' logprobs: with_prompt: the prompt's entries first (echo); then the generated ones
 * [from, to) (their offsets after the prompt's characters when it is echoed): {tokens,
 * token_logprobs, top_logprobs (a {text: logprob} object of the n_top most likely and the chosen
 * token), text_offset}. */
static cJSON *completion_logprobs(const serve_hub *h, const serve_req *r, bool with_prompt, size_t from, size_t to)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens"), *lps = cJSON_AddArrayToObject(o, "token_logprobs"),
          *tops = cJSON_AddArrayToObject(o, "top_logprobs"), *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (size_t i = 0; with_prompt && i < r->n_plps; i++)
        completion_entry(h, toks, lps, tops, offs, &r->plps[i], r->er.top_logprobs, r->plps[i].offset);
    const size_t base = r->echo ? prompt_chars(r) : 0;
    for (size_t i = from; i < to; i++)
        completion_entry(h, toks, lps, tops, offs, &r->lps[i], r->lps[i].n_top, base + r->lps[i].offset);
    return o;
}

/* vLLM's prompt_logprobs: [null, {"<id>": {logprob, rank, decoded_token}, ...}, ...]: per prompt
 * token after the first, the token itself first (its rank: 1 + the tokens more likely), then the
 * prompt_lp most likely (rank 1, 2, ...; with -1 the whole vocabulary). */
static cJSON *vllm_prompt_logprobs(const serve_hub *h, const serve_req *r)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < r->n_plps; i++) {
        const serve_lp *x = &r->plps[i];
        if (!x->has_lp) {
            cJSON_AddItemToArray(a, cJSON_CreateNull());
            continue;
        }
        cJSON *d = cJSON_CreateObject();
        const int32_t *ids = x->n_all ? x->all_ids : x->top_ids;
        const float *lps = x->n_all ? x->all_lps : x->top_lps;
        const uint32_t n = x->n_all ? x->n_all : x->n_top;
        const uint32_t k = (uint32_t)r->prompt_lp < n ? (uint32_t)r->prompt_lp : n;
        for (uint32_t j = 0; j <= k; j++) {
            const int32_t id = j == 0 ? x->token : ids[j - 1];
            if (j > 0 && id == x->token) continue;
            char key[16], *text = alt_text(h, x, id);
            snprintf(key, sizeof key, "%d", id);
            cJSON *e = cJSON_AddObjectToObject(d, key);
            cJSON_AddNumberToObject(e, "logprob", lp_value(j == 0 ? x->logprob : lps[j - 1]));
            cJSON_AddNumberToObject(e, "rank", j == 0 ? x->rank : j);
            cJSON_AddStringToObject(e, "decoded_token", text ? text : "");
            free(text);
        }
        cJSON_AddItemToArray(a, d);
    }
    return a;
}

/* Chat's logprobs of entries [from, to): {content: [{token, logprob, bytes, top_logprobs: [{token,
 * logprob, bytes}] (the n_top most likely)}]}. */
static cJSON *chat_logprobs(const serve_hub *h, const serve_req *r, size_t from, size_t to)
{
    cJSON *o = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(o, "content");
    for (size_t i = from; i < to; i++) {
        const serve_lp *x = &r->lps[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddStringToObject(c, "token", x->piece);
        cJSON_AddNumberToObject(c, "logprob", lp_value(x->logprob));
        cJSON_AddItemToObject(c, "bytes", bytes_of(x->piece));
        cJSON *tops = cJSON_AddArrayToObject(c, "top_logprobs");
        for (uint32_t k = 0; k < x->n_top; k++) {
            char *text = alt_text(h, x, x->top_ids[k]);
            cJSON *t = cJSON_CreateObject();
            cJSON_AddStringToObject(t, "token", text ? text : "");
            cJSON_AddNumberToObject(t, "logprob", lp_value(x->top_lps[k]));
            cJSON_AddItemToObject(t, "bytes", bytes_of(text ? text : ""));
            free(text);
            cJSON_AddItemToArray(tops, t);
        }
        cJSON_AddItemToArray(content, c);
    }
    return o;
}

/* choice.logprobs: null without logprobs (or, in a stream, without entries in [from, to) and
 * without the prompt's); with_prompt: an echoed prompt's entries first. */
static void add_logprobs(const serve_hub *h, const serve_req *r, cJSON *choice, size_t from, size_t to, bool stream,
                         bool with_prompt)
{
    with_prompt = with_prompt && r->echo && r->kind == SERVE_COMPLETION;
    if (!(r->parent ? r->parent : r)->er.logprobs || (stream && from >= to && !with_prompt)) {
        cJSON_AddNullToObject(choice, "logprobs");
        return;
    }
    cJSON_AddItemToObject(choice, "logprobs", r->kind == SERVE_CHAT ? chat_logprobs(h, r, from, to)
                                                                     : completion_logprobs(h, r, with_prompt, from, to));
}

static void add_finish(cJSON *choice, dcp_engine_finish f)
{
    const char *why = serve_api_finish_reason(f);
    why ? (void)cJSON_AddStringToObject(choice, "finish_reason", why) : (void)cJSON_AddNullToObject(choice, "finish_reason");
}

static char *print_free(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

char *serve_api_response(const serve_hub *h, const serve_req *r)
{
    const bool chat = r->kind == SERVE_CHAT;
    cJSON *o = envelope(h, r, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (uint32_t i = 0; i < (r->n_choices ? r->n_choices : 1); i++) {
        const serve_req *x = serve_choice(r, i);
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON_AddNumberToObject(c, "index", i);
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddItemToObject(m, "content", string_n(x->text ? x->text : "", x->text_len));
        } else {
            /* echo (n is 1 then): the prompt's text, then the completion's */
            char *t = malloc(x->echo_len + x->text_len + 1);
            if (t) {
                if (x->echo_len) memcpy(t, x->echo_text, x->echo_len);
                if (x->text_len) memcpy(t + x->echo_len, x->text, x->text_len);
            }
            cJSON_AddItemToObject(c, "text", t ? string_n(t, x->echo_len + x->text_len) : cJSON_CreateNull());
            free(t);
        }
        add_logprobs(h, x, c, 0, x->n_lps, false, true);
        if (x->prompt_lp >= 0 && !chat) cJSON_AddItemToObject(c, "prompt_logprobs", vllm_prompt_logprobs(h, x));
        add_finish(c, x->finish);
    }
    add_usage(o, r);
    /* chat: beside the choices (vLLM's ChatCompletionResponse.prompt_logprobs) */
    if (chat && r->prompt_lp >= 0) cJSON_AddItemToObject(o, "prompt_logprobs", vllm_prompt_logprobs(h, r));
    return print_free(o);
}

/* "data: <json>\n\n" */
static char *sse(cJSON *o)
{
    char *j = print_free(o);
    if (!j) return NULL;
    size_t n = strlen(j);
    char *s = malloc(n + 9);
    if (s) {
        memcpy(s, "data: ", 6);
        memcpy(s + 6, j, n);
        memcpy(s + 6 + n, "\n\n", 3);
    }
    free(j);
    return s;
}

char *serve_api_chunk(const serve_hub *h, const serve_req *r, const char *delta, size_t n, dcp_engine_finish f)
{
    return serve_api_chunk_lp(h, r, delta, n, f, 0, 0);
}

char *serve_api_chunk_lp(const serve_hub *h, const serve_req *r, const char *delta, size_t n, dcp_engine_finish f,
                         size_t lp_from, size_t lp_to)
{
    const bool chat = r->kind == SERVE_CHAT;
    cJSON *o = envelope(h, r, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", r->index);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (n || f == DCP_ENGINE_FINISH_NONE) cJSON_AddItemToObject(d, "content", string_n(delta, n));
    } else {
        cJSON_AddItemToObject(c, "text", string_n(delta, n));
    }
    add_logprobs(h, r, c, lp_from, lp_to, true, false);
    add_finish(c, f);
    return sse(o);
}

bool serve_api_prompt_pending(const serve_req *r)
{
    return r->er.prompt_logprobs && r->n_plps < r->n_prompt && r->state != SREQ_DONE && r->state != SREQ_REFUSED;
}

char *serve_api_chunk_prompt(const serve_hub *h, const serve_req *r)
{
    cJSON *o = envelope(h, r, "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON_AddItemToObject(c, "text", string_n(r->echo ? r->echo_text : "", r->echo ? r->echo_len : 0));
    add_logprobs(h, r, c, 0, 0, true, true);
    if (r->prompt_lp >= 0) cJSON_AddItemToObject(c, "prompt_logprobs", vllm_prompt_logprobs(h, r));
    add_finish(c, DCP_ENGINE_FINISH_NONE);
    return sse(o);
}

char *serve_api_chunk_role(const serve_hub *h, const serve_req *r)
{
    cJSON *o = envelope(h, r, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", r->index);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    cJSON_AddStringToObject(d, "role", "assistant");
    cJSON_AddStringToObject(d, "content", "");
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
    /* prompt_logprobs (n is 1 then): the first chunk, beside the choices as in a whole response */
    if (!r->parent && r->prompt_lp >= 0) cJSON_AddItemToObject(o, "prompt_logprobs", vllm_prompt_logprobs(h, r));
    return sse(o);
}

char *serve_api_chunk_usage(const serve_hub *h, const serve_req *r)
{
    cJSON *o = envelope(h, r, r->kind == SERVE_CHAT ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    add_usage(o, r);
    return sse(o);
}

char *serve_api_chunk_error(const serve_req *r)
{
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", r->message[0] ? r->message : "generation failed");
    cJSON_AddStringToObject(e, "type", "server_error");
    cJSON_AddNullToObject(e, "param");
    cJSON_AddNullToObject(e, "code");
    return sse(o);
}

static cJSON *model_object(const serve_hub *h)
{
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", h->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "dcp-vk");
    cJSON_AddNumberToObject(m, "max_model_len", h->n_ctx);
    return m;
}

char *serve_api_models(const serve_hub *h)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(data, model_object(h));
    return print_free(o);
}

char *serve_api_model(const serve_hub *h) { return print_free(model_object(h)); }
