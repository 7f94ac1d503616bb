// Philox4x32-10 and the per-element mappings of kiln's random streams (internal).
//
// The stream layout is specified in include/kiln/random.hpp; this file is its one
// implementation. The code inside KILN_PHILOX_SHARED( ... ) is plain C++ with no
// includes, no std and no host-only calls: it is compiled here for the CPU, and
// cuda_source() returns the same tokens as CUDA source for NVRTC, so both backends
// run one text. A backend runs one *_block function per Philox block (a CPU loop
// iteration, a GPU thread); each block's outputs follow from its index alone.
//
// Inside the shared text every function is marked KILN_HOST_DEVICE (nothing on the
// host, __device__ in CUDA) and calls only the small prelude (bit casts, fma, sqrt,
// log, sin, cos, float16 conversion), which each side defines for itself. fma, sqrt
// and the float16 conversions are correctly rounded on both sides, so uniform and
// randint are bit-identical, with or without --use_fast_math (tests/cuda/test_random_gpu.cpp);
// log, sin and cos come from different math libraries, so normal
// agrees within 2 ulp (compare with >= 4 ulp of max(|x|, stddev)).
// Mul+add pairs are written as explicit fma: left to the compiler, contraction
// differs between GCC (-march=native) and NVRTC (--fmad=true) and would change bits.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "core/op_table.hpp"
#include "kiln/dtype.hpp"

#ifndef KILN_HOST_DEVICE
#define KILN_HOST_DEVICE
#endif

// Emits the code for the host and keeps the same tokens as a string for NVRTC.
// (Comments are stripped before this macro sees its argument, so they may stay.)
#define KILN_PHILOX_SHARED(...) \
  __VA_ARGS__                   \
  inline constexpr const char kPhiloxSharedSource[] = #__VA_ARGS__;

namespace kiln::detail::philox {

// ---- host prelude: the functions the shared text may call (the CUDA prelude mirrors it).
inline unsigned int float_bits(float f) { return __builtin_bit_cast(unsigned int, f); }
inline float bits_float(unsigned int u) { return __builtin_bit_cast(float, u); }
inline float fma_f(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline double fma_d(double a, double b, double c) { return __builtin_fma(a, b, c); }
inline float sqrt_f(float x) { return __builtin_sqrtf(x); }
inline double sqrt_d(double x) { return __builtin_sqrt(x); }
inline float log_f(float x) { return __builtin_logf(x); }
inline double log_d(double x) { return __builtin_log(x); }
inline float sin_f(float x) { return __builtin_sinf(x); }
inline double sin_d(double x) { return __builtin_sin(x); }
inline float cos_f(float x) { return __builtin_cosf(x); }
inline double cos_d(double x) { return __builtin_cos(x); }
// float <-> float16 bits, round to nearest even: the portable version, and F16C's when the
// target has it (the same bits, 5x faster); CUDA uses the cvt instruction.
inline unsigned short float_to_half_bits_software(float f) {
  unsigned int x = float_bits(f);
  unsigned int sign = (x >> 16) & 0x8000u;
  unsigned int magnitude = x & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) return (unsigned short)(sign | 0x7E00u);   // NaN
  if (magnitude >= 0x477FF000u) return (unsigned short)(sign | 0x7C00u);  // >= 65520 rounds to inf
  if (magnitude <= 0x33000000u) return (unsigned short)sign;              // <= 2^-25 rounds to zero
  unsigned int exponent = magnitude >> 23;
  unsigned int mantissa = magnitude & 0x7FFFFFu;
  unsigned int result, remainder, halfway;
  if (exponent < 113u) {                   // below 2^-14: a half subnormal, counted in units of 2^-24
    unsigned int shift = 126u - exponent;  // 14..24
    mantissa |= 0x800000u;
    result = mantissa >> shift;
    remainder = mantissa & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1u);
  } else {
    result = ((exponent - 112u) << 10) | (mantissa >> 13);
    remainder = mantissa & 0x1FFFu;
    halfway = 0x1000u;
  }
  if (remainder > halfway || (remainder == halfway && (result & 1u))) ++result;  // may carry into the exponent
  return (unsigned short)(sign | result);
}
inline float half_bits_to_float_software(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int exponent = ((unsigned int)h >> 10) & 0x1Fu;
  unsigned int mantissa = (unsigned int)h & 0x3FFu;
  if (exponent == 0u) {
    float value = (float)mantissa * 5.9604644775390625e-08f;
    return sign ? -value : value;
  }
  if (exponent == 31u) return bits_float(sign | 0x7F800000u | (mantissa << 13));
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}
#if defined(__F16C__)
inline unsigned short float_to_half_bits(float f) {
  return static_cast<unsigned short>(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT)));
}
inline float half_bits_to_float(unsigned short h) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h))); }
#else
inline unsigned short float_to_half_bits(float f) { return float_to_half_bits_software(f); }
inline float half_bits_to_float(unsigned short h) { return half_bits_to_float_software(h); }
#endif

