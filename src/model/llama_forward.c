/* The llama forward pass, recorded on the step layer (src/step/step.h). One chunk of T tokens is
 * one step; it reads top to bottom:
 *
 *   embed
 *   per layer:  attention block   rmsnorm, Q|K|V, RoPE + KV store, attention, o_proj
 *               all-reduce        (TP > 1) each rank puts its partial output; a round
 *               FFN block         rmsnorm (+ the all-reduce's sum), gate|up, SwiGLU, down
 *               all-reduce
 *   head        rmsnorm, output matrix, argmax (logits on the first rank held)
 *
 * Each block records every rank's ops into its command of the current round. With one rank the
 * o_proj and ffn_down add straight into the residual x; with several they write `part`, which the
 * all-reduce puts into the TP communicator's put area, and the next rmsnorm of every rank adds
 * the T parts to x in rank order first (rmsnorm_parts: bitwise the same x on every rank, no host
 * sum, no host copy with hostmem). The attention is the paged decode over the rank's pool, or with
 * DCP the DCP attention step of every group held here (dcp_step_cp_attn: rounds for its Q gather
 * and its a2a or ag_rs exchange; prefill rows attend causally, row t over the first pos + t + 1
 * tokens). Decode steps (T = 1) are recorded once and replayed while decode_key stays the same:
 * between steps only host-visible inputs change (token ids, RoPE angles, KV slots, block tables
 * and lengths). */
#include <math.h>
#include <string.h>

#include "common/error.h"
#include "model/llama_internal.h"

static dcp_cmd *cmd_of(const dcp_llama_state *s, uint32_t r) { return dcp_step_cmd(s->step, r); }

/* Host side of a chunk: token ids, RoPE angles, KV slots, and the attention rows of every rank. */
static dcp_status prepare_chunk(dcp_llama_state *s, const int32_t *tokens, uint32_t T)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    const uint32_t N = s->w->dcp, G = s->ng, L = m->n_layer;
    const uint32_t half_rot = m->n_rot / 2;
    for (uint32_t t = 0; t < T; t++) {
        s->glens[t] = (uint64_t)s->pos + t + 1; /* causal: row t sees the tokens up to itself */
        s->lens[t] = s->pos + t + 1;
    }
    if (N > 1) {
        const uint32_t seq = 0;
        for (uint32_t i = 0; i < G * L; i++) DCP_TRY(dcp_kv_cache_append(s->caches[i], 1, &seq, &T));
        for (uint32_t i = 0; i < G * L; i++) DCP_TRY(dcp_cp_attn_set_rows(s->attns[i], T, s->seqs, s->glens));
    }
    for (uint32_t r = 0; r < s->w->nl; r++) {
        llama_rank_state *rs = &s->r[r];
        uint32_t *ids = dcp_buffer_map(rs->ids);
        float *cs = dcp_buffer_map(rs->cs);
        for (uint32_t t = 0; t < T; t++) {
            uint32_t pos = s->pos + t;
            ids[t] = (uint32_t)tokens[t];
            for (uint32_t i = 0; i < half_rot; i++) {
                double ang = pos * pow((double)m->rope_freq_base, -2.0 * i / m->n_rot);
                cs[(t * half_rot + i) * 2] = (float)cos(ang);
                cs[(t * half_rot + i) * 2 + 1] = (float)sin(ang);
            }
        }
        for (uint32_t l = 0; l < L; l++) {
            uint32_t *slots = dcp_buffer_map(rs->slots[l]);
            if (N > 1) {
                memcpy(slots, dcp_kv_cache_append_slots(s->caches[l * G + rs->g], rs->gl), (size_t)T * 4);
                continue;
            }
            for (uint32_t t = 0; t < T; t++) slots[t] = s->pos + t; /* identity block table */
            DCP_TRY(dcp_decode_plan_set_rows(T == 1 ? rs->dplans[l] : rs->pplans[l], T, s->lens, s->bt));
        }
    }
    return DCP_OK;
fail:
    return st;
}

/* What a decode step's recording depends on besides buffers fixed at creation: whether it computes
 * the logits and every attention plan's rows, chunking and workspace (the step layer mixes in
 * the communicators' mailboxes). */
static uint64_t decode_key(const dcp_llama_state *s, bool want_logits)
{
    const uint32_t L = s->w->cfg.n_layer;
    uint64_t key = dcp_step_key_mix(DCP_STEP_KEY_SEED, want_logits);
    for (uint32_t l = 0; l < L; l++) {
        if (s->w->dcp > 1) {
            for (uint32_t g = 0; g < s->ng; g++) key = dcp_step_key_mix(key, dcp_cp_attn_key(s->attns[l * s->ng + g]));
        } else {
            for (uint32_t r = 0; r < s->w->nl; r++) key = dcp_step_key_mix(key, dcp_decode_plan_key(s->r[r].dplans[l]));
        }
    }
    return key;
}

/* xn rows [row0, row0 + rows) of rank r = rmsnorm(x) * w, after x += the sum of the pending
 * all-reduce's parts, read in place in rank order, when there is one. The caller clears
 * s->ar_tokens once every rank has recorded its norm. */
