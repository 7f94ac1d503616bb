// RawModule / RawKernel on CUDA (see raw_module.hpp): argument packing and
// checks, launches on the module's GPU, and the RawKernelBackend of the CUDA
// backend.
#include "cuda/raw_module.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "cuda/compiler.hpp"
#include "cuda/launch.hpp"
#include "cuda/runtime.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {
namespace {

std::string dims_str(const Dim3& d) {
  return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")";
}

std::string arg_description(const detail::RawLaunchArg& arg) {
  switch (arg.kind) {
    case detail::RawLaunchArg::Kind::Array:
      return "an array (passed as an 8-byte device pointer)";
    case detail::RawLaunchArg::Kind::Pointer:
      return "a pointer (8 bytes)";
    case detail::RawLaunchArg::Kind::Value:
      break;
  }
  return "a " + std::string(arg.type_name) + " (" + std::to_string(arg.size) + " bytes)";
}

size_t align_up(size_t offset, size_t alignment) {
  return alignment <= 1 ? offset : (offset + alignment - 1) / alignment * alignment;
}

}  // namespace

PackedArgs pack_kernel_args(const std::string& name, const detail::RawLaunchArg* args, size_t count,
                            const std::vector<KernelParam>* params, int device) {
  // Messages are built only when thrown: this runs on every launch.
  const auto kernel = [&] { return "kiln: RawKernel '" + name + "'"; };
  if (params != nullptr && params->size() != count)
    throw ValueError(kernel() + " takes " + std::to_string(params->size()) + " parameter(s), but launch() was given " +
                     std::to_string(count) +
                     " argument(s); pass one argument per kernel parameter, in order (LaunchOptions, if any, last)");
  PackedArgs packed;
  packed.offsets.resize(count);
  size_t end = 0;
  for (size_t i = 0; i < count; ++i) {
    const detail::RawLaunchArg& arg = args[i];
    const auto which = [i] { return "argument " + std::to_string(i); };
    size_t offset = 0;
    if (params != nullptr) {
      const KernelParam& param = (*params)[i];
      if (param.size != arg.size)
        throw ValueError(kernel() + ": parameter " + std::to_string(i) + " (counting from 0) is " +
                         std::to_string(param.size) + " bytes, but " + which() + " is " + arg_description(arg) +
                         "; pass a value of the parameter's exact C++ type (int -> int32_t, long long/size_t -> "
                         "int64_t/uint64_t, float -> float, double -> double, T* -> an Array or pointer)");
      offset = param.offset;
    } else {
      offset = align_up(end, arg.alignment);
    }
    if (arg.kind == detail::RawLaunchArg::Kind::Array) {
      const Array& array = *arg.array;
      if (!array.defined())
        throw ValueError(kernel() + ": " + which() +
                         " is an empty Array (no storage); pass an array created on the GPU");
      const Device on = array.device();
      const Device want{DeviceType::CUDA, device};
      if (on != want) {
        const std::string move = "a.to(kiln::gpu(" + std::to_string(device) + "))";
        if (on.is_cpu())
          throw DeviceError(kernel() + " runs on " + want.str() + ", but " + which() +
                            " is an array in host memory (cpu), which kernels cannot read; copy it to the GPU first "
                            "with " +
                            move + " (and copy results back with .to(kiln::cpu()))");
        throw DeviceError(kernel() + " runs on " + want.str() + " (its module's GPU), but " + which() +
                          " is an array on " + on.str() + "; move it with " + move + ", or build the RawModule for " +
                          on.str() + " (RawModuleOptions::device)");
      }
      packed.arrays.push_back(&array);
    }
    packed.offsets[i] = offset;
    end = std::max(end, offset + arg.size);
  }
  if (end > kMaxKernelParamBytes)
    throw ValueError(kernel() + ": its arguments take " + std::to_string(end) + " bytes, more than the " +
                     std::to_string(kMaxKernelParamBytes) +
                     " bytes CUDA passes to a kernel; put large data in an array and pass the array");
  packed.buffer.assign(end, 0);
  packed.pointers.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const detail::RawLaunchArg& arg = args[i];
    unsigned char* at = packed.buffer.data() + packed.offsets[i];
    if (arg.kind == detail::RawLaunchArg::Kind::Array) {
      void* data = arg.array->data_ptr();
      std::memcpy(at, &data, sizeof data);
    } else {
      std::memcpy(at, arg.value, arg.size);
    }
    packed.pointers[i] = at;
  }
  return packed;
}

