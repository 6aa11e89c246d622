# Automatic prefix caching (issue 20): hash chains, shared blocks and their holders, LRU eviction,
# preemption and cancellation against the real pools; the DCP block rule (hit tokens at DCP N =
# those at DCP 1 rounded down to N-page blocks, N = 2, 4, 8, interleave 1 and 16); tokens bitwise
# those computed without the cache, over GQA (f16, q8_0) and deepseek2's MLA latent cache; forks of
# n choices (dcp_model_state_fork_seq) with the cache on and off over the same caches.
dcp_test_cases(test_prefix SOURCES test_prefix.c ref_model.c vkutil.c CASES
  test_prefix_hash test_hash_chain
  test_prefix_sharing test_sharing_cancel
  test_prefix_lru test_lru
  test_prefix_seed test_seed_followers
  test_prefix_preemption test_preemption
  test_prefix_dcp2 test_dcp_rule_2
  test_prefix_dcp4 test_dcp_rule_4
  test_prefix_dcp8 test_dcp_rule_8
  test_prefix_models test_models
  test_prefix_forks test_forks
  test_prefix_spec test_speculation
  test_prefix_followers test_followers
  test_prefix_offload_lru test_offload_lru
  test_prefix_offload_exact test_offload_exact
  test_prefix_offload_segments test_offload_segments)
