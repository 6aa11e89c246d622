# Teardown and lifetimes (docs/design.md, "Teardown and lifetimes"): timeline semaphores destroyed
# right after their submissions' fences, and whole public-API lives (context, stories260K at TP 1
# and TP 8 / DCP 2, prefill, decode, destroy) again and again; the first two once more with
# LP_NUM_THREADS=0, where lavapipe's queue thread runs the shaders itself and retires its batches
# late (before the fix, each crashed or died silently in most runs).
dcp_test(test_lifetime SOURCES test_lifetime.c vkutil.c)
dcp_test(test_lifetime_lp0 EXE test_lifetime ARGS tp1 ENV "LP_NUM_THREADS=0")
# GPU-assisted validation reports a shader's out-of-bounds write (and nothing for the same dispatch
# in bounds): what the DCP_VK_VALIDATION=gpuav job of scripts/setup.sh test relies on.
dcp_test(test_gpuav SOURCES test_gpuav.c vkutil.c)
# Exit codes under repetition: 50 runs of dcp-vk-run (TP 1 and TP 8 / DCP 2, the same text each
# time), 20 starts of dcp-vk-serve on a busy port (exit 2 with its message) and 20 stopped by
# SIGTERM while loading or once listening (exit 0); no run may end by a signal.
dcp_test(test_stress_exit_run SOURCES test_stress_exit.c EXE test_stress_exit ARGS ${CMAKE_BINARY_DIR} run
         TIMEOUT 1200 LABELS stress)
dcp_test(test_stress_exit_serve EXE test_stress_exit ARGS ${CMAKE_BINARY_DIR} serve TIMEOUT 1200 LABELS stress)
add_dependencies(test_stress_exit dcp-vk-run dcp-vk-serve)
# The driver race itself on the bare Vulkan API (tests/repro_timeline_destroy.c): with the queue
# drained before each destroy, as dcp_sem_destroy does, 3000 semaphores go without a crash. Run
# without the drain argument it is the reproduction (a segfault in most runs on lavapipe).
add_executable(repro_timeline_destroy repro_timeline_destroy.c)
target_link_libraries(repro_timeline_destroy PRIVATE Vulkan::Vulkan)
add_test(NAME test_timeline_drain COMMAND repro_timeline_destroy 3000 1)
set_tests_properties(test_timeline_drain PROPERTIES ENVIRONMENT "${DCP_TEST_ENV}" TIMEOUT 300
                     PASS_REGULAR_EXPRESSION "3000 iterations \\(queue drained before each destroy\\), 0 validation messages")
