// nn::init (PyTorch's initialisers, drawn from kiln's Philox generator) and the losses.
#include <climits>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/cross_entropy.hpp"
#include "kiln/fuse.hpp"
#include "kiln/indexing.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln::nn {

namespace init {

std::pair<int64_t, int64_t> fans(const Array& w) {
  if (w.ndim() < 2)
    throw ShapeError("init: fan in and fan out need a weight of at least 2 axes, got shape " + shape_str(w.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.ndim(); ++d) receptive *= w.shape(d);
  return {w.shape(1) * receptive, w.shape(0) * receptive};
}

void uniform(Array& w, double low, double high) {
  NoGradGuard no_grad;
  if (w.size() == 0) return;
  w.assign(random::uniform(w.shape(), low, high, w.dtype(), w.device()));
}

void normal(Array& w, double mean, double std) {
  NoGradGuard no_grad;
  if (w.size() == 0) return;
  w.assign(random::normal(w.shape(), mean, std, w.dtype(), w.device()));
}

void constant(Array& w, double value) {
  NoGradGuard no_grad;
  w.fill(value);
}
void zeros(Array& w) { constant(w, 0.0); }
void ones(Array& w) { constant(w, 1.0); }

void xavier_uniform(Array& w, double gain) {
  const auto [fan_in, fan_out] = fans(w);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
  uniform(w, -bound, bound);
}

void xavier_normal(Array& w, double gain) {
  const auto [fan_in, fan_out] = fans(w);
  normal(w, 0.0, gain * std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
}

void kaiming_uniform(Array& w, double a, bool fan_in) {
  const auto [in, out] = fans(w);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = std::sqrt(3.0) * gain / std::sqrt(static_cast<double>(fan_in ? in : out));
  uniform(w, -bound, bound);
}

void kaiming_normal(Array& w, double a, bool fan_in) {
  const auto [in, out] = fans(w);
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  normal(w, 0.0, gain / std::sqrt(static_cast<double>(fan_in ? in : out)));
}

}  // namespace init

namespace {

Array reduce(const Array& per_item, Reduction reduction) {
  switch (reduction) {
    case Reduction::Mean:
      return mean(per_item);
    case Reduction::Sum:
      return sum(per_item);
    case Reduction::None:
      break;
  }
  return per_item;
}

/// Logits as (N, C) and integer labels as (N,) int64, checked (on a GPU by a kernel: no synchronisation).
void check_labels(const Array& labels, int64_t n, int64_t classes, const char* op) {
  if (is_floating(labels.dtype()) || labels.dtype() == bool_)
    throw DTypeError(std::string(op) + ": class labels must be integers, got " +
                     std::string(dtype_name(labels.dtype())) + " (pass probabilities of the logits' shape instead)");
  if (labels.size() != n)
    throw ShapeError(std::string(op) + ": " + std::to_string(n) + " rows of scores but labels of shape " +
                     shape_str(labels.shape()) + "; pass one label per row");
  check_in_range(labels, 0, classes,
                 std::string(op) + ": label {value} is outside [0, " + std::to_string(classes) + ") for scores of " +
                     std::to_string(classes) + " classes");
}

/// The score of each row's label: log_probs (N, C) at labels (N,), gathered by take at the C-order positions
/// i * C + label (its gradient scatters back); take offsets N indices for any layout, so no array of the logits'
/// size is made (take_along_axis would build broadcast index arrays, a copy of non-contiguous rows another).
Array pick(const Array& log_probs, const Array& labels) {
  const int64_t n = log_probs.shape(0), classes = log_probs.shape(1);
  return take(log_probs, arange(n, int64, log_probs.device()) * classes + labels.reshape({n}).astype(int64));
}

/// arange(classes) as a (1, classes) int32 row on `d` (int64 beyond 2^31 classes: int32 halves the bytes a pass
/// over every logit reads beside them), made once per (device, classes) and kept.
const Array& class_ids(int64_t classes, Device d) {
  static std::mutex mutex;
  // leaked: GPU arrays outlive main. Keyed by (device type, index, classes): no string built per call.
  static auto* cache = new std::map<std::tuple<int, int, int64_t>, Array>;
  std::lock_guard lock(mutex);
  Array& ids = (*cache)[{static_cast<int>(d.type), d.index, classes}];
  if (!ids.defined()) ids = arange(classes, classes <= INT32_MAX ? int32 : int64, d).reshape({1, classes});
  return ids;
}

/// The fused functions of cross_entropy_rows, one set per case decided when it is called: `Widen` reads
/// float16/bfloat16 logits as they are and widens them to float32 inside the kernels (autocast: exact, so the
/// same values as casting first, without a float32 copy of the logits: 3.3 GB for GPT-2's 16 x 1024 x 50304)
/// and rounds the gradient back to the logits' dtype at its end (the cast's backward); `Smooth` adds label
/// smoothing's row mean, a pass over every row that a loss without smoothing does not make.
template <bool Widen, bool Smooth>
struct CrossEntropyKernels {
  static auto widen(const auto& x) {
    if constexpr (Widen)
      return astype(x, float32);
    else
      return x;
  }
  /// Each row's log-sum-exp in x's own (floating) dtype, max-shifted as kiln::logsumexp (which computes in
  /// float64: on a GPU a float64 exp per logit made the loss compute-bound, 7.8 ms for GPT-2's 824M logits),
  /// as PyTorch's log_softmax does for float32.
  static auto row_logsumexp(const auto& x) {
    auto m = max(x, 1, true);
    auto shift = where(isfinite(m), m, 0.0);
    return log(sum(exp(x - shift), 1, true)) + shift;
  }
  // keepdims: a staged (one pass per row) kernel takes reductions over the last axis in their (N, 1) form
  // only; (N,) would broadcast against (N, C) from the right, so the graph would run op by op.
  // `picked` is each row's logit at its label, gathered before (one element per row: a masked sum over the row
  // here would be a third pass over every logit).
  static inline const auto forward = fuse(
      [](auto x_in, auto picked, auto keep, auto ls) {
        auto x = widen(x_in);
        auto lse = row_logsumexp(x);
        auto loss = lse - widen(picked) * keep;
        if constexpr (Smooth)
          return std::tuple{loss - mean(x, 1, true) * ls, lse};
        else
          return std::tuple{loss, lse};  // ls is 0: unused
      },
      "cross_entropy");
  static inline const auto backward = fuse(
      [](auto x_in, auto lse, auto ids, auto label, auto g, auto keep, auto ls_over_c) {
        auto e = exp(widen(x_in) - lse);
        auto grad = (where(ids == label, e - keep, e) - ls_over_c) * g;
        if constexpr (Widen)
          return astype(grad, x_in.dtype());
        else
          return grad;
      },
      "cross_entropy_backward");
};

/// Cross entropy of (N, C) logits against integer labels with label smoothing `ls`, per row, as one function
/// whose forward is one kernel (each row's logsumexp, its label's score and, with smoothing, its mean) and whose
/// gradient is another, (softmax - smoothed one-hot) * g, instead of the ~20 kernels of the composed ops.
/// `widen`: float16/bfloat16 logits computed in float32 (autocast). Where the device has an engine for them
/// (kiln/cross_entropy.hpp: a GPU, contiguous float32 or widened logits) it runs both directions, one pass over
/// the logits each way; elsewhere (the CPU among them) the fused graphs of CrossEntropyKernels do.
template <bool Widen, bool Smooth>
Array cross_entropy_rows(const Array& rows, const Array& labels, double ls) {
  using K = CrossEntropyKernels<Widen, Smooth>;
  const int64_t n = rows.shape(0), classes = rows.shape(1);
  // The engine computes in float32: the fused graphs' dtype only for float32 or widened logits. The CPU has none
  // (its path is the fused graphs): not asked, so its steps pay no second round of checks.
  const bool engine = !rows.device().is_cpu() && (rows.dtype() == float32 || Widen);
  // The labels as the fused graphs compare them with class_ids.
  const auto label = [n](const Array& ids, const Array& of) { return of.reshape({n, 1}).astype(ids.dtype()); };
  AutogradFunction f{
      "CrossEntropyBackward",
      [&](const std::vector<Array>& in, std::vector<Array>& saved) {
        // The labels are saved too: an in-place change to them before backward makes backward throw.
        if (std::optional<CrossEntropyRows> r = engine ? cross_entropy_rows_forward(in[0], labels, ls) : std::nullopt) {
          saved = {in[0], r->lse, labels};
          return r->loss;
        }
        const Array picked = pick(in[0], label(class_ids(classes, rows.device()), labels)).reshape({n, 1});
        auto [loss, lse] = K::forward(in[0], picked, 1.0 - ls, ls);
        saved = {in[0], lse, labels};
        return loss.reshape({n});
      },
      [label, ls, n, classes, engine](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
        const Array& labels = saved[2];
        if (engine)
          if (std::optional<Array> dx = cross_entropy_rows_backward(saved[0], labels, saved[1], g, ls))
            return std::vector<Array>{*dx};
        const Array& ids = class_ids(classes, saved[0].device());
        return std::vector<Array>{K::backward(saved[0], saved[1].reshape({n, 1}), ids, label(ids, labels),
                                              g.reshape({n, 1}), 1.0 - ls, ls / static_cast<double>(classes))};
      }};
  return f.apply({rows});
}

Array cross_entropy_rows(const Array& rows, const Array& labels, double ls, bool widen) {
  if (widen)
    return ls > 0 ? cross_entropy_rows<true, true>(rows, labels, ls)
                  : cross_entropy_rows<true, false>(rows, labels, ls);
  return ls > 0 ? cross_entropy_rows<false, true>(rows, labels, ls)
                : cross_entropy_rows<false, false>(rows, labels, ls);
}

Array as_rows(const Array& x, const char* op) {
  if (x.ndim() == 1) return x.reshape({1, x.shape(0)});
  if (x.ndim() != 2)
    throw ShapeError(std::string(op) + ": scores must be (N, C) or (C,), got shape " + shape_str(x.shape()));
  return x;
}

}  // namespace

Array log_softmax(const Array& x_in, int64_t axis) {
  const Array x = autocast_float32(x_in);
  return x - logsumexp(x, axis, true);
}

Array softmax(const Array& x, int64_t axis) { return exp(log_softmax(x, axis)); }

Array nll_loss(const Array& log_probs, const Array& labels, Reduction reduction) {
  const Array rows = as_rows(autocast_float32(log_probs), "nll_loss");
  check_labels(labels, rows.shape(0), rows.shape(1), "nll_loss");
  return reduce(-pick(rows, labels), reduction);
}

Array cross_entropy(const Array& logits_in, const Array& target, Reduction reduction, double label_smoothing) {
  // Integer labels under autocast read low-precision logits as they are (widened inside the fused kernels);
  // probability targets go through log_softmax on a float32 copy.
  const bool widen = autocast_dtype() && !is_floating(target.dtype()) &&
                     (logits_in.dtype() == DType::Float16 || logits_in.dtype() == DType::BFloat16);
  const Array logits = widen ? logits_in : autocast_float32(logits_in);
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    throw ValueError("cross_entropy: label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
  if (!is_floating(logits.dtype()))
    throw DTypeError("cross_entropy: logits must be floating, got " + std::string(dtype_name(logits.dtype())));
  const Array rows = as_rows(logits, "cross_entropy");
  const int64_t classes = rows.shape(1);
  Array per_row;
  if (is_floating(target.dtype())) {  // class probabilities
    const Array logp = log_softmax(rows, 1);
    if (!(target.shape() == logits.shape()))
      throw ShapeError("cross_entropy: probability targets must have the logits' shape " + shape_str(logits.shape()) +
                       ", got " + shape_str(target.shape()));
    Array p = target.reshape(rows.shape());
    if (label_smoothing > 0) p = p * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(classes);
    per_row = -sum(p * logp, 1);
  } else {
    check_labels(target, rows.shape(0), classes, "cross_entropy");
    per_row = cross_entropy_rows(rows, target, label_smoothing, widen);
  }
  if (logits.ndim() == 1) per_row = per_row.reshape(Shape{});
  return reduce(per_row, reduction);
}

Array mse_loss(const Array& x, const Array& y, Reduction reduction) {
  return reduce(square(autocast_float32(x) - autocast_float32(y)), reduction);
}

Array binary_cross_entropy_with_logits(const Array& x_in, const Array& y_in, Reduction reduction) {
  const Array x = autocast_float32(x_in), y = autocast_float32(y_in);
  return reduce(maximum(x, 0.0) - x * y + log1p(exp(-abs(x))), reduction);
}

Array accuracy(const Array& logits, const Array& labels) {
  const Array rows = as_rows(logits, "accuracy");
  if (labels.size() != rows.shape(0))
    throw ShapeError("accuracy: " + std::to_string(rows.shape(0)) + " rows of scores but labels of shape " +
                     shape_str(labels.shape()));
  return mean(equal(argmax(rows, 1), labels.reshape({rows.shape(0)}).astype(int64)).astype(float32));
}

}  // namespace kiln::nn
