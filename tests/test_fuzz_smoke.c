/* Smoke run of the fuzz targets beside the GGUF reader's (fuzz/more_fuzz_targets.h), with any
 * compiler: each target body over fixed inputs and deterministic mutations of them, every input in
 * an exact-size allocation so that ASan sees an over-read. A finding aborts or is a sanitizer
 * report. Runs in the normal suite and in the sanitizer build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/gguf.h"
#include "testmodel/testmodel.h"
#include "more_fuzz_targets.h"
#include "test_gguf_util.h"
#include "testutil.h"

/* Runs fn over a copy of p[0..n) in its own allocation. */
static void run_exact(int (*fn)(const uint8_t *, size_t), const uint8_t *p, size_t n)
{
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    memcpy(c, p, n);
    fn(c, n);
    free(c);
}

/* A copy of p mutated (bit flips, random bytes, 1/4/8-byte interesting values, truncation). */
static uint8_t *mutated(dcp_test_rng *r, const uint8_t *p, size_t n, size_t *out_n, size_t head)
{
    static const uint64_t interesting[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0xffff, 0xffffffffull, 0x7fffffffffffffffull,
                                           0xffffffffffffffffull, 4096, 11008, 1ull << 32};
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    memcpy(c, p, n);
    int ops = 1 + (int)(dcp_test_rng_next(r) % 3);
    for (int o = 0; o < ops && n; o++) {
        size_t lim = head && dcp_test_rng_next(r) % 4 ? (n < head ? n : head) : n;
        size_t pos = (size_t)(dcp_test_rng_next(r) % lim);
        switch (dcp_test_rng_next(r) % 4) {
        case 0: c[pos] ^= (uint8_t)(1u << (dcp_test_rng_next(r) % 8)); break;
        case 1: c[pos] = (uint8_t)dcp_test_rng_next(r); break;
        case 2: {
            uint64_t v = interesting[dcp_test_rng_next(r) % (sizeof interesting / sizeof interesting[0])];
            size_t w = (size_t[]){1, 4, 8}[dcp_test_rng_next(r) % 3];
            for (size_t i = 0; i < w && pos + i < n; i++) c[pos + i] = (uint8_t)(v >> (8 * i));
            break;
        }
        default: n = pos; break;
        }
    }
    *out_n = n;
    return c;
}

static int tok(const uint8_t *p, size_t n) { return dcp_fuzz_tokenizers(DCP_TEST_DATA_DIR, p, n); }

static void test_tokenizers(void **state)
{
    (void)state;
    dcp_test_rng r = {77};
    static const char *const texts[] = {
        "", "\x07Hello world! 123 4567 it's", "\x05<s> a </s> <|endoftext|> <unk>", "\x1f\xff\xfe\xc0\xaf\xe2\x82",
        "\x02   \t\n\r\n  ", "\x0c\xf0\x9f\xa6\x99\xe4\xb8\xad\xc3\xbc", "\x00\x00\x00\x00", "\x08\xff\xff\xf8\xff\xf0\xff",
    };
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) run_exact(tok, (const uint8_t *)texts[i], i == 6 ? 4 : strlen(texts[i]));
    /* the vocabularies' own test inputs, mutated */
    static const char *const inputs[] = {"ggml-vocab-phi-3.gguf.inp", "ggml-vocab-deepseek-llm.gguf.inp"};
    int runs = (int)(sizeof texts / sizeof texts[0]);
    for (size_t f = 0; f < 2; f++) {
        size_t n;
        uint8_t *p = (uint8_t *)dcp_test_read_file(dcp_test_data_path(inputs[f]), &n);
        assert_non_null(p);
        for (int k = 0; k < 150; k++, runs++) {
            size_t off = n > 64 ? (size_t)(dcp_test_rng_next(&r) % (n - 64)) : 0, len = 1 + dcp_test_rng_next(&r) % 200;
            if (off + len > n) len = n - off;
            size_t m;
            uint8_t *c = mutated(&r, p + off, len, &m, 0);
            run_exact(tok, c, m);
            free(c);
        }
        free(p);
    }
    /* random bytes (as text and as ids) */
    for (int k = 0; k < 300; k++, runs++) {
        size_t n = (size_t)(dcp_test_rng_next(&r) % 256);
        uint8_t *c = malloc(n ? n : 1);
        for (size_t i = 0; i < n; i++) c[i] = (uint8_t)dcp_test_rng_next(&r);
        run_exact(tok, c, n);
        free(c);
    }
    printf("tokenizers: %d inputs against 4 vocabularies\n", runs);
}

