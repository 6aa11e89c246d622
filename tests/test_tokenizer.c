/* Tokenizers: every llama.cpp test vector of the phi-3 (SentencePiece) and deepseek-llm
 * (byte-level BPE) vocabularies, the stories260K vocabulary, the other BPE pre-tokenizers on a
 * small made-up vocabulary, and the streaming detokenizer. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/tokenizer.h"
#include "test_gguf_util.h"
#include "testutil.h"

static dcp_tokenizer *load(const char *rel, dcp_gguf **gout)
{
    dcp_gguf *g;
    dcp_tokenizer *t;
    if (dcp_gguf_open(dcp_test_data_path(rel), &g) != DCP_OK) fail_msg("%s", dcp_last_error());
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    if (gout) *gout = g;
    else dcp_gguf_close(g);
    return t;
}

/* Runs all cases of <vocab>.inp / .out; returns the number of cases. */
static int run_vectors(const char *vocab)
{
    char rel[256];
    size_t n_inp, n_out;
    snprintf(rel, sizeof rel, "%s.inp", vocab);
    char *inp = dcp_test_read_file(dcp_test_data_path(rel), &n_inp);
    snprintf(rel, sizeof rel, "%s.out", vocab);
    char *out = dcp_test_read_file(dcp_test_data_path(rel), &n_out);
    snprintf(rel, sizeof rel, "%s", vocab);
    dcp_tokenizer *t = load(rel, NULL);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    char *p = inp, *line = out;
    int cases = 0, bad = 0;
    for (;;) {
        char *end = strstr(p, sep);
        if (!end) break;
        char *eol = strchr(line, '\n');
        assert_non_null(eol);
        *eol = '\0';
        int32_t *ids;
        size_t n;
        assert_int_equal(dcp_tokenizer_encode(t, p, (size_t)(end - p), 0, &ids, &n), DCP_OK);
        char got[8192];
        size_t k = 0;
        got[0] = '\0';
        for (size_t i = 0; i < n; ++i) k += (size_t)snprintf(got + k, sizeof got - k, " %d", (int)ids[i]);
        if (strcmp(got, line) != 0) {
            print_message("%s case %d (%.*s):\n  want:%s\n  got: %s\n", vocab, cases, (int)(end - p), p, line, got);
            ++bad;
        }
        /* decoding gives the text back (both vocabularies are lossless on these inputs, with the
         * SentencePiece prefix space dropped) */
        char *text;
        size_t tl;
        assert_int_equal(dcp_tokenizer_decode(t, ids, n, 0, &text, &tl), DCP_OK);
        if (tl != (size_t)(end - p) || memcmp(text, p, tl) != 0) {
            print_message("%s case %d: decode gives '%s'\n", vocab, cases, text);
            ++bad;
        }
        free(text);
        free(ids);
        ++cases;
        p = end + strlen(sep);
        line = eol + 1;
    }
    assert_int_equal(bad, 0);
    dcp_tokenizer_destroy(t);
    free(inp);
    free(out);
    return cases;
}

static void test_phi3_vectors(void **state)
{
    (void)state;
    assert_int_equal(run_vectors("ggml-vocab-phi-3.gguf"), 46);
}

static void test_deepseek_vectors(void **state)
{
    (void)state;
    assert_int_equal(run_vectors("ggml-vocab-deepseek-llm.gguf"), 46);
}

