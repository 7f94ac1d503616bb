// The per-thread autocast scope (kiln/autocast.hpp).
#include "kiln/autocast.hpp"

#include <string>
#include <unordered_map>

#include "kiln/autograd.hpp"
#include "kiln/error.hpp"

namespace kiln {
namespace {
thread_local std::optional<DType> t_autocast;

// torch.autocast's weight cache (here for code run without gradients, as inference): inside the outermost
// enabled scope, the low-precision copy of a parameter (a
// leaf that requires grad) is made once and reused by every op that casts it, until the scope closes or the
// parameter changes (its storage's version moves: an optimizer step, an in-place write). A network run many
// times in one scope (an inference loop) then casts its weights once, as PyTorch's does.
struct CastEntry {
  Array source, cast;
  uint64_t version = 0;
};
struct CastKey {
  const void* data;
  DType dtype;
  bool operator==(const CastKey& o) const { return data == o.data && dtype == o.dtype; }
};
struct CastKeyHash {
  size_t operator()(const CastKey& k) const {
    return std::hash<const void*>()(k.data) ^ (static_cast<size_t>(k.dtype) * 0x9e3779b97f4a7c15ULL);
  }
};
thread_local std::unordered_map<CastKey, CastEntry, CastKeyHash> t_casts;

Array cached_cast(const Array& x, DType t) {
  // Without gradients only: a cached cast carries no autograd history to share between backward passes.
  if (is_grad_enabled() || !x.requires_grad() || !x.is_leaf()) return x.astype(t);
  const uint64_t version = x.storage()->version();
  CastEntry& e = t_casts[CastKey{x.data_ptr(), t}];
  if (!e.cast.defined() || e.version != version || e.source.storage() != x.storage() ||
      !(e.source.shape() == x.shape()) || e.source.strides() != x.strides()) {
    e.source = x;
    e.cast = x.astype(t);
    e.version = version;
  }
  return e.cast;
}
}  // namespace

AutocastGuard::AutocastGuard(std::optional<DType> dtype) : previous_(t_autocast) {
  if (dtype && *dtype != DType::Float16 && *dtype != DType::BFloat16)
    throw ValueError("AutocastGuard: autocasting is to float16 or bfloat16, got " + std::string(dtype_name(*dtype)) +
                     "; pass std::nullopt to turn it off");
  t_autocast = dtype;
}

AutocastGuard::~AutocastGuard() {
  if (t_autocast && !previous_) t_casts.clear();  // leaving the outermost enabled scope
  t_autocast = previous_;
}

std::optional<DType> autocast_dtype() { return t_autocast; }

Array autocast_low(const Array& x) {
  return t_autocast && x.defined() && x.dtype() == DType::Float32 ? cached_cast(x, *t_autocast) : x;
}

Array autocast_float32(const Array& x) {
  return t_autocast && x.defined() && (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16)
             ? x.astype(DType::Float32)
             : x;
}

}  // namespace kiln
