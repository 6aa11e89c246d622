/* Recording of the model kernels and upload of weight matrices (see include/dcpvk/ops.h). */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dcpvk/dtype.h"
#include "kv/kv_internal.h"
#include "dcpvk/ops.h"
#include "kernels/kernels.h"
#include "ops/ops_internal.h"
#include "quant/quants.h"

static dcp_status check_type(dcp_ggml_type type, uint32_t k, const char *what)
{
    if (!dcp_ggml_type_supported(type)) {
        const char *n = dcp_ggml_type_name(type);
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: weight type %s is not supported (" DCP_GGML_SUPPORTED_LIST ")",
                        what, n ? n : "unknown");
    }
    const dcp_quant_layout *ql = dcp_quant_layout_of(type);
    uint32_t align = ql ? ql->block_elems : type == DCP_GGML_TYPE_Q8_0 ? 32 : 4;
    if (k == 0 || k % align)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: row length %u is not a positive multiple of %u", what, k, align);
    return DCP_OK;
}

uint64_t dcp_matrix_bytes(dcp_ggml_type type, uint32_t k, uint64_t rows)
{
    if (!dcp_ggml_type_supported(type)) return 0;
    const uint64_t elems = rows * k;
    const dcp_quant_layout *ql = dcp_quant_layout_of(type);
    return ql ? dcp_quant_device_bytes(ql, elems / ql->block_elems)
           : type == DCP_GGML_TYPE_F32 ? elems * 4
           : type == DCP_GGML_TYPE_Q8_0 ? elems + elems / 32 * 4
                                        : elems * 2;
}

dcp_status dcp_matrix_create(dcp_device *dev, dcp_ggml_type type, uint32_t k, uint32_t parts,
                             const void *const *data, const uint32_t *part_rows, dcp_matrix *out)
{
    dcp_status st = DCP_OK;
    memset(out, 0, sizeof *out);
    uint8_t *host = NULL;
    DCP_TRY(check_type(type, k, "matrix upload"));
    uint64_t rows = 0;
    for (uint32_t i = 0; i < parts; i++) rows += part_rows[i];
    if (rows == 0 || rows > UINT32_MAX)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "matrix upload: %llu rows", (unsigned long long)rows);
    uint64_t elems = rows * k;
    const dcp_quant_layout *ql = dcp_quant_layout_of(type);
    uint64_t bytes = dcp_matrix_bytes(type, k, rows);
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (bytes > info->max_storage_buffer_range || bytes / 4 > UINT32_MAX)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "matrix of %llu x %u %s is %llu bytes, more than device %d's storage-buffer "
                        "range of %llu bytes",
                        (unsigned long long)rows, k, dcp_ggml_type_name(type), (unsigned long long)bytes,
                        info->logical_index, (unsigned long long)info->max_storage_buffer_range);
    host = malloc(bytes);
    if (!host) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory (%llu bytes)", (unsigned long long)bytes);
    if (type == DCP_GGML_TYPE_Q8_0) {
        int8_t *qs = (int8_t *)host;
        float *sc = (float *)(host + elems);
        uint64_t row = 0;
        for (uint32_t i = 0; i < parts; i++) {
            const uint8_t *src = data[i];
            for (uint64_t r = 0; r < part_rows[i]; r++, row++)
                for (uint32_t b = 0; b < k / 32; b++) {
                    const uint8_t *blk = src + (r * (k / 32) + b) * DCP_Q8_0_BYTES;
                    uint16_t d = (uint16_t)(blk[0] | blk[1] << 8);
                    sc[row * (k / 32) + b] = dcp_f16_to_f32(d);
                    memcpy(qs + row * k + b * 32, blk + 2, 32);
                }
        }
        out->scale_offset = (uint32_t)(elems / 4);
    } else if (ql) {
        uint64_t blocks = elems / ql->block_elems, first = 0;
        uint32_t *body = (uint32_t *)host;
        uint16_t *halves = (uint16_t *)(body + blocks * ql->body_words);
        memset(host, 0, bytes); /* the padding half, if any */
        for (uint32_t i = 0; i < parts; i++) {
            uint64_t nb = (uint64_t)part_rows[i] * (k / ql->block_elems);
            dcp_quant_repack(ql, data[i], nb, first, body, halves);
            first += nb;
        }
        out->scale_offset = (uint32_t)(blocks * ql->body_words);
    } else {
        uint64_t row_bytes = bytes / rows, off = 0;
        for (uint32_t i = 0; i < parts; i++) {
            memcpy(host + off, data[i], row_bytes * part_rows[i]);
            off += row_bytes * part_rows[i];
        }
    }
    DCP_TRY(dcp_buffer_create(dev, bytes, DCP_MEMORY_DEVICE, &out->buf));
    DCP_TRY(dcp_buffer_upload(out->buf, 0, host, bytes));
    out->type = type;
    out->rows = (uint32_t)rows;
    out->k = out->held_k = k;
    free(host);
    return DCP_OK;
