/* Host sampler: the logits changed by the min_tokens mask, biases and penalties, then greedy or
 * temperature, top-k, top-p and min-p over one row, with a seeded
 * SplitMix64 stream (same seed and config: same choices). See include/dcpvk/model.h for why it
 * runs on the host. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/splitmix.h"
#include "dcpvk/json_constraint.h"
#include "dcpvk/model.h"
#include "engine/engine_internal.h"

struct dcp_sampler {
    dcp_sampler_config cfg;      /* logit_bias and min_tokens_ids point at the copies below */
    uint32_t n_vocab;
    uint64_t state;
    struct cand { float v; uint32_t id; } *idx; /* [n_vocab] candidates (logit, id) */
    double *p;       /* [n_vocab] probabilities of the sorted candidates */
    bool argmax_mode;            /* temperature 0 or top-k 1: the argmax of the (changed) logits */
    bool changes;                /* a bias, a penalty or min_tokens changes the logits */
    bool penalties;              /* a presence, frequency or repetition penalty is set */
    float *work;                 /* [n_vocab] the changed logits (when changes) */
    uint32_t *count;             /* [n_vocab] times each token was generated (penalties) */
    uint8_t *in_prompt;          /* [n_vocab] 1 for the prompt's tokens (penalties) */
    uint32_t generated;          /* tokens accepted as generated */
    dcp_logit_bias *bias;        /* [cfg.n_logit_bias] */
    int32_t *min_ids;            /* [cfg.n_min_tokens_ids] */
    /* JSON output (cfg.json) */
    dcp_json_state *json;        /* the generated text's recognizer state */
    uint8_t *allowed;            /* [n_vocab] its mask */
    uint32_t mask_at;            /* 1 + generated when allowed was computed (0: never) */
    bool json_broken;            /* a token that the mask refused was accepted: no more masking */
    int32_t *end_ids;            /* [cfg.n_json_end_ids] */
};

dcp_status dcp_sampler_create(const dcp_sampler_config *c, uint32_t n_vocab, dcp_sampler **out)
{
    *out = NULL;
    if (!(c->temperature >= 0.0f) || isinf(c->temperature))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: temperature %g must be finite and >= 0", c->temperature);
    if (!(c->top_p > 0.0f && c->top_p <= 1.0f))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: top-p %g must be in (0, 1]", c->top_p);
    if (!(c->min_p >= 0.0f && c->min_p <= 1.0f))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: min-p %g must be in [0, 1]", c->min_p);
    if (!(c->presence_penalty >= -2.0f && c->presence_penalty <= 2.0f))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: presence penalty %g must be in [-2, 2]", c->presence_penalty);
    if (!(c->frequency_penalty >= -2.0f && c->frequency_penalty <= 2.0f))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: frequency penalty %g must be in [-2, 2]",
                        c->frequency_penalty);
    if (!(c->repetition_penalty >= 0.0f) || isinf(c->repetition_penalty))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: repetition penalty %g must be finite and > 0",
                        c->repetition_penalty);
    if (n_vocab == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: empty vocabulary");
    for (uint32_t i = 0; i < c->n_logit_bias; i++) {
        const dcp_logit_bias *b = &c->logit_bias[i];
        if (b->token < 0 || (uint32_t)b->token >= n_vocab)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: logit bias %u is for token %d, outside the vocabulary of %u",
                            i, b->token, n_vocab);
        if (!(b->bias >= -100.0f && b->bias <= 100.0f))
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: logit bias %u (token %d) is %g; it must be in [-100, 100]",
                            i, b->token, b->bias);
    }
    for (uint32_t i = 0; i < c->n_min_tokens_ids; i++)
        if (c->min_tokens_ids[i] < 0 || (uint32_t)c->min_tokens_ids[i] >= n_vocab)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: min_tokens id %u is %d, outside the vocabulary of %u", i,
                            c->min_tokens_ids[i], n_vocab);
    dcp_sampler *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->cfg = *c;
    if (s->cfg.repetition_penalty == 0.0f) s->cfg.repetition_penalty = 1.0f;
    s->n_vocab = n_vocab;
    s->state = c->seed;
    s->argmax_mode = c->temperature == 0.0f || c->top_k == 1;
    s->penalties = s->cfg.presence_penalty != 0.0f || s->cfg.frequency_penalty != 0.0f || s->cfg.repetition_penalty != 1.0f;
    s->changes = s->penalties || c->n_logit_bias > 0 || (c->min_tokens > 0 && c->n_min_tokens_ids > 0) || c->json;
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    s->p = malloc((size_t)n_vocab * sizeof *s->p);
    bool ok = s->idx && s->p;
    if (s->changes) ok &= (s->work = malloc((size_t)n_vocab * sizeof *s->work)) != NULL;
    if (s->penalties) {
        ok &= (s->count = calloc(n_vocab, sizeof *s->count)) != NULL;
        ok &= (s->in_prompt = calloc(n_vocab, sizeof *s->in_prompt)) != NULL;
    }
    if (c->n_logit_bias && (s->bias = malloc(c->n_logit_bias * sizeof *s->bias)))
        memcpy(s->bias, c->logit_bias, c->n_logit_bias * sizeof *s->bias);
    if (c->n_min_tokens_ids && (s->min_ids = malloc(c->n_min_tokens_ids * sizeof *s->min_ids)))
        memcpy(s->min_ids, c->min_tokens_ids, c->n_min_tokens_ids * sizeof *s->min_ids);
    ok &= (!c->n_logit_bias || s->bias) && (!c->n_min_tokens_ids || s->min_ids);
    if (c->json) {
        ok &= c->json_vocab && dcp_json_vocab_size(c->json_vocab) == n_vocab;
        ok &= (s->allowed = malloc(n_vocab)) != NULL;
        ok &= dcp_json_state_create(c->json, &s->json) == DCP_OK;
        if (c->n_json_end_ids && (s->end_ids = malloc(c->n_json_end_ids * sizeof *s->end_ids)))
            memcpy(s->end_ids, c->json_end_ids, c->n_json_end_ids * sizeof *s->end_ids);
        ok &= !c->n_json_end_ids || s->end_ids;
    }
    s->cfg.logit_bias = s->bias;
    s->cfg.min_tokens_ids = s->min_ids;
    s->cfg.json_end_ids = s->end_ids;
    if (!ok && c->json && (!c->json_vocab || dcp_json_vocab_size(c->json_vocab) != n_vocab)) {
        dcp_sampler_destroy(s);
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: a JSON constraint needs the token bytes of a vocabulary "
                        "of %u tokens", n_vocab);
    }
    if (!ok) {
        dcp_sampler_destroy(s);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    }
    *out = s;
    return DCP_OK;
}

