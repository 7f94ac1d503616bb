// Cross-entropy primitives (kiln/cross_entropy.hpp): the operands' checks and the backend's engine
// (Backend::cross_entropy: hand-written kernels on a GPU). No reference here: the caller (nn::cross_entropy) runs
// its fused graph when no engine runs a problem, so the CPU's results are that graph's.
#include "kiln/cross_entropy.hpp"

#include <string>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace {

/// The engine's dtypes: float32, and float16/bfloat16 computed in float32.
bool engine_dtype(DType t) { return t == float32 || t == float16 || t == bfloat16; }

/// Checks what both directions share.
void check_operands(const char* op, const Array& logits, const Array& labels, double ls) {
  if (!logits.defined() || !labels.defined())
    throw ValueError(std::string(op) + ": logits and labels must be defined arrays");
  if (logits.ndim() != 2)
    throw ShapeError(std::string(op) + ": logits must be (N, C), got shape " + shape_str(logits.shape()) +
                     "; reshape them");
  if (!is_floating(logits.dtype()))
    throw DTypeError(std::string(op) + ": logits must be floating, got " + std::string(dtype_name(logits.dtype())));
  if (is_floating(labels.dtype()) || labels.dtype() == bool_ || is_complex(labels.dtype()))
    throw DTypeError(std::string(op) + ": labels must be integers, got " + std::string(dtype_name(labels.dtype())));
  if (labels.size() != logits.shape(0))
    throw ShapeError(std::string(op) + ": " + std::to_string(logits.shape(0)) + " rows of logits but labels of shape " +
                     shape_str(labels.shape()) + "; pass one label per row");
  if (labels.device() != logits.device())
    throw DeviceError(std::string(op) + ": logits are on " + logits.device().str() + " and labels on " +
                      labels.device().str() + "; move them to one device");
  if (!(ls >= 0.0 && ls <= 1.0))
    throw ValueError(std::string(op) + ": label_smoothing must be in [0, 1], got " + std::to_string(ls));
}

/// The labels as the engine takes them (int64, contiguous, (N,)).
Array engine_labels(const Array& labels) { return labels.reshape({labels.size()}).astype(int64).contiguous(); }

/// Whether an engine could take these logits at all (else the caller's path, without asking the backend). The
/// CPU has none: nothing is allocated for it (the backward's result is the logits' size).
bool engine_may_run(const Array& logits) {
  return !logits.device().is_cpu() && engine_dtype(logits.dtype()) && logits.is_contiguous() && logits.size() > 0;
}

}  // namespace

std::optional<CrossEntropyRows> cross_entropy_rows_forward(const Array& logits, const Array& labels,
                                                           double label_smoothing) {
  constexpr const char* op = "cross_entropy_rows_forward";
  check_operands(op, logits, labels, label_smoothing);
  detail::reject_grad({&logits}, op, "use nn::cross_entropy, which records the gradient");
  if (!engine_may_run(logits)) return std::nullopt;
  const Array lab = engine_labels(labels);
  const int64_t n = logits.shape(0);
  detail::CrossEntropyCall call;
  call.kind = detail::CrossEntropyKind::Forward;
  call.logits = &logits;
  call.labels = &lab;
  call.ls = label_smoothing;
  call.loss = detail::make_array({n}, float32, logits.device());
  call.lse = detail::make_array({n}, float32, logits.device());
  if (!detail::backend_for(logits.device()).cross_entropy(call)) return std::nullopt;
  return CrossEntropyRows{call.loss, call.lse};
}

std::optional<Array> cross_entropy_rows_backward(const Array& logits, const Array& labels, const Array& lse,
                                                 const Array& grad, double label_smoothing) {
  constexpr const char* op = "cross_entropy_rows_backward";
  check_operands(op, logits, labels, label_smoothing);
  const int64_t n = logits.shape(0);
  if (!lse.defined() || lse.dtype() != float32 || lse.size() != n)
    throw ShapeError(std::string(op) + ": lse must be the forward's float32 array of one value per row (" +
                     std::to_string(n) + ")");
  if (!grad.defined() || grad.size() != n)
    throw ShapeError(std::string(op) + ": grad must hold one value per row (" + std::to_string(n) + "), got shape " +
                     (grad.defined() ? shape_str(grad.shape()) : std::string("undefined")));
  if (lse.device() != logits.device() || grad.device() != logits.device())
    throw DeviceError(std::string(op) + ": logits, lse and grad must be on one device; move them to " +
                      logits.device().str());
  detail::reject_grad({&logits, &grad}, op, "use nn::cross_entropy, which records the gradient");
  if (!engine_may_run(logits)) return std::nullopt;
  const Array lab = engine_labels(labels);
  // grad keeps its stride (a mean's gradient is one value broadcast over the rows); lse is read per row.
  const Array g = grad.reshape({n}).astype(float32);
  const Array l = lse.reshape({n}).contiguous();
  detail::CrossEntropyCall call;
  call.kind = detail::CrossEntropyKind::Backward;
  call.logits = &logits;
  call.labels = &lab;
  call.grad = &g;
  call.lse = l;
  call.ls = label_smoothing;
  call.dx = detail::make_array(logits.shape(), logits.dtype(), logits.device());
  if (!detail::backend_for(logits.device()).cross_entropy(call)) return std::nullopt;
  return call.dx;
}

}  // namespace kiln