fail:
    free(host);
    dcp_matrix_destroy(out);
    return st;
}

dcp_status dcp_matrix_window(dcp_matrix *m, uint32_t k, uint32_t col0, uint32_t cols)
{
    const uint32_t held = m->held_k;
    if (m->n_parts || !m->buf || cols == 0 || cols > k || (uint64_t)col0 + cols > held)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "matrix window: columns [%u, %u) of a %u x %u %s%s for x of %u columns do not fit", col0,
                        col0 + cols, m->rows, held, dcp_ggml_type_name(m->type),
                        m->n_parts ? " matrix of parts" : "", k);
    m->k = k;
    const int full = col0 == 0 && cols == k && k == held;
    m->col0 = full ? 0 : col0;
    m->cols = full ? 0 : cols;
    return DCP_OK;
}

void dcp_matrix_destroy(dcp_matrix *m)
{
    if (!m) return;
    for (uint32_t i = 0; i < m->n_parts; i++) dcp_matrix_destroy(&m->parts[i]);
    free(m->parts);
    dcp_buffer_destroy(m->buf);
    memset(m, 0, sizeof *m);
}

dcp_status dcp_matrix_join(uint32_t n, dcp_matrix *parts, dcp_matrix *out)
{
    dcp_status st = DCP_OK;
    memset(out, 0, sizeof *out);
    uint64_t rows = 0;
    if (n == 0 || n > 255) {
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "matrix join: %u parts (1..255)", n);
        goto fail;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (parts[i].n_parts || parts[i].k != parts[0].k) {
            st = dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                          "matrix join: part %u (%u x %u %s%s) does not fit part 0's k %u or is itself of parts", i,
                          parts[i].rows, parts[i].k, dcp_ggml_type_name(parts[i].type),
                          parts[i].n_parts ? ", of parts" : "", parts[0].k);
            goto fail;
        }
        rows += parts[i].rows;
    }
    if (rows > UINT32_MAX) {
        st = dcp_fail(DCP_ERR_INVALID_ARGUMENT, "matrix join: %llu rows", (unsigned long long)rows);
        goto fail;
    }
    if (n == 1) {
        *out = parts[0];
        memset(&parts[0], 0, sizeof parts[0]);
        return DCP_OK;
    }
    out->parts = malloc(n * sizeof *out->parts);
    if (!out->parts) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory joining %u matrices", n);
        goto fail;
    }
    memcpy(out->parts, parts, n * sizeof *out->parts);
    memset(parts, 0, n * sizeof *parts);
    out->n_parts = n;
    out->type = out->parts[0].type;
    out->rows = (uint32_t)rows;
    out->k = out->held_k = out->parts[0].k;
    return DCP_OK;
fail:
    for (uint32_t i = 0; i < n; i++) dcp_matrix_destroy(&parts[i]);
    return st;
}

uint64_t dcp_matrix_device_bytes(const dcp_matrix *m)
{
    uint64_t bytes = m->buf ? dcp_buffer_size(m->buf) : 0;
    for (uint32_t i = 0; i < m->n_parts; i++) bytes += dcp_matrix_device_bytes(&m->parts[i]);
    return bytes;
}

