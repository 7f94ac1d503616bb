// nn::init (PyTorch's initialisers, drawn from kiln's Philox generator) and the losses.
#include <cmath>
#include <string>

#include "kiln/autograd.hpp"
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

/// Logits as (N, C) and integer labels as (N,) int64, checked (one synchronisation for the label range).
void check_labels(const Array& labels, int64_t n, int64_t classes, const char* op) {
  if (is_floating(labels.dtype()) || labels.dtype() == bool_)
    throw DTypeError(std::string(op) + ": class labels must be integers, got " +
                     std::string(dtype_name(labels.dtype())) + " (pass probabilities of the logits' shape instead)");
  if (labels.size() != n)
    throw ShapeError(std::string(op) + ": " + std::to_string(n) + " rows of scores but labels of shape " +
                     shape_str(labels.shape()) + "; pass one label per row");
  if (n > 0 && any((labels < 0) | (labels >= classes)).item<bool>())
    throw ValueError(std::string(op) + ": a label is outside [0, " + std::to_string(classes) + ") for scores of " +
                     std::to_string(classes) + " classes");
}

/// The score of each row's label: log_probs (N, C) at labels (N,), gathered (its gradient scatters back).
Array pick(const Array& log_probs, const Array& labels) {
  const int64_t n = log_probs.shape(0), classes = log_probs.shape(1);
  const Array flat = arange(n, int64, log_probs.device()) * classes + labels.reshape({n}).astype(int64);
  return take(log_probs.reshape({n * classes}), flat);
}

Array as_rows(const Array& x, const char* op) {
  if (x.ndim() == 1) return x.reshape({1, x.shape(0)});
  if (x.ndim() != 2)
    throw ShapeError(std::string(op) + ": scores must be (N, C) or (C,), got shape " + shape_str(x.shape()));
  return x;
}

}  // namespace

Array log_softmax(const Array& x, int64_t axis) { return x - logsumexp(x, axis, true); }

Array softmax(const Array& x, int64_t axis) { return exp(log_softmax(x, axis)); }

Array nll_loss(const Array& log_probs, const Array& labels, Reduction reduction) {
  const Array rows = as_rows(log_probs, "nll_loss");
  check_labels(labels, rows.shape(0), rows.shape(1), "nll_loss");
  return reduce(-pick(rows, labels), reduction);
}

Array cross_entropy(const Array& logits, const Array& target, Reduction reduction, double label_smoothing) {
  if (!(label_smoothing >= 0.0 && label_smoothing <= 1.0))
    throw ValueError("cross_entropy: label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
  if (!is_floating(logits.dtype()))
    throw DTypeError("cross_entropy: logits must be floating, got " + std::string(dtype_name(logits.dtype())));
  const Array rows = as_rows(logits, "cross_entropy");
  const int64_t classes = rows.shape(1);
  const Array logp = log_softmax(rows, 1);
  Array per_row;
  if (is_floating(target.dtype())) {  // class probabilities
    if (!(target.shape() == logits.shape()))
      throw ShapeError("cross_entropy: probability targets must have the logits' shape " + shape_str(logits.shape()) +
                       ", got " + shape_str(target.shape()));
    Array p = target.reshape(rows.shape());
    if (label_smoothing > 0) p = p * (1.0 - label_smoothing) + label_smoothing / static_cast<double>(classes);
    per_row = -sum(p * logp, 1);
  } else {
    check_labels(target, rows.shape(0), classes, "cross_entropy");
    per_row = -pick(logp, target);
    if (label_smoothing > 0) per_row = per_row * (1.0 - label_smoothing) - mean(logp, 1) * label_smoothing;
  }
  if (logits.ndim() == 1) per_row = per_row.reshape(Shape{});
  return reduce(per_row, reduction);
}

Array mse_loss(const Array& x, const Array& y, Reduction reduction) { return reduce(square(x - y), reduction); }

Array binary_cross_entropy_with_logits(const Array& x, const Array& y, Reduction reduction) {
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
