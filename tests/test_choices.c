/* n choices per request (dcp_engine_request.n, include/dcpvk/engine.h) on stories260K, with prefix
 * caching on and off, at TP 1 and at TP 8 / DCP 2:
 *  - greedy, n = 4: every choice's tokens are bitwise those of the request with n = 1 on an engine
 *    without prefix caching; every event carries its choice's index; choices 1 .. 3 were forked
 *    from choice 0 (forked_choices) and ran no prompt row (the step rows are the prompt once and
 *    the decode rows), took the prompt's full blocks from the cache (cached_tokens) when it is on,
 *    and the KV pages in use at the peak (the real pools, every layer and rank) are at most one
 *    request's plus three times its pages past the shared full blocks (fewer than four times);
 *  - seeded sampling, n = 3: choice i's tokens are those of a request with n = 1 and seed
 *    dcp_engine_choice_seed(seed, i) run alone without caching (choice 0: the seed itself), the
 *    same again in a batch with an unrelated request, and the choices differ;
 *  - with two slots for n = 4, one choice is forked and the others, admitted later as any request,
 *    prefill (what the cache does not hold) and still give the n = 1 tokens;
 *  - n above DCP_ENGINE_MAX_CHOICES is refused with a message naming n. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/kv.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "model/graph.h"
#include "ref_model.h"
#include "vkutil.h"

enum { MAXC = DCP_ENGINE_MAX_CHOICES, NPROMPT = 42, BLOCK = 4 };

typedef dcp_test_engine fixture;

static void fx_open_slots(fixture *f, uint32_t tp, uint32_t dcp, bool cache, uint32_t max_seqs)
{
    memset(f, 0, sizeof *f);
    DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &f->g));
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 128;
    sc.max_seqs = max_seqs;
    sc.block_size = BLOCK;
    sc.kv_pages = 128;
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.enable_prefix_caching = cache;
    dcp_test_engine_open(f, tp, dcp, &sc, &ec);
}

static void fx_open(fixture *f, uint32_t tp, uint32_t dcp, bool cache) { fx_open_slots(f, tp, dcp, cache, 6); }

static void fx_close(fixture *f) { dcp_test_engine_close(f); }

/* Choice outputs: user points to an array of MAXC outs, indexed by the event's choice (dcp_test_drain). */
typedef dcp_test_out out;

/* Distinct pages in use now: the pool less the free pages, the most over every layer and rank. */
static uint32_t pages_in_use(const fixture *f)
{
    const dcp_model_state *s = f->s;
    uint32_t worst = 0;
    for (uint32_t k = 0; k < s->ng * f->cfg.n_layer; k++)
        for (uint32_t i = 0; i < s->gn; i++) {
            const uint32_t used = s->cfg.kv_pages - dcp_kv_cache_pages_free(s->caches[k], i);
            if (used > worst) worst = used;
        }
    return worst;
}

static dcp_engine_request make(const int32_t *prompt, uint32_t n, float temp, uint64_t seed, uint32_t max_tokens)
{
    dcp_engine_request q = DCP_ENGINE_REQUEST_DEFAULT;
    q.prompt = prompt;
    q.n_prompt = NPROMPT;
    q.max_tokens = max_tokens;
    q.ignore_eos = true;
    q.n = n;
    q.sampling.temperature = temp;
    q.sampling.seed = seed;
    return q;
}

/* Runs request q (with its n) on f, outs[choice]; returns the peak pages in use. */
static uint32_t run(fixture *f, dcp_engine_request q, out *outs, const dcp_engine_request *other, out *oout)
{
    memset(outs, 0, MAXC * sizeof *outs);
    q.user = outs;
    uint64_t id, oid = 0;
    if (other) {
        dcp_engine_request o = *other;
        memset(oout, 0, MAXC * sizeof *oout);
        o.user = oout;
        DCP_ASSERT_OK(dcp_engine_submit(f->e, &o, &oid));
        DCP_ASSERT_OK(dcp_engine_step(f->e)); /* the other one is running already */
    }
    DCP_ASSERT_OK(dcp_engine_submit(f->e, &q, &id));
    uint32_t peak = 0;
    while (dcp_engine_busy(f->e)) {
        DCP_ASSERT_OK(dcp_engine_step(f->e));
        const uint32_t u = pages_in_use(f);
        if (u > peak) peak = u;
        dcp_test_drain(f->e);
    }
    dcp_test_drain(f->e);
    for (uint32_t i = 0; i < (q.n ? q.n : 1); i++) assert_true(outs[i].done);
    return peak;
}