static void test_loader(void **state)
{
    (void)state;
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.n_embd = 32, mc.n_layer = 1, mc.n_head = 4, mc.n_head_kv = 2, mc.head_dim = 8, mc.n_ff = 64;
    dcp_gguf_writer *w;
    assert_int_equal(dcp_gguf_build_test_model(&mc, &w), DCP_OK);
    size_t n;
    uint8_t *p = tg_writer_bytes(w, &n);
    dcp_gguf_writer_destroy(w);
    run_exact(dcp_fuzz_loader, p, n);
    assert_true(dcp_fuzz_loader_loaded == 2); /* the unmutated model loads at TP 1 and TP 2 */
    dcp_test_rng r = {91};
    int runs = 1;
    for (int k = 0; k < 400; k++, runs++) {
        size_t m;
        uint8_t *c = mutated(&r, p, n, &m, 16384); /* the header: keys and tensor infos */
        run_exact(dcp_fuzz_loader, c, m);
        free(c);
    }
    free(p);
    size_t sn;
    uint8_t *s = (uint8_t *)dcp_test_read_file(dcp_test_data_path("stories260K.gguf"), &sn);
    assert_non_null(s);
    run_exact(dcp_fuzz_loader, s, sn);
    for (int k = 0; k < 100; k++, runs++) {
        size_t m;
        uint8_t *c = mutated(&r, s, sn, &m, 14176);
        run_exact(dcp_fuzz_loader, c, m);
        free(c);
    }
    free(s);
    dcp_fuzz_loader_done();
    printf("loader: %d inputs, %llu counted loads, %llu real loads\n", runs + 1,
           (unsigned long long)dcp_fuzz_loader_counted, (unsigned long long)dcp_fuzz_loader_loaded);
}

static void test_options(void **state)
{
    (void)state;
    static const char *const words[] = {
        "-m", "-p", "-f", "-n", "--temp", "--top-k", "--top-p", "--seed", "-c", "--tensor-parallel-size", "-tp",
        "--decode-context-parallel-size", "-dcp", "--dcp-comm-backend", "--cp-kv-cache-interleave-size",
        "--block-size", "--kv-dtype", "--prefill-chunk", "--devices", "--json", "--dcp-q-replicate", "-h",
        "0", "1", "8", "010", "-1", " 1", "+1", "1e-45", "1e400", "0.95", "1.0000001", "18446744073709551615",
        "18446744073709551616", "4294967296", "0x10", "nan", "inf", ".5", "5.", "1e", "a2a", "ag_rs", "f16", "f32",
        "q4", "", "\xff\xfe", "--", "-", "model.gguf"};
    const size_t nw = sizeof words / sizeof words[0];
    dcp_test_rng r = {5};
    int runs = 0;
    for (int k = 0; k < 3000; k++, runs++) {
        uint8_t buf[512];
        size_t n = 0;
        int args = (int)(dcp_test_rng_next(&r) % 9);
        for (int a = 0; a < args; a++) {
            const char *wd = words[dcp_test_rng_next(&r) % nw];
            size_t l = strlen(wd);
            if (n + l + 1 > sizeof buf) break;
            memcpy(buf + n, wd, l);
            n += l;
            if (dcp_test_rng_next(&r) % 8 == 0 && n) buf[n - 1] ^= (uint8_t)(1u << (dcp_test_rng_next(&r) % 8));
            if (a + 1 < args) buf[n++] = 0;
        }
        run_exact(dcp_fuzz_options, buf, n);
    }
    printf("options: %d argument lists\n", runs);
}

/* JSON output: schemas (supported, refused, malformed) with output texts, and mutations of both. */
static void test_json(void **state)
{
    (void)state;
    static const char *const schemas[] = {
        "",
        ("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"enum\":[\"x\",1,[true]]}},"
         "\"required\":[\"a\"],\"additionalProperties\":false}"),
        "{\"type\":\"array\",\"items\":{\"type\":[\"string\",\"number\",\"null\"]},\"minItems\":1,\"maxItems\":3}",
        "{\"const\":{\"k\": [1, 2.5e3, \"\\u00e9\"]}}", "{\"pattern\":\"a\"}", "{\"type\":", "true", "false",
        "{\"properties\":{\"p\":{\"additionalProperties\":{\"type\":\"boolean\"}}}}"};
    static const char *const outputs[] = {
        "{\"a\": 12, \"b\": [true]}", "[\"s\\n\", -0.5e+3, null]", "{\"k\":[1,2.5e3,\"\\u00e9\"]}",
        "  {\"p\": {\"q\": true, \"r\": false}}", "{\"x\":\"\xc3\xa9\xf0\x9f\x98\x80\"}", "1e5", "[[[[[[[[[[[[[[[[[[[["};
    dcp_test_rng r = {11};
    int runs = 0;
    for (size_t i = 0; i < sizeof schemas / sizeof schemas[0]; i++)
        for (size_t j = 0; j < sizeof outputs / sizeof outputs[0]; j++) {
            uint8_t buf[512];
            const size_t a = strlen(schemas[i]), b = strlen(outputs[j]);
            memcpy(buf, schemas[i], a);
            buf[a] = 0;
            memcpy(buf + a + 1, outputs[j], b);
            run_exact(dcp_fuzz_json, buf, a + 1 + b);
            runs++;
            for (int k = 0; k < 20; k++, runs++) {
                size_t m;
                uint8_t *c = mutated(&r, buf, a + 1 + b, &m, 0);
                run_exact(dcp_fuzz_json, c, m);
                free(c);
            }
        }
    printf("json: %d schema and output inputs\n", runs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_tokenizers), cmocka_unit_test(test_options),
                                       cmocka_unit_test(test_json),
                                       cmocka_unit_test(test_loader)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
