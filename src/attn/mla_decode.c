/* MLA latent decode: the plan (heads per workgroup, tile, chunking, block tables, workspace) and
 * its recording (see include/dcpvk/mla.h and shaders/mla_decode.comp). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/attn.h"
#include "dcpvk/mla.h"
#include "kv/kv_internal.h"
#include "kernels/kernels.h"

enum {
    MLA_MAX_OUT_QUADS = 32,   /* registers: output quads per lane */
    MLA_MAX_Q_QUADS = 48,     /* registers: query quads per lane */
    MLA_MAX_TILE = 32,        /* tokens per tile */
    MLA_LOOP_BUDGET = 60000,  /* loop iterations per invocation (Mesa 22 stops at 65,535) */
    MLA_MIN_CHUNK = 256,      /* shortest automatic chunk */
    MLA_MAX_PARTS = 32767,    /* lse_merge's limit */
};

struct dcp_mla_decode_plan {
    dcp_kv_pool *pool;
    dcp_device *dev;
    dcp_mla_decode_config cfg;
    uint32_t dk;          /* row width (pool head_dim) */
    uint32_t wg, hg, tile, uniform_part;
    uint32_t max_chunk;   /* longest chunk (tokens) within the loop budget */
    dcp_kernel_id pipeline;
    uint32_t rows;        /* rows of the last set (<= batch) */
    uint32_t chunks, chunk_tokens;
    dcp_buffer *bt;       /* [batch][max_blocks] u32, host-visible */
    dcp_buffer *lens;     /* [batch] u32, host-visible */
    dcp_buffer *work_o;   /* [chunks][batch][heads][kv_lora] f32 partials */
    dcp_buffer *work_lse; /* [chunks][batch][heads] f32 */
    uint64_t work_cap;    /* chunks the workspace holds */
    uint32_t work_gen;    /* bumped whenever the workspace is reallocated */
};

/* Shared memory of shaders/mla_decode.comp: the tile's rows (elem bytes each value: the cache's
 * dtype), row flags, partial scores. */
static uint64_t shared_bytes(uint32_t tile, uint32_t dk, uint32_t elem, uint32_t wg)
{
    return (uint64_t)tile * dk * elem + tile * 4ull + (uint64_t)wg * tile * 4;
}

static uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

dcp_status dcp_mla_decode_plan_bytes(const dcp_kv_pool_config *pc, const dcp_mla_decode_config *c,
                                     uint64_t max_length, uint64_t *bytes, uint64_t *largest)
{
    (void)pc;
    const uint64_t bt = (uint64_t)c->batch * c->max_blocks * 4, lens = (uint64_t)c->batch * 4;
    const uint64_t chunk = c->chunk_tokens ? c->chunk_tokens : MLA_MIN_CHUNK;
    const uint64_t chunks = max_length ? (max_length + chunk - 1) / chunk : 1;
    *bytes = bt + lens;
    *largest = bt > lens ? bt : lens;
    if (chunks > MLA_MAX_PARTS)
        return dcp_fail(DCP_ERR_CONFIG, "MLA decode: %llu tokens in chunks of %llu give %llu chunks, more than %d",
                        (unsigned long long)max_length, (unsigned long long)chunk, (unsigned long long)chunks,
                        MLA_MAX_PARTS);
    if (chunks > 1) {
        const uint64_t rows = (uint64_t)c->batch * c->heads, wo = chunks * rows * c->kv_lora * 4;
        *bytes += wo + chunks * rows * 4;
        if (wo > *largest) *largest = wo;
    }
    return DCP_OK;
}

