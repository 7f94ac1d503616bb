# The library as layers (docs/architecture.md): one OBJECT library per src/ folder, each compiled
# against an include root that holds only the folders it may include, so a breach of the layering
# ("cuda/..." from src/core) is a compile error. Users link the one static library `kiln`
# (kiln::kiln), which carries every layer's objects and the link dependencies.
#
# Includes inside src/ are written "core/x.hpp", "cpu/x.hpp", "cuda/x.hpp". A layer's include root
# is ${PROJECT_BINARY_DIR}/layers/<layer>/, with a symbolic link per folder the layer may see:
#   core: core     cpu: core cpu     cuda: core cuda     autograd: core autograd     nn: (public API only)
#   dist: dist (and the public API)     text: text (and the public API)     glue (src/backends.cpp): core
# New .cpp files in a folder are picked up by the globs (CONFIGURE_DEPENDS).

# Compile flags of every layer, kept out of kiln's exported interface.
add_library(kiln_build_flags INTERFACE)
target_link_libraries(kiln_build_flags INTERFACE kiln_warnings OpenMP::OpenMP_CXX)
target_include_directories(kiln_build_flags INTERFACE ${PROJECT_SOURCE_DIR}/include)
# DLPack's C header (kiln/dlpack.hpp includes it): vendored, and installed beside kiln's headers.
target_include_directories(kiln_build_flags SYSTEM INTERFACE ${PROJECT_SOURCE_DIR}/third_party/dlpack/include)
target_compile_features(kiln_build_flags INTERFACE cxx_std_20)
# The CPU kernels must keep IEEE semantics (NaN/Inf tests), so no -ffast-math;
# errno-free math lets the compiler vectorise sqrt and friends.
# -ffp-contract=off: no fused multiply-add behind the source's back, so start + i*step (arange,
# linspace) rounds twice exactly as NumPy and the GPU kernels do.
target_compile_options(kiln_build_flags INTERFACE -fno-math-errno -fwrapv -ffp-contract=off)
if(KILN_NATIVE)
  include(CheckCXXCompilerFlag)
  check_cxx_compiler_flag(-march=native KILN_HAS_MARCH_NATIVE)
  if(KILN_HAS_MARCH_NATIVE)
    target_compile_options(kiln_build_flags INTERFACE -march=native)
  endif()
endif()
if(KILN_CUDA)
  find_package(CUDAToolkit REQUIRED)
  target_compile_definitions(kiln_build_flags INTERFACE KILN_WITH_CUDA=1)
endif()

# kiln_layer(NAME SEES folder...): the include root of layer NAME, holding links to src/<folder>.
function(kiln_layer_root name)
  set(root ${PROJECT_BINARY_DIR}/layers/${name})
  file(MAKE_DIRECTORY ${root})
  foreach(folder ${ARGN})
    if(NOT EXISTS ${root}/${folder})
      file(CREATE_LINK ${PROJECT_SOURCE_DIR}/src/${folder} ${root}/${folder} SYMBOLIC)
    endif()
  endforeach()
  set(KILN_LAYER_ROOT_${name} ${root} PARENT_SCOPE)
endfunction()

# kiln_layer(NAME SEES folder...): OBJECT library kiln_NAME from src/NAME/*.cpp.
function(kiln_layer name)
  kiln_layer_root(${name} ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cpp)
  add_library(kiln_${name} OBJECT ${sources})
  target_include_directories(kiln_${name} PRIVATE ${KILN_LAYER_ROOT_${name}})
  target_link_libraries(kiln_${name} PRIVATE kiln_build_flags)
  set(KILN_LAYER_ROOT_${name} ${KILN_LAYER_ROOT_${name}} PARENT_SCOPE)
endfunction()

kiln_layer(core core)
target_link_libraries(kiln_core PRIVATE fmt::fmt)
kiln_layer(cpu core cpu)
target_include_directories(kiln_cpu PRIVATE ${CBLAS_INCLUDE_DIR})
if(KILN_MKL)
  target_compile_definitions(kiln_cpu PRIVATE KILN_HAVE_MKL=1)
  target_compile_definitions(kiln_core PRIVATE KILN_HAVE_MKL=1)  # build_info names it