std::pair<dim3, dim3> launch_dims(const std::string& name, const Dim3& grid, const Dim3& block, size_t shared_mem) {
  constexpr int64_t kMax = UINT32_MAX;
  const auto check = [&](const char* what, const Dim3& d) {
    for (int64_t v : {d.x, d.y, d.z})
      if (v < 1 || v > kMax)
        throw ValueError("kiln: cannot launch kernel '" + name + "' (grid " + dims_str(grid) + ", block " +
                         dims_str(block) + ", " + std::to_string(shared_mem) +
                         " bytes of dynamic shared memory): " + what + " dimension " + std::to_string(v) +
                         " is out of range; every grid and block dimension must be at least 1 (skip the launch "
                         "when there is no work)");
  };
  check("grid", grid);
  check("block", block);
  const dim3 g(static_cast<unsigned>(grid.x), static_cast<unsigned>(grid.y), static_cast<unsigned>(grid.z));
  const dim3 b(static_cast<unsigned>(block.x), static_cast<unsigned>(block.y), static_cast<unsigned>(block.z));
  validate_launch_config(name.c_str(), g, b, shared_mem);
  return {g, b};
}

std::optional<std::vector<KernelParam>> kernel_params(cudaKernel_t kernel) {
  // A kernel has at most kMaxKernelParamBytes bytes of parameters, so at most that many parameters.
  std::vector<KernelParam> params;
  const auto* function = reinterpret_cast<const void*>(kernel);
  for (size_t index = 0; index <= kMaxKernelParamBytes; ++index) {
    KernelParam param;
    const cudaError_t err = cudaFuncGetParamInfo(function, index, &param.offset, &param.size);
    if (err == cudaSuccess) {
      params.push_back(param);
      continue;
    }
    cudaGetLastError();  // not sticky: clear it so that later calls do not report it
    // cudaErrorInvalidValue: `index` is past the last parameter. Anything else (a driver before 12.4): unknown.
    if (err == cudaErrorInvalidValue) return params;
    return std::nullopt;
  }
  return std::nullopt;
}

namespace {

class CudaRawKernel final : public detail::RawKernelImpl {
 public:
  CudaRawKernel(std::shared_ptr<Module> module, cudaKernel_t kernel, std::string name, int device)
      : module_(std::move(module)), kernel_(kernel), name_(std::move(name)), device_(device) {
    set_device(device_);
    params_ = kernel_params(kernel_);
  }

  const std::string& name() const override { return name_; }
  Device device() const override { return Device{DeviceType::CUDA, device_}; }
  int num_params() const override { return params_ ? static_cast<int>(params_->size()) : -1; }

  KernelAttributes attributes() const override {
    set_device(device_);
    cudaFuncAttributes a{};
    KILN_CUDA_CHECK(cudaFuncGetAttributes(&a, reinterpret_cast<const void*>(kernel_)));
    return KernelAttributes{a.maxThreadsPerBlock, a.numRegs,        a.sharedSizeBytes,
                            a.constSizeBytes,     a.localSizeBytes, a.maxDynamicSharedSizeBytes,
                            a.ptxVersion,         a.binaryVersion};
  }

