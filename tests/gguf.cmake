# GGUF reader/writer, tokenizers, malformed files and the fuzz smoke run (issue 4).
dcp_test(test_gguf SOURCES test_gguf.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
dcp_test(test_tokenizer SOURCES test_tokenizer.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
dcp_test(test_gguf_malformed SOURCES test_gguf_malformed.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
