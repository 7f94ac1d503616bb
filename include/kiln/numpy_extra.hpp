// The array functions a NumPy user reaches for beyond the core ops: triangles and diagonals, outer and tensor
// products, padding, tiling and repeating, rolling and flipping, unique values, quantiles, histograms, sorted
// search, grids, and einsum. NumPy's semantics and argument names.
// Every function is composed of kiln's ops (views, where, take, sort, cumsum, matmul, ...), so it runs on every
// backend and, where NumPy/PyTorch define a gradient, is differentiable through its parts. Functions whose
// result size depends on the values (unique, bincount, histogram, repeat with an array of repeats)
// synchronise to read it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/scalar.hpp"

namespace kiln {

// ---------------------------------------------------------------- triangles and diagonals
/// Lower triangle of the last two axes: elements above diagonal k set to zero (np.tril). ShapeError for < 2-d.
Array tril(const Array& a, int64_t k = 0);
/// Upper triangle of the last two axes: elements below diagonal k set to zero (np.triu). ShapeError for < 2-d.
Array triu(const Array& a, int64_t k = 0);
/// np.diag: a 1-d `v` gives the 2-d array with v on diagonal k; a 2-d `v` gives its diagonal k (a view).
/// ShapeError for other ranks.
Array diag(const Array& v, int64_t k = 0);
/// np.diagonal: a view of the diagonal `offset` of the (axis1, axis2) planes, that axis last.
/// ShapeError for < 2-d, a bad axis, or axis1 == axis2.
Array diagonal(const Array& a, int64_t offset = 0, int64_t axis1 = 0, int64_t axis2 = 1);
/// np.trace: sum along diagonal(a, offset, axis1, axis2) (integers and bool sum to int64, as sum does).
Array trace(const Array& a, int64_t offset = 0, int64_t axis1 = 0, int64_t axis2 = 1);

// ---------------------------------------------------------------- products
/// np.outer: out[i, j] = ravel(a)[i] * ravel(b)[j].
Array outer(const Array& a, const Array& b);
/// np.tensordot(a, b, axes=n): sums products over the last n axes of a and the first n of b (one matmul).
/// ShapeError when n exceeds a rank or the summed extents differ.
Array tensordot(const Array& a, const Array& b, int64_t axes = 2);
/// np.tensordot(a, b, axes=(axes_a, axes_b)): sums over axes_a[i] of a paired with axes_b[i] of b.
/// ShapeError for lists of different lengths, bad or repeated axes, or paired extents that differ.
Array tensordot(const Array& a, const Array& b, const std::vector<int64_t>& axes_a,
                const std::vector<int64_t>& axes_b);
/// np.einsum: "ij,jk->ik" (explicit output), "ij,jk" (implicit: the labels seen once, in ASCII order), "..."
/// for broadcast axes, a label repeated in one operand for its diagonal ("ii->i", "ii" = trace). Pairs of
/// operands are contracted with one matmul each; with 3 or more operands the next pair is the one whose
/// result is smallest (opt_einsum's 'greedy' order). Differentiable. ValueError for bad subscripts, ShapeError
/// when an operand's rank or a label's extents do not match.
Array einsum(std::string_view subscripts, const std::vector<Array>& operands);

// ---------------------------------------------------------------- padding, tiling, moving
/// np.pad's pad_width: one width for every side, one (before, after) pair for every axis, or a pair per axis.
class PadWidth {
 public:
  PadWidth(int64_t width) : widths_{{width, width}} {}                     // NOLINT
  PadWidth(int64_t before, int64_t after) : widths_{{before, after}} {}  // NOLINT
  PadWidth(std::vector<std::pair<int64_t, int64_t>> widths) : widths_(std::move(widths)) {}  // NOLINT
  PadWidth(std::initializer_list<std::pair<int64_t, int64_t>> widths) : widths_(widths) {}  // NOLINT
  const std::vector<std::pair<int64_t, int64_t>>& widths() const { return widths_; }

