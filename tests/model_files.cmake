# Generated models as llama.cpp reads them (issue 21 section 5): deepseek2's required keys at any
# layer count, rope_freqs.weight for llama only (refused by the generator, the app and the loader
# elsewhere, as is any tensor an architecture does not read).
dcp_test(test_model_files SOURCES test_model_files.c vkutil.c TIMEOUT 300 LABELS "gguf;model")
add_test(NAME app_make_rope_freqs_qwen2
         COMMAND dcp-vk-gguf --make-model ${CMAKE_CURRENT_BINARY_DIR}/never.gguf --arch qwen2 --rope-freqs)
set_tests_properties(app_make_rope_freqs_qwen2 PROPERTIES LABELS gguf
                     PASS_REGULAR_EXPRESSION "--rope-freqs applies to --arch llama only.*qwen2")
