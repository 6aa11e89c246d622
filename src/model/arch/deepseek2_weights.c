/* deepseek2 weights: tensor description and checks, tensor-parallel host slices, upload
 * (see src/model/arch/deepseek2_weights.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/arch/deepseek2_weights.h"
#include "model/load.h"

typedef unsigned long long ull;

/* ---- description and validation ------------------------------------------------------------- */

/* Finds `name` (formatted with the layer) with shape {ne0, ne1, ne2} (trailing 1s for fewer
 * dims). optional: a missing tensor gives *out = NULL. */
static dcp_status tfind(const dcp_gguf *g, int layer, const char *suffix, uint64_t ne0, uint64_t ne1, uint64_t ne2,
                        int optional, const dcp_gguf_tensor **out)
{
    char name[96];
    if (layer >= 0) snprintf(name, sizeof name, "blk.%d.%s", layer, suffix);
    else snprintf(name, sizeof name, "%s", suffix);
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, name);
    *out = NULL;
    if (!t) {
        if (optional) return DCP_OK;
        return dcp_fail(DCP_ERR_FORMAT, "%s: tensor %s is missing", dcp_gguf_name(g), name);
    }
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != ne2 || t->ne[3] != 1)
        return dcp_fail(DCP_ERR_FORMAT, "%s: tensor %s has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu, %llu]",
                        dcp_gguf_name(g), name, (ull)t->ne[0], (ull)t->ne[1], (ull)t->ne[2], (ull)t->ne[3], (ull)ne0,
                        (ull)ne1, (ull)ne2);
    if (!dcp_ggml_type_supported(t->type)) {
        const char *tn = dcp_ggml_type_name(t->type);
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tensor %s has type %s; supported: " DCP_GGML_SUPPORTED_LIST,
                        dcp_gguf_name(g), name, tn ? tn : "unknown");
    }
    *out = t;
    return DCP_OK;
}

