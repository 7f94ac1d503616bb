// NVRTC compilation, compile-error reports with numbered source lines, loaded
// modules (cudaLibrary_t) and the per-device memory cache in front of the disk
// cache. Lookup order in load_module: memory -> disk -> NVRTC.
#include "cuda/compiler.hpp"

#include <nvrtc.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>

#include "core/env.hpp"
#include "cuda/runtime.hpp"
#include "kiln/error.hpp"

namespace kiln::cuda_impl {
namespace {

// Process-wide counters behind cache_stats().
struct Counters {
  std::atomic<uint64_t> nvrtc_compiles{0};
  std::atomic<uint64_t> memory_hits{0};
  std::atomic<uint64_t> disk_hits{0};
  std::atomic<uint64_t> disk_misses{0};
  std::atomic<uint64_t> disk_write_failures{0};
};
Counters& counters() {
  static Counters instance;
  return instance;
}

[[noreturn]] void throw_nvrtc_error(nvrtcResult result, const char* call, const std::string& program_name,
                                    const char* file, int line) {
  throw CudaError("kiln: NVRTC call " + std::string(call) + " failed for program '" + program_name +
                  "': " + nvrtcGetErrorString(result) + " (" + file + ":" + std::to_string(line) + ")");
}
#define KILN_NVRTC_CHECK(expr, program_name)                                          \
  do {                                                                                \
    nvrtcResult kiln_nvrtc_result_ = (expr);                                          \
    if (kiln_nvrtc_result_ != NVRTC_SUCCESS)                                          \
      throw_nvrtc_error(kiln_nvrtc_result_, #expr, program_name, __FILE__, __LINE__); \
  } while (0)

// Destroys an nvrtcProgram on every path out of compile_program.
struct ProgramGuard {
  nvrtcProgram program = nullptr;
  ~ProgramGuard() {
    if (program != nullptr) nvrtcDestroyProgram(&program);
  }
};

// The value of a user "-arch=..." / "--gpu-architecture=..." option, or "".
std::string user_arch(const CompileOptions& options) {
  for (const auto& option : options.options)
    for (std::string_view prefix : {"-arch=", "--gpu-architecture=", "-arch "})
      if (option.starts_with(prefix)) return option.substr(prefix.size());
  return {};
}

std::string join(const std::vector<std::string>& items, const char* separator) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? separator : "") + items[i];
  return out;
}

// Line numbers of the errors NVRTC reports for `program_name` ("name(12): error: ..."), ascending.
std::vector<int> error_lines(const std::string& log, const std::string& program_name) {
  std::set<int> lines;
  std::istringstream stream(log);
  std::string text;
  const std::string prefix = program_name + "(";
  while (std::getline(stream, text)) {
    if (!text.starts_with(prefix)) continue;
    size_t pos = prefix.size();
    int number = 0;
    bool digits = false;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      number = number * 10 + (text[pos++] - '0');
      digits = true;
      if (number > 100000000) break;
    }
    const std::string_view rest = std::string_view(text).substr(pos);
    if (digits && (rest.starts_with("): error") || rest.starts_with("): catastrophic error"))) lines.insert(number);
  }
  return {lines.begin(), lines.end()};
}

// The source lines around each error line, numbered, error lines marked with '>'.
std::string source_excerpt(const std::string& source, const std::vector<int>& errors) {
  constexpr int kContext = 2;
  constexpr size_t kMaxErrorsShown = 10;
  std::vector<std::string> lines;
  std::istringstream stream(source);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  const int count = static_cast<int>(lines.size());
  std::string out;
  int last_printed = 0;
  const size_t shown = std::min(errors.size(), kMaxErrorsShown);
  for (size_t e = 0; e < shown; ++e) {
    const int first = std::max(errors[e] - kContext, std::max(last_printed + 1, 1));
    const int last = std::min(errors[e] + kContext, count);
    if (first > last) continue;
    if (last_printed != 0 && first > last_printed + 1) out += "  ...\n";
    for (int n = first; n <= last; ++n) {
      const bool is_error = std::binary_search(errors.begin(), errors.end(), n);
      char number[32];
      std::snprintf(number, sizeof number, "%c %5d | ", is_error ? '>' : ' ', n);
      out += number + lines[static_cast<size_t>(n - 1)] + "\n";
    }
    last_printed = last;
  }
  if (errors.size() > shown) out += "  ... (" + std::to_string(errors.size() - shown) + " more error lines)\n";
  return out;
}

