/* libFuzzer driver for the GGUF reader (build: see fuzz/README.md). */
#include "gguf_fuzz_target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return dcp_fuzz_gguf(data, size); }
