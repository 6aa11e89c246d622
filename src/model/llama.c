/* The llama model over a tensor-parallel group of devices (TP = 1: one device, one submit per
 * step): weight upload and sharding from GGUF, run state, and the forward pass.
 *
 * Sharding (TP size T, rank r): query heads [r Hq/T, (r+1) Hq/T); KV heads split when Hkv % T == 0,
 * else replicated (rank r holds KV head r / (T / Hkv)); FFN rows split unevenly (the first F % T
 * ranks get one more); o_proj and ffn_down split by input columns (row-parallel), their partial
 * outputs summed by an all-reduce over the group; embedding, norms and output head replicated
 * (only rank 0 computes the logits). With T = 1 a whole step is one command buffer; with T > 1 a
 * step is one submit-and-wait round of every rank's command per exchange: each all-reduce (parts
 * put into the communicator's mailboxes, summed by the next rmsnorm in rank order: no host copy
 * with hostmem, no host sum), each exchange of the DCP decode step (a2a 1, ag_rs 2), and the end.
 * Decode steps are recorded once and replayed while the plans' chunking and the mailboxes stay
 * the same (replay_key).
 *
 * DCP (size N > 1, groups of N consecutive TP ranks sharing their KV heads): every rank computes
 * the Q of its group's N * Hl heads; each layer has one dcp_kv_cache per group (interleaved
 * placement), into whose pools rope_store writes the K/V rows each rank owns (slots from
 * dcp_kv_cache_append). Decode steps run the DCP attention step (include/dcpvk/cp.h: a2a or
 * ag_rs, Q gathered or replicated). Prefill chunks decode the chunk's queries causally over each
 * rank's shard (local lengths per token), all-gather the partial states (O, LSE) inside the group
 * and merge them exactly with lse_merge; each rank keeps its own heads for o_proj.
 *
 * Over MPI (weights of TP ranks [first, first + nl) from dcp_llama_weights_create_ranks) the
 * arrays below hold this process's ranks only; the TP communicator spans MPI_COMM_WORLD, a DCP
 * group spread over processes has a sub-communicator (dcp_comm_init_mpi_split), and every process
 * computes the logits on its first rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/comm.h"
#include "dcpvk/cp.h"
#include "dcpvk/kv.h"
#include "dcpvk/model.h"
#include "model/ops.h"
#include "attn/cp_internal.h"
#include "comm/comm_internal.h"
#include "vk/hostmem.h"

typedef struct llama_layer {
    dcp_buffer *attn_norm, *ffn_norm; /* [n_embd] f32 */
    dcp_matrix wqkv;                  /* [(hq + 2 hkv) D][n_embd]: local Q, K, V heads */
    dcp_matrix wo;                    /* [n_embd][hq D]: the rank's input columns */
    dcp_matrix wgu;                   /* [2 f][n_embd]: local gate rows then up rows */
    dcp_matrix wdown;                 /* [n_embd][f_pad]: local input columns, zero-padded */
} llama_layer;

typedef struct rank_weights {
    dcp_device *dev;
    uint32_t hq, hkv;      /* local query / KV heads */
    uint32_t q0, kv0;      /* first local query head, first local KV head */
    uint32_t gq, gq0;      /* query heads this rank projects (its DCP group's: N * hq) and the first */
    uint32_t f, f0, f_pad; /* local FFN rows, first row, padded to a multiple of 4 */
    dcp_matrix tok_embd;   /* [n_vocab][n_embd] */
    dcp_matrix output;     /* [n_vocab][n_embd] (rank 0 only) */
    dcp_buffer *out_norm;  /* [n_embd] f32 */
    llama_layer *layers;   /* [n_layer] */
} rank_weights;

struct dcp_llama_weights {
    dcp_model_config cfg;
    uint32_t tp, dcp;      /* TP and DCP sizes of the whole group */
    uint32_t first, nl;    /* TP ranks held here: [first, first + nl) (one process: 0, tp) */
    rank_weights *ranks;   /* [nl]: ranks[i] is TP rank first + i */
    uint64_t bytes;
};

typedef struct rank_state {
    dcp_device *dev;
    uint32_t qkv4, hd4;             /* row strides (floats, multiples of 4) */
    uint32_t g, gr;                 /* DCP group (among those held here) and rank inside it */
    uint32_t gl;                    /* index among the group's ranks held here (its caches', attns',
                                     * communicator's local rank; gr in one process) */
    dcp_kv_pool **pools;            /* [n_layer] (owned when DCP = 1, else the group caches' pools) */
    dcp_decode_plan **dplans;       /* [n_layer] batch 1 (DCP = 1) */
    dcp_decode_plan **pplans;       /* [n_layer] batch prefill_chunk (NULL if chunk 1) */
    dcp_buffer *x, *xn, *qkv, *q, *o, *lse, *gu, *h, *part; /* activations [prefill_chunk][stride] f32 */
    dcp_buffer *o_all, *lse_all;    /* DCP prefill: gathered partials [N][chunk][gq][D], [N][chunk][gq] */
    dcp_buffer *om, *lsem;          /* DCP prefill: merged [chunk][gq][D], [chunk][gq] */
    dcp_buffer **slots;             /* [n_layer] host-visible [chunk] u32 KV slots */
    dcp_buffer *ids, *cs;           /* host-visible step inputs: [chunk] u32, [chunk][n_rot/2][2] f32 */
    dcp_buffer *logits, *next;      /* host-visible outputs: [n_vocab] f32, [1] u32 */
    dcp_cmd *cmd;
} rank_state;

