// User kernels from CUDA C++ source: RawModule compiles a whole source string
// with NVRTC (or loads PTX/CUBIN bytes) for one GPU, RawKernel launches one of
// its __global__ functions with a grid, a block and arguments, like
// cupy.RawModule / cupy.RawKernel. Compiled modules are cached in memory and on
// disk (KILN_CACHE_DIR, default ~/.cache/kiln/kernels; KILN_CACHE_IN_MEMORY=1
// keeps them in memory only). This header includes no CUDA header.
//
//   RawModule m(R"(extern "C" __global__ void twice(float* y, const float* x, int n) {
//     int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; })");
//   m.function("twice").launch({(n + 255) / 256}, {256}, y, x, int32_t(n));
//
// Devices: a module belongs to one GPU, chosen when it is built (RawModuleOptions::device, else this
// thread's current device when it is a GPU, else gpu(0)). Its kernels always run there, whatever the
// current device is at launch time; array arguments must live on that GPU.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/stream.hpp"

namespace kiln {

/// Grid or block dimensions of a launch, like CUDA's dim3: {x}, {x, y} or {x, y, z}; missing ones are 1.
/// Any integer type converts; values are checked at launch (each in 1 .. the device's limit).
struct Dim3 {
  int64_t x = 1, y = 1, z = 1;
  constexpr Dim3() = default;
  template <std::integral X, std::integral Y = int, std::integral Z = int>
  constexpr Dim3(X x_, Y y_ = 1, Z z_ = 1) : x(to_int64(x_)), y(to_int64(y_)), z(to_int64(z_)) {}  // NOLINT
  constexpr bool operator==(const Dim3&) const = default;

 private:
  template <std::integral T>
  static constexpr int64_t to_int64(T v) {
    if constexpr (std::is_unsigned_v<T>)
      return v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                            : static_cast<int64_t>(v);
    else
      return static_cast<int64_t>(v);
  }
};

/// Optional last argument of RawKernel::launch.
struct LaunchOptions {
  /// Dynamic shared memory in bytes (extern __shared__ arrays). Above 48 KB the kernel's limit is raised
  /// through its attribute, up to the GPU's opt-in maximum (227 KB on compute capability 9.0).
  size_t shared_mem = 0;
  /// The stream to launch on (a stream of the kernel's GPU); default: this thread's current stream there.
  std::optional<Stream> stream{};
};

/// How a RawModule is built.
struct RawModuleOptions {
  /// NVRTC options after kiln's defaults (--std=c++17 -default-device -arch=sm_XX), e.g. "--use_fast_math",
  /// "-DBLOCK=256". An "-arch=..." here replaces kiln's choice of architecture.
  std::vector<std::string> options{};
  /// C++ names of (template) kernels to instantiate and look up by that name, e.g. "scale<float>".
  std::vector<std::string> name_expressions{};
  /// The GPU to compile for and load on. Default: this thread's current device when it is a GPU, else gpu(0).
  std::optional<Device> device{};
  /// The program name used in compiler logs and messages. Default: the first __global__ function's name
  /// (the first .entry for PTX), else "raw_module".
  std::string name{};
};

class RawKernel;

namespace detail {
class RawModuleImpl;
class RawKernelImpl;

/// One launch argument as RawKernel::launch saw it (internal): the value is read, not copied, during the
/// launch call, so it must outlive it (the arguments of launch() do).
struct RawLaunchArg {
  enum class Kind : uint8_t { Value, Pointer, Array };
  Kind kind = Kind::Value;
  const void* value = nullptr;   ///< Value and Pointer: the caller's object (Pointer: the pointer variable)
  const Array* array = nullptr;  ///< Array: passed as its data pointer (device memory, offset included)
  size_t size = 0;               ///< bytes the kernel receives
  size_t alignment = 1;
  const char* type_name = "";  ///< for messages: "int32", "float64", "pointer", "array", "struct"...
};

template <class T>
constexpr const char* raw_launch_arg_type_name() {
  if constexpr (std::is_same_v<T, bool>)
    return "bool";
  else if constexpr (std::is_same_v<T, Half>)
    return "float16";
  else if constexpr (std::is_same_v<T, BFloat16>)
    return "bfloat16";
  else if constexpr (std::is_floating_point_v<T>)
    return sizeof(T) == 4 ? "float32" : "float64";
  else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>)
    return sizeof(T) == 1 ? "int8" : sizeof(T) == 2 ? "int16" : sizeof(T) == 4 ? "int32" : "int64";
  else if constexpr (std::is_integral_v<T>)
    return sizeof(T) == 1 ? "uint8" : sizeof(T) == 2 ? "uint16" : sizeof(T) == 4 ? "uint32" : "uint64";
  else if constexpr (std::is_enum_v<T>)
    return "enum";
  else
    return "struct";
}

/// The RawLaunchArg of one launch() argument: an Array passes its device data pointer, a pointer (or nullptr)
/// passes itself, any other trivially copyable value (int32_t, float, double, a struct...) passes its bytes
/// with its exact size, as a C++ kernel parameter of that type receives them.
template <class T>
RawLaunchArg make_raw_launch_arg(const T& value) {
  if constexpr (std::is_same_v<T, Array>) {
    return {RawLaunchArg::Kind::Array, nullptr, &value, sizeof(void*), alignof(void*), "array"};
  } else if constexpr (std::is_pointer_v<T> || std::is_null_pointer_v<T>) {
    return {RawLaunchArg::Kind::Pointer, &value, nullptr, sizeof(void*), alignof(void*), "pointer"};
  } else {
    static_assert(!std::is_same_v<T, Scalar>,
                  "RawKernel::launch: a kiln::Scalar has no fixed width; pass a C++ value of the kernel parameter's "
                  "type (e.g. s.to<float>())");
    static_assert(!std::is_array_v<T>, "RawKernel::launch: pass a pointer (or an Array), not a C array");
    static_assert(!std::is_same_v<T, long double>, "RawKernel::launch: CUDA kernels have no long double parameters");
    static_assert(std::is_trivially_copyable_v<T>,
                  "RawKernel::launch: arguments are kiln::Array, pointers, or trivially copyable values (int32_t, "
                  "float, double, plain structs) passed by value");
    return {RawLaunchArg::Kind::Value, &value, nullptr, sizeof(T), alignof(T), raw_launch_arg_type_name<T>()};
  }
}
}  // namespace detail

