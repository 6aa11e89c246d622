/* The serving engine (include/dcpvk/engine.h) on stories260K:
 *  - batch invariance: six requests (greedy and seeded sampling, prompts from 1 to 30 tokens,
 *    chunked under a budget of 8 rows, 4 slots so that some wait) submitted at different steps and
 *    ending at different steps give the same tokens, texts and finish reasons as each run alone, at
 *    TP 8 / DCP 2 with a2a and ag_rs; the greedy one from BOS gives the reference ids;
 *  - preemption: a pool too small for the requests running together preempts (and recomputes)
 *    the newest, invisibly: same tokens as alone; after every step the real pools (every layer,
 *    every rank) hold exactly the pages of the sequences holding slots, and nothing else;
 *  - admission: a prompt waits until all of it fits beside the running ones' (no prefill thrash);
 *  - cancellation frees exactly the pages the request held, at once, on every rank and layer;
 *  - stop strings (the text ends before the match; partial matches held back, then released), max
 *    tokens, EOS (with and without ignore_eos), stop tokens;
 *  - the sampling parameters: penalties, biases, min-p and min_tokens in a batch give the same
 *    tokens as alone (greedy ones sample on the host then); min_tokens masks EOS and the stop
 *    tokens; include_stop_str_in_output keeps the stop string or stop token's text;
 *  - refused requests: beyond the context, beyond the whole pool, bad sampling values, empty stop
 *    strings, tokens outside the vocabulary, unknown ids to cancel. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "model/graph.h"
#include "testmodel/testmodel.h"
#include "ref_model.h"
#include "stories_ref.h"
#include "vkutil.h"

enum { MAXT = 256, MAXR = 24 };

typedef dcp_test_engine fixture;

static const char *model_path(void) { return dcp_test_data_path("stories260K.gguf"); }

static void fx_open(fixture *f, uint32_t tp, uint32_t dcp, const dcp_model_state_config *sc, uint32_t step_tokens)
{
    memset(f, 0, sizeof *f);
    DCP_ASSERT_OK(dcp_gguf_open(model_path(), &f->g));
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.step_tokens = step_tokens;
    dcp_test_engine_open(f, tp, dcp, sc, &ec);
}

static void fx_close(fixture *f) { dcp_test_engine_close(f); }

typedef dcp_test_out out;

/* ---- real pool accounting (the KV caches behind the state) -------------------------------------- */

static uint32_t real_seq_pages(const dcp_model_state *s, uint32_t seq, uint32_t i, uint32_t l)
{
    const dcp_kv_cache *c = s->caches[l * s->ng + s->r[i].g];
    uint32_t len = dcp_kv_cache_seq_local_length(c, s->r[i].gl, seq);
    return (len + s->cfg.block_size - 1) / s->cfg.block_size;
}

static uint32_t real_free(const dcp_model_state *s, uint32_t i, uint32_t l)
{
    return dcp_kv_cache_pages_free(s->caches[l * s->ng + s->r[i].g], s->r[i].gl);
}

/* Every layer and rank: free pages + the pages of the slots held == the pool; slots not held by a
 * request hold nothing; the formula accounting agrees with the pools. */
static void check_pools(const fixture *f, const uint64_t *ids, uint32_t n)
{
    const dcp_model_state *s = f->s;
    bool held[64] = {0};
    for (uint32_t k = 0; k < n; k++) {
        int32_t slot = ids[k] ? dcp_engine_request_slot(f->e, ids[k]) : -1;
        if (slot >= 0) {
            assert_false(held[slot]);
            held[slot] = true;
        }
    }
    for (uint32_t l = 0; l < f->cfg.n_layer; l++)
        for (uint32_t i = 0; i < s->m->nl; i++) {
            uint32_t used = 0;
            for (uint32_t q = 0; q < s->cfg.max_seqs; q++) {
                uint32_t p = real_seq_pages(s, q, i, l);
                if (!held[q] && p) fail_msg("slot %u holds %u pages on rank %u layer %u but no request holds it", q, p, i, l);
                used += p;
            }
            assert_int_equal(real_free(s, i, l) + used, s->cfg.kv_pages);
            assert_int_equal(real_free(s, i, l), dcp_model_state_rank_pages_free(s, s->r[i].gr));
        }
}

