# dcp-vk-serve end to end: stories260K at TP 8 / DCP 2 on a free loopback port, curl and the official
# OpenAI JavaScript client (tests/serve/node_modules, installed by scripts/setup.sh), bad requests,
# a client that disconnects, SIGTERM, API key.
if(TARGET dcp-vk-serve)
  dcp_test(test_serve SOURCES test_serve.c ARGS $<TARGET_FILE:dcp-vk-serve> ${CMAKE_CURRENT_SOURCE_DIR}/serve
           TIMEOUT 900)
  target_link_libraries(test_serve PRIVATE PkgConfig::CJSON)
  add_dependencies(test_serve dcp-vk-serve)
endif()
# The same server under mpiexec: 2 processes of 4 TP ranks (process 0 serves, process 1 follows).
if(TARGET dcp-vk-serve AND MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  dcp_test(test_serve_mpi EXE test_serve ARGS $<TARGET_FILE:dcp-vk-serve> ${CMAKE_CURRENT_SOURCE_DIR}/serve
           ${MPIEXEC_EXECUTABLE} 2 ENV DCP_VK_DEVICES=0 TIMEOUT 900)
  set_tests_properties(test_serve_mpi PROPERTIES PROCESSORS 2)
endif()
# Options: --help lists the server's and dcp-vk-run's options with defaults; usage errors name the
# option and exit 2.
if(TARGET dcp-vk-serve)
  add_test(NAME app_serve_help COMMAND dcp-vk-serve --help)
  set_tests_properties(app_serve_help PROPERTIES PASS_REGULAR_EXPRESSION
    "--host ADDR.*127.0.0.1.*--port N.*--api-key.*--max-body-bytes.*--max-queued.*--shutdown-timeout.*--max-header-bytes N.*default 16384.*--allowed-origins LIST.*default none.*--tensor-parallel-size.*--decode-context-parallel-size.*--dcp-comm-backend")
  add_test(NAME app_serve_bad_origins COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf --allowed-origins 'https://*.example.com' 2>&1; echo exit=$?")
  set_tests_properties(app_serve_bad_origins PROPERTIES PASS_REGULAR_EXPRESSION
    "option --allowed-origins: 'https://\\*.example.com' is not '\\*' or a comma-separated list.*\nexit=2")
  add_test(NAME app_serve_bad_port COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf --port 99999 2>&1; echo exit=$?")
  set_tests_properties(app_serve_bad_port PROPERTIES PASS_REGULAR_EXPRESSION
    "--port: '99999' is not an integer in \\[0, 65535\\]\nexit=2")
  add_test(NAME app_serve_run_only_option COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf -p hello 2>&1; echo exit=$?")
  set_tests_properties(app_serve_run_only_option PROPERTIES PASS_REGULAR_EXPRESSION
    "option -p is dcp-vk-run's: requests carry their prompts here.*\nexit=2")
  add_test(NAME app_serve_unknown_option COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf --bogus 2>&1; echo exit=$?")
  set_tests_properties(app_serve_unknown_option PROPERTIES PASS_REGULAR_EXPRESSION "unknown option '--bogus'.*\nexit=2")
  add_test(NAME app_serve_no_model COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> --port 0 2>&1; echo exit=$?")
  set_tests_properties(app_serve_no_model PROPERTIES PASS_REGULAR_EXPRESSION "-m MODEL.gguf is required.*\nexit=2")
  add_test(NAME app_serve_bad_template COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf --chat-template jinja 2>&1; echo exit=$?")
  set_tests_properties(app_serve_bad_template PROPERTIES PASS_REGULAR_EXPRESSION
    "--chat-template: 'jinja' is not a known family.*\nexit=2")
  add_test(NAME app_serve_bad_spec COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf --speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 2}' 2>&1; echo exit=$?")
  set_tests_properties(app_serve_bad_spec PROPERTIES PASS_REGULAR_EXPRESSION
    "--speculative-config: \"method\" is not one of ngram, draft_model: eagle\nexit=2")
  add_test(NAME app_serve_spec_field COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 2, \"prompt_lookup\": 3}' 2>&1; echo exit=$?")
  set_tests_properties(app_serve_spec_field PROPERTIES PASS_REGULAR_EXPRESSION
    "--speculative-config: unknown field \"prompt_lookup\" \\(allowed: method, model, num_speculative_tokens.*\nexit=2")
  add_test(NAME app_serve_missing_model COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m /nonexistent.gguf 2>&1; echo exit=$?")
  set_tests_properties(app_serve_missing_model PROPERTIES PASS_REGULAR_EXPRESSION "reading the model.*nonexistent.*\nexit=1")
endif()
# scripts/bench-serve.py (vllm bench serve's report) against a real server on stories260K: random
# prompts at a Poisson rate with a concurrency limit and goodput SLOs, a prompt file, chat; checks its
# JSON fields and counts, and the server's vllm:request_success_total (tests/serve/bench_serve_check.py).
find_program(DCP_PYTHON3 python3)
if(TARGET dcp-vk-serve AND DCP_PYTHON3)
  add_test(NAME app_bench_serve COMMAND ${DCP_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/serve/bench_serve_check.py
           $<TARGET_FILE:dcp-vk-serve> ${CMAKE_CURRENT_SOURCE_DIR}/data/stories260K.gguf
           ${PROJECT_SOURCE_DIR}/scripts/bench-serve.py)
  set_tests_properties(app_bench_serve PROPERTIES ENVIRONMENT "${DCP_TEST_ENV}" TIMEOUT 600)
endif()
# KV offload options: --kv-offloading-backend takes native only; --kv-offloading-size needs prefix caching.
if(TARGET dcp-vk-serve)
  add_test(NAME app_serve_bad_offload COMMAND sh -c "$<TARGET_FILE:dcp-vk-serve> -m x.gguf --kv-offloading-backend lmcache 2>&1; echo exit=$?; $<TARGET_FILE:dcp-vk-serve> -m x.gguf --kv-offloading-size 1 --no-enable-prefix-caching 2>&1; echo exit=$?; $<TARGET_FILE:dcp-vk-serve> -m x.gguf --kv-offloading-size -1 2>&1; echo exit=$?")
  set_tests_properties(app_serve_bad_offload PROPERTIES PASS_REGULAR_EXPRESSION
    "--kv-offloading-backend: 'lmcache' is not allowed \\(allowed: native\\)\nexit=2\n.*--kv-offloading-size: offloads the prefix cache's blocks.*\nexit=2\n.*--kv-offloading-size: '-1' is not a size in GiB.*\nexit=2")
endif()
# scripts/bench-prefix.py (the multi-turn agent trace of issue 20) on a tiny trace, 2 conversations x 2
# turns at TP 1 and TP 2 / DCP 2 on its generated model: the JSON fields, one run per configuration and
# mode (offload only where dcp-vk-serve has --kv-offloading-size, else skipped with a note), hit rate 0
# with caching off and > 0 with caching on, the table; no speed asserted (tests/serve/bench_prefix_check.py).
if(TARGET dcp-vk-serve AND TARGET dcp-vk-gguf AND DCP_PYTHON3)
  add_test(NAME app_bench_prefix COMMAND ${DCP_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/serve/bench_prefix_check.py
           $<TARGET_FILE:dcp-vk-serve> ${PROJECT_SOURCE_DIR}/scripts/bench-prefix.py)
  set_tests_properties(app_bench_prefix PROPERTIES ENVIRONMENT "${DCP_TEST_ENV}" TIMEOUT 600)
endif()
