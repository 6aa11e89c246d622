/* The llama architecture (GQA) on the shared graph (src/model/graph.h): its layer weights and their
 * sharding, its part of the run state, and one layer of the forward pass. The same code runs the
 * llama family, variants by flags of the weights:
 *   llama  (Llama 2/3.x, Mistral): NORM RoPE; optional Q/K/V biases; rope_freqs and scaling on the
 *          host (src/model/rope.c)
 *   qwen2  Q/K/V biases (attn_q.bias, ...) added after the fused projection; NEOX RoPE
 *   qwen3  per-head RMSNorm of Q and K (attn_q_norm / attn_k_norm) before RoPE; NEOX RoPE
 *   phi3   fused attn_qkv and gate|up (ffn_up of 2 n_ff rows) tensors, sliced per rank by row
 *          offsets; NEOX RoPE
 *
 * Sharding (TP size T, rank r): query heads [r Hq/T, (r+1) Hq/T); KV heads split when Hkv % T == 0,
 * else replicated (rank r holds KV head r / (T / Hkv)); FFN rows split unevenly (the first F % T
 * ranks get one more); attn_output and ffn_down split by input columns (row-parallel), their
 * partial outputs summed by the all-reduce; Q|K|V and gate|up fused into one matrix each (of
 * parts, one a type, when their types differ: dcp_matrix_join). DCP (size N > 1): groups of N
 * consecutive TP ranks share their KV heads; with q_replicate every rank also projects its whole group's query heads.
 *
 * One layer, per rank (the graph runs the all-reduce after each block; at TP 1 each rmsnorm is
 * fused into the load of the matmul after it where that pays, dcp_graph_norm_matmul):
 *   attention block  rmsnorm (+ the all-reduce's sum), Q|K|V matmul, RoPE of Q and K with the K/V
 *                    store into the rank's pool (only the token's owner stores it under DCP),
 *                    attention (paged decode over the rank's pool; DCP: the DCP attention step of
 *                    every group held here, rounds for its exchanges), o_proj (row-parallel)
 *   all-reduce
 *   FFN block        rmsnorm (+ sum), gate|up matmul with the SwiGLU, down (row-parallel)
 *   all-reduce */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/cp_internal.h"
#include "common/error.h"
#include "model/graph.h"
#include "ops/ops_internal.h"

typedef struct llama_layer {
    dcp_buffer *attn_norm, *ffn_norm; /* [n_embd] f32 */
    dcp_buffer *bqkv;                 /* [(qh + 2 hkv) D] f32 Q|K|V bias of the rank, or NULL */
    dcp_buffer *qk_norm;              /* [2][D] f32 Q norm then K norm (qwen3), or NULL */
    dcp_matrix wqkv;                  /* [(qh + 2 hkv) D][n_embd]: projected Q heads, local K, V heads */
    dcp_matrix wo;                    /* [n_embd][hq D]: the rank's input columns */
    dcp_matrix wgu;                   /* [2 f][n_embd]: local gate rows then up rows */
    dcp_matrix wdown;                 /* [n_embd][f_pad]: local input columns, zero-padded */
} llama_layer;

typedef struct llama_rank {
    uint32_t hq, hkv;      /* own query heads, local KV heads */
    uint32_t q0, kv0;      /* first own query head, first local KV head */
    uint32_t qh, qh0;      /* query heads this rank projects (own, or its DCP group's with
                            * q_replicate) and the first */
    uint32_t f, f0, f_pad; /* local FFN rows, first row, padded to a multiple of 4 */
    llama_layer *layers;   /* [n_layer] */
} llama_rank;

/* The variant's tensors (from the architecture and the file). */
typedef struct llama_variant {
    bool fused_qkv;        /* attn_qkv [(Hq + 2 Hkv) D][n_embd] instead of attn_q / attn_k / attn_v */
    bool fused_gate_up;    /* ffn_up [2 n_ff][n_embd] (gate rows, then up rows), no ffn_gate */
    bool bias;             /* Q/K/V biases (attn_q.bias ... or attn_qkv.bias) */
    bool qk_norm;          /* attn_q_norm / attn_k_norm [D] */
} llama_variant;

typedef struct llama_weights {
    llama_variant v;
    llama_rank *ranks;     /* [nl] */
} llama_weights;

