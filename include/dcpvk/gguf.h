/* GGUF model files: a checked, memory-mapped reader, a GGUF v3 writer, and the file quantizer
 * (llama-quantize's file types and mixes). The tensor element types are in dcpvk/quant.h; the
 * project's generated test models are in the dcpvk_testmodel library (src/testmodel/testmodel.h).
 *
 * The reader never trusts the file: every count, string length, array length, shape, offset and
 * tensor extent is checked against the file size and against overflow before it is used. Errors
 * return DCP_ERR_FORMAT (or DCP_ERR_UNSUPPORTED for a valid but unsupported feature) and leave a
 * dcp_last_error() message naming the file, the byte offset and what was wrong.
 *
 * Byte order: little-endian files only (GGUF versions 2 and 3). */
#ifndef DCPVK_GGUF_H
#define DCPVK_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/quant.h"
#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- metadata value types -------------------------------------------------------------------- */

/* GGUF metadata value types (the numbers are the on-disk codes). */
typedef enum dcp_gguf_type {
    DCP_GGUF_TYPE_UINT8 = 0,
    DCP_GGUF_TYPE_INT8 = 1,
    DCP_GGUF_TYPE_UINT16 = 2,
    DCP_GGUF_TYPE_INT16 = 3,
    DCP_GGUF_TYPE_UINT32 = 4,
    DCP_GGUF_TYPE_INT32 = 5,
    DCP_GGUF_TYPE_FLOAT32 = 6,
    DCP_GGUF_TYPE_BOOL = 7,
    DCP_GGUF_TYPE_STRING = 8,
    DCP_GGUF_TYPE_ARRAY = 9,
    DCP_GGUF_TYPE_UINT64 = 10,
    DCP_GGUF_TYPE_INT64 = 11,
    DCP_GGUF_TYPE_FLOAT64 = 12,
    DCP_GGUF_TYPE_COUNT = 13,
} dcp_gguf_type;

/* Name of a metadata value type ("uint32", "string", ...), or "unknown". Thread-safe. */
DCP_API const char *dcp_gguf_type_name(dcp_gguf_type type);

/* ---- reader --------------------------------------------------------------------------------- */

/* An open GGUF file. Created by dcp_gguf_open / dcp_gguf_open_memory, destroyed by
 * dcp_gguf_close. All pointers it hands out (keys, strings, tensor data) stay valid until close.
 * Read-only after open, so concurrent readers are safe. */
typedef struct dcp_gguf dcp_gguf;

/* One metadata key/value. Scalars are widened: unsigned integers to u64, signed to i64, floats to
 * f64. Strings are copied, NUL-terminated, and may contain NUL bytes (use the length). */
typedef struct dcp_gguf_kv {
    const char *key;            /* NUL-terminated */
    dcp_gguf_type type;         /* value type; DCP_GGUF_TYPE_ARRAY for arrays */
    uint64_t offset;            /* file offset of the key/value record, bytes */
    union {
        uint64_t u64;           /* UINT8/16/32/64 */
        int64_t i64;            /* INT8/16/32/64 */
        double f64;             /* FLOAT32/64 */
        bool b;                 /* BOOL */
    } v;
    const char *str;            /* STRING: NUL-terminated copy */
    uint64_t str_len;           /* STRING: bytes, without the terminator */
    dcp_gguf_type array_type;   /* ARRAY: element type (never ARRAY) */
    uint64_t array_len;         /* ARRAY: elements */
    const void *array_data;     /* ARRAY of numbers/bools: raw little-endian elements, unaligned */
} dcp_gguf_kv;

/* One tensor of the directory. */
typedef struct dcp_gguf_tensor {
    const char *name;           /* NUL-terminated */
    dcp_ggml_type type;
    uint32_t n_dims;            /* 1..4 */
    uint64_t ne[4];             /* elements per dimension; ne[0] is contiguous; unused dims = 1 */
    uint64_t n_elements;
    uint64_t offset;            /* bytes, relative to the data section (a multiple of alignment) */
    uint64_t size;              /* bytes */
    const void *data;           /* mapped bytes [size] (read-only) */
    uint32_t part;              /* split models: the part holding the data (dcp_gguf_part); else 0 */
} dcp_gguf_tensor;

