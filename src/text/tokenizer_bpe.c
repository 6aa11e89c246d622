/* GPT-2 style byte-level BPE (`gpt2` vocabularies): the text is split into words by the
 * pre-tokenizer's regexes (PCRE2), each word's bytes are mapped to the GPT-2 byte alphabet, and
 * adjacent symbols are merged by rank (lowest first, leftmost on ties). */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "text/tokenizer_internal.h"

#ifdef DCP_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

/* ---- GPT-2 byte alphabet ------------------------------------------------------------------- */

/* Code point standing for byte b: printable Latin-1 bytes stand for themselves, the other 68
 * bytes take 256, 257, ... in byte order. */
static bool printable(unsigned b);
static unsigned byte_cp(unsigned b)
{
    if (printable(b)) return b;
    unsigned n = 0;
    for (unsigned x = 0; x < b; ++x) n += !printable(x);
    return 256 + n;
}

/* UTF-8 of each byte's stand-in (at most 2 bytes). */
static void byte_utf8(unsigned b, char out[2], size_t *n)
{
    unsigned cp = byte_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        *n = 1;
    } else {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        *n = 2;
    }
}

static bool printable(unsigned b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174; }

/* Byte standing behind code point cp, or -1 when cp is not in the byte alphabet. */
static int cp_byte(unsigned cp)
{
    if (cp < 256) return printable(cp) ? (int)cp : -1;
    for (unsigned b = 0, n = 256; b < 256; ++b)
        if (!printable(b) && n++ == cp) return (int)b;
    return -1;
}

void tok_bpe_decode_text(const char *s, size_t len, char *out, size_t *n)
{
    size_t k = *n;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        int b = -1;
        size_t step = 1;
        if (c < 0x80) b = cp_byte(c);
        else if ((c & 0xe0) == 0xc0 && i + 1 < len)
            b = cp_byte(((c & 0x1fu) << 6) | ((unsigned char)s[i + 1] & 0x3fu)), step = 2;
        if (b >= 0) {
            out[k++] = (char)b;
            i += step;
        } else {
            out[k++] = s[i++]; /* not in the byte alphabet: pass through */
        }
    }
    *n = k;
}

/* ---- pre-tokenizer regexes ------------------------------------------------------------------ */

#define DS_LETTERS                                                                                   \
    "A-Za-z\\x{b5}\\x{c0}-\\x{d6}\\x{d8}-\\x{f6}\\x{f8}-\\x{1ba}\\x{1bc}-\\x{1bf}\\x{1c4}-\\x{293}"     \
    "\\x{295}-\\x{2af}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37b}-\\x{37d}\\x{37f}\\x{386}"               \
    "\\x{388}-\\x{38a}\\x{38c}\\x{38e}-\\x{3a1}\\x{3a3}-\\x{3f5}\\x{3f7}-\\x{481}\\x{48a}-\\x{52f}"     \
    "\\x{531}-\\x{556}\\x{10a0}-\\x{10c5}\\x{13a0}-\\x{13f5}\\x{13f8}-\\x{13fd}\\x{1c90}-\\x{1cba}"     \
    "\\x{1cbd}-\\x{1cbf}\\x{1d00}-\\x{1d2b}\\x{1d6b}-\\x{1d77}\\x{1d79}-\\x{1d9a}\\x{1e00}-\\x{1f15}"   \
    "\\x{1f18}-\\x{1f1d}\\x{1f20}-\\x{1f45}\\x{1f48}-\\x{1f4d}\\x{1f50}-\\x{1f57}\\x{1f59}\\x{1f5b}"   \
    "\\x{1f5d}\\x{1f5f}-\\x{1f7d}\\x{1f80}-\\x{1fb4}\\x{1fb6}-\\x{1fbc}\\x{1fbe}\\x{1fc2}-\\x{1fc4}"    \
    "\\x{1fc6}-\\x{1fcc}\\x{1fd0}-\\x{1fd3}\\x{1fd6}-\\x{1fdb}\\x{1fe0}-\\x{1fec}\\x{1ff2}-\\x{1ff4}"   \
    "\\x{1ff6}-\\x{1ffc}\\x{2102}\\x{2107}\\x{210a}-\\x{2113}\\x{2115}\\x{2119}-\\x{211d}\\x{2124}"     \
    "\\x{2126}\\x{2128}\\x{212a}-\\x{212d}\\x{212f}-\\x{2134}\\x{2139}\\x{213c}-\\x{213f}"             \
    "\\x{2145}-\\x{2149}\\x{214e}\\x{2183}\\x{2184}\\x{2c00}-\\x{2c7b}\\x{2c7e}-\\x{2ce4}"             \
    "\\x{2ceb}-\\x{2cee}\\x{2cf2}\\x{2cf3}\\x{a640}-\\x{a66d}\\x{a680}-\\x{a69b}\\x{a722}-\\x{a76f}"    \
    "\\x{a771}-\\x{a787}\\x{a78b}-\\x{a78e}\\x{ab70}-\\x{abbf}\\x{fb00}-\\x{fb06}\\x{fb13}-\\x{fb17}"   \
    "\\x{ff21}-\\x{ff3a}\\x{ff41}-\\x{ff5a}\\x{10400}-\\x{1044f}\\x{104b0}-\\x{104d3}"                 \
    "\\x{104d8}-\\x{104fb}\\x{10c80}-\\x{10cb2}\\x{10cc0}-\\x{10cf2}\\x{118a0}-\\x{118df}"             \
    "\\x{1e900}-\\x{1e943}"

