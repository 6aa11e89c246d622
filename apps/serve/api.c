/* The OpenAI API's JSON (with cJSON): completions and chat completions bodies checked field by field
 * into an engine request (tokenized prompt, sampling, stops, limits), and the responses: whole
 * objects, server-sent event chunks, errors in OpenAI's shape. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve.h"

void serve_error_set(serve_error *e, unsigned status, const char *type, const char *param, const char *code,
                     const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->param = param;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

char *serve_error_json(const serve_error *e)
{
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    e->param ? (void)cJSON_AddStringToObject(err, "param", e->param) : (void)cJSON_AddNullToObject(err, "param");
    e->code ? (void)cJSON_AddStringToObject(err, "code", e->code) : (void)cJSON_AddNullToObject(err, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

/* A 400 invalid_request_error about param; returns -1. */
static int bad(serve_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(serve_error *err, const char *param, const char *fmt, ...)
{
    err->status = 400;
    err->type = "invalid_request_error";
    err->param = param;
    err->code = NULL;
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
    if (cJSON_IsString(p)) return tokenize(h, p->valuestring, strlen(p->valuestring), false, r, err);
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

/* Fields this server does not implement: refused unless they ask for the default. */
static int unsupported(const cJSON *j, serve_error *err)
{
    const cJSON *v;
    long long k;
    if ((v = field(j, "n")) && (get_int(v, 1, 1, &k)))
        return BAD("n", "'n' must be 1 (one choice per request)");
    if ((v = field(j, "best_of")) && (get_int(v, 1, 1, &k))) return BAD("best_of", "'best_of' must be 1");
    if ((v = field(j, "echo")) && !cJSON_IsFalse(v)) return BAD("echo", "'echo' is not supported");
    if ((v = field(j, "logprobs")) && !cJSON_IsFalse(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0))
        return BAD("logprobs", "'logprobs' is not supported");
    if ((v = field(j, "suffix")) && !(cJSON_IsString(v) && !v->valuestring[0]))
        return BAD("suffix", "'suffix' is not supported");
    if ((v = field(j, "tools")) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
        return BAD("tools", "'tools' is not supported");
    static const char *const penalties[] = {"presence_penalty", "frequency_penalty", "repetition_penalty", NULL};
    for (int i = 0; penalties[i]; i++)
        if ((v = field(j, penalties[i])) &&
            !(cJSON_IsNumber(v) && v->valuedouble == (strcmp(penalties[i], "repetition_penalty") ? 0.0 : 1.0)))
            return BAD(penalties[i], "'%s' is not supported (only its neutral value)", penalties[i]);
    return 0;
}

int serve_api_parse(serve_hub *h, serve_kind kind, const char *body, size_t len, serve_req *r, serve_error *err)
{
    const serve_options *o = h->o;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    int rc = -1;
    if (!j) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        return BAD(NULL, "could not parse the JSON body (error near byte %zu of %zu)", at, len);
    }
    if (!cJSON_IsObject(j)) {
        BAD(NULL, "the body must be a JSON object");
        goto done;
    }
    r->kind = kind;
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
    if (unsupported(j, err)) goto done;
    if ((v = field(j, "stream"))) {
        if (!cJSON_IsBool(v)) {
            BAD("stream", "'stream' must be true or false");
            goto done;
        }
        r->stream = cJSON_IsTrue(v);
    }
    if ((v = field(j, "stream_options"))) {
        const cJSON *u = cJSON_IsObject(v) ? field(v, "include_usage") : NULL;
        if (!cJSON_IsObject(v) || (u && !cJSON_IsBool(u))) {
            BAD("stream_options", "'stream_options' must be an object {\"include_usage\": bool}");
            goto done;
        }
        r->include_usage = u && cJSON_IsTrue(u);
    }
    dcp_engine_request er = DCP_ENGINE_REQUEST_DEFAULT;
    er.sampling = (dcp_sampler_config){o->run.temp, o->run.top_k, o->run.top_p, o->run.seed + r->number};
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
        if (get_int(v, -9.2e18, 9.2e18, &k)) {
            BAD("seed", "'seed' must be an integer");
            goto done;
        }
        er.sampling.seed = (uint64_t)k;
    }
    if ((v = field(j, "ignore_eos"))) {
        if (!cJSON_IsBool(v)) {
            BAD("ignore_eos", "'ignore_eos' must be true or false");
            goto done;
        }
        er.ignore_eos = cJSON_IsTrue(v);
    }
    const char *mt_name = "max_tokens";
    v = field(j, "max_tokens");
    if (!v && kind == SERVE_CHAT && (v = field(j, "max_completion_tokens"))) mt_name = "max_completion_tokens";
    long long max_tokens = -1;
    if (v && get_int(v, 1, 1e12, &max_tokens)) {
        BAD(mt_name, "'%s' must be an integer >= 1", mt_name);
        goto done;
    }
    if (max_tokens > (long long)h->max_tokens_limit) {
        BAD(mt_name, "'%s' is %lld; this server allows at most %u (--max-tokens-limit)", mt_name, max_tokens,
            h->max_tokens_limit);
        goto done;
    }
    r->er = er;
    if (parse_stop(j, r, err)) goto done;
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
        BAD(kind == SERVE_CHAT ? "messages" : "prompt", "the prompt is %u tokens; this server allows at most %u",
            r->n_prompt, h->max_prompt);
        goto done;
    }
    if (max_tokens < 0) { /* the default, within the context */
        max_tokens = o->run.n_predict;
        if (max_tokens > (long long)h->n_ctx - r->n_prompt) max_tokens = (long long)h->n_ctx - r->n_prompt;
        if (max_tokens > (long long)h->max_tokens_limit) max_tokens = h->max_tokens_limit;
    }
    if (max_tokens <= 0 || (long long)r->n_prompt + max_tokens > (long long)h->n_ctx) {
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
    if (kind == SERVE_CHAT && h->chat_eot >= 0) {
        r->stop_tokens[0] = h->chat_eot;
        r->er.stop_tokens = r->stop_tokens;
        r->er.n_stop_tokens = 1;
    }
    /* The text continues the prompt: keep the first piece's leading space unless the prompt is BOS. */
    const int32_t bos = dcp_tokenizer_bos(h->tok);
    r->er.decode_flags = (r->n_prompt > 1 || r->prompt[0] != bos) ? DCP_DECODE_KEEP_LEADING_SPACE : 0;
    r->er.user = r;
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
    cJSON_AddNumberToObject(u, "completion_tokens", r->completion_tokens);
    cJSON_AddNumberToObject(u, "total_tokens", (double)r->n_prompt + r->completion_tokens);
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
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", string_n(r->text ? r->text : "", r->text_len));
    } else {
        cJSON_AddItemToObject(c, "text", string_n(r->text ? r->text : "", r->text_len));
    }
    cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, r->finish);
    add_usage(o, r);
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
    const bool chat = r->kind == SERVE_CHAT;
    cJSON *o = envelope(h, r, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (n || f == DCP_ENGINE_FINISH_NONE) cJSON_AddItemToObject(d, "content", string_n(delta, n));
    } else {
        cJSON_AddItemToObject(c, "text", string_n(delta, n));
    }
    cJSON_AddNullToObject(c, "logprobs");
    add_finish(c, f);
    return sse(o);
}

char *serve_api_chunk_role(const serve_hub *h, const serve_req *r)
{
    cJSON *o = envelope(h, r, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    cJSON_AddStringToObject(d, "role", "assistant");
    cJSON_AddStringToObject(d, "content", "");
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddNullToObject(c, "finish_reason");
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

char *serve_api_models(const serve_hub *h)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddItemToArray(data, m);
    cJSON_AddStringToObject(m, "id", h->model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", 0);
    cJSON_AddStringToObject(m, "owned_by", "dcp-vk");
    cJSON_AddNumberToObject(m, "max_model_len", h->n_ctx);
    return print_free(o);
}
