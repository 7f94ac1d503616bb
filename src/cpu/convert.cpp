// dtype conversion loops: a table of (source, destination) loops.
#include "cpu/convert.hpp"

#include <cstring>
#include <type_traits>

namespace kiln::cpu_impl {

DType compute_dtype(DType t) { return t == DType::Float16 || t == DType::BFloat16 ? DType::Float32 : t; }

namespace {

template <class T> using Wide = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

template <class D, class S> inline D cast_value(S v) {
  if constexpr (is_complex_v<S> && std::is_same_v<D, bool>) {
    return v.real() != 0 || v.imag() != 0;
  } else if constexpr (is_complex_v<S> && is_complex_v<D>) {
    return D(static_cast<typename D::value_type>(v.real()), static_cast<typename D::value_type>(v.imag()));
  } else if constexpr (is_complex_v<S>) {
    return cast_value<D>(v.real());  // complex -> real keeps the real part, as NumPy's astype
  } else if constexpr (is_complex_v<D>) {
    using F = typename D::value_type;
    return D(static_cast<F>(static_cast<Wide<S>>(v)), F(0));
  } else if constexpr (std::is_same_v<D, bool>) {
    return static_cast<Wide<S>>(v) != Wide<S>(0);
  } else if constexpr ((std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) && std::is_same_v<S, double>) {
    return D(double_to_float_round_odd(v));  // one rounding, not double -> float -> half
  } else if constexpr (std::is_same_v<D, Half> || std::is_same_v<D, BFloat16>) {
    return D(static_cast<float>(static_cast<Wide<S>>(v)));
  } else {
    return static_cast<D>(static_cast<Wide<S>>(v));
  }
}

template <class S, class D>
void convert_loop(const void* src, int64_t ss, void* dst, int64_t ds, int64_t n) {
  const S* s = static_cast<const S*>(src);
  D* d = static_cast<D*>(dst);
  if (ss == 1 && ds == 1) {
    for (int64_t i = 0; i < n; ++i) d[i] = cast_value<D>(s[i]);
  } else if (ss == 0) {
    D v = cast_value<D>(s[0]);
    for (int64_t i = 0; i < n; ++i) d[i * ds] = v;
  } else {
    for (int64_t i = 0; i < n; ++i) d[i * ds] = cast_value<D>(s[i * ss]);
  }
}

using ConvertFn = void (*)(const void*, int64_t, void*, int64_t, int64_t);

struct Table {
  ConvertFn fn[kNumDTypes][kNumDTypes];
  Table() {
    for (int a = 0; a < kNumDTypes; ++a)
      for (int b = 0; b < kNumDTypes; ++b)
        visit_any_dtype(static_cast<DType>(a), [&](auto s) {
          visit_any_dtype(static_cast<DType>(b), [&](auto d) {
            fn[a][b] = &convert_loop<decltype(s), decltype(d)>;
          });
        });
  }
};
const Table kTable;

}  // namespace

void convert(const void* src, DType src_type, int64_t src_step, void* dst, DType dst_type, int64_t dst_step,
             int64_t n) {
  if (src_type == dst_type && src_step == 1 && dst_step == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n * itemsize(src_type)));
    return;
  }
  kTable.fn[static_cast<int>(src_type)][static_cast<int>(dst_type)](src, src_step, dst, dst_step, n);
}

}  // namespace kiln::cpu_impl
