// Reductions front-end: axis checks, NumPy 2 result dtypes, empty and zero-axis
// cases, then one backend reduce call (out in keepdims form). mean/var/std are
// composed from a float64 sum and elementwise ops; var is two-pass (mean first).
#include "core/autograd.hpp"
#include "core/derivatives.hpp"
#include "core/reduce.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace detail {

Shape reduction_axes(const Axes& axes, int64_t ndim, const char* op, const Shape* shape) {
  std::vector<bool> chosen(static_cast<size_t>(ndim), axes.all());
  if (!axes.all()) {
    for (int64_t axis : axes.list()) {
      if (axis < -ndim || axis >= ndim)
        throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) +
                         " is out of bounds for an array of ndim " + std::to_string(ndim) +
                         (shape ? " (shape " + shape_str(*shape) + ")" : std::string()) + "; use an axis in [" +
                         std::to_string(-ndim) + ", " + std::to_string(ndim) + ")");
      int64_t normal = axis < 0 ? axis + ndim : axis;
      if (chosen[static_cast<size_t>(normal)])
        throw ShapeError(std::string(op) + ": duplicate axis " + std::to_string(axis) + " (axis " +
                         std::to_string(normal) + " of an array of ndim " + std::to_string(ndim) +
                         ") in the axes list; list each axis once");
      chosen[static_cast<size_t>(normal)] = true;
    }
  }
  Shape result;
  for (int64_t d = 0; d < ndim; ++d)
    if (chosen[static_cast<size_t>(d)]) result.push_back(d);
  return result;
}

Reduction plan_reduction(const Shape& shape, const Axes& axes, const char* op) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  Reduction r;
  r.axes = reduction_axes(axes, nd, op, &shape);
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t extent = shape[static_cast<size_t>(d)];
    if (std::binary_search(r.axes.begin(), r.axes.end(), d)) {
      r.keep_shape.push_back(1);
      r.count *= extent;
    } else {
      r.keep_shape.push_back(extent);
      r.out_shape.push_back(extent);
    }
  }
  return r;
}

void plan_reduce_call(ReduceCall& call) {
  const char* op = reduce_op_name(call.op);
  check_rank(call.in->shape(), op);
  bool reduced[kMaxRank] = {};
  for (int64_t axis : call.axes) reduced[axis] = true;
  const Array* arrays[2] = {call.in, &call.out};
  ReductionOrder order;
  order.flip_reduced = order.sort_reduced = !is_index_reduction(call.op);
  plan_reduction_axes(call.plan, call.in->shape(), reduced, arrays, 2, 1, order, op);
}

DType sum_dtype(DType t) { return reduce_result_dtype(ReduceOp::Sum, t); }
DType mean_dtype(DType t) { return reduce_result_dtype(ReduceOp::Mean, t); }

Scalar reduce_empty_value(ReduceOp op) {
  switch (reduce_info(op).empty) {
    case ReduceEmpty::Zero: return Scalar(0);
    case ReduceEmpty::One: return Scalar(1);
    case ReduceEmpty::NaN: return Scalar(std::numeric_limits<double>::quiet_NaN());
    case ReduceEmpty::NegInf: return Scalar(-std::numeric_limits<double>::infinity());
    case ReduceEmpty::Throws: break;
  }
  throw ValueError(std::string(reduce_op_name(op)) + ": a reduction over zero elements has no identity");
}

void require_defined(const Array& a, const char* op) {
  if (!a.defined())
    throw ValueError(std::string(op) +
                     ": the array is undefined (default-constructed); create it with empty/zeros/...");
}

}  // namespace detail

namespace {

using detail::mean_dtype;
using detail::require_defined;
using detail::ReduceOp;
using detail::Reduction;
using detail::sum_dtype;


Reduction plan_reduction(const Array& a, const Axes& axes, const char* op) {
  require_defined(a, op);
  return detail::plan_reduction(a.shape(), axes, op);
}

/// A fresh array equal to `a` converted to `dtype` (a reduction over no axes still returns new storage).
Array fresh_copy(const Array& a, DType dtype) {
  Array converted = a.astype(dtype);
  return converted.shares_storage(a) ? converted.copy() : converted;
}

/// Throws DTypeError for a complex `a` unless `op` is sum or prod (mean is a sum), the reductions kiln
/// defines on complex numbers.
void check_complex_reduction(const Array& a, const char* op) {
  if (is_complex(a.dtype()))
    throw DTypeError(std::string(op) + ": dtype " + std::string(dtype_name(a.dtype())) +
                     " is not supported (sum, prod and mean take complex arrays); reduce real(a), imag(a) or abs(a)");
}

/// Runs one backend reduction into a new array of `out_dtype`, handling zero axes and empty reductions.
Array run_reduce(const Array& a, ReduceOp op, const Reduction& r, DType out_dtype, bool keepdims) {
  if (op != ReduceOp::Sum && op != ReduceOp::Prod) check_complex_reduction(a, detail::reduce_op_name(op));
  if (r.axes.empty()) return fresh_copy(a, out_dtype);
  Array out = detail::make_array(r.keep_shape, out_dtype, a.device());
  if (out.size() > 0) {
    if (r.count == 0) {
      // Only ops with an identity get here (the callers reject max/min/argmax/argmin).
      out.fill(detail::reduce_empty_value(op));
    } else {
      detail::ReduceCall call{op, &a, out, r.axes, {}};
      detail::plan_reduce_call(call);
      detail::backend_for(a.device()).reduce(call);
    }
  }
  return keepdims ? out : out.reshape(r.out_shape);
}

}  // namespace

