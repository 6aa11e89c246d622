/* Private layout of a tokenizer (include/dcpvk/tokenizer.h), shared by the loader/decoder
 * (tokenizer.c), SentencePiece (tokenizer_spm.c), byte-level BPE (tokenizer_bpe.c) and their shared
 * containers (tokenizer_util.c). */
#ifndef DCP_TEXT_TOKENIZER_INTERNAL_H
#define DCP_TEXT_TOKENIZER_INTERNAL_H

#include "dcpvk/tokenizer.h"

typedef enum tok_pre {
    TOK_PRE_DEFAULT = 0,
    TOK_PRE_LLAMA3 = 1,
    TOK_PRE_DEEPSEEK_LLM = 2,
    TOK_PRE_GPT2 = 3,
    TOK_PRE_QWEN2 = 4,   /* Qwen2 / Qwen2.5 / Qwen3 */
} tok_pre;

enum { TOK_MAX_REGEX = 8 };

/* Open-addressing string -> int table (value + 1 stored; 0 = empty). */
typedef struct tok_map {
    const char **keys;  /* [cap] borrowed */
    uint32_t *lens;     /* [cap] */
    int32_t *vals;      /* [cap] value + 1 */
    uint64_t cap;
} tok_map;

/* A growable array of token ids. */
typedef struct tok_ids {
    int32_t *v;
    size_t n, cap;
} tok_ids;

struct dcp_tokenizer {
    dcp_tokenizer_kind kind;
    tok_pre pre;
    const char *pre_name;
    uint32_t n_vocab;
    char *text_buf;         /* all token texts, NUL-separated */
    const char **text;      /* [n_vocab] */
    uint32_t *len;          /* [n_vocab] bytes */
    float *score;           /* [n_vocab] */
    uint8_t *type;          /* [n_vocab] dcp_token_type */
    tok_map by_text;        /* text -> id (a later duplicate wins) */
    int32_t bos, eos, unk;
    bool add_bos, add_space_prefix, ignore_merges;
    int32_t byte_id[256];   /* SPM: id of <0xNN>, -1 if absent */
    int32_t *special;       /* ids matched in raw text, longest text first [n_special] */
    uint32_t n_special;
    /* BPE */
    char *merge_buf;        /* merge strings "a b", NUL-separated */
    tok_map merges;         /* "a b" -> rank */
    void *regex[TOK_MAX_REGEX]; /* pcre2_code * */
    unsigned n_regex;
};

bool tok_ids_push(tok_ids *ids, int32_t id);

/* A candidate merge of adjacent symbols left and right (size: bytes of both when queued, to
 * recognise outdated entries). Higher priority merges first (SPM: the merged token's score; BPE:
 * minus the merge rank); ties go to the leftmost. */
typedef struct tok_bigram {
    int left, right;
    double priority;
    size_t size;
} tok_bigram;

/* A binary max-heap of candidate merges; zero-initialise, free v when done. */
typedef struct tok_heap {
    tok_bigram *v;
    size_t n, cap;
} tok_heap;

bool tok_heap_push(tok_heap *h, tok_bigram b); /* false when out of memory */
tok_bigram tok_heap_pop(tok_heap *h);          /* requires h->n > 0 */
/* The map of n keys: a power-of-two capacity >= 2 n (false when out of memory; free it with
 * tok_map_free either way). Keys are borrowed: they must outlive the map. */
bool tok_map_init(tok_map *m, uint64_t n);
void tok_map_free(tok_map *m);
/* Inserts s[0, n) -> val, or overwrites the value of an equal key. Requires room (tok_map_init's n). */
void tok_map_put(tok_map *m, const char *s, size_t n, int32_t val);
/* The value of key s[0, n), or -1 when absent. */
int32_t tok_map_get(const tok_map *m, const char *s, size_t n);
/* Length of the UTF-8 sequence introduced by byte c (1 for invalid leads). */
size_t tok_utf8_len(unsigned char c);

/* Encoders of one raw-text fragment, appending to out. */
dcp_status tok_spm_encode(const dcp_tokenizer *t, const char *text, size_t len, tok_ids *out);
dcp_status tok_bpe_encode(const dcp_tokenizer *t, const char *text, size_t len, tok_ids *out);
/* BPE setup: compiles the pre-tokenizer regexes; teardown frees them. */
dcp_status tok_bpe_init(dcp_tokenizer *t);
void tok_bpe_free(dcp_tokenizer *t);
/* Decodes one byte-level BPE token text into raw bytes (appending to out[*n], out has room for
 * len bytes). */
void tok_bpe_decode_text(const char *s, size_t len, char *out, size_t *n);

#endif