endif()
# glibc's vector math library (AVX2 expf/tanhf/...) for contiguous float32 rows; linked by name (-lmvec), as
# glibc keeps it in the system's library folder.
find_library(KILN_LIBMVEC NAMES mvec libmvec.so.1)
if(KILN_LIBMVEC)
  target_compile_definitions(kiln_cpu PRIVATE KILN_HAVE_LIBMVEC=1)
endif()
# oneDNN (Debian's libdnnl-dev; or dnnl*.h and libdnnl.so.2 carried in .deps on machines without apt) runs the
# CPU's float32 forward convolutions; without it the reference (im2col + BLAS) does.
find_path(KILN_ONEDNN_INCLUDE dnnl.hpp PATHS ${PROJECT_SOURCE_DIR}/.deps/include)
kiln_import_library(kiln::dnnl NAMES dnnl libdnnl.so.2 PATHS ${PROJECT_SOURCE_DIR}/.deps/lib)
set(KILN_ONEDNN ${kiln__dnnl_FOUND})
if(KILN_ONEDNN_INCLUDE AND KILN_ONEDNN)
  target_compile_definitions(kiln_cpu PRIVATE KILN_HAVE_ONEDNN=1)
  target_include_directories(kiln_cpu SYSTEM PRIVATE ${KILN_ONEDNN_INCLUDE})
  get_target_property(KILN_ONEDNN_LIBRARY kiln::dnnl IMPORTED_LOCATION)
  get_filename_component(KILN_ONEDNN_DIR ${KILN_ONEDNN_LIBRARY} DIRECTORY)
  message(STATUS "kiln: oneDNN ${KILN_ONEDNN_LIBRARY} runs the CPU's convolutions")
else()
  message(STATUS "kiln: no oneDNN (apt-get install libdnnl-dev): the CPU's convolutions use im2col + BLAS")
endif()
# FFTW 3 (Debian's libfftw3-dev: libfftw3 for double, libfftw3f for float) runs kiln::fft on the CPU; without it
# the CPU's transforms throw kiln::Error naming the package.
find_path(KILN_FFTW_INCLUDE fftw3.h PATHS ${PROJECT_SOURCE_DIR}/.deps/include)
kiln_import_library(kiln::fftw3 NAMES fftw3 libfftw3.so.3 PATHS ${PROJECT_SOURCE_DIR}/.deps/lib)
kiln_import_library(kiln::fftw3f NAMES fftw3f libfftw3f.so.3 PATHS ${PROJECT_SOURCE_DIR}/.deps/lib)
if(KILN_FFTW_INCLUDE AND kiln__fftw3_FOUND AND kiln__fftw3f_FOUND)
  set(KILN_FFTW ON)
  target_compile_definitions(kiln_cpu PRIVATE KILN_HAVE_FFTW=1)
  target_include_directories(kiln_cpu SYSTEM PRIVATE ${KILN_FFTW_INCLUDE})
  get_target_property(KILN_FFTW_LIBRARY kiln::fftw3 IMPORTED_LOCATION)
  get_filename_component(KILN_FFTW_DIR ${KILN_FFTW_LIBRARY} DIRECTORY)
  message(STATUS "kiln: FFTW ${KILN_FFTW_LIBRARY} runs the CPU's Fourier transforms")
else()
  set(KILN_FFTW OFF)
  message(STATUS "kiln: no FFTW (apt-get install libfftw3-dev): kiln::fft throws on the CPU")
endif()
# Autograd sits above core: it sees core's headers (the hook it implements); core never sees it.
kiln_layer(autograd core autograd)
# nn (modules, losses, optimizers) is written with the public API only: its include root holds nothing of src/.
kiln_layer(nn)
# nlohmann/json (header only) parses safetensors headers: Debian's nlohmann-json3-dev, or headers carried in
# .deps/include on machines without apt.
find_path(KILN_JSON_INCLUDE nlohmann/json.hpp PATHS ${PROJECT_SOURCE_DIR}/.deps/include REQUIRED)
target_include_directories(kiln_nn SYSTEM PRIVATE ${KILN_JSON_INCLUDE})
target_include_directories(kiln_core SYSTEM PRIVATE ${KILN_JSON_INCLUDE})  # kiln::profiler's Chrome trace
# zlib reads gzip-compressed IDX files (data::read_idx): Debian's zlib1g-dev, or zlib.h carried in .deps/include
# beside the runtime library every system has (then kiln::zlib, found by the runtime library's name).
find_path(KILN_ZLIB_INCLUDE zlib.h PATHS ${PROJECT_SOURCE_DIR}/.deps/include REQUIRED)
find_package(ZLIB QUIET)
if(ZLIB_FOUND)
  set(KILN_ZLIB ZLIB::ZLIB)
