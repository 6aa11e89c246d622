/* A step of the run state (include/dcpvk/model.h) and the recording blocks every architecture
 * uses (src/model/graph.h). A step reads top to bottom: check the rows, append their K/V slots,
 * write the host-visible inputs, then on the step layer: embed, the architecture's layers, the
 * head; the step is recorded once and replayed while its shape stays the same (step_key). */
#include <string.h>

#include "common/error.h"
#include "model/graph.h"

dcp_cmd *dcp_graph_cmd(const dcp_model_state *s, uint32_t i) { return dcp_step_cmd(s->step, i); }

/* ---- host side of a step ------------------------------------------------------------------ */

/* Checks the rows without changing anything; fills s->seq_add (tokens per sequence). */
static dcp_status check_rows(dcp_model_state *s, const dcp_model_row *rows, uint32_t n)
{
    const dcp_model_config *mc = &s->m->cfg;
    const dcp_model_state_config *c = &s->cfg;
    if (n == 0 || n > c->max_rows)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model step: %u rows (allowed 1..%u, the state's max_rows)", n,
                        c->max_rows);
    memset(s->seq_add, 0, c->max_seqs * sizeof *s->seq_add);
    uint32_t outs = 0;
    for (uint32_t i = 0; i < n; i++) {
        const dcp_model_row *r = &rows[i];
        if (r->token < 0 || (uint32_t)r->token >= mc->n_vocab)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model step: row %u has token id %d, outside the vocabulary of %u",
                            i, r->token, mc->n_vocab);
        if (r->seq >= c->max_seqs)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model step: row %u is for sequence %u; the state has slots 0..%u",
                            i, r->seq, c->max_seqs - 1);
        if (s->seq_add[r->seq] && rows[i - 1].seq != r->seq)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "model step: the rows of sequence %u are not consecutive (row %u follows sequence %u)",
                            r->seq, i, rows[i - 1].seq);
        s->seq_add[r->seq]++;
        if ((uint64_t)s->seq_len[r->seq] + s->seq_add[r->seq] > c->n_ctx)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "model step: sequence %u would grow past the context of %u tokens (it holds %u)", r->seq,
                            c->n_ctx, s->seq_len[r->seq]);
        outs += r->logits;
    }
    if (outs > s->max_out)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model step: %u rows want logits; at most %u per step (the state's max_logits)",
                        outs, s->max_out);
    return dcp_graph_check_pages(s, s->seq_add);
}

/* Appends the rows' tokens to every layer's caches and lays out the step: row_seq, row_len
 * (position + 1), out_row, the sequences' new lengths. */
static dcp_status append_rows(dcp_model_state *s, const dcp_model_row *rows, uint32_t n)
{
    dcp_status st = DCP_OK;
    uint32_t runs = 0;
    s->n_out = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (i == 0 || rows[i].seq != rows[i - 1].seq) {
            s->run_seq[runs] = rows[i].seq;
            s->run_count[runs++] = 0;
        }
        s->run_count[runs - 1]++;
        s->row_seq[i] = rows[i].seq;
        s->row_len[i] = (uint64_t)s->seq_len[rows[i].seq] + s->run_count[runs - 1];
        dcp_graph_prefix_record(s, rows[i].seq, (uint32_t)(s->row_len[i] - 1), rows[i].token);
        if (rows[i].logits) s->out_row[s->n_out++] = i;
    }
    /* Every layer's caches hold the same pages (identical allocations): the checked pages fit. */
    for (uint32_t k = 0; k < s->ng * s->m->cfg.n_layer; k++)
        DCP_TRY(dcp_kv_cache_append(s->caches[k], runs, s->run_seq, s->run_count));
    for (uint32_t k = 0; k < runs; k++) s->seq_len[s->run_seq[k]] += s->run_count[k];
    s->rows = n;
fail:
    return st;
}

/* Token ids, RoPE angles (the model's scaling, src/model/rope.c) and KV slots of every rank. */
static void write_inputs(dcp_model_state *s, const dcp_model_row *rows)
{
    const dcp_model_config *mc = &s->m->cfg;
    const uint32_t P = s->rope_pairs, n = s->rows;
    float *cs0 = dcp_buffer_map(s->r[0].cs);
    for (uint32_t t = 0; t < n; t++) s->row_pos[t] = (uint32_t)(s->row_len[t] - 1);
    dcp_rope_params rp;
    dcp_rope_params_from_config(mc, &rp);
    rp.freq_factors = s->m->rope_freqs;
    dcp_rope_cs(&rp, s->row_pos, n, cs0);
    for (uint32_t i = 0; i < s->m->nl; i++) {
        dcp_graph_rank *r = &s->r[i];
        uint32_t *ids = dcp_buffer_map(r->ids);
        for (uint32_t t = 0; t < n; t++) ids[t] = (uint32_t)rows[t].token;
        if (i > 0) memcpy(dcp_buffer_map(r->cs), cs0, (size_t)n * P * 8);
        for (uint32_t l = 0; l < mc->n_layer; l++)
            memcpy(dcp_buffer_map(r->slots[l]), dcp_kv_cache_append_slots(s->caches[l * s->ng + r->g], r->gl),
                   (size_t)n * 4);
    }
}

