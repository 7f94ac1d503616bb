// The backward of the table-driven ops (elementwise ops, reductions, scans: derivatives.cpp evaluates the
// derivative columns of ops_internal.def and reductions_internal.def), and the helpers and constants those
// columns name. Every helper is written with kiln's public ops, so a formula runs on any backend; backward
// evaluates them with grad mode off.
#pragma once

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <vector>

#include "core/op_table.hpp"
#include "kiln/complex.hpp"
#include "kiln/conv.hpp"
#include "kiln/ops.hpp"

namespace kiln::detail {
/// Records on `out` the backward of elementwise row `op` (its KILN_GRAD formula) over `operands`; throws for a
/// NotDifferentiable row with a floating result. Called by the elementwise front-end when its GradRecorder is on.
void record_elementwise_grad(OpCode op, std::initializer_list<const Operand*> operands, Array& out);
/// The same for reduction row `op` of `in` over `axes` (ddof for var/std).
void record_reduction_grad(ReduceOp op, const Array& in, const Axes& axes, bool keepdims, int64_t ddof, Array& out);
/// The same for scan row `op` (cumsum, cumprod) along `axis` (flattened when absent).
void record_scan_grad(ReduceOp op, const Array& in, std::optional<int64_t> axis, Array& out);
}  // namespace kiln::detail

