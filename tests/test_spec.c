/* Speculative decoding in the serving engine (include/dcpvk/engine.h, src/engine/spec.c) on
 * stories260K, with n-gram drafts and with a draft model (stories260K cut to its first 2 layers, the
 * same vocabulary, on the same devices and layout):
 *  - exact: greedy requests, and requests sampled with n-gram drafts, give bitwise the tokens,
 *    texts and finish reasons of the same requests without speculation, run together (mixed with
 *    prompt chunks, at changing batch positions) and alone, at TP 1 and TP 8 / DCP 2 (a2a with
 *    interleave 1, ag_rs with interleave = block size); the draft model's greedy drafts likewise;
 *  - a draft model with sampling: the same tokens alone, batched and preempted (per-sequence
 *    uniforms keyed by seed and position), and the target distribution: chi-square of the tokens
 *    over 768 seeds against the target's own probabilities (computed from its logits) at the first
 *    token (no draft), the second (drafted and verified) and the third, and much larger against
 *    the draft's (the test can tell them apart);
 *  - drafts are accepted (counters), stop strings inside accepted tokens end the text exactly where
 *    decoding without speculation ends it; preemption with speculation changes no output; after
 *    every step the target's and the draft's pools hold exactly the pages of the sequences holding
 *    slots; cancelling frees both states' pages at once;
 *  - the same exactness on generated models: deepseek2 (MLA latent cache, MoE) at TP 1, TP 4 /
 *    DCP 4 and DCP 2 (ag_rs, q_replicate), with q8_0 latent rows too; a llama with q8_0 KV at TP 1,
 *    TP 8 / DCP 2 and DCP 4 (ag_rs, interleave 8);
 *  - refused configurations, each naming what is wrong: k out of range, k + 1 beyond the rows with
 *    logits, n-gram sizes, a missing draft, another vocabulary (token count, one token's text), a
 *    draft state too small or busy. */
#include <math.h>
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

enum { MAXT = 128, MAXR = 32 };

/* ---- fixture: target and draft states on the same devices --------------------------------------- */

/* The target: stories260K, or a generated model of the built-in vocabulary: deepseek2 (MLA latent
 * cache, MoE; latent rows of 64 values for q8_0), a llama of head dim 32 (q8_0 KV). */
typedef enum src_kind { SRC_STORIES, SRC_DS2, SRC_DS2_Q8, SRC_GEN_HD32 } src_kind;

typedef struct fixture {
    dcp_gguf *g, *dg;
    void *bytes, *dbytes;
    dcp_model_config cfg, dcfg;
    dcp_context *ctx;
    dcp_model *m, *dm;
    dcp_model_state *s, *ds;
    dcp_tokenizer *tok, *dtok;
} fixture;

/* stories260K cut to `layers` layers (rename >= 0: that token's text changed), in memory. */
static dcp_gguf *open_draft(const dcp_gguf *g, uint32_t layers, int64_t rename, void **bytes)
{
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_test_model_cut_layers(g, layers, rename, &w));
    return dcp_test_gguf_of_writer(w, bytes, "<draft: stories260K cut>");
}

static void open_src(src_kind k, fixture *f)
{
    if (k == SRC_STORIES) {
        DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &f->g));
        return;
    }
    if (k == SRC_DS2 || k == SRC_DS2_Q8) {
        f->g = dcp_test_open_deepseek2(k == SRC_DS2_Q8, &f->bytes);
        return;
    }
    dcp_test_model_config mc = DCP_TEST_MODEL_CONFIG_DEFAULT;
    mc.n_layer = 3;
    mc.n_head = 8;
    mc.n_head_kv = 2;
    mc.n_embd = 256;
    mc.head_dim = 32;
    mc.n_ff = 256;
    mc.seed = 311;
    dcp_gguf_writer *w;
    DCP_ASSERT_OK(dcp_gguf_build_test_model(&mc, &w));
    f->g = dcp_test_gguf_of_writer(w, &f->bytes, "<generated test model>");
}

/* Target src (stories260K: 5 layers); with draft_layers > 0 a draft of its first draft_layers
 * layers (stories260K 4: about a third of the drafts accepted; 5: the target itself, every greedy
 * draft accepted). */
static void fx_open_draft_dcp(fixture *f, src_kind src, uint32_t tp, uint32_t dcp, bool q_replicate,
                              const dcp_model_state_config *sc, uint32_t draft_layers, uint32_t draft_dcp);

static void fx_open_src(fixture *f, src_kind src, uint32_t tp, uint32_t dcp, bool q_replicate,
                        const dcp_model_state_config *sc, uint32_t draft_layers)
{
    fx_open_draft_dcp(f, src, tp, dcp, q_replicate, sc, draft_layers, dcp);
}

/* As fx_open_src, the draft at DCP size draft_dcp (1: its cache replicated over each DCP group). */
static void fx_open_draft_dcp(fixture *f, src_kind src, uint32_t tp, uint32_t dcp, bool q_replicate,
                              const dcp_model_state_config *sc, uint32_t draft_layers, uint32_t draft_dcp)
{
    memset(f, 0, sizeof *f);
    open_src(src, f);
    f->ctx = dcp_test_context_of(tp);
    dcp_test_model_open(f->ctx, f->g, tp, dcp, q_replicate, &f->cfg, &f->tok, &f->m);
    DCP_ASSERT_OK(dcp_model_state_create(f->m, sc, &f->s));
    if (!draft_layers) return;
    f->dg = open_draft(f->g, draft_layers, -1, &f->dbytes);
    dcp_test_model_open(f->ctx, f->dg, tp, draft_dcp, q_replicate && draft_dcp == dcp, &f->dcfg, &f->dtok, &f->dm);
    dcp_model_state_config dc = *sc;
    dc.kv_pages = 0; /* every slot at full context: the draft never waits for pages */
    dc.max_logits = 0;
    DCP_ASSERT_OK(dcp_model_state_create(f->dm, &dc, &f->ds));
}

static void fx_open(fixture *f, uint32_t tp, uint32_t dcp, const dcp_model_state_config *sc, uint32_t draft_layers)
{
    fx_open_src(f, SRC_STORIES, tp, dcp, false, sc, draft_layers);
}

