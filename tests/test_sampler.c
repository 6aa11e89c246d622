/* Host sampler: greedy, determinism per seed, top-k and top-p sets, the temperature-softmax
 * distribution, invalid configurations; and each of min-p, logit bias, the presence, frequency and
 * repetition penalties and min_tokens against a CPU computation of the same distribution in double
 * (ref_probs, written from the definitions, not from the sampler). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/model.h"
#include "engine/engine_internal.h"
#include "testutil.h"

#define V 1000

static void fill(float *l, uint64_t seed)
{
    dcp_test_rng r = {seed};
    for (int i = 0; i < V; i++) l[i] = dcp_test_rng_uniform(&r, -4, 4);
}

static dcp_sampler *make(float temp, uint32_t k, float p, uint64_t seed)
{
    dcp_sampler_config c = {.temperature = temp, .top_k = k, .top_p = p, .seed = seed, .repetition_penalty = 1.0f};
    dcp_sampler *s = NULL;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_OK);
    return s;
}

static void test_greedy(void **state)
{
    float l[V];
    fill(l, 1);
    l[321] = 10.0f;
    l[700] = 10.0f;
    l[5] = NAN;
    dcp_sampler *s = make(0.0f, 0, 1.0f, 0);
    assert_true(dcp_sampler_is_greedy(s));
    assert_int_equal(dcp_sampler_sample(s, l), 321);
    dcp_sampler_destroy(s);
    s = make(0.8f, 1, 1.0f, 9); /* top-k 1 is greedy too */
    assert_int_equal(dcp_sampler_sample(s, l), 321);
    dcp_sampler_destroy(s);
}

static void test_seeded(void **state)
{
    float l[V];
    fill(l, 2);
    int32_t a[64], b[64], c[64];
    dcp_sampler *s1 = make(1.0f, 40, 0.95f, 42), *s2 = make(1.0f, 40, 0.95f, 42), *s3 = make(1.0f, 40, 0.95f, 43);
    for (int i = 0; i < 64; i++) {
        a[i] = dcp_sampler_sample(s1, l);
        b[i] = dcp_sampler_sample(s2, l);
        c[i] = dcp_sampler_sample(s3, l);
    }
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    dcp_sampler_destroy(s1);
    dcp_sampler_destroy(s2);
    dcp_sampler_destroy(s3);
}

static int rank_of(const float *l, int32_t id)
{
    int r = 0;
    for (int i = 0; i < V; i++)
        if (l[i] > l[id] || (l[i] == l[id] && i < id)) r++;
    return r;
}

static void test_top_k_top_p(void **state)
{
    float l[V];
    fill(l, 3);
    dcp_sampler *s = make(2.0f, 5, 1.0f, 7);
    for (int i = 0; i < 2000; i++) assert_true(rank_of(l, dcp_sampler_sample(s, l)) < 5);
    dcp_sampler_destroy(s);
    /* top-p: probabilities 0.5, 0.3, 0.2 (+ negligible): p = 0.6 keeps the first two. */
    for (int i = 0; i < V; i++) l[i] = -1e9f;
    l[10] = logf(0.5f);
    l[20] = logf(0.3f);
    l[30] = logf(0.2f);
    s = make(1.0f, 0, 0.6f, 8);
    int count[3] = {0, 0, 0};
    for (int i = 0; i < 20000; i++) {
        int32_t id = dcp_sampler_sample(s, l);
        assert_true(id == 10 || id == 20);
        count[id / 10 - 1]++;
    }
    /* Renormalised 0.625 / 0.375. */
    assert_true(fabs(count[0] / 20000.0 - 0.625) < 0.02);
    dcp_sampler_destroy(s);
    /* Full distribution at temperature 1: 0.5 / 0.3 / 0.2. */
    s = make(1.0f, 0, 1.0f, 9);
    memset(count, 0, sizeof count);
    for (int i = 0; i < 20000; i++) count[dcp_sampler_sample(s, l) / 10 - 1]++;
    assert_true(fabs(count[0] / 20000.0 - 0.5) < 0.02);
    assert_true(fabs(count[1] / 20000.0 - 0.3) < 0.02);
    assert_true(fabs(count[2] / 20000.0 - 0.2) < 0.02);
    dcp_sampler_destroy(s);
}


/* ---- the reference distribution ---------------------------------------------------------------- */

/* The history a reference distribution sees: the prompt and the generated tokens. */
typedef struct hist {
    const int32_t *prompt;
    uint32_t n_prompt;
    const int32_t *gen;
    uint32_t n_gen;
} hist;

