// Array: an n-d view (shape, strides in elements, offset, dtype) of shared
// storage on one device. Copying an Array copies the handle, not the data.
#pragma once

#include <atomic>
#include <concepts>
#include <functional>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/dtype.hpp"
#include "kiln/error.hpp"
#include "kiln/scalar.hpp"
#include "kiln/shape.hpp"
#include "kiln/stream.hpp"

namespace kiln {

/// Options for creating an array's storage.
struct ArrayOptions {
  bool pinned = false;  ///< page-locked host memory (cpu arrays only; needs a CUDA build)
};

/// A block of device or host memory, freed by its deleter when the last Array using it goes away.
class Storage {
 public:
  using Deleter = void (*)(void* context, void* data);
  Storage(void* data, size_t nbytes, Device device, Deleter deleter, void* context, bool pinned = false)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(deleter), context_(context), pinned_(pinned) {}
  ~Storage() { if (deleter_) deleter_(context_, data_); }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }
  void* context() const { return context_; }
  /// Bumped by every in-place write into the storage; autograd compares it with the value it saw when it
  /// saved an array for backward.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
  void* data_;
  size_t nbytes_;
  Device device_;
  Deleter deleter_;
  void* context_;
  bool pinned_;
};

/// Options for moving an array between devices.
struct TransferOptions {
  /// Return before the copy completes (pinned host memory or device-to-device only; pageable host
  /// memory is always copied synchronously). Synchronise the stream before reading the result on the host.
  bool non_blocking = false;
};

/// One axis of a basic index: start:stop:step with Python semantics (negative values count from the end).
struct Slice {
  std::optional<int64_t> start, stop;
  int64_t step = 1;
  Slice() = default;
  Slice(std::optional<int64_t> start_, std::optional<int64_t> stop_, int64_t step_ = 1)
      : start(start_), stop(stop_), step(step_) {}
};
struct NewAxis {};
struct Ellipsis {};
inline constexpr NewAxis newaxis{};
inline constexpr Ellipsis ellipsis{};

class Array;
namespace detail {
struct AutogradMeta;
}

/// One entry of an index: an integer (drops the axis), a Slice, newaxis, ellipsis, or an Array: a bool
/// mask over the next mask.ndim() axes, or an integer index array (NumPy's advanced indexing; see indexing.hpp).
/// An Array entry is held by address: use the Index only within the expression that builds it.
class Index {
 public:
  Index(const Array& a) : v_(&a) {}  // NOLINT
  Index(int64_t i) : v_(i) {}  // NOLINT
  Index(int i) : v_(static_cast<int64_t>(i)) {}  // NOLINT
  Index(Slice s) : v_(s) {}  // NOLINT
  Index(NewAxis n) : v_(n) {}  // NOLINT
  Index(Ellipsis e) : v_(e) {}  // NOLINT
  const std::variant<int64_t, Slice, NewAxis, Ellipsis, const Array*>& value() const { return v_; }

 private:
  std::variant<int64_t, Slice, NewAxis, Ellipsis, const Array*> v_;
};

/// Which axes a reduction covers: all of them (the default), one, or a list.
class Axes {
 public:
  Axes() = default;
  Axes(int64_t axis) : all_(false), list_{axis} {}  // NOLINT
  Axes(int axis) : all_(false), list_{axis} {}  // NOLINT
  Axes(std::initializer_list<int64_t> axes) : all_(false), list_(axes) {}
  Axes(const std::vector<int64_t>& axes) : all_(false), list_(axes) {}  // NOLINT
  Axes(const Shape& axes) : all_(false), list_(axes) {}  // NOLINT
  bool all() const { return all_; }
  const Shape& list() const { return list_; }

 private:
  bool all_ = true;
  Shape list_;
};

class Array {
 public:
  /// An empty handle (no storage); most operations on it throw.
  Array() = default;
  /// A view of `storage` (internal; use the creation functions).
  Array(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype);
  Array(const Array&) = default;
  Array(Array&&) noexcept = default;
  ~Array() = default;
  /// `a = b` on a named array rebinds the handle (no data copied), like `Array a = b;`.
  Array& operator=(const Array&) & = default;
  Array& operator=(Array&&) & noexcept = default;
  /// Assignment to a temporary view writes through, as LibTorch's Tensor::operator=(...) &&:
  /// `x[0] = ones({3});` is `x[0].assign(ones({3}))` (broadcast, cast; same device).
  Array& operator=(const Array& src) && { return assign(src); }
  /// `x[0] = 1.5;` fills the view: `x[0].fill(1.5)`.
  Array& operator=(const Scalar& v) && { return fill(v); }

