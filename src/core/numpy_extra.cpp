// The shape-level functions of kiln/numpy_extra.hpp: triangles, diagonals, outer/tensordot, pad, tile, repeat,
// roll, flip, meshgrid. Each is composed of views (diagonal, flip: as_strided / negative-step slices), where,
// take, concatenate, broadcast_to and matmul, so it runs on every backend and differentiates through its parts.
#include <algorithm>
#include <numeric>
#include <string>

#include "kiln/error.hpp"
#include "kiln/indexing.hpp"
#include "kiln/numpy_extra.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

std::string list_str(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void require_rank_at_least(const Array& a, int64_t rank, const char* op) {
  if (!a.defined()) throw ValueError(std::string(op) + ": the array is undefined; create it first");
  if (a.ndim() < rank)
    throw ShapeError(std::string(op) + ": the array must have at least " + std::to_string(rank) +
                     " dimensions, got shape " + shape_str(a.shape()) + "; reshape it first");
}

/// True where column - row of the last two axes is <= k (lower) or >= k (upper): shape (n, m), bool.
Array triangle_mask(const Array& a, int64_t k, bool lower) {
  const int64_t n = a.shape()[a.ndim() - 2], m = a.shape()[a.ndim() - 1];
  const Array rows = arange(n, int64, a.device()).reshape({n, 1});
  const Array cols = arange(m, int64, a.device()).reshape({1, m});
  const Array offset = cols - rows;
  return lower ? offset <= k : offset >= k;
}

Array zero_like_scalar(const Array& a) { return zeros(Shape{}, a.dtype(), a.device()); }

/// Axes normalised and checked for repeats (ShapeError naming `op`).
std::vector<int64_t> normalized_axes(const std::vector<int64_t>& axes, int64_t ndim, const char* op) {
  std::vector<int64_t> out;
  for (int64_t axis : axes) {
    const int64_t ax = normalize_axis(axis, ndim, op);
    if (std::find(out.begin(), out.end(), ax) != out.end())
      throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " is repeated in " + list_str(axes) +
                       " for an array of " + std::to_string(ndim) + " dimensions; list each axis once");
    out.push_back(ax);
  }
  return out;
}

/// Index of the padded position i (may be < 0 or >= n) in an axis of n elements, as np.pad's mode.
int64_t pad_source(int64_t i, int64_t n, std::string_view mode) {
  auto mod = [](int64_t x, int64_t p) { return ((x % p) + p) % p; };
  if (mode == "edge") return std::clamp<int64_t>(i, 0, n - 1);
  if (mode == "wrap") return mod(i, n);
  if (mode == "reflect") {
    if (n == 1) return 0;
    const int64_t period = 2 * (n - 1), r = mod(i, period);
    return r < n ? r : period - r;
  }
  const int64_t period = 2 * n, r = mod(i, period);  // symmetric
  return r < n ? r : period - 1 - r;
}

/// Result that owns its memory: NumPy's tile/repeat/pad return new arrays even when nothing moves.
Array owned(const Array& result, const Array& input) { return result.shares_storage(input) ? result.copy() : result; }

}  // namespace

// ---------------------------------------------------------------- triangles and diagonals
Array tril(const Array& a, int64_t k) {
  require_rank_at_least(a, 2, "tril");
  return where(triangle_mask(a, k, true), a, zero_like_scalar(a));
}

Array triu(const Array& a, int64_t k) {
  require_rank_at_least(a, 2, "triu");
  return where(triangle_mask(a, k, false), a, zero_like_scalar(a));
}

Array diagonal(const Array& a, int64_t offset, int64_t axis1, int64_t axis2) {
  require_rank_at_least(a, 2, "diagonal");
  const int64_t ax1 = normalize_axis(axis1, a.ndim(), "diagonal"), ax2 = normalize_axis(axis2, a.ndim(), "diagonal");
  if (ax1 == ax2)
    throw ShapeError("diagonal: axis1 (" + std::to_string(axis1) + ") and axis2 (" + std::to_string(axis2) +
                     ") are the same axis of shape " + shape_str(a.shape()) + "; pass two different axes");
  const int64_t row0 = offset < 0 ? -offset : 0, col0 = offset > 0 ? offset : 0;
  const int64_t length = std::max<int64_t>(0, std::min(a.shape()[ax1] - row0, a.shape()[ax2] - col0));
  Shape shape, strides;
  for (int64_t d = 0; d < a.ndim(); ++d) {
    if (d == ax1 || d == ax2) continue;
    shape.push_back(a.shape()[d]);
    strides.push_back(a.strides()[d]);
  }
  shape.push_back(length);
  strides.push_back(a.strides()[ax1] + a.strides()[ax2]);
  const int64_t start = a.offset() + (length > 0 ? row0 * a.strides()[ax1] + col0 * a.strides()[ax2] : 0);
  return as_strided(a, shape, strides, start);
}

