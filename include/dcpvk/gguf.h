/* GGUF model files: a checked, memory-mapped reader, a GGUF v3 writer, and the maker of the
 * project's own deterministic test models.
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

#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- value and tensor types ------------------------------------------------------------------ */

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

/* Tensor element types (ggml type codes). F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K and Q6_K can be read as data (DCP_GGML_SUPPORTED_LIST); the others are known by
 * name and size so that a directory can be listed and checked, and reading their data fails with
 * DCP_ERR_UNSUPPORTED naming the type. */
typedef enum dcp_ggml_type {
    DCP_GGML_TYPE_F32 = 0,
    DCP_GGML_TYPE_F16 = 1,
    DCP_GGML_TYPE_Q4_0 = 2,
    DCP_GGML_TYPE_Q4_1 = 3,
    DCP_GGML_TYPE_Q5_0 = 6,
    DCP_GGML_TYPE_Q5_1 = 7,
    DCP_GGML_TYPE_Q8_0 = 8,
    DCP_GGML_TYPE_Q8_1 = 9,
    DCP_GGML_TYPE_Q2_K = 10,
    DCP_GGML_TYPE_Q3_K = 11,
    DCP_GGML_TYPE_Q4_K = 12,
    DCP_GGML_TYPE_Q5_K = 13,
    DCP_GGML_TYPE_Q6_K = 14,
    DCP_GGML_TYPE_Q8_K = 15,
    DCP_GGML_TYPE_IQ2_XXS = 16,
    DCP_GGML_TYPE_IQ2_XS = 17,
    DCP_GGML_TYPE_IQ3_XXS = 18,
    DCP_GGML_TYPE_IQ1_S = 19,
    DCP_GGML_TYPE_IQ4_NL = 20,
    DCP_GGML_TYPE_IQ3_S = 21,
    DCP_GGML_TYPE_IQ2_S = 22,
    DCP_GGML_TYPE_IQ4_XS = 23,
    DCP_GGML_TYPE_I8 = 24,
    DCP_GGML_TYPE_I16 = 25,
    DCP_GGML_TYPE_I32 = 26,
    DCP_GGML_TYPE_I64 = 27,
    DCP_GGML_TYPE_F64 = 28,
    DCP_GGML_TYPE_IQ1_M = 29,
    DCP_GGML_TYPE_BF16 = 30,
    DCP_GGML_TYPE_TQ1_0 = 34,
    DCP_GGML_TYPE_TQ2_0 = 35,
    DCP_GGML_TYPE_MXFP4 = 39,
} dcp_ggml_type;

/* Q8_0 block: 32 weights = d * qs[i], d stored as IEEE half. 34 bytes, no padding. */
enum { DCP_Q8_0_BLOCK = 32, DCP_Q8_0_BYTES = 34 };

/* The tensor types whose data dcp-vk reads, for messages. The block layouts of the quantized ones
 * are written down in src/model/quants.h. */
#define DCP_GGML_SUPPORTED_LIST "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K"

/* Name of a metadata value type ("uint32", "string", ...), or "unknown". Thread-safe. */
const char *dcp_gguf_type_name(dcp_gguf_type type);

/* Name of a ggml type ("F32", "Q4_K", ...), or NULL when the code is not a known ggml type.
 * Thread-safe. */
const char *dcp_ggml_type_name(dcp_ggml_type type);

/* Looks up a ggml type by name (case-insensitive, e.g. "q8_0"). Returns DCP_ERR_INVALID_ARGUMENT
 * for an unknown name. */
dcp_status dcp_ggml_type_from_name(const char *name, dcp_ggml_type *out);

/* Block layout of a ggml type: *block_elems elements are stored in *block_bytes bytes. Returns
 * false (outputs 0) for an unknown code. Thread-safe. */
bool dcp_ggml_type_block(dcp_ggml_type type, uint32_t *block_elems, uint32_t *block_bytes);

/* True for the types whose data dcp-vk reads (DCP_GGML_SUPPORTED_LIST). */
bool dcp_ggml_type_supported(dcp_ggml_type type);

/* Converts n elements of a supported type to f32. n must be a multiple of the block size.
 * src: n elements of `type` (any alignment); dst: [n] f32. Thread-safe. */
dcp_status dcp_ggml_to_f32(dcp_ggml_type type, const void *src, float *dst, uint64_t n);