static void fx_close(fixture *f)
{
    dcp_model_state_destroy(f->ds);
    dcp_model_destroy(f->dm);
    dcp_tokenizer_destroy(f->dtok);
    dcp_gguf_close(f->dg);
    free(f->dbytes);
    dcp_model_state_destroy(f->s);
    dcp_test_model_close(f->ctx, f->m, f->tok, f->g);
    free(f->bytes);
}

static dcp_spec_config spec_ngram(uint32_t k)
{
    dcp_spec_config sp = DCP_SPEC_CONFIG_DEFAULT;
    sp.method = DCP_SPEC_NGRAM;
    sp.num_speculative_tokens = k;
    sp.prompt_lookup_max = 4;
    sp.prompt_lookup_min = 2;
    return sp;
}

static dcp_spec_config spec_draft(const fixture *f, uint32_t k)
{
    dcp_spec_config sp = DCP_SPEC_CONFIG_DEFAULT;
    sp.method = DCP_SPEC_DRAFT;
    sp.num_speculative_tokens = k;
    sp.draft = f->ds;
    sp.draft_tokenizer = f->dtok;
    return sp;
}

/* ---- requests and their outputs ------------------------------------------------------------- */

typedef dcp_test_out out;

typedef struct req_spec {
    uint32_t off, len;   /* prompt: stories_ref[off .. off + len), or echo[off .. off + len) when
                          * off >= ECHO */
    uint32_t max_tokens;
    float temp;
    uint32_t top_k;
    uint64_t seed;
    uint32_t start;      /* step at which it is submitted */
    const char *stop;    /* NULL or one stop string */
} req_spec;


static bool g_prefix_caching; /* the engines of run() cache prefixes */

/* Pages of every layer and rank of state s: free + the slots' own == the pool; free slots hold
 * nothing; the formula accounting agrees. held[slot]: whether a request holds it. */
static void check_state_pages(const dcp_model_state *s, const bool *held, const char *which)
{
    for (uint32_t l = 0; l < s->m->cfg.n_layer; l++)
        for (uint32_t i = 0; i < s->m->nl; i++) {
            const dcp_kv_cache *c = s->caches[l * s->ng + s->r[i].g];
            const uint32_t gl = s->r[i].gl;
            uint32_t used = 0;
            for (uint32_t q = 0; q < s->cfg.max_seqs; q++) {
                uint32_t len = dcp_kv_cache_seq_local_length(c, gl, q);
                uint32_t p = (len + s->cfg.block_size - 1) / s->cfg.block_size;
                if (!held[q] && p) fail_msg("%s: slot %u holds %u pages on rank %u layer %u but no request holds it", which, q, p, i, l);
                used += p;
            }
            assert_int_equal(dcp_kv_cache_pages_free(c, gl) + used, s->cfg.kv_pages);
            assert_int_equal(dcp_kv_cache_pages_used(c, gl), used);
            assert_int_equal(dcp_kv_cache_pages_free(c, gl), dcp_model_state_rank_pages_free(s, s->r[i].gr));
        }
}

static void check_pools(const fixture *f, dcp_engine *e, const uint64_t *ids, uint32_t n)
{
    bool held[64] = {0};
    for (uint32_t k = 0; k < n; k++) {
        int32_t slot = ids[k] ? dcp_engine_request_slot(e, ids[k]) : -1;
        if (slot >= 0) {
            assert_false(held[slot]);
            held[slot] = true;
        }
    }
    if (!g_prefix_caching) check_state_pages(f->s, held, "target"); /* (cached pages are shared) */
    if (f->ds) check_state_pages(f->ds, held, "draft");
}

/* A prompt that quotes itself: BOS, 24 tokens of the story, BOS, the same 24 tokens, then its first
 * 12 again (a continuation that repeats the prompt: prompt lookup drafts well). */
enum { ECHO = 1000, ECHO_LEN = 62 };
static int32_t echo[ECHO_LEN];

static void make_echo(void)
{
    uint32_t n = 0;
    echo[n++] = 1;
    for (uint32_t t = 0; t < 24; t++) echo[n++] = stories_ref[1 + t];
    echo[n++] = 1;
    for (uint32_t t = 0; t < 24; t++) echo[n++] = stories_ref[1 + t];
    for (uint32_t t = 0; t < 12; t++) echo[n++] = stories_ref[1 + t];
    assert_int_equal(n, ECHO_LEN);
}

/* The prompts' token sources: stories260K's ids, or those ids folded into another vocabulary. */
static const int32_t *ref_toks = stories_ref, *echo_toks = echo;
static int32_t folded_ref[257], folded_echo[ECHO_LEN];

/* Prompts for a model of n_vocab tokens (BOS 1 kept, ids 3.. folded into range); n_vocab 0: back
 * to stories260K's own. */
static void use_vocab(uint32_t n_vocab)
{
    if (!n_vocab) {
        ref_toks = stories_ref;
        echo_toks = echo;
        return;
    }
    for (uint32_t t = 0; t < 257; t++) folded_ref[t] = stories_ref[t] < 3 ? stories_ref[t] : 3 + stories_ref[t] % (int32_t)(n_vocab - 3);
    for (uint32_t t = 0; t < ECHO_LEN; t++) folded_echo[t] = echo[t] < 3 ? echo[t] : 3 + echo[t] % (int32_t)(n_vocab - 3);
    ref_toks = folded_ref;
    echo_toks = folded_echo;
}

/* NULL, or the penalties, bias, min-p and min_tokens that make_request gives every request with
 * an odd prompt offset (test_penalties_tp1). */
static const dcp_sampler_config *g_params;