struct dcp_llama_state {
    dcp_llama_weights *w;
    dcp_llama_config cfg;
    uint32_t pos;
    uint32_t pages;                 /* pages per layer pool (identity block table) */
    uint32_t *bt;                   /* [prefill_chunk][pages] identity rows */
    uint32_t *lens;                 /* [prefill_chunk] */
    rank_state *r;                  /* [nl] the ranks held here (all tp in one process) */
    uint32_t ng, gn;                /* DCP groups held here (wholly or in part), and ranks of each
                                     * held here: one process: tp / dcp, dcp */
    dcp_comm *comm;                 /* tp > 1 */
    dcp_comm **gcomm;               /* [ng] DCP group communicators (dcp > 1) */
    dcp_kv_cache **caches;          /* [ng][n_layer] (dcp > 1) */
    dcp_cp_attn **attns;               /* [ng][n_layer] (dcp > 1) */
    uint64_t tokens_run;            /* tokens processed (for the exchange statistics) */
    /* Decode-step replay (see replay_key): a decode step's commands depend only on the plans'
     * chunking and the communicators' mailboxes, so they are recorded once and resubmitted. */
    dcp_cmd **home;                 /* [nl] each rank's own command (rank_state.cmd outside decode steps) */
    dcp_cmd **rc;                   /* [rc_cap][nl] the recorded rounds of a decode step */
    uint32_t rc_cap, rc_rounds;     /* rounds allocated; rounds of the valid recording (0: none) */
    uint32_t rc_round;              /* round being recorded */
    int rc_recording;               /* 1 while a decode step records into rc */
    uint64_t rc_key;                /* replay_key of the valid recording */
    struct rc_action *act;          /* [act_count] host steps after the rounds of the recording */
    uint32_t act_count, act_cap;
    uint32_t ar_tokens;             /* > 0: an all-reduce of that many rows awaits its sum (norm_x) */
};

/* A host step between two rounds of a recorded decode step: a communicator's put exchange or a
 * DCP step's exchange, replayed in order after round `round`. */
typedef struct rc_action {
    uint32_t round;
    dcp_comm *comm;                 /* put exchange (attn NULL) */
    dcp_coll kind;
    uint64_t slot, payload;
    dcp_cp_attn *attn;                 /* DCP step exchange `phase` */
    uint32_t phase;
} rc_action;

/* ---- weights ------------------------------------------------------------------------------- */

typedef struct load_ctx {
    const dcp_gguf *g;
    dcp_progress_fn progress;
    void *user;
    uint64_t done, total;
} load_ctx;

static dcp_status find_tensor(const dcp_gguf *g, const char *name, uint64_t ne0, uint64_t ne1,
                              const dcp_gguf_tensor **out)
{
    *out = NULL;
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
static int slice_native(const dcp_gguf_tensor *t, const slice *s, uint32_t k_pad)
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
    int native = 1;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(find_tensor(lc->g, sl[i].name, k_total[i], rows_total[i], &t[i]));
        if (t[i]->type != t[0]->type || !slice_native(t[i], &sl[i], k_pad)) native = 0;
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

static dcp_status load_rank(load_ctx *lc, const dcp_model_config *cfg, uint32_t tp, uint32_t dcp, uint32_t r,
                            int with_output, rank_weights *rw)
{
    dcp_status st = DCP_OK;
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
    rw->gq = rw->hq * dcp;
    rw->gq0 = r / dcp * rw->gq;
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
        slice qkv[3] = {{n[0], rw->gq0 * D, rw->gq * D, 0, E},
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

dcp_status dcp_llama_weights_create_tp(dcp_device *const *devs, uint32_t tp, uint32_t dcp, const dcp_gguf *g,
                                       const dcp_model_config *cfg, dcp_progress_fn prog, void *user,
                                       dcp_llama_weights **out)
{
    return dcp_llama_weights_create_ranks(devs, 0, tp, tp, dcp, g, cfg, prog, user, out);
}

dcp_status dcp_llama_weights_create_ranks(dcp_device *const *devs, uint32_t first, uint32_t count, uint32_t tp,
                                          uint32_t dcp, const dcp_gguf *g, const dcp_model_config *cfg,
                                          dcp_progress_fn prog, void *user, dcp_llama_weights **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    if (cfg->arch != DCP_ARCH_LLAMA)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: architecture %s is not supported (llama only)",
                        dcp_gguf_name(g), cfg->arch_name);
    if (cfg->head_dim_v != cfg->head_dim)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: value head size %u differs from key head size %u",
                        dcp_gguf_name(g), cfg->head_dim_v, cfg->head_dim);
    if (cfg->n_embd % 4 || cfg->head_dim % 4)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: embedding %u and head size %u must be multiples of 4",
                        dcp_gguf_name(g), cfg->n_embd, cfg->head_dim);
    const uint32_t Hq = cfg->n_head, Hkv = cfg->n_head_kv;
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
    dcp_llama_weights *w = calloc(1, sizeof *w);
    if (!w) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    w->cfg = *cfg;
    w->tp = tp;
    w->dcp = dcp;
    w->first = first;
    w->nl = count;
    w->ranks = calloc(count, sizeof *w->ranks);
    if (!w->ranks) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    load_ctx lc = {g, prog, user, 0, 0};
    for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) lc.total += dcp_gguf_tensor_at(g, i)->size;
    lc.total *= count; /* embedding and norms are replicated; close enough for a progress bar */
    for (uint32_t r = 0; r < count; r++) {
        w->ranks[r].dev = devs[r];
        DCP_TRY(load_rank(&lc, cfg, tp, dcp, first + r, r == 0, &w->ranks[r]));
        rank_weights *rw = &w->ranks[r];
        w->bytes += dcp_buffer_size(rw->tok_embd.buf) + (rw->output.buf ? dcp_buffer_size(rw->output.buf) : 0) +
                    4ull * cfg->n_embd;
        for (uint32_t l = 0; l < cfg->n_layer; l++) {
            llama_layer *L = &rw->layers[l];
            w->bytes += dcp_buffer_size(L->wqkv.buf) + dcp_buffer_size(L->wo.buf) + dcp_buffer_size(L->wgu.buf) +
                        dcp_buffer_size(L->wdown.buf) + 8ull * cfg->n_embd;
        }
    }
    if (prog) prog(user, lc.total, lc.total);
    *out = w;
    return DCP_OK;
fail:
    dcp_llama_weights_destroy(w);
    return st;
}

dcp_status dcp_llama_weights_create(dcp_device *dev, const dcp_gguf *g, const dcp_model_config *cfg,
                                    dcp_progress_fn prog, void *user, dcp_llama_weights **out)
{
    return dcp_llama_weights_create_tp(&dev, 1, 1, g, cfg, prog, user, out);
}