dcp_status dcp_mla_decode_plan_create(dcp_kv_pool *pool, const dcp_mla_decode_config *c, dcp_mla_decode_plan **out)
{
    dcp_status st = DCP_OK;
    *out = NULL;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(pool);
    dcp_device *dev = dcp_kv_pool_device(pool);
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (!pc->k_only || pc->kv_heads != 1)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "MLA decode plan: the pool must be K-only with one head (a latent cache); it has %s and %u "
                        "heads", pc->k_only ? "K only" : "K and V", pc->kv_heads);
    if (c->batch == 0 || c->max_blocks == 0 || c->heads == 0)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode plan: batch (%u), heads (%u) and max_blocks (%u) must "
                        "be >= 1", c->batch, c->heads, c->max_blocks);
    if (c->kv_lora == 0 || c->kv_lora % 4 || c->kv_lora >= pc->head_dim)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode plan: kv_lora %u must be a positive multiple of 4 below "
                        "the pool's row width %u (kv_lora + rope)", c->kv_lora, pc->head_dim);
    if (!(c->scale > 0.0f) || !isfinite(c->scale))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode plan: scale %g must be a positive finite number (the "
                        "model's, e.g. mscale^2 / sqrt(nope + rope))", (double)c->scale);
    /* Workgroup: 64 invocations on CPU drivers (lavapipe runs one subgroup at a time), 256 on GPUs
     * (fewer registers per lane). */
    uint32_t wg = dcp_vk_workgroup_size(dev);
    if (strcmp(info->type, "cpu") != 0 && wg < 256 && info->max_workgroup_invocations >= 256 &&
        info->max_workgroup_size[0] >= 256)
        wg = 256;
    const uint32_t dk = pc->head_dim, dq = dk / 4, dvq = c->kv_lora / 4, elem = pc->dtype == DCP_DTYPE_Q8_0 ? 4u /* dequantized into an f32 tile */ : (uint32_t)dcp_dtype_size(pc->dtype);
    /* Heads per workgroup: the largest divisor of heads whose query and output parts fit the
     * registers of the WG / hg lanes per head. */
    uint32_t hg = 0;
    for (uint32_t h = c->heads < wg ? c->heads : wg; h >= 1; h--) {
        uint32_t parts = wg / h;
        if (c->heads % h == 0 && ceil_div(dvq, parts) <= MLA_MAX_OUT_QUADS && ceil_div(dq, parts) <= MLA_MAX_Q_QUADS &&
            shared_bytes(1, dk, elem, wg) <= info->max_shared_memory) {
            hg = h;
            break;
        }
    }
    if (hg == 0)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "MLA decode plan: rows of %u values (latent %u) do not fit device %d (%s): "
                        "%u bytes of shared memory, %u invocations per workgroup", dk, c->kv_lora,
                        info->logical_index, info->name, info->max_shared_memory, wg);
    uint32_t tile = 1;
    while (tile * 2 <= MLA_MAX_TILE && shared_bytes(tile * 2, dk, elem, wg) <= info->max_shared_memory) tile *= 2;
    const uint32_t sg = info->subgroup_size;
    const uint32_t uniform_part = sg && info->min_subgroup_size == sg && hg % sg == 0 && wg % sg == 0;
    /* Loop iterations per tile and invocation (shaders/mla_decode.comp phases 1-4, counting the
     * register loops too in case a compiler keeps them rolled). */
    const uint32_t parts = wg / hg, qpl = ceil_div(dq, parts), opl = ceil_div(dvq, parts);
    const uint64_t per_tile = ceil_div((uint64_t)tile * dq, wg) + (uint64_t)tile * (qpl + 2 * parts + opl + 2) +
                              2ull * opl + 4;
    uint64_t max_chunk = (MLA_LOOP_BUDGET - 2ull * (qpl + opl) - 16) / per_tile * tile;
    if (max_chunk > 8192) max_chunk = 8192;
    if (max_chunk < tile)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "MLA decode plan: one tile needs %llu loop iterations per invocation",
                        (unsigned long long)per_tile);
    if (c->chunk_tokens > max_chunk)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "MLA decode plan: chunk_tokens %u exceeds %llu (bounds each workgroup's loop iterations)",
                        c->chunk_tokens, (unsigned long long)max_chunk);
    dcp_mla_decode_plan *p = calloc(1, sizeof *p);
    if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    p->pool = pool;
    p->dev = dev;
    p->cfg = *c;
    p->dk = dk;
    p->wg = wg;
    p->hg = hg;
    p->tile = tile;
    p->uniform_part = uniform_part;
    p->max_chunk = (uint32_t)max_chunk;
    p->pipeline = pc->dtype == DCP_DTYPE_Q8_0 ? DCP_KERNEL_MLA_DECODE_Q8_0
                  : pc->dtype == DCP_DTYPE_F16 ? DCP_KERNEL_MLA_DECODE_F16
                                               : DCP_KERNEL_MLA_DECODE_F32;
    p->rows = c->batch;
    p->chunks = 1;
    p->chunk_tokens = p->max_chunk;
    DCP_TRY(dcp_buffer_create(dev, (uint64_t)c->batch * c->max_blocks * 4, DCP_MEMORY_HOST, &p->bt));
    DCP_TRY(dcp_buffer_create(dev, (uint64_t)c->batch * 4, DCP_MEMORY_HOST, &p->lens));
    DCP_TRY(dcp_buffer_fill(p->bt, 0, dcp_buffer_size(p->bt), 0));
    DCP_TRY(dcp_buffer_fill(p->lens, 0, dcp_buffer_size(p->lens), 0));
    *out = p;
    return DCP_OK;
