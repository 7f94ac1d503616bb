// The value-level functions of kiln/numpy_extra.hpp: unique, quantile/percentile/median, histogram, bincount,
// searchsorted. Composed of sort/argsort (stable, NaN last), take/take_along_axis, boolean-mask indexing,
// cumsum and scatter_add, so they run on every backend; quantile differentiates through take_along_axis.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "kiln/error.hpp"
#include "kiln/indexing.hpp"
#include "kiln/numpy_extra.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

void require_defined(const Array& a, const char* op, const char* what) {
  if (!a.defined()) throw ValueError(std::string(op) + ": " + what + " is undefined; create it first");
}

/// Quantiles of `a` at each q (already in [0, 1]) over `axis`; result (q.size(), kept axes...) or, for one
/// scalar q, the kept axes alone.
Array quantiles(const Array& a, const std::vector<double>& qs, const Axes& axis, bool keepdims, bool scalar_q,
                const char* op) {
  require_defined(a, op, "the array");
  std::vector<bool> reduced(static_cast<size_t>(a.ndim()), axis.all());
  if (!axis.all()) {
    for (int64_t ax : axis.list()) {
      const int64_t d = normalize_axis(ax, a.ndim(), op);
      if (reduced[static_cast<size_t>(d)])
        throw ShapeError(std::string(op) + ": axis " + std::to_string(ax) + " is listed twice for shape " +
                         shape_str(a.shape()) + "; list each axis once");
      reduced[static_cast<size_t>(d)] = true;
    }
  }
  // The reduced axes moved last and merged into one of m elements.
  Shape perm, kept, keep_shape;
  int64_t m = 1;
  for (int64_t d = 0; d < a.ndim(); ++d)
    if (!reduced[static_cast<size_t>(d)]) {
      perm.push_back(d);
      kept.push_back(a.shape()[d]);
    }
  for (int64_t d = 0; d < a.ndim(); ++d)
    if (reduced[static_cast<size_t>(d)]) {
      perm.push_back(d);
      m *= a.shape()[d];
    }
  for (int64_t d = 0; d < a.ndim(); ++d) keep_shape.push_back(reduced[static_cast<size_t>(d)] ? 1 : a.shape()[d]);
  if (m == 0)
    throw ValueError(std::string(op) + ": the reduced axes of shape " + shape_str(a.shape()) +
                     " hold no elements; a quantile needs at least one");
  Shape merged = kept;
  merged.push_back(m);
  if (is_complex(a.dtype())) detail::throw_no_complex(a.dtype());  // quantiles need an order
  const DType ftype = is_floating(a.dtype()) ? a.dtype() : DType::Float64;
  const Array x = reshape(permute(a, perm), merged).astype(ftype);
  // take_along_axis carries the gradient back to the chosen elements; sort alone is cheaper without one.
  const Array sorted = x.requires_grad() ? take_along_axis(x, argsort(x, -1), -1) : sort(x, -1);
  const Array has_nan = isnan(x).any(-1, true);
  std::vector<Array> results;
  for (double q : qs) {
    const double position = q * static_cast<double>(m - 1);
    const int64_t lo = std::min<int64_t>(static_cast<int64_t>(std::floor(position)), m - 1);
    const int64_t hi = std::min<int64_t>(lo + 1, m - 1);
    const double t = position - static_cast<double>(lo);
    const Array below = sorted.slice(-1, lo, lo + 1), above = sorted.slice(-1, hi, hi + 1);
    // NumPy's _lerp: from the nearer end, so t = 0 and t = 1 give the elements exactly.
    const Array value = t >= 0.5 ? above - (above - below) * (1.0 - t) : below + (above - below) * t;
    results.push_back(where(has_nan, std::numeric_limits<double>::quiet_NaN(), value));
  }
  Array out = moveaxis(concatenate(results, -1), -1, 0);  // (q, kept...)
  Shape shape;
  if (!scalar_q) shape.push_back(static_cast<int64_t>(qs.size()));
  for (int64_t e : keepdims ? keep_shape : kept) shape.push_back(e);
  return reshape(out, shape);
}

