/* The decode plan (include/dcpvk/attn.h): one core for both kinds (row and block-table
 * validation, split-KV chunking, workspace growth, recording with the merge of the chunks) and,
 * per kind, what differs: the pipeline, its constants and tile (GQA: shaders/paged_decode.comp;
 * latent: shaders/mla_decode.comp) and the push constants. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn_internal.h"
#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/dtype.h"
#include "kv/kv_internal.h"
#include "kernels/kernels.h"

enum {
    DCP_DECODE_MIN_CHUNK = 256,   /* shortest automatic chunk (tokens) */
    DCP_DECODE_MAX_PARTS = 32767, /* chunks lse_merge takes */
    DCP_DECODE_MAX_SPEC = 7,      /* specialization constants of either kernel */
};

/* What a kind fixes at plan creation: its kernel and how the work is tiled. */
typedef struct decode_shape {
    dcp_kernel_id pipeline;
    uint32_t spec[DCP_DECODE_MAX_SPEC]; /* the pipeline's specialization constants */
    uint32_t wg;                        /* workgroup size */
    uint32_t hg;                        /* query heads per workgroup */
    uint32_t od;                        /* f32 values per head of o (GQA head_dim, latent kv_lora) */
    uint32_t max_chunk;                 /* longest chunk one workgroup scans (tokens) */
    uint32_t granule;                   /* automatic chunks are a multiple of it (tokens) */
    uint32_t gpu_target;                /* workgroups the automatic chunking aims at on GPUs */
} decode_shape;

struct dcp_decode_plan {
    dcp_kv_pool *pool;
    dcp_device *dev;
    dcp_decode_config cfg; /* scale resolved */
    decode_shape sh;
    uint32_t rows;        /* rows of the last set (<= batch) */
    uint32_t chunks;      /* chunks per row */
    uint32_t chunk_tokens;
    dcp_buffer *bt;       /* [batch][max_blocks] u32, host-visible: dcp_decode_plan_set_rows writes it without a submit */
    dcp_buffer *lens;     /* [batch] u32, host-visible (as bt) */
    dcp_buffer *work_o;   /* [chunks][batch][q_heads][od] f32 partials */
    dcp_buffer *work_lse; /* [chunks][batch][q_heads] f32 */
    uint64_t work_cap;    /* chunks the workspace holds */
    uint32_t work_gen;    /* bumped whenever the workspace is reallocated */
};

static uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* The name errors give the plan. */
static const char *kind_name(dcp_decode_kind kind) { return kind == DCP_DECODE_LATENT ? "MLA decode" : "decode"; }

/* ---- GQA: paged_decode ------------------------------------------------------------------ */

/* Longest chunk one workgroup scans: bounds each invocation's loop iterations (Mesa 22 lavapipe
 * ends loops after 65,535 iterations) and each dispatch's duration (GPU watchdogs). Registers the
 * shader's per-lane arrays may take: HG * ceil(DQ / C) quads of Q and of O. */
enum { DCP_DECODE_MAX_CHUNK = 2048, GQA_MAX_LANE_QUADS = 32, GQA_MAX_HEAD_DIM = 256 };

static uint64_t gqa_shared_bytes(uint32_t wg, uint32_t cluster, uint32_t dq)
{
    /* Mirrors the shared arrays of shaders/paged_decode.comp: per token slot m, l and O. */
    uint64_t slots = wg / cluster;
    return slots * (8ull + 16ull * dq);
}