static dcp_engine_request make_request(const req_spec *r, out *o)
{
    dcp_engine_request q = DCP_ENGINE_REQUEST_DEFAULT;
    q.prompt = r->off >= ECHO ? &echo_toks[r->off - ECHO] : &ref_toks[r->off];
    q.n_prompt = r->len;
    q.max_tokens = r->max_tokens;
    q.sampling = (dcp_sampler_config){.temperature = r->temp, .top_k = r->top_k, .top_p = 1.0f, .seed = r->seed, .repetition_penalty = 1.0f};
    if (g_params && (r->off % 2 || r->off == 0)) {
        q.sampling.presence_penalty = g_params->presence_penalty;
        q.sampling.frequency_penalty = g_params->frequency_penalty;
        q.sampling.repetition_penalty = g_params->repetition_penalty;
        q.sampling.logit_bias = g_params->logit_bias;
        q.sampling.n_logit_bias = g_params->n_logit_bias;
        q.sampling.min_p = g_params->min_p;
        q.sampling.min_tokens = g_params->min_tokens < r->max_tokens ? g_params->min_tokens : 0;
    }
    q.decode_flags = DCP_DECODE_KEEP_LEADING_SPACE;
    if (r->stop) {
        q.stop = &r->stop;
        q.n_stop = 1;
    }
    q.user = o;
    return q;
}

/* Runs the requests on a new engine over f's target state (speculation sp, or none when sp is
 * NULL), each submitted at its start step (all at step 0 when alone >= 0: request `alone` only);
 * checks both states' pools after every step. Returns the engine's counters. */
static dcp_engine_stats run(fixture *f, const dcp_spec_config *sp, uint32_t step_tokens, const req_spec *spec, uint32_t n,
                            int alone, out *outs)
{
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.step_tokens = step_tokens;
    ec.enable_prefix_caching = g_prefix_caching;
    if (sp) ec.spec = *sp;
    dcp_engine *e;
    DCP_ASSERT_OK(dcp_engine_create(f->s, f->tok, &ec, &e));
    uint64_t ids[MAXR] = {0};
    uint32_t submitted = 0, want = alone >= 0 ? 1 : n;
    for (uint32_t step = 0;; step++) {
        for (uint32_t k = 0; k < n; k++) {
            if (alone >= 0 ? (k != (uint32_t)alone || step != 0) : spec[k].start != step) continue;
            memset(&outs[k], 0, sizeof outs[k]);
            dcp_engine_request q = make_request(&spec[k], &outs[k]);
            DCP_ASSERT_OK(dcp_engine_submit(e, &q, &ids[k]));
            submitted++;
        }
        if (!dcp_engine_busy(e) && submitted == want) break;
        DCP_ASSERT_OK(dcp_engine_step(e));
        dcp_test_drain(e);
        check_pools(f, e, ids, n);
        assert_true(step < 4000);
    }
    dcp_engine_stats st;
    dcp_engine_get_stats(e, &st);
    dcp_engine_destroy(e);
    if (g_prefix_caching) DCP_ASSERT_OK(dcp_model_state_set_prefix_caching(f->s, false)); /* frees the cache */
    assert_int_equal(dcp_model_state_pages_free(f->s), dcp_model_state_pages_total(f->s));
    if (f->ds) assert_int_equal(dcp_model_state_pages_free(f->ds), dcp_model_state_pages_total(f->ds));
    return st;
}

static void same_outputs(const char *what, const req_spec *spec, const out *a, const out *b, uint32_t n)
{
    for (uint32_t k = 0; k < n; k++) {
        if (!a[k].done || !b[k].done) continue; /* not run in one of them */
        if (a[k].n != b[k].n || memcmp(a[k].toks, b[k].toks, a[k].n * sizeof a[k].toks[0]) || a[k].finish != b[k].finish ||
            a[k].len != b[k].len || memcmp(a[k].text, b[k].text, a[k].len) || a[k].completion != b[k].completion)
            fail_msg("%s: request %u (prompt %u tokens, temp %g): %u tokens '%s' (%s) against %u tokens '%s' (%s)", what,
                     k, spec[k].len, spec[k].temp, a[k].n, a[k].text, dcp_engine_finish_name(a[k].finish), b[k].n,
                     b[k].text, dcp_engine_finish_name(b[k].finish));
    }
}

static void print_stats_of(const char *what, const dcp_engine_stats *st, bool need_accepted)
{
    printf("%s: %llu drafts, %llu draft tokens, %llu accepted (mean accepted length %.2f), %llu tokens emitted in %llu "
           "steps\n",
           what, (unsigned long long)st->spec_drafts, (unsigned long long)st->spec_draft_tokens,
           (unsigned long long)st->spec_accepted_tokens,
           st->spec_drafts ? 1.0 + (double)st->spec_accepted_tokens / (double)st->spec_drafts : 0.0,
           (unsigned long long)st->generated_tokens, (unsigned long long)st->steps);
    assert_true(st->spec_drafts > 0);
    if (need_accepted) assert_true(st->spec_accepted_tokens > 0);
    uint64_t per_pos = 0;
    for (uint32_t j = 0; j < DCP_SPEC_MAX_TOKENS; j++) per_pos += st->spec_accepted_per_pos[j];
    assert_int_equal(per_pos, st->spec_accepted_tokens);
}

static void print_stats(const char *what, const dcp_engine_stats *st) { print_stats_of(what, st, true); }

/* Prompts from the reference story (which repeats itself: prompt lookup finds matches), greedy and
 * sampled, joining at different steps. */
static const req_spec mix[] = {
    {0, 5, 40, 0.0f, 0, 0, 0, NULL},     {40, 13, 30, 0.9f, 40, 7, 0, NULL}, {0, 1, 48, 0.0f, 0, 0, 2, NULL},
    {100, 30, 20, 0.7f, 0, 3, 3, NULL},  {7, 9, 36, 0.0f, 0, 0, 5, NULL},    {60, 20, 16, 1.0f, 0, 11, 9, NULL},
    {ECHO, ECHO_LEN, 40, 0.0f, 0, 0, 1, NULL}, {ECHO, ECHO_LEN, 30, 0.5f, 0, 21, 4, NULL},
};
enum { NMIX = sizeof mix / sizeof mix[0] };

static dcp_model_state_config state_config(uint32_t max_seqs)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = 128;
    sc.max_seqs = max_seqs;
    sc.max_rows = 16;
    sc.max_logits = 16;
    sc.kv_dtype = DCP_DTYPE_F32;
    return sc;
}