static int cmp_desc_d(const void *a, const void *b, const double *z)
{
    const int x = *(const int *)a, y = *(const int *)b;
    if (z[x] != z[y]) return z[x] > z[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}
static const double *g_z;
static int cmp_z(const void *a, const void *b) { return cmp_desc_d(a, b, g_z); }

/* p [V] from logits [V] by the definitions: vLLM's order (min_tokens mask, biases, repetition,
 * frequency, presence; temperature; top-k, top-p, min-p), all in double. */
static void ref_probs(const float *logits, const dcp_sampler_config *c, const hist *h, double *p)
{
    static double l[V], z[V];
    static int ord[V];
    for (int i = 0; i < V; i++) l[i] = isnan(logits[i]) ? -INFINITY : logits[i];
    if (h->n_gen < c->min_tokens)
        for (uint32_t i = 0; i < c->n_min_tokens_ids; i++) l[c->min_tokens_ids[i]] = -INFINITY;
    for (uint32_t i = 0; i < c->n_logit_bias; i++) {
        const dcp_logit_bias *b = &c->logit_bias[i];
        l[b->token] = b->bias <= -100.0f ? -INFINITY : l[b->token] + b->bias;
    }
    const double r = c->repetition_penalty == 0.0f ? 1.0 : c->repetition_penalty;
    for (int i = 0; i < V; i++) {
        unsigned n = 0;
        bool seen = false;
        for (uint32_t j = 0; j < h->n_gen; j++) n += h->gen[j] == i;
        for (uint32_t j = 0; j < h->n_prompt; j++) seen |= h->prompt[j] == i;
        if (n || seen) l[i] = l[i] > 0 ? l[i] / r : l[i] * r;
        l[i] -= c->frequency_penalty * (double)n;
        if (n) l[i] -= c->presence_penalty;
    }
    for (int i = 0; i < V; i++) p[i] = 0.0;
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    if (c->temperature == 0.0f || c->top_k == 1) {
        p[best] = 1.0;
        return;
    }
    double mx = l[best], sum = 0.0;
    for (int i = 0; i < V; i++) {
        z[i] = exp((l[i] - mx) / c->temperature);
        ord[i] = i;
        sum += z[i];
    }
    g_z = z;
    qsort(ord, V, sizeof *ord, cmp_z);
    int keep = c->top_k && c->top_k < V ? (int)c->top_k : V;
    sum = 0.0;
    for (int i = 0; i < keep; i++) sum += z[ord[i]];
    if (c->top_p < 1.0f) {
        double cum = 0.0;
        for (int i = 0; i < keep; i++) {
            cum += z[ord[i]] / sum;
            if (cum >= c->top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    sum = 0.0;
    for (int i = 0; i < keep; i++) sum += z[ord[i]];
    if (c->min_p > 0.0f) { /* p_i >= min_p * p_max over the renormalised top-k / top-p set */
        const double pmax = z[ord[0]] / sum;
        int cut = 0;
        while (cut < keep && z[ord[cut]] / sum >= c->min_p * pmax) cut++;
        keep = cut;
    }
    sum = 0.0;
    for (int i = 0; i < keep; i++) sum += z[ord[i]];
    for (int i = 0; i < keep; i++) p[ord[i]] = z[ord[i]] / sum;
}

/* A sampler from c that has seen h; its distribution over logits l (eng_sampler_probs) against
 * ref_probs, and 500 of its draws inside the reference's support (and greedy: the reference's
 * argmax). Returns the number of tokens the reference keeps. */
static int check_against_ref(const dcp_sampler_config *c, const hist *h, const float *l)
{
    static double got[V], want[V];
    dcp_sampler *s = NULL;
    assert_int_equal(dcp_sampler_create(c, V, &s), DCP_OK);
    dcp_sampler_accept(s, h->prompt, h->n_prompt, false);
    dcp_sampler_accept(s, h->gen, h->n_gen, true);
    eng_sampler_probs(s, l, got);
    ref_probs(l, c, h, want);
    int support = 0;
    for (int i = 0; i < V; i++) {
        if (fabs(got[i] - want[i]) > 1e-6 * (1.0 + want[i]))
            fail_msg("token %d: sampler p = %.9g, reference p = %.9g", i, got[i], want[i]);
        support += want[i] > 0.0;
    }
    for (int t = 0; t < 500; t++) {
        const int32_t id = dcp_sampler_sample(s, l);
        assert_true(id >= 0 && id < V);
        if (!(want[id] > 0.0)) fail_msg("draw %d chose token %d, which the reference gives p = 0", t, id);
    }
    dcp_sampler_destroy(s);
    return support;
}

static const int32_t k_prompt[] = {3, 17, 17, 250, 999, 4};
static const int32_t k_gen[] = {17, 42, 42, 42, 600, 5, 250};
static const hist k_hist = {k_prompt, 6, k_gen, 7};
static const hist k_none = {NULL, 0, NULL, 0};

static void test_min_p(void **state)
{
    float l[V];
    fill(l, 11);
    dcp_sampler_config c = DCP_SAMPLER_CONFIG_DEFAULT;
    c.temperature = 0.9f;
    const int all = check_against_ref(&c, &k_none, l);
    c.min_p = 0.05f;
    const int a = check_against_ref(&c, &k_none, l);
    c.min_p = 0.3f;
    const int b = check_against_ref(&c, &k_none, l);
    assert_true(all == V && a < all && b < a && b >= 1);
    c.min_p = 1.0f; /* only the most likely */
    assert_int_equal(check_against_ref(&c, &k_none, l), 1);
    c.min_p = 0.1f; /* with top-k and top-p first */
    c.top_k = 200;
    c.top_p = 0.9f;
    (void)check_against_ref(&c, &k_none, l);
}

static void test_logit_bias(void **state)
{
    float l[V];
    fill(l, 12);
    const dcp_logit_bias b[] = {{7, 5.5f}, {8, -100.0f}, {9, 100.0f}, {10, -3.25f}, {7, 0.5f}};
    dcp_sampler_config c = DCP_SAMPLER_CONFIG_DEFAULT;
    c.temperature = 1.3f;
    c.logit_bias = b;
    c.n_logit_bias = 4;
    (void)check_against_ref(&c, &k_none, l);
    c.logit_bias = b + 1; /* a ban alone: token 8 never */
    c.n_logit_bias = 1;
    l[8] = 50.0f;
    (void)check_against_ref(&c, &k_none, l);
    c.n_logit_bias = 0;
    c.temperature = 0.0f; /* greedy on the biased logits: no longer the device argmax */
    c.logit_bias = b;
    c.n_logit_bias = 5;
    dcp_sampler *s = NULL;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_OK);
    assert_false(dcp_sampler_is_greedy(s));
    assert_int_equal(dcp_sampler_sample(s, l), 9);
    dcp_sampler_destroy(s);
    (void)check_against_ref(&c, &k_none, l);
}

static void test_penalties(void **state)
{
    float l[V];
    fill(l, 13);
    l[17] = 3.0f; /* positive and negative logits of seen tokens */
    l[42] = -2.0f;
    l[250] = 0.0f;
    dcp_sampler_config c = DCP_SAMPLER_CONFIG_DEFAULT;
    c.temperature = 0.8f;
    const float pen[] = {-2.0f, -0.5f, 0.7f, 2.0f};
    for (int i = 0; i < 4; i++) {
        c = (dcp_sampler_config)DCP_SAMPLER_CONFIG_DEFAULT;
        c.temperature = 0.8f;
        c.presence_penalty = pen[i];
        (void)check_against_ref(&c, &k_hist, l);
        c.presence_penalty = 0.0f;
        c.frequency_penalty = pen[i];
        (void)check_against_ref(&c, &k_hist, l);
    }
    const float rep[] = {0.5f, 1.1f, 2.0f};
    for (int i = 0; i < 3; i++) {
        c = (dcp_sampler_config)DCP_SAMPLER_CONFIG_DEFAULT;
        c.temperature = 0.8f;
        c.repetition_penalty = rep[i];
        (void)check_against_ref(&c, &k_hist, l);
    }
    /* All together, with a bias, top-k, top-p and min-p, and greedy. */
    const dcp_logit_bias b[] = {{42, 1.5f}, {600, -100.0f}};
    c.presence_penalty = 0.4f;
    c.frequency_penalty = 0.3f;
    c.repetition_penalty = 1.3f;
    c.logit_bias = b;
    c.n_logit_bias = 2;
    c.top_k = 100;
    c.top_p = 0.95f;
    c.min_p = 0.02f;
    (void)check_against_ref(&c, &k_hist, l);
    c.temperature = 0.0f;
    (void)check_against_ref(&c, &k_hist, l);
    /* The repetition penalty of a prompt token only; the presence penalty of generated ones only. */
    dcp_sampler_config c2 = DCP_SAMPLER_CONFIG_DEFAULT;
    c2.temperature = 0.0f;
    c2.repetition_penalty = 1000.0f;
    float m[V];
    for (int i = 0; i < V; i++) m[i] = -5.0f;
    m[3] = 4.0f;  /* in the prompt: 4 / 1000 */
    m[11] = 1.0f; /* unseen: stays */
    dcp_sampler *s = NULL;
    assert_int_equal(dcp_sampler_create(&c2, V, &s), DCP_OK);
    assert_int_equal(dcp_sampler_sample(s, m), 3);
    dcp_sampler_accept(s, k_prompt, 6, false);
    assert_int_equal(dcp_sampler_sample(s, m), 11);
    dcp_sampler_destroy(s);
}

static void test_min_tokens(void **state)
{
    float l[V];
    fill(l, 14);
    l[2] = 20.0f; /* "EOS", the most likely by far */
    l[77] = 19.0f;
    const int32_t ids[] = {2, 77};
    dcp_sampler_config c = DCP_SAMPLER_CONFIG_DEFAULT;
    c.temperature = 1.0f;
    c.min_tokens = 3;
    c.min_tokens_ids = ids;
    c.n_min_tokens_ids = 2;
    dcp_sampler *s = NULL;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_OK);
    static double p[V], want[V];
    for (uint32_t g = 0; g <= 4; g++) {
        const hist h = {NULL, 0, k_gen, g};
        eng_sampler_probs(s, l, p);
        ref_probs(l, &c, &h, want);
        for (int i = 0; i < V; i++) assert_true(fabs(p[i] - want[i]) <= 1e-6 * (1.0 + want[i]));
        if (g < 3) assert_true(p[2] == 0.0 && p[77] == 0.0);
        else assert_true(p[2] > 0.5);
        dcp_sampler_accept(s, &k_gen[g], 1, true);
    }
    dcp_sampler_destroy(s);
    c.temperature = 0.0f; /* greedy: the next best until then */
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_OK);
    assert_false(dcp_sampler_is_greedy(s));
    for (int g = 0; g < 3; g++) {
        const int32_t t = dcp_sampler_sample(s, l);
        assert_true(t != 2 && t != 77);
        dcp_sampler_accept(s, &t, 1, true);
    }
    assert_int_equal(dcp_sampler_sample(s, l), 2);
    dcp_sampler_destroy(s);
}

static void test_bad_config(void **state)
{
    dcp_sampler *s = NULL;
    dcp_sampler_config c = DCP_SAMPLER_CONFIG_DEFAULT;
    c.temperature = -1.0f;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "temperature"));
    c.temperature = 1.0f;
    c.top_p = 0.0f;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "top-p"));
    c.top_p = 1.5f;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_null(s);
    c.top_p = 1.0f;
    struct {
        float *f;
        float bad;
        const char *name;
    } range[] = {{&c.min_p, -0.1f, "min-p"},
                 {&c.min_p, 1.5f, "min-p"},
                 {&c.presence_penalty, 2.5f, "presence penalty"},
                 {&c.presence_penalty, -2.01f, "presence penalty"},
                 {&c.frequency_penalty, -3.0f, "frequency penalty"},
                 {&c.frequency_penalty, NAN, "frequency penalty"},
                 {&c.repetition_penalty, -1.0f, "repetition penalty"},
                 {&c.repetition_penalty, INFINITY, "repetition penalty"}};
    for (size_t i = 0; i < sizeof range / sizeof range[0]; i++) {
        const float keep = *range[i].f;
        *range[i].f = range[i].bad;
        assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
        assert_non_null(strstr(dcp_last_error(), range[i].name));
        assert_null(s);
        *range[i].f = keep;
    }
    dcp_logit_bias b = {V, 1.0f};
    c.logit_bias = &b;
    c.n_logit_bias = 1;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "outside the vocabulary"));
    b = (dcp_logit_bias){5, -100.5f};
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "[-100, 100]"));
    c.n_logit_bias = 0;
    const int32_t bad_id = -1;
    c.min_tokens = 1;
    c.min_tokens_ids = &bad_id;
    c.n_min_tokens_ids = 1;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "min_tokens"));
    /* A zeroed repetition penalty is the default (positional initialisers of older callers). */
    c = (dcp_sampler_config)DCP_SAMPLER_CONFIG_DEFAULT;
    c.repetition_penalty = 0.0f;
    assert_int_equal(dcp_sampler_create(&c, V, &s), DCP_OK);
    assert_true(dcp_sampler_is_greedy(s));
    dcp_sampler_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy), cmocka_unit_test(test_seeded), cmocka_unit_test(test_top_k_top_p),
        cmocka_unit_test(test_bad_config),  cmocka_unit_test(test_min_p),   cmocka_unit_test(test_logit_bias),
        cmocka_unit_test(test_penalties),   cmocka_unit_test(test_min_tokens)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
