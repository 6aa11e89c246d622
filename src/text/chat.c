/* Chat template families: recognition from the template text and rendering (include/dcpvk/chat.h).
 * The markers that identify each family, and each family's layout, follow the published formats of
 * the model families (the same ones llama.cpp recognises); the code is ours. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/chat.h"

static const char *const names[DCP_CHAT_COUNT] = {
    [DCP_CHAT_UNKNOWN] = "unknown",
    [DCP_CHAT_CHATML] = "chatml",
    [DCP_CHAT_LLAMA2] = "llama2",
    [DCP_CHAT_LLAMA2_SYS] = "llama2-sys",
    [DCP_CHAT_LLAMA2_SYS_BOS] = "llama2-sys-bos",
    [DCP_CHAT_LLAMA2_SYS_STRIP] = "llama2-sys-strip",
    [DCP_CHAT_MISTRAL_V1] = "mistral-v1",
    [DCP_CHAT_MISTRAL_V3] = "mistral-v3",
    [DCP_CHAT_MISTRAL_V3_TEKKEN] = "mistral-v3-tekken",
    [DCP_CHAT_MISTRAL_V7] = "mistral-v7",
    [DCP_CHAT_PHI3] = "phi3",
    [DCP_CHAT_LLAMA3] = "llama3",
    [DCP_CHAT_GEMMA] = "gemma",
    [DCP_CHAT_DEEPSEEK] = "deepseek",
    [DCP_CHAT_DEEPSEEK2] = "deepseek2",
    [DCP_CHAT_DEEPSEEK3] = "deepseek3",
    [DCP_CHAT_ZEPHYR] = "zephyr",
};

const char *dcp_chat_template_name(dcp_chat_template t)
{
    return t > DCP_CHAT_UNKNOWN && t < DCP_CHAT_COUNT ? names[t] : "unknown";
}

dcp_chat_template dcp_chat_template_from_name(const char *name)
{
    for (int t = DCP_CHAT_UNKNOWN + 1; name && t < DCP_CHAT_COUNT; t++)
        if (strcmp(name, names[t]) == 0) return (dcp_chat_template)t;
    return DCP_CHAT_UNKNOWN;
}

static bool has(const char *t, const char *marker) { return strstr(t, marker) != NULL; }

dcp_chat_template dcp_chat_template_detect(const char *t)
{
    if (!t) return DCP_CHAT_UNKNOWN;
    dcp_chat_template named = dcp_chat_template_from_name(t);
    if (named != DCP_CHAT_UNKNOWN) return named;
    if (has(t, "<|im_start|>"))
        /* <|im_sep|> (phi-4) and <end_of_utterance> (SmolVLM) use the marker for other layouts. */
        return has(t, "<|im_sep|>") || has(t, "<end_of_utterance>") ? DCP_CHAT_UNKNOWN : DCP_CHAT_CHATML;
    if (strncmp(t, "mistral", 7) == 0 || has(t, "[INST]")) {
        if (has(t, "[SYSTEM_PROMPT]")) return DCP_CHAT_MISTRAL_V7;
        /* Mistral's own v1 / v3 templates: the system message glued to [INST], or tool blocks. */
        if (has(t, "' [INST] ' + system_message") || has(t, "[AVAILABLE_TOOLS]")) {
            if (has(t, " [INST]")) return DCP_CHAT_MISTRAL_V1;
            if (has(t, "\"[INST]\"")) return DCP_CHAT_MISTRAL_V3_TEKKEN;
            return DCP_CHAT_MISTRAL_V3;
        }
        if (has(t, "content.strip()")) return DCP_CHAT_LLAMA2_SYS_STRIP;
        if (has(t, "bos_token + '[INST]")) return DCP_CHAT_LLAMA2_SYS_BOS;
        if (has(t, "<<SYS>>")) return DCP_CHAT_LLAMA2_SYS;
        return DCP_CHAT_LLAMA2;
    }
    if (has(t, "<|assistant|>") && has(t, "<|end|>")) return DCP_CHAT_PHI3;
    if (has(t, "<|user|>") && has(t, "<|endoftext|>")) return DCP_CHAT_ZEPHYR;
    if (has(t, "<start_of_turn>")) return DCP_CHAT_GEMMA;
    if (has(t, "### Instruction:") && has(t, "<|EOT|>")) return DCP_CHAT_DEEPSEEK;
    if (has(t, "<|start_header_id|>") && has(t, "<|end_header_id|>")) return DCP_CHAT_LLAMA3;
    if (has(t, "'Assistant: ' + message['content'] + eos_token")) return DCP_CHAT_DEEPSEEK2;
    if (has(t, "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>") && has(t, "<\xef\xbd\x9c" "User\xef\xbd\x9c>") &&
        has(t, "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"))
        return DCP_CHAT_DEEPSEEK3;
    return DCP_CHAT_UNKNOWN;
}