static void test_vocab_properties(void **state)
{
    (void)state;
    dcp_tokenizer *t = load("ggml-vocab-phi-3.gguf", NULL);
    assert_int_equal(dcp_tokenizer_get_kind(t), DCP_TOKENIZER_SPM);
    assert_int_equal(dcp_tokenizer_n_vocab(t), 32064);
    assert_int_equal(dcp_tokenizer_bos(t), 1);
    assert_int_equal(dcp_tokenizer_eos(t), 32000);
    assert_true(dcp_tokenizer_wants_bos(t));
    /* "</s>" (2) is stored as USER_DEFINED in this file, but it is a well-known end-of-text
     * spelling, so it counts as a control token, as in llama.cpp; "<|end|>" (32007) was CONTROL. */
    assert_int_equal(dcp_tokenizer_token_type(t, 2), DCP_TOKEN_CONTROL);
    assert_int_equal(dcp_tokenizer_token_type(t, 32007), DCP_TOKEN_CONTROL);
    assert_int_equal(dcp_tokenizer_token_type(t, 29879), DCP_TOKEN_NORMAL);
    /* control tokens are text unless parse_special */
    const char *s = "<|endoftext|>x</s>";
    int32_t *ids;
    size_t n;
    assert_int_equal(dcp_tokenizer_encode(t, s, strlen(s), DCP_TOKENIZE_PARSE_SPECIAL | DCP_TOKENIZE_ADD_BOS, &ids, &n), DCP_OK);
    assert_true(n >= 4);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], 32000);
    assert_int_equal(ids[n - 1], 2);
    free(ids);
    assert_int_equal(dcp_tokenizer_encode(t, s, strlen(s), 0, &ids, &n), DCP_OK);
    assert_true(n > 4);
    for (size_t i = 0; i < n; i++) assert_true(ids[i] != 32000 && ids[i] != 2);
    free(ids);
    /* "a </s>" as llama.cpp tokenizes it with special parsing off. Where the expectation comes from:
     * llama.cpp's SentencePiece algorithm worked through by hand over this vocabulary (checked with
     * a throwaway script that reproduces all 46 vectors of ggml-vocab-phi-3.gguf.out). "</s>" is a
     * control token, so the whole text is one fragment, "▁a▁</s>" with the prefixed space; of its
     * adjacent pairs only these are tokens: "▁a" (263, score -4), "▁<" (529, -270), "</" (829,
     * -570). Highest score first: "▁a", then "▁<", then "▁<" + "/" = "▁</" (1533, -1274), which
     * outranks nothing left: "▁</s", "/s" and "s>" are not tokens. So: ▁a ▁</ s > = 263 1533 29879
     * 29958. With special parsing on, "</s>" is split off first: "a " -> ▁a ▁ (263 29871), then 2. */
    static const int32_t text_ids[] = {263, 1533, 29879, 29958}, special_ids[] = {263, 29871, 2};
    assert_int_equal(dcp_tokenizer_encode(t, "a </s>", 6, 0, &ids, &n), DCP_OK);
    assert_int_equal(n, 4);
    assert_memory_equal(ids, text_ids, sizeof text_ids);
    free(ids);
    assert_int_equal(dcp_tokenizer_encode(t, "a </s>", 6, DCP_TOKENIZE_PARSE_SPECIAL, &ids, &n), DCP_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(ids, special_ids, sizeof special_ids);
    /* a control token is hidden when decoding unless asked for */
    char *text;
    assert_int_equal(dcp_tokenizer_decode(t, ids, n, 0, &text, NULL), DCP_OK);
    assert_string_equal(text, "a ");
    free(text);
    assert_int_equal(dcp_tokenizer_decode(t, ids, n, DCP_DECODE_SPECIAL, &text, NULL), DCP_OK);
    assert_string_equal(text, "a </s>");
    free(text);
    free(ids);
    dcp_tokenizer_destroy(t);

    t = load("ggml-vocab-deepseek-llm.gguf", NULL);
    assert_int_equal(dcp_tokenizer_get_kind(t), DCP_TOKENIZER_BPE);
    assert_string_equal(dcp_tokenizer_pre(t), "deepseek-llm");
    assert_int_equal(dcp_tokenizer_n_vocab(t), 102400);
    assert_int_equal(dcp_tokenizer_bos(t), 100000);
    assert_int_equal(dcp_tokenizer_eos(t), 100001);
    /* none of this vocabulary's tokens is a well-known control spelling: types as stored */
    assert_int_equal(dcp_tokenizer_token_type(t, 100001), DCP_TOKEN_CONTROL);
    assert_int_equal(dcp_tokenizer_token_type(t, 100002), DCP_TOKEN_USER_DEFINED);
    assert_int_equal(dcp_tokenizer_token_type(t, 1), DCP_TOKEN_NORMAL);
    assert_int_equal(dcp_tokenizer_encode(t, "", 0, DCP_TOKENIZE_ADD_BOS | DCP_TOKENIZE_ADD_EOS, &ids, &n), DCP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 100000);
    assert_int_equal(ids[1], 100001);
    /* special tokens are hidden unless asked for */
    assert_int_equal(dcp_tokenizer_decode(t, ids, n, 0, &text, NULL), DCP_OK);
    assert_string_equal(text, "");
    free(text);
    assert_int_equal(dcp_tokenizer_decode(t, ids, n, DCP_DECODE_SPECIAL, &text, NULL), DCP_OK);
    assert_string_equal(text, "<\xef\xbd\x9c" "begin\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c><\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>");
    free(text);
    free(ids);
    int32_t bad = 102400;
    assert_int_equal(dcp_tokenizer_decode(t, &bad, 1, 0, &text, NULL), DCP_ERR_INVALID_ARGUMENT);
    assert_null(text);
    dcp_tokenizer_destroy(t);
}