Array detail::run_reduction(const Array& a, ReduceOp op, const Axes& axes, DType out_dtype, bool keepdims) {
  require_defined(a, reduce_op_name(op));
  return run_reduce(a, op, plan_reduction(a.shape(), axes, reduce_op_name(op)), out_dtype, keepdims);
}

namespace {

std::string axes_text(const Reduction& r) {
  std::string s = "(";
  for (size_t i = 0; i < r.axes.size(); ++i) s += (i ? ", " : "") + std::to_string(r.axes[i]);
  return s + (r.axes.size() == 1 ? ",)" : ")");
}

void reject_empty(const Array& a, const Reduction& r, const char* op) {
  if (r.count == 0 && !r.axes.empty())
    throw ValueError(std::string(op) + ": zero-size reduction over axes " + axes_text(r) + " of an array of shape " +
                     shape_str(a.shape()) + " has no identity; reduce over non-empty axes or check the size first");
}

Array min_max(const Array& a, const Axes& axes, bool keepdims, ReduceOp op) {
  const char* name = detail::reduce_op_name(op);
  Reduction r = plan_reduction(a, axes, name);
  reject_empty(a, r, name);
  return run_reduce(a, op, r, a.dtype(), keepdims);
}

Array arg_min_max(const Array& a, std::optional<int64_t> axis, bool keepdims, ReduceOp op) {
  const char* name = detail::reduce_op_name(op);
  Reduction r = plan_reduction(a, axis ? Axes(*axis) : Axes(), name);
  if (r.count == 0)
    throw ValueError(std::string(name) + ": attempt to get " + name + " of an empty sequence (shape " +
                     shape_str(a.shape()) + ", axis " + (axis ? std::to_string(*axis) : "None") +
                     "); the reduced axis must have at least one element");
  if (r.axes.empty()) {  // a 0-d array: its only element is at index 0
    Array zero = zeros(r.keep_shape, DType::Int64, a.device());
    return keepdims ? zero : zero.reshape(r.out_shape);
  }
  return run_reduce(a, op, r, DType::Int64, keepdims);
}

/// The float64 mean over r (keepdims form), for var/std.
Array mean_keepdims(const Array& a, const Reduction& r) {
  return divide(run_reduce(a, ReduceOp::Sum, r, DType::Float64, true), static_cast<double>(r.count));
}

/// Two-pass variance in float64: the mean first, then the mean squared deviation.
Array variance_float64(const Array& a, const Axes& axes, int64_t ddof, bool keepdims, const char* op) {
  check_complex_reduction(a, op);
  Reduction r = plan_reduction(a, axes, op);
  // Deviations in float32 for float16/bfloat16/float32 (exact enough, no float16 overflow), else float64.
  DType work = is_floating(a.dtype()) && a.dtype() != DType::Float64 ? DType::Float32 : DType::Float64;
  Array mu = mean_keepdims(a, r).astype(work);
  Array deviation = subtract(a, mu);
  multiply(deviation, deviation, deviation);  // squared in place: one temporary, as NumPy
  Array total = run_reduce(deviation, ReduceOp::Sum, r, DType::Float64, keepdims);
  // NumPy divides by max(n - ddof, 0): 0/0 gives nan, x/0 inf.
  return divide(total, static_cast<double>(std::max<int64_t>(r.count - ddof, 0)));
}

/// A kernel row with an identity (sum, prod, all, any): its result dtype from the table, one backend call.
Array identity_reduction(const Array& a, const Axes& axes, bool keepdims, ReduceOp op) {
  Reduction r = plan_reduction(a, axes, detail::reduce_op_name(op));
  return run_reduce(a, op, r, detail::reduce_result_dtype(op, a.dtype()), keepdims);
}

}  // namespace

