# DCP across devices: placement, KV cache and kv_append, communicator, DCP attention step.
dcp_test(test_placement SOURCES test_placement.c)
dcp_test(test_kv_cache SOURCES test_kv_cache.c vkutil.c)
dcp_test(test_kv_cache_4dev EXE test_kv_cache ENV "DCP_VK_DEVICES=0,0,0,0")
dcp_test(test_comm SOURCES test_comm.c vkutil.c ENV "DCP_VK_DEVICES=0")
dcp_test(test_comm_3dev EXE test_comm ENV "DCP_VK_DEVICES=0,0,0")
dcp_test(test_comm_4dev EXE test_comm ENV "DCP_VK_DEVICES=0,0,0,0")
dcp_mpi_test(test_comm_mpi2 2 test_comm --mpi)
dcp_mpi_test(test_comm_mpi4 4 test_comm --mpi)
# Two processes with two logical devices each: in-process packing, then MPI between processes.
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  add_test(NAME test_comm_mpi2x2 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
           $<TARGET_FILE:test_comm> --mpi)
  set_tests_properties(test_comm_mpi2x2 PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0"
                       TIMEOUT 900 PROCESSORS 2)
endif()
dcp_test(test_dcp_1dev SOURCES test_dcp.c vkutil.c EXE test_dcp ENV "DCP_VK_DEVICES=0")
dcp_test(test_dcp_2dev EXE test_dcp ENV "DCP_VK_DEVICES=0,0")
dcp_test(test_dcp_3dev EXE test_dcp ENV "DCP_VK_DEVICES=0,0,0")
dcp_test(test_dcp_4dev EXE test_dcp ENV "DCP_VK_DEVICES=0,0,0,0")
dcp_test(test_dcp_8dev EXE test_dcp ENV "DCP_VK_DEVICES=0,0,0,0,0,0,0,0")
dcp_mpi_test(test_dcp_mpi2 2 test_dcp --mpi)
dcp_mpi_test(test_dcp_mpi4 4 test_dcp --mpi)
# dcp-vk-bench attn --dcp: a small --verify run in one process and under mpiexec -n 2.
if(TARGET dcp-vk-bench)
  add_test(NAME test_bench_dcp_3dev COMMAND $<TARGET_FILE:dcp-vk-bench> attn --dcp 3 --backend a2a --interleave 4
           --ctx 301 --batch 2 --q-heads 6 --kv-heads 2 --head-dim 32 --iters 1 --verify)
  set_tests_properties(test_bench_dcp_3dev PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0,0" TIMEOUT 300)
  if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
    add_test(NAME test_bench_dcp_mpi2 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
             $<TARGET_FILE:dcp-vk-bench> attn --dcp 2 --backend ag_rs --interleave 16 --ctx 301 --batch 2
             --q-heads 4 --kv-heads 2 --head-dim 32 --iters 1 --verify)
    set_tests_properties(test_bench_dcp_mpi2 PROPERTIES ENVIRONMENT "${DCP_TEST_ENV}" TIMEOUT 300 PROCESSORS 2)
  endif()
endif()
# DCP step over two processes with two logical devices each (N = 4).
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  add_test(NAME test_dcp_mpi2x2 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
           $<TARGET_FILE:test_dcp> --mpi)
  set_tests_properties(test_dcp_mpi2x2 PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0"
                       TIMEOUT 900 PROCESSORS 2)
endif()
dcp_test(test_dcp_kernels SOURCES test_dcp_kernels.c vkutil.c)