// clang-format off
KILN_PHILOX_SHARED(

// One Philox block: four 32-bit words.
struct Words { unsigned int w[4]; };

// Philox4x32-10 (Salmon et al., SC'11; Random123): ten rounds, key bumped between rounds.
KILN_HOST_DEVICE inline Words philox4x32_10(Words counter, unsigned int key0, unsigned int key1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += 0x9E3779B9u;
      key1 += 0xBB67AE85u;
    }
    unsigned long long product0 = (unsigned long long)0xD2511F53u * counter.w[0];
    unsigned long long product2 = (unsigned long long)0xCD9E8D57u * counter.w[2];
    Words next;
    next.w[0] = (unsigned int)(product2 >> 32) ^ counter.w[1] ^ key0;
    next.w[1] = (unsigned int)product2;
    next.w[2] = (unsigned int)(product0 >> 32) ^ counter.w[3] ^ key1;
    next.w[3] = (unsigned int)product0;
    counter = next;
  }
  return counter;
}

// Block `block` of the stream at generator (seed, offset):
// counter = (lo32(block), hi32(block), lo32(offset), hi32(offset)), key = (lo32(seed), hi32(seed)).
KILN_HOST_DEVICE inline Words random_block(unsigned long long seed, unsigned long long offset,
                                           unsigned long long block) {
  Words counter;
  counter.w[0] = (unsigned int)block;
  counter.w[1] = (unsigned int)(block >> 32);
  counter.w[2] = (unsigned int)offset;
  counter.w[3] = (unsigned int)(offset >> 32);
  return philox4x32_10(counter, (unsigned int)seed, (unsigned int)(seed >> 32));
}

// ---- unit intervals. 2^-24 = 5.9604644775390625e-08 and 2^-53 = 1.1102230246251565404236316680908203125e-16
// exactly; the integer-to-float conversions are exact, so these are exact.
// [0, 1): the top 24 bits of w times 2^-24.
KILN_HOST_DEVICE inline float unit_float(unsigned int w) { return (float)(w >> 8) * 5.9604644775390625e-08f; }
// (0, 1]: ((w >> 8) + 1) * 2^-24, the first Box-Muller input (log never sees 0).
KILN_HOST_DEVICE inline float unit_float_open_low(unsigned int w) {
  return (float)((w >> 8) + 1u) * 5.9604644775390625e-08f;
}
// [0, 1): the top 53 bits of (hi:lo) times 2^-53.
KILN_HOST_DEVICE inline unsigned long long top53(unsigned int lo, unsigned int hi) {
  return ((unsigned long long)hi << 21) | (unsigned long long)(lo >> 11);
}
KILN_HOST_DEVICE inline double unit_double(unsigned int lo, unsigned int hi) {
  return (double)top53(lo, hi) * 1.1102230246251565404236316680908203125e-16;
}
KILN_HOST_DEVICE inline double unit_double_open_low(unsigned int lo, unsigned int hi) {
  return (double)(top53(lo, hi) + 1ull) * 1.1102230246251565404236316680908203125e-16;
}