/* Run state of one rank: activations [max_rows][...] f32. */
typedef struct llama_rank_state {
    uint32_t qkv4;                  /* qkv row stride (floats, a multiple of 4) */
    dcp_buffer *qkv;                /* [qkv4] projected Q | K | V */
    dcp_buffer *q;                  /* [qh][D] roped queries */
    dcp_buffer *o, *lse;            /* [hq][D], [hq] attention of the own heads */
    dcp_buffer *gu, *h;             /* [2 f], [f_pad] FFN */
    dcp_buffer *kv_stage, *stage_slots; /* q8_0 KV only: [2][hkv][D] roped K|V, [1] u32 0, 1, ...
                                     * (dcp_op_rope_store's two passes) */
    dcp_decode_plan **plans;        /* [n_layer] (DCP = 1) */
} llama_rank_state;

typedef struct llama_state {
    llama_rank_state *r;            /* [nl] */
    dcp_cp_attn **attns;            /* [n_layer][ng] (DCP > 1) */
    dcp_comm_buf *qv, *ov, *lv;     /* [nl] each rank's q, o, lse (for dcp_cp_attn_record) */
} llama_state;

static uint32_t round4(uint32_t n) { return (n + 3) / 4 * 4; }

/* ---- weights ------------------------------------------------------------------------------- */

static bool has_tensor(const dcp_gguf *g, const char *name) { return dcp_gguf_tensor_find(g, name) != NULL; }

/* The variant of the file: fused tensors (phi3), biases (qwen2; optional for llama), Q/K norms
 * (qwen3). */
static llama_variant llama_variant_of(const dcp_model_config *cfg, const dcp_gguf *g)
{
    llama_variant v = {0};
    v.fused_qkv = cfg->arch == DCP_ARCH_PHI3 || has_tensor(g, "blk.0.attn_qkv.weight");
    v.fused_gate_up = cfg->arch == DCP_ARCH_PHI3;
    v.bias = cfg->arch == DCP_ARCH_QWEN2 || has_tensor(g, v.fused_qkv ? "blk.0.attn_qkv.bias" : "blk.0.attn_q.bias");
    v.qk_norm = cfg->arch == DCP_ARCH_QWEN3 || has_tensor(g, "blk.0.attn_q_norm.weight");
    return v;
}

/* Whether tensor `name` is one that variant v of the architecture reads (llama.cpp's tensor list
 * of llama, qwen2, qwen3, phi3 for the features run here; rope_freqs.weight for llama only). */
static bool llama_tensor_expected(const dcp_model_config *cfg, const llama_variant *v, const char *name)
{
    if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output_norm.weight") || !strcmp(name, "output.weight"))
        return true;
    if (!strcmp(name, "rope_freqs.weight")) return cfg->arch == DCP_ARCH_LLAMA;
    if (strncmp(name, "blk.", 4)) return false;
    char *end;
    unsigned long l = strtoul(name + 4, &end, 10);
    if (end == name + 4 || *end != '.' || l >= cfg->n_layer || (name[4] == '0' && end != name + 5)) return false;
    const char *sfx = end + 1;
    static const char *const always[] = {"attn_norm.weight", "ffn_norm.weight", "attn_output.weight",
                                         "ffn_up.weight", "ffn_down.weight"};
    for (size_t i = 0; i < sizeof always / sizeof always[0]; i++)
        if (!strcmp(sfx, always[i])) return true;
    if (v->fused_qkv ? !strcmp(sfx, "attn_qkv.weight")
                     : !strcmp(sfx, "attn_q.weight") || !strcmp(sfx, "attn_k.weight") || !strcmp(sfx, "attn_v.weight"))
        return true;
    if (!v->fused_gate_up && !strcmp(sfx, "ffn_gate.weight")) return true;
    if (v->bias && (v->fused_qkv ? !strcmp(sfx, "attn_qkv.bias")
                                 : !strcmp(sfx, "attn_q.bias") || !strcmp(sfx, "attn_k.bias") ||
                                       !strcmp(sfx, "attn_v.bias")))
        return true;
    return v->qk_norm && (!strcmp(sfx, "attn_q_norm.weight") || !strcmp(sfx, "attn_k_norm.weight"));
}