/* Opens and checks a GGUF file, memory-mapping it read-only. On failure *out is NULL and
 * dcp_last_error() names the file, offset and problem.
 *
 * Split models (llama.cpp's gguf-split: keys split.count, split.no, split.tensors.count; files
 * NAME-00001-of-0000N.gguf ... NAME-0000N-of-0000N.gguf): given the first part, the others are
 * found by name and opened too, and the handle is the whole model: the first part's keys, the
 * tensors of every part (each mapped from its own file; dcp_gguf_tensor.part says which). Refused,
 * naming the file and what did not match: a part other than the first, a first part not named
 * -00001-of-0000N.gguf, a missing part, a part whose split.count or split.tensors.count differs
 * (another model's), a part whose split.no is not its place (reordered or renamed), a tensor name
 * in two parts, a tensor total other than split.tensors.count. */
DCP_API dcp_status dcp_gguf_open(const char *path, dcp_gguf **out);

/* Same over bytes in memory (borrowed: data must outlive the handle). `name` is used in errors.
 * One file: split keys are kept as they are, no other part is looked for. */
DCP_API dcp_status dcp_gguf_open_memory(const void *data, size_t size, const char *name, dcp_gguf **out);

/* Unmaps and frees. NULL is allowed. */
DCP_API void dcp_gguf_close(dcp_gguf *g);

DCP_API const char *dcp_gguf_name(const dcp_gguf *g);      /* path or name given at open */
DCP_API uint32_t dcp_gguf_version(const dcp_gguf *g);      /* 2 or 3 */
DCP_API uint64_t dcp_gguf_file_size(const dcp_gguf *g);    /* bytes (a split model: of all its parts) */
DCP_API uint64_t dcp_gguf_alignment(const dcp_gguf *g);    /* bytes; general.alignment or 32 */
DCP_API uint64_t dcp_gguf_data_offset(const dcp_gguf *g);  /* file offset of the tensor data section (split
                                                            * models: the first part's) */

/* Parts of a split model: their number (1 for a single file) and part i (0 .. count-1) as a
 * file of its own, with its own keys and tensor directory (a single file: part 0 is g). The part
 * handles belong to g. NULL for i out of range. */
DCP_API uint32_t dcp_gguf_part_count(const dcp_gguf *g);
DCP_API const dcp_gguf *dcp_gguf_part(const dcp_gguf *g, uint32_t i);
/* The file name of part `part` (0-based) of `count`: "PREFIX-%05u-of-%05u.gguf" with part + 1.
 * Returns snprintf's count (the name is cut when it is >= size). */
DCP_API int dcp_gguf_split_path(char *buf, size_t size, const char *prefix, uint32_t part, uint32_t count);

/* Metadata: count, lookup by index (0..count-1, in file order) and by key. */
DCP_API uint64_t dcp_gguf_kv_count(const dcp_gguf *g);
DCP_API const dcp_gguf_kv *dcp_gguf_kv_at(const dcp_gguf *g, uint64_t index);
/* Returns the kv with that key, or NULL when absent. */
DCP_API const dcp_gguf_kv *dcp_gguf_kv_find(const dcp_gguf *g, const char *key);

/* Typed getters by key. A missing key or a value that does not convert gives DCP_ERR_FORMAT with
 * a message naming the key and file; *out is left unchanged on failure.
 * get_uint: any integer type holding a non-negative value; get_int: any integer type that fits
 * int64; get_float: FLOAT32/FLOAT64 or any integer; get_string: pointer valid until close. */
