// Views and shape operations: reshape (NumPy's no-copy rule), axis
// permutations, squeeze/expand_dims, broadcasting, as_strided, basic indexing
// and slicing, and the copying joins (concatenate, stack) and splits.
// A view shares its source's storage and only changes shape, strides (in
// elements, possibly 0 or negative) and offset; no backend is involved except
// where data is copied (contiguous(), assign()).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "core/indexing.hpp"
#include "kiln/array.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

/// True when no two indices of (shape, strides) reach the same element.
bool is_injective(const Shape& shape, const Shape& strides) {
  std::vector<std::pair<int64_t, int64_t>> axes;  // (|stride|, extent) of the axes that move
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return true;
    if (shape[d] > 1) axes.emplace_back(strides[d] < 0 ? -strides[d] : strides[d], shape[d]);
  }
  std::sort(axes.begin(), axes.end());
  int64_t reach = 0;  // the largest offset the smaller axes reach
  for (const auto& [stride, extent] : axes) {
    if (stride <= reach) return false;
    reach += stride * (extent - 1);
  }
  return true;
}

/// True when (shape, strides) is the row-major layout of shape (axes of extent 1 may have any stride).
bool is_row_major(const Shape& shape, const Shape& strides) {
  int64_t expected = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

/// The node of a view of `base` (the first array of a chain of views that is not itself a view: a view of a
/// view records against it, so the chain collapses). Its gradient: the view's gradient written through the
/// view's geometry into zeros of the base's storage extent, read back through the base's geometry.
struct ViewNode : detail::Node {
  ViewNode() : Node("ViewBackward", &backward_of) {}
  static std::vector<Array> backward_of(const detail::Node& node, const Array& g) {
    const auto& v = static_cast<const ViewNode&>(node);
    // Broadcast (stride-0) axes of the view: the gradients of the aliases add up.
    Shape stretched;
    for (size_t d = 0; d < v.view_shape.size(); ++d)
      if (v.view_strides[d] == 0 && v.view_shape[d] > 1) stretched.push_back(static_cast<int64_t>(d));
    Array grad = stretched.empty() ? g : sum(g, stretched, true);
    int64_t lo = v.base_offset, hi = v.base_offset;
    for (size_t d = 0; d < v.base_shape.size(); ++d) {
      if (v.base_shape[d] == 0) return {zeros(v.base_shape, grad.dtype(), grad.device())};
      const int64_t reach = (v.base_shape[d] - 1) * v.base_strides[d];
      (reach < 0 ? lo : hi) += reach;
    }
    // A view that reaches every element of its extent exactly once (a reshape, a transpose, a whole-array
    // view) needs no zeros under it; a reshape of the row-major base is the gradient itself, reshaped back.
    const bool covers = grad.size() == hi - lo + 1 && is_injective(grad.shape(), v.view_strides);
    if (covers && v.view_offset == v.base_offset && is_row_major(grad.shape(), v.view_strides) &&
        is_row_major(v.base_shape, v.base_strides))
      return {grad.reshape(v.base_shape)};
    Array buffer = covers ? empty({hi - lo + 1}, grad.dtype(), grad.device())
                          : zeros({hi - lo + 1}, grad.dtype(), grad.device());
    if (grad.size() > 0) as_strided(buffer, grad.shape(), v.view_strides, v.view_offset - lo).assign(grad);
    return {as_strided(buffer, v.base_shape, v.base_strides, v.base_offset - lo)};
  }
  // A view that reaches part of a row-major base (a slice, a head of a packed projection): its gradient is
  // added into the engine's buffer for the base through the view's geometry.
  bool scatters(const Array& g) const override {
    if (!is_row_major(base_shape, base_strides) || g.shape() != view_shape) return false;
    int64_t lo = base_offset, hi = base_offset;
    for (size_t d = 0; d < view_shape.size(); ++d) {
      if (view_strides[d] == 0 && view_shape[d] > 1) return false;  // broadcast axes: apply sums them
      if (view_shape[d] == 0) return false;
    }
    for (size_t d = 0; d < base_shape.size(); ++d) {
      if (base_shape[d] == 0) return false;
      (base_strides[d] < 0 ? lo : hi) += (base_shape[d] - 1) * base_strides[d];
    }
    const bool covers = g.size() == hi - lo + 1;  // the whole base: apply returns it without zeros
    return !covers && is_injective(view_shape, view_strides);
  }
  bool scatter_add(const Array& g, Array& buffer) const override {
    if (!buffer.is_contiguous() || buffer.shape() != base_shape || buffer.dtype() != g.dtype() ||
        buffer.device() != g.device())
      return false;
    // The buffer has the base's (row-major) strides, so the view's strides and its offset from the base's
    // first element address the buffer as they address the base.
    Array region = as_strided(buffer, view_shape, view_strides, buffer.offset() + (view_offset - base_offset));
    add(region, g, region);
    return true;
  }
  Shape base_shape, base_strides, view_shape, view_strides;
  int64_t base_offset = 0, view_offset = 0;
};

void record_view(const Array& in, Array& out) {
  auto node = std::make_shared<ViewNode>();
  const detail::Node* parent_node = in.autograd_meta()->grad_fn.get();
  if (const auto* parent = dynamic_cast<const ViewNode*>(parent_node)) {
    node->base_shape = parent->base_shape;
    node->base_strides = parent->base_strides;
    node->base_offset = parent->base_offset;
  } else {
    if (!is_injective(in.shape(), in.strides()))
      throw ValueError("view: the array requiring grad overlaps itself (shape " + shape_str(in.shape()) +
                       ", strides " + shape_str(in.strides()) +
                       "), so a view of it has no well-defined gradient; take the view of a copy()");
    node->base_shape = in.shape();
    node->base_strides = in.strides();
    node->base_offset = in.offset();
  }
  node->view_shape = out.shape();
  node->view_strides = out.strides();
  node->view_offset = out.offset();
  Shape shape = out.shape();
  for (size_t d = 0; d < shape.size(); ++d)
    if (out.strides()[d] == 0) shape[d] = std::min<int64_t>(shape[d], 1);
  if (!is_injective(shape, out.strides()))
    throw ValueError("as_strided: a view whose elements overlap (shape " + shape_str(out.shape()) + ", strides " +
                     shape_str(out.strides()) +
                     ") of an array that requires grad has no gradient; use broadcast_to for repeated elements, "
                     "or a copy");
  if (const auto* parent = dynamic_cast<const ViewNode*>(parent_node)) {
    // The chain's first array: the parent's input (its edge and info are copied, not re-derived).
    node->next = parent->next;
    node->inputs = parent->inputs;
    detail::record(out, node, std::vector<const Array*>{});
  } else {
    detail::record(out, node, {&in});
  }
}

/// A view of `a`'s storage with new geometry (recorded for autograd: every view op ends here).
Array make_view(const Array& a, Shape shape, Shape strides, int64_t offset) {
  Array out(a.storage(), std::move(shape), std::move(strides), offset, a.dtype());
  if (detail::grad_mode() && detail::requires_grad(a)) record_view(a, out);
  return out;
}

void require_defined(const Array& a, const char* op) {
  if (!a.defined())
    throw ValueError(std::string(op) +
                     ": the array is undefined (default-constructed); create it with empty/zeros/arange first");
}

std::string axes_str(const Shape& axes) {
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + "]";
}

/// A Slice resolved against an extent with Python's rules: elements start, start+step, ... (length of them).
struct SliceRange {
  int64_t start = 0;
  int64_t length = 0;
  int64_t step = 1;
};

SliceRange resolve_slice(const Slice& s, int64_t extent, const char* op) {
  if (s.step == 0) throw ValueError(std::string(op) + ": slice step cannot be zero; use a positive or negative step");
  const bool backward = s.step < 0;
  // Python's PySlice_AdjustIndices: negative bounds count from the end, then clamp.
  auto clamp = [&](std::optional<int64_t> v, int64_t if_missing) {
    if (!v) return if_missing;
    int64_t x = *v;
    if (x < 0) {
      x += extent;
      if (x < 0) x = backward ? -1 : 0;
    } else if (x >= extent) {
      x = backward ? extent - 1 : extent;
    }
    return x;
  };
  SliceRange r;
  r.step = s.step;
  r.start = clamp(s.start, backward ? extent - 1 : 0);
  const int64_t stop = clamp(s.stop, backward ? -1 : extent);
  if (!backward)
    r.length = stop > r.start ? (stop - r.start - 1) / s.step + 1 : 0;
  else
    r.length = r.start > stop ? (r.start - stop - 1) / (-s.step) + 1 : 0;
  return r;
}

/// NumPy's _attempt_nocopy_reshape (C order): strides that view `a` as `shape`, or false when the
/// old axes that must merge are not laid out contiguously relative to each other.
bool nocopy_strides(const Array& a, const Shape& shape, Shape& strides) {
  Shape old_dims, old_strides;
  for (int64_t i = 0; i < a.ndim(); ++i) {
    if (a.shape()[i] != 1) {  // size-1 axes have no effect and any stride
      old_dims.push_back(a.shape()[i]);
      old_strides.push_back(a.strides()[i]);
    }
  }
  const size_t old_n = old_dims.size(), new_n = shape.size();
  strides.assign(shape.begin(), shape.end());
  size_t oi = 0, oj = 1, ni = 0, nj = 1;
  while (ni < new_n && oi < old_n) {
    int64_t np = shape[ni], op = old_dims[oi];
    while (np != op) {
      if (np < op)
        np *= shape[nj++];
      else
        op *= old_dims[oj++];
    }
    for (size_t ok = oi; ok + 1 < oj; ++ok)
      if (old_strides[ok] != old_dims[ok + 1] * old_strides[ok + 1]) return false;
    strides[nj - 1] = old_strides[oj - 1];
    for (size_t nk = nj - 1; nk > ni; --nk) strides[nk - 1] = strides[nk] * shape[nk];
    ni = nj++;
    oi = oj++;
  }
  const int64_t last_stride = ni >= 1 ? strides[ni - 1] : 1;
  for (size_t nk = ni; nk < new_n; ++nk) strides[nk] = last_stride;  // trailing size-1 axes
  return true;
}

/// Fills in a -1 extent and checks the element count; throws ShapeError naming both shapes and sizes.
Shape resolve_reshape(const Array& a, const Shape& requested) {
  const std::string what = "reshape: cannot reshape array of shape " + shape_str(a.shape()) + " (size " +
                           std::to_string(a.size()) + ") into shape " + shape_str(requested);
  Shape shape = requested;
  int64_t unknown = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (unknown >= 0) throw ShapeError(what + ": only one extent may be -1");
      unknown = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      throw ShapeError(what + ": extent " + std::to_string(shape[i]) + " is negative; use -1 for an inferred extent");
    } else {
      known *= shape[i];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || a.size() % known != 0)
      throw ShapeError(what + ": the -1 extent cannot be inferred, " + std::to_string(a.size()) +
                       " elements are not a whole multiple of the other extents' product " + std::to_string(known));
    shape[static_cast<size_t>(unknown)] = a.size() / known;
  } else if (known != a.size()) {
    throw ShapeError(what + " (size " + std::to_string(known) +
                     "); the sizes must match (use -1 for one extent to infer it)");
  }
  return shape;
}