/* ---- a request mix ---------------------------------------------------------------------------- */

typedef struct req_spec {
    uint32_t off, len;   /* prompt: stories_ref[off .. off + len) */
    uint32_t max_tokens;
    float temp;
    uint32_t top_k;
    float top_p;
    uint64_t seed;
    uint32_t start;      /* step at which it is submitted (together) */
    const dcp_sampler_config *sampling; /* NULL, or the whole sampling config (temp .. seed unused) */
} req_spec;

static dcp_engine_request make_request(const req_spec *r, out *o)
{
    dcp_engine_request q = DCP_ENGINE_REQUEST_DEFAULT;
    q.prompt = &stories_ref[r->off];
    q.n_prompt = r->len;
    q.max_tokens = r->max_tokens;
    q.sampling = (dcp_sampler_config){.temperature = r->temp, .top_k = r->top_k, .top_p = r->top_p, .seed = r->seed, .repetition_penalty = 1.0f};
    if (r->sampling) q.sampling = *r->sampling;
    q.decode_flags = DCP_DECODE_KEEP_LEADING_SPACE;
    q.user = o;
    return q;
}

/* Runs the requests together, submitting each at its start step; checks the pools after every step.
 * Returns the steps run. */
static uint32_t run_mix(fixture *f, const req_spec *spec, uint32_t n, out *outs, uint64_t *preempt)
{
    uint64_t ids[MAXR] = {0};
    dcp_engine_stats st0;
    dcp_engine_get_stats(f->e, &st0);
    uint32_t step = 0, submitted = 0;
    for (;; step++) {
        for (uint32_t k = 0; k < n; k++)
            if (spec[k].start == step) {
                dcp_engine_request q = make_request(&spec[k], &outs[k]);
                DCP_ASSERT_OK(dcp_engine_submit(f->e, &q, &ids[k]));
                submitted++;
            }
        if (!dcp_engine_busy(f->e) && submitted == n) break;
        DCP_ASSERT_OK(dcp_engine_step(f->e));
        dcp_test_drain(f->e);
        check_pools(f, ids, n);
        assert_true(step < 2000);
    }
    dcp_engine_stats st1;
    dcp_engine_get_stats(f->e, &st1);
    if (preempt) *preempt = st1.preemptions - st0.preemptions;
    for (uint32_t k = 0; k < n; k++) assert_true(outs[k].done);
    assert_int_equal(dcp_model_state_pages_free(f->s), dcp_model_state_pages_total(f->s));
    return step;
}

static void run_alone(fixture *f, const req_spec *spec, out *o)
{
    req_spec one = *spec;
    one.start = 0;
    run_mix(f, &one, 1, o, NULL);
}

static void compare(const char *what, const req_spec *spec, const out *alone, const out *together, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) {
        const out *a = &alone[k], *b = &together[k];
        if (a->n != b->n || memcmp(a->toks, b->toks, a->n * sizeof a->toks[0]) || a->finish != b->finish ||
            a->len != b->len || memcmp(a->text, b->text, a->len))
            fail_msg("%s: request %u (prompt %u tokens, temp %g): alone %u tokens '%s' (%s), together %u tokens '%s' "
                     "(%s)", what, k, spec[k].len, spec[k].temp, a->n, a->text, dcp_engine_finish_name(a->finish), b->n,
                     b->text, dcp_engine_finish_name(b->finish));
        assert_int_equal(a->completion, spec[k].max_tokens); /* stories260K emits no EOS this early */
    }
}

static const req_spec mix[] = {
    {0, 5, 12, 0.0f, 0, 1.0f, 0, 0, NULL},     {40, 13, 20, 0.9f, 40, 1.0f, 7, 0, NULL}, {0, 1, 24, 0.0f, 0, 1.0f, 0, 2, NULL},
    {100, 30, 9, 0.7f, 0, 0.9f, 3, 3, NULL},   {7, 9, 16, 0.0f, 0, 1.0f, 0, 5, NULL},    {60, 20, 6, 1.0f, 0, 1.0f, 11, 9, NULL},
};
enum { NMIX = sizeof mix / sizeof mix[0] };

