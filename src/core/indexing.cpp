// Advanced indexing (index arrays and boolean masks), take/put, flatnonzero and
// whole-array comparisons. Every gather and scatter is one primitive: read or
// write elements of an array's storage at int64 storage offsets. The offsets are
// built on the array's device by elementwise ops (arange * stride sums); the
// primitive is a byte copy loop on the CPU and a generated NVRTC kernel (a
// kiln ElementwiseKernel over a raw view of the storage) on a GPU.
#include "core/indexing.hpp"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "core/device_check.hpp"
#include "core/step_trace.hpp"
#include "kiln/complex.hpp"
#include "kiln/indexing.hpp"
#include "kiln/kernels.hpp"
#include "kiln/parallel.hpp"

namespace kiln {
namespace {

void require_defined(const Array& a, const char* op, const char* what) {
  if (!a.defined())
    throw ValueError(std::string(op) + ": " + what + " is an undefined Array; create it with from_data/arange/...");
}

void require_same_device(const Array& a, const Array& b, const char* op, const char* what) {
  if (a.device() != b.device())
    throw DeviceError(std::string(op) + ": the array is on " + a.device().str() + " but " + what + " is on " +
                      b.device().str() + "; move one with .to(" + a.device().str() + ")");
}

/// The whole storage of `a` as a 1-d contiguous array (element j = storage element j).
Array storage_view(const Array& a) {
  const int64_t n = static_cast<int64_t>(a.storage()->nbytes()) / itemsize(a.dtype());
  return Array(a.storage(), Shape{n}, Shape{1}, 0, a.dtype());
}

/// out[i] = storage element offsets[i] of `src` (offsets: int64, on src's device).
Array gather_flat(const Array& src, const Array& offsets) {
  if (offsets.size() == 0) return detail::make_array(offsets.shape(), src.dtype(), src.device());
  if (src.device().is_cuda()) {
    static const ElementwiseKernel gather(detail::kGatherIn, detail::kGatherOut, detail::kGatherOp, "index_gather");
    return gather(storage_view(src), offsets);
  }
  Array out = detail::make_array(offsets.shape(), src.dtype(), cpu());
  const Array off = offsets.contiguous();
  auto gather = [src, off, out] {
    const auto size = static_cast<size_t>(itemsize(src.dtype()));
    const char* base = static_cast<const char*>(src.storage()->data());
    char* dst = static_cast<char*>(out.data_ptr());
    const int64_t* o = off.data<int64_t>();
    for (int64_t i = 0; i < off.size(); ++i) std::memcpy(dst + static_cast<size_t>(i) * size, base + o[i] * size, size);
  };
  detail::host_step("gather", {src, off, out}, gather, gather);
  return out;
}

/// storage element offsets[i] of `dst` = values[i] (values: dst's dtype and offsets' shape).
void scatter_flat(const Array& dst, const Array& offsets, const Array& values) {
  if (offsets.size() == 0) return;
  if (dst.device().is_cuda()) {
    static const ElementwiseKernel scatter(detail::kScatterIn, detail::kScatterOut, detail::kScatterOp,
                                           "index_scatter");
    scatter.call({values, offsets, storage_view(dst)});
    return;
  }
  const Array off = offsets.contiguous(), val = values.contiguous();
  auto scatter = [dst, off, val] {
    const auto size = static_cast<size_t>(itemsize(dst.dtype()));
    char* base = static_cast<char*>(dst.storage()->data());
    const char* src = static_cast<const char*>(val.data_ptr());
    const int64_t* o = off.data<int64_t>();
    for (int64_t i = 0; i < off.size(); ++i) std::memcpy(base + o[i] * size, src + static_cast<size_t>(i) * size, size);
  };
  detail::host_step("scatter", {dst, off, val}, scatter, scatter);
}

/// Storage offsets of `a`'s elements with axis p replaced by the (normalised, int64) `idx`:
/// shape a.shape[:p] + idx.shape + a.shape[p+1:].
Array offsets_with_index(const Array& a, int64_t p, const Array& idx) {
  const Shape& s = a.shape();
  const auto up = static_cast<size_t>(p), k = idx.shape().size();
  Shape out;
  for (size_t d = 0; d < s.size(); ++d) {
    if (d == up)
      for (int64_t e : idx.shape()) out.push_back(e);
    else
      out.push_back(s[d]);
  }
  auto placed = [&](const Array& v, size_t pos) {  // v's axes at out's axes pos, pos+1, ...
    Shape r(out.size(), 1);
    for (size_t i = 0; i < v.shape().size(); ++i) r[pos + i] = v.shape()[i];
    return v.reshape(r);
  };
  Array off = placed(idx * a.strides()[up] + a.offset(), up);
  for (size_t d = 0; d < s.size(); ++d)
    if (d != up) off = off + placed(arange(s[d], int64, a.device()) * a.strides()[d], d < up ? d : d - 1 + k);
  return broadcast_to(off, out).contiguous();
}

/// Storage offsets of every element of `a` (int64, a's shape, contiguous).
Array element_offsets(const Array& a) {
  if (a.ndim() == 0) return full({}, a.offset(), int64, a.device());
  return offsets_with_index(a, 0, arange(a.shape(0), int64, a.device()));
}

/// `idx` as int64 in [0, n): negative values count from the end. Out-of-range values throw ShapeError: at once
/// for CPU indices, at the next synchronisation for GPU indices (a check kernel; no synchronisation here).
Array normalize_indices(const Array& idx, int64_t n, const std::string& what) {
  if (!is_integral(idx.dtype()))
    throw DTypeError(what + ": indices must be an integer array, got " + std::string(dtype_name(idx.dtype())) +
                     "; convert with astype(int64) (a bool array is a mask: use it in index())");
  const Array i = idx.astype(int64);
  if (n == 0 && i.size() > 0 && !i.device().is_cpu())
    throw ShapeError(what + ": an index into an axis of size 0 is always out of bounds; select nothing instead");
  detail::check_range(i, -n, n, detail::CheckError::Shape,
                      what + ": index {value} is out of bounds for size " + std::to_string(n) +
                          "; indices must lie in [" + std::to_string(-n) + ", " + std::to_string(n) + ")");
  if (i.device().is_cpu()) return where(i < 0, i + n, i);
  // Python's modulo maps [-n, n) as above and keeps out-of-range values (reported later) inside the array, so
  // the gather that follows never reads outside its storage.
  return n > 0 ? remainder(i, n) : i;
}

/// The basic part of an index with one Array entry: the view it selects, the view's axis where the
/// Array entry applies, and the entry.
struct SplitIndex {
  Array view;
  int64_t axis = 0;
  const Array* entry = nullptr;
  bool front = false;  // advanced entries (arrays, integers) not adjacent: NumPy puts the Array's axes first
  /// Every Array entry with the view axis where it applies (more than one: NumPy's broadcast index arrays).
  std::vector<std::pair<int64_t, const Array*>> entries;
};

SplitIndex split_index(const Array& a, const Index* first, const Index* last, const char* op) {
  std::vector<Index> basic;
  SplitIndex out;
  bool ellipsis_seen = false;
  int64_t view_axes = 0, first_advanced = -1, last_advanced = -1;
  for (const Index* e = first; e != last; ++e) {
    const auto& v = e->value();
    if (std::holds_alternative<int64_t>(v) || std::holds_alternative<const Array*>(v)) {
      if (first_advanced < 0) first_advanced = e - first;
      last_advanced = e - first;
    }
    if (const Array* const* arr = std::get_if<const Array*>(&v)) {
      if (ellipsis_seen)
        throw ShapeError(std::string(op) + ": an index array or mask after an ellipsis is not supported; " +
                         "write the leading axes as Slice()");
      require_defined(**arr, op, "the index array");
      require_same_device(a, **arr, op, "the index array");
      if (!out.entry) {
        out.entry = *arr;
        out.axis = view_axes;
      }
      out.entries.emplace_back(view_axes, *arr);
      const int64_t axes = (*arr)->dtype() == DType::Bool ? (*arr)->ndim() : 1;
      if (axes == 0)
        throw ShapeError(std::string(op) +
                         ": a 0-d bool mask is not supported; give a mask of the indexed axes' shape");
      for (int64_t k = 0; k < axes; ++k) basic.emplace_back(Slice());
      view_axes += axes;
      continue;
    }
    if (std::holds_alternative<Slice>(v) || std::holds_alternative<NewAxis>(v)) ++view_axes;
    if (std::holds_alternative<Ellipsis>(v)) ellipsis_seen = true;
    basic.push_back(*e);
  }
  // NumPy's rule: integers count as advanced indices; when the advanced entries are not one run of
  // adjacent entries, the result's advanced axes come first.
  for (int64_t i = first_advanced; i >= 0 && i <= last_advanced; ++i) {
    const auto& v = first[i].value();
    out.front |= !std::holds_alternative<int64_t>(v) && !std::holds_alternative<const Array*>(v);
  }
  out.view = detail::basic_index(a, basic.data(), basic.data() + basic.size());
  return out;
}

Array selected_offsets(const SplitIndex& split, const char* op);

/// `mask`'s nonzero positions as one int64 index array per mask axis (NumPy's mask.nonzero()).
std::vector<Array> mask_indices(const Array& mask) {
  const Array flat = flatnonzero(mask);
  std::vector<Array> out;
  int64_t inner = 1;
  for (int64_t d = mask.ndim() - 1; d >= 0; --d) {
    out.insert(out.begin(), remainder(floor_divide(flat, inner), mask.shape(d)));
    inner *= mask.shape(d);
  }
  return out;
}

/// Storage offsets for several Array entries (NumPy's broadcast index arrays; a mask among them counts as its
/// nonzero() arrays): the arrays broadcast to one shape B, which replaces their axes in the result (or comes
/// first when split.front).
Array multi_offsets(const SplitIndex& split, const char* op) {
  const Array& v = split.view;
  std::vector<std::pair<int64_t, Array>> adv;  // view axis, normalised int64 index array
  for (const auto& [axis, entry] : split.entries) {
    if (entry->dtype() == DType::Bool) {
      const std::vector<Array> parts = mask_indices(*entry);
      for (size_t k = 0; k < parts.size(); ++k) adv.emplace_back(axis + static_cast<int64_t>(k), parts[k]);
    } else {
      adv.emplace_back(
          axis, normalize_indices(*entry, v.shape(axis), std::string(op) + " (axis " + std::to_string(axis) + ")"));
    }
  }
  Shape b;
  for (const auto& [axis, idx] : adv) b = broadcast_shapes(b, idx.shape(), op);
  std::vector<bool> advanced(static_cast<size_t>(v.ndim()), false);
  for (const auto& [axis, idx] : adv) advanced[static_cast<size_t>(axis)] = true;
  const int64_t first_axis = adv.front().first;
  // Result axes: the advanced block (rank of b) at `at`, the other view axes around it in order.
  const int64_t at = split.front ? 0 : first_axis;
  Shape out;
  std::vector<int64_t> position(static_cast<size_t>(v.ndim()), -1);
  bool inserted = false;
  const auto insert_block = [&] {
    if (inserted || static_cast<int64_t>(out.size()) != at) return;
    for (int64_t e : b) out.push_back(e);
    inserted = true;
  };
  for (int64_t d = 0; d < v.ndim(); ++d) {
    insert_block();
    if (advanced[static_cast<size_t>(d)]) continue;
    position[static_cast<size_t>(d)] = static_cast<int64_t>(out.size());
    out.push_back(v.shape(d));
  }
  insert_block();
  auto placed = [&](const Array& x, int64_t pos) {  // x's axes at out's axes pos, pos + 1, ...
    Shape r(out.size(), 1);
    for (int64_t i = 0; i < x.ndim(); ++i) r[static_cast<size_t>(pos + i)] = x.shape(i);
    return x.reshape(r);
  };
  Array off = full({}, v.offset(), int64, v.device());
  for (const auto& [axis, idx] : adv) off = off + placed(broadcast_to(idx, b) * v.strides()[axis], at);
  for (int64_t d = 0; d < v.ndim(); ++d)
    if (!advanced[static_cast<size_t>(d)])
      off = off + placed(arange(v.shape(d), int64, v.device()) * v.strides()[d], position[static_cast<size_t>(d)]);
  return broadcast_to(off, out).contiguous();
}

/// Storage offsets (in split.view's storage) of the elements the index selects, in NumPy's result order.
Array target_offsets(const SplitIndex& split, const char* op) {
  if (split.entries.size() > 1) return multi_offsets(split, op);
  Array offsets = selected_offsets(split, op);
  if (!split.front || split.axis == 0) return offsets;
  const int64_t r = split.entry->dtype() == DType::Bool ? 1 : split.entry->ndim();
  Shape order;
  for (int64_t d = 0; d < r; ++d) order.push_back(split.axis + d);
  for (int64_t d = 0; d < offsets.ndim(); ++d)
    if (d < split.axis || d >= split.axis + r) order.push_back(d);
  return permute(offsets, order).contiguous();
}

Array selected_offsets(const SplitIndex& split, const char* op) {
  const Array& v = split.view;
  const Array& e = *split.entry;
  const int64_t p = split.axis;
  if (e.dtype() != DType::Bool)
    return offsets_with_index(v, p,
                              normalize_indices(e, v.shape(p), std::string(op) + " (axis " + std::to_string(p) + ")"));
  const auto up = static_cast<size_t>(p), k = e.shape().size();
  bool match = up + k <= v.shape().size();
  for (size_t d = 0; match && d < k; ++d) match = v.shape()[up + d] == e.shape()[d];
  if (!match)
    throw ShapeError(std::string(op) + ": the boolean mask has shape " + shape_str(e.shape()) +
                     " but the axes it indexes have shape " +
                     shape_str(Shape(v.shape().begin() + std::min(up, v.shape().size()),
                                     v.shape().begin() + std::min(up + k, v.shape().size()))) +
                     " (array shape " + shape_str(v.shape()) + "); give a mask of the indexed axes' shape");
  Shape merged(v.shape().begin(), v.shape().begin() + p);
  merged.push_back(e.size());
  for (size_t d = up + k; d < v.shape().size(); ++d) merged.push_back(v.shape()[d]);
  const Array offsets = element_offsets(v).reshape(merged);
  return gather_flat(offsets, offsets_with_index(offsets, p, flatnonzero(e)));
}

/// `values` cast to `a`'s dtype and broadcast to `shape`, contiguous.
Array values_for(const Array& a, const Array& values, const Shape& shape, const char* op) {
  require_defined(values, op, "the values");
  require_same_device(a, values, op, "the values");
  if (!(broadcast_shapes(values.shape(), shape, op) == shape))
    throw ShapeError(std::string(op) + ": values of shape " + shape_str(values.shape()) +
                     " do not broadcast to the selected shape " + shape_str(shape));
  return broadcast_to(values.astype(a.dtype()), shape).contiguous();
}

}  // namespace

Array detail::advanced_index(const Array& a, const Index* first, const Index* last) {
  detail::reject_grad({&a}, "index with index arrays or masks",
                      "use take(a, indices, axis) for a gather with a gradient");
  const SplitIndex split = split_index(a, first, last, "index");
  return gather_flat(split.view, target_offsets(split, "index"));
}

void detail::advanced_index_put(const Array& a, const Index* first, const Index* last, const Array& values) {
  require_defined(a, "index_put", "the array");
  detail::reject_grad({&values}, "index_put", "build the result out of place (where, concatenate)");
  detail::note_inplace_write(a, "index_put");
  bool advanced = false;
  for (const Index* e = first; e != last; ++e) advanced |= std::holds_alternative<const Array*>(e->value());
  if (!advanced) {
    Array view = basic_index(a, first, last);
    view.assign(values);
    return;
  }
  const SplitIndex split = split_index(a, first, last, "index_put");
  const Array offsets = target_offsets(split, "index_put");
  scatter_flat(a, offsets, values_for(a, values, offsets.shape(), "index_put"));
}

namespace {
/// Storage offsets of the C-order positions `idx` (non-negative int64, checked) of `a`: the positions plus a's
/// offset when it is contiguous; else each position unravelled over a's shape and its coordinates dotted with the
/// strides. A few ops over the positions, never an offset for every element of `a`.
Array storage_offsets(const Array& a, const Array& idx) {
  if (a.is_contiguous()) return a.offset() == 0 ? idx : add(idx, Scalar(a.offset()));
  Array offsets = full_like(idx, Scalar(a.offset())), rest = idx;
  for (int64_t d = a.ndim() - 1; d >= 0; --d) {
    const int64_t extent = a.shape(d);
    if (extent == 1) continue;
    const Array coordinate = d == 0 ? rest : remainder(rest, Scalar(extent));
    offsets = add(offsets, multiply(coordinate, Scalar(a.strides()[static_cast<size_t>(d)])));
    if (d > 0) rest = floor_divide(rest, Scalar(extent));
  }
  return offsets;
}
}  // namespace

Array detail::take_offsets(const Array& a, const Array& indices, std::optional<int64_t> axis) {
  if (axis) {
    const int64_t p = normalize_axis(*axis, a.ndim(), "take");
    return offsets_with_index(a, p, normalize_indices(indices, a.shape(p), "take"));
  }
  return storage_offsets(a, normalize_indices(indices, a.size(), "take"));
}

void detail::scatter_add_flat(const Array& dst, const Array& offsets, const Array& values) {
  if (dst.dtype() != DType::Float32 && dst.dtype() != DType::Float64)
    throw DTypeError("scatter_add: accumulates float32 or float64, got " + std::string(dtype_name(dst.dtype())));
  if (offsets.size() == 0) return;
  if (dst.device().is_cuda()) {
    static const ElementwiseKernel scatter_add(detail::kScatterIn, detail::kScatterOut, detail::kScatterAddOp,
                                               "index_scatter_add");
    scatter_add.call({values, offsets, storage_view(dst)});
    return;
  }
  const Array off = offsets.contiguous(), val = values.astype(dst.dtype()).contiguous();
  auto scatter_add = [dst, off, val] {
    const int64_t* o = off.data<int64_t>();
    auto add = [&]<class T>(T* base) {
      const T* v = val.data<T>();
      for (int64_t i = 0; i < off.size(); ++i) base[o[i]] += v[i];
    };
    if (dst.dtype() == DType::Float32)
      add(static_cast<float*>(dst.storage()->data()));
    else
      add(static_cast<double*>(dst.storage()->data()));
  };
  detail::host_step("scatter_add", {dst, off, val}, scatter_add, scatter_add);
}

namespace {
/// grad (contiguous, float32/float64, shape outer x n x inner around axis p) gets values (shape outer x K x inner,
/// K = idx.size(), idx in [0, n)) added along axis p at the rows idx: take's gradient along an axis. Each element
/// of grad sums its contributions in ascending k on every device, so the CPU's and a GPU's bits agree and repeat
/// from run to run (atomics would add in whatever order the threads arrive), from the K indices rather than an
/// int64 offset per element (an embedding's would be its whole activation).
/// On the CPU: blocks of columns in parallel, each adding the rows in order.
void index_add_rows_cpu(const Array& grad, const Array& idx, const Array& values, int64_t outer, int64_t k,
                        int64_t inner, int64_t n) {
  const Array rows = idx.contiguous(), v = values.contiguous();
  auto add_rows = [grad, rows, v, outer, k, inner, n] {
    constexpr int64_t kColumns = 512;  // a block of a row: 2 KiB of float32
    const int64_t blocks = (inner + kColumns - 1) / kColumns;
    const int64_t* r = rows.data<int64_t>();
    auto run = [&]<class T>(T* g, const T* src) {
      parallel_for(
          outer * blocks,
          [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
              const int64_t o = t / blocks, c0 = (t % blocks) * kColumns, c1 = std::min(inner, c0 + kColumns);
              for (int64_t q = 0; q < k; ++q) {
                T* to = g + (o * n + r[q]) * inner;
                const T* from = src + (o * k + q) * inner;
                for (int64_t c = c0; c < c1; ++c) to[c] += from[c];
              }
            }
          },
          1);
    };
    if (grad.dtype() == DType::Float32)
      run(static_cast<float*>(grad.data_ptr()), v.data<float>());
    else
      run(static_cast<double*>(grad.data_ptr()), v.data<double>());
  };
  detail::host_step("take backward", {grad, rows, v}, add_rows, add_rows);
}

/// The same on a GPU: the indices sorted stably (K of them); the thread of element (o, k, c) whose k starts a run
/// of equal rows sums that run into grad.
void index_add_rows_gpu(const Array& grad, const Array& idx, const Array& values, int64_t outer, int64_t k,
                        int64_t inner, int64_t n) {
  const Array flat = idx.reshape({k});
  const Array order = argsort(flat);
  const Array rows = take(flat, order);
  static const ElementwiseKernel add_rows(detail::kTakeRowsIn, detail::kTakeRowsOut, detail::kTakeRowsOp,
                                          "take_backward_rows");
  add_rows.call({rows, order, values.contiguous(), k, inner, n, grad}, outer * k * inner);
}

/// index_add_rows_cpu or _gpu for grad's device, with grad viewed as (outer, n, inner) around axis p.
void index_add_rows(const Array& grad, int64_t p, const Array& idx, const Array& values) {
  const int64_t k = idx.size();
  if (k == 0 || values.size() == 0) return;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < p; ++d) outer *= grad.shape(d);
  for (int64_t d = p + 1; d < grad.ndim(); ++d) inner *= grad.shape(d);
  if (grad.device().is_cpu())
    index_add_rows_cpu(grad, idx, values, outer, k, inner, grad.shape(p));
  else
    index_add_rows_gpu(grad, idx, values, outer, k, inner, grad.shape(p));
}