static dcp_status llama_check(const dcp_model *m, const dcp_gguf *g)
{
    const dcp_model_config *cfg = &m->cfg;
    const uint32_t tp = m->tp, Hq = cfg->n_head, Hkv = cfg->n_head_kv;
    const char *name = dcp_gguf_name(g);
    if (cfg->head_dim_v != cfg->head_dim)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: value head size %u differs from key head size %u",
                        name, cfg->head_dim_v, cfg->head_dim);
    if (cfg->head_dim % 4)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: head size %u must be a multiple of 4", name, cfg->head_dim);
    if (Hq % tp || (Hkv % tp && tp % Hkv))
        return dcp_fail(DCP_ERR_CONFIG,
                        "tensor-parallel size %u: the %u query heads must divide by it and the %u KV heads must "
                        "divide by it or divide it", tp, Hq, Hkv);
    /* Tensors of features this build does not run: refused by name rather than ignored. */
    static const char *const unsupported[][2] = {
        {"rope_factors_long.weight", "LongRoPE frequency factors (Phi-3 128k models)"},
        {"rope_factors_short.weight", "LongRoPE frequency factors (Phi-3 128k models)"},
        {"blk.0.attn_output.bias", "an attention output bias"},
        {"blk.0.ffn_up.bias", "feed-forward biases"},
        {"blk.0.ffn_down.bias", "feed-forward biases"},
        {"output.bias", "an output bias"},
        {"blk.0.ffn_gate_inp.weight", "mixture-of-experts layers"},
    };
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++)
        if (has_tensor(g, unsupported[i][0]))
            return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tensor %s (%s) is not supported for architecture %s", name,
                            unsupported[i][0], unsupported[i][1], cfg->arch_name);
    /* Every other tensor must be one the variant reads: llama.cpp refuses a file with more
     * ("wrong number of tensors"), e.g. a rope_freqs.weight in a qwen2 / qwen3 / phi3 file. */
    const llama_variant v = llama_variant_of(cfg, g);
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) {
        const char *t = dcp_gguf_tensor_at(g, i)->name;
        if (!llama_tensor_expected(cfg, &v, t))
            return dcp_fail(DCP_ERR_FORMAT, "%s: tensor %s is not a tensor of architecture %s%s (llama.cpp refuses "
                            "the file: wrong number of tensors, %llu in the file)", name, t, cfg->arch_name,
                            v.fused_qkv ? " (fused attn_qkv layout)" : "",
                            (unsigned long long)dcp_gguf_tensor_count(g));
    }
    return dcp_cp_check(tp, m->dcp, Hq, Hkv);
}