/* Converts n f32 values to a supported type (round to nearest even; Q8_0 scale = max|x|/127 per
 * block; the other quantized types by the reference quantizers of src/model/quants.h). n must be
 * a multiple of the block size. dst: n / block elements * block bytes. */
dcp_status dcp_ggml_from_f32(dcp_ggml_type type, const float *src, void *dst, uint64_t n);

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
} dcp_gguf_tensor;

/* Opens and checks a GGUF file, memory-mapping it read-only. On failure *out is NULL and
 * dcp_last_error() names the file, offset and problem. */
dcp_status dcp_gguf_open(const char *path, dcp_gguf **out);

/* Same over bytes in memory (borrowed: data must outlive the handle). `name` is used in errors. */
dcp_status dcp_gguf_open_memory(const void *data, size_t size, const char *name, dcp_gguf **out);

/* Unmaps and frees. NULL is allowed. */
void dcp_gguf_close(dcp_gguf *g);

const char *dcp_gguf_name(const dcp_gguf *g);      /* path or name given at open */
uint32_t dcp_gguf_version(const dcp_gguf *g);      /* 2 or 3 */
uint64_t dcp_gguf_file_size(const dcp_gguf *g);    /* bytes */
uint64_t dcp_gguf_alignment(const dcp_gguf *g);    /* bytes; general.alignment or 32 */
uint64_t dcp_gguf_data_offset(const dcp_gguf *g);  /* file offset of the tensor data section */

/* Metadata: count, lookup by index (0..count-1, in file order) and by key. */
uint64_t dcp_gguf_kv_count(const dcp_gguf *g);
const dcp_gguf_kv *dcp_gguf_kv_at(const dcp_gguf *g, uint64_t index);
/* Returns the kv with that key, or NULL when absent. */
const dcp_gguf_kv *dcp_gguf_kv_find(const dcp_gguf *g, const char *key);

/* Typed getters by key. A missing key or a value that does not convert gives DCP_ERR_FORMAT with
 * a message naming the key and file; *out is left unchanged on failure.
 * get_uint: any integer type holding a non-negative value; get_int: any integer type that fits
 * int64; get_float: FLOAT32/FLOAT64 or any integer; get_string: pointer valid until close. */
dcp_status dcp_gguf_get_uint(const dcp_gguf *g, const char *key, uint64_t *out);
dcp_status dcp_gguf_get_int(const dcp_gguf *g, const char *key, int64_t *out);
dcp_status dcp_gguf_get_float(const dcp_gguf *g, const char *key, double *out);
dcp_status dcp_gguf_get_bool(const dcp_gguf *g, const char *key, bool *out);
dcp_status dcp_gguf_get_string(const dcp_gguf *g, const char *key, const char **out, size_t *len);

/* Array elements (kv->type must be ARRAY, i < kv->array_len; else DCP_ERR_INVALID_ARGUMENT).
 * Numeric elements are widened like scalars; string elements are NUL-terminated copies. */
dcp_status dcp_gguf_array_uint(const dcp_gguf_kv *kv, uint64_t i, uint64_t *out);
dcp_status dcp_gguf_array_int(const dcp_gguf_kv *kv, uint64_t i, int64_t *out);
dcp_status dcp_gguf_array_float(const dcp_gguf_kv *kv, uint64_t i, double *out);
dcp_status dcp_gguf_array_string(const dcp_gguf_kv *kv, uint64_t i, const char **out, size_t *len);

/* Tensor directory, in file order. */
uint64_t dcp_gguf_tensor_count(const dcp_gguf *g);
const dcp_gguf_tensor *dcp_gguf_tensor_at(const dcp_gguf *g, uint64_t index);
/* Returns the tensor with that name, or NULL. */
const dcp_gguf_tensor *dcp_gguf_tensor_find(const dcp_gguf *g, const char *name);

/* Reads a tensor as f32 into dst [n_elements]. DCP_ERR_UNSUPPORTED (naming the tensor and its
 * type) for types outside DCP_GGML_SUPPORTED_LIST. */
dcp_status dcp_gguf_tensor_to_f32(const dcp_gguf *g, const dcp_gguf_tensor *t, float *dst);

/* ---- writer ---------------------------------------------------------------------------------- */

/* Builds a GGUF v3 file in memory and writes it. Created by dcp_gguf_writer_create, destroyed by
 * dcp_gguf_writer_destroy. Keys and tensors are written in the order they were added; all inputs
 * are copied. Not thread-safe. */
typedef struct dcp_gguf_writer dcp_gguf_writer;

