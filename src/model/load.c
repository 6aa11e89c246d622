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

/* Whether the slice can stay in the tensor's type (block-aligned columns, padded width too). */
static bool slice_native(const dcp_gguf_tensor *t, const dcp_slice *s, uint32_t k_pad)
{
    uint32_t be, bb;
    dcp_ggml_type_block(t->type, &be, &bb);
    return s->c0 % be == 0 && s->nc % be == 0 && k_pad % be == 0;
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

/* GGUF-layout bytes of a slice, zero-padded to k_pad columns, in `type` (the tensor's own type,
 * or F32). *out is malloc'd. Only the slice's bytes of the file are read (for F32 from another
 * type: the blocks covering its columns); *read adds them. */
static dcp_status slice_bytes(const dcp_gguf_tensor *t, const dcp_slice *s, uint32_t k_pad, dcp_ggml_type type,
                              uint8_t **out, uint64_t *read)
{
    dcp_status st = DCP_OK;
    uint32_t be, bb;
    dcp_ggml_type_block(type, &be, &bb);
    uint64_t dst_row = (uint64_t)k_pad / be * bb;
    uint8_t *dst = calloc((size_t)s->nr, dst_row);
    float *scratch = NULL;
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
        scratch = malloc(((uint64_t)s->nc + 2ull * tbe) * sizeof *scratch);
        if (!scratch) {
            st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of host memory slicing %s", s->name);
            goto fail;
        }
        for (uint32_t r = 0; r < s->nr; r++)
            DCP_TRY(dcp_load_row_f32(t, s->r0 + r, s->c0, s->nc, (float *)(dst + r * dst_row), scratch));
    }
    *read += (uint64_t)s->nr * dcp_load_cols_bytes(t->type, s->c0, s->nc);
    free(scratch);
    *out = dst;
    return DCP_OK;
fail:
    free(scratch);
    free(dst);
    return st;
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

/* Notes matrix part sl[i] of tensor t, held as F32 because its columns cut the type's blocks:
 * once per matrix and rank (the caller counts), with what it costs. */
static void note_fallback(dcp_load_ctx *lc, const dcp_gguf_tensor *t, const dcp_slice *s, uint32_t k_pad,
                          uint64_t *native_bytes)
{
    uint32_t be = 1, bb = 4;
    dcp_ggml_type_block(t->type, &be, &bb);
    if (lc->fallback->count == 0)
        snprintf(lc->fallback->first, sizeof lc->fallback->first, "%s (%s): columns [%u, %u) cut its %u-weight blocks",
                 s->name, dcp_ggml_type_name(t->type), s->c0, s->c0 + s->nc, be);
    *native_bytes += (uint64_t)k_pad * s->nr / be * bb;
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
    /* Each part in its tensor's type where its columns fall on the type's blocks, else F32; runs
     * of parts of one type (all of them, as a rule) make one matrix, and a matrix of several runs
     * (a Q4_K_M Q|K|V: Q4_K q, k, then a Q6_K v) is a matrix of parts (dcp_matrix_join). */
    dcp_ggml_type type[DCP_LOAD_MAX_PARTS];
    uint32_t run_first[DCP_LOAD_MAX_PARTS + 1], n_runs = 0;
    bool expanded = false;
    uint64_t native_bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(dcp_load_find(lc->g, sl[i].name, k_total[i], rows_total[i], &t[i]));
        const bool native = slice_native(t[i], &sl[i], k_pad);
        type[i] = native ? t[i]->type : DCP_GGML_TYPE_F32;
        if (!native && t[i]->type != DCP_GGML_TYPE_F32 && lc->fallback && !lc->count_only) {
            note_fallback(lc, t[i], &sl[i], k_pad, &native_bytes);
            expanded = true;
        }
        if (i == 0 || type[i] != type[i - 1]) run_first[n_runs++] = i;
    }
    run_first[n_runs] = n;
    uint64_t f32_bytes = 0;
    for (uint32_t r = 0; r < n_runs; r++) {
        uint64_t rows = 0;
        for (uint32_t i = run_first[r]; i < run_first[r + 1]; i++) rows += sl[i].nr;
        const dcp_ggml_type ty = type[run_first[r]];
        const uint64_t b = dcp_matrix_bytes(ty, k_pad, rows);
        if (ty == DCP_GGML_TYPE_F32) f32_bytes += b;
        if (lc->count_only) { /* what dcp_matrix_create would allocate, and the limit it would apply */
            const dcp_device_info *info = dcp_device_get_info(dev);
            if (b > info->max_storage_buffer_range)
                return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                                "%s: tensor %s: matrix of %llu x %u %s is %llu bytes, more than device %d's "
                                "storage-buffer range of %llu bytes (use more tensor-parallel ranks)",
                                dcp_gguf_name(lc->g), sl[run_first[r]].name, (unsigned long long)rows, k_pad,
                                dcp_ggml_type_name(ty), (unsigned long long)b, info->logical_index,
                                (unsigned long long)info->max_storage_buffer_range);
            count_bytes(lc, dev, b);
        }
    }
    if (expanded) { /* said once per matrix and rank (the first one named): what it costs */
        lc->fallback->count++;
        lc->fallback->f32_bytes += f32_bytes;
        lc->fallback->native_bytes += native_bytes;
    }
    if (lc->count_only) {
        for (uint32_t i = 0; i < n; i++) lc->done += (uint64_t)sl[i].nr * dcp_load_cols_bytes(t[i]->type, sl[i].c0, sl[i].nc);
        return DCP_OK;
    }
    uint64_t done = 0;
    for (uint32_t r = 0; r < n_runs; r++) {
        const void *data[DCP_LOAD_MAX_PARTS];
        uint32_t rows[DCP_LOAD_MAX_PARTS], np = 0;
        for (uint32_t i = run_first[r]; i < run_first[r + 1]; i++, np++) {
            DCP_TRY(slice_bytes(t[i], &sl[i], k_pad, type[i], &bytes[i], &done));
            data[np] = bytes[i];
            rows[np] = sl[i].nr;
        }
        st = dcp_matrix_create(dev, type[run_first[r]], k_pad, np, data, rows, &runs[r]);
        if (st) {
            dcp_fail_context(st, "%s: tensor %s", dcp_gguf_name(lc->g), sl[run_first[r]].name);
            goto fail;
        }
        count_bytes(lc, dev, dcp_matrix_bytes(type[run_first[r]], k_pad, runs[r].rows));
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
