/* Tokenizer loading from GGUF (by phase: model, vocabulary, type overrides, special ids, special
 * index, BPE merges), special-token partitioning, encode dispatch, and the (streaming)
 * detokenizer. The SentencePiece and BPE algorithms live in tokenizer_spm.c / tokenizer_bpe.c, their
 * shared heap, id array and string map in tokenizer_util.c. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/utf8.h"
#include "text/tokenizer_internal.h"

typedef unsigned long long ull;

/* Returns the status of expr when it fails (for functions without cleanup). */
#define TOK_TRY(expr)                                                                               \
    do {                                                                                           \
        dcp_status st_ = (expr);                                                                   \
        if (st_ != DCP_OK) return st_;                                                             \
    } while (0)

/* ---- loading ------------------------------------------------------------------------------- */

/* Optional token-id key: absent or out of range -> def / -1. */
static int32_t get_id(const dcp_gguf *g, const char *key, uint32_t n_vocab, int32_t def)
{
    uint64_t v;
    if (!dcp_gguf_kv_find(g, key)) return def;
    if (dcp_gguf_get_uint(g, key, &v) != DCP_OK || v >= n_vocab) {
        dcp_clear_error();
        return -1;
    }
    return (int32_t)v;
}

static bool get_flag(const dcp_gguf *g, const char *key, bool def)
{
    bool b;
    if (!dcp_gguf_kv_find(g, key)) return def;
    if (dcp_gguf_get_bool(g, key, &b) != DCP_OK) {
        dcp_clear_error();
        return def;
    }
    return b;
}

/* Checks an optional per-token array's type and length. */
static dcp_status check_array(const dcp_gguf *g, const dcp_gguf_kv *kv, uint32_t n_vocab, bool numeric)
{
    if (kv->type != DCP_GGUF_TYPE_ARRAY || (numeric && kv->array_type == DCP_GGUF_TYPE_STRING) ||
        (!numeric && kv->array_type != DCP_GGUF_TYPE_STRING))
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s must be an array of %s", dcp_gguf_name(g),
                        (ull)kv->offset, kv->key, numeric ? "numbers" : "strings");
    if (kv->array_len != n_vocab)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s has %llu elements but the vocabulary "
                        "has %u tokens", dcp_gguf_name(g), (ull)kv->offset, kv->key,
                        (ull)kv->array_len, n_vocab);
    return DCP_OK;
}

