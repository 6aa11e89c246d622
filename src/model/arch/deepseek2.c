/* The deepseek2 architecture (MLA attention + MoE) on the shared graph (src/model/graph.h): its
 * layer weights (src/model/arch/deepseek2_weights.h slices them per TP rank), its part of the run
 * state, and one layer of the forward pass in the absorbed form.
 *
 * The KV cache is one latent "head" per token: a K-only pool whose rows are [c_kv | k_pe]
 * (kv_lora + rope values). Under plain TP every rank holds all of it; with DCP the ranks of a group
 * shard it by the interleaved placement (only a token's owner stores it), so a group holds one copy
 * where TP alone holds one per rank.
 *
 * One layer, per rank (the graph runs the all-reduce after each block; T rows; heads: own Ho = H / TP, projected Hq = Ho, or the DCP group's with
 * q_replicate; R kv_lora, P rope, N nope, V v):
 *   attention block  rmsnorm (+ the all-reduce's sum); kv = W_kv_a xn (replicated); q = W_q xn
 *                    (or W_q_b rmsnorm(W_q_a xn)); c = rmsnorm(kv[:R]); the owner stores
 *                    [c | rope(kv[R:])] in the latent cache; Q = [W_UK q_nope | rope(q_pe)] per
 *                    head; latent decode over the rank's cache (DCP: the DCP attention step of
 *                    every group held here, Q gathered or replicated, a2a or ag_rs exchanging the
 *                    latent O of kv_lora per head); o = W_UV o_lat per own head; attn_output
 *                    (row-parallel over the own heads' columns)
 *   all-reduce
 *   FFN block        rmsnorm (+ sum); dense (leading layers): gate|up, SwiGLU, down; MoE: router
 *                    logits (replicated, so every rank routes alike), routing (softmax or sigmoid,
 *                    selection bias, groups, top-k, weights), the selected experts' gate|up,
 *                    SwiGLU, weighted down, plus the shared experts; widths split over TP
 *   all-reduce */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/cp_internal.h"
#include "common/error.h"
#include "model/arch/deepseek2_weights.h"
#include "model/graph.h"

typedef struct ds2_rank {
    dcp_ds2_shard shard;
    dcp_ds2_layer_dev *layers; /* [n_layer] */
} ds2_rank;

typedef struct ds2_weights {
    ds2_rank *ranks;           /* [nl] */
} ds2_weights;

/* Run state of one rank: activations [max_rows][...] f32. */
typedef struct ds2_rank_state {
    dcp_buffer *qa, *qan;      /* [q_lora] compressed query and its norm (q_lora_rank > 0) */
    dcp_buffer *q;             /* [Hq (N + P)] projected query */
    dcp_buffer *kv;            /* [R + P] latent and k_pe */
    dcp_buffer *cn;            /* [R] normed latent */
    dcp_buffer *Q;             /* [Hq][R + P] absorbed query with roped q_pe */
    dcp_buffer *olat, *lse;    /* [Ho][R], [Ho] attention of the own heads (latent O) */
    dcp_buffer *o;             /* [round4(Ho V)] up-projected heads (zero padding) */
    dcp_buffer *gu, *h;        /* dense FFN [2 ff], [ff pad] */
    dcp_buffer *logits_r;      /* [n_expert] router logits */
    dcp_buffer *rids, *rw;     /* [n_used] u32 expert ids, f32 weights */
    dcp_buffer *egu, *eh;      /* [n_used][2 fe], [n_used][fe pad] routed experts */
    dcp_buffer *sgu, *sh;      /* [2 fs], [fs pad] shared experts */
    dcp_decode_plan **plans; /* [n_layer] (DCP = 1) */
} ds2_rank_state;

typedef struct ds2_state {
    ds2_rank_state *r;         /* [nl] */
    dcp_cp_attn **attns;       /* [n_layer][ng] (DCP > 1) */
    dcp_comm_buf *qv, *ov, *lv;/* [nl] each rank's Q, o_lat, lse (for dcp_cp_attn_record) */
} ds2_state;

/* ---- weights ------------------------------------------------------------------------------- */

