/* The engine's logprobs (dcp_engine_request.logprobs, dcp_engine_event.has_logprob) on stories260K
 * at TP 1:
 *  - every reported log-probability equals a CPU computation in double from the same logits (the
 *    state's logits of the prompt and generated tokens run again as one prefill, every row with
 *    logits): the bias and penalties in f32 as the sampler applies them, then the temperature, top-k
 *    cut, log-softmax; greedy requests: the log-softmax of the changed logits at temperature 1;
 *    within 1e-4; the top tokens sorted, the chosen token's logprob among them when it is in them;
 *  - asking for logprobs changes no token (a greedy request with them takes the host argmax of the
 *    downloaded logits, the device argmax without);
 *  - batch invariance: alone and together with others, the same tokens and the same logprobs
 *    (bitwise);
 *  - n-gram speculation: the same tokens and logprobs as without (each from its own row);
 *  - a draft model (the same model in a second state: every draft accepted): the logprobs of its
 *    tokens (other draws than without speculation) equal the CPU's too;
 *  - prompt logprobs (dcp_engine_request.prompt_logprobs, PROMPT events): every prompt token's
 *    log-probability, rank and top tokens against the CPU double reference model (src/ref, one
 *    token at a time) within 5e-4, position 0 without one, the pieces the decoded prompt; the same
 *    bitwise alone, in a batch, in chunks of 7 rows, and with prefix caching on after the prompt was
 *    cached (no cached blocks taken); the tokens generated after them those of a request without;
 *    max_tokens 0 ends after the prompt; TP 8 / DCP 2 (max_logits 4: chunks cut by the rows with
 *    logits) within 1e-4 of TP 1;
 *  - refused: top_logprobs beyond 20, top_logprobs without logprobs, the same for the prompt's. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dcpvk/engine.h"
#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/tokenizer.h"
#include "ref_model.h"
#include "stories_ref.h"
#include "vkutil.h"

enum { MAXT = 64, NCTX = 64 };

typedef struct fixture {
    dcp_gguf *g;
    dcp_model_config cfg;
    dcp_context *ctx;
    dcp_model *m;
    dcp_model_state *s;
    dcp_tokenizer *tok;
    uint32_t V;
} fixture;

/* The states' configuration: NCTX tokens, 4 sequences, NCTX rows a step, f32 KV. */
static dcp_model_state_config state_config(void)
{
    dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
    sc.n_ctx = NCTX;
    sc.max_seqs = 4;
    sc.max_rows = NCTX;
    sc.kv_dtype = DCP_DTYPE_F32;
    return sc;
}

static void fx_open(fixture *f)
{
    memset(f, 0, sizeof *f);
    DCP_ASSERT_OK(dcp_gguf_open(dcp_test_data_path("stories260K.gguf"), &f->g));
    f->ctx = dcp_test_context_of(1);
    dcp_test_model_open(f->ctx, f->g, 1, 1, false, &f->cfg, &f->tok, &f->m);
    f->V = dcp_tokenizer_n_vocab(f->tok);
    dcp_model_state_config sc = state_config();
    sc.max_logits = NCTX;
    DCP_ASSERT_OK(dcp_model_state_create(f->m, &sc, &f->s));
}

static void fx_close(fixture *f)
{
    dcp_model_state_destroy(f->s);
    dcp_test_model_close(f->ctx, f->m, f->tok, f->g);
}

/* What a request produced, with every token's logprobs. */
typedef struct out {
    int32_t toks[MAXT];
    uint32_t n;          /* tokens */
    uint32_t nlp;        /* tokens with logprobs */
    float lp[MAXT];
    uint32_t n_top[MAXT];
    int32_t top_ids[MAXT][DCP_ENGINE_MAX_LOGPROBS];
    float top_lps[MAXT][DCP_ENGINE_MAX_LOGPROBS];
    char text[2048], pieces[2048];
    size_t len, plen;
    bool done;
} out;

/* Keeps ev's logprob, top ids and top logprobs at index i of the arrays (drain's and pdrain's
 * records) and appends its piece to pieces (cap bytes, *plen of them used). */
static void keep_logprobs(const dcp_engine_event *ev, uint32_t i, float *lp, uint32_t *n_top,
                          int32_t (*top_ids)[DCP_ENGINE_MAX_LOGPROBS], float (*top_lps)[DCP_ENGINE_MAX_LOGPROBS],
                          char *pieces, size_t cap, size_t *plen)
{
    lp[i] = ev->logprob;
    n_top[i] = ev->n_top;
    memcpy(top_ids[i], ev->top_ids, sizeof ev->top_ids);
    memcpy(top_lps[i], ev->top_logprobs, sizeof ev->top_logprobs);
    assert_true(*plen + ev->piece_len < cap);
    memcpy(pieces + *plen, ev->piece, ev->piece_len);
    *plen += ev->piece_len;
}

static void drain(dcp_engine *e)
{
    dcp_engine_event ev;
    while (dcp_engine_poll(e, &ev)) {
        out *o = ev.user;
        assert_false(o->done);
        if (ev.token >= 0) o->toks[o->n++] = ev.token;
        if (ev.has_logprob) {
            assert_true(ev.token >= 0);
            const uint32_t i = o->nlp++;
            assert_int_equal(i + 1, o->n);
            keep_logprobs(&ev, i, o->lp, o->n_top, o->top_ids, o->top_lps, o->pieces, sizeof o->pieces, &o->plen);
            assert_int_equal(ev.n_all, 0); /* only PROMPT events carry the whole vocabulary */
        }
        assert_true(o->len + ev.len < sizeof o->text);
        memcpy(o->text + o->len, ev.text, ev.len);
        o->len += ev.len;
        if (ev.kind == DCP_ENGINE_EVENT_FINISHED) {
            if (ev.finish == DCP_ENGINE_FINISH_ERROR) fail_msg("request failed: %s", ev.message);
            o->done = true;
        }
    }
}