/* Order of special tokens: longer text first, then lower id. */
static int cmp_special(const dcp_tokenizer *t, int32_t x, int32_t y)
{
    if (t->len[x] != t->len[y]) return t->len[x] > t->len[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

/* Stable merge sort by cmp_special (qsort has no context argument). */
static void sort_special(dcp_tokenizer *t, int32_t *v, int32_t *tmp, uint32_t n)
{
    if (n < 2) return;
    uint32_t h = n / 2, i = 0, j = h, k = 0;
    sort_special(t, v, tmp, h);
    sort_special(t, v + h, tmp, n - h);
    while (i < h && j < n) tmp[k++] = cmp_special(t, v[j], v[i]) < 0 ? v[j++] : v[i++];
    while (i < h) tmp[k++] = v[i++];
    while (j < n) tmp[k++] = v[j++];
    memcpy(v, tmp, n * sizeof *v);
}

/* Phase 1: the algorithm (tokenizer.ggml.model) and, for BPE, the pre-tokenizer. */
static dcp_status read_model(const dcp_gguf *g, dcp_tokenizer *t)
{
    const char *name = dcp_gguf_name(g), *model, *pre;
    if (!dcp_gguf_kv_find(g, "tokenizer.ggml.model"))
        return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key 'tokenizer.ggml.model'", name);
    TOK_TRY(dcp_gguf_get_string(g, "tokenizer.ggml.model", &model, NULL));
    if (strcmp(model, "llama") == 0) t->kind = DCP_TOKENIZER_SPM;
    else if (strcmp(model, "gpt2") == 0) t->kind = DCP_TOKENIZER_BPE;
    else
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tokenizer model '%.64s' is not supported (supported: "
                        "llama, gpt2)", name, model);
    t->pre = TOK_PRE_DEFAULT;
    t->pre_name = "default";
    if (t->kind != DCP_TOKENIZER_BPE || !dcp_gguf_kv_find(g, "tokenizer.ggml.pre")) return DCP_OK;
    TOK_TRY(dcp_gguf_get_string(g, "tokenizer.ggml.pre", &pre, NULL));
    if (strcmp(pre, "default") == 0) t->pre = TOK_PRE_DEFAULT, t->pre_name = "default";
    else if (strcmp(pre, "llama3") == 0 || strcmp(pre, "llama-v3") == 0 || strcmp(pre, "llama-bpe") == 0)
        t->pre = TOK_PRE_LLAMA3, t->pre_name = "llama3";
    else if (strcmp(pre, "deepseek-llm") == 0) t->pre = TOK_PRE_DEEPSEEK_LLM, t->pre_name = "deepseek-llm";
    else if (strcmp(pre, "gpt-2") == 0 || strcmp(pre, "gpt2") == 0) t->pre = TOK_PRE_GPT2, t->pre_name = "gpt-2";
    else if (strcmp(pre, "qwen2") == 0) t->pre = TOK_PRE_QWEN2, t->pre_name = "qwen2";
    else
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: pre-tokenizer '%.64s' is not supported (supported: "
                        "default, llama3, llama-bpe, deepseek-llm, gpt-2, qwen2)", name, pre);
    return DCP_OK;
}

/* Phase 2: the vocabulary: every token's text (copied), score and stored type, and the
 * text -> id map. */
static dcp_status read_vocab(const dcp_gguf *g, dcp_tokenizer *t)
{
    const char *name = dcp_gguf_name(g);
    const dcp_gguf_kv *tokens = dcp_gguf_kv_find(g, "tokenizer.ggml.tokens");
    if (!tokens) return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key 'tokenizer.ggml.tokens'", name);
    if (tokens->type != DCP_GGUF_TYPE_ARRAY || tokens->array_type != DCP_GGUF_TYPE_STRING ||
        tokens->array_len == 0 || tokens->array_len > 0x7fffffffu)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: tokenizer.ggml.tokens must be a non-empty "
                        "array of strings with fewer than 2^31 elements", name, (ull)tokens->offset);
    const uint32_t n = t->n_vocab = (uint32_t)tokens->array_len;
    const dcp_gguf_kv *scores = dcp_gguf_kv_find(g, "tokenizer.ggml.scores");
    const dcp_gguf_kv *types = dcp_gguf_kv_find(g, "tokenizer.ggml.token_type");
    if (scores) TOK_TRY(check_array(g, scores, n, true));
    if (types) TOK_TRY(check_array(g, types, n, true));

    size_t total = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const char *s;
        size_t len;
        TOK_TRY(dcp_gguf_array_string(tokens, i, &s, &len));
        total += len + 1;
    }
    t->text_buf = malloc(total);
    t->text = malloc(n * sizeof *t->text);
    t->len = malloc(n * sizeof *t->len);
    t->score = malloc(n * sizeof *t->score);
    t->type = malloc(n);
    if (!t->text_buf || !t->text || !t->len || !t->score || !t->type || !tok_map_init(&t->by_text, n))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    size_t pos = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const char *s;
        size_t len;
        double sc = 0.0;
        uint64_t ty = DCP_TOKEN_NORMAL;
        TOK_TRY(dcp_gguf_array_string(tokens, i, &s, &len));
        if (len > 0xffffffu) return dcp_fail(DCP_ERR_FORMAT, "%s: token %u is %zu bytes long", name, i, len);
        memcpy(t->text_buf + pos, s, len + 1);
        t->text[i] = t->text_buf + pos;
        t->len[i] = (uint32_t)len;
        pos += len + 1;
        if (scores) TOK_TRY(dcp_gguf_array_float(scores, i, &sc));
        if (types) {
            int64_t v;
            TOK_TRY(dcp_gguf_array_int(types, i, &v));
            ty = v >= DCP_TOKEN_NORMAL && v <= DCP_TOKEN_BYTE ? (uint64_t)v : DCP_TOKEN_NORMAL;
        }
        t->score[i] = (float)sc;
        t->type[i] = (uint8_t)ty;
        tok_map_put(&t->by_text, t->text[i], len, (int32_t)i);
    }
    return DCP_OK;
}

