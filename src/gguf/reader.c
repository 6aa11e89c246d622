/* GGUF reader: maps a file, checks every count, length, shape and extent against the file size and
 * against overflow, and exposes typed metadata and the tensor directory. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "gguf/gguf_internal.h"

enum { GGUF_DEFAULT_ALIGNMENT = 32, GGUF_MAX_DIMS = 4 };
#define GGUF_MAGIC 0x46554747u /* "GGUF" read as little-endian u32 */

typedef unsigned long long ull;

/* A bounds-checked cursor over the file bytes. */
typedef struct cursor {
    dcp_gguf *g;
    uint64_t off;
} cursor;

const char *dcp_gguf_type_name(dcp_gguf_type type)
{
    static const char *const names[DCP_GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return (unsigned)type < DCP_GGUF_TYPE_COUNT ? names[type] : "unknown";
}

uint32_t dcp_gguf_type_size(dcp_gguf_type type)
{
    switch (type) {
    case DCP_GGUF_TYPE_UINT8:
    case DCP_GGUF_TYPE_INT8:
    case DCP_GGUF_TYPE_BOOL: return 1;
    case DCP_GGUF_TYPE_UINT16:
    case DCP_GGUF_TYPE_INT16: return 2;
    case DCP_GGUF_TYPE_UINT32:
    case DCP_GGUF_TYPE_INT32:
    case DCP_GGUF_TYPE_FLOAT32: return 4;
    case DCP_GGUF_TYPE_UINT64:
    case DCP_GGUF_TYPE_INT64:
    case DCP_GGUF_TYPE_FLOAT64: return 8;
    default: return 0;
    }
}

static uint64_t left(const cursor *c) { return c->g->size - c->off; }

/* Fails unless n more bytes are in the file; `what` says what was being read. */
static dcp_status need(const cursor *c, uint64_t n, const char *ctx, const char *what)
{
    if (n <= left(c)) return DCP_OK;
    return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s%s%s needs %llu bytes but the file ends "
                    "after %llu (file size %llu)", c->g->name, (ull)c->off, ctx, *ctx ? ": " : "",
                    what, (ull)n, (ull)left(c), (ull)c->g->size);
}

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static dcp_status read_u32(cursor *c, const char *ctx, const char *what, uint32_t *out)
{
    dcp_status st = need(c, 4, ctx, what);
    if (st) return st;
    *out = (uint32_t)le(c->g->base + c->off, 4);
    c->off += 4;
    return DCP_OK;
}

static dcp_status read_u64(cursor *c, const char *ctx, const char *what, uint64_t *out)
{
    dcp_status st = need(c, 8, ctx, what);
    if (st) return st;
    *out = le(c->g->base + c->off, 8);
    c->off += 8;
    return DCP_OK;
}

static char *arena_alloc(dcp_gguf *g, uint64_t n)
{
    dcp_gguf_chunk *ch = g->chunks;
    if (!ch || ch->cap - ch->used < n) {
        size_t cap = n > 65536 ? (size_t)n : 65536;
        ch = malloc(sizeof *ch + cap);
        if (!ch) return NULL;
        ch->used = 0;
        ch->cap = cap;
        ch->next = g->chunks;
        g->chunks = ch;
    }
    char *p = ch->data + ch->used;
    ch->used += n;
    return p;
}

static void *track_alloc(dcp_gguf *g, size_t bytes)
{
    if (g->n_allocs == g->cap_allocs) {
        uint64_t cap = g->cap_allocs ? 2 * g->cap_allocs : 16;
        void **a = realloc(g->allocs, cap * sizeof *a);
        if (!a) return NULL;
        g->allocs = a;
        g->cap_allocs = cap;
    }
    void *p = malloc(bytes ? bytes : 1);
    if (p) g->allocs[g->n_allocs++] = p;
    return p;
}

/* Reads a GGUF string (u64 length + bytes) into a NUL-terminated arena copy. On failure *s is
 * NULL and *len 0. */
static dcp_status read_string(cursor *c, const char *ctx, const char *what, const char **s,
                              uint64_t *len)
{
    uint64_t at = c->off, n;
    *s = NULL;
    *len = 0;
    dcp_status st = read_u64(c, ctx, what, &n);
    if (st) return st;
    if (n > left(c)) {
        c->off = at;
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s%s%s length %llu runs past the end of "
                        "the file (%llu bytes left, file size %llu)", c->g->name, (ull)at, ctx,
                        *ctx ? ": " : "", what, (ull)n, (ull)left(c), (ull)c->g->size);
    }
    char *p = arena_alloc(c->g, n + 1);
    if (!p) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", c->g->name);
    memcpy(p, c->g->base + c->off, n);
    p[n] = '\0';
    c->off += n;
    *s = p;
    *len = n;
    return DCP_OK;
}

/* ---- name hash tables ---------------------------------------------------------------------- */

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; ++s) h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

static uint64_t hash_cap_for(uint64_t n)
{
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    return cap;
}

/* Inserts index i (name at names[i]); returns the index already holding the same name, or -1. */
static int64_t hash_insert(uint32_t *table, uint64_t cap, const char *name, uint32_t i,
                           const char *(*name_of)(const dcp_gguf *, uint32_t), const dcp_gguf *g)
{
    uint64_t h = hash_name(name) & (cap - 1);
    for (;;) {
        if (!table[h]) {
            table[h] = i + 1;
            return -1;
        }
        if (strcmp(name_of(g, table[h] - 1), name) == 0) return table[h] - 1;
        h = (h + 1) & (cap - 1);
    }
}