/// take(a, indices, axis) of a contiguous CPU array: each index selects a run of the axes after `axis`,
/// copied whole (a batch of 100 images of 784 floats: 100 copies of 3136 bytes). The general path makes an
/// int64 offset per output element and gathers element by element, 10x slower on such rows.
Array take_runs_cpu(const Array& a, const Array& indices, int64_t axis) {
  const int64_t p = normalize_axis(axis, a.ndim(), "take");
  const Array idx = normalize_indices(indices, a.shape(p), "take").contiguous();
  Shape shape;
  for (int64_t d = 0; d < p; ++d) shape.push_back(a.shape(d));
  for (int64_t e : idx.shape()) shape.push_back(e);
  for (int64_t d = p + 1; d < a.ndim(); ++d) shape.push_back(a.shape(d));
  Array out = empty(shape, a.dtype(), a.device());
  int64_t outer = 1, run = itemsize(a.dtype());
  for (int64_t d = 0; d < p; ++d) outer *= a.shape(d);
  for (int64_t d = p + 1; d < a.ndim(); ++d) run *= a.shape(d);
  const int64_t n = a.shape(p), k = idx.size();
  if (outer * k == 0 || run == 0) return out;
  auto copy_runs = [a, idx, out, outer, run, n, k] {
    const auto* src = static_cast<const char*>(a.data_ptr());
    auto* dst = static_cast<char*>(out.data_ptr());
    const int64_t* at = idx.data<int64_t>();
    parallel_for(
        outer * k,
        [&](int64_t begin, int64_t end) {
          for (int64_t t = begin; t < end; ++t)
            std::memcpy(dst + t * run, src + ((t / k) * n + at[t % k]) * run, static_cast<size_t>(run));
        },
        std::max<int64_t>(1, (int64_t{1} << 18) / run));  // about 256 KB a range
  };
  detail::host_step("take", {a, idx, out}, copy_runs, copy_runs);
  return out;
}
}  // namespace