/* Token texts that mark the end of a turn or of the text, or a fill-in-the-middle position, in
 * the vocabularies llama.cpp knows. llama.cpp recognises them by their text when it loads a
 * vocabulary and gives them the control type whatever the file says (a converter that stored,
 * say, phi-3's "</s>" as user-defined would otherwise make that text turn into the token even with
 * special parsing off); dcp-vk does the same, so that both tokenize such text alike. */
static const char *const control_texts[] = {
    /* end of generation */
    "</s>", "<|endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end|>",
    "<end_of_turn>", "<end_of_utterance>", "<eos>", "<turn|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|return|>", "<|call|>", "<|calls|>", "<|flush|>", "<|tool_response>",
    /* fill in the middle: prefix, suffix, middle, pad, repository, file separator */
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "<|code_prefix|>", "<|prefix|>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "<|code_suffix|>", "<|suffix|>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "<|code_middle|>", "<|middle|>",
    "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>", "<|file_sep|>",
};

static int32_t find_text(const dcp_tokenizer *t, const char *s) { return tok_map_get(&t->by_text, s, strlen(s)); }

/* Phase 3: type overrides, as llama.cpp applies them at load: the texts above become control
 * tokens, with two exceptions for vocabularies where a spelling is not an end of text: "<|end|>"
 * is a user-defined token where "<|return|>" and "<|call|>" (or "<|calls|>" and "<|flush|>") exist,
 * and "</s>" a normal one where "<|tool_response>" exists. */
static void override_types(dcp_tokenizer *t)
{
    for (size_t k = 0; k < sizeof control_texts / sizeof control_texts[0]; ++k) {
        int32_t id = find_text(t, control_texts[k]);
        if (id >= 0) t->type[id] = DCP_TOKEN_CONTROL;
    }
    int32_t end = find_text(t, "<|end|>"), eos_text = find_text(t, "</s>");
    if (end >= 0 && ((find_text(t, "<|return|>") >= 0 && find_text(t, "<|call|>") >= 0) ||
                     (find_text(t, "<|calls|>") >= 0 && find_text(t, "<|flush|>") >= 0)))
        t->type[end] = DCP_TOKEN_USER_DEFINED;
    if (eos_text >= 0 && find_text(t, "<|tool_response>") >= 0) t->type[eos_text] = DCP_TOKEN_NORMAL;
}

/* Phase 4: special ids and flags, and the SentencePiece byte tokens. */
static void read_special_ids(const dcp_gguf *g, dcp_tokenizer *t)
{
    const uint32_t n = t->n_vocab;
    const bool spm = t->kind == DCP_TOKENIZER_SPM;
    t->bos = get_id(g, "tokenizer.ggml.bos_token_id", n, spm && n > 1 ? 1 : -1);
    t->eos = get_id(g, "tokenizer.ggml.eos_token_id", n, spm && n > 2 ? 2 : -1);
    t->unk = get_id(g, "tokenizer.ggml.unknown_token_id", n, spm ? 0 : -1);
    t->add_bos = get_flag(g, "tokenizer.ggml.add_bos_token", spm);
    t->add_space_prefix = get_flag(g, "tokenizer.ggml.add_space_prefix", spm);
    t->ignore_merges = t->pre == TOK_PRE_LLAMA3;
    for (int b = 0; b < 256; ++b) {
        char buf[8];
        static const char hex[] = "0123456789ABCDEF";
        buf[0] = '<', buf[1] = '0', buf[2] = 'x', buf[3] = hex[b >> 4], buf[4] = hex[b & 15], buf[5] = '>';
        t->byte_id[b] = tok_map_get(&t->by_text, buf, 6);
    }
}

/* Phase 5: the tokens matched in raw text before the model's algorithm (control, user-defined,
 * unknown; by their types after phase 3), longest text first. */
