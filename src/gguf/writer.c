/* GGUF v3 writer: key/values are serialised as they are added, tensors are copied (or produced at
 * write time by a fill callback), and the file is laid out as header, key/values, tensor infos,
 * padding to the alignment, then each tensor's data padded to the alignment. The file is written
 * to an exclusive temporary beside the target (mkstemp) and renamed over it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/error.h"
#include "gguf/gguf_internal.h"

typedef unsigned long long ull;

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

typedef struct wtensor {
    char *name;
    dcp_ggml_type type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint8_t *data;                /* copied bytes, or NULL when fill produces them */
    uint64_t size;
    dcp_gguf_tensor_fill_fn fill; /* with data NULL: called at write time */
    void *fill_user;
} wtensor;

struct dcp_gguf_writer {
    uint32_t alignment;
    buf kv;                 /* serialised key/value records */
    uint64_t n_kv;
    char **keys;            /* [n_kv], for the duplicate check */
    wtensor *tensors;       /* [n_tensors] */
    uint64_t n_tensors, cap_tensors;
    bool failed;            /* an out-of-memory left the buffer inconsistent */
};

static bool buf_put(buf *b, const void *data, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return false;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, data, n);
    b->n += n;
    return true;
}

static bool put_le(buf *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; ++i) tmp[i] = (uint8_t)(v >> (8 * i));
    return buf_put(b, tmp, n);
}

static bool put_str(buf *b, const char *s, uint64_t n)
{
    return put_le(b, n, 8) && buf_put(b, s, (size_t)n);
}

dcp_status dcp_gguf_writer_create(uint32_t alignment, dcp_gguf_writer **out)
{
    *out = NULL;
    if (alignment == 0) alignment = 32;
    if (alignment & (alignment - 1))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: alignment %u is not a power of two",
                        alignment);
    dcp_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
    w->alignment = alignment;
    if (alignment != 32) {
        dcp_status st = dcp_gguf_writer_set_uint(w, "general.alignment", DCP_GGUF_TYPE_UINT32, alignment);
        if (st) {
            dcp_gguf_writer_destroy(w);
            return st;
        }
    }
    *out = w;
    return DCP_OK;
}

void dcp_gguf_writer_destroy(dcp_gguf_writer *w)
{
    if (!w) return;
    for (uint64_t i = 0; i < w->n_kv; ++i) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; ++i) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w->kv.p);
    free(w);
}

/* Starts a record: checks the key, writes key and type. */
static dcp_status begin_kv(dcp_gguf_writer *w, const char *key, dcp_gguf_type type)
{
    if (w->failed) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: an earlier call ran out of memory");
    for (uint64_t i = 0; i < w->n_kv; ++i)
        if (strcmp(w->keys[i], key) == 0)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: duplicated key '%s'", key);
    char **keys = realloc(w->keys, (w->n_kv + 1) * sizeof *keys);
    if (!keys) goto oom;
    w->keys = keys;
    if (!(keys[w->n_kv] = strdup(key))) goto oom;
    w->n_kv++;
    if (!put_str(&w->kv, key, strlen(key)) || !put_le(&w->kv, (uint32_t)type, 4)) goto oom;
    return DCP_OK;
oom:
    w->failed = true;
    return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
}

static dcp_status oom(dcp_gguf_writer *w)
{
    w->failed = true;
    return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
}

static bool is_int_type(dcp_gguf_type t)
{
    return t == DCP_GGUF_TYPE_UINT8 || t == DCP_GGUF_TYPE_INT8 || t == DCP_GGUF_TYPE_UINT16 ||
           t == DCP_GGUF_TYPE_INT16 || t == DCP_GGUF_TYPE_UINT32 || t == DCP_GGUF_TYPE_INT32 ||
           t == DCP_GGUF_TYPE_UINT64 || t == DCP_GGUF_TYPE_INT64;
}

dcp_status dcp_gguf_writer_set_uint(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, uint64_t v)
{
    if (!is_int_type(type))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: key '%s': %s is not an integer type",
                        key, dcp_gguf_type_name(type));
    dcp_status st = begin_kv(w, key, type);
    if (st) return st;
    return put_le(&w->kv, v, dcp_gguf_type_size(type)) ? DCP_OK : oom(w);
}