static dcp_status ds2_check(const dcp_model *m, const dcp_gguf *g)
{
    const dcp_model_config *c = &m->cfg;
    if (c->n_head % m->tp)
        return dcp_fail(DCP_ERR_CONFIG, "tensor-parallel size %u: the %u attention heads must divide by it", m->tp,
                        c->n_head);
    if (c->kv_lora_rank % 4 || c->n_rot % 2)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: kv_lora_rank %u must be a multiple of 4 and the rope part %u even",
                        dcp_gguf_name(g), c->kv_lora_rank, c->n_rot);
    /* MLA has one latent "head": vLLM's rules become dcp <= tp and tp % dcp == 0. */
    return dcp_cp_check(m->tp, m->dcp, c->n_head, 1);
}

static void ds2_unload(dcp_model *m)
{
    ds2_weights *w = m->arch;
    if (!w) return;
    for (uint32_t i = 0; w->ranks && i < m->nl; i++) {
        for (uint32_t l = 0; w->ranks[i].layers && l < m->cfg.n_layer; l++)
            dcp_ds2_layer_dev_destroy(&w->ranks[i].layers[l]);
        free(w->ranks[i].layers);
    }
    free(w->ranks);
    free(w);
    m->arch = NULL;
}

static uint64_t matrix_bytes(const dcp_matrix *mx) { return mx->buf ? dcp_buffer_size(mx->buf) : 0; }

static uint64_t layer_bytes(const dcp_ds2_layer_dev *d)
{
    const dcp_matrix *ms[] = {&d->wq, &d->wq_a, &d->wkv_a, &d->wk_b, &d->wv_b, &d->wo, &d->w_gu, &d->w_down,
                              &d->gate_inp, &d->w_gu_exps, &d->w_down_exps, &d->w_gu_sh, &d->w_down_sh};
    uint64_t b = 0;
    for (size_t k = 0; k < sizeof ms / sizeof ms[0]; k++) b += matrix_bytes(ms[k]);
    return b;
}

/* Counts the matrices of h that a quantized type was expanded to F32 for (dcp_model_fallbacks). */
static void note_expanded(dcp_model *m, const dcp_ds2_layer_host *h, uint32_t rank)
{
    const dcp_ds2_host_matrix *ms[] = {&h->wq,    &h->wq_a,      &h->wkv_a,     &h->wk_b,      &h->wv_b,
                                       &h->wo,    &h->w_gu,      &h->w_down,    &h->w_gu_exps, &h->w_down_exps,
                                       &h->w_gu_sh, &h->w_down_sh};
    for (size_t j = 0; j < sizeof ms / sizeof ms[0]; j++) {
        if (!ms[j]->expanded) continue;
        dcp_model_fallback *fb = &m->fallback;
        if (!fb->count++)
            snprintf(fb->first, sizeof fb->first, "%s on TP rank %u", ms[j]->expanded_why, rank);
        fb->f32_bytes += dcp_matrix_bytes(DCP_GGML_TYPE_F32, ms[j]->k, ms[j]->rows);
        fb->native_bytes += ms[j]->native_bytes;
    }
}

static dcp_status ds2_load(dcp_model *m, dcp_load_ctx *lc)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *c = &m->cfg;
    dcp_ds2_tensors t = {0};
    dcp_ds2_layer_host h;
    memset(&h, 0, sizeof h);
    ds2_weights *w = calloc(1, sizeof *w);
    if (!w) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    m->arch = w;
    w->ranks = calloc(m->nl, sizeof *w->ranks);
    if (!w->ranks) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    DCP_TRY(dcp_ds2_tensors_find(lc->g, c, &t));
    for (uint32_t i = 0; i < m->nl; i++) {
        ds2_rank *rw = &w->ranks[i];
        DCP_TRY(dcp_ds2_shard_for_rank(c, m->tp, m->first + i, m->dcp, m->q_replicate, &rw->shard));
        rw->layers = calloc(c->n_layer, sizeof *rw->layers);
        if (!rw->layers) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        for (uint32_t l = 0; l < c->n_layer; l++) {
            DCP_TRY(dcp_ds2_layer_slice(c, &t, l, &rw->shard, &h));
            note_expanded(m, &h, m->first + i);
            DCP_TRY(dcp_ds2_layer_upload(m->ranks[i].dev, &h, l, &rw->layers[l]));
            lc->done += dcp_ds2_layer_file_bytes(&h);
            dcp_ds2_layer_host_free(&h);
            uint64_t b = layer_bytes(&rw->layers[l]);
            m->bytes += b;
            /* The bar rises by layers (no counting pass: see count_only_cheap). */
            const uint64_t layers_done = (uint64_t)i * c->n_layer + l + 1, layers = (uint64_t)m->nl * c->n_layer;
            if (lc->progress) lc->progress(lc->user, (uint64_t)((double)lc->total * layers_done / layers), lc->total);
        }
    }