std::string trim_log(std::string log) {
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n' || log.back() == ' ')) log.pop_back();
  return log;
}

// Compiles `source`; `force_ptx` returns PTX even for an sm_XX target (compile_ptx).
CompiledImage compile_program(const std::string& source, const std::string& program_name, const CompileTarget& target,
                              const CompileOptions& options, bool force_ptx) {
  const std::string arch_override = user_arch(options);
  std::vector<std::string> all_options(std::begin(kDefaultNvrtcOptions), std::end(kDefaultNvrtcOptions));
  if (arch_override.empty()) all_options.push_back("-arch=" + target.name());
  all_options.insert(all_options.end(), options.options.begin(), options.options.end());
  const std::string target_name = arch_override.empty() ? target.name() : arch_override;
  const bool cubin = !force_ptx && target_name.starts_with("sm_");

  ProgramGuard guard;
  KILN_NVRTC_CHECK(nvrtcCreateProgram(&guard.program, source.c_str(), program_name.c_str(), 0, nullptr, nullptr),
                   program_name);
  for (const auto& expression : options.name_expressions)
    KILN_NVRTC_CHECK(nvrtcAddNameExpression(guard.program, expression.c_str()), program_name);
  std::vector<const char*> argv;
  for (const auto& option : all_options) argv.push_back(option.c_str());

  counters().nvrtc_compiles.fetch_add(1, std::memory_order_relaxed);
  const nvrtcResult result = nvrtcCompileProgram(guard.program, static_cast<int>(argv.size()), argv.data());
  if (result != NVRTC_SUCCESS) {
    std::string log;
    size_t log_size = 0;
    if (nvrtcGetProgramLogSize(guard.program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
      log.resize(log_size);
      if (nvrtcGetProgramLog(guard.program, log.data()) != NVRTC_SUCCESS) log.clear();
    }
    log = trim_log(std::move(log));
    std::string message = "kiln: NVRTC could not compile kernel program '" + program_name + "' for " + target_name +
                          " (" + nvrtcGetErrorString(result) + "; options: " + join(all_options, " ") + ")\n";
    message += "NVRTC log:\n" + (log.empty() ? std::string("(empty)") : log) + "\n";
    const std::vector<int> lines = error_lines(log, program_name);
    const std::string excerpt = lines.empty() ? std::string() : source_excerpt(source, lines);
    if (!excerpt.empty()) message += "Source of '" + program_name + "' around the errors:\n" + excerpt;
    message +=
        "Fix the kernel source or options; kernel sources must be self-contained (no include paths are given, so "
        "do not #include CUDA headers).";
    throw CompileError(message, std::move(log), program_name, excerpt);
  }

  CompiledImage compiled;
  compiled.is_cubin = cubin;
  size_t size = 0;
  if (cubin) {
    KILN_NVRTC_CHECK(nvrtcGetCUBINSize(guard.program, &size), program_name);
    compiled.image.resize(size);
    KILN_NVRTC_CHECK(nvrtcGetCUBIN(guard.program, compiled.image.data()), program_name);
  } else {
    KILN_NVRTC_CHECK(nvrtcGetPTXSize(guard.program, &size), program_name);
    compiled.image.resize(size);
    KILN_NVRTC_CHECK(nvrtcGetPTX(guard.program, compiled.image.data()), program_name);
    while (!compiled.image.empty() && compiled.image.back() == '\0')
      compiled.image.pop_back();  // std::string keeps one
  }
  for (const auto& expression : options.name_expressions) {
    const char* lowered = nullptr;
    KILN_NVRTC_CHECK(nvrtcGetLoweredName(guard.program, expression.c_str(), &lowered), program_name);
    compiled.lowered_names.emplace_back(expression, lowered);
  }
  return compiled;
}

// Makes `device` current for the scope when it is not already, restoring the previous one.
class DeviceSwitch {
 public:
  explicit DeviceSwitch(int device) {
    int current = -1;
    if (cudaGetDevice(&current) == cudaSuccess && current == device) return;
    KILN_CUDA_CHECK(cudaSetDevice(device));
    previous_ = current;
  }
  ~DeviceSwitch() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  int previous_ = -1;
};

struct MemoryKey {
  int device = 0;
  CacheKey key;
  bool operator==(const MemoryKey&) const = default;
};
struct MemoryKeyHash {
  size_t operator()(const MemoryKey& k) const {
    return static_cast<size_t>(k.key.low ^ (static_cast<uint64_t>(k.device) * 0x9E3779B97F4A7C15ULL));
  }
};
// A module and the whole key material it was compiled from (compared on a hit: equal 128-bit keys of two
// different programs, however unlikely, never hand out the other's module).
struct MemoryEntry {
  std::string material;
  std::shared_ptr<Module> module;
};
// The memory cache: one map for all devices, keyed by (device, key). Never destroyed, so that no
// cudaLibraryUnload runs during static destruction after the CUDA runtime is gone.
struct MemoryCache {
  std::mutex mutex;
  std::unordered_map<MemoryKey, MemoryEntry, MemoryKeyHash> modules;
};
MemoryCache& memory_cache() {
  static auto* cache = new MemoryCache();
  return *cache;
}

void check_device(int device, const std::string& program_name) {
  const int count = device_count();
  if (device < 0 || device >= count)
    throw DeviceError("kiln: cannot load kernel program '" + program_name + "' on cuda:" + std::to_string(device) +
                      ": this machine has " + std::to_string(count) +
                      " usable GPU(s); use a device from kiln::try_all_gpus() (check kiln::num_gpus() first)");
}

}  // namespace