DCP_API dcp_status dcp_gguf_get_uint(const dcp_gguf *g, const char *key, uint64_t *out);
DCP_API dcp_status dcp_gguf_get_int(const dcp_gguf *g, const char *key, int64_t *out);
DCP_API dcp_status dcp_gguf_get_float(const dcp_gguf *g, const char *key, double *out);
DCP_API dcp_status dcp_gguf_get_bool(const dcp_gguf *g, const char *key, bool *out);
DCP_API dcp_status dcp_gguf_get_string(const dcp_gguf *g, const char *key, const char **out, size_t *len);

/* Array elements (kv->type must be ARRAY, i < kv->array_len; else DCP_ERR_INVALID_ARGUMENT).
 * Numeric elements are widened like scalars; string elements are NUL-terminated copies. */
DCP_API dcp_status dcp_gguf_array_uint(const dcp_gguf_kv *kv, uint64_t i, uint64_t *out);
DCP_API dcp_status dcp_gguf_array_int(const dcp_gguf_kv *kv, uint64_t i, int64_t *out);
DCP_API dcp_status dcp_gguf_array_float(const dcp_gguf_kv *kv, uint64_t i, double *out);
DCP_API dcp_status dcp_gguf_array_string(const dcp_gguf_kv *kv, uint64_t i, const char **out, size_t *len);

/* Tensor directory, in file order. */
DCP_API uint64_t dcp_gguf_tensor_count(const dcp_gguf *g);
DCP_API const dcp_gguf_tensor *dcp_gguf_tensor_at(const dcp_gguf *g, uint64_t index);
/* Returns the tensor with that name, or NULL. */
DCP_API const dcp_gguf_tensor *dcp_gguf_tensor_find(const dcp_gguf *g, const char *name);

/* Reads a tensor as f32 into dst [n_elements]. DCP_ERR_UNSUPPORTED (naming the tensor and its
 * type) for types outside DCP_GGML_SUPPORTED_LIST. */
DCP_API dcp_status dcp_gguf_tensor_to_f32(const dcp_gguf *g, const dcp_gguf_tensor *t, float *dst);

/* ---- writer ---------------------------------------------------------------------------------- */

/* Builds a GGUF v3 file in memory and writes it. Created by dcp_gguf_writer_create, destroyed by
 * dcp_gguf_writer_destroy. Keys and tensors are written in the order they were added; all inputs
 * are copied. Not thread-safe. */
typedef struct dcp_gguf_writer dcp_gguf_writer;

/* alignment: bytes, a power of two (0 = 32). A value other than 32 is also written as
 * general.alignment. */
DCP_API dcp_status dcp_gguf_writer_create(uint32_t alignment, dcp_gguf_writer **out);
DCP_API void dcp_gguf_writer_destroy(dcp_gguf_writer *w);

/* Scalars. A duplicated key gives DCP_ERR_INVALID_ARGUMENT. */
DCP_API dcp_status dcp_gguf_writer_set_uint(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, uint64_t v);
DCP_API dcp_status dcp_gguf_writer_set_int(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, int64_t v);
DCP_API dcp_status dcp_gguf_writer_set_float(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, double v);
DCP_API dcp_status dcp_gguf_writer_set_bool(dcp_gguf_writer *w, const char *key, bool v);
DCP_API dcp_status dcp_gguf_writer_set_string(dcp_gguf_writer *w, const char *key, const char *s, size_t len);
/* Numeric/bool array: n elements of elem_type, packed little-endian, in `data`. */
DCP_API dcp_status dcp_gguf_writer_set_array(dcp_gguf_writer *w, const char *key, dcp_gguf_type elem_type,
                                             const void *data, uint64_t n);
/* String array; lens may be NULL (then strlen is used). */
DCP_API dcp_status dcp_gguf_writer_set_string_array(dcp_gguf_writer *w, const char *key,
                                                    const char *const *strs, const size_t *lens, uint64_t n);
/* Copies one key/value exactly (same type) from an open file. */
DCP_API dcp_status dcp_gguf_writer_copy_kv(dcp_gguf_writer *w, const dcp_gguf_kv *kv);

/* Adds a tensor: data holds the packed bytes for ne (row size from the type's block layout);
 * size must equal that. ne[0] must be a multiple of the block size. */