static dcp_status gqa_shape(const dcp_kv_pool_config *pc, const dcp_decode_config *c, dcp_device *dev,
                            decode_shape *s)
{
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (pc->k_only || pc->head_dim > GQA_MAX_HEAD_DIM)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "decode plan: the GQA decode reads K+V pools of head dim up to %d (this pool: %s, head "
                        "dim %u; MLA latent pools use kind DCP_DECODE_LATENT)",
                        GQA_MAX_HEAD_DIM, pc->k_only ? "K-only" : "K+V", pc->head_dim);
    if (c->latent)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "decode plan: latent %u is a width of kind DCP_DECODE_LATENT (the GQA kind takes 0)", c->latent);
    if (c->q_heads % pc->kv_heads)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "decode plan: %u query heads is not a multiple of the pool's %u KV heads",
                        c->q_heads, pc->kv_heads);
    const uint32_t wg = dcp_vk_workgroup_size(dev), dq = pc->head_dim / 4;
    /* Loads of 16 bytes where rows allow (f16 rows of a multiple of 8 elements), else 8; q8_0 units
     * are 8 values (two words) too. */
    const uint32_t unit_quads =
        ((pc->dtype == DCP_DTYPE_F16 && pc->head_dim % 8 == 0) || pc->dtype == DCP_DTYPE_Q8_0) ? 2 : 1;
    const uint32_t units = dq / unit_quads;
    /* Cluster: lanes sharing a token, a power of two covering the units, within the subgroup. */
    uint32_t cluster = 1;
    while (cluster < units && cluster * 2 <= info->min_subgroup_size && cluster * 2 <= wg) cluster *= 2;
    const uint32_t lane_quads = (units + cluster - 1) / cluster * unit_quads;
    if (gqa_shared_bytes(wg, cluster, dq) > info->max_shared_memory)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "decode plan: head dim %u needs %llu bytes of shared memory, device %d (%s) has %u",
                        pc->head_dim, (unsigned long long)gqa_shared_bytes(wg, cluster, dq), info->logical_index,
                        info->name, info->max_shared_memory);
    /* Heads per workgroup: the largest divisor of the group size (at most 8) within the registers. */
    const uint32_t group = c->q_heads / pc->kv_heads;
    uint32_t hg = 1;
    for (uint32_t h = group < 8 ? group : 8; h >= 1; h--)
        if (group % h == 0 && h * lane_quads <= GQA_MAX_LANE_QUADS) {
            hg = h;
            break;
        }
    *s = (decode_shape){
        .pipeline = pc->dtype == DCP_DTYPE_F32    ? DCP_KERNEL_PAGED_DECODE_F32
                    : pc->dtype == DCP_DTYPE_Q8_0 ? DCP_KERNEL_PAGED_DECODE_Q8_0
                    : unit_quads == 2             ? DCP_KERNEL_PAGED_DECODE_F16X8
                                                  : DCP_KERNEL_PAGED_DECODE_F16,
        .spec = {wg, hg, pc->head_dim, cluster},
        .wg = wg, .hg = hg, .od = pc->head_dim,
        .max_chunk = DCP_DECODE_MAX_CHUNK, .granule = wg, .gpu_target = 1024};
    return DCP_OK;
}

/* ---- latent: mla_decode ----------------------------------------------------------------- */

enum {
    MLA_MAX_OUT_QUADS = 32,   /* registers: output quads per lane */
    MLA_MAX_Q_QUADS = 48,     /* registers: query quads per lane */
    MLA_MAX_TILE = 32,        /* tokens per tile */
    MLA_LOOP_BUDGET = 60000,  /* loop iterations per invocation (Mesa 22 stops at 65,535) */
    MLA_LONGEST_CHUNK = 8192, /* tokens, whatever the budget allows */
};

/* Shared memory of shaders/mla_decode.comp: the tile's rows (elem bytes each value: the cache's
 * dtype), row flags, partial scores, scores. */
static uint64_t mla_shared_bytes(uint32_t tile, uint32_t dk, uint32_t elem, uint32_t wg, uint32_t hg)
{
    return (uint64_t)tile * dk * elem + tile * 4ull + (uint64_t)wg * tile * 4 + (uint64_t)hg * tile * 4;
}