static dcp_status index_special(dcp_tokenizer *t)
{
    const uint32_t n = t->n_vocab;
    t->special = malloc(n * sizeof *t->special);
    int32_t *tmp = malloc(n * sizeof *tmp);
    if (!t->special || !tmp) {
        free(tmp);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (uint32_t i = 0; i < n; ++i) {
        uint8_t ty = t->type[i];
        if ((ty == DCP_TOKEN_CONTROL || ty == DCP_TOKEN_USER_DEFINED || ty == DCP_TOKEN_UNKNOWN) && t->len[i])
            t->special[t->n_special++] = (int32_t)i;
    }
    sort_special(t, t->special, tmp, t->n_special);
    free(tmp);
    return DCP_OK;
}

/* Phase 6 (BPE): the merge ranks ("a b" -> rank; the first of duplicates keeps the lowest) and the
 * pre-tokenizer's regexes. */
static dcp_status read_merges(const dcp_gguf *g, dcp_tokenizer *t)
{
    const char *name = dcp_gguf_name(g);
    const dcp_gguf_kv *merges = dcp_gguf_kv_find(g, "tokenizer.ggml.merges");
    if (!merges)
        return dcp_fail(DCP_ERR_FORMAT, "%s: missing required key 'tokenizer.ggml.merges' (gpt2 tokenizer)", name);
    if (merges->type != DCP_GGUF_TYPE_ARRAY || merges->array_type != DCP_GGUF_TYPE_STRING ||
        merges->array_len > 0x7fffffffu)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: tokenizer.ggml.merges must be an array of strings",
                        name, (ull)merges->offset);
    size_t total = 0;
    for (uint64_t i = 0; i < merges->array_len; ++i) {
        const char *s;
        size_t len;
        TOK_TRY(dcp_gguf_array_string(merges, i, &s, &len));
        total += len + 1;
    }
    t->merge_buf = malloc(total ? total : 1);
    if (!t->merge_buf || !tok_map_init(&t->merges, merges->array_len))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    size_t pos = 0;
    for (uint64_t i = 0; i < merges->array_len; ++i) {
        const char *s;
        size_t len;
        TOK_TRY(dcp_gguf_array_string(merges, i, &s, &len));
        memcpy(t->merge_buf + pos, s, len + 1);
        if (tok_map_get(&t->merges, t->merge_buf + pos, len) < 0)
            tok_map_put(&t->merges, t->merge_buf + pos, len, (int32_t)i);
        pos += len + 1;
    }
    return tok_bpe_init(t);
}

dcp_status dcp_tokenizer_create(const dcp_gguf *g, dcp_tokenizer **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    dcp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    DCP_TRY(read_model(g, t));
    DCP_TRY(read_vocab(g, t));
    override_types(t);
    read_special_ids(g, t);
    DCP_TRY(index_special(t));
    if (t->kind == DCP_TOKENIZER_BPE) DCP_TRY(read_merges(g, t));
    *out = t;
    return DCP_OK;
fail:
    dcp_tokenizer_destroy(t);
    return st;
}

void dcp_tokenizer_destroy(dcp_tokenizer *t)
{
    if (!t) return;
    tok_bpe_free(t);
    tok_map_free(&t->by_text);
    tok_map_free(&t->merges);
    free(t->merge_buf);
    free(t->special);
    free(t->text_buf);
    free(t->text);
    free(t->len);
    free(t->score);
    free(t->type);
    free(t);
}

dcp_tokenizer_kind dcp_tokenizer_get_kind(const dcp_tokenizer *t) { return t->kind; }
const char *dcp_tokenizer_pre(const dcp_tokenizer *t) { return t->pre_name; }
uint32_t dcp_tokenizer_n_vocab(const dcp_tokenizer *t) { return t->n_vocab; }
int32_t dcp_tokenizer_bos(const dcp_tokenizer *t) { return t->bos; }
int32_t dcp_tokenizer_eos(const dcp_tokenizer *t) { return t->eos; }
bool dcp_tokenizer_wants_bos(const dcp_tokenizer *t) { return t->add_bos; }

const char *dcp_tokenizer_token_text(const dcp_tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab) return NULL;
    if (len) *len = t->len[id];
    return t->text[id];
}

