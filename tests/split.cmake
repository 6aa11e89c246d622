# Split GGUF models (issue 21 section 4): written by dcp_gguf_quantize with a split limit, found
# from the first part, refused naming the part that is missing or does not match; a generated
# model in three parts runs as the one file at TP 1 and TP 8 / DCP 2; each rank reads its slices.
dcp_test(test_split SOURCES test_split.c test_gguf_util.c ref_model.c vkutil.c TIMEOUT 600 LABELS gguf model)

# The apps on a split model: dcp-vk-gguf --quantize --split-max-tensors writes it, lists every
# part, and dcp-vk-run -m takes its first part (the same greedy text as the one file).
set(DCP_SPLIT_DIR ${CMAKE_CURRENT_BINARY_DIR}/split_app)
file(MAKE_DIRECTORY ${DCP_SPLIT_DIR})
add_test(NAME app_split_make
         COMMAND dcp-vk-gguf --make-model ${DCP_SPLIT_DIR}/m.gguf --force --n-embd 64 --n-layer 2 --n-head 8
                 --n-head-kv 4 --head-dim 8 --n-ff 128 --type q8_0)
add_test(NAME app_split_quantize
         COMMAND dcp-vk-gguf --quantize ${DCP_SPLIT_DIR}/m.gguf ${DCP_SPLIT_DIR}/parts.gguf --type copy
                 --split-max-tensors 8 --force)
add_test(NAME app_split_list COMMAND dcp-vk-gguf ${DCP_SPLIT_DIR}/parts-00001-of-00003.gguf)
add_test(NAME app_split_list_json COMMAND dcp-vk-gguf ${DCP_SPLIT_DIR}/parts-00001-of-00003.gguf --json)
add_test(NAME app_split_second_part COMMAND dcp-vk-gguf ${DCP_SPLIT_DIR}/parts-00002-of-00003.gguf)
add_test(NAME app_split_run
         COMMAND sh -c "one=$($0 -m $1/m.gguf -n 8 --temp 0 2>/dev/null) && parts=$($0 -m $1/parts-00001-of-00003.gguf -n 8 --temp 0 2>/dev/null) && test -n \"$one\" && test \"$one\" = \"$parts\" && echo \"same text: $parts\""
                 $<TARGET_FILE:dcp-vk-run> ${DCP_SPLIT_DIR})
add_test(NAME app_split_bad_size
         COMMAND dcp-vk-gguf --quantize ${DCP_SPLIT_DIR}/m.gguf ${DCP_SPLIT_DIR}/x.gguf --type copy
                 --split-max-size 12X)
set_tests_properties(app_split_make PROPERTIES FIXTURES_SETUP split_model LABELS gguf)
set_tests_properties(app_split_quantize PROPERTIES FIXTURES_SETUP split_parts FIXTURES_REQUIRED split_model
                     PASS_REGULAR_EXPRESSION "wrote part 3 of 3" LABELS gguf)
set_tests_properties(app_split_list PROPERTIES FIXTURES_REQUIRED split_parts LABELS gguf
                     PASS_REGULAR_EXPRESSION "split model: 3 parts.*== part 1 of 3 ==.*split.count.*== part 2 of 3 ==.*== part 3 of 3 ==.*hyperparameters: arch llama")
set_tests_properties(app_split_list_json PROPERTIES FIXTURES_REQUIRED split_parts LABELS gguf
                     PASS_REGULAR_EXPRESSION "\"split_count\": 3.*\"parts\": \\[")
set_tests_properties(app_split_second_part PROPERTIES FIXTURES_REQUIRED split_parts LABELS gguf WILL_FAIL TRUE)
set_tests_properties(app_split_run PROPERTIES FIXTURES_REQUIRED split_parts ENVIRONMENT "${DCP_TEST_ENV}"
                     PASS_REGULAR_EXPRESSION "same text: " LABELS "gguf;apps")
set_tests_properties(app_split_bad_size PROPERTIES FIXTURES_REQUIRED split_model LABELS gguf
                     PASS_REGULAR_EXPRESSION "--split-max-size: not a size")
# The loading bar: drawn when stderr is a terminal (a pseudo-terminal from script(1)), ending at
# 100%; nothing when stderr is a pipe.
add_test(NAME app_progress_tty
         COMMAND script -qec "$<TARGET_FILE:dcp-vk-run> -m ${DCP_SPLIT_DIR}/parts-00001-of-00003.gguf -n 2 --temp 0" /dev/null)
set_tests_properties(app_progress_tty PROPERTIES FIXTURES_REQUIRED split_parts ENVIRONMENT "${DCP_TEST_ENV}"
                     PASS_REGULAR_EXPRESSION "loading model \\[#+\\] 100% \\(" LABELS "gguf;apps")
add_test(NAME app_progress_pipe
         COMMAND dcp-vk-run -m ${DCP_SPLIT_DIR}/parts-00001-of-00003.gguf -n 2 --temp 0)
set_tests_properties(app_progress_pipe PROPERTIES FIXTURES_REQUIRED split_parts ENVIRONMENT "${DCP_TEST_ENV}"
                     FAIL_REGULAR_EXPRESSION "loading model" LABELS "gguf;apps")
