/* Helpers shared by the GGUF tests: a small valid file with every value type, a byte builder for
 * hand-made (malformed) headers, and temporary paths. */
#ifndef DCP_TEST_GGUF_UTIL_H
#define DCP_TEST_GGUF_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "dcpvk/gguf.h"

/* A growable byte buffer for writing GGUF by hand. */
typedef struct tg_bytes {
    uint8_t *p;
    size_t n, cap;
} tg_bytes;

void tg_put(tg_bytes *b, const void *data, size_t n);
void tg_u32(tg_bytes *b, uint32_t v);
void tg_u64(tg_bytes *b, uint64_t v);
void tg_str(tg_bytes *b, const char *s);
/* Pads with zeros to a multiple of a. */
void tg_pad(tg_bytes *b, size_t a);

/* A path for a temporary file in the working directory, unique per process (static buffer). */
const char *tg_tmp_path(const char *name);

/* Writes w to a temporary file and returns its bytes (malloc'd; *n = size). Fails the test on
 * error. */
uint8_t *tg_writer_bytes(const dcp_gguf_writer *w, size_t *n);

/* A small valid GGUF v3 file: every scalar type, a string, arrays of several types (strings
 * included), llama hyperparameters, and three tensors (F32, F16, Q8_0). */
dcp_gguf_writer *tg_small_writer(void);
uint8_t *tg_small_file(size_t *n);

#endif
