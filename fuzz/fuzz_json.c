/* libFuzzer driver for JSON-constrained decoding (build: see fuzz/README.md). */
#include "more_fuzz_targets.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return dcp_fuzz_json(data, size); }