static dcp_status latent_shape(const dcp_kv_pool_config *pc, const dcp_decode_config *c, dcp_device *dev,
                               decode_shape *s)
{
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (!pc->k_only || pc->kv_heads != 1)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "MLA decode plan: the pool must be K-only with one head (a latent cache); it has %s and %u "
                        "heads", pc->k_only ? "K only" : "K and V", pc->kv_heads);
    if (c->latent == 0 || c->latent % 4 || c->latent >= pc->head_dim)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode plan: latent = kv_lora %u must be a positive multiple "
                        "of 4 below the pool's row width %u (kv_lora + rope)", c->latent, pc->head_dim);
    if (!(c->scale > 0.0f) || !isfinite(c->scale))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode plan: scale %g must be a positive finite number (the "
                        "model's, e.g. mscale^2 / sqrt(nope + rope))", (double)c->scale);
    /* Workgroup: 64 invocations on CPU drivers (lavapipe runs one subgroup at a time), 256 on GPUs
     * (fewer registers per lane). */
    uint32_t wg = dcp_vk_workgroup_size(dev);
    if (strcmp(info->type, "cpu") != 0 && wg < 256 && info->max_workgroup_invocations >= 256 &&
        info->max_workgroup_size[0] >= 256)
        wg = 256;
    const uint32_t dk = pc->head_dim, dq = dk / 4, dvq = c->latent / 4;
    const uint32_t elem = pc->dtype == DCP_DTYPE_Q8_0 ? 4u /* dequantized into an f32 tile */
                                                      : (uint32_t)dcp_dtype_size(pc->dtype);
    /* Heads per workgroup: the largest divisor of the heads whose query and output parts fit the
     * registers of the WG / hg lanes per head. */
    uint32_t hg = 0;
    for (uint32_t h = c->q_heads < wg ? c->q_heads : wg; h >= 1; h--) {
        uint32_t parts = wg / h;
        if (c->q_heads % h == 0 && ceil_div(dvq, parts) <= MLA_MAX_OUT_QUADS &&
            ceil_div(dq, parts) <= MLA_MAX_Q_QUADS && mla_shared_bytes(1, dk, elem, wg, h) <= info->max_shared_memory) {
            hg = h;
            break;
        }
    }
    if (hg == 0)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "MLA decode plan: rows of %u values (latent %u) do not fit device %d (%s): "
                        "%u bytes of shared memory, %u invocations per workgroup", dk, c->latent,
                        info->logical_index, info->name, info->max_shared_memory, wg);
    uint32_t tile = 1;
    while (tile * 2 <= MLA_MAX_TILE && mla_shared_bytes(tile * 2, dk, elem, wg, hg) <= info->max_shared_memory) tile *= 2;
    const uint32_t sg = info->subgroup_size;
    const uint32_t uniform_part = sg && info->min_subgroup_size == sg && hg % sg == 0 && wg % sg == 0;
    /* With a subgroup-uniform part, phases 2 and 4 read the tile once per subgroup-size quads and
     * share them by subgroupBroadcast (lavapipe: twice as fast as every lane reading each quad). */
    const uint32_t bw = uniform_part && sg <= 64 ? sg : 0;
    /* Loop iterations per tile and invocation (shaders/mla_decode.comp phases 1-4, counting the
     * register loops too in case a compiler keeps them rolled). Phase 1 loads rows per subgroup:
     * the most over the subgroup sizes a dispatch may get. */
    const uint32_t parts = wg / hg, qpl = ceil_div(dq, parts), opl = ceil_div(dvq, parts);
    uint64_t load = 0;
    for (uint32_t n = info->min_subgroup_size ? info->min_subgroup_size : 1; n <= 128; n *= 2) {
        const uint64_t it = (uint64_t)ceil_div(tile, ceil_div(wg, n)) * (1 + ceil_div(dq, n));
        if (it > load) load = it;
    }
    const uint64_t per_tile = load + (uint64_t)ceil_div(hg * tile, wg) * (1 + parts) +
                              (uint64_t)tile * (qpl + opl + 2) + 2ull * opl + 4;
    uint64_t max_chunk = (MLA_LOOP_BUDGET - 2ull * (qpl + opl) - 16) / per_tile * tile;
    if (max_chunk > MLA_LONGEST_CHUNK) max_chunk = MLA_LONGEST_CHUNK;
    if (max_chunk < tile)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "MLA decode plan: one tile needs %llu loop iterations per invocation",
                        (unsigned long long)per_tile);
    *s = (decode_shape){
        .pipeline = pc->dtype == DCP_DTYPE_Q8_0  ? DCP_KERNEL_MLA_DECODE_Q8_0
                    : pc->dtype == DCP_DTYPE_F16 ? DCP_KERNEL_MLA_DECODE_F16
                                                 : DCP_KERNEL_MLA_DECODE_F32,
        .spec = {wg, hg, dk, c->latent, tile, uniform_part, bw},
        .wg = wg, .hg = hg, .od = c->latent,
        .max_chunk = (uint32_t)max_chunk, .granule = tile, .gpu_target = 512};
    return DCP_OK;
}