DCP_API dcp_status dcp_gguf_writer_add_tensor(dcp_gguf_writer *w, const char *name, dcp_ggml_type type,
                                              uint32_t n_dims, const uint64_t *ne, const void *data,
                                              uint64_t size);

/* Tensors added so far. */
DCP_API uint64_t dcp_gguf_writer_tensor_count(const dcp_gguf_writer *w);

/* Produces the bytes of tensor `index` (in the order added) at write time: size bytes into dst.
 * Returns DCP_OK or a status that aborts the write (the target is left untouched). */
typedef dcp_status (*dcp_gguf_tensor_fill_fn)(void *user, uint64_t index, void *dst, uint64_t size);

/* Adds a tensor whose bytes fill produces when the file is written (one tensor in memory at a
 * time; user must outlive the write). Checks as dcp_gguf_writer_add_tensor. */
DCP_API dcp_status dcp_gguf_writer_add_tensor_fill(dcp_gguf_writer *w, const char *name, dcp_ggml_type type,
                                                   uint32_t n_dims, const uint64_t *ne, uint64_t size,
                                                   dcp_gguf_tensor_fill_fn fill, void *user);

/* Writes the file: to an exclusive temporary (mkstemp: created with O_EXCL under a random name,
 * so a link planted beside the target is never followed) in path's directory, synced, then renamed
 * over path, so readers see the old file or the whole new one. An existing path that is not a
 * regular file (a symbolic link, directory, device node, FIFO, socket) is refused; nothing is
 * opened through it. DCP_ERR_IO on failure (the target and everything else left untouched). */
DCP_API dcp_status dcp_gguf_writer_write(const dcp_gguf_writer *w, const char *path);

enum {
    /* An existing target that is not a regular file and not a directory (a symbolic link, device
     * node, FIFO, socket) is replaced by the new file: the rename swaps the directory entry itself;
     * what a link points to, or the device, is never opened or written. */
    DCP_GGUF_WRITE_REPLACE = 1u << 0,
};
/* dcp_gguf_writer_write with flags (DCP_GGUF_WRITE_*; 0: the same as dcp_gguf_writer_write). */
DCP_API dcp_status dcp_gguf_writer_write_to(const dcp_gguf_writer *w, const char *path, unsigned flags);
/* Writes n files (the parts of a split model): each checked and written to its exclusive
 * temporary first, and only when all are complete renamed into place, so a failure leaves no
 * part replaced and no temporary behind (a rename failing part-way is reported naming the parts
 * already in place). flags as dcp_gguf_writer_write_to. */
DCP_API dcp_status dcp_gguf_writer_write_parts(const dcp_gguf_writer *const *w, const char *const *paths, uint32_t n,
                                               unsigned flags);
/* Serialises the file into memory: *data (malloc'd, the caller frees it) of *size bytes, the same
 * bytes dcp_gguf_writer_write puts in a file. DCP_ERR_OUT_OF_MEMORY on failure (*data NULL). */
DCP_API dcp_status dcp_gguf_writer_write_memory(const dcp_gguf_writer *w, void **data, size_t *size);

/* ---- quantizing a file (llama-quantize's file types and mixes) -------------------------------- */

