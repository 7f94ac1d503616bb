// Cross-entropy primitives over (N, C) logits and integer labels, the engine under nn::cross_entropy on a GPU:
// each row's loss and log-sum-exp in one pass over the logits, and the logits' gradient in another (hand-written
// kernels that read the logits at memory bandwidth). Like kiln/flash_attention.hpp's primitives they record no
// gradient (nn::cross_entropy does): an input that requires grad while grad mode is on is refused. Where no engine
// runs a problem (the CPU, float64 logits, non-contiguous logits) they return nullopt, and the caller computes it
// otherwise (nn::cross_entropy: its fused graph, which is also the CPU's path).
#pragma once

#include <optional>

#include "kiln/array.hpp"

namespace kiln {

/// cross_entropy_rows_forward's results, float32 (N,): each row's loss and log-sum-exp (the backward's input).
struct CrossEntropyRows {
  Array loss, lse;
};

/// Per row of C-contiguous `logits` (N, C) (float32, or float16/bfloat16 computed in float32: the widened values,
/// exactly, without a float32 copy) with integer `labels` (N elements) and label smoothing ls in [0, 1]:
/// lse = log(sum(exp(x))) (max-shifted: an all -inf row gives -inf, a row holding +inf gives +inf) and
/// loss = lse - (1 - ls) * x[label] - ls * mean(x). Labels are not range-checked here (nn::cross_entropy checks
/// them on the device); one outside [0, C) gives a NaN loss. Throws ShapeError / DTypeError / DeviceError /
/// ValueError for operands that do not fit; nullopt when no engine runs it.
std::optional<CrossEntropyRows> cross_entropy_rows_forward(const Array& logits, const Array& labels,
                                                           double label_smoothing = 0.0);

/// The gradient of cross_entropy_rows_forward's loss with respect to `logits`, given the forward's `lse` and the
/// loss's gradient `grad` (N elements; any dtype, computed in float32): (exp(x - lse) - (1 - ls) * onehot(label) -
/// ls / C) * grad, in the logits' dtype and shape. Throws like the forward; nullopt when no engine runs it.
std::optional<Array> cross_entropy_rows_backward(const Array& logits, const Array& labels, const Array& lse,
                                                 const Array& grad, double label_smoothing = 0.0);

}  // namespace kiln