dcp_token_type dcp_tokenizer_token_type(const dcp_tokenizer *t, int32_t id)
{
    if (id < 0 || (uint32_t)id >= t->n_vocab) return DCP_TOKEN_UNUSED;
    return (dcp_token_type)t->type[id];
}

/* ---- encoding ------------------------------------------------------------------------------ */

/* A piece of the input: raw text [off, off+len) or a matched special token. */
typedef struct frag {
    size_t off, len;
    int32_t token; /* -1 for raw text */
} frag;

typedef struct frags {
    frag *v;
    size_t n, cap;
} frags;

static bool frags_insert(frags *f, size_t at, frag x)
{
    if (f->n == f->cap) {
        size_t cap = f->cap ? 2 * f->cap : 16;
        frag *v = realloc(f->v, cap * sizeof *v);
        if (!v) return false;
        f->v = v;
        f->cap = cap;
    }
    memmove(f->v + at + 1, f->v + at, (f->n - at) * sizeof *f->v);
    f->v[at] = x;
    f->n++;
    return true;
}

/* Splits raw fragments at occurrences of special tokens, longest token first. */
static dcp_status partition(const dcp_tokenizer *t, const char *text, size_t len, bool parse_special,
                            frags *f)
{
    if (!frags_insert(f, 0, (frag){0, len, -1})) goto oom;
    for (uint32_t s = 0; s < t->n_special; ++s) {
        int32_t id = t->special[s];
        if (!parse_special && t->type[id] != DCP_TOKEN_USER_DEFINED) continue;
        const char *tok = t->text[id];
        size_t tl = t->len[id];
        for (size_t i = 0; i < f->n; ++i) {
            if (f->v[i].token >= 0 || f->v[i].len < tl) continue;
            const char *base = text + f->v[i].off;
            size_t fl = f->v[i].len;
            const char *hit = NULL;
            for (size_t p = 0; p + tl <= fl; ++p) {
                if (base[p] == tok[0] && memcmp(base + p, tok, tl) == 0) {
                    hit = base + p;
                    break;
                }
            }
            if (!hit) continue;
            size_t pre = (size_t)(hit - base), off = f->v[i].off;
            /* [pre-text] token [rest]; the rest is examined on the next iterations of i */
            f->v[i] = (frag){off + pre, tl, id};
            if (pre && !frags_insert(f, i++, (frag){off, pre, -1})) goto oom;
            if (pre + tl < fl && !frags_insert(f, i + 1, (frag){off + pre + tl, fl - pre - tl, -1})) goto oom;
        }
    }
    return DCP_OK;
oom:
    return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
}

dcp_status dcp_tokenizer_encode(const dcp_tokenizer *t, const char *text, size_t len,
                                unsigned flags, int32_t **ids, size_t *n)
{
    dcp_status st = DCP_OK;
    tok_ids out = {0};
    frags f = {0};
    char *buf = NULL;
    *ids = NULL;
    *n = 0;
    if ((flags & DCP_TOKENIZE_ADD_BOS) && t->bos >= 0 && !tok_ids_push(&out, t->bos)) goto oom;
    if (len) DCP_TRY(partition(t, text, len, (flags & DCP_TOKENIZE_PARSE_SPECIAL) != 0, &f));
    bool prev_special = true; /* SPM: a space is prefixed to text at the start or after a special */
    for (size_t i = 0; i < f.n; ++i) {
        if (f.v[i].token >= 0) {
            if (!tok_ids_push(&out, f.v[i].token)) goto oom;
            prev_special = true;
            continue;
        }
        const char *s = text + f.v[i].off;
        size_t sl = f.v[i].len;
        if (t->kind == DCP_TOKENIZER_SPM) {
            /* escape spaces as U+2581, with the optional prefix space */
            bool prefix = t->add_space_prefix && prev_special;
            size_t spaces = prefix;
            for (size_t k = 0; k < sl; ++k) spaces += s[k] == ' ';
            free(buf);
            buf = malloc(sl + 2 * spaces + 1);
            if (!buf) goto oom;
            size_t m = 0;
            if (prefix) memcpy(buf, "\xe2\x96\x81", 3), m = 3;
            for (size_t k = 0; k < sl; ++k) {
                if (s[k] == ' ') memcpy(buf + m, "\xe2\x96\x81", 3), m += 3;
                else buf[m++] = s[k];
            }
            DCP_TRY(tok_spm_encode(t, buf, m, &out));
        } else {
            DCP_TRY(tok_bpe_encode(t, s, sl, &out));
        }
        prev_special = false;
    }
    if ((flags & DCP_TOKENIZE_ADD_EOS) && t->eos >= 0 && !tok_ids_push(&out, t->eos)) goto oom;
    free(f.v);
    free(buf);
    *ids = out.v;
    *n = out.n;
    if (!out.n) {
        free(out.v);
        *ids = NULL;
    }
    return DCP_OK;
oom:
    st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
fail:
    free(f.v);
    free(buf);
    free(out.v);
    return st;
}

