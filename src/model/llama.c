/* The llama model on one device: weight upload from GGUF, run state, and the forward pass that
 * records a whole step (all layers, output head, argmax) into one command buffer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/kv.h"
#include "dcpvk/model.h"
#include "model/ops.h"

typedef struct llama_layer {
    dcp_buffer *attn_norm, *ffn_norm; /* [n_embd] f32 */
    dcp_matrix wqkv;                  /* [(Hq + 2 Hkv) D][n_embd] */
    dcp_matrix wo;                    /* [n_embd][Hq D] */
    dcp_matrix wgu;                   /* [2 n_ff][n_embd]: gate rows then up rows */
    dcp_matrix wdown;                 /* [n_embd][n_ff] */
} llama_layer;

struct dcp_llama_weights {
    dcp_device *dev;
    dcp_model_config cfg;
    dcp_matrix tok_embd;   /* [n_vocab][n_embd] */
    dcp_matrix output;     /* [n_vocab][n_embd] */
    dcp_buffer *out_norm;  /* [n_embd] f32 */
    llama_layer *layers;   /* [n_layer] */
    uint64_t bytes;
};

struct dcp_llama_state {
    dcp_llama_weights *w;
    dcp_llama_config cfg;
    dcp_device *dev;
    uint32_t pos;
    uint32_t pages;                 /* pages per layer pool (identity block table) */
    uint32_t e4, qkv4, hd4, f4;     /* row strides (floats, multiples of 4) */
    dcp_kv_pool **pools;            /* [n_layer] */
    dcp_decode_plan **dplans;       /* [n_layer] batch 1 */
    dcp_decode_plan **pplans;       /* [n_layer] batch prefill_chunk (NULL entries if chunk 1) */
    uint32_t *bt;                   /* [prefill_chunk][pages] identity rows */
    uint32_t *lens;                 /* [prefill_chunk] */
    dcp_buffer *x, *xn, *qkv, *q, *o, *lse, *gu, *h; /* activations [prefill_chunk][stride] f32 */
    dcp_buffer *ids, *slots, *cs;   /* host-visible step inputs: [chunk] u32, [chunk] u32, [chunk][n_rot/2][2] f32 */
    dcp_buffer *logits, *next;      /* host-visible outputs: [n_vocab] f32, [1] u32 */
    dcp_cmd *cmd;
};

/* ---- weights ------------------------------------------------------------------------------- */

typedef struct load_ctx {
    dcp_device *dev;
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
    *out = t;
    return DCP_OK;
}

static void progress(load_ctx *lc, uint64_t bytes)
{
    lc->done += bytes;
    if (lc->progress) lc->progress(lc->user, lc->done, lc->total);
}

/* Uploads the row concatenation of tensors names[0..n) (each [k, rows[i]]) as one matrix. */
static dcp_status load_matrix(load_ctx *lc, uint32_t n, const char *const *names, const uint32_t *rows,
                              uint32_t k, dcp_matrix *out)
{
    dcp_status st = DCP_OK;
    const dcp_gguf_tensor *t[3];
    const void *data[3] = {NULL, NULL, NULL};
    float *conv[3] = {NULL, NULL, NULL};
    int same = 1;
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(find_tensor(lc->g, names[i], k, rows[i], &t[i]));
        if (!dcp_ggml_type_supported(t[i]->type)) {
            const char *tn = dcp_ggml_type_name(t[i]->type);
            return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tensor %s has type %s; supported: F32, F16, BF16, Q8_0",
                            dcp_gguf_name(lc->g), names[i], tn ? tn : "unknown");
        }
        if (t[i]->type != t[0]->type) same = 0;
        data[i] = t[i]->data;
        bytes += t[i]->size;
    }
    dcp_ggml_type type = t[0]->type;
    if (!same) {
        for (uint32_t i = 0; i < n; i++) {
            conv[i] = malloc(t[i]->n_elements * sizeof(float));
            if (!conv[i]) {
                st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory converting %s", names[i]);
                goto fail;
            }
            DCP_TRY(dcp_gguf_tensor_to_f32(lc->g, t[i], conv[i]));
            data[i] = conv[i];
        }
        type = DCP_GGML_TYPE_F32;
    }
    st = dcp_matrix_create(lc->dev, type, k, n, data, rows, out);
    if (st) {
        dcp_fail_context(st, "%s: tensor %s", dcp_gguf_name(lc->g), names[0]);
        goto fail;
    }
    progress(lc, bytes);
