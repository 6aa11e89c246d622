/* Tokenizer fuzz target body (more_fuzz_targets.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/tokenizer.h"
#include "testmodel/testmodel.h"
#include "more_fuzz_targets.h"

static volatile uint64_t sink;

enum { MAX_VOCABS = 4 };
static dcp_gguf *files[MAX_VOCABS];
static dcp_tokenizer *vocabs[MAX_VOCABS];
static int n_vocabs = -1;

static void load_vocabs(const char *dir)
{
    static const char *const names[] = {"stories260K.gguf", "ggml-vocab-phi-3.gguf", "ggml-vocab-deepseek-llm.gguf"};
    n_vocabs = 0;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (dcp_gguf_open(path, &files[n_vocabs]) != DCP_OK ||
            dcp_tokenizer_create(files[n_vocabs], &vocabs[n_vocabs]) != DCP_OK) {
            fprintf(stderr, "fuzz_tokenizers: cannot load %s: %s\n", path, dcp_last_error());
            abort();
        }
        n_vocabs++;
    }
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.n_embd = 32, mc.n_layer = 1, mc.n_head = 4, mc.n_head_kv = 2, mc.head_dim = 8, mc.n_ff = 64;
    if (dcp_gguf_open_test_model(&mc, &files[n_vocabs]) != DCP_OK ||
        dcp_tokenizer_create(files[n_vocabs], &vocabs[n_vocabs]) != DCP_OK) {
        fprintf(stderr, "fuzz_tokenizers: the generated vocabulary: %s\n", dcp_last_error());
        abort();
    }
    n_vocabs++;
}

static void one(const dcp_tokenizer *t, unsigned sel, const uint8_t *data, size_t size)
{
    const uint32_t nv = dcp_tokenizer_n_vocab(t);
    /* text -> ids -> text */
    unsigned flags = (sel & 1 ? DCP_TOKENIZE_ADD_BOS : 0) | (sel & 2 ? DCP_TOKENIZE_ADD_EOS : 0) |
                     (sel & 4 ? DCP_TOKENIZE_PARSE_SPECIAL : 0);
    int32_t *ids = NULL;
    size_t n = 0;
    if (dcp_tokenizer_encode(t, (const char *)data, size, flags, &ids, &n) == DCP_OK) {
        for (size_t i = 0; i < n; i++)
            if (ids[i] < 0 || (uint32_t)ids[i] >= nv) abort();
        char *text;
        size_t len;
        unsigned dflags = (sel & 8 ? DCP_DECODE_SPECIAL : 0) | (sel & 16 ? DCP_DECODE_KEEP_LEADING_SPACE : 0);
        if (dcp_tokenizer_decode(t, ids, n, dflags, &text, &len) == DCP_OK) {
            if (text[len] != 0) abort();
            sink += len;
            free(text);
        } else if (!dcp_last_error()[0]) abort();
        free(ids);
    } else if (!dcp_last_error()[0]) abort();
    /* bytes as ids -> text, in one call and streamed */
    size_t m = size / 2;
    ids = malloc((m ? m : 1) * sizeof *ids);
    if (!ids) return;
    for (size_t i = 0; i < m; i++) {
        uint32_t v = (uint32_t)data[2 * i] | (uint32_t)data[2 * i + 1] << 8;
        /* the top 16 values: ids just past either end of the vocabulary */
        ids[i] = v < 0xfff0 ? (int32_t)(v % nv) : v & 8 ? -1 - (int32_t)(v & 7) : (int32_t)(nv + (v & 7));
    }
    char *text;
    size_t len;
    bool in_range = true;
    for (size_t i = 0; i < m; i++) in_range &= ids[i] >= 0 && (uint32_t)ids[i] < nv;
    dcp_status st = dcp_tokenizer_decode(t, ids, m, sel & 8 ? DCP_DECODE_SPECIAL : 0, &text, &len);
    if (st == DCP_OK) {
        if (!in_range || text[len] != 0) abort(); /* an id outside the vocabulary must be refused */
        sink += len;
        free(text);
    } else if (in_range || !dcp_last_error()[0]) abort();
    dcp_detokenizer *d;
    if (dcp_detokenizer_create(t, sel & 8 ? DCP_DECODE_SPECIAL : 0, &d) == DCP_OK) {
        const char *p;
        size_t k;
        for (size_t i = 0; i < m; i++) {
            st = dcp_detokenizer_push(d, ids[i], &p, &k);
            if ((st == DCP_OK) != (ids[i] >= 0 && (uint32_t)ids[i] < nv)) abort();
            if (st == DCP_OK && k) sink += (unsigned char)p[k - 1];
        }
        if (dcp_detokenizer_flush(d, &p, &k) == DCP_OK) sink += k;
        dcp_detokenizer_destroy(d);
    }
    free(ids);
}

int dcp_fuzz_tokenizers(const char *dir, const uint8_t *data, size_t size)
{
    if (n_vocabs < 0) load_vocabs(dir);
    unsigned sel = size ? data[0] : 0;
    for (int v = 0; v < n_vocabs; v++) one(vocabs[v], sel, data + (size ? 1 : 0), size ? size - 1 : 0);
    return 0;
}