/* Speculation sp against none: every request of the mix together, and request `alone` alone. */
static dcp_engine_stats exact_mix(fixture *f, const dcp_spec_config *sp, const char *what, bool sampled_equal)
{
    out base[NMIX], spec[NMIX], solo[NMIX];
    memset(solo, 0, sizeof solo);
    run(f, NULL, 0, mix, NMIX, -1, base);
    dcp_engine_stats st = run(f, sp, 0, mix, NMIX, -1, spec);
    for (uint32_t k = 0; k < NMIX; k++)
        if (sampled_equal || mix[k].temp == 0.0f) same_outputs(what, &mix[k], &base[k], &spec[k], 1);
    for (uint32_t k = 0; k < NMIX; k += 3) run(f, sp, 0, mix, NMIX, (int)k, solo);
    same_outputs(what, mix, solo, spec, NMIX);
    print_stats(what, &st);
    return st;
}

static void test_ngram_tp1(void **state)
{
    (void)state;
    dcp_model_state_config sc = state_config(4);
    fixture f;
    fx_open(&f, 1, 1, &sc, 0);
    dcp_spec_config sp = spec_ngram(4);
    exact_mix(&f, &sp, "TP 1 n-gram k 4", true);
    sp = spec_ngram(7);
    sp.prompt_lookup_max = 3;
    sp.prompt_lookup_min = 1;
    exact_mix(&f, &sp, "TP 1 n-gram k 7, n 1..3", true);
    fx_close(&f);
}

/* Penalties, a bias, min-p and min_tokens (greedy ones then sample on the host): verification
 * uses the penalised distribution of each row's own prefix, so n-gram speculation gives the
 * tokens of decoding without it, and with a draft model too for the greedy ones; each request
 * alone gives what it gives in the batch. */
static void test_penalties_tp1(void **state)
{
    (void)state;
    static const dcp_logit_bias bias[] = {{13, -100.0f}, {29, 2.0f}};
    static const dcp_sampler_config pc = {.presence_penalty = 0.8f, .frequency_penalty = 0.4f,
                                          .repetition_penalty = 1.3f, .logit_bias = bias, .n_logit_bias = 2,
                                          .min_p = 0.05f, .min_tokens = 3};
    g_params = &pc;
    dcp_model_state_config sc = state_config(4);
    fixture f;
    fx_open(&f, 1, 1, &sc, 4);
    dcp_spec_config sp = spec_ngram(4);
    exact_mix(&f, &sp, "TP 1 n-gram k 4, penalties", true);
    sp = spec_draft(&f, 3);
    exact_mix(&f, &sp, "TP 1 draft model k 3, penalties", false);
    fx_close(&f);
    g_params = NULL;
}

static void test_draft_tp1(void **state)
{
    (void)state;
    dcp_model_state_config sc = state_config(4);
    fixture f;
    fx_open(&f, 1, 1, &sc, 4);
    dcp_spec_config sp = spec_draft(&f, 3);
    exact_mix(&f, &sp, "TP 1 draft model (4 of 5 layers) k 3", false);
    fx_close(&f);
    fx_open(&f, 1, 1, &sc, 5);
    sp = spec_draft(&f, 5);
    exact_mix(&f, &sp, "TP 1 draft model (the target's 5 layers) k 5", false);
    /* k 4: a 30-token prompt's chunks in the batch leave its last row to a decode row (alone it
     * is in the last chunk): a sampled request must draw its first token the same way both times */
    sp = spec_draft(&f, 4);
    exact_mix(&f, &sp, "TP 1 draft model (the target's 5 layers) k 4", false);
    fx_close(&f);
}

static void test_dcp(void **state)
{
    (void)state;
    dcp_model_state_config sc = state_config(4);
    sc.backend = DCP_CP_A2A;
    fixture f;
    fx_open(&f, 8, 2, &sc, 4);
    dcp_spec_config sp = spec_ngram(4);
    exact_mix(&f, &sp, "TP 8 DCP 2 a2a n-gram k 4", true);
    sp = spec_draft(&f, 3);
    exact_mix(&f, &sp, "TP 8 DCP 2 a2a draft model k 3", false);
    fx_close(&f);
    sc.backend = DCP_CP_AG_RS;
    sc.interleave = 16;
    fx_open(&f, 8, 2, &sc, 4);
    sp = spec_draft(&f, 4);
    const dcp_engine_stats shard = exact_mix(&f, &sp, "TP 8 DCP 2 ag_rs interleave 16 draft model k 4", false);
    fx_close(&f);
    /* A draft at DCP 1 over the same ranks (its cache replicated over each DCP group, as the apps
     * load a draft whose heads do not allow the DCP size): its lengths follow the target's as the
     * sharded draft's do, so it drafts what that one drafts. */
    fx_open_draft_dcp(&f, SRC_STORIES, 8, 2, false, &sc, 4, 1);
    sp = spec_draft(&f, 4);
    const dcp_engine_stats rep = exact_mix(&f, &sp, "TP 8 DCP 2 ag_rs interleave 16, draft at DCP 1 (replicated) k 4",
                                           false);
    fx_close(&f);
    printf("draft model k 4: %llu of %llu draft tokens accepted replicated, %llu of %llu sharded\n",
           (unsigned long long)rep.spec_accepted_tokens, (unsigned long long)rep.spec_draft_tokens,
           (unsigned long long)shard.spec_accepted_tokens, (unsigned long long)shard.spec_draft_tokens);
    assert_int_equal(rep.spec_draft_tokens, shard.spec_draft_tokens); /* DCP 1 computes what DCP 2 does */
    assert_int_equal(rep.spec_accepted_tokens, shard.spec_accepted_tokens);
}

/* Greedy and sampled requests of the generated models, a self-quoting one among them. */
static const req_spec gen_mix[] = {
    {0, 6, 24, 0.0f, 0, 0, 0, NULL},
    {30, 11, 20, 0.8f, 0, 5, 0, NULL},
    {ECHO, ECHO_LEN, 24, 0.0f, 0, 0, 1, NULL},
    {100, 17, 20, 0.0f, 0, 0, 3, NULL},
};
enum { NGEN = sizeof gen_mix / sizeof gen_mix[0] };