/* The layers of TP rank r (local index i). */
static dcp_status load_rank(dcp_model *m, dcp_load_ctx *lc, const llama_variant *v, uint32_t i, llama_rank *rw)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *cfg = &m->cfg;
    const uint32_t r = m->first + i, tp = m->tp, dcp = m->dcp;
    const uint32_t E = cfg->n_embd, D = cfg->head_dim, Hq = cfg->n_head, Hkv = cfg->n_head_kv, F = cfg->n_ff;
    dcp_device *dev = m->ranks[i].dev;
    rw->hq = Hq / tp;
    rw->q0 = r * rw->hq;
    if (Hkv % tp == 0) {
        rw->hkv = Hkv / tp;
        rw->kv0 = r * rw->hkv;
    } else {
        rw->hkv = 1;
        rw->kv0 = r / (tp / Hkv);
    }
    rw->qh = m->q_replicate ? rw->hq * dcp : rw->hq;
    rw->qh0 = m->q_replicate ? r / dcp * rw->qh : rw->q0;
    rw->f = F / tp + (r < F % tp ? 1 : 0);
    rw->f0 = r * (F / tp) + (r < F % tp ? r : F % tp);
    rw->f_pad = round4(rw->f);
    rw->layers = calloc(cfg->n_layer, sizeof *rw->layers);
    if (!rw->layers) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    const uint64_t vE[1] = {E};
    const uint32_t qd = Hq * D, kd = Hkv * D;
    for (uint32_t l = 0; l < cfg->n_layer; l++) {
        llama_layer *L = &rw->layers[l];
        enum { NQ, NK, NV, NQKV, NO, NG, NU, ND, NAN_, NFN, NBQ, NBK, NBV, NBQKV, NQN, NKN, NCOUNT };
        char n[NCOUNT][64];
        const char *sfx[NCOUNT] = {"attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_qkv.weight",
                                   "attn_output.weight", "ffn_gate.weight", "ffn_up.weight", "ffn_down.weight",
                                   "attn_norm.weight", "ffn_norm.weight", "attn_q.bias", "attn_k.bias",
                                   "attn_v.bias", "attn_qkv.bias", "attn_q_norm.weight", "attn_k_norm.weight"};
        for (int k = 0; k < NCOUNT; k++) snprintf(n[k], 64, "blk.%u.%s", l, sfx[k]);
        /* Q | K | V rows of the rank: the projected query heads, the local KV heads. Fused: the
         * same tensor at row offsets 0, Hq D, (Hq + Hkv) D. */
        const uint32_t q_r0 = rw->qh0 * D, k_r0 = rw->kv0 * D;
        if (v->fused_qkv) {
            const uint64_t tot = (uint64_t)qd + 2ull * kd;
            dcp_slice qkv[3] = {{n[NQKV], q_r0, rw->qh * D, 0, E},
                                {n[NQKV], qd + k_r0, rw->hkv * D, 0, E},
                                {n[NQKV], qd + kd + k_r0, rw->hkv * D, 0, E}};
            const uint64_t k3[3] = {E, E, E}, r3[3] = {tot, tot, tot};
            DCP_TRY(dcp_load_slices(lc, dev, 3, qkv, k3, r3, E, &L->wqkv));
            if (v->bias) {
                dcp_vslice b[3] = {{n[NBQKV], q_r0, rw->qh * D, tot}, {n[NBQKV], qd + k_r0, rw->hkv * D, tot},
                                   {n[NBQKV], qd + kd + k_r0, rw->hkv * D, tot}};
                DCP_TRY(dcp_load_vector_slices(lc, dev, 3, b, &L->bqkv));
            }
        } else {
            dcp_slice qkv[3] = {{n[NQ], q_r0, rw->qh * D, 0, E}, {n[NK], k_r0, rw->hkv * D, 0, E},
                                {n[NV], k_r0, rw->hkv * D, 0, E}};
            const uint64_t k3[3] = {E, E, E}, r3[3] = {qd, kd, kd};
            DCP_TRY(dcp_load_slices(lc, dev, 3, qkv, k3, r3, E, &L->wqkv));
            if (v->bias) {
                dcp_vslice b[3] = {{n[NBQ], q_r0, rw->qh * D, qd}, {n[NBK], k_r0, rw->hkv * D, kd},
                                   {n[NBV], k_r0, rw->hkv * D, kd}};
                DCP_TRY(dcp_load_vector_slices(lc, dev, 3, b, &L->bqkv));
            }
        }
        if (v->qk_norm) {
            dcp_vslice qk[2] = {{n[NQN], 0, D, D}, {n[NKN], 0, D, D}};
            DCP_TRY(dcp_load_vector_slices(lc, dev, 2, qk, &L->qk_norm));
        }
        dcp_slice wo = {n[NO], 0, E, rw->q0 * D, rw->hq * D};
        const uint64_t kq[1] = {qd};
        DCP_TRY(dcp_load_slices(lc, dev, 1, &wo, kq, vE, rw->hq * D, &L->wo));
        /* gate | up rows of the rank; fused: ffn_up holds gate rows [0, F) then up rows [F, 2F). */
        const uint64_t k2[2] = {E, E};
        if (v->fused_gate_up) {
            dcp_slice gu[2] = {{n[NU], rw->f0, rw->f, 0, E}, {n[NU], F + rw->f0, rw->f, 0, E}};
            const uint64_t r2[2] = {2ull * F, 2ull * F};
            DCP_TRY(dcp_load_slices(lc, dev, 2, gu, k2, r2, E, &L->wgu));
        } else {
            dcp_slice gu[2] = {{n[NG], rw->f0, rw->f, 0, E}, {n[NU], rw->f0, rw->f, 0, E}};
            const uint64_t r2[2] = {F, F};
            DCP_TRY(dcp_load_slices(lc, dev, 2, gu, k2, r2, E, &L->wgu));
        }
        const uint64_t rF[1] = {F};
        dcp_slice dn = {n[ND], 0, E, rw->f0, rw->f};
        DCP_TRY(dcp_load_slices(lc, dev, 1, &dn, rF, vE, rw->f_pad, &L->wdown));
        DCP_TRY(dcp_load_norm(lc, dev, n[NAN_], E, &L->attn_norm));
        DCP_TRY(dcp_load_norm(lc, dev, n[NFN], E, &L->ffn_norm));
        m->bytes += dcp_matrix_device_bytes(&L->wqkv) + dcp_matrix_device_bytes(&L->wo) +
                    dcp_matrix_device_bytes(&L->wgu) + dcp_matrix_device_bytes(&L->wdown) + 8ull * E + (L->bqkv ? dcp_buffer_size(L->bqkv) : 0) +
                    (L->qk_norm ? dcp_buffer_size(L->qk_norm) : 0);
    }