void dcp_graph_rows_tables(dcp_model_state *s, uint32_t l, uint32_t i)
{
    const dcp_graph_rank *r = &s->r[i];
    const dcp_kv_cache *kc = s->caches[l * s->ng + r->g];
    for (uint32_t t = 0; t < s->rows; t++) {
        s->lens[t] = (uint32_t)(s->m->dcp == 1 ? s->row_len[t]
                                               : dcp_kv_local_length(s->row_len[t], r->gr, s->m->dcp, s->cfg.interleave));
        memcpy(s->bt + (size_t)t * s->max_blocks, dcp_kv_cache_block_table(kc, r->gl, s->row_seq[t]),
               (size_t)s->max_blocks * 4);
    }
}

/* What a step's recording depends on besides buffers fixed at creation and the host-visible
 * inputs: its rows, the rows with logits, the attention plans (the step layer adds the
 * communicators' mailboxes). */
static uint64_t step_key(const dcp_model_state *s)
{
    uint64_t key = dcp_step_key_mix(DCP_STEP_KEY_SEED, s->rows);
    key = dcp_step_key_mix(key, s->n_out);
    for (uint32_t k = 0; k < s->n_out; k++) key = dcp_step_key_mix(key, s->out_row[k]);
    return dcp_step_key_mix(key, s->m->ops->key(s));
}

/* ---- recording blocks --------------------------------------------------------------------- */

static dcp_status embed(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    for (uint32_t i = 0; i < s->m->nl; i++) {
        dcp_graph_rank *r = &s->r[i];
        DCP_TRY(dcp_op_get_rows(dcp_graph_cmd(s, i), &(dcp_get_rows_args){.w = &s->m->ranks[i].tok_embd, .ids = r->ids,
                                                                          .y = r->x, .y_stride = s->m->cfg.n_embd,
                                                                          .tokens = s->rows}));
        dcp_cmd_barrier(dcp_graph_cmd(s, i)); /* get_rows x -> rmsnorm */
    }
fail:
    return st;
}

dcp_status dcp_graph_norm(dcp_model_state *s, uint32_t i, dcp_buffer *w)
{
    const dcp_model_config *mc = &s->m->cfg;
    const uint32_t E = mc->n_embd;
    dcp_graph_rank *r = &s->r[i];
    dcp_cmd *cmd = dcp_graph_cmd(s, i);
    const dcp_rmsnorm_args norm = {.x = r->x, .x_stride = E, .w = w, .n = E, .y = r->xn, .y_stride = E,
                                   .tokens = s->rows, .eps = mc->rms_eps};
    if (!s->ar_tokens) return dcp_op_rmsnorm(cmd, &norm);
    dcp_comm_buf in; /* rank j's part [ar_tokens][E] f32 at in.offset + j * stride */
    uint64_t stride;
    dcp_comm_put_view(s->comm, (int)i, DCP_COLL_ALL_GATHER, (uint64_t)s->ar_tokens * E * 4, &in, &stride);
    return dcp_op_rmsnorm_parts(cmd, &(dcp_rmsnorm_parts_args){.norm = norm, .p = in.buffer, .p_offset = in.offset,
                                                               .parts = s->m->tp,
                                                               .part_stride = (uint32_t)(stride / 4)});
}

void dcp_graph_norm_done(dcp_model_state *s) { s->ar_tokens = 0; }

dcp_status dcp_graph_norm_matmul(dcp_model_state *s, uint32_t i, dcp_buffer *w, dcp_matmul_args *a)
{
    const dcp_model_config *mc = &s->m->cfg;
    dcp_graph_rank *r = &s->r[i];
    a->x_stride = mc->n_embd;
    a->x_offset = 0;
    /* x is the whole residual at one rank: the norm in the matmul's load where that pays */
    if (s->m->tp == 1 && dcp_matmul_norm_pays(r->dev, a->w)) {
        a->x = r->x;
        a->norm = w;
        a->norm_eps = mc->rms_eps;
        return DCP_OK;
    }
    a->x = r->xn;
    dcp_status st = dcp_graph_norm(s, i, w);
    dcp_cmd_barrier(dcp_graph_cmd(s, i)); /* rmsnorm xn (and x += parts) -> the matmul */
    return st;
}