std::string CompileTarget::name() const { return (cubin ? "sm_" : "compute_") + std::to_string(arch); }

const std::vector<int>& nvrtc_supported_archs() {
  static const std::vector<int> archs = [] {
    std::vector<int> result;
    int count = 0;
    if (nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return result;
    result.resize(static_cast<size_t>(count));
    if (nvrtcGetSupportedArchs(result.data()) != NVRTC_SUCCESS) result.clear();
    std::sort(result.begin(), result.end());
    return result;
  }();
  return archs;
}

CompileTarget compile_target(int cc, bool cubin) {
  const std::vector<int>& archs = nvrtc_supported_archs();
  if (cubin && std::binary_search(archs.begin(), archs.end(), cc)) return {cc, true};
  auto it = std::upper_bound(archs.begin(), archs.end(), cc);
  if (it == archs.begin()) {
    const int version = nvrtc_version();
    throw DeviceError("kiln: a GPU of compute capability " + std::to_string(cc / 10) + "." + std::to_string(cc % 10) +
                      " is older than every architecture NVRTC " + std::to_string(version / 1000) + "." +
                      std::to_string(version % 1000) + " compiles for (oldest: sm_" +
                      (archs.empty() ? std::string("?") : std::to_string(archs.front())) +
                      "); use the CPU (kiln::cpu()) or a CUDA toolkit that supports this GPU");
  }
  return {*std::prev(it), false};
}

CompiledImage compile_image(const std::string& source, const std::string& program_name, const CompileTarget& target,
                            const CompileOptions& options) {
  return compile_program(source, program_name, target, options, /*force_ptx=*/false);
}

std::string compile_ptx(const std::string& source, const std::string& program_name, int cc,
                        const CompileOptions& options) {
  return compile_program(source, program_name, compile_target(cc, /*cubin=*/false), options, /*force_ptx=*/true).image;
}

// ---- Module -----------------------------------------------------------------------------------

Module::Module(std::string image, std::vector<std::pair<std::string, std::string>> lowered_names,
               std::string program_name)
    : image_(std::move(image)), program_name_(std::move(program_name)) {
  for (auto& [expression, lowered] : lowered_names) lowered_names_.emplace(std::move(expression), std::move(lowered));
  // PTX must be NUL-terminated: std::string's buffer always is. Loading is no stream work; during a graph
  // capture (a kernel used for the first time) it runs in relaxed capture mode.
  RelaxedCaptureMode relaxed;
  const cudaError_t err = cudaLibraryLoadData(&library_, image_.c_str(), nullptr, nullptr, 0, nullptr, nullptr, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the (non-sticky) error so later calls do not report it
    library_ = nullptr;
    int device = -1;
    cudaGetDevice(&device);
    throw CudaError("kiln: cudaLibraryLoadData failed for kernel program '" + program_name_ +
                    "' on cuda:" + std::to_string(device) + ": " + cudaGetErrorName(err) + " (" +
                    cudaGetErrorString(err) + "); the image (" + std::to_string(image_.size()) +
                    " bytes) does not suit this GPU or driver: update the driver or recompile for this GPU");
  }
}

Module::~Module() {
  if (library_ != nullptr) cudaLibraryUnload(library_);  // errors (e.g. at process exit) are ignored
}

std::string Module::lowered_name(const std::string& name_expression) const {
  auto it = lowered_names_.find(name_expression);
  return it == lowered_names_.end() ? std::string() : it->second;
}

std::vector<std::string> Module::kernel_names() const {
  std::vector<std::string> names;
  unsigned int count = 0;
  if (cudaLibraryGetKernelCount(&count, library_) != cudaSuccess) {
    cudaGetLastError();
    return names;
  }
  std::vector<cudaKernel_t> kernels(count);
  if (count > 0 && cudaLibraryEnumerateKernels(kernels.data(), count, library_) != cudaSuccess) {
    cudaGetLastError();
    return names;
  }
  for (cudaKernel_t kernel : kernels) {
    const char* name = nullptr;
    if (cudaFuncGetName(&name, reinterpret_cast<const void*>(kernel)) == cudaSuccess && name != nullptr)
      names.emplace_back(name);
    else
      cudaGetLastError();
  }
  std::sort(names.begin(), names.end());
  return names;
}

cudaKernel_t Module::function(const std::string& name) {
  {
    std::lock_guard lock(mutex_);
    if (auto it = kernels_.find(name); it != kernels_.end()) return it->second;
  }
  auto lowered = lowered_names_.find(name);
  const std::string& symbol = lowered == lowered_names_.end() ? name : lowered->second;
  cudaKernel_t kernel = nullptr;
  RelaxedCaptureMode relaxed;  // see the constructor
  const cudaError_t err = cudaLibraryGetKernel(&kernel, library_, symbol.c_str());
  if (err != cudaSuccess || kernel == nullptr) {
    cudaGetLastError();
    const std::vector<std::string> names = kernel_names();
    throw ValueError("kiln: kernel '" + name + "' not found in kernel program '" + program_name_ + "' (" +
                     cudaGetErrorName(err) + "; its kernels: " + (names.empty() ? "none" : join(names, ", ")) +
                     "). Declare it extern \"C\" __global__, or pass its C++ name (e.g. \"my_kernel<float>\") in "
                     "the name expressions (RawModuleOptions::name_expressions)");
  }
  if (thread_captures() > 0) {
    // Fetched during a graph capture: load it into the context now (relaxed mode), not lazily at the
    // captured launch.
    cudaFuncAttributes attributes{};
    if (cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(kernel)) != cudaSuccess) cudaGetLastError();
  }
  std::lock_guard lock(mutex_);
  return kernels_.emplace(name, kernel).first->second;
}