static int64_t hash_find(const uint32_t *table, uint64_t cap, const char *name,
                         const char *(*name_of)(const dcp_gguf *, uint32_t), const dcp_gguf *g)
{
    if (!table) return -1;
    uint64_t h = hash_name(name) & (cap - 1);
    while (table[h]) {
        if (strcmp(name_of(g, table[h] - 1), name) == 0) return table[h] - 1;
        h = (h + 1) & (cap - 1);
    }
    return -1;
}

static const char *kv_name(const dcp_gguf *g, uint32_t i) { return g->kvs[i].key; }
static const char *tensor_name(const dcp_gguf *g, uint32_t i) { return g->tensors[i].name; }

/* ---- metadata ------------------------------------------------------------------------------ */

static dcp_status read_scalar(cursor *c, const char *ctx, dcp_gguf_type type, dcp_gguf_kv *kv)
{
    uint32_t n = dcp_gguf_type_size(type);
    dcp_status st = need(c, n, ctx, dcp_gguf_type_name(type));
    if (st) return st;
    const uint8_t *p = c->g->base + c->off;
    uint64_t raw = le(p, n);
    switch (type) {
    case DCP_GGUF_TYPE_UINT8:
    case DCP_GGUF_TYPE_UINT16:
    case DCP_GGUF_TYPE_UINT32:
    case DCP_GGUF_TYPE_UINT64: kv->v.u64 = raw; break;
    case DCP_GGUF_TYPE_INT8: kv->v.i64 = (int8_t)raw; break;
    case DCP_GGUF_TYPE_INT16: kv->v.i64 = (int16_t)raw; break;
    case DCP_GGUF_TYPE_INT32: kv->v.i64 = (int32_t)raw; break;
    case DCP_GGUF_TYPE_INT64: kv->v.i64 = (int64_t)raw; break;
    case DCP_GGUF_TYPE_FLOAT32: {
        float f;
        uint32_t u = (uint32_t)raw;
        memcpy(&f, &u, 4);
        kv->v.f64 = f;
        break;
    }
    case DCP_GGUF_TYPE_FLOAT64: memcpy(&kv->v.f64, &raw, 8); break;
    case DCP_GGUF_TYPE_BOOL:
        if (raw > 1)
            return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: bool value %u is not 0 or 1",
                            c->g->name, (ull)c->off, ctx, (unsigned)raw);
        kv->v.b = raw != 0;
        break;
    default: return dcp_fail(DCP_ERR_INTERNAL, "read_scalar: type %d", (int)type);
    }
    c->off += n;
    return DCP_OK;
}

static dcp_status read_array(cursor *c, const char *ctx, dcp_gguf_kv *kv)
{
    uint64_t at = c->off;
    uint32_t et;
    uint64_t n;
    dcp_status st = read_u32(c, ctx, "array element type", &et);
    if (st) return st;
    if (et == DCP_GGUF_TYPE_ARRAY)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: offset %llu: %s: arrays of arrays are not "
                        "supported", c->g->name, (ull)at, ctx);
    if (et >= DCP_GGUF_TYPE_COUNT)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: unknown array element type %u",
                        c->g->name, (ull)at, ctx, et);
    uint64_t len_at = c->off;
    st = read_u64(c, ctx, "array length", &n);
    if (st) return st;
    kv->array_type = (dcp_gguf_type)et;
    kv->array_len = n;
    if (et == DCP_GGUF_TYPE_STRING) {
        /* each string takes at least its 8-byte length */
        if (n > left(c) / 8)
            return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: array of %llu strings cannot fit "
                            "in the %llu bytes left (file size %llu)", c->g->name, (ull)len_at, ctx,
                            (ull)n, (ull)left(c), (ull)c->g->size);
        dcp_gguf_str *items = track_alloc(c->g, (size_t)n * sizeof *items);
        if (!items) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", c->g->name);
        char elem[64];
        for (uint64_t i = 0; i < n; ++i) {
            snprintf(elem, sizeof elem, "string element %llu", (ull)i);
            st = read_string(c, ctx, elem, &items[i].s, &items[i].len);
            if (st) return st;
        }
        kv->array_data = items;
        return DCP_OK;
    }
    uint32_t es = dcp_gguf_type_size((dcp_gguf_type)et);
    if (n > left(c) / es)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: array of %llu %s elements (%u bytes "
                        "each) runs past the end of the file (%llu bytes left, file size %llu)",
                        c->g->name, (ull)len_at, ctx, (ull)n, dcp_gguf_type_name(et), es,
                        (ull)left(c), (ull)c->g->size);
    kv->array_data = c->g->base + c->off;
    if (et == DCP_GGUF_TYPE_BOOL) {
        for (uint64_t i = 0; i < n; ++i)
            if (c->g->base[c->off + i] > 1)
                return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: bool element %llu has value "
                                "%u, not 0 or 1", c->g->name, (ull)(c->off + i), ctx, (ull)i,
                                c->g->base[c->off + i]);
    }
    c->off += n * es;
    return DCP_OK;
}