/* Records the kernel of plan p's kind over bindings b: one workgroup per (chunk, group of hg
 * heads, row); direct: it writes the final O and LSE (grouped by og, the output groups' push
 * constants: zeros for the plain layout), else the chunks' partials (og zeros). */
static dcp_status dispatch(dcp_cmd *cmd, const dcp_decode_plan *p, const dcp_binding *b, int direct,
                           const uint32_t og[3])
{
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(p->pool);
    const dcp_decode_config *c = &p->cfg;
    const uint32_t shift = (uint32_t)__builtin_ctz(dcp_kv_pool_pages_per_segment(p->pool));
    const uint32_t gx = p->chunks, gy = c->q_heads / p->sh.hg, gz = p->rows;
    if (c->kind == DCP_DECODE_LATENT) {
        dcp_mla_decode_params pp = {
            .batch = p->rows, .heads = c->q_heads, .page_size = pc->page_size, .chunk_tokens = p->chunk_tokens,
            .num_chunks = p->chunks, .bt_stride = c->max_blocks, .segment_shift = shift,
            .total_pages = pc->num_pages, .direct = (uint32_t)direct, .scale = c->scale,
            .out_group = og[0], .o_group_stride = og[1], .lse_group_stride = og[2]};
        return dcp_kernel_dispatch(cmd, p->sh.pipeline, p->sh.spec, b, &pp, gx, gy, gz);
    }
    dcp_paged_decode_params pp = {
        .batch = p->rows, .q_heads = c->q_heads, .kv_heads = pc->kv_heads, .page_size = pc->page_size,
        .chunk_tokens = p->chunk_tokens, .num_chunks = p->chunks, .bt_stride = c->max_blocks,
        .segment_shift = shift, .total_pages = pc->num_pages, .direct = (uint32_t)direct, .scale = c->scale,
        .out_group = og[0], .o_group_stride = og[1], .lse_group_stride = og[2]};
    return dcp_kernel_dispatch(cmd, p->sh.pipeline, p->sh.spec, b, &pp, gx, gy, gz);
}

/* ---- the plan, both kinds --------------------------------------------------------------- */

/* Values per head of o for config c over pool pc. */
static uint32_t out_dim(const dcp_kv_pool_config *pc, const dcp_decode_config *c)
{
    return c->kind == DCP_DECODE_LATENT ? c->latent : pc->head_dim;
}

/* The split-KV workspace of `chunks` chunks: partial O [chunks][batch][q_heads][od] f32 and LSE
 * [chunks][batch][q_heads] f32. */
static void workspace_bytes(const dcp_decode_config *c, uint32_t od, uint64_t chunks, uint64_t *o, uint64_t *lse)
{
    const uint64_t rows = (uint64_t)c->batch * c->q_heads;
    *o = chunks * rows * od * 4;
    *lse = chunks * rows * 4;
}