/// Static attributes of a compiled kernel (cudaFuncGetAttributes), e.g. to pick a block size.
struct KernelAttributes {
  int max_threads_per_block = 0;          ///< most threads a block of this kernel may have
  int num_regs = 0;                       ///< registers per thread
  size_t shared_size_bytes = 0;           ///< static shared memory per block
  size_t const_size_bytes = 0;            ///< constant memory
  size_t local_size_bytes = 0;            ///< local memory per thread (spills)
  int max_dynamic_shared_size_bytes = 0;  ///< dynamic shared memory allowed now (raised by large launches)
  int ptx_version = 0;                    ///< major*10+minor of the PTX it was compiled from
  int binary_version = 0;                 ///< major*10+minor of the binary's architecture
};

/// One __global__ function of a RawModule. Copies share the kernel; the module stays loaded while any
/// RawKernel of it exists.
class RawKernel {
 public:
  /// Launches the kernel on its module's GPU with `grid` blocks of `block` threads. `args` are the kernel's
  /// arguments in order — kiln::Array (its device pointer, offset included; it must be on the kernel's GPU),
  /// pointers, and values with exact widths (int32_t for int, float, double, ...) — optionally followed by
  /// LaunchOptions. Asynchronous; arrays passed are kept from reuse until the stream's work is done, so they
  /// may be released right after. Every array passed counts as written in place (the launch cannot tell reads
  /// from writes): its version moves on, so a backward that saved it throws; pass a copy() of an array a
  /// backward still needs. Throws ValueError (argument count or sizes that do not match the kernel's
  /// parameters, bad grid/block — before anything is launched), DeviceError (an array or stream of another
  /// device, a CPU array) or CudaError (CUDA refused the launch; the message names the kernel and configuration).
  template <class... Args>
  void launch(const Dim3& grid, const Dim3& block, const Args&... args) const;
  /// Same as launch(grid, block, args...), like calling a cupy.RawKernel.
  template <class... Args>
  void operator()(const Dim3& grid, const Dim3& block, const Args&... args) const {
    launch(grid, block, args...);
  }

