# GGUF reader/writer, tokenizers, malformed files and the fuzz smoke run (issue 4).
dcp_test(test_gguf SOURCES test_gguf.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
dcp_test(test_tokenizer SOURCES test_tokenizer.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
dcp_test(test_gguf_malformed SOURCES test_gguf_malformed.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
# The libFuzzer target body, run over its seeds and deterministic mutations with any compiler.
dcp_test(test_gguf_fuzz SOURCES test_gguf_fuzz.c test_gguf_util.c ${CMAKE_SOURCE_DIR}/fuzz/gguf_fuzz_target.c
         TIMEOUT 300 LABELS gguf)
if(TARGET test_gguf_fuzz)
  target_include_directories(test_gguf_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/fuzz)
endif()