dcp_status dcp_gguf_writer_set_int(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, int64_t v)
{
    return dcp_gguf_writer_set_uint(w, key, type, (uint64_t)v);
}

static uint64_t float_bits(dcp_gguf_type type, double v)
{
    if (type == DCP_GGUF_TYPE_FLOAT32) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        return u;
    }
    uint64_t u;
    memcpy(&u, &v, 8);
    return u;
}

dcp_status dcp_gguf_writer_set_float(dcp_gguf_writer *w, const char *key, dcp_gguf_type type, double v)
{
    if (type != DCP_GGUF_TYPE_FLOAT32 && type != DCP_GGUF_TYPE_FLOAT64)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: key '%s': %s is not a float type",
                        key, dcp_gguf_type_name(type));
    dcp_status st = begin_kv(w, key, type);
    if (st) return st;
    return put_le(&w->kv, float_bits(type, v), dcp_gguf_type_size(type)) ? DCP_OK : oom(w);
}

dcp_status dcp_gguf_writer_set_bool(dcp_gguf_writer *w, const char *key, bool v)
{
    dcp_status st = begin_kv(w, key, DCP_GGUF_TYPE_BOOL);
    if (st) return st;
    return put_le(&w->kv, v ? 1 : 0, 1) ? DCP_OK : oom(w);
}

dcp_status dcp_gguf_writer_set_string(dcp_gguf_writer *w, const char *key, const char *s, size_t len)
{
    dcp_status st = begin_kv(w, key, DCP_GGUF_TYPE_STRING);
    if (st) return st;
    return put_str(&w->kv, s, len) ? DCP_OK : oom(w);
}

dcp_status dcp_gguf_writer_set_array(dcp_gguf_writer *w, const char *key, dcp_gguf_type elem_type,
                                     const void *data, uint64_t n)
{
    uint32_t es = dcp_gguf_type_size(elem_type);
    if (!es)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: key '%s': array element type %s is "
                        "not numeric (use set_string_array)", key, dcp_gguf_type_name(elem_type));
    dcp_status st = begin_kv(w, key, DCP_GGUF_TYPE_ARRAY);
    if (st) return st;
    if (!put_le(&w->kv, (uint32_t)elem_type, 4) || !put_le(&w->kv, n, 8)) return oom(w);
    /* Data is given in host order; GGUF is little-endian, and dcp-vk builds only on LE hosts. */
    return buf_put(&w->kv, data, (size_t)(n * es)) ? DCP_OK : oom(w);
}

dcp_status dcp_gguf_writer_set_string_array(dcp_gguf_writer *w, const char *key,
                                            const char *const *strs, const size_t *lens, uint64_t n)
{
    dcp_status st = begin_kv(w, key, DCP_GGUF_TYPE_ARRAY);
    if (st) return st;
    if (!put_le(&w->kv, DCP_GGUF_TYPE_STRING, 4) || !put_le(&w->kv, n, 8)) return oom(w);
    for (uint64_t i = 0; i < n; ++i)
        if (!put_str(&w->kv, strs[i], lens ? lens[i] : strlen(strs[i]))) return oom(w);
    return DCP_OK;
}