void dcp_llama_weights_destroy(dcp_llama_weights *w)
{
    if (!w) return;
    for (uint32_t r = 0; w->ranks && r < w->nl; r++) {
        rank_weights *rw = &w->ranks[r];
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

const dcp_model_config *dcp_llama_weights_config(const dcp_llama_weights *w) { return &w->cfg; }
uint64_t dcp_llama_weights_bytes(const dcp_llama_weights *w) { return w->bytes; }
uint32_t dcp_llama_weights_tp(const dcp_llama_weights *w) { return w->tp; }
uint32_t dcp_llama_weights_dcp(const dcp_llama_weights *w) { return w->dcp; }
uint32_t dcp_llama_weights_first_rank(const dcp_llama_weights *w) { return w->first; }
uint32_t dcp_llama_weights_local_count(const dcp_llama_weights *w) { return w->nl; }

/* ---- run state ----------------------------------------------------------------------------- */

/* Run state of local rank i (TP rank first + i). */
static dcp_status rank_state_create(dcp_llama_state *s, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    const rank_weights *rw = &s->w->ranks[i];
    rank_state *rs = &s->r[i];
    const dcp_llama_config *c = &s->cfg;
    const uint32_t T = c->prefill_chunk, L = m->n_layer, D = m->head_dim, N = s->w->dcp;
    rs->dev = rw->dev;
    rs->g = i / s->gn;
    rs->gr = (s->w->first + i) % N;
    rs->gl = i % s->gn;
    rs->qkv4 = round4((rw->gq + 2 * rw->hkv) * D);
    rs->hd4 = rw->hq * D;
    rs->pools = calloc(L, sizeof *rs->pools);
    rs->dplans = calloc(L, sizeof *rs->dplans);
    rs->pplans = calloc(L, sizeof *rs->pplans);
    rs->slots = calloc(L, sizeof *rs->slots);
    if (!rs->pools || !rs->dplans || !rs->pplans || !rs->slots)
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t l = 0; l < L; l++) {
        if (N == 1) {
            dcp_kv_pool_config pc = DCP_KV_POOL_CONFIG_DEFAULT;
            pc.kv_heads = rw->hkv;
            pc.head_dim = D;
            pc.page_size = c->block_size;
            pc.dtype = c->kv_dtype;
            pc.num_pages = s->pages;
            DCP_TRY(dcp_kv_pool_create(rs->dev, &pc, &rs->pools[l]));
            dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
            dc.batch = 1;
            dc.q_heads = rw->hq;
            dc.max_blocks = s->pages;
            DCP_TRY(dcp_decode_plan_create(rs->pools[l], &dc, &rs->dplans[l]));
        } else {
            rs->pools[l] = dcp_kv_cache_pool(s->caches[rs->g * L + l], rs->gl);
        }
        if (T > 1) {
            dcp_decode_config dc = DCP_DECODE_CONFIG_DEFAULT;
            dc.batch = T;
            dc.q_heads = rw->gq;
            dc.max_blocks = s->pages;
            DCP_TRY(dcp_decode_plan_create(rs->pools[l], &dc, &rs->pplans[l]));
        }
        DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)T * 4, DCP_MEMORY_HOST, &rs->slots[l]));
    }
    struct { dcp_buffer **b; uint64_t floats; } acts[] = {
        {&rs->x, m->n_embd}, {&rs->xn, m->n_embd}, {&rs->qkv, rs->qkv4}, {&rs->q, (uint64_t)rw->gq * D},
        {&rs->o, (uint64_t)rw->gq * D}, {&rs->lse, rw->gq}, {&rs->gu, 2ull * rw->f}, {&rs->h, rw->f_pad},
        {&rs->part, m->n_embd}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++)
        DCP_TRY(dcp_buffer_create(rs->dev, (acts[i].floats ? acts[i].floats : 1) * T * 4, DCP_MEMORY_DEVICE,
                                  acts[i].b));
    if (N > 1) {
        uint64_t rows = (uint64_t)T * rw->gq;
        DCP_TRY(dcp_buffer_create(rs->dev, N * rows * D * 4, DCP_MEMORY_DEVICE, &rs->o_all));
        DCP_TRY(dcp_buffer_create(rs->dev, N * rows * 4, DCP_MEMORY_DEVICE, &rs->lse_all));
        DCP_TRY(dcp_buffer_create(rs->dev, rows * D * 4, DCP_MEMORY_DEVICE, &rs->om));
        DCP_TRY(dcp_buffer_create(rs->dev, rows * 4, DCP_MEMORY_DEVICE, &rs->lsem));
    }
    /* The padding columns of h meet zero weight columns of ffn_down: keep them 0 (never NaN). */
    DCP_TRY(dcp_buffer_fill(rs->h, 0, dcp_buffer_size(rs->h), 0));
    DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)T * 4, DCP_MEMORY_HOST, &rs->ids));
    DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)T * (m->n_rot / 2 ? m->n_rot / 2 : 1) * 8, DCP_MEMORY_HOST, &rs->cs));
    DCP_TRY(dcp_buffer_create(rs->dev, (uint64_t)m->n_vocab * 4, DCP_MEMORY_HOST, &rs->logits));
    DCP_TRY(dcp_buffer_create(rs->dev, 16, DCP_MEMORY_HOST, &rs->next));
    DCP_TRY(dcp_cmd_create(rs->dev, &rs->cmd));
    return DCP_OK;
fail:
    return st;
}

/* Everything of the run state but the warm-up, on s (whose w, cfg, pages, bt and lens are set).
 * spread: the TP group spans MPI processes. On failure the caller destroys s. */
