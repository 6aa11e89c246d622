# The include rules of the source tree (docs/design.md, "Layout of the code"), from the sources,
# and the checker's self-test on a copy of the tree with every rule broken (tests/layout/).
add_test(NAME test_layout
         COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR} -DLIB=${CMAKE_BINARY_DIR}/dcpvk_lib_sources.txt
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/layout/check_layout.cmake)
add_test(NAME test_layout_selftest
         COMMAND ${CMAKE_COMMAND} -DROOT=${CMAKE_SOURCE_DIR} -DLIB=${CMAKE_BINARY_DIR}/dcpvk_lib_sources.txt
                 -DSELFTEST=${CMAKE_CURRENT_BINARY_DIR}/layout-selftest
                 -P ${CMAKE_CURRENT_SOURCE_DIR}/layout/check_layout.cmake)
set_tests_properties(test_layout test_layout_selftest PROPERTIES TIMEOUT 120 LABELS "host;layout")