typedef struct model_case {
    src_kind src;
    uint32_t tp, dcp, interleave, block;
    dcp_cp_backend backend;
    bool q_replicate;
    dcp_dtype kv;
    uint32_t draft_layers;
} model_case;

/* On each configuration: n-gram drafts (greedy and sampled requests equal to none) and a draft
 * model of the target's first layers (greedy requests equal to none), all together and the
 * self-quoting request alone. */
static void exact_models(const model_case *cases, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const model_case *c = &cases[i];
        dcp_model_state_config sc = state_config(4);
        sc.block_size = c->block;
        sc.interleave = c->interleave;
        sc.backend = c->backend;
        sc.kv_dtype = c->kv;
        fixture f;
        fx_open_src(&f, c->src, c->tp, c->dcp, c->q_replicate, &sc, c->draft_layers);
        use_vocab(f.cfg.n_vocab);
        char what[160];
        snprintf(what, sizeof what, "%s TP %u DCP %u %s interleave %u block %u%s %s",
                 c->src == SRC_DS2 ? "deepseek2" : c->src == SRC_DS2_Q8 ? "deepseek2-kv64" : "llama-hd32", c->tp,
                 c->dcp, dcp_cp_backend_name(c->backend), c->interleave, c->block,
                 c->q_replicate ? " q_replicate" : "", dcp_dtype_name(c->kv));
        out base[NGEN], ng[NGEN], dr[NGEN], solo[NGEN];
        memset(solo, 0, sizeof solo);
        run(&f, NULL, 0, gen_mix, NGEN, -1, base);
        char label[200];
        dcp_spec_config sp = spec_ngram(4);
        sp.prompt_lookup_min = 1; /* random weights rarely quote the prompt: matches of one token too */
        sp.prompt_lookup_max = 3;
        dcp_engine_stats st = run(&f, &sp, 0, gen_mix, NGEN, -1, ng);
        snprintf(label, sizeof label, "%s, n-gram k 4 n 1..3", what);
        same_outputs(label, gen_mix, base, ng, NGEN);
        run(&f, &sp, 0, gen_mix, NGEN, 2, solo);
        same_outputs(label, gen_mix, solo, ng, NGEN);
        print_stats_of(label, &st, false); /* drafts made; the draft model's get accepted */
        sp = spec_draft(&f, 3);
        st = run(&f, &sp, 0, gen_mix, NGEN, -1, dr);
        snprintf(label, sizeof label, "%s, draft model (%u layers) k 3", what, c->draft_layers);
        for (uint32_t k = 0; k < NGEN; k++)
            if (gen_mix[k].temp == 0.0f) same_outputs(label, &gen_mix[k], &base[k], &dr[k], 1);
        print_stats(label, &st);
        use_vocab(0);
        fx_close(&f);
    }
}

static void test_models_deepseek2(void **state)
{
    (void)state;
    static const model_case cases[] = {
        {SRC_DS2, 1, 1, 1, 16, DCP_CP_A2A, false, DCP_DTYPE_F32, 1},
        {SRC_DS2, 4, 4, 1, 4, DCP_CP_A2A, false, DCP_DTYPE_F16, 1},
        {SRC_DS2, 4, 2, 16, 16, DCP_CP_AG_RS, true, DCP_DTYPE_F32, 1},
        {SRC_DS2_Q8, 1, 1, 1, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0, 1},
        {SRC_DS2_Q8, 4, 4, 8, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0, 1},
    };
    exact_models(cases, sizeof cases / sizeof cases[0]);
}

static void test_models_q8(void **state)
{
    (void)state;
    static const model_case cases[] = {
        {SRC_GEN_HD32, 1, 1, 1, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0, 2},
        {SRC_GEN_HD32, 8, 2, 1, 8, DCP_CP_A2A, false, DCP_DTYPE_Q8_0, 2},
        {SRC_GEN_HD32, 8, 4, 8, 8, DCP_CP_AG_RS, false, DCP_DTYPE_Q8_0, 2},
    };
    exact_models(cases, sizeof cases / sizeof cases[0]);
}

/* A pool of 12 pages of 4 tokens per rank (DCP 2: 96 tokens) for four requests of 50, all
 * submitted at once: any two running to their end need 14 pages a rank, so preemption happens
 * whatever the drafts accept. */
/* A pool of 12 pages of 4 tokens for 4 sequences of up to 50 tokens: preemption. */
static dcp_model_state_config preemption_config(void)
{
    dcp_model_state_config sc = state_config(4);
    sc.block_size = 4;
    sc.kv_pages = 12;
    sc.max_rows = 8;
    sc.max_logits = 8;
    return sc;
}

static void test_preemption(void **state)
{
    (void)state;
    static const req_spec spec[] = {
        {0, 10, 40, 0.0f, 0, 0, 0, NULL}, {20, 10, 40, 0.8f, 0, 5, 0, NULL},
        {50, 10, 40, 0.0f, 0, 0, 0, NULL}, {80, 10, 40, 1.0f, 20, 9, 0, NULL},
    };
    enum { N = sizeof spec / sizeof spec[0] };
    dcp_model_state_config sc = preemption_config();
    fixture f;
    fx_open(&f, 8, 2, &sc, 4);
    out base[N], ng[N], dr[N], dr_solo[N];
    memset(dr_solo, 0, sizeof dr_solo);
    run(&f, NULL, 0, spec, N, -1, base);
    dcp_spec_config sp = spec_ngram(4);
    dcp_engine_stats st = run(&f, &sp, 0, spec, N, -1, ng);
    same_outputs("preemption, n-gram", spec, base, ng, N);
    if (st.preemptions == 0) fail_msg("n-gram: the pool held all four requests: no preemption to test");
    print_stats("preemption, n-gram", &st);
    sp = spec_draft(&f, 3);
    st = run(&f, &sp, 0, spec, N, -1, dr);
    if (st.preemptions == 0) fail_msg("draft model: the pool held all four requests: no preemption to test");
    for (uint32_t k = 0; k < N; k++)
        if (spec[k].temp == 0.0f) same_outputs("preemption, draft model", &spec[k], &base[k], &dr[k], 1);
    for (uint32_t k = 0; k < N; k++) run(&f, &sp, 0, spec, N, (int)k, dr_solo);
    same_outputs("preemption, draft model sampled: alone and preempted", spec, dr_solo, dr, N);
    print_stats("preemption, draft model", &st);
    printf("preemption: %llu preemptions, %llu tokens recomputed: the same outputs\n",
           (unsigned long long)st.preemptions, (unsigned long long)st.recomputed_tokens);
    fx_close(&f);
}

