/* Loading of GGUF tensors into device weights, shared by the architectures: tensors found and
 * checked by name and shape, matrices uploaded from row and column slices (tensor-parallel
 * shards), norms as f32 vectors, with a progress count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/load.h"
#include "ops/ops_internal.h"

dcp_status dcp_load_find(const dcp_gguf *g, const char *name, uint64_t ne0, uint64_t ne1, const dcp_gguf_tensor **out)
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
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tensor %s has type %s; supported: " DCP_GGML_SUPPORTED_LIST,
                        dcp_gguf_name(g), name, tn ? tn : "unknown");
    }
    *out = t;
    return DCP_OK;
}

dcp_slice_layout dcp_load_slice_layout(dcp_ggml_type type, uint32_t c0, uint32_t nc, uint32_t k_pad)
{
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    if (c0 % be == 0 && nc % be == 0 && k_pad % be == 0) return (dcp_slice_layout){k_pad, 0, 0};
    const uint32_t b0 = c0 / be, b1 = (c0 + nc + be - 1) / be;
    return (dcp_slice_layout){(b1 - b0) * be, c0 - b0 * be, nc};
}

uint64_t dcp_load_cols_bytes(dcp_ggml_type type, uint64_t c0, uint64_t nc)
{
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    if (!be || !nc) return 0;
    return ((c0 + nc + be - 1) / be - c0 / be) * bb;
}

dcp_status dcp_load_row_f32(const dcp_gguf_tensor *t, uint64_t r, uint64_t c0, uint64_t nc, float *dst, float *scratch)
{
    uint32_t be, bb;
    dcp_ggml_type_block(t->type, &be, &bb);
    const uint64_t b0 = c0 / be, b1 = (c0 + nc + be - 1) / be;
    const uint8_t *row = (const uint8_t *)t->data + r * (t->ne[0] / be * bb);
    dcp_status st = dcp_ggml_to_f32(t->type, row + b0 * bb, scratch, (b1 - b0) * be);
    if (st) return st;
    memcpy(dst, scratch + (c0 - b0 * be), nc * sizeof *dst);
    return DCP_OK;
}

/* GGUF-layout bytes of a slice in its tensor's type, rows of lay->held columns: the whole blocks
 * covering its columns (zero-padded to the held width). *out is malloc'd. Only those bytes of the
 * file are read; *read adds them. */
static dcp_status slice_bytes(const dcp_gguf_tensor *t, const dcp_slice *s, const dcp_slice_layout *lay, uint8_t **out,
                              uint64_t *read)
{
    uint32_t be, bb;
    dcp_ggml_type_block(t->type, &be, &bb);
    const uint64_t dst_row = (uint64_t)lay->held / be * bb, src_row = t->ne[0] / be * bb;
    const uint64_t cover = dcp_load_cols_bytes(t->type, s->c0, s->nc); /* <= dst_row */
    uint8_t *dst = calloc((size_t)s->nr, dst_row);
    if (!dst) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory slicing %s", s->name);
    const uint8_t *src = (const uint8_t *)t->data + (uint64_t)s->c0 / be * bb;
    for (uint32_t r = 0; r < s->nr; r++) memcpy(dst + r * dst_row, src + (uint64_t)(s->r0 + r) * src_row, cover);
    *read += (uint64_t)s->nr * cover;
    *out = dst;
    return DCP_OK;
}

/* Adds bytes to the count of the local rank on dev. */
static void count_bytes(dcp_load_ctx *lc, const dcp_device *dev, uint64_t bytes)
{
    for (uint32_t i = 0; i < lc->nl; i++)
        if (lc->devs[i] == dev) {
            lc->rank_bytes[i] += bytes;
            if (bytes > lc->rank_largest[i]) lc->rank_largest[i] = bytes;
        }
}