/// The C++ expression that names `d`: "cpu()" or "gpu(1)".
std::string device_expression(Device d) { return d.is_cpu() ? "cpu()" : "gpu(" + std::to_string(d.index) + ")"; }

/// Checks that every array is defined and on one device; throws DeviceError naming both devices.
void require_one_device(const std::vector<Array>& arrays, const char* op) {
  for (size_t i = 0; i < arrays.size(); ++i) {
    require_defined(arrays[i], op);
    if (arrays[i].device() != arrays[0].device())
      throw DeviceError(std::string(op) + ": array 0 is on " + arrays[0].device().str() + " but array " +
                        std::to_string(i) + " is on " + arrays[i].device().str() +
                        "; move them to one device first, e.g. x.to(" + device_expression(arrays[0].device()) + ")");
  }
}

}  // namespace

// ---------------------------------------------------------------- free functions

Array reshape(const Array& a, const Shape& shape) {
  require_defined(a, "reshape");
  Shape resolved = resolve_reshape(a, shape);
  if (a.size() == 0) return make_view(a, resolved, contiguous_strides(resolved), a.offset());
  Shape strides;
  if (nocopy_strides(a, resolved, strides)) return make_view(a, std::move(resolved), std::move(strides), a.offset());
  Array c = a.contiguous();
  return make_view(c, resolved, contiguous_strides(resolved), c.offset());
}