/* ---- decoding ------------------------------------------------------------------------------ */

void dcp_tokenizer_token_bytes(const dcp_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *len)
{
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_vocab) return;
    const char *s = t->text[id];
    const size_t sl = t->len[id];
    const uint8_t ty = t->type[id];
    char one[4];
    size_t k = 0;
    if (ty == DCP_TOKEN_CONTROL || ty == DCP_TOKEN_UNKNOWN || ty == DCP_TOKEN_UNUSED) return;
    if (ty == DCP_TOKEN_BYTE && t->kind == DCP_TOKENIZER_SPM && sl == 6 && s[0] == '<') {
        one[0] = (char)strtol(s + 3, NULL, 16);
        k = 1;
        if (cap) buf[0] = one[0];
    } else if (t->kind == DCP_TOKENIZER_SPM) {
        for (size_t i = 0; i < sl; k++) {
            const bool sp = sl - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0;
            if (k < cap) buf[k] = sp ? ' ' : s[i];
            i += sp ? 3 : 1;
        }
    } else if (ty == DCP_TOKEN_USER_DEFINED) {
        k = sl;
        if (cap) memcpy(buf, s, sl < cap ? sl : cap);
    } else {
        char *dec = malloc(sl + 1);
        if (!dec) return; /* out of memory: no bytes (the token is then never allowed) */
        tok_bpe_decode_text(s, sl, dec, &k);
        if (cap) memcpy(buf, dec, k < cap ? k : cap);
        free(dec);
    }
    *len = k;
}

struct dcp_detokenizer {
    const dcp_tokenizer *t;
    unsigned flags;
    bool started;          /* some text was produced (the SPM leading space is dropped before) */
    dcp_utf8_stream utf8;  /* holds an incomplete UTF-8 character until the next piece */
    char *out;
    size_t cap;
};

static bool out_reserve(dcp_detokenizer *d, size_t n)
{
    if (n <= d->cap) return true;
    size_t cap = d->cap ? d->cap : 256;
    while (cap < n) cap *= 2;
    char *p = realloc(d->out, cap);
    if (!p) return false;
    d->out = p;
    d->cap = cap;
    return true;
}

dcp_status dcp_detokenizer_create(const dcp_tokenizer *t, unsigned flags, dcp_detokenizer **out)
{
    *out = NULL;
    dcp_detokenizer *d = calloc(1, sizeof *d);
    if (!d || !out_reserve(d, 256)) {
        free(d);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "detokenizer: out of memory");
    }
    d->t = t;
    d->flags = flags;
    *out = d;
    return DCP_OK;
}

void dcp_detokenizer_destroy(dcp_detokenizer *d)
{
    if (!d) return;
    free(d->out);
    free(d);
}

/* Appends the bytes of a piece to d->out (which holds *m bytes) through the UTF-8 sanitizer:
 * whole, valid characters only; final: an incomplete character left over becomes U+FFFD. */
static bool emit_bytes(dcp_detokenizer *d, const char *p, size_t n, size_t *m, bool final)
{
    if (!out_reserve(d, *m + DCP_UTF8_OUT_MAX(n))) return false;
    *m += dcp_utf8_push(&d->utf8, p, n, d->out + *m);
    if (final) *m += dcp_utf8_flush(&d->utf8, d->out + *m);
    return true;
}