  const Shape& shape() const { return shape_; }
  int64_t shape(int64_t axis) const;
  /// Strides in elements (not bytes).
  const Shape& strides() const { return strides_; }
  int64_t offset() const { return offset_; }
  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size() const { return size_; }
  int64_t nbytes() const { return size_ * itemsize(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  bool defined() const { return storage_ != nullptr; }
  bool is_contiguous() const;
  /// True for page-locked host memory.
  bool is_pinned() const;
  /// Address of the first element (device memory for GPU arrays).
  void* data_ptr() const;
  template <class T> T* data() const { return static_cast<T*>(data_ptr()); }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  /// True when both arrays view the same storage.
  bool shares_storage(const Array& o) const { return storage_ && storage_ == o.storage_; }

  /// The single element as T (any size-1 array). Synchronises and copies for GPU arrays.
  template <class T> T item() const;
  /// All elements in C order, converted to T. Synchronises and copies for GPU arrays.
  template <class T> std::vector<T> to_vector() const;
  /// The single element as a Scalar of the array's kind.
  Scalar item_scalar() const;

  // Views and shape ops (see ops.hpp for the free-function forms).
  Array reshape(const Shape& s) const;
  /// NumPy's `x.reshape(-1)`, `x.reshape(2, -1)`: extents as arguments (one may be -1).
  template <std::integral... I>
    requires(sizeof...(I) > 0)
  Array reshape(I... extents) const {
    return reshape(Shape{static_cast<int64_t>(extents)...});
  }
  Array transpose() const;
  Array permute(const Shape& axes) const;
  Array T() const { return transpose(); }
  Array squeeze(Axes axes = {}) const;
  Array expand_dims(int64_t axis) const;
  Array broadcast_to(const Shape& s) const;
  Array flatten() const;
  /// Basic indexing like NumPy's a[1:5, ::2, 3, newaxis, ...]; returns a view. With Array entries (bool masks or
  /// integer index arrays: x.index({x > 2}), x.index({Slice(), idx}), x.index({i, j}) with i, j broadcast
  /// together) it returns a copy, as NumPy; that form synchronises (bounds check, mask count).
  /// Throws ShapeError/DTypeError/DeviceError.
  Array index(std::initializer_list<Index> idx) const;
  /// Writes `values` (broadcast, cast) where index(idx) reads: x.index_put({x > 2}, 0.0), x.index_put({idx}, v).
  /// Returns *this. Duplicate integer indices: one of the writes wins (unspecified which on a GPU).
  Array& index_put(std::initializer_list<Index> idx, const Array& values);
  Array& index_put(std::initializer_list<Index> idx, const Scalar& value);
  Array operator[](int64_t i) const { return index({i}); }
  /// A view of elements start:stop:step along one axis.
  Array slice(int64_t axis, std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step = 1) const;
  /// C-contiguous: returns *this when already contiguous, else a copy.
  Array contiguous() const;
  /// A new array with its own storage on the same device.
  Array copy() const;
  /// This array converted to `t` (a copy; returns *this when t == dtype()).
  Array astype(DType t) const;
  /// astype(parse_dtype(name)): `x.astype("float64")`; throws DTypeError for an unknown name.
  Array astype(std::string_view dtype) const;
  /// This array on `d`: returns *this when already there (same storage), else a copy made on the
  /// current stream of the GPU side. Copies to the host synchronise unless non_blocking.
  Array to(Device d, TransferOptions options = {}) const;
  /// As to(d), ordered on `stream` (a stream of the source or destination GPU).
  Array to(Device d, const Stream& stream, TransferOptions options = {}) const;
  /// to(parse_device(name)): `x.to("cuda:0")`, `x.to("cpu")`; throws ValueError for a bad name.
  Array to(const std::string& device, TransferOptions options = {}) const;
  /// A copy of this host array in page-locked (pinned) memory; *this when already pinned. Needs a CUDA build.
  Array pin_memory() const;
  /// Tells the allocator that `stream` uses this array's memory, so it is not reused before the
  /// stream's queued work is done (needed when an array made on one stream is used on another).
  void record_stream(const Stream& stream) const;

  /// Writes `src` (broadcast, any cast) into this array or view, in place; same device only.
  Array& assign(const Array& src);
  /// Copies `src` (same shape and dtype, any device) into this array: the explicit cross-device copy into an
  /// existing buffer (like torch's copy_). Synchronous unless non_blocking (pinned host memory or GPU to GPU).
  Array& copy_from(const Array& src, TransferOptions options = {});
  /// Sets every element to `v` in place.
  Array& fill(const Scalar& v);

  // Reductions (free forms in ops.hpp).
  Array sum(Axes axes = {}, bool keepdims = false) const;
  Array mean(Axes axes = {}, bool keepdims = false) const;
  Array max(Axes axes = {}, bool keepdims = false) const;
  Array min(Axes axes = {}, bool keepdims = false) const;
  Array prod(Axes axes = {}, bool keepdims = false) const;
  /// Variance / standard deviation with `ddof` (member forms avoid `std(x)` clashing with namespace std).
  Array var(Axes axes = {}, int64_t ddof = 0, bool keepdims = false) const;
  Array std(Axes axes = {}, int64_t ddof = 0, bool keepdims = false) const;
  /// Index (int64) of the first maximum / minimum along `axis`, or in the flattened array.
  Array argmax(std::optional<int64_t> axis = {}, bool keepdims = false) const;
  Array argmin(std::optional<int64_t> axis = {}, bool keepdims = false) const;
  /// True where all / any element is nonzero (bool result).
  Array all(Axes axes = {}, bool keepdims = false) const;
  Array any(Axes axes = {}, bool keepdims = false) const;

  /// NumPy-style text: array([...], dtype=...). Synchronises and copies for GPU arrays.
  std::string str() const;

  // Autograd (kiln/autograd.hpp has the guide). The handle and its copies share these settings.
  /// True for a leaf marked with set_requires_grad() and for results recorded from such arrays.
  bool requires_grad() const;
  /// Marks this array (a leaf: an array no recorded op made) as needing a gradient; floating and complex dtypes
  /// only (DTypeError otherwise). Returns *this. set_requires_grad(false) on a recorded result throws: use detach().
  Array& set_requires_grad(bool enabled = true);
  /// The gradient accumulated by backward() (leaves, and results that retain_grad()); undefined before.
  Array grad() const;
  /// Replaces the accumulated gradient (an undefined Array clears it, as optimizer.zero_grad does).
  void set_grad(const Array& grad);
  /// Computes the gradient of this array with respect to every leaf it was computed from and adds it to
  /// each leaf's grad(). A real size-1 array needs no `gradient` (1 is used); otherwise pass the gradient of
  /// some scalar with respect to this array (same shape). The graph's saved arrays are freed afterwards
  /// unless `retain_graph`.
  /// backward(Array(), true) keeps the graph for another backward.
  void backward() const;
  void backward(const Array& gradient, bool retain_graph = false) const;
  /// The same data (same storage), cut from the graph: requires no grad.
  Array detach() const;
  /// True unless a recorded op made this array.
  bool is_leaf() const;
  /// Keeps the gradient of this recorded result in grad() during backward (leaves always keep theirs).
  Array& retain_grad();
  /// Calls `hook(gradient)` when this array's gradient is computed, before it is used or accumulated; a
  /// defined return value replaces the gradient.
  void register_hook(std::function<Array(const Array&)> hook);
  /// For a leaf: calls `hook(leaf)` after backward has added to leaf.grad() (data-parallel gradient buckets).
  void register_post_accumulate_grad_hook(std::function<void(const Array&)> hook);
  /// The name of the op that made this array ("MultiplyBackward", ...), empty for a leaf.
  std::string grad_fn_name() const;
  /// Internal: the autograd state of this handle (null until autograd touches it).
  const std::shared_ptr<detail::AutogradMeta>& autograd_meta() const { return autograd_; }
  void set_autograd_meta(std::shared_ptr<detail::AutogradMeta> meta) { autograd_ = std::move(meta); }

  // Compound assignment writes in place (result cast to this array's dtype, same_kind).
  Array& operator+=(const Array& o);
  Array& operator-=(const Array& o);
  Array& operator*=(const Array& o);
  Array& operator/=(const Array& o);
  Array& operator+=(const Scalar& o);
  Array& operator-=(const Scalar& o);
  Array& operator*=(const Scalar& o);
  Array& operator/=(const Scalar& o);

 private:
  void require_defined(const char* op) const;
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;
  int64_t size_ = 0;
  DType dtype_ = DType::Float32;
  std::shared_ptr<detail::AutogradMeta> autograd_;
};

}  // namespace kiln

namespace kiln {
namespace detail {
/// Copies all elements of `a`, converted to `as`, into host memory at `dst` (C order); `op` names the
/// caller in sync debugging reports (kiln/debug.hpp).
void read_elements(const Array& a, DType as, void* dst, const char* op);
template <class T> std::vector<T> read_vector(const Array& a, const char* op) {
  if constexpr (std::is_same_v<T, bool>) {
    std::vector<uint8_t> tmp(static_cast<size_t>(a.size()));
    read_elements(a, DType::Bool, tmp.data(), op);
    return std::vector<bool>(tmp.begin(), tmp.end());
  } else {
    std::vector<T> out(static_cast<size_t>(a.size()));
    read_elements(a, dtype_of<T>(), out.data(), op);
    return out;
  }
}
}  // namespace detail

template <class T> std::vector<T> Array::to_vector() const {
  require_defined("to_vector");
  return detail::read_vector<T>(*this, "to_vector()");
}

template <class T> T Array::item() const {
  require_defined("item");
  if (size_ != 1)
    throw ValueError("item: only a size-1 array converts to a scalar, got shape " + shape_str(shape_) +
                     "; index or reduce it first");
  return detail::read_vector<T>(*this, "item()")[0];
}
}  // namespace kiln