static void prompt_of(int32_t *p)
{
    p[0] = 1; /* BOS */
    for (uint32_t i = 1; i < NPROMPT; i++) p[i] = (int32_t)(3 + (i * 37u) % 500u);
}

/* The n = 4 greedy and n = 3 seeded checks on an engine with prefix caching on or off, against
 * the references of n = 1 (ref: greedy, gen tokens; refs[i]: seeded with choice i's seed, 16). */
static void check_choices(uint32_t tp, uint32_t dcp, bool cache, const out *ref, out (*refs)[MAXC], uint32_t single)
{
    int32_t prompt[NPROMPT];
    prompt_of(prompt);
    const uint32_t gen = 8, n = 4;
    fixture f;
    fx_open(&f, tp, dcp, cache);
    out c[MAXC];
    const uint32_t shared = run(&f, make(prompt, n, 0.0f, 0, gen), c, NULL, NULL);
    const uint32_t block_tokens = BLOCK * dcp, full = (NPROMPT - 1) / block_tokens * block_tokens;
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(c[i].n, gen);
        assert_memory_equal(c[i].toks, ref[0].toks, gen * sizeof *c[i].toks);
        assert_int_equal(c[i].cached, i && cache ? full : 0);
    }
    /* the forks share choice 0's full blocks: no more pages than one request and n - 1 copies of its
     * pages past them (what attaching them from the prefix cache took) */
    const uint32_t bound = single + (n - 1) * (single - full / block_tokens);
    printf("TP %u DCP %u cache %s: n = %u greedy: peak %u pages per rank and layer (bound %u), one request %u "
           "(4x: %u)\n", tp, dcp, cache ? "on" : "off", n, shared, bound, single, n * single);
    assert_true(shared <= bound);
    assert_true(shared < n * single);
    dcp_engine_stats st;
    dcp_engine_get_stats(f.e, &st);
    assert_int_equal(st.prompt_tokens, NPROMPT);
    /* choices 1 .. 3 were forked and ran no prompt row: the prompt once, then gen - 1 decode rows
     * for each choice (its first token came from the prompt's last row) */
    assert_int_equal(st.forked_choices, n - 1);
    assert_int_equal(st.rows, NPROMPT + n * (gen - 1));
    assert_int_equal(st.recomputed_tokens, 0);

    /* seeded: choice i == n = 1 with the choice's seed, alone and in a batch */
    out a[MAXC], b[MAXC], other[MAXC];
    (void)run(&f, make(prompt, 3, 0.9f, 1234, 16), a, NULL, NULL);
    int32_t p2[NPROMPT];
    for (uint32_t i = 0; i < NPROMPT; i++) p2[i] = prompt[NPROMPT - 1 - i];
    const dcp_engine_request o = make(p2, 1, 0.7f, 5, 24);
    (void)run(&f, make(prompt, 3, 0.9f, 1234, 16), b, &o, other);
    bool differ = false;
    for (uint32_t i = 0; i < 3; i++) {
        assert_int_equal(a[i].n, 16);
        assert_memory_equal(a[i].toks, refs[i][0].toks, 16 * sizeof *a[i].toks);
        assert_memory_equal(b[i].toks, refs[i][0].toks, 16 * sizeof *b[i].toks);
        differ |= i && memcmp(a[i].toks, a[0].toks, sizeof a[0].toks) != 0;
    }
    assert_true(differ);
    dcp_engine_get_stats(f.e, &st);
    assert_int_equal(st.forked_choices, n - 1 + 2 * 2);

    /* over the limit */
    dcp_engine_request big = make(prompt, DCP_ENGINE_MAX_CHOICES + 1, 0.0f, 0, 4);
    uint64_t id;
    assert_int_equal(dcp_engine_submit(f.e, &big, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "n is 17"));
    assert_false(dcp_engine_busy(f.e));
    assert_int_equal(pages_in_use(&f) - (cache ? st.prefix_blocks : 0), 0); /* every fork's pages went back */
    fx_close(&f);
}