Array take(const Array& a, const Array& indices, std::optional<int64_t> axis) {
  require_defined(a, "take", "the array");
  require_defined(indices, "take", "the index array");
  require_same_device(a, indices, "take", "the index array");
  detail::GradRecorder record({&a});
  if (axis && !record && a.device().is_cpu() && a.is_contiguous()) return take_runs_cpu(a, indices, *axis);
  // Along an axis the gradient is summed row by row (index_add_rows) from the normalised indices.
  const bool by_rows = record && axis;
  const int64_t p = axis ? normalize_axis(*axis, a.ndim(), "take") : 0;
  const Array idx = by_rows ? normalize_indices(indices, a.shape(p), "take") : Array();
  const Array offsets = by_rows ? offsets_with_index(a, p, idx) : detail::take_offsets(a, indices, axis);
  Array out = gather_flat(a, offsets);
  if (record) {
    // A contiguous input: the forward's checked storage offsets, shifted, are the positions in the gradient
    // (no second bounds check, no synchronisation); any other layout: the positions recomputed from the
    // indices for the gradient's layout.
    const bool contiguous = a.is_contiguous();
    // A complex gradient is scattered as its real and imaginary parts.
    auto backward = [contiguous, by_rows, p, base = a.offset(), axis](const detail::Node& node, const Array& g) {
      const DType part = real_dtype(g.dtype());
      const DType acc = part == DType::Float64 ? DType::Float64 : DType::Float32;
      auto scattered = [&](const Array& values) {
        Array grad = zeros(node.inputs[0].shape, acc, g.device());
        if (by_rows) {
          index_add_rows(grad, p, node.saved_array(0), values.astype(acc));
          return grad;
        }
        const Array positions =
            contiguous ? node.saved_array(0) - base : detail::take_offsets(grad, node.saved_array(0), axis);
        detail::scatter_add_flat(grad, positions, values.astype(acc));
        return grad;
      };
      if (is_complex(g.dtype())) return std::vector<Array>{make_complex(scattered(real(g)), scattered(imag(g)))};
      return std::vector<Array>{scattered(g)};
    };
    const Array& saved = by_rows ? idx : contiguous ? offsets : indices;
    detail::record(out,
                   std::make_shared<detail::Node>("TakeBackward", std::move(backward),
                                                  std::vector{detail::SavedArray(saved)}),
                   {&a});
  }
  return out;
}