dcp_status dcp_ops_weight_kernel(const char *what, dcp_kernel_id op, dcp_ggml_type type, dcp_kernel_id *out)
{
    switch (type) {
#define WEIGHT_CASE_(t, ...)                                                                       \
    case DCP_GGML_TYPE_##t: *out = dcp_kernel_weighted(op, DCP_WEIGHT_##t); return DCP_OK;
        DCP_WEIGHT_TYPES(WEIGHT_CASE_, )
#undef WEIGHT_CASE_
    default: break;
    }
    const char *n = dcp_ggml_type_name(type);
    return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: weight type %s is not supported (" DCP_GGML_SUPPORTED_LIST ")", what,
                    n ? n : "unknown");
}

static uint32_t ceil_div(uint64_t a, uint64_t b) { return (uint32_t)((a + b - 1) / b); }

/* Rows per subgroup of a matmul of `tokens` tokens over `type` on a device of `info` whose lanes
 * split each row (GPUs; a CPU driver only when $DCP_VK_MATMUL_LAYOUT=split: there lanes own rows,
 * DCP_MATMUL_LANE_ROWS each, see matmul.comp): each x load
 * is shared by that many rows. GPUs take 4. A CPU device (lavapipe) runs a subgroup as the SIMD
 * lanes of one core and loads a lane at a time, so x loads cost as much as weight loads there and
 * sharing them over more rows pays, until a type's unit decode no longer fits the registers: the
 * rows are per type and batch, measured, not derived (dcp-vk-bench matmul --rows 4096 --k 4096
 * on lavapipe, 4, 8 and 16 alternated in one window, twice; docs/design.md section 10):
 *   one token: 4 for F32, Q5_0, Q5_1, Q5_K, Q3_K, IQ4_NL, IQ4_XS (1.05-1.9x their time at 8),
 *   16 for Q6_K (1.22x), 8 for the others (4 or 16: 0.4-0.95x);
 *   several tokens: 4 for Q5_0, Q5_1, Q5_K, IQ4_NL, IQ4_XS, 16 for Q6_K and Q3_K (1.18-1.2x at
 *   batch 8 and 32), 8 for the others (Q4_0 too since it sums its offset as a min: 1.25x).
 * The sums do not depend on it (same lanes, same order). */
static uint32_t matmul_subgroup_rows(const dcp_device_info *info, dcp_ggml_type type, uint32_t tokens)
{
    if (!info->type || strcmp(info->type, "cpu") != 0) return DCP_MATMUL_SUBGROUP_ROWS;
    switch (type) {
    case DCP_GGML_TYPE_Q5_0:
    case DCP_GGML_TYPE_Q5_1:
    case DCP_GGML_TYPE_Q5_K:
    case DCP_GGML_TYPE_IQ4_NL:
    case DCP_GGML_TYPE_IQ4_XS: return DCP_MATMUL_SUBGROUP_ROWS;
    case DCP_GGML_TYPE_F32: return tokens == 1 ? DCP_MATMUL_SUBGROUP_ROWS : DCP_MATMUL_SUBGROUP_ROWS_CPU;
    case DCP_GGML_TYPE_Q3_K: return tokens == 1 ? DCP_MATMUL_SUBGROUP_ROWS : DCP_MATMUL_SUBGROUP_ROWS_CPU_WIDE;
    case DCP_GGML_TYPE_Q6_K: return DCP_MATMUL_SUBGROUP_ROWS_CPU_WIDE;
    default: return DCP_MATMUL_SUBGROUP_ROWS_CPU;
    }
}

/* One dispatch of a one-part matrix w: its rows (GLU: its gate | up row pairs) go to y's columns
 * [y_offset, y_offset + outputs). */
