# cmake -DROOT=<source tree> -DLIB=<file> [-DSELFTEST=<scratch dir>] -P check_layout.cmake
#
# The include rules of the source tree (docs/design.md, "Layout of the code"), checked from the
# sources so that they stay true:
#   below-attn     nothing at step level or below (src/common, vk, kernels, quant, gguf, kv, comm,
#                  step) includes attn/ (its private headers or dcpvk/attn.h, cp.h);
#   vk-no-params   src/vk/ includes no kernel-parameter header (*_params.h of another folder, or
#                  anything of src/kernels/);
#   mpi-one-file   only src/comm/mpi_transport.c includes <mpi.h> (src/, include/, apps/);
#   public-only    src/engine/ uses only include/dcpvk/ (and src/common/'s status plumbing); the
#                  apps dcp-vk-run, -serve, -gguf and -info (their mains, apps/serve/ and
#                  the apps' shared code) use only include/dcpvk/ and the apps' own code;
#                  dcp-vk-run and dcp-vk-gguf also the test-model library (testmodel/testmodel.h);
#   lib-sources    src/ref/, src/testmodel/ (and apps/, tests/) never build into libdcpvk, and its
#                  targets link neither dcpvk_ref nor dcpvk_testmodel (LIB: what CMake builds it from);
#   folder-table   every file of src/<folder>/ and include/dcpvk/ includes only its own folder,
#                  src/common/, and the folders its row of the table below reaches (a folder may
#                  include what the folders it may include may include).
# A header is owned by the folder it lives in; a public header include/dcpvk/<h>.h by the folder
# of DCP_PUBLIC_OWNER below (a new public header must be added there).
#
# Rules that fail today because of work under way elsewhere are listed, exactly, in
# DCP_LAYOUT_PENDING: they are still checked (a new breach fails), and an entry that no longer
# occurs fails too, so that the list only shrinks.
#
# -DSELFTEST=<dir>: copies ROOT's src/, include/ and apps/ to <dir>, breaks every rule (and adds a
# few lines that must pass), and checks that exactly the expected breaches are reported, and that
# a stale pending entry is reported.
cmake_minimum_required(VERSION 3.20)

# ---- the rules -----------------------------------------------------------------------------------

# folder -> the folders it may include (besides itself and common). PUBLIC: every public header.
set(DCP_MAY_common "")
set(DCP_MAY_vk "common")
set(DCP_MAY_kernels "vk;common")
set(DCP_MAY_quant "common")
set(DCP_MAY_gguf "quant")
set(DCP_MAY_kv "kernels;vk")
set(DCP_MAY_comm "vk")
set(DCP_MAY_step "comm;vk")
set(DCP_MAY_attn "kv;comm;step;kernels")
set(DCP_MAY_ops "kv;quant;kernels")
set(DCP_MAY_text "gguf")
set(DCP_MAY_model "attn;ops;step;kv;comm;gguf;quant")
set(DCP_MAY_engine "PUBLIC")
set(DCP_MAY_ref "gguf;quant;PARAMS")
set(DCP_MAY_testmodel "gguf;quant;PARAMS")
# Public headers a folder may include besides those of its row: the references compute from the
# same inputs as the kernels, the KV pages' row layout (dcp_kv_row_bytes) and the hyperparameters.
set(DCP_MAY_HEADERS_ref "dcpvk/kv.h;dcpvk/model_config.h")
set(DCP_FOLDERS common vk kernels quant gguf kv comm step attn ops text model engine ref testmodel)
# Step level and below.
set(DCP_BELOW_ATTN common vk kernels quant gguf kv comm step)

# include/dcpvk/<name>.h -> the folder that implements it.
set(DCP_PUBLIC_OWNER
    dcpvk=PUBLIC export=common status=common dtype=common version=common vk=vk kv=kv comm=comm attn=attn cp=attn
    quant=quant gguf=gguf ops=ops model_config=model model=model tokenizer=text chat=text utf8=text
    json_constraint=text
    engine=engine)

