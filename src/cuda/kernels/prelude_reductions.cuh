// The CUDA prelude, last part (after the op functions): the reduction operators kd::red_* (src/cpu/reduce.cpp's
// ops) and the warp shuffles of the built-in, fused and user reduction kernels.
namespace kd {
// ------------------------------------------------------------ reductions (src/cpu/reduce.cpp's ops)
template <class A>
struct red_sum {
  static __device__ __forceinline__ A identity() { return A(0); }
  static __device__ __forceinline__ A combine(A a, A b) {
    if constexpr (is_int<A>)
      return (A)((u64)a + (u64)b);
    else
      return a + b;
  }
};
template <class A>
struct red_prod {
  static __device__ __forceinline__ A identity() { return A(1); }
  static __device__ __forceinline__ A combine(A a, A b) {
    if constexpr (is_int<A>)
      return (A)((u64)a * (u64)b);
    else
      return a * b;
  }
};
// NaN propagates: once `a` is NaN nothing replaces it; a NaN `b` always does.
template <class A>
struct red_max {
  static __device__ __forceinline__ A identity() {
    if constexpr (is_fp<A>)
      return -infinity<A>();
    else
      return (A)(-9223372036854775807LL - 1);
  }
  static __device__ __forceinline__ A combine(A a, A b) { return (b > a || b != b) ? b : a; }
};
template <class A>
struct red_min {
  static __device__ __forceinline__ A identity() {
    if constexpr (is_fp<A>)
      return infinity<A>();
    else
      return (A)9223372036854775807LL;
  }
  static __device__ __forceinline__ A combine(A a, A b) { return (b < a || b != b) ? b : a; }
};
template <class A>
struct red_all {
  static __device__ __forceinline__ A identity() { return true; }
  static __device__ __forceinline__ A combine(A a, A b) { return a && b; }
};
template <class A>
struct red_any {
  static __device__ __forceinline__ A identity() { return false; }
  static __device__ __forceinline__ A combine(A a, A b) { return a || b; }
};
/// argmax/argmin state: the best value and its index (-1: nothing seen).
template <class V>
struct arg_t {
  V v;
  i64 i;
};
template <class V, bool MAX>
struct red_arg {
  typedef arg_t<V> A;
  static __device__ __forceinline__ bool better(V x, V y) {
    if constexpr (is_fp<V>)
      return (MAX ? x > y : x < y) || (x != x && y == y);
    else
      return MAX ? x > y : x < y;
  }
  static __device__ __forceinline__ A identity() {
    A a;
    a.v = V(0);
    a.i = -1;
    return a;
  }
  // The better value wins; equal values (or two NaNs) go to the lower index: the first occurrence.
  static __device__ __forceinline__ A combine(A a, A b) {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    if (better(b.v, a.v)) return b;
    if (better(a.v, b.v)) return a;
    return b.i < a.i ? b : a;
  }
};
template <class V>
__device__ __forceinline__ arg_t<V> make_arg(V v, i64 i) {
  arg_t<V> a;
  a.v = v;
  a.i = i;
  return a;
}

// Butterfly shuffles (lane ^ m stays inside an aligned group of width > m).
__device__ __forceinline__ float shfl_xor(float v, int m, u32 mask) { return __shfl_xor_sync(mask, v, m); }
__device__ __forceinline__ double shfl_xor(double v, int m, u32 mask) { return __shfl_xor_sync(mask, v, m); }
__device__ __forceinline__ i64 shfl_xor(i64 v, int m, u32 mask) { return __shfl_xor_sync(mask, v, m); }
__device__ __forceinline__ bool shfl_xor(bool v, int m, u32 mask) { return __shfl_xor_sync(mask, (int)v, m) != 0; }
template <class F>
__device__ __forceinline__ complex_t<F> shfl_xor(complex_t<F> z, int m, u32 mask) {
  return complex_t<F>(shfl_xor(z.re, m, mask), shfl_xor(z.im, m, mask));
}
template <class V>
__device__ __forceinline__ arg_t<V> shfl_xor(arg_t<V> a, int m, u32 mask) {
  return make_arg(shfl_xor(a.v, m, mask), shfl_xor(a.i, m, mask));
}
}  // namespace kd