static dcp_status matmul_part(dcp_cmd *cmd, const dcp_matrix *w, const dcp_matmul_args *a, uint32_t y_offset)
{
    const uint32_t tokens = a->tokens, glu = a->glu ? 1u : 0u, n_out = glu ? w->rows / 2 : w->rows;
    dcp_device *dev = dcp_cmd_device(cmd);
    const dcp_device_info *info = dcp_device_get_info(dev);
    uint32_t wg = dcp_vk_workgroup_size(dev);
    uint32_t rpw = wg / (info->subgroup_size ? info->subgroup_size : wg);
    if (rpw == 0) rpw = 1;
    /* r: rows a subgroup (lanes splitting rows) or a lane (lanes owning rows) sums together */
    const uint32_t lr = info->matmul_lane_rows ? 1u : 0u;
    const uint32_t r = lr ? DCP_MATMUL_LANE_ROWS : matmul_subgroup_rows(info, w->type, tokens);
    rpw *= glu ? r / 2 : r; /* output rows per workgroup; GLU: r rows make r / 2 */
    if (lr) rpw *= info->subgroup_size;
    /* Tokens per workgroup: a single token (decode) gets its own variant without the unused
     * accumulators; the sums are the same for any value (same lanes, same order). With lanes
     * owning rows the shader takes the subgroup size as a constant (its chunk of x). */
    uint32_t spec[9] = {wg, rpw, tokens == 1 ? 1u : DCP_MATMUL_TOKENS, r, w->cols ? 1u : 0u, glu, a->norm ? 1u : 0u,
                        lr, info->subgroup_size};
    /* without a norm any valid buffer fills binding 3 (never read) */
    dcp_binding b[4] = {{w->buf, 0, 0}, {a->x, 0, 0}, {a->y, 0, 0}, {a->norm ? a->norm : a->x, 0, 0}};
    dcp_matmul_params p = {n_out, w->held_k, tokens, a->x_stride, a->y_stride,
                           a->accumulate ? 1u : 0u, w->scale_offset, a->x_offset, y_offset, w->col0, w->cols,
                           a->norm ? a->norm_eps : 0.0f};
    dcp_kernel_id id;
    dcp_status st = dcp_ops_weight_kernel("matmul", DCP_KERNEL_MATMUL, w->type, &id);
    if (st != DCP_OK) return st;
    return dcp_kernel_dispatch(cmd, id, spec, b, &p, ceil_div(n_out, rpw), ceil_div(tokens, spec[2]), 1);
}

bool dcp_matmul_can_glu(const dcp_matrix *w) { return !w->n_parts && !w->cols && w->rows % 2 == 0; }

/* On a CPU driver, the most a token's fused RMSNorm may re-read (x twice and the norm weights
 * once more per subgroup, counted at the fewest rows a subgroup takes, 4, so that the answer does
 * not depend on the batch): below it the re-reads cost less than the rmsnorm dispatch they save.
 * Measured on lavapipe (Mesa 25.0.7, 2 cores; dcp-vk-bench matmul --fuse norm against none,
 * alternated, 2026-12-07): Q8_0 12288 x 4096 at one token took 10.6-11.0 ms plain and 14.8-17.2 ms
 * fused (50 MB re-read at R 8, about 11 GB/s), an rmsnorm of 4096 floats 71-77 us; 256 KiB is
 * about 25 us of those re-reads. */
#define MATMUL_NORM_CPU_BYTES (256u << 10)

bool dcp_matmul_norm_pays(const dcp_device *dev, const dcp_matrix *w)
{
    const dcp_device_info *info = dcp_device_get_info(dev);
    if (!info->type || strcmp(info->type, "cpu") != 0) return true;
    uint64_t rows = w->n_parts ? 0 : ceil_div(w->rows, DCP_MATMUL_SUBGROUP_ROWS);
    for (uint32_t i = 0; i < w->n_parts; i++) rows += ceil_div(w->parts[i].rows, DCP_MATMUL_SUBGROUP_ROWS);
    return rows * w->k * 12 <= MATMUL_NORM_CPU_BYTES;
}

/* Whether w or one of its parts has a column window. */
static bool has_window(const dcp_matrix *w)
{
    for (uint32_t i = 0; i < w->n_parts; i++)
        if (w->parts[i].cols) return true;
    return w->cols != 0;
}