namespace {
/// Flat C-order positions, in an array of a's shape, that take_along_axis(a, indices, axis) reads (and
/// scatter_add writes), of the broadcast output shape; checks ranks, and bounds (normalize_indices).
Array along_axis_offsets(const Array& a, const Array& indices, int64_t ax, const char* op) {
  require_defined(a, op, "the array");
  require_defined(indices, op, "the index array");
  require_same_device(a, indices, op, "the index array");
  if (indices.ndim() != a.ndim())
    throw ShapeError(std::string(op) + ": the indices have shape " + shape_str(indices.shape()) +
                     " but the array has " + std::to_string(a.ndim()) + " axes (shape " + shape_str(a.shape()) +
                     "); give the indices the array's rank (expand_dims them)");
  // The output's shape: indices and a broadcast on every axis but `ax`, which comes from the indices.
  Shape other_a = a.shape(), other_i = indices.shape();
  other_a[static_cast<size_t>(ax)] = 1;
  other_i[static_cast<size_t>(ax)] = 1;
  Shape shape = broadcast_shapes(other_a, other_i, op);
  shape[static_cast<size_t>(ax)] = indices.shape(ax);
  const Array idx = normalize_indices(indices, a.shape(ax), op);
  // The index on `ax`, the output's coordinate elsewhere.
  const Shape strides = contiguous_strides(a.shape());
  Array flat = idx * strides[static_cast<size_t>(ax)];
  for (int64_t d = 0; d < a.ndim(); ++d) {
    if (d == ax || a.shape(d) == 1) continue;
    Shape column;
    for (int64_t k = 0; k < a.ndim(); ++k) column.push_back(k == d ? shape[static_cast<size_t>(d)] : 1);
    flat = flat +
           arange(shape[static_cast<size_t>(d)], int64, a.device()).reshape(column) * strides[static_cast<size_t>(d)];
  }
  return flat.broadcast_to(shape);
}
}  // namespace