Array transpose(const Array& a) {
  require_defined(a, "transpose");
  Shape shape, strides;
  for (int64_t i = a.ndim() - 1; i >= 0; --i) {
    shape.push_back(a.shape()[i]);
    strides.push_back(a.strides()[i]);
  }
  return make_view(a, std::move(shape), std::move(strides), a.offset());
}

Array permute(const Array& a, const Shape& axes) {
  require_defined(a, "permute");
  const int64_t n = a.ndim();
  if (static_cast<int64_t>(axes.size()) != n)
    throw ShapeError("permute: axes " + axes_str(axes) + " do not match an array of shape " + shape_str(a.shape()) +
                     "; give a permutation of all " + std::to_string(n) + " axes");
  Shape shape(static_cast<size_t>(n), 0), strides(static_cast<size_t>(n), 0);
  std::vector<bool> seen(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ax = normalize_axis(axes[i], n, "permute");
    if (seen[static_cast<size_t>(ax)])
      throw ShapeError("permute: axes " + axes_str(axes) + " repeat axis " + std::to_string(ax) +
                       " for an array of shape " + shape_str(a.shape()) + "; each axis must appear once");
    seen[static_cast<size_t>(ax)] = true;
    shape[i] = a.shape()[ax];
    strides[i] = a.strides()[ax];
  }
  return make_view(a, std::move(shape), std::move(strides), a.offset());
}

