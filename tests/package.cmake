# The libraries and the installed package as a user meets them (tests/install/).
add_test(NAME test_lib_no_ref_symbols
         COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DSTATIC=$<TARGET_FILE:dcpvk> -DSHARED=$<TARGET_FILE:dcpvk_shared>
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/install/symbols.cmake)
# libdcpvk.so exports exactly the DCP_API declarations of the public headers (hidden visibility);
# the self-test feeds the checker each fault it must find.
foreach(t test_exports test_exports_selftest)
  set(extra "")
  if(t STREQUAL test_exports_selftest)
    set(extra -DSELFTEST=${CMAKE_CURRENT_BINARY_DIR}/exports-selftest)
  endif()
  add_test(NAME ${t}
           COMMAND ${CMAKE_COMMAND} -DNM=${CMAKE_NM} -DSHARED=$<TARGET_FILE:dcpvk_shared>
                   -DHEADERS=${CMAKE_SOURCE_DIR}/include/dcpvk
                   -DGENERATED=${DCP_GEN_INCLUDE}/dcpvk ${extra}
                   -P ${CMAKE_CURRENT_SOURCE_DIR}/install/exports.cmake)
endforeach()
set_tests_properties(test_exports test_exports_selftest PROPERTIES TIMEOUT 120 LABELS "host")
# cmake --install into a scratch prefix, then an out-of-tree program built against it with
# find_package(dcpvk) (shared and static) and with pkg-config, run with and without a Vulkan driver.
add_test(NAME test_install_package
         COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DWORK=${CMAKE_CURRENT_BINARY_DIR}/install-check
                 -DCC=${CMAKE_C_COMPILER} -DSRC=${CMAKE_CURRENT_SOURCE_DIR}/install -DSANITIZE=${DCP_SANITIZE}
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/install/check.cmake)
set_tests_properties(test_install_package PROPERTIES ENVIRONMENT "${DCP_TEST_ENV}" TIMEOUT 600)
