# The benchmark's yardsticks against their references, and dcp-vk-bench's roofline output.
dcp_test(test_yardstick SOURCES test_yardstick.c vkutil.c)
dcp_test(test_yardstick_2dev EXE test_yardstick ENV "DCP_VK_DEVICES=0,0")
# dcp-vk-bench yardsticks: every ceiling measured, finite and positive (never a speed asserted).
add_test(NAME app_bench_yardsticks_json COMMAND dcp-vk-bench yardsticks --samples 2 --json)
set_tests_properties(app_bench_yardsticks_json PROPERTIES ENVIRONMENT "DCP_VK_VALIDATION=1"
                     PASS_REGULAR_EXPRESSION "\"stream_read_gbps\": [0-9.]+(e[-+][0-9]+)?, .*\"fma_gflops\": [0-9.]+(e[-+][0-9]+)?, .*\"dispatch_us\": [0-9.]+(e[-+][0-9]+)?, \"host_wait_us\": [0-9.]+(e[-+][0-9]+)?, \"samples\": 2"
                     FAIL_REGULAR_EXPRESSION "null|validation (error|warning)|\"fma_gflops\": 0[,}]")
# The roofline fields of every kernel bench in JSON (small shapes): present, finite, positive and
# consistent with the yardsticks printed beside them (tests/test_bench_json.c; never a speed).
if(TARGET PkgConfig::CJSON)
  dcp_test(test_bench_matmul_json SOURCES test_bench_json.c EXE test_bench_json
           ARGS bench $<TARGET_FILE:dcp-vk-bench> matmul --rows 256 --k 256 --types f16,q8_0,q4_k --batch 1,8 --iters 2 --json
           TIMEOUT 300)
  # the fused variant the model's gate|up runs at TP 1 (the RMSNorm in the load, the SwiGLU in the store)
  dcp_test(test_bench_matmul_fused_json EXE test_bench_json
           ARGS bench $<TARGET_FILE:dcp-vk-bench> matmul --rows 256 --k 256 --types f16,q4_k --batch 1,8 --iters 2
                --fuse norm+glu --json
           TIMEOUT 300)
  target_link_libraries(test_bench_json PRIVATE PkgConfig::CJSON)
  add_dependencies(test_bench_json dcp-vk-bench dcp-vk-run)
  dcp_test(test_bench_ops_json EXE test_bench_json
           ARGS bench $<TARGET_FILE:dcp-vk-bench> ops --tokens 3 --n-embd 256 --n-ff 512 --q-heads 4 --kv-heads 2
                --head-dim 64 --vocab 1000 --mla-heads 2 --kv-lora 64 --rope 16 --nope 32 --v-dim 32 --moe-embd 128
                --experts 8 --experts-used 2 --expert-ff 64 --iters 1 --json
           TIMEOUT 300)
endif()
# dcp-vk-run --json's decode step: dispatches (all ranks, the busiest rank) and host waits (one a
# round, or one a step when the rounds wait on the GPU), at TP 1 and at TP 8 / DCP 2 over 8 logical
# devices (tests/test_bench_json.c).
if(TARGET PkgConfig::CJSON)
  dcp_test(test_run_json_tp1 EXE test_bench_json
           ARGS run $<TARGET_FILE:dcp-vk-run> -m ${DCP_TEST_DATA}/stories260K.gguf -n 8 --temp 0 --json)
  dcp_test(test_run_json_tp8_dcp2 EXE test_bench_json ENV "DCP_VK_DEVICES=0,0,0,0,0,0,0,0"
           ARGS run $<TARGET_FILE:dcp-vk-run> -m ${DCP_TEST_DATA}/stories260K.gguf -n 8 --temp 0
                --tensor-parallel-size 8 --decode-context-parallel-size 2 --json)
endif()
# dcp-vk-bench attn, attn --mla and attn --dcp: the roofline fields of one configuration (small shapes, checked
# against the CPU reference as well).
if(TARGET PkgConfig::CJSON)
  dcp_test(test_bench_attn_json EXE test_bench_json
           ARGS bench $<TARGET_FILE:dcp-vk-bench> attn --ctx 300 --batch 2 --q-heads 8 --kv-heads 2 --head-dim 64
                --iters 2 --verify --json
           TIMEOUT 300)
  dcp_test(test_bench_attn_mla_json EXE test_bench_json
           ARGS bench $<TARGET_FILE:dcp-vk-bench> attn --mla --ctx 300 --batch 2 --q-heads 4 --kv-lora 64 --rope 16
                --iters 2 --verify --json
           TIMEOUT 300)
  dcp_test(test_bench_attn_mla_q8_0_json EXE test_bench_json
           ARGS bench $<TARGET_FILE:dcp-vk-bench> attn --mla --kv-dtype q8_0 --ctx 300 --batch 2 --q-heads 4
                --kv-lora 64 --rope 32 --iters 2 --verify --json
           TIMEOUT 300)
  # attn --dcp 2 over two logical devices: the local decode's roofline.
  dcp_test(test_bench_attn_dcp_json EXE test_bench_json
           ARGS bench $<TARGET_FILE:dcp-vk-bench> attn --dcp 2 --ctx 300 --batch 2 --q-heads 8 --kv-heads 2 --head-dim 64
                --iters 2 --verify --json
           ENV DCP_VK_DEVICES=0,0
           TIMEOUT 300)
endif()
# scripts/bench-ab.sh --quick (two builds alternated, here the build against itself) and
# scripts/roofline-compare.py's before / after tables: every case run three times a side, every
# table row with each run and a speedup, bad arguments refused by name (tests/bench/bench_ab_check.py; never
# a speed asserted).
find_program(DCP_PYTHON3 python3)
if(DCP_PYTHON3)
  add_test(NAME app_bench_ab COMMAND ${DCP_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/bench/bench_ab_check.py
           $<TARGET_FILE_DIR:dcp-vk-bench> ${PROJECT_SOURCE_DIR}/scripts ${CMAKE_CURRENT_BINARY_DIR}/bench_ab)
  set_tests_properties(app_bench_ab PROPERTIES ENVIRONMENT "${DCP_TEST_ENV}" TIMEOUT 600)
endif()