# Breaches that other work in progress removes (rule|file|included header). Each is checked: it
# must still occur, and nothing else may.
set(DCP_LAYOUT_PENDING
)

# ---- the checker ---------------------------------------------------------------------------------

# Closure of the may-include table.
foreach(f ${DCP_FOLDERS})
  set(reach ${DCP_MAY_${f}})
  set(changed TRUE)
  while(changed)
    set(changed FALSE)
    foreach(r ${reach})
      foreach(n ${DCP_MAY_${r}})
        if(NOT n IN_LIST reach)
          list(APPEND reach ${n})
          set(changed TRUE)
        endif()
      endforeach()
    endforeach()
  endwhile()
  set(DCP_REACH_${f} ${f} common ${reach})
endforeach()
foreach(pair ${DCP_PUBLIC_OWNER})
  string(REPLACE "=" ";" kv "${pair}")
  list(GET kv 0 k)
  list(GET kv 1 v)
  set(DCP_OWNER_OF_${k} ${v})
endforeach()

set(DCP_BREACHES "")
macro(breach rule file inc why)
  list(APPEND DCP_BREACHES "${rule}|${file}|${inc}")
  set(DCP_WHY_${rule}|${file}|${inc} "${why}")
endmacro()

# The #include lines of ROOT/<rel> as "q:<path>" (quoted) and "a:<path>" (angle brackets).
function(includes_of root rel out)
  file(STRINGS ${root}/${rel} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[<\"]")
  set(res "")
  foreach(l ${lines})
    if(l MATCHES "#[ \t]*include[ \t]*\"([^\"]+)\"")
      list(APPEND res "q:${CMAKE_MATCH_1}")
    elseif(l MATCHES "#[ \t]*include[ \t]*<([^>]+)>")
      list(APPEND res "a:${CMAKE_MATCH_1}")
    endif()
  endforeach()
  set(${out} "${res}" PARENT_SCOPE)
endfunction()

# The folder that owns quoted include `inc` seen from ROOT/<rel>: a src/ folder, PUBLIC (the
# umbrella header), "apps" (the apps' own code), SELF (a header beside the file), GENERATED (no
# such file: the generated SPIR-V headers) or UNMAPPED (a public header not in DCP_PUBLIC_OWNER).
function(owner_of root rel inc out)
  get_filename_component(dir ${rel} DIRECTORY)
  if(NOT inc MATCHES "/")
    if(EXISTS ${root}/${dir}/${inc})
      set(${out} SELF PARENT_SCOPE)
    else()
      set(${out} GENERATED PARENT_SCOPE)
    endif()
    return()
  endif()
  string(REGEX MATCH "^[^/]+" top "${inc}")
  if(top STREQUAL "dcpvk")
    string(REGEX REPLACE "^dcpvk/(.*)\\.h$" "\\1" name "${inc}")
    if(DEFINED DCP_OWNER_OF_${name})
      set(${out} ${DCP_OWNER_OF_${name}} PARENT_SCOPE)
    else()
      set(${out} UNMAPPED PARENT_SCOPE)
    endif()
  elseif(rel MATCHES "^apps/" AND EXISTS ${root}/apps/${inc})
    set(${out} apps PARENT_SCOPE)
  elseif(IS_DIRECTORY ${root}/src/${top})
    set(${out} ${top} PARENT_SCOPE)
  else()
    set(${out} UNKNOWN PARENT_SCOPE)
  endif()
endfunction()

function(check_tree root lib)
  set(DCP_BREACHES "")
  file(GLOB_RECURSE files RELATIVE ${root} ${root}/src/*.c ${root}/src/*.h ${root}/include/dcpvk/*.h
       ${root}/apps/*.c ${root}/apps/*.h)
  list(SORT files)
  foreach(rel ${files})
    set(folder "")
    if(rel MATCHES "^src/([^/]+)/")
      set(folder ${CMAKE_MATCH_1})
    elseif(rel MATCHES "^include/dcpvk/(.*)\\.h$")
      set(name ${CMAKE_MATCH_1})
      set(folder ${DCP_OWNER_OF_${name}})
      if(NOT folder)
        breach(folder-table ${rel} "(itself)" "public header without an owner: add it to DCP_PUBLIC_OWNER")
        continue()
      endif()
    endif()
    if(folder STREQUAL "PUBLIC")
      continue() # the umbrella header dcpvk/dcpvk.h includes every public header
    endif()
    if(folder AND NOT DEFINED DCP_REACH_${folder})
      breach(folder-table ${rel} "(itself)" "src/${folder}/ is not in the layout table (DCP_MAY_*)")
      continue()
    endif()
    # apps held to the public API: the mains of run, serve, gguf, info, their folders, apps/common|cli.
    set(public_app FALSE)
    if(rel MATCHES "^apps/(dcp-vk-(run|serve|gguf|info)\\.c|(run|serve|gguf|info|cli|common)/)")
      set(public_app TRUE)
    endif()
    includes_of(${root} ${rel} incs)
    foreach(i ${incs})
      string(SUBSTRING "${i}" 2 -1 inc)
      if(i MATCHES "^a:")
        if(inc STREQUAL "mpi.h" AND NOT rel STREQUAL "src/comm/mpi_transport.c")
          breach(mpi-one-file ${rel} ${inc} "only src/comm/mpi_transport.c includes mpi.h")
        endif()
        continue()
      endif()
      owner_of(${root} ${rel} ${inc} own)
      if(own STREQUAL "UNMAPPED")
        breach(folder-table ${rel} ${inc} "public header without an owner: add it to DCP_PUBLIC_OWNER")
        continue()
      endif()
      set(is_params FALSE)
      if(inc MATCHES "_params\\.h$" OR own STREQUAL "kernels")
        set(is_params TRUE)
      endif()
      if(public_app)
        if(NOT (inc MATCHES "^dcpvk/" OR own STREQUAL "apps" OR own STREQUAL "SELF"
                OR (inc STREQUAL "testmodel/testmodel.h" AND rel MATCHES "^apps/dcp-vk-(run|gguf)\\.c$")))
          breach(public-only ${rel} ${inc} "the app uses only include/dcpvk/ and the apps' own code")
        endif()
        continue()
      endif()
      if(NOT folder OR own STREQUAL "SELF" OR own STREQUAL "GENERATED")
        continue()
      endif()
      if(folder IN_LIST DCP_BELOW_ATTN AND own STREQUAL "attn")
        breach(below-attn ${rel} ${inc} "src/${folder}/ is at step level or below: it includes nothing of attn/")
      endif()
      if(folder STREQUAL "vk" AND is_params AND NOT own STREQUAL "vk")
        breach(vk-no-params ${rel} ${inc} "src/vk/ knows no kernel's parameters")
      endif()
      if(folder STREQUAL "engine")
        if(NOT (inc MATCHES "^dcpvk/" OR own STREQUAL "engine" OR own STREQUAL "common"))
          breach(public-only ${rel} ${inc} "src/engine/ uses only include/dcpvk/")
        endif()
        continue()
      endif()
      if(own STREQUAL folder OR own STREQUAL "common")
        continue()
      endif()
      if(own STREQUAL "PUBLIC" OR NOT own IN_LIST DCP_REACH_${folder})
        if(NOT (is_params AND "PARAMS" IN_LIST DCP_MAY_${folder}) AND NOT inc IN_LIST DCP_MAY_HEADERS_${folder})
          breach(folder-table ${rel} ${inc} "src/${folder}/ may include ${DCP_REACH_${folder}}, not ${own}")
        endif()
      endif()
    endforeach()
  endforeach()
  # What libdcpvk is built from and links.
  if(NOT EXISTS ${lib})
    message(FATAL_ERROR "check_layout: ${lib} (libdcpvk's sources, written by CMakeLists.txt) is missing")
  endif()
  file(STRINGS ${lib} lib_lines)
  set(n_src 0)
  foreach(l ${lib_lines})
    if(l MATCHES "^source (.*)$")
      math(EXPR n_src "${n_src} + 1")
      set(s ${CMAKE_MATCH_1})
      if(IS_ABSOLUTE "${s}")
        file(RELATIVE_PATH s ${ROOT} ${s})
      endif()
      if(s MATCHES "^(src/ref|src/testmodel|apps|tests)/")
        breach(lib-sources "libdcpvk" ${s} "libdcpvk is built from the library's folders only")
      endif()
    elseif(l MATCHES "^link (.*)$")
      set(linked "${CMAKE_MATCH_1}")
      if(linked MATCHES "dcpvk_ref|dcpvk_testmodel")
        breach(lib-sources "libdcpvk" "${linked}" "libdcpvk links neither the references nor the test models")
      endif()
    endif()
  endforeach()
  if(n_src LESS 10)
    message(FATAL_ERROR "check_layout: ${lib} names ${n_src} sources: not libdcpvk's source list")
  endif()
  set(DCP_BREACHES "${DCP_BREACHES}" PARENT_SCOPE)
  foreach(b ${DCP_BREACHES})
    set(DCP_WHY_${b} "${DCP_WHY_${b}}" PARENT_SCOPE)
  endforeach()
endfunction()

# Sets `out` to what differs between the breaches found and `expected` ("" when they agree).
function(compare what expected out)
  set(unexpected "")
  foreach(b ${DCP_BREACHES})
    if(NOT b IN_LIST expected)
      string(REPLACE "|" ": " line "${b}")
      string(APPEND unexpected "  ${line}  (${DCP_WHY_${b}})\n")
    endif()
  endforeach()
  set(gone "")
  foreach(b ${expected})
    if(NOT b IN_LIST DCP_BREACHES)
      string(REPLACE "|" ": " line "${b}")
      string(APPEND gone "  ${line}\n")
    endif()
  endforeach()
  set(msg "")
  if(unexpected OR gone)
    set(msg "${what}:\n")
    if(unexpected)
      string(APPEND msg "include rules broken (rule: file: include):\n${unexpected}")
    endif()
    if(gone)
      string(APPEND msg "expected but no longer found (an entry of DCP_LAYOUT_PENDING in "
                        "tests/layout/check_layout.cmake: delete it):\n${gone}")
    endif()
  endif()
  set(${out} "${msg}" PARENT_SCOPE)
endfunction()

if(NOT ROOT OR NOT LIB)
  message(FATAL_ERROR "usage: cmake -DROOT=<source tree> -DLIB=<libdcpvk sources file> [-DSELFTEST=<dir>] -P check_layout.cmake")
endif()

if(NOT SELFTEST)
  check_tree(${ROOT} ${LIB})
  compare("the source tree ${ROOT}" "${DCP_LAYOUT_PENDING}" msg)
  if(msg)
    message(FATAL_ERROR "${msg}")
  endif()
  list(LENGTH DCP_BREACHES n)
  message(STATUS "include rules hold (${n} pending breaches listed in DCP_LAYOUT_PENDING, each still present)")
  return()
endif()

# ---- self-test: a copy of the tree with one breach of each rule ---------------------------------
# The breaches of the tree as it is, then those of the copy with the lines below added.
check_tree(${ROOT} ${LIB})
set(expected ${DCP_BREACHES})
file(REMOVE_RECURSE ${SELFTEST})
foreach(d src include apps)
  file(COPY ${ROOT}/${d} DESTINATION ${SELFTEST})
endforeach()
function(add_file rel text)
  file(WRITE ${SELFTEST}/${rel} "${text}")
endfunction()
add_file(src/kv/bad_attn.c "#include \"attn/cp_internal.h\"\n#include \"dcpvk/cp.h\"\n")
add_file(src/vk/bad_params.c "#include \"kernels/ops_params.h\"\n")
add_file(src/ops/bad_mpi.c "#include <mpi.h>\n")
add_file(src/engine/bad_private.c "#include \"model/graph.h\"\n#include \"dcpvk/engine.h\"\n")
add_file(apps/serve/bad_private.c "#include \"step/step.h\"\n#include \"dcpvk/model.h\"\n")
add_file(apps/dcp-vk-gguf.c "#include \"text/tokenizer_internal.h\"\n#include \"testmodel/testmodel.h\"\n")
add_file(apps/dcp-vk-info.c "#include \"testmodel/testmodel.h\"\n")
add_file(src/quant/bad_up.c "#include \"gguf/gguf_internal.h\"\n")
add_file(src/text/bad_up.c "#include \"dcpvk/model.h\"\n#include \"dcpvk/tokenizer.h\"\n#include \"quant/quants.h\"\n")
add_file(src/ref/bad_model.c "#include \"model/graph.h\"\n#include \"kernels/ops_params.h\"\n")
add_file(include/dcpvk/newthing.h "#include \"dcpvk/status.h\"\n")
add_file(src/newfolder/x.c "#include \"common/error.h\"\n")
file(READ ${LIB} lib)
file(WRITE ${SELFTEST}/lib_sources.txt "${lib}\nsource ${ROOT}/src/ref/model_ref.c\nlink dcpvk_testmodel\n")
# The mains were replaced: their own breaches (pending ones included) are gone.
list(FILTER expected EXCLUDE REGEX "\\|apps/dcp-vk-(gguf|info)\\.c\\|")
list(APPEND expected
    "below-attn|src/kv/bad_attn.c|attn/cp_internal.h"
    "below-attn|src/kv/bad_attn.c|dcpvk/cp.h"
    "folder-table|src/kv/bad_attn.c|attn/cp_internal.h"
    "folder-table|src/kv/bad_attn.c|dcpvk/cp.h"
    "vk-no-params|src/vk/bad_params.c|kernels/ops_params.h"
    "folder-table|src/vk/bad_params.c|kernels/ops_params.h"
    "mpi-one-file|src/ops/bad_mpi.c|mpi.h"
    "public-only|src/engine/bad_private.c|model/graph.h"
    "public-only|apps/serve/bad_private.c|step/step.h"
    "public-only|apps/dcp-vk-gguf.c|text/tokenizer_internal.h"
    "public-only|apps/dcp-vk-info.c|testmodel/testmodel.h"
    "folder-table|src/quant/bad_up.c|gguf/gguf_internal.h"
    "folder-table|src/text/bad_up.c|dcpvk/model.h"
    "folder-table|src/ref/bad_model.c|model/graph.h"
    "folder-table|include/dcpvk/newthing.h|(itself)"
    "folder-table|src/newfolder/x.c|(itself)"
    "lib-sources|libdcpvk|src/ref/model_ref.c"
    "lib-sources|libdcpvk|dcpvk_testmodel")
# Lines that must pass: text -> quant (through gguf), ref -> kernel params, engine and apps ->
# dcpvk/, dcp-vk-gguf -> the test models.
check_tree(${SELFTEST} ${SELFTEST}/lib_sources.txt)
compare("the self-test tree ${SELFTEST}: the checker is wrong" "${expected}" msg)
if(msg)
  message(FATAL_ERROR "${msg}")
endif()
# A pending entry that no longer occurs is reported.
list(APPEND expected "below-attn|src/kv/fixed.c|attn/cp_internal.h")
compare("stale entry" "${expected}" msg)
if(NOT msg MATCHES "no longer found [^\n]*delete it\\):\n  below-attn: src/kv/fixed.c: attn/cp_internal.h\n$")
  message(FATAL_ERROR "the checker does not report a stale pending entry:\n${msg}")
endif()
file(REMOVE_RECURSE ${SELFTEST})
message(STATUS "self-test: every rule reports its breach, and only those; a stale pending entry is reported")