/* llama.cpp's file types (the codes of general.file_type): the weight type of most matrices and,
 * for the k-quant mixes, which tensors get more bits. The rules are llama-quantize's (its
 * llama_tensor_get_type in the 2025 versions that give attn_qkv its own rule; no importance
 * matrix), for every architecture but Falcon. A "layer" is the N of blk.N.; "more-bits" layers are
 * the first and last eighth of n and every third between (llama.cpp's use_more_bits):
 *   output.weight (token_embd.weight when there is no output.weight): Q6_K (Q8_0 for Q8_0 files,
 *     or when its rows are not whole blocks of the base type);
 *   attn_v: Q2_K -> Q4_K when heads / KV heads >= 4, else Q3_K; Q3_K_M -> Q5_K on layers 0, 1,
 *     then Q4_K; Q3_K_L -> Q5_K; Q4_K_M, Q5_K_M -> Q6_K on more-bits layers (n: the attn_v,
 *     attn_qkv and attn_kv_b tensors); Q4_K_S -> Q5_K on layers 0..3; then Q3_K / Q4_K -> Q5_K in
 *     an 80-layer llama (GQA) or qwen2 (llama.cpp's 70B); IQ4_NL, IQ4_XS -> Q5_K when heads /
 *     KV heads >= 4 (before the Q4_K_M rule); Q8_0 whatever the mix with 8 experts;
 *   attn_k: Q8_0 with 8 experts;
 *   attn_qkv (phi3's fused Q|K|V; not attn_v's rules): Q3_K_M, Q3_K_L -> Q4_K; Q4_K_M -> Q5_K;
 *     Q5_K_M -> Q6_K;
 *   ffn_down (also ffn_down_exps / _shexp; n: block_count): Q2_K -> Q3_K; Q3_K_M -> Q5_K for the
 *     first sixteenth, then Q4_K; Q3_K_L -> Q5_K; Q4_K_M, Q5_K_M -> Q6_K on more-bits layers;
 *     Q4_K_S -> Q5_K for the first eighth; IQ4_NL, IQ4_XS -> Q5_K for the first eighth;
 *   attn_output: Q2_K -> Q3_K; Q3_K_M -> Q4_K; Q3_K_L -> Q5_K; with 8 experts instead Q5_K for
 *     Q2_K, Q3_K_S, Q3_K_M, Q4_K_S, Q4_K_M, IQ4_NL, IQ4_XS;
 *   everything else 2-D or 3-D named *weight (not *_norm.weight, not ffn_gate_inp.weight; so also
 *     deepseek2's attn_kv_b, attn_k_b, attn_v_b): the base type; other tensors unchanged.
 * Then a tensor whose rows (ne0) are not whole blocks of its type falls back: Q2_K, Q3_K, IQ4_XS
 * (and the other IQ types) -> IQ4_NL, Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0; and to F16 when
 * that does not fit either, or for a block-of-32 type (where llama-quantize stops with an error).
 * With --pure (pure = true) only the fallback applies (llama-quantize would fail there). */
typedef enum dcp_ftype {
    DCP_FTYPE_F32 = 0,
    DCP_FTYPE_F16 = 1,
    DCP_FTYPE_Q4_0 = 2,
    DCP_FTYPE_Q4_1 = 3,
    DCP_FTYPE_Q8_0 = 7,
    DCP_FTYPE_Q5_0 = 8,
    DCP_FTYPE_Q5_1 = 9,
    DCP_FTYPE_Q2_K = 10,
    DCP_FTYPE_Q3_K_S = 11,
    DCP_FTYPE_Q3_K_M = 12,
    DCP_FTYPE_Q3_K_L = 13,
    DCP_FTYPE_Q4_K_S = 14,
    DCP_FTYPE_Q4_K_M = 15,
    DCP_FTYPE_Q5_K_S = 16,
    DCP_FTYPE_Q5_K_M = 17,
    DCP_FTYPE_Q6_K = 18,
    DCP_FTYPE_IQ4_NL = 25,
    DCP_FTYPE_IQ4_XS = 30,
    DCP_FTYPE_BF16 = 32,
} dcp_ftype;

/* "Q4_K_M", ... or NULL for an unknown code. Thread-safe. */
DCP_API const char *dcp_ftype_name(dcp_ftype f);
/* Case-insensitive; Q3_K, Q4_K, Q5_K are the _M mixes (as in llama-quantize). An unknown name gives
 * DCP_ERR_INVALID_ARGUMENT listing the allowed names. */
DCP_API dcp_status dcp_ftype_from_name(const char *name, dcp_ftype *out);
/* The weight type of most matrices of a file type (Q4_K for Q4_K_M). */
DCP_API dcp_ggml_type dcp_ftype_base_type(dcp_ftype f);
/* type, or its fallback when rows of ne0 elements are not whole blocks of it (see dcp_ftype). */
DCP_API dcp_ggml_type dcp_quantize_fallback(dcp_ggml_type type, uint64_t ne0);