dcp_status dcp_ds2_tensors_find(const dcp_gguf *g, const dcp_model_config *c, dcp_ds2_tensors *out)
{
    dcp_status st = DCP_OK;
    memset(out, 0, sizeof *out);
    if (c->arch != DCP_ARCH_DEEPSEEK2)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: architecture %s is not deepseek2", dcp_gguf_name(g), c->arch_name);
    const uint64_t E = c->n_embd, H = c->n_head, R = c->kv_lora_rank, P = c->n_rot, N = c->head_dim_nope,
                   V = c->head_dim_v_mla, QL = c->q_lora_rank, X = c->n_expert, FE = c->n_ff_exp,
                   FS = (uint64_t)c->n_ff_exp * c->n_expert_shared;
    dcp_ds2_tensors t = {.n_layer = c->n_layer, .legacy_kv_b = !c->mla_layout};
    t.layers = calloc(c->n_layer, sizeof *t.layers);
    if (!t.layers) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    DCP_TRY(tfind(g, -1, "token_embd.weight", E, c->n_vocab, 1, 0, &t.tok_embd));
    DCP_TRY(tfind(g, -1, "output_norm.weight", E, 1, 1, 0, &t.output_norm));
    DCP_TRY(tfind(g, -1, "output.weight", E, c->n_vocab, 1, 1, &t.output));
    if (!t.output) t.output = t.tok_embd;
    for (uint32_t l = 0; l < c->n_layer; l++) {
        dcp_ds2_layer_tensors *L = &t.layers[l];
        const int il = (int)l;
        DCP_TRY(tfind(g, il, "attn_norm.weight", E, 1, 1, 0, &L->attn_norm));
        if (QL) {
            DCP_TRY(tfind(g, il, "attn_q_a.weight", E, QL, 1, 0, &L->q_a));
            DCP_TRY(tfind(g, il, "attn_q_a_norm.weight", QL, 1, 1, 0, &L->q_a_norm));
            DCP_TRY(tfind(g, il, "attn_q_b.weight", QL, H * (N + P), 1, 0, &L->q_b));
        } else {
            DCP_TRY(tfind(g, il, "attn_q.weight", E, H * (N + P), 1, 0, &L->q));
        }
        DCP_TRY(tfind(g, il, "attn_kv_a_mqa.weight", E, R + P, 1, 0, &L->kv_a));
        DCP_TRY(tfind(g, il, "attn_kv_a_norm.weight", R, 1, 1, 0, &L->kv_a_norm));
        if (c->mla_layout) {
            DCP_TRY(tfind(g, il, "attn_k_b.weight", N, R, H, 0, &L->k_b));
            DCP_TRY(tfind(g, il, "attn_v_b.weight", R, V, H, 0, &L->v_b));
        } else {
            DCP_TRY(tfind(g, il, "attn_kv_b.weight", R, H * (N + V), 1, 0, &L->kv_b));
        }
        DCP_TRY(tfind(g, il, "attn_output.weight", H * V, E, 1, 0, &L->attn_output));
        DCP_TRY(tfind(g, il, "ffn_norm.weight", E, 1, 1, 0, &L->ffn_norm));
        if (l < c->n_layer_dense_lead) {
            DCP_TRY(tfind(g, il, "ffn_gate.weight", E, c->n_ff, 1, 0, &L->ffn_gate));
            DCP_TRY(tfind(g, il, "ffn_up.weight", E, c->n_ff, 1, 0, &L->ffn_up));
            DCP_TRY(tfind(g, il, "ffn_down.weight", c->n_ff, E, 1, 0, &L->ffn_down));
            continue;
        }
        L->moe = 1;
        DCP_TRY(tfind(g, il, "ffn_gate_inp.weight", E, X, 1, 0, &L->gate_inp));
        DCP_TRY(tfind(g, il, "exp_probs_b.bias", X, 1, 1, 1, &L->exp_probs_b));
        DCP_TRY(tfind(g, il, "ffn_gate_exps.weight", E, FE, X, 0, &L->gate_exps));
        DCP_TRY(tfind(g, il, "ffn_up_exps.weight", E, FE, X, 0, &L->up_exps));
        DCP_TRY(tfind(g, il, "ffn_down_exps.weight", FE, E, X, 0, &L->down_exps));
        if (FS) {
            DCP_TRY(tfind(g, il, "ffn_gate_shexp.weight", E, FS, 1, 0, &L->gate_shexp));
            DCP_TRY(tfind(g, il, "ffn_up_shexp.weight", E, FS, 1, 0, &L->up_shexp));
            DCP_TRY(tfind(g, il, "ffn_down_shexp.weight", FS, E, 1, 0, &L->down_shexp));
        }
    }
    *out = t;
    return DCP_OK;
fail:
    free(t.layers);
    return st;
}

void dcp_ds2_tensors_free(dcp_ds2_tensors *t)
{
    if (!t) return;
    free(t->layers);
    memset(t, 0, sizeof *t);
}

/* ---- tensor-parallel slices ------------------------------------------------------------------ */

/* Rows [first, first + count) of `total` split over tp ranks: the first total % tp ranks get one more. */
static void split(uint32_t total, uint32_t tp, uint32_t rank, uint32_t *first, uint32_t *count)
{
    uint32_t base = total / tp, rem = total % tp;
    *count = base + (rank < rem ? 1 : 0);
    *first = rank * base + (rank < rem ? rank : rem);
}

dcp_status dcp_ds2_shard_for_rank(const dcp_model_config *c, uint32_t tp, uint32_t rank, uint32_t dcp, int q_replicate,
                                  dcp_ds2_shard *out)
{
    if (tp == 0 || rank >= tp || c->n_head % tp)
        return dcp_fail(DCP_ERR_CONFIG, "deepseek2: tensor-parallel size %u must divide the %u heads (rank %u)", tp,
                        c->n_head, rank);
    if (dcp == 0 || tp % dcp)
        return dcp_fail(DCP_ERR_CONFIG, "deepseek2: decode-context-parallel size %u must divide the tensor-parallel "
                        "size %u (DCP groups are runs of TP ranks; MLA has one latent head, so dcp <= tp)", dcp, tp);
    if ((c->n_layer_dense_lead && c->n_ff < tp) || (c->n_expert && c->n_ff_exp < tp))
        return dcp_fail(DCP_ERR_CONFIG, "deepseek2: FFN widths %u (dense) / %u (expert) are narrower than "
                        "tensor-parallel size %u", c->n_ff, c->n_ff_exp, tp);
    dcp_ds2_shard s;
    const uint32_t hl = c->n_head / tp;
    s.o_head0 = rank * hl;
    s.o_heads = hl;
    s.q_head0 = s.o_head0;
    s.q_heads = hl;
    if (q_replicate && dcp > 1) {
        s.q_head0 = rank / dcp * dcp * hl;
        s.q_heads = dcp * hl;
    }
    split(c->n_layer_dense_lead ? c->n_ff : 0, tp, rank, &s.ff0, &s.ff);
    split(c->n_expert ? c->n_ff_exp : 0, tp, rank, &s.fe0, &s.fe);
    split(c->n_expert ? c->n_ff_exp * c->n_expert_shared : 0, tp, rank, &s.fs0, &s.fs);
    *out = s;
    return DCP_OK;
}