std::vector<double> checked_q(const std::vector<double>& q, double scale, const char* op) {
  std::vector<double> out;
  for (double v : q) {
    if (!(v >= 0.0 && v <= scale))
      throw ValueError(std::string(op) + ": q = " + std::to_string(v) + " is outside [0, " +
                       (scale == 1.0 ? std::string("1") : std::string("100")) + "]; pass q in that range");
    out.push_back(v / scale);
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------- unique
UniqueResult unique(const Array& a, UniqueOptions options) {
  require_defined(a, "unique", "the array");
  const Array flat = ravel(a);
  const int64_t n = flat.size();
  UniqueResult r;
  if (n == 0) {
    r.values = flat.copy();
    if (options.return_index) r.indices = zeros({0}, int64, a.device());
    if (options.return_inverse) r.inverse = zeros(a.shape(), int64, a.device());
    if (options.return_counts) r.counts = zeros({0}, int64, a.device());
    return r;
  }
  const bool need_order = options.return_index || options.return_inverse;
  const Array order = need_order ? argsort(flat, 0) : Array();
  const Array sorted = need_order ? take(flat, order) : sort(flat, 0);
  // A run starts where a value differs from the one before it; NaNs (sorted last) make one run.
  const Array next = sorted.slice(0, 1, std::nullopt), previous = sorted.slice(0, 0, n - 1);
  Array differs = not_equal(next, previous);
  if (is_floating(a.dtype())) differs = differs & !(isnan(next) & isnan(previous));
  const Array first = concatenate({ones({1}, DType::Bool, a.device()), differs});
  r.values = sorted.index({first});
  if (options.return_index) r.indices = order.index({first});
  if (options.return_inverse) {
    const Array rank = cumsum(first) - 1;  // index into values of each sorted element
    Array inverse = empty({n}, int64, a.device());
    inverse.index_put({order}, rank);
    r.inverse = inverse.reshape(a.shape());
  }
  if (options.return_counts) {
    const Array starts = arange(n, int64, a.device()).index({first});
    const int64_t u = starts.size();
    const Array ends = concatenate({starts.slice(0, 1, u), full({1}, n, int64, a.device())});
    r.counts = ends - starts;
  }
  return r;
}

Array unique_values(const Array& a) { return unique(a).values; }

// ---------------------------------------------------------------- quantiles
Array quantile(const Array& a, double q, Axes axis, bool keepdims) {
  return quantiles(a, checked_q({q}, 1.0, "quantile"), axis, keepdims, true, "quantile");
}
Array quantile(const Array& a, const std::vector<double>& q, Axes axis, bool keepdims) {
  return quantiles(a, checked_q(q, 1.0, "quantile"), axis, keepdims, false, "quantile");
}
Array percentile(const Array& a, double q, Axes axis, bool keepdims) {
  return quantiles(a, checked_q({q}, 100.0, "percentile"), axis, keepdims, true, "percentile");
}
Array percentile(const Array& a, const std::vector<double>& q, Axes axis, bool keepdims) {
  return quantiles(a, checked_q(q, 100.0, "percentile"), axis, keepdims, false, "percentile");
}
Array median(const Array& a, Axes axis, bool keepdims) {
  return quantiles(a, {0.5}, axis, keepdims, true, "median");
}

// ---------------------------------------------------------------- counting
Array bincount(const Array& x, const std::optional<Array>& weights, int64_t minlength) {
  require_defined(x, "bincount", "x");
  if (!is_integral(x.dtype()) && x.dtype() != DType::Bool)
    throw DTypeError("bincount: x has dtype " + std::string(dtype_name(x.dtype())) +
                     "; pass non-negative integers (astype(int64))");
  if (x.ndim() != 1)
    throw ShapeError("bincount: x must be 1-d, got shape " + shape_str(x.shape()) + "; ravel it first");
  if (minlength < 0)
    throw ValueError("bincount: minlength is " + std::to_string(minlength) + "; it must be >= 0");
  if (weights) {
    require_defined(*weights, "bincount", "weights");
    if (!(weights->shape() == x.shape()))
      throw ShapeError("bincount: weights of shape " + shape_str(weights->shape()) + " do not match x of shape " +
                       shape_str(x.shape()) + "; pass one weight per element");
  }
  const Array xi = x.astype(int64);
  int64_t length = minlength;
  if (xi.size() > 0) {
    const int64_t lowest = xi.min().item<int64_t>();
    if (lowest < 0)
      throw ValueError("bincount: x holds the negative value " + std::to_string(lowest) +
                       "; every value must be >= 0");
    length = std::max(length, xi.max().item<int64_t>() + 1);
  }
  const Array bins = zeros({length}, float64, x.device());
  if (weights) return scatter_add(bins, 0, xi, weights->astype(float64));
  // Counts summed in float64 are exact up to 2^53 elements.
  return scatter_add(bins, 0, xi, ones(xi.shape(), float64, x.device())).astype(int64);
}

Array searchsorted(const Array& a, const Array& v, std::string_view side) {
  require_defined(a, "searchsorted", "a");
  require_defined(v, "searchsorted", "v");
  if (a.ndim() != 1)
    throw ShapeError("searchsorted: a must be 1-d (sorted), got shape " + shape_str(a.shape()) +
                     "; ravel or index it first");
  if (side != "left" && side != "right")
    throw ValueError("searchsorted: side is '" + std::string(side) + "'; use \"left\" or \"right\"");
  const Array flat = ravel(v);
  const int64_t n = a.size(), m = flat.size();
  if (m == 0) return zeros(v.shape(), int64, v.device());
  // Merge by one stable sort of the concatenation: a value of v listed before a's elements lands before the
  // equal ones (left), listed after them lands after them (right). Its insertion index is the number of a's
  // elements before it in the merged order: its position less the values of v before it.
  const bool left = side == "left";
  const Array keys = left ? concatenate({flat, a}) : concatenate({a, flat});
  const Array order = argsort(keys, 0);
  const Array is_v = left ? order < m : order >= n;
  const Array a_before = arange(n + m, int64, a.device()) - (cumsum(is_v) - 1);
  const Array where_v = argsort(order, 0).slice(0, left ? 0 : n, left ? m : n + m);
  return take(a_before, where_v).reshape(v.shape());
}

HistogramResult histogram(const Array& a, const Array& bin_edges, const std::optional<Array>& weights) {
  require_defined(a, "histogram", "the array");
  require_defined(bin_edges, "histogram", "bin_edges");
  if (bin_edges.ndim() != 1 || bin_edges.size() < 2)
    throw ShapeError("histogram: bin_edges must be 1-d with at least 2 edges, got shape " +
                     shape_str(bin_edges.shape()));
  const std::vector<double> edges = bin_edges.to_vector<double>();
  for (size_t i = 1; i < edges.size(); ++i)
    if (!(edges[i] >= edges[i - 1]))
      throw ValueError("histogram: bin_edges must increase monotonically; edge " + std::to_string(i) + " (" +
                       std::to_string(edges[i]) + ") is below the one before it");
  if (weights && !(weights->shape() == a.shape()))
    throw ShapeError("histogram: weights of shape " + shape_str(weights->shape()) + " do not match the array of shape " +
                     shape_str(a.shape()) + "; pass one weight per element");
  const int64_t bins = bin_edges.size() - 1;
  const Array x = ravel(a);
  const Array inside = (x >= bin_edges.index({0})) & (x <= bin_edges.index({bins}));
  // Bin i holds [edge i, edge i+1); the last bin also its right edge.
  const Array index = minimum(searchsorted(bin_edges, x, "right") - 1, bins - 1);
  const Array slot = where(inside, index, 0);
  const Array weight = weights ? where(inside, ravel(*weights).astype(float64), 0.0) : where(inside, 1.0, 0.0);
  HistogramResult r;
  r.bin_edges = bin_edges;
  const Array sums = bincount(slot, weight, bins).slice(0, 0, bins);
  r.hist = weights ? sums.astype(weights->dtype()) : sums.astype(int64);
  return r;
}

HistogramResult histogram(const Array& a, int64_t bins, std::optional<std::pair<double, double>> range,
                          const std::optional<Array>& weights) {
  require_defined(a, "histogram", "the array");
  if (bins < 1) throw ValueError("histogram: bins is " + std::to_string(bins) + "; use at least 1 bin");
  double lo = 0.0, hi = 1.0;
  if (range) {
    std::tie(lo, hi) = *range;
    if (!(lo <= hi) || !std::isfinite(lo) || !std::isfinite(hi))
      throw ValueError("histogram: range (" + std::to_string(lo) + ", " + std::to_string(hi) +
                       ") must be finite with first <= second");
  } else if (a.size() > 0) {
    lo = a.min().item<double>();
    hi = a.max().item<double>();
    if (!std::isfinite(lo) || !std::isfinite(hi))
      throw ValueError("histogram: the data's range (" + std::to_string(lo) + ", " + std::to_string(hi) +
                       ") is not finite; pass a range");
  }
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  // NumPy's linspace: start + i * step, the last edge exactly `hi`; computed in float64, then narrowed.
  std::vector<double> edges(static_cast<size_t>(bins) + 1);
  const double step = (hi - lo) / static_cast<double>(bins);
  for (int64_t i = 0; i <= bins; ++i) edges[static_cast<size_t>(i)] = lo + static_cast<double>(i) * step;
  edges.back() = hi;
  if (is_complex(a.dtype())) detail::throw_no_complex(a.dtype());  // bins need an order
  const DType edge_type = is_floating(a.dtype()) ? a.dtype() : DType::Float64;
  return histogram(a, from_data(edges, {}, a.device()).astype(edge_type), weights);
}

}  // namespace kiln