/* Preemption with prefix caching: a strict (draft model, sampling) sequence being recomputed keeps
 * its last token for a decode row with drafts, so its cached prefix must leave it a row to
 * prefill; prompts of 9..16 tokens put that prefix at every offset of the 4-token blocks. The
 * sampled requests give what they give alone, and the greedy ones what they give without drafts. */
static void test_preemption_cached(void **state)
{
    (void)state;
    dcp_model_state_config sc = preemption_config();
    fixture f;
    fx_open(&f, 1, 1, &sc, 4);
    g_prefix_caching = true;
    uint64_t preemptions = 0;
    for (uint32_t len = 9; len <= 16; len++) {
        const req_spec spec[] = {
            {0, len, 30, 0.0f, 0, 0, 0, NULL}, {20, len, 30, 0.8f, 0, 5 + len, 0, NULL},
            {50, len, 30, 0.9f, 0, 9 + len, 0, NULL}, {80, len, 30, 1.0f, 20, 9, 0, NULL},
        };
        enum { N = sizeof spec / sizeof spec[0] };
        out base[N], dr[N], solo[N];
        memset(solo, 0, sizeof solo);
        run(&f, NULL, 0, spec, N, -1, base);
        dcp_spec_config sp = spec_draft(&f, 3);
        const dcp_engine_stats st = run(&f, &sp, 0, spec, N, -1, dr);
        preemptions += st.preemptions;
        char what[96];
        snprintf(what, sizeof what, "preemption with prefix caching, prompts of %u tokens", len);
        for (uint32_t k = 0; k < N; k++) {
            if (!dr[k].done || dr[k].finish == DCP_ENGINE_FINISH_ERROR)
                fail_msg("%s: request %u did not finish (%s)", what, k, dcp_engine_finish_name(dr[k].finish));
            if (spec[k].temp == 0.0f) same_outputs(what, &spec[k], &base[k], &dr[k], 1);
        }
        for (uint32_t k = 0; k < N; k++) run(&f, &sp, 0, spec, N, (int)k, solo);
        same_outputs(what, spec, solo, dr, N);
    }
    g_prefix_caching = false;
    printf("preemption with prefix caching: %llu preemptions over prompts of 9..16 tokens: the same outputs\n",
           (unsigned long long)preemptions);
    assert_true(preemptions > 0);
    fx_close(&f);
}

/* Stop strings taken from the middle of the greedy text of the self-quoting prompt end it where
 * they do without speculation: with drafts accepted many at a time, some fall inside accepted
 * tokens. */
static void test_stops(void **state)
{
    (void)state;
    dcp_model_state_config sc = state_config(16);
    fixture f;
    fx_open(&f, 1, 1, &sc, 4);
    req_spec one = {ECHO, ECHO_LEN, 60, 0.0f, 0, 0, 0, NULL};
    out full;
    run(&f, NULL, 0, &one, 1, -1, &full);
    enum { NS = 12 };
    static char stops[NS][8];
    req_spec spec[NS];
    for (uint32_t k = 0; k < NS; k++) {
        const size_t at = 20 + k * (full.len - 40) / NS;
        memcpy(stops[k], full.text + at, 5);
        stops[k][5] = 0;
        spec[k] = (req_spec){ECHO, ECHO_LEN, 60, 0.0f, 0, 0, 0, stops[k]};
    }
    out base[NS], ng[NS], dr[NS];
    run(&f, NULL, 0, spec, NS, -1, base);
    for (uint32_t k = 0; k < NS; k++) assert_int_equal(base[k].finish, DCP_ENGINE_FINISH_STOP);
    dcp_spec_config sp = spec_ngram(6);
    dcp_engine_stats st = run(&f, &sp, 0, spec, NS, -1, ng);
    same_outputs("stop strings, n-gram", spec, base, ng, NS);
    print_stats("stop strings, n-gram", &st);
    sp = spec_draft(&f, 5);
    st = run(&f, &sp, 0, spec, NS, -1, dr);
    same_outputs("stop strings, draft model", spec, base, dr, NS);
    print_stats("stop strings, draft model", &st);
    fx_close(&f);
}

/* Cancelling frees the request's pages in both states at once. */
static void test_cancel(void **state)
{
    (void)state;
    dcp_model_state_config sc = state_config(2);
    fixture f;
    fx_open(&f, 8, 2, &sc, 4);
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.spec = spec_draft(&f, 3);
    dcp_engine *e;
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &e));
    static const req_spec spec[] = {{0, 9, 60, 0.0f, 0, 0, 0, NULL}, {30, 21, 60, 0.6f, 0, 4, 0, NULL}};
    out o[2];
    memset(o, 0, sizeof o);
    uint64_t ids[2];
    for (uint32_t k = 0; k < 2; k++) {
        dcp_engine_request q = make_request(&spec[k], &o[k]);
        DCP_ASSERT_OK(dcp_engine_submit(e, &q, &ids[k]));
    }
    for (int t = 0; t < 6; t++) {
        DCP_ASSERT_OK(dcp_engine_step(e));
        dcp_test_drain(e);
    }
    const int32_t slot = dcp_engine_request_slot(e, ids[1]);
    assert_true(slot >= 0);
    assert_true(dcp_model_state_seq_length(f.s, (uint32_t)slot) > 21);
    assert_true(dcp_model_state_seq_length(f.ds, (uint32_t)slot) > 21);
    DCP_ASSERT_OK(dcp_engine_cancel(e, ids[1]));
    assert_int_equal(dcp_model_state_seq_length(f.s, (uint32_t)slot), 0);
    assert_int_equal(dcp_model_state_seq_length(f.ds, (uint32_t)slot), 0);
    check_pools(&f, e, ids, 2);
    dcp_test_drain(e);
    assert_int_equal(o[1].finish, DCP_ENGINE_FINISH_CANCELLED);
    while (dcp_engine_busy(e)) {
        DCP_ASSERT_OK(dcp_engine_step(e));
        dcp_test_drain(e);
        check_pools(&f, e, ids, 2);
    }
    dcp_engine_destroy(e);
    out alone;
    run(&f, NULL, 0, spec, 1, 0, &alone);
    same_outputs("cancel", spec, &alone, &o[0], 1);
    fx_close(&f);
}