dcp_status dcp_load_slices(dcp_load_ctx *lc, dcp_device *dev, uint32_t n, const dcp_slice *sl, const uint64_t *k_total,
                           const uint64_t *rows_total, uint32_t k_pad, dcp_matrix *out)
{
    dcp_status st = DCP_OK;
    const dcp_gguf_tensor *t[DCP_LOAD_MAX_PARTS];
    uint8_t *bytes[DCP_LOAD_MAX_PARTS] = {NULL};
    dcp_matrix runs[DCP_LOAD_MAX_PARTS];
    memset(runs, 0, sizeof runs);
    memset(out, 0, sizeof *out);
    if (n == 0 || n > DCP_LOAD_MAX_PARTS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "load: %u parts of one matrix (1..%d)", n, DCP_LOAD_MAX_PARTS);
    /* Each part in its tensor's type (its covering blocks and a column window where its columns
     * cut the type's blocks: dcp_load_slice_layout); runs of parts of one type and layout (all of
     * them, as a rule) make one matrix, and a matrix of several runs (a Q4_K_M Q|K|V: Q4_K q, k,
     * then a Q6_K v) is a matrix of parts (dcp_matrix_join). */
    dcp_slice_layout lay[DCP_LOAD_MAX_PARTS];
    uint32_t run_first[DCP_LOAD_MAX_PARTS + 1], n_runs = 0;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(dcp_load_find(lc->g, sl[i].name, k_total[i], rows_total[i], &t[i]));
        lay[i] = dcp_load_slice_layout(t[i]->type, sl[i].c0, sl[i].nc, k_pad);
        if (i == 0 || t[i]->type != t[i - 1]->type || memcmp(&lay[i], &lay[i - 1], sizeof lay[i]))
            run_first[n_runs++] = i;
    }
    run_first[n_runs] = n;
    for (uint32_t r = 0; r < n_runs && lc->count_only; r++) {
        uint64_t rows = 0;
        for (uint32_t i = run_first[r]; i < run_first[r + 1]; i++) rows += sl[i].nr;
        const dcp_ggml_type ty = t[run_first[r]]->type;
        const uint32_t held = lay[run_first[r]].held;
        const uint64_t b = dcp_matrix_bytes(ty, held, rows);
        /* what dcp_matrix_create would allocate, and the limit it would apply */
        const dcp_device_info *info = dcp_device_get_info(dev);
        if (b > info->max_storage_buffer_range)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s: matrix of %llu x %u %s is %llu bytes, more than device %d's "
                            "storage-buffer range of %llu bytes (use more tensor-parallel ranks)",
                            dcp_gguf_name(lc->g), sl[run_first[r]].name, (unsigned long long)rows, held,
                            dcp_ggml_type_name(ty), (unsigned long long)b, info->logical_index,
                            (unsigned long long)info->max_storage_buffer_range);
        count_bytes(lc, dev, b);
    }
    if (lc->count_only) {
        for (uint32_t i = 0; i < n; i++) lc->done += (uint64_t)sl[i].nr * dcp_load_cols_bytes(t[i]->type, sl[i].c0, sl[i].nc);
        return DCP_OK;
    }
    uint64_t done = 0;
    for (uint32_t r = 0; r < n_runs; r++) {
        const void *data[DCP_LOAD_MAX_PARTS];
        uint32_t rows[DCP_LOAD_MAX_PARTS], np = 0;
        const dcp_slice_layout *l = &lay[run_first[r]];
        const dcp_ggml_type ty = t[run_first[r]]->type;
        for (uint32_t i = run_first[r]; i < run_first[r + 1]; i++, np++) {
            DCP_TRY(slice_bytes(t[i], &sl[i], l, &bytes[i], &done));
            data[np] = bytes[i];
            rows[np] = sl[i].nr;
        }
        st = dcp_matrix_create(dev, ty, l->held, np, data, rows, &runs[r]);
        if (st == DCP_OK && l->cols) st = dcp_matrix_window(&runs[r], k_pad, l->col0, l->cols);
        if (st) {
            dcp_fail_context(st, "%s: tensor %s", dcp_gguf_name(lc->g), sl[run_first[r]].name);
            goto fail;
        }
        count_bytes(lc, dev, dcp_matrix_bytes(ty, l->held, runs[r].rows));
        for (uint32_t i = run_first[r]; i < run_first[r + 1]; i++) {
            free(bytes[i]);
            bytes[i] = NULL;
        }
    }
    st = dcp_matrix_join(n_runs, runs, out); /* moves the runs (destroys them on failure) */
    if (st) {
        dcp_fail_context(st, "%s: tensor %s", dcp_gguf_name(lc->g), sl[0].name);
        goto fail;
    }
    lc->done += done;
    if (lc->progress) lc->progress(lc->user, lc->done < lc->total ? lc->done : lc->total, lc->total);