Array take_along_axis(const Array& a, const Array& indices, int64_t axis) {
  require_defined(a, "take_along_axis", "the array");
  const int64_t ax = normalize_axis(axis, a.ndim(), "take_along_axis");
  const Array flat = along_axis_offsets(a, indices, ax, "take_along_axis");
  return take(a.contiguous().reshape({a.size()}), flat);
}

void check_in_range(const Array& values, int64_t lo, int64_t hi, const std::string& message) {
  if (!is_integral(values.dtype()))  // bool excluded
    throw DTypeError("check_in_range: values must be an integer array, got " + std::string(dtype_name(values.dtype())) +
                     "; convert with astype(int64)");
  detail::check_range(values, lo, hi, detail::CheckError::Value, message);
}

Array scatter_add(const Array& a, int64_t axis, const Array& indices, const Array& src) {
  require_defined(a, "scatter_add", "the array");
  require_defined(src, "scatter_add", "the source array");
  require_same_device(a, src, "scatter_add", "the source array");
  if (!is_floating(a.dtype()))
    throw DTypeError("scatter_add: the array must be floating, got " + std::string(dtype_name(a.dtype())) +
                     "; convert it with astype(float32)");
  const int64_t ax = normalize_axis(axis, a.ndim(), "scatter_add");
  if (!(src.shape() == indices.shape()))
    throw ShapeError("scatter_add: src has shape " + shape_str(src.shape()) + " but the indices have shape " +
                     shape_str(indices.shape()) + "; give them the same shape");
  for (int64_t d = 0; d < a.ndim() && d < indices.ndim(); ++d)
    if (d != ax && indices.shape(d) != a.shape(d))
      throw ShapeError("scatter_add: the indices have shape " + shape_str(indices.shape()) +
                       " but the array has shape " + shape_str(a.shape()) + "; they must match on every axis but " +
                       std::to_string(ax));
  detail::GradRecorder record({&a, &src});
  const Array flat = along_axis_offsets(a, indices, ax, "scatter_add");
  const DType acc = a.dtype() == DType::Float64 ? DType::Float64 : DType::Float32;
  Array sums = a.astype(acc).copy();
  if (flat.size() > 0) detail::scatter_add_flat(sums, flat.contiguous(), src.astype(acc).contiguous());
  Array out = sums.dtype() == a.dtype() ? sums : sums.astype(a.dtype());
  if (record) {
    auto backward = [ax](const detail::Node& node, const Array& g) {
      std::vector<Array> r(2);
      if (node.needs(0)) r[0] = g;
      if (node.needs(1)) r[1] = take_along_axis(g, node.saved_array(0), ax);
      return r;
    };
    detail::record(out,
                   std::make_shared<detail::Node>("ScatterAddBackward", std::move(backward),
                                                  std::vector{detail::SavedArray(indices)}),
                   {&a, &src});
  }
  return out;
}