/* alignment: bytes, a power of two (0 = 32). A value other than 32 is also written as
 * general.alignment. */
dcp_status dcp_gguf_writer_create(uint32_t alignment, dcp_gguf_writer **out);
void dcp_gguf_writer_destroy(dcp_gguf_writer *w);

/* Scalars. A duplicated key gives DCP_ERR_INVALID_ARGUMENT. */
dcp_status dcp_gguf_writer_set_uint(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, uint64_t v);
dcp_status dcp_gguf_writer_set_int(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, int64_t v);
dcp_status dcp_gguf_writer_set_float(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, double v);
dcp_status dcp_gguf_writer_set_bool(dcp_gguf_writer *w, const char *key, bool v);
dcp_status dcp_gguf_writer_set_string(dcp_gguf_writer *w, const char *key, const char *s, size_t len);
/* Numeric/bool array: n elements of elem_type, packed little-endian, in `data`. */
dcp_status dcp_gguf_writer_set_array(dcp_gguf_writer *w, const char *key, dcp_gguf_type elem_type,
                                     const void *data, uint64_t n);
/* String array; lens may be NULL (then strlen is used). */
dcp_status dcp_gguf_writer_set_string_array(dcp_gguf_writer *w, const char *key,
                                            const char *const *strs, const size_t *lens, uint64_t n);
/* Copies one key/value exactly (same type) from an open file. */
dcp_status dcp_gguf_writer_copy_kv(dcp_gguf_writer *w, const dcp_gguf_kv *kv);

/* Adds a tensor: data holds the packed bytes for ne (row size from the type's block layout);
 * size must equal that. ne[0] must be a multiple of the block size. */
dcp_status dcp_gguf_writer_add_tensor(dcp_gguf_writer *w, const char *name, dcp_ggml_type type,
                                      uint32_t n_dims, const uint64_t *ne, const void *data,
                                      uint64_t size);

/* Produces the bytes of tensor `index` (in the order added) at write time: size bytes into dst.
 * Returns DCP_OK or a status that aborts the write (the target is left untouched). */
typedef dcp_status (*dcp_gguf_tensor_fill_fn)(void *user, uint64_t index, void *dst, uint64_t size);

/* Adds a tensor whose bytes fill produces when the file is written (one tensor in memory at a
 * time; user must outlive the write). Checks as dcp_gguf_writer_add_tensor. */
dcp_status dcp_gguf_writer_add_tensor_fill(dcp_gguf_writer *w, const char *name, dcp_ggml_type type,
                                           uint32_t n_dims, const uint64_t *ne, uint64_t size,
                                           dcp_gguf_tensor_fill_fn fill, void *user);

/* Writes the file: to an exclusive temporary (mkstemp: created with O_EXCL under a random name,
 * so a link planted beside the target is never followed) in path's directory, synced, then renamed
 * over path, so readers see the old file or the whole new one. An existing path that is not a
 * regular file (a symbolic link, directory, device node, FIFO, socket) is refused; nothing is
 * opened through it. DCP_ERR_IO on failure (the target and everything else left untouched). */
dcp_status dcp_gguf_writer_write(const dcp_gguf_writer *w, const char *path);

enum {
    /* An existing target that is not a regular file and not a directory (a symbolic link, device
     * node, FIFO, socket) is replaced by the new file: the rename swaps the directory entry itself;
     * what a link points to, or the device, is never opened or written. */
    DCP_GGUF_WRITE_REPLACE = 1u << 0,
};
/* dcp_gguf_writer_write with flags (DCP_GGUF_WRITE_*; 0: the same as dcp_gguf_writer_write). */
dcp_status dcp_gguf_writer_write_to(const dcp_gguf_writer *w, const char *path, unsigned flags);
/* Serialises the file into memory: *data (malloc'd, the caller frees it) of *size bytes, the same
 * bytes dcp_gguf_writer_write puts in a file. DCP_ERR_OUT_OF_MEMORY on failure (*data NULL). */
dcp_status dcp_gguf_writer_write_memory(const dcp_gguf_writer *w, void **data, size_t *size);

/* ---- quantizing a file (llama-quantize's file types and mixes) -------------------------------- */