dcp_status dcp_decode_plan_bytes(const dcp_kv_pool_config *pc, const dcp_decode_config *c, uint64_t max_length,
                                 uint64_t *bytes, uint64_t *largest)
{
    /* The tables of dcp_decode_plan_create, and the workspace dcp_decode_plan_set_rows grows to for
     * rows of max_length tokens (automatic chunking: at most one chunk per DCP_DECODE_MIN_CHUNK). */
    const uint64_t bt = (uint64_t)c->batch * c->max_blocks * 4, lens = (uint64_t)c->batch * 4;
    const uint32_t chunk = c->chunk_tokens ? c->chunk_tokens : DCP_DECODE_MIN_CHUNK;
    const uint64_t chunks = max_length ? (max_length + chunk - 1) / chunk : 1;
    *bytes = bt + lens;
    *largest = bt > lens ? bt : lens;
    if (chunks > DCP_DECODE_MAX_PARTS)
        return dcp_fail(DCP_ERR_CONFIG, "%s: %llu tokens in chunks of %u give %llu chunks, more than %d",
                        kind_name(c->kind), (unsigned long long)max_length, chunk, (unsigned long long)chunks,
                        DCP_DECODE_MAX_PARTS);
    if (chunks > 1) {
        uint64_t wo, wl;
        workspace_bytes(c, out_dim(pc, c), chunks, &wo, &wl);
        *bytes += wo + wl;
        if (wo > *largest) *largest = wo;
    }
    return DCP_OK;
}

dcp_status dcp_decode_plan_create(dcp_kv_pool *pool, const dcp_decode_config *c, dcp_decode_plan **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(pool);
    dcp_device *dev = dcp_kv_pool_device(pool);
    if (c->kind != DCP_DECODE_GQA && c->kind != DCP_DECODE_LATENT)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "decode plan: kind %d (allowed: DCP_DECODE_GQA, DCP_DECODE_LATENT)",
                        (int)c->kind);
    if (c->batch == 0 || c->q_heads == 0 || c->max_blocks == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "%s plan: batch (%u), q_heads (%u) and max_blocks (%u) must be >= 1", kind_name(c->kind),
                        c->batch, c->q_heads, c->max_blocks);
    decode_shape sh;
    st = c->kind == DCP_DECODE_LATENT ? latent_shape(pc, c, dev, &sh) : gqa_shape(pc, c, dev, &sh);
    if (st != DCP_OK) return st;
    if (c->chunk_tokens > sh.max_chunk)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "%s plan: chunk_tokens %u exceeds %u (bounds each workgroup's loop iterations)",
                        kind_name(c->kind), c->chunk_tokens, sh.max_chunk);
    dcp_decode_plan *p = calloc(1, sizeof *p);
    if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    p->pool = pool;
    p->dev = dev;
    p->cfg = *c;
    if (p->cfg.scale == 0.0f) p->cfg.scale = 1.0f / sqrtf((float)pc->head_dim); /* GQA's default */
    p->sh = sh;
    p->rows = c->batch;
    p->chunks = 1;
    p->chunk_tokens = sh.max_chunk;
    DCP_TRY(dcp_buffer_create(dev, (uint64_t)c->batch * c->max_blocks * 4, DCP_MEMORY_HOST, &p->bt));
    DCP_TRY(dcp_buffer_create(dev, (uint64_t)c->batch * 4, DCP_MEMORY_HOST, &p->lens));
    DCP_TRY(dcp_buffer_fill(p->bt, 0, dcp_buffer_size(p->bt), 0));
    DCP_TRY(dcp_buffer_fill(p->lens, 0, dcp_buffer_size(p->lens), 0));
    *out = p;
    return DCP_OK;
fail:
    dcp_decode_plan_destroy(p);
    return st;
}

void dcp_decode_plan_destroy(dcp_decode_plan *p)
{
    if (!p) return;
    dcp_buffer_destroy(p->bt);
    dcp_buffer_destroy(p->lens);
    dcp_buffer_destroy(p->work_o);
    dcp_buffer_destroy(p->work_lse);
    free(p);
}

