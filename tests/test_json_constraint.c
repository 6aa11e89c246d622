/* JSON-constrained decoding (include/dcpvk/json_constraint.h): the recognizer on valid and invalid
 * prefixes of many schemas, the schema refusals, the vocabulary mask of every tokenizer in
 * tests/data cross-checked against the recognizer run token by token on random states, and the
 * sampler with a constraint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dcpvk/gguf.h"
#include "dcpvk/json_constraint.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "testutil.h"

static dcp_json_schema *compile(const char *schema)
{
    dcp_json_schema *s = NULL;
    if (dcp_json_schema_compile(schema, schema ? strlen(schema) : 0, &s) != DCP_OK)
        fail_msg("compile %s: %s", schema ? schema : "(json_object)", dcp_last_error());
    return s;
}

/* 'P': a valid prefix, not complete; 'C': complete (may end); 'F': complete and finished;
 * 'X': not a valid prefix. */
static void expect(const dcp_json_schema *s, const char *text, char want)
{
    dcp_json_state *st;
    assert_int_equal(dcp_json_state_create(s, &st), DCP_OK);
    const bool ok = dcp_json_state_feed(st, (const uint8_t *)text, strlen(text));
    char got = !ok ? 'X' : dcp_json_state_finished(st) ? 'F' : dcp_json_state_can_end(st) ? 'C' : 'P';
    if (got != want) fail_msg("'%s': expected %c, got %c", text, want, got);
    /* byte by byte gives the same answer as all at once */
    dcp_json_state *b;
    assert_int_equal(dcp_json_state_create(s, &b), DCP_OK);
    bool all = true;
    for (size_t i = 0; text[i] && all; i++) all = dcp_json_state_feed(b, (const uint8_t *)text + i, 1);
    assert_int_equal(all, ok);
    dcp_json_state_destroy(b);
    dcp_json_state_destroy(st);
}

static void test_json_object(void **state)
{
    (void)state;
    dcp_json_schema *s = compile(NULL);
    expect(s, "", 'P');
    expect(s, "  {", 'P');
    expect(s, "{}", 'F');
    expect(s, "{} ", 'X');
    expect(s, "[]", 'X');
    expect(s, "1", 'X');
    expect(s, "\"a\"", 'X');
    expect(s, "{\"a\":1,\"b\":[true,false,null,{\"c\":\"d\"}],\"e\":-0.5e+10}", 'F');
    expect(s, "{\"a\":01}", 'X');
    expect(s, "{\"a\":1.}", 'X');
    expect(s, "{\"a\":1.5", 'P');
    expect(s, "{\"a\":tru", 'P');
    expect(s, "{\"a\":trux", 'X');
    expect(s, "{\"a\" : \"x\\u00e9\\n\\\"\" }", 'F');
    expect(s, "{\"a\":\"\\x\"}", 'X');
    expect(s, "{\"a\":\"\x01\"}", 'X');
    expect(s, "{\"a\":\"\xc3\xa9\"}", 'F');
    expect(s, "{\"a\":\"\xc3\"}", 'X');   /* half a character */
    expect(s, "{\"a\":\"\xed\xa0\x80\"}", 'X'); /* a UTF-8 surrogate */
    expect(s, "{\"a\":\"\xf0\x9f\x98\x80\"}", 'F');
    expect(s, "{,}", 'X');
    expect(s, "{\"a\":1,}", 'X');
    expect(s, "{\"a\":[1,]}", 'X');
    expect(s, "{\"a\":[1 2]}", 'X');
    expect(s, "{\"a\"1}", 'X');
    expect(s, "{\"a\":1}}", 'X');
    /* whitespace: at most DCP_JSON_MAX_WS in a row */
    char ws[64] = "{";
    for (int i = 0; i < DCP_JSON_MAX_WS; i++) strcat(ws, " ");
    expect(s, ws, 'P');
    strcat(ws, " ");
    expect(s, ws, 'X');
    /* numbers: digit limits */
    expect(s, "{\"a\":123456789012345}", 'F');
    expect(s, "{\"a\":1234567890123456", 'X');
    expect(s, "{\"a\":1e999}", 'F');
    expect(s, "{\"a\":1e9999", 'X');
    /* nesting: DCP_JSON_MAX_DEPTH frames (the root's included) */
    char deep[128] = "";
    for (int i = 0; i < DCP_JSON_MAX_DEPTH - 1; i++) strcat(deep, i ? "[" : "{\"a\":");
    expect(s, deep, 'P');
    strcat(deep, "[");
    expect(s, deep, 'X');
    dcp_json_schema_destroy(s);
}