/// Runs `compute` with a's reduction recorded for autograd (op over axes, ddof for var/std).
template <class F>
Array recorded(ReduceOp op, const Array& a, const Axes& axes, bool keepdims, int64_t ddof, F&& compute) {
  detail::GradRecorder record({&a});
  Array out = compute();
  if (record) detail::record_reduction_grad(op, a, axes, keepdims, ddof, out);
  return out;
}

Array sum(const Array& a, Axes axes, bool keepdims) {
  return recorded(ReduceOp::Sum, a, axes, keepdims, 0, [&] { return identity_reduction(a, axes, keepdims, ReduceOp::Sum); });
}
Array prod(const Array& a, Axes axes, bool keepdims) {
  return recorded(ReduceOp::Prod, a, axes, keepdims, 0,
                  [&] { return identity_reduction(a, axes, keepdims, ReduceOp::Prod); });
}

Array mean(const Array& a, Axes axes, bool keepdims) {
  return recorded(ReduceOp::Mean, a, axes, keepdims, 0, [&] {
    Reduction r = plan_reduction(a, axes, "mean");
    // Sum into float64 whatever the input (no float16 overflow, no float32 rounding), divide, then narrow;
    // complex inputs into complex128.
    Array total = run_reduce(a, ReduceOp::Sum, r, is_complex(a.dtype()) ? DType::Complex128 : DType::Float64,
                             keepdims);
    return divide(total, static_cast<double>(r.count)).astype(mean_dtype(a.dtype()));
  });
}

Array var(const Array& a, Axes axes, int64_t ddof, bool keepdims) {
  return recorded(ReduceOp::Var, a, axes, keepdims, ddof, [&] {
    return variance_float64(a, axes, ddof, keepdims, "var").astype(mean_dtype(a.dtype()));
  });
}

Array std(const Array& a, Axes axes, int64_t ddof, bool keepdims) {
  return recorded(ReduceOp::Std, a, axes, keepdims, ddof, [&] {
    return sqrt(variance_float64(a, axes, ddof, keepdims, "std")).astype(mean_dtype(a.dtype()));
  });
}

Array max(const Array& a, Axes axes, bool keepdims) {
  return recorded(ReduceOp::Max, a, axes, keepdims, 0, [&] { return min_max(a, axes, keepdims, ReduceOp::Max); });
}
Array min(const Array& a, Axes axes, bool keepdims) {
  return recorded(ReduceOp::Min, a, axes, keepdims, 0, [&] { return min_max(a, axes, keepdims, ReduceOp::Min); });
}

// Index and bool results carry no gradient (the input's graph is not followed).
Array argmax(const Array& a, std::optional<int64_t> axis, bool keepdims) {
  return arg_min_max(a.detach(), axis, keepdims, ReduceOp::ArgMax);
}
Array argmin(const Array& a, std::optional<int64_t> axis, bool keepdims) {
  return arg_min_max(a.detach(), axis, keepdims, ReduceOp::ArgMin);
}

Array all(const Array& a, Axes axes, bool keepdims) {
  return identity_reduction(a.detach(), axes, keepdims, ReduceOp::All);
}
Array any(const Array& a, Axes axes, bool keepdims) {
  return identity_reduction(a.detach(), axes, keepdims, ReduceOp::Any);
}

Array Array::sum(Axes axes, bool keepdims) const { return kiln::sum(*this, std::move(axes), keepdims); }
Array Array::mean(Axes axes, bool keepdims) const { return kiln::mean(*this, std::move(axes), keepdims); }
Array Array::max(Axes axes, bool keepdims) const { return kiln::max(*this, std::move(axes), keepdims); }
Array Array::min(Axes axes, bool keepdims) const { return kiln::min(*this, std::move(axes), keepdims); }
Array Array::prod(Axes axes, bool keepdims) const { return kiln::prod(*this, std::move(axes), keepdims); }
Array Array::var(Axes axes, int64_t ddof, bool keepdims) const {
  return kiln::var(*this, std::move(axes), ddof, keepdims);
}
Array Array::std(Axes axes, int64_t ddof, bool keepdims) const {
  return kiln::std(*this, std::move(axes), ddof, keepdims);
}
Array Array::argmax(std::optional<int64_t> axis, bool keepdims) const { return kiln::argmax(*this, axis, keepdims); }
Array Array::argmin(std::optional<int64_t> axis, bool keepdims) const { return kiln::argmin(*this, axis, keepdims); }
Array Array::all(Axes axes, bool keepdims) const { return kiln::all(*this, std::move(axes), keepdims); }
Array Array::any(Axes axes, bool keepdims) const { return kiln::any(*this, std::move(axes), keepdims); }

}  // namespace kiln
