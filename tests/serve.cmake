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
