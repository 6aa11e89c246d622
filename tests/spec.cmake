# Speculative decoding (issue 19): the run state's verification rows bitwise equal to one-token
# steps and its roll-back leaving the caches as one-token decoding leaves them, over llama
# (stories260K, generated), q8_0 KV and deepseek2 at TP 1 and the DCP layouts; one CTest entry per
# group of configurations.
# Per-rank visibility of a verification step's queries (every N, interleave, k, length, page
# boundary) and the roll-back's pages, against a brute-force deal of the positions. CPU only.
dcp_test(test_spec_visibility SOURCES test_spec_visibility.c)
dcp_test_cases(test_spec_model SOURCES test_spec_model.c ref_model.c vkutil.c CASES
  test_spec_model_stories test_stories
  test_spec_model_dcp test_dcp_wide
  test_spec_model_q8 test_q8
  test_spec_model_deepseek2 test_deepseek2
  test_spec_model_replay test_replay_shapes)
# The engine with speculation (n-gram drafts and a draft model) against the engine without: exact
# greedy and n-gram-sampled outputs, draft-model sampling reproducible and distributed as the
# target, stop strings, preemption, cancellation, refused configurations.
dcp_test_cases(test_spec SOURCES test_spec.c ref_model.c vkutil.c CASES
  test_spec_refused test_refused
  test_spec_tp1 "test_*_tp1"
  test_spec_stops test_stops
  test_spec_distribution test_distribution
  test_spec_cancel test_cancel
  test_spec_preemption test_preemption
  test_spec_preemption_cached test_preemption_cached
  test_spec_dcp test_dcp
  test_spec_models_deepseek2 test_models_deepseek2
  test_spec_models_q8 test_models_q8)
# dcp-vk-bench spec on a short request at TP 1 and TP 8 / DCP 2: it runs every case and exits 0
# only when the tokens with speculation equal those without (speed is reported, never asserted).
add_test(NAME app_bench_spec COMMAND dcp-vk-bench spec -m ${CMAKE_CURRENT_SOURCE_DIR}/data/stories260K.gguf
         -n 24 --quote 40 --reps 1 --json)
set_tests_properties(app_bench_spec PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1;DCP_VK_DEVICES=0"
                     PASS_REGULAR_EXPRESSION "\"case\": \"ngram, self-quoting prompt\".*\"num_accepted_tokens\": [1-9].*\"case\": \"draft, BOS alone\""
                     FAIL_REGULAR_EXPRESSION "differ|validation (error|warning)")
add_test(NAME app_bench_spec_dcp COMMAND dcp-vk-bench spec -m ${CMAKE_CURRENT_SOURCE_DIR}/data/stories260K.gguf
         --tp 8 --dcp 2 -n 16 --quote 24 --reps 1 --json)
set_tests_properties(app_bench_spec_dcp PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1;DCP_VK_DEVICES=0,0,0,0,0,0,0,0"
                     PASS_REGULAR_EXPRESSION "\"case\": \"ngram, self-quoting prompt\", \"tp\": 8, \"dcp\": 2.*\"case\": \"draft, BOS alone\""
                     FAIL_REGULAR_EXPRESSION "differ|validation (error|warning)")
# dcp-vk-run --speculative-config: the greedy tokens equal those without (tests/spec/run_same.sh),
# n-gram drafts and a draft model (stories260K drafting for itself), at TP 1 and TP 8 / DCP 2.
set(DCP_SPEC_STORIES ${CMAKE_CURRENT_SOURCE_DIR}/data/stories260K.gguf)
set(DCP_SPEC_NGRAM "{\"method\": \"ngram\", \"num_speculative_tokens\": 4, \"prompt_lookup_max\": 4, \"prompt_lookup_min\": 2}")
set(DCP_SPEC_DRAFT "{\"model\": \"${DCP_SPEC_STORIES}\", \"num_speculative_tokens\": 3}")
add_test(NAME app_run_spec_ngram COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/spec/run_same.sh $<TARGET_FILE:dcp-vk-run>
         ${DCP_SPEC_NGRAM} -m ${DCP_SPEC_STORIES} -p "Once upon a time" -n 96 --temp 0)
add_test(NAME app_run_spec_draft_dcp COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/spec/run_same.sh $<TARGET_FILE:dcp-vk-run>
         ${DCP_SPEC_DRAFT} -m ${DCP_SPEC_STORIES} -p "Once upon a time" -n 32 --temp 0
         --tensor-parallel-size 8 --decode-context-parallel-size 2)
add_test(NAME app_run_spec_ngram_dcp COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/spec/run_same.sh $<TARGET_FILE:dcp-vk-run>
         ${DCP_SPEC_NGRAM} -m ${DCP_SPEC_STORIES} -p "Once upon a time" -n 48 --temp 0
         --tensor-parallel-size 8 --decode-context-parallel-size 2 --dcp-comm-backend ag_rs)
set_tests_properties(app_run_spec_ngram PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1;DCP_VK_DEVICES=0"
                     PASS_REGULAR_EXPRESSION "same tokens; \"spec_decode\": {\"method\": \"ngram\".*\"num_accepted_tokens\": [1-9]")
set_tests_properties(app_run_spec_draft_dcp PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1;DCP_VK_DEVICES=0,0,0,0,0,0,0,0"
                     PASS_REGULAR_EXPRESSION "same tokens; \"spec_decode\": {\"method\": \"draft_model\".*\"num_accepted_tokens\": [1-9]")
set_tests_properties(app_run_spec_ngram_dcp PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1;DCP_VK_DEVICES=0,0,0,0,0,0,0,0"
                     PASS_REGULAR_EXPRESSION "same tokens; \"spec_decode\": {\"method\": \"ngram\"")
# A draft whose heads do not allow DCP 2 at TP 8: loaded at DCP 1 (replicated cache), said, same tokens.
add_test(NAME app_run_spec_draft_replicated COMMAND sh ${CMAKE_CURRENT_SOURCE_DIR}/spec/run_replicated.sh
         $<TARGET_FILE:dcp-vk-gguf> $<TARGET_FILE:dcp-vk-run>)
set_tests_properties(app_run_spec_draft_replicated PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1;DCP_VK_DEVICES=0,0,0,0,0,0,0,0"
                     PASS_REGULAR_EXPRESSION "its KV cache is replicated over each DCP group.*same tokens; \"spec_decode\": {\"method\": \"draft_model\""
                     FAIL_REGULAR_EXPRESSION "validation (error|warning)")
add_test(NAME app_run_spec_bad COMMAND sh -c "$<TARGET_FILE:dcp-vk-run> --speculative-config '{\"method\": \"ngram\"}' 2>&1; echo exit=$?")
set_tests_properties(app_run_spec_bad PROPERTIES PASS_REGULAR_EXPRESSION
                     "--speculative-config: needs \"num_speculative_tokens\"\nexit=2")