typedef struct pre_regexes {
    bool ucp; /* Unicode \s and \w (the deepseek-llm patterns came from std::wregex: ASCII \s) */
    const char *re[TOK_MAX_REGEX];
} pre_regexes;

static const pre_regexes pre_table[] = {
    [TOK_PRE_DEFAULT] = {true,
                         {"[\\p{P}\\$\\+<=>\\^~\\|]+",
                          "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
                          "\\p{N}+", "[0-9][0-9][0-9]"}},
    [TOK_PRE_LLAMA3] = {true,
                        {"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?"
                         "\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [TOK_PRE_DEEPSEEK_LLM] = {false,
                              {"[\\r\\n]", "\\s?[" DS_LETTERS "]+",
                               "\\s?[!-/:-~\\x{ff01}-\\x{ff0f}\\x{ff1a}-\\x{ff5e}\\x{2018}-\\x{201f}"
                               "\\x{3000}-\\x{3002}]+",
                               "\\s+$", "[\\x{4e00}-\\x{9fa5}\\x{800}-\\x{4e00}\\x{ac00}-\\x{d7ff}]+",
                               "\\p{N}+"}},
    /* qwen2: llama3's pattern with case-insensitive contractions written as such and single digits */
    [TOK_PRE_QWEN2] = {true,
                       {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
                        "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}},
    [TOK_PRE_GPT2] = {true,
                      {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"}},
};

#ifdef DCP_HAVE_PCRE2

dcp_status tok_bpe_init(dcp_tokenizer *t)
{
    const pre_regexes *p = &pre_table[t->pre];
    for (unsigned i = 0; i < TOK_MAX_REGEX && p->re[i]; ++i) {
        int err;
        PCRE2_SIZE erroff;
        uint32_t opts = PCRE2_UTF | PCRE2_DOLLAR_ENDONLY | (p->ucp ? PCRE2_UCP : 0);
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)p->re[i], PCRE2_ZERO_TERMINATED, opts, &err,
                                       &erroff, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            return dcp_fail(DCP_ERR_INTERNAL, "pre-tokenizer %s: regex %u does not compile at %zu: %s",
                            t->pre_name, i, (size_t)erroff, (const char *)msg);
        }
        pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional speed-up; the interpreter is the fallback */
        t->regex[t->n_regex++] = re;
    }
    return DCP_OK;
}

void tok_bpe_free(dcp_tokenizer *t)
{
    for (unsigned i = 0; i < t->n_regex; ++i) pcre2_code_free(t->regex[i]);
    t->n_regex = 0;
}

#else

dcp_status tok_bpe_init(dcp_tokenizer *t)
{
    return dcp_fail(DCP_ERR_UNSUPPORTED, "pre-tokenizer %s: this build has no PCRE2 (needed for the "
                    "gpt2 tokenizer)", t->pre_name);
}

void tok_bpe_free(dcp_tokenizer *t) { (void)t; }

#endif

/* ---- merging ------------------------------------------------------------------------------- */

typedef struct sym {
    int prev, next;
    size_t off, n;
} sym;


typedef struct scratch {
    char *key;        /* "left right" lookup buffer */
    size_t key_cap;
    char *word;       /* byte-encoded word */
    size_t word_cap;
    sym *s;
    size_t s_cap;
    tok_heap h;
} scratch;

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return true;
    size_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

static bool try_bigram(const dcp_tokenizer *t, scratch *sc, const char *w, int l, int r)
{
    if (l < 0 || r < 0) return true;
    const sym *s = sc->s;
    size_t need = s[l].n + s[r].n + 1;
    if (!grow((void **)&sc->key, &sc->key_cap, need, 1)) return false;
    memcpy(sc->key, w + s[l].off, s[l].n);
    sc->key[s[l].n] = ' ';
    memcpy(sc->key + s[l].n + 1, w + s[r].off, s[r].n);
    int32_t rank = tok_map_get(&t->merges, sc->key, need);
    if (rank < 0) return true;
    return tok_heap_push(&sc->h, (tok_bigram){l, r, -(double)rank, s[l].n + s[r].n});
}

/* Tokenizes one pre-tokenized word (raw bytes). */
static bool bpe_word(const dcp_tokenizer *t, scratch *sc, const char *raw, size_t len, tok_ids *out)
{
    if (!grow((void **)&sc->word, &sc->word_cap, 2 * len + 1, 1)) return false;
    size_t wl = 0;
    for (size_t i = 0; i < len; ++i) {
        size_t k;
        byte_utf8((unsigned char)raw[i], sc->word + wl, &k);
        wl += k;
    }
    const char *w = sc->word;
    if (t->ignore_merges) {
        int32_t id = tok_map_get(&t->by_text, w, wl);
        if (id >= 0) return tok_ids_push(out, id);
    }
    if (!grow((void **)&sc->s, &sc->s_cap, wl + 1, sizeof *sc->s)) return false;
    int ns = 0;
    for (size_t off = 0; off < wl; ++ns) {
        size_t n = tok_utf8_len((unsigned char)w[off]);
        if (n > wl - off) n = wl - off;
        sc->s[ns] = (sym){ns - 1, -1, off, n};
        if (ns) sc->s[ns - 1].next = ns;
        off += n;
    }
    sc->h.n = 0;
    for (int i = 1; i < ns; ++i)
        if (!try_bigram(t, sc, w, i - 1, i)) return false;
    while (sc->h.n) {
        tok_bigram b = tok_heap_pop(&sc->h);
        sym *l = &sc->s[b.left], *r = &sc->s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* outdated */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sc->s[r->next].prev = b.left;
        int left = b.left;
        if (!try_bigram(t, sc, w, sc->s[left].prev, left) || !try_bigram(t, sc, w, left, sc->s[left].next))
            return false;
    }
    for (int i = 0; ns && i >= 0; i = sc->s[i].next) {
        const sym *s = &sc->s[i];
        int32_t id = tok_map_get(&t->by_text, w + s->off, s->n);
        if (id >= 0) {
            if (!tok_ids_push(out, id)) return false;
            continue;
        }
        for (size_t k = 0; k < s->n; ++k) { /* not a token: each byte on its own, if it is one */
            int32_t b = tok_map_get(&t->by_text, w + s->off + k, 1);
            if (b >= 0 && !tok_ids_push(out, b)) return false;
        }
    }
    return true;
}

/* Copies text, replacing each invalid UTF-8 byte with U+FFFD (the regexes need valid UTF-8). */
static char *sanitize(const char *text, size_t len, size_t *out_len)
{
    char *o = malloc(3 * len + 1);
    if (!o) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)text[i];
        size_t n = 0;
        if (c < 0x80) n = 1;
        else if (c >= 0xc2 && c <= 0xdf) n = 2;
        else if (c >= 0xe0 && c <= 0xef) n = 3;
        else if (c >= 0xf0 && c <= 0xf4) n = 4;
        bool ok = n > 0 && n <= len - i;
        for (size_t j = 1; ok && j < n; ++j) {
            unsigned char d = (unsigned char)text[i + j];
            unsigned char lo = 0x80, hi = 0xbf;
            if (j == 1 && c == 0xe0) lo = 0xa0;
            if (j == 1 && c == 0xed) hi = 0x9f;
            if (j == 1 && c == 0xf0) lo = 0x90;
            if (j == 1 && c == 0xf4) hi = 0x8f;
            ok = d >= lo && d <= hi;
        }
        if (ok) {
            memcpy(o + k, text + i, n);
            k += n;
            i += n;
        } else {
            memcpy(o + k, "\xef\xbf\xbd", 3);
            k += 3;
            i += 1;
        }
    }
    *out_len = k;
    return o;
}

dcp_status tok_bpe_encode(const dcp_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
#ifdef DCP_HAVE_PCRE2
    dcp_status st = DCP_OK;
    scratch sc = {0};
    size_t *cur = NULL, *next = NULL, n_cur = 0, n_next = 0, cap = 0;
    pcre2_match_data *md = NULL;
    size_t sl;
    char *s = sanitize(text, len, &sl);
    if (!s) goto oom;
    /* word lengths; each regex refines every word into matches and the gaps between them */
    cap = sl + 1;
    cur = malloc(cap * sizeof *cur);
    next = malloc(cap * sizeof *next);
    if (!cur || !next) goto oom;
    if (sl) cur[n_cur++] = sl;
    for (unsigned r = 0; r < t->n_regex; ++r) {
        pcre2_code *re = t->regex[r];
        md = pcre2_match_data_create_from_pattern(re, NULL);
        if (!md) goto oom;
        size_t start = 0;
        n_next = 0;
        for (size_t wi = 0; wi < n_cur; ++wi) {
            const char *subj = s + start;
            size_t wl = cur[wi], pos = 0, last = 0;
            while (pos < wl) {
                int rc = pcre2_match(re, (PCRE2_SPTR)subj, wl, pos, PCRE2_NO_UTF_CHECK, md, NULL);
                if (rc == PCRE2_ERROR_NOMATCH) break;
                if (rc < 0) {
                    st = dcp_fail(DCP_ERR_INTERNAL, "pre-tokenizer %s: regex %u failed (%d)",
                                  t->pre_name, r, rc);
                    goto fail;
                }
                PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
                size_t ms = ov[0], me = ov[1];
                if (me == ms) { /* empty match: step over one character */
                    pos = ms + tok_utf8_len((unsigned char)subj[ms]);
                    continue;
                }
                if (ms > last) next[n_next++] = ms - last;
                next[n_next++] = me - ms;
                last = pos = me;
            }
            if (last < wl) next[n_next++] = wl - last;
            start += wl;
        }
        pcre2_match_data_free(md);
        md = NULL;
        size_t *tmp = cur;
        cur = next;
        next = tmp;
        n_cur = n_next;
    }
    size_t start = 0;
    for (size_t wi = 0; wi < n_cur; ++wi) {
        if (!bpe_word(t, &sc, s + start, cur[wi], out)) goto oom;
        start += cur[wi];
    }
    goto done;
oom:
    st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
fail:
done:
    if (md) pcre2_match_data_free(md);
    free(s);
    free(cur);
    free(next);
    free(sc.key);
    free(sc.word);
    free(sc.s);
    free(sc.h.v);
    return st;
#else
    (void)text, (void)len, (void)out;
    return dcp_fail(DCP_ERR_UNSUPPORTED, "gpt2 tokenizer: this build has no PCRE2");
#endif
}
