// Complex-number functions of NumPy that are not elementwise-table ops: the parts of a complex array (views),
// its conjugate and its angle. The dtypes themselves (complex64, complex128) are in kiln/dtype.hpp;
// docs/numpy-users.md ("Complex numbers") lists every op that takes them, per backend.
#pragma once

#include "kiln/ops.hpp"

namespace kiln {

/// The real parts of a complex array as a view (float32 for complex64, float64 for complex128): writing the
/// view writes the array, as NumPy's a.real. A real array is returned itself. No kernel: any device.
Array real(const Array& a);
/// The imaginary parts of a complex array as a view (as real()); for a real array, zeros of its dtype (a new
/// array; NumPy returns a read-only one). No kernel: any device.
Array imag(const Array& a);
/// The complex conjugate, a new array (np.conjugate); a copy of a real array.
Array conj(const Array& a);
/// The angle of each element in radians (degrees with `deg`), arctan2(imag(a), real(a)) as np.angle: a real
/// dtype (float64 for integer input, as NumPy's arctan2).
Array angle(const Array& a, bool deg = false);
/// A complex array with real part `re` and imaginary part `im` (broadcast; the promoted float dtype's complex
/// type: float32 -> complex64, float64 -> complex128), as NumPy's re + 1j * im without its rounding.
Array make_complex(const Array& re, const Array& im);

}  // namespace kiln