void dcp_sampler_destroy(dcp_sampler *s)
{
    if (!s) return;
    free(s->idx);
    free(s->p);
    free(s->work);
    free(s->count);
    free(s->in_prompt);
    free(s->bias);
    free(s->min_ids);
    dcp_json_state_destroy(s->json);
    free(s->allowed);
    free(s->end_ids);
    free(s);
}

bool dcp_sampler_is_greedy(const dcp_sampler *s) { return s->argmax_mode && !s->changes; }

bool eng_sampler_json_done(const dcp_sampler *s) { return s->json && !s->json_broken && dcp_json_state_finished(s->json); }

void dcp_sampler_accept(dcp_sampler *s, const int32_t *tokens, uint32_t n, bool generated)
{
    if (generated) s->generated += n;
    if (generated && s->json && !s->json_broken)
        for (uint32_t i = 0; i < n; i++) {
            size_t len;
            const uint8_t *b = dcp_json_vocab_token(s->cfg.json_vocab, tokens[i], &len);
            if (!b || !dcp_json_state_feed(s->json, b, len)) s->json_broken = true;
        }
    if (!s->penalties) return;
    for (uint32_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= s->n_vocab) continue;
        if (generated) s->count[tokens[i]]++;
        else s->in_prompt[tokens[i]] = 1;
    }
}

static float key(const float *l, uint32_t i) { return isnan(l[i]) ? -INFINITY : l[i]; }

/* The logits the sampler chooses from: logits itself when nothing changes them, else s->work
 * (vLLM's order: the min_tokens mask, the biases, then the repetition, frequency and presence
 * penalties, all in f32). */