/* DeepSeek's full-width bars and U+2581 spaces. */
#define DS_EOS "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>"
#define DS_USER "<\xef\xbd\x9c" "User\xef\xbd\x9c>"
#define DS_ASSISTANT "<\xef\xbd\x9c" "Assistant\xef\xbd\x9c>"

const char *dcp_chat_template_end_of_turn(dcp_chat_template t)
{
    switch (t) {
    case DCP_CHAT_CHATML: return "<|im_end|>";
    case DCP_CHAT_PHI3: return "<|end|>";
    case DCP_CHAT_LLAMA3: return "<|eot_id|>";
    case DCP_CHAT_GEMMA: return "<end_of_turn>";
    case DCP_CHAT_DEEPSEEK: return "<|EOT|>";
    case DCP_CHAT_DEEPSEEK2:
    case DCP_CHAT_DEEPSEEK3: return DS_EOS;
    case DCP_CHAT_ZEPHYR: return "<|endoftext|>";
    default: return NULL;
    }
}

/* A growing string; on allocation failure `failed` is set and appends do nothing. */
typedef struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
} sbuf;

static void put_n(sbuf *b, const char *s, size_t n)
{
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void put(sbuf *b, const char *s) { put_n(b, s, strlen(s)); }

/* Appends s without leading and trailing ASCII white space. */
static void put_trim(sbuf *b, const char *s)
{
    size_t a = 0, z = strlen(s);
    while (a < z && strchr(" \t\n\r\f\v", s[a])) a++;
    while (z > a && strchr(" \t\n\r\f\v", s[z - 1])) z--;
    put_n(b, s + a, z - a);
}

typedef enum role { R_SYSTEM, R_USER, R_ASSISTANT } role;

static void render_llama2(sbuf *b, dcp_chat_template t, const dcp_chat_message *m, const role *r, size_t n)
{
    const bool sys = t != DCP_CHAT_LLAMA2, bos = t == DCP_CHAT_LLAMA2_SYS_BOS, strip = t == DCP_CHAT_LLAMA2_SYS_STRIP;
    bool open = true; /* the first [INST] (its BOS is the tokenizer's) */
    put(b, "[INST] ");
    for (size_t i = 0; i < n; i++) {
        if (!open) {
            put(b, bos ? "<s>[INST] " : "[INST] ");
            open = true;
        }
        if (r[i] == R_SYSTEM) put(b, sys ? "<<SYS>>\n" : "");
        strip ? put_trim(b, m[i].content) : put(b, m[i].content);
        if (r[i] == R_SYSTEM) put(b, sys ? "\n<</SYS>>\n\n" : "\n");
        else if (r[i] == R_USER) put(b, " [/INST]");
        else {
            put(b, "</s>");
            open = false;
        }
    }
}

static void render_mistral(sbuf *b, dcp_chat_template t, const dcp_chat_message *m, const role *r, size_t n)
{
    if (t == DCP_CHAT_MISTRAL_V7) {
        for (size_t i = 0; i < n; i++) {
            if (r[i] == R_SYSTEM) put(b, "[SYSTEM_PROMPT] ");
            else if (r[i] == R_USER) put(b, "[INST] ");
            else put(b, " ");
            put(b, m[i].content);
            put(b, r[i] == R_SYSTEM ? "[/SYSTEM_PROMPT]" : r[i] == R_USER ? "[/INST]" : "</s>");
        }
        return;
    }
    const char *lead = t == DCP_CHAT_MISTRAL_V1 ? " " : "";
    const char *trail = t == DCP_CHAT_MISTRAL_V3_TEKKEN ? "" : " ";
    bool open = false;
    for (size_t i = 0; i < n; i++) {
        if (!open) {
            put(b, lead);
            put(b, "[INST]");
            put(b, trail);
            open = true;
        }
        if (r[i] == R_SYSTEM) {
            put(b, m[i].content);
            put(b, "\n\n");
        } else if (r[i] == R_USER) {
            put(b, m[i].content);
            put(b, lead);
            put(b, "[/INST]");
        } else {
            put(b, trail);
            t == DCP_CHAT_MISTRAL_V3 ? put_trim(b, m[i].content) : put(b, m[i].content);
            put(b, "</s>");
            open = false;
        }
    }
}

static void render_gemma(sbuf *b, const dcp_chat_message *m, const role *r, size_t n, bool add)
{
    sbuf sys = {0};
    for (size_t i = 0; i < n; i++) {
        if (r[i] == R_SYSTEM) { /* no system turn: it opens the next user turn */
            put_trim(&sys, m[i].content);
            continue;
        }
        put(b, r[i] == R_ASSISTANT ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
        if (sys.len && r[i] == R_USER) {
            put(b, sys.p);
            put(b, "\n\n");
            sys.len = 0;
        }
        put_trim(b, m[i].content);
        put(b, "<end_of_turn>\n");
    }
    b->failed |= sys.failed;
    free(sys.p);
    if (add) put(b, "<start_of_turn>model\n");
}

dcp_status dcp_chat_apply(dcp_chat_template t, const dcp_chat_message *m, size_t n, bool add, char **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    if (t <= DCP_CHAT_UNKNOWN || t >= DCP_CHAT_COUNT)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "chat: the model's chat template is not one of the known families");
    if (n == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "chat: no messages");
    role *r = malloc(n * sizeof *r);
    if (!r) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (size_t i = 0; i < n; i++) {
        const char *x = m[i].role ? m[i].role : "";
        if (strcmp(x, "system") == 0) r[i] = R_SYSTEM;
        else if (strcmp(x, "user") == 0) r[i] = R_USER;
        else if (strcmp(x, "assistant") == 0) r[i] = R_ASSISTANT;
        else {
            free(r);
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "chat: message %zu has role '%.64s'; the roles are system, user and assistant", i, x);
        }
        if (!m[i].content) {
            free(r);
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "chat: message %zu has no content", i);
        }
    }
    sbuf b = {0};
    put(&b, ""); /* an empty rendering is still a string */
    switch (t) {
    case DCP_CHAT_CHATML:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|im_start|>");
            put(&b, m[i].role);
            put(&b, "\n");
            put(&b, m[i].content);
            put(&b, "<|im_end|>\n");
        }
        if (add) put(&b, "<|im_start|>assistant\n");
        break;
    case DCP_CHAT_LLAMA2:
    case DCP_CHAT_LLAMA2_SYS:
    case DCP_CHAT_LLAMA2_SYS_BOS:
    case DCP_CHAT_LLAMA2_SYS_STRIP: render_llama2(&b, t, m, r, n); break;
    case DCP_CHAT_MISTRAL_V1:
    case DCP_CHAT_MISTRAL_V3:
    case DCP_CHAT_MISTRAL_V3_TEKKEN:
    case DCP_CHAT_MISTRAL_V7: render_mistral(&b, t, m, r, n); break;
    case DCP_CHAT_PHI3:
    case DCP_CHAT_ZEPHYR:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|");
            put(&b, m[i].role);
            put(&b, "|>\n");
            put(&b, m[i].content);
            put(&b, t == DCP_CHAT_PHI3 ? "<|end|>\n" : "<|endoftext|>\n");
        }
        if (add) put(&b, "<|assistant|>\n");
        break;
    case DCP_CHAT_LLAMA3:
        for (size_t i = 0; i < n; i++) {
            put(&b, "<|start_header_id|>");
            put(&b, m[i].role);
            put(&b, "<|end_header_id|>\n\n");
            put_trim(&b, m[i].content);
            put(&b, "<|eot_id|>");
        }
        if (add) put(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
        break;
    case DCP_CHAT_GEMMA: render_gemma(&b, m, r, n, add); break;
    case DCP_CHAT_DEEPSEEK:
        for (size_t i = 0; i < n; i++) {
            if (r[i] == R_USER) put(&b, "### Instruction:\n");
            else if (r[i] == R_ASSISTANT) put(&b, "### Response:\n");
            put(&b, m[i].content);
            put(&b, r[i] == R_USER ? "\n" : r[i] == R_ASSISTANT ? "\n<|EOT|>\n" : "");
        }
        if (add) put(&b, "### Response:\n");
        break;
    case DCP_CHAT_DEEPSEEK2:
    case DCP_CHAT_DEEPSEEK3: {
        const bool v3 = t == DCP_CHAT_DEEPSEEK3;
        for (size_t i = 0; i < n; i++) {
            if (r[i] == R_USER) put(&b, v3 ? DS_USER : "User: ");
            else if (r[i] == R_ASSISTANT) put(&b, v3 ? DS_ASSISTANT : "Assistant: ");
            put(&b, m[i].content);
            if (r[i] == R_SYSTEM) put(&b, "\n\n");
            else if (r[i] == R_USER) put(&b, v3 ? "" : "\n\n");
            else put(&b, DS_EOS);
        }
        if (add) put(&b, v3 ? DS_ASSISTANT : "Assistant:");
        break;
    }
    default: break;
    }
    free(r);
    if (b.failed) {
        free(b.p);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    *out = b.p;
    *len = b.len;
    return DCP_OK;
}