dcp_buffer *dcp_graph_row_parallel_out(const dcp_model_state *s, uint32_t i)
{
    return s->m->tp == 1 ? s->r[i].x : s->r[i].part;
}

bool dcp_graph_row_parallel_accumulate(const dcp_model_state *s) { return s->m->tp == 1; }

dcp_status dcp_graph_all_reduce(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    if (s->m->tp == 1) return DCP_OK;
    const uint64_t bytes = (uint64_t)s->rows * s->m->cfg.n_embd * 4;
    for (uint32_t i = 0; i < s->m->nl; i++)
        DCP_TRY(dcp_step_put_copy(dcp_graph_cmd(s, i), s->comm, (int)i, s->r[i].part, 0, bytes));
    dcp_comm_xchg x = {s->comm, DCP_COLL_ALL_GATHER, bytes, bytes};
    DCP_TRY(dcp_step_round(s->step, 1, &x));
    s->ar_tokens = s->rows;
fail:
    return st;
}

dcp_buffer *dcp_graph_rope(const dcp_model_state *s, uint32_t i) { return s->r[i].cs; }

/* The dense FFN of rank i from the input of a (x, x_stride, optionally its norm). */
static dcp_status dense_ffn(dcp_model_state *s, uint32_t i, dcp_matmul_args a, const dcp_matrix *w_down, uint32_t f,
                            dcp_buffer *gu, dcp_buffer *h)
{
    dcp_status st = DCP_OK;
    dcp_cmd *cmd = dcp_graph_cmd(s, i);
    const uint32_t T = s->rows, E = s->m->cfg.n_embd, f_pad = w_down->k;
    a.tokens = T;
    if (dcp_matmul_can_glu(a.w)) { /* one dispatch: the SwiGLU in the gate|up matmul's store */
        a.y = h;
        a.y_stride = f_pad;
        a.glu = 1;
        DCP_TRY(dcp_op_matmul(cmd, &a));
    } else { /* gate and up of different types (two parts): the product, then swiglu */
        a.y = gu;
        a.y_stride = 2 * f;
        DCP_TRY(dcp_op_matmul(cmd, &a));
        dcp_cmd_barrier(cmd); /* gate|up -> swiglu */
        DCP_TRY(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = gu, .x_stride = 2 * f, .y = h, .y_stride = f_pad, .n = f,
                                                      .tokens = T}));
    }
    dcp_cmd_barrier(cmd); /* h -> down */
    DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = w_down, .x = h, .x_stride = f_pad,
                                                  .y = dcp_graph_row_parallel_out(s, i), .y_stride = E, .tokens = T,
                                                  .accumulate = dcp_graph_row_parallel_accumulate(s)}));
fail:
    return st;
}

dcp_status dcp_graph_dense_ffn(dcp_model_state *s, uint32_t i, const dcp_matrix *w_gu, const dcp_matrix *w_down,
                               uint32_t f, dcp_buffer *gu, dcp_buffer *h)
{
    return dense_ffn(s, i, (dcp_matmul_args){.w = w_gu, .x = s->r[i].xn, .x_stride = s->m->cfg.n_embd}, w_down, f, gu,
                     h);
}

dcp_status dcp_graph_norm_ffn(dcp_model_state *s, uint32_t i, dcp_buffer *norm, const dcp_matrix *w_gu,
                              const dcp_matrix *w_down, uint32_t f, dcp_buffer *gu, dcp_buffer *h)
{
    dcp_matmul_args a = {.w = w_gu};
    dcp_status st = dcp_graph_norm_matmul(s, i, norm, &a);
    if (st != DCP_OK) return st;
    return dense_ffn(s, i, a, w_down, f, gu, h);
}

dcp_status dcp_graph_cp_set_rows(dcp_model_state *s, dcp_cp_attn *const *attns)
{
    for (uint32_t k = 0; k < s->m->cfg.n_layer * s->ng; k++) {
        dcp_status st = dcp_cp_attn_set_rows(attns[k], s->rows, s->row_seq, s->row_len);
        if (st != DCP_OK) return dcp_fail_context(st, "layer %u", k / s->ng);
    }
    return DCP_OK;
}

uint64_t dcp_graph_cp_key(const dcp_model_state *s, dcp_cp_attn *const *attns, uint64_t key)
{
    for (uint32_t k = 0; k < s->m->cfg.n_layer * s->ng; k++) key = dcp_step_key_mix(key, dcp_cp_attn_key(attns[k]));
    return key;
}