dcp_status dcp_op_matmul(dcp_cmd *cmd, const dcp_matmul_args *a)
{
    const dcp_matrix *w = a->w;
    dcp_buffer *x = a->x, *y = a->y;
    const uint32_t x_offset = a->x_offset, x_stride = a->x_stride, y_stride = a->y_stride, tokens = a->tokens;
    if (x_stride % 4 || x_offset % 4 || x_stride < w->k || y_stride < (a->glu ? w->rows / 2 : w->rows))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "matmul %u x %u: x offset %u / stride %u must be multiples of 4 and >= k, y stride %u >= rows",
                        w->rows, w->k, x_offset, x_stride, y_stride);
    const uint32_t n_out = a->glu ? w->rows / 2 : w->rows;
    if (a->glu && (!dcp_matmul_can_glu(w) || a->accumulate))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "matmul %u x %u with SwiGLU: needs one part without a column window, an even row count "
                        "and no accumulate (%u parts, window %u, accumulate %d)", w->rows, w->k, w->n_parts, w->cols,
                        a->accumulate);
    if (a->norm && (has_window(w) || (uint64_t)w->k * 4 > dcp_buffer_size(a->norm)))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "matmul %u x %u with RMSNorm: needs no column window and norm weights of %u floats (%llu bytes)",
                        w->rows, w->k, w->k, (unsigned long long)dcp_buffer_size(a->norm));
    if (tokens == 0) return DCP_OK;
    uint64_t need_x = ((uint64_t)x_offset + (uint64_t)(tokens - 1) * x_stride + w->k) * 4;
    uint64_t need_y = ((uint64_t)(tokens - 1) * y_stride + n_out) * 4;
    if (need_x > dcp_buffer_size(x) || need_y > dcp_buffer_size(y))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "matmul %u x %u over %u tokens: x needs %llu bytes (has %llu), y %llu (has %llu)",
                        w->rows, w->k, tokens, (unsigned long long)need_x,
                        (unsigned long long)dcp_buffer_size(x), (unsigned long long)need_y,
                        (unsigned long long)dcp_buffer_size(y));
    if (!w->n_parts) return matmul_part(cmd, w, a, 0);
    /* A matrix of parts: one dispatch a part, each into its own rows of y (disjoint writes: no
     * barrier between them). A row's sum is that of its part's type, as if it were alone. */
    uint32_t y_offset = 0;
    for (uint32_t i = 0; i < w->n_parts; i++) {
        dcp_status st = matmul_part(cmd, &w->parts[i], a, y_offset);
        if (st != DCP_OK) return dcp_fail_context(st, "part %u of %u (%s)", i, w->n_parts,
                                                  dcp_ggml_type_name(w->parts[i].type));
        y_offset += w->parts[i].rows;
    }
    return DCP_OK;
}

dcp_status dcp_op_get_rows(dcp_cmd *cmd, const dcp_get_rows_args *a)
{
    const dcp_matrix *w = a->w;
    dcp_buffer *ids = a->ids, *y = a->y;
    const uint32_t y_stride = a->y_stride, tokens = a->tokens;
    if (w->n_parts)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "get_rows: a matrix of %u parts of different types (matmul only)",
                        w->n_parts);
    if (w->cols) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "get_rows: a matrix with a column window (matmul only)");
    if (tokens == 0) return DCP_OK;
    if (y_stride < w->k || ((uint64_t)(tokens - 1) * y_stride + w->k) * 4 > dcp_buffer_size(y) ||
        (uint64_t)tokens * 4 > dcp_buffer_size(ids))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "get_rows: %u rows of %u do not fit the buffers", tokens, w->k);
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    dcp_binding b[3] = {{w->buf, 0, 0}, {ids, 0, 0}, {y, 0, 0}};
    dcp_get_rows_params p = {w->k, tokens, w->rows, y_stride, w->scale_offset};
    dcp_kernel_id id;
    dcp_status st = dcp_ops_weight_kernel("get_rows", DCP_KERNEL_GET_ROWS, w->type, &id);
    if (st != DCP_OK) return st;
    return dcp_kernel_dispatch(cmd, id, spec, b, &p, tokens, 1, 1);
}

dcp_status dcp_op_rmsnorm(dcp_cmd *cmd, const dcp_rmsnorm_args *a)
{
    dcp_buffer *x = a->x, *w = a->w, *y = a->y;
    const uint32_t x_offset = a->x_offset, x_stride = a->x_stride, n = a->n, y_stride = a->y_stride,
                   tokens = a->tokens;
    const float eps = a->eps;
    if (tokens == 0) return DCP_OK;
    if (x_stride < n || y_stride < n ||
        ((uint64_t)x_offset + (uint64_t)(tokens - 1) * x_stride + n) * 4 > dcp_buffer_size(x) ||
        ((uint64_t)(tokens - 1) * y_stride + n) * 4 > dcp_buffer_size(y) || (uint64_t)n * 4 > dcp_buffer_size(w))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "rmsnorm: %u rows of %u do not fit the buffers", tokens, n);
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    dcp_binding b[3] = {{x, 0, 0}, {w, 0, 0}, {y, 0, 0}};
    dcp_rmsnorm_params p = {n, tokens, x_stride, y_stride, x_offset, eps};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_RMSNORM, spec, b, &p, tokens, 1, 1);
}

