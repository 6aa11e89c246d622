/* Private layout of an open GGUF file (include/dcpvk/gguf.h), shared by the reader, the writer
 * (dcp_gguf_writer_copy_kv) and the test-model generator (src/testmodel/: dcp_gguf_open_test_model
 * hands the handle the bytes it frees at close). */
#ifndef DCP_GGUF_GGUF_INTERNAL_H
#define DCP_GGUF_GGUF_INTERNAL_H

#include "dcpvk/gguf.h"

/* An element of a string array: kv->array_data points to [array_len] of these. */
typedef struct dcp_gguf_str {
    const char *s;  /* NUL-terminated copy */
    uint64_t len;   /* bytes, without the terminator */
} dcp_gguf_str;

/* Chunked string arena: every string copied out of the file lives here until close. */
typedef struct dcp_gguf_chunk {
    struct dcp_gguf_chunk *next;
    size_t used, cap;
    char data[];
} dcp_gguf_chunk;

struct dcp_gguf {
    char *name;               /* path or caller's name, for messages */
    const uint8_t *base;      /* file bytes [size] */
    uint64_t size;
    void *map;                /* mmap'd region (NULL for open_memory) */
    void *owned;              /* bytes the handle frees at close (dcp_gguf_open_test_model), or NULL */
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    uint64_t n_kv;
    dcp_gguf_kv *kvs;         /* [n_kv] */
    uint64_t n_tensors;
    dcp_gguf_tensor *tensors; /* [n_tensors] */
    uint32_t *kv_hash;        /* open addressing, kv index + 1 (0 = empty) [kv_hash_cap] */
    uint64_t kv_hash_cap;
    uint32_t *tensor_hash;    /* same for tensor names [tensor_hash_cap] */
    uint64_t tensor_hash_cap;
    dcp_gguf_chunk *chunks;   /* string arena */
    void **allocs;            /* string-array tables, freed at close [n_allocs] */
    uint64_t n_allocs, cap_allocs;
    /* A split model (dcp_gguf_open of its first part): the parts, each opened as a file of its
     * own; this handle borrows part 0's keys (kvs, kv_hash) and owns the merged tensor directory
     * (tensors, tensor_hash; names and data point into the parts). base, map are NULL and size
     * is the sum of the parts'. n_parts 0: a single file. */
    uint32_t n_parts;
    dcp_gguf **parts;         /* [n_parts] */
};

/* Size in bytes of one element of a numeric/bool value type (0 for STRING/ARRAY/unknown). */
uint32_t dcp_gguf_type_size(dcp_gguf_type type);

#endif
