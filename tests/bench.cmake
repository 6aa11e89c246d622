# The benchmark's yardsticks against their references, and dcp-vk-bench's roofline output.
dcp_test(test_yardstick SOURCES test_yardstick.c vkutil.c)
dcp_test(test_yardstick_2dev EXE test_yardstick ENV "DCP_VK_DEVICES=0,0")
# dcp-vk-bench yardsticks: every ceiling measured, finite and positive (never a speed asserted).
add_test(NAME app_bench_yardsticks_json COMMAND dcp-vk-bench yardsticks --samples 2 --json)
set_tests_properties(app_bench_yardsticks_json PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1"
                     PASS_REGULAR_EXPRESSION "\"stream_read_gbps\": [0-9.]+(e[-+][0-9]+)?, .*\"fma_gflops\": [0-9.]+(e[-+][0-9]+)?, .*\"dispatch_us\": [0-9.]+(e[-+][0-9]+)?, \"host_wait_us\": [0-9.]+(e[-+][0-9]+)?, \"samples\": 2"
                     FAIL_REGULAR_EXPRESSION "null|validation (error|warning)|\"fma_gflops\": 0[,}]")