dcp_status dcp_op_rmsnorm_parts(dcp_cmd *cmd, const dcp_rmsnorm_parts_args *a)
{
    dcp_buffer *x = a->norm.x, *w = a->norm.w, *y = a->norm.y, *p = a->p;
    const uint32_t x_offset = a->norm.x_offset, x_stride = a->norm.x_stride, n = a->norm.n,
                   y_stride = a->norm.y_stride, tokens = a->norm.tokens;
    const float eps = a->norm.eps;
    const uint64_t p_offset = a->p_offset;
    const uint32_t parts = a->parts, part_stride = a->part_stride, part_offset = a->part_offset;
    if (tokens == 0) return DCP_OK;
    uint64_t p_need = ((uint64_t)part_offset + (uint64_t)(parts ? parts - 1 : 0) * part_stride + (uint64_t)tokens * n) * 4;
    if (parts == 0 || part_stride < (uint64_t)tokens * n || p_offset > dcp_buffer_size(p) ||
        p_need > dcp_buffer_size(p) - p_offset)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "rmsnorm_parts: %u parts of %u x %u (stride %u) do not fit", parts,
                        tokens, n, part_stride);
    if (x_stride < n || y_stride < n ||
        ((uint64_t)x_offset + (uint64_t)(tokens - 1) * x_stride + n) * 4 > dcp_buffer_size(x) ||
        ((uint64_t)(tokens - 1) * y_stride + n) * 4 > dcp_buffer_size(y) || (uint64_t)n * 4 > dcp_buffer_size(w))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "rmsnorm_parts: %u rows of %u do not fit the buffers", tokens, n);
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    dcp_binding b[4] = {{x, 0, 0}, {w, 0, 0}, {y, 0, 0}, {p, p_offset, p_need}};
    dcp_rmsnorm_parts_params pp = {{n, tokens, x_stride, y_stride, x_offset, eps}, parts, part_stride, part_offset};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_RMSNORM_PARTS, spec, b, &pp, tokens, 1, 1);
}

/* A q8_0 pool: RoPE into the f32 stage seen as a pool of one-token pages (token t in page t of
 * K[kv_heads][1][D] | V[kv_heads][1][D]), then kv_append quantizes from the stage into the pool's
 * slots. p and b hold rope_store's parameters and first four bindings. */
static dcp_status rope_store_q8(dcp_cmd *cmd, const dcp_rope_store_args *a, dcp_rope_store_params *p, dcp_binding *b)
{
    const uint64_t row = (uint64_t)a->kv_heads * a->head_dim, stage = (uint64_t)a->tokens * 2 * row * 4;
    if (!a->kv_stage || !a->stage_slots || dcp_buffer_size(a->kv_stage) < stage ||
        dcp_buffer_size(a->stage_slots) < (uint64_t)a->tokens * 4)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                        "rope_store: a q8_0 pool needs kv_stage (%llu bytes for %u tokens) and stage_slots",
                        (unsigned long long)stage, a->tokens);
    p->page_size = 1;
    p->pages_per_segment = a->tokens;
    p->total_pages = a->tokens;
    b[1] = (dcp_binding){a->stage_slots, 0, 0};
    for (uint32_t s = 0; s < DCP_KV_MAX_SEGMENTS; s++) b[4 + s] = (dcp_binding){a->kv_stage, 0, stage};
    const uint32_t heads = a->q_heads + 2 * a->kv_heads, wg = dcp_vk_workgroup_size(dcp_cmd_device(cmd));
    uint32_t spec[1] = {wg};
    dcp_status st = dcp_kernel_dispatch(cmd, DCP_KERNEL_ROPE_STORE_F32, spec, b, p,
                                        ceil_div((uint64_t)heads * a->head_dim / 2, wg), a->tokens, 1);
    if (st != DCP_OK) return st;
    dcp_cmd_barrier(cmd); /* stage -> kv_append */
    return dcp_kv_pool_record_store(cmd, a->pool, a->slot, a->tokens, a->kv_stage, 0, a->kv_stage, row * 4,
                                    (uint32_t)(2 * row));
}

