// kiln::fft's front-end (kiln/fft.hpp): NumPy's argument rules (n / s, axes, norm), the dtype rules, padding and
// cropping, and the decomposition of each function into the backend's three transforms (core/backend.hpp's
// FftCall: multi-axis complex, one-axis real-to-complex and complex-to-real), in NumPy's order, so a repeated
// axis and the real transforms' halved axis behave as numpy.fft. Complex arrays are padded, copied and scaled
// through a real view of their (real, imaginary) pairs, so the same code runs on a GPU, whose elementwise kernels
// take no complex dtype.
#include "kiln/fft.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "kiln/complex.hpp"
#include "kiln/autograd.hpp"
#include "kiln/error.hpp"
#include "kiln/numpy_extra.hpp"
#include "kiln/ops.hpp"

namespace kiln::fft {
namespace {

using detail::FftCall;
using detail::FftKind;

enum class Norm { Backward, Ortho, Forward };

Norm parse_norm(const std::optional<std::string>& norm, const char* op) {
  if (!norm || *norm == "backward") return Norm::Backward;
  if (*norm == "ortho") return Norm::Ortho;
  if (*norm == "forward") return Norm::Forward;
  throw ValueError(std::string(op) + ": norm \"" + *norm +
                   "\" is not one of \"backward\", \"ortho\" or \"forward\"; pass one of them or leave it unset");
}

/// hfft and ihfft are irfft and rfft with the normalisation's direction swapped, as NumPy defines them.
Norm swapped(Norm n) { return n == Norm::Backward ? Norm::Forward : n == Norm::Forward ? Norm::Backward : n; }

/// The factor of a transform over `points` points in all: 1/n on the scaled side, 1/sqrt(n) for "ortho".
double scale_of(Norm norm, bool forward, double points) {
  if (norm == Norm::Ortho) return 1.0 / std::sqrt(points);
  return (norm == Norm::Forward) == forward ? 1.0 / points : 1.0;
}

void require_input(const Array& a, const char* op) {
  if (!a.defined())
    throw ValueError(std::string(op) + ": the array is undefined (default-constructed); create it first");
}

/// NumPy 2's result types: complex stays, float32 (and the 16-bit floats) -> complex64, everything else
/// (float64, integers, bool) -> complex128.
DType complex_type(DType t) {
  if (is_complex(t)) return t;
  return t == DType::Float32 || t == DType::Float16 || t == DType::BFloat16 ? DType::Complex64 : DType::Complex128;
}
DType real_type(DType t) { return real_dtype(complex_type(t)); }

/// A complex array as a real one with a trailing axis of 2 (real, imaginary): the same storage.
Array pairs(const Array& c) {
  Shape shape = c.shape();
  Shape strides = c.strides();
  for (int64_t& s : strides) s *= 2;
  shape.push_back(2);
  strides.push_back(1);
  return Array(c.storage(), shape, strides, c.offset() * 2, real_dtype(c.dtype()));
}
/// The real view that copies and fills of `a` go through (pairs for complex arrays, `a` itself otherwise).
Array as_real(const Array& a) { return is_complex(a.dtype()) ? pairs(a) : a; }

/// A new C-contiguous array of `a`'s shape with `a`'s values converted to `type` (complex or real).
Array converted(const Array& a, DType type) {
  Array out = detail::make_array(a.shape(), type, a.device());
  if (out.size() == 0) return out;
  if (is_complex(type) && !is_complex(a.dtype())) {
    Array re = real(out);
    Array im = imag(out);
    re.assign(a);
    im.fill(0.0);
  } else {
    Array view = as_real(out);
    view.assign(as_real(a));
  }
  return out;
}

/// The complex conjugate of complex `z` as a new array, negated through its imaginary view (any device).
Array conjugated(const Array& z) {
  Array out = converted(z, z.dtype());
  const Array im = imag(out);
  negative(im, im);  // the same view in and out: an exact in-place update
  return out;
}

/// `a` in `type`: itself when it already is.
Array as_type(const Array& a, DType type) { return a.dtype() == type ? a : converted(a, type); }

/// `a` cropped (a view) or padded with zeros (a new array) to length n along `axis`.
Array resized(const Array& a, int64_t axis, int64_t n) {
  const int64_t m = a.shape(axis);
  if (m == n) return a;
  if (n < m) return a.slice(axis, 0, n);
  Shape shape = a.shape();
  shape[static_cast<size_t>(axis)] = n;
  Array out = detail::make_array(shape, a.dtype(), a.device());
  Array all = as_real(out);
  all.fill(0.0);
  if (m > 0) {
    Array head = as_real(out).slice(axis, 0, m);
    head.assign(as_real(a));
  }
  return out;
}

int64_t normalized_axis(int64_t axis, const Array& a, const char* op) {
  const int64_t ndim = a.ndim();
  if (axis < -ndim || axis >= ndim)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " is out of bounds for an array of shape " +
                     shape_str(a.shape()) +
                     (ndim == 0 ? "; a 0-d array has no axis to transform, reshape it to (1,)"
                                : "; pick one in [" + std::to_string(-ndim) + ", " + std::to_string(ndim) + ")"));
  return axis < 0 ? axis + ndim : axis;
}

void require_points(int64_t n, const char* op, const std::string& what) {
  if (n < 1)
    throw ValueError(std::string(op) + ": " + what + " gives " + std::to_string(n) +
                     " points to transform; it must be at least 1");
}

/// Runs one backend transform into a new array; the backend's layout refusal takes the canonical path
/// (transformed axes last, C-contiguous, at most three at a time).
Array run(FftKind kind, bool forward, const Array& in, const std::vector<int64_t>& axes, int64_t out_length) {
  Shape out_shape = in.shape();
  DType out_type = in.dtype();
  if (kind == FftKind::R2C) {
    out_type = complex_type(in.dtype());
    out_shape[static_cast<size_t>(axes[0])] = out_length / 2 + 1;
  } else if (kind == FftKind::C2R) {
    out_type = real_dtype(in.dtype());
    out_shape[static_cast<size_t>(axes[0])] = out_length;
  }
  Array out = detail::make_array(out_shape, out_type, in.device());
  if (out.size() == 0) return out;
  // c2r transforms overwrite their input: give the backend a copy of its own. The imaginary parts of the zero
  // frequency (and of the Nyquist frequency for an even length) are not part of a Hermitian spectrum: NumPy
  // ignores them, FFTW does too, cuFFT's result depends on them; zeroed here, every backend gives NumPy's result.
  const Array source = kind == FftKind::C2R ? converted(in, in.dtype()) : in;
  if (kind == FftKind::C2R) {
    const int64_t ax = axes[0];
    Array im = imag(source);
    im.slice(ax, 0, 1).fill(0.0);
    if (out_length % 2 == 0) im.slice(ax, out_length / 2, out_length / 2 + 1).fill(0.0);
  }
  detail::Backend& backend = detail::backend_for(in.device());
  bool positive = true;
  for (int64_t s : source.strides()) positive = positive && s >= 0;
  if (positive && backend.fft(FftCall{kind, forward, &source, out, axes})) return out;

  // The canonical layout: the other axes first, then the transformed ones, three at most per call.
  const int64_t ndim = in.ndim();
  Array current = source;
  size_t end = axes.size();
  while (end > 0) {
    const size_t begin = end > 3 ? end - 3 : 0;
    const std::vector<int64_t> group(axes.begin() + static_cast<std::ptrdiff_t>(begin),
                                     axes.begin() + static_cast<std::ptrdiff_t>(end));
    Shape order;
    for (int64_t d = 0; d < ndim; ++d)
      if (std::find(group.begin(), group.end(), d) == group.end()) order.push_back(d);
    for (int64_t d : group) order.push_back(d);
    Shape inverse(static_cast<size_t>(ndim), 0);
    for (int64_t k = 0; k < ndim; ++k) inverse[static_cast<size_t>(order[static_cast<size_t>(k)])] = k;
    const Array in_t = converted(current.permute(order), current.dtype());
    Shape group_out_shape = in_t.shape();
    if (kind != FftKind::C2C) group_out_shape[static_cast<size_t>(ndim - 1)] = out_shape[static_cast<size_t>(axes[0])];
    Array out_t = detail::make_array(group_out_shape, out_type, in.device());
    std::vector<int64_t> last;
    for (size_t k = 0; k < group.size(); ++k) last.push_back(ndim - static_cast<int64_t>(group.size() - k));
    if (!backend.fft(FftCall{kind, forward, &in_t, out_t, last}))
      throw Error("fft: the " + in.device().str() + " backend refused the canonical layout (internal error)");
    current = out_t.permute(inverse);
    end = begin;
  }
  Array result = as_real(out);
  result.assign(as_real(current));
  return out;
}

/// Multiplies `out` by `factor` in place (through its real view; nothing for 1).
Array scaled(Array out, double factor) {
  if (factor != 1.0 && out.size() > 0) {
    Array view = as_real(out);
    view *= factor;
  }
  return out;
}

// ---------------------------------------------------------------- gradients: the adjoints of the linear maps
// A transform is linear (over the reals for real input or output), so its vector-Jacobian product in PyTorch's
// convention (a complex gradient is dL/dre + i dL/dim) is its adjoint applied to the result's gradient: the
// opposite direction's unnormalised transform, the same real scale, each crop or zero pad undone by the other.

/// `g` as a new C-contiguous array of `type` (a gradient may be a broadcast or strided view; the backends
/// transform dense arrays). The real part when `type` is real and `g` complex.
Array dense(const Array& g, DType type) { return converted(is_complex(g.dtype()) && !is_complex(type) ? real(g) : g, type); }

/// The adjoint of complex_nd(x, axes, sizes, forward) for an x of shape `in_shape`: each step's transform in the
/// opposite direction (unnormalised) and its resize undone, last step first.
Array complex_nd_adjoint(Array g, const Shape& in_shape, const std::vector<int64_t>& axes,
                         const std::vector<int64_t>& sizes, bool forward) {
  Shape current = in_shape;
  std::vector<int64_t> before(axes.size());
  for (size_t k = axes.size(); k-- > 0;) {
    before[k] = current[static_cast<size_t>(axes[k])];
    current[static_cast<size_t>(axes[k])] = sizes[k];
  }
  for (size_t k = 0; k < axes.size(); ++k)
    g = resized(run(FftKind::C2C, !forward, g, {axes[k]}, 0), axes[k], before[k]);
  return g;
}

/// The adjoint of the real-to-complex transform of `points` real values along `ax` (the half spectrum, n/2 + 1
/// bins) read from a length m: the half spectrum's gradient completed with zeros to n bins, transformed back
/// (unnormalised), its real part, cropped or padded to m.
Array r2c_adjoint(const Array& g, int64_t ax, int64_t points, int64_t m) {
  const Array full = run(FftKind::C2C, false, resized(g, ax, points), {ax}, 0);
  return resized(real(full), ax, m);
}

/// The adjoint of the complex-to-real transform to `points` values along `ax` of a half spectrum of length m:
/// the forward transform of the real gradient, each bin counted as often as the Hermitian completion uses it
/// (twice, but once for the zero frequency and, for even n, the Nyquist one), cropped or padded to m.
Array c2r_adjoint(const Array& g, int64_t ax, int64_t points, int64_t m) {
  Array bins = scaled(run(FftKind::R2C, true, g, {ax}, points), 2.0);
  Array zero = as_real(bins.slice(ax, 0, 1));
  zero *= 0.5;
  if (points % 2 == 0) {
    Array nyquist = as_real(bins.slice(ax, points / 2, points / 2 + 1));
    nyquist *= 0.5;
  }
  return resized(bins, ax, m);
}

/// `f(a)`, with `adjoint` (of the result's gradient, to one of a's shape) as its backward when a requires grad.
Array with_adjoint(const char* name, const Array& a, const std::function<Array(const Array&)>& f,
                   std::function<Array(const Array&)> adjoint) {
  AutogradFunction fn{name, [&](const std::vector<Array>& in, std::vector<Array>&) { return f(in[0]); },
                      [adjoint = std::move(adjoint)](const Array& g, const std::vector<Array>&,
                                                     const std::vector<bool>&) { return std::vector<Array>{adjoint(g)}; }};
  return fn.apply({a});
}

// ---------------------------------------------------------------- the one- and n-dimensional compositions

/// Complex transforms along `axes` (NumPy's order: the last first), each padded or cropped to `sizes`.
/// Distinct axes are one backend call; a repeated axis makes them one call per axis, as NumPy's loop.
Array complex_nd(Array x, const std::vector<int64_t>& axes, const std::vector<int64_t>& sizes, bool forward) {
  std::vector<int64_t> sorted = axes;
  std::sort(sorted.begin(), sorted.end());
  const bool distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  if (distinct) {
    for (size_t k = 0; k < axes.size(); ++k) x = resized(x, axes[k], sizes[k]);
    return axes.empty() ? x : run(FftKind::C2C, forward, x, axes, 0);
  }
  for (size_t k = axes.size(); k-- > 0;) x = run(FftKind::C2C, forward, resized(x, axes[k], sizes[k]), {axes[k]}, 0);
  return x;
}

double product(const std::vector<int64_t>& sizes) {
  double p = 1;
  for (int64_t s : sizes) p *= static_cast<double>(s);
  return p;
}

Array c2c_1d(const Array& a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm,
             bool forward, const char* op) {
  require_input(a, op);
  const Norm mode = parse_norm(norm, op);
  const int64_t ax = normalized_axis(axis, a, op);
  const int64_t points = n.value_or(a.shape(ax));
  require_points(points, op, n ? "n" : "the input's length along axis " + std::to_string(axis));
  const DType type = complex_type(a.dtype());
  const double scale = scale_of(mode, forward, static_cast<double>(points));
  const Shape shape = a.shape();
  return with_adjoint(
      forward ? "FftBackward" : "IfftBackward", a,
      [&](const Array& in) { return scaled(complex_nd(as_type(in, type), {ax}, {points}, forward), scale); },
      [=](const Array& g) { return scaled(complex_nd_adjoint(dense(g, type), shape, {ax}, {points}, forward), scale); });
}

/// DTypeError for complex input to a real transform, naming the complex one to use instead.
void require_real(const Array& a, const char* op, const char* complex_op) {
  if (is_complex(a.dtype()))
    throw DTypeError(std::string(op) + ": the input must be real, got " + std::string(dtype_name(a.dtype())) +
                     "; use " + complex_op + " for complex input, or pass real(a)");
}

/// rfft with the normalisation `mode` (rfft's own or ihfft's swapped one).
Array r2c_1d(const Array& a, std::optional<int64_t> n, int64_t axis, Norm mode, const char* op) {
  const int64_t ax = normalized_axis(axis, a, op);
  require_real(a, op, "fft");
  const int64_t points = n.value_or(a.shape(ax));
  require_points(points, op, n ? "n" : "the input's length along axis " + std::to_string(axis));
  const DType type = real_type(a.dtype());
  const double scale = scale_of(mode, true, static_cast<double>(points));
  const int64_t m = a.shape(ax);
  return with_adjoint(
      "RfftBackward", a,
      [&](const Array& in) { return scaled(run(FftKind::R2C, true, resized(as_type(in, type), ax, points), {ax}, points), scale); },
      [=](const Array& g) { return scaled(r2c_adjoint(dense(g, complex_type(type)), ax, points, m), scale); });
}

/// irfft of complex x (already of its complex type) along normalized axis `ax` to `points` real values.
Array c2r_axis(const Array& x, int64_t ax, int64_t points) {
  return run(FftKind::C2R, false, resized(x, ax, points / 2 + 1), {ax}, points);
}

Array c2r_1d(const Array& a, std::optional<int64_t> n, int64_t axis, Norm mode, bool conjugate, const char* op) {
  const int64_t ax = normalized_axis(axis, a, op);
  const int64_t points = n.value_or(2 * (a.shape(ax) - 1));
  require_points(points, op,
                 n ? std::string("n")
                   : "n = 2 * (m - 1) from the input's length m = " + std::to_string(a.shape(ax)) + " along axis " +
                         std::to_string(axis) + " (pass n)");
  const DType type = complex_type(a.dtype());
  const double scale = scale_of(mode, false, static_cast<double>(points));
  const int64_t m = a.shape(ax);
  return with_adjoint(
      conjugate ? "HfftBackward" : "IrfftBackward", a,
      [&](const Array& in) {
        Array x = as_type(in, type);
        if (conjugate) x = conjugated(x);
        return scaled(c2r_axis(x, ax, points), scale);
      },
      [=](const Array& g) {
        Array grad = scaled(c2r_adjoint(dense(g, real_dtype(type)), ax, points, m), scale);
        return conjugate ? conjugated(grad) : grad;
      });
}

/// The axes and sizes of an n-d call, NumPy's rules: axes default to every axis (or the last len(s) when only s is
/// given); an entry -1 of s keeps the axis' length; `real_last` makes the last default size 2 * (m - 1) (irfftn).
struct Plan {
  std::vector<int64_t> axes, sizes;
  /// All but the last axis (and its size): the complex part of rfftn / irfftn.
  std::vector<int64_t> rest_axes() const { return {axes.begin(), axes.end() - 1}; }
  std::vector<int64_t> rest_sizes() const { return {sizes.begin(), sizes.end() - 1}; }
};
Plan plan_nd(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes, bool real_last,
             const char* op) {
  Plan p;
  const int64_t ndim = a.ndim();
  if (axes) {
    for (int64_t ax : *axes) p.axes.push_back(normalized_axis(ax, a, op));
    if (s && s->size() != axes->size())
      throw ValueError(std::string(op) + ": s has " + std::to_string(s->size()) + " entries and axes " +
                       std::to_string(axes->size()) + "; give one size per axis");
  } else if (s) {
    if (static_cast<int64_t>(s->size()) > ndim)
      throw ValueError(std::string(op) + ": s has " + std::to_string(s->size()) + " entries, more than the " +
                       std::to_string(ndim) + " axes of the array; give at most one size per axis, or pass axes");
    for (int64_t d = ndim - static_cast<int64_t>(s->size()); d < ndim; ++d) p.axes.push_back(d);
  } else {
    for (int64_t d = 0; d < ndim; ++d) p.axes.push_back(d);
  }
  for (size_t k = 0; k < p.axes.size(); ++k) {
    const int64_t m = a.shape(p.axes[k]);
    const bool halved = real_last && k + 1 == p.axes.size();
    const int64_t fallback = halved ? 2 * (m - 1) : m;
    const int64_t given = s ? (*s)[k] : -1;
    const int64_t size = given == -1 ? fallback : given;
    require_points(size, op,
                   given != -1 ? "s[" + std::to_string(k) + "]"
                               : std::string("the input's length") +
                                     (halved ? " (2 * (m - 1) with m = " + std::to_string(m) + ")" : "") +
                                     " along axis " + std::to_string(p.axes[k]) + " (pass s)");
    p.sizes.push_back(size);
  }
  return p;
}

Array c2c_nd(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes,
             const std::optional<std::string>& norm, bool forward, const char* op) {
  require_input(a, op);
  const Norm mode = parse_norm(norm, op);
  const Plan p = plan_nd(a, s, axes, false, op);
  if (p.axes.empty()) return a.copy();  // NumPy returns its input unchanged
  const DType type = complex_type(a.dtype());
  const double scale = scale_of(mode, forward, product(p.sizes));
  const Shape shape = a.shape();
  return with_adjoint(
      forward ? "FftnBackward" : "IfftnBackward", a,
      [&](const Array& in) { return scaled(complex_nd(as_type(in, type), p.axes, p.sizes, forward), scale); },
      [=](const Array& g) { return scaled(complex_nd_adjoint(dense(g, type), shape, p.axes, p.sizes, forward), scale); });
}

/// The plan of rfftn / irfftn: at least one axis; the last is the real transform's, the others complex.
Plan real_plan(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes, bool inverse,
               const char* op) {
  require_input(a, op);
  Plan p = plan_nd(a, s, axes, inverse, op);
  if (p.axes.empty()) throw ValueError(std::string(op) + ": no axis to transform; pass at least one axis");
  return p;
}

Array r2c_nd(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes,
             const std::optional<std::string>& norm, const char* op) {
  const Plan p = real_plan(a, s, axes, false, op);
  const Norm mode = parse_norm(norm, op);
  require_real(a, op, "fftn");
  const int64_t last = p.axes.back(), points = p.sizes.back(), m = a.shape(last);
  const DType type = real_type(a.dtype());
  const double scale = scale_of(mode, true, product(p.sizes));
  Shape half_shape = a.shape();
  half_shape[static_cast<size_t>(last)] = points / 2 + 1;
  return with_adjoint(
      "RfftnBackward", a,
      [&](const Array& in) {
        const Array half = run(FftKind::R2C, true, resized(as_type(in, type), last, points), {last}, points);
        return scaled(complex_nd(half, p.rest_axes(), p.rest_sizes(), true), scale);
      },
      [=](const Array& g) {
        const Array half = complex_nd_adjoint(dense(g, complex_type(type)), half_shape, p.rest_axes(), p.rest_sizes(), true);
        return scaled(r2c_adjoint(half, last, points, m), scale);
      });
}

Array c2r_nd(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes,
             const std::optional<std::string>& norm, const char* op) {
  const Plan p = real_plan(a, s, axes, true, op);
  const Norm mode = parse_norm(norm, op);
  const DType type = complex_type(a.dtype());
  const int64_t last = p.axes.back(), points = p.sizes.back();
  const double scale = scale_of(mode, false, product(p.sizes));
  const Shape shape = a.shape();
  return with_adjoint(
      "IrfftnBackward", a,
      [&](const Array& in) {
        const Array x = complex_nd(as_type(in, type), p.rest_axes(), p.rest_sizes(), false);
        return scaled(c2r_axis(x, last, points), scale);
      },
      [=](const Array& g) {
        // The complex steps left the last axis' length as it was (m): the real step's adjoint returns to it.
        const Array half = c2r_adjoint(dense(g, real_dtype(type)), last, points, shape[static_cast<size_t>(last)]);
        return scaled(complex_nd_adjoint(half, shape, p.rest_axes(), p.rest_sizes(), false), scale);
      });
}

Array shift(const Array& x, const std::optional<Shape>& axes, bool inverse, const char* op) {
  if (!x.defined())
    throw ValueError(std::string(op) + ": the array is undefined (default-constructed); create it first");
  std::vector<int64_t> list, shifts;
  if (axes) {
    for (int64_t ax : *axes) list.push_back(normalized_axis(ax, x, op));
  } else {
    for (int64_t d = 0; d < x.ndim(); ++d) list.push_back(d);
  }
  for (int64_t ax : list) shifts.push_back(inverse ? -(x.shape(ax) / 2) : x.shape(ax) / 2);
  if (!is_complex(x.dtype())) return list.empty() ? x.copy() : roll(x, shifts, list);
  // Complex arrays roll as their real pairs (the trailing axis stays), then are read back as complex.
  const Array rolled = (list.empty() ? pairs(x).copy() : roll(pairs(x), shifts, list)).contiguous();
  Shape strides(x.shape().size(), 1);
  for (size_t k = strides.size(); k-- > 1;) strides[k - 1] = strides[k] * x.shape()[k];
  return Array(rolled.storage(), x.shape(), strides, rolled.offset() / 2, x.dtype());
}

Array frequencies(int64_t n, double d, DType dtype, std::optional<Device> device, bool half, const char* op) {
  if (n < 1) throw ValueError(std::string(op) + ": n must be at least 1, got " + std::to_string(n));
  if (d == 0) throw ValueError(std::string(op) + ": the sample spacing d is 0; pass a nonzero d");
  if (!is_floating(dtype))
    throw DTypeError(std::string(op) + ": dtype must be a real floating type, got " + std::string(dtype_name(dtype)) +
                     "; pass float32 or float64");
  // NumPy's formula: integer frequencies times 1 / (n * d), in float64.
  const double step = 1.0 / (static_cast<double>(n) * d);
  std::vector<double> values;
  const int64_t count = half ? n / 2 + 1 : n;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t f = half || k <= (n - 1) / 2 ? k : k - n;
    values.push_back(static_cast<double>(f) * step);
  }
  Array host = from_data(values, Shape{count});
  return host.astype(dtype).to(device.value_or(cpu()));
}

}  // namespace