static const int32_t stories_ref[] = {
    1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419, 292,
    411, 322, 265, 282, 295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388, 426, 338, 391, 266, 267, 337,
    335, 312, 432, 398, 312, 286, 267, 414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336, 432, 313, 438, 310, 432, 278,
    316, 439, 419, 298, 414, 267, 265, 282, 295, 433, 426, 436, 317, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327,
    263, 415, 294, 267, 400, 426, 338, 336, 432, 313, 442, 391, 267, 337, 335, 364, 420, 268, 388, 432, 398, 359, 280, 303, 439,
    413, 272, 417, 264, 312, 426, 436, 13, 438, 310, 286, 296, 418, 269, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415, 294,
    267, 400, 426, 338, 336, 432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 317, 426, 359, 279, 292, 416, 439, 413, 409, 416,
    327, 263, 415, 294, 267, 400, 426, 436, 13, 438, 310, 279, 292, 416, 439, 413, 391, 267, 281, 421, 427, 311, 357, 432, 384,
    358, 336, 432, 313, 442, 439, 423, 262, 304, 420, 422, 432, 357, 426, 359, 279, 292, 416, 439, 413, 409, 416, 327, 263, 415,
    294, 267, 400, 426, 436, 320, 285, 357, 336, 432, 313, 455, 289, 439, 413, 263, 304, 420, 422, 432, 317, 426, 410, 448, 411,
    280, 303, 281, 421, 427, 364, 426,
};

static void test_stories_vocab(void **state)
{
    (void)state;
    dcp_tokenizer *t = load("stories260K.gguf", NULL);
    assert_int_equal(dcp_tokenizer_n_vocab(t), 512);
    assert_int_equal(dcp_tokenizer_bos(t), 1);
    assert_int_equal(dcp_tokenizer_eos(t), 2);
    assert_int_equal(dcp_tokenizer_token_type(t, 2), DCP_TOKEN_CONTROL); /* stored CONTROL already */
    assert_int_equal(dcp_tokenizer_token_type(t, 3), DCP_TOKEN_BYTE);
    int32_t *ids;
    size_t n;
    const char *s = "Once upon a time";
    assert_int_equal(dcp_tokenizer_encode(t, s, strlen(s), DCP_TOKENIZE_ADD_BOS, &ids, &n), DCP_OK);
    assert_int_equal(n, 5);
    const int32_t want[5] = {1, 403, 407, 261, 378};
    assert_memory_equal(ids, want, sizeof want);
    free(ids);
    assert_int_equal(sizeof stories_ref / sizeof stories_ref[0], 257);
    char *text;
    size_t len;
    assert_int_equal(dcp_tokenizer_decode(t, stories_ref, 257, 0, &text, &len), DCP_OK);
    const char *start = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    const char *end = "Her mom said, \"Don't worry, Lily. We can help you.";
    assert_memory_equal(text, start, strlen(start));
    assert_true(len > strlen(end));
    assert_string_equal(text + len - strlen(end), end);
    assert_non_null(strchr(text, '\n')); /* id 13 is <0x0A> */
    /* and the text tokenizes back to the same ids */
    int32_t *back;
    size_t nb;
    assert_int_equal(dcp_tokenizer_encode(t, text, len, DCP_TOKENIZE_ADD_BOS, &back, &nb), DCP_OK);
    assert_int_equal(nb, 257);
    assert_memory_equal(back, stories_ref, sizeof stories_ref);
    free(back);
    free(text);
    /* byte fallback for characters the vocabulary lacks */
    s = "\xe4\xb8\xad"; /* U+4E2D, not in the vocabulary */
    assert_int_equal(dcp_tokenizer_encode(t, s, strlen(s), 0, &ids, &n), DCP_OK);
    assert_int_equal(n, 4); /* "\u2581" then 3 byte tokens */
    assert_int_equal(ids[0], 410);
    assert_int_equal(ids[1], 3 + 0xe4);
    assert_int_equal(ids[2], 3 + 0xb8);
    assert_int_equal(ids[3], 3 + 0xad);
    free(ids);
    dcp_tokenizer_destroy(t);
}