fail:
    for (uint32_t i = 0; i < n; i++) free(conv[i]);
    return st;
}

static dcp_status load_norm(load_ctx *lc, const char *name, uint32_t n, dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    const dcp_gguf_tensor *t;
    float *v = NULL;
    DCP_TRY(find_tensor(lc->g, name, n, 1, &t));
    v = malloc((size_t)n * sizeof *v);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    DCP_TRY(dcp_gguf_tensor_to_f32(lc->g, t, v));
    DCP_TRY(dcp_buffer_create(lc->dev, (uint64_t)n * 4, DCP_MEMORY_DEVICE, out));
    DCP_TRY(dcp_buffer_upload(*out, 0, v, (uint64_t)n * 4));
    progress(lc, t->size);
fail:
    free(v);
    return st;
}

dcp_status dcp_llama_weights_create(dcp_device *dev, const dcp_gguf *g, const dcp_model_config *cfg,
                                    dcp_progress_fn prog, void *user, dcp_llama_weights **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    if (cfg->arch != DCP_ARCH_LLAMA)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: architecture %s is not supported (llama only)",
                        dcp_gguf_name(g), cfg->arch_name);
    const uint32_t E = cfg->n_embd, D = cfg->head_dim, Hq = cfg->n_head, Hkv = cfg->n_head_kv;
    if (cfg->head_dim_v != D)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: value head size %u differs from key head size %u",
                        dcp_gguf_name(g), cfg->head_dim_v, D);
    dcp_llama_weights *w = calloc(1, sizeof *w);
    if (!w) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    w->dev = dev;
    w->cfg = *cfg;
    w->layers = calloc(cfg->n_layer, sizeof *w->layers);
    if (!w->layers) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    load_ctx lc = {dev, g, prog, user, 0, 0};
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) lc.total += dcp_gguf_tensor_at(g, i)->size;
    const char *embd[1] = {"token_embd.weight"};
    uint32_t vrows[1] = {cfg->n_vocab};
    DCP_TRY(load_matrix(&lc, 1, embd, vrows, E, &w->tok_embd));
    const char *outn[1] = {dcp_gguf_tensor_find(g, "output.weight") ? "output.weight" : "token_embd.weight"};
    DCP_TRY(load_matrix(&lc, 1, outn, vrows, E, &w->output));
    DCP_TRY(load_norm(&lc, "output_norm.weight", E, &w->out_norm));
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        llama_layer *L = &w->layers[l];
        char n[6][64];
        snprintf(n[0], 64, "blk.%u.attn_q.weight", l);
        snprintf(n[1], 64, "blk.%u.attn_k.weight", l);
        snprintf(n[2], 64, "blk.%u.attn_v.weight", l);
        const char *qkv[3] = {n[0], n[1], n[2]};
        uint32_t qkv_rows[3] = {Hq * D, Hkv * D, Hkv * D};
        DCP_TRY(load_matrix(&lc, 3, qkv, qkv_rows, E, &L->wqkv));
        snprintf(n[3], 64, "blk.%u.attn_output.weight", l);
        const char *wo[1] = {n[3]};
        uint32_t wo_rows[1] = {E};
        DCP_TRY(load_matrix(&lc, 1, wo, wo_rows, Hq * D, &L->wo));
        snprintf(n[4], 64, "blk.%u.ffn_gate.weight", l);
        snprintf(n[5], 64, "blk.%u.ffn_up.weight", l);
        const char *gu[2] = {n[4], n[5]};
        uint32_t gu_rows[2] = {cfg->n_ff, cfg->n_ff};
        DCP_TRY(load_matrix(&lc, 2, gu, gu_rows, E, &L->wgu));
        snprintf(n[0], 64, "blk.%u.ffn_down.weight", l);
        const char *dn[1] = {n[0]};
        DCP_TRY(load_matrix(&lc, 1, dn, wo_rows, cfg->n_ff, &L->wdown));
        snprintf(n[1], 64, "blk.%u.attn_norm.weight", l);
        DCP_TRY(load_norm(&lc, n[1], E, &L->attn_norm));
        snprintf(n[2], 64, "blk.%u.ffn_norm.weight", l);
        DCP_TRY(load_norm(&lc, n[2], E, &L->ffn_norm));
        w->bytes += dcp_buffer_size(L->wqkv.buf) + dcp_buffer_size(L->wo.buf) + dcp_buffer_size(L->wgu.buf) +
                    dcp_buffer_size(L->wdown.buf) + 8ull * E;
    }
    w->bytes += dcp_buffer_size(w->tok_embd.buf) + dcp_buffer_size(w->output.buf) + 4ull * E;
    *out = w;
    return DCP_OK;