/* Submits a copy of request r whose events go to user (run's out, prun's pout). */
static void submit(dcp_engine *e, const dcp_engine_request *r, void *user)
{
    dcp_engine_request q = *r;
    q.user = user;
    uint64_t id;
    DCP_ASSERT_OK(dcp_engine_submit(e, &q, &id));
}

/* Requests [n] submitted together (one engine over f->s, with speculation spec or none). */
static void run(fixture *f, const dcp_spec_config *spec, const dcp_engine_request *r, uint32_t n, out *o,
                uint64_t *accepted)
{
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    if (spec) ec.spec = *spec;
    dcp_engine *e;
    DCP_ASSERT_OK(dcp_engine_create(f->s, f->tok, &ec, &e));
    for (uint32_t i = 0; i < n; i++) {
        memset(&o[i], 0, sizeof o[i]);
        submit(e, &r[i], &o[i]);
    }
    while (dcp_engine_busy(e)) {
        DCP_ASSERT_OK(dcp_engine_step(e));
        drain(e);
    }
    drain(e);
    for (uint32_t i = 0; i < n; i++) assert_true(o[i].done);
    if (accepted) {
        dcp_engine_stats st;
        dcp_engine_get_stats(e, &st);
        *accepted = st.spec_accepted_tokens;
    }
    dcp_engine_destroy(e);
}

/* The logits before each generated token: prompt + generated tokens (less the last) run again in
 * slot 0 as one step with logits on the rows from the prompt's last on; [o->n][V]. */
static float *logits_of(fixture *f, const dcp_engine_request *r, const out *o)
{
    const uint32_t n = r->n_prompt + o->n - 1;
    assert_true(n <= NCTX);
    dcp_model_row rows[NCTX];
    for (uint32_t i = 0; i < n; i++) {
        const int32_t t = i < r->n_prompt ? r->prompt[i] : o->toks[i - r->n_prompt];
        rows[i] = (dcp_model_row){t, 0, i + 1 >= r->n_prompt};
    }
    float *l = malloc((size_t)o->n * f->V * sizeof *l);
    assert_non_null(l);
    DCP_ASSERT_OK(dcp_model_state_step(f->s, rows, n, l, NULL));
    dcp_model_state_free_seq(f->s, 0);
    return l;
}