static dcp_status read_kv(cursor *c, uint64_t index, dcp_gguf_kv *kv)
{
    char ctx[320];
    uint64_t key_len;
    kv->offset = c->off;
    snprintf(ctx, sizeof ctx, "key/value %llu", (ull)index);
    dcp_status st = read_string(c, ctx, "key", &kv->key, &key_len);
    if (st) return st;
    if (strlen(kv->key) != key_len)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: key contains a NUL byte",
                        c->g->name, (ull)kv->offset, ctx);
    snprintf(ctx, sizeof ctx, "key '%.256s'", kv->key);
    uint64_t type_at = c->off;
    uint32_t type;
    st = read_u32(c, ctx, "value type", &type);
    if (st) return st;
    if (type >= DCP_GGUF_TYPE_COUNT)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: unknown value type %u", c->g->name,
                        (ull)type_at, ctx, type);
    kv->type = (dcp_gguf_type)type;
    if (type == DCP_GGUF_TYPE_STRING) return read_string(c, ctx, "string value", &kv->str, &kv->str_len);
    if (type == DCP_GGUF_TYPE_ARRAY) return read_array(c, ctx, kv);
    return read_scalar(c, ctx, kv->type, kv);
}

/* ---- tensors ------------------------------------------------------------------------------- */

static dcp_status read_tensor_info(cursor *c, uint64_t index, dcp_gguf_tensor *t)
{
    char ctx[320];
    uint64_t name_len, at = c->off;
    snprintf(ctx, sizeof ctx, "tensor %llu", (ull)index);
    dcp_status st = read_string(c, ctx, "name", &t->name, &name_len);
    if (st) return st;
    if (strlen(t->name) != name_len)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: name contains a NUL byte",
                        c->g->name, (ull)at, ctx);
    snprintf(ctx, sizeof ctx, "tensor %.256s", t->name);
    uint64_t dims_at = c->off;
    st = read_u32(c, ctx, "dimension count", &t->n_dims);
    if (st) return st;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: %u dimensions (allowed 1..%d)",
                        c->g->name, (ull)dims_at, ctx, t->n_dims, GGUF_MAX_DIMS);
    t->n_elements = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; ++d) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; ++d) {
        uint64_t ne_at = c->off;
        st = read_u64(c, ctx, "dimension", &t->ne[d]);
        if (st) return st;
        if (t->ne[d] > (uint64_t)INT64_MAX)
            return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: dimension %u is %llu (more than "
                            "2^63-1)", c->g->name, (ull)ne_at, ctx, d, (ull)t->ne[d]);
        if (t->ne[d] && t->n_elements > (uint64_t)INT64_MAX / t->ne[d])
            return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: element count overflows at "
                            "dimension %u (%llu)", c->g->name, (ull)ne_at, ctx, d, (ull)t->ne[d]);
        t->n_elements *= t->ne[d];
    }
    uint64_t type_at = c->off;
    uint32_t type;
    st = read_u32(c, ctx, "type", &type);
    if (st) return st;
    t->type = (dcp_ggml_type)type;
    uint32_t be, bb;
    if (!dcp_ggml_type_block(t->type, &be, &bb))
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: unknown tensor type %u", c->g->name,
                        (ull)type_at, ctx, type);
    if (t->ne[0] % be)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: ne[0] = %llu is not a multiple of "
                        "the %s block size %u", c->g->name, (ull)dims_at, ctx, (ull)t->ne[0],
                        dcp_ggml_type_name(t->type), be);
    uint64_t blocks = t->n_elements / be;
    if (blocks > UINT64_MAX / bb)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: byte size overflows (%llu elements "
                        "of %s)", c->g->name, (ull)dims_at, ctx, (ull)t->n_elements,
                        dcp_ggml_type_name(t->type));
    t->size = blocks * bb;
    uint64_t off_at = c->off;
    st = read_u64(c, ctx, "data offset", &t->offset);
    if (st) return st;
    if (t->offset % c->g->alignment)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: %s: data offset %llu is not a multiple "
                        "of the alignment %llu", c->g->name, (ull)off_at, ctx, (ull)t->offset,
                        (ull)c->g->alignment);
    return DCP_OK;
}

static int cmp_by_offset(const void *a, const void *b, void *ctx);

/* Sorts tensor indices by data offset (insertion into a merge sort; qsort has no context). */
static void sort_by_offset(const dcp_gguf *g, uint32_t *idx, uint32_t *tmp, uint64_t n)
{
    if (n < 2) return;
    uint64_t h = n / 2;
    sort_by_offset(g, idx, tmp, h);
    sort_by_offset(g, idx + h, tmp, n - h);
    uint64_t i = 0, j = h, k = 0;
    while (i < h && j < n)
        tmp[k++] = cmp_by_offset(&idx[j], &idx[i], (void *)g) < 0 ? idx[j++] : idx[i++];
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

static int cmp_by_offset(const void *a, const void *b, void *ctx)
{
    const dcp_gguf *g = ctx;
    uint64_t x = g->tensors[*(const uint32_t *)a].offset, y = g->tensors[*(const uint32_t *)b].offset;
    return x < y ? -1 : x > y;
}

static dcp_status check_extents(dcp_gguf *g)
{
    dcp_status st = DCP_OK;
    uint32_t *idx = NULL, *tmp = NULL;
    uint64_t data_bytes = g->data_offset <= g->size ? g->size - g->data_offset : 0;
    for (uint64_t i = 0; i < g->n_tensors; ++i) {
        const dcp_gguf_tensor *t = &g->tensors[i];
        if (t->offset > data_bytes || t->size > data_bytes - t->offset) {
            /* absolute [start, end); the sums may wrap for hostile offsets, so say so */
            uint64_t start = g->data_offset + t->offset;
            bool wraps = t->offset > UINT64_MAX - g->data_offset || t->size > UINT64_MAX - start;
            char range[96];
            if (wraps)
                snprintf(range, sizeof range, "%llu + %llu, + %llu (beyond 2^64)",
                         (ull)g->data_offset, (ull)t->offset, (ull)t->size);
            else
                snprintf(range, sizeof range, "%llu, %llu", (ull)start, (ull)(start + t->size));
            return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: tensor %s: data [%s) extends past end "
                            "of file (size %llu)", g->name, (ull)g->data_offset, t->name, range,
                            (ull)g->size);
        }
        g->tensors[i].data = g->base + g->data_offset + t->offset;
    }
    idx = malloc((g->n_tensors + 1) * sizeof *idx);
    tmp = malloc((g->n_tensors + 1) * sizeof *tmp);
    if (!idx || !tmp) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", g->name);
        goto fail;
    }
    for (uint64_t i = 0; i < g->n_tensors; ++i) idx[i] = (uint32_t)i;
    sort_by_offset(g, idx, tmp, g->n_tensors);
    for (uint64_t i = 1; i < g->n_tensors; ++i) {
        const dcp_gguf_tensor *a = &g->tensors[idx[i - 1]], *b = &g->tensors[idx[i]];
        if (a->size && b->size && a->offset + a->size > b->offset) {
            st = dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: tensor %s: data [%llu, %llu) overlaps "
                          "tensor %s at [%llu, %llu)", g->name, (ull)(g->data_offset + b->offset),
                          b->name, (ull)(g->data_offset + b->offset),
                          (ull)(g->data_offset + b->offset + b->size), a->name,
                          (ull)(g->data_offset + a->offset),
                          (ull)(g->data_offset + a->offset + a->size));
            goto fail;
        }
    }
