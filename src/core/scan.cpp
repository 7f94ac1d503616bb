// logsumexp and the cumulative ops (cumsum, cumprod), composed from kiln's elementwise ops and
// reductions, so they run on every backend (on a GPU: generated NVRTC kernels like every other op).
// - logsumexp is max-shifted, in float64: m = max(x), log(sum(exp(x - m))) + m, with m replaced by 0
//   where it is not finite (all -inf gives -inf, +inf gives +inf, NaN propagates). It runs as one fused
//   function over the reduced axes moved last (kiln::fuse traces logsumexp as these parts): on a GPU one
//   generated kernel per row block (after a copy when the moved axes do not merge into one), on the CPU
//   the same ops one by one.
// - cumsum/cumprod are a Hillis-Steele scan along the axis: ceil(log2(n)) passes of
//   x[k:] = x[k:] (op) x[:-k] for k = 1, 2, 4, ..., each one elementwise kernel over the whole array
//   (the front-end copies the overlapping x[:-k] first). That is O(N log n) work instead of a single-pass
//   block scan, but parallel on every backend; a dedicated scan kernel is the next step where it matters.
//   Integer and bool inputs accumulate in int64 (wrapping, as NumPy), floats in float64, rounded once.
#include <algorithm>
#include <limits>
#include <vector>
#include <string>

#include "core/reduce.hpp"
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"

namespace kiln {

using detail::require_defined;

namespace {

/// Inclusive scan of `a` along `axis` (flattened when absent) with `combine` (add or multiply).
Array scan(const Array& a, std::optional<int64_t> axis, const char* op,
           Array (*combine)(const Operand&, const Operand&, const Array&)) {
  require_defined(a, op);
  Array x = axis ? a : ravel(a);
  const int64_t ndim = x.ndim();
  const int64_t ax = axis ? *axis : 0;
  if (ax < -ndim || ax >= ndim)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(ax) + " is out of bounds for an array of shape " +
                     shape_str(a.shape()) + "; use an axis in [" + std::to_string(-ndim) + ", " + std::to_string(ndim) +
                     ") or none to scan the flattened array");
  const int64_t normal = ax < 0 ? ax + ndim : ax;
  const bool floating = is_floating(a.dtype());
  const DType work = floating ? DType::Float64 : DType::Int64;
  Array acc = x.astype(work);
  if (acc.shares_storage(a)) acc = acc.copy();
  const int64_t n = acc.shape()[static_cast<size_t>(normal)];
  for (int64_t k = 1; k < n; k *= 2) {
    Array high = acc.slice(normal, k, std::nullopt);
    combine(high, acc.slice(normal, 0, n - k), high);
  }
  return acc.astype(floating ? a.dtype() : DType::Int64);
}

}  // namespace

Array cumsum(const Array& a, std::optional<int64_t> axis) { return scan(a, axis, "cumsum", add); }

Array cumprod(const Array& a, std::optional<int64_t> axis) { return scan(a, axis, "cumprod", multiply); }

Array logsumexp(const Array& a, Axes axes, bool keepdims) {
  require_defined(a, "logsumexp");
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
  return keepdims ? result : result.reshape(r.out_shape);
}

}  // namespace kiln