fail:
    dcp_mla_decode_plan_destroy(p);
    return st;
}

void dcp_mla_decode_plan_destroy(dcp_mla_decode_plan *p)
{
    if (!p) return;
    dcp_buffer_destroy(p->bt);
    dcp_buffer_destroy(p->lens);
    dcp_buffer_destroy(p->work_o);
    dcp_buffer_destroy(p->work_lse);
    free(p);
}

uint32_t dcp_mla_decode_plan_chunks(const dcp_mla_decode_plan *p) { return p->chunks; }
uint32_t dcp_mla_decode_plan_chunk_tokens(const dcp_mla_decode_plan *p) { return p->chunk_tokens; }
uint32_t dcp_mla_decode_plan_heads_per_group(const dcp_mla_decode_plan *p) { return p->hg; }
uint32_t dcp_mla_decode_plan_max_chunk(const dcp_mla_decode_plan *p) { return p->max_chunk; }

uint32_t dcp_mla_decode_plan_rows(const dcp_mla_decode_plan *p) { return p->rows; }
uint64_t dcp_mla_decode_plan_key(const dcp_mla_decode_plan *p)
{
    return ((uint64_t)p->work_gen << 48) ^ ((uint64_t)p->rows << 24) ^ p->chunks;
}

dcp_status dcp_mla_decode_plan_set(dcp_mla_decode_plan *p, const uint32_t *lengths, const uint32_t *bt)
{
    return dcp_mla_decode_plan_set_rows(p, p->cfg.batch, lengths, bt);
}

