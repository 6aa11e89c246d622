/* The llama model's weights (see src/model/llama_internal.h for the sharding): every TP rank's
 * slices of the GGUF tensors, uploaded to its device. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/llama_internal.h"

typedef struct load_ctx {
    const dcp_gguf *g;
    dcp_progress_fn progress;
    void *user;
    uint64_t done, total;
} load_ctx;

static dcp_status find_tensor(const dcp_gguf *g, const char *name, uint64_t ne0, uint64_t ne1,
                              const dcp_gguf_tensor **out)
{
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, name);
    if (!t) return dcp_fail(DCP_ERR_FORMAT, "%s: tensor %s is missing", dcp_gguf_name(g), name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return dcp_fail(DCP_ERR_FORMAT, "%s: tensor %s has shape [%llu,%llu,%llu,%llu], expected [%llu,%llu]",
                        dcp_gguf_name(g), name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                        (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (unsigned long long)ne0,
                        (unsigned long long)ne1);
    if (!dcp_ggml_type_supported(t->type)) {
        const char *tn = dcp_ggml_type_name(t->type);
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tensor %s has type %s; supported: F32, F16, BF16, Q8_0",
                        dcp_gguf_name(g), name, tn ? tn : "unknown");
    }
    *out = t;
    return DCP_OK;
}

/* One part of a matrix: rows [r0, r0 + nr) and input columns [c0, c0 + nc) of a tensor. */
typedef struct slice {
    const char *name;
    uint32_t r0, nr, c0, nc;
} slice;

/* Whether the slice can stay in the tensor's type (block-aligned columns, padded width too). */
static bool slice_native(const dcp_gguf_tensor *t, const slice *s, uint32_t k_pad)
{
    uint32_t be, bb;
    dcp_ggml_type_block(t->type, &be, &bb);
    return s->c0 % be == 0 && s->nc % be == 0 && k_pad % be == 0;
}

/* GGUF-layout bytes of a slice, zero-padded to k_pad columns, in `type` (the tensor's own type,
 * or F32). *out is malloc'd. */
static dcp_status slice_bytes(const dcp_gguf *g, const dcp_gguf_tensor *t, const slice *s, uint32_t k_pad,
                              dcp_ggml_type type, uint8_t **out)
{
    dcp_status st = DCP_OK;
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    uint64_t dst_row = (uint64_t)k_pad / be * bb;
    uint8_t *dst = calloc((size_t)s->nr, dst_row);
    float *row = NULL;
    if (!dst) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory slicing %s", s->name);
    uint32_t tbe, tbb;
    dcp_ggml_type_block(t->type, &tbe, &tbb);
    uint64_t src_row = t->ne[0] / tbe * tbb;
    const uint8_t *src = t->data;
    if (type == t->type) {
        for (uint32_t r = 0; r < s->nr; r++)
            memcpy(dst + r * dst_row, src + (uint64_t)(s->r0 + r) * src_row + (uint64_t)s->c0 / be * bb,
                   (uint64_t)s->nc / be * bb);
    } else {
        row = malloc(t->ne[0] * sizeof *row);
        if (!row) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory slicing %s", s->name);
            goto fail;
        }
        for (uint32_t r = 0; r < s->nr; r++) {
            DCP_TRY(dcp_ggml_to_f32(t->type, src + (uint64_t)(s->r0 + r) * src_row, row, t->ne[0]));
            memcpy(dst + r * dst_row, row + s->c0, (uint64_t)s->nc * 4);
        }
    }
    free(row);
    *out = dst;
    return DCP_OK;
fail:
    free(row);
    free(dst);
    return st;
}

/* Uploads the row concatenation of slices (each of tensor ne0 = k_total, ne1 = rows_total) as one
 * matrix of k_pad columns. Parts keep the tensors' type when they all share it and every slice is
 * block-aligned; otherwise everything becomes F32. */