fail:
    dcp_ds2_layer_host_free(&h);
    dcp_ds2_tensors_free(&t);
    return st;
}

static void ds2_kv_pool(const dcp_model *m, uint32_t local, dcp_kv_pool_config *pool)
{
    (void)local;
    pool->kv_heads = 1;
    pool->head_dim = m->cfg.kv_lora_rank + m->cfg.n_rot;
    pool->k_only = true;
}

/* ---- run state ----------------------------------------------------------------------------- */

static void ds2_state_destroy(dcp_model_state *s)
{
    ds2_state *ds = s->arch;
    const uint32_t L = s->m->cfg.n_layer;
    for (uint32_t i = 0; ds->r && i < s->m->nl; i++) {
        ds2_rank_state *rs = &ds->r[i];
        for (uint32_t l = 0; rs->plans && l < L; l++) dcp_decode_plan_destroy(rs->plans[l]);
        dcp_buffer *bufs[] = {rs->qa,  rs->qan, rs->q,  rs->kv,       rs->cn,   rs->Q,   rs->olat, rs->lse, rs->o,
                              rs->gu,  rs->h,   rs->logits_r, rs->rids, rs->rw, rs->egu,  rs->eh,  rs->sgu, rs->sh};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) dcp_buffer_destroy(bufs[k]);
        free(rs->plans);
    }
    for (uint32_t k = 0; ds->attns && k < s->ng * L; k++) dcp_cp_attn_destroy(ds->attns[k]);
    free(ds->attns);
    free(ds->r);
    free(ds->qv);
    free(ds->ov);
    free(ds->lv);
    free(ds);
    s->arch = NULL;
}

/* A zero-filled device buffer of rows x floats f32 (padding columns must stay 0). */
static dcp_status zbuf(dcp_device *dev, uint64_t rows, uint64_t floats, dcp_buffer **out)
{
    uint64_t bytes = rows * (floats ? floats : 1) * 4;
    dcp_status st = dcp_buffer_create(dev, bytes, DCP_MEMORY_DEVICE, out);
    if (st == DCP_OK) st = dcp_buffer_fill(*out, 0, bytes, 0);
    return st;
}

/* The widths of rank i's FFN matrices (padded input columns), from the first layer of each kind. */
static void ffn_widths(const dcp_model *m, uint32_t i, uint32_t *f_pad, uint32_t *fe_pad, uint32_t *fs_pad)
{
    const ds2_rank *rw = &((const ds2_weights *)m->arch)->ranks[i];
    *f_pad = *fe_pad = *fs_pad = 0;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        const dcp_ds2_layer_dev *L = &rw->layers[l];
        if (L->moe) {
            *fe_pad = L->w_down_exps.k;
            *fs_pad = L->w_down_sh.buf ? L->w_down_sh.k : 0;
        } else {
            *f_pad = L->w_down.k;
        }
    }
}

/* The latent decode plan of a rank's layer (DCP 1): heads of the rank, chunks of `chunk` tokens. */
static dcp_decode_config ds2_plan_config(const dcp_model *m, const dcp_model_state_config *c, uint32_t heads,
                                         uint32_t max_blocks, uint32_t chunk)
{
    dcp_decode_config mc = DCP_DECODE_CONFIG_DEFAULT;
    mc.kind = DCP_DECODE_LATENT;
    mc.batch = c->max_rows;
    mc.q_heads = heads;
    mc.latent = m->cfg.kv_lora_rank;
    mc.max_blocks = max_blocks;
    mc.scale = m->cfg.attn_scale;
    mc.chunk_tokens = chunk;
    return mc;
}

/* The DCP step over the latent cache of a group whose ranks hold heads_local heads each. */
static dcp_cp_attn_config ds2_attn_config(const dcp_model *m, const dcp_model_state_config *c, uint32_t heads_local,
                                          uint32_t chunk)
{
    dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
    ac.batch = c->max_rows;
    ac.heads_local = heads_local;
    ac.backend = c->backend;
    ac.q_replicate = m->q_replicate;
    ac.scale = m->cfg.attn_scale;
    ac.chunk_tokens = chunk;
    ac.latent = m->cfg.kv_lora_rank;
    return ac;
}

