// dtype conversion loops (internal): strided source of one dtype to strided
// destination of another, with float16/bfloat16 through float. One small
// template instantiated per (source, destination) pair: 100 tiny loops.
#pragma once

#include <complex>
#include <cstdint>
#include <type_traits>

#include "kiln/dtype.hpp"

namespace kiln::cpu_impl {

/// A complex C++ type's part type (float for complex64_t); any other type itself.
template <class T> struct real_of { using type = T; };
template <class F> struct real_of<std::complex<F>> { using type = F; };
template <class T> inline constexpr bool is_complex_v = !std::is_same_v<typename real_of<T>::type, T>;

/// The C++ type a dtype computes in on the CPU: float for float16/bfloat16, else its own type.
DType compute_dtype(DType t);

/// dst[i * dst_step] = convert(src[i * src_step]) for i < n; steps in elements of each side.
void convert(const void* src, DType src_type, int64_t src_step, void* dst, DType dst_type, int64_t dst_step,
             int64_t n);

}  // namespace kiln::cpu_impl