else()
  kiln_import_library(kiln::zlib NAMES z libz.so.1 REQUIRED)
  set(KILN_ZLIB kiln::zlib)
endif()
target_include_directories(kiln_nn SYSTEM PRIVATE ${KILN_ZLIB_INCLUDE})
# text (the GPT-2 tokenizer, token files) is written with the public API and its own folder, as dist. The
# pre-tokenizer's Unicode categories (letter, number, white space) come from ICU's libicuuc (Debian's libicu-dev;
# or unicode/*.h carried in .deps/include beside the library); without it, text that is not ASCII is refused with
# an error naming the package.
kiln_layer(text text)
target_include_directories(kiln_text SYSTEM PRIVATE ${KILN_JSON_INCLUDE} ${KILN_ZLIB_INCLUDE})  # .gz corpora
find_path(KILN_ICU_INCLUDE unicode/uchar.h PATHS ${PROJECT_SOURCE_DIR}/.deps/include)
kiln_import_library(kiln::icuuc NAMES icuuc PATHS ${PROJECT_SOURCE_DIR}/.deps/lib)
if(KILN_ICU_INCLUDE AND kiln__icuuc_FOUND)
  set(KILN_ICU ON)
  get_target_property(KILN_ICU_LIBRARY kiln::icuuc IMPORTED_LOCATION)
  get_filename_component(KILN_ICU_DIR ${KILN_ICU_LIBRARY} DIRECTORY)
  target_compile_definitions(kiln_text PRIVATE KILN_HAVE_ICU=1)
  target_include_directories(kiln_text SYSTEM PRIVATE ${KILN_ICU_INCLUDE})
  message(STATUS "kiln: ICU ${KILN_ICU_LIBRARY} gives the tokenizer its Unicode categories")
else()
  set(KILN_ICU OFF)
  message(STATUS "kiln: no ICU (apt-get install libicu-dev): the tokenizer takes ASCII text only")
endif()
# dist (process groups, DDP, DataParallel) is written with the public API and its own folder; its engines are
# MPI for CPU arrays (Debian's libopenmpi-dev) and NCCL for GPU arrays (with the CUDA toolkit, or the system's
# nccl.h / libnccl), as imported targets (MPI::MPI_CXX, kiln::nccl); without one, its calls throw DistError
# saying so.
kiln_layer(dist dist)
set(MPI_CXX_SKIP_MPICXX ON)  # kiln calls MPI's C API: the C++ bindings' declarations stay out
find_package(MPI COMPONENTS CXX QUIET)
if(MPI_CXX_FOUND)
  target_compile_definitions(kiln_dist PRIVATE KILN_HAVE_MPI=1)
  target_include_directories(kiln_dist SYSTEM PRIVATE ${MPI_CXX_INCLUDE_DIRS})
  message(STATUS "kiln: MPI ${MPI_CXX_LIBRARIES} moves CPU arrays between processes")
else()
  message(STATUS "kiln: no MPI (apt-get install libopenmpi-dev openmpi-bin): kiln::dist has no CPU engine")
