/* A sequence's output: each generated token ends it (EOS, a stop token, max tokens) or adds its
 * UTF-8 piece (the detokenizer holds half characters) to the held text; stop strings are searched
 * in the held text, and only what can no longer be the start of a stop string is released.
 *
 * Why nothing released can be part of a match: after each token the longest suffix of the held
 * text that is a proper prefix of some stop string stays held; any later match therefore starts
 * inside the held text. A stop string is whole UTF-8 and so is the held text, so the held suffix
 * starts on a character boundary and every release is whole characters.
 *
 * include_stop_str_in_output (vLLM's): the text ends after the stop string instead of before it,
 * and a stop token's own text (empty for special tokens) is kept. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "engine/engine_internal.h"

static dcp_status held_append(eng_seq *q, const char *p, size_t n)
{
    if (q->held_len + n > q->held_cap) {
        size_t cap = q->held_cap ? q->held_cap : 64;
        while (cap < q->held_len + n) cap *= 2;
        char *h = realloc(q->held, cap);
        if (!h) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        q->held = h;
        q->held_cap = cap;
    }
    if (n) memcpy(q->held + q->held_len, p, n);
    q->held_len += n;
    return DCP_OK;
}

/* Adds text [n] to the piece of the token being emitted (requests with logprobs). */
static dcp_status piece_append(eng_seq *q, const char *p, size_t n)
{
    if (!q->lp_cur || !n) return DCP_OK;
    if (q->piece_len + n > q->piece_cap) {
        size_t cap = q->piece_cap ? q->piece_cap : 32;
        while (cap < q->piece_len + n) cap *= 2;
        char *b = realloc(q->piece, cap);
        if (!b) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        q->piece = b;
        q->piece_cap = cap;
    }
    memcpy(q->piece + q->piece_len, p, n);
    q->piece_len += n;
    return DCP_OK;
}

/* Where the output ends at the first stop string of the held text: where it starts, or (with
 * include_stop_str_in_output) where it ends; SIZE_MAX: none. Of two starting at one place, the
 * first listed. */
static size_t stop_match(const eng_seq *q)
{
    size_t best = SIZE_MAX, best_len = 0;
    for (uint32_t i = 0; i < q->n_stop; i++) {
        const size_t L = q->stop_len[i];
        if (L > q->held_len) continue;
        for (size_t p = 0; p + L <= q->held_len && p < best; p++)
            if (memcmp(q->held + p, q->stop[i], L) == 0) {
                best = p;
                best_len = L;
                break;
            }
    }
    return best != SIZE_MAX && q->include_stop ? best + best_len : best;
}

/* Bytes at the end of the held text that are a proper prefix of some stop string. */
static size_t stop_partial(const eng_seq *q)
{
    size_t keep = 0;
    for (uint32_t i = 0; i < q->n_stop; i++)
        for (size_t l = q->stop_len[i] - 1; l > keep; l--)
            if (l <= q->held_len && memcmp(q->held + q->held_len - l, q->stop[i], l) == 0) {
                keep = l;
                break;
            }
    return keep;
}

/* Drops the first n held bytes (released). */
static void held_consume(eng_seq *q, size_t n)
{
    if (n == 0) return; /* nothing held yet: q->held may still be NULL */
    memmove(q->held, q->held + n, q->held_len - n);
    q->held_len -= n;
}

/* Ends q with everything held up to the first stop string (flushing the detokenizer first). */
static dcp_status finish_with_rest(dcp_engine *e, eng_seq *q, dcp_engine_finish why, int32_t token)
{
    const char *piece;
    size_t len;
    dcp_status st = dcp_detokenizer_flush(q->detok, &piece, &len);
    if (st == DCP_OK) st = piece_append(q, piece, len); /* the last token's text ends it */
    if (st == DCP_OK) st = held_append(q, piece, len);
    if (st != DCP_OK) {
        eng_finish(e, q, DCP_ENGINE_FINISH_ERROR, token, NULL, 0, st, dcp_last_error());
        return st;
    }
    size_t m = stop_match(q);
    if (m != SIZE_MAX) why = DCP_ENGINE_FINISH_STOP;
    eng_finish(e, q, why, token, q->held, m != SIZE_MAX ? m : q->held_len, DCP_OK, NULL);
    return DCP_OK;
}

dcp_status eng_text_token(dcp_engine *e, eng_seq *q, int32_t token, bool *ended)
{
    *ended = true; /* until the TOKEN event is queued: every other way out ends q */
    q->toks[q->n_toks++] = token;
    q->generated++;
    e->stats.generated_tokens++;
    bool stop_token = !q->ignore_eos && token == e->eos;
    for (uint32_t i = 0; i < q->n_stop_tokens; i++) stop_token |= token == q->stop_tokens[i];
    const char *piece;
    size_t len;
    dcp_status st = DCP_OK;
    if (stop_token && !q->include_stop) {
        q->lp_cur = NULL; /* a stop token not shown has no logprobs entry */
        return finish_with_rest(e, q, DCP_ENGINE_FINISH_STOP, token);
    }
    st = dcp_detokenizer_push(q->detok, token, &piece, &len);
    q->piece_len = 0;
    if (st == DCP_OK) st = piece_append(q, piece, len); /* it goes with the token's logprobs (eng_emit) */
    if (stop_token) { /* include_stop_str_in_output: its text too (special tokens' is empty) */
        if (st == DCP_OK) st = held_append(q, piece, len);
        if (st != DCP_OK) {
            eng_finish(e, q, DCP_ENGINE_FINISH_ERROR, token, NULL, 0, st, dcp_last_error());
            return st;
        }
        return finish_with_rest(e, q, DCP_ENGINE_FINISH_STOP, token);
    }
    if (st == DCP_OK) st = held_append(q, piece, len);
    if (st != DCP_OK) {
        eng_finish(e, q, DCP_ENGINE_FINISH_ERROR, token, NULL, 0, st, dcp_last_error());
        return st;
    }
    size_t m = stop_match(q);
    if (m != SIZE_MAX) {
        eng_finish(e, q, DCP_ENGINE_FINISH_STOP, token, q->held, m, DCP_OK, NULL);
        return DCP_OK;
    }
    /* JSON output: a complete value that nothing can continue ends the request */
    if (eng_sampler_json_done(q->smp)) return finish_with_rest(e, q, DCP_ENGINE_FINISH_STOP, token);
    if (q->generated == q->max_tokens) return finish_with_rest(e, q, DCP_ENGINE_FINISH_LENGTH, token);
    size_t out = q->held_len - stop_partial(q);
    st = eng_emit(e, q, DCP_ENGINE_EVENT_TOKEN, token, q->held, out, DCP_ENGINE_FINISH_NONE, DCP_OK, NULL);
    if (st != DCP_OK) {
        eng_finish(e, q, DCP_ENGINE_FINISH_ERROR, token, NULL, 0, st, dcp_last_error());
        return st;
    }
    held_consume(q, out);
    *ended = false;
    return DCP_OK;
}