 private:
  std::vector<std::pair<int64_t, int64_t>> widths_;
};
/// np.pad with mode "constant" (constant_value), "edge", "reflect" (mirror without the edge), "symmetric"
/// (mirror with it) or "wrap"; widths larger than the axis repeat the pattern as NumPy does. ValueError for
/// negative widths, an unknown mode, or reflect/symmetric/edge/wrap padding of an empty axis; ShapeError when
/// the number of pairs is neither 1 nor a.ndim().
Array pad(const Array& a, const PadWidth& pad_width, std::string_view mode = "constant",
          const Scalar& constant_value = 0);
/// np.tile: `a` repeated reps[i] times along axis i (reps and a's shape left-padded with ones to one rank).
Array tile(const Array& a, const Shape& reps);
/// np.repeat with one count: each element `repeats` times along `axis` (of the flattened array when absent).
Array repeat(const Array& a, int64_t repeats, std::optional<int64_t> axis = {});
/// np.repeat with a count per element (an integer array of the axis' length, or of one element). Syncs
/// (reads the counts). ValueError for negative counts, ShapeError for a length mismatch.
Array repeat(const Array& a, const Array& repeats, std::optional<int64_t> axis = {});
/// np.roll: elements shifted by `shift` along `axis` (of the flattened array when absent), wrapping around.
Array roll(const Array& a, int64_t shift, std::optional<int64_t> axis = {});
/// np.roll with several (shift, axis) pairs; a repeated axis adds its shifts. ShapeError for lists of
/// different lengths.
Array roll(const Array& a, const std::vector<int64_t>& shifts, const std::vector<int64_t>& axes);
/// np.flip: a view with the order of the elements reversed along `axes` (all of them by default).
Array flip(const Array& a, Axes axes = {});

// ---------------------------------------------------------------- sets, order statistics, counting
struct UniqueOptions {
  bool return_index = false;    ///< indices of the first occurrences in the flattened input
  bool return_inverse = false;  ///< indices into `values` that rebuild the input (the input's shape)
  bool return_counts = false;   ///< how often each value occurs
};
struct UniqueResult {
  Array values;   ///< the sorted unique values (1-d)
  Array indices;  ///< int64; defined when requested
  Array inverse;  ///< int64; defined when requested
  Array counts;   ///< int64; defined when requested
};
/// np.unique (axis=None) with NumPy 2's defaults: NaNs collapse into one value, sorted last. Syncs once (the
/// number of unique values).
UniqueResult unique(const Array& a, UniqueOptions options = {});
/// np.unique(a) without the optional results.
Array unique_values(const Array& a);

/// np.quantile with NumPy's default 'linear' method: for each q in [0, 1], the value at fractional position
/// q * (n - 1) of the sorted elements along `axis` (all axes by default), interpolated between its
/// neighbours. Float dtypes are kept, integers and bool give float64; NaN in a slice gives NaN. Differentiable
/// (the gradient goes to the two neighbours). ValueError for q outside [0, 1] or an empty slice.
Array quantile(const Array& a, double q, Axes axis = {}, bool keepdims = false);
/// np.quantile with several q: the result has a leading axis of q.size().
Array quantile(const Array& a, const std::vector<double>& q, Axes axis = {}, bool keepdims = false);
/// np.percentile: quantile at q / 100 (ValueError outside [0, 100]).
Array percentile(const Array& a, double q, Axes axis = {}, bool keepdims = false);
Array percentile(const Array& a, const std::vector<double>& q, Axes axis = {}, bool keepdims = false);
/// np.median: quantile at 0.5.
Array median(const Array& a, Axes axis = {}, bool keepdims = false);

/// np.histogram's two results.
struct HistogramResult {
  Array hist;       ///< counts per bin (int64), or summed weights (the weights' dtype) when weights are given
  Array bin_edges;  ///< bins + 1 edges (a's float dtype, float64 for integers)
};
/// np.histogram with `bins` equal bins over `range` (the data's min and max when absent: syncs; widened by
/// 0.5 each way when they are equal). Bins are half-open but the last, which includes its right edge; values
/// outside the range are not counted. Syncs. ValueError for bins < 1 or range.first > range.second.
HistogramResult histogram(const Array& a, int64_t bins = 10, std::optional<std::pair<double, double>> range = {},
                          const std::optional<Array>& weights = {});
/// np.histogram with explicit, monotonically increasing bin edges (1-d, at least 2).
HistogramResult histogram(const Array& a, const Array& bin_edges, const std::optional<Array>& weights = {});
/// np.bincount: how often each value 0..max(x) occurs in the 1-d non-negative integer array `x` (int64), or
/// the sum of `weights` (float64) at each value; at least `minlength` bins. Syncs (reads the max). ValueError
/// for negative values, DTypeError for a non-integer x, ShapeError when weights do not match x.
Array bincount(const Array& x, const std::optional<Array>& weights = {}, int64_t minlength = 0);
/// np.searchsorted: for each element of v, the index (int64) where it would be inserted into the sorted 1-d
/// array `a` to keep it sorted; side "left" puts it before equal elements, "right" after them. NaN sorts last.
/// ShapeError when `a` is not 1-d, ValueError for another side.
Array searchsorted(const Array& a, const Array& v, std::string_view side = "left");
/// np.meshgrid: coordinate arrays from 1-d vectors (flattened when not), indexing "xy" (Cartesian: the first
/// two output axes swapped) or "ij" (matrix). Each result is a new array. ValueError for another indexing.
std::vector<Array> meshgrid(const std::vector<Array>& xi, std::string_view indexing = "xy");

}  // namespace kiln