static dcp_status norm(dcp_llama_state *s, uint32_t r, dcp_buffer *w, uint32_t row0, uint32_t rows)
{
    const dcp_model_config *m = &s->w->cfg;
    const uint32_t E = m->n_embd;
    llama_rank_state *rs = &s->r[r];
    dcp_cmd *cmd = cmd_of(s, r);
    if (!s->ar_tokens) return dcp_op_rmsnorm(cmd, rs->x, row0 * E, E, w, E, rs->xn, E, rows, m->rms_eps);
    dcp_comm_buf in; /* rank j's part [ar_tokens][E] f32 at in.offset + j * stride */
    uint64_t stride;
    dcp_comm_put_view(s->comm, (int)r, DCP_COLL_ALL_GATHER, (uint64_t)s->ar_tokens * E * 4, &in, &stride);
    return dcp_op_rmsnorm_parts(cmd, rs->x, row0 * E, E, w, E, rs->xn, E, rows, m->rms_eps, in.buffer, in.offset,
                                s->w->tp, (uint32_t)(stride / 4), row0 * E);
}

/* Where a row-parallel matmul writes: straight into the residual (one rank) or into part. */
static dcp_buffer *row_parallel_out(const dcp_llama_state *s, llama_rank_state *rs)
{
    return s->w->tp == 1 ? rs->x : rs->part;
}

static dcp_status embed(dcp_llama_state *s, uint32_t T)
{
    dcp_status st = DCP_OK;
    for (uint32_t r = 0; r < s->w->nl; r++) {
        llama_rank_state *rs = &s->r[r];
        DCP_TRY(dcp_op_get_rows(cmd_of(s, r), &s->w->ranks[r].tok_embd, rs->ids, rs->x, s->w->cfg.n_embd, T));
        dcp_cmd_barrier(cmd_of(s, r)); /* get_rows x -> rmsnorm */
    }
fail:
    return st;
}

static dcp_status attention(dcp_llama_state *s, uint32_t l, uint32_t T)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    const uint32_t E = m->n_embd, D = m->head_dim, nl = s->w->nl;
    for (uint32_t r = 0; r < nl; r++) {
        const llama_rank_weights *rw = &s->w->ranks[r];
        const llama_layer *L = &rw->layers[l];
        llama_rank_state *rs = &s->r[r];
        dcp_cmd *cmd = cmd_of(s, r);
        DCP_TRY(norm(s, r, L->attn_norm, 0, T));
        dcp_cmd_barrier(cmd); /* rmsnorm xn (and x += parts) -> qkv matmul */
        DCP_TRY(dcp_op_matmul(cmd, &L->wqkv, rs->xn, 0, E, rs->qkv, rs->qkv4, T, 0));
        dcp_cmd_barrier(cmd); /* qkv -> rope_store */
        dcp_rope_store_args ra = {T, rw->qh, rw->hkv, D, m->n_rot, rs->qkv4, rs->qkv, rs->slots[l], rs->cs,
                                  rs->q, rs->pools[l]};
        DCP_TRY(dcp_op_rope_store(cmd, &ra));
        dcp_cmd_barrier(cmd); /* q, KV pages -> attention */
        if (s->w->dcp == 1) {
            DCP_TRY(dcp_decode_record(cmd, T == 1 ? rs->dplans[l] : rs->pplans[l], rs->q, 0, rs->o, 0, rs->lse, 0));
            dcp_cmd_barrier(cmd); /* o -> o_proj */
        }
    }
    s->ar_tokens = 0;
    if (s->w->dcp > 1) {
        DCP_TRY(dcp_step_cp_attn(s->step, s->attns + (size_t)l * s->ng, s->ng, s->qv, s->ov, s->lv));
        for (uint32_t r = 0; r < nl; r++) dcp_cmd_barrier(cmd_of(s, r)); /* merged o -> o_proj */
    }
    for (uint32_t r = 0; r < nl; r++) {
        const llama_rank_weights *rw = &s->w->ranks[r];
        llama_rank_state *rs = &s->r[r];
        DCP_TRY(dcp_op_matmul(cmd_of(s, r), &rw->layers[l].wo, rs->o, 0, rw->hq * D, row_parallel_out(s, rs), E, T,
                              s->w->tp == 1));
        dcp_cmd_barrier(cmd_of(s, r)); /* x (residual) or part -> ffn rmsnorm / all-reduce */
    }
fail:
    return st;
}

/* The all-reduce of every rank's part [T][n_embd] f32 (TP > 1): each rank puts its part, then one
 * round; the next norm of every rank sums the parts. */
static dcp_status all_reduce(dcp_llama_state *s, uint32_t T)
{
    dcp_status st = DCP_OK;
    if (s->w->tp == 1) return DCP_OK;
    const uint64_t bytes = (uint64_t)T * s->w->cfg.n_embd * 4;
    for (uint32_t r = 0; r < s->w->nl; r++) DCP_TRY(dcp_step_put_copy(cmd_of(s, r), s->comm, (int)r, s->r[r].part, 0, bytes));
    dcp_comm_xchg x = {s->comm, DCP_COLL_ALL_GATHER, bytes, bytes};
    DCP_TRY(dcp_step_round(s->step, 1, &x));
    s->ar_tokens = T;
fail:
    return st;
}