static int cmp_desc(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return x[0] != y[0] ? (x[0] > y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

/* Checks o's logprobs against the CPU: the sampler's changes (bias, presence / frequency /
 * repetition penalties of the prompt and tokens before, in f32), then in double the temperature
 * (1 when greedy), the top-k cut, log-softmax. */
static void check_cpu(fixture *f, const dcp_engine_request *r, const out *o, const char *what)
{
    const uint32_t V = f->V;
    const dcp_sampler_config *c = &r->sampling;
    const bool greedy = c->temperature == 0.0f || c->top_k == 1;
    const double temp = greedy ? 1.0 : c->temperature;
    const uint32_t topk = greedy || c->top_k == 0 ? V : c->top_k;
    assert_true(c->top_p == 1.0f && c->min_p == 0.0f && c->min_tokens == 0);
    assert_int_equal(o->nlp, o->n); /* no stop tokens hidden in these requests */
    float *l = logits_of(f, r, o);
    float *w = malloc(V * sizeof *w);
    double *srt = malloc(2 * V * sizeof *srt), *lp = malloc(V * sizeof *lp);
    uint32_t *count = calloc(V, sizeof *count);
    uint8_t *in_prompt = calloc(V, 1);
    assert_true(w && srt && lp && count && in_prompt);
    for (uint32_t i = 0; i < r->n_prompt; i++) in_prompt[r->prompt[i]] = 1;
    const float rp = c->repetition_penalty == 0.0f ? 1.0f : c->repetition_penalty;
    double worst = 0.0;
    for (uint32_t t = 0; t < o->n; t++) {
        const float *row = l + (size_t)t * V;
        for (uint32_t i = 0; i < V; i++) w[i] = row[i];
        for (uint32_t b = 0; b < c->n_logit_bias; b++)
            w[c->logit_bias[b].token] = c->logit_bias[b].bias <= -100.0f ? -INFINITY : w[c->logit_bias[b].token] + c->logit_bias[b].bias;
        for (uint32_t i = 0; i < V; i++) {
            if (!count[i] && !in_prompt[i]) continue;
            float x = w[i];
            if (rp != 1.0f) x = x > 0.0f ? x / rp : x * rp;
            x -= c->frequency_penalty * (float)count[i];
            if (count[i]) x -= c->presence_penalty;
            w[i] = x;
        }
        for (uint32_t i = 0; i < V; i++) {
            srt[2 * i] = w[i];
            srt[2 * i + 1] = i;
        }
        qsort(srt, V, 2 * sizeof *srt, cmp_desc);
        const double mx = srt[0];
        double sum = 0.0;
        for (uint32_t i = 0; i < topk; i++) sum += exp((srt[2 * i] - mx) / temp);
        for (uint32_t i = 0; i < V; i++) lp[i] = -INFINITY;
        for (uint32_t i = 0; i < topk; i++) lp[(uint32_t)srt[2 * i + 1]] = (srt[2 * i] - mx) / temp - log(sum);
        /* the chosen token's */
        const int32_t tok = o->toks[t];
        assert_true(isfinite(o->lp[t]));
        double d = fabs(o->lp[t] - lp[tok]);
        if (d > worst) worst = d;
        if (d > 1e-4) fail_msg("%s: token %u (%d): logprob %.7f, CPU %.7f", what, t, tok, o->lp[t], lp[tok]);
        /* the top ones: the CPU's order, sorted, the chosen one's entry consistent */
        assert_int_equal(o->n_top[t], r->top_logprobs);
        for (uint32_t j = 0; j < o->n_top[t]; j++) {
            const int32_t id = o->top_ids[t][j];
            assert_int_equal(id, (int32_t)srt[2 * j + 1]);
            if (isinf(lp[id])) {
                assert_true(isinf(o->top_lps[t][j]) && o->top_lps[t][j] < 0);
            } else {
                d = fabs(o->top_lps[t][j] - lp[id]);
                if (d > worst) worst = d;
                if (d > 1e-4) fail_msg("%s: token %u top %u (%d): %.7f, CPU %.7f", what, t, j, id, o->top_lps[t][j], lp[id]);
            }
            if (j) assert_true(o->top_lps[t][j] <= o->top_lps[t][j - 1]);
            if (id == tok) assert_true(o->top_lps[t][j] == o->lp[t]);
        }
        if (greedy && o->n_top[t]) assert_int_equal(o->top_ids[t][0], tok); /* the argmax */
        count[tok]++;
    }
    printf("%s: %u tokens, logprobs within %.2e of the CPU's\n", what, o->n, worst);
    free(l);
    free(w);
    free(srt);
    free(lp);
    free(count);
    free(in_prompt);
}

static void assert_same(const out *a, const out *b, const char *what)
{
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->nlp, b->nlp);
    if (memcmp(a->toks, b->toks, a->n * sizeof *a->toks)) fail_msg("%s: other tokens", what);
    for (uint32_t t = 0; t < a->nlp; t++) {
        if (a->lp[t] != b->lp[t]) fail_msg("%s: token %u logprob %.9g against %.9g", what, t, a->lp[t], b->lp[t]);
        assert_int_equal(a->n_top[t], b->n_top[t]);
        for (uint32_t j = 0; j < a->n_top[t]; j++) {
            assert_int_equal(a->top_ids[t][j], b->top_ids[t][j]);
            if (a->top_lps[t][j] != b->top_lps[t][j] && !(isinf(a->top_lps[t][j]) && isinf(b->top_lps[t][j])))
                fail_msg("%s: token %u top %u differs", what, t, j);
        }
    }
}

static const dcp_logit_bias bias[] = {{13, -100.0f}, {29, 3.0f}, {426, -1.5f}};

/* Requests over the story's prompts: sampled with bias and penalties and top-k, greedy with a
 * penalty, plain greedy, sampled at temperature 1.3. */
static void requests(dcp_engine_request *r)
{
    for (uint32_t i = 0; i < 4; i++) {
        r[i] = (dcp_engine_request)DCP_ENGINE_REQUEST_DEFAULT;
        r[i].logprobs = true;
        r[i].ignore_eos = true;
    }
    r[0].prompt = stories_ref;
    r[0].n_prompt = 9;
    r[0].max_tokens = 24;
    r[0].top_logprobs = 5;
    r[0].sampling.temperature = 0.8f;
    r[0].sampling.top_k = 40;
    r[0].sampling.seed = 11;
    r[0].sampling.logit_bias = bias;
    r[0].sampling.n_logit_bias = 3;
    r[0].sampling.presence_penalty = 0.4f;
    r[0].sampling.frequency_penalty = 0.2f;
    r[1].prompt = stories_ref + 20;
    r[1].n_prompt = 13;
    r[1].max_tokens = 20;
    r[1].top_logprobs = 20;
    r[1].sampling.repetition_penalty = 1.3f;
    r[2].prompt = stories_ref;
    r[2].n_prompt = 1;
    r[2].max_tokens = 30;
    r[2].top_logprobs = 3;
    r[3].prompt = stories_ref + 40;
    r[3].n_prompt = 5;
    r[3].max_tokens = 16;
    r[3].top_logprobs = 0;
    r[3].sampling.temperature = 1.3f;
    r[3].sampling.seed = 3;
}

static void test_cpu_and_batch(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f);
    dcp_engine_request r[4];
    requests(r);
    out alone[4], together[4], plain;
    for (uint32_t i = 0; i < 4; i++) run(&f, NULL, &r[i], 1, &alone[i], NULL);
    run(&f, NULL, r, 4, together, NULL);
    const char *names[4] = {"sampled, bias, penalties, top-k 40", "greedy, repetition penalty", "greedy",
                            "sampled at temperature 1.3"};
    for (uint32_t i = 0; i < 4; i++) {
        check_cpu(&f, &r[i], &alone[i], names[i]);
        assert_same(&alone[i], &together[i], names[i]);
        /* the pieces concatenate to the text (no stop strings here) */
        assert_int_equal(alone[i].plen, alone[i].len);
        assert_memory_equal(alone[i].pieces, alone[i].text, alone[i].len);
    }
    /* asking for logprobs changes no token (greedy with logprobs: the host argmax; without: the
     * device's); plain greedy gives the reference ids */
    for (uint32_t i = 0; i < 4; i++) {
        dcp_engine_request p = r[i];
        p.logprobs = false;
        p.top_logprobs = 0;
        run(&f, NULL, &p, 1, &plain, NULL);
        assert_int_equal(plain.n, alone[i].n);
        if (memcmp(plain.toks, alone[i].toks, plain.n * sizeof *plain.toks)) fail_msg("%s: logprobs changed the tokens", names[i]);
        assert_int_equal(plain.nlp, 0);
    }
    assert_memory_equal(alone[2].toks, stories_ref + 1, alone[2].n * sizeof *plain.toks);
    fx_close(&f);
}