static void test_schemas(void **state)
{
    (void)state;
    dcp_json_schema *s = compile("{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                                 "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":"
                                 "{\"type\":\"string\"},\"minItems\":1,\"maxItems\":2}},"
                                 "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}");
    expect(s, "{\"name\":\"x\",\"age\":3}", 'F');
    expect(s, "{\"age\":3,\"name\":\"x\"}", 'F');
    expect(s, "{\"name\":\"x\"}", 'X');         /* age required */
    expect(s, "{\"name\":\"x\",\"age\":3.5}", 'X'); /* an integer */
    expect(s, "{\"name\":\"x\",\"age\":3e1}", 'X');
    expect(s, "{\"name\":\"x\",\"age\":-3,\"tags\":[\"a\"]}", 'F');
    expect(s, "{\"name\":\"x\",\"age\":-3,\"tags\":[]}", 'X');   /* minItems */
    expect(s, "{\"name\":\"x\",\"age\":-3,\"tags\":[\"a\",\"b\",", 'X'); /* maxItems */
    expect(s, "{\"name\":\"x\",\"age\":-3,\"tags\":[1]}", 'X');
    expect(s, "{\"nam", 'P');
    expect(s, "{\"nombre\"", 'X');              /* additionalProperties false */
    expect(s, "{\"name\":\"x\",\"name\"", 'X'); /* given twice */
    expect(s, "{\"name\":1", 'X');
    expect(s, "{\"name\":\"x\",\"age\":1,\"tags\":[\"a\"],", 'X'); /* nothing left to give */
    dcp_json_schema_destroy(s);

    s = compile("{\"enum\":[\"red\",\"green\",1,12,null,{\"a\": [1, 2]}]}");
    expect(s, "\"red\"", 'F');
    expect(s, "\"re", 'P');
    expect(s, "\"blue\"", 'X');
    expect(s, "1", 'C');                        /* 12 may follow */
    expect(s, "12", 'F');
    expect(s, "13", 'X');
    expect(s, "null", 'F');
    expect(s, "{\"a\":[1,2]}", 'F');            /* the compact spelling */
    expect(s, "{\"a\": [1, 2]}", 'X');
    dcp_json_schema_destroy(s);

    s = compile("{\"type\":\"object\",\"properties\":{\"k\":{\"const\":\"v\"},\"n\":{\"type\":[\"number\",\"null\"]},"
                "\"b\":{\"type\":\"boolean\"}},\"additionalProperties\":{\"type\":\"integer\"}}");
    expect(s, "{\"k\":\"v\",\"n\":null,\"b\":false,\"other\":7}", 'F');
    expect(s, "{\"k\":\"w\"}", 'X');
    expect(s, "{\"n\":2.5}", 'F');
    expect(s, "{\"n\":\"2\"}", 'X');
    expect(s, "{\"other\":\"x\"}", 'X');
    expect(s, "{\"b\":true,\"b\":true}", 'X');  /* a property given twice */
    expect(s, "{\"b\":true,\"b", 'P');        /* (it may still become another key) */
    expect(s, "{\"b\":true,\"bb\":1}", 'F');
    dcp_json_schema_destroy(s);

    s = compile("{\"type\":\"number\"}");
    expect(s, "-", 'P');
    expect(s, "-1", 'C');
    expect(s, "1.25e-3", 'C');
    expect(s, "1.25e-3 ", 'X');
    expect(s, " 7", 'C');
    dcp_json_schema_destroy(s);

    s = compile("{\"type\":\"array\",\"items\":{\"type\":\"array\",\"items\":{\"type\":\"boolean\"},\"maxItems\":1}}");
    expect(s, "[[true],[],[false]]", 'F');
    expect(s, "[[true,false]]", 'X');
    expect(s, "[1]", 'X');
    dcp_json_schema_destroy(s);

    s = compile("true");
    expect(s, "\"x\"", 'F');
    expect(s, "[1,{}]", 'F');
    dcp_json_schema_destroy(s);

    s = compile("{\"type\":\"string\",\"title\":\"t\",\"description\":\"d\"}");
    expect(s, "\"a b\"", 'F');
    expect(s, "1", 'X');
    dcp_json_schema_destroy(s);
}

