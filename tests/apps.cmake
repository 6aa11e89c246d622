# The attention benchmark and the device lister as a user runs them.
add_test(NAME app_info_json COMMAND dcp-vk-info --json)
set_tests_properties(app_info_json PROPERTIES ENVIRONMENT "DCP_VK_DEVICES=0,0"
                     PASS_REGULAR_EXPRESSION "\"devices\": \\[\\{\"index\": 0.*\"index\": 1")
add_test(NAME app_info_bad_device COMMAND dcp-vk-info --devices 0,99)
set_tests_properties(app_info_bad_device PROPERTIES WILL_FAIL TRUE)
# A stricter storage-buffer offset alignment for CPU drivers (scripts/setup.sh runs the GPU tests
# with 256), and one that no Vulkan device may have.
add_test(NAME app_info_align256 COMMAND dcp-vk-info)
set_tests_properties(app_info_align256 PROPERTIES ENVIRONMENT "DCP_VK_MIN_STORAGE_ALIGN=256"
                     PASS_REGULAR_EXPRESSION "offset alignment 256 B")
add_test(NAME app_info_bad_align COMMAND sh -c "$<TARGET_FILE:dcp-vk-info> 2>&1; echo exit=$?")
set_tests_properties(app_info_bad_align PROPERTIES ENVIRONMENT "DCP_VK_MIN_STORAGE_ALIGN=512"
                     PASS_REGULAR_EXPRESSION "DCP_VK_MIN_STORAGE_ALIGN '512' is not a power of two in 1 \.\. 256.*exit=[1-9]")
# matmul's layout forced (the suite's *_split_layout tests), and a value it does not take.
add_test(NAME app_info_matmul_split COMMAND dcp-vk-info --json)
set_tests_properties(app_info_matmul_split PROPERTIES ENVIRONMENT "DCP_VK_MATMUL_LAYOUT=split"
                     PASS_REGULAR_EXPRESSION "\"matmul_layout\": \"split\"")
add_test(NAME app_info_bad_matmul_layout COMMAND sh -c "$<TARGET_FILE:dcp-vk-info> 2>&1; echo exit=$?")
set_tests_properties(app_info_bad_matmul_layout PROPERTIES ENVIRONMENT "DCP_VK_MATMUL_LAYOUT=lanes"
                     PASS_REGULAR_EXPRESSION "DCP_VK_MATMUL_LAYOUT 'lanes' is not one of rows .*, split .*exit=[1-9]")
# A smaller storage-buffer range for CPU drivers (test_prefix_offload_segments splits the host pool
# with it), and one below what the knob allows.
add_test(NAME app_info_range128k COMMAND dcp-vk-info)
set_tests_properties(app_info_range128k PROPERTIES ENVIRONMENT "DCP_VK_MAX_STORAGE_RANGE=131072"
                     PASS_REGULAR_EXPRESSION "max storage-buffer range 131072 B")
add_test(NAME app_info_bad_range COMMAND sh -c "$<TARGET_FILE:dcp-vk-info> 2>&1; echo exit=$?")
set_tests_properties(app_info_bad_range PROPERTIES ENVIRONMENT "DCP_VK_MAX_STORAGE_RANGE=4096"
                     PASS_REGULAR_EXPRESSION "DCP_VK_MAX_STORAGE_RANGE '4096' is not a byte count in 65536 \.\. 4294967295.*exit=[1-9]")
add_test(NAME app_bench_attn_verify COMMAND dcp-vk-bench attn --ctx 1500 --batch 3 --q-heads 8
         --kv-heads 2 --head-dim 64 --page-size 32 --iters 2 --verify)
set_tests_properties(app_bench_attn_verify PROPERTIES ENVIRONMENT "DCP_VK_DEVICES=0,0;DCP_VK_VALIDATION=1"
                     PASS_REGULAR_EXPRESSION "verify: ok" FAIL_REGULAR_EXPRESSION "validation (error|warning)")
# Usage errors name the option and its allowed values and exit 2.
add_test(NAME app_bench_bad_option COMMAND sh -c "$<TARGET_FILE:dcp-vk-bench> attn --kv-dtype q4 2>&1; echo exit=$?")
set_tests_properties(app_bench_bad_option PROPERTIES
                     PASS_REGULAR_EXPRESSION "--kv-dtype: 'q4' is not allowed \\(allowed: f32 f16 q8_0\\)\nexit=2")
add_test(NAME app_bench_capacity COMMAND dcp-vk-bench capacity --kv-budget-mib 1024 --layers 32 --kv-heads 2 --head-dim 128 --tp 8 --dcp 4)
set_tests_properties(app_bench_capacity PROPERTIES PASS_REGULAR_EXPRESSION "plain TP 8 \\(KV duplicated 4x\\): longest context 65536 tokens.*DCP 4 \\(interleave 1\\): longest context 262144 tokens")
# The KV dtype comparison: q8_0 stores 34 bytes per 32 values (8704 bytes per token here), so the
# longest context grows by 16384 / 8704 against f16, with and without DCP.
add_test(NAME app_bench_capacity_q8_0 COMMAND dcp-vk-bench capacity --kv-budget-mib 1024 --layers 32 --kv-heads 2 --head-dim 128 --tp 8 --dcp 4)
set_tests_properties(app_bench_capacity_q8_0 PROPERTIES PASS_REGULAR_EXPRESSION "f16 +16384 +65536 tokens +262144 tokens.*q8_0 +8704 +123360 tokens +493440 tokens")
# MLA's latent cache (DeepSeek-V3: 61 layers, 512 + 64 values per entry, K only): one latent head is
# held by every TP rank; DCP 8 shards it. 10 GiB / (576 x 2 B x 16 tokens x 61 layers) = 9549 pages:
# 152784 tokens under plain TP 8, 8 x that with DCP 8.
add_test(NAME app_bench_capacity_mla COMMAND dcp-vk-bench capacity --mla --layers 61 --tp 8 --dcp 8
         --kv-budget-mib 10240)
set_tests_properties(app_bench_capacity_mla PROPERTIES PASS_REGULAR_EXPRESSION
                     "512 \\+ 64 = 576 values per entry.*pages per device: 9549 .*plain TP 8 \\(KV duplicated 8x\\): longest context 152784 tokens.*DCP 8 \\(interleave 1\\): longest context 1222272 tokens \\(8.00x\\)")
add_test(NAME app_bench_capacity_weights COMMAND dcp-vk-bench capacity --mla --layers 61 --tp 8 --dcp 8
         --device-gib 80 --weights-gib 640)
set_tests_properties(app_bench_capacity_weights PROPERTIES PASS_REGULAR_EXPRESSION
                     "leaves nothing of the device's 80 GiB")