Array diag(const Array& v, int64_t k) {
  if (!v.defined()) throw ValueError("diag: the array is undefined; create it first");
  if (v.ndim() == 2) return diagonal(v, k);
  if (v.ndim() != 1)
    throw ShapeError("diag: the input must be 1-d (to build a matrix) or 2-d (to read a diagonal), got shape " +
                     shape_str(v.shape()) + "; use diagonal() for more dimensions");
  const int64_t shift = k < 0 ? -k : k, m = v.shape()[0] + shift;
  // out[i, j] = v[min(i, j)] on the diagonal j - i == k: v padded to m, spread along the other axis.
  const Array padded = shift == 0 ? v : concatenate({v, zeros({shift}, v.dtype(), v.device())});
  const Array values = k >= 0 ? padded.reshape({m, 1}) : padded.reshape({1, m});
  const Array rows = arange(m, int64, v.device()).reshape({m, 1});
  const Array cols = arange(m, int64, v.device()).reshape({1, m});
  const Array on_diagonal = (cols - rows) == k;
  return where(on_diagonal, values, zero_like_scalar(v));
}

Array trace(const Array& a, int64_t offset, int64_t axis1, int64_t axis2) {
  require_rank_at_least(a, 2, "trace");
  return sum(diagonal(a, offset, axis1, axis2), -1);
}

// ---------------------------------------------------------------- products
Array outer(const Array& a, const Array& b) {
  if (!a.defined() || !b.defined()) throw ValueError("outer: an operand is undefined; create it first");
  return multiply(reshape(a, {-1, 1}), reshape(b, {1, -1}));
}

Array tensordot(const Array& a, const Array& b, int64_t axes) {
  if (!a.defined() || !b.defined()) throw ValueError("tensordot: an operand is undefined; create it first");
  if (axes < 0 || axes > a.ndim() || axes > b.ndim())
    throw ShapeError("tensordot: axes=" + std::to_string(axes) + " needs that many axes in both operands, got shapes " +
                     shape_str(a.shape()) + " and " + shape_str(b.shape()) + "; pass at most the smaller rank");
  std::vector<int64_t> axes_a, axes_b;
  for (int64_t i = 0; i < axes; ++i) {
    axes_a.push_back(a.ndim() - axes + i);
    axes_b.push_back(i);
  }
  return tensordot(a, b, axes_a, axes_b);
}

Array tensordot(const Array& a, const Array& b, const std::vector<int64_t>& axes_a,
                const std::vector<int64_t>& axes_b) {
  if (!a.defined() || !b.defined()) throw ValueError("tensordot: an operand is undefined; create it first");
  if (axes_a.size() != axes_b.size())
    throw ShapeError("tensordot: axes " + list_str(axes_a) + " of a and " + list_str(axes_b) +
                     " of b differ in length; pair each summed axis of a with one of b");
  const std::vector<int64_t> ra = normalized_axes(axes_a, a.ndim(), "tensordot");
  const std::vector<int64_t> rb = normalized_axes(axes_b, b.ndim(), "tensordot");
  int64_t inner = 1;
  for (size_t i = 0; i < ra.size(); ++i) {
    if (a.shape()[ra[i]] != b.shape()[rb[i]])
      throw ShapeError("tensordot: axis " + std::to_string(axes_a[i]) + " of a (shape " + shape_str(a.shape()) +
                       ") has " + std::to_string(a.shape()[ra[i]]) + " elements but axis " +
                       std::to_string(axes_b[i]) + " of b (shape " + shape_str(b.shape()) + ") has " +
                       std::to_string(b.shape()[rb[i]]) + "; pair axes of equal extent");
    inner *= a.shape()[ra[i]];
  }
  Shape perm_a, perm_b, out_shape;
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < a.ndim(); ++d)
    if (std::find(ra.begin(), ra.end(), d) == ra.end()) {
      perm_a.push_back(d);
      out_shape.push_back(a.shape()[d]);
      rows *= a.shape()[d];
    }
  for (int64_t d : ra) perm_a.push_back(d);
  for (int64_t d : rb) perm_b.push_back(d);
  for (int64_t d = 0; d < b.ndim(); ++d)
    if (std::find(rb.begin(), rb.end(), d) == rb.end()) {
      perm_b.push_back(d);
      out_shape.push_back(b.shape()[d]);
      cols *= b.shape()[d];
    }
  const Array left = permute(a, perm_a).reshape({rows, inner});
  const Array right = permute(b, perm_b).reshape({inner, cols});
  return matmul(left, right).reshape(out_shape);
}