  void launch(const Dim3& grid, const Dim3& block, const detail::RawLaunchArg* args, size_t count,
              const LaunchOptions& options) override {
    const auto [g, b] = launch_dims(name_, grid, block, options.shared_mem);
    PackedArgs packed = pack_kernel_args(name_, args, count, params_ ? &*params_ : nullptr, device_);
    cudaStream_t stream = nullptr;
    if (options.stream) {
      const Device on = options.stream->device();
      if (on != device())
        throw DeviceError("kiln: RawKernel '" + name_ + "' runs on " + device().str() +
                          " (its module's GPU), but LaunchOptions::stream is a stream of " + on.str() +
                          "; pass a stream of " + device().str() + " (Stream::create(kiln::gpu(" +
                          std::to_string(device_) + "))) or build the RawModule for " + on.str());
      stream = static_cast<cudaStream_t>(options.stream->handle());
    } else {
      stream = current_stream(device_);
    }
    set_device(device_);
    // launch_dims validated the configuration, and kernel_ is never null (Module::function throws instead).
    launch_validated(kernel_, g, b, options.shared_mem, stream,
                     packed.pointers.empty() ? nullptr : packed.pointers.data(), name_.c_str());
    // The arrays stay reserved until the stream's work so far (this kernel included) is done, so callers may
    // drop them right after launch().
    for (const Array* array : packed.arrays) record_stream(*array->storage(), stream);
  }

 private:
  std::shared_ptr<Module> module_;  // keeps the library loaded while the kernel may be launched
  cudaKernel_t kernel_;
  std::string name_;
  int device_;
  std::optional<std::vector<KernelParam>> params_;
};

class CudaRawModule final : public detail::RawModuleImpl {
 public:
  CudaRawModule(std::shared_ptr<Module> module, int device, std::string name)
      : module_(std::move(module)), device_(device), name_(std::move(name)) {}

  Device device() const override { return Device{DeviceType::CUDA, device_}; }
  const std::string& name() const override { return name_; }
  std::vector<std::string> kernel_names() const override {
    set_device(device_);
    return module_->kernel_names();
  }

  std::shared_ptr<detail::RawKernelImpl> function(const std::string& name) override {
    {
      std::lock_guard lock(mutex_);
      if (auto it = kernels_.find(name); it != kernels_.end()) return it->second;
    }
    set_device(device_);
    auto kernel = std::make_shared<CudaRawKernel>(module_, module_->function(name), name, device_);
    std::lock_guard lock(mutex_);
    return kernels_.emplace(name, std::move(kernel)).first->second;
  }

 private:
  std::shared_ptr<Module> module_;
  int device_;
  std::string name_;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<CudaRawKernel>> kernels_;
};

CompileOptions compile_options(const RawModuleOptions& options) {
  return CompileOptions{options.options, options.name_expressions};
}

class CudaRawKernelBackend final : public detail::RawKernelBackend {
 public:
  std::shared_ptr<detail::RawModuleImpl> from_source(const std::string& source, Device device,
                                                     const RawModuleOptions& options) override {
    auto module = load_module(source, options.name, device.index, compile_options(options));
    return std::make_shared<CudaRawModule>(std::move(module), device.index, options.name);
  }
  std::shared_ptr<detail::RawModuleImpl> from_image(const std::string& image, Device device,
                                                    const std::string& name) override {
    return std::make_shared<CudaRawModule>(load_module_image(image, name, device.index), device.index, name);
  }
  std::string compile_ptx(const std::string& source, const RawModuleOptions& options, int arch) override {
    return cuda_impl::compile_ptx(source, options.name, arch, compile_options(options));
  }
  int compute_capability(Device device) override { return cuda_impl::compute_capability(device.index); }
  int oldest_arch() override {
    const std::vector<int>& archs = nvrtc_supported_archs();
    if (archs.empty())
      throw CudaError(
          "kiln: RawModule::compile_ptx: NVRTC reports no supported architecture (nvrtcGetSupportedArchs "
          "failed); check the CUDA toolkit installation");
    return archs.front();
  }
};

}  // namespace

detail::RawKernelBackend& raw_kernel_backend() {
  static CudaRawKernelBackend backend;
  return backend;
}

}  // namespace kiln::cuda_impl