/* ---- the target distribution with a draft model --------------------------------------------- */

enum { TOPK = 6, SEEDS = 768 };

/* The top-k softmax (temperature 1) of logits [V] in double, dense into p. */
static void topk_probs(const float *logits, uint32_t V, double *p)
{
    uint32_t idx[TOPK];
    for (uint32_t a = 0; a < TOPK; a++) {
        int best = -1;
        for (uint32_t i = 0; i < V; i++) {
            bool taken = false;
            for (uint32_t b = 0; b < a; b++) taken |= idx[b] == i;
            if (!taken && (best < 0 || logits[i] > logits[best])) best = (int)i;
        }
        idx[a] = (uint32_t)best;
    }
    for (uint32_t i = 0; i < V; i++) p[i] = 0.0;
    double sum = 0.0;
    for (uint32_t a = 0; a < TOPK; a++) sum += exp((double)logits[idx[a]] - logits[idx[0]]);
    for (uint32_t a = 0; a < TOPK; a++) p[idx[a]] = exp((double)logits[idx[a]] - logits[idx[0]]) / sum;
}

/* The distribution of the next token after tokens [n] in state s (sequence 0, freed after). */
static void next_probs(dcp_model_state *s, const int32_t *toks, uint32_t n, uint32_t V, double *p)
{
    float *logits = malloc(V * sizeof *logits);
    DCP_ASSERT_OK(dcp_model_state_forward(s, toks, n, logits, NULL));
    dcp_model_state_free_seq(s, 0);
    topk_probs(logits, V, p);
    free(logits);
}

/* Chi-square of counts [V] (total n) against p; tokens outside p's support fail the test. */
static double chi_square(const uint32_t *counts, uint32_t n, const double *p, uint32_t V, uint32_t *dof)
{
    double x = 0.0;
    *dof = 0;
    for (uint32_t i = 0; i < V; i++) {
        if (p[i] == 0.0) {
            if (counts[i]) return INFINITY;
            continue;
        }
        const double e = n * p[i];
        x += (counts[i] - e) * (counts[i] - e) / e;
        (*dof)++;
    }
    (*dof)--;
    return x;
}

/* Upper 0.1% points of chi-square for 1..10 degrees of freedom. */
static const double chi2_999[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};

/* Checks the tokens at position `at` of the runs whose tokens before it are prefix [at]: against
 * the target's distribution there (the test), and the draft's (must be told apart). */
static void check_position(fixture *f, const out *runs, const int32_t *prompt, uint32_t np, const int32_t *prefix,
                           uint32_t at)
{
    const uint32_t V = f->cfg.n_vocab;
    uint32_t *counts = calloc(V, sizeof *counts), n = 0;
    for (uint32_t s = 0; s < SEEDS; s++)
        if (runs[s].n > at && memcmp(runs[s].toks, prefix, at * sizeof *prefix) == 0) {
            counts[runs[s].toks[at]]++;
            n++;
        }
    int32_t ctx[64];
    memcpy(ctx, prompt, np * sizeof *ctx);
    memcpy(ctx + np, prefix, at * sizeof *ctx);
    double *p = malloc(V * sizeof *p), *q = malloc(V * sizeof *q);
    next_probs(f->s, ctx, np + at, V, p);
    next_probs(f->ds, ctx, np + at, V, q);
    uint32_t dof, dof_q;
    const double x = chi_square(counts, n, p, V, &dof), xq = chi_square(counts, n, q, V, &dof_q);
    printf("token %u after %u-token prefix (%u runs): chi-square %.2f on %u dof against the target (0.1%% point %.2f), "
           "%.2f against the draft\n", at, at, n, x, dof, chi2_999[dof], xq);
    assert_true(n >= 100);
    assert_true(dof >= 1 && dof <= 10);
    if (!(x < chi2_999[dof])) fail_msg("token %u: the tokens are not distributed as the target's probabilities", at);
    if (at > 0 && !(xq > chi2_999[dof_q < 10 ? dof_q : 10]))
        fail_msg("token %u: the draft's distribution fits the tokens as well: the test cannot tell them apart", at);
    free(counts);
    free(p);
    free(q);
}

/* The prefix of `at` tokens most runs share. */
static void common_prefix(const out *runs, uint32_t at, int32_t *prefix)
{
    uint32_t best = 0;
    for (uint32_t s = 0; s < SEEDS; s++) {
        uint32_t c = 0;
        for (uint32_t t = 0; t < SEEDS; t++) c += memcmp(runs[s].toks, runs[t].toks, at * sizeof(int32_t)) == 0;
        if (c > best) {
            best = c;
            memcpy(prefix, runs[s].toks, at * sizeof(int32_t));
        }
    }
}