/* Whether a layer of rank i runs a dense (shared: false) or shared-expert (true) gate|up of two parts
 * (matmul then swiglu through gu / sgu); a one-part one writes h itself. */
static bool needs_gu(const dcp_model *m, uint32_t i, bool shared)
{
    const ds2_rank *r = &((const ds2_weights *)m->arch)->ranks[i];
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        const dcp_ds2_layer_dev *L = &r->layers[l];
        if (shared ? L->moe && r->shard.fs > 0 && !dcp_matmul_can_glu(&L->w_gu_sh)
                   : !L->moe && !dcp_matmul_can_glu(&L->w_gu))
            return true;
    }
    return false;
}

/* Floats per row of rank i's activations, in the order rank_state_create allocates them (qa, qan,
 * q, kv, cn, Q, olat, lse, o, gu, h, router logits, ids, weights, expert gate/up and h, shared
 * gate/up and h; gu and the shared gate/up only where a layer needs them, needs_gu); 0 is
 * allocated as 1 (zbuf). ds2_state_bytes counts the same. */
enum { DS2_ACTS = 18 };
static void ds2_act_floats(const dcp_model *m, uint32_t i, uint64_t f[DS2_ACTS])
{
    const dcp_model_config *c = &m->cfg;
    const dcp_ds2_shard *sh = &((const ds2_weights *)m->arch)->ranks[i].shard;
    const uint64_t gu = needs_gu(m, i, false) ? 2ull * sh->ff : 0, sgu = needs_gu(m, i, true) ? 2ull * sh->fs : 0;
    const uint64_t R = c->kv_lora_rank, P = c->n_rot, QW = c->head_dim_qk, V = c->head_dim_v_mla,
                   U = c->n_expert_used;
    uint32_t f_pad, fe_pad, fs_pad;
    ffn_widths(m, i, &f_pad, &fe_pad, &fs_pad);
    const uint64_t v[DS2_ACTS] = {c->q_lora_rank,     c->q_lora_rank,  sh->q_heads * QW, R + P,
                                  R,                  sh->q_heads * (R + P), sh->o_heads * R, sh->o_heads,
                                  (sh->o_heads * V + 3) / 4 * 4, gu,    f_pad, c->n_expert,
                                  U,                  U,               U * 2 * sh->fe,   U * fe_pad,
                                  sgu,                fs_pad};
    for (int k = 0; k < DS2_ACTS; k++) f[k] = v[k] ? v[k] : 1;
}

static dcp_status rank_state_create(dcp_model_state *s, ds2_state *ds, uint32_t i, uint32_t chunk)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const dcp_model_config *c = &m->cfg;
    const dcp_ds2_shard *sh = &((const ds2_weights *)m->arch)->ranks[i].shard;
    ds2_rank_state *rs = &ds->r[i];
    dcp_device *dev = m->ranks[i].dev;
    uint64_t f[DS2_ACTS];
    ds2_act_floats(m, i, f);
    dcp_buffer **acts[DS2_ACTS] = {&rs->qa,  &rs->qan, &rs->q,        &rs->kv,   &rs->cn,  &rs->Q,
                                   &rs->olat, &rs->lse, &rs->o,       &rs->gu,   &rs->h,   &rs->logits_r,
                                   &rs->rids, &rs->rw,  &rs->egu,     &rs->eh,   &rs->sgu, &rs->sh};
    for (int k = 0; k < DS2_ACTS; k++) DCP_TRY(zbuf(dev, s->cfg.max_rows, f[k], acts[k]));
    ds->qv[i] = (dcp_comm_buf){rs->Q, 0};
    ds->ov[i] = (dcp_comm_buf){rs->olat, 0};
    ds->lv[i] = (dcp_comm_buf){rs->lse, 0};
    if (m->dcp > 1) return DCP_OK;
    rs->plans = calloc(c->n_layer, sizeof *rs->plans);
    if (!rs->plans) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t l = 0; l < c->n_layer; l++) {
        dcp_decode_config mc = ds2_plan_config(m, &s->cfg, sh->o_heads, s->max_blocks, chunk);
        DCP_TRY(dcp_decode_plan_create(dcp_kv_cache_pool(s->caches[l * s->ng + s->r[i].g], 0), &mc, &rs->plans[l]));
    }
fail:
    return st;
}

/* The fixed split-KV chunk of the latent decode: the state's chunk_tokens, lowered to what one
 * invocation may scan for `heads` heads (a probe plan over pool tells). */