static dcp_status state_build(dcp_llama_state *s, int spread)
{
    dcp_status st = DCP_OK;
    const dcp_llama_weights *w = s->w;
    const dcp_model_config *m = &w->cfg;
    const dcp_llama_config c = s->cfg;
    const uint32_t N = w->dcp, L = m->n_layer, nl = w->nl, T = c.prefill_chunk;
    s->r = calloc(nl, sizeof *s->r);
    s->ng = nl >= N ? nl / N : 1;
    s->gn = nl >= N ? N : nl;
    const uint32_t G = s->ng, gn = s->gn;
    if (N > 1) {
        s->gcomm = calloc(G, sizeof *s->gcomm);
        s->caches = calloc((size_t)G * L, sizeof *s->caches);
        s->attns = calloc((size_t)G * L, sizeof *s->attns);
    }
    if (!s->bt || !s->lens || !s->r || (N > 1 && (!s->gcomm || !s->caches || !s->attns)))
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t p = 0; p < s->pages; p++) s->bt[(size_t)t * s->pages + p] = p;
    dcp_device *devs[1024];
    for (uint32_t r = 0; r < nl; r++) devs[r] = w->ranks[r].dev;
    dcp_comm_config cc = DCP_COMM_CONFIG_DEFAULT;
    if (spread) {
        /* The collective creations first, on every process whatever it meets on the way, then one
         * agreement: a process that failed makes all fail instead of leaving them waiting. */
        st = dcp_comm_init_mpi(devs, (int)nl, &cc, &s->comm);
        if (st == DCP_OK &&
            (dcp_comm_size(s->comm) != (int)w->tp || dcp_comm_first_rank(s->comm) != (int)w->first))
            st = dcp_fail(DCP_ERR_CONFIG,
                          "TP size %u with %u ranks per process needs %u MPI processes holding ranks from %u on "
                          "here; found %d processes, ranks from %d on here",
                          w->tp, nl, w->tp / nl, w->first, dcp_comm_size(s->comm) / (int)nl,
                          dcp_comm_first_rank(s->comm));
        if (N > 1 && gn < N) { /* this process holds part of one DCP group: colour = group index */
            dcp_status gs = dcp_comm_init_mpi_split(devs, (int)nl, (int)(w->first / N), &cc, &s->gcomm[0]);
            if (st == DCP_OK) st = gs;
            if (st == DCP_OK && (dcp_comm_size(s->gcomm[0]) != (int)N ||
                                 dcp_comm_first_rank(s->gcomm[0]) != (int)(w->first % N)))
                st = dcp_fail(DCP_ERR_CONFIG,
                              "DCP group %u: sub-communicator of %d ranks, ranks from %d here; "
                              "expected %u, from %u",
                              w->first / N, dcp_comm_size(s->gcomm[0]), dcp_comm_first_rank(s->gcomm[0]), N,
                              w->first % N);
        }
        if (dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
            st = dcp_fail(DCP_ERR_MPI, "llama state: another MPI process failed to create its communicators");
        if (st != DCP_OK) return st;
    }
    if (N > 1) {
        for (uint32_t g = 0; g < G; g++) {
            if (gn == N) DCP_TRY(dcp_comm_init_local(devs + g * N, (int)N, &cc, &s->gcomm[g]));
            for (uint32_t l = 0; l < L; l++) {
                dcp_kv_cache_config kc = DCP_KV_CACHE_CONFIG_DEFAULT;
                kc.pool.kv_heads = w->ranks[g * gn].hkv;
                kc.pool.head_dim = m->head_dim;
                kc.pool.page_size = c.block_size;
                kc.pool.dtype = c.kv_dtype;
                kc.pool.num_pages = s->pages;
                kc.dcp_size = N;
                kc.first_rank = (w->first + g * gn) % N;
                kc.interleave = c.interleave;
                kc.max_seqs = 1;
                kc.max_blocks = s->pages;
                DCP_TRY(dcp_kv_cache_create(devs + g * gn, gn, &kc, &s->caches[g * L + l]));
                dcp_cp_attn_config ac = DCP_CP_ATTN_CONFIG_DEFAULT;
                ac.batch = 1;
                ac.heads_local = w->ranks[g * gn].hq;
                ac.backend = c.backend;
                ac.q_replicate = c.q_replicate;
                DCP_TRY(dcp_cp_attn_create(s->gcomm[g], s->caches[g * L + l], &ac, &s->attns[g * L + l]));
            }
        }
    }
    for (uint32_t r = 0; r < nl; r++) DCP_TRY(rank_state_create(s, r));
    if (w->tp > 1 && !spread) DCP_TRY(dcp_comm_init_local(devs, (int)w->tp, &cc, &s->comm));
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_llama_state_create(dcp_llama_weights *w, const dcp_llama_config *config, dcp_llama_state **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const dcp_model_config *m = &w->cfg;
    dcp_llama_config c = *config;
    const uint32_t N = w->dcp;
    const int spread = w->nl < w->tp; /* the TP group spans processes (MPI) */
    if (c.n_ctx == 0) c.n_ctx = m->n_ctx_train < 4096 ? m->n_ctx_train : 4096;
    if (c.block_size == 0 || c.prefill_chunk == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "llama state: block size %u and prefill chunk %u must be >= 1",
                        c.block_size, c.prefill_chunk);
    if (c.interleave == 0) c.interleave = 1;
    if (N > 1) {
        dcp_status ps = dcp_kv_placement_check(N, c.interleave, c.block_size);
        if (ps) return ps;
    }
    dcp_llama_state *s = calloc(1, sizeof *s);
    if (!s) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    s->w = w;
    s->cfg = c;
    /* Pages per rank: the longest shard a context of n_ctx tokens gives, plus one for rounding. */
    uint64_t shard = N == 1 ? c.n_ctx : dcp_kv_local_length(c.n_ctx, 0, N, c.interleave);
    s->pages = (uint32_t)((shard + c.block_size - 1) / c.block_size) + (N > 1 ? 1 : 0);
    const uint32_t T = c.prefill_chunk;
    s->bt = malloc((size_t)T * s->pages * sizeof *s->bt);
    s->lens = calloc(T, sizeof *s->lens);
    st = state_build(s, spread);
    /* Over MPI, one more agreement: a process that failed makes all fail (none waits for it). */
    if (spread && dcp_mpi_max(st != DCP_OK ? 1.0 : 0.0) > 0.0 && st == DCP_OK)
        st = dcp_fail(DCP_ERR_MPI, "llama state: another MPI process failed to create its part of the state");
    if (st != DCP_OK) goto fail;
    /* Warm-up: a 2-token prefill and a decode step create every pipeline the steps use, so that
     * the first real step does not pay for shader compilation; then the sequence is forgotten. */
    if (c.n_ctx >= 3) {
        int32_t warm[2] = {0, 0};
        DCP_TRY(dcp_llama_forward(s, warm, T > 1 ? 2 : 1, NULL, NULL));
        DCP_TRY(dcp_llama_forward(s, warm, 1, NULL, NULL));
        dcp_llama_state_reset(s);
        s->tokens_run = 0;
        if (s->comm) dcp_comm_reset_stats(s->comm);
        for (uint32_t g = 0; s->gcomm && g < s->ng; g++) dcp_comm_reset_stats(s->gcomm[g]);
    }
    *out = s;
    return DCP_OK;
fail:
    dcp_llama_state_destroy(s);
    return st;
}

void dcp_llama_state_destroy(dcp_llama_state *s)
{
    if (!s) return;
    const uint32_t N = s->w->dcp, G = s->ng, L = s->w->cfg.n_layer;
    for (uint32_t r = 0; s->r && r < s->w->nl; r++) {
        rank_state *rs = &s->r[r];
        dcp_cmd_destroy(rs->cmd);
        for (uint32_t l = 0; rs->pools && l < L; l++) {
            if (rs->dplans) dcp_decode_plan_destroy(rs->dplans[l]);
            if (rs->pplans) dcp_decode_plan_destroy(rs->pplans[l]);
            if (N == 1) dcp_kv_pool_destroy(rs->pools[l]);
            if (rs->slots) dcp_buffer_destroy(rs->slots[l]);
        }
        dcp_buffer *bufs[] = {rs->x, rs->xn, rs->qkv, rs->q, rs->o, rs->lse, rs->gu, rs->h, rs->part, rs->o_all,
                              rs->lse_all, rs->om, rs->lsem, rs->ids, rs->cs, rs->logits, rs->next};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dcp_buffer_destroy(bufs[i]);
        free(rs->pools);
        free(rs->dplans);
        free(rs->pplans);
        free(rs->slots);
    }
    for (uint64_t i = 0; s->rc && i < (uint64_t)s->rc_cap * s->w->nl; i++) dcp_cmd_destroy(s->rc[i]);
    free(s->rc);
    free(s->home);
    free(s->act);
    for (uint32_t i = 0; s->attns && i < G * L; i++) dcp_cp_attn_destroy(s->attns[i]);
    for (uint32_t i = 0; s->caches && i < G * L; i++) dcp_kv_cache_destroy(s->caches[i]);
    for (uint32_t g = 0; s->gcomm && g < G; g++) dcp_comm_destroy(s->gcomm[g]);
    dcp_comm_destroy(s->comm);
    free(s->attns);
    free(s->caches);
    free(s->gcomm);
    free(s->r);
    free(s->bt);
    free(s->lens);
    free(s);
}

void dcp_llama_state_reset(dcp_llama_state *s)
{
    s->pos = 0;
    for (uint32_t i = 0; s->caches && i < s->ng * s->w->cfg.n_layer; i++)
        dcp_kv_cache_free_seq(s->caches[i], 0);
}
uint32_t dcp_llama_state_pos(const dcp_llama_state *s) { return s->pos; }
uint32_t dcp_llama_state_n_ctx(const dcp_llama_state *s) { return s->cfg.n_ctx; }

uint64_t dcp_llama_state_kv_bytes(const dcp_llama_state *s)
{
    uint64_t b = 0;
    for (uint32_t l = 0; l < s->w->cfg.n_layer; l++)
        b += dcp_kv_pool_page_bytes(s->r[0].pools[l]) * dcp_kv_pool_get_config(s->r[0].pools[l])->num_pages;
    return b;
}

uint64_t dcp_llama_state_exchange_bytes(const dcp_llama_state *s)
{
    uint64_t b = s->comm ? dcp_comm_bytes_sent(s->comm, 0) : 0;
    if (s->gcomm) b += dcp_comm_bytes_sent(s->gcomm[0], 0);
    return b;
}

uint64_t dcp_llama_state_tokens_run(const dcp_llama_state *s) { return s->tokens_run; }

/* Submits every rank's command, waits for all. */
static dcp_status run_all(dcp_llama_state *s)
{
    dcp_status st = DCP_OK;
    for (uint32_t r = 0; r < s->w->nl; r++) DCP_TRY(dcp_cmd_submit(s->r[r].cmd));
    for (uint32_t r = 0; r < s->w->nl; r++) DCP_TRY(dcp_cmd_wait(s->r[r].cmd));
    return DCP_OK;
fail:
    for (uint32_t r = 0; r < s->w->nl; r++) (void)dcp_cmd_wait(s->r[r].cmd);
    return st;
}

static dcp_status reset_all(dcp_llama_state *s)
{
    dcp_status st = DCP_OK;
    for (uint32_t r = 0; r < s->w->nl; r++) DCP_TRY(dcp_cmd_reset(s->r[r].cmd));
fail:
    return st;
}

/* Recorded round k of rank r (created on first use). */
static dcp_status rc_cmd(dcp_llama_state *s, uint32_t k, uint32_t r, dcp_cmd **out)
{
    const uint32_t nl = s->w->nl;
    if (k >= s->rc_cap) {
        uint32_t cap = s->rc_cap ? 2 * s->rc_cap : 16;
        dcp_cmd **rc = realloc(s->rc, (size_t)cap * nl * sizeof *rc);
        if (!rc) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        memset(rc + (size_t)s->rc_cap * nl, 0, (size_t)(cap - s->rc_cap) * nl * sizeof *rc);
        s->rc = rc;
        s->rc_cap = cap;
    }
    dcp_cmd **c = &s->rc[(size_t)k * nl + r];
    if (!*c) {
        dcp_status st = dcp_cmd_create(s->r[r].dev, c);
        if (st != DCP_OK) return st;
    }
    *out = *c;
    return DCP_OK;
}

/* Ends the round after each rank's recording: submits every rank's command, waits for all, and
 * resets them for the next recording (recording a decode step: moves every rank on to the
 * command of the next round, keeping this one). */
static dcp_status round_all(dcp_llama_state *s)
{
    dcp_status st = DCP_OK;
    DCP_TRY(run_all(s));
    if (!s->rc_recording) return reset_all(s);
    s->rc_round++;
    for (uint32_t r = 0; r < s->w->nl; r++) {
        DCP_TRY(rc_cmd(s, s->rc_round, r, &s->r[r].cmd));
        DCP_TRY(dcp_cmd_reset(s->r[r].cmd));
    }
fail:
    return st;
}

/* Host steps between rounds, logged while a decode step is recorded so that replays repeat them. */
static dcp_status log_action(dcp_llama_state *s, rc_action a)
{
    if (!s->rc_recording) return DCP_OK;
    if (s->act_count == s->act_cap) {
        uint32_t cap = s->act_cap ? 2 * s->act_cap : 64;
        rc_action *n = realloc(s->act, cap * sizeof *n);
        if (!n) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        s->act = n;
        s->act_cap = cap;
    }
    a.round = s->rc_round - 1; /* after the round just run */
    s->act[s->act_count++] = a;
    return DCP_OK;
}

static dcp_status put_exchange(dcp_llama_state *s, dcp_comm *c, dcp_coll kind, uint64_t slot, uint64_t payload)
{
    dcp_status st = dcp_comm_put_exchange(c, kind, slot, payload);
    if (st != DCP_OK) return st;
    return log_action(s, (rc_action){0, c, kind, slot, payload, NULL, 0});
}

static dcp_status attn_exchange(dcp_llama_state *s, dcp_cp_attn *a, uint32_t phase)
{
    dcp_status st = dcp_cp_attn_exchange(a, phase);
    if (st != DCP_OK) return st;
    return log_action(s, (rc_action){0, NULL, DCP_COLL_ALL_GATHER, 0, 0, a, phase});
}

/* With T > 1: the all-reduce of every rank's part [tokens][n_embd] f32 as one round. Each rank's
 * recording ends with one copy of its part into its put area (hostmem: the one host allocation
 * every device imports); after the round the next rmsnorm of each rank adds the T parts to x first
 * (norm_x). */
static dcp_status all_reduce_part(dcp_llama_state *s, uint32_t tokens)
{
    dcp_status st = DCP_OK;
    const uint32_t E = s->w->cfg.n_embd, n = tokens * E;
    for (uint32_t r = 0; r < s->w->nl; r++) {
        dcp_comm_buf out = dcp_comm_put_area(s->comm, (int)r);
        DCP_TRY(dcp_cmd_copy(s->r[r].cmd, s->r[r].part, 0, out.buffer, out.offset, (uint64_t)n * 4));
        dcp_comm_record_put(s->r[r].cmd); /* copy part -> peers' reads after the round */
    }
    DCP_TRY(round_all(s));
    DCP_TRY(put_exchange(s, s->comm, DCP_COLL_ALL_GATHER, (uint64_t)n * 4, (uint64_t)n * 4));
    s->ar_tokens = tokens;
    return DCP_OK;
fail:
    return st;
}

/* xn rows [row0, row0 + rows) of rank r = rmsnorm(x) * w, after x += the sum of the pending
 * all-reduce's parts, read in place in rank order, when there is one (rmsnorm_parts: bitwise the
 * same x on every rank, no host sum, no host copy with hostmem). The caller clears s->ar_tokens
 * once every rank has recorded its norm. */
static dcp_status norm_x(dcp_llama_state *s, uint32_t r, dcp_buffer *w, uint32_t row0, uint32_t rows)
{
    const dcp_model_config *m = &s->w->cfg;
    const uint32_t E = m->n_embd;
    rank_state *rs = &s->r[r];
    if (!s->ar_tokens) return dcp_op_rmsnorm(rs->cmd, rs->x, row0 * E, E, w, E, rs->xn, E, rows, m->rms_eps);
    dcp_comm_buf in; /* rank j's part [ar_tokens][E] f32 at in.offset + j * stride */
    uint64_t stride;
    dcp_comm_put_view(s->comm, (int)r, DCP_COLL_ALL_GATHER, (uint64_t)s->ar_tokens * E * 4, &in, &stride);
    return dcp_op_rmsnorm_parts(rs->cmd, rs->x, row0 * E, E, w, E, rs->xn, E, rows, m->rms_eps, in.buffer, in.offset,
                                s->w->tp, (uint32_t)(stride / 4), row0 * E);
}

/* DCP attention of layer l for T tokens (q of the group's heads written by rope_store in each
 * rank's q, recorded). Decode (T = 1): returns with each rank's recording continuing after the
 * merge, its own heads' merged O [1][hq][D] in o. Prefill: returns with the merge of the gathered
 * partials [T][gq][D] into om recorded. */
static dcp_status dcp_attention(dcp_llama_state *s, uint32_t l, uint32_t T)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    const uint32_t N = s->w->dcp, G = s->ng, D = m->head_dim, L = m->n_layer;
    dcp_comm_buf a[1024], b[1024];
    if (T == 1) {
        /* Decode: every rank already holds its group's N*Hl query heads (q_replicate semantics,
         * whatever the attention's config), so the step is its exchange rounds (a2a 1, ag_rs 2)
         * recorded around the layer; the merge lands in the recording that continues with o_proj. */
        const uint32_t X = dcp_cp_attn_exchanges(s->attns[l]);
        for (uint32_t p = 0; p <= X; p++) {
            if (p > 0) {
                DCP_TRY(round_all(s));
                for (uint32_t g = 0; g < G; g++) DCP_TRY(attn_exchange(s, s->attns[g * L + l], p - 1));
            }
            for (uint32_t r = 0; r < s->w->nl; r++) {
                rank_state *rs = &s->r[r];
                DCP_TRY(dcp_cp_attn_record_phase(s->attns[rs->g * L + l], p, rs->gl, rs->cmd, (dcp_comm_buf){rs->q, 0},
                                              (dcp_comm_buf){rs->o, 0}, (dcp_comm_buf){rs->lse, 0}));
            }
        }
        for (uint32_t r = 0; r < s->w->nl; r++) dcp_cmd_barrier(s->r[r].cmd); /* merged O -> o_proj */
        return DCP_OK;
    }
    /* Prefill: local causal decode over each shard -> all-gather partials -> lse_merge. */
    for (uint32_t r = 0; r < s->w->nl; r++) {
        rank_state *rs = &s->r[r];
        DCP_TRY(dcp_decode_record(rs->cmd, rs->pplans[l], rs->q, 0, rs->o, 0, rs->lse, 0));
    }
    DCP_TRY(run_all(s));
    const uint64_t rows = (uint64_t)T * s->w->ranks[0].gq;
    for (uint32_t g = 0; g < G; g++) {
        for (uint32_t i = 0; i < s->gn; i++) {
            rank_state *rs = &s->r[g * s->gn + i];
            a[i] = (dcp_comm_buf){rs->o, 0};
            b[i] = (dcp_comm_buf){rs->o_all, 0};
        }
        DCP_TRY(dcp_comm_all_gather(a, b, rows * D, DCP_DTYPE_F32, s->gcomm[g]));
        for (uint32_t i = 0; i < s->gn; i++) {
            rank_state *rs = &s->r[g * s->gn + i];
            a[i] = (dcp_comm_buf){rs->lse, 0};
            b[i] = (dcp_comm_buf){rs->lse_all, 0};
        }
        DCP_TRY(dcp_comm_all_gather(a, b, rows, DCP_DTYPE_F32, s->gcomm[g]));
    }
    DCP_TRY(reset_all(s));
    for (uint32_t r = 0; r < s->w->nl; r++) {
        rank_state *rs = &s->r[r];
        dcp_merge_args ma = {.parts = N, .rows = (uint32_t)rows, .head_dim = D,
                             .o_part_stride = (uint32_t)(rows * D), .lse_part_stride = (uint32_t)rows,
                             .o_in = rs->o_all, .lse_in = rs->lse_all, .o_out = rs->om, .lse_out = rs->lsem};
        DCP_TRY(dcp_lse_merge_record(rs->cmd, &ma));
        dcp_cmd_barrier(rs->cmd); /* merged O -> o_proj */
    }
    return DCP_OK;
fail:
    return st;
}