fail:
    free(idx);
    free(tmp);
    return st;
}

/* ---- open / close -------------------------------------------------------------------------- */

static dcp_status parse(dcp_gguf *g)
{
    cursor c = {g, 0};
    uint32_t magic;
    uint64_t n_tensors, n_kv;
    dcp_status st;
    if (g->size == 0) return dcp_fail(DCP_ERR_FORMAT, "%s: offset 0: empty file", g->name);
    if (g->size < 4 || (magic = (uint32_t)le(g->base, 4)) != GGUF_MAGIC)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset 0: bad magic (not a GGUF file; expected "
                        "\"GGUF\")", g->name);
    c.off = 4;
    if ((st = read_u32(&c, "header", "version", &g->version))) return st;
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version)
            return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: offset 4: GGUF version 0x%08x looks "
                            "big-endian; only little-endian files are supported", g->name,
                            g->version);
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: offset 4: unsupported GGUF version %u (supported: "
                        "2, 3)", g->name, g->version);
    }
    if ((st = read_u64(&c, "header", "tensor count", &n_tensors))) return st;
    if ((st = read_u64(&c, "header", "key/value count", &n_kv))) return st;
    /* A key/value takes at least 13 bytes (key length, type, 1-byte value), a tensor info 32. */
    if (n_kv > left(&c) / 13)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset 16: key/value count %llu cannot fit in the "
                        "%llu bytes left (file size %llu)", g->name, (ull)n_kv, (ull)left(&c),
                        (ull)g->size);
    if (n_tensors > left(&c) / 32)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset 8: tensor count %llu cannot fit in the %llu "
                        "bytes left (file size %llu)", g->name, (ull)n_tensors, (ull)left(&c),
                        (ull)g->size);
    if (n_kv >= UINT32_MAX || n_tensors >= UINT32_MAX)
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: more than 2^32-2 keys or tensors", g->name);

    g->kvs = calloc(n_kv ? n_kv : 1, sizeof *g->kvs);
    g->kv_hash_cap = hash_cap_for(n_kv);
    g->kv_hash = calloc(g->kv_hash_cap, sizeof *g->kv_hash);
    if (!g->kvs || !g->kv_hash) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", g->name);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; ++i) {
        dcp_gguf_kv *kv = &g->kvs[i];
        if ((st = read_kv(&c, i, kv))) return st;
        g->n_kv = i + 1;
        int64_t dup = hash_insert(g->kv_hash, g->kv_hash_cap, kv->key, (uint32_t)i, kv_name, g);
        if (dup >= 0)
            return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: duplicated key '%s' (first at offset "
                            "%llu)", g->name, (ull)kv->offset, kv->key, (ull)g->kvs[dup].offset);
        if (strcmp(kv->key, "general.alignment") == 0) {
            if (kv->type != DCP_GGUF_TYPE_UINT32)
                return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: general.alignment has type %s "
                                "(expected uint32)", g->name, (ull)kv->offset,
                                dcp_gguf_type_name(kv->type));
            if (kv->v.u64 == 0 || (kv->v.u64 & (kv->v.u64 - 1)))
                return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: general.alignment %llu is not a "
                                "power of two", g->name, (ull)kv->offset, (ull)kv->v.u64);
            g->alignment = kv->v.u64;
        }
    }

    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->tensor_hash_cap = hash_cap_for(n_tensors);
    g->tensor_hash = calloc(g->tensor_hash_cap, sizeof *g->tensor_hash);
    if (!g->tensors || !g->tensor_hash)
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", g->name);
    for (uint64_t i = 0; i < n_tensors; ++i) {
        uint64_t at = c.off;
        dcp_gguf_tensor *t = &g->tensors[i];
        if ((st = read_tensor_info(&c, i, t))) return st;
        g->n_tensors = i + 1;
        int64_t dup = hash_insert(g->tensor_hash, g->tensor_hash_cap, t->name, (uint32_t)i,
                                  tensor_name, g);
        if (dup >= 0)
            return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: duplicated tensor name '%s'",
                            g->name, (ull)at, t->name);
    }
    /* c.off <= size, and alignment <= 2^31, so this cannot overflow. */
    g->data_offset = (c.off + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors && g->data_offset > g->size)
        return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: tensor data section starts past the end "
                        "of the file (size %llu)", g->name, (ull)g->data_offset, (ull)g->size);
    return check_extents(g);
}