/* Streaming: pieces never end inside a UTF-8 character, and they add up to the whole text. */
static void test_stream_utf8(void **state)
{
    (void)state;
    dcp_tokenizer *t = load("stories260K.gguf", NULL);
    /* "é€😀" as byte tokens, with an ASCII word between, and a broken sequence at the end */
    const int32_t ids[] = {1, 3 + 0xc3, 3 + 0xa9, 403, 3 + 0xe2, 3 + 0x82, 3 + 0xac,
                           3 + 0xf0, 3 + 0x9f, 3 + 0x98, 3 + 0x80, 3 + 0xe2, 3 + 0x82};
    dcp_detokenizer *d;
    assert_int_equal(dcp_detokenizer_create(t, 0, &d), DCP_OK);
    char all[256];
    size_t total = 0;
    size_t want_len[] = {0, 0, 2, 5, 0, 0, 3, 0, 0, 0, 4, 0, 0};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; ++i) {
        const char *p;
        size_t n;
        assert_int_equal(dcp_detokenizer_push(d, ids[i], &p, &n), DCP_OK);
        assert_int_equal(n, want_len[i]);
        memcpy(all + total, p, n);
        total += n;
    }
    const char *p;
    size_t n;
    assert_int_equal(dcp_detokenizer_flush(d, &p, &n), DCP_OK);
    memcpy(all + total, p, n);
    total += n;
    all[total] = '\0';
    assert_string_equal(all, "\xc3\xa9 Once\xe2\x82\xac\xf0\x9f\x98\x80\xef\xbf\xbd");
    /* an invalid byte is replaced at once; ids out of range fail */
    assert_int_equal(dcp_detokenizer_push(d, 3 + 0xff, &p, &n), DCP_OK);
    assert_int_equal(n, 3);
    assert_memory_equal(p, "\xef\xbf\xbd", 3);
    assert_int_equal(dcp_detokenizer_push(d, 512, &p, &n), DCP_ERR_INVALID_ARGUMENT);
    assert_int_equal(dcp_detokenizer_push(d, -1, &p, &n), DCP_ERR_INVALID_ARGUMENT);
    dcp_detokenizer_destroy(d);
    /* special tokens: hidden by default, shown on request; the prefix space kept on request */
    const int32_t sp[] = {1, 403, 2};
    char *text;
    assert_int_equal(dcp_tokenizer_decode(t, sp, 3, 0, &text, NULL), DCP_OK);
    assert_string_equal(text, "Once");
    free(text);
    assert_int_equal(dcp_tokenizer_decode(t, sp, 3, DCP_DECODE_SPECIAL | DCP_DECODE_KEEP_LEADING_SPACE, &text, NULL), DCP_OK);
    assert_string_equal(text, "<s> Once</s>");
    free(text);
    dcp_tokenizer_destroy(t);

    /* byte-level BPE: an emoji split over several tokens streams as one character */
    t = load("ggml-vocab-deepseek-llm.gguf", NULL);
    const char *s = "a\xf0\x9f\x9a\x80\xe4\xbd\xa0\xe5\xa5\xbd \xd0\x9f";
    int32_t *e;
    size_t ne;
    assert_int_equal(dcp_tokenizer_encode(t, s, strlen(s), 0, &e, &ne), DCP_OK);
    assert_int_equal(dcp_detokenizer_create(t, 0, &d), DCP_OK);
    total = 0;
    for (size_t i = 0; i < ne; ++i) {
        assert_int_equal(dcp_detokenizer_push(d, e[i], &p, &n), DCP_OK);
        /* each piece is whole UTF-8 */
        for (size_t k = 0; k < n;) {
            unsigned char c = (unsigned char)p[k];
            size_t l = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;
            assert_true(k + l <= n);
            k += l;
        }
        memcpy(all + total, p, n);
        total += n;
    }
    assert_int_equal(dcp_detokenizer_flush(d, &p, &n), DCP_OK);
    assert_int_equal(n, 0);
    all[total] = '\0';
    assert_string_equal(all, s);
    free(e);
    dcp_detokenizer_destroy(d);
    dcp_tokenizer_destroy(t);
}