Array swapaxes(const Array& a, int64_t axis1, int64_t axis2) {
  require_defined(a, "swapaxes");
  const int64_t i = normalize_axis(axis1, a.ndim(), "swapaxes"), j = normalize_axis(axis2, a.ndim(), "swapaxes");
  Shape shape = a.shape(), strides = a.strides();
  std::swap(shape[i], shape[j]);
  std::swap(strides[i], strides[j]);
  return make_view(a, std::move(shape), std::move(strides), a.offset());
}

Array moveaxis(const Array& a, int64_t source, int64_t destination) {
  require_defined(a, "moveaxis");
  const int64_t src = normalize_axis(source, a.ndim(), "moveaxis");
  const int64_t dst = normalize_axis(destination, a.ndim(), "moveaxis");
  Shape order;
  for (int64_t i = 0; i < a.ndim(); ++i)
    if (i != src) order.push_back(i);
  order.insert(static_cast<size_t>(dst), src);
  return permute(a, order);
}

Array squeeze(const Array& a, Axes axes) {
  require_defined(a, "squeeze");
  const int64_t n = a.ndim();
  std::vector<bool> drop(static_cast<size_t>(n), false);
  if (axes.all()) {
    for (int64_t i = 0; i < n; ++i) drop[static_cast<size_t>(i)] = a.shape()[i] == 1;
  } else {
    for (int64_t axis : axes.list()) {
      const int64_t ax = normalize_axis(axis, n, "squeeze");
      if (drop[static_cast<size_t>(ax)])
        throw ShapeError("squeeze: axes " + axes_str(axes.list()) + " repeat axis " + std::to_string(ax) +
                         "; list each axis once");
      if (a.shape()[ax] != 1)
        throw ShapeError("squeeze: axis " + std::to_string(axis) + " of shape " + shape_str(a.shape()) +
                         " has extent " + std::to_string(a.shape()[ax]) + ", not 1; only size-1 axes can be removed");
      drop[static_cast<size_t>(ax)] = true;
    }
  }
  Shape shape, strides;
  for (int64_t i = 0; i < n; ++i) {
    if (drop[static_cast<size_t>(i)]) continue;
    shape.push_back(a.shape()[i]);
    strides.push_back(a.strides()[i]);
  }
  return make_view(a, std::move(shape), std::move(strides), a.offset());
}

