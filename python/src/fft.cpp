// kiln.fft: numpy.fft's functions (kiln/fft.hpp) with NumPy's arguments: n / s, axis / axes, norm (None,
// "backward", "ortho" or "forward"), fftfreq's d and the Array API's dtype and device keywords.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <kiln/fft.hpp>
#include <optional>
#include <string>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

using Fn1 = Array (*)(const Array&, std::optional<int64_t>, int64_t, const std::optional<std::string>&);
using FnN = Array (*)(const Array&, const std::optional<Shape>&, const std::optional<Shape>&,
                      const std::optional<std::string>&);
using Fn2 = Array (*)(const Array&, const std::optional<Shape>&, const Shape&, const std::optional<std::string>&);

std::optional<Shape> to_optional_shape(nb::handle obj) {
  if (obj.is_none()) return std::nullopt;
  return to_shape(obj);
}

void def_1d(nb::module_& f, const char* name, Fn1 fn, const char* doc) {
  f.def(
      name,
      [fn](ArrayLike a, std::optional<int64_t> n, int64_t axis, const std::optional<std::string>& norm) {
        return fn(to_array(a), n, axis, norm);
      },
      "a"_a, "n"_a = nb::none(), "axis"_a = -1, "norm"_a = nb::none(), doc);
}

void def_nd(nb::module_& f, const char* name, FnN fn, const char* doc) {
  f.def(
      name,
      [fn](ArrayLike a, AxisLike s, AxisLike axes, const std::optional<std::string>& norm) {
        return fn(to_array(a), to_optional_shape(s), to_optional_shape(axes), norm);
      },
      "a"_a, "s"_a = nb::none(), "axes"_a = nb::none(), "norm"_a = nb::none(), doc);
}

/// The fft2 family: axes (-2, -1) by default, as NumPy's.
void def_2d(nb::module_& f, const char* name, Fn2 fn, const char* doc) {
  f.def(
      name,
      [fn](ArrayLike a, AxisLike s, AxisLike axes, const std::optional<std::string>& norm) {
        return fn(to_array(a), to_optional_shape(s), to_shape(axes), norm);
      },
      "a"_a, "s"_a = nb::none(), "axes"_a = nb::make_tuple(-2, -1), "norm"_a = nb::none(), doc);
}

/// fftfreq and rfftfreq: NumPy's n and d, and the Array API's keyword-only dtype (float64 when None) and device.
void def_frequencies(nb::module_& f, const char* name, Array (*fn)(int64_t, double, DType, std::optional<Device>),
                     const char* doc) {
  f.def(
      name,
      [fn](int64_t n, double d, nb::handle dtype, nb::handle device) {
        return fn(n, d, dtype.is_none() ? DType::Float64 : to_dtype(dtype), to_optional_device(device));
      },
      "n"_a, "d"_a = 1.0, nb::kw_only(), "dtype"_a = nb::none(), "device"_a = nb::none(), doc);
}

}  // namespace

void bind_fft(nb::module_& m) {
  nb::module_ f = m.def_submodule("fft",
                                  "Discrete Fourier transforms (kiln::fft): numpy.fft's functions; FFTW on "
                                  "the CPU, cuFFT on a GPU.");
  def_1d(f, "fft", fft::fft, "The 1-d discrete Fourier transform along axis, as numpy.fft.fft.");
  def_1d(f, "ifft", fft::ifft, "The 1-d inverse transform, as numpy.fft.ifft.");
  def_1d(f, "rfft", fft::rfft, "The transform of real input, n//2 + 1 frequencies (numpy.fft.rfft).");
  def_1d(f, "irfft", fft::irfft, "The inverse of rfft: n real values, n = 2 (m - 1) by default (numpy.fft.irfft).");
  def_1d(f, "hfft", fft::hfft, "The transform of a Hermitian signal given by its first half (numpy.fft.hfft).");
  def_1d(f, "ihfft", fft::ihfft, "The inverse of hfft for real input (numpy.fft.ihfft).");
  def_nd(f, "fftn", fft::fftn, "The n-d transform over axes (all by default), as numpy.fft.fftn.");
  def_nd(f, "ifftn", fft::ifftn, "The n-d inverse transform, as numpy.fft.ifftn.");
  def_nd(f, "rfftn", fft::rfftn, "rfft along the last of axes, fft along the others (numpy.fft.rfftn).");
  def_nd(f, "irfftn", fft::irfftn, "The inverse of rfftn (numpy.fft.irfftn).");
  def_2d(f, "fft2", fft::fft2, "fftn over axes (-2, -1) by default (numpy.fft.fft2).");
  def_2d(f, "ifft2", fft::ifft2, "ifftn over axes (-2, -1) by default (numpy.fft.ifft2).");
  def_2d(f, "rfft2", fft::rfft2, "rfftn over axes (-2, -1) by default (numpy.fft.rfft2).");
  def_2d(f, "irfft2", fft::irfft2, "irfftn over axes (-2, -1) by default (numpy.fft.irfft2).");
  def_frequencies(f, "fftfreq", fft::fftfreq,
                  "The sample frequencies [0, 1, ..., -1] / (d n) (numpy.fft.fftfreq), float64 by default.");
  def_frequencies(f, "rfftfreq", fft::rfftfreq,
                  "The non-negative frequencies [0, ..., n//2] / (d n) of rfft (numpy.fft.rfftfreq).");
  f.def(
      "fftshift", [](ArrayLike x, AxisLike axes) { return fft::fftshift(to_array(x), to_optional_shape(axes)); }, "x"_a,
      "axes"_a = nb::none(), "The zero frequency moved to the middle (numpy.fft.fftshift).");
  f.def(
      "ifftshift", [](ArrayLike x, AxisLike axes) { return fft::ifftshift(to_array(x), to_optional_shape(axes)); },
      "x"_a, "axes"_a = nb::none(), "The inverse of fftshift (numpy.fft.ifftshift).");
}

}  // namespace kiln::python
