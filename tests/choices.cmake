# n choices per request (dcp_engine_request.n): choice 0 prefills the prompt once, the others attach
# its full blocks; greedy choices bitwise the n = 1 output, seeded choice i reproducible and
# batch-invariant, at TP 1 and TP 8 / DCP 2.
dcp_test(test_choices SOURCES test_choices.c ref_model.c vkutil.c)