// ---------------------------------------------------------------- padding, tiling, moving
Array pad(const Array& a, const PadWidth& pad_width, std::string_view mode, const Scalar& constant_value) {
  if (!a.defined()) throw ValueError("pad: the array is undefined; create it first");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "symmetric" && mode != "wrap")
    throw ValueError("pad: unknown mode '" + std::string(mode) +
                     "'; use \"constant\", \"edge\", \"reflect\", \"symmetric\" or \"wrap\"");
  const auto& widths = pad_width.widths();
  if (widths.size() != 1 && static_cast<int64_t>(widths.size()) != a.ndim())
    throw ShapeError("pad: " + std::to_string(widths.size()) + " (before, after) pairs for an array of shape " +
                     shape_str(a.shape()) + "; give one pair for every axis, or one for all of them");
  Array out = a;
  for (int64_t axis = 0; axis < a.ndim(); ++axis) {
    const auto [before, after] = widths.size() == 1 ? widths[0] : widths[static_cast<size_t>(axis)];
    if (before < 0 || after < 0)
      throw ValueError("pad: negative width (" + std::to_string(before) + ", " + std::to_string(after) +
                       ") for axis " + std::to_string(axis) + "; widths must be >= 0");
    if (before == 0 && after == 0) continue;
    const int64_t n = out.shape()[axis];
    if (mode == "constant") {
      Shape side = out.shape();
      std::vector<Array> parts;
      side[axis] = before;
      if (before > 0) parts.push_back(full(side, constant_value, out.dtype(), out.device()));
      parts.push_back(out);
      side[axis] = after;
      if (after > 0) parts.push_back(full(side, constant_value, out.dtype(), out.device()));
      out = concatenate(parts, axis);
      continue;
    }
    if (n == 0)
      throw ValueError("pad: axis " + std::to_string(axis) + " of shape " + shape_str(a.shape()) +
                       " is empty, so mode \"" + std::string(mode) + "\" has nothing to repeat; use mode \"constant\"");
    std::vector<int64_t> source;
    for (int64_t i = -before; i < n + after; ++i) source.push_back(pad_source(i, n, mode));
    out = take(out, from_data(source, {}, out.device()), axis);
  }
  return owned(out, a);
}

Array tile(const Array& a, const Shape& reps) {
  if (!a.defined()) throw ValueError("tile: the array is undefined; create it first");
  for (int64_t r : reps)
    if (r < 0)
      throw ValueError("tile: negative repetition in reps " + shape_str(reps) + "; repetitions must be >= 0");
  const size_t rank = std::max(static_cast<size_t>(a.ndim()), reps.size());
  Shape shape(rank, 1), counts(rank, 1);
  std::copy(a.shape().begin(), a.shape().end(), shape.begin() + static_cast<int64_t>(rank - a.shape().size()));
  std::copy(reps.begin(), reps.end(), counts.begin() + static_cast<int64_t>(rank - reps.size()));
  Shape split, spread, result;
  for (size_t d = 0; d < rank; ++d) {
    split.push_back(1);
    split.push_back(shape[d]);
    spread.push_back(counts[d]);
    spread.push_back(shape[d]);
    result.push_back(counts[d] * shape[d]);
  }
  return owned(broadcast_to(reshape(a, split), spread).reshape(result), a);
}

Array repeat(const Array& a, int64_t repeats, std::optional<int64_t> axis) {
  if (!a.defined()) throw ValueError("repeat: the array is undefined; create it first");
  if (repeats < 0)
    throw ValueError("repeat: repeats is " + std::to_string(repeats) + "; repetitions must be >= 0");
  const Array x = axis ? a : ravel(a);
  const int64_t ax = axis ? normalize_axis(*axis, x.ndim(), "repeat") : 0;
  Shape spread = x.shape(), result = x.shape();
  spread.insert(static_cast<size_t>(ax) + 1, repeats);
  result[ax] *= repeats;
  return owned(broadcast_to(expand_dims(x, ax + 1), spread).reshape(result), a);
}

