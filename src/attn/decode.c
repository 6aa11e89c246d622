/* Paged flash-decoding: the plan (chunking, block tables, workspace) and its recording. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/attn.h"
#include "kv/kv_internal.h"
#include "kernels/kernels.h"

/* Longest chunk one workgroup scans: bounds each invocation's loop iterations (Mesa 22 lavapipe
 * ends loops after 65,535 iterations) and each dispatch's duration (GPU watchdogs). */
enum { DCP_DECODE_MAX_CHUNK = 2048, DCP_DECODE_MIN_CHUNK = 256, DCP_DECODE_MAX_PARTS = 32767 };

struct dcp_decode_plan {
    dcp_kv_pool *pool;
    dcp_device *dev;
    dcp_decode_config cfg;
    uint32_t wg;          /* workgroup size */
    uint32_t hg;          /* query heads per workgroup */
    uint32_t cluster;     /* invocations sharing one token (power of two <= subgroup) */
    dcp_kernel_id pipeline;
    uint32_t rows;        /* rows of the last set (<= batch) */
    uint32_t chunks;      /* chunks per sequence */
    uint32_t chunk_tokens;
    dcp_buffer *bt;       /* [batch][max_blocks] u32, host-visible: dcp_decode_plan_set writes it without a submit */
    dcp_buffer *lens;     /* [batch] u32, host-visible (as bt) */
    dcp_buffer *work_o;   /* [chunks][batch][Hq][D] f32 partials */
    dcp_buffer *work_lse; /* [chunks][batch][Hq] f32 */
    uint64_t work_cap;    /* chunks the workspace holds */
    uint32_t work_gen;    /* bumped whenever the workspace is reallocated */
};

static uint64_t shared_bytes(uint32_t wg, uint32_t cluster, uint32_t dq)
{
    /* Mirrors the shared arrays of shaders/paged_decode.comp: per token slot m, l and O. */
    uint64_t slots = wg / cluster;
    return slots * (8ull + 16ull * dq);
}

/* Registers the shader's per-lane arrays may take: HG * ceil(DQ / C) quads of Q and of O. */
enum { DCP_DECODE_MAX_LANE_QUADS = 32 };

/* The split-KV workspace of `chunks` chunks: partial O [chunks][batch][q_heads][head_dim] f32
 * and LSE [chunks][batch][q_heads] f32. */
