/* Loading of GGUF tensors into device weights (src/model/load.c), shared by the architectures. */
#ifndef DCP_MODEL_LOAD_H
#define DCP_MODEL_LOAD_H

#include <stdbool.h>
#include <stdint.h>

#include "dcpvk/gguf.h"
#include "dcpvk/model.h"
#include "dcpvk/ops.h"

enum { DCP_LOAD_MAX_PARTS = 4 };

/* The file being loaded and the progress count (bytes of the file read for the ranks' slices so
 * far / in all), and the device bytes of each local rank's weights (counted from the same sizes
 * the uploads use). */
typedef struct dcp_load_ctx {
    const dcp_gguf *g;
    dcp_progress_fn progress; /* may be NULL */
    void *user;
    uint64_t done, total;     /* bytes of the file read (also counted with count_only) / to read */
    dcp_device *const *devs;  /* [nl] the local ranks' devices */
    uint32_t nl;
    uint64_t *rank_bytes;     /* [nl] device bytes of each rank's weights so far */
    uint64_t *rank_largest;   /* [nl] the largest of them (one upload: the staging buffer's size) */
    bool count_only;          /* count rank_bytes, upload nothing (the matrices stay empty) */
} dcp_load_ctx;

/* Bytes of a row of `type` that hold columns [c0, c0 + nc): the whole blocks covering them. */
uint64_t dcp_load_cols_bytes(dcp_ggml_type type, uint64_t c0, uint64_t nc);
/* How columns [c0, c0 + nc) of a `type` tensor, zero-padded to k_pad, are held in that type: rows
 * of `held` columns. Block-aligned columns (padded width too): the slice's own blocks, held =
 * k_pad, no window (cols 0). Columns that cut the type's blocks (a row-parallel slice at a TP whose
 * column ranges do not fall on blocks): the whole blocks covering them, [floor(c0 / B),
 * ceil((c0 + nc) / B)), and a window of cols = nc columns from col0 = c0 - floor(c0 / B) B
 * (dcp_matrix_window: the matmul skips the other columns). Thread-safe. */
typedef struct dcp_slice_layout {
    uint32_t held, col0, cols; /* cols 0: no window */
} dcp_slice_layout;
dcp_slice_layout dcp_load_slice_layout(dcp_ggml_type type, uint32_t c0, uint32_t nc, uint32_t k_pad);
/* Columns [c0, c0 + nc) of row r of t (rows of ne0 elements; any readable type) as f32 into dst
 * [nc], reading only the blocks that hold them (the file's other bytes are not touched, so a
 * mapped file pages in the rank's slice only). scratch: nc + 2 block elements of f32. */
dcp_status dcp_load_row_f32(const dcp_gguf_tensor *t, uint64_t r, uint64_t c0, uint64_t nc, float *dst, float *scratch);

/* One part of a matrix: rows [r0, r0 + nr) and input columns [c0, c0 + nc) of tensor `name`. */
typedef struct dcp_slice {
    const char *name;
    uint32_t r0, nr, c0, nc;
} dcp_slice;

/* The tensor `name` of g with shape [ne0, ne1] (ne0 contiguous) and a supported type;
 * DCP_ERR_FORMAT (missing, shape) or DCP_ERR_UNSUPPORTED (type) naming the tensor and file. */
dcp_status dcp_load_find(const dcp_gguf *g, const char *name, uint64_t ne0, uint64_t ne1, const dcp_gguf_tensor **out);
/* Uploads the row concatenation of n (1 .. DCP_LOAD_MAX_PARTS) slices (part i of a tensor with
 * ne0 = k_total[i], ne1 = rows_total[i]) to dev as one matrix of k_pad input columns (zero
 * padding). Every part keeps its tensor's type: a slice whose columns cut the type's blocks is
 * held as the whole blocks covering them with a column window (dcp_matrix_window), its device
 * bytes counted as those blocks. Parts of one type make one matrix (one dispatch); parts of
 * different types (Q4_K_M's Q6_K attn_v beside Q4_K attn_q, attn_k) a matrix of parts, each run
 * of one type in its own (include/dcpvk/ops.h), never expanded. */
dcp_status dcp_load_slices(dcp_load_ctx *lc, dcp_device *dev, uint32_t n, const dcp_slice *sl, const uint64_t *k_total,
                           const uint64_t *rows_total, uint32_t k_pad, dcp_matrix *out);
/* One part of a vector: elements [e0, e0 + n) of the 1-D tensor `name` of `total` elements. */
typedef struct dcp_vslice {
    const char *name;
    uint32_t e0, n;
    uint64_t total;
} dcp_vslice;

/* Uploads the concatenation of n (1 .. DCP_LOAD_MAX_PARTS) vector slices as one f32 buffer (a
 * rank's part of Q|K|V biases, the Q and K norms side by side). */
dcp_status dcp_load_vector_slices(dcp_load_ctx *lc, dcp_device *dev, uint32_t n, const dcp_vslice *sl,
                                  dcp_buffer **out);
/* Uploads the vector tensor `name` [n] as f32. */
dcp_status dcp_load_norm(dcp_load_ctx *lc, dcp_device *dev, const char *name, uint32_t n, dcp_buffer **out);

#endif