static void test_ngram(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f);
    /* a prompt that quotes itself (BOS, 16 tokens of the story, BOS, the same, their first 8
     * again): the greedy continuation repeats it and prompt lookup drafts well */
    int32_t echo[42];
    uint32_t n = 0;
    echo[n++] = 1;
    for (uint32_t t = 0; t < 16; t++) echo[n++] = stories_ref[1 + t];
    echo[n++] = 1;
    for (uint32_t t = 0; t < 16; t++) echo[n++] = stories_ref[1 + t];
    for (uint32_t t = 0; t < 8; t++) echo[n++] = stories_ref[1 + t];
    dcp_engine_request r[4];
    requests(r);
    r[2].prompt = echo;
    r[2].n_prompt = n;
    r[2].max_tokens = 20;
    r[1].prompt = echo + 17;
    r[1].n_prompt = 25;
    r[1].max_tokens = 20;
    dcp_spec_config sp = DCP_SPEC_CONFIG_DEFAULT;
    sp.method = DCP_SPEC_NGRAM;
    sp.num_speculative_tokens = 4;
    sp.prompt_lookup_max = 4;
    sp.prompt_lookup_min = 1;
    out base[4], spec[4];
    uint64_t accepted = 0;
    run(&f, NULL, r, 4, base, NULL);
    run(&f, &sp, r, 4, spec, &accepted);
    for (uint32_t i = 0; i < 4; i++) assert_same(&base[i], &spec[i], "n-gram speculation");
    check_cpu(&f, &r[2], &spec[2], "greedy under n-gram speculation");
    printf("n-gram speculation: %llu drafts accepted, tokens and logprobs as without\n", (unsigned long long)accepted);
    assert_true(accepted > 0);
    fx_close(&f);
}

static void test_draft(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f);
    dcp_model_state_config dc = state_config();
    dcp_model_state *ds;
    DCP_ASSERT_OK(dcp_model_state_create(f.m, &dc, &ds));
    dcp_engine_request r[4];
    requests(r);
    dcp_spec_config sp = DCP_SPEC_CONFIG_DEFAULT;
    sp.method = DCP_SPEC_DRAFT;
    sp.num_speculative_tokens = 3;
    sp.draft = ds;
    sp.draft_tokenizer = f.tok;
    out o[4];
    uint64_t accepted = 0;
    run(&f, &sp, r, 4, o, &accepted);
    const char *names[4] = {"draft model: sampled, bias, penalties, top-k 40", "draft model: greedy, repetition penalty",
                            "draft model: greedy", "draft model: sampled at temperature 1.3"};
    for (uint32_t i = 0; i < 4; i++) check_cpu(&f, &r[i], &o[i], names[i]);
    printf("draft model: %llu drafts accepted\n", (unsigned long long)accepted);
    assert_true(accepted > 0);
    dcp_model_state_destroy(ds);
    fx_close(&f);
}

/* ---- prompt logprobs ---------------------------------------------------------------------------- */

enum { PLEN = 40 };

typedef struct pout {
    uint32_t n;                  /* PROMPT events */
    bool has[PLEN];
    float lp[PLEN];
    uint32_t rank[PLEN], n_top[PLEN];
    int32_t tok[PLEN], top_ids[PLEN][DCP_ENGINE_MAX_LOGPROBS];
    float top_lps[PLEN][DCP_ENGINE_MAX_LOGPROBS];
    char pieces[1024];
    size_t plen;
    int32_t gen[MAXT];
    uint32_t n_gen, cached;
    dcp_engine_finish finish;
    bool done;
    uint32_t n_all[PLEN];        /* prompt_top_logprobs ALL: the whole vocabulary per position */
    int32_t *all_ids;            /* [PLEN][n_all] (malloc'd at the first such event; pout_free) */
    float *all_lps;              /* [PLEN][n_all] */
} pout;

static void pout_free(pout *o)
{
    free(o->all_ids);
    free(o->all_lps);
    o->all_ids = NULL;
    o->all_lps = NULL;
}

static void pdrain(dcp_engine *e)
{
    dcp_engine_event ev;
    while (dcp_engine_poll(e, &ev)) {
        pout *o = ev.user;
        assert_false(o->done);
        if (ev.kind == DCP_ENGINE_EVENT_PROMPT) {
            assert_int_equal(o->n_gen, 0); /* before any token */
            assert_int_equal(ev.position, o->n);
            assert_int_equal(ev.len, 0);
            const uint32_t i = o->n++;
            o->has[i] = ev.has_logprob;
            o->tok[i] = ev.token;
            o->rank[i] = ev.rank;
            keep_logprobs(&ev, i, o->lp, o->n_top, o->top_ids, o->top_lps, o->pieces, sizeof o->pieces, &o->plen);
            o->n_all[i] = ev.n_all;
            assert_true((ev.n_all == 0) == (ev.all_ids == NULL) && (ev.n_all == 0) == (ev.all_logprobs == NULL));
            if (ev.n_all) {
                if (!o->all_ids) {
                    o->all_ids = malloc((size_t)PLEN * ev.n_all * sizeof *o->all_ids);
                    o->all_lps = malloc((size_t)PLEN * ev.n_all * sizeof *o->all_lps);
                    assert_true(o->all_ids && o->all_lps);
                }
                memcpy(o->all_ids + (size_t)i * ev.n_all, ev.all_ids, ev.n_all * sizeof *ev.all_ids);
                memcpy(o->all_lps + (size_t)i * ev.n_all, ev.all_logprobs, ev.n_all * sizeof *ev.all_logprobs);
            }
            continue;
        }
        if (ev.token >= 0) o->gen[o->n_gen++] = ev.token;
        o->cached = ev.cached_tokens;
        if (ev.kind == DCP_ENGINE_EVENT_FINISHED) {
            if (ev.finish == DCP_ENGINE_FINISH_ERROR) fail_msg("request failed: %s", ev.message);
            o->finish = ev.finish;
            o->done = true;
        }
    }
}