static void workspace_bytes(const dcp_kv_pool_config *pc, const dcp_decode_config *c, uint64_t chunks, uint64_t *o,
                            uint64_t *lse)
{
    const uint64_t rows = (uint64_t)c->batch * c->q_heads;
    *o = chunks * rows * pc->head_dim * 4;
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
        return dcp_fail(DCP_ERR_CONFIG,
                        "decode: %llu tokens in chunks of %u give %llu chunks, more than %d",
                        (unsigned long long)max_length, chunk, (unsigned long long)chunks, DCP_DECODE_MAX_PARTS);
    if (chunks > 1) {
        uint64_t wo, wl;
        workspace_bytes(pc, c, chunks, &wo, &wl);
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
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (c->batch == 0 || c->max_blocks == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "decode plan: batch (%u) and max_blocks (%u) must be >= 1",
                        c->batch, c->max_blocks);
    if (pc->k_only || pc->head_dim > 256)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "decode plan: the GQA decode reads K+V pools of head dim up to 256 (this pool: %s, head "
                        "dim %u; MLA latent pools use dcp_mla_decode_plan_create)",
                        pc->k_only ? "K-only" : "K+V", pc->head_dim);
    if (c->q_heads == 0 || c->q_heads % pc->kv_heads)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "decode plan: %u query heads is not a multiple of the pool's %u KV heads",
                        c->q_heads, pc->kv_heads);
    uint32_t wg = dcp_vk_workgroup_size(dev);
    uint32_t dq = pc->head_dim / 4;
    /* Loads of 16 bytes where rows allow (f16 rows of a multiple of 8 elements), else 8; q8_0 units
     * are 8 values (two words) too. */
    uint32_t unit_quads =
        ((pc->dtype == DCP_DTYPE_F16 && pc->head_dim % 8 == 0) || pc->dtype == DCP_DTYPE_Q8_0) ? 2 : 1;
    uint32_t units = dq / unit_quads;
    /* Cluster: lanes sharing a token, a power of two covering the units, within the subgroup. */
    uint32_t cluster = 1;
    while (cluster < units && cluster * 2 <= info->min_subgroup_size && cluster * 2 <= wg) cluster *= 2;
    uint32_t lane_quads = (units + cluster - 1) / cluster * unit_quads;
    if (shared_bytes(wg, cluster, dq) > info->max_shared_memory)
        return dcp_fail(DCP_ERR_UNSUPPORTED,
                        "decode plan: head dim %u needs %llu bytes of shared memory, device %d (%s) has %u",
                        pc->head_dim, (unsigned long long)shared_bytes(wg, cluster, dq), info->logical_index,
                        info->name, info->max_shared_memory);
    /* Heads per workgroup: the largest divisor of the group size (at most 8) within the registers. */
    uint32_t group = c->q_heads / pc->kv_heads;
    uint32_t hg = 1;
    for (uint32_t h = group < 8 ? group : 8; h >= 1; h--)
        if (group % h == 0 && h * lane_quads <= DCP_DECODE_MAX_LANE_QUADS) {
            hg = h;
            break;
        }
    if (c->chunk_tokens > DCP_DECODE_MAX_CHUNK)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "decode plan: chunk_tokens %u exceeds %d (bounds each workgroup's work)",
                        c->chunk_tokens, DCP_DECODE_MAX_CHUNK);
    dcp_decode_plan *p = calloc(1, sizeof *p);
    if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    p->pool = pool;
    p->dev = dev;
    p->cfg = *c;
    if (p->cfg.scale == 0.0f) p->cfg.scale = 1.0f / sqrtf((float)pc->head_dim);
    p->wg = wg;
    p->hg = hg;
    p->cluster = cluster;
    p->pipeline = pc->dtype == DCP_DTYPE_F32    ? DCP_KERNEL_PAGED_DECODE_F32
                  : pc->dtype == DCP_DTYPE_Q8_0 ? DCP_KERNEL_PAGED_DECODE_Q8_0
                  : unit_quads == 2             ? DCP_KERNEL_PAGED_DECODE_F16X8
                                                : DCP_KERNEL_PAGED_DECODE_F16;
    p->rows = c->batch;
    p->chunks = 1;
    p->chunk_tokens = DCP_DECODE_MAX_CHUNK;
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

uint32_t dcp_decode_plan_chunks(const dcp_decode_plan *p) { return p->chunks; }
uint32_t dcp_decode_plan_rows(const dcp_decode_plan *p) { return p->rows; }
uint64_t dcp_decode_plan_key(const dcp_decode_plan *p)
{
    return ((uint64_t)p->work_gen << 48) ^ ((uint64_t)p->rows << 24) ^ p->chunks;
}
uint32_t dcp_decode_plan_chunk_tokens(const dcp_decode_plan *p) { return p->chunk_tokens; }

dcp_status dcp_decode_plan_set(dcp_decode_plan *p, const uint32_t *lengths, const uint32_t *bt)
{
    return dcp_decode_plan_set_rows(p, p->cfg.batch, lengths, bt);
}