dcp_status dcp_op_rmsnorm_heads(dcp_cmd *cmd, const dcp_rmsnorm_heads_args *a)
{
    dcp_buffer *x = a->x, *w = a->w;
    const uint32_t x_offset = a->x_offset, x_stride = a->x_stride, heads = a->heads, head_dim = a->head_dim,
                   w_split = a->w_split, tokens = a->tokens;
    const float eps = a->eps;
    if (tokens == 0 || heads == 0) return DCP_OK;
    if (head_dim == 0 || x_stride < (uint64_t)heads * head_dim ||
        ((uint64_t)x_offset + (uint64_t)(tokens - 1) * x_stride + (uint64_t)heads * head_dim) * 4 > dcp_buffer_size(x) ||
        2ull * head_dim * 4 > dcp_buffer_size(w))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "rmsnorm_heads: %u rows of %u heads of %u do not fit the buffers "
                        "(x stride %u, offset %u; w needs [2][%u])", tokens, heads, head_dim, x_stride, x_offset,
                        head_dim);
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    dcp_binding b[2] = {{x, 0, 0}, {w, 0, 0}};
    dcp_rmsnorm_heads_params p = {head_dim, heads, w_split, tokens, x_stride, x_offset, eps};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_RMSNORM_HEADS, spec, b, &p, heads, tokens, 1);
}

dcp_status dcp_op_add_rows(dcp_cmd *cmd, const dcp_add_rows_args *a)
{
    dcp_buffer *y = a->y, *b_ = a->b;
    const uint32_t y_stride = a->y_stride, n = a->n, tokens = a->tokens;
    if (tokens == 0 || n == 0) return DCP_OK;
    if (y_stride < n || ((uint64_t)(tokens - 1) * y_stride + n) * 4 > dcp_buffer_size(y) ||
        (uint64_t)n * 4 > dcp_buffer_size(b_))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "add_rows: %u rows of %u (stride %u) do not fit the buffers", tokens,
                        n, y_stride);
    uint32_t wg = dcp_vk_workgroup_size(dcp_cmd_device(cmd));
    uint32_t spec[1] = {wg};
    dcp_binding b[2] = {{y, 0, 0}, {b_, 0, 0}};
    dcp_add_rows_params p = {n, tokens, y_stride};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_ADD_ROWS, spec, b, &p, ceil_div(n, wg), tokens, 1);
}

dcp_status dcp_op_rope_store(dcp_cmd *cmd, const dcp_rope_store_args *a)
{
    if (a->head_dim == 0 || a->head_dim % 2 || a->n_rot % 2 || a->n_rot > a->head_dim)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "rope_store: head dim %u and rotated dims %u must be even, "
                        "n_rot <= head dim", a->head_dim, a->n_rot);
    uint32_t heads = a->q_heads + 2 * a->kv_heads;
    if (a->src_stride % 2 || a->src_stride < heads * a->head_dim)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "rope_store: source stride %u (need even, >= %u)",
                        a->src_stride, heads * a->head_dim);
    if (a->tokens == 0) return DCP_OK;
    dcp_device *dev = dcp_cmd_device(cmd);
    dcp_rope_store_params p = {a->tokens, a->q_heads, a->kv_heads, a->head_dim, a->n_rot, a->src_stride,
                               1, 1, 0, a->neox ? 1u : 0u};
    dcp_binding b[4 + DCP_KV_MAX_SEGMENTS];
    b[0] = (dcp_binding){a->src, 0, 0};
    b[1] = (dcp_binding){a->slot, 0, 0};
    b[2] = (dcp_binding){a->cs, 0, 0};
    b[3] = (dcp_binding){a->q_out, 0, 0};
    dcp_kernel_id id = DCP_KERNEL_ROPE_STORE_F32;
    if (a->pool) {
        const dcp_kv_pool_config *pc = dcp_kv_pool_get_config(a->pool);
        if (pc->k_only)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "rope_store: the pool is K-only (MLA latent cache)");
        if (pc->kv_heads != a->kv_heads || pc->head_dim != a->head_dim)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "rope_store: pool has %u KV heads of dim %u, the model step %u of dim %u",
                            pc->kv_heads, pc->head_dim, a->kv_heads, a->head_dim);
        if (pc->dtype == DCP_DTYPE_Q8_0) return rope_store_q8(cmd, a, &p, b);
        p.page_size = pc->page_size;
        p.pages_per_segment = dcp_kv_pool_pages_per_segment(a->pool);
        p.total_pages = pc->num_pages;
        if (pc->dtype == DCP_DTYPE_F16) id = DCP_KERNEL_ROPE_STORE_F16;
        dcp_kv_pool_bindings(a->pool, b + 4);
    } else { /* nothing is stored: any valid buffer fills the array */
        for (uint32_t s = 0; s < DCP_KV_MAX_SEGMENTS; s++) b[4 + s] = b[3];
    }
    uint32_t wg = dcp_vk_workgroup_size(dev);
    uint32_t spec[1] = {wg};
    return dcp_kernel_dispatch(cmd, id, spec, b, &p, ceil_div((uint64_t)heads * a->head_dim / 2, wg), a->tokens, 1);
}