dcp_status dcp_detokenizer_push(dcp_detokenizer *d, int32_t id, const char **text, size_t *len)
{
    const dcp_tokenizer *t = d->t;
    *text = d->out;
    *len = 0;
    if (id < 0 || (uint32_t)id >= t->n_vocab)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "detokenize: token id %d out of range [0, %u)",
                        (int)id, t->n_vocab);
    const char *s = t->text[id];
    size_t sl = t->len[id];
    uint8_t ty = t->type[id];
    size_t m = 0;
    char byte;
    char *dec = NULL;
    bool ok = true;
    if (ty == DCP_TOKEN_CONTROL || ty == DCP_TOKEN_UNKNOWN || ty == DCP_TOKEN_UNUSED) {
        if (d->flags & DCP_DECODE_SPECIAL) ok = emit_bytes(d, s, sl, &m, false);
    } else if (ty == DCP_TOKEN_BYTE && t->kind == DCP_TOKENIZER_SPM && sl == 6 && s[0] == '<') {
        byte = (char)strtol(s + 3, NULL, 16);
        ok = emit_bytes(d, &byte, 1, &m, false);
    } else if (t->kind == DCP_TOKENIZER_SPM) {
        /* U+2581 -> space; the first space of the stream is dropped (it was prefixed) */
        dec = malloc(sl + 1);
        if (!dec) goto oom;
        size_t k = 0;
        for (size_t i = 0; i < sl;) {
            if (sl - i >= 3 && memcmp(s + i, "\xe2\x96\x81", 3) == 0) dec[k++] = ' ', i += 3;
            else dec[k++] = s[i++];
        }
        const char *p = dec;
        if (!d->started && t->add_space_prefix && !(d->flags & DCP_DECODE_KEEP_LEADING_SPACE) &&
            k && p[0] == ' ')
            ++p, --k;
        if (sl) d->started = true; /* even when the dropped space was all of this piece */
        ok = emit_bytes(d, p, k, &m, false);
    } else if (ty == DCP_TOKEN_USER_DEFINED) {
        ok = emit_bytes(d, s, sl, &m, false);
    } else {
        dec = malloc(sl + 1);
        if (!dec) goto oom;
        size_t k = 0;
        tok_bpe_decode_text(s, sl, dec, &k);
        ok = emit_bytes(d, dec, k, &m, false);
    }
    free(dec);
    dec = NULL;
    if (!ok) goto oom;
    if (m || d->utf8.n_hold) d->started = true;
    *text = d->out;
    *len = m;
    return DCP_OK;
oom:
    free(dec);
    return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "detokenizer: out of memory");
}

dcp_status dcp_detokenizer_flush(dcp_detokenizer *d, const char **text, size_t *len)
{
    size_t m = 0;
    if (!emit_bytes(d, "", 0, &m, true))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "detokenizer: out of memory");
    d->started = false;
    *text = d->out;
    *len = m;
    return DCP_OK;
}

dcp_status dcp_tokenizer_decode(const dcp_tokenizer *t, const int32_t *ids, size_t n,
                                unsigned flags, char **text, size_t *len)
{
    dcp_status st;
    dcp_detokenizer *d = NULL;
    char *res = NULL;
    size_t used = 0, cap = 64;
    const char *piece;
    size_t pl;
    *text = NULL;
    if (len) *len = 0;
    DCP_TRY(dcp_detokenizer_create(t, flags, &d));
    res = malloc(cap);
    if (!res) goto oom;
    for (size_t i = 0; i <= n; ++i) {
        if (i < n) DCP_TRY(dcp_detokenizer_push(d, ids[i], &piece, &pl));
        else DCP_TRY(dcp_detokenizer_flush(d, &piece, &pl));
        if (used + pl + 1 > cap) {
            while (used + pl + 1 > cap) cap *= 2;
            char *r = realloc(res, cap);
            if (!r) goto oom;
            res = r;
        }
        memcpy(res + used, piece, pl);
        used += pl;
    }
    res[used] = '\0';
    dcp_detokenizer_destroy(d);
    *text = res;
    if (len) *len = used;
    return DCP_OK;
oom:
    st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "detokenizer: out of memory");
fail:
    dcp_detokenizer_destroy(d);
    free(res);
    return st;
}
