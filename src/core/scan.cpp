// logsumexp and the cumulative ops (cumsum, cumprod), composed from kiln's elementwise ops and
// reductions, so they run on every backend (on a GPU: generated NVRTC kernels like every other op).
// - logsumexp is max-shifted, in float64: m = max(x), log(sum(exp(x - m))) + m, with m replaced by 0
//   where it is not finite (all -inf gives -inf, +inf gives +inf, NaN propagates). It runs as one fused
//   function over the reduced axes moved last (kiln::fuse traces logsumexp as these parts): on a GPU one
//   generated kernel per row block (after a copy when the moved axes do not merge into one), on the CPU
//   the same ops one by one.
// - cumsum/cumprod are one backend scan (Backend::scan) of the input viewed as (outer, n, inner): on the
//   CPU each line in order; on a GPU a thread per line or a block scan per line segment (src/cuda/scan.cpp).
//   Integer and bool inputs accumulate in int64 (wrapping, as NumPy), floats in float64, rounded once.
#include <algorithm>
#include <limits>
#include <vector>
#include <string>

#include "core/autograd.hpp"
#include "core/derivatives.hpp"
#include "core/backend.hpp"
#include "core/reduce.hpp"
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"

namespace kiln {

using detail::require_defined;

namespace {

/// Inclusive scan (cumsum or cumprod) of `a` along `axis` (flattened when absent): one backend scan over the
/// input viewed as (outer, n, inner). A strided input is copied to C order first; when the lines across the
/// axis are few (inner > 1 but outer * inner small) the axis is moved last, so each line is contiguous and
/// a GPU can split it over many blocks.
Array scan(const Array& a, std::optional<int64_t> axis, detail::ReduceOp op) {
  const char* name = detail::reduce_op_name(op);
  require_defined(a, name);
  Array x = axis ? a : ravel(a);
  const int64_t ndim = x.ndim();
  const int64_t ax = axis ? *axis : 0;
  if (ax < -ndim || ax >= ndim)
    throw ShapeError(std::string(name) + ": axis " + std::to_string(ax) + " is out of bounds for an array of shape " +
                     shape_str(a.shape()) + "; use an axis in [" + std::to_string(-ndim) + ", " +
                     std::to_string(ndim) + ") or none to scan the flattened array");
  const int64_t normal = ax < 0 ? ax + ndim : ax;
  const DType out_dtype = detail::reduce_result_dtype(op, a.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < ndim; ++d) {
    if (d < normal) outer *= x.shape()[static_cast<size_t>(d)];
    if (d > normal) inner *= x.shape()[static_cast<size_t>(d)];
  }
  const int64_t n = x.shape()[static_cast<size_t>(normal)];
  Array result = detail::make_array(x.shape(), out_dtype, x.device());
  if (result.size() == 0) return result;
  constexpr int64_t kFewLines = 1 << 16;
  if (inner > 1 && outer * inner < kFewLines && n > 1) {
    // Axis last: scan (outer * inner, n) contiguous lines, then move it back.
    Array moved = moveaxis(x, normal, -1);
    Array scanned = scan(moved, int64_t{-1}, op);
    return moveaxis(scanned, -1, normal).copy();
  }
  const Array in = (x.is_contiguous() ? x : x.copy()).reshape({outer, n, inner});
  detail::backend_for(x.device()).scan(detail::ScanCall{op, &in, result.reshape({outer, n, inner})});
  return result;
}

}  // namespace

Array cumsum(const Array& a, std::optional<int64_t> axis) {
  detail::GradRecorder record({&a});
  Array out = scan(a, axis, detail::ReduceOp::CumSum);
  if (record) detail::record_scan_grad(detail::ReduceOp::CumSum, a, axis, out);
  return out;
}

Array cumprod(const Array& a, std::optional<int64_t> axis) {
  detail::GradRecorder record({&a});
  Array out = scan(a, axis, detail::ReduceOp::CumProd);
  if (record) detail::record_scan_grad(detail::ReduceOp::CumProd, a, axis, out);
  return out;
}

Array logsumexp(const Array& a, Axes axes, bool keepdims) {
  require_defined(a, "logsumexp");
  detail::GradRecorder record({&a});
  const detail::Reduction r = detail::plan_reduction(a.shape(), axes, "logsumexp");
  const DType out = float_result_type(a.dtype());
  Array result;
  if (r.count == 0) {  // log(0): the identity of logaddexp
    result = full(r.keep_shape, -std::numeric_limits<double>::infinity(), out, a.device());
  } else {
    // The kept axes in order, then the reduced ones merged into one last axis.
    Shape order, rows;
    for (int64_t d = 0; d < a.ndim(); ++d)
      if (!std::binary_search(r.axes.begin(), r.axes.end(), d)) {
        order.push_back(d);
        rows.push_back(a.shape()[static_cast<size_t>(d)]);
      }
    for (int64_t d : r.axes) order.push_back(d);
    rows.push_back(r.count);
    static const auto kRows = fuse([](auto x) { return logsumexp(x, -1, true); }, "logsumexp");
    result = kRows(a.permute(order).reshape(rows)).reshape(r.keep_shape);
  }
  if (!keepdims) result = result.reshape(r.out_shape);
  if (record) detail::record_reduction_grad(detail::ReduceOp::LogSumExp, a, axes, keepdims, 0, result);
  return result;
}

}  // namespace kiln