static void refused(const char *schema, dcp_status want, const char *needle)
{
    dcp_json_schema *s = (dcp_json_schema *)1;
    const dcp_status st = dcp_json_schema_compile(schema, strlen(schema), &s);
    if (st != want) fail_msg("%s: status %d, want %d (%s)", schema, st, want, dcp_last_error());
    assert_null(s);
    if (!strstr(dcp_last_error(), needle)) fail_msg("%s: '%s' does not name '%s'", schema, dcp_last_error(), needle);
}

static void test_refusals(void **state)
{
    (void)state;
    refused("{\"type\":\"string\",\"pattern\":\"^a\"}", DCP_ERR_UNSUPPORTED, "'pattern'");
    refused("{\"properties\":{\"a\":{\"minLength\":2}}}", DCP_ERR_UNSUPPORTED, "'minLength'");
    refused("{\"anyOf\":[]}", DCP_ERR_UNSUPPORTED, "'anyOf'");
    refused("{\"$ref\":\"#/x\"}", DCP_ERR_UNSUPPORTED, "'$ref'");
    refused("{\"type\":\"date\"}", DCP_ERR_UNSUPPORTED, "date");
    refused("{\"type\":", DCP_ERR_INVALID_ARGUMENT, "not valid JSON");
    refused("{\"enum\":[]}", DCP_ERR_INVALID_ARGUMENT, "enum");
    refused("{\"type\":\"string\",\"enum\":[1,2]}", DCP_ERR_INVALID_ARGUMENT, "enum");
    refused("{\"minItems\":3,\"maxItems\":2}", DCP_ERR_INVALID_ARGUMENT, "minItems 3");
    refused("{\"required\":[\"x\"]}", DCP_ERR_UNSUPPORTED, "\"x\"");
    refused("{\"properties\":{\"a\":false}}", DCP_ERR_INVALID_ARGUMENT, "false");
    refused("{\"properties\":{\"a\":{},\"a\":{}}}", DCP_ERR_INVALID_ARGUMENT, "twice");
    refused("{\"items\":[{}]}", DCP_ERR_UNSUPPORTED, "tuples");
    refused("{\"maxItems\":-1}", DCP_ERR_INVALID_ARGUMENT, "maxItems");
}

/* ---- the mask over real vocabularies ---------------------------------------------------------- */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static const char *const mask_schemas[] = {
    NULL,
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"n\":{\"type\":\"integer\"},"
    "\"l\":{\"type\":\"array\",\"items\":{\"enum\":[\"ab\",\"abc\",true,3.5]},\"maxItems\":3}},"
    "\"required\":[\"name\"],\"additionalProperties\":false}",
    "{\"type\":\"array\",\"items\":{\"type\":[\"number\",\"string\",\"null\"]}}",
};

/* Random walks through the output, each step choosing an allowed token: at every step the mask
 * equals the recognizer fed each token's bytes on its own. */