/* What the mix rules read from a file (see dcp_ftype). Filled by dcp_quantize_plan_init; then
 * dcp_quantize_tensor_type answers for any tensor of that file, in any order. */
typedef struct dcp_quantize_plan {
    dcp_ftype ftype;
    bool pure;                  /* every matrix in the base type (fallbacks aside) */
    bool tied;                  /* no output.weight: token_embd.weight is the output */
    bool type_70b;              /* an 80-layer llama with grouped KV heads or qwen2 */
    uint32_t n_gqa;             /* query heads per KV head (1 without the keys) */
    uint32_t n_expert;          /* <arch>.expert_count, 0 without */
    uint32_t n_layer;           /* <arch>.block_count (else the largest blk.N. + 1) */
    uint32_t n_attn_v;          /* tensors named *attn_v.weight, *attn_qkv.weight, *attn_kv_b.weight */
} dcp_quantize_plan;

DCP_API dcp_status dcp_quantize_plan_init(const dcp_gguf *g, dcp_ftype ftype, bool pure, dcp_quantize_plan *p);
/* Target type of tensor t; *fell_back = 1 when its rows forced a fallback. Thread-safe. */
DCP_API dcp_ggml_type dcp_quantize_tensor_type(const dcp_quantize_plan *p, const dcp_gguf_tensor *t, int *fell_back);

typedef struct dcp_quantize_config {
    dcp_ftype ftype;            /* file type. Default DCP_FTYPE_Q4_K_M */
    bool pure;                  /* no mix rules: every matrix in the base type. Default false */
    bool copy;                  /* every tensor keeps its type and general.file_type is kept
                                 * (llama-quantize's COPY; ftype and pure unused): to re-split a
                                 * file. Default false */
    unsigned write_flags;       /* DCP_GGUF_WRITE_* for the output. Default 0 */
    uint64_t split_max_bytes;   /* > 0: split output, a new part whenever the next tensor would
                                 * take a part past this many bytes of tensor data (a part holds at
                                 * least one tensor; keys and directory not counted). Default 0 */
    uint32_t split_max_tensors; /* > 0: split output, at most this many tensors a part. Default 0 */
} dcp_quantize_config;
#define DCP_QUANTIZE_CONFIG_DEFAULT {.ftype = DCP_FTYPE_Q4_K_M, .pure = false, .copy = false, .write_flags = 0, \
                                     .split_max_bytes = 0, .split_max_tensors = 0}

/* Called once per tensor, in file order, before anything is written: its chosen type, whether
 * that is a fallback, and the output part it goes to (0 without splitting). */
typedef void (*dcp_quantize_report_fn)(void *user, const dcp_gguf_tensor *t, dcp_ggml_type to, int fell_back,
                                       uint32_t part);

/* Reads GGUF in_path (a single file or the first part of a split model; any readable tensor
 * types; tensors already in their target type are copied byte for byte, others dequantized to
 * f32 and requantized by the reference quantizers) and writes GGUF v3 with the same metadata
 * (less any split keys) plus general.file_type and general.quantization_version = 2. Without a
 * split limit the output is out_path; with one (split_max_bytes / split_max_tensors) it is a
 * split model as gguf-split writes it: out_path less a ".gguf" ending, then -00001-of-0000N.gguf
 * ... (every part with split.no, split.count, split.tensors.count; the model's keys in the first).
 * Written safely, every part staged before any is renamed (dcp_gguf_writer_write_parts). One
 * tensor is converted at a time. cfg NULL = defaults; report may be NULL. */
DCP_API dcp_status dcp_gguf_quantize(const char *in_path, const char *out_path, const dcp_quantize_config *cfg,
                                     dcp_quantize_report_fn report, void *user);

#ifdef __cplusplus
}
#endif
#endif
