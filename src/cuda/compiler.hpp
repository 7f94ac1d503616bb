// Run-time compilation of CUDA C++ with NVRTC and the kernel cache (internal).
// Every GPU kernel of kiln (built-in elementwise/reduction ops, user
// ElementwiseKernel/ReductionKernel/RawModule, fused expressions) is source text
// compiled here. load_module looks in a per-device memory cache, then the disk
// cache (kernel_cache.hpp), then compiles for the device's architecture.
// Generated sources must be self-contained: no include paths are passed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/kernel_cache.hpp"

namespace kiln::cuda_impl {

/// Extra NVRTC options (e.g. "--use_fast_math", "-DBLOCK=256") and C++ name expressions (e.g.
/// "add<float>") whose lowered names are kept so template kernels can be fetched by those names.
struct CompileOptions {
  std::vector<std::string> options;
  std::vector<std::string> name_expressions;
};

/// What NVRTC compiles for: an architecture it supports and whether the result is a CUBIN ("-arch=sm_90")
/// or PTX for the driver to finish ("-arch=compute_90").
struct CompileTarget {
  int arch = 0;  ///< major*10+minor
  bool cubin = false;
  /// "sm_90" or "compute_90".
  std::string name() const;
};

/// Architectures this NVRTC can compile for, ascending (e.g. 75 ... 120). No GPU needed.
const std::vector<int>& nvrtc_supported_archs();
/// The target for a GPU of compute capability `cc`: a CUBIN for `cc` when NVRTC knows it (and `cubin`),
/// else PTX for the newest supported arch below it (the driver JIT-compiles it); throws DeviceError when
/// `cc` is older than every supported arch.
CompileTarget compile_target(int cc, bool cubin = true);

/// Compiles `source` with NVRTC for `target` (kiln's defaults --std=c++17 -default-device -arch=..., then
/// options.options); throws CompileError (program name, NVRTC log, numbered source lines around each
/// error) or CudaError (NVRTC itself failed). No GPU needed.
CompiledImage compile_image(const std::string& source, const std::string& program_name, const CompileTarget& target,
                            const CompileOptions& options);

/// PTX of `source` compiled for compute capability `cc` (e.g. 90, clamped to what NVRTC supports). Pure
/// NVRTC: works without a GPU; throws like compile_image.
std::string compile_ptx(const std::string& source, const std::string& program_name, int cc,
                        const CompileOptions& options = {});

/// A loaded CUDA library (cudaLibrary_t, context-independent) and its kernels by name. Unloaded on
/// destruction: keep the Module alive while its kernels may still be launched or running.
class Module {
 public:
  /// Loads a CUBIN, fatbin or PTX image (cudaLibraryLoadData) with its name-expression map; `program_name`
  /// is used in messages. Throws CudaError naming the program when the driver rejects the image.
  Module(std::string image, std::vector<std::pair<std::string, std::string>> lowered_names, std::string program_name);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  /// The kernel `name`: an extern "C" name, a name expression given at compile time (its lowered name is
  /// used) or a mangled name. Cached after the first call; thread-safe. Throws ValueError listing the
  /// module's kernels when there is no such kernel.
  cudaKernel_t function(const std::string& name);
  /// The program name given at compile/load time.
  const std::string& program_name() const { return program_name_; }
  /// The lowered (mangled) name of a name expression, or "" when it was not given at compile time.
  std::string lowered_name(const std::string& name_expression) const;
  /// Names of every kernel in the library (mangled for C++ kernels).
  std::vector<std::string> kernel_names() const;
  /// The loaded image (CUBIN, fatbin or PTX bytes), kept for the library's lifetime.
  const std::string& image() const { return image_; }

 private:
  std::string image_;
  cudaLibrary_t library_ = nullptr;
  std::string program_name_;
  std::unordered_map<std::string, std::string> lowered_names_;
  mutable std::mutex mutex_;
  std::unordered_map<std::string, cudaKernel_t> kernels_;
};

/// The module of `source` compiled for GPU `device`: from the per-device memory cache, else the disk cache
/// (KILN_CACHE_DIR, unless KILN_CACHE_IN_MEMORY=1), else compiled with NVRTC (then written to disk). A bad
/// cache file or folder only costs a recompile. Thread-safe; throws CompileError, CudaError, DeviceError.
std::shared_ptr<Module> load_module(const std::string& source, const std::string& program_name, int device,
                                    const CompileOptions& options = {});

/// Loads a module from PTX, CUBIN or fatbin bytes the caller already has (not cached; RawModule's path).
std::shared_ptr<Module> load_module_image(const std::string& image, const std::string& program_name, int device);

/// Starts compiling a trivial program with NVRTC on a background thread (once per process), so NVRTC's own
/// start-up cost is not paid by the first real kernel. Called when the runtime first finds a GPU; a no-op when
/// KILN_NVRTC_WARMUP is 0/false/off/no. Not counted in cache_stats().
void start_nvrtc_warmup();

/// Counters since the process started (for tests and benchmarks).
struct CacheStats {
  uint64_t nvrtc_compiles = 0;  ///< programs compiled by load_module/compile_ptx/compile_image
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t disk_misses = 0;          ///< disk lookups that found no usable file (missing, corrupt, rejected)
  uint64_t disk_write_failures = 0;  ///< files that could not be written (the compile still succeeded)
};
/// A snapshot of the counters.
CacheStats cache_stats();
/// Drops every module of the memory cache (modules still referenced elsewhere stay loaded). For tests;
/// synchronise the GPU first if launched kernels may still run.
void clear_memory_cache();

}  // namespace kiln::cuda_impl