// ---- cache ------------------------------------------------------------------------------------

std::shared_ptr<Module> load_module(const std::string& source, const std::string& program_name, int device,
                                    const CompileOptions& options) {
  check_device(device, program_name);
  const CompileTarget target = compile_target(compute_capability(device));
  const std::string arch_override = user_arch(options);
  const std::string_view material = cache_key_material(source, arch_override.empty() ? target.name() : arch_override,
                                                       options.options, options.name_expressions);
  const CacheKey key = cache_key_of(material);
  const MemoryKey memory_key{device, key};
  MemoryCache& cache = memory_cache();
  {
    std::lock_guard lock(cache.mutex);
    if (auto it = cache.modules.find(memory_key); it != cache.modules.end() && it->second.material == material) {
      counters().memory_hits.fetch_add(1, std::memory_order_relaxed);
      return it->second.module;
    }
  }

  // Compile and load outside the lock: two threads missing on the same key both compile, and the
  // first module inserted wins (the other is unloaded).
  DeviceSwitch device_switch(device);
  std::shared_ptr<Module> module;
  const std::string directory = kernel_cache_directory();
  if (!directory.empty()) {
    if (auto entry = read_cache_file(directory, material)) {
      try {
        module = std::make_shared<Module>(std::move(entry->image), std::move(entry->lowered_names), program_name);
        counters().disk_hits.fetch_add(1, std::memory_order_relaxed);
      } catch (const CudaError&) {
        module.reset();  // an image the driver rejects: recompile and overwrite it
      }
    }
    if (!module) counters().disk_misses.fetch_add(1, std::memory_order_relaxed);
  }
  if (!module) {
    CompiledImage compiled = compile_image(source, program_name, target, options);
    if (!directory.empty() && !write_cache_file(directory, material, compiled))
      counters().disk_write_failures.fetch_add(1, std::memory_order_relaxed);
    module = std::make_shared<Module>(std::move(compiled.image), std::move(compiled.lowered_names), program_name);
  }
  // The first module inserted for this material wins; another material under the same key keeps its entry,
  // and this module stays uncached.
  std::lock_guard lock(cache.mutex);
  auto [it, inserted] = cache.modules.try_emplace(memory_key, MemoryEntry{std::string(material), module});
  return it->second.material == material ? it->second.module : module;
}