Array fft(const Array& a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm) {
  return c2c_1d(a, n, axis, norm, true, "fft::fft");
}
Array ifft(const Array& a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm) {
  return c2c_1d(a, n, axis, norm, false, "fft::ifft");
}
Array rfft(const Array& a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm) {
  require_input(a, "fft::rfft");
  return r2c_1d(a, n, axis, parse_norm(norm, "fft::rfft"), "fft::rfft");
}
Array irfft(const Array& a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm) {
  require_input(a, "fft::irfft");
  return c2r_1d(a, n, axis, parse_norm(norm, "fft::irfft"), false, "fft::irfft");
}
Array hfft(const Array& a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm) {
  require_input(a, "fft::hfft");
  return c2r_1d(a, n, axis, swapped(parse_norm(norm, "fft::hfft")), true, "fft::hfft");
}
Array ihfft(const Array& a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm) {
  require_input(a, "fft::ihfft");
  return conj(r2c_1d(a, n, axis, swapped(parse_norm(norm, "fft::ihfft")), "fft::ihfft"));
}

Array fftn(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes,
           const std::optional<std::string>& norm) {
  return c2c_nd(a, s, axes, norm, true, "fft::fftn");
}
Array ifftn(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes,
            const std::optional<std::string>& norm) {
  return c2c_nd(a, s, axes, norm, false, "fft::ifftn");
}
Array rfftn(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes,
            const std::optional<std::string>& norm) {
  return r2c_nd(a, s, axes, norm, "fft::rfftn");
}
Array irfftn(const Array& a, const std::optional<Shape>& s, const std::optional<Shape>& axes,
             const std::optional<std::string>& norm) {
  return c2r_nd(a, s, axes, norm, "fft::irfftn");
}
Array fft2(const Array& a, const std::optional<Shape>& s, const Shape& axes, const std::optional<std::string>& norm) {
  return c2c_nd(a, s, axes, norm, true, "fft::fft2");
}
Array ifft2(const Array& a, const std::optional<Shape>& s, const Shape& axes, const std::optional<std::string>& norm) {
  return c2c_nd(a, s, axes, norm, false, "fft::ifft2");
}
Array rfft2(const Array& a, const std::optional<Shape>& s, const Shape& axes, const std::optional<std::string>& norm) {
  return r2c_nd(a, s, axes, norm, "fft::rfft2");
}
Array irfft2(const Array& a, const std::optional<Shape>& s, const Shape& axes, const std::optional<std::string>& norm) {
  return c2r_nd(a, s, axes, norm, "fft::irfft2");
}

Array fftfreq(int64_t n, double d, DType dtype, std::optional<Device> device) {
  return frequencies(n, d, dtype, device, false, "fft::fftfreq");
}
Array rfftfreq(int64_t n, double d, DType dtype, std::optional<Device> device) {
  return frequencies(n, d, dtype, device, true, "fft::rfftfreq");
}
Array fftshift(const Array& x, const std::optional<Shape>& axes) { return shift(x, axes, false, "fft::fftshift"); }
Array ifftshift(const Array& x, const std::optional<Shape>& axes) { return shift(x, axes, true, "fft::ifftshift"); }

}  // namespace kiln::fft