fail:
    return st;
}

static void llama_unload(dcp_model *m)
{
    llama_weights *w = m->arch;
    if (!w) return;
    for (uint32_t i = 0; w->ranks && i < m->nl; i++) {
        llama_rank *rw = &w->ranks[i];
        for (uint32_t l = 0; rw->layers && l < m->cfg.n_layer; l++) {
            llama_layer *L = &rw->layers[l];
            dcp_buffer_destroy(L->attn_norm);
            dcp_buffer_destroy(L->ffn_norm);
            dcp_buffer_destroy(L->bqkv);
            dcp_buffer_destroy(L->qk_norm);
            dcp_matrix_destroy(&L->wqkv);
            dcp_matrix_destroy(&L->wo);
            dcp_matrix_destroy(&L->wgu);
            dcp_matrix_destroy(&L->wdown);
        }
        free(rw->layers);
    }
    free(w->ranks);
    free(w);
    m->arch = NULL;
}

static dcp_status llama_load(dcp_model *m, dcp_load_ctx *lc)
{
    dcp_status st = DCP_OK;
    llama_weights *w = calloc(1, sizeof *w);
    if (!w) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    m->arch = w;
    w->v = llama_variant_of(&m->cfg, lc->g);
    w->ranks = calloc(m->nl, sizeof *w->ranks);
    if (!w->ranks) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < m->nl; i++) DCP_TRY(load_rank(m, lc, &w->v, i, &w->ranks[i]));
fail:
    return st;
}

static void llama_kv_pool(const dcp_model *m, uint32_t i, dcp_kv_pool_config *pool)
{
    const llama_weights *w = m->arch;
    pool->kv_heads = w->ranks[i].hkv;
    pool->head_dim = m->cfg.head_dim;
}

/* ---- run state ----------------------------------------------------------------------------- */

static void llama_state_destroy(dcp_model_state *s)
{
    llama_state *ls = s->arch;
    const uint32_t L = s->m->cfg.n_layer;
    for (uint32_t i = 0; ls->r && i < s->m->nl; i++) {
        llama_rank_state *rs = &ls->r[i];
        for (uint32_t l = 0; rs->plans && l < L; l++) dcp_decode_plan_destroy(rs->plans[l]);
        dcp_buffer *bufs[] = {rs->qkv, rs->q, rs->o, rs->lse, rs->gu, rs->h, rs->kv_stage, rs->stage_slots};
        for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++) dcp_buffer_destroy(bufs[k]);
        free(rs->plans);
    }
    for (uint32_t k = 0; ls->attns && k < s->ng * L; k++) dcp_cp_attn_destroy(ls->attns[k]);
    free(ls->attns);
    free(ls->r);
    free(ls->qv);
    free(ls->ov);
    free(ls->lv);
    free(ls);
    s->arch = NULL;
}

/* Whether a layer of the rank needs gu: a gate|up of two parts (gate and up of different types)
 * runs matmul then swiglu through it; a one-part one writes h itself (dcp_graph_dense_ffn). */
static bool rank_needs_gu(const llama_rank *rw, uint32_t n_layer)
{
    for (uint32_t l = 0; l < n_layer; l++)
        if (!dcp_matmul_can_glu(&rw->layers[l].wgu)) return true;
    return false;
}

/* Floats per row of a rank's activations: qkv, q, o, lse, gu (1 where no layer needs it), h
 * (rank_state_create allocates [max_rows] of each, llama_state_bytes counts them). */
enum { LLAMA_ACTS = 6 };
static void rank_act_floats(const llama_rank *rw, uint64_t D, uint32_t n_layer, uint64_t f[LLAMA_ACTS])
{
    const uint64_t gu = rank_needs_gu(rw, n_layer) ? 2ull * rw->f : 0;
    const uint64_t v[LLAMA_ACTS] = {round4((rw->qh + 2 * rw->hkv) * (uint32_t)D), rw->qh * D, rw->hq * D, rw->hq,
                                    gu, rw->f_pad};
    for (int k = 0; k < LLAMA_ACTS; k++) f[k] = v[k] ? v[k] : 1;
}

/* The decode plan config of a rank's layer (DCP = 1). */
static dcp_decode_config rank_plan_config(const llama_rank *rw, const dcp_model_state_config *c, uint32_t max_blocks)
{
    dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
    dc.batch = c->max_rows;
    dc.q_heads = rw->hq;
    dc.max_blocks = max_blocks;
    dc.chunk_tokens = c->chunk_tokens;
    return dc;
}