  /// The name it was looked up by (an extern "C" name, a name expression or a mangled name).
  const std::string& name() const;
  /// The GPU it runs on (its module's).
  Device device() const;
  /// Number of parameters as the driver reports it, or -1 when the driver cannot tell (older than CUDA 12.4).
  int num_params() const;
  /// Static attributes from the driver (synchronises nothing).
  KernelAttributes attributes() const;

  /// Launches with already-made arguments (what launch() calls; see detail::make_raw_launch_arg).
  void launch_args(const Dim3& grid, const Dim3& block, const detail::RawLaunchArg* args, size_t count,
                   const LaunchOptions& options) const;

  explicit RawKernel(std::shared_ptr<detail::RawKernelImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<detail::RawKernelImpl> impl_;
};

/// A CUDA C++ module compiled with NVRTC (or loaded from PTX or CUBIN) on one GPU. Copies share it.
class RawModule {
 public:
  /// Compiles `source` (a whole CUDA C++ translation unit; no include paths are given, so it must not
  /// #include CUDA headers) for the GPU of `options.device` and loads it there; cached in memory and on disk.
  /// Throws CompileError (NVRTC's log, the program name and the numbered source lines around each error),
  /// DeviceError (no such GPU, or kiln built without CUDA) or CudaError.
  explicit RawModule(const std::string& source, const RawModuleOptions& options = {});
  /// Loads PTX text (as written by nvcc -ptx or compile_ptx) on a GPU; the driver compiles it for that GPU.
  /// Only `device` and `name` of the options apply. Throws ValueError when the text is not PTX, DeviceError,
  /// CudaError when the driver rejects it.
  static RawModule from_ptx(const std::string& ptx, const RawModuleOptions& options = {});
  /// Loads a CUBIN (ELF) or fatbin image (e.g. nvcc -cubin / -fatbin output) on a GPU; its code must suit that
  /// GPU. Only `device` and `name` of the options apply. Throws ValueError (not a CUBIN/fatbin), DeviceError,
  /// CudaError.
  static RawModule from_cubin(const std::string& bytes, const RawModuleOptions& options = {});
  /// Compiles `source` to PTX without loading it (no GPU needed): for compute capability `arch` (e.g. 90;
  /// clamped to the newest NVRTC supports at or below it), or 0 for the module's GPU when there is one, else
  /// the oldest architecture NVRTC supports. Throws CompileError, or DeviceError in a build without CUDA.
  static std::string compile_ptx(const std::string& source, const RawModuleOptions& options = {}, int arch = 0);

  /// The kernel `name`: an extern "C" function name, one of the name expressions (e.g. "scale<float>"), or a
  /// mangled name. Throws ValueError listing the module's kernels when there is none of that name.
  RawKernel function(const std::string& name) const;
  /// Same as function(name) (cupy.RawModule.get_function).
  RawKernel get_function(const std::string& name) const { return function(name); }
  /// Names of every kernel in the module (mangled for C++ kernels).
  std::vector<std::string> kernel_names() const;
  /// The GPU it is loaded on.
  Device device() const;
  /// The program name used in messages.
  const std::string& name() const;

  explicit RawModule(std::shared_ptr<detail::RawModuleImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<detail::RawModuleImpl> impl_;
};

template <class... Args>
void RawKernel::launch(const Dim3& grid, const Dim3& block, const Args&... args) const {
  constexpr size_t count = sizeof...(Args);
  constexpr size_t options_count = (size_t{0} + ... + (std::is_same_v<Args, LaunchOptions> ? 1 : 0));
  if constexpr (options_count == 0) {
    const std::array<detail::RawLaunchArg, count> packed{detail::make_raw_launch_arg(args)...};
    launch_args(grid, block, packed.data(), count, LaunchOptions{});
  } else {
    static_assert(
        options_count == 1 && std::is_same_v<std::tuple_element_t<count - 1, std::tuple<Args...>>, LaunchOptions>,
        "RawKernel::launch: LaunchOptions may appear once, as the last argument");
    const auto refs = std::forward_as_tuple(args...);
    [&]<size_t... I>(std::index_sequence<I...>) {
      const std::array<detail::RawLaunchArg, count - 1> packed{detail::make_raw_launch_arg(std::get<I>(refs))...};
      launch_args(grid, block, packed.data(), count - 1, std::get<count - 1>(refs));
    }
    (std::make_index_sequence<count - 1>{});
  }
}

}  // namespace kiln