dcp_status dcp_mla_decode_plan_set_rows(dcp_mla_decode_plan *p, uint32_t rows, const uint32_t *lengths,
                                        const uint32_t *bt)
{
    dcp_status st = DCP_OK;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(p->pool);
    const dcp_mla_decode_config *c = &p->cfg;
    uint64_t cover = (uint64_t)c->max_blocks * pc->page_size;
    uint32_t max_len = 0;
    if (rows == 0 || rows > c->batch)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode: %u rows for a plan of batch %u (allowed 1..%u)", rows,
                        c->batch, c->batch);
    for (uint32_t b = 0; b < rows; b++) {
        if (lengths[b] > cover)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "MLA decode: sequence %u has length %u but its block table covers only %llu tokens (%u "
                            "blocks of %u)", b, lengths[b], (unsigned long long)cover, c->max_blocks, pc->page_size);
        uint32_t used = ceil_div(lengths[b], pc->page_size);
        for (uint32_t i = 0; i < used; i++) {
            uint32_t page = bt[(uint64_t)b * c->max_blocks + i];
            if (page >= pc->num_pages)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode: sequence %u block-table entry %u is page %u, "
                                "outside the pool of %u pages", b, i, page, pc->num_pages);
        }
        if (lengths[b] > max_len) max_len = lengths[b];
    }
    /* Chunking: enough workgroups to fill the device, chunks a multiple of the tile, within the
     * loop budget. */
    const dcp_device_info *info = dcp_device_get_info(p->dev);
    uint32_t target = c->target_workgroups;
    if (!target) target = strcmp(info->type, "cpu") == 0 ? 16 : 512;
    uint64_t per_chunk_wgs = (uint64_t)rows * (c->heads / p->hg);
    uint32_t chunk = c->chunk_tokens;
    if (!chunk) {
        uint64_t want = (target + per_chunk_wgs - 1) / per_chunk_wgs;
        uint64_t len = max_len ? max_len : 1;
        uint64_t ch = (len + want - 1) / want;
        if (ch < MLA_MIN_CHUNK) ch = MLA_MIN_CHUNK;
        ch = (ch + p->tile - 1) / p->tile * p->tile;
        if (ch > p->max_chunk) ch = p->max_chunk / p->tile * p->tile;
        chunk = (uint32_t)ch;
    }
    uint32_t chunks = max_len ? ceil_div(max_len, chunk) : 1;
    if (chunks > MLA_MAX_PARTS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode: %u tokens in chunks of %u give %u chunks, more than %d",
                        max_len, chunk, chunks, MLA_MAX_PARTS);
    if (chunks > 1 && chunks > p->work_cap) {
        dcp_buffer_destroy(p->work_o);
        dcp_buffer_destroy(p->work_lse);
        p->work_o = p->work_lse = NULL;
        p->work_cap = 0;
        uint64_t cap_rows = (uint64_t)c->batch * c->heads;
        DCP_TRY(dcp_buffer_create(p->dev, chunks * cap_rows * c->kv_lora * 4, DCP_MEMORY_DEVICE, &p->work_o));
        DCP_TRY(dcp_buffer_create(p->dev, chunks * cap_rows * 4, DCP_MEMORY_DEVICE, &p->work_lse));
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

dcp_status dcp_mla_decode_record(dcp_cmd *cmd, const dcp_mla_decode_plan *p, dcp_buffer *q, uint64_t q_offset,
                                 dcp_buffer *o, uint64_t o_offset, dcp_buffer *lse, uint64_t lse_offset)
{
    dcp_status st = DCP_OK;
    const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(p->pool);
    const dcp_mla_decode_config *c = &p->cfg;
    if (dcp_cmd_device(cmd) != p->dev)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "MLA decode: the command is not on the plan's device");
    const uint64_t rows = (uint64_t)p->rows * c->heads, dv = c->kv_lora;
    const int direct = p->chunks == 1;
    dcp_binding b[5 + DCP_KV_MAX_SEGMENTS];
    b[0] = (dcp_binding){q, q_offset, rows * p->dk * 4};
    b[1] = (dcp_binding){p->bt, 0, 0};
    b[2] = (dcp_binding){p->lens, 0, 0};
    if (direct) {
        b[3] = (dcp_binding){o, o_offset, rows * dv * 4};
        b[4] = (dcp_binding){lse, lse_offset, rows * 4};
    } else {
        b[3] = (dcp_binding){p->work_o, 0, p->chunks * rows * dv * 4};
        b[4] = (dcp_binding){p->work_lse, 0, p->chunks * rows * 4};
    }
    dcp_kv_pool_bindings(p->pool, b + 5);
    dcp_mla_decode_params pp = {
        .batch = p->rows, .heads = c->heads, .page_size = pc->page_size, .chunk_tokens = p->chunk_tokens,
        .num_chunks = p->chunks, .bt_stride = c->max_blocks,
        .segment_shift = (uint32_t)__builtin_ctz(dcp_kv_pool_pages_per_segment(p->pool)),
        .total_pages = pc->num_pages, .direct = (uint32_t)direct, .scale = c->scale};
    uint32_t spec[6] = {p->wg, p->hg, p->dk, c->kv_lora, p->tile, p->uniform_part};
    DCP_TRY(dcp_kernel_dispatch(cmd, p->pipeline, spec, b, &pp, p->chunks, c->heads / p->hg, p->rows));
    if (!direct) {
        dcp_cmd_barrier(cmd); /* mla_decode partials -> lse_merge */
        dcp_merge_args m = {.parts = p->chunks, .rows = (uint32_t)rows, .head_dim = c->kv_lora,
                            .o_part_stride = (uint32_t)(rows * dv), .lse_part_stride = (uint32_t)rows,
                            .o_in = p->work_o, .lse_in = p->work_lse, .o_out = o, .o_out_offset = o_offset,
                            .lse_out = lse, .lse_out_offset = lse_offset};
        DCP_TRY(dcp_lse_merge_record(cmd, &m));
    }
    return DCP_OK;
fail:
    return st;
}