/* The DCP step config of a group (rw: its first local rank's weights). */
static dcp_cp_attn_config group_attn_config(const dcp_model *m, const llama_rank *rw, const dcp_model_state_config *c)
{
    dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
    ac.batch = c->max_rows;
    ac.heads_local = rw->hq;
    ac.backend = c->backend;
    ac.q_replicate = m->q_replicate;
    ac.chunk_tokens = c->chunk_tokens;
    return ac;
}

static dcp_status llama_state_bytes(const dcp_model *m, uint32_t i, const dcp_model_state_config *c,
                                    const dcp_kv_cache_config *kc, dcp_model_memory *mem, uint64_t *dcp_block)
{
    const llama_rank *rw = &((const llama_weights *)m->arch)->ranks[i];
    uint64_t f[LLAMA_ACTS];
    rank_act_floats(rw, m->cfg.head_dim, m->cfg.n_layer, f);
    for (int k = 0; k < LLAMA_ACTS; k++) dcp_graph_count(mem, &mem->activations, f[k] * c->max_rows * 4, "a layer activation");
    if (c->kv_dtype == DCP_DTYPE_Q8_0) {
        dcp_graph_count(mem, &mem->activations, 2ull * rw->hkv * m->cfg.head_dim * c->max_rows * 4, "the q8_0 KV stage");
        dcp_graph_count(mem, &mem->activations, (uint64_t)c->max_rows * 4, "the q8_0 KV stage slots");
    }
    uint64_t bytes, largest;
    dcp_status st;
    if (m->dcp == 1) {
        dcp_decode_config dc = rank_plan_config(rw, c, kc->max_blocks);
        if ((st = dcp_decode_plan_bytes(&kc->pool, &dc, c->n_ctx, &bytes, &largest)) != DCP_OK) return st;
        for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
            mem->attention += bytes;
            if (largest > mem->largest) {
                mem->largest = largest;
                mem->largest_what = "an attention plan's block table or split-KV workspace";
            }
        }
        return DCP_OK;
    }
    /* The group's first rank sets the step's heads (every rank of a group holds as many). */
    dcp_cp_attn_config ac = group_attn_config(m, rw, c);
    uint64_t block;
    if ((st = dcp_cp_attn_bytes(kc, &ac, c->n_ctx, &bytes, &largest, &block)) != DCP_OK) return st;
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) mem->attention += bytes;
    if (largest > mem->largest) {
        mem->largest = largest;
        mem->largest_what = "a DCP step's block table, split-KV workspace or partial states";
    }
    if (block > *dcp_block) *dcp_block = block;
    return DCP_OK;
}

static dcp_status rank_state_create(dcp_model_state *s, llama_state *ls, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const llama_rank *rw = &((const llama_weights *)m->arch)->ranks[i];
    llama_rank_state *rs = &ls->r[i];
    dcp_device *dev = m->ranks[i].dev;
    const uint64_t R = s->cfg.max_rows, D = m->cfg.head_dim;
    rs->qkv4 = round4((rw->qh + 2 * rw->hkv) * (uint32_t)D);
    uint64_t f[LLAMA_ACTS];
    rank_act_floats(rw, D, m->cfg.n_layer, f);
    dcp_buffer **acts[LLAMA_ACTS] = {&rs->qkv, &rs->q, &rs->o, &rs->lse, &rs->gu, &rs->h};
    for (int k = 0; k < LLAMA_ACTS; k++) DCP_TRY(dcp_buffer_create(dev, f[k] * R * 4, DCP_MEMORY_DEVICE, acts[k]));
    /* The padding columns of h meet zero weight columns of ffn_down: keep them 0 (never NaN). */
    DCP_TRY(dcp_buffer_fill(rs->h, 0, dcp_buffer_size(rs->h), 0));
    if (s->cfg.kv_dtype == DCP_DTYPE_Q8_0) {
        DCP_TRY(dcp_buffer_create(dev, 2 * rw->hkv * D * R * 4, DCP_MEMORY_DEVICE, &rs->kv_stage));
        DCP_TRY(dcp_buffer_create(dev, R * 4, DCP_MEMORY_DEVICE, &rs->stage_slots));
        uint32_t *ids = malloc(R * 4);
        if (!ids) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        for (uint32_t t = 0; t < R; t++) ids[t] = t;
        st = dcp_buffer_upload(rs->stage_slots, 0, ids, R * 4);
        free(ids);
        if (st != DCP_OK) goto fail;
    }
    ls->qv[i] = (dcp_comm_buf){rs->q, 0};
    ls->ov[i] = (dcp_comm_buf){rs->o, 0};
    ls->lv[i] = (dcp_comm_buf){rs->lse, 0};
    if (m->dcp > 1) return DCP_OK;
    rs->plans = calloc(m->cfg.n_layer, sizeof *rs->plans);
    if (!rs->plans) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t l = 0; l < m->cfg.n_layer; l++) {
        dcp_decode_config dc = rank_plan_config(rw, &s->cfg, s->max_blocks);
        DCP_TRY(dcp_decode_plan_create(dcp_kv_cache_pool(s->caches[l * s->ng + s->r[i].g], 0), &dc, &rs->plans[l]));
    }
