/* Tokenizers read from GGUF metadata: SentencePiece style (`tokenizer.ggml.model = llama`: merges
 * by score, byte fallback to <0xNN> tokens, U+2581 for spaces) and GPT-2 style byte-level BPE
 * (`gpt2`: merge ranks, with the pre-tokenizer named by `tokenizer.ggml.pre`: default, llama3 /
 * llama-bpe, deepseek-llm). Plus a streaming detokenizer that never emits half a UTF-8 character.
 *
 * Token ids are int32; -1 means "none". */
#ifndef DCPVK_TOKENIZER_H
#define DCPVK_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/export.h"
#include "dcpvk/gguf.h"
#include "dcpvk/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded vocabulary. Created by dcp_tokenizer_create (which copies everything it needs, so the
 * GGUF file may be closed afterwards), destroyed by dcp_tokenizer_destroy. Read-only after
 * creation: encode/decode may run concurrently on several threads. */
typedef struct dcp_tokenizer dcp_tokenizer;

typedef enum dcp_tokenizer_kind {
    DCP_TOKENIZER_SPM = 0, /* "llama" */
    DCP_TOKENIZER_BPE = 1, /* "gpt2" */
} dcp_tokenizer_kind;

/* tokenizer.ggml.token_type values. */
typedef enum dcp_token_type {
    DCP_TOKEN_NORMAL = 1,
    DCP_TOKEN_UNKNOWN = 2,
    DCP_TOKEN_CONTROL = 3,
    DCP_TOKEN_USER_DEFINED = 4,
    DCP_TOKEN_UNUSED = 5,
    DCP_TOKEN_BYTE = 6,
} dcp_token_type;

/* Loads the tokenizer of a GGUF file. DCP_ERR_FORMAT for missing/inconsistent tokenizer keys,
 * DCP_ERR_UNSUPPORTED for another tokenizer model or pre-tokenizer (or BPE in a build without
 * PCRE2). */
DCP_API dcp_status dcp_tokenizer_create(const dcp_gguf *g, dcp_tokenizer **out);
DCP_API void dcp_tokenizer_destroy(dcp_tokenizer *t);

DCP_API dcp_tokenizer_kind dcp_tokenizer_get_kind(const dcp_tokenizer *t);
/* Pre-tokenizer name ("default", "llama3", "deepseek-llm"; "default" for SPM). */
DCP_API const char *dcp_tokenizer_pre(const dcp_tokenizer *t);
DCP_API uint32_t dcp_tokenizer_n_vocab(const dcp_tokenizer *t);
DCP_API int32_t dcp_tokenizer_bos(const dcp_tokenizer *t); /* -1 if none */
DCP_API int32_t dcp_tokenizer_eos(const dcp_tokenizer *t); /* -1 if none */
/* tokenizer.ggml.add_bos_token (default: true for SPM, false for BPE). */
DCP_API bool dcp_tokenizer_wants_bos(const dcp_tokenizer *t);
/* Raw vocabulary text of a token (NUL-terminated), or NULL for an id out of range. */
DCP_API const char *dcp_tokenizer_token_text(const dcp_tokenizer *t, int32_t id, size_t *len);
/* The type the tokenizer treats a token as (DCP_TOKEN_UNUSED for an id out of range): the file's
 * tokenizer.ggml.token_type, except that the well-known end-of-generation and fill-in-the-middle
 * spellings ("</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>",
 * "<|fim_prefix|>", ...) are CONTROL whatever the file stores, as llama.cpp loads them (see
 * src/text/tokenizer.c for the list and its two exceptions). */
DCP_API dcp_token_type dcp_tokenizer_token_type(const dcp_tokenizer *t, int32_t id);
/* The bytes token id adds to decoded text in mid-stream, as the detokenizer decodes it (SPM:
 * U+2581 as a space, <0xNN> byte tokens as their byte; BPE: the byte mapping undone; control,
 * unknown and unused tokens: none): *len receives their count, and the first min(cap, *len) are
 * written to buf (buf may be NULL when cap is 0). *len 0 for an id out of range. Thread-safe. */
DCP_API void dcp_tokenizer_token_bytes(const dcp_tokenizer *t, int32_t id, char *buf, size_t cap, size_t *len);

/* Flags of dcp_tokenizer_encode. */
enum {
    DCP_TOKENIZE_ADD_BOS = 1u << 0,       /* prepend BOS (when the vocabulary has one) */
    DCP_TOKENIZE_ADD_EOS = 1u << 1,       /* append EOS (when the vocabulary has one) */
    DCP_TOKENIZE_PARSE_SPECIAL = 1u << 2, /* text like "<s>" becomes control tokens */
};

/* Tokenizes len bytes of text (any bytes; invalid UTF-8 is handled, not rejected). On success
 * *ids is a malloc'd array of *n ids (free() it; NULL when *n == 0). User-defined tokens are
 * always matched in the text; control tokens (dcp_tokenizer_token_type) only with
 * DCP_TOKENIZE_PARSE_SPECIAL: without it their text is tokenized as ordinary text. */
DCP_API dcp_status dcp_tokenizer_encode(const dcp_tokenizer *t, const char *text, size_t len,
                                        unsigned flags, int32_t **ids, size_t *n);

/* Flags of decoding. */
enum {
    DCP_DECODE_SPECIAL = 1u << 0,            /* show control/unknown/unused tokens' text */
    DCP_DECODE_KEEP_LEADING_SPACE = 1u << 1, /* SPM: keep the space the tokenizer prefixed */
};

/* Decodes ids into a malloc'd, NUL-terminated UTF-8 string (*text, *len bytes; free() it).
 * Invalid UTF-8 produced by byte tokens becomes U+FFFD. Ids out of range: DCP_ERR_INVALID_ARGUMENT. */
DCP_API dcp_status dcp_tokenizer_decode(const dcp_tokenizer *t, const int32_t *ids, size_t n,
                                        unsigned flags, char **text, size_t *len);

/* Streaming detokenizer: feed ids one at a time, print what comes back. Output only ever holds
 * whole, valid UTF-8 characters; an incomplete sequence is held until the next piece completes it
 * (or flush turns it into U+FFFD). Created by dcp_detokenizer_create, destroyed by
 * dcp_detokenizer_destroy; the tokenizer must outlive it. One thread at a time. */
typedef struct dcp_detokenizer dcp_detokenizer;

DCP_API dcp_status dcp_detokenizer_create(const dcp_tokenizer *t, unsigned flags, dcp_detokenizer **out);
DCP_API void dcp_detokenizer_destroy(dcp_detokenizer *d);
/* Adds one token; *text and *len receive the bytes ready to print (possibly 0). The pointer is valid
 * until the next call on d. */
DCP_API dcp_status dcp_detokenizer_push(dcp_detokenizer *d, int32_t id, const char **text, size_t *len);
/* Ends the stream: returns any held bytes (as U+FFFD when incomplete) and resets d. */
DCP_API dcp_status dcp_detokenizer_flush(dcp_detokenizer *d, const char **text, size_t *len);

#ifdef __cplusplus
}
#endif
#endif