uint32_t dcp_decode_plan_rows(const dcp_decode_plan *p) { return p->rows; }
uint32_t dcp_decode_plan_chunks(const dcp_decode_plan *p) { return p->chunks; }
uint32_t dcp_decode_plan_chunk_tokens(const dcp_decode_plan *p) { return p->chunk_tokens; }
uint32_t dcp_decode_plan_heads_per_group(const dcp_decode_plan *p) { return p->sh.hg; }
uint32_t dcp_decode_plan_max_chunk(const dcp_decode_plan *p) { return p->sh.max_chunk; }
uint64_t dcp_decode_plan_key(const dcp_decode_plan *p)
{
    return ((uint64_t)p->work_gen << 48) ^ ((uint64_t)p->rows << 24) ^ p->chunks;
}

dcp_status dcp_decode_plan_set(dcp_decode_plan *p, const uint32_t *lengths, const uint32_t *bt)
{
    return dcp_decode_plan_set_rows(p, p->cfg.batch, lengths, bt);
}

dcp_status dcp_decode_plan_set_rows(dcp_decode_plan *p, uint32_t rows, const uint32_t *lengths, const uint32_t *bt)
{
    dcp_status st = DCP_OK;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(p->pool);
    const dcp_decode_config *c = &p->cfg;
    const char *name = kind_name(c->kind);
    const uint64_t cover = (uint64_t)c->max_blocks * pc->page_size;
    uint32_t max_len = 0;
    if (rows == 0 || rows > c->batch)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: %u rows for a plan of batch %u (allowed 1..%u)", name, rows,
                        c->batch, c->batch);
    for (uint32_t b = 0; b < rows; b++) {
        if (lengths[b] > cover)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "%s: sequence %u has length %u but its block table covers only %llu tokens (%u "
                            "blocks of %u)",
                            name, b, lengths[b], (unsigned long long)cover, c->max_blocks, pc->page_size);
        const uint32_t used = ceil_div(lengths[b], pc->page_size);
        for (uint32_t i = 0; i < used; i++) {
            uint32_t page = bt[(uint64_t)b * c->max_blocks + i];
            if (page >= pc->num_pages)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "%s: sequence %u block-table entry %u is page %u, outside the pool of %u pages", name,
                                b, i, page, pc->num_pages);
        }
        if (lengths[b] > max_len) max_len = lengths[b];
    }

    /* Chunking: enough workgroups to fill the device, each chunk a multiple of the kind's granule
     * and at most its longest chunk. */
    const dcp_device_info *info = dcp_device_get_info(p->dev);
    uint32_t target = c->target_workgroups;
    if (!target) target = strcmp(info->type, "cpu") == 0 ? 16 : p->sh.gpu_target;
    const uint64_t per_chunk_wgs = (uint64_t)rows * (c->q_heads / p->sh.hg);
    uint32_t chunk = c->chunk_tokens;
    if (!chunk) {
        const uint64_t want = (target + per_chunk_wgs - 1) / per_chunk_wgs, len = max_len ? max_len : 1;
        const uint64_t g = p->sh.granule;
        uint64_t ch = (len + want - 1) / want;
        if (ch < DCP_DECODE_MIN_CHUNK) ch = DCP_DECODE_MIN_CHUNK;
        if (ch > p->sh.max_chunk) ch = p->sh.max_chunk;
        ch = (ch + g - 1) / g * g;
        if (ch > p->sh.max_chunk) ch = p->sh.max_chunk / g * g;
        chunk = (uint32_t)ch;
    }
    const uint32_t chunks = max_len ? ceil_div(max_len, chunk) : 1;
    if (chunks > DCP_DECODE_MAX_PARTS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: %u tokens in chunks of %u give %u chunks, more than %d", name,
                        max_len, chunk, chunks, DCP_DECODE_MAX_PARTS);
    if (chunks > 1 && chunks > p->work_cap) {
        dcp_buffer_destroy(p->work_o);
        dcp_buffer_destroy(p->work_lse);
        p->work_o = p->work_lse = NULL;
        p->work_cap = 0;
        uint64_t wo, wl;
        workspace_bytes(c, p->sh.od, chunks, &wo, &wl);
        DCP_TRY(dcp_buffer_create(p->dev, wo, DCP_MEMORY_DEVICE, &p->work_o));
        DCP_TRY(dcp_buffer_create(p->dev, wl, DCP_MEMORY_DEVICE, &p->work_lse));
        p->work_cap = chunks;
        p->work_gen++;
    }
    DCP_TRY(dcp_buffer_upload(p->bt, 0, bt, (uint64_t)rows * c->max_blocks * 4));
    DCP_TRY(dcp_buffer_upload(p->lens, 0, lengths, (uint64_t)rows * 4));
    p->rows = rows;
    p->chunks = chunks;
    p->chunk_tokens = chunk;
    return DCP_OK;