static dcp_status load_slices(load_ctx *lc, dcp_device *dev, uint32_t n, const slice *sl, const uint64_t *k_total,
                              const uint64_t *rows_total, uint32_t k_pad, dcp_matrix *out)
{
    dcp_status st = DCP_OK;
    const dcp_gguf_tensor *t[3];
    uint8_t *bytes[3] = {NULL, NULL, NULL};
    bool native = true;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(find_tensor(lc->g, sl[i].name, k_total[i], rows_total[i], &t[i]));
        if (t[i]->type != t[0]->type || !slice_native(t[i], &sl[i], k_pad)) native = false;
    }
    dcp_ggml_type type = native ? t[0]->type : DCP_GGML_TYPE_F32;
    const void *data[3];
    uint32_t rows[3];
    uint64_t done = 0;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(slice_bytes(lc->g, t[i], &sl[i], k_pad, type, &bytes[i]));
        data[i] = bytes[i];
        rows[i] = sl[i].nr;
        done += t[i]->size * sl[i].nr / rows_total[i] * sl[i].nc / k_total[i];
    }
    st = dcp_matrix_create(dev, type, k_pad, n, data, rows, out);
    if (st) {
        dcp_fail_context(st, "%s: tensor %s", dcp_gguf_name(lc->g), sl[0].name);
        goto fail;
    }
    lc->done += done;
    if (lc->progress) lc->progress(lc->user, lc->done, lc->total);
fail:
    for (uint32_t i = 0; i < n; i++) free(bytes[i]);
    return st;
}

static dcp_status load_norm(load_ctx *lc, dcp_device *dev, const char *name, uint32_t n, dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    const dcp_gguf_tensor *t;
    float *v = NULL;
    DCP_TRY(find_tensor(lc->g, name, n, 1, &t));
    v = malloc((size_t)n * sizeof *v);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    DCP_TRY(dcp_gguf_tensor_to_f32(lc->g, t, v));
    DCP_TRY(dcp_buffer_create(dev, (uint64_t)n * 4, DCP_MEMORY_DEVICE, out));
    DCP_TRY(dcp_buffer_upload(*out, 0, v, (uint64_t)n * 4));
fail:
    free(v);
    return st;
}

static uint32_t round4(uint32_t n) { return (n + 3) / 4 * 4; }

