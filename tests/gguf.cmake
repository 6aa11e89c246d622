# GGUF reader/writer, tokenizers, malformed files and the fuzz smoke run (issue 4).
dcp_test(test_gguf SOURCES test_gguf.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
dcp_test(test_tokenizer SOURCES test_tokenizer.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
dcp_test(test_json_constraint SOURCES test_json_constraint.c TIMEOUT 300 LABELS gguf)
# The UTF-8 sanitizer every printed text goes through (src/text/utf8.c).
dcp_test(test_utf8 SOURCES test_utf8.c TIMEOUT 60 LABELS gguf)
dcp_test(test_gguf_malformed SOURCES test_gguf_malformed.c test_gguf_util.c TIMEOUT 120 LABELS gguf)
# The libFuzzer target body, run over its seeds and deterministic mutations with any compiler.
dcp_test(test_gguf_fuzz SOURCES test_gguf_fuzz.c test_gguf_util.c ${CMAKE_SOURCE_DIR}/fuzz/gguf_fuzz_target.c
         TIMEOUT 300 LABELS gguf)
if(TARGET test_gguf_fuzz)
  target_include_directories(test_gguf_fuzz PRIVATE ${CMAKE_SOURCE_DIR}/fuzz)
endif()

# The dcp-vk-gguf command: output of --tokenize/--detokenize, and exit status 1 on errors.
set(DCP_GGUF_STORIES ${DCP_TEST_DATA}/stories260K.gguf)
add_test(NAME dcp_vk_gguf_tokenize
         COMMAND dcp-vk-gguf ${DCP_GGUF_STORIES} --tokenize "Once upon a time" --bos)
set_tests_properties(dcp_vk_gguf_tokenize PROPERTIES PASS_REGULAR_EXPRESSION "^1 403 407 261 378\n$"
                     LABELS gguf)
add_test(NAME dcp_vk_gguf_detokenize
         COMMAND dcp-vk-gguf ${DCP_GGUF_STORIES} --detokenize "1 403 407 261 378 432 383")
set_tests_properties(dcp_vk_gguf_detokenize PROPERTIES PASS_REGULAR_EXPRESSION "^Once upon a time, there"
                     LABELS gguf)
# phi-3 stores "</s>" as user-defined; like llama.cpp, dcp-vk counts it as a control token, so it is
# text unless --special (the ids: tests/test_tokenizer.c test_vocab_properties says how they follow).
add_test(NAME dcp_vk_gguf_tokenize_control_as_text
         COMMAND dcp-vk-gguf ${DCP_TEST_DATA}/ggml-vocab-phi-3.gguf --tokenize "a </s>")
set_tests_properties(dcp_vk_gguf_tokenize_control_as_text PROPERTIES PASS_REGULAR_EXPRESSION "^263 1533 29879 29958\n$"
                     LABELS gguf)
add_test(NAME dcp_vk_gguf_tokenize_control_special
         COMMAND dcp-vk-gguf ${DCP_TEST_DATA}/ggml-vocab-phi-3.gguf --tokenize "a </s>" --special)
set_tests_properties(dcp_vk_gguf_tokenize_control_special PROPERTIES PASS_REGULAR_EXPRESSION "^263 29871 2\n$"
                     LABELS gguf)
add_test(NAME dcp_vk_gguf_list COMMAND dcp-vk-gguf ${DCP_GGUF_STORIES})
set_tests_properties(dcp_vk_gguf_list PROPERTIES
                     PASS_REGULAR_EXPRESSION "tensor data at offset 14176.*tensors \\(48\\)" LABELS gguf)
add_test(NAME dcp_vk_gguf_missing_file COMMAND dcp-vk-gguf ${CMAKE_CURRENT_BINARY_DIR}/no-such-file.gguf)
set_tests_properties(dcp_vk_gguf_missing_file PROPERTIES WILL_FAIL TRUE LABELS gguf)
add_test(NAME dcp_vk_gguf_bad_option COMMAND dcp-vk-gguf --no-such-option)
set_tests_properties(dcp_vk_gguf_bad_option PROPERTIES WILL_FAIL TRUE LABELS gguf)
add_test(NAME dcp_vk_gguf_make_model
         COMMAND dcp-vk-gguf --make-model ${CMAKE_CURRENT_BINARY_DIR}/dcp-vk-test-q8.gguf --type q8_0
                 --n-layer 2 --seed 7)
set_tests_properties(dcp_vk_gguf_make_model PROPERTIES PASS_REGULAR_EXPRESSION "^wrote " LABELS gguf)
# The other fuzz target bodies (tokenizers, model loader, option parsers) over fixed inputs and
# deterministic mutations (fuzz/more_fuzz_targets.h).
dcp_test(test_fuzz_smoke SOURCES test_fuzz_smoke.c test_gguf_util.c ${CMAKE_SOURCE_DIR}/fuzz/tokenizers_fuzz_target.c
         ${CMAKE_SOURCE_DIR}/fuzz/loader_fuzz_target.c ${CMAKE_SOURCE_DIR}/fuzz/options_fuzz_target.c
         ${CMAKE_SOURCE_DIR}/fuzz/json_fuzz_target.c
         ${CMAKE_SOURCE_DIR}/apps/cli/cli.c ${CMAKE_SOURCE_DIR}/apps/cli/options.c ${CMAKE_SOURCE_DIR}/apps/cli/world.c
         ${CMAKE_SOURCE_DIR}/apps/cli/spec.c
         ENV "DCP_VK_DEVICES=0,0" TIMEOUT 300 LABELS gguf)
if(TARGET test_fuzz_smoke)
  target_include_directories(test_fuzz_smoke PRIVATE ${CMAKE_SOURCE_DIR}/fuzz ${CMAKE_SOURCE_DIR}/apps)
  if(CJSON_FOUND)
    target_link_libraries(test_fuzz_smoke PRIVATE PkgConfig::CJSON)
    target_compile_definitions(test_fuzz_smoke PRIVATE DCP_CLI_HAVE_CJSON=1)
  endif()
endif()