static void check_invariance(dcp_cp_backend backend)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_seqs = 4;
    sc.max_rows = 8;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.backend = backend;
    fixture f;
    fx_open(&f, 8, 2, &sc, 0);
    out alone[NMIX], together[NMIX];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    for (uint32_t k = 0; k < NMIX; k++) run_alone(&f, &mix[k], &alone[k]);
    /* The greedy request from BOS gives the reference ids. */
    assert_memory_equal(alone[2].toks, &stories_ref[1], 24 * sizeof(int32_t));
    uint32_t steps = run_mix(&f, mix, NMIX, together, NULL);
    compare(backend == DCP_CP_A2A ? "TP 8 DCP 2 a2a" : "TP 8 DCP 2 ag_rs", mix, alone, together, NMIX);
    dcp_engine_stats st;
    dcp_engine_get_stats(f.e, &st);
    assert_int_equal(st.running_peak, 4);
    printf("TP 8 DCP 2 %s: %u requests together in %u steps: tokens and text the same as alone\n",
           dcp_cp_backend_name(backend), (unsigned)NMIX, steps);
    fx_close(&f);
}

static void test_invariance_a2a(void **state) { (void)state; check_invariance(DCP_CP_A2A); }
static void test_invariance_ag_rs(void **state) { (void)state; check_invariance(DCP_CP_AG_RS); }

/* A pool of 10 pages of 4 tokens per rank (DCP 2: 80 tokens in all) for four requests of 34 tokens:
 * they cannot all run at once. */
static void test_preemption(void **state)
{
    (void)state;
    static const req_spec spec[] = {
        {0, 10, 24, 0.0f, 0, 1.0f, 0, 0, NULL}, {20, 10, 24, 0.8f, 0, 1.0f, 5, 0, NULL},
        {50, 10, 24, 0.0f, 0, 1.0f, 0, 1, NULL}, {80, 10, 24, 1.0f, 20, 1.0f, 9, 2, NULL},
    };
    enum { N = sizeof spec / sizeof spec[0] };
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_seqs = 4;
    sc.max_rows = 8;
    sc.block_size = 4;
    sc.kv_pages = 10;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.backend = DCP_CP_A2A;
    fixture f;
    fx_open(&f, 8, 2, &sc, 0);
    out alone[N], together[N];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    for (uint32_t k = 0; k < N; k++) run_alone(&f, &spec[k], &alone[k]);
    uint64_t preempted = 0;
    run_mix(&f, spec, N, together, &preempted);
    compare("preemption", spec, alone, together, N);
    dcp_engine_stats st;
    dcp_engine_get_stats(f.e, &st);
    if (preempted == 0) fail_msg("the pool of 10 pages held all four requests: no preemption to test");
    assert_true(st.recomputed_tokens > 0);
    printf("preemption: %llu preemptions, %llu tokens recomputed, peak %u running: same tokens as alone\n",
           (unsigned long long)preempted, (unsigned long long)st.recomputed_tokens, st.running_peak);
    fx_close(&f);
}

/* Admission: a prompt is admitted only when all of it fits beside what the running ones will hold
 * once their known tokens are in. A pool of 12 pages of 4 tokens, 16 rows per step: A (prompt 40,
 * 10 pages; 6 tokens out: 12 pages at the end) prefills in chunks of 16; B (prompt 8) arrives with
 * it. Admitted on the 4 tokens that fit beside A's last chunk, B would be preempted when A's
 * decode needs its last pages; so B waits for A, and nothing is preempted or recomputed. */
static void test_admission(void **state)
{
    (void)state;
    static const req_spec spec[] = {{0, 40, 6, 0.0f, 0, 1.0f, 0, 0, NULL}, {50, 8, 2, 0.0f, 0, 1.0f, 0, 0, NULL}};
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_seqs = 2;
    sc.max_rows = 16;
    sc.block_size = 4;
    sc.kv_pages = 12;
    fixture f;
    fx_open(&f, 1, 1, &sc, 0);
    out outs[2], alone[2];
    memset(outs, 0, sizeof outs);
    memset(alone, 0, sizeof alone);
    for (uint32_t k = 0; k < 2; k++) run_alone(&f, &spec[k], &alone[k]);
    uint64_t preempted = 1;
    run_mix(&f, spec, 2, outs, &preempted);
    compare("admission", spec, alone, outs, 2);
    dcp_engine_stats st;
    dcp_engine_get_stats(f.e, &st);
    assert_int_equal(preempted, 0);
    assert_int_equal(st.recomputed_tokens, 0);
    fx_close(&f);
}

