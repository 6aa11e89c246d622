# Transports chosen per pair and step synchronisation (issue 12): the choice and the dma-buf
# negotiation, the GPU-side step decision and timeline semaphores, stories260K at TP 8 / DCP 2 over
# every transport with the same ids and bitwise the same logits (in one process and under MPI), the
# device-group path on a group of one, and MPI with pairs across "nodes" (DCP_VK_NODE_PROCS).
dcp_test(test_xport SOURCES test_xport.c ref_model.c vkutil.c)
dcp_test(test_xport_model EXE test_xport ARGS model ENV "DCP_VK_DEVICES=0,0,0,0,0,0,0,0")
dcp_test(test_comm_devgroup EXE test_comm ENV "DCP_VK_DEVICES=0" "DCP_VK_DEVICE_GROUPS=1")
dcp_test(test_dcp_devgroup EXE test_dcp ENV "DCP_VK_DEVICES=0" "DCP_VK_DEVICE_GROUPS=1")
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  dcp_mpi_test(test_xport_model_mpi2x4 2 test_xport --mpi)
  set_tests_properties(test_xport_model_mpi2x4 PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0,0,0")
  dcp_mpi_test(test_xport_model_mpi4x2 4 test_xport --mpi)
  set_tests_properties(test_xport_model_mpi4x2 PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0")
  # Four processes as two "nodes" of two: shared memory and peer copies inside, MPI across.
  dcp_mpi_test(test_comm_mpi4_nodes 4 test_comm --mpi)
  set_tests_properties(test_comm_mpi4_nodes PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_NODE_PROCS=2")
  dcp_mpi_test(test_dcp_mpi4_nodes 4 test_dcp --mpi)
  set_tests_properties(test_dcp_mpi4_nodes PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_NODE_PROCS=2")
endif()
if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
  # Half a DCP group per process (DCP 4 over 2 processes x 2 devices): the group's sub-communicator
  # in the node's shared memory; the model's ids as with the other transports.
  dcp_mpi_test(test_llama_mpi4x2_dcp4_gen_hostmem 4 test_llama_mpi 8 4 a2a 2 16 1 24 gen)
  set_tests_properties(test_llama_mpi4x2_dcp4_gen_hostmem PROPERTIES ENVIRONMENT
                       "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0;DCP_VK_TRANSPORT=hostmem")
endif()
# dcp-vk-bench comm as a user runs it: every collective over every transport (small sizes), the
# model step split; in one process and under mpiexec -n 2. dcp-vk-info names each pair's transport.
if(TARGET dcp-vk-bench)
  add_test(NAME app_bench_comm COMMAND dcp-vk-bench comm --max-bytes 16384 --iters 2 --model-layers 2
           --model-steps 2 --json)
  set_tests_properties(app_bench_comm PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0,0,0"
                       PASS_REGULAR_EXPRESSION "\"transport\": \"peer\".*\"collective\": \"dcp_ag_rs\".*\"model_step\": true"
                       FAIL_REGULAR_EXPRESSION "validation (error|warning)" TIMEOUT 600)
  if(MPI_C_FOUND AND MPIEXEC_EXECUTABLE)
    add_test(NAME app_bench_comm_mpi2 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
             $<TARGET_FILE:dcp-vk-bench> comm --max-bytes 4096 --iters 2 --transports auto,hostmem,mpi
             --model-layers 2 --model-steps 2)
    set_tests_properties(app_bench_comm_mpi2 PROPERTIES ENVIRONMENT "${DCP_TEST_ENV};DCP_VK_DEVICES=0,0"
                         PASS_REGULAR_EXPRESSION "transport hostmem, 4 ranks \\(2 processes\\).*shared-memory segment.*decode step"
                         FAIL_REGULAR_EXPRESSION "validation (error|warning)" TIMEOUT 600 PROCESSORS 2)
  endif()
endif()
add_test(NAME app_info_transports COMMAND dcp-vk-info)
set_tests_properties(app_info_transports PROPERTIES ENVIRONMENT "DCP_VK_DEVICES=0,0,0"
                     PASS_REGULAR_EXPRESSION "peer, 6 pairs \\(e.g. 0 -> 1\\): same physical device.*step rounds: host waits")