fail:
    for (uint32_t r = 0; r < n_runs; r++) dcp_matrix_destroy(&runs[r]);
    for (uint32_t i = 0; i < n; i++) free(bytes[i]);
    return st;
}

dcp_status dcp_load_norm(dcp_load_ctx *lc, dcp_device *dev, const char *name, uint32_t n, dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    const dcp_gguf_tensor *t;
    float *v = NULL;
    DCP_TRY(dcp_load_find(lc->g, name, n, 1, &t));
    count_bytes(lc, dev, (uint64_t)n * 4);
    lc->done += t->size;
    if (lc->count_only) return DCP_OK;
    v = malloc((size_t)n * sizeof *v);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    DCP_TRY(dcp_gguf_tensor_to_f32(lc->g, t, v));
    DCP_TRY(dcp_buffer_create(dev, (uint64_t)n * 4, DCP_MEMORY_DEVICE, out));
    DCP_TRY(dcp_buffer_upload(*out, 0, v, (uint64_t)n * 4));
fail:
    free(v);
    return st;
}

dcp_status dcp_load_vector_slices(dcp_load_ctx *lc, dcp_device *dev, uint32_t n, const dcp_vslice *sl,
                                  dcp_buffer **out)
{
    dcp_status st = DCP_OK;
    float *v = NULL, *part = NULL;
    *out = NULL;
    if (n == 0 || n > DCP_LOAD_MAX_PARTS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "load: %u parts of one vector (1..%d)", n, DCP_LOAD_MAX_PARTS);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) {
        if ((uint64_t)sl[i].e0 + sl[i].n > sl[i].total)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "load: elements [%u, %u) of %s (%llu elements)", sl[i].e0,
                            sl[i].e0 + sl[i].n, sl[i].name, (unsigned long long)sl[i].total);
        total += sl[i].n;
    }
    const uint64_t bytes_on_device = (total ? total : 1) * 4;
    if (lc->count_only) {
        for (uint32_t i = 0; i < n; i++) {
            const dcp_gguf_tensor *t;
            DCP_TRY(dcp_load_find(lc->g, sl[i].name, sl[i].total, 1, &t));
            lc->done += t->size;
        }
        count_bytes(lc, dev, bytes_on_device);
        return DCP_OK;
    }
    v = malloc((total ? total : 1) * sizeof *v);
    if (!v) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
    uint64_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const dcp_gguf_tensor *t;
        DCP_TRY(dcp_load_find(lc->g, sl[i].name, sl[i].total, 1, &t));
        part = malloc(sl[i].total * sizeof *part);
        if (!part) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory");
            goto fail;
        }
        DCP_TRY(dcp_gguf_tensor_to_f32(lc->g, t, part));
        lc->done += t->size;
        memcpy(v + at, part + sl[i].e0, (size_t)sl[i].n * sizeof *v);
        at += sl[i].n;
        free(part);
        part = NULL;
    }
    DCP_TRY(dcp_buffer_create(dev, bytes_on_device, DCP_MEMORY_DEVICE, out));
    DCP_TRY(dcp_buffer_upload(*out, 0, v, total * 4));
    count_bytes(lc, dev, bytes_on_device);
fail:
    free(part);
    free(v);
    return st;
}