static dcp_status open_common(dcp_gguf *g, dcp_gguf **out)
{
    dcp_status st = parse(g);
    if (st) {
        dcp_gguf_close(g);
        return st;
    }
    *out = g;
    return DCP_OK;
}

dcp_status dcp_gguf_open_memory(const void *data, size_t size, const char *name, dcp_gguf **out)
{
    *out = NULL;
    dcp_gguf *g = calloc(1, sizeof *g);
    if (!g) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of memory");
    g->name = strdup(name ? name : "<memory>");
    if (!g->name) {
        free(g);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "out of memory");
    }
    g->base = data;
    g->size = size;
    return open_common(g, out);
}

/* Opens one file (a whole model or one part of a split model). */
static dcp_status open_file(const char *path, dcp_gguf **out)
{
    dcp_status st = DCP_OK;
    dcp_gguf *g = NULL;
    struct stat sb;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return dcp_fail(DCP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(fd, &sb) != 0) {
        st = dcp_fail(DCP_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
        goto fail;
    }
    if (!S_ISREG(sb.st_mode)) {
        st = dcp_fail(DCP_ERR_IO, "%s: not a regular file", path);
        goto fail;
    }
    g = calloc(1, sizeof *g);
    if (!g || !(g->name = strdup(path))) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    g->size = (uint64_t)sb.st_size;
    if (g->size > 0) {
        void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            st = dcp_fail(DCP_ERR_IO, "%s: cannot mmap %llu bytes: %s", path, (ull)g->size,
                          strerror(errno));
            goto fail;
        }
        g->map = m;
        g->base = m;
    }
    close(fd);
    return open_common(g, out);
fail:
    if (g) free(g->name);
    free(g);
    close(fd);
    return st;
}

/* ---- split models (llama.cpp's gguf-split: NAME-00001-of-00003.gguf, ...) ---------------------- */

int dcp_gguf_split_path(char *buf, size_t size, const char *prefix, uint32_t part, uint32_t count)
{
    return snprintf(buf, size, "%s-%05u-of-%05u.gguf", prefix, part + 1, count);
}

/* A split key of g as an unsigned value; *present false when absent. */
static dcp_status split_key(const dcp_gguf *g, const char *key, bool *present, uint64_t *v)
{
    *present = dcp_gguf_kv_find(g, key) != NULL;
    *v = 0;
    return *present ? dcp_gguf_get_uint(g, key, v) : DCP_OK;
}