static uint32_t pad4(uint32_t n) { return (n + 3) / 4 * 4; }

static uint64_t row_bytes(dcp_ggml_type type, uint64_t k)
{
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    return k / be * bb;
}

/* One run of rows of a tensor viewed as ne1 * ne2 rows of ne0 elements. */
typedef struct part {
    const dcp_gguf_tensor *t;
    uint64_t row0;
    uint32_t rows;
} part;

enum {
    TAKE_F32 = 1,    /* held as F32 whatever the type (the router's logits) */
    TAKE_WINDOW = 2, /* a row-parallel matrix (dcp_op_matmul, dcp_op_moe_down): columns that cut
                      * the blocks take a window */
};

/* Marks out as a quantized tensor t held as F32 for `why` (dcp_model_fallbacks); the caller sets
 * out->native_bytes. */
static void mark_expanded(dcp_ds2_host_matrix *out, const dcp_gguf_tensor *t, const char *why)
{
    out->expanded = 1;
    snprintf(out->expanded_why, sizeof out->expanded_why, "%s (%s): %s", t->name, dcp_ggml_type_name(t->type), why);
}

/* Concatenates parts (rows), columns [c0, c0 + nc) zero-padded to k_pad. Stays in the tensors'
 * type when they share it, TAKE_F32 is not asked and the columns fall on its blocks; with
 * TAKE_WINDOW, columns that cut the blocks are held as the whole blocks covering them,
 * [floor(c0 / B), ceil((c0 + nc) / B)), with a window of nc columns (out->win_*; the loader's
 * dcp_load_slice_layout, as llama's slices); else F32, and
 * out->expanded says that a quantized type was expanded (dcp_model_fallbacks). */
static dcp_status take(const part *p, uint32_t np, uint32_t c0, uint32_t nc, uint32_t k_pad, unsigned flags,
                       dcp_ds2_host_matrix *out)
{
    dcp_status st = DCP_OK;
    float *row = NULL;
    memset(out, 0, sizeof *out);
    dcp_ggml_type type = p[0].t->type;
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    int same = 1;
    uint64_t rows = 0;
    for (uint32_t i = 0; i < np; i++) {
        same = same && p[i].t->type == type;
        rows += p[i].rows;
    }
    const dcp_slice_layout lay = dcp_load_slice_layout(type, c0, nc, k_pad);
    const int native = same && !(flags & TAKE_F32) && (!lay.cols || (flags & TAKE_WINDOW));
    const uint32_t src_c0 = c0 - lay.col0, held = native ? lay.held : k_pad, copy = lay.cols ? lay.held : nc;
    if (native && lay.cols) {
        out->win_k = k_pad;
        out->win_col0 = lay.col0;
        out->win_cols = lay.cols;
    }
    if (!native) {
        if (!(flags & TAKE_F32) && type != DCP_GGML_TYPE_F32) {
            mark_expanded(out, p[0].t, same ? "columns cut its blocks" : "fused parts of different types");
            for (uint32_t i = 0; i < np; i++)
                out->native_bytes += (uint64_t)p[i].rows * row_bytes(p[i].t->type, (uint64_t)(nc + be - 1) / be * be);
        }
        type = DCP_GGML_TYPE_F32;
    }
    uint64_t dst_row = row_bytes(type, held);
    out->data = calloc(rows ? rows : 1, dst_row);
    if (!out->data) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory slicing %s", p[0].t->name);
    out->type = type;
    out->rows = (uint32_t)rows;
    out->k = held;
    uint64_t r_out = 0;
    for (uint32_t i = 0; i < np; i++) {
        const dcp_gguf_tensor *t = p[i].t;
        uint64_t src_row = row_bytes(t->type, t->ne[0]);
        const uint8_t *src = t->data;
        if (native) {
            for (uint32_t r = 0; r < p[i].rows; r++, r_out++)
                memcpy(out->data + r_out * dst_row, src + (p[i].row0 + r) * src_row + row_bytes(type, src_c0),
                       row_bytes(type, copy));
            continue;
        }
        free(row);
        uint32_t tbe, tbb;
        dcp_ggml_type_block(t->type, &tbe, &tbb);
        row = malloc(((uint64_t)nc + 2ull * tbe) * sizeof *row);
        if (!row) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory slicing %s", t->name);
            goto fail;
        }
        for (uint32_t r = 0; r < p[i].rows; r++, r_out++)
            DCP_TRY(dcp_load_row_f32(t, p[i].row0 + r, c0, nc, (float *)(out->data + r_out * dst_row), row));
    }
    for (uint32_t i = 0; i < np; i++) out->file_bytes += (uint64_t)p[i].rows * dcp_load_cols_bytes(p[i].t->type, c0, nc);
    free(row);
    return DCP_OK;
