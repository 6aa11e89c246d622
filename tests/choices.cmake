# n choices per request (dcp_engine_request.n): choice 0 prefills the prompt once, the others are
# forked from it (full blocks shared, the last partial page copied, no prompt row run), with prefix
# caching on and off; greedy choices bitwise the n = 1 output, seeded choice i reproducible and
# batch-invariant, at TP 1 and TP 8 / DCP 2; choices without a free slot admitted later as usual.
dcp_test(test_choices SOURCES test_choices.c ref_model.c vkutil.c)