fail:
    return st;
}

dcp_status dcp_decode_record(dcp_cmd *cmd, const dcp_decode_plan *p, dcp_buffer *q, uint64_t q_offset,
                             dcp_buffer *o, uint64_t o_offset, dcp_buffer *lse, uint64_t lse_offset)
{
    return dcp_decode_record_grouped(cmd, p, q, q_offset, o, o_offset, lse, lse_offset, NULL);
}

dcp_status dcp_decode_record_grouped(dcp_cmd *cmd, const dcp_decode_plan *p, dcp_buffer *q, uint64_t q_offset,
                                     dcp_buffer *o, uint64_t o_offset, dcp_buffer *lse, uint64_t lse_offset,
                                     const dcp_out_groups *g)
{
    dcp_status st = DCP_OK;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(p->pool);
    if (dcp_cmd_device(cmd) != p->dev)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "%s: the command is not on the plan's device",
                        kind_name(p->cfg.kind));
    const uint64_t rows = (uint64_t)p->rows * p->cfg.q_heads, qd = pc->head_dim, od = p->sh.od;
    const int direct = p->chunks == 1;
    uint64_t o_bytes, lse_bytes;
    uint32_t og[3], plain[3] = {0, 0, 0};
    DCP_TRY(dcp_out_groups_check(kind_name(p->cfg.kind), g, p->rows, p->cfg.q_heads, (uint32_t)od, &o_bytes,
                                 &lse_bytes, og));
    dcp_binding b[5 + DCP_KV_MAX_SEGMENTS];
    b[0] = (dcp_binding){q, q_offset, rows * qd * 4};
    b[1] = (dcp_binding){p->bt, 0, 0};
    b[2] = (dcp_binding){p->lens, 0, 0};
    if (direct) {
        b[3] = (dcp_binding){o, o_offset, o_bytes};
        b[4] = (dcp_binding){lse, lse_offset, lse_bytes};
    } else {
        b[3] = (dcp_binding){p->work_o, 0, p->chunks * rows * od * 4};
        b[4] = (dcp_binding){p->work_lse, 0, p->chunks * rows * 4};
    }
    dcp_kv_pool_bindings(p->pool, b + 5);
    DCP_TRY(dispatch(cmd, p, b, direct, direct ? og : plain));
    if (!direct) {
        dcp_cmd_barrier(cmd); /* decode partials -> lse_merge */
        dcp_merge_args m = {.parts = p->chunks, .rows = (uint32_t)rows, .head_dim = (uint32_t)od,
                            .o_part_stride = (uint32_t)(rows * od), .lse_part_stride = (uint32_t)rows,
                            .o_in = p->work_o, .lse_in = p->work_lse, .o_out = o, .o_out_offset = o_offset,
                            .lse_out = lse, .lse_out_offset = lse_offset};
        DCP_TRY(dcp_lse_merge_record_grouped(cmd, &m, p->cfg.q_heads, g));
    }
    return DCP_OK;
fail:
    return st;
}
