/* Fuzz smoke run, built with any compiler (CI uses gcc): the libFuzzer target body
 * (fuzz/gguf_fuzz_target.c) over the seed corpus and a few thousand deterministic mutations of it.
 * Seeds: the GGUFs of tests/data and files made here (a test model, a small BPE vocabulary, a file with
 * every value type). Run under the ASan build as well; a finding aborts or is a sanitizer report. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "dcpvk/tokenizer.h"
#include "testmodel/testmodel.h"
#include "gguf_fuzz_target.h"
#include "test_gguf_util.h"
#include "testutil.h"

typedef struct seed {
    uint8_t *p;
    size_t n;
    int mutations; /* how many mutated runs this seed gets */
} seed;

static uint8_t *bpe_vocab_file(size_t *n)
{
    const char *toks[300];
    char st[256][3];
    size_t k = 0;
    for (unsigned b = 0, extra = 0; b < 256; ++b) {
        unsigned cp = ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) ? b : 256 + extra++;
        if (cp < 0x80) st[b][0] = (char)cp, st[b][1] = 0;
        else st[b][0] = (char)(0xc0 | (cp >> 6)), st[b][1] = (char)(0x80 | (cp & 0x3f)), st[b][2] = 0;
        toks[k++] = st[b];
    }
    toks[k++] = "he";
    toks[k++] = "ll";
    toks[k++] = "<|bos|>";
    static const char *const merges[] = {"h e", "l l", "he ll"};
    int32_t types[300];
    for (size_t i = 0; i < k; ++i) types[i] = i + 1 == k ? DCP_TOKEN_CONTROL : DCP_TOKEN_NORMAL;
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_writer_create(32, &w), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string(w, "tokenizer.ggml.model", "gpt2", 4), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string(w, "tokenizer.ggml.pre", "deepseek-llm", 12), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.tokens", toks, NULL, k), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_array(w, "tokenizer.ggml.token_type", DCP_GGUF_TYPE_INT32, types, k), DCP_OK);
    assert_int_equal(dcp_gguf_writer_set_string_array(w, "tokenizer.ggml.merges", merges, NULL, 3), DCP_OK);
    uint8_t *p = tg_writer_bytes(w, n);
    dcp_gguf_writer_destroy(w);
    return p;
}

static void mutate(dcp_test_rng *r, uint8_t **pp, size_t *pn, size_t cap)
{
    uint8_t *p = *pp;
    size_t n = *pn;
    static const uint64_t interesting[] = {0, 1, 2, 31, 32, 33, 0x7f, 0x80, 0xff, 0xffff, 0xffffffffull,
                                           0x7fffffffffffffffull, 0x8000000000000000ull,
                                           0xffffffffffffffffull, 0xfffffffffffffff0ull, 1ull << 32};
    int ops = 1 + (int)(dcp_test_rng_next(r) % 4);
    for (int o = 0; o < ops && n; ++o) {
        /* positions favour the header, where the structure is */
        size_t lim = dcp_test_rng_next(r) % 4 ? (n < 2048 ? n : 2048) : n;
        size_t pos = (size_t)(dcp_test_rng_next(r) % lim);
        switch (dcp_test_rng_next(r) % 6) {
        case 0: p[pos] ^= (uint8_t)(1u << (dcp_test_rng_next(r) % 8)); break;
        case 1: p[pos] = (uint8_t)dcp_test_rng_next(r); break;
        case 2: { /* an interesting little-endian value of 1, 4 or 8 bytes */
            uint64_t v = interesting[dcp_test_rng_next(r) % (sizeof interesting / sizeof interesting[0])];
            size_t w = (size_t[]){1, 4, 8}[dcp_test_rng_next(r) % 3];
            for (size_t i = 0; i < w && pos + i < n; ++i) p[pos + i] = (uint8_t)(v >> (8 * i));
            break;
        }
        case 3: n = pos; break; /* truncate */
        case 4: { /* delete a chunk */
            size_t len = 1 + (size_t)(dcp_test_rng_next(r) % 64);
            if (pos + len > n) len = n - pos;
            memmove(p + pos, p + pos + len, n - pos - len);
            n -= len;
            break;
        }
        default: { /* duplicate a chunk */
            size_t len = 1 + (size_t)(dcp_test_rng_next(r) % 64);
            if (pos + len > n) len = n - pos;
            if (n + len <= cap) {
                memmove(p + pos + len, p + pos, n - pos);
                n += len;
            }
            break;
        }
        }
    }
    *pn = n;
}

static void test_fuzz_smoke(void **state)
{
    (void)state;
    seed seeds[8];
    int ns = 0;
    size_t n;
    seeds[ns++] = (seed){tg_small_file(&n), n, 6000};
    seeds[ns - 1].n = n;
    seeds[ns++] = (seed){bpe_vocab_file(&n), 0, 3000};
    seeds[ns - 1].n = n;
    dcp_test_model_config cfg = DCP_TEST_MODEL_CONFIG_DEFAULT;
    cfg.n_embd = 32, cfg.n_layer = 1, cfg.n_head = 4, cfg.n_head_kv = 2, cfg.head_dim = 8, cfg.n_ff = 64;
    cfg.weight_type = DCP_GGML_TYPE_Q8_0;
    char path[512];
    snprintf(path, sizeof path, "%s", tg_tmp_path("fuzz_seed.gguf"));
    assert_int_equal(dcp_gguf_make_test_model(path, &cfg), DCP_OK);
    seeds[ns].p = (uint8_t *)dcp_test_read_file(path, &seeds[ns].n);
    seeds[ns++].mutations = 1000;
    remove(path);
    static const char *const data_files[] = {"stories260K.gguf", "ggml-vocab-phi-3.gguf",
                                         "ggml-vocab-deepseek-llm.gguf"};
    static const int data_mut[] = {200, 40, 6};
    for (int i = 0; i < 3; ++i) {
        seeds[ns].p = (uint8_t *)dcp_test_read_file(dcp_test_data_path(data_files[i]), &seeds[ns].n);
        seeds[ns++].mutations = data_mut[i];
    }
    long execs = 0;
    dcp_test_rng r = {20240601};
    for (int s = 0; s < ns; ++s) {
        /* the seed itself must parse */
        dcp_gguf *g;
        assert_int_equal(dcp_gguf_open_memory(seeds[s].p, seeds[s].n, "seed", &g), DCP_OK);
        dcp_gguf_close(g);
        uint8_t *exact = malloc(seeds[s].n);
        memcpy(exact, seeds[s].p, seeds[s].n);
        dcp_fuzz_gguf(exact, seeds[s].n);
        free(exact);
        ++execs;
        size_t cap = seeds[s].n + 256;
        uint8_t *buf = malloc(cap);
        for (int m = 0; m < seeds[s].mutations; ++m) {
            memcpy(buf, seeds[s].p, seeds[s].n);
            size_t len = seeds[s].n;
            mutate(&r, &buf, &len, cap);
            /* an exact-size copy so that ASan catches any read past the end */
            uint8_t *in = malloc(len ? len : 1);
            memcpy(in, buf, len);
            dcp_fuzz_gguf(in, len);
            free(in);
            ++execs;
        }
        free(buf);
        free(seeds[s].p);
    }
    print_message("fuzz smoke: %ld executions over %d seeds, no finding\n", execs, ns);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fuzz_smoke),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
