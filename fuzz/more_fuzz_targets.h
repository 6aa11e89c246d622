/* Fuzz target bodies beside the GGUF reader's (gguf_fuzz_target.h), each shared by a libFuzzer
 * driver (fuzz_<name>.c) and the deterministic smoke run of the test suite (tests/test_fuzz_smoke.c).
 * A broken invariant aborts; crashes and sanitizer reports are findings too. Each returns 0. */
#ifndef DCP_FUZZ_MORE_TARGETS_H
#define DCP_FUZZ_MORE_TARGETS_H

#include <stddef.h>
#include <stdint.h>

/* Tokenizers (tokenizers_fuzz_target.c): the bytes as text, encoded with every flag combination the
 * first byte selects and decoded back, and as token ids (little-endian 16-bit, modulo the
 * vocabulary, a few beyond it) through dcp_tokenizer_decode and the streaming detokenizer, against
 * every vocabulary of dir (tests/data: stories260K, phi-3, deepseek-llm) and the generated test
 * model's. dir is read on the first call. */
int dcp_fuzz_tokenizers(const char *dir, const uint8_t *data, size_t size);

/* Model loader (loader_fuzz_target.c): the bytes as GGUF, through dcp_model_config_read to a
 * count_only dcp_model_load (every tensor's presence, type and shape checked against the
 * hyperparameters) on the first Vulkan device, at TP 1 and TP 2 on logical devices; when the
 * weights are small (at most 4 MiB) they are also loaded for real. The context is made on the first
 * call (devices from $DCP_VK_DEVICES, default 0,0). */
int dcp_fuzz_loader(const uint8_t *data, size_t size);
/* Models counted (count_only loads that succeeded) and loaded for real so far: the smoke test
 * checks that its inputs get that far. */
extern uint64_t dcp_fuzz_loader_counted, dcp_fuzz_loader_loaded;
/* Releases the loader target's context (the smoke test calls it at the end). */
void dcp_fuzz_loader_done(void);

/* Option parsers (options_fuzz_target.c): the bytes split at NUL into arguments, given to
 * dcp-vk-run's run_parse (messages silenced) and to the strict number parsers of apps/cli/cli.h,
 * whose results are checked against a reference reading of the same text. */
int dcp_fuzz_options(const uint8_t *data, size_t size);

/* JSON-constrained decoding (json_fuzz_target.c): the bytes before the first NUL as a JSON Schema
 * (none: json_object), the rest as output fed to the recognizer byte by byte; checks that a
 * rejected byte changes nothing, that one-by-one equals all-at-once, that finished means complete
 * with nothing to follow, and that no valid prefix is a dead end. */
int dcp_fuzz_json(const uint8_t *data, size_t size);

#endif
