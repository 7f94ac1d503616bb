// Vectorised float32 math for the CPU kernels (internal): glibc's libmvec routines named by the op list's
// cpu_simd column, accurate to a few ulp, with IEEE special values. Used for contiguous rows; the tail goes
// through the same routine on a zero-padded vector so an element's result never depends on its position.
//
// Two widths: the AVX2 routines (_ZGVdN8v_expf, 8 lanes) need an AVX2 build; the AVX-512 ones (_ZGVeN16v_expf,
// 16 lanes, about twice the throughput) are compiled into every such build with a target attribute and chosen
// at run time when the CPU has AVX-512F. One process uses one width for every row, so the fused executor and
// the unfused ops (both call apply_vector_f32) agree bit for bit; the two widths may differ in the last ulp.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/op_table.hpp"

#if defined(__AVX2__) && defined(KILN_HAVE_LIBMVEC)
#include <immintrin.h>
#define KILN_VECTOR_MATH 1
// The libmvec routines the op list (src/core/ops_internal.def, column cpu_simd) names, in both widths.
extern "C" {
#define KILN_SIMD(f)           \
  __m256 _ZGVdN8v_##f(__m256); \
  __m512 _ZGVeN16v_##f(__m512);
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
/// One libmvec routine in its two widths.
struct VectorRoutine {
  __m256 (*avx2)(__m256) = nullptr;
  __m512 (*avx512)(__m512) = nullptr;
};

/// The libmvec routines for a float32 op (its cpu_simd column); both null when it has none.
constexpr VectorRoutine vector_math_f32(OpCode op) {
  switch (op) {
#define KILN_SIMD(f) VectorRoutine{&_ZGVdN8v_##f, &_ZGVeN16v_##f}
#define KILN_NO_SIMD VectorRoutine{}
#define KILN_OP_IMPL(Code, rule, dtypes, accuracy, gpu_vector, cpu_simd, ...) \
  case OpCode::Code:                                                          \
    return cpu_simd;
#include "core/ops_internal.def"
#undef KILN_SIMD
#undef KILN_NO_SIMD
    case OpCode::Count: break;
  }
  return {};
}

/// Whether this CPU runs the AVX-512 routines (decided once per process; libgcc's check includes the OS saving
/// the 512-bit registers). Initialised with other statics, so it asks libgcc to read the CPU first.
inline const bool kVectorMathAvx512 = [] {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") != 0;
}();

__attribute__((target("avx512f"))) inline void apply_vector_f32_avx512(__m512 (*f)(__m512), const float* in,
                                                                       float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, f(_mm512_loadu_ps(in + i)));
  if (i < n) {  // the tail's other lanes are zeros, as in the AVX2 path's padded copy
    const __mmask16 mask = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(out + i, mask, f(_mm512_maskz_loadu_ps(mask, in + i)));
  }
}

/// out[i] = f(in[i]) for contiguous float32 rows, in the width this CPU runs.
inline void apply_vector_f32(VectorRoutine f, const float* in, float* out, int64_t n) {
  if (kVectorMathAvx512) return apply_vector_f32_avx512(f.avx512, in, out, n);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, f.avx2(_mm256_loadu_ps(in + i)));
  if (i < n) {
    alignas(32) float tail[8] = {};
    std::memcpy(tail, in + i, static_cast<size_t>(n - i) * sizeof(float));
    _mm256_store_ps(tail, f.avx2(_mm256_load_ps(tail)));
    std::memcpy(out + i, tail, static_cast<size_t>(n - i) * sizeof(float));
  }
}
#endif

}  // namespace kiln::cpu_impl