dcp_status dcp_gguf_writer_copy_kv(dcp_gguf_writer *w, const dcp_gguf_kv *kv)
{
    switch (kv->type) {
    case DCP_GGUF_TYPE_UINT8:
    case DCP_GGUF_TYPE_UINT16:
    case DCP_GGUF_TYPE_UINT32:
    case DCP_GGUF_TYPE_UINT64: return dcp_gguf_writer_set_uint(w, kv->key, kv->type, kv->v.u64);
    case DCP_GGUF_TYPE_INT8:
    case DCP_GGUF_TYPE_INT16:
    case DCP_GGUF_TYPE_INT32:
    case DCP_GGUF_TYPE_INT64: return dcp_gguf_writer_set_int(w, kv->key, kv->type, kv->v.i64);
    case DCP_GGUF_TYPE_FLOAT32:
    case DCP_GGUF_TYPE_FLOAT64: return dcp_gguf_writer_set_float(w, kv->key, kv->type, kv->v.f64);
    case DCP_GGUF_TYPE_BOOL: return dcp_gguf_writer_set_bool(w, kv->key, kv->v.b);
    case DCP_GGUF_TYPE_STRING: return dcp_gguf_writer_set_string(w, kv->key, kv->str, (size_t)kv->str_len);
    case DCP_GGUF_TYPE_ARRAY:
        if (kv->array_type == DCP_GGUF_TYPE_STRING) {
            dcp_status st = begin_kv(w, kv->key, DCP_GGUF_TYPE_ARRAY);
            if (st) return st;
            const dcp_gguf_str *items = kv->array_data;
            if (!put_le(&w->kv, DCP_GGUF_TYPE_STRING, 4) || !put_le(&w->kv, kv->array_len, 8))
                return oom(w);
            for (uint64_t i = 0; i < kv->array_len; ++i)
                if (!put_str(&w->kv, items[i].s, items[i].len)) return oom(w);
            return DCP_OK;
        }
        return dcp_gguf_writer_set_array(w, kv->key, kv->array_type, kv->array_data, kv->array_len);
    default: break;
    }
    return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: key '%s': bad type %d", kv->key, (int)kv->type);
}

static dcp_status add_tensor(dcp_gguf_writer *w, const char *name, dcp_ggml_type type, uint32_t n_dims,
                             const uint64_t *ne, const void *data, uint64_t size, dcp_gguf_tensor_fill_fn fill,
                             void *fill_user)
{
    uint32_t be, bb;
    if (!dcp_ggml_type_block(type, &be, &bb))
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: unknown type %d", name, (int)type);
    if (n_dims < 1 || n_dims > 4)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: %u dimensions (allowed 1..4)",
                        name, n_dims);
    if (ne[0] % be)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: ne[0] = %llu is not a "
                        "multiple of the %s block size %u", name, (ull)ne[0], dcp_ggml_type_name(type), be);
    uint64_t n = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
        if (ne[d] && n > (uint64_t)INT64_MAX / ne[d])
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: too many elements", name);
        n *= ne[d];
    }
    if (n / be > UINT64_MAX / bb || n / be * bb != size)
        return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: %llu bytes given, the "
                        "shape needs %llu", name, (ull)size, (ull)(n / be * bb));
    for (uint64_t i = 0; i < w->n_tensors; ++i)
        if (strcmp(w->tensors[i].name, name) == 0)
            return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: duplicated tensor name '%s'", name);
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        wtensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
        w->tensors = t;
        w->cap_tensors = cap;
    }
    wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->data = fill ? NULL : malloc(size ? (size_t)size : 1);
    if (!t->name || (!fill && !t->data)) {
        free(t->name);
        free(t->data);
        return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
    }
    if (!fill && size) memcpy(t->data, data, (size_t)size);
    t->fill = fill;
    t->fill_user = fill_user;
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < 4; ++d) t->ne[d] = d < n_dims ? ne[d] : 1;
    t->size = size;
    w->n_tensors++;
    return DCP_OK;
}

dcp_status dcp_gguf_writer_add_tensor(dcp_gguf_writer *w, const char *name, dcp_ggml_type type,
                                      uint32_t n_dims, const uint64_t *ne, const void *data,
                                      uint64_t size)
{
    return add_tensor(w, name, type, n_dims, ne, data, size, NULL, NULL);
}

dcp_status dcp_gguf_writer_add_tensor_fill(dcp_gguf_writer *w, const char *name, dcp_ggml_type type,
                                           uint32_t n_dims, const uint64_t *ne, uint64_t size,
                                           dcp_gguf_tensor_fill_fn fill, void *user)
{
    if (!fill) return dcp_fail(DCP_ERR_INVALID_ARGUMENT, "gguf writer: tensor %s: no fill function", name);
    return add_tensor(w, name, type, n_dims, ne, NULL, size, fill, user);
}

