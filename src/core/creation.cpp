// Creation functions: empty/zeros/ones/full, arange/linspace/eye, *_like,
// from_data and 0-d scalar arrays. All allocate through the device's backend.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <limits>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "core/elementwise.hpp"
#include "core/step_trace.hpp"
#include "kiln/ops.hpp"

namespace kiln {

namespace {
Device pick(std::optional<Device> d) { return d ? *d : current_device(); }

DType default_dtype_for(const Scalar& v) {
  switch (v.kind()) {
    case Scalar::Kind::Bool: return DType::Bool;
    case Scalar::Kind::Int: return DType::Int64;
    case Scalar::Kind::Float: return DType::Float32;
    case Scalar::Kind::Complex: return DType::Complex64;  // float32's complex, as PyTorch
  }
  return DType::Float32;
}

Array sequence(detail::OpCode op, int64_t n, DType dtype, Device device, const Scalar& start, const Scalar& step,
               bool endpoint = false, double stop = 0.0) {
  Array out = detail::make_array(Shape{n}, dtype, device);
  if (n == 0) return out;
  detail::ElementwiseCall call;
  call.op = op;
  call.compute = dtype;
  call.out = out;
  call.params = {start, step, Scalar(endpoint), Scalar(stop)};
  detail::backend_for(device).elementwise(call);
  return out;
}
}  // namespace

Array empty(const Shape& shape, DType dtype, std::optional<Device> device, ArrayOptions options) {
  return detail::make_array(shape, dtype, pick(device), options);
}

Array zeros(const Shape& shape, DType dtype, std::optional<Device> device, ArrayOptions options) {
  return full(shape, 0, dtype, device, options);
}

Array ones(const Shape& shape, DType dtype, std::optional<Device> device, ArrayOptions options) {
  return full(shape, 1, dtype, device, options);
}

Array full(const Shape& shape, const Scalar& value, std::optional<DType> dtype, std::optional<Device> device,
           ArrayOptions options) {
  Array out = detail::make_array(shape, dtype ? *dtype : default_dtype_for(value), pick(device), options);
  detail::fill_into(out, value);
  return out;
}

Array arange(const Scalar& stop, std::optional<DType> dtype, std::optional<Device> device) {
  return arange(Scalar(0), stop, Scalar(1), dtype, device);
}

Array arange(const Scalar& start, const Scalar& stop, const Scalar& step, std::optional<DType> dtype,
             std::optional<Device> device) {
  bool floating = start.is_floating() || stop.is_floating() || step.is_floating();
  DType t = dtype ? *dtype : floating ? DType::Float32 : DType::Int64;
  int64_t n;
  if (floating) {
    double s = step.to_double();
    if (s == 0.0 || !std::isfinite(s))
      throw ValueError("arange: step must be finite and non-zero, got " + step.str());
    double len = std::ceil((stop.to_double() - start.to_double()) / s);
    if (!std::isfinite(len)) throw ValueError("arange: start and stop must be finite");
    n = len > 0 ? static_cast<int64_t>(len) : 0;
  } else {
    int64_t s = step.to_int64(), a = start.to_int64(), b = stop.to_int64();
    if (s == 0) throw ValueError("arange: step must be non-zero");
    // ceil((b - a) / s) in unsigned arithmetic: the span and the step's magnitude fit in 64 bits without a sign
    // (arange(2, step=2**63 - 1) has one element; (span + s - 1) / s would overflow).
    if (a == b || (b > a) != (s > 0)) {
      n = 0;
    } else {
      const uint64_t span = b > a ? static_cast<uint64_t>(b) - static_cast<uint64_t>(a)
                                  : static_cast<uint64_t>(a) - static_cast<uint64_t>(b);
      const uint64_t magnitude = s > 0 ? static_cast<uint64_t>(s) : uint64_t{0} - static_cast<uint64_t>(s);
      const uint64_t count = (span - 1) / magnitude + 1;
      if (count > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        throw ValueError("arange: " + std::to_string(count) + " elements exceed an array's size; use a larger step");
      n = static_cast<int64_t>(count);
    }
  }
  return sequence(detail::OpCode::Arange, n, t, pick(device), start, step);
}

Array linspace(double start, double stop, int64_t num, bool endpoint, DType dtype, std::optional<Device> device) {
  if (num < 0) throw ValueError("linspace: num must be >= 0, got " + std::to_string(num));
  int64_t div = endpoint ? num - 1 : num;
  double step = div > 0 ? (stop - start) / static_cast<double>(div) : 0.0;
  return sequence(detail::OpCode::Linspace, num, dtype, pick(device), Scalar(start), Scalar(step), endpoint, stop);
}

Array eye(int64_t n, std::optional<int64_t> m, int64_t k, DType dtype, std::optional<Device> device) {
  int64_t cols = m ? *m : n;
  if (n < 0 || cols < 0) throw ValueError("eye: sizes must be >= 0, got " + std::to_string(n) + "x" + std::to_string(cols));
  Array out = zeros({n, cols}, dtype, device);
  // The diagonal k is a strided view: start at (max(-k,0), max(k,0)), step cols + 1.
  int64_t row0 = k < 0 ? -k : 0, col0 = k > 0 ? k : 0;
  int64_t len = std::max<int64_t>(0, std::min(n - row0, cols - col0));
  if (len > 0) {
    Array diag(out.storage(), Shape{len}, Shape{cols + 1}, row0 * cols + col0, dtype);
    detail::fill_into(diag, 1);
  }
  return out;
}

namespace {
/// A new array of a's shape laid out in a's memory order (NumPy's order='K', torch's preserve_format): the axes
/// ranked by a's strides (largest first; negative strides by magnitude), then packed densely in that order, so a
/// dense permuted input (channels-last, a transpose) gives the same strides. Size-1 axes keep their place.
Array empty_following(const Array& a, DType dtype, Device device) {
  const int64_t n = a.ndim();
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t d = 0; d < n; ++d) order[static_cast<size_t>(d)] = d;
  const auto magnitude = [&](int64_t d) {
    const int64_t s = a.strides()[d];
    return s < 0 ? -s : s;
  };
  // Only axes of more than one element are ranked; size-1 axes keep their positions.
  std::vector<int64_t> moving;
  for (int64_t d = 0; d < n; ++d)
    if (a.shape()[d] != 1) moving.push_back(d);
  std::vector<int64_t> ranked = moving;
  std::stable_sort(ranked.begin(), ranked.end(), [&](int64_t x, int64_t y) { return magnitude(x) > magnitude(y); });
  for (size_t i = 0; i < moving.size(); ++i) order[static_cast<size_t>(moving[i])] = ranked[i];
  bool c_order = true;
  for (int64_t d = 0; d < n; ++d) c_order = c_order && order[static_cast<size_t>(d)] == d;
  if (c_order) return detail::make_array(a.shape(), dtype, device);
  Shape memory_shape, inverse(static_cast<size_t>(n), 0);
  for (int64_t d = 0; d < n; ++d) {
    memory_shape.push_back(a.shape()[order[static_cast<size_t>(d)]]);
    inverse[static_cast<size_t>(order[static_cast<size_t>(d)])] = d;
  }
  return detail::make_array(memory_shape, dtype, device).permute(inverse);
}
}  // namespace

Array empty_like(const Array& a, std::optional<DType> dtype, std::optional<Device> device) {
  return empty_following(a, dtype ? *dtype : a.dtype(), device ? *device : a.device());
}
Array zeros_like(const Array& a, std::optional<DType> dtype, std::optional<Device> device) {
  Array out = empty_like(a, dtype, device);
  detail::fill_into(out, 0);
  return out;
}
Array ones_like(const Array& a, std::optional<DType> dtype, std::optional<Device> device) {
  Array out = empty_like(a, dtype, device);
  detail::fill_into(out, 1);
  return out;
}
Array full_like(const Array& a, const Scalar& value, std::optional<DType> dtype, std::optional<Device> device) {
  Array out = empty_like(a, dtype, device);
  detail::fill_into(out, value);
  return out;
}

Array from_data(const void* data, const Shape& shape, DType dtype, std::optional<Device> device) {
  Array host = detail::make_array(shape, dtype, cpu());
  if (host.nbytes() > 0) {
    if (!data) throw ValueError("from_data: data is null but shape " + shape_str(shape) + " is not empty");
    std::memcpy(host.data_ptr(), data, static_cast<size_t>(host.nbytes()));
    if (detail::active_step_trace()) {
      // A traced step copies these bytes again at each replay; a digest in the name makes a second trace that
      // copied other bytes (a batch read on the host inside the step) differ from the first.
      auto bytes = std::make_shared<std::string>(static_cast<const char*>(data), static_cast<size_t>(host.nbytes()));
      const std::string op = "from_data #" + std::to_string(std::hash<std::string>{}(*bytes));
      detail::host_step(op, {host}, [] {}, [host, bytes] {
        std::memcpy(host.data_ptr(), bytes->data(), bytes->size());
      });
    }
  }
  return host.to(pick(device));
}

Array scalar_array(const Scalar& value, std::optional<DType> dtype, std::optional<Device> device) {
  return full(Shape{}, value, dtype ? *dtype : value.default_dtype(), device);
}

}  // namespace kiln