static const float *changed(dcp_sampler *s, const float *logits)
{
    if (!s->changes) return logits;
    float *w = s->work;
    const dcp_sampler_config *c = &s->cfg;
    for (uint32_t i = 0; i < s->n_vocab; i++) w[i] = key(logits, i);
    if (s->json && !s->json_broken) { /* first: the tokens that would break the JSON are out */
        if (s->mask_at != s->generated + 1) {
            dcp_json_state_mask(s->json, c->json_vocab, c->json_end_ids, c->n_json_end_ids, s->allowed);
            s->mask_at = s->generated + 1;
        }
        for (uint32_t i = 0; i < s->n_vocab; i++)
            if (!s->allowed[i]) w[i] = -INFINITY;
    }
    if (s->generated < c->min_tokens)
        for (uint32_t i = 0; i < c->n_min_tokens_ids; i++) w[c->min_tokens_ids[i]] = -INFINITY;
    for (uint32_t i = 0; i < c->n_logit_bias; i++) {
        const dcp_logit_bias *b = &c->logit_bias[i];
        w[b->token] = b->bias <= -100.0f ? -INFINITY : w[b->token] + b->bias;
    }
    if (s->penalties) {
        const float r = c->repetition_penalty, fp = c->frequency_penalty, pp = c->presence_penalty;
        for (uint32_t i = 0; i < s->n_vocab; i++) {
            const uint32_t n = s->count[i];
            if (!n && !s->in_prompt[i]) continue;
            float l = w[i];
            if (r != 1.0f) l = l > 0.0f ? l / r : l * r;
            l -= fp * (float)n;
            if (n) l -= pp;
            w[i] = l;
        }
    }
    return w;
}

/* Descending by logit, ascending id on ties (a total order: the result does not depend on qsort). */
static int cmp_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The kept candidates of logits in s->idx [0, *keep) (most likely first) with their weights in
 * s->p (exp((logit - max) / temperature), summing to *sum), after top-k, top-p and min-p. Returns false
 * when nothing is finite (every logit -inf or NaN): then s->idx[0] is the pick. Not greedy. */
static bool candidates(dcp_sampler *s, const float *logits, uint32_t *keep_out, double *sum_out)
{
    const uint32_t n = s->n_vocab;
    /* Candidates: with top-k, a partial selection first (k passes are cheaper than a full sort
     * when k is small); then sort the kept ones. */
    uint32_t keep = n;
    for (uint32_t i = 0; i < n; i++) s->idx[i] = (struct cand){key(logits, i), i};
    if (s->cfg.top_k > 0 && s->cfg.top_k < n) keep = s->cfg.top_k;
    if (keep < n && keep <= 64) {
        for (uint32_t a = 0; a < keep; a++) {
            uint32_t best = a;
            for (uint32_t i = a + 1; i < n; i++)
                if (cmp_desc(&s->idx[i], &s->idx[best]) < 0) best = i;
            struct cand t = s->idx[a];
            s->idx[a] = s->idx[best];
            s->idx[best] = t;
        }
    } else {
        qsort(s->idx, n, sizeof *s->idx, cmp_desc);
    }
    double mx = s->idx[0].v;
    if (isinf(mx) && mx < 0) return false;
    double sum = 0.0;
    for (uint32_t i = 0; i < keep; i++) {
        s->p[i] = exp(((double)s->idx[i].v - mx) / s->cfg.temperature);
        sum += s->p[i];
    }
    if (s->cfg.top_p < 1.0f) {
        double cum = 0.0;
        uint32_t cut = keep;
        for (uint32_t i = 0; i < keep; i++) {
            cum += s->p[i] / sum;
            if (cum >= s->cfg.top_p) {
                cut = i + 1;
                break;
            }
        }
        keep = cut;
        sum = 0.0;
        for (uint32_t i = 0; i < keep; i++) sum += s->p[i];
    }
    if (s->cfg.min_p > 0.0f) {
        /* p_i / p_max = s->p[i] / s->p[0] and s->p[0] = 1 (the largest logit): the cut does not
         * depend on the renormalisation of top-k and top-p. */
        const double mp = s->cfg.min_p;
        uint32_t cut = 1;
        while (cut < keep && s->p[cut] >= mp) cut++;
        if (cut < keep) {
            keep = cut;
            sum = 0.0;
            for (uint32_t i = 0; i < keep; i++) sum += s->p[i];
        }
    }
    *keep_out = keep;
    *sum_out = sum;
    return true;
}

static uint32_t argmax(const dcp_sampler *s, const float *logits)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < s->n_vocab; i++)
        if (key(logits, i) > key(logits, best)) best = i;
    return best;
}

/* One draw of the stream from the candidates s->idx [0, keep) with weights s->p (summing to sum). */
static int32_t draw(dcp_sampler *s, uint32_t keep, double sum)
{
    double u = (double)(dcp_splitmix64_next(&s->state) >> 11) * (1.0 / 9007199254740992.0) * sum;
    double acc = 0.0;
    for (uint32_t i = 0; i < keep; i++) {
        acc += s->p[i];
        if (u < acc) return (int32_t)s->idx[i].id;
    }
    return (int32_t)s->idx[keep - 1].id;
}

