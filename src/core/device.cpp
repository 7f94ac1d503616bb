// Device naming, discovery through the backends, and the per-thread current device.
#include "kiln/device.hpp"

#include <ostream>
#include <string>

#include "core/backend.hpp"
#include "core/device_runtime.hpp"
#include "kiln/error.hpp"
#include "kiln/version.hpp"

namespace kiln {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, Device d) { return os << d.str(); }

int num_gpus() {
  detail::DeviceRuntime* r = detail::builtin_runtime(DeviceType::CUDA);
  return r ? r->device_count() : 0;
}

namespace detail {
std::string gpu_count_str() {
  return "this machine has " + std::to_string(num_gpus()) + " usable GPU(s)" +
         (built_with_cuda() ? "" : " (this build has no CUDA backend)");
}

void require_gpu(int index, const std::string& op) {
  if (index >= 0 && index < num_gpus()) return;
  const std::string i = std::to_string(index);
  throw DeviceError(op + ": cuda:" + i + " does not exist; " + gpu_count_str() + "; use try_gpu(" + i +
                    ") to fall back to the CPU");
}
}  // namespace detail

Device gpu(int i) {
  detail::require_gpu(i, "gpu(" + std::to_string(i) + ")");
  return Device{DeviceType::CUDA, i};
}

Device try_gpu(int i) { return i >= 0 && i < num_gpus() ? Device{DeviceType::CUDA, i} : cpu(); }

std::vector<Device> try_all_gpus() {
  std::vector<Device> out;
  for (int i = 0, n = num_gpus(); i < n; ++i) out.push_back(Device{DeviceType::CUDA, i});
  if (out.empty()) out.push_back(cpu());
  return out;
}

Device parse_device(const std::string& name) {
  if (name == "cpu") return cpu();
  for (const char* prefix : {"cuda", "gpu"}) {
    std::string p(prefix);
    if (name == p) return Device{DeviceType::CUDA, 0};
    if (name.rfind(p + ":", 0) == 0) {
      std::string rest = name.substr(p.size() + 1);
      if (!rest.empty() && rest.find_first_not_of("0123456789") == std::string::npos && rest.size() < 6)
        return Device{DeviceType::CUDA, std::stoi(rest)};
    }
  }
  throw ValueError("parse_device: cannot parse '" + name + "'; use \"cpu\", \"cuda\" or \"cuda:N\"");
}

namespace {
thread_local Device t_current_device = cpu();
}

Device current_device() { return t_current_device; }
void set_current_device(Device d) {
  if (d.is_cuda()) (void)gpu(d.index);  // validates, throws DeviceError for a missing GPU
  t_current_device = d;
}

DeviceGuard::DeviceGuard(Device d) : previous_(t_current_device) { set_current_device(d); }
DeviceGuard::~DeviceGuard() { t_current_device = previous_; }

bool built_with_cuda() {
#ifdef KILN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::string build_info() {
#if KILN_HAVE_MKL
  std::string s = std::string("kiln ") + kVersion + " (cpu: openblas + onemkl, openmp";
#else
  std::string s = std::string("kiln ") + kVersion + " (cpu: openblas, openmp";
#endif
  if (built_with_cuda()) s += "; cuda: nvrtc, cublas";
  return s + ")";
}

}  // namespace kiln