dcp_status dcp_decode_plan_set_rows(dcp_decode_plan *p, uint32_t rows, const uint32_t *lengths, const uint32_t *bt)
{
    dcp_status st = DCP_OK;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(p->pool);
    const dcp_decode_config *c = &p->cfg;
    uint64_t cover = (uint64_t)c->max_blocks * pc->page_size;
    uint32_t max_len = 0;
    if (rows == 0 || rows > c->batch)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "decode: %u rows for a plan of batch %u (allowed 1..%u)", rows,
                        c->batch, c->batch);
    for (uint32_t b = 0; b < rows; b++) {
        if (lengths[b] > cover)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "decode: sequence %u has length %u but its block table covers only %llu "
                            "tokens (%u blocks of %u)",
                            b, lengths[b], (unsigned long long)cover, c->max_blocks, pc->page_size);
        uint32_t used = (uint32_t)(((uint64_t)lengths[b] + pc->page_size - 1) / pc->page_size);
        for (uint32_t i = 0; i < used; i++) {
            uint32_t page = bt[(uint64_t)b * c->max_blocks + i];
            if (page >= pc->num_pages)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "decode: sequence %u block-table entry %u is page %u, outside the pool "
                                "of %u pages",
                                b, i, page, pc->num_pages);
        }
        if (lengths[b] > max_len) max_len = lengths[b];
    }

    /* Chunking: enough workgroups to fill the device, each chunk at most DCP_DECODE_MAX_CHUNK. */
    const dcp_device_info *info = dcp_device_get_info(p->dev);
    uint32_t target = c->target_workgroups;
    if (!target) target = strcmp(info->type, "cpu") == 0 ? 16 : 1024;
    uint64_t per_chunk_wgs = (uint64_t)rows * (c->q_heads / p->hg);
    uint32_t chunk = c->chunk_tokens;
    if (!chunk) {
        uint64_t want = (target + per_chunk_wgs - 1) / per_chunk_wgs;
        uint64_t len = max_len ? max_len : 1;
        chunk = (uint32_t)((len + want - 1) / want);
        if (chunk < DCP_DECODE_MIN_CHUNK) chunk = DCP_DECODE_MIN_CHUNK;
        if (chunk > DCP_DECODE_MAX_CHUNK) chunk = DCP_DECODE_MAX_CHUNK;
        chunk = (chunk + p->wg - 1) / p->wg * p->wg;
    }
    uint32_t chunks = max_len ? (uint32_t)(((uint64_t)max_len + chunk - 1) / chunk) : 1;
    if (chunks > DCP_DECODE_MAX_PARTS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "decode: %u tokens in chunks of %u give %u chunks, more than %d", max_len, chunk,
                        chunks, DCP_DECODE_MAX_PARTS);
    if (chunks > 1 && chunks > p->work_cap) {
        dcp_buffer_destroy(p->work_o);
        dcp_buffer_destroy(p->work_lse);
        p->work_o = p->work_lse = NULL;
        p->work_cap = 0;
        uint64_t wo, wl;
        workspace_bytes(pc, c, chunks, &wo, &wl);
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
    dcp_status st = DCP_OK;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(p->pool);
    const dcp_decode_config *c = &p->cfg;
    uint64_t rows = (uint64_t)p->rows * c->q_heads;
    int direct = p->chunks == 1;
    dcp_binding b[5 + DCP_KV_MAX_SEGMENTS];
    b[0] = (dcp_binding){q, q_offset, rows * pc->head_dim * 4};
    b[1] = (dcp_binding){p->bt, 0, 0};
    b[2] = (dcp_binding){p->lens, 0, 0};
    if (direct) {
        b[3] = (dcp_binding){o, o_offset, rows * pc->head_dim * 4};
        b[4] = (dcp_binding){lse, lse_offset, rows * 4};
    } else {
        b[3] = (dcp_binding){p->work_o, 0, p->chunks * rows * pc->head_dim * 4};
        b[4] = (dcp_binding){p->work_lse, 0, p->chunks * rows * 4};
    }
    dcp_kv_pool_bindings(p->pool, b + 5);
    dcp_paged_decode_params pp = {
        .batch = p->rows, .q_heads = c->q_heads, .kv_heads = pc->kv_heads, .page_size = pc->page_size,
        .chunk_tokens = p->chunk_tokens, .num_chunks = p->chunks, .bt_stride = c->max_blocks,
        .segment_shift = (uint32_t)__builtin_ctz(dcp_kv_pool_pages_per_segment(p->pool)),
        .total_pages = pc->num_pages,
        .direct = (uint32_t)direct, .scale = c->scale};
    uint32_t spec[4] = {p->wg, p->hg, pc->head_dim, p->cluster};
    DCP_TRY(dcp_kernel_dispatch(cmd, p->pipeline, spec, b, &pp, p->chunks, c->q_heads / p->hg, p->rows));
    if (!direct) {
        dcp_cmd_barrier(cmd); /* paged_decode partials -> lse_merge */
        dcp_merge_args m = {.parts = p->chunks, .rows = (uint32_t)rows, .head_dim = pc->head_dim,
                            .o_part_stride = (uint32_t)(rows * pc->head_dim), .lse_part_stride = (uint32_t)rows,
                            .o_in = p->work_o, .lse_in = p->work_lse, .o_out = o, .o_out_offset = o_offset,
                            .lse_out = lse, .lse_out_offset = lse_offset};
        DCP_TRY(dcp_lse_merge_record(cmd, &m));
    }
    return DCP_OK;
fail:
    return st;
}