Array expand_dims(const Array& a, int64_t axis) {
  require_defined(a, "expand_dims");
  const int64_t ax = normalize_axis(axis, a.ndim() + 1, "expand_dims");
  Shape shape = a.shape(), strides = a.strides();
  // The stride NumPy's reshape gives the new axis (any value is valid for extent 1).
  const int64_t stride = ax < a.ndim() ? a.strides()[ax] * a.shape()[ax] : 1;
  shape.insert(static_cast<size_t>(ax), 1);
  strides.insert(static_cast<size_t>(ax), stride);
  return make_view(a, std::move(shape), std::move(strides), a.offset());
}

Array broadcast_to(const Array& a, const Shape& shape) {
  require_defined(a, "broadcast_to");
  const std::string what =
      "broadcast_to: cannot broadcast an array of shape " + shape_str(a.shape()) + " to shape " + shape_str(shape);
  const int64_t n = static_cast<int64_t>(shape.size()), lead = n - a.ndim();
  if (lead < 0) throw ShapeError(what + ": the target has fewer dimensions; broadcasting only adds leading axes");
  Shape strides(static_cast<size_t>(n), 0);
  for (int64_t i = 0; i < n; ++i) {
    if (shape[i] < 0) throw ShapeError(what + ": extents must be non-negative");
    if (i < lead) continue;
    const int64_t extent = a.shape()[i - lead];
    if (extent == shape[i])
      strides[i] = a.strides()[i - lead];
    else if (extent != 1)
      throw ShapeError(what + ": axis " + std::to_string(i) + " has extent " + std::to_string(extent) + " where " +
                       std::to_string(shape[i]) + " is needed; only size-1 axes stretch");
  }
  return make_view(a, shape, std::move(strides), a.offset());
}

std::vector<Array> broadcast_arrays(const std::vector<Array>& arrays) {
  if (arrays.empty()) return {};
  for (const Array& a : arrays) require_defined(a, "broadcast_arrays");
  Shape shape = arrays[0].shape();
  for (size_t i = 1; i < arrays.size(); ++i) shape = broadcast_shapes(shape, arrays[i].shape(), "broadcast_arrays");
  std::vector<Array> out;
  out.reserve(arrays.size());
  for (const Array& a : arrays) out.push_back(a.shape() == shape ? a : broadcast_to(a, shape));
  return out;
}

Array ravel(const Array& a) {
  require_defined(a, "ravel");
  // As NumPy's C-order ravel: a view of a contiguous array, otherwise a contiguous copy.
  return reshape(a.contiguous(), Shape{a.size()});
}

Array as_strided(const Array& a, const Shape& shape, const Shape& strides, std::optional<int64_t> offset) {
  require_defined(a, "as_strided");
  const int64_t start = offset.value_or(a.offset());
  const std::string what = "as_strided: shape " + shape_str(shape) + " with strides " + shape_str(strides) +
                           " at offset " + std::to_string(start);
  if (shape.size() != strides.size())
    throw ShapeError(what + " gives " + std::to_string(shape.size()) + " extents but " +
                     std::to_string(strides.size()) + " strides; give one stride per axis");
  int64_t low = start, high = start, size = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) throw ShapeError(what + ": extents must be non-negative");
    size *= shape[i];
    (strides[i] < 0 ? low : high) += (shape[i] - 1) * strides[i];
  }
  const int64_t capacity = static_cast<int64_t>(a.storage()->nbytes()) / itemsize(a.dtype());
  if (size > 0 && (low < 0 || high >= capacity))
    throw ShapeError(what + " reaches elements " + std::to_string(low) + " to " + std::to_string(high) +
                     ", outside the storage of " + std::to_string(capacity) + " " + std::string(dtype_name(a.dtype())) +
                     " elements; shrink the shape or strides");
  return make_view(a, shape, strides, start);
}