// ---- bfloat16 bits, round to nearest even (float16 conversions come from the prelude).
KILN_HOST_DEVICE inline unsigned short float_to_bfloat16_bits(float f) {
  unsigned int x = float_bits(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return (unsigned short)((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7FFFu + ((x >> 16) & 1u);
  return (unsigned short)(x >> 16);
}
KILN_HOST_DEVICE inline float bfloat16_bits_to_float(unsigned short b) { return bits_float((unsigned int)b << 16); }

// ---- uniform: value = fma(u, scale, low) in the compute type, rounded to the output dtype, then
// clamped to `limit`, the largest value of the output dtype below high (see uniform_limit below).
KILN_HOST_DEVICE inline float uniform_float32(unsigned int w, float low, float scale, float limit) {
  float value = fma_f(unit_float(w), scale, low);
  return value > limit ? limit : value;
}
KILN_HOST_DEVICE inline unsigned short uniform_half(unsigned int w, float low, float scale, float limit) {
  unsigned short h = float_to_half_bits(fma_f(unit_float(w), scale, low));
  return half_bits_to_float(h) > limit ? float_to_half_bits(limit) : h;
}
KILN_HOST_DEVICE inline unsigned short uniform_bfloat16(unsigned int w, float low, float scale, float limit) {
  unsigned short b = float_to_bfloat16_bits(fma_f(unit_float(w), scale, low));
  return bfloat16_bits_to_float(b) > limit ? float_to_bfloat16_bits(limit) : b;
}
KILN_HOST_DEVICE inline double uniform_float64(unsigned int lo, unsigned int hi, double low, double scale,
                                               double limit) {
  double value = fma_d(unit_double(lo, hi), scale, low);
  return value > limit ? limit : value;
}

// ---- normal: Box-Muller. z0 = r cos(theta), z1 = r sin(theta), r = sqrt(-2 log u1), theta = 2 pi u2.
KILN_HOST_DEVICE inline void normal_pair_float(unsigned int word1, unsigned int word2, float* z0, float* z1) {
  float r = sqrt_f(-2.0f * log_f(unit_float_open_low(word1)));
  float theta = 6.28318530717958647692f * unit_float(word2);
  *z0 = r * cos_f(theta);
  *z1 = r * sin_f(theta);
}
KILN_HOST_DEVICE inline void normal_pair_double(unsigned int lo1, unsigned int hi1, unsigned int lo2,
                                                unsigned int hi2, double* z0, double* z1) {
  double r = sqrt_d(-2.0 * log_d(unit_double_open_low(lo1, hi1)));
  double theta = 6.28318530717958647692 * unit_double(lo2, hi2);
  *z0 = r * cos_d(theta);
  *z1 = r * sin_d(theta);
}

// ---- randint: low + floor(x * span / 2^bits) (multiply-shift), with x a 32-bit word when
// span <= 2^32, else a 64-bit word; wraps modulo 2^64 like the int64 sum it stands for.
KILN_HOST_DEVICE inline unsigned long long mulhi64(unsigned long long a, unsigned long long b) {
  unsigned long long a_lo = a & 0xFFFFFFFFull, a_hi = a >> 32, b_lo = b & 0xFFFFFFFFull, b_hi = b >> 32;
  unsigned long long lo_lo = a_lo * b_lo, hi_lo = a_hi * b_lo, lo_hi = a_lo * b_hi, hi_hi = a_hi * b_hi;
  unsigned long long cross = (lo_lo >> 32) + (hi_lo & 0xFFFFFFFFull) + lo_hi;
  return hi_hi + (hi_lo >> 32) + (cross >> 32);
}
KILN_HOST_DEVICE inline long long randint_from_word(unsigned int w, long long low, unsigned long long span) {
  return (long long)((unsigned long long)low + (((unsigned long long)w * span) >> 32));
}
KILN_HOST_DEVICE inline long long randint_from_words(unsigned int lo, unsigned int hi, long long low,
                                                     unsigned long long span) {
  unsigned long long x = ((unsigned long long)hi << 32) | (unsigned long long)lo;
  return (long long)((unsigned long long)low + mulhi64(x, span));
}

// ---- one Philox block -> the output elements it feeds (element indices from block alone, clipped to n).
// A backend runs one of these per block; results do not depend on how blocks are scheduled.

// 4 elements per block: element i uses word i % 4 of block i / 4.
KILN_HOST_DEVICE inline void uniform_float32_block(float* out, long long n, unsigned long long seed,
                                                   unsigned long long offset, unsigned long long block, float low,
                                                   float scale, float limit) {
  Words r = random_block(seed, offset, block);
  long long first = (long long)(block * 4ull);
  for (int k = 0; k < 4; ++k)
    if (first + k < n) out[first + k] = uniform_float32(r.w[k], low, scale, limit);
}
KILN_HOST_DEVICE inline void uniform_half_block(unsigned short* out, long long n, unsigned long long seed,
                                                unsigned long long offset, unsigned long long block, float low,
                                                float scale, float limit) {
  Words r = random_block(seed, offset, block);
  long long first = (long long)(block * 4ull);
  for (int k = 0; k < 4; ++k)
    if (first + k < n) out[first + k] = uniform_half(r.w[k], low, scale, limit);
}
KILN_HOST_DEVICE inline void uniform_bfloat16_block(unsigned short* out, long long n, unsigned long long seed,
                                                    unsigned long long offset, unsigned long long block, float low,
                                                    float scale, float limit) {
  Words r = random_block(seed, offset, block);
  long long first = (long long)(block * 4ull);
  for (int k = 0; k < 4; ++k)
    if (first + k < n) out[first + k] = uniform_bfloat16(r.w[k], low, scale, limit);
}
// 2 elements per block: element i uses words 2(i % 2) (low half) and 2(i % 2) + 1 (high half) of block i / 2.
KILN_HOST_DEVICE inline void uniform_float64_block(double* out, long long n, unsigned long long seed,
                                                   unsigned long long offset, unsigned long long block, double low,
                                                   double scale, double limit) {
  Words r = random_block(seed, offset, block);
  long long first = (long long)(block * 2ull);
  for (int k = 0; k < 2; ++k)
    if (first + k < n) out[first + k] = uniform_float64(r.w[2 * k], r.w[2 * k + 1], low, scale, limit);
}

// Normal in float (float32, float16, bfloat16): 4 elements per block; elements 4b, 4b+1 are the pair
// (w0, w1) and 4b+2, 4b+3 the pair (w2, w3); value = fma(z, stddev, mean) in float, then rounded.
// kind: 0 float32 (out is float*), 1 float16, 2 bfloat16 (out is unsigned short*).
KILN_HOST_DEVICE inline void normal_float_block(void* out, int kind, long long n, unsigned long long seed,
                                                unsigned long long offset, unsigned long long block, float mean,
                                                float stddev) {
  Words r = random_block(seed, offset, block);
  float z[4];
  normal_pair_float(r.w[0], r.w[1], &z[0], &z[1]);
  normal_pair_float(r.w[2], r.w[3], &z[2], &z[3]);
  long long first = (long long)(block * 4ull);
  for (int k = 0; k < 4; ++k) {
    if (first + k >= n) break;
    float value = fma_f(z[k], stddev, mean);
    if (kind == 0) ((float*)out)[first + k] = value;
    else if (kind == 1) ((unsigned short*)out)[first + k] = float_to_half_bits(value);
    else ((unsigned short*)out)[first + k] = float_to_bfloat16_bits(value);
  }
}
// Normal float64: 2 elements per block, the pair u1 = (w0, w1), u2 = (w2, w3); value = fma(z, stddev, mean).
KILN_HOST_DEVICE inline void normal_float64_block(double* out, long long n, unsigned long long seed,
                                                  unsigned long long offset, unsigned long long block, double mean,
                                                  double stddev) {
  Words r = random_block(seed, offset, block);
  double z[2];
  normal_pair_double(r.w[0], r.w[1], r.w[2], r.w[3], &z[0], &z[1]);
  long long first = (long long)(block * 2ull);
  for (int k = 0; k < 2; ++k)
    if (first + k < n) out[first + k] = fma_d(z[k], stddev, mean);
}

// randint, span <= 2^32: 4 elements per block (word i % 4 of block i / 4); T is the output's C type.
template <class T>
KILN_HOST_DEVICE inline void randint32_block(T* out, long long n, unsigned long long seed, unsigned long long offset,
                                             unsigned long long block, long long low, unsigned long long span) {
  Words r = random_block(seed, offset, block);
  long long first = (long long)(block * 4ull);
  for (int k = 0; k < 4; ++k)
    if (first + k < n) out[first + k] = (T)randint_from_word(r.w[k], low, span);
}
// randint, span > 2^32: 2 elements per block (words 2(i % 2), 2(i % 2) + 1 of block i / 2).
template <class T>
KILN_HOST_DEVICE inline void randint64_block(T* out, long long n, unsigned long long seed, unsigned long long offset,
                                             unsigned long long block, long long low, unsigned long long span) {
  Words r = random_block(seed, offset, block);
  long long first = (long long)(block * 2ull);
  for (int k = 0; k < 2; ++k)
    if (first + k < n) out[first + k] = (T)randint_from_words(r.w[2 * k], r.w[2 * k + 1], low, span);
}

)  // KILN_PHILOX_SHARED
// clang-format on

/// The CUDA side of the prelude, for NVRTC (no includes needed). fma, sqrt and the float16
/// conversions use explicitly IEEE-rounded intrinsics and instructions, so --use_fast_math
/// cannot change uniform or randint; log/sin/cos follow the compile options.
inline constexpr const char kPhiloxCudaPrelude[] =
    "#define KILN_HOST_DEVICE __device__\n"
    "namespace kiln_philox {\n"
    "__device__ inline unsigned int float_bits(float f) { return __float_as_uint(f); }\n"
    "__device__ inline float bits_float(unsigned int u) { return __uint_as_float(u); }\n"
    "__device__ inline float fma_f(float a, float b, float c) { return __fmaf_rn(a, b, c); }\n"
    "__device__ inline double fma_d(double a, double b, double c) { return __fma_rn(a, b, c); }\n"
    "__device__ inline float sqrt_f(float x) { return __fsqrt_rn(x); }\n"
    "__device__ inline double sqrt_d(double x) { return __dsqrt_rn(x); }\n"
    "__device__ inline float log_f(float x) { return logf(x); }\n"
    "__device__ inline double log_d(double x) { return log(x); }\n"
    "__device__ inline float sin_f(float x) { return sinf(x); }\n"
    "__device__ inline double sin_d(double x) { return sin(x); }\n"
    "__device__ inline float cos_f(float x) { return cosf(x); }\n"
    "__device__ inline double cos_d(double x) { return cos(x); }\n"
    "__device__ inline unsigned short float_to_half_bits(float f) {\n"
    "  unsigned short h; asm(\"cvt.rn.f16.f32 %0, %1;\" : \"=h\"(h) : \"f\"(f)); return h; }\n"
    "__device__ inline float half_bits_to_float(unsigned short h) {\n"
    "  float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }\n";

/// Prelude + shared text + closing brace: a CUDA source defining namespace kiln_philox, ready
/// to prepend to a kernel (e.g. `kiln_philox::uniform_float32_block(...)` from a __global__).
inline std::string cuda_source() {
  return std::string(kPhiloxCudaPrelude) + kPhiloxSharedSource + "\n}  // namespace kiln_philox\n";
}

// ---- host-side parameters (shared by every backend's launcher and by the front-end).

/// Philox outputs per element run: 4 elements per block when each needs one 32-bit word
/// (or one Box-Muller half-pair in float), 2 when each needs 64 bits.
constexpr int64_t elements_per_block(RandomDistribution distribution, DType dtype, uint64_t randint_span) {
  if (distribution == RandomDistribution::RandInt) return randint_span <= (uint64_t{1} << 32) ? 4 : 2;
  return dtype == DType::Float64 ? 2 : 4;
}
/// Blocks a call of n elements consumes (the generator's offset advances by this much).
constexpr uint64_t block_count(RandomDistribution distribution, DType dtype, int64_t n, uint64_t randint_span) {
  uint64_t per = static_cast<uint64_t>(elements_per_block(distribution, dtype, randint_span));
  return (static_cast<uint64_t>(n) + per - 1) / per;
}
/// high - low of a randint call, exact (as the unsigned 64-bit difference; high > low).
constexpr uint64_t randint_span(int64_t low, int64_t high) {
  return static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
}

/// The largest value of `dtype` (float16, bfloat16, float32, float64) strictly below `high`
/// (finite): uniform clamps to it so that rounding to the output dtype never reaches high.
/// For the three narrow dtypes the value is exact in float.
inline double uniform_limit(DType dtype, double high) {
  if (dtype == DType::Float64) return __builtin_nextafter(high, -__builtin_inf());
  float below = static_cast<float>(high);  // nearest float (finite or inf)
  if (static_cast<double>(below) >= high) below = __builtin_nextafterf(below, -__builtin_inff());
  if (dtype == DType::Float32) return below;
  // The largest float16/bfloat16 <= below: round to nearest, step one code down if above.
  bool half = dtype == DType::Float16;
  unsigned short bits = half ? float_to_half_bits(below) : float_to_bfloat16_bits(below);
  float value = half ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits);
  if (value > below) {
    if (value == 0.0f)
      bits = 0x8001;  // +0 -> the smallest negative subnormal
    else if (bits & 0x8000u)
      ++bits;  // negative: one code further from zero
    else
      --bits;  // positive: one code toward zero
    value = half ? half_bits_to_float(bits) : bfloat16_bits_to_float(bits);
  }
  return value;
}

/// The parameters of the uniform_*_block functions for a uniform(low, high) draw into `dtype`:
/// low and high - low (the difference taken in double) rounded once to the compute type (float
/// for float16/bfloat16/float32, double for float64), and the clamp limit. Every backend's
/// launcher uses this, so none rounds differently (e.g. (float)high - (float)low).
struct UniformParams {
  double low, scale, limit;  ///< exact in float for the float-computed dtypes
};
inline UniformParams uniform_params(DType dtype, double low, double high) {
  double scale = high - low;
  if (dtype == DType::Float64) return {low, scale, uniform_limit(dtype, high)};
  return {static_cast<float>(low), static_cast<float>(scale), uniform_limit(dtype, high)};
}

}  // namespace kiln::detail::philox