/* Cancelling a running request returns exactly its pages on every rank and layer, at once; the
 * others go on with the tokens they have alone. */
static void test_cancel(void **state)
{
    (void)state;
    static const req_spec spec[] = {
        {0, 9, 20, 0.0f, 0, 1.0f, 0, 0, NULL}, {30, 21, 20, 0.0f, 0, 1.0f, 0, 0, NULL}, {60, 6, 20, 0.5f, 0, 1.0f, 2, 0, NULL},
    };
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_seqs = 3;
    sc.max_rows = 16;
    sc.block_size = 4;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.backend = DCP_CP_AG_RS;
    fixture f;
    fx_open(&f, 8, 2, &sc, 0);
    out alone[3], together[3];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    run_alone(&f, &spec[0], &alone[0]);
    run_alone(&f, &spec[2], &alone[2]);
    uint64_t ids[3];
    for (uint32_t k = 0; k < 3; k++) {
        dcp_engine_request q = make_request(&spec[k], &together[k]);
        DCP_ASSERT_OK(dcp_engine_submit(f.e, &q, &ids[k]));
    }
    for (int t = 0; t < 8; t++) {
        DCP_ASSERT_OK(dcp_engine_step(f.e));
        dcp_test_drain(f.e);
    }
    const dcp_model_state *s = f.s;
    int32_t slot = dcp_engine_request_slot(f.e, ids[1]);
    assert_true(slot >= 0);
    assert_true(dcp_model_state_seq_length(s, (uint32_t)slot) > 21);
    uint32_t before_free[8][5], held[8][5];
    for (uint32_t i = 0; i < s->m->nl; i++)
        for (uint32_t l = 0; l < f.cfg.n_layer; l++) {
            before_free[i][l] = real_free(s, i, l);
            held[i][l] = real_seq_pages(s, (uint32_t)slot, i, l);
            assert_true(held[i][l] > 0);
        }
    DCP_ASSERT_OK(dcp_engine_cancel(f.e, ids[1]));
    for (uint32_t i = 0; i < s->m->nl; i++)
        for (uint32_t l = 0; l < f.cfg.n_layer; l++) {
            assert_int_equal(real_free(s, i, l), before_free[i][l] + held[i][l]);
            assert_int_equal(real_seq_pages(s, (uint32_t)slot, i, l), 0);
        }
    assert_int_equal(dcp_model_state_seq_length(s, (uint32_t)slot), 0);
    assert_int_equal(dcp_engine_request_slot(f.e, ids[1]), -1);
    dcp_test_drain(f.e);
    assert_true(together[1].done);
    assert_int_equal(together[1].finish, DCP_ENGINE_FINISH_CANCELLED);
    assert_int_equal(dcp_engine_cancel(f.e, ids[1]), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "neither queued nor running"));
    while (dcp_engine_busy(f.e)) {
        DCP_ASSERT_OK(dcp_engine_step(f.e));
        dcp_test_drain(f.e);
        check_pools(&f, ids, 3);
    }
    assert_int_equal(together[0].n, alone[0].n);
    assert_memory_equal(together[0].toks, alone[0].toks, alone[0].n * sizeof(int32_t));
    assert_memory_equal(together[2].toks, alone[2].toks, alone[2].n * sizeof(int32_t));
    assert_int_equal(dcp_model_state_pages_free(s), dcp_model_state_pages_total(s));
    /* A queued request is cancelled too (it holds no slot). */
    out w;
    memset(&w, 0, sizeof w);
    dcp_engine_request q = make_request(&spec[0], &w);
    uint64_t id;
    DCP_ASSERT_OK(dcp_engine_submit(f.e, &q, &id));
    DCP_ASSERT_OK(dcp_engine_cancel(f.e, id));
    dcp_test_drain(f.e);
    assert_true(w.done && w.finish == DCP_ENGINE_FINISH_CANCELLED && w.n == 0);
    assert_false(dcp_engine_busy(f.e));
    fx_close(&f);
}