/* Host side of a chunk: token ids, RoPE angles, KV slots and attention plans of every rank. */
static dcp_status prepare_chunk(dcp_llama_state *s, const int32_t *tokens, uint32_t T)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *m = &s->w->cfg;
    const uint32_t N = s->w->dcp, G = s->ng, L = m->n_layer, I = s->cfg.interleave;
    const uint32_t half_rot = m->n_rot / 2;
    uint32_t rows = T == 1 ? 1 : s->cfg.prefill_chunk;
    if (N > 1) {
        uint32_t seq = 0;
        for (uint32_t i = 0; i < G * L; i++) DCP_TRY(dcp_kv_cache_append(s->caches[i], 1, &seq, &T));
    }
    for (uint32_t r = 0; r < s->w->nl; r++) {
        rank_state *rs = &s->r[r];
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
            dcp_kv_cache *kc = N > 1 ? s->caches[rs->g * L + l] : NULL;
            if (kc) memcpy(slots, dcp_kv_cache_append_slots(kc, rs->gl), (size_t)T * 4);
            else
                for (uint32_t t = 0; t < T; t++) slots[t] = s->pos + t; /* identity block table */
            if (T == 1 && N > 1) {
                if (rs->gl == 0) DCP_TRY(dcp_cp_attn_set(s->attns[rs->g * L + l], &(uint32_t){0}));
                continue;
            }
            for (uint32_t t = 0; t < rows; t++) {
                uint64_t len = t < T ? (uint64_t)s->pos + t + 1 : 0;
                s->lens[t] = (uint32_t)(N > 1 ? dcp_kv_local_length(len, rs->gr, N, I) : len);
                if (kc) memcpy(s->bt + (size_t)t * s->pages, dcp_kv_cache_block_table(kc, rs->gl, 0),
                               (size_t)s->pages * 4);
            }
            DCP_TRY(dcp_decode_plan_set(T == 1 ? rs->dplans[l] : rs->pplans[l], s->lens, s->bt));
        }
    }
    return DCP_OK;
