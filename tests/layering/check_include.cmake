# One layering check (tests/layering/CMakeLists.txt): compiles a one-line source that includes
# HEADER against INCLUDES (a |-separated list: the include path of a real target) and checks the
# outcome. EXPECT=fail passes only when the compiler fails because HEADER is not found (any other
# error fails the check); EXPECT=pass passes when the source compiles.
#   cmake -DCOMPILER=c++ -DINCLUDES="a|b" -DHEADER=cuda/runtime.hpp -DEXPECT=fail -DWORK=dir -P check_include.cmake
string(REPLACE "|" ";" include_list "${INCLUDES}")
set(flags -std=c++20 -fsyntax-only)
foreach(dir ${include_list})
  list(APPEND flags "-I${dir}")
endforeach()
string(MAKE_C_IDENTIFIER "${HEADER}" stem)
file(MAKE_DIRECTORY "${WORK}")
set(source "${WORK}/${stem}.cpp")
file(WRITE "${source}" "#include \"${HEADER}\"\nint main() { return 0; }\n")
execute_process(COMMAND ${COMPILER} ${flags} "${source}" RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(EXPECT STREQUAL "fail")
  if(rc EQUAL 0)
    message(FATAL_ERROR "#include \"${HEADER}\" compiled with include path ${include_list}: the layering is not enforced")
  endif()
  if(NOT out MATCHES "${HEADER}: No such file or directory" AND NOT out MATCHES "'${HEADER}' file not found")
    message(FATAL_ERROR "#include \"${HEADER}\" failed, but not because the header is out of reach:\n${out}")
  endif()
  message(STATUS "ok: \"${HEADER}\" is out of reach")
else()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "#include \"${HEADER}\" does not compile with include path ${include_list}:\n${out}")
  endif()
  message(STATUS "ok: \"${HEADER}\" compiles")
endif()
