// The per-thread autocast scope (kiln/autocast.hpp).
#include "kiln/autocast.hpp"

#include <string>

#include "kiln/error.hpp"

namespace kiln {
namespace {
thread_local std::optional<DType> t_autocast;
}  // namespace

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(t_autocast) {
  if (dtype && *dtype != DType::Float16 && *dtype != DType::BFloat16)
    throw ValueError("AutocastGuard: autocasting is to float16 or bfloat16, got " + std::string(dtype_name(*dtype)) +
                     "; pass std::nullopt to turn it off");
  t_autocast = dtype;
}

AutocastGuard::~AutocastGuard() { t_autocast = previous_; }

std::optional<DType> autocast_dtype() { return t_autocast; }

Array autocast_low(const Array& x) {
  return t_autocast && x.defined() && x.dtype() == DType::Float32 ? x.astype(*t_autocast) : x;
}

Array autocast_float32(const Array& x) {
  return t_autocast && x.defined() && (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16)
             ? x.astype(DType::Float32)
             : x;
}

}  // namespace kiln
