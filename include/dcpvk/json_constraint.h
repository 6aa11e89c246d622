/* JSON-constrained decoding: a byte-level recognizer of the prefixes of JSON texts that match a
 * (subset of) JSON Schema, and the per-step mask over a vocabulary that it gives (a token is
 * allowed when the bytes it adds keep the output a valid prefix).
 *
 * Schemas: type (object, array, string, number, integer, boolean, null, or an array of them), enum,
 * const, required, properties, additionalProperties (bool or schema; default true), items, minItems,
 * maxItems; the annotations title, description, default, examples, $schema, $id, $comment are read
 * and ignored; any other keyword is refused naming it. Output limits, so that a model cannot loop
 * outside a string: at most DCP_JSON_MAX_WS whitespace bytes between two tokens of the JSON text,
 * none after the top-level value, numbers of at most 15 integer, 16 fraction and 3 exponent
 * digits, nesting at most DCP_JSON_MAX_DEPTH - 1 values deep. Strings are valid UTF-8 without
 * control characters (escapes are checked). Object keys are compared with the schema's property
 * names byte for byte as written (a key spelled with other escapes counts as another key). */
#ifndef DCPVK_JSON_CONSTRAINT_H
#define DCPVK_JSON_CONSTRAINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dcpvk/status.h"
#include "dcpvk/tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DCP_JSON_MAX_WS 4      /* whitespace bytes in a row between two tokens of the JSON text */
#define DCP_JSON_MAX_DEPTH 32  /* recognizer stack frames (the root's included) */

/* A compiled schema (immutable; shareable between threads). Created by dcp_json_schema_compile,
 * destroyed by dcp_json_schema_destroy; every state made from it must be destroyed first. */
typedef struct dcp_json_schema dcp_json_schema;

/* Compiles the JSON Schema text [len] (UTF-8); text NULL: any JSON object ({"type": "json_object"}).
 * DCP_ERR_UNSUPPORTED naming the keyword for one outside the subset above; DCP_ERR_INVALID_ARGUMENT
 * naming what is wrong for text that is not JSON, a bad keyword value or a schema no value can
 * match (an empty enum, minItems > maxItems, a required name missing from properties while
 * additionalProperties is false, more than 64 properties or enum values, nesting over 16). */
DCP_API dcp_status dcp_json_schema_compile(const char *text, size_t len, dcp_json_schema **out);
DCP_API void dcp_json_schema_destroy(dcp_json_schema *s);

/* The bytes each token of a vocabulary adds to the output (dcp_tokenizer_token_bytes), sorted for
 * the mask's walk. Immutable after create; the tokenizer need not outlive it. */
typedef struct dcp_json_vocab dcp_json_vocab;
DCP_API dcp_status dcp_json_vocab_create(const dcp_tokenizer *t, dcp_json_vocab **out);
DCP_API void dcp_json_vocab_destroy(dcp_json_vocab *v);
DCP_API uint32_t dcp_json_vocab_size(const dcp_json_vocab *v);
/* Token id's bytes (*len of them; NULL and 0 for an id out of range). */
DCP_API const uint8_t *dcp_json_vocab_token(const dcp_json_vocab *v, int32_t id, size_t *len);

/* The recognizer's state: the output so far is a valid prefix. Created by dcp_json_state_create
 * (the empty output), destroyed by dcp_json_state_destroy; the schema must outlive it. One thread
 * at a time. */
typedef struct dcp_json_state dcp_json_state;
DCP_API dcp_status dcp_json_state_create(const dcp_json_schema *s, dcp_json_state **out);
DCP_API void dcp_json_state_destroy(dcp_json_state *st);
/* Makes dst the same state as src (same schema). */
DCP_API void dcp_json_state_copy(dcp_json_state *dst, const dcp_json_state *src);
/* Adds bytes [n]: true when the output stays a valid prefix; false leaves st unchanged. */
DCP_API bool dcp_json_state_feed(dcp_json_state *st, const uint8_t *bytes, size_t n);
/* True when the output is a complete value (it may end here). */
DCP_API bool dcp_json_state_can_end(const dcp_json_state *st);
/* True when the output is complete and no byte can follow it (generation should stop). */
DCP_API bool dcp_json_state_finished(const dcp_json_state *st);
/* allowed[n_vocab of v] = 1 for the tokens whose non-empty bytes keep the output a valid prefix,
 * else 0; then the end_ids [n_end] (EOS, stop tokens) get 1 when dcp_json_state_can_end, else 0.
 * Does not change st. */
DCP_API void dcp_json_state_mask(dcp_json_state *st, const dcp_json_vocab *v, const int32_t *end_ids,
                                 uint32_t n_end, uint8_t *allowed);

#ifdef __cplusplus
}
#endif
#endif
