# Automatic prefix caching (issue 20): hash chains, shared blocks and their holders, LRU eviction,
# preemption and cancellation against the real pools; the DCP block rule (hit tokens at DCP N =
# those at DCP 1 rounded down to N-page blocks, N = 2, 4, 8, interleave 1 and 16); tokens bitwise
# those computed without the cache, over GQA (f16, q8_0) and deepseek2's MLA latent cache.
dcp_test(test_prefix_hash SOURCES test_prefix.c ref_model.c vkutil.c EXE test_prefix ARGS test_hash_chain)
dcp_test(test_prefix_sharing EXE test_prefix ARGS test_sharing_cancel)
dcp_test(test_prefix_lru EXE test_prefix ARGS test_lru)
dcp_test(test_prefix_seed EXE test_prefix ARGS test_seed_refused)
dcp_test(test_prefix_preemption EXE test_prefix ARGS test_preemption)
dcp_test(test_prefix_dcp2 EXE test_prefix ARGS test_dcp_rule_2)
dcp_test(test_prefix_dcp4 EXE test_prefix ARGS test_dcp_rule_4)
dcp_test(test_prefix_dcp8 EXE test_prefix ARGS test_dcp_rule_8)
dcp_test(test_prefix_models EXE test_prefix ARGS test_models)
dcp_test(test_prefix_spec EXE test_prefix ARGS test_speculation)
dcp_test(test_prefix_offload_lru EXE test_prefix ARGS test_offload_lru)
dcp_test(test_prefix_offload_exact EXE test_prefix ARGS test_offload_exact)