Array concatenate(const std::vector<Array>& arrays, int64_t axis) {
  if (arrays.empty()) throw ValueError("concatenate: need at least one array to concatenate");
  require_one_device(arrays, "concatenate");
  detail::GradRecorder record(arrays);
  const Array& first = arrays[0];
  if (first.ndim() == 0)
    throw ShapeError("concatenate: 0-d arrays cannot be concatenated; use stack, or expand_dims them first");
  const int64_t ax = normalize_axis(axis, first.ndim(), "concatenate");
  Shape shape = first.shape();
  DType dtype = first.dtype();
  for (size_t i = 1; i < arrays.size(); ++i) {
    const Array& a = arrays[i];
    const std::string pair = "array 0 has shape " + shape_str(first.shape()) + " but array " + std::to_string(i) +
                             " has shape " + shape_str(a.shape());
    if (a.ndim() != first.ndim())
      throw ShapeError("concatenate: " + pair + "; all arrays need the same number of dimensions");
    for (int64_t d = 0; d < a.ndim(); ++d)
      if (d != ax && a.shape()[d] != first.shape()[d])
        throw ShapeError("concatenate: " + pair + "; along axis " + std::to_string(ax) +
                         " every other extent must match (they differ on axis " + std::to_string(d) + ")");
    shape[ax] += a.shape()[ax];
    dtype = promote_types(dtype, a.dtype());
  }
  Array out = detail::make_array(shape, dtype, first.device());
  int64_t position = 0;
  for (const Array& a : arrays) {
    const int64_t extent = a.shape()[ax];
    if (extent > 0 && out.size() > 0) out.slice(ax, position, position + extent).assign(a);
    position += extent;
  }
  if (record) {
    auto backward = [ax](const detail::Node& node, const Array& g) {
      std::vector<Array> r;
      int64_t position = 0;
      for (const detail::Node::InputInfo& info : node.inputs) {
        const int64_t extent = info.shape[static_cast<size_t>(ax)];
        r.push_back(g.slice(ax, position, position + extent));
        position += extent;
      }
      return r;
    };
    detail::record(out, std::make_shared<detail::Node>("ConcatenateBackward", std::move(backward)), arrays);
  }
  return out;
}

Array stack(const std::vector<Array>& arrays, int64_t axis) {
  if (arrays.empty()) throw ValueError("stack: need at least one array to stack");
  require_one_device(arrays, "stack");
  const int64_t ax = normalize_axis(axis, arrays[0].ndim() + 1, "stack");
  std::vector<Array> expanded;
  expanded.reserve(arrays.size());
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (arrays[i].shape() != arrays[0].shape())
      throw ShapeError("stack: array 0 has shape " + shape_str(arrays[0].shape()) + " but array " + std::to_string(i) +
                       " has shape " + shape_str(arrays[i].shape()) + "; all arrays must have the same shape");
    expanded.push_back(expand_dims(arrays[i], ax));
  }
  return concatenate(expanded, ax);
}

std::vector<Array> split(const Array& a, int64_t sections, int64_t axis) {
  require_defined(a, "split");
  const int64_t ax = normalize_axis(axis, a.ndim(), "split");
  if (sections <= 0)
    throw ValueError("split: the number of sections must be positive, got " + std::to_string(sections));
  const int64_t extent = a.shape()[ax];
  if (extent % sections != 0)
    throw ShapeError("split: axis " + std::to_string(ax) + " of shape " + shape_str(a.shape()) + " (extent " +
                     std::to_string(extent) + ") does not divide into " + std::to_string(sections) +
                     " equal sections; pick a divisor or split at explicit indices");
  std::vector<Array> out;
  const int64_t part = extent / sections;
  for (int64_t i = 0; i < sections; ++i) out.push_back(a.slice(ax, i * part, (i + 1) * part));
  return out;
}

std::vector<Array> split(const Array& a, const std::vector<int64_t>& indices, int64_t axis) {
  require_defined(a, "split");
  const int64_t ax = normalize_axis(axis, a.ndim(), "split");
  // As NumPy: piece i is a[points[i]:points[i+1]] along the axis, with Python slice semantics.
  std::vector<int64_t> points{0};
  points.insert(points.end(), indices.begin(), indices.end());
  points.push_back(a.shape()[ax]);
  std::vector<Array> out;
  for (size_t i = 0; i + 1 < points.size(); ++i) out.push_back(a.slice(ax, points[i], points[i + 1]));
  return out;
}

// ---------------------------------------------------------------- Array members

Array Array::reshape(const Shape& s) const { return kiln::reshape(*this, s); }
Array Array::transpose() const { return kiln::transpose(*this); }
Array Array::permute(const Shape& axes) const { return kiln::permute(*this, axes); }
Array Array::squeeze(Axes axes) const { return kiln::squeeze(*this, std::move(axes)); }
Array Array::expand_dims(int64_t axis) const { return kiln::expand_dims(*this, axis); }
Array Array::broadcast_to(const Shape& s) const { return kiln::broadcast_to(*this, s); }