/* Runs one request alone on a TP 1 engine and returns its output. */
static out run_one(fixture *f, const dcp_engine_request *r)
{
    out o;
    memset(&o, 0, sizeof o);
    dcp_engine_request q = *r;
    q.user = &o;
    uint64_t id;
    DCP_ASSERT_OK(dcp_engine_submit(f->e, &q, &id));
    while (dcp_engine_busy(f->e)) {
        DCP_ASSERT_OK(dcp_engine_step(f->e));
        dcp_test_drain(f->e);
    }
    dcp_test_drain(f->e);
    assert_true(o.done);
    return o;
}

static void test_stops(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 256;
    sc.max_seqs = 24;
    sc.max_rows = 32;
    fixture f;
    fx_open(&f, 1, 1, &sc, 0);
    dcp_engine_request r = DCP_ENGINE_REQUEST_DEFAULT;
    r.prompt = stories_ref;
    r.n_prompt = 1;
    r.max_tokens = 40;
    out full = run_one(&f, &r);
    assert_int_equal(full.finish, DCP_ENGINE_FINISH_LENGTH);
    assert_int_equal(full.completion, 40);
    assert_int_equal(full.n, 40);
    assert_memory_equal(full.toks, &stories_ref[1], 40 * sizeof(int32_t));
    assert_non_null(strstr(full.text, "Once upon a time"));
    /* A stop string spanning tokens: the text ends right before its first occurrence. */
    const char *stop1 = "ttle gi";
    const char *at = strstr(full.text, stop1);
    assert_non_null(at);
    const char *stops[] = {"zebra!", stop1};
    r.stop = stops;
    r.n_stop = 2;
    out cut = run_one(&f, &r);
    assert_int_equal(cut.finish, DCP_ENGINE_FINISH_STOP);
    assert_int_equal(cut.len, (size_t)(at - full.text));
    assert_memory_equal(cut.text, full.text, cut.len);
    assert_true(cut.completion < 40);
    /* A stop string that starts to match but never completes: held back, then released. */
    const char *partial[] = {"Lily zzz"};
    r.stop = partial;
    r.n_stop = 1;
    out held = run_one(&f, &r);
    assert_int_equal(held.finish, DCP_ENGINE_FINISH_LENGTH);
    assert_string_equal(held.text, full.text);
    /* Max tokens. */
    r.stop = NULL;
    r.n_stop = 0;
    r.max_tokens = 3;
    out three = run_one(&f, &r);
    assert_int_equal(three.finish, DCP_ENGINE_FINISH_LENGTH);
    assert_int_equal(three.completion, 3);
    assert_memory_equal(three.toks, &stories_ref[1], 3 * sizeof(int32_t));
    /* A stop token (a chat template's end of turn): the 5th reference token ends the request. */
    r.max_tokens = 40;
    int32_t stop_tok = stories_ref[5];
    r.stop_tokens = &stop_tok;
    r.n_stop_tokens = 1;
    out st = run_one(&f, &r);
    assert_int_equal(st.finish, DCP_ENGINE_FINISH_STOP);
    assert_int_equal(st.completion, 5);
    r.stop_tokens = NULL;
    r.n_stop_tokens = 0;
    /* EOS: stories260K ends its stories with BOS (llama2.c's convention), never EOS; sampled at a
     * high temperature (nearly uniform over 512 tokens) it does emit EOS now and then. Find seeds
     * that do within 200 tokens (all seeds as one batch with ignore_eos), then the same seed
     * without ignore_eos stops there. */
    enum { SEEDS = 20 };
    out runs[SEEDS];
    uint64_t ids[SEEDS];
    memset(runs, 0, sizeof runs);
    r.max_tokens = 200;
    r.ignore_eos = true;
    r.sampling = (dcp_sampler_config){.temperature = 50.0f, .top_k = 0, .top_p = 1.0f, .seed = 0, .repetition_penalty = 1.0f};
    int32_t eos = dcp_tokenizer_eos(f.tok);
    for (uint32_t k = 0; k < SEEDS; k++) {
        r.sampling.seed = 1000 + k;
        r.user = &runs[k];
        DCP_ASSERT_OK(dcp_engine_submit(f.e, &r, &ids[k]));
    }
    while (dcp_engine_busy(f.e)) {
        DCP_ASSERT_OK(dcp_engine_step(f.e));
        dcp_test_drain(f.e);
    }
    uint32_t found = 0;
    r.ignore_eos = false;
    for (uint32_t k = 0; k < SEEDS && found < 3; k++) {
        uint32_t p = 0;
        while (p < runs[k].n && runs[k].toks[p] != eos) p++;
        if (p == runs[k].n) continue;
        found++;
        r.sampling.seed = 1000 + k;
        out stop = run_one(&f, &r);
        assert_int_equal(stop.finish, DCP_ENGINE_FINISH_STOP);
        assert_int_equal(stop.completion, p + 1);
        assert_int_equal(stop.n, p + 1);
        assert_memory_equal(stop.toks, runs[k].toks, (p + 1) * sizeof(int32_t));
        char *text;
        size_t len;
        DCP_ASSERT_OK(dcp_tokenizer_decode(f.tok, runs[k].toks, p, 0, &text, &len));
        assert_int_equal(stop.len, len);
        assert_memory_equal(stop.text, text, len);
        free(text);
    }
    if (found == 0) fail_msg("none of %d sampled stories produced EOS within 200 tokens", SEEDS);
    printf("EOS: %u of the sampled stories stopped at their EOS\n", found);
    fx_close(&f);
}