fail:
    return st;
}

static dcp_status llama_state_create(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const llama_weights *w = m->arch;
    const uint32_t L = m->cfg.n_layer, G = s->ng;
    llama_state *ls = calloc(1, sizeof *ls);
    if (!ls) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->arch = ls;
    ls->r = calloc(m->nl, sizeof *ls->r);
    ls->qv = calloc(m->nl, sizeof *ls->qv);
    ls->ov = calloc(m->nl, sizeof *ls->ov);
    ls->lv = calloc(m->nl, sizeof *ls->lv);
    if (m->dcp > 1) ls->attns = calloc((size_t)L * G, sizeof *ls->attns);
    if (!ls->r || !ls->qv || !ls->ov || !ls->lv || (m->dcp > 1 && !ls->attns))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t i = 0; i < m->nl; i++) DCP_TRY(rank_state_create(s, ls, i));
    for (uint32_t l = 0; m->dcp > 1 && l < L; l++)
        for (uint32_t g = 0; g < G; g++) {
            dcp_cp_attn_config ac = group_attn_config(m, &w->ranks[g * s->gn], &s->cfg);
            DCP_TRY(dcp_cp_attn_create(s->gcomm[g], s->caches[l * G + g], &ac, &ls->attns[l * G + g]));
        }
fail:
    return st;
}

static dcp_status llama_set_rows(dcp_model_state *s)
{
    dcp_status st = DCP_OK;
    llama_state *ls = s->arch;
    const uint32_t L = s->m->cfg.n_layer;
    if (s->m->dcp > 1) return dcp_graph_cp_set_rows(s, ls->attns);
    for (uint32_t i = 0; i < s->m->nl; i++)
        for (uint32_t l = 0; l < L; l++) {
            dcp_graph_rows_tables(s, l, i);
            DCP_TRY(dcp_decode_plan_set_rows(ls->r[i].plans[l], s->rows, s->lens, s->bt));
        }
fail:
    return st;
}

static uint64_t llama_key(const dcp_model_state *s)
{
    const llama_state *ls = s->arch;
    const uint32_t L = s->m->cfg.n_layer;
    uint64_t key = DCP_STEP_KEY_SEED;
    if (s->m->dcp > 1) return dcp_graph_cp_key(s, ls->attns, key);
    for (uint32_t l = 0; l < L; l++)
        for (uint32_t i = 0; i < s->m->nl; i++) key = dcp_step_key_mix(key, dcp_decode_plan_key(ls->r[i].plans[l]));
    return key;
}

/* ---- one layer ----------------------------------------------------------------------------- */