Array Array::flatten() const {
  kiln::require_defined(*this, "flatten");
  Array c = copy();
  if (!c.is_contiguous()) c = c.contiguous();
  return make_view(c, Shape{size_}, Shape{1}, c.offset());
}

Array Array::slice(int64_t axis, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) const {
  kiln::require_defined(*this, "slice");
  const int64_t ax = normalize_axis(axis, ndim(), "slice");
  const SliceRange r = resolve_slice(Slice(start, stop, step), shape_[ax], "slice");
  Shape shape = shape_, strides = strides_;
  shape[ax] = r.length;
  strides[ax] = strides_[ax] * r.step;
  const int64_t offset = offset_ + (r.length > 0 ? r.start * strides_[ax] : 0);
  return make_view(*this, std::move(shape), std::move(strides), offset);
}

Array Array::index(std::initializer_list<Index> idx) const { return detail::basic_index(*this, idx.begin(), idx.end()); }

Array& Array::index_put(std::initializer_list<Index> idx, const Array& values) {
  detail::advanced_index_put(*this, idx.begin(), idx.end(), values);
  return *this;
}

Array& Array::index_put(std::initializer_list<Index> idx, const Scalar& value) {
  kiln::require_defined(*this, "index_put");
  detail::advanced_index_put(*this, idx.begin(), idx.end(), full({}, value, dtype_, device()));
  return *this;
}

Array detail::basic_index(const Array& a, const Index* first, const Index* last) {
  kiln::require_defined(a, "index");
  const Shape& extents = a.shape();
  const Shape& steps = a.strides();
  const int64_t ndim = a.ndim();
  int64_t consumed = 0, ellipses = 0;
  for (const Index* entry = first; entry != last; ++entry) {
    const auto& v = entry->value();
    if (std::holds_alternative<const Array*>(v)) return detail::advanced_index(a, first, last);
    if (std::holds_alternative<int64_t>(v) || std::holds_alternative<Slice>(v))
      ++consumed;
    else if (std::holds_alternative<Ellipsis>(v))
      ++ellipses;
  }
  if (ellipses > 1)
    throw ShapeError("index: an index can only have a single ellipsis, got " + std::to_string(ellipses));
  if (consumed > ndim)
    throw ShapeError("index: too many indices for an array of shape " + shape_str(extents) + ": " +
                     std::to_string(consumed) + " integers/slices for " + std::to_string(ndim) + " dimensions");
  Shape shape, strides;
  int64_t offset = a.offset(), axis = 0;
  auto keep_axis = [&](int64_t ax) {
    shape.push_back(extents[ax]);
    strides.push_back(steps[ax]);
  };
  for (const Index* entry = first; entry != last; ++entry) {
    const auto& v = entry->value();
    if (const int64_t* i = std::get_if<int64_t>(&v)) {
      const int64_t extent = extents[axis];
      const int64_t position = *i < 0 ? *i + extent : *i;
      if (position < 0 || position >= extent)
        throw ShapeError("index: index " + std::to_string(*i) + " is out of bounds for axis " + std::to_string(axis) +
                         " with size " + std::to_string(extent) + " (array shape " + shape_str(extents) +
                         "); use an index in [" + std::to_string(-extent) + ", " + std::to_string(extent) + ")");
      offset += position * steps[axis];
      ++axis;
    } else if (const Slice* s = std::get_if<Slice>(&v)) {
      const SliceRange r = resolve_slice(*s, extents[axis], "index");
      shape.push_back(r.length);
      strides.push_back(steps[axis] * r.step);
      if (r.length > 0) offset += r.start * steps[axis];
      ++axis;
    } else if (std::holds_alternative<NewAxis>(v)) {
      shape.push_back(1);
      strides.push_back(0);
    } else {  // ellipsis: every axis the other entries do not consume
      for (int64_t k = 0; k < ndim - consumed; ++k) keep_axis(axis++);
    }
  }
  while (axis < ndim) keep_axis(axis++);
  return make_view(a, std::move(shape), std::move(strides), offset);
}

}  // namespace kiln