/* llama.cpp's file types (the codes of general.file_type): the weight type of most matrices and,
 * for the k-quant mixes, which tensors get more bits. For the llama family (no experts):
 *   output.weight (token_embd.weight when there is no output.weight): Q6_K (Q8_0 for Q8_0 files,
 *     or when its rows are not whole blocks of the base type);
 *   attn_v: Q2_K -> Q4_K when heads / KV heads >= 4, else Q3_K; Q3_K_M -> Q5_K for the first two,
 *     then Q4_K; Q3_K_L -> Q5_K; Q4_K_M, Q5_K_M -> Q6_K on "more-bits" layers (the first and last
 *     eighth of them and every third between); Q4_K_S -> Q5_K for the first four;
 *   ffn_down: Q2_K -> Q3_K; Q3_K_M -> Q5_K for the first sixteenth, then Q4_K; Q3_K_L -> Q5_K;
 *     Q4_K_M, Q5_K_M -> Q6_K on more-bits layers; Q4_K_S -> Q5_K for the first eighth;
 *   attn_output: Q2_K -> Q3_K; Q3_K_M -> Q4_K; Q3_K_L -> Q5_K;
 *   everything else 2-D named *weight (not *_norm.weight): the base type; other tensors unchanged.
 * Then a tensor whose rows (ne0) are not whole blocks of its type falls back: Q2_K, Q3_K -> Q4_0,
 * Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, and to F16 when that does not fit either (or for a
 * block-of-32 type: llama-quantize stops there, dcp-vk writes F16). */
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
    DCP_FTYPE_BF16 = 32,
} dcp_ftype;

/* "Q4_K_M", ... or NULL for an unknown code. Thread-safe. */
const char *dcp_ftype_name(dcp_ftype f);
/* Case-insensitive; Q3_K, Q4_K, Q5_K are the _M mixes (as in llama-quantize). An unknown name gives
 * DCP_ERR_INVALID_ARGUMENT listing the allowed names. */
dcp_status dcp_ftype_from_name(const char *name, dcp_ftype *out);
/* The weight type of most matrices of a file type (Q4_K for Q4_K_M). */
dcp_ggml_type dcp_ftype_base_type(dcp_ftype f);
/* type, or its fallback when rows of ne0 elements are not whole blocks of it (see dcp_ftype). */
dcp_ggml_type dcp_quantize_fallback(dcp_ggml_type type, uint64_t ne0);

/* The per-file state of the mix rules: counts of attn_v / ffn_down tensors and which one is next
 * (the rules depend on the layer). Filled by dcp_quantize_plan_init; then ask
 * dcp_quantize_tensor_type for every tensor in file order. */
typedef struct dcp_quantize_plan {
    dcp_ftype ftype;
    bool pure;                  /* every matrix in the base type (fallbacks aside) */
    bool tied;                  /* no output.weight: token_embd.weight is the output */
    uint32_t n_gqa;             /* query heads per KV head */
    uint32_t n_attn_v, i_attn_v, n_ffn_down, i_ffn_down;
} dcp_quantize_plan;

dcp_status dcp_quantize_plan_init(const dcp_gguf *g, dcp_ftype ftype, bool pure, dcp_quantize_plan *p);
/* Target type of tensor t (the next in file order); *fell_back = 1 when its rows forced a fallback. */
dcp_ggml_type dcp_quantize_tensor_type(dcp_quantize_plan *p, const dcp_gguf_tensor *t, int *fell_back);

typedef struct dcp_quantize_config {
    dcp_ftype ftype;            /* file type. Default DCP_FTYPE_Q4_K_M */
    bool pure;                  /* no mix rules: every matrix in the base type. Default false */
    unsigned write_flags;       /* DCP_GGUF_WRITE_* for the output. Default 0 */
} dcp_quantize_config;
#define DCP_QUANTIZE_CONFIG_DEFAULT { DCP_FTYPE_Q4_K_M, false, 0 }

/* Called once per tensor, in file order, with its chosen type and whether that is a fallback. */
typedef void (*dcp_quantize_report_fn)(void *user, const dcp_gguf_tensor *t, dcp_ggml_type to, int fell_back);

/* Reads GGUF in_path (any readable tensor types; tensors already in their target type are copied
 * byte for byte, others dequantized to f32 and requantized by the reference quantizers) and
 * writes out_path as GGUF v3 with the same metadata plus general.file_type and
 * general.quantization_version = 2, safely (see dcp_gguf_writer_write). One tensor is converted
 * at a time. cfg NULL = defaults; report may be NULL. */
dcp_status dcp_gguf_quantize(const char *in_path, const char *out_path, const dcp_quantize_config *cfg,
                             dcp_quantize_report_fn report, void *user);