static void test_distribution(void **state)
{
    (void)state;
    dcp_model_state_config sc = state_config(16);
    sc.max_rows = 32;
    sc.max_logits = 32;
    fixture f;
    fx_open(&f, 1, 1, &sc, 4);
    static const int32_t prompt[] = {1, 403, 407, 261};
    const uint32_t np = sizeof prompt / sizeof prompt[0];
    out *runs = calloc(SEEDS, sizeof *runs);
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.spec = spec_draft(&f, 2);
    dcp_engine *e;
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &e));
    for (uint32_t s = 0; s < SEEDS; s++) {
        dcp_engine_request r = DCP_ENGINE_REQUEST_DEFAULT;
        r.prompt = prompt;
        r.n_prompt = np;
        r.max_tokens = 5;
        r.sampling = (dcp_sampler_config){.temperature = 1.0f, .top_k = TOPK, .top_p = 1.0f, .seed = 0x9000 + s, .repetition_penalty = 1.0f};
        r.user = &runs[s];
        uint64_t id;
        DCP_ASSERT_OK(dcp_engine_submit(e, &r, &id));
    }
    while (dcp_engine_busy(e)) {
        DCP_ASSERT_OK(dcp_engine_step(e));
        dcp_test_drain(e);
    }
    dcp_engine_stats st;
    dcp_engine_get_stats(e, &st);
    dcp_engine_destroy(e);
    print_stats("distribution, draft model k 2", &st);
    int32_t prefix[4];
    check_position(&f, runs, prompt, np, prefix, 0);
    common_prefix(runs, 1, prefix);
    check_position(&f, runs, prompt, np, prefix, 1);
    common_prefix(runs, 2, prefix);
    check_position(&f, runs, prompt, np, prefix, 2);
    free(runs);
    fx_close(&f);
}

/* ---- refusals --------------------------------------------------------------------------------- */

static void refused(fixture *f, const dcp_spec_config *sp, dcp_status want, const char *msg)
{
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.spec = *sp;
    dcp_engine *e = (dcp_engine *)1;
    assert_int_equal(dcp_engine_create(f->s, f->tok, &ec, &e), want);
    assert_null(e);
    if (!strstr(dcp_last_error(), msg)) fail_msg("expected a message with '%s', got '%s'", msg, dcp_last_error());
}

static void test_refused(void **state)
{
    (void)state;
    dcp_model_state_config sc = state_config(2);
    sc.max_logits = 4;
    fixture f;
    fx_open(&f, 1, 1, &sc, 4);
    dcp_spec_config sp = spec_ngram(0);
    refused(&f, &sp, DCP_ERR_CONFIG, "num_speculative_tokens 0 (allowed 1..32)");
    sp.num_speculative_tokens = 33;
    refused(&f, &sp, DCP_ERR_CONFIG, "num_speculative_tokens 33 (allowed 1..32)");
    sp.num_speculative_tokens = 4;
    refused(&f, &sp, DCP_ERR_CONFIG, "max_logits >= 5");
    sp.num_speculative_tokens = 3;
    sp.prompt_lookup_min = 5;
    sp.prompt_lookup_max = 3;
    refused(&f, &sp, DCP_ERR_CONFIG, "prompt_lookup_min 5 exceeds prompt_lookup_max 3");
    sp.method = (dcp_spec_method)7;
    refused(&f, &sp, DCP_ERR_CONFIG, "allowed: ngram, draft_model");
    sp = spec_draft(&f, 3);
    sp.draft = NULL;
    refused(&f, &sp, DCP_ERR_CONFIG, "needs the draft model's run state");
    sp = spec_draft(&f, 3);
    sp.draft = f.s;
    refused(&f, &sp, DCP_ERR_CONFIG, "needs a run state of its own");
    /* Another vocabulary: the generated test model's (another token count); stories260K with one
     * token renamed (the same count). */
    dcp_gguf *gen;
    DCP_ASSERT_OK(dcp_gguf_open_test_model(NULL, &gen));
    dcp_tokenizer *gtok;
    DCP_ASSERT_OK(dcp_tokenizer_create(gen, &gtok));
    sp = spec_draft(&f, 3);
    sp.draft_tokenizer = gtok;
    refused(&f, &sp, DCP_ERR_CONFIG, "the draft model's vocabulary has");
    void *bytes;
    dcp_gguf *ren = open_draft(f.g, 1, 300, &bytes);
    dcp_tokenizer *rtok;
    DCP_ASSERT_OK(dcp_tokenizer_create(ren, &rtok));
    sp.draft_tokenizer = rtok;
    refused(&f, &sp, DCP_ERR_CONFIG, "token 300 is");
    assert_non_null(strstr(dcp_last_error(), "<dcp-vk-renamed>"));
    assert_int_equal(dcp_engine_spec_check_vocab(f.tok, f.dtok), DCP_OK);
    dcp_tokenizer_destroy(rtok);
    dcp_gguf_close(ren);
    free(bytes);
    dcp_tokenizer_destroy(gtok);
    dcp_gguf_close(gen);
    /* A busy draft state; then one too small for the target's slots. */
    int32_t t = 1;
    DCP_ASSERT_OK(dcp_model_state_forward(f.ds, &t, 1, NULL, NULL));
    sp = spec_draft(&f, 3);
    refused(&f, &sp, DCP_ERR_CONFIG, "holds sequence 0 already");
    dcp_model_state_reset(f.ds);
    dcp_model_state_destroy(f.ds);
    dcp_model_state_config dc = sc;
    dc.max_seqs = 1;
    dc.max_logits = 0;
    DCP_ASSERT_OK(dcp_model_state_create(f.dm, &dc, &f.ds));
    sp = spec_draft(&f, 3);
    refused(&f, &sp, DCP_ERR_CONFIG, "the draft state has 1 sequence slots");
    dcp_model_state_destroy(f.ds);
    dc.max_seqs = 2;
    dc.kv_pages = 3;
    DCP_ASSERT_OK(dcp_model_state_create(f.dm, &dc, &f.ds));
    sp = spec_draft(&f, 3);
    refused(&f, &sp, DCP_ERR_CONFIG, "KV pages per rank");
    /* The state refuses more rows with logits than rows. */
    dcp_model_state *bad = (dcp_model_state *)1;
    dc.max_logits = dc.max_rows + 1;
    assert_int_equal(dcp_model_state_create(f.m, &dc, &bad), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "max_logits"));
    fx_close(&f);
}

int main(int argc, char **argv)
{
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    make_echo();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_ngram_tp1),
        cmocka_unit_test(test_draft_tp1),
        cmocka_unit_test(test_penalties_tp1),
        cmocka_unit_test(test_stops),
        cmocka_unit_test(test_distribution),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_preemption_cached),
        cmocka_unit_test(test_dcp),
        cmocka_unit_test(test_models_deepseek2),
        cmocka_unit_test(test_models_q8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