endif()
if(KILN_CUDA)
  find_path(KILN_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  kiln_import_library(kiln::nccl NAMES nccl libnccl.so.2 HINTS ${CUDAToolkit_LIBRARY_DIR})
  set(KILN_NCCL ${kiln__nccl_FOUND})
  if(KILN_NCCL_INCLUDE AND KILN_NCCL)
    get_target_property(KILN_NCCL_LIBRARY kiln::nccl IMPORTED_LOCATION)
    get_filename_component(KILN_NCCL_DIR ${KILN_NCCL_LIBRARY} DIRECTORY)
    target_compile_definitions(kiln_dist PRIVATE KILN_HAVE_NCCL=1)
    target_include_directories(kiln_dist SYSTEM PRIVATE ${KILN_NCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS})
    message(STATUS "kiln: NCCL ${KILN_NCCL_LIBRARY} moves GPU arrays between processes and GPUs")
  else()
    message(STATUS "kiln: no NCCL found: kiln::dist has no GPU engine")
  endif()
endif()
set(KILN_LAYERS kiln_core kiln_cpu kiln_autograd kiln_nn kiln_text kiln_dist)
if(KILN_CUDA)
  kiln_layer(cuda core cuda)
  # Headers only: the CUDA libraries are linked once, by `kiln`.
  foreach(lib cudart nvrtc cublas cublasLt cusolver cufft)
    target_include_directories(kiln_cuda PRIVATE $<TARGET_PROPERTY:CUDA::${lib},INTERFACE_INCLUDE_DIRECTORIES>)
  endforeach()
  # cuDNN 9: in the CUDA toolkit's folders on some machines, in the system's (Debian/Ubuntu multiarch) on others.
  find_path(KILN_CUDNN_INCLUDE cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES x86_64-linux-gnu
            aarch64-linux-gnu REQUIRED)
  kiln_import_library(kiln::cudnn NAMES cudnn libcudnn.so.9 HINTS ${CUDAToolkit_LIBRARY_DIR} REQUIRED)
  get_target_property(KILN_CUDNN_LIBRARY kiln::cudnn IMPORTED_LOCATION)
  get_filename_component(KILN_CUDNN_DIR ${KILN_CUDNN_LIBRARY} DIRECTORY)
  target_include_directories(kiln_cuda SYSTEM PRIVATE ${KILN_CUDNN_INCLUDE})
  # cudnn-frontend (NVIDIA's header-only C++ graph API over cuDNN, from the PyPI package nvidia-cudnn-frontend:
  # `make deps` unpacks its headers into .deps/cudnn-frontend) builds the fused attention's cuDNN graphs; without
  # it scaled_dot_product_attention runs its blocked form on the GPU too. It parses JSON with nlohmann/json.
  find_path(KILN_CUDNN_FRONTEND_INCLUDE cudnn_frontend.h PATHS ${PROJECT_SOURCE_DIR}/.deps/cudnn-frontend/include
            NO_DEFAULT_PATH)
  if(KILN_CUDNN_FRONTEND_INCLUDE)
    set_source_files_properties(${PROJECT_SOURCE_DIR}/src/cuda/cudnn_attention.cpp TARGET_DIRECTORY kiln_cuda
                                PROPERTIES COMPILE_DEFINITIONS KILN_HAVE_CUDNN_FRONTEND=1)
    target_include_directories(kiln_cuda SYSTEM PRIVATE ${KILN_CUDNN_FRONTEND_INCLUDE} ${KILN_JSON_INCLUDE})
    message(STATUS "kiln: cudnn-frontend ${KILN_CUDNN_FRONTEND_INCLUDE}: fused attention in cuDNN")
  else()
    message(STATUS "kiln: no cudnn-frontend (make deps): attention on the GPU runs blocked, not fused")
  endif()
  # CUPTI (the toolkit's CUDA::cupti) records kiln::profiler's GPU activity; without it the profiler records host
  # ranges only and says how to get it.
  if(TARGET CUDA::cupti)
    set(KILN_CUPTI ON)
    set_source_files_properties(${PROJECT_SOURCE_DIR}/src/cuda/profiler_cupti.cpp TARGET_DIRECTORY kiln_cuda
                                PROPERTIES COMPILE_DEFINITIONS KILN_HAVE_CUPTI=1)
    target_include_directories(kiln_cuda PRIVATE $<TARGET_PROPERTY:CUDA::cupti,INTERFACE_INCLUDE_DIRECTORIES>)
    message(STATUS "kiln: CUPTI found: kiln::profiler records GPU activity")
  else()
    set(KILN_CUPTI OFF)
    message(STATUS "kiln: no CUPTI (CUDA::cupti) found: kiln::profiler records host ranges only")
  endif()
  # The device code in src/cuda/kernels, embedded as generated headers ("kernel_sources/<file>.hpp").
  include(${PROJECT_SOURCE_DIR}/cmake/KilnEmbed.cmake)
  kiln_embed_kernel_sources(kiln_cuda ${PROJECT_SOURCE_DIR}/src/cuda/kernels ${PROJECT_BINARY_DIR}/generated)
  list(APPEND KILN_LAYERS kiln_cuda)
endif()

# The library users link: the layers' objects plus src/backends.cpp, the one file that knows which
# backends this build holds (it sees core only; the backends are reached through declarations).
kiln_layer_root(glue core)
add_library(kiln STATIC ${PROJECT_SOURCE_DIR}/src/backends.cpp)
add_library(kiln::kiln ALIAS kiln)
foreach(layer ${KILN_LAYERS})
  target_sources(kiln PRIVATE $<TARGET_OBJECTS:${layer}>)
endforeach()
target_include_directories(kiln PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:include>
                           $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/third_party/dlpack/include>
                           PRIVATE ${KILN_LAYER_ROOT_glue})
target_compile_features(kiln PUBLIC cxx_std_20)
# Every dependency is an imported target or a plain library name, so the exported kilnTargets.cmake records no
# path of this machine; kilnConfig.cmake finds each again (cmake/kilnDependencies.cmake).
target_link_libraries(kiln PUBLIC OpenMP::OpenMP_CXX PRIVATE $<BUILD_INTERFACE:kiln_build_flags> kiln::openblas)
if(TARGET kiln_fmt_header_only)
  target_link_libraries(kiln PRIVATE $<BUILD_INTERFACE:kiln_fmt_header_only>)  # no library to link
else()
  target_link_libraries(kiln PRIVATE fmt::fmt)
endif()
if(KILN_LIBMVEC)
  target_link_libraries(kiln PRIVATE mvec)
endif()
target_link_libraries(kiln PRIVATE ${KILN_ZLIB})
if(KILN_ICU)
  target_link_libraries(kiln PRIVATE kiln::icuuc)
endif()
if(KILN_MKL)
  get_filename_component(KILN_MKL_DIR ${KILN_MKL_LIBRARY} DIRECTORY)
  kiln_import_library(kiln::kiln_mkl NAMES kiln_mkl HINTS ${KILN_MKL_DIR} REQUIRED)
  target_link_libraries(kiln PRIVATE kiln::kiln_mkl)
endif()
if(KILN_ONEDNN_INCLUDE AND KILN_ONEDNN)
  target_link_libraries(kiln PRIVATE kiln::dnnl)
endif()
if(KILN_FFTW)
  target_link_libraries(kiln PRIVATE kiln::fftw3 kiln::fftw3f)
endif()
if(MPI_CXX_FOUND)
  target_link_libraries(kiln PRIVATE MPI::MPI_CXX)
endif()
if(KILN_CUDA AND KILN_NCCL_INCLUDE AND KILN_NCCL)
  target_link_libraries(kiln PRIVATE kiln::nccl)
endif()
if(KILN_CUDA)
  target_compile_definitions(kiln PUBLIC KILN_WITH_CUDA=1)
  target_link_libraries(kiln PRIVATE CUDA::cudart CUDA::nvrtc CUDA::cublas CUDA::cublasLt CUDA::cusolver CUDA::cufft
                        kiln::cudnn)
  if(KILN_CUPTI)
    target_link_libraries(kiln PRIVATE CUDA::cupti)
  endif()
endif()

# kiln's own tests and lab benchmarks reach into the layers (src/ as the include root, cblas.h).
add_library(kiln_internal INTERFACE)
target_include_directories(kiln_internal INTERFACE ${PROJECT_SOURCE_DIR}/src ${CBLAS_INCLUDE_DIR})
if(KILN_CUDA)
  target_link_libraries(kiln_internal INTERFACE CUDA::cudart CUDA::nvrtc)
  # The embedded kernel sources, and their files for the test that compares the two.
  target_include_directories(kiln_internal INTERFACE ${PROJECT_BINARY_DIR}/generated)
  target_compile_definitions(kiln_internal INTERFACE
                             KILN_KERNEL_SOURCE_DIR="${PROJECT_SOURCE_DIR}/src/cuda/kernels")
  add_dependencies(kiln_internal kiln_cuda_embedded)
endif()