void put(const Array& a, const Array& indices, const Array& values) {
  require_defined(a, "put", "the array");
  detail::reject_grad({&values}, "put", "build the result out of place (where, concatenate)");
  detail::note_inplace_write(a, "put");
  require_defined(indices, "put", "the index array");
  require_same_device(a, indices, "put", "the index array");
  const Array offsets = storage_offsets(a, normalize_indices(indices, a.size(), "put"));
  scatter_flat(a, offsets, values_for(a, values, offsets.shape(), "put"));
}

void put(const Array& a, const Array& indices, const Scalar& value) {
  require_defined(a, "put", "the array");
  put(a, indices, full({}, value, a.dtype(), a.device()));
}

Array flatnonzero(const Array& a) {
  require_defined(a, "flatnonzero", "the array");
  const std::vector<bool> bits = a.to_vector<bool>();
  std::vector<int64_t> where_true;
  for (size_t i = 0; i < bits.size(); ++i)
    if (bits[i]) where_true.push_back(static_cast<int64_t>(i));
  return from_data(where_true, Shape{static_cast<int64_t>(where_true.size())}, a.device());
}

Array isclose(const Array& a, const Array& b, double rtol, double atol, bool equal_nan) {
  require_defined(a, "isclose", "the first array");
  require_defined(b, "isclose", "the second array");
  require_same_device(a, b, "isclose", "the second array");
  DType t = promote_types(a.dtype(), b.dtype());
  if (!is_inexact(t)) t = float64;
  const Array x = a.astype(t), y = b.astype(t);
  Array close = logical_and(logical_and(isfinite(x), isfinite(y)), abs(x - y) <= atol + rtol * abs(y));
  Array result = logical_or(x == y, close);
  if (equal_nan) result = logical_or(result, logical_and(isnan(x), isnan(y)));
  return result;
}

bool allclose(const Array& a, const Array& b, double rtol, double atol, bool equal_nan) {
  return all(isclose(a, b, rtol, atol, equal_nan)).item<bool>();
}

bool array_equal(const Array& a, const Array& b, bool equal_nan) {
  require_defined(a, "array_equal", "the first array");
  require_defined(b, "array_equal", "the second array");
  require_same_device(a, b, "array_equal", "the second array");
  if (!(a.shape() == b.shape())) return false;
  Array same = a == b;
  if (equal_nan && (is_inexact(a.dtype()) || is_inexact(b.dtype())))
    same = logical_or(same, logical_and(isnan(a), isnan(b)));
  return all(same).item<bool>();
}

}  // namespace kiln