fail:
    free(row);
    free(out->data);
    memset(out, 0, sizeof *out);
    return dcp_fail_context(st, "slicing tensor %s", p[0].t->name);
}

/* Rows [row0, row0 + rows) of one tensor, whole width. */
static dcp_status take_rows(const dcp_gguf_tensor *t, uint64_t row0, uint32_t rows, dcp_ds2_host_matrix *out)
{
    part p = {t, row0, rows};
    return take(&p, 1, 0, (uint32_t)t->ne[0], (uint32_t)t->ne[0], 0, out);
}

static dcp_status vec_f32(const dcp_gguf_tensor *t, float **out)
{
    *out = malloc(t->n_elements * sizeof **out);
    if (!*out) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory reading %s", t->name);
    dcp_status st = dcp_ggml_to_f32(t->type, t->data, *out, t->n_elements);
    if (st) {
        free(*out);
        *out = NULL;
        return dcp_fail_context(st, "reading tensor %s", t->name);
    }
    return DCP_OK;
}

/* k_b [heads R][N] from the legacy attn_kv_b: W_UK[h][r][n] = kv_b[h (N+V) + n][r]. Stays in
 * kv_b's type for F32 / F16 / BF16 (element copies), else F32: the transpose runs across a block
 * type's blocks, so a quantized kv_b's k_b is expanded (counted in dcp_model_fallbacks). */
static dcp_status legacy_k_b(const dcp_model_config *c, const dcp_gguf_tensor *kvb, uint32_t head0, uint32_t heads,
                             dcp_ds2_host_matrix *out)
{
    dcp_status st = DCP_OK;
    const uint32_t R = c->kv_lora_rank, N = c->head_dim_nope, V = c->head_dim_v_mla;
    memset(out, 0, sizeof *out);
    dcp_ggml_type type = kvb->type;
    if (type != DCP_GGML_TYPE_F32 && type != DCP_GGML_TYPE_F16 && type != DCP_GGML_TYPE_BF16) type = DCP_GGML_TYPE_F32;
    float *rowsf = malloc((uint64_t)N * R * sizeof *rowsf), *tr = malloc((uint64_t)R * N * sizeof *tr);
    out->data = malloc((uint64_t)heads * R * row_bytes(type, N));
    if (!rowsf || !tr || !out->data) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory splitting %s", kvb->name);
        goto fail;
    }
    out->type = type;
    out->rows = heads * R;
    out->k = N;
    out->file_bytes = (uint64_t)heads * N * row_bytes(kvb->type, R);
    if (type != kvb->type) {
        mark_expanded(out, kvb, "k_b is its transpose, across its blocks");
        out->native_bytes = out->file_bytes;
    }
    uint64_t src_row = row_bytes(kvb->type, R);
    for (uint32_t h = 0; h < heads; h++) {
        const uint8_t *src = (const uint8_t *)kvb->data + (uint64_t)(head0 + h) * (N + V) * src_row;
        for (uint32_t n = 0; n < N; n++) DCP_TRY(dcp_ggml_to_f32(kvb->type, src + n * src_row, rowsf + (uint64_t)n * R, R));
        for (uint32_t r = 0; r < R; r++)
            for (uint32_t n = 0; n < N; n++) tr[(uint64_t)r * N + n] = rowsf[(uint64_t)n * R + r];
        DCP_TRY(dcp_ggml_from_f32(type, tr, out->data + (uint64_t)h * R * row_bytes(type, N), (uint64_t)R * N));
    }
    free(rowsf);
    free(tr);
    return DCP_OK;