static dcp_status fixed_chunk(dcp_model_state *s, dcp_kv_pool *pool, uint32_t heads, uint32_t *out)
{
    dcp_decode_config mc = ds2_plan_config(s->m, &s->cfg, heads, s->max_blocks, 0);
    mc.batch = 1;
    dcp_decode_plan *probe;
    dcp_status st = dcp_decode_plan_create(pool, &mc, &probe);
    if (st != DCP_OK) return st;
    uint32_t max = dcp_decode_plan_max_chunk(probe);
    dcp_decode_plan_destroy(probe);
    *out = s->cfg.chunk_tokens < max ? s->cfg.chunk_tokens : max;
    return DCP_OK;
}

static dcp_status ds2_state_create(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const ds2_weights *w = m->arch;
    const uint32_t L = m->cfg.n_layer, G = s->ng, N = m->dcp;
    ds2_state *ds = calloc(1, sizeof *ds);
    if (!ds) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->arch = ds;
    ds->r = calloc(m->nl, sizeof *ds->r);
    ds->qv = calloc(m->nl, sizeof *ds->qv);
    ds->ov = calloc(m->nl, sizeof *ds->ov);
    ds->lv = calloc(m->nl, sizeof *ds->lv);
    if (N > 1) ds->attns = calloc((size_t)L * G, sizeof *ds->attns);
    if (!ds->r || !ds->qv || !ds->ov || !ds->lv || (N > 1 && !ds->attns))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    const uint32_t heads = N * w->ranks[0].shard.o_heads; /* decoded per rank: the group's */
    uint32_t chunk;
    DCP_TRY(fixed_chunk(s, dcp_kv_cache_pool(s->caches[0], 0), heads, &chunk));
    for (uint32_t i = 0; i < m->nl; i++) DCP_TRY(rank_state_create(s, ds, i, chunk));
    for (uint32_t l = 0; N > 1 && l < L; l++)
        for (uint32_t g = 0; g < G; g++) {
            dcp_cp_attn_config ac = ds2_attn_config(m, &s->cfg, w->ranks[g * s->gn].shard.o_heads, chunk);
            DCP_TRY(dcp_cp_attn_create(s->gcomm[g], s->caches[l * G + g], &ac, &ds->attns[l * G + g]));
        }
fail:
    return st;
}

/* What ds2_state_create allocates on local rank i (dcp_model_state_bytes): the activations, and
 * per layer the latent decode plan (DCP 1) or the DCP step over the latent cache, with their
 * split-KV workspace at n_ctx in chunks of the state's chunk_tokens (the fixed chunk may be
 * lowered on a device whose loop bound needs it: then the workspace is larger than counted). */
static dcp_status ds2_state_bytes(const dcp_model *m, uint32_t i, const dcp_model_state_config *c,
                                  const dcp_kv_cache_config *kc, dcp_model_memory *mem, uint64_t *dcp_block)
{
    const ds2_weights *w = m->arch;
    uint64_t f[DS2_ACTS];
    ds2_act_floats(m, i, f);
    for (int k = 0; k < DS2_ACTS; k++)
        dcp_graph_count(mem, &mem->activations, f[k] * c->max_rows * 4, "a layer activation");
    uint64_t bytes, largest, block = 0;
    dcp_status st;
    if (m->dcp == 1) {
        dcp_decode_config mc = ds2_plan_config(m, c, w->ranks[i].shard.o_heads, kc->max_blocks, c->chunk_tokens);
        if ((st = dcp_decode_plan_bytes(&kc->pool, &mc, c->n_ctx, &bytes, &largest)) != DCP_OK) return st;
    } else {
        dcp_cp_attn_config ac = ds2_attn_config(m, c, w->ranks[i].shard.o_heads, c->chunk_tokens);
        if ((st = dcp_cp_attn_bytes(kc, &ac, c->n_ctx, &bytes, &largest, &block)) != DCP_OK) return st;
    }
    mem->attention += (uint64_t)m->cfg.n_layer * bytes;
    if (largest > mem->largest) {
        mem->largest = largest;
        mem->largest_what = "a latent attention plan's block table, split-KV workspace or partial states";
    }
    if (block > *dcp_block) *dcp_block = block;
    return DCP_OK;
}