/* Requests [n] together on an engine over s (step_tokens 0: the state's rows). */
static void prun(dcp_model_state *s, const dcp_tokenizer *tok, uint32_t step_tokens, bool caching,
                 const dcp_engine_request *r, uint32_t n, pout *o)
{
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    ec.step_tokens = step_tokens;
    ec.enable_prefix_caching = caching;
    dcp_engine *e;
    DCP_ASSERT_OK(dcp_engine_create(s, tok, &ec, &e));
    for (uint32_t i = 0; i < n; i++) {
        memset(&o[i], 0, sizeof o[i]);
        submit(e, &r[i], &o[i]);
        if (caching) { /* one after the other: the later ones find the earlier ones' blocks */
            while (dcp_engine_busy(e)) {
                DCP_ASSERT_OK(dcp_engine_step(e));
                pdrain(e);
            }
        }
    }
    while (dcp_engine_busy(e)) {
        DCP_ASSERT_OK(dcp_engine_step(e));
        pdrain(e);
    }
    pdrain(e);
    for (uint32_t i = 0; i < n; i++) assert_true(o[i].done);
    dcp_engine_destroy(e);
}

static void assert_same_prompt(const pout *a, const pout *b, float tol, const char *what)
{
    assert_int_equal(a->n, b->n);
    double worst = 0.0;
    for (uint32_t i = 0; i < a->n; i++) {
        assert_int_equal(a->has[i], b->has[i]);
        assert_int_equal(a->tok[i], b->tok[i]);
        if (!a->has[i]) continue;
        const double d = fabs((double)a->lp[i] - b->lp[i]);
        if (d > worst) worst = d;
        if (!(d <= tol)) fail_msg("%s: position %u logprob %.9g against %.9g", what, i, a->lp[i], b->lp[i]);
        const uint32_t nt = a->n_top[i] < b->n_top[i] ? a->n_top[i] : b->n_top[i];
        for (uint32_t j = 0; j < nt; j++) {
            if (tol == 0.0f) assert_int_equal(a->top_ids[i][j], b->top_ids[i][j]);
            if (a->top_ids[i][j] == b->top_ids[i][j] && !(fabs((double)a->top_lps[i][j] - b->top_lps[i][j]) <= tol))
                fail_msg("%s: position %u top %u differs", what, i, j);
        }
        if (tol == 0.0f) assert_int_equal(a->rank[i], b->rank[i]);
    }
    printf("%s: %u prompt positions, within %.2e\n", what, a->n, worst);
}

/* Against the CPU double reference run over the prompt one token at a time: position i's
 * log-softmax (in double) of the logits after token i - 1; the top tokens, the rank. */
static void check_prompt_ref(fixture *f, const dcp_engine_request *r, const pout *o)
{
    const uint32_t V = f->V, n = r->n_prompt;
    assert_int_equal(o->n, n);
    dcp_test_ref_model rm;
    dcp_test_ref_model_load(&rm, f->g, &f->cfg, NCTX);
    float *l = malloc(V * sizeof *l);
    double *srt = malloc(2 * V * sizeof *srt);
    assert_true(l && srt);
    assert_false(o->has[0]);
    assert_int_equal(o->rank[0], 0);
    double worst = 0.0;
    for (uint32_t i = 0; i + 1 < n; i++) {
        dcp_ref_llama_step(&rm.ref, r->prompt[i], i, l);
        const uint32_t p = i + 1;
        assert_true(o->has[p]);
        assert_int_equal(o->tok[p], r->prompt[p]);
        for (uint32_t t = 0; t < V; t++) {
            srt[2 * t] = l[t];
            srt[2 * t + 1] = t;
        }
        qsort(srt, V, 2 * sizeof *srt, cmp_desc);
        double sum = 0.0;
        for (uint32_t t = 0; t < V; t++) sum += exp(srt[2 * t] - srt[0]);
        const double lse = srt[0] + log(sum);
        const double want = (double)l[r->prompt[p]] - lse;
        double d = fabs(o->lp[p] - want);
        if (d > worst) worst = d;
        if (!(d <= 5e-4)) fail_msg("prompt position %u (token %d): logprob %.7f, CPU %.7f", p, r->prompt[p], o->lp[p], want);
        /* the rank: 1 + the CPU's larger logits, give or take the tokens within 1e-3 of it */
        uint32_t above = 0, near = 0;
        const float lt = l[r->prompt[p]];
        for (uint32_t t = 0; t < V; t++) {
            above += l[t] > lt;
            near += (int32_t)t != r->prompt[p] && fabs((double)l[t] - lt) < 1e-3;
        }
        if (!(o->rank[p] + near >= above + 1 && o->rank[p] <= above + 1 + near))
            fail_msg("prompt position %u: rank %u, CPU %u (%u within 1e-3)", p, o->rank[p], above + 1, near);
        assert_int_equal(o->n_top[p], r->prompt_top_logprobs);
        for (uint32_t j = 0; j < o->n_top[p]; j++) {
            const int32_t id = o->top_ids[p][j];
            d = fabs(o->top_lps[p][j] - ((double)l[id] - lse));
            if (d > worst) worst = d;
            if (!(d <= 5e-4)) fail_msg("prompt position %u top %u (%d): %.7f, CPU %.7f", p, j, id, o->top_lps[p][j], (double)l[id] - lse);
            if (srt[2 * j] - srt[2 * j + 2] > 1e-3) assert_int_equal(id, (int32_t)srt[2 * j + 1]);
            if (j) assert_true(o->top_lps[p][j] <= o->top_lps[p][j - 1]);
            if (id == r->prompt[p]) assert_true(o->top_lps[p][j] == o->lp[p] && o->rank[p] == j + 1);
        }
    }
    printf("prompt logprobs: %u positions within %.2e of the CPU double reference\n", n, worst);
    /* the pieces are the prompt decoded */
    char *text = NULL;
    size_t len = 0;
    DCP_ASSERT_OK(dcp_tokenizer_decode(f->tok, r->prompt, n, 0, &text, &len));
    assert_int_equal(o->plen, len);
    assert_memory_equal(o->pieces, text, len);
    free(text);
    free(l);
    free(srt);
    dcp_test_ref_model_free(&rm);
}