/* A small byte-level BPE vocabulary: all 256 byte symbols, a few merges. */
static dcp_tokenizer *small_bpe(const char *pre)
{
    static const char *const printable_merges[] = {"h e", "l l", "he ll", "hell o", "\xc4\xa0 w", "\xc4\xa0w o", "1 2", "12 3"};
    const char *toks[300];
    char storage[300][8];
    size_t n = 0;
    /* byte alphabet: printable bytes stand for themselves, others 256.. */
    for (unsigned b = 0, extra = 0; b < 256; ++b) {
        unsigned cp = ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) ? b : 256 + extra++;
        if (cp < 0x80) storage[n][0] = (char)cp, storage[n][1] = 0;
        else storage[n][0] = (char)(0xc0 | (cp >> 6)), storage[n][1] = (char)(0x80 | (cp & 0x3f)), storage[n][2] = 0;
        toks[n] = storage[n];
        ++n;
    }
    static const char *const merged[] = {"he", "ll", "hell", "hello", "\xc4\xa0w", "\xc4\xa0wo", "12", "123", "<|bos|>"};
    for (size_t i = 0; i < 9; ++i) toks[n++] = merged[i];
    int32_t types[300];
    for (size_t i = 0; i < n; ++i) types[i] = DCP_TOKEN_NORMAL;
    types[n - 1] = DCP_TOKEN_CONTROL;
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2", 4), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string(w, "tokenizer.ggml.pre", pre, strlen(pre)), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", toks, NULL, n), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", DCP_GGUF_TYPE_INT32, types, n), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.merges", printable_merges, NULL, 8), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_uint(w, "tokenizer.ggml.bos_token_id", DCP_GGUF_TYPE_UINT32, n - 1), DCP_OK);
    size_t bytes;
    uint8_t *p = tg_writer_bytes(w, &bytes);
    dcp_gguf_writer_destroy(w);
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open_memory(p, bytes, "small-bpe", &g), DCP_OK);
    dcp_tokenizer *t;
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    dcp_gguf_close(g);
    free(p);
    return t;
}

static void expect_ids(dcp_tokenizer *t, const char *s, const int32_t *want, size_t n_want)
{
    int32_t *ids;
    size_t n;
    assert_int_equal(dcp_tokenizer_encode(t, s, strlen(s), DCP_TOKENIZE_PARSE_SPECIAL, &ids, &n), DCP_OK);
    if (n != n_want || (n && memcmp(ids, want, n * sizeof *ids) != 0)) {
        for (size_t i = 0; i < n; ++i) print_message("%d ", (int)ids[i]);
        fail_msg("'%s': unexpected ids", s);
    }
    char *back;
    assert_int_equal(dcp_tokenizer_decode(t, ids, n, DCP_DECODE_SPECIAL, &back, NULL), DCP_OK);
    assert_string_equal(back, s);
    free(back);
    free(ids);
}

static void test_bpe_pretokenizers(void **state)
{
    (void)state;
    /* byte b has token id b (its stand-in character); merged tokens follow from 256 */
    const int32_t HE = 256, LL = 257, HELL = 258, HELLO = 259, GW = 260, GWO = 261, N12 = 262, N123 = 263, BOS = 264;
    const int32_t SPACE = 32, R = 'r', D = 'd', FOUR = '4';
    dcp_tokenizer *t = small_bpe("default");
    assert_string_equal(dcp_tokenizer_pre(t), "default");
    expect_ids(t, "hello world", (int32_t[]){HELLO, GWO, R, 'l', D}, 5);
    /* default: digits are split in groups of three */
    expect_ids(t, "1234", (int32_t[]){N123, FOUR}, 2);
    expect_ids(t, "<|bos|>hello", (int32_t[]){BOS, HELLO}, 2);
    dcp_tokenizer_destroy(t);
    t = small_bpe("llama-bpe");
    assert_string_equal(dcp_tokenizer_pre(t), "llama3");
    expect_ids(t, "hello world", (int32_t[]){HELLO, GWO, R, 'l', D}, 5);
    expect_ids(t, "1234", (int32_t[]){N123, FOUR}, 2);
    expect_ids(t, "  hello", (int32_t[]){SPACE, SPACE, HELLO}, 3);
    dcp_tokenizer_destroy(t);
    t = small_bpe("deepseek-llm");
    assert_string_equal(dcp_tokenizer_pre(t), "deepseek-llm");
    expect_ids(t, "he\nll", (int32_t[]){HE, '\n', LL}, 3); /* byte b has id b here */
    expect_ids(t, "hello world!", (int32_t[]){HELLO, GWO, R, 'l', D, '!'}, 6);
    dcp_tokenizer_destroy(t);
    t = small_bpe("qwen2");
    assert_string_equal(dcp_tokenizer_pre(t), "qwen2");
    expect_ids(t, "hello world", (int32_t[]){HELLO, GWO, R, 'l', D}, 5);
    /* qwen2: every digit is a word of its own (the "12" and "123" merges cannot apply) */
    expect_ids(t, "1234", (int32_t[]){'1', '2', '3', FOUR}, 4);
    expect_ids(t, "  hello", (int32_t[]){SPACE, SPACE, HELLO}, 3);
    dcp_tokenizer_destroy(t);
    (void)HELL, (void)GW, (void)N12;
}

