# Model kernels and the llama model step against the CPU references; stories260K greedy tokens.
dcp_test(test_ops SOURCES test_ops.c vkutil.c)
dcp_test(test_llama SOURCES test_llama.c vkutil.c ARGS nodcp)
dcp_test(test_llama_dcp EXE test_llama ARGS dcp)
dcp_test(test_sampler SOURCES test_sampler.c)
# dcp-vk-run end to end (exit codes, --help, stories260K reference ids, same text for every prefill chunk).
dcp_test(test_run SOURCES test_run.c ARGS $<TARGET_FILE:dcp-vk-run>)
add_dependencies(test_run dcp-vk-run)