namespace kiln::derivatives {

inline constexpr double kLn2 = 0.69314718055994530942;
inline constexpr double kLn10 = 2.30258509299404568402;
inline constexpr double k2OverSqrtPi = 1.12837916709551257390;
inline constexpr double kSqrt1Over2 = 0.70710678118654752440;
inline constexpr double k1OverSqrt2Pi = 0.39894228040143267794;
inline constexpr double kSqrt2OverPi = 0.79788456080286535588;

// The activations' derivatives, written once for Arrays and for the values fuse() traces (the *_backward
// functions below evaluate them fused).
/// d/dx of x * Phi(x): Phi(x) + x * phi(x).
template <class T>
auto gelu_grad(const T& a) {
  return (erf(a * kSqrt1Over2) + 1.0) * 0.5 + a * exp(square(a) * -0.5) * k1OverSqrt2Pi;
}

/// d/dx of x/2 * (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <class T>
auto gelu_tanh_grad(const T& a) {
  const auto t = tanh((a + a * square(a) * 0.044715) * kSqrt2OverPi);
  return (t + 1.0) * 0.5 + a * 0.5 * (1.0 - square(t)) * kSqrt2OverPi * (square(a) * (3 * 0.044715) + 1.0);
}

/// d/dx of x * sigmoid(x): s (1 + x (1 - s)).
template <class T>
auto silu_grad(const T& a) {
  const auto s = sigmoid(a);
  return s * (a * (1.0 - s) + 1.0);
}

// The backward of the activations, each as one fused function of the incoming gradient g and the op's input a
// (or output): one kernel on a GPU and one pass on the CPU instead of a dozen array-sized temporaries. float16
// and bfloat16 arguments are computed in float32 and rounded once (as PyTorch's backward kernels), so these
// equal the formulas below applied to the float32 values, cast back. With grad mode on and an argument
// requiring grad (double backward) fuse runs the same ops one by one, recorded.
/// g * gelu_grad(a).
Array gelu_backward(const Array& g, const Array& a);
/// g * gelu_tanh_grad(a).
Array gelu_tanh_backward(const Array& g, const Array& a);
/// g * silu_grad(a).
Array silu_backward(const Array& g, const Array& a);
/// g * (1 - out^2): tanh's, from its output.
Array tanh_backward(const Array& g, const Array& out);
/// g * out * (1 - out): sigmoid's, from its output.
Array sigmoid_backward(const Array& g, const Array& out);

// Complex arrays: a gradient is dL/dx + i dL/dy for z = x + iy (PyTorch's convention), so the gradient of a
// holomorphic f is g * conj(f'(z)), and of a product a * b is g * conj(b). Real arrays are their own conjugate.
/// conj(x) for a complex array; `x` itself for a real one (no kernel, no copy).
inline Array conj_if_complex(const Array& x) { return is_complex(x.dtype()) ? conj(x) : x; }

/// tanh's gradient from its output: g * conj(1 - out^2) (fused for real dtypes: tanh_backward).
inline Array tanh_backward_of(const Array& g, const Array& out) {
  return is_complex(out.dtype()) ? g * conj(1.0 - out * out) : tanh_backward(g, out);
}

/// abs's gradient: g * sign(a) for real a; g * a / |a| for complex a (0 at a = 0, as PyTorch's sgn).
inline Array abs_backward(const Array& g, const Array& a) {
  if (!is_complex(a.dtype())) return g * sign(a);
  const Array r = abs(a);
  return where(r == 0, 0.0, g * a / r);
}

/// power's gradient for the exponent: g * conj(out * log(a)), 0 where a is 0 and the exponent's real part is
/// not negative (the limit; log(0) would give NaN).
inline Array power_exponent_backward(const Array& g, const Array& a, const Array& b, const Array& out) {
  return where((a == 0) & (real(b) >= 0), 0.0, g * conj_if_complex(out) * conj_if_complex(log(a)));
}

/// `x` reversed along `axis` (a view).
inline Array flip(const Array& x, int64_t axis) { return x.slice(axis, std::nullopt, std::nullopt, -1); }

/// cumsum from the end: the gradient of cumsum along `axis`.
inline Array reverse_cumsum(const Array& g, int64_t axis) { return flip(cumsum(flip(g, axis), axis), axis); }

/// cumprod along the last axis `last`; complex arrays (which cumprod does not take) one slice at a time.
inline Array cumprod_last(const Array& x, int64_t last) {
  if (!is_complex(x.dtype())) return cumprod(x, last);
  std::vector<Array> parts{x.slice(last, 0, 1)};
  for (int64_t k = 1; k < x.shape(last); ++k) parts.push_back(parts.back() * x.slice(last, k, k + 1));
  return concatenate(parts, last);
}

/// The product of the other elements of each reduced group, without dividing (right with zeros): the reduced
/// axes are moved last and merged, and the exclusive products from the left and from the right multiplied.
inline Array prod_grad(const Array& a, const Array& /*out*/, const Array& g, const Shape& axes) {
  Shape order, kept;
  for (int64_t d = 0; d < a.ndim(); ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) {
      order.push_back(d);
      kept.push_back(a.shape(d));
    }
  int64_t n = 1;
  for (int64_t d : axes) {
    order.push_back(d);
    n *= a.shape(d);
  }
  if (n == 0 || a.size() == 0) return zeros_like(a);
  Shape rows = kept;
  rows.push_back(n);
  const Array x = a.permute(order).reshape(rows);
  Shape one = kept;
  one.push_back(1);
  const Array ones_column = ones(one, a.dtype(), a.device());
  const int64_t last = x.ndim() - 1;
  if (n == 1) return g * ones_like(a);
  const Array left = concatenate({ones_column, cumprod_last(x.slice(last, 0, n - 1), last)}, last);
  const Array right =
      flip(concatenate({ones_column, cumprod_last(flip(x, last).slice(last, 0, n - 1), last)}, last), last);
  Shape permuted;
  for (int64_t d : order) permuted.push_back(a.shape(d));
  Shape inverse = order;
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(order[i])] = static_cast<int64_t>(i);
  return g * conj_if_complex((left * right).reshape(permuted).permute(inverse));
}

/// max/min: the gradient split evenly between the elements equal to the result (as torch.amax).
inline Array tie_split(const Array& a, const Array& out, const Array& g, const Shape& axes) {
  const Array hit = equal(a, out);
  const Array count = sum(hit, axes, true).astype(g.dtype());
  return where(hit, g / count, 0.0);
}

}  // namespace kiln::derivatives