uint64_t dcp_gguf_writer_tensor_count(const dcp_gguf_writer *w) { return w->n_tensors; }

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* The header, key/values and tensor infos, serialised into head. */
static dcp_status build_head(const dcp_gguf_writer *w, buf *head)
{
    if (w->failed) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: an earlier call ran out of memory");
    bool ok = buf_put(head, "GGUF", 4) && put_le(head, 3, 4) && put_le(head, w->n_tensors, 8) &&
              put_le(head, w->n_kv, 8) && buf_put(head, w->kv.p, w->kv.n);
    uint64_t offset = 0;
    for (uint64_t i = 0; ok && i < w->n_tensors; ++i) {
        const wtensor *t = &w->tensors[i];
        ok = put_str(head, t->name, strlen(t->name)) && put_le(head, t->n_dims, 4);
        for (uint32_t d = 0; ok && d < t->n_dims; ++d) ok = put_le(head, t->ne[d], 8);
        ok = ok && put_le(head, (uint32_t)t->type, 4) && put_le(head, offset, 8);
        offset = align_up(offset + t->size, w->alignment);
    }
    return ok ? DCP_OK : dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
}

static bool put_zeros(FILE *f, uint64_t *pos, uint64_t end)
{
    static const uint8_t zeros[64];
    bool ok = true;
    while (ok && *pos < end) {
        size_t k = (size_t)(end - *pos < sizeof zeros ? end - *pos : sizeof zeros);
        ok = fwrite(zeros, 1, k, f) == k;
        *pos += k;
    }
    return ok;
}

/* Writes the whole file to f (the head, then every tensor's data, each padded to the alignment).
 * name is used in messages. */
static dcp_status write_stream(const dcp_gguf_writer *w, const buf *head, FILE *f, const char *name)
{
    bool ok = fwrite(head->p, 1, head->n, f) == head->n;
    uint64_t pos = head->n;
    /* Tensor data starts at the first aligned offset after the infos; only pad when there is data. */
    for (uint64_t i = 0; ok && i < w->n_tensors; ++i) {
        ok = put_zeros(f, &pos, align_up(pos, w->alignment));
        const wtensor *t = &w->tensors[i];
        if (ok && t->fill) {
            uint8_t *data = malloc(t->size ? (size_t)t->size : 1);
            if (!data)
                return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: tensor %s: out of memory (%llu bytes)", t->name,
                                (ull)t->size);
            dcp_status st = t->fill(t->fill_user, i, data, t->size);
            ok = st == DCP_OK && fwrite(data, 1, (size_t)t->size, f) == t->size;
            free(data);
            if (st != DCP_OK) return st;
        } else {
            ok = ok && fwrite(t->data, 1, (size_t)t->size, f) == t->size;
        }
        pos += t->size;
    }
    if (ok && w->n_tensors) ok = put_zeros(f, &pos, align_up(pos, w->alignment)); /* the last tensor's block whole */
    if (ok && fflush(f) != 0) ok = false;
    if (!ok) return dcp_fail(DCP_ERR_IO, "%s: write failed: %s", name, strerror(errno));
    return DCP_OK;
}

dcp_status dcp_gguf_writer_write(const dcp_gguf_writer *w, const char *path)
{
    return dcp_gguf_writer_write_to(w, path, 0);
}

/* Checks the target: an existing path must be a regular file (a symbolic link, directory, device,
 * FIFO or socket is refused; with DCP_GGUF_WRITE_REPLACE anything but a directory is replaced: the
 * rename swaps the directory entry, never writing through a link or to a device). */
static dcp_status check_target(const char *path, unsigned flags)
{
    struct stat sb;
    if (lstat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) {
        const char *kind = S_ISLNK(sb.st_mode) ? "a symbolic link" : S_ISDIR(sb.st_mode) ? "a directory"
                           : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device node"
                           : S_ISFIFO(sb.st_mode) ? "a FIFO" : "not a regular file";
        if (S_ISDIR(sb.st_mode) || !(flags & DCP_GGUF_WRITE_REPLACE))
            return dcp_fail(DCP_ERR_IO, "%s: exists and is %s, not a regular file: not overwriting it%s", path, kind,
                            S_ISDIR(sb.st_mode) ? "" : " (replace the entry itself with --force)");
    }
    return DCP_OK;
}