static dcp_status ds2_set_rows(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    ds2_state *ds = s->arch;
    const uint32_t L = s->m->cfg.n_layer;
    if (s->m->dcp > 1) return dcp_graph_cp_set_rows(s, ds->attns);
    for (uint32_t i = 0; i < s->m->nl; i++)
        for (uint32_t l = 0; l < L; l++) {
            dcp_graph_rows_tables(s, l, i);
            DCP_TRY(dcp_decode_plan_set_rows(ds->r[i].plans[l], s->rows, s->lens, s->bt));
        }
fail:
    return st;
}

static uint64_t ds2_key(const dcp_model_state *s)
{
    const ds2_state *ds = s->arch;
    uint64_t key = DCP_STEP_KEY_SEED;
    if (s->m->dcp > 1) return dcp_graph_cp_key(s, ds->attns, key);
    for (uint32_t l = 0; l < s->m->cfg.n_layer; l++)
        for (uint32_t i = 0; i < s->m->nl; i++) key = dcp_step_key_mix(key, dcp_decode_plan_key(ds->r[i].plans[l]));
    return key;
}

/* ---- one layer ----------------------------------------------------------------------------- */

/* Rank i up to the absorbed query and the latent-cache write of layer l. */
static dcp_status attention_in(dcp_model_state *s, uint32_t l, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *c = &s->m->cfg;
    const ds2_rank *rw = &((const ds2_weights *)s->m->arch)->ranks[i];
    const dcp_ds2_layer_dev *Lw = &rw->layers[l];
    ds2_rank_state *rs = &((ds2_state *)s->arch)->r[i];
    dcp_graph_rank *gr = &s->r[i];
    dcp_cmd *cmd = dcp_graph_cmd(s, i);
    const uint32_t T = s->rows, E = c->n_embd, R = c->kv_lora_rank, P = c->n_rot, N = c->head_dim_nope;
    const uint32_t QW = c->head_dim_qk, QL = c->q_lora_rank, Hq = rw->shard.q_heads;
    const float eps = c->rms_eps;
    DCP_TRY(dcp_graph_norm(s, i, Lw->attn_norm));
    dcp_cmd_barrier(cmd); /* xn (and x += parts) -> projections */
    DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->wkv_a, .x = gr->xn, .x_stride = E, .y = rs->kv,
                                                  .y_stride = R + P, .tokens = T}));
    if (QL) {
        DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->wq_a, .x = gr->xn, .x_stride = E, .y = rs->qa,
                                                      .y_stride = QL, .tokens = T}));
        dcp_cmd_barrier(cmd); /* q_a -> its norm */
        DCP_TRY(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = rs->qa, .x_stride = QL, .w = Lw->q_a_norm, .n = QL,
                                                        .y = rs->qan, .y_stride = QL, .tokens = T, .eps = eps}));
        dcp_cmd_barrier(cmd); /* q_a norm -> q_b */
        DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->wq, .x = rs->qan, .x_stride = QL, .y = rs->q,
                                                      .y_stride = Hq * QW, .tokens = T}));
    } else {
        DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->wq, .x = gr->xn, .x_stride = E, .y = rs->q,
                                                      .y_stride = Hq * QW, .tokens = T}));
    }
    dcp_cmd_barrier(cmd); /* kv, q -> latent norm, absorption, rope */
    DCP_TRY(dcp_op_rmsnorm(cmd, &(dcp_rmsnorm_args){.x = rs->kv, .x_stride = R + P, .w = Lw->kv_a_norm, .n = R,
                                                    .y = rs->cn, .y_stride = R, .tokens = T, .eps = eps}));
    dcp_head_matmul_args ab = {.w = &Lw->wk_b, .heads = Hq, .rows = R, .tokens = T, .x = rs->q, .x_stride = Hq * QW,
                               .x_head_stride = QW, .x_offset = 0, .y = rs->Q, .y_stride = Hq * (R + P),
                               .y_head_stride = R + P, .y_offset = 0, .accumulate = 0};
    DCP_TRY(dcp_op_head_matmul(cmd, &ab));
    dcp_mla_rope_args qr = {.tokens = T, .heads = Hq, .n_rot = P, .src = rs->q, .src_stride = Hq * QW,
                            .src_head_stride = QW, .src_offset = N, .dst = rs->Q, .dst_stride = Hq * (R + P),
                            .dst_head_stride = R + P, .dst_offset = R, .cs = dcp_graph_rope(s, i)};
    DCP_TRY(dcp_op_mla_rope(cmd, &qr));
    dcp_cmd_barrier(cmd); /* latent norm -> store */
    dcp_mla_kv_store_args ks = {.tokens = T, .kv_lora = R, .n_rot = P, .c = rs->cn, .c_stride = R, .c_offset = 0,
                                .kpe = rs->kv, .kpe_stride = R + P, .kpe_offset = R, .cs = dcp_graph_rope(s, i),
                                .slot = gr->slots[l], .pool = dcp_kv_cache_pool(s->caches[l * s->ng + gr->g], gr->gl)};
    DCP_TRY(dcp_op_mla_kv_store(cmd, &ks));
    dcp_cmd_barrier(cmd); /* latent cache, Q -> decode */