static void test_refused(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_seqs = 2;
    sc.max_rows = 8;
    sc.block_size = 4;
    sc.kv_pages = 6;
    fixture f;
    fx_open(&f, 1, 1, &sc, 0);
    out o;
    memset(&o, 0, sizeof o);
    dcp_engine_request r = DCP_ENGINE_REQUEST_DEFAULT;
    r.prompt = stories_ref;
    r.n_prompt = 10;
    r.user = &o;
    uint64_t id;
    r.max_tokens = 55;
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "exceed the context of 64"));
    assert_int_equal(id, 0);
    r.max_tokens = 20; /* 30 tokens: 8 pages of 4 > 6 */
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_OUT_OF_PAGES);
    assert_non_null(strstr(dcp_last_error(), "can never run"));
    r.max_tokens = 4;
    r.sampling.temperature = -1.0f;
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "temperature"));
    r.sampling.temperature = 0.0f;
    const char *empty[] = {""};
    r.stop = empty;
    r.n_stop = 1;
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "stop string 0 is empty"));
    r.n_stop = 0;
    int32_t bad[2] = {1, 512};
    r.prompt = bad;
    r.n_prompt = 2;
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "outside the vocabulary"));
    assert_false(dcp_engine_busy(f.e));
    /* The engine still serves. */
    r.prompt = stories_ref;
    r.n_prompt = 1;
    out ok = run_one(&f, &r);
    assert_int_equal(ok.n, 4);
    assert_memory_equal(ok.toks, &stories_ref[1], 4 * sizeof(int32_t));
    fx_close(&f);
}

/* The sampling parameters in a batch: six requests with penalties, biases, min-p and min_tokens
 * (greedy ones among them, which then sample on the host) and plain ones, at TP 8 / DCP 2, give
 * the same tokens together as alone; and the changed ones differ from their plain selves. */