static dcp_status open_split(dcp_gguf *first, uint64_t count, dcp_gguf **out)
{
    dcp_status st = DCP_OK;
    const char *path = first->name;
    char *prefix = NULL, *part_path = NULL;
    dcp_gguf *m = NULL;
    uint64_t no, total;
    bool has;
    *out = NULL;
    DCP_TRY(split_key(first, "split.no", &has, &no));
    if (no != 0) {
        char tail[40], first_name[300] = "";
        snprintf(tail, sizeof tail, "-%05llu-of-%05llu.gguf", (ull)no + 1, (ull)count);
        size_t pn = strlen(path), tl = strlen(tail);
        const char *base = strrchr(path, '/');
        base = base ? base + 1 : path;
        if (pn > tl && strcmp(path + pn - tl, tail) == 0 && (size_t)(path + pn - tl - base) < 256)
            snprintf(first_name, sizeof first_name, ": %.*s-00001-of-%05llu.gguf", (int)(path + pn - tl - base), base,
                     (ull)count);
        st = dcp_fail(DCP_ERR_FORMAT, "%s: this is part %llu of %llu of a split model (split.no = %llu): open the "
                      "first part%s%s", path, (ull)no + 1, (ull)count, (ull)no, first_name[0] ? "" : " (-00001-of-N)",
                      first_name);
        goto fail;
    }
    DCP_TRY(split_key(first, "split.tensors.count", &has, &total));
    if (!has) {
        st = dcp_fail(DCP_ERR_FORMAT, "%s: split model of %llu parts without the key split.tensors.count", path,
                      (ull)count);
        goto fail;
    }
    if (count > 99999) {
        st = dcp_fail(DCP_ERR_FORMAT, "%s: split.count %llu is more than 99999 parts", path, (ull)count);
        goto fail;
    }
    /* The other parts' names follow from the first's: PREFIX-00001-of-0000N.gguf. */
    char tail[32];
    snprintf(tail, sizeof tail, "-%05u-of-%05u.gguf", 1u, (unsigned)count);
    size_t n = strlen(path), tn = strlen(tail);
    if (n <= tn || strcmp(path + n - tn, tail) != 0) {
        st = dcp_fail(DCP_ERR_FORMAT, "%s: first part of a split model of %llu parts, but its name does not end in "
                      "%s, so the other parts cannot be found (gguf-split's naming: NAME%s, NAME-00002-of-%05llu.gguf, "
                      "...)", path, (ull)count, tail, tail, (ull)count);
        goto fail;
    }
    prefix = strndup(path, n - tn);
    part_path = malloc(n + 1);
    m = calloc(1, sizeof *m);
    if (!prefix || !part_path || !m || !(m->name = strdup(path)) ||
        !(m->parts = calloc((size_t)count, sizeof *m->parts))) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    m->parts[0] = first;
    m->n_parts = 1;
    first = NULL;
    uint64_t n_tensors = m->parts[0]->n_tensors;
    for (uint32_t i = 1; i < count; i++) {
        dcp_gguf_split_path(part_path, n + 1, prefix, i, (uint32_t)count);
        if (access(part_path, F_OK) != 0) {
            st = dcp_fail(DCP_ERR_IO, "%s: part %u of %llu of the split model is missing: %s: %s", path, i + 1,
                          (ull)count, part_path, strerror(errno));
            goto fail;
        }
        dcp_gguf *p = NULL;
        if ((st = open_file(part_path, &p))) {
            dcp_fail_context(st, "%s: part %u of %llu of the split model", path, i + 1, (ull)count);
            goto fail;
        }
        m->parts[m->n_parts++] = p;
        uint64_t pc, pno, pt;
        bool has_c, has_no, has_t;
        if ((st = split_key(p, "split.count", &has_c, &pc)) || (st = split_key(p, "split.no", &has_no, &pno)) ||
            (st = split_key(p, "split.tensors.count", &has_t, &pt)))
            goto fail;
        if (!has_c || !has_no || !has_t) {
            st = dcp_fail(DCP_ERR_FORMAT, "%s: not a part of a split model (no %s), expected part %u of %llu of %s",
                          part_path, !has_c ? "split.count" : !has_no ? "split.no" : "split.tensors.count", i + 1,
                          (ull)count, path);
            goto fail;
        }
        if (pc != count) {
            st = dcp_fail(DCP_ERR_FORMAT, "%s: split.count is %llu but %s has %llu: a part of another split model",
                          part_path, (ull)pc, path, (ull)count);
            goto fail;
        }
        if (pt != total) {
            st = dcp_fail(DCP_ERR_FORMAT, "%s: split.tensors.count is %llu but %s has %llu: a part of another split "
                          "model", part_path, (ull)pt, path, (ull)total);
            goto fail;
        }
        if (pno != i) {
            st = dcp_fail(DCP_ERR_FORMAT, "%s: split.no is %llu (part %llu), expected %u (part %u of %llu): parts "
                          "out of order or renamed", part_path, (ull)pno, (ull)pno + 1, i, i + 1, (ull)count);
            goto fail;
        }
        n_tensors += p->n_tensors;
    }
    if (n_tensors != total) {
        st = dcp_fail(DCP_ERR_FORMAT, "%s: the %llu parts of the split model hold %llu tensors, split.tensors.count "
                      "says %llu", path, (ull)count, (ull)n_tensors, (ull)total);
        goto fail;
    }
    /* The merged directory: the parts' tensors in part order, names unique over all parts. */
    m->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *m->tensors);
    m->tensor_hash_cap = hash_cap_for(n_tensors);
    m->tensor_hash = calloc(m->tensor_hash_cap, sizeof *m->tensor_hash);
    if (!m->tensors || !m->tensor_hash) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    uint32_t *part_of = malloc((n_tensors ? n_tensors : 1) * sizeof *part_of);
    if (!part_of) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "%s: out of memory", path);
        goto fail;
    }
    for (uint32_t i = 0; i < m->n_parts; i++) {
        const dcp_gguf *p = m->parts[i];
        for (uint64_t k = 0; k < p->n_tensors; k++) {
            dcp_gguf_tensor *t = &m->tensors[m->n_tensors];
            *t = p->tensors[k];
            t->part = i;
            part_of[m->n_tensors] = i;
            int64_t dup = hash_insert(m->tensor_hash, m->tensor_hash_cap, t->name, (uint32_t)m->n_tensors,
                                      tensor_name, m);
            if (dup >= 0) {
                st = dcp_fail(DCP_ERR_FORMAT, "%s: tensor %s is also in %s (a tensor name twice in the split model)",
                              p->name, t->name, m->parts[part_of[dup]]->name);
                free(part_of);
                goto fail;
            }
            m->n_tensors++;
        }
    }
    free(part_of);
    /* The model's keys are the first part's. */
    const dcp_gguf *p0 = m->parts[0];
    m->kvs = p0->kvs;
    m->n_kv = p0->n_kv;
    m->kv_hash = p0->kv_hash;
    m->kv_hash_cap = p0->kv_hash_cap;
    m->version = p0->version;
    m->alignment = p0->alignment;
    m->data_offset = p0->data_offset;
    for (uint32_t i = 0; i < m->n_parts; i++) m->size += m->parts[i]->size;
    *out = m;
    m = NULL;
fail:
    dcp_gguf_close(first);
    dcp_gguf_close(m);
    free(prefix);
    free(part_path);
    return st;
}

dcp_status dcp_gguf_open(const char *path, dcp_gguf **out)
{
    dcp_gguf *g = NULL;
    uint64_t count;
    bool has;
    *out = NULL;
    dcp_status st = open_file(path, &g);
    if (st) return st;
    if ((st = split_key(g, "split.count", &has, &count))) {
        dcp_gguf_close(g);
        return st;
    }
    if (!has || count <= 1) {
        *out = g;
        return DCP_OK;
    }
    return open_split(g, count, out);
}

void dcp_gguf_close(dcp_gguf *g)
{
    if (!g) return;
    if (g->parts) { /* a split model: the keys are part 0's */
        for (uint32_t i = 0; i < g->n_parts; i++) dcp_gguf_close(g->parts[i]);
        free(g->parts);
        free(g->tensors);
        free(g->tensor_hash);
        free(g->name);
        free(g);
        return;
    }
    if (g->map) munmap(g->map, (size_t)g->size);
    free(g->owned);
    while (g->chunks) {
        dcp_gguf_chunk *next = g->chunks->next;
        free(g->chunks);
        g->chunks = next;
    }
    for (uint64_t i = 0; i < g->n_allocs; ++i) free(g->allocs[i]);
    free(g->allocs);
    free(g->kvs);
    free(g->kv_hash);
    free(g->tensors);
    free(g->tensor_hash);
    free(g->name);
    free(g);
}