/* ---- the project's deterministic test models ------------------------------------------------ */

/* Shapes of a generated model. Weights are drawn from a SplitMix64 stream seeded by `seed`,
 * uniform in [-1/sqrt(fan_in), +1/sqrt(fan_in)); norm weights are 1 + U(-0.1, 0.1). The same
 * config gives the same bytes on every machine. The vocabulary is built in (see
 * dcp_test_model_vocab_size): <unk>, <s>, </s>, 256 byte tokens, printable ASCII characters and
 * common English word pieces, SentencePiece style (`llama` tokenizer), padded with <unused_N>
 * tokens to a multiple of 64. */
typedef struct dcp_test_model_config {
    const char *arch;         /* architecture: "llama", "qwen2" (+ Q/K/V biases), "qwen3" (+ Q/K
                                 per-head norms), "phi3" (fused attn_qkv, gate|up in ffn_up).
                                 Default "llama" */
    const char *name;         /* general.name. Default "dcp-vk-test" */
    uint32_t n_embd;          /* embedding size. Default 256 */
    uint32_t n_layer;         /* blocks. Default 4 */
    uint32_t n_head;          /* query heads. Default 16 */
    uint32_t n_head_kv;       /* KV heads (divides n_head). Default 4: TP 8 with DCP 2 fits vLLM's rules */
    uint32_t head_dim;        /* per head; 0 = n_embd / n_head. Default 16 */
    uint32_t n_ff;            /* FFN hidden size. Default 768 */
    uint32_t n_ctx;           /* context_length. Default 4096 */
    float rms_eps;            /* RMS norm epsilon. Default 1e-5 */
    float rope_base;          /* RoPE frequency base. Default 10000 */
    dcp_ggml_type weight_type;/* matrices (norms stay F32): any type of DCP_GGML_SUPPORTED_LIST whose
                                 block divides n_embd, n_ff and n_head*head_dim. Default F32 */
    uint64_t seed;            /* Default 1234 */
    /* RoPE scaling and Mistral's window (every llama-family arch): */
    int rope_freqs;           /* 1: write rope_freqs.weight [head_dim/2], Llama 3.x-style factors
                                 rising from 1 (fast pairs) to 8 (slow pairs). Default 0 */
    const char *rope_scaling; /* NULL or "none", "linear", "yarn": <arch>.rope.scaling.type.
                                 Default NULL (not written) */
    float rope_scale;         /* rope.scaling.factor with rope_scaling (yarn: original context
                                 n_ctx / factor). Default 0 */
    uint32_t sliding_window;  /* > 0: <arch>.attention.sliding_window (Mistral). Default 0 */
    int tie_output;           /* 1: no output.weight, the head reads token_embd.weight (Llama 3.2
                                 1B, Qwen2.5 0.5B). Default 0 */
} dcp_test_model_config;

#define DCP_TEST_MODEL_CONFIG_DEFAULT                                                              \
    {.arch = "llama", .name = "dcp-vk-test", .n_embd = 256, .n_layer = 4, .n_head = 16,            \
     .n_head_kv = 4, .head_dim = 16, .n_ff = 768, .n_ctx = 4096, .rms_eps = 1e-5f,                 \
     .rope_base = 10000.0f, .weight_type = DCP_GGML_TYPE_F32, .seed = 1234}

/* Number of tokens of the built-in vocabulary. */
uint32_t dcp_test_model_vocab_size(void);

/* Generates a test model and writes it to path as GGUF v3. cfg NULL = defaults. Checks the
 * config (DCP_ERR_INVALID_ARGUMENT naming the field). Thread-safe. */
dcp_status dcp_gguf_make_test_model(const char *path, const dcp_test_model_config *cfg);

/* Same, into a writer the caller then writes or inspects (the caller destroys it). */
dcp_status dcp_gguf_build_test_model(const dcp_test_model_config *cfg, dcp_gguf_writer **out);

/* ---- deepseek2 test models (MLA attention + MoE) --------------------------------------------- */

/* Shapes and features of a generated deepseek2 model. The defaults (variant A) have pairwise
 * distinct dimensions so that a swapped axis fails: n_embd 64, 4 heads (TP up to 4 splits them),
 * kv_lora 32, rope 16, nope 24, v 20, dense FFN 72, 6 experts of width 56 (2 used, 1 shared),
 * 2 layers (one dense, one MoE), the built-in vocabulary. Weights are drawn from one SplitMix64
 * stream in the same order for every layout, scaled so that the attention and router softmaxes
 * are neither flat nor one-hot. Matrices in weight_type (F32 or F16), norms and router in F32. */