static void test_invariance_params(void **state)
{
    (void)state;
    static const dcp_logit_bias bias[] = {{13, -100.0f}, {29, 3.0f}, {64, -2.5f}};
    static const dcp_sampler_config pa = {.temperature = 0.0f, .top_p = 1.0f, .presence_penalty = -2.0f,
                                          .frequency_penalty = 0.5f, .repetition_penalty = 1.0f},
                                    pb = {.temperature = 0.9f, .top_k = 40, .top_p = 1.0f, .seed = 7,
                                          .min_p = 0.05f, .repetition_penalty = 1.3f},
                                    pd = {.temperature = 0.8f, .top_p = 1.0f, .seed = 21, .repetition_penalty = 1.0f,
                                          .logit_bias = bias, .n_logit_bias = 3, .min_tokens = 4},
                                    pe = {.temperature = 1.0f, .top_p = 0.95f, .seed = 5, .presence_penalty = 0.3f,
                                          .frequency_penalty = -0.5f, .repetition_penalty = 0.8f},
                                    pg = {.temperature = 0.0f, .top_p = 1.0f, .repetition_penalty = 2.0f};
    static const req_spec spec[] = {
        {0, 5, 16, 0.0f, 0, 1.0f, 0, 0, &pa},   {40, 13, 20, 0.0f, 0, 1.0f, 0, 0, &pb},
        {0, 1, 24, 0.0f, 0, 1.0f, 0, 2, NULL},  {100, 30, 9, 0.0f, 0, 1.0f, 0, 3, &pd},
        {7, 9, 16, 0.0f, 0, 1.0f, 0, 5, &pe},   {60, 20, 12, 0.0f, 0, 1.0f, 0, 6, &pg},
        {20, 6, 10, 0.7f, 0, 0.9f, 3, 8, NULL},
    };
    enum { N = sizeof spec / sizeof spec[0] };
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 64;
    sc.max_seqs = 4;
    sc.max_rows = 8;
    sc.kv_dtype = DCP_DTYPE_F32;
    sc.backend = DCP_CP_A2A;
    fixture f;
    fx_open(&f, 8, 2, &sc, 0);
    out alone[N], together[N], plain[1];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    memset(plain, 0, sizeof plain);
    for (uint32_t k = 0; k < N; k++) run_alone(&f, &spec[k], &alone[k]);
    run_mix(&f, spec, N, together, NULL);
    compare("sampling parameters, TP 8 DCP 2", spec, alone, together, N);
    /* A greedy one with a penalty is not the plain greedy continuation (the repetition penalty of
     * 2 keeps it off its prompt's words). */
    req_spec p = spec[5];
    p.sampling = NULL;
    run_alone(&f, &p, &plain[0]);
    assert_int_equal(plain[0].n, alone[5].n);
    if (!memcmp(plain[0].toks, alone[5].toks, plain[0].n * sizeof(int32_t)))
        fail_msg("request 5: the repetition penalty changed nothing ('%s')", plain[0].text);
    /* The banned token never comes. */
    for (uint32_t t = 0; t < alone[3].n; t++) assert_int_not_equal(alone[3].toks[t], 13);
    printf("sampling parameters: %u requests together, tokens the same as alone; greedy with a repetition penalty "
           "'%s', without '%s'\n", (unsigned)N, alone[5].text, plain[0].text);
    fx_close(&f);
}