static dcp_status load_rank(load_ctx *lc, const dcp_llama_weights *w, uint32_t r, bool with_output,
                            llama_rank_weights *rw)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *cfg = &w->cfg;
    const uint32_t tp = w->tp, dcp = w->dcp;
    const uint32_t E = cfg->n_embd, D = cfg->head_dim, Hq = cfg->n_head, Hkv = cfg->n_head_kv, F = cfg->n_ff;
    dcp_device *dev = rw->dev;
    rw->hq = Hq / tp;
    rw->q0 = r * rw->hq;
    if (Hkv % tp == 0) {
        rw->hkv = Hkv / tp;
        rw->kv0 = r * rw->hkv;
    } else {
        rw->hkv = 1;
        rw->kv0 = r / (tp / Hkv);
    }
    rw->qh = w->q_replicate ? rw->hq * dcp : rw->hq;
    rw->qh0 = w->q_replicate ? r / dcp * rw->qh : rw->q0;
    rw->f = F / tp + (r < F % tp ? 1 : 0);
    rw->f0 = r * (F / tp) + (r < F % tp ? r : F % tp);
    rw->f_pad = round4(rw->f);
    rw->layers = calloc(cfg->n_layer, sizeof *rw->layers);
    if (!rw->layers) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    const uint64_t vE[1] = {E}, vV[1] = {cfg->n_vocab};
    slice emb = {"token_embd.weight", 0, cfg->n_vocab, 0, E};
    DCP_TRY(load_slices(lc, dev, 1, &emb, vE, vV, E, &rw->tok_embd));
    if (with_output) {
        slice out = {dcp_gguf_tensor_find(lc->g, "output.weight") ? "output.weight" : "token_embd.weight", 0,
                     cfg->n_vocab, 0, E};
        DCP_TRY(load_slices(lc, dev, 1, &out, vE, vV, E, &rw->output));
    }
    DCP_TRY(load_norm(lc, dev, "output_norm.weight", E, &rw->out_norm));
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        llama_layer *L = &rw->layers[l];
        char n[9][64];
        const char *sfx[9] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
                              "attn_norm", "ffn_norm"};
        for (int i = 0; i < 9; i++) snprintf(n[i], 64, "blk.%u.%s.weight", l, sfx[i]);
        slice qkv[3] = {{n[0], rw->qh0 * D, rw->qh * D, 0, E},
                        {n[1], rw->kv0 * D, rw->hkv * D, 0, E},
                        {n[2], rw->kv0 * D, rw->hkv * D, 0, E}};
        const uint64_t k3[3] = {E, E, E}, r3[3] = {(uint64_t)Hq * D, (uint64_t)Hkv * D, (uint64_t)Hkv * D};
        DCP_TRY(load_slices(lc, dev, 3, qkv, k3, r3, E, &L->wqkv));
        slice wo = {n[3], 0, E, rw->q0 * D, rw->hq * D};
        const uint64_t kq[1] = {(uint64_t)Hq * D};
        DCP_TRY(load_slices(lc, dev, 1, &wo, kq, vE, rw->hq * D, &L->wo));
        slice gu[2] = {{n[4], rw->f0, rw->f, 0, E}, {n[5], rw->f0, rw->f, 0, E}};
        const uint64_t k2[2] = {E, E}, rF[2] = {F, F};
        DCP_TRY(load_slices(lc, dev, 2, gu, k2, rF, E, &L->wgu));
        slice dn = {n[6], 0, E, rw->f0, rw->f};
        DCP_TRY(load_slices(lc, dev, 1, &dn, rF, vE, rw->f_pad, &L->wdown));
        DCP_TRY(load_norm(lc, dev, n[7], E, &L->attn_norm));
        DCP_TRY(load_norm(lc, dev, n[8], E, &L->ffn_norm));
    }
    return DCP_OK;
fail:
    return st;
}

/* vLLM's rules for the sizes, and a layout of the ranks held here that the run state supports. */
static dcp_status check_layout(const dcp_llama_weights_config *wc, uint32_t tp, const dcp_gguf *g,
                               const dcp_model_config *cfg)
{
    const uint32_t Hq = cfg->n_head, Hkv = cfg->n_head_kv, dcp = wc->dcp, first = wc->first_rank, count = wc->count;
    if (cfg->arch != DCP_ARCH_LLAMA)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: architecture %s is not supported (llama only)",
                        dcp_gguf_name(g), cfg->arch_name);
    if (cfg->head_dim_v != cfg->head_dim)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: value head size %u differs from key head size %u",
                        dcp_gguf_name(g), cfg->head_dim_v, cfg->head_dim);
    if (cfg->n_embd % 4 || cfg->head_dim % 4)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: embedding %u and head size %u must be multiples of 4",
                        dcp_gguf_name(g), cfg->n_embd, cfg->head_dim);
    if (!wc->devices)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "llama weights: no devices given");
    if (tp == 0 || Hq % tp || (Hkv % tp && tp % Hkv))
        return dcp_fail(DCP_ERR_CONFIG,
                        "tensor-parallel size %u: the %u query heads must divide by it and the %u KV heads must "
                        "divide by it or divide it", tp, Hq, Hkv);
    dcp_status gs = dcp_cp_check(tp, dcp, Hq, Hkv);
    if (gs) return gs;
    if (count == 0 || first + count > tp || first % count)
        return dcp_fail(DCP_ERR_CONFIG,
                        "TP ranks [%u, %u) held by this process: not a run of %u ranks of a TP group of %u",
                        first, first + count, count, tp);
    if (dcp > 1 && !(count % dcp == 0 || dcp % count == 0))
        return dcp_fail(DCP_ERR_CONFIG,
                        "%u TP ranks per process with DCP groups of %u: a process must hold whole DCP groups or "
                        "an equal part of one (%u must divide by %u or divide it)", count, dcp, count, dcp);
    return DCP_OK;
}

