/* The GGUF fuzz target body (see gguf_fuzz_target.c). */
#ifndef DCP_FUZZ_GGUF_TARGET_H
#define DCP_FUZZ_GGUF_TARGET_H

#include <stddef.h>
#include <stdint.h>

/* Parses data as GGUF and exercises every reader, hyperparameter and tokenizer path on it. Aborts
 * (a finding) on a broken invariant; crashes and sanitizer reports are findings too. Returns 0. */
int dcp_fuzz_gguf(const uint8_t *data, size_t size);

#endif