/* The rows with logits, on the first rank held: the final norm (with the last all-reduce's sum; at
 * one rank in the output head's load), the wanted rows gathered, the output head and the argmax of
 * each. */
static dcp_status head(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *mc = &s->m->cfg;
    const uint64_t E = mc->n_embd;
    const dcp_graph_rank_weights *rw = &s->m->ranks[0];
    dcp_graph_rank *r = &s->r[0];
    dcp_cmd *cmd = dcp_graph_cmd(s, 0);
    /* One rank: the wanted rows of x gathered, the final norm in the output matmul's load; else the
     * norm (with the last all-reduce's sum) of every row, then its wanted rows gathered. */
    dcp_matmul_args a = {.w = &rw->output};
    DCP_TRY(dcp_graph_norm_matmul(s, 0, rw->out_norm, &a));
    dcp_graph_norm_done(s);
    for (uint32_t k = 0; k < s->n_out; k++)
        DCP_TRY(dcp_cmd_copy(cmd, a.x, (uint64_t)s->out_row[k] * E * 4, r->xo, (uint64_t)k * E * 4, E * 4));
    dcp_cmd_barrier(cmd); /* gathered rows -> output head */
    a.x = r->xo;
    a.y = r->logits;
    a.y_stride = mc->n_vocab;
    a.tokens = s->n_out;
    DCP_TRY(dcp_op_matmul(cmd, &a));
    dcp_cmd_barrier(cmd); /* logits -> argmax */
    DCP_TRY(dcp_op_argmax(cmd, &(dcp_argmax_args){.x = r->logits, .n = mc->n_vocab, .stride = mc->n_vocab,
                                                  .rows = s->n_out, .out = r->next}));
    dcp_cmd_barrier_host(cmd); /* logits, next (host-visible) -> host reads after the step */
fail:
    return st;
}

static dcp_status record_step(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    s->ar_tokens = 0;
    DCP_TRY(embed(s));
    for (uint32_t l = 0; l < s->m->cfg.n_layer; l++) {
        DCP_TRY(s->m->ops->attention(s, l));
        DCP_TRY(dcp_graph_all_reduce(s));
        DCP_TRY(s->m->ops->ffn(s, l));
        DCP_TRY(dcp_graph_all_reduce(s));
    }
    if (s->n_out) DCP_TRY(head(s));
fail:
    return st;
}

dcp_status dcp_model_state_step(dcp_model_state *s, const dcp_model_row *rows, uint32_t n, float *logits,
                                int32_t *next)
{
    dcp_status st = DCP_OK;
    if ((st = check_rows(s, rows, n)) != DCP_OK) return st;
    DCP_TRY(dcp_graph_make_room(s, s->seq_add));
    DCP_TRY(append_rows(s, rows, n));
    write_inputs(s, rows);
    DCP_TRY(s->m->ops->set_rows(s));
    bool replayed;
    DCP_TRY(dcp_step_begin(s->step, step_key(s), &replayed));
    if (!replayed) {
        DCP_TRY(record_step(s));
        DCP_TRY(dcp_step_end(s->step));
    }
    const uint32_t V = s->m->cfg.n_vocab;
    if (logits && s->n_out) memcpy(logits, dcp_buffer_map(s->r[0].logits), (size_t)s->n_out * V * 4);
    if (next)
        for (uint32_t k = 0; k < s->n_out; k++) next[k] = (int32_t)((const uint32_t *)dcp_buffer_map(s->r[0].next))[k];
    s->tokens_run += n;
    return DCP_OK;
fail:
    dcp_step_abort(s->step);
    return st;
}

dcp_status dcp_model_state_forward(dcp_model_state *s, const int32_t *tokens, uint32_t n, float *logits,
                                   int32_t *next)
{
    dcp_status st = DCP_OK;
    if (n == 0) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model forward: no tokens");
    if ((uint64_t)s->seq_len[0] + n > s->cfg.n_ctx)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "model forward: %u tokens at position %u overflow the context of %u tokens", n, s->seq_len[0],
                        s->cfg.n_ctx);
    const uint32_t chunk = s->cfg.max_rows;
    for (uint32_t i = 0; i < n; i += chunk) {
        uint32_t T = n - i < chunk ? n - i : chunk;
        for (uint32_t t = 0; t < T; t++)
            s->fwd_rows[t] = (dcp_model_row){.token = tokens[i + t], .seq = 0, .logits = i + t == n - 1};
        DCP_TRY(dcp_model_state_step(s, s->fwd_rows, T, i + T == n ? logits : NULL, i + T == n ? next : NULL));
    }
fail:
    return st;
}