fail:
    dcp_llama_weights_destroy(w);
    return st;
}

void dcp_llama_weights_destroy(dcp_llama_weights *w)
{
    if (!w) return;
    if (w->layers)
        for (uint32_t l = 0; l < w->cfg.n_layer; l++) {
            llama_layer *L = &w->layers[l];
            dcp_buffer_destroy(L->attn_norm);
            dcp_buffer_destroy(L->ffn_norm);
            dcp_matrix_destroy(&L->wqkv);
            dcp_matrix_destroy(&L->wo);
            dcp_matrix_destroy(&L->wgu);
            dcp_matrix_destroy(&L->wdown);
        }
    free(w->layers);
    dcp_matrix_destroy(&w->tok_embd);
    dcp_matrix_destroy(&w->output);
    dcp_buffer_destroy(w->out_norm);
    free(w);
}

const dcp_model_config *dcp_llama_weights_config(const dcp_llama_weights *w) { return &w->cfg; }
uint64_t dcp_llama_weights_bytes(const dcp_llama_weights *w) { return w->bytes; }

/* ---- run state ----------------------------------------------------------------------------- */

static uint32_t round4(uint32_t n) { return (n + 3) / 4 * 4; }

dcp_status dcp_llama_state_create(dcp_llama_weights *w, const dcp_llama_config *config, dcp_llama_state **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const dcp_model_config *m = &w->cfg;
    dcp_llama_config c = *config;
    if (c.n_ctx == 0) c.n_ctx = m->n_ctx_train < 4096 ? m->n_ctx_train : 4096;
    if (c.block_size == 0 || c.prefill_chunk == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "llama state: block size %u and prefill chunk %u must be >= 1",
                        c.block_size, c.prefill_chunk);
    if (m->n_embd % 4 || m->n_ff % 4 || (m->n_head * m->head_dim) % 4)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "llama state: embedding %u, FFN %u and Q width %u must be multiples of 4",
                        m->n_embd, m->n_ff, m->n_head * m->head_dim);
    dcp_llama_state *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->w = w;
    s->cfg = c;
    s->dev = w->dev;
    s->pages = (c.n_ctx + c.block_size - 1) / c.block_size;
    const uint32_t T = c.prefill_chunk, L = m->n_layer, D = m->head_dim;
    s->e4 = m->n_embd;
    s->qkv4 = round4((m->n_head + 2 * m->n_head_kv) * D);
    s->hd4 = m->n_head * D;
    s->f4 = m->n_ff;
    s->pools = calloc(L, sizeof *s->pools);
    s->dplans = calloc(L, sizeof *s->dplans);
    s->pplans = calloc(L, sizeof *s->pplans);
    s->bt = malloc((size_t)T * s->pages * sizeof *s->bt);
    s->lens = calloc(T, sizeof *s->lens);
    if (!s->pools || !s->dplans || !s->pplans || !s->bt || !s->lens) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t p = 0; p < s->pages; p++) s->bt[(size_t)t * s->pages + p] = p;
    for (uint32_t l = 0; l < L; l++) {
        dcp_kv_pool_config pc = DCP_KV_POOL_CONFIG_DEFAULT;
        pc.kv_heads = m->n_head_kv;
        pc.head_dim = D;
        pc.page_size = c.block_size;
        pc.dtype = c.kv_dtype;
        pc.num_pages = s->pages;
        DCP_TRY(dcp_kv_pool_create(s->dev, &pc, &s->pools[l]));
        dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
        dc.batch = 1;
        dc.q_heads = m->n_head;
        dc.max_blocks = s->pages;
        DCP_TRY(dcp_decode_plan_create(s->pools[l], &dc, &s->dplans[l]));
        if (T > 1) {
            dc.batch = T;
            DCP_TRY(dcp_decode_plan_create(s->pools[l], &dc, &s->pplans[l]));
        }
    }
    struct { dcp_buffer **b; uint64_t floats; } acts[] = {
        {&s->x, s->e4}, {&s->xn, s->e4}, {&s->qkv, s->qkv4}, {&s->q, s->hd4}, {&s->o, s->hd4},
        {&s->lse, m->n_head}, {&s->gu, 2ull * s->f4}, {&s->h, s->f4}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        DCP_TRY(dcp_buffer_create(s->dev, acts[i].floats * T * 4, DCP_MEMORY_DEVICE, acts[i].b));
    DCP_TRY(dcp_buffer_create(s->dev, (uint64_t)T * 4, DCP_MEMORY_HOST, &s->ids));
    DCP_TRY(dcp_buffer_create(s->dev, (uint64_t)T * 4, DCP_MEMORY_HOST, &s->slots));
    DCP_TRY(dcp_buffer_create(s->dev, (uint64_t)T * (m->n_rot / 2 ? m->n_rot / 2 : 1) * 8, DCP_MEMORY_HOST, &s->cs));
    DCP_TRY(dcp_buffer_create(s->dev, (uint64_t)m->n_vocab * 4, DCP_MEMORY_HOST, &s->logits));
    DCP_TRY(dcp_buffer_create(s->dev, 16, DCP_MEMORY_HOST, &s->next));
    DCP_TRY(dcp_cmd_create(s->dev, &s->cmd));
    *out = s;
    return DCP_OK;
fail:
    dcp_llama_state_destroy(s);
    return st;
}

