# `cmake --install` puts the headers, the static library and a CMake package under the prefix, so
# that a user's project finds kiln with find_package(kiln) and links kiln::kiln (docs/building.md: "Using kiln
# from CMake"), and the `kiln` command under bin/. The package re-finds what a static kiln links (OpenMP, fmt
# unless header-only, OpenBLAS, zlib, MPI, oneDNN, the CUDA toolkit, cuDNN and NCCL in a CUDA build) where it
# is used; libmvec is linked by name. No path of the build machine is recorded, so the prefix can be moved.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/kiln DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
# kiln/dlpack.hpp includes <dlpack/dlpack.h>: the vendored header goes beside kiln's, with its licence.
install(DIRECTORY ${PROJECT_SOURCE_DIR}/third_party/dlpack/include/dlpack DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/third_party/dlpack/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/kiln
        RENAME LICENSE.dlpack)
install(TARGETS kiln EXPORT kilnTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
set(KILN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kiln)
install(EXPORT kilnTargets NAMESPACE kiln:: DESTINATION ${KILN_CMAKE_DIR})
if(KILN_MKL)
  install(FILES ${KILN_MKL_LIBRARY} DESTINATION ${CMAKE_INSTALL_LIBDIR})  # oneMKL's products, linked by kiln
endif()
if(TARGET kiln_cli)
  # The system folders of its libraries (OpenBLAS's OpenMP build, MPI's) stay on its RPATH, not the build's.
  # libkiln_mkl.so, installed beside kiln, through $ORIGIN so that the moved prefix finds its own copy.
  set_target_properties(kiln_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}"
                                            INSTALL_RPATH_USE_LINK_PATH TRUE)
  install(TARGETS kiln_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

if(TARGET kiln_fmt_header_only)
  set(KILN_NEEDS_FMT OFF)
else()
  set(KILN_NEEDS_FMT ON)
endif()
set(KILN_PACKAGE_MPI ${MPI_CXX_FOUND})
if(KILN_ONEDNN_INCLUDE AND KILN_ONEDNN)
  set(KILN_PACKAGE_ONEDNN ON)
else()
  set(KILN_PACKAGE_ONEDNN OFF)
endif()
if(KILN_CUDA AND KILN_NCCL_INCLUDE AND KILN_NCCL)
  set(KILN_PACKAGE_NCCL ON)
else()
  set(KILN_PACKAGE_NCCL OFF)
endif()
foreach(flag KILN_PACKAGE_MPI KILN_MKL KILN_CUDA KILN_ICU KILN_FFTW)
  if(${flag})
    set(${flag} ON)
  else()
    set(${flag} OFF)
  endif()
endforeach()
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/kilnConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/kilnConfig.cmake INSTALL_DESTINATION ${KILN_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/kilnConfig.cmake ${PROJECT_BINARY_DIR}/kilnConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/kilnDependencies.cmake DESTINATION ${KILN_CMAKE_DIR})
