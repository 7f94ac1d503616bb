// CPU cumsum/cumprod (CpuBackend::scan): each line along the scanned axis of the (outer, n, inner)
// input in order, as NumPy accumulates, in double for floats and wrapping 64-bit integers for bool and
// integers; the accumulators go to a buffer of that type, converted once to out's dtype (or they are
// out itself when the types agree). Lines split across threads when there are many elements.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "cpu/convert.hpp"
#include "cpu/parallel.hpp"
#include "cpu/reduce.hpp"

namespace kiln::cpu_impl {
namespace {

template <class T>
constexpr bool kFloat = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// Scans lines [begin, end) (line = o * inner + i) of `in` into accumulators `acc` (same layout).
template <class T, class A, bool kProd>
void scan_lines(const T* in, A* acc, int64_t n, int64_t inner, int64_t begin, int64_t end) {
  for (int64_t line = begin; line < end; ++line) {
    const int64_t o = line / inner, i = line - o * inner;
    const T* x = in + o * n * inner + i;
    A* y = acc + o * n * inner + i;
    A running = kProd ? A(1) : A(0);
    for (int64_t k = 0; k < n; ++k) {
      A v;
      if constexpr (std::is_same_v<T, double>)
        v = x[k * inner];
      else if constexpr (kFloat<T>)
        v = static_cast<double>(static_cast<float>(x[k * inner]));  // float, float16, bfloat16
      else
        v = static_cast<A>(static_cast<int64_t>(x[k * inner]));
      running = kProd ? running * v : running + v;
      y[k * inner] = running;
    }
  }
}

template <class T, class A, bool kProd>
void scan_typed(const detail::ScanCall& call, void* acc) {
  const Array& in = *call.in;
  const int64_t outer = in.shape(0), n = in.shape(1), inner = in.shape(2), lines = outer * inner;
  const T* x = static_cast<const T*>(in.data_ptr());
  A* y = static_cast<A*>(acc);
  parallel_for(lines, [&](int64_t begin, int64_t end) { scan_lines<T, A, kProd>(x, y, n, inner, begin, end); },
               std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(n, 1)));
}

}  // namespace

void cpu_scan(const detail::ScanCall& call) {
  const Array& in = *call.in;
  const Array& out = call.out;
  const int64_t count = out.size();
  if (count == 0) return;
  const bool prod = call.op == detail::ReduceOp::CumProd;
  const DType acc_dtype = is_floating(in.dtype()) ? DType::Float64 : DType::Int64;
  std::vector<uint64_t> buffer;
  void* acc = out.data_ptr();
  if (out.dtype() != acc_dtype) {
    buffer.resize(static_cast<size_t>(count));
    acc = buffer.data();
  }
  visit_dtype(in.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // Integers wrap through uint64 (read back as int64), as NumPy's int64 accumulation does.
    using A = std::conditional_t<kFloat<T>, double, uint64_t>;
    if (prod)
      scan_typed<T, A, true>(call, acc);
    else
      scan_typed<T, A, false>(call, acc);
  });
  if (acc != out.data_ptr()) convert(acc, acc_dtype, 1, out.data_ptr(), out.dtype(), 1, count);
}

}  // namespace kiln::cpu_impl
