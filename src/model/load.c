/* Loading of GGUF tensors into device weights, shared by the architectures: tensors found and
 * checked by name and shape, matrices uploaded from row and column slices (tensor-parallel
 * shards), norms as f32 vectors, with a progress count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "model/load.h"

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

dcp_status dcp_load_slices(dcp_load_ctx *lc, dcp_device *dev, uint32_t n, const dcp_slice *sl, const uint64_t *k_total,
                           const uint64_t *rows_total, uint32_t k_pad, dcp_matrix *out)
{
    dcp_status st = DCP_OK;
    const dcp_gguf_tensor *t[DCP_LOAD_MAX_PARTS];
    uint8_t *bytes[DCP_LOAD_MAX_PARTS] = {NULL};
    if (n == 0 || n > DCP_LOAD_MAX_PARTS)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "load: %u parts of one matrix (1..%d)", n, DCP_LOAD_MAX_PARTS);
    bool native = true;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(dcp_load_find(lc->g, sl[i].name, k_total[i], rows_total[i], &t[i]));
        if (t[i]->type != t[0]->type || !slice_native(t[i], &sl[i], k_pad)) native = false;
    }
    dcp_ggml_type type = native ? t[0]->type : DCP_GGML_TYPE_F32;
    uint64_t all_rows = 0;
    for (uint32_t i = 0; i < n; i++) all_rows += sl[i].nr;
    const uint64_t bytes_on_device = dcp_matrix_bytes(type, k_pad, all_rows);
    if (!native && lc->fallback && !lc->count_only && t[0]->type != DCP_GGML_TYPE_F32) {
        /* Said once per matrix and rank: which tensor, why, and what it costs. */
        dcp_model_fallback *fb = lc->fallback;
        uint32_t be = 1, bb = 4;
        dcp_ggml_type_block(t[0]->type, &be, &bb);
        if (fb->count == 0) {
            uint32_t odd = 0;
            for (uint32_t i = 1; i < n; i++)
                if (t[i]->type != t[0]->type) odd = i;
            if (odd)
                snprintf(fb->first, sizeof fb->first, "%s (%s) fused with %s (%s)", sl[0].name,
                         dcp_ggml_type_name(t[0]->type), sl[odd].name, dcp_ggml_type_name(t[odd]->type));
            else
                snprintf(fb->first, sizeof fb->first, "%s (%s): columns [%u, %u) cut its %u-weight blocks", sl[0].name,
                         dcp_ggml_type_name(t[0]->type), sl[0].c0, sl[0].c0 + sl[0].nc, be);
        }
        fb->count++;
        fb->f32_bytes += bytes_on_device;
        fb->native_bytes += (uint64_t)k_pad * all_rows / be * bb;
    }
    if (lc->count_only) { /* what dcp_matrix_create would allocate, and the limit it would apply */
        memset(out, 0, sizeof *out);
        for (uint32_t i = 0; i < n; i++) lc->done += (uint64_t)sl[i].nr * dcp_load_cols_bytes(t[i]->type, sl[i].c0, sl[i].nc);
        const dcp_device_info *info = dcp_device_get_info(dev);
        if (bytes_on_device > info->max_storage_buffer_range)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT,
                            "%s: tensor %s: matrix of %llu x %u %s is %llu bytes, more than device %d's "
                            "storage-buffer range of %llu bytes (use more tensor-parallel ranks)",
                            dcp_gguf_name(lc->g), sl[0].name, (unsigned long long)all_rows, k_pad,
                            dcp_ggml_type_name(type), (unsigned long long)bytes_on_device, info->logical_index,
                            (unsigned long long)info->max_storage_buffer_range);
        count_bytes(lc, dev, bytes_on_device);
        return DCP_OK;
    }
    const void *data[DCP_LOAD_MAX_PARTS];
    uint32_t rows[DCP_LOAD_MAX_PARTS];
    uint64_t done = 0;
    for (uint32_t i = 0; i < n; i++) {
        DCP_TRY(slice_bytes(t[i], &sl[i], k_pad, type, &bytes[i], &done));
        data[i] = bytes[i];
        rows[i] = sl[i].nr;
    }
    st = dcp_matrix_create(dev, type, k_pad, n, data, rows, out);
    if (st) {
        dcp_fail_context(st, "%s: tensor %s", dcp_gguf_name(lc->g), sl[0].name);
        goto fail;
    }
    count_bytes(lc, dev, bytes_on_device);
    lc->done += done;
    if (lc->progress) lc->progress(lc->user, lc->done < lc->total ? lc->done : lc->total, lc->total);
fail:
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
