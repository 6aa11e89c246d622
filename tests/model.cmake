# Model kernels and the llama model step against the CPU references; stories260K greedy tokens.
dcp_test(test_ops SOURCES test_ops.c vkutil.c)
dcp_test(test_llama SOURCES test_llama.c vkutil.c)
dcp_test(test_sampler SOURCES test_sampler.c)
