// Vectorised float32 math for the CPU kernels (internal): glibc's libmvec AVX2
// routines (_ZGVdN8v_expf...) named by the op list's cpu_simd column, 8 lanes per call, accurate to a few ulp, with
// IEEE special values. Used for contiguous rows; the tail goes through the same
// routine on a padded copy so an element's result never depends on its position.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/op_table.hpp"

#if defined(__AVX2__) && defined(KILN_HAVE_LIBMVEC)
#include <immintrin.h>
#define KILN_VECTOR_MATH 1
// The libmvec routines the op list (src/core/ops_internal.def, column cpu_simd) names.
extern "C" {
#define KILN_SIMD(f) __m256 _ZGVdN8v_##f(__m256);
#define KILN_NO_SIMD
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, ...) cpu_simd
#include "core/ops_internal.def"
#undef KILN_SIMD
#undef KILN_NO_SIMD
}
#endif

namespace kiln::cpu_impl {

using detail::OpCode;

#ifdef KILN_VECTOR_MATH
using VectorFn = __m256 (*)(__m256);

/// The libmvec routine for a float32 op (its cpu_simd column), or nullptr.
constexpr VectorFn vector_math_f32(OpCode op) {
  switch (op) {
#define KILN_SIMD(f) &_ZGVdN8v_##f
#define KILN_NO_SIMD nullptr
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, ...) \
  case OpCode::Code:                                                                        \
    return cpu_simd;
#include "core/ops_internal.def"
#undef KILN_SIMD
#undef KILN_NO_SIMD
    case OpCode::Count: break;
  }
  return nullptr;
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