int32_t dcp_sampler_sample(dcp_sampler *s, const float *logits)
{
    const float *l = changed(s, logits);
    if (s->argmax_mode) return (int32_t)argmax(s, l);
    uint32_t keep;
    double sum;
    if (!candidates(s, l, &keep, &sum)) return (int32_t)s->idx[0].id;
    return draw(s, keep, sum);
}

void eng_sampler_probs(dcp_sampler *s, const float *logits, double *p)
{
    for (uint32_t i = 0; i < s->n_vocab; i++) p[i] = 0.0;
    const float *l = changed(s, logits);
    uint32_t keep;
    double sum;
    if (s->argmax_mode) {
        p[argmax(s, l)] = 1.0;
    } else if (!candidates(s, l, &keep, &sum)) {
        p[s->idx[0].id] = 1.0;
    } else {
        for (uint32_t i = 0; i < keep; i++) p[s->idx[i].id] = s->p[i] / sum;
    }
}

int32_t eng_pick(const double *w, uint32_t n, double sum, double u)
{
    const double x = u * sum;
    double acc = 0.0;
    int32_t last = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (w[i] <= 0.0) continue;
        acc += w[i];
        last = (int32_t)i;
        if (x < acc) return (int32_t)i;
    }
    return last;
}

/* The n_top best of s->idx [0, n) (by cmp_desc) moved to its front, in order (n_top passes). */
static void select_front(dcp_sampler *s, uint32_t n, uint32_t n_top)
{
    for (uint32_t a = 0; a < n_top && a < n; a++) {
        uint32_t best = a;
        for (uint32_t i = a + 1; i < n; i++)
            if (cmp_desc(&s->idx[i], &s->idx[best]) < 0) best = i;
        struct cand t = s->idx[a];
        s->idx[a] = s->idx[best];
        s->idx[best] = t;
    }
}

/* Nothing finite (every logit -inf or NaN): the pick is certain, the others -inf. */
static void lp_certain(dcp_sampler *s, int32_t token, uint32_t n_top, eng_lp *out)
{
    select_front(s, s->n_vocab, n_top);
    out->logprob = 0.0f;
    for (uint32_t i = 0; i < n_top; i++) {
        out->ids[i] = (int32_t)s->idx[i].id;
        out->lps[i] = (int32_t)s->idx[i].id == token ? 0.0f : -INFINITY;
    }
}

/* Argmax mode: the log-softmax of the changed logits l at temperature 1, in double, nothing cut. */
static void lp_argmax(dcp_sampler *s, const float *l, int32_t token, uint32_t n_top, eng_lp *out)
{
    const uint32_t n = s->n_vocab;
    for (uint32_t i = 0; i < n; i++) s->idx[i] = (struct cand){key(l, i), i};
    select_front(s, n, n_top ? n_top : 1);
    const double mx = s->idx[0].v;
    if (isinf(mx)) {
        lp_certain(s, token, n_top, out);
        return;
    }
    double sum = 0.0;
    for (uint32_t i = 0; i < n; i++) sum += exp((double)key(l, i) - mx);
    const double lse = mx + log(sum);
    out->logprob = (float)((double)key(l, (uint32_t)token) - lse);
    for (uint32_t i = 0; i < n_top; i++) {
        out->ids[i] = (int32_t)s->idx[i].id;
        out->lps[i] = (float)((double)s->idx[i].v - lse);
    }
}

/* Sampling: from the candidates s->idx [0, keep) with weights summing to sum (candidates()), kept
 * candidate i has log(p_i / sum) = (v_i - max) / temperature - log(sum); the cut ones -inf. */
static void lp_kept(dcp_sampler *s, uint32_t keep, double sum, int32_t token, uint32_t n_top, eng_lp *out)
{
    const double mx = s->idx[0].v, ls = log(sum), t = s->cfg.temperature;
    out->logprob = -INFINITY;
    for (uint32_t i = 0; i < keep; i++)
        if ((int32_t)s->idx[i].id == token) out->logprob = (float)(((double)s->idx[i].v - mx) / t - ls);
    if (n_top > keep) select_front(s, s->n_vocab, n_top); /* the cut ones after the kept, in logit order */
    for (uint32_t i = 0; i < n_top; i++) {
        out->ids[i] = (int32_t)s->idx[i].id;
        out->lps[i] = i < keep ? (float)(((double)s->idx[i].v - mx) / t - ls) : -INFINITY;
    }
}

