# cmake -DBUILD_DIR=<dcp-vk build> -DWORK=<scratch dir> -DCC=<C compiler> -DSRC=<this folder>
#       -P check.cmake
# Installs the build into WORK/prefix with `cmake --install`, builds the consumer program out of
# tree against it with find_package(dcpvk) (shared and static library) and with
# `pkg-config --cflags --libs dcpvk`, runs all three (each must print the version and device 0,
# and copy on it), and runs one with no Vulkan driver, where it must fail.
cmake_minimum_required(VERSION 3.20)
foreach(v BUILD_DIR WORK CC SRC)
  if(NOT ${v})
    message(FATAL_ERROR "check.cmake: -D${v}=... is required")
  endif()
endforeach()

function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK})
set(prefix ${WORK}/prefix)
run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# What the package holds.
file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*)
foreach(want include/dcpvk/dcpvk.h include/dcpvk/version.h dcpvkConfig.cmake dcpvkConfigVersion.cmake
             dcpvkTargets.cmake dcpvkStaticTargets.cmake pkgconfig/dcpvk.pc libdcpvk.a libdcpvk.so)
  string(REGEX MATCH "[^;]*${want}(;|$)" found "${installed}")
  if(NOT found)
    message(FATAL_ERROR "the installed package lacks ${want}; it holds:\n${installed}")
  endif()
endforeach()
foreach(unwanted "/ref/" "_internal.h" "dcpvk_ref" "testmodel")
  string(FIND "${installed}" "${unwanted}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "the installed package holds private files (${unwanted}):\n${installed}")
  endif()
endforeach()

# find_package(dcpvk): a separate CMake project, nothing from the source tree on its paths.
# A sanitizer build (DCP_SANITIZE) installs instrumented libraries: the consumer links the runtimes.
set(san_flags "")
if(SANITIZE)
  set(san_flags -fsanitize=address,undefined)
endif()
run("configuring the consumer" ${CMAKE_COMMAND} -S ${SRC} -B ${WORK}/cmake-build -DCMAKE_C_COMPILER=${CC}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release "-DCMAKE_EXE_LINKER_FLAGS=${san_flags}")
run("building the consumer" ${CMAKE_COMMAND} --build ${WORK}/cmake-build)

# pkg-config: the flags it gives, and nothing else (an rpath so that it finds the shared library).
find_program(PKG_CONFIG pkg-config REQUIRED)
file(GLOB_RECURSE pc ${prefix}/*/dcpvk.pc)
get_filename_component(pcdir "${pc}" DIRECTORY)
set(ENV{PKG_CONFIG_PATH} ${pcdir})
run("pkg-config" ${PKG_CONFIG} --cflags --libs dcpvk)
separate_arguments(pc_flags UNIX_COMMAND "${out}")
message(STATUS "pkg-config --cflags --libs dcpvk: ${out}")
run("pkg-config libdir" ${PKG_CONFIG} --variable=libdir dcpvk)
string(STRIP "${out}" libdir)
run("building with pkg-config" ${CC} ${SRC}/consumer.c -o ${WORK}/consumer_pkgconfig ${pc_flags}
    -Wl,-rpath,${libdir} ${san_flags})

foreach(exe cmake-build/consumer_shared cmake-build/consumer_static consumer_pkgconfig)
  run("running ${exe}" ${WORK}/${exe})
  if(NOT out MATCHES "dcp-vk [0-9]+\\.[0-9]+\\.[0-9]+ \\(headers [0-9.]+\\)\ndevices: [1-9][0-9]*\ndevice 0: [^\n]+\ndevice copy of 1024 bytes: ok")
    message(FATAL_ERROR "${exe} printed:\n${out}")
  endif()
  message(STATUS "${exe}: ${out}")
endforeach()

# No Vulkan driver: the program must say so and fail.
set(ENV{VK_ICD_FILENAMES} ${WORK}/no-such-icd.json)
set(ENV{VK_DRIVER_FILES} ${WORK}/no-such-icd.json)
execute_process(COMMAND ${WORK}/cmake-build/consumer_shared RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "with no Vulkan driver the consumer succeeded:\n${out}\n${err}")
endif()
message(STATUS "with no Vulkan driver: exit ${rc}: ${err}")