static void test_prompt(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f);
    dcp_engine_request r[3];
    for (uint32_t i = 0; i < 3; i++) {
        r[i] = (dcp_engine_request)DCP_ENGINE_REQUEST_DEFAULT;
        r[i].ignore_eos = true;
    }
    /* the story's first PLEN tokens, prompt logprobs with the 5 most likely, nothing generated */
    r[0].prompt = stories_ref;
    r[0].n_prompt = PLEN;
    r[0].max_tokens = 0;
    r[0].prompt_logprobs = true;
    r[0].prompt_top_logprobs = 5;
    /* the same prompt, sampled with a bias and penalties (the prompt's logprobs stay raw) */
    r[1] = r[0];
    r[1].max_tokens = 8;
    r[1].prompt_top_logprobs = 3;
    r[1].sampling.temperature = 0.9f;
    r[1].sampling.seed = 5;
    r[1].sampling.logit_bias = bias;
    r[1].sampling.n_logit_bias = 3;
    r[1].sampling.presence_penalty = 0.5f;
    /* another prompt without */
    r[2].prompt = stories_ref + 3;
    r[2].n_prompt = 17;
    r[2].max_tokens = 12;
    pout alone[3], together[3], chunked[3], plain, cached[2];
    for (uint32_t i = 0; i < 3; i++) prun(f.s, f.tok, 0, false, &r[i], 1, &alone[i]);
    check_prompt_ref(&f, &r[0], &alone[0]);
    assert_int_equal(alone[0].n_gen, 0);
    assert_int_equal(alone[0].finish, DCP_ENGINE_FINISH_LENGTH);
    assert_int_equal(alone[2].n, 0);
    assert_same_prompt(&alone[0], &alone[1], 0.0f, "prompt logprobs, sampled request");
    prun(f.s, f.tok, 0, false, r, 3, together);
    prun(f.s, f.tok, 7, false, r, 3, chunked);
    for (uint32_t i = 0; i < 3; i++) {
        assert_same_prompt(&alone[i], &together[i], 0.0f, "prompt logprobs, batched");
        assert_same_prompt(&alone[i], &chunked[i], 0.0f, "prompt logprobs, chunks of 7");
        assert_int_equal(alone[i].n_gen, together[i].n_gen);
        assert_memory_equal(alone[i].gen, together[i].gen, alone[i].n_gen * sizeof *alone[i].gen);
        assert_memory_equal(alone[i].gen, chunked[i].gen, alone[i].n_gen * sizeof *alone[i].gen);
    }
    /* asking for them changes no token */
    dcp_engine_request p = r[1];
    p.prompt_logprobs = false;
    p.prompt_top_logprobs = 0;
    prun(f.s, f.tok, 0, false, &p, 1, &plain);
    assert_int_equal(plain.n, 0);
    assert_int_equal(plain.n_gen, alone[1].n_gen);
    assert_memory_equal(plain.gen, alone[1].gen, plain.n_gen * sizeof *plain.gen);
    /* prefix caching: the prompt cached by a plain request first; the prompt-logprobs request takes
     * none of it (cached 0) and gives the same values; a plain one after takes the blocks */
    dcp_engine_request seq[3] = {p, r[1], p};
    pout cs[3];
    prun(f.s, f.tok, 0, true, seq, 3, cs);
    cached[0] = cs[1];
    assert_int_equal(cached[0].cached, 0);
    assert_true(cs[2].cached > 0);
    assert_same_prompt(&alone[1], &cached[0], 0.0f, "prompt logprobs with prefix caching");
    assert_memory_equal(cs[1].gen, alone[1].gen, alone[1].n_gen * sizeof *alone[1].gen);
    printf("prefix caching: a plain request after it took %u cached tokens; the prompt-logprobs one 0\n", cs[2].cached);
    /* TP 8 / DCP 2 on logical devices, the default max_logits (4: min(max_rows, max_seqs)) */
    {
        dcp_context *ctx8 = dcp_test_context_of(8);
        dcp_device *devs[8];
        for (uint32_t k = 0; k < 8; k++) devs[k] = dcp_context_device(ctx8, (int)k);
        dcp_model *m8;
        DCP_ASSERT_OK(dcp_test_model_load(devs, 0, 8, 8, 2, false, f.g, &f.cfg, &m8));
        dcp_model_state_config sc = state_config();
        dcp_model_state *s8;
        DCP_ASSERT_OK(dcp_model_state_create(m8, &sc, &s8));
        assert_int_equal(dcp_model_state_max_logits(s8), 4);
        pout d[3], d1;
        prun(s8, f.tok, 0, false, r, 3, d);
        prun(s8, f.tok, 0, false, &r[0], 1, &d1);
        for (uint32_t i = 0; i < 2; i++) assert_same_prompt(&alone[i], &d[i], 1e-4f, "prompt logprobs, TP 8 / DCP 2 against TP 1");
        assert_same_prompt(&d1, &d[0], 0.0f, "prompt logprobs, TP 8 / DCP 2, alone and batched");
        dcp_model_state_destroy(s8);
        dcp_model_destroy(m8);
        dcp_test_context_done(ctx8);
    }
    fx_close(&f);
}

