// RawModule / RawKernel front-end: picks the module's GPU, names the program,
// recognises PTX/CUBIN images, and hands the work to the backend that runs user
// kernels (Backend::raw_kernels(), the CUDA backend in src/cuda/raw_module.cpp).
// A build without CUDA has no such backend: every entry point throws DeviceError.
#include "kiln/raw_module.hpp"

#include <cctype>
#include <cstring>

#include "core/backend.hpp"
#include "core/raw_kernel_backend.hpp"
#include "kiln/error.hpp"

namespace kiln {
namespace {

detail::RawKernelBackend& raw_backend(const char* op) {
  detail::Backend* backend = detail::builtin_backend(DeviceType::CUDA);
  detail::RawKernelBackend* raw = backend ? backend->raw_kernels() : nullptr;
  if (raw == nullptr)
    throw DeviceError(std::string("kiln: ") + op +
                      ": this kiln was built without CUDA (KILN_CUDA=OFF), so it cannot compile or run GPU kernels; "
                      "rebuild with the CUDA backend (cmake --preset cuda, or -DKILN_CUDA=ON)");
  return *raw;
}

// The module's GPU: the one asked for, else the current device when it is a GPU, else gpu(0).
Device module_device(const RawModuleOptions& options, const std::string& name, const char* op) {
  const Device current = current_device();
  const Device device = options.device ? *options.device : current.is_cuda() ? current : Device{DeviceType::CUDA, 0};
  if (!device.is_cuda())
    throw DeviceError(std::string("kiln: ") + op + " '" + name + "': RawModule kernels run on a GPU, not on " +
                      device.str() + "; pass a GPU in RawModuleOptions::device (e.g. kiln::gpu(0)) or leave it unset");
  const int count = num_gpus();
  if (device.index < 0 || device.index >= count)
    throw DeviceError(std::string("kiln: ") + op + " '" + name + "': cannot load it on " + device.str() +
                      ": this machine has " + std::to_string(count) +
                      " usable GPU(s). Check kiln::num_gpus() first; RawModule::compile_ptx compiles without a GPU");
  return device;
}

bool is_identifier_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$'; }

// The name of the first __global__ function of `source` (attributes such as __launch_bounds__(...) between
// the return type and the name are skipped), or "" when none is found.
std::string first_global_name(const std::string& source) {
  size_t pos = source.find("__global__");
  if (pos == std::string::npos) return {};
  pos += std::strlen("__global__");
  for (int guard = 0; guard < 8; ++guard) {
    const size_t paren = source.find('(', pos);
    if (paren == std::string::npos) return {};
    size_t end = paren;
    while (end > pos && std::isspace(static_cast<unsigned char>(source[end - 1]))) --end;
    size_t begin = end;
    while (begin > pos && is_identifier_char(source[begin - 1])) --begin;
    std::string name = source.substr(begin, end - begin);
    if (!name.starts_with("__")) return name;
    // An attribute: continue after its closing parenthesis.
    int depth = 0;
    size_t i = paren;
    for (; i < source.size(); ++i) {
      if (source[i] == '(') ++depth;
      if (source[i] == ')' && --depth == 0) break;
    }
    if (i >= source.size()) return {};
    pos = i + 1;
  }
  return {};
}

// The name of the first .entry of PTX text, or "".
std::string first_entry_name(const std::string& ptx) {
  size_t pos = ptx.find(".entry");
  if (pos == std::string::npos) return {};
  pos += std::strlen(".entry");
  while (pos < ptx.size() && std::isspace(static_cast<unsigned char>(ptx[pos]))) ++pos;
  size_t end = pos;
  while (end < ptx.size() && (is_identifier_char(ptx[end]) || ptx[end] == '.')) ++end;
  return ptx.substr(pos, end - pos);
}

std::string program_name(const RawModuleOptions& options, const std::string& found, const char* fallback) {
  if (!options.name.empty()) return options.name;
  return found.empty() ? fallback : found;
}

void require_no_compile_options(const RawModuleOptions& options, const char* op, const std::string& name) {
  if (!options.options.empty() || !options.name_expressions.empty())
    throw ValueError(std::string("kiln: ") + op + " '" + name +
                     "': NVRTC options and name expressions apply only to CUDA source (the RawModule constructor); "
                     "a loaded image is used as it is, so look C++ kernels up by their mangled names");
}

bool looks_like_ptx(const std::string& text) {
  return text.find(".version") != std::string::npos && text.find(".target") != std::string::npos;
}

bool looks_like_cubin(const std::string& bytes) {
  static constexpr unsigned char kElf[4] = {0x7f, 'E', 'L', 'F'};
  static constexpr unsigned char kFatbin[4] = {0x50, 0xed, 0x55, 0xba};  // 0xBA55ED50, little-endian
  return bytes.size() >= 4 && (std::memcmp(bytes.data(), kElf, 4) == 0 || std::memcmp(bytes.data(), kFatbin, 4) == 0);
}

}  // namespace

// ---- RawModule ---------------------------------------------------------------------------------

RawModule::RawModule(const std::string& source, const RawModuleOptions& options) {
  detail::RawKernelBackend& backend = raw_backend("RawModule");
  RawModuleOptions named = options;
  named.name = program_name(options, first_global_name(source), "raw_module");
  const Device device = module_device(named, named.name, "RawModule");
  impl_ = backend.from_source(source, device, named);
}

RawModule RawModule::from_ptx(const std::string& ptx, const RawModuleOptions& options) {
  detail::RawKernelBackend& backend = raw_backend("RawModule::from_ptx");
  const std::string name = program_name(options, first_entry_name(ptx), "ptx_module");
  require_no_compile_options(options, "RawModule::from_ptx", name);
  if (!looks_like_ptx(ptx))
    throw ValueError("kiln: RawModule::from_ptx '" + name +
                     "': the text is not PTX (it has no .version and .target directives); pass CUDA C++ source to "
                     "RawModule(source) and CUBIN or fatbin bytes to RawModule::from_cubin");
  return RawModule(backend.from_image(ptx, module_device(options, name, "RawModule::from_ptx"), name));
}

RawModule RawModule::from_cubin(const std::string& bytes, const RawModuleOptions& options) {
  detail::RawKernelBackend& backend = raw_backend("RawModule::from_cubin");
  const std::string name = program_name(options, {}, "cubin_module");
  require_no_compile_options(options, "RawModule::from_cubin", name);
  if (!looks_like_cubin(bytes))
    throw ValueError("kiln: RawModule::from_cubin '" + name + "': the " + std::to_string(bytes.size()) +
                     " bytes are neither a CUBIN (ELF) nor a fatbin (they do not start with either magic number); "
                     "pass PTX text to RawModule::from_ptx and CUDA C++ source to RawModule(source)");
  return RawModule(backend.from_image(bytes, module_device(options, name, "RawModule::from_cubin"), name));
}

std::string RawModule::compile_ptx(const std::string& source, const RawModuleOptions& options, int arch) {
  detail::RawKernelBackend& backend = raw_backend("RawModule::compile_ptx");
  RawModuleOptions named = options;
  named.name = program_name(options, first_global_name(source), "raw_module");
  if (arch < 0)
    throw ValueError(
        "kiln: RawModule::compile_ptx '" + named.name + "': arch " + std::to_string(arch) +
        " is negative; pass a compute capability as major*10+minor (e.g. 90), or 0 for this machine's GPU");
  if (arch == 0) {
    if (options.device || num_gpus() > 0)
      arch = backend.compute_capability(module_device(named, named.name, "RawModule::compile_ptx"));
    else
      arch = backend.oldest_arch();
  }
  return backend.compile_ptx(source, named, arch);
}

RawKernel RawModule::function(const std::string& name) const { return RawKernel(impl_->function(name)); }
std::vector<std::string> RawModule::kernel_names() const { return impl_->kernel_names(); }
Device RawModule::device() const { return impl_->device(); }
const std::string& RawModule::name() const { return impl_->name(); }

// ---- RawKernel ---------------------------------------------------------------------------------

const std::string& RawKernel::name() const { return impl_->name(); }
Device RawKernel::device() const { return impl_->device(); }
int RawKernel::num_params() const { return impl_->num_params(); }
KernelAttributes RawKernel::attributes() const { return impl_->attributes(); }

void RawKernel::launch_args(const Dim3& grid, const Dim3& block, const detail::RawLaunchArg* args, size_t count,
                            const LaunchOptions& options) const {
  impl_->launch(grid, block, args, count, options);
  // A launch cannot tell which arrays the kernel writes: each one passed counts as written in place, as by any
  // in-place op, so a backward that saved one of them throws instead of reading values the kernel may have
  // changed (pass a copy() of an array a backward still needs).
  for (size_t i = 0; i < count; ++i)
    if (args[i].kind == detail::RawLaunchArg::Kind::Array && args[i].array->storage())
      args[i].array->storage()->bump_version();
}

}  // namespace kiln