/* Writes w to an exclusive temporary beside path (mkstemp: O_CREAT | O_EXCL, a random name, so a
 * link planted beside the target is never followed), synced and closed; *tmp_out is its name
 * (malloc'd). On failure nothing is left behind and *tmp_out is NULL. */
static dcp_status stage(const dcp_gguf_writer *w, const char *path, char **tmp_out)
{
    dcp_status st = DCP_OK;
    buf head = {0};
    FILE *f = NULL;
    char *tmp = NULL;
    *tmp_out = NULL;
    DCP_TRY(build_head(w, &head));
    size_t plen = strlen(path);
    tmp = malloc(plen + 8);
    if (!tmp) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
        goto fail;
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".XXXXXX", 8);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = dcp_fail(DCP_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        free(tmp);
        tmp = NULL;
        goto fail;
    }
    (void)fchmod(fd, 0644); /* mkstemp makes 0600; a model file is readable like any other */
    f = fdopen(fd, "wb");
    if (!f) {
        st = dcp_fail(DCP_ERR_IO, "%s: cannot open: %s", tmp, strerror(errno));
        close(fd);
        remove(tmp);
        goto fail;
    }
    st = write_stream(w, &head, f, tmp);
    if (st == DCP_OK && fsync(fileno(f)) != 0) st = dcp_fail(DCP_ERR_IO, "%s: fsync failed: %s", tmp, strerror(errno));
    if (fclose(f) != 0 && st == DCP_OK) st = dcp_fail(DCP_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
    if (st != DCP_OK) {
        remove(tmp);
        goto fail;
    }
    *tmp_out = tmp;
    tmp = NULL;
fail:
    free(tmp);
    free(head.p);
    return st;
}

dcp_status dcp_gguf_writer_write_to(const dcp_gguf_writer *w, const char *path, unsigned flags)
{
    return dcp_gguf_writer_write_parts(&w, &path, 1, flags);
}

dcp_status dcp_gguf_writer_write_parts(const dcp_gguf_writer *const *w, const char *const *paths, uint32_t n,
                                       unsigned flags)
{
    dcp_status st = DCP_OK;
    char **tmp = calloc(n ? n : 1, sizeof *tmp);
    if (!tmp) return dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
    for (uint32_t i = 0; i < n; i++) DCP_TRY(check_target(paths[i], flags));
    for (uint32_t i = 0; i < n; i++) DCP_TRY(stage(w[i], paths[i], &tmp[i]));
    /* Every part is complete: rename them into place. */
    for (uint32_t i = 0; i < n; i++) {
        if (rename(tmp[i], paths[i]) != 0) {
            st = dcp_fail(DCP_ERR_IO, "%s: cannot rename to %s: %s%s", tmp[i], paths[i], strerror(errno),
                          i ? " (the parts before it were written)" : "");
            goto fail;
        }
        free(tmp[i]);
        tmp[i] = NULL;
    }
fail:
    for (uint32_t i = 0; i < n; i++) {
        if (tmp[i]) remove(tmp[i]);
        free(tmp[i]);
    }
    free(tmp);
    return st;
}

dcp_status dcp_gguf_writer_write_memory(const dcp_gguf_writer *w, void **data, size_t *size)
{
    dcp_status st = DCP_OK;
    buf head = {0};
    char *p = NULL;
    size_t n = 0;
    *data = NULL;
    *size = 0;
    DCP_TRY(build_head(w, &head));
    FILE *f = open_memstream(&p, &n);
    if (!f) {
        st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: cannot open a memory stream: %s", strerror(errno));
        goto fail;
    }
    st = write_stream(w, &head, f, "<memory>");
    if (fclose(f) != 0 && st == DCP_OK) st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "gguf writer: out of memory");
    if (st != DCP_OK) {
        free(p);
        goto fail;
    }
    *data = p;
    *size = n;
fail:
    free(head.p);
    return st;
}
