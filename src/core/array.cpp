// Array: construction, accessors, copies, conversions, device moves and
// in-place assignment. Views and shape ops live in shape_ops.cpp, reductions in
// reduce.cpp, printing in print.cpp.
#include "kiln/array.hpp"

#include <cstring>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "core/device_runtime.hpp"
#include "core/elementwise.hpp"
#include "core/step_trace.hpp"
#include "core/sync_debug.hpp"
#include "kiln/ops.hpp"
#include "kiln/stream.hpp"

namespace kiln {

Array::Array(std::shared_ptr<Storage> storage, Shape shape, Shape strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      size_(shape_numel(shape_)),
      dtype_(dtype) {}

void Array::require_defined(const char* op) const {
  if (!storage_)
    throw ValueError(std::string(op) + ": the array is undefined (default-constructed); create it with empty/zeros/...");
}

int64_t Array::shape(int64_t axis) const { return shape_[normalize_axis(axis, ndim(), "shape")]; }

Device Array::device() const { return storage_ ? storage_->device() : cpu(); }

bool Array::is_pinned() const { return storage_ && storage_->pinned(); }

void* Array::data_ptr() const {
  require_defined("data_ptr");
  return static_cast<char*>(storage_->data()) + offset_ * itemsize(dtype_);
}

bool Array::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (shape_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

namespace {
/// Records `out`, a copy of `in` in another dtype, device or memory: its gradient is the result's, which the
/// engine converts back to `in`'s dtype and device.
void record_convert(const Array& in, Array& out, const char* name) {
  auto pass = [](const detail::Node&, const Array& g) { return std::vector<Array>{g}; };
  detail::record(out, std::make_shared<detail::Node>(name, pass), {&in});
}
}  // namespace

Array Array::contiguous() const {
  require_defined("contiguous");
  return is_contiguous() ? *this : copy();
}

Array Array::copy() const {
  require_defined("copy");
  detail::GradRecorder record({this});
  Array out = detail::make_array(shape_, dtype_, device());
  detail::copy_into(*this, out, "copy");
  if (record) record_convert(*this, out, "CopyBackward");
  return out;
}

Array Array::astype(DType t) const {
  require_defined("astype");
  if (t == dtype_) return *this;
  detail::GradRecorder record({this});
  Array out = detail::make_array_following(shape_, t, device(), {this});
  detail::copy_into(*this, out, "astype");
  if (record) record_convert(*this, out, "AstypeBackward");
  return out;
}

Array Array::astype(std::string_view dtype) const { return astype(parse_dtype(dtype)); }

namespace {
Array transfer_to(const Array& a, Device d, const Stream* stream, TransferOptions options) {
  detail::GradRecorder record({&a});
  if (d.is_cuda()) detail::require_gpu(d.index, "to(" + d.str() + ")");  // names the missing GPU, not gpu()
  if (stream && stream->device() != d && stream->device() != a.device())
    throw DeviceError("to: the stream is on " + stream->device().str() + " but the copy goes from " +
                      a.device().str() + " to " + d.str() + "; pass a stream of either device");
  Array src = a.contiguous();
  Array out = detail::make_array(a.shape(), a.dtype(), d);
  detail::DeviceRuntime& r = d.is_cuda() ? detail::runtime_for(d) : detail::runtime_for(src.device());
  // A CPU stream orders nothing on a GPU: the copy then runs on the GPU side's current stream. A traced step's
  // replay copies on the current stream.
  const Stream* on = stream && stream->device().is_cuda() ? stream : nullptr;
  detail::host_step(
      "to", {src, out}, [&] { r.transfer(src, out, on, options.non_blocking); },
      [&r, src, out, options] { r.transfer(src, out, nullptr, options.non_blocking); });
  if (record) record_convert(a, out, "ToBackward");
  return out;
}
}  // namespace

Array Array::to(Device d, TransferOptions options) const {
  require_defined("to");
  if (d == device()) return *this;
  return transfer_to(*this, d, nullptr, options);
}

Array Array::to(Device d, const Stream& stream, TransferOptions options) const {
  require_defined("to");
  if (d == device()) return *this;
  return transfer_to(*this, d, &stream, options);
}

Array Array::to(const std::string& device, TransferOptions options) const {
  return to(parse_device(device), options);
}

Array Array::pin_memory() const {
  require_defined("pin_memory");
  if (!device().is_cpu())
    throw DeviceError("pin_memory: the array is on " + device().str() + "; only host arrays can be pinned");
  if (is_pinned()) return *this;
  detail::GradRecorder record({this});
  Array out = detail::make_array(shape_, dtype_, cpu(), ArrayOptions{.pinned = true});
  out.assign(*this);
  if (record) record_convert(*this, out, "PinMemoryBackward");
  return out;
}

void Array::record_stream(const Stream& stream) const {
  require_defined("record_stream");
  if (stream.device() != device())
    throw DeviceError("record_stream: the array is on " + device().str() + " but the stream is on " +
                      stream.device().str() + "; record a stream of the array's device");
  detail::runtime_for(device()).record_stream(*this, stream.handle());
}

Array& Array::assign(const Array& src) {
  require_defined("assign");
  detail::reject_grad({&src}, "assign (writing an array into another in place)",
                      "build the result out of place (where, concatenate, stack)");
  detail::note_inplace_write(*this, "assign");  // copy()/astype() write fresh arrays: only assign writes in place
  detail::copy_into(src, *this, "assign");
  return *this;
}

Array& Array::copy_from(const Array& src, TransferOptions options) {
  require_defined("copy_from");
  if (!src.defined()) throw ValueError("copy_from: the source is an undefined Array");
  detail::reject_grad({&src}, "copy_from", "use src.to(device) for a copy that carries gradients");
  if (src.device() == device()) return assign(src);
  if (!(src.shape() == shape_) || src.dtype() != dtype_)
    throw ShapeError("copy_from: copying between devices needs the same shape and dtype, got " +
                     shape_str(src.shape()) + " " + std::string(dtype_name(src.dtype())) + " on " +
                     src.device().str() + " into " + shape_str(shape_) + " " + std::string(dtype_name(dtype_)) +
                     " on " + device().str() + "; convert with astype/reshape on one device first");
  detail::note_inplace_write(*this, "copy_from");
  detail::SyncOpScope scope("copy_from()");
  Array source = src.detach().contiguous();
  if (is_contiguous()) {
    detail::DeviceRuntime& r = device().is_cuda() ? detail::runtime_for(device()) : detail::runtime_for(src.device());
    auto copy = [&r, source, dst = *this, options] { r.transfer(source, dst, nullptr, options.non_blocking); };
    detail::host_step("copy_from", {source, *this}, copy, copy);
  } else {
    assign(source.to(device()));
  }
  return *this;
}

Array& Array::fill(const Scalar& v) {
  require_defined("fill");
  detail::fill_into(*this, v);
  return *this;
}

Scalar Array::item_scalar() const {
  if (dtype_ == DType::Bool) return Scalar(item<bool>());
  if (is_complex(dtype_)) return Scalar(item<complex128_t>());
  if (is_floating(dtype_)) return Scalar(item<double>());
  return Scalar(item<int64_t>());
}

Array& Array::operator+=(const Array& o) { add(*this, o, *this); return *this; }
Array& Array::operator-=(const Array& o) { subtract(*this, o, *this); return *this; }
Array& Array::operator*=(const Array& o) { multiply(*this, o, *this); return *this; }
Array& Array::operator/=(const Array& o) { divide(*this, o, *this); return *this; }
Array& Array::operator+=(const Scalar& o) { add(*this, o, *this); return *this; }
Array& Array::operator-=(const Scalar& o) { subtract(*this, o, *this); return *this; }
Array& Array::operator*=(const Scalar& o) { multiply(*this, o, *this); return *this; }
Array& Array::operator/=(const Scalar& o) { divide(*this, o, *this); return *this; }

namespace detail {
void read_elements(const Array& a, DType as, void* dst, const char* op) {
  refuse_host_read_while_tracing(op);
  SyncOpScope scope(op);
  // Complex arrays (or reads as complex) move first and convert on the CPU, whose casts the GPU's mirror; others
  // convert where they live.
  Array host = is_complex(a.dtype()) || is_complex(as) ? a.detach().to(cpu()).astype(as).contiguous()
                                                       : a.detach().astype(as).to(cpu()).contiguous();
  if (host.size() > 0) std::memcpy(dst, host.data_ptr(), static_cast<size_t>(host.nbytes()));
}
}  // namespace detail

}  // namespace kiln

namespace kiln {
Array contiguous(const Array& a) { return a.contiguous(); }
Array copy(const Array& a) { return a.copy(); }
Array astype(const Array& a, DType dtype) { return a.astype(dtype); }
}  // namespace kiln