fail:
    free(rowsf);
    free(tr);
    free(out->data);
    memset(out, 0, sizeof *out);
    return dcp_fail_context(st, "splitting tensor %s into k_b", kvb->name);
}

uint64_t dcp_ds2_layer_file_bytes(const dcp_ds2_layer_host *h)
{
    const dcp_ds2_host_matrix *ms[] = {&h->wq, &h->wq_a, &h->wkv_a, &h->wk_b, &h->wv_b, &h->wo, &h->w_gu, &h->w_down,
                                       &h->gate_inp, &h->w_gu_exps, &h->w_down_exps, &h->w_gu_sh, &h->w_down_sh};
    uint64_t b = 0;
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) b += ms[k]->file_bytes;
    return b;
}

dcp_status dcp_ds2_layer_slice(const dcp_model_config *c, const dcp_ds2_tensors *t, uint32_t layer,
                               const dcp_ds2_shard *s, dcp_ds2_layer_host *out)
{
    dcp_status st = DCP_OK;
    memset(out, 0, sizeof *out);
    if (layer >= t->n_layer)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "deepseek2: layer %u of %u", layer, t->n_layer);
    const dcp_ds2_layer_tensors *L = &t->layers[layer];
    const uint32_t E = c->n_embd, H = c->n_head, R = c->kv_lora_rank, P = c->n_rot, N = c->head_dim_nope,
                   V = c->head_dim_v_mla, X = c->n_expert, FE = c->n_ff_exp;
    if (s->q_head0 + s->q_heads > H || s->o_head0 + s->o_heads > H || !s->q_heads || !s->o_heads)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "deepseek2: shard heads [%u, +%u) / [%u, +%u) outside %u heads",
                        s->q_head0, s->q_heads, s->o_head0, s->o_heads, H);
    out->moe = L->moe;
    DCP_TRY(vec_f32(L->attn_norm, &out->attn_norm));
    DCP_TRY(vec_f32(L->ffn_norm, &out->ffn_norm));
    DCP_TRY(vec_f32(L->kv_a_norm, &out->kv_a_norm));
    const uint32_t qw = N + P;
    if (c->q_lora_rank) {
        DCP_TRY(take_rows(L->q_b, (uint64_t)s->q_head0 * qw, s->q_heads * qw, &out->wq));
        DCP_TRY(take_rows(L->q_a, 0, c->q_lora_rank, &out->wq_a));
        DCP_TRY(vec_f32(L->q_a_norm, &out->q_a_norm));
    } else {
        DCP_TRY(take_rows(L->q, (uint64_t)s->q_head0 * qw, s->q_heads * qw, &out->wq));
    }
    DCP_TRY(take_rows(L->kv_a, 0, R + P, &out->wkv_a));
    if (L->k_b) {
        DCP_TRY(take_rows(L->k_b, (uint64_t)s->q_head0 * R, s->q_heads * R, &out->wk_b));
        DCP_TRY(take_rows(L->v_b, (uint64_t)s->o_head0 * V, s->o_heads * V, &out->wv_b));
    } else {
        DCP_TRY(legacy_k_b(c, L->kv_b, s->q_head0, s->q_heads, &out->wk_b));
        part *pv = calloc(s->o_heads, sizeof *pv);
        if (!pv) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        for (uint32_t h = 0; h < s->o_heads; h++)
            pv[h] = (part){L->kv_b, (uint64_t)(s->o_head0 + h) * (N + V) + N, V};
        st = take(pv, s->o_heads, 0, R, R, 0, &out->wv_b);
        free(pv);
        if (st) goto fail;
    }
    {
        part po = {L->attn_output, 0, E};
        DCP_TRY(take(&po, 1, s->o_head0 * V, s->o_heads * V, pad4(s->o_heads * V), TAKE_WINDOW, &out->wo));
    }
    if (!L->moe) {
        part pgu[2] = {{L->ffn_gate, s->ff0, s->ff}, {L->ffn_up, s->ff0, s->ff}};
        DCP_TRY(take(pgu, 2, 0, E, E, 0, &out->w_gu));
        part pd = {L->ffn_down, 0, E};
        DCP_TRY(take(&pd, 1, s->ff0, s->ff, pad4(s->ff), TAKE_WINDOW, &out->w_down));
        return DCP_OK;
    }
    {
        part pr = {L->gate_inp, 0, X};
        DCP_TRY(take(&pr, 1, 0, E, E, TAKE_F32, &out->gate_inp));
    }
    if (L->exp_probs_b) DCP_TRY(vec_f32(L->exp_probs_b, &out->exp_probs_b));
    part *pe = calloc(2 * (size_t)X, sizeof *pe);
    if (!pe) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (uint32_t e = 0; e < X; e++) {
        pe[2 * e] = (part){L->gate_exps, (uint64_t)e * FE + s->fe0, s->fe};
        pe[2 * e + 1] = (part){L->up_exps, (uint64_t)e * FE + s->fe0, s->fe};
    }
    st = take(pe, 2 * X, 0, E, E, 0, &out->w_gu_exps);
    if (!st) {
        for (uint32_t e = 0; e < X; e++) pe[e] = (part){L->down_exps, (uint64_t)e * E, E};
        st = take(pe, X, s->fe0, s->fe, pad4(s->fe), TAKE_WINDOW, &out->w_down_exps);
    }
    free(pe);
    if (st) goto fail;
    if (L->gate_shexp && s->fs) {
        part psh[2] = {{L->gate_shexp, s->fs0, s->fs}, {L->up_shexp, s->fs0, s->fs}};
        DCP_TRY(take(psh, 2, 0, E, E, 0, &out->w_gu_sh));
        part pd = {L->down_shexp, 0, E};
        DCP_TRY(take(&pd, 1, s->fs0, s->fs, pad4(s->fs), TAKE_WINDOW, &out->w_down_sh));
    }
    return DCP_OK;
