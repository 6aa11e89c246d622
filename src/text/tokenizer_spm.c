/* SentencePiece-style tokenization (`llama` vocabularies): start from UTF-8 characters, repeatedly
 * merge the adjacent pair whose concatenation is a token with the highest score (leftmost on
 * ties), then fall back to <0xNN> byte tokens for pieces that are not tokens. */
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "text/tokenizer_internal.h"

typedef struct sym {
    int prev, next;
    size_t off, n;
} sym;


static bool try_bigram(const dcp_tokenizer *t, const char *text, const sym *s, int l, int r, tok_heap *h)
{
    if (l < 0 || r < 0) return true;
    size_t n = s[l].n + s[r].n;
    int32_t id = tok_map_get(&t->by_text, text + s[l].off, n);
    if (id < 0) return true;
    return tok_heap_push(h, (tok_bigram){l, r, t->score[id], n});
}

dcp_status tok_spm_encode(const dcp_tokenizer *t, const char *text, size_t len, tok_ids *out)
{
    dcp_status st = DCP_OK;
    tok_heap h = {0};
    sym *s = malloc((len ? len : 1) * sizeof *s);
    if (!s) goto oom;
    int ns = 0;
    for (size_t off = 0; off < len; ++ns) {
        size_t n = tok_utf8_len((unsigned char)text[off]);
        if (n > len - off) n = len - off;
        s[ns] = (sym){ns - 1, -1, off, n};
        if (ns) s[ns - 1].next = ns;
        off += n;
    }
    for (int i = 1; i < ns; ++i)
        if (!try_bigram(t, text, s, i - 1, i, &h)) goto oom;
    while (h.n) {
        tok_bigram b = tok_heap_pop(&h);
        sym *l = &s[b.left], *r = &s[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue; /* outdated */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = b.left;
        if (!try_bigram(t, text, s, l->prev, b.left, &h) || !try_bigram(t, text, s, b.left, l->next, &h))
            goto oom;
    }
    for (int i = 0; ns && i >= 0; i = s[i].next) {
        int32_t id = tok_map_get(&t->by_text, text + s[i].off, s[i].n);
        if (id >= 0) {
            if (!tok_ids_push(out, id)) goto oom;
            continue;
        }
        for (size_t k = 0; k < s[i].n; ++k) {
            int32_t b = t->byte_id[(unsigned char)text[s[i].off + k]];
            if (b < 0) b = t->unk;
            if (b >= 0 && !tok_ids_push(out, b)) goto oom;
        }
    }
    goto done;
oom:
    st = dcp_fail(DCP_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
done:
    free(h.v);
    free(s);
    return st;
}