/* ---- accessors ----------------------------------------------------------------------------- */

const char *dcp_gguf_name(const dcp_gguf *g) { return g->name; }
uint32_t dcp_gguf_version(const dcp_gguf *g) { return g->version; }
uint64_t dcp_gguf_file_size(const dcp_gguf *g) { return g->size; }
uint64_t dcp_gguf_alignment(const dcp_gguf *g) { return g->alignment; }
uint64_t dcp_gguf_data_offset(const dcp_gguf *g) { return g->data_offset; }
uint64_t dcp_gguf_kv_count(const dcp_gguf *g) { return g->n_kv; }
uint64_t dcp_gguf_tensor_count(const dcp_gguf *g) { return g->n_tensors; }
uint32_t dcp_gguf_part_count(const dcp_gguf *g) { return g->n_parts ? g->n_parts : 1; }

const dcp_gguf *dcp_gguf_part(const dcp_gguf *g, uint32_t i)
{
    if (!g->n_parts) return i == 0 ? g : NULL;
    return i < g->n_parts ? g->parts[i] : NULL;
}

const dcp_gguf_kv *dcp_gguf_kv_at(const dcp_gguf *g, uint64_t index)
{
    return index < g->n_kv ? &g->kvs[index] : NULL;
}

const dcp_gguf_kv *dcp_gguf_kv_find(const dcp_gguf *g, const char *key)
{
    int64_t i = hash_find(g->kv_hash, g->kv_hash_cap, key, kv_name, g);
    return i >= 0 ? &g->kvs[i] : NULL;
}

const dcp_gguf_tensor *dcp_gguf_tensor_at(const dcp_gguf *g, uint64_t index)
{
    return index < g->n_tensors ? &g->tensors[index] : NULL;
}

const dcp_gguf_tensor *dcp_gguf_tensor_find(const dcp_gguf *g, const char *name)
{
    int64_t i = hash_find(g->tensor_hash, g->tensor_hash_cap, name, tensor_name, g);
    return i >= 0 ? &g->tensors[i] : NULL;
}

static bool is_unsigned(dcp_gguf_type t)
{
    return t == DCP_GGUF_TYPE_UINT8 || t == DCP_GGUF_TYPE_UINT16 || t == DCP_GGUF_TYPE_UINT32 ||
           t == DCP_GGUF_TYPE_UINT64;
}

static bool is_signed(dcp_gguf_type t)
{
    return t == DCP_GGUF_TYPE_INT8 || t == DCP_GGUF_TYPE_INT16 || t == DCP_GGUF_TYPE_INT32 ||
           t == DCP_GGUF_TYPE_INT64;
}

static const dcp_gguf_kv *find_or_fail(const dcp_gguf *g, const char *key, dcp_status *st)
{
    const dcp_gguf_kv *kv = dcp_gguf_kv_find(g, key);
    *st = kv ? DCP_OK : dcp_fail(DCP_ERR_FORMAT, "%s: missing key '%s'", g->name, key);
    return kv;
}

static dcp_status type_error(const dcp_gguf *g, const dcp_gguf_kv *kv, const char *want)
{
    return dcp_fail(DCP_ERR_FORMAT, "%s: offset %llu: key '%s' has type %s, expected %s", g->name,
                    (ull)kv->offset, kv->key, dcp_gguf_type_name(kv->type), want);
}

dcp_status dcp_gguf_get_uint(const dcp_gguf *g, const char *key, uint64_t *out)
{
    dcp_status st;
    const dcp_gguf_kv *kv = find_or_fail(g, key, &st);
    if (!kv) return st;
    if (is_unsigned(kv->type)) *out = kv->v.u64;
    else if (is_signed(kv->type) && kv->v.i64 >= 0) *out = (uint64_t)kv->v.i64;
    else return type_error(g, kv, "a non-negative integer");
    return DCP_OK;
}

dcp_status dcp_gguf_get_int(const dcp_gguf *g, const char *key, int64_t *out)
{
    dcp_status st;
    const dcp_gguf_kv *kv = find_or_fail(g, key, &st);
    if (!kv) return st;
    if (is_signed(kv->type)) *out = kv->v.i64;
    else if (is_unsigned(kv->type) && kv->v.u64 <= (uint64_t)INT64_MAX) *out = (int64_t)kv->v.u64;
    else return type_error(g, kv, "an integer that fits int64");
    return DCP_OK;
}

dcp_status dcp_gguf_get_float(const dcp_gguf *g, const char *key, double *out)
{
    dcp_status st;
    const dcp_gguf_kv *kv = find_or_fail(g, key, &st);
    if (!kv) return st;
    if (kv->type == DCP_GGUF_TYPE_FLOAT32 || kv->type == DCP_GGUF_TYPE_FLOAT64) *out = kv->v.f64;
    else if (is_unsigned(kv->type)) *out = (double)kv->v.u64;
    else if (is_signed(kv->type)) *out = (double)kv->v.i64;
    else return type_error(g, kv, "a number");
    return DCP_OK;
}

dcp_status dcp_gguf_get_bool(const dcp_gguf *g, const char *key, bool *out)
{
    dcp_status st;
    const dcp_gguf_kv *kv = find_or_fail(g, key, &st);
    if (!kv) return st;
    if (kv->type != DCP_GGUF_TYPE_BOOL) return type_error(g, kv, "bool");
    *out = kv->v.b;
    return DCP_OK;
}