std::shared_ptr<Module> load_module_image(const std::string& image, const std::string& program_name, int device) {
  check_device(device, program_name);
  if (image.empty()) throw ValueError("kiln: cannot load kernel program '" + program_name + "': its image is empty");
  DeviceSwitch device_switch(device);
  return std::make_shared<Module>(image, std::vector<std::pair<std::string, std::string>>{}, program_name);
}

CacheStats cache_stats() {
  const Counters& c = counters();
  return CacheStats{c.nvrtc_compiles.load(), c.memory_hits.load(), c.disk_hits.load(), c.disk_misses.load(),
                    c.disk_write_failures.load()};
}

void clear_memory_cache() {
  MemoryCache& cache = memory_cache();
  decltype(cache.modules) dropped;
  {
    std::lock_guard lock(cache.mutex);
    dropped.swap(cache.modules);
  }  // modules are unloaded here, outside the lock
}

// ---- NVRTC warm-up --------------------------------------------------------------------------------
//
// The first nvrtcCompileProgram of a process pays for NVRTC's own start-up (loading its builtins
// library, initialising the front end): 100-200 ms before any work of the user's kernel. One trivial
// program compiled on a background thread when the CUDA runtime first finds a GPU moves that cost off
// the first real compile, which then overlaps it with whatever the program does meanwhile. NVRTC's API
// is thread-safe for distinct programs. The warm-up program bypasses the counters (cache_stats()) so
// tests that count compiles never see it. KILN_NVRTC_WARMUP=0 disables it.

namespace {

class NvrtcWarmup {
 public:
  NvrtcWarmup()
      : thread_([] {
          static const char* source =
              "extern \"C\" __global__ void kiln_nvrtc_warmup(float* p, int n) {\n"
              "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "  if (i < n) p[i] = tanhf(p[i] * 1.5f + 0.25f) * expf(-p[i]);\n"
              "}\n";
          nvrtcProgram program = nullptr;
          if (nvrtcCreateProgram(&program, source, "kiln_nvrtc_warmup", 0, nullptr, nullptr) != NVRTC_SUCCESS) return;
          const char* options[] = {"--std=c++17", "-default-device"};
          (void)nvrtcCompileProgram(program, 2, options);
          (void)nvrtcDestroyProgram(&program);
        }) {}
  ~NvrtcWarmup() {
    if (thread_.joinable()) thread_.join();  // at exit: never leave NVRTC running under static destruction
  }
  NvrtcWarmup(const NvrtcWarmup&) = delete;
  NvrtcWarmup& operator=(const NvrtcWarmup&) = delete;

 private:
  std::thread thread_;
};

bool warmup_enabled() { return detail::env_flag("KILN_NVRTC_WARMUP", true); }

}  // namespace

void start_nvrtc_warmup() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (!warmup_enabled()) return;
    try {
      static NvrtcWarmup warmup;
    } catch (const std::system_error&) {
      // No thread could be started: the first compile simply pays NVRTC's start-up itself.
    }
  });
}

}  // namespace kiln::cuda_impl
