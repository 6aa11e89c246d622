/* The model's weights (include/dcpvk/model.h): the placement of the TP ranks held here, the weights
 * every architecture has (embedding, final norm, output head), and the architecture's layers
 * through its ops (src/model/graph.h). */
#include <stdlib.h>

#include "common/error.h"
#include "model/graph.h"
#include "ops/ops_internal.h"

static const dcp_arch_ops *arch_ops(dcp_model_arch arch)
{
    switch (arch) {
    case DCP_ARCH_LLAMA:
    case DCP_ARCH_QWEN2:
    case DCP_ARCH_QWEN3:
    case DCP_ARCH_PHI3: return &dcp_arch_llama;
    case DCP_ARCH_DEEPSEEK2: return &dcp_arch_deepseek2;
    default: return NULL;
    }
}

/* A layout of the ranks held here that the run state supports. */
static dcp_status check_placement(const dcp_model_load_config *lc, uint32_t tp)
{
    const uint32_t dcp = lc->dcp, first = lc->first_rank, count = lc->count;
    if (!lc->devices) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "model: no devices given");
    if (dcp == 0 || tp == 0 || tp % dcp)
        return dcp_fail(DCP_ERR_CONFIG, "TP size %u is not a multiple of the DCP size %u (T %% N must be 0)", tp, dcp);
    if (count == 0 || first + count > tp || first % count)
        return dcp_fail(DCP_ERR_CONFIG, "TP ranks [%u, %u) held by this process: not a run of %u ranks of a TP group of %u",
                        first, first + count, count, tp);
    if (dcp > 1 && !(count % dcp == 0 || dcp % count == 0))
        return dcp_fail(DCP_ERR_CONFIG,
                        "%u TP ranks per process with DCP groups of %u: a process must hold whole DCP groups or "
                        "an equal part of one (%u must divide by %u or divide it)", count, dcp, count, dcp);
    return DCP_OK;
}

/* The replicated weights of rank i: embedding, final norm, output head on the first rank held. */
static dcp_status load_common(dcp_model *m, dcp_load_ctx *lc, uint32_t i)
{
    dcp_status st = DCP_OK;
    const dcp_model_config *cfg = &m->cfg;
    dcp_graph_rank_weights *rw = &m->ranks[i];
    const uint32_t E = cfg->n_embd;
    const uint64_t vE[1] = {E}, vV[1] = {cfg->n_vocab};
    dcp_slice emb = {"token_embd.weight", 0, cfg->n_vocab, 0, E};
    DCP_TRY(dcp_load_slices(lc, rw->dev, 1, &emb, vE, vV, E, &rw->tok_embd));
    if (i == 0) {
        dcp_slice out = {dcp_gguf_tensor_find(lc->g, "output.weight") ? "output.weight" : "token_embd.weight", 0,
                         cfg->n_vocab, 0, E};
        DCP_TRY(dcp_load_slices(lc, rw->dev, 1, &out, vE, vV, E, &rw->output));
    }
    DCP_TRY(dcp_load_norm(lc, rw->dev, "output_norm.weight", E, &rw->out_norm));
    m->bytes += dcp_matrix_device_bytes(&rw->tok_embd) + dcp_matrix_device_bytes(&rw->output) + 4ull * E;
fail:
    return st;
}

/* rope_freqs.weight [n_rot/2] (Llama 3.x frequency factors), when the file has it: kept on the
 * host for the RoPE tables of every step. */
static dcp_status load_rope_freqs(dcp_model *m, const dcp_gguf *g)
{
    const dcp_gguf_tensor *t = dcp_gguf_tensor_find(g, "rope_freqs.weight");
    if (!t) return DCP_OK;
    const uint32_t half = m->cfg.n_rot / 2;
    if (m->cfg.arch == DCP_ARCH_DEEPSEEK2)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: rope_freqs.weight with the deepseek2 architecture is not supported",
                        dcp_gguf_name(g));
    if (t->n_elements != half)
        return dcp_fail(DCP_ERR_FORMAT, "%s: tensor rope_freqs.weight has %llu elements, expected n_rot / 2 = %u",
                        dcp_gguf_name(g), (unsigned long long)t->n_elements, half);
    m->rope_freqs = malloc((size_t)half * sizeof *m->rope_freqs);
    if (!m->rope_freqs) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    dcp_status st = dcp_gguf_tensor_to_f32(g, t, m->rope_freqs);
    if (st) return st;
    for (uint32_t i = 0; i < half; i++)
        if (!(m->rope_freqs[i] > 0.0f) || m->rope_freqs[i] > 1e30f)
            return dcp_fail(DCP_ERR_FORMAT, "%s: rope_freqs.weight[%u] = %g is not a positive finite factor",
                            dcp_gguf_name(g), i, (double)m->rope_freqs[i]);
    return DCP_OK;
}