fail:
    dcp_ds2_layer_host_free(out);
    return dcp_fail_context(st, "deepseek2 layer %u", layer);
}

static void hm_free(dcp_ds2_host_matrix *m)
{
    free(m->data);
    memset(m, 0, sizeof *m);
}

void dcp_ds2_layer_host_free(dcp_ds2_layer_host *h)
{
    if (!h) return;
    free(h->attn_norm);
    free(h->q_a_norm);
    free(h->kv_a_norm);
    free(h->ffn_norm);
    free(h->exp_probs_b);
    dcp_ds2_host_matrix *m[] = {&h->wq, &h->wq_a, &h->wkv_a, &h->wk_b, &h->wv_b, &h->wo, &h->w_gu, &h->w_down,
                                &h->gate_inp, &h->w_gu_exps, &h->w_down_exps, &h->w_gu_sh, &h->w_down_sh};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) hm_free(m[i]);
    memset(h, 0, sizeof *h);
}

dcp_status dcp_ds2_global_slice(const dcp_model_config *c, const dcp_ds2_tensors *t, dcp_ds2_global_host *out)
{
    dcp_status st = DCP_OK;
    memset(out, 0, sizeof *out);
    DCP_TRY(take_rows(t->tok_embd, 0, c->n_vocab, &out->tok_embd));
    DCP_TRY(take_rows(t->output, 0, c->n_vocab, &out->output));
    DCP_TRY(vec_f32(t->output_norm, &out->output_norm));
    return DCP_OK;
fail:
    dcp_ds2_global_host_free(out);
    return st;
}

void dcp_ds2_global_host_free(dcp_ds2_global_host *h)
{
    if (!h) return;
    hm_free(&h->tok_embd);
    hm_free(&h->output);
    free(h->output_norm);
    h->output_norm = NULL;
}