fail:
    return st;
}

static dcp_status attention(dcp_model_state *s, uint32_t l)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const dcp_model_config *c = &m->cfg;
    const ds2_weights *w = m->arch;
    ds2_state *ds = s->arch;
    const uint32_t T = s->rows, E = c->n_embd, R = c->kv_lora_rank, V = c->head_dim_v_mla;
    for (uint32_t i = 0; i < m->nl; i++) {
        DCP_TRY(attention_in(s, l, i));
        if (m->dcp == 1) {
            ds2_rank_state *rs = &ds->r[i];
            DCP_TRY(dcp_decode_record(dcp_graph_cmd(s, i), rs->plans[l], rs->Q, 0, rs->olat, 0, rs->lse, 0));
            dcp_cmd_barrier(dcp_graph_cmd(s, i)); /* o_lat -> W_UV */
        }
    }
    dcp_graph_norm_done(s);
    if (m->dcp > 1) {
        DCP_TRY(dcp_cp_attn_record(s->step, ds->attns + (size_t)l * s->ng, s->ng, ds->qv, ds->ov, ds->lv));
        for (uint32_t i = 0; i < m->nl; i++) dcp_cmd_barrier(dcp_graph_cmd(s, i)); /* merged o_lat -> W_UV */
    }
    for (uint32_t i = 0; i < m->nl; i++) {
        const dcp_ds2_layer_dev *Lw = &w->ranks[i].layers[l];
        const uint32_t Ho = w->ranks[i].shard.o_heads;
        ds2_rank_state *rs = &ds->r[i];
        dcp_cmd *cmd = dcp_graph_cmd(s, i);
        dcp_head_matmul_args uv = {.w = &Lw->wv_b, .heads = Ho, .rows = V, .tokens = T, .x = rs->olat,
                                   .x_stride = Ho * R, .x_head_stride = R, .x_offset = 0, .y = rs->o,
                                   .y_stride = Lw->wo.k, .y_head_stride = V, .y_offset = 0, .accumulate = 0};
        DCP_TRY(dcp_op_head_matmul(cmd, &uv));
        dcp_cmd_barrier(cmd); /* o -> attn_output */
        DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->wo, .x = rs->o, .x_stride = Lw->wo.k,
                                                      .y = dcp_graph_row_parallel_out(s, i), .y_stride = E, .tokens = T,
                                                      .accumulate = dcp_graph_row_parallel_accumulate(s)}));
        dcp_cmd_barrier(cmd); /* x (residual) or part -> ffn norm / all-reduce */
    }
fail:
    return st;
}