Array repeat(const Array& a, const Array& repeats, std::optional<int64_t> axis) {
  if (!a.defined() || !repeats.defined()) throw ValueError("repeat: an operand is undefined; create it first");
  if (!is_integral(repeats.dtype()) || repeats.dtype() == DType::Bool)
    throw DTypeError("repeat: repeats has dtype " + std::string(dtype_name(repeats.dtype())) +
                     "; pass integer counts (astype(int64))");
  if (repeats.ndim() > 1)
    throw ShapeError("repeat: repeats must be 0-d or 1-d, got shape " + shape_str(repeats.shape()));
  const std::vector<int64_t> counts = repeats.to_vector<int64_t>();
  if (counts.size() == 1) return repeat(a, counts[0], axis);
  const Array x = axis ? a : ravel(a);
  const int64_t ax = axis ? normalize_axis(*axis, x.ndim(), "repeat") : 0;
  if (x.ndim() == 0 || static_cast<int64_t>(counts.size()) != x.shape()[ax])
    throw ShapeError("repeat: " + std::to_string(counts.size()) + " counts for axis " + std::to_string(ax) +
                     " of shape " + shape_str(x.shape()) + "; give one count per element, or a single count");
  std::vector<int64_t> source;
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] < 0)
      throw ValueError("repeat: count " + std::to_string(counts[i]) + " at position " + std::to_string(i) +
                       "; repetitions must be >= 0");
    source.insert(source.end(), static_cast<size_t>(counts[i]), static_cast<int64_t>(i));
  }
  return take(x, from_data(source, Shape{static_cast<int64_t>(source.size())}, x.device()), ax);
}

Array roll(const Array& a, int64_t shift, std::optional<int64_t> axis) {
  if (!a.defined()) throw ValueError("roll: the array is undefined; create it first");
  if (!axis) return roll(ravel(a), std::vector<int64_t>{shift}, {0}).reshape(a.shape());
  return roll(a, std::vector<int64_t>{shift}, {*axis});
}

Array roll(const Array& a, const std::vector<int64_t>& shifts, const std::vector<int64_t>& axes) {
  if (!a.defined()) throw ValueError("roll: the array is undefined; create it first");
  if (shifts.size() != axes.size())
    throw ShapeError("roll: shifts " + list_str(shifts) + " and axes " + list_str(axes) +
                     " differ in length; give one shift per axis");
  Array out = a;
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t ax = normalize_axis(axes[i], a.ndim(), "roll");
    const int64_t n = out.shape()[ax];
    if (n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    if (s == 0) continue;
    out = concatenate({out.slice(ax, n - s, n), out.slice(ax, 0, n - s)}, ax);
  }
  return owned(out, a);
}

Array flip(const Array& a, Axes axes) {
  if (!a.defined()) throw ValueError("flip: the array is undefined; create it first");
  std::vector<int64_t> list;
  if (axes.all()) {
    for (int64_t d = 0; d < a.ndim(); ++d) list.push_back(d);
  } else {
    list = normalized_axes(axes.list().vec(), a.ndim(), "flip");
  }
  Array out = a;
  for (int64_t ax : list) out = out.slice(ax, std::nullopt, std::nullopt, -1);
  return out;
}

std::vector<Array> meshgrid(const std::vector<Array>& xi, std::string_view indexing) {
  if (indexing != "xy" && indexing != "ij")
    throw ValueError("meshgrid: indexing is '" + std::string(indexing) + "'; use \"xy\" or \"ij\"");
  const size_t n = xi.size();
  Shape shape;
  for (const Array& x : xi) {
    if (!x.defined()) throw ValueError("meshgrid: an input is undefined; create it first");
    shape.push_back(x.size());
  }
  const bool cartesian = indexing == "xy" && n >= 2;
  if (cartesian) std::swap(shape[0], shape[1]);
  std::vector<Array> out;
  for (size_t i = 0; i < n; ++i) {
    size_t position = i;
    if (cartesian && i < 2) position = 1 - i;
    Shape along(n, 1);
    along[position] = -1;
    out.push_back(broadcast_to(reshape(xi[i], along), shape).copy());
  }
  return out;
}

}  // namespace kiln
