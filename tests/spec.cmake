# Speculative decoding (issue 19): the run state's verification rows bitwise equal to one-token
# steps and its roll-back leaving the caches as one-token decoding leaves them, over llama
# (stories260K, generated), q8_0 KV and deepseek2 at TP 1 and the DCP layouts; one CTest entry per
# group of configurations.
dcp_test(test_spec_model_stories SOURCES test_spec_model.c ref_model.c vkutil.c EXE test_spec_model ARGS test_stories)
dcp_test(test_spec_model_dcp EXE test_spec_model ARGS test_dcp_wide)
dcp_test(test_spec_model_q8 EXE test_spec_model ARGS test_q8)
dcp_test(test_spec_model_deepseek2 EXE test_spec_model ARGS test_deepseek2)
