# cmake -DNM=<nm> -DSHARED=<libdcpvk.so> -DHEADERS=<include/dcpvk> -DGENERATED=<build's include/dcpvk>
#       [-DSELFTEST=<scratch dir>] -P exports.cmake
#
# libdcpvk.so exports the public API and nothing else: the symbols `nm -D --defined-only` lists
# are exactly the functions declared in the public headers (include/dcpvk/ and the generated
# dcpvk/version.h: the folders HEADERS and GENERATED). A public declaration carries DCP_API (dcpvk/export.h)
# and the library is built with hidden visibility, so this fails when
#   - the library exports a symbol no public header declares (a private function made visible, a
#     dependency's symbol let through),
#   - a public header declares a function the library does not export (no definition, or a
#     definition that does not see its DCP_API declaration),
#   - a public function declaration lacks DCP_API.
# -DSELFTEST=<dir>: the checker on copies of the headers and on a listing with each of these faults
# added, each of which must be reported; and the real library, which must pass.
cmake_minimum_required(VERSION 3.20)

# The declarations of the headers *.h in `dirs`: `out_api` the functions declared with DCP_API,
# `out_bare` "file: name" of those declared without it.
function(public_declarations dirs out_api out_bare)
  set(api "")
  set(bare "")
  set(files "")
  foreach(d ${dirs})
    file(GLOB hs ${d}/*.h)
    list(APPEND files ${hs})
  endforeach()
  if(NOT files)
    message(FATAL_ERROR "exports: no headers in ${dirs}")
  endif()
  list(SORT files)
  foreach(f ${files})
    get_filename_component(fname ${f} NAME)
    file(READ ${f} t)
    # Comments out (block comments by hand: no regex over a whole comment), then line comments.
    set(c "")
    while(TRUE)
      string(FIND "${t}" "/*" a)
      if(a EQUAL -1)
        string(APPEND c "${t}")
        break()
      endif()
      string(SUBSTRING "${t}" 0 ${a} head)
      string(APPEND c "${head} ")
      math(EXPR a "${a} + 2")
      string(SUBSTRING "${t}" ${a} -1 t)
      string(FIND "${t}" "*/" e)
      if(e EQUAL -1)
        message(FATAL_ERROR "exports: ${f}: unterminated comment")
      endif()
      math(EXPR e "${e} + 2")
      string(SUBSTRING "${t}" ${e} -1 t)
    endwhile()
    string(REGEX REPLACE "//[^\n]*" "" c "${c}")
    # The C++ guards, the preprocessor lines (continuations joined first), the bodies of
    # structs and enums; [ ] would stop CMake from splitting the text into a list at ';'.
    string(REGEX REPLACE "#[ \t]*ifdef[ \t]+__cplusplus[^#]*#[ \t]*endif" "" c "${c}")
    string(REGEX REPLACE "\\\\\n" " " c "${c}")
    string(REGEX REPLACE "(^|\n)[ \t]*#[^\n]*" "\\1" c "${c}")
    string(REPLACE "[" "<" c "${c}")
    string(REPLACE "]" ">" c "${c}")
    set(prev "")
    while(NOT c STREQUAL prev)
      set(prev "${c}")
      string(REGEX REPLACE "{[^{}]*}" ";" c "${c}")
    endwhile()
    string(REGEX REPLACE "[ \t\r\n]+" " " c "${c}")
    foreach(s IN LISTS c)
      string(STRIP "${s}" s)
      if(s STREQUAL "" OR s MATCHES "^(typedef|static|struct|enum|union) ")
        continue()
      endif()
      if(s MATCHES "(^|[^A-Za-z0-9_])(dcp_[A-Za-z0-9_]+) ?\\(")
        set(name ${CMAKE_MATCH_2})
      elseif(s MATCHES "^DCP_API .*[^A-Za-z0-9_](dcp_[A-Za-z0-9_]+)( ?<[^>]*>)?$")
        set(name ${CMAKE_MATCH_1}) # an exported variable
      else()
        continue()
      endif()
      if(s MATCHES "^DCP_API ")
        list(APPEND api ${name})
      else()
        list(APPEND bare "${fname}: ${name}")
      endif()
    endforeach()
  endforeach()
  set(${out_api} "${api}" PARENT_SCOPE)
  set(${out_bare} "${bare}" PARENT_SCOPE)
endfunction()

# The names of the defined dynamic symbols in `listing` (the output of nm -D --defined-only).
function(exported_names listing out)
  set(names "")
  string(REGEX MATCHALL "[^\n]+" lines "${listing}")
  foreach(l ${lines})
    if(l MATCHES "^[0-9a-fA-F]* *[A-Za-z] ([^ @]+)")
      list(APPEND names ${CMAKE_MATCH_1})
    endif()
  endforeach()
  set(${out} "${names}" PARENT_SCOPE)
endfunction()

# `out`: what is wrong ("" when the exports are the DCP_API declarations and every declaration
# has DCP_API).
function(compare_exports api bare exported out)
  set(msg "")
  set(extra "")
  foreach(s ${exported})
    if(NOT s IN_LIST api)
      string(APPEND extra "  ${s}\n")
    endif()
  endforeach()
  set(missing "")
  foreach(s ${api})
    if(NOT s IN_LIST exported)
      string(APPEND missing "  ${s}\n")
    endif()
  endforeach()
  set(unmarked "")
  foreach(s ${bare})
    string(APPEND unmarked "  ${s}\n")
  endforeach()
  if(extra)
    string(APPEND msg "exported but declared in no public header (hidden visibility lost?):\n${extra}")
  endif()
  if(missing)
    string(APPEND msg "declared with DCP_API but not exported (no definition, or it does not include its header):\n${missing}")
  endif()
  if(unmarked)
    string(APPEND msg "public function declarations without DCP_API (include dcpvk/export.h):\n${unmarked}")
  endif()
  set(${out} "${msg}" PARENT_SCOPE)
endfunction()

if(NOT NM OR NOT SHARED OR NOT HEADERS OR NOT GENERATED)
  message(FATAL_ERROR "usage: cmake -DNM=<nm> -DSHARED=<libdcpvk.so> -DHEADERS=<dir> -DGENERATED=<dir> "
                      "[-DSELFTEST=<dir>] -P exports.cmake")
endif()
set(HEADERS ${HEADERS} ${GENERATED})
execute_process(COMMAND ${NM} -D --defined-only ${SHARED} RESULT_VARIABLE rc OUTPUT_VARIABLE listing ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} -D --defined-only ${SHARED} failed: ${err}")
endif()
public_declarations("${HEADERS}" api bare)
exported_names("${listing}" exported)
list(LENGTH api n_api)
list(LENGTH exported n_exp)
# A parser that found nothing, or a listing of another file, would agree trivially.
if(n_api LESS 100 OR n_exp LESS 100)
  message(FATAL_ERROR "exports: ${n_api} DCP_API declarations in ${HEADERS}, ${n_exp} symbols exported by ${SHARED}: "
                      "not the public API")
endif()
compare_exports("${api}" "${bare}" "${exported}" msg)
if(msg)
  message(FATAL_ERROR "${SHARED} against the public headers:\n${msg}")
endif()
if(NOT SELFTEST)
  message(STATUS "${SHARED} exports exactly the ${n_api} DCP_API declarations of the public headers")
  return()
endif()

# ---- self-test ------------------------------------------------------------------------------------
file(REMOVE_RECURSE ${SELFTEST})
set(dirs "")
set(i 0)
foreach(d ${HEADERS})
  file(GLOB hs ${d}/*.h)
  file(COPY ${hs} DESTINATION ${SELFTEST}/h${i})
  list(APPEND dirs ${SELFTEST}/h${i})
  math(EXPR i "${i} + 1")
endforeach()
list(GET dirs 0 d0)
# Lines the parser must read as they are: a DCP_API declaration over lines, a typedef of a function
# pointer, a struct with a function-pointer field, a macro over lines with braces, an inline function.
file(WRITE ${d0}/selftest_ok.h
     "#include \"dcpvk/export.h\"\n/* dcp_not_a_declaration(void); */\n"
     "typedef void (*dcp_selftest_fn)(void *user);\n"
     "typedef struct dcp_selftest_s { int (*dcp_field)(int); int a[4]; } dcp_selftest_s;\n"
     "#define DCP_SELFTEST_DEFAULT { .a = {1, 2}, \\\n  .dcp_field = 0 }\n"
     "static inline int dcp_selftest_inline(int x) { return x + 1; }\n"
     "DCP_API const char *\n    dcp_version(void);\n")
public_declarations("${dirs}" api2 bare2)
compare_exports("${api2}" "${bare2}" "${exported}" msg)
if(msg)
  message(FATAL_ERROR "self-test: the checker misreads lines that are fine:\n${msg}")
endif()
# The faults: a declaration without DCP_API, a DCP_API declaration the library lacks, an exported
# private symbol.
file(WRITE ${d0}/selftest_bad.h
     "#include \"dcpvk/export.h\"\n"
     "int dcp_selftest_bare(int x,\n                      int y);\n"
     "DCP_API int dcp_selftest_undefined(void);\n")
public_declarations("${dirs}" api3 bare3)
compare_exports("${api3}" "${bare3}" "${exported};dcp_selftest_private" msg)
foreach(want "exported but declared in no public header[^\n]*\n  dcp_selftest_private\n"
             "declared with DCP_API but not exported[^\n]*\n  dcp_selftest_undefined\n"
             "without DCP_API[^\n]*\n  selftest_bad.h: dcp_selftest_bare\n")
  if(NOT msg MATCHES "${want}")
    message(FATAL_ERROR "self-test: the checker does not report '${want}'; it says:\n${msg}")
  endif()
endforeach()
# Each fault alone, on the real listing.
exported_names("${listing}\n0000000000012345 T dcp_selftest_private@@V1\n" withx)
compare_exports("${api}" "${bare}" "${withx}" msg)
if(NOT msg MATCHES "^exported but declared in no public header[^\n]*\n  dcp_selftest_private\n$")
  message(FATAL_ERROR "self-test: an extra exported symbol is not reported alone:\n${msg}")
endif()
list(REMOVE_ITEM exported dcp_version)
compare_exports("${api}" "${bare}" "${exported}" msg)
if(NOT msg MATCHES "^declared with DCP_API but not exported[^\n]*\n  dcp_version\n$")
  message(FATAL_ERROR "self-test: a public function the library lacks is not reported alone:\n${msg}")
endif()
file(REMOVE_RECURSE ${SELFTEST})
message(STATUS "self-test: an exported private symbol, a missing export and a declaration without DCP_API are each reported")