static dcp_status ffn_moe(dcp_model_state *s, const dcp_ds2_layer_dev *Lw, const dcp_ds2_shard *sh, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *c = &s->m->cfg;
    ds2_rank_state *rs = &((ds2_state *)s->arch)->r[i];
    dcp_cmd *cmd = dcp_graph_cmd(s, i);
    dcp_buffer *xn = s->r[i].xn, *out = dcp_graph_row_parallel_out(s, i);
    const uint32_t T = s->rows, E = c->n_embd, X = c->n_expert, U = c->n_expert_used;
    const uint32_t fe_pad = Lw->w_down_exps.k, fs_pad = Lw->w_down_sh.buf ? Lw->w_down_sh.k : 0;
    const bool shared = sh->fs > 0, acc = dcp_graph_row_parallel_accumulate(s);
    /* one-part shared gate|up: the SwiGLU in its matmul's store (as dense_ffn); parts: then swiglu */
    const bool sh_glu = shared && dcp_matmul_can_glu(&Lw->w_gu_sh);
    DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->gate_inp, .x = xn, .x_stride = E, .y = rs->logits_r,
                                                  .y_stride = X, .tokens = T}));
    if (shared)
        DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->w_gu_sh, .x = xn, .x_stride = E,
                                                      .y = sh_glu ? rs->sh : rs->sgu,
                                                      .y_stride = sh_glu ? fs_pad : 2 * sh->fs, .tokens = T,
                                                      .glu = sh_glu}));
    dcp_cmd_barrier(cmd); /* router logits -> route; shared gate|up -> swiglu (or shared h -> shared down) */
    dcp_moe_route_args ra;
    dcp_moe_route_args_from_config(c, &ra);
    ra.tokens = T;
    ra.logits = rs->logits_r;
    ra.logits_stride = X;
    ra.bias = Lw->exp_probs_b;
    ra.ids = rs->rids;
    ra.weights = rs->rw;
    DCP_TRY(dcp_op_moe_route(cmd, &ra));
    if (shared && !sh_glu) DCP_TRY(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = rs->sgu, .x_stride = 2 * sh->fs, .y = rs->sh,
                                                              .y_stride = fs_pad, .n = sh->fs, .tokens = T}));
    dcp_cmd_barrier(cmd); /* ids -> experts; shared h -> shared down */
    dcp_moe_matmul_args gu = {.w = &Lw->w_gu_exps, .n_expert = X, .rows = 2 * sh->fe, .tokens = T, .n_used = U,
                              .ids = rs->rids, .weights = rs->rw, .x = xn, .x_stride = E, .x_used_stride = 0,
                              .y = rs->egu, .y_stride = U * 2 * sh->fe, .y_used_stride = 2 * sh->fe, .accumulate = 0};
    DCP_TRY(dcp_op_moe_gate_up(cmd, &gu));
    if (shared)
        DCP_TRY(dcp_op_matmul(cmd, &(dcp_matmul_args){.w = &Lw->w_down_sh, .x = rs->sh, .x_stride = fs_pad, .y = out,
                                                      .y_stride = E, .tokens = T, .accumulate = acc}));
    dcp_cmd_barrier(cmd); /* experts' gate|up -> swiglu; shared down -> routed down (both into out) */
    DCP_TRY(dcp_op_swiglu(cmd, &(dcp_swiglu_args){.x = rs->egu, .x_stride = 2 * sh->fe, .y = rs->eh, .y_stride = fe_pad,
                                                  .n = sh->fe, .tokens = T * U}));
    dcp_cmd_barrier(cmd); /* swiglu -> down */
    dcp_moe_matmul_args dn = {.w = &Lw->w_down_exps, .n_expert = X, .rows = E, .tokens = T, .n_used = U,
                              .ids = rs->rids, .weights = rs->rw, .x = rs->eh, .x_stride = U * fe_pad,
                              .x_used_stride = fe_pad, .y = out, .y_stride = E, .y_used_stride = 0,
                              .accumulate = shared || acc};
    DCP_TRY(dcp_op_moe_down(cmd, &dn));
fail:
    return st;
}

static dcp_status ffn(dcp_model_state *s, uint32_t l)
{
    dcp_status st = DCP_OK;
    const ds2_weights *w = s->m->arch;
    ds2_state *ds = s->arch;
    for (uint32_t i = 0; i < s->m->nl; i++) {
        const dcp_ds2_layer_dev *Lw = &w->ranks[i].layers[l];
        dcp_cmd *cmd = dcp_graph_cmd(s, i);
        DCP_TRY(dcp_graph_norm(s, i, Lw->ffn_norm));
        dcp_cmd_barrier(cmd); /* xn (and x += parts) -> FFN */
        if (Lw->moe) DCP_TRY(ffn_moe(s, Lw, &w->ranks[i].shard, i));
        else DCP_TRY(dcp_graph_dense_ffn(s, i, &Lw->w_gu, &Lw->w_down, w->ranks[i].shard.ff, ds->r[i].gu, ds->r[i].h));
        dcp_cmd_barrier(cmd); /* x (residual) or part -> next layer / all-reduce */
    }
    dcp_graph_norm_done(s);
fail:
    return st;
}

const dcp_arch_ops dcp_arch_deepseek2 = {
    .name = "deepseek2",
    .check = ds2_check,
    .load = ds2_load,
    .unload = ds2_unload,
    .kv_pool = ds2_kv_pool,
    .state_create = ds2_state_create,
    .state_bytes = ds2_state_bytes,
    .state_destroy = ds2_state_destroy,
    .set_rows = ds2_set_rows,
    .key = ds2_key,
    .attention = attention,
    .ffn = ffn,
};
