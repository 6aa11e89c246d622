# Hardening (issue 13): the apps as a careless or hostile user drives them, and capacity counting.
# test_harden <group> <folder of the apps> [mpiexec] (tests/test_harden.c says what each group does).
dcp_test(test_harden_files SOURCES test_harden.c EXE test_harden ARGS files ${CMAKE_BINARY_DIR} TIMEOUT 300)
add_dependencies(test_harden dcp-vk-run dcp-vk-gguf dcp-vk-bench dcp-vk-info)
if(TARGET dcp-vk-serve) # --help and --version of the server too
  add_dependencies(test_harden dcp-vk-serve)
  target_compile_definitions(test_harden PRIVATE DCP_TEST_SERVE=1)
endif()
dcp_test(test_harden_options EXE test_harden ARGS options ${CMAKE_BINARY_DIR} TIMEOUT 300)
dcp_test(test_harden_memory EXE test_harden ARGS memory ${CMAKE_BINARY_DIR} TIMEOUT 120)
if(NOT DCP_SANITIZE) # AddressSanitizer reserves terabytes of address space: no RLIMIT_AS with it
  dcp_test(test_harden_rlimit EXE test_harden ARGS rlimit ${CMAKE_BINARY_DIR} TIMEOUT 120)
endif()
dcp_test(test_harden_signals EXE test_harden ARGS signals ${CMAKE_BINARY_DIR} TIMEOUT 300)
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  # MPMD launches (-n 1 A : -n 1 B) of processes given different options: exit 2, never a hang.
  dcp_test(test_harden_mpi EXE test_harden ARGS mpi ${CMAKE_BINARY_DIR} ${MPIEXEC_EXECUTABLE} TIMEOUT 300)
  set_tests_properties(test_harden_mpi PROPERTIES PROCESSORS 2)
endif()
# MPI processes that fail (issue 16): a process killed mid-generation or mid-request, or failing at
# load, ends every process of the job within seconds, exit non-zero, naming the process and the cause
# (dcp-vk-run and dcp-vk-serve under mpiexec -n 2; tests/test_mpi_fail.c).
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE AND TARGET dcp-vk-serve)
  dcp_test(test_mpi_fail SOURCES test_mpi_fail.c ARGS ${MPIEXEC_EXECUTABLE} ${CMAKE_BINARY_DIR} TIMEOUT 600)
  add_dependencies(test_mpi_fail dcp-vk-run dcp-vk-serve)
  set_tests_properties(test_mpi_fail PROPERTIES PROCESSORS 2)
endif()
# dcp-vk-bench capacity counts with the placement rule; the count equals the page allocator's.
dcp_test(test_capacity SOURCES test_capacity.c TIMEOUT 60)
# Inputs that once ran for minutes and grew to gigabytes: answered at once now (a timeout of 10 s
# catches a return to allocating page by page).
foreach(args "--head-dim;4;--layers;1" "--kv-budget-mib;1000000" "--tp;1024;--dcp;512;--kv-heads;1")
  string(REPLACE ";" "_" name "app_bench_capacity_large${args}")
  string(REPLACE "-" "" name "${name}")
  add_test(NAME ${name} COMMAND dcp-vk-bench capacity ${args})
  set_tests_properties(${name} PROPERTIES TIMEOUT 10 PASS_REGULAR_EXPRESSION "TP [0-9]+ with DCP [0-9]+ \\(interleave 1\\): longest context [0-9]+ tokens")
endforeach()
set_tests_properties(app_bench_capacity_largekvbudgetmib_1000000 PROPERTIES
                     PASS_REGULAR_EXPRESSION "plain TP 8 \\(KV duplicated 4x\\): longest context 64000000 tokens")
# Memory counted before allocation equals what the devices allocate (weights, run state at a full
# context, mailboxes); a context beyond the range or the memory is refused with one that fits.
dcp_test(test_memory SOURCES test_memory.c vkutil.c TIMEOUT 300)