/* An SPM vocabulary of the given tokens and stored types (scores 0). */
static dcp_tokenizer *small_spm(const char *const *toks, const int32_t *types, size_t n)
{
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string(w, "tokenizer.ggml.model", "llama", 5), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", toks, NULL, n), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", DCP_GGUF_TYPE_INT32, types, n), DCP_OK);
    size_t bytes;
    uint8_t *p = tg_writer_bytes(w, &bytes);
    dcp_gguf_writer_destroy(w);
    dcp_gguf *g;
    assert_int_equal(dcp_gguf_open_memory(p, bytes, "small-spm", &g), DCP_OK);
    dcp_tokenizer *t;
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    dcp_gguf_close(g);
    free(p);
    return t;
}

/* Tokens that llama.cpp recognises by their text at load (end of generation, fill in the middle)
 * are control tokens whatever type the file stores, except "<|end|>" in vocabularies that also
 * have "<|return|>" and "<|call|>" (a user-defined token there) and "</s>" in vocabularies with
 * "<|tool_response>" (a normal one there). The expectations restate those rules of llama.cpp's
 * vocabulary loader (src/llama-vocab.cpp, its end-of-generation and FIM token detection). */
static void test_control_overrides(void **state)
{
    (void)state;
    enum { N = 1, U = 2, C = 3, UD = 4 };
    static const char *const toks[] = {"<unk>", "<s>", "</s>", "<|im_end|>", "<|fim_prefix|>", "<|end|>",
                                       "<end_of_turn>", "<|endoftext|>x", "\xe2\x96\x81", "<", "|"};
    static const int32_t types[] = {U, C, UD, N, UD, UD, N, UD, N, N, N};
    static const dcp_token_type want[] = {DCP_TOKEN_UNKNOWN, DCP_TOKEN_CONTROL, DCP_TOKEN_CONTROL, DCP_TOKEN_CONTROL,
                                          DCP_TOKEN_CONTROL, DCP_TOKEN_CONTROL, DCP_TOKEN_CONTROL,
                                          DCP_TOKEN_USER_DEFINED, DCP_TOKEN_NORMAL, DCP_TOKEN_NORMAL, DCP_TOKEN_NORMAL};
    dcp_tokenizer *t = small_spm(toks, types, 11);
    for (int32_t i = 0; i < 11; i++)
        if (dcp_tokenizer_token_type(t, i) != want[i])
            fail_msg("token %d '%s': type %d, want %d", i, toks[i], dcp_tokenizer_token_type(t, i), want[i]);
    /* "<|im_end|>" (stored NORMAL) is matched only with special parsing; "<|endoftext|>x" is not one
     * of the spellings (its own user-defined type stands): always matched */
    int32_t *ids;
    size_t n;
    assert_int_equal(dcp_tokenizer_encode(t, "<|im_end|>", 10, DCP_TOKENIZE_PARSE_SPECIAL, &ids, &n), DCP_OK);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 3);
    free(ids);
    assert_int_equal(dcp_tokenizer_encode(t, "<|im_end|>", 10, 0, &ids, &n), DCP_OK);
    assert_true(n > 1);
    for (size_t i = 0; i < n; i++) assert_int_not_equal(ids[i], 3);
    free(ids);
    assert_int_equal(dcp_tokenizer_encode(t, "<|endoftext|>x", 14, 0, &ids, &n), DCP_OK);
    assert_int_equal(n, 1); /* the user-defined token; no raw text is left to prefix a space to */
    assert_int_equal(ids[0], 7);
    free(ids);
    dcp_tokenizer_destroy(t);

    /* the two exceptions: they hold even where the file says CONTROL */
    static const char *const toks2[] = {"<unk>", "</s>", "<|end|>", "<|return|>", "<|call|>", "<|tool_response>"};
    static const int32_t types2[] = {U, C, C, N, N, N};
    t = small_spm(toks2, types2, 6);
    assert_int_equal(dcp_tokenizer_token_type(t, 1), DCP_TOKEN_NORMAL);
    assert_int_equal(dcp_tokenizer_token_type(t, 2), DCP_TOKEN_USER_DEFINED);
    assert_int_equal(dcp_tokenizer_token_type(t, 3), DCP_TOKEN_CONTROL);
    assert_int_equal(dcp_tokenizer_token_type(t, 4), DCP_TOKEN_CONTROL);
    assert_int_equal(dcp_tokenizer_token_type(t, 5), DCP_TOKEN_CONTROL);
    dcp_tokenizer_destroy(t);
    static const char *const toks3[] = {"<unk>", "<|end|>", "<|calls|>", "<|flush|>"};
    static const int32_t types3[] = {U, N, N, N};
    t = small_spm(toks3, types3, 4);
    assert_int_equal(dcp_tokenizer_token_type(t, 1), DCP_TOKEN_USER_DEFINED);
    assert_int_equal(dcp_tokenizer_token_type(t, 2), DCP_TOKEN_CONTROL);
    dcp_tokenizer_destroy(t);
    /* without the companions "<|end|>" is a control token */
    static const char *const toks4[] = {"<unk>", "<|end|>", "<|return|>"};
    t = small_spm(toks4, types3, 3);
    assert_int_equal(dcp_tokenizer_token_type(t, 1), DCP_TOKEN_CONTROL);
    dcp_tokenizer_destroy(t);
}

