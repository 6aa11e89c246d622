/* Host sampler: greedy, temperature, top-k, top-p over one row of logits, with a seeded
 * SplitMix64 stream (same seed and config: same choices). See include/dcpvk/model.h for why it
 * runs on the host. */
#include <math.h>
#include <stdlib.h>

#include "common/error.h"
#include "common/splitmix.h"
#include "dcpvk/model.h"
#include "engine/engine_internal.h"

struct dcp_sampler {
    dcp_sampler_config cfg;
    uint32_t n_vocab;
    uint64_t state;
    struct cand { float v; uint32_t id; } *idx; /* [n_vocab] candidates (logit, id) */
    double *p;       /* [n_vocab] probabilities of the sorted candidates */
};

dcp_status dcp_sampler_create(const dcp_sampler_config *c, uint32_t n_vocab, dcp_sampler **out)
{
    *out = NULL;
    if (!(c->temperature >= 0.0f) || isinf(c->temperature))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: temperature %g must be finite and >= 0", c->temperature);
    if (!(c->top_p > 0.0f && c->top_p <= 1.0f))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: top-p %g must be in (0, 1]", c->top_p);
    if (n_vocab == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "sampler: empty vocabulary");
    dcp_sampler *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->cfg = *c;
    s->n_vocab = n_vocab;
    s->state = c->seed;
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    s->p = malloc((size_t)n_vocab * sizeof *s->p);
    if (!s->idx || !s->p) {
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
    free(s);
}

bool dcp_sampler_is_greedy(const dcp_sampler *s) { return s->cfg.temperature == 0.0f || s->cfg.top_k == 1; }

static float key(const float *l, uint32_t i) { return isnan(l[i]) ? -INFINITY : l[i]; }

/* Descending by logit, ascending id on ties (a total order: the result does not depend on qsort). */
static int cmp_desc(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->v != y->v) return x->v > y->v ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The kept candidates of logits in s->idx [0, *keep) (most likely first) with their weights in
 * s->p (exp((logit - max) / temperature), summing to *sum), after top-k and top-p. Returns false
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

int32_t dcp_sampler_sample(dcp_sampler *s, const float *logits)
{
    if (dcp_sampler_is_greedy(s)) return (int32_t)argmax(s, logits);
    uint32_t keep;
    double sum;
    if (!candidates(s, logits, &keep, &sum)) return (int32_t)s->idx[0].id;
    double u = (double)(dcp_splitmix64_next(&s->state) >> 11) * (1.0 / 9007199254740992.0) * sum;
    double acc = 0.0;
    for (uint32_t i = 0; i < keep; i++) {
        acc += s->p[i];
        if (u < acc) return (int32_t)s->idx[i].id;
    }
    return (int32_t)s->idx[keep - 1].id;
}

void eng_sampler_probs(dcp_sampler *s, const float *logits, double *p)
{
    for (uint32_t i = 0; i < s->n_vocab; i++) p[i] = 0.0;
    uint32_t keep;
    double sum;
    if (dcp_sampler_is_greedy(s)) {
        p[argmax(s, logits)] = 1.0;
    } else if (!candidates(s, logits, &keep, &sum)) {
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
