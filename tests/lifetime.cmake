# Teardown and lifetimes (docs/design.md, "Teardown and lifetimes"): timeline semaphores destroyed
# right after their submissions' fences, and whole public-API lives (context, stories260K at TP 1
# and TP 8 / DCP 2, prefill, decode, destroy) again and again; the first two once more with
# LP_NUM_THREADS=0, where lavapipe's queue thread runs the shaders itself and retires its batches
# late (before the fix, each crashed or died silently in most runs).
dcp_test(test_lifetime SOURCES test_lifetime.c vkutil.c)
dcp_test(test_lifetime_lp0 EXE test_lifetime ARGS tp1 ENV "LP_NUM_THREADS=0")
# GPU-assisted validation reports a shader's out-of-bounds write (and nothing for the same dispatch
# in bounds): what the DCP_VK_VALIDATION=gpuav job of scripts/setup.sh test relies on.
dcp_test(test_gpuav SOURCES test_gpuav.c vkutil.c LABELS gpuav)