static void test_tokenizer_errors(void **state)
{
    (void)state;
    dcp_gguf_writer *w;
    dcp_gguf *g;
    dcp_tokenizer *t;
    size_t n;
    const char *toks[2] = {"a", "b"};
    /* no tokenizer at all */
    assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
    uint8_t *p = tg_writer_bytes(w, &n);
    assert_int_equal(dcp_gguf_open_memory(p, n, "empty-vocab", &g), DCP_OK);
    assert_int_equal(dcp_tokenizer_create(g, &t), DCP_ERR_FORMAT);
    assert_null(t);
    assert_non_null(strstr(dcp_last_error(), "tokenizer.ggml.model"));
    dcp_gguf_close(g);
    free(p);
    dcp_gguf_writer_destroy(w);
    /* unknown pre-tokenizer; scores of the wrong length; gpt2 without merges */
    for (int c = 0; c < 3; ++c) {
        assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_string(w, "tokenizer.ggml.model", c == 1 ? "llama" : "gpt2", c == 1 ? 5 : 4), DCP_OK);
        if (c == 0) assert_int_equal(dcp_gguf_writer_set_string(w, "tokenizer.ggml.pre", "qwen9", 5), DCP_OK);
        assert_int_equal(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", toks, NULL, 2), DCP_OK);
        if (c == 1) assert_int_equal(dcp_gguf_writer_set_array(w, "tokenizer.ggml.scores", DCP_GGUF_TYPE_FLOAT32, (float[]){0}, 1), DCP_OK);
        p = tg_writer_bytes(w, &n);
        assert_int_equal(dcp_gguf_open_memory(p, n, "bad-vocab", &g), DCP_OK);
        dcp_status want = c == 0 ? DCP_ERR_UNSUPPORTED : DCP_ERR_FORMAT;
        assert_int_equal(dcp_tokenizer_create(g, &t), want);
        const char *needle = c == 0 ? "qwen9" : c == 1 ? "tokenizer.ggml.scores" : "tokenizer.ggml.merges";
        if (!strstr(dcp_last_error(), needle)) fail_msg("message '%s' lacks '%s'", dcp_last_error(), needle);
        dcp_gguf_close(g);
        free(p);
        dcp_gguf_writer_destroy(w);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_phi3_vectors),
        cmocka_unit_test(test_deepseek_vectors),
        cmocka_unit_test(test_vocab_properties),
        cmocka_unit_test(test_stories_vocab),
        cmocka_unit_test(test_stream_utf8),
        cmocka_unit_test(test_bpe_pretokenizers),
        cmocka_unit_test(test_control_overrides),
        cmocka_unit_test(test_tokenizer_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