/* ---- device weights --------------------------------------------------------------------------- */

dcp_status dcp_ds2_matrix_upload(dcp_device *dev, const dcp_ds2_host_matrix *m, const char *what, dcp_matrix *out)
{
    memset(out, 0, sizeof *out);
    if (!m->data || !m->rows) return DCP_OK; /* absent in this layout */
    const void *data = m->data;
    uint32_t rows = m->rows;
    dcp_status st = dcp_matrix_create(dev, m->type, m->k, 1, &data, &rows, out);
    if (!st && m->win_cols && (st = dcp_matrix_window(out, m->win_k, m->win_col0, m->win_cols))) dcp_matrix_destroy(out);
    return st ? dcp_fail_context(st, "uploading %s", what) : DCP_OK;
}

static dcp_status vec_upload(dcp_device *dev, const float *v, uint32_t n, dcp_buffer **out)
{
    *out = NULL;
    if (!v) return DCP_OK;
    dcp_status st = dcp_buffer_create(dev, (uint64_t)n * 4, DCP_MEMORY_DEVICE, out);
    if (!st) st = dcp_buffer_upload(*out, 0, v, (uint64_t)n * 4);
    return st;
}

dcp_status dcp_ds2_layer_upload(dcp_device *dev, const dcp_ds2_layer_host *h, uint32_t layer, dcp_ds2_layer_dev *out)
{
    dcp_status st = DCP_OK;
    char what[64];
    memset(out, 0, sizeof *out);
    out->moe = h->moe;
    const uint32_t E = h->wkv_a.k, R = h->wv_b.k;
    DCP_TRY(vec_upload(dev, h->attn_norm, E, &out->attn_norm));
    DCP_TRY(vec_upload(dev, h->ffn_norm, E, &out->ffn_norm));
    DCP_TRY(vec_upload(dev, h->kv_a_norm, R, &out->kv_a_norm));
    DCP_TRY(vec_upload(dev, h->q_a_norm, h->wq_a.rows, &out->q_a_norm));
    DCP_TRY(vec_upload(dev, h->exp_probs_b, h->gate_inp.rows, &out->exp_probs_b));
#define UP(field, name)                                                                            \
    snprintf(what, sizeof what, "blk.%u.%s", layer, name);                                         \
    DCP_TRY(dcp_ds2_matrix_upload(dev, &h->field, what, &out->field))
    UP(wq, h->wq_a.data ? "attn_q_b" : "attn_q");
    UP(wq_a, "attn_q_a");
    UP(wkv_a, "attn_kv_a_mqa");
    UP(wk_b, "attn_k_b");
    UP(wv_b, "attn_v_b");
    UP(wo, "attn_output");
    UP(w_gu, "ffn_gate|ffn_up");
    UP(w_down, "ffn_down");
    UP(gate_inp, "ffn_gate_inp");
    UP(w_gu_exps, "ffn_gate_exps|ffn_up_exps");
    UP(w_down_exps, "ffn_down_exps");
    UP(w_gu_sh, "ffn_gate_shexp|ffn_up_shexp");
    UP(w_down_sh, "ffn_down_shexp");
#undef UP
    return DCP_OK;
fail:
    dcp_ds2_layer_dev_destroy(out);
    return st;
}

void dcp_ds2_layer_dev_destroy(dcp_ds2_layer_dev *d)
{
    if (!d) return;
    dcp_buffer_destroy(d->attn_norm);
    dcp_buffer_destroy(d->q_a_norm);
    dcp_buffer_destroy(d->kv_a_norm);
    dcp_buffer_destroy(d->ffn_norm);
    dcp_buffer_destroy(d->exp_probs_b);
    dcp_matrix *m[] = {&d->wq, &d->wq_a, &d->wkv_a, &d->wk_b, &d->wv_b, &d->wo, &d->w_gu, &d->w_down,
                       &d->gate_inp, &d->w_gu_exps, &d->w_down_exps, &d->w_gu_sh, &d->w_down_sh};
    for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) dcp_matrix_destroy(m[i]);
    memset(d, 0, sizeof *d);
}