/* The whole vocabulary, bitwise the same in both (and in the same order). */
static void assert_same_all(const pout *a, const pout *b, uint32_t V, const char *what)
{
    assert_int_equal(a->n, b->n);
    for (uint32_t i = 0; i < a->n; i++) {
        assert_int_equal(a->n_all[i], b->n_all[i]);
        if (!a->n_all[i]) continue;
        if (memcmp(a->all_ids + (size_t)i * V, b->all_ids + (size_t)i * V, V * sizeof *a->all_ids) ||
            memcmp(a->all_lps + (size_t)i * V, b->all_lps + (size_t)i * V, V * sizeof *a->all_lps))
            fail_msg("%s: position %u's whole-vocabulary logprobs differ", what, i);
    }
    printf("%s: the whole vocabulary at %u positions, bitwise\n", what, a->n);
}

/* prompt_top_logprobs ALL (vLLM's prompt_logprobs -1): every token at every prompt position, each
 * within the CPU double reference's limit, ranked; the same alone, batched and chunked. */
static void test_prompt_all(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f);
    const uint32_t V = f.V, n = 24;
    dcp_engine_request r[3];
    for (uint32_t i = 0; i < 3; i++) {
        r[i] = (dcp_engine_request)DCP_ENGINE_REQUEST_DEFAULT;
        r[i].ignore_eos = true;
        r[i].prompt = stories_ref;
        r[i].n_prompt = n;
        r[i].prompt_logprobs = true;
    }
    r[0].max_tokens = 0;
    r[0].prompt_top_logprobs = DCP_ENGINE_PROMPT_LOGPROBS_ALL;
    r[1].max_tokens = 6; /* another with 5, sampled */
    r[1].prompt_top_logprobs = 5;
    r[1].sampling.temperature = 0.8f;
    r[1].sampling.seed = 11;
    r[2] = r[0]; /* and another whole-vocabulary one of a shorter prompt, generating */
    r[2].prompt = stories_ref + 2;
    r[2].n_prompt = 15;
    r[2].max_tokens = 4;
    pout alone[3], together[3], chunked[3];
    for (uint32_t i = 0; i < 3; i++) prun(f.s, f.tok, 0, false, &r[i], 1, &alone[i]);
    /* against the CPU reference, position by position */
    dcp_test_ref_model rm;
    dcp_test_ref_model_load(&rm, f.g, &f.cfg, NCTX);
    float *l = malloc(V * sizeof *l);
    bool *seen = malloc(V);
    assert_true(l && seen);
    const pout *o = &alone[0];
    assert_int_equal(o->n, n);
    assert_int_equal(o->n_all[0], 0);
    double worst = 0.0;
    for (uint32_t i = 0; i + 1 < n; i++) {
        dcp_ref_llama_step(&rm.ref, r[0].prompt[i], i, l);
        const uint32_t p = i + 1;
        assert_true(o->has[p]);
        assert_int_equal(o->n_all[p], V);
        const int32_t *ids = o->all_ids + (size_t)p * V;
        const float *lps = o->all_lps + (size_t)p * V;
        double mx = -INFINITY, sum = 0.0;
        for (uint32_t t = 0; t < V; t++) mx = l[t] > mx ? l[t] : mx;
        for (uint32_t t = 0; t < V; t++) sum += exp((double)l[t] - mx);
        const double lse = mx + log(sum);
        memset(seen, 0, V);
        uint32_t at = V; /* where the prompt token is in the list */
        for (uint32_t j = 0; j < V; j++) {
            const int32_t id = ids[j];
            assert_true(id >= 0 && (uint32_t)id < V && !seen[id]); /* every token once */
            seen[id] = true;
            const double d = fabs(lps[j] - ((double)l[id] - lse));
            if (d > worst) worst = d;
            if (!(d <= 5e-4)) fail_msg("prompt position %u, token %d: logprob %.7f, CPU %.7f", p, id, lps[j], (double)l[id] - lse);
            if (j) {
                assert_true(lps[j] <= lps[j - 1]); /* ranked */
                if ((double)l[ids[j - 1]] < (double)l[id] - 1e-3)
                    fail_msg("prompt position %u: token %d ranked before %d, CPU logits %.6f < %.6f", p, ids[j - 1], id,
                             l[ids[j - 1]], l[id]);
            }
            if (id == r[0].prompt[p]) at = j;
        }
        /* its own logprob and rank: entries rank - 1 .. at hold its logit (ties: smaller ids first) */
        assert_true(at < V);
        assert_true(lps[at] == o->lp[p]);
        assert_true(o->rank[p] >= 1 && o->rank[p] <= at + 1);
        for (uint32_t j = o->rank[p] - 1; j <= at; j++) assert_true(lps[j] == o->lp[p]);
        for (uint32_t j = 0; j + 1 < o->rank[p]; j++) assert_true(lps[j] >= o->lp[p]);
        /* top_ids: the list's first ones */
        assert_int_equal(o->n_top[p], DCP_ENGINE_MAX_LOGPROBS < V ? DCP_ENGINE_MAX_LOGPROBS : V);
        assert_memory_equal(o->top_ids[p], ids, o->n_top[p] * sizeof *ids);
        assert_memory_equal(o->top_lps[p], lps, o->n_top[p] * sizeof *lps);
    }
    printf("prompt logprobs ALL: %u positions x %u tokens within %.2e of the CPU double reference\n", n - 1, V, worst);
    free(l);
    free(seen);
    dcp_test_ref_model_free(&rm);
    /* the 5 most likely of the other request: the whole list's first 5 */
    assert_same_prompt(&alone[0], &alone[1], 0.0f, "prompt logprobs ALL against 5");
    assert_int_equal(alone[1].n_all[1], 0);
    prun(f.s, f.tok, 0, false, r, 3, together);
    prun(f.s, f.tok, 7, false, r, 3, chunked);
    for (uint32_t i = 0; i < 3; i++) {
        assert_same_prompt(&alone[i], &together[i], 0.0f, "prompt logprobs ALL, batched");
        assert_same_all(&alone[i], &together[i], V, "prompt logprobs ALL, batched");
        assert_same_all(&alone[i], &chunked[i], V, "prompt logprobs ALL, chunks of 7");
        assert_int_equal(alone[i].n_gen, together[i].n_gen);
        assert_memory_equal(alone[i].gen, together[i].gen, alone[i].n_gen * sizeof *alone[i].gen);
        assert_memory_equal(alone[i].gen, chunked[i].gen, alone[i].n_gen * sizeof *alone[i].gen);
    }
    /* TP 8 / DCP 2 on logical devices: within 1e-4 of TP 1 everywhere, bitwise alone and batched */
    {
        dcp_context *ctx8 = dcp_test_context_of(8);
        dcp_device *devs[8];
        for (uint32_t k = 0; k < 8; k++) devs[k] = dcp_context_device(ctx8, (int)k);
        dcp_model *m8;
        DCP_ASSERT_OK(dcp_test_model_load(devs, 0, 8, 8, 2, false, f.g, &f.cfg, &m8));
        dcp_model_state_config sc = DCP_MODEL_STATE_CONFIG_DEFAULT;
        sc.n_ctx = NCTX;
        sc.max_seqs = 4;
        sc.max_rows = NCTX;
        sc.kv_dtype = DCP_DTYPE_F32;
        dcp_model_state *s8;
        DCP_ASSERT_OK(dcp_model_state_create(m8, &sc, &s8));
        pout d[3], d1;
        prun(s8, f.tok, 0, false, r, 3, d);
        prun(s8, f.tok, 0, false, &r[0], 1, &d1);
        assert_same_all(&d1, &d[0], V, "prompt logprobs ALL, TP 8 / DCP 2, alone and batched");
        double worst = 0.0;
        for (uint32_t p = 1; p < n; p++) { /* token by token: the order may differ where logits nearly tie */
            const int32_t *ia = alone[0].all_ids + (size_t)p * V, *ib = d[0].all_ids + (size_t)p * V;
            const float *la = alone[0].all_lps + (size_t)p * V, *lb = d[0].all_lps + (size_t)p * V;
            float *byid = calloc(V, sizeof *byid);
            assert_non_null(byid);
            for (uint32_t j = 0; j < V; j++) byid[ib[j]] = lb[j];
            for (uint32_t j = 0; j < V; j++) {
                const double dd = fabs((double)la[j] - byid[ia[j]]);
                if (dd > worst) worst = dd;
                if (!(dd <= 1e-4)) fail_msg("prompt logprobs ALL, TP 8 / DCP 2: position %u token %d %.7f against %.7f", p, ia[j], la[j], byid[ia[j]]);
            }
            free(byid);
        }
        printf("prompt logprobs ALL, TP 8 / DCP 2 against TP 1: %u positions x %u tokens within %.2e\n", n - 1, V, worst);
        for (uint32_t i = 0; i < 3; i++) pout_free(&d[i]);
        pout_free(&d1);
        dcp_model_state_destroy(s8);
        dcp_model_destroy(m8);
        dcp_test_context_done(ctx8);
    }
    for (uint32_t i = 0; i < 3; i++) {
        pout_free(&alone[i]);
        pout_free(&together[i]);
        pout_free(&chunked[i]);
    }
    fx_close(&f);
}