typedef struct dcp_test_deepseek2_config {
    const char *name;          /* general.name. Default "dcp-vk-test-deepseek2" */
    uint32_t n_embd;           /* Default 64 */
    uint32_t n_layer;          /* Default 2 */
    uint32_t n_layer_dense;    /* leading dense layers (<= n_layer). Default 1 */
    uint32_t n_head;           /* Default 4 */
    uint32_t q_lora_rank;      /* 0: attn_q; else attn_q_a / attn_q_a_norm / attn_q_b. Default 0 */
    uint32_t kv_lora_rank;     /* latent width, multiple of 4. Default 32 */
    uint32_t n_rot;            /* rope part of a head, multiple of 4. Default 16 */
    uint32_t head_dim_nope;    /* non-rope part of a query/key head, multiple of 4. Default 24 */
    uint32_t head_dim_v;       /* value head, multiple of 4. Default 20 */
    uint32_t n_ff;             /* dense FFN width. Default 72 */
    uint32_t n_expert;         /* routed experts. Default 6 */
    uint32_t n_expert_used;    /* Default 2 */
    uint32_t n_expert_shared;  /* Default 1 */
    uint32_t n_ff_exp;         /* expert FFN width. Default 56 */
    uint32_t n_ctx;            /* context_length. Default 4096 */
    int legacy_kv_b;           /* 1: the legacy layout (attn_kv_b, no key_length_mla). Default 0 */
    uint32_t gating_func;      /* expert_gating_func: 1 softmax, 2 sigmoid. Default 1 */
    int exp_probs_b;           /* 1: write exp_probs_b.bias (selection bias). Default 0 */
    int weights_norm;          /* expert_weights_norm. Default 0 */
    float weights_scale;       /* expert_weights_scale. Default 1 */
    uint32_t n_expert_groups;  /* expert_group_count (0 or 1: not written). Default 0 */
    uint32_t n_expert_groups_used; /* expert_group_used_count. Default 0 */
    float yarn_factor;         /* > 0: rope.scaling.type yarn with this factor. Default 0 (none) */
    uint32_t yarn_orig_ctx;    /* rope.scaling.original_context_length. Default 0 */
    float yarn_log_mul;        /* rope.scaling.yarn_log_multiplier (0.1 * mscale_all_dim). Default 0 */
    float yarn_beta_fast, yarn_beta_slow; /* Defaults 32, 1 */
    float rms_eps;             /* Default 1e-6 */
    float rope_base;           /* Default 10000 */
    dcp_ggml_type weight_type; /* F32 or F16. Default F32 */
    uint64_t seed;             /* Default 4242 */
} dcp_test_deepseek2_config;

/* The named configurations of the deepseek2 tests:
 *   'A': the DeepSeek-V2-Lite layout: attn_q, attn_k_b / attn_v_b, softmax gating, no YaRN;
 *   'B': every feature: q_lora 40, YaRN (factor 4, original context 32, log multiplier 0.0707,
 *        beta 32 / 1), sigmoid gating with exp_probs_b, expert_weights_norm, scale 2.5, 3 expert
 *        groups of 2 with 2 used;
 *   'C': A in the legacy attn_kv_b layout, from the same draw (the same logits as A).
 * DCP_ERR_INVALID_ARGUMENT for another letter. */
dcp_status dcp_test_deepseek2_preset(char variant, dcp_test_deepseek2_config *out);

/* Generates a deepseek2 test model into a writer (the caller destroys it) or a file. Checks the
 * config (DCP_ERR_INVALID_ARGUMENT naming the field). Thread-safe. */
dcp_status dcp_gguf_build_test_model_deepseek2(const dcp_test_deepseek2_config *cfg, dcp_gguf_writer **out);
dcp_status dcp_gguf_make_test_model_deepseek2(const char *path, const dcp_test_deepseek2_config *cfg);
/* Generates a test model in memory and opens it, writing nothing to disk: the handle owns the
 * bytes (freed by dcp_gguf_close); its name is "<generated test model>". cfg NULL = defaults. */
dcp_status dcp_gguf_open_test_model(const dcp_test_model_config *cfg, dcp_gguf **out);

#ifdef __cplusplus
}
#endif
#endif