fail:
    return st;
}

/* What a decode step's recording depends on besides buffers fixed at creation: whether it computes
 * the logits, the communicators' mailboxes (their banks are reset before every step) and the
 * split-KV chunking of every decode plan (FNV-1a over them). */
static uint64_t replay_key(const dcp_llama_state *s, int want_logits)
{
    const uint32_t L = s->w->cfg.n_layer;
    uint64_t h = 1469598103934665603ull;
#define DCP_MIX(v) (h = (h ^ (uint64_t)(v)) * 1099511628211ull)
    DCP_MIX(want_logits);
    if (s->comm) DCP_MIX(dcp_comm_generation(s->comm));
    for (uint32_t g = 0; s->gcomm && g < s->ng; g++) DCP_MIX(dcp_comm_generation(s->gcomm[g]));
    for (uint32_t r = 0; r < s->w->nl; r++)
        for (uint32_t l = 0; l < L; l++) {
            const rank_state *rs = &s->r[r];
            DCP_MIX(s->w->dcp == 1 ? dcp_decode_plan_chunks(rs->dplans[l])
                                   : dcp_cp_attn_plan_chunks(s->attns[rs->g * L + l], rs->gl));
        }
#undef DCP_MIX
    return h;
}

/* Resubmits the recorded rounds of a decode step with their host steps in between. */
static dcp_status replay_step(dcp_llama_state *s)
{
    dcp_status st = DCP_OK;
    const uint32_t nl = s->w->nl;
    uint32_t a = 0;
    for (uint32_t k = 0; k < s->rc_rounds; k++) {
        dcp_cmd **round = s->rc + (size_t)k * nl;
        for (uint32_t r = 0; r < nl; r++) DCP_TRY(dcp_cmd_submit(round[r]));
        for (uint32_t r = 0; r < nl; r++) DCP_TRY(dcp_cmd_wait(round[r]));
        for (; a < s->act_count && s->act[a].round == k; a++) {
            const rc_action *x = &s->act[a];
            if (x->attn) DCP_TRY(dcp_cp_attn_exchange(x->attn, x->phase));
            else DCP_TRY(dcp_comm_put_exchange(x->comm, x->kind, x->slot, x->payload));
        }
    }
    return DCP_OK;
fail:
    for (size_t i = 0; i < (size_t)s->rc_rounds * nl; i++) (void)dcp_cmd_wait(s->rc[i]);
    s->rc_rounds = 0;
    return st;
}