static void test_refused(void **state)
{
    (void)state;
    fixture f;
    fx_open(&f);
    dcp_engine_config ec = DCP_ENGINE_CONFIG_DEFAULT;
    dcp_engine *e;
    DCP_ASSERT_OK(dcp_engine_create(f.s, f.tok, &ec, &e));
    dcp_engine_request r = DCP_ENGINE_REQUEST_DEFAULT;
    r.prompt = stories_ref;
    r.n_prompt = 3;
    r.logprobs = true;
    r.top_logprobs = DCP_ENGINE_MAX_LOGPROBS + 1;
    uint64_t id;
    assert_int_equal(dcp_engine_submit(e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "top_logprobs 21"));
    r.logprobs = false;
    r.top_logprobs = 2;
    assert_int_equal(dcp_engine_submit(e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "without logprobs"));
    r.top_logprobs = 0;
    r.prompt_logprobs = true;
    r.prompt_top_logprobs = DCP_ENGINE_MAX_LOGPROBS + 1;
    assert_int_equal(dcp_engine_submit(e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "prompt_top_logprobs 21"));
    r.prompt_logprobs = false;
    r.prompt_top_logprobs = 1;
    assert_int_equal(dcp_engine_submit(e, &r, &id), DCP_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(dcp_last_error(), "without prompt_logprobs"));
    dcp_engine_destroy(e);
    fx_close(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_cpu_and_batch),
        cmocka_unit_test(test_ngram),
        cmocka_unit_test(test_draft),
        cmocka_unit_test(test_prompt),
        cmocka_unit_test(test_prompt_all),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