void dcp_llama_state_destroy(dcp_llama_state *s)
{
    if (!s) return;
    dcp_cmd_destroy(s->cmd);
    for (uint32_t l = 0; s->pools && l < s->w->cfg.n_layer; l++) {
        if (s->dplans) dcp_decode_plan_destroy(s->dplans[l]);
        if (s->pplans) dcp_decode_plan_destroy(s->pplans[l]);
        dcp_kv_pool_destroy(s->pools[l]);
    }
    dcp_buffer *bufs[] = {s->x, s->xn, s->qkv, s->q, s->o, s->lse, s->gu, s->h,
                          s->ids, s->slots, s->cs, s->logits, s->next};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
    free(s->pools);
    free(s->dplans);
    free(s->pplans);
    free(s->bt);
    free(s->lens);
    free(s);
}

void dcp_llama_state_reset(dcp_llama_state *s) { s->pos = 0; }
uint32_t dcp_llama_state_pos(const dcp_llama_state *s) { return s->pos; }
uint32_t dcp_llama_state_n_ctx(const dcp_llama_state *s) { return s->cfg.n_ctx; }

uint64_t dcp_llama_state_kv_bytes(const dcp_llama_state *s)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < s->w->cfg.n_layer; l++)
        b += dcp_kv_pool_page_bytes(s->pools[l]) * dcp_kv_pool_get_config(s->pools[l])->num_pages;
    return b;
}

