# The libraries a static kiln links, as imported targets found on the machine at hand by name (never a path
# recorded at build time), so that an installed kiln package still links when its prefix is moved or copied to
# another machine of the same kind. Included by kiln's build (cmake/KilnLibrary.cmake) and by the installed
# kilnConfig.cmake, which re-finds each library the build linked.

# kiln_import_library(TARGET NAMES name... [HINTS dir...] [PATHS dir...] [REQUIRED]): an UNKNOWN IMPORTED
# library TARGET for the first of NAMES that find_library finds (HINTS before the system's folders, PATHS after
# them: the build's own folder is passed as a last resort for libraries carried outside the system, as .deps/).
# Sets TARGET's <C identifier>_FOUND in the caller's scope.
function(kiln_import_library target)
  cmake_parse_arguments(arg "REQUIRED" "" "NAMES;HINTS;PATHS" ${ARGN})
  string(MAKE_C_IDENTIFIER "${target}" id)
  if(NOT TARGET ${target})
    find_library(${id}_LIBRARY NAMES ${arg_NAMES} HINTS ${arg_HINTS} PATHS ${arg_PATHS})
    if(${id}_LIBRARY)
      add_library(${target} UNKNOWN IMPORTED)
      set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${id}_LIBRARY}")
    elseif(arg_REQUIRED)
      message(FATAL_ERROR "kiln: none of the libraries ${arg_NAMES} was found (for ${target}); install it or "
                          "add its folder to CMAKE_PREFIX_PATH / CMAKE_LIBRARY_PATH")
    endif()
  endif()
  if(TARGET ${target})
    set(${id}_FOUND TRUE PARENT_SCOPE)
  else()
    set(${id}_FOUND FALSE PARENT_SCOPE)
  endif()
endfunction()

# OpenBLAS as kiln::openblas: Debian's OpenMP build first (it shares kiln's OpenMP threads), else any.
macro(kiln_import_openblas)
  kiln_import_library(kiln::openblas NAMES openblas REQUIRED
                      HINTS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp ${ARGN})
endmacro()
