// kiln::fft: NumPy's numpy.fft on kiln arrays (docs/fft.md). The arguments are NumPy's: `n` / `s` pad with zeros
// or crop the input along the transformed axes, `axis` / `axes` may be negative, and `norm` is "backward" (the
// default, as NumPy's None: the inverse transforms divide by n), "ortho" (both divide by sqrt(n)) or "forward"
// (the forward transforms divide by n). Result dtypes follow NumPy 2: float32 (and float16, bfloat16) input gives
// complex64, float64, integer and bool input complex128, complex input keeps its dtype; irfft/hfft give the real
// dtype of that complex type. The CPU computes with FFTW, a GPU with cuFFT. Every transform is differentiable
// (its backward is its adjoint; complex gradients in PyTorch's convention: docs/fft.md, Autograd). Errors: ValueError for a bad n / s / norm, ShapeError for an axis out of
// range, DTypeError for complex input to rfft/ihfft and the -n functions' real-input ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/array.hpp"

namespace kiln::fft {

/// One-dimensional transforms along `axis`, as numpy.fft.fft / ifft: complex result of length n (a's length
/// along axis when unset; padded with zeros or cropped to n otherwise).
Array fft(const Array& a, std::optional<int64_t> n = {}, int64_t axis = -1,
          const std::optional<std::string>& norm = {});
Array ifft(const Array& a, std::optional<int64_t> n = {}, int64_t axis = -1,
           const std::optional<std::string>& norm = {});
/// The transform of real input: its n/2 + 1 non-negative frequencies (numpy.fft.rfft). DTypeError for complex a.
Array rfft(const Array& a, std::optional<int64_t> n = {}, int64_t axis = -1,
           const std::optional<std::string>& norm = {});
/// The inverse of rfft: a real result of length n (default 2 * (m - 1) for an input of length m along axis);
/// the input is cropped or padded to n/2 + 1 (numpy.fft.irfft).
Array irfft(const Array& a, std::optional<int64_t> n = {}, int64_t axis = -1,
            const std::optional<std::string>& norm = {});
/// The transform of a Hermitian-symmetric signal given by its first half: a real result of length n (default
/// 2 * (m - 1)), numpy.fft.hfft.
Array hfft(const Array& a, std::optional<int64_t> n = {}, int64_t axis = -1,
           const std::optional<std::string>& norm = {});
/// The inverse of hfft for real input: n/2 + 1 complex values (numpy.fft.ihfft). DTypeError for complex a.
Array ihfft(const Array& a, std::optional<int64_t> n = {}, int64_t axis = -1,
            const std::optional<std::string>& norm = {});

/// n-dimensional transforms over `axes` (every axis when unset, or the last len(s) axes when only s is given),
/// each padded or cropped to s (an entry -1 keeps the axis' length), as numpy.fft.fftn / ifftn. A repeated axis
/// is transformed once per occurrence, as NumPy. ValueError when s and axes differ in length.
Array fftn(const Array& a, const std::optional<Shape>& s = {}, const std::optional<Shape>& axes = {},
           const std::optional<std::string>& norm = {});
Array ifftn(const Array& a, const std::optional<Shape>& s = {}, const std::optional<Shape>& axes = {},
            const std::optional<std::string>& norm = {});
/// rfft along the last of `axes`, then fft along the others (numpy.fft.rfftn).
Array rfftn(const Array& a, const std::optional<Shape>& s = {}, const std::optional<Shape>& axes = {},
            const std::optional<std::string>& norm = {});
/// ifft along all but the last of `axes`, then irfft along the last, whose length s[-1] defaults to 2 * (m - 1)
/// (numpy.fft.irfftn).
Array irfftn(const Array& a, const std::optional<Shape>& s = {}, const std::optional<Shape>& axes = {},
             const std::optional<std::string>& norm = {});
/// The two-dimensional forms: fftn and friends with axes (-2, -1) by default (numpy.fft.fft2, ...).
Array fft2(const Array& a, const std::optional<Shape>& s = {}, const Shape& axes = {-2, -1},
           const std::optional<std::string>& norm = {});
Array ifft2(const Array& a, const std::optional<Shape>& s = {}, const Shape& axes = {-2, -1},
            const std::optional<std::string>& norm = {});
Array rfft2(const Array& a, const std::optional<Shape>& s = {}, const Shape& axes = {-2, -1},
            const std::optional<std::string>& norm = {});
Array irfft2(const Array& a, const std::optional<Shape>& s = {}, const Shape& axes = {-2, -1},
             const std::optional<std::string>& norm = {});

/// The sample frequencies of an n-point fft, [0, 1, ..., -1] / (d * n), as numpy.fft.fftfreq; a real floating
/// `dtype` (float64 by default) on `device` (the CPU by default). ValueError for n < 1 or d == 0.
Array fftfreq(int64_t n, double d = 1.0, DType dtype = DType::Float64, std::optional<Device> device = {});
/// The non-negative frequencies of an n-point rfft, [0, 1, ..., n/2] / (d * n) (numpy.fft.rfftfreq).
Array rfftfreq(int64_t n, double d = 1.0, DType dtype = DType::Float64, std::optional<Device> device = {});
/// Moves the zero frequency to the middle: a roll by len/2 along each of `axes` (all when unset), as
/// numpy.fft.fftshift; any dtype and device (a new array).
Array fftshift(const Array& x, const std::optional<Shape>& axes = {});
/// The inverse of fftshift: a roll by -(len/2) (numpy.fft.ifftshift).
Array ifftshift(const Array& x, const std::optional<Shape>& axes = {});

}  // namespace kiln::fft