/* Records and runs one chunk of T tokens at positions s->pos ... */
static dcp_status forward_chunk(dcp_llama_state *s, const int32_t *tokens, uint32_t T, int want_logits)
{
    dcp_status st = DCP_OK;
    const dcp_llama_weights *w = s->w;
    const dcp_model_config *m = &w->cfg;
    const uint32_t E = m->n_embd, D = m->head_dim, Hq = m->n_head, Hkv = m->n_head_kv, F = m->n_ff;
    const uint32_t half_rot = m->n_rot / 2;
    uint32_t *ids = dcp_buffer_map(s->ids), *slots = dcp_buffer_map(s->slots);
    float *cs = dcp_buffer_map(s->cs);
    for (uint32_t t = 0; t < T; t++) {
        uint32_t pos = s->pos + t;
        ids[t] = (uint32_t)tokens[t];
        slots[t] = pos; /* identity block table: page pos / B, row pos % B */
        for (uint32_t i = 0; i < half_rot; i++) {
            double ang = pos * pow((double)m->rope_freq_base, -2.0 * i / m->n_rot);
            cs[(t * half_rot + i) * 2] = (float)cos(ang);
            cs[(t * half_rot + i) * 2 + 1] = (float)sin(ang);
        }
        s->lens[t] = pos + 1;
    }
    dcp_decode_plan **plans = T == 1 ? s->dplans : s->pplans;
    uint32_t rows = T == 1 ? 1 : s->cfg.prefill_chunk;
    for (uint32_t t = T; t < rows; t++) s->lens[t] = 0;
    for (uint32_t l = 0; l < m->n_layer; l++) DCP_TRY(dcp_decode_plan_set(plans[l], s->lens, s->bt));

    dcp_cmd *cmd = s->cmd;
    DCP_TRY(dcp_cmd_reset(cmd));
    DCP_TRY(dcp_op_get_rows(cmd, &w->tok_embd, s->ids, s->x, s->e4, T));
    dcp_cmd_barrier(cmd); /* get_rows x -> rmsnorm */
    for (uint32_t l = 0; l < m->n_layer; l++) {
        const llama_layer *L = &w->layers[l];
        DCP_TRY(dcp_op_rmsnorm(cmd, s->x, 0, s->e4, L->attn_norm, E, s->xn, s->e4, T, m->rms_eps));
        dcp_cmd_barrier(cmd); /* rmsnorm xn -> qkv matmul */
        DCP_TRY(dcp_op_matmul(cmd, &L->wqkv, s->xn, 0, s->e4, s->qkv, s->qkv4, T, 0));
        dcp_cmd_barrier(cmd); /* qkv -> rope_store */
        dcp_rope_store_args ra = {T, Hq, Hkv, D, m->n_rot, s->qkv4, s->qkv, s->slots, s->cs, s->q, s->pools[l]};
        DCP_TRY(dcp_op_rope_store(cmd, &ra));
        dcp_cmd_barrier(cmd); /* q, KV pages -> paged decode */
        DCP_TRY(dcp_decode_record(cmd, plans[l], s->q, 0, s->o, 0, s->lse, 0));
        dcp_cmd_barrier(cmd); /* o -> o_proj */
        DCP_TRY(dcp_op_matmul(cmd, &L->wo, s->o, 0, s->hd4, s->x, s->e4, T, 1));
        dcp_cmd_barrier(cmd); /* x (residual) -> ffn rmsnorm */
        DCP_TRY(dcp_op_rmsnorm(cmd, s->x, 0, s->e4, L->ffn_norm, E, s->xn, s->e4, T, m->rms_eps));
        dcp_cmd_barrier(cmd); /* xn -> gate|up matmul */
        DCP_TRY(dcp_op_matmul(cmd, &L->wgu, s->xn, 0, s->e4, s->gu, 2 * s->f4, T, 0));
        dcp_cmd_barrier(cmd); /* gu -> swiglu */
        DCP_TRY(dcp_op_swiglu(cmd, s->gu, 2 * s->f4, s->h, s->f4, F, T));
        dcp_cmd_barrier(cmd); /* h -> down matmul */
        DCP_TRY(dcp_op_matmul(cmd, &L->wdown, s->h, 0, s->f4, s->x, s->e4, T, 1));
        dcp_cmd_barrier(cmd); /* x (residual) -> next layer */
    }
    if (want_logits) {
        DCP_TRY(dcp_op_rmsnorm(cmd, s->x, (T - 1) * s->e4, s->e4, w->out_norm, E, s->xn, s->e4, 1, m->rms_eps));
        dcp_cmd_barrier(cmd); /* final norm -> output head */
        DCP_TRY(dcp_op_matmul(cmd, &w->output, s->xn, 0, s->e4, s->logits, m->n_vocab, 1, 0));
        dcp_cmd_barrier(cmd); /* logits -> argmax */
        DCP_TRY(dcp_op_argmax(cmd, s->logits, m->n_vocab, m->n_vocab, 1, s->next));
    }
    DCP_TRY(dcp_cmd_run(cmd));
    s->pos += T;
    return DCP_OK;
fail:
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
    uint32_t chunk = s->cfg.prefill_chunk;
    for (uint32_t i = 0; i < n; i += chunk) {
        uint32_t T = n - i < chunk ? n - i : chunk;
        DCP_TRY(forward_chunk(s, tokens + i, T, i + T == n));
    }
    if (logits) memcpy(logits, dcp_buffer_map(s->logits), (size_t)m->n_vocab * 4);
    if (next) *next = (int32_t)*(const uint32_t *)dcp_buffer_map(s->next);
    return DCP_OK;
fail:
    return st;
}