dcp_status dcp_gguf_get_string(const dcp_gguf *g, const char *key, const char **out, size_t *len)
{
    dcp_status st;
    const dcp_gguf_kv *kv = find_or_fail(g, key, &st);
    if (!kv) return st;
    if (kv->type != DCP_GGUF_TYPE_STRING) return type_error(g, kv, "string");
    *out = kv->str;
    if (len) *len = (size_t)kv->str_len;
    return DCP_OK;
}

static dcp_status array_check(const dcp_gguf_kv *kv, uint64_t i)
{
    if (kv->type != DCP_GGUF_TYPE_ARRAY)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "key '%s' is not an array", kv->key);
    if (i >= kv->array_len)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "key '%s': index %llu out of range (length %llu)",
                        kv->key, (ull)i, (ull)kv->array_len);
    return DCP_OK;
}

/* Element i of a numeric array as a scalar kv (type, v). */
static void array_elem(const dcp_gguf_kv *kv, uint64_t i, dcp_gguf_kv *e)
{
    uint32_t es = dcp_gguf_type_size(kv->array_type);
    const uint8_t *p = (const uint8_t *)kv->array_data + i * es;
    uint64_t raw = le(p, es);
    e->type = kv->array_type;
    switch (kv->array_type) {
    case DCP_GGUF_TYPE_INT8: e->v.i64 = (int8_t)raw; break;
    case DCP_GGUF_TYPE_INT16: e->v.i64 = (int16_t)raw; break;
    case DCP_GGUF_TYPE_INT32: e->v.i64 = (int32_t)raw; break;
    case DCP_GGUF_TYPE_INT64: e->v.i64 = (int64_t)raw; break;
    case DCP_GGUF_TYPE_FLOAT32: {
        float f;
        uint32_t u = (uint32_t)raw;
        memcpy(&f, &u, 4);
        e->v.f64 = f;
        break;
    }
    case DCP_GGUF_TYPE_FLOAT64: memcpy(&e->v.f64, &raw, 8); break;
    case DCP_GGUF_TYPE_BOOL: e->v.b = raw != 0; break;
    default: e->v.u64 = raw; break;
    }
}

dcp_status dcp_gguf_array_uint(const dcp_gguf_kv *kv, uint64_t i, uint64_t *out)
{
    dcp_status st = array_check(kv, i);
    if (st) return st;
    dcp_gguf_kv e;
    array_elem(kv, i, &e);
    if (is_unsigned(e.type)) *out = e.v.u64;
    else if (is_signed(e.type) && e.v.i64 >= 0) *out = (uint64_t)e.v.i64;
    else return dcp_fail(DCP_ERR_FORMAT, "key '%s': element %llu (%s) is not a non-negative integer",
                         kv->key, (ull)i, dcp_gguf_type_name(e.type));
    return DCP_OK;
}

dcp_status dcp_gguf_array_int(const dcp_gguf_kv *kv, uint64_t i, int64_t *out)
{
    dcp_status st = array_check(kv, i);
    if (st) return st;
    dcp_gguf_kv e;
    array_elem(kv, i, &e);
    if (is_signed(e.type)) *out = e.v.i64;
    else if (is_unsigned(e.type) && e.v.u64 <= (uint64_t)INT64_MAX) *out = (int64_t)e.v.u64;
    else return dcp_fail(DCP_ERR_FORMAT, "key '%s': element %llu (%s) is not an int64", kv->key,
                         (ull)i, dcp_gguf_type_name(e.type));
    return DCP_OK;
}

dcp_status dcp_gguf_array_float(const dcp_gguf_kv *kv, uint64_t i, double *out)
{
    dcp_status st = array_check(kv, i);
    if (st) return st;
    dcp_gguf_kv e;
    array_elem(kv, i, &e);
    if (e.type == DCP_GGUF_TYPE_FLOAT32 || e.type == DCP_GGUF_TYPE_FLOAT64) *out = e.v.f64;
    else if (is_unsigned(e.type)) *out = (double)e.v.u64;
    else if (is_signed(e.type)) *out = (double)e.v.i64;
    else return dcp_fail(DCP_ERR_FORMAT, "key '%s': element %llu (%s) is not a number", kv->key,
                         (ull)i, dcp_gguf_type_name(e.type));
    return DCP_OK;
}

dcp_status dcp_gguf_array_string(const dcp_gguf_kv *kv, uint64_t i, const char **out, size_t *len)
{
    dcp_status st = array_check(kv, i);
    if (st) return st;
    if (kv->array_type != DCP_GGUF_TYPE_STRING)
        return dcp_fail(DCP_ERR_FORMAT, "key '%s' is an array of %s, not of strings", kv->key,
                        dcp_gguf_type_name(kv->array_type));
    const dcp_gguf_str *items = kv->array_data;
    *out = items[i].s;
    if (len) *len = (size_t)items[i].len;
    return DCP_OK;
}

dcp_status dcp_gguf_tensor_to_f32(const dcp_gguf *g, const dcp_gguf_tensor *t, float *dst)
{
    if (!dcp_ggml_type_supported(t->type))
        return dcp_fail(DCP_ERR_UNSUPPORTED, "%s: tensor %s has type %s, which dcp-vk does not "
                        "read (supported: " DCP_GGML_SUPPORTED_LIST ")", g->name, t->name,
                        dcp_ggml_type_name(t->type));
    return dcp_ggml_to_f32(t->type, t->data, dst, t->n_elements);
}