dcp_status dcp_llama_weights_create(const dcp_llama_weights_config *wc, const dcp_gguf *g,
                                    const dcp_model_config *cfg, dcp_llama_weights **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const uint32_t count = wc->count, tp = wc->tp ? wc->tp : wc->count;
    if ((st = check_layout(wc, tp, g, cfg)) != DCP_OK) return st;
    dcp_llama_weights *w = calloc(1, sizeof *w);
    if (!w) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    w->cfg = *cfg;
    w->tp = tp;
    w->dcp = wc->dcp;
    w->q_replicate = wc->dcp > 1 && wc->q_replicate;
    w->first = wc->first_rank;
    w->nl = count;
    w->ranks = calloc(count, sizeof *w->ranks);
    if (!w->ranks) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    load_ctx lc = {g, wc->progress, wc->progress_user, 0, 0};
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) lc.total += dcp_gguf_tensor_at(g, i)->size;
    lc.total *= count; /* embedding and norms are replicated; close enough for a progress bar */
    for (uint32_t r = 0; r < count; r++) {
        llama_rank_weights *rw = &w->ranks[r];
        rw->dev = wc->devices[r];
        DCP_TRY(load_rank(&lc, w, w->first + r, r == 0, rw));
        w->bytes += dcp_buffer_size(rw->tok_embd.buf) + (rw->output.buf ? dcp_buffer_size(rw->output.buf) : 0) +
                    4ull * cfg->n_embd;
        for (uint32_t l = 0; l < cfg->n_layer; l++) {
            llama_layer *L = &rw->layers[l];
            w->bytes += dcp_buffer_size(L->wqkv.buf) + dcp_buffer_size(L->wo.buf) + dcp_buffer_size(L->wgu.buf) +
                        dcp_buffer_size(L->wdown.buf) + 8ull * cfg->n_embd;
        }
    }
    if (wc->progress) wc->progress(wc->progress_user, lc.total, lc.total);
    *out = w;
    return DCP_OK;
fail:
    dcp_llama_weights_destroy(w);
    return st;
}

void dcp_llama_weights_destroy(dcp_llama_weights *w)
{
    if (!w) return;
    for (uint32_t r = 0; w->ranks && r < w->nl; r++) {
        llama_rank_weights *rw = &w->ranks[r];
        for (uint32_t l = 0; rw->layers && l < w->cfg.n_layer; l++) {
            llama_layer *L = &rw->layers[l];
            dcp_buffer_destroy(L->attn_norm);
            dcp_buffer_destroy(L->ffn_norm);
            dcp_matrix_destroy(&L->wqkv);
            dcp_matrix_destroy(&L->wo);
            dcp_matrix_destroy(&L->wgu);
            dcp_matrix_destroy(&L->wdown);
        }
        free(rw->layers);
        dcp_matrix_destroy(&rw->tok_embd);
        dcp_matrix_destroy(&rw->output);
        dcp_buffer_destroy(rw->out_norm);
    }
    free(w->ranks);
    free(w);
}


const dcp_model_config *dcp_llama_weights_model(const dcp_llama_weights *w) { return &w->cfg; }
uint64_t dcp_llama_weights_bytes(const dcp_llama_weights *w) { return w->bytes; }
uint32_t dcp_llama_weights_tp(const dcp_llama_weights *w) { return w->tp; }
uint32_t dcp_llama_weights_dcp(const dcp_llama_weights *w) { return w->dcp; }
bool dcp_llama_weights_q_replicate(const dcp_llama_weights *w) { return w->q_replicate; }
uint32_t dcp_llama_weights_first_rank(const dcp_llama_weights *w) { return w->first; }
uint32_t dcp_llama_weights_local_count(const dcp_llama_weights *w) { return w->nl; }