static void check_layout(uint32_t tp, uint32_t dcp)
{
    int32_t prompt[NPROMPT];
    prompt_of(prompt);
    const uint32_t gen = 8;
    /* the references: n = 1 without caching */
    fixture f;
    fx_open(&f, tp, dcp, false);
    out ref[MAXC], refs[3][MAXC];
    const uint32_t single = run(&f, make(prompt, 1, 0.0f, 0, gen), ref, NULL, NULL);
    for (uint32_t i = 0; i < 3; i++)
        (void)run(&f, make(prompt, 1, 0.9f, dcp_engine_choice_seed(1234, i), 16), refs[i], NULL, NULL);
    fx_close(&f);
    assert_int_equal(ref[0].n, gen);
    check_choices(tp, dcp, true, ref, refs, single);
    check_choices(tp, dcp, false, ref, refs, single);
}

/* Two slots for n = 4: choice 1 is forked, choices 2 and 3 find no free slot then and are admitted
 * once choices 0 and 1 end, as any request (prefix caching on: the cached full blocks attached and
 * the rest prefilled; off: the whole prompt prefilled); the tokens stay bitwise the n = 1 output. */
static void check_few_slots(bool cache)
{
    int32_t prompt[NPROMPT];
    prompt_of(prompt);
    const uint32_t gen = 8, n = 4, full = (NPROMPT - 1) / BLOCK * BLOCK;
    fixture f;
    fx_open_slots(&f, 1, 1, false, 2);
    out ref[MAXC], c[MAXC];
    (void)run(&f, make(prompt, 1, 0.0f, 0, gen), ref, NULL, NULL);
    fx_close(&f);
    fx_open_slots(&f, 1, 1, cache, 2);
    (void)run(&f, make(prompt, n, 0.0f, 0, gen), c, NULL, NULL);
    for (uint32_t i = 0; i < n; i++) {
        assert_int_equal(c[i].n, gen);
        assert_memory_equal(c[i].toks, ref[0].toks, gen * sizeof *c[i].toks);
    }
    dcp_engine_stats st;
    dcp_engine_get_stats(f.e, &st);
    assert_int_equal(st.forked_choices, 1);
    assert_int_equal(st.rows, NPROMPT + 2 * (NPROMPT - (cache ? full : 0)) + n * (gen - 1));
    fx_close(&f);
}

static void test_choices_few_slots(void **state)
{
    (void)state;
    check_few_slots(true);
    check_few_slots(false);
}

static void test_choices_tp1(void **state)
{
    (void)state;
    check_layout(1, 1);
}

static void test_choices_dcp2(void **state)
{
    (void)state;
    check_layout(8, 2); /* stories260K has 4 KV heads: DCP 2 needs TP 8 */
}

static void test_choice_seed(void **state)
{
    (void)state;
    assert_true(dcp_engine_choice_seed(42, 0) == 42);
    assert_true(dcp_engine_choice_seed(42, 1) != 42);
    assert_true(dcp_engine_choice_seed(42, 1) != dcp_engine_choice_seed(42, 2));
    assert_true(dcp_engine_choice_seed(42, 1) != dcp_engine_choice_seed(43, 1));
    assert_true(dcp_engine_choice_seed(42, 3) == dcp_engine_choice_seed(42, 3));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_choice_seed),
        cmocka_unit_test(test_choices_tp1),
        cmocka_unit_test(test_choices_few_slots),
        cmocka_unit_test(test_choices_dcp2),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