static dcp_status ffn(dcp_llama_state *s, uint32_t l, uint32_t T)
{
    dcp_status st = DCP_OK;
    const uint32_t E = s->w->cfg.n_embd;
    for (uint32_t r = 0; r < s->w->nl; r++) {
        const llama_rank_weights *rw = &s->w->ranks[r];
        const llama_layer *L = &rw->layers[l];
        llama_rank_state *rs = &s->r[r];
        dcp_cmd *cmd = cmd_of(s, r);
        DCP_TRY(norm(s, r, L->ffn_norm, 0, T));
        dcp_cmd_barrier(cmd); /* xn (and x += parts) -> gate|up matmul */
        DCP_TRY(dcp_op_matmul(cmd, &L->wgu, rs->xn, 0, E, rs->gu, 2 * rw->f, T, 0));
        dcp_cmd_barrier(cmd); /* gu -> swiglu */
        DCP_TRY(dcp_op_swiglu(cmd, rs->gu, 2 * rw->f, rs->h, rw->f_pad, rw->f, T));
        dcp_cmd_barrier(cmd); /* h -> down matmul */
        DCP_TRY(dcp_op_matmul(cmd, &L->wdown, rs->h, 0, rw->f_pad, row_parallel_out(s, rs), E, T, s->w->tp == 1));
        dcp_cmd_barrier(cmd); /* x (residual) or part -> next layer / all-reduce */
    }
    s->ar_tokens = 0;
fail:
    return st;
}

/* Logits of the last row and their argmax, on the first rank held. */
static dcp_status head(dcp_llama_state *s, uint32_t T)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    const llama_rank_weights *rw = &s->w->ranks[0];
    llama_rank_state *rs = &s->r[0];
    dcp_cmd *cmd = cmd_of(s, 0);
    DCP_TRY(norm(s, 0, rw->out_norm, T - 1, 1));
    dcp_cmd_barrier(cmd); /* final norm -> output head */
    DCP_TRY(dcp_op_matmul(cmd, &rw->output, rs->xn, 0, m->n_embd, rs->logits, m->n_vocab, 1, 0));
    dcp_cmd_barrier(cmd); /* logits -> argmax */
    DCP_TRY(dcp_op_argmax(cmd, rs->logits, m->n_vocab, m->n_vocab, 1, rs->next));
    dcp_cmd_barrier_host(cmd); /* logits, next (host-visible) -> host reads after the step */
    s->ar_tokens = 0;
fail:
    return st;
}

dcp_status dcp_llama_forward_chunk(dcp_llama_state *s, const int32_t *tokens, uint32_t T, bool want_logits)
{
    dcp_status st = DCP_OK;
    DCP_TRY(prepare_chunk(s, tokens, T));
    /* Mailboxes for this chunk's all-reduces (grown while every device is idle). */
    if (s->comm) DCP_TRY(dcp_comm_reserve(s->comm, (uint64_t)T * s->w->cfg.n_embd * 4));
    s->ar_tokens = 0;
    bool replayed;
    DCP_TRY(dcp_step_begin(s->step, T == 1 ? decode_key(s, want_logits) : 0, &replayed));
    if (!replayed) {
        DCP_TRY(embed(s, T));
        for (uint32_t l = 0; l < s->w->cfg.n_layer; l++) {
            DCP_TRY(attention(s, l, T));
            DCP_TRY(all_reduce(s, T));
            DCP_TRY(ffn(s, l, T));
            DCP_TRY(all_reduce(s, T));
        }
        if (want_logits) DCP_TRY(head(s, T));
        DCP_TRY(dcp_step_end(s->step));
    }
    s->pos += T;
    s->tokens_run += T;
    return DCP_OK;
fail:
    dcp_step_abort(s->step);
    return st;
}

dcp_status dcp_llama_forward(dcp_llama_state *s, const int32_t *tokens, uint32_t n, float *logits, int32_t *next)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    if (n == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "llama forward: no tokens");
    if ((uint64_t)s->pos + n > s->cfg.n_ctx)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "llama forward: %u tokens at position %u overflow the context of %u tokens", n, s->pos,
                        s->cfg.n_ctx);
    for (uint32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || (uint32_t)tokens[i] >= m->n_vocab)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "llama forward: token %u is id %d, outside the vocabulary of %u",
                            i, tokens[i], m->n_vocab);
    const uint32_t chunk = s->cfg.prefill_chunk;
    for (uint32_t i = 0; i < n; i += chunk) {
        uint32_t T = n - i < chunk ? n - i : chunk;
        DCP_TRY(dcp_llama_forward_chunk(s, tokens + i, T, i + T == n));
    }
    if (logits) memcpy(logits, dcp_buffer_map(s->r[0].logits), (size_t)m->n_vocab * 4);
    if (next) *next = (int32_t)*(const uint32_t *)dcp_buffer_map(s->r[0].next);
    return DCP_OK;
fail:
    return st;
}