/* min_tokens, stop tokens (stop_token_ids), ignore_eos and include_stop_str_in_output. */
static void test_stop_params(void **state)
{
    (void)state;
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 128;
    sc.max_seqs = 4;
    sc.max_rows = 16;
    fixture f;
    fx_open(&f, 1, 1, &sc, 0);
    const int32_t eos = dcp_tokenizer_eos(f.tok);
    assert_true(eos >= 0);
    dcp_engine_request r = DCP_ENGINE_REQUEST_DEFAULT;
    r.prompt = stories_ref;
    r.n_prompt = 1;
    r.max_tokens = 10;
    /* A bias of +100 on a token: greedy takes it at every step. */
    const int32_t x = stories_ref[7];
    dcp_logit_bias bx = {x, 100.0f};
    r.sampling.logit_bias = &bx;
    r.sampling.n_logit_bias = 1;
    out forced = run_one(&f, &r);
    assert_int_equal(forced.n, 10);
    for (uint32_t t = 0; t < 10; t++) assert_int_equal(forced.toks[t], x);
    /* ... and as a stop token it ends the request at once (its text not shown) ... */
    r.stop_tokens = &x;
    r.n_stop_tokens = 1;
    out st = run_one(&f, &r);
    assert_int_equal(st.finish, DCP_ENGINE_FINISH_STOP);
    assert_int_equal(st.completion, 1);
    assert_int_equal(st.len, 0);
    /* ... unless min_tokens 3 masks it for three tokens: the fourth is it. */
    r.sampling.min_tokens = 3;
    out mt = run_one(&f, &r);
    assert_int_equal(mt.finish, DCP_ENGINE_FINISH_STOP);
    assert_int_equal(mt.completion, 4);
    for (uint32_t t = 0; t < 3; t++) assert_int_not_equal(mt.toks[t], x);
    assert_int_equal(mt.toks[3], x);
    /* include_stop_str_in_output: the stop token's text is shown. */
    r.include_stop_str_in_output = true;
    out mti = run_one(&f, &r);
    assert_memory_equal(mti.toks, mt.toks, 4 * sizeof(int32_t));
    char *text;
    size_t len;
    DCP_ASSERT_OK(dcp_tokenizer_decode(f.tok, mt.toks, 3, 0, &text, &len));
    assert_int_equal(mt.len, len);
    assert_memory_equal(mt.text, text, len);
    free(text);
    DCP_ASSERT_OK(dcp_tokenizer_decode(f.tok, mt.toks, 4, 0, &text, &len));
    assert_true(len > mt.len);
    assert_int_equal(mti.len, len);
    assert_memory_equal(mti.text, text, len);
    free(text);
    r.include_stop_str_in_output = false;
    r.stop_tokens = NULL;
    r.n_stop_tokens = 0;
    /* EOS forced by a bias: it stops at once; min_tokens 2 masks it twice; ignore_eos goes on to
     * max_tokens (EOS no longer masked: every token is EOS). */
    dcp_logit_bias be = {eos, 100.0f};
    r.sampling.logit_bias = &be;
    r.sampling.min_tokens = 0;
    out e0 = run_one(&f, &r);
    assert_int_equal(e0.finish, DCP_ENGINE_FINISH_STOP);
    assert_int_equal(e0.completion, 1);
    r.sampling.min_tokens = 2;
    out e2 = run_one(&f, &r);
    assert_int_equal(e2.finish, DCP_ENGINE_FINISH_STOP);
    assert_int_equal(e2.completion, 3);
    assert_int_not_equal(e2.toks[0], eos);
    assert_int_not_equal(e2.toks[1], eos);
    assert_int_equal(e2.toks[2], eos);
    r.ignore_eos = true;
    out ei = run_one(&f, &r);
    assert_int_equal(ei.finish, DCP_ENGINE_FINISH_LENGTH);
    assert_int_equal(ei.completion, 10);
    for (uint32_t t = 0; t < 10; t++) assert_int_equal(ei.toks[t], eos);
    r.ignore_eos = false;
    r.sampling = (dcp_sampler_config)DCP_SAMPLER_CONFIG_DEFAULT;
    /* include_stop_str_in_output with a stop string: the text ends after it. */
    r.max_tokens = 40;
    out full = run_one(&f, &r);
    const char *stop1 = "ttle gi";
    const char *at = strstr(full.text, stop1);
    assert_non_null(at);
    const char *stops[] = {"zebra!", stop1};
    r.stop = stops;
    r.n_stop = 2;
    r.include_stop_str_in_output = true;
    out cut = run_one(&f, &r);
    assert_int_equal(cut.finish, DCP_ENGINE_FINISH_STOP);
    assert_int_equal(cut.len, (size_t)(at - full.text) + strlen(stop1));
    assert_memory_equal(cut.text, full.text, cut.len);
    /* Refused: min_tokens beyond max_tokens, a stop token outside the vocabulary, a bad bias. */
    r.stop = NULL;
    r.n_stop = 0;
    uint64_t id;
    r.sampling.min_tokens = 41;
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "min_tokens 41 exceeds max_tokens 40"));
    r.sampling.min_tokens = 0;
    const int32_t bad = 512;
    r.stop_tokens = &bad;
    r.n_stop_tokens = 1;
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "stop token 0 is 512"));
    r.n_stop_tokens = 0;
    dcp_logit_bias bb = {3, 101.0f};
    r.sampling.logit_bias = &bb;
    r.sampling.n_logit_bias = 1;
    assert_int_equal(dcp_engine_submit(f.e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "[-100, 100]"));
    assert_false(dcp_engine_busy(f.e));
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_stop_params),
        cmocka_unit_test(test_invariance_params),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_invariance_a2a),
        cmocka_unit_test(test_invariance_ag_rs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