/* Every rank back on its own command after a decode step's recording. */
static void end_recording(dcp_llama_state *s, int ok)
{
    s->rc_rounds = ok ? s->rc_round + 1 : 0;
    s->rc_recording = 0;
    for (uint32_t r = 0; r < s->w->nl; r++) s->r[r].cmd = s->home[r];
}

/* Records and runs one chunk of T tokens at positions s->pos ... A decode step (T = 1) is recorded
 * into its own commands, one per round and rank, and replayed while replay_key stays the same:
 * only the host-visible inputs (ids, RoPE angles, slots, block tables) change between steps. */
static dcp_status forward_chunk(dcp_llama_state *s, const int32_t *tokens, uint32_t T, int want_logits)
{
    dcp_status st = DCP_OK;
    const dcp_llama_weights *w = s->w;
    const dcp_model_config *m = &w->cfg;
    const uint32_t E = m->n_embd, D = m->head_dim, tp = w->tp, N = w->dcp;
    DCP_TRY(prepare_chunk(s, tokens, T));
    /* Mailboxes for this chunk's all-reduces (grown while every device is idle). */
    if (tp > 1) DCP_TRY(dcp_comm_prepare(s->comm, (uint64_t)T * E * 4));
    s->ar_tokens = 0;
    if (T == 1) {
        if (!s->home) {
            s->home = malloc(w->nl * sizeof *s->home);
            if (!s->home) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            for (uint32_t r = 0; r < w->nl; r++) s->home[r] = s->r[r].cmd;
        }
        if (s->comm) dcp_comm_reset_banks(s->comm);
        for (uint32_t g = 0; s->gcomm && g < s->ng; g++) dcp_comm_reset_banks(s->gcomm[g]);
        uint64_t key = replay_key(s, want_logits);
        if (s->rc_rounds && key == s->rc_key) {
            DCP_TRY(replay_step(s));
            s->pos += T;
            s->tokens_run += T;
            return DCP_OK;
        }
        s->rc_rounds = s->rc_round = s->act_count = 0;
        s->rc_key = key;
        s->rc_recording = 1;
        for (uint32_t r = 0; r < w->nl; r++) DCP_TRY(rc_cmd(s, 0, r, &s->r[r].cmd));
    }
    for (uint32_t r = 0; r < w->nl; r++) {
        rank_state *rs = &s->r[r];
        DCP_TRY(dcp_cmd_reset(rs->cmd));
        DCP_TRY(dcp_op_get_rows(rs->cmd, &w->ranks[r].tok_embd, rs->ids, rs->x, E, T));
        dcp_cmd_barrier(rs->cmd); /* get_rows x -> rmsnorm */
    }
    /* With one rank the o_proj and ffn_down add straight into x; with several they write part,
     * which the all-reduce sums before it is added to x. */
    const int acc = tp == 1;
    for (uint32_t l = 0; l < m->n_layer; l++) {
        for (uint32_t r = 0; r < w->nl; r++) {
            const rank_weights *rw = &w->ranks[r];
            const llama_layer *L = &rw->layers[l];
            rank_state *rs = &s->r[r];
            dcp_cmd *cmd = rs->cmd;
            DCP_TRY(norm_x(s, r, L->attn_norm, 0, T));
            dcp_cmd_barrier(cmd); /* rmsnorm xn (and x += parts) -> qkv matmul */
            DCP_TRY(dcp_op_matmul(cmd, &L->wqkv, rs->xn, 0, E, rs->qkv, rs->qkv4, T, 0));
            dcp_cmd_barrier(cmd); /* qkv -> rope_store */
            dcp_rope_store_args ra = {T, rw->gq, rw->hkv, D, m->n_rot, rs->qkv4, rs->qkv, rs->slots[l], rs->cs,
                                      rs->q, rs->pools[l]};
            DCP_TRY(dcp_op_rope_store(cmd, &ra));
            dcp_cmd_barrier(cmd); /* q, KV pages -> attention */
            if (N == 1) {
                DCP_TRY(dcp_decode_record(cmd, T == 1 ? rs->dplans[l] : rs->pplans[l], rs->q, 0, rs->o, 0, rs->lse, 0));
                dcp_cmd_barrier(cmd); /* o -> o_proj */
            }
        }
        s->ar_tokens = 0;
        if (N > 1) DCP_TRY(dcp_attention(s, l, T));
        for (uint32_t r = 0; r < w->nl; r++) {
            const rank_weights *rw = &w->ranks[r];
            rank_state *rs = &s->r[r];
            dcp_buffer *dst = acc ? rs->x : rs->part;
            /* Own heads' O: [T][hq][D] in o (DCP 1, DCP decode), or heads [gr hq, (gr+1) hq) of the
             * merged [T][gq][D] (DCP prefill). */
            int merged = N > 1 && T > 1;
            DCP_TRY(dcp_op_matmul(rs->cmd, &rw->layers[l].wo, merged ? rs->om : rs->o, merged ? rs->gr * rs->hd4 : 0,
                                  merged ? rw->gq * D : rs->hd4, dst, E, T, acc));
            dcp_cmd_barrier(rs->cmd); /* x (residual) or part -> ffn rmsnorm / all-reduce */
        }
        if (!acc) DCP_TRY(all_reduce_part(s, T));
        for (uint32_t r = 0; r < w->nl; r++) {
            const rank_weights *rw = &w->ranks[r];
            const llama_layer *L = &rw->layers[l];
            rank_state *rs = &s->r[r];
            dcp_cmd *cmd = rs->cmd;
            dcp_buffer *dst = acc ? rs->x : rs->part;
            DCP_TRY(norm_x(s, r, L->ffn_norm, 0, T));
            dcp_cmd_barrier(cmd); /* xn (and x += parts) -> gate|up matmul */
            DCP_TRY(dcp_op_matmul(cmd, &L->wgu, rs->xn, 0, E, rs->gu, 2 * rw->f, T, 0));
            dcp_cmd_barrier(cmd); /* gu -> swiglu */
            DCP_TRY(dcp_op_swiglu(cmd, rs->gu, 2 * rw->f, rs->h, rw->f_pad, rw->f, T));
            dcp_cmd_barrier(cmd); /* h -> down matmul */
            DCP_TRY(dcp_op_matmul(cmd, &L->wdown, rs->h, 0, rw->f_pad, dst, E, T, acc));
            dcp_cmd_barrier(cmd); /* x (residual) or part -> next layer / all-reduce */
        }
        s->ar_tokens = 0;
        if (!acc) DCP_TRY(all_reduce_part(s, T));
    }
    if (want_logits) {
        rank_state *rs = &s->r[0];
        const rank_weights *rw = &w->ranks[0];
        dcp_cmd *cmd = rs->cmd;
        DCP_TRY(norm_x(s, 0, rw->out_norm, T - 1, 1));
        dcp_cmd_barrier(cmd); /* final norm -> output head */
        DCP_TRY(dcp_op_matmul(cmd, &rw->output, rs->xn, 0, E, rs->logits, m->n_vocab, 1, 0));
        dcp_cmd_barrier(cmd); /* logits -> argmax */
        DCP_TRY(dcp_op_argmax(cmd, rs->logits, m->n_vocab, m->n_vocab, 1, rs->next));
        dcp_cmd_barrier_host(cmd); /* logits, next (host-visible) -> host reads after the wait */
    }
    DCP_TRY(run_all(s));
    if (s->rc_recording) end_recording(s, 1);
    s->pos += T;
    s->tokens_run += T;
    return DCP_OK;
fail:
    if (s->rc_recording) end_recording(s, 0);
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
    if (logits) memcpy(logits, dcp_buffer_map(s->r[0].logits), (size_t)m->n_vocab * 4);
    if (next) *next = (int32_t)*(const uint32_t *)dcp_buffer_map(s->r[0].next);
    return DCP_OK;
fail:
    return st;
}