dcp_status dcp_model_load(const dcp_model_load_config *lc, const dcp_gguf *g, const dcp_model_config *cfg,
                          dcp_model **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const uint32_t tp = lc->tp ? lc->tp : lc->count;
    const dcp_arch_ops *ops = arch_ops(cfg->arch);
    if (!ops)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: architecture %s is not supported (supported: " DCP_ARCH_SUPPORTED_LIST ")",
                        dcp_gguf_name(g), cfg->arch_name);
    if ((st = check_placement(lc, tp)) != DCP_OK) return st;
    if (cfg->n_embd % 4)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: embedding %u must be a multiple of 4", dcp_gguf_name(g), cfg->n_embd);
    dcp_model *m = calloc(1, sizeof *m);
    if (!m) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    m->cfg = *cfg;
    m->ops = ops;
    m->tp = tp;
    m->dcp = lc->dcp;
    m->q_replicate = lc->dcp > 1 && lc->q_replicate;
    m->first = lc->first_rank;
    m->nl = lc->count;
    DCP_TRY(ops->check(m, g));
    DCP_TRY(load_rope_freqs(m, g));
    m->count_only = lc->count_only;
    m->ranks = calloc(m->nl, sizeof *m->ranks);
    m->rank_bytes = calloc(m->nl, sizeof *m->rank_bytes);
    m->rank_largest = calloc(m->nl, sizeof *m->rank_largest);
    if (!m->ranks || !m->rank_bytes || !m->rank_largest) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
        goto fail;
    }
    dcp_load_ctx ctx = {g, lc->count_only ? NULL : lc->progress, lc->progress_user, 0, 0,
                        lc->devices, m->nl, m->rank_bytes, m->rank_largest, lc->count_only};
    if (ctx.progress && ops->count_only_cheap) {
        /* The total: the bytes of the file the ranks' slices read, counted by a pass that reads
         * and uploads nothing. */
        dcp_model_load_config cc = *lc;
        cc.count_only = true;
        cc.progress = NULL;
        dcp_model *counted = NULL;
        DCP_TRY(dcp_model_load(&cc, g, cfg, &counted));
        ctx.total = counted->file_bytes;
        dcp_model_destroy(counted);
    } else if (ctx.progress) {
        for (uint64_t i = 0; i < dcp_gguf_tensor_count(g); i++) ctx.total += dcp_gguf_tensor_at(g, i)->size;
    }
    for (uint32_t i = 0; i < m->nl; i++) {
        m->ranks[i].dev = lc->devices[i];
        DCP_TRY(load_common(m, &ctx, i));
    }
    DCP_TRY(ops->load(m, &ctx));
    m->file_bytes = ctx.done;
    if (lc->count_only) {
        m->bytes = 0;
        for (uint32_t i = 0; i < m->nl; i++) m->bytes += m->rank_bytes[i];
    }
    if (ctx.progress) ctx.progress(lc->progress_user, ctx.total, ctx.total);
    *out = m;
    return DCP_OK;
fail:
    dcp_model_destroy(m);
    return st;
}

const dcp_model_fallback *dcp_model_fallbacks(const dcp_model *m) { return &m->fallback; }

void dcp_model_destroy(dcp_model *m)
{
    if (!m) return;
    m->ops->unload(m);
    for (uint32_t i = 0; m->ranks && i < m->nl; i++) {
        dcp_graph_rank_weights *rw = &m->ranks[i];
        dcp_matrix_destroy(&rw->tok_embd);
        dcp_matrix_destroy(&rw->output);
        dcp_buffer_destroy(rw->out_norm);
    }
    free(m->ranks);
    free(m->rope_freqs);
    free(m->rank_bytes);
    free(m->rank_largest);
    free(m);
}

const dcp_model_config *dcp_model_get_config(const dcp_model *m) { return &m->cfg; }
uint64_t dcp_model_bytes(const dcp_model *m) { return m->bytes; }
uint64_t dcp_model_file_bytes(const dcp_model *m) { return m->file_bytes; }
uint64_t dcp_model_rank_bytes(const dcp_model *m, uint32_t local) { return local < m->nl ? m->rank_bytes[local] : 0; }
uint32_t dcp_model_tp(const dcp_model *m) { return m->tp; }
uint32_t dcp_model_dcp(const dcp_model *m) { return m->dcp; }
bool dcp_model_q_replicate(const dcp_model *m) { return m->q_replicate; }
uint32_t dcp_model_first_rank(const dcp_model *m) { return m->first; }
uint32_t dcp_model_local_count(const dcp_model *m) { return m->nl; }