dcp_status dcp_op_swiglu(dcp_cmd *cmd, const dcp_swiglu_args *a)
{
    dcp_buffer *x = a->x, *y = a->y;
    const uint32_t x_stride = a->x_stride, y_stride = a->y_stride, n = a->n, tokens = a->tokens;
    if (tokens == 0) return DCP_OK;
    if (x_stride < 2 * n || y_stride < n || ((uint64_t)(tokens - 1) * x_stride + 2 * n) * 4 > dcp_buffer_size(x) ||
        ((uint64_t)(tokens - 1) * y_stride + n) * 4 > dcp_buffer_size(y))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "swiglu: %u rows of %u do not fit the buffers", tokens, n);
    uint32_t wg = dcp_vk_workgroup_size(dcp_cmd_device(cmd));
    uint32_t spec[1] = {wg};
    dcp_binding b[2] = {{x, 0, 0}, {y, 0, 0}};
    dcp_swiglu_params p = {n, tokens, x_stride, y_stride};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_SWIGLU, spec, b, &p, ceil_div(n, wg), tokens, 1);
}

dcp_status dcp_op_add(dcp_cmd *cmd, dcp_buffer *a, dcp_buffer *b_, dcp_buffer *y, uint32_t n)
{
    if (n == 0) return DCP_OK;
    if ((uint64_t)n * 4 > dcp_buffer_size(a) || (uint64_t)n * 4 > dcp_buffer_size(b_) ||
        (uint64_t)n * 4 > dcp_buffer_size(y))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "add: %u floats do not fit the buffers", n);
    uint32_t wg = dcp_vk_workgroup_size(dcp_cmd_device(cmd));
    uint32_t spec[1] = {wg};
    dcp_binding b[3] = {{a, 0, 0}, {b_, 0, 0}, {y, 0, 0}};
    dcp_add_params p = {n};
    uint32_t groups = ceil_div(n, wg), gx = groups < 65535 ? groups : 65535;
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_ADD, spec, b, &p, gx, ceil_div(groups, gx), 1);
}

dcp_status dcp_op_argmax(dcp_cmd *cmd, const dcp_argmax_args *a)
{
    dcp_buffer *x = a->x, *out = a->out;
    const uint32_t n = a->n, stride = a->stride, rows = a->rows;
    if (rows == 0) return DCP_OK;
    if (n == 0 || stride < n || ((uint64_t)(rows - 1) * stride + n) * 4 > dcp_buffer_size(x) ||
        (uint64_t)rows * 4 > dcp_buffer_size(out))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "argmax: %u rows of %u do not fit the buffers", rows, n);
    uint32_t spec[1] = {dcp_vk_workgroup_size(dcp_cmd_device(cmd))};
    dcp_binding b[2] = {{x, 0, 0}, {out, 0, 0}};
    dcp_argmax_params p = {n, rows, stride};
    return dcp_kernel_dispatch(cmd, DCP_KERNEL_ARGMAX, spec, b, &p, rows, 1, 1);
}
