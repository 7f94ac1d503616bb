// Vectorised float32 math for the CPU kernels (internal): glibc's libmvec AVX2
// routines (_ZGVdN8v_expf...), 8 lanes per call, accurate to a few ulp, with
// IEEE special values. Used for contiguous rows; the tail goes through the same
// routine on a padded copy so an element's result never depends on its position.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/op_table.hpp"

#if defined(__AVX2__) && defined(KILN_HAVE_LIBMVEC)
#include <immintrin.h>
#define KILN_VECTOR_MATH 1
extern "C" {
__m256 _ZGVdN8v_expf(__m256);
__m256 _ZGVdN8v_exp2f(__m256);
__m256 _ZGVdN8v_logf(__m256);
__m256 _ZGVdN8v_log2f(__m256);
__m256 _ZGVdN8v_log10f(__m256);
__m256 _ZGVdN8v_log1pf(__m256);
__m256 _ZGVdN8v_expm1f(__m256);
__m256 _ZGVdN8v_sinf(__m256);
__m256 _ZGVdN8v_cosf(__m256);
__m256 _ZGVdN8v_tanf(__m256);
__m256 _ZGVdN8v_asinf(__m256);
__m256 _ZGVdN8v_acosf(__m256);
__m256 _ZGVdN8v_atanf(__m256);
__m256 _ZGVdN8v_sinhf(__m256);
__m256 _ZGVdN8v_coshf(__m256);
__m256 _ZGVdN8v_tanhf(__m256);
}
#endif

namespace kiln::cpu_impl {

using detail::OpCode;

#ifdef KILN_VECTOR_MATH
using VectorFn = __m256 (*)(__m256);

/// The libmvec routine for a float32 op, or nullptr.
constexpr VectorFn vector_math_f32(OpCode op) {
  switch (op) {
    case OpCode::Exp: return &_ZGVdN8v_expf;
    case OpCode::Exp2: return &_ZGVdN8v_exp2f;
    case OpCode::Log: return &_ZGVdN8v_logf;
    case OpCode::Log2: return &_ZGVdN8v_log2f;
    case OpCode::Log10: return &_ZGVdN8v_log10f;
    case OpCode::Log1p: return &_ZGVdN8v_log1pf;
    case OpCode::Expm1: return &_ZGVdN8v_expm1f;
    case OpCode::Sin: return &_ZGVdN8v_sinf;
    case OpCode::Cos: return &_ZGVdN8v_cosf;
    case OpCode::Tan: return &_ZGVdN8v_tanf;
    case OpCode::Arcsin: return &_ZGVdN8v_asinf;
    case OpCode::Arccos: return &_ZGVdN8v_acosf;
    case OpCode::Arctan: return &_ZGVdN8v_atanf;
    case OpCode::Sinh: return &_ZGVdN8v_sinhf;
    case OpCode::Cosh: return &_ZGVdN8v_coshf;
    case OpCode::Tanh: return &_ZGVdN8v_tanhf;
    default: return nullptr;
  }
}

/// out[i] = f(in[i]) for contiguous float32 rows.
inline void apply_vector_f32(VectorFn f, const float* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f(_mm256_loadu_ps(in + i)));
  if (i < n) {
    alignas(32) float tail[8] = {};
    std::memcpy(tail, in + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm256_store_ps(tail, f(_mm256_load_ps(tail)));
    std::memcpy(out + i, tail, static_cast<size_t>(n - i) * sizeof(float));
  }
}
#endif

}  // namespace kiln::cpu_impl