static void check_vocab(const char *rel)
{
    dcp_gguf *g;
    dcp_tokenizer *t;
    if (dcp_gguf_open(dcp_test_data_path(rel), &g) != DCP_OK) fail_msg("%s", dcp_last_error());
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    dcp_json_vocab *v;
    assert_int_equal(dcp_json_vocab_create(t, &v), DCP_OK);
    const uint32_t n = dcp_json_vocab_size(v);
    assert_int_equal(n, dcp_tokenizer_n_vocab(t));
    uint8_t *mask = malloc(n);
    assert_non_null(mask);
    const int32_t eos = dcp_tokenizer_eos(t);
    size_t checked = 0, allowed_total = 0, masks = 0;
    double mask_s = 0.0;
    for (size_t k = 0; k < sizeof mask_schemas / sizeof mask_schemas[0]; k++) {
        dcp_json_schema *s = compile(mask_schemas[k]);
        for (int walk = 0; walk < 3; walk++) {
            dcp_json_state *st, *tmp;
            assert_int_equal(dcp_json_state_create(s, &st), DCP_OK);
            assert_int_equal(dcp_json_state_create(s, &tmp), DCP_OK);
            for (int step = 0; step < 24 && !dcp_json_state_finished(st); step++) {
                struct timespec t0, t1;
                clock_gettime(CLOCK_MONOTONIC, &t0);
                dcp_json_state_mask(st, v, &eos, eos >= 0 ? 1 : 0, mask);
                clock_gettime(CLOCK_MONOTONIC, &t1);
                mask_s += (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
                masks++;
                uint32_t n_allowed = 0;
                for (uint32_t id = 0; id < n; id++) {
                    size_t len;
                    const uint8_t *b = dcp_json_vocab_token(v, (int32_t)id, &len);
                    bool want;
                    if ((int32_t)id == eos) {
                        want = dcp_json_state_can_end(st);
                    } else {
                        dcp_json_state_copy(tmp, st);
                        want = len > 0 && dcp_json_state_feed(tmp, b, len);
                    }
                    if (mask[id] != want)
                        fail_msg("%s schema %zu walk %d step %d: token %u (%zu bytes '%.*s') mask %d, recognizer %d",
                                 rel, k, walk, step, id, len, (int)len, (const char *)b, mask[id], want);
                    n_allowed += want;
                    checked++;
                }
                assert_true(n_allowed > 0); /* never a dead end */
                allowed_total += n_allowed;
                /* the next token: a random allowed one (EOS ends the walk) */
                uint32_t pick = rnd(n_allowed), id = 0;
                for (;; id++)
                    if (mask[id] && pick-- == 0) break;
                if ((int32_t)id == eos) break;
                size_t len;
                const uint8_t *b = dcp_json_vocab_token(v, (int32_t)id, &len);
                assert_true(dcp_json_state_feed(st, b, len));
            }
            dcp_json_state_destroy(tmp);
            dcp_json_state_destroy(st);
        }
        dcp_json_schema_destroy(s);
    }
    printf("%s: %u tokens, %zu mask entries checked (mean %zu allowed per step), mask %.3f ms per step\n", rel, n,
           checked, allowed_total / (checked / n), 1e3 * mask_s / (double)masks);
    free(mask);
    dcp_json_vocab_destroy(v);
    dcp_tokenizer_destroy(t);
    dcp_gguf_close(g);
}

static void test_mask_vocabularies(void **state)
{
    (void)state;
    check_vocab("ggml-vocab-phi-3.gguf");
    check_vocab("ggml-vocab-deepseek-llm.gguf");
    check_vocab("stories260K.gguf");
}

/* The SPM byte tokens and the BPE byte mapping come out as bytes. */
static void test_token_bytes(void **state)
{
    (void)state;
    dcp_gguf *g;
    dcp_tokenizer *t;
    if (dcp_gguf_open(dcp_test_data_path("ggml-vocab-phi-3.gguf"), &g) != DCP_OK) fail_msg("%s", dcp_last_error());
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    int found = 0;
    for (uint32_t id = 0; id < dcp_tokenizer_n_vocab(t); id++) {
        size_t tl, bl;
        const char *text = dcp_tokenizer_token_text(t, (int32_t)id, &tl);
        char b[256];
        dcp_tokenizer_token_bytes(t, (int32_t)id, b, sizeof b, &bl);
        if (strcmp(text, "<0x7B>") == 0) assert_true(bl == 1 && b[0] == '{'), found++;
        if (strcmp(text, "\xe2\x96\x81{") == 0) assert_true(bl == 2 && b[0] == ' ' && b[1] == '{'), found++;
        if (dcp_tokenizer_token_type(t, (int32_t)id) == DCP_TOKEN_CONTROL) assert_int_equal(bl, 0);
    }
    assert_int_equal(found, 2);
    dcp_tokenizer_destroy(t);
    dcp_gguf_close(g);
    if (dcp_gguf_open(dcp_test_data_path("ggml-vocab-deepseek-llm.gguf"), &g) != DCP_OK) fail_msg("%s", dcp_last_error());
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    int32_t *ids;
    size_t n;
    assert_int_equal(dcp_tokenizer_encode(t, " {\"\xc3\xa9\":", 8, 0, &ids, &n), DCP_OK);
    char all[64];
    size_t used = 0;
    for (size_t i = 0; i < n; i++) {
        size_t bl;
        dcp_tokenizer_token_bytes(t, ids[i], all + used, sizeof all - used, &bl);
        used += bl;
    }
    assert_int_equal(used, 8);
    assert_memory_equal(all, " {\"\xc3\xa9\":", 8);
    free(ids);
    dcp_tokenizer_destroy(t);
    dcp_gguf_close(g);
}

/* The sampler with a constraint: random logits, seeded sampling, the text parses as the schema
 * says (checked by the recognizer ending finished), and the same seed gives the same tokens. */
static void test_sampler(void **state)
{
    (void)state;
    dcp_gguf *g;
    dcp_tokenizer *t;
    if (dcp_gguf_open(dcp_test_data_path("ggml-vocab-deepseek-llm.gguf"), &g) != DCP_OK) fail_msg("%s", dcp_last_error());
    if (dcp_tokenizer_create(g, &t) != DCP_OK) fail_msg("%s", dcp_last_error());
    dcp_json_vocab *v;
    assert_int_equal(dcp_json_vocab_create(t, &v), DCP_OK);
    const uint32_t n = dcp_json_vocab_size(v);
    dcp_json_schema *s = compile("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"boolean\"},"
                                 "\"b\":{\"enum\":[\"x\",\"y\"]}},\"required\":[\"a\",\"b\"],"
                                 "\"additionalProperties\":false}");
    float *logits = malloc(n * sizeof *logits);
    assert_non_null(logits);
    int32_t first[64];
    for (int run = 0; run < 2; run++) {
        dcp_sampler_config c = DCP_SAMPLER_CONFIG_DEFAULT;
        c.temperature = 1.0f;
        c.seed = 42;
        c.json = s;
        c.json_vocab = v;
        dcp_sampler *smp;
        assert_int_equal(dcp_sampler_create(&c, n, &smp), DCP_OK);
        dcp_json_state *st;
        assert_int_equal(dcp_json_state_create(s, &st), DCP_OK);
        uint64_t r = 1;
        int i = 0;
        for (; i < 64 && !dcp_json_state_finished(st); i++) {
            for (uint32_t k = 0; k < n; k++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                logits[k] = (float)((r >> 40) % 1000) / 100.0f;
            }
            const int32_t tok = dcp_sampler_sample(smp, logits);
            size_t len;
            const uint8_t *b = dcp_json_vocab_token(v, tok, &len);
            assert_true(dcp_json_state_feed(st, b, len));
            dcp_sampler_accept(smp, &tok, 1, true);
            if (run == 0) first[i] = tok;
            else assert_int_equal(first[i], tok);
        }
        assert_true(dcp_json_state_finished(st));
        dcp_json_state_destroy(st);
        dcp_sampler_destroy(smp);
    }
    free(logits);
    dcp_json_schema_destroy(s);
    dcp_json_vocab_destroy(v);
    dcp_tokenizer_destroy(t);
    dcp_gguf_close(g);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_object), cmocka_unit_test(test_schemas),
        cmocka_unit_test(test_refusals),    cmocka_unit_test(test_token_bytes),
        cmocka_unit_test(test_mask_vocabularies), cmocka_unit_test(test_sampler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
