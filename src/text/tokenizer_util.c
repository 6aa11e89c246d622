/* The tokenizers' shared containers (src/text/tokenizer_internal.h): the max-heap of candidate
 * merges (SentencePiece and BPE), the growable id array, and the open-addressing string -> id map
 * (vocabulary texts, BPE merges; FNV-1a hash, linear probing). */
#include <stdlib.h>
#include <string.h>

#include "text/tokenizer_internal.h"

static bool bigram_before(const tok_bigram *a, const tok_bigram *b)
{
    return a->priority > b->priority || (a->priority == b->priority && a->left < b->left);
}

bool tok_heap_push(tok_heap *h, tok_bigram b)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        tok_bigram *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i && bigram_before(&b, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = b;
    return true;
}

tok_bigram tok_heap_pop(tok_heap *h)
{
    tok_bigram top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) ++c;
        if (!bigram_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

bool tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 64;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v) return false;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return true;
}

size_t tok_utf8_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) return 2;
    if ((c & 0xf0) == 0xe0) return 3;
    if ((c & 0xf8) == 0xf0) return 4;
    return 1;
}

static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

bool tok_map_init(tok_map *m, uint64_t n)
{
    m->cap = 16;
    while (m->cap < 2 * n) m->cap *= 2;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->lens = calloc(m->cap, sizeof *m->lens);
    m->vals = calloc(m->cap, sizeof *m->vals);
    return m->keys && m->lens && m->vals;
}

void tok_map_free(tok_map *m)
{
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

void tok_map_put(tok_map *m, const char *s, size_t n, int32_t val)
{
    uint64_t h = hash_bytes(s, n) & (m->cap - 1);
    while (m->vals[h]) {
        if (m->lens[h] == n && memcmp(m->keys[h], s, n) == 0) break;
        h = (h + 1) & (m->cap - 1);
    }
    m->keys[h] = s;
    m->lens[h] = (uint32_t)n;
    m->vals[h] = val + 1;
}

int32_t tok_map_get(const tok_map *m, const char *s, size_t n)
{
    if (!m->cap) return -1;
    uint64_t h = hash_bytes(s, n) & (m->cap - 1);
    while (m->vals[h]) {
        if (m->lens[h] == n && memcmp(m->keys[h], s, n) == 0) return m->vals[h] - 1;
        h = (h + 1) & (m->cap - 1);
    }
    return -1;
}
