// The per-thread autocast scope (kiln/autocast.hpp).
#include "kiln/autocast.hpp"

#include <memory>
#include <string>
#include <unordered_map>

#include "core/autograd.hpp"
#include "kiln/autograd.hpp"
#include "kiln/error.hpp"
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"

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
  bool with_grad = false;  ///< made by autocast_cache with gradients on: the cast is recorded (AstypeBackward)
  bool holds(const Array& x) const {
    return cast.defined() && version == x.storage()->version() && source.storage() == x.storage() &&
           source.shape() == x.shape() && source.strides() == x.strides();
  }
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
  if (!x.requires_grad() || !x.is_leaf()) return x.astype(t);
  // With gradients, only the recorded copies autocast_cache made for this scope are shared (by every use in one
  // forward, whose backward then sums their gradients at the one cast); without, casts are cached as they come.
  if (is_grad_enabled()) {
    const auto it = t_casts.find(CastKey{x.data_ptr(), t});
    return it != t_casts.end() && it->second.with_grad && it->second.holds(x) ? it->second.cast : x.astype(t);
  }
  CastEntry& e = t_casts[CastKey{x.data_ptr(), t}];
  if (!e.holds(x)) e = CastEntry{x, x.astype(t), x.storage()->version(), false};
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

void autocast_cache(const std::vector<Array>& arrays) {
  if (!t_autocast) return;
  const DType t = *t_autocast;
  // The float32 leaves that require grad, on the first one's device, whose copy is not cached at their version.
  std::vector<Array> sources, casts;
  for (const Array& x : arrays) {
    if (!x.defined() || x.dtype() != DType::Float32 || !x.requires_grad() || !x.is_leaf() || !x.is_contiguous() ||
        x.size() == 0 || (!sources.empty() && x.device() != sources[0].device()))
      continue;
    const auto it = t_casts.find(CastKey{x.data_ptr(), t});
    if (it != t_casts.end() && it->second.holds(x) && (it->second.with_grad || !is_grad_enabled())) continue;
    sources.push_back(x);
    casts.push_back(empty(x.shape(), t, x.device()));
  }
  if (sources.empty()) return;
  static const auto to_bfloat16 = fuse([](auto x) { return astype(x, DType::BFloat16); }, "autocast_cast");
  static const auto to_float16 = fuse([](auto x) { return astype(x, DType::Float16); }, "autocast_cast");
  {
    NoGradGuard no_grad;  // the copies are recorded one by one below
    if (t == DType::BFloat16)
      to_bfloat16.each({casts}, sources);
    else
      to_float16.each({casts}, sources);
  }
  const bool grad = is_grad_enabled();
  for (size_t i = 0; i < sources.size(); ++i) {
    if (grad) {
      detail::GradRecorder record({&sources[i]});
      auto pass = [](const detail::Node&, const Array& g) { return std::vector<Array>{g}; };
      if (record) detail::record(casts[i], std::make_shared<detail::Node>("AstypeBackward", pass), {&sources[i]});
    }
    t_casts[CastKey{sources[i].data_ptr(), t}] =
        CastEntry{sources[i], casts[i], sources[i].storage()->version(), grad};
  }
}

Array autocast_float32(const Array& x) {
  return t_autocast && x.defined() && (x.dtype() == DType::Float16 || x.dtype() == DType::BFloat16)
             ? x.astype(DType::Float32)
             : x;
}

}  // namespace kiln