void eng_sampler_logprobs(dcp_sampler *s, const float *logits, int32_t token, uint32_t n_top, eng_lp *out)
{
    if (n_top > s->n_vocab) n_top = s->n_vocab;
    out->n_top = n_top;
    const float *l = changed(s, logits);
    uint32_t keep;
    double sum;
    if (s->argmax_mode) lp_argmax(s, l, token, n_top, out);
    else if (!candidates(s, l, &keep, &sum)) lp_certain(s, token, n_top, out);
    else lp_kept(s, keep, sum, token, n_top, out);
}

int32_t eng_sampler_sample_logprobs(dcp_sampler *s, const float *logits, uint32_t n_top, eng_lp *out)
{
    if (n_top > s->n_vocab) n_top = s->n_vocab;
    out->n_top = n_top;
    const float *l = changed(s, logits);
    int32_t t;
    uint32_t keep;
    double sum;
    if (s->argmax_mode) {
        t = (int32_t)argmax(s, l);
        lp_argmax(s, l, t, n_top, out);
    } else if (!candidates(s, l, &keep, &sum)) {
        t = (int32_t)s->idx[0].id;
        lp_certain(s, t, n_top, out);
    } else {
        t = draw(s, keep, sum); /* the draw of dcp_sampler_sample */
        lp_kept(s, keep, sum, t, n_top, out);
    }
    return t;
}

void eng_raw_logprobs(const float *logits, uint32_t n_vocab, int32_t token, uint32_t n_top, eng_lp *out,
                      uint32_t *rank)
{
    if (n_top > n_vocab) n_top = n_vocab;
    out->n_top = n_top;
    double mx = -INFINITY;
    for (uint32_t i = 0; i < n_vocab; i++)
        if (key(logits, i) > mx) mx = key(logits, i);
    double sum = 0.0;
    for (uint32_t i = 0; isfinite(mx) && i < n_vocab; i++) sum += exp((double)key(logits, i) - mx);
    const double lse = isfinite(mx) ? mx + log(sum) : 0.0;
    const float lt = key(logits, (uint32_t)token);
    uint32_t above = 0, n = 0; /* n: the top list's length so far, sorted by (logit desc, id asc) */
    for (uint32_t i = 0; i < n_vocab; i++) {
        const float v = key(logits, i);
        above += v > lt;
        if (n_top == 0 || (n == n_top && !(v > key(logits, (uint32_t)out->ids[n - 1])))) continue;
        uint32_t at = n < n_top ? n++ : n - 1; /* insert (ids ascend, so an equal logit goes after) */
        while (at > 0 && v > key(logits, (uint32_t)out->ids[at - 1])) {
            out->ids[at] = out->ids[at - 1];
            at--;
        }
        out->ids[at] = (int32_t)i;
    }
    for (uint32_t k = 0; k < n_top; k++) out->lps[k] = (float)((double)key(logits, (uint32_t)out->ids[k]) - lse);
    out->logprob = (float)((double)lt - lse);
    *rank = above + 1;
}

typedef struct ranked {
    float v;
    int32_t id;
} ranked;

/* Most likely first; equal logits: smaller id first (eng_raw_logprobs's order). */
static int ranked_cmp(const void *a, const void *b)
{
    const ranked *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

dcp_status eng_raw_logprobs_all(const float *logits, uint32_t n_vocab, int32_t *ids, float *lps)
{
    ranked *t = malloc((size_t)n_vocab * sizeof *t);
    if (!t) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory (prompt logprobs of %u tokens)", n_vocab);
    double mx = -INFINITY;
    for (uint32_t i = 0; i < n_vocab; i++) {
        t[i] = (ranked){key(logits, i), (int32_t)i};
        if (t[i].v > mx) mx = t[i].v;
    }
    double sum = 0.0; /* as eng_raw_logprobs: the same sum in the same order */
    for (uint32_t i = 0; isfinite(mx) && i < n_vocab; i++) sum += exp((double)key(logits, i) - mx);
    const double lse = isfinite(mx) ? mx + log(sum) : 0.0;
    qsort(t, n_vocab, sizeof *t, ranked_cmp);
    for (uint32_t i = 0; i < n_vocab; i++) {
        ids[i] = t[i].id;
        lps[i] = (float)((double)t[i].v - lse);
    }
    free(t);
    return DCP_OK;
}