static dcp_status attention(dcp_model_state *s, uint32_t l)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const llama_weights *w = m->arch;
    llama_state *ls = s->arch;
    const uint32_t E = m->cfg.n_embd, D = m->cfg.head_dim, T = s->rows;
    for (uint32_t i = 0; i < m->nl; i++) {
        const llama_rank *rw = &w->ranks[i];
        const llama_layer *L = &rw->layers[l];
        llama_rank_state *rs = &ls->r[i];
        dcp_cmd *cmd = dcp_graph_cmd(s, i);
        dcp_matmul_args qkv = {.w = &L->wqkv, .y = rs->qkv, .y_stride = rs->qkv4, .tokens = T};
        DCP_TRY(dcp_graph_norm_matmul(s, i, L->attn_norm, &qkv)); /* the norm, or x and the norm for the load */
        DCP_TRY(dcp_op_matmul(cmd, &qkv));
        dcp_cmd_barrier(cmd); /* qkv -> bias / Q,K norm / rope_store */
        if (L->bqkv) {
            DCP_TRY(dcp_op_add_rows(cmd, &(dcp_add_rows_args){.y = rs->qkv, .y_stride = rs->qkv4, .b = L->bqkv,
                                                               .n = (rw->qh + 2 * rw->hkv) * D, .tokens = T}));
            dcp_cmd_barrier(cmd); /* qkv + bias -> Q,K norm / rope_store */
        }
        if (L->qk_norm) {
            DCP_TRY(dcp_op_rmsnorm_heads(cmd, &(dcp_rmsnorm_heads_args){.x = rs->qkv, .x_stride = rs->qkv4,
                                                                         .heads = rw->qh + rw->hkv, .head_dim = D,
                                                                         .w_split = rw->qh, .w = L->qk_norm,
                                                                         .tokens = T, .eps = m->cfg.rms_eps}));
            dcp_cmd_barrier(cmd); /* normed Q, K heads -> rope_store */
        }
        dcp_rope_store_args ra = {.tokens = T,
                                  .q_heads = rw->qh,
                                  .kv_heads = rw->hkv,
                                  .head_dim = D,
                                  .n_rot = m->cfg.n_rot,
                                  .src_stride = rs->qkv4,
                                  .src = rs->qkv,
                                  .slot = s->r[i].slots[l],
                                  .cs = dcp_graph_rope(s, i),
                                  .q_out = rs->q,
                                  .pool = dcp_kv_cache_pool(s->caches[l * s->ng + s->r[i].g], s->r[i].gl),
                                  .neox = m->cfg.rope_neox,
                                  .kv_stage = rs->kv_stage,
                                  .stage_slots = rs->stage_slots};
        DCP_TRY(dcp_op_rope_store(cmd, &ra));
        dcp_cmd_barrier(cmd); /* q, KV pages -> attention */
        if (m->dcp == 1) {
            DCP_TRY(dcp_decode_record(cmd, rs->plans[l], rs->q, 0, rs->o, 0, rs->lse, 0));
            dcp_cmd_barrier(cmd); /* o -> o_proj */
        }
    }
    dcp_graph_norm_done(s);
    if (m->dcp > 1) {
        DCP_TRY(dcp_cp_attn_record(s->step, ls->attns + (size_t)l * s->ng, s->ng, ls->qv, ls->ov, ls->lv));
        for (uint32_t i = 0; i < m->nl; i++) dcp_cmd_barrier(dcp_graph_cmd(s, i)); /* merged o -> o_proj */
    }
    for (uint32_t i = 0; i < m->nl; i++) {
        const llama_rank *rw = &w->ranks[i];
        DCP_TRY(dcp_op_matmul(dcp_graph_cmd(s, i),
                              &(dcp_matmul_args){.w = &rw->layers[l].wo, .x = ls->r[i].o, .x_stride = rw->hq * D,
                                                 .y = dcp_graph_row_parallel_out(s, i), .y_stride = E, .tokens = T,
                                                 .accumulate = dcp_graph_row_parallel_accumulate(s)}));
        dcp_cmd_barrier(dcp_graph_cmd(s, i)); /* x (residual) or part -> ffn rmsnorm / all-reduce */
    }
fail:
    return st;
}

static dcp_status ffn(dcp_model_state *s, uint32_t l)
{
    dcp_status st = DCP_OK;
    const dcp_model *m = s->m;
    const llama_weights *w = m->arch;
    llama_state *ls = s->arch;
    for (uint32_t i = 0; i < m->nl; i++) {
        const llama_rank *rw = &w->ranks[i];
        const llama_layer *L = &rw->layers[l];
        llama_rank_state *rs = &ls->r[i];
        dcp_cmd *cmd = dcp_graph_cmd(s, i);
        DCP_TRY(dcp_graph_norm_ffn(s, i, L->ffn_norm, &L->wgu, &L->wdown, rw->f, rs->gu, rs->h));
        dcp_cmd_barrier(cmd); /* x (residual) or part -> next layer / all-reduce */
    }
    dcp_graph_norm_done(s);
fail:
    return st;
}

const dcp_arch_ops dcp_arch_llama = {
    .name = "llama",
    .check = llama_check,
    .load = llama_load,
    .count_only_cheap = true,
    .unload = llama_unload,
    .kv_pool = llama_kv_pool,
    .state_create = llama_state_create,
    .state_bytes = llama_state_bytes,
    .state_destroy = llama_state_destroy,
    .set_rows = llama_set_rows,
    .key = llama_key,
    .attention = attention,
    .ffn = ffn,
};
