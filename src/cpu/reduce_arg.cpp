// CPU argmax/argmin: the reduced axes walked in logical order, so ties and NaNs resolve to the first index, as
// NumPy does (the first NaN wins outright). Contiguous runs go block by block (a vectorised pass finds a block's
// extreme; only a winning block is searched for its index); a kept innermost axis updates whole rows of
// per-output states; one long scan splits into ordered chunks merged first to last.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "cpu/parallel.hpp"
#include "cpu/reduce.hpp"
#include "cpu/reduce_ops.hpp"

namespace kiln::cpu_impl {
namespace {

using detail::ReduceOp;
using namespace reduce_ops;

template <class T>
using ArgValue = std::conditional_t<kFloatInput<T>, double, int64_t>;

/// The running winner of an arg reduction: value and logical index (-1: nothing seen yet).
struct ArgState {
  union {
    double f;
    int64_t i;
  } best{};
  int64_t index = -1;
};

template <class W, bool kMax>
inline bool arg_better(W x, W best) {
  if constexpr (std::is_floating_point_v<W>)
    return (kMax ? x > best : x < best) || (x != x && best == best);
  else
    return kMax ? x > best : x < best;
}

template <class W>
inline W& state_value(ArgState& s) {
  if constexpr (std::is_floating_point_v<W>)
    return s.best.f;
  else
    return s.best.i;
}

/// Scans a run whose logical indices are first, first+1, ...: a later element wins only when strictly better,
/// and the first NaN beats everything. Contiguous runs go block by block: a vectorised pass finds the block's
/// extreme (and whether it holds a NaN), and only a block that wins is searched for the index.
template <class T, bool kMax>
void arg_scan_run(ArgState& s, const void* in_ptr, int64_t n, int64_t stride, int64_t first) {
  using W = ArgValue<T>;
  using V = NativeValue<T>;
  const T* in = static_cast<const T*>(in_ptr);
  constexpr bool kFloat = std::is_floating_point_v<V>;
  if constexpr (kFloat) {
    if (s.index >= 0 && std::isnan(state_value<W>(s))) return;  // an earlier NaN already won
  }
  int64_t j = 0;
  if (s.index < 0 && n > 0) {
    state_value<W>(s) = static_cast<W>(load_native(in[0]));
    s.index = first;
    j = 1;
    if constexpr (kFloat) {
      if (std::isnan(state_value<W>(s))) return;  // a NaN first element wins outright (NumPy)
    }
  }
  if (stride == 1) {
    constexpr int64_t kBlock = 1024;
    constexpr int kLanes = static_cast<int>(128 / sizeof(V));
    // Infinities for floats: a block of -inf (for max) must not produce an extreme that is not in it.
    V identity;
    if constexpr (kFloat)
      identity = kMax ? -std::numeric_limits<V>::infinity() : std::numeric_limits<V>::infinity();
    else
      identity = kMax ? std::numeric_limits<V>::lowest() : std::numeric_limits<V>::max();
    while (j < n) {
      const int64_t len = std::min(kBlock, n - j);
      const T* block = in + j;
      V lanes[kLanes];
      uint8_t nan_lanes[kLanes] = {};
      for (V& v : lanes) v = identity;
      int64_t i = 0;
      for (; i + kLanes <= len; i += kLanes) {
#pragma GCC unroll 1
        for (int l = 0; l < kLanes; ++l) {
          V x = load_native(block[i + l]);
          lanes[l] = (kMax ? x > lanes[l] : x < lanes[l]) ? x : lanes[l];
          if constexpr (kFloat) nan_lanes[l] |= x != x;
        }
      }
      for (; i < len; ++i) {
        V x = load_native(block[i]);
        lanes[0] = (kMax ? x > lanes[0] : x < lanes[0]) ? x : lanes[0];
        if constexpr (kFloat) nan_lanes[0] |= x != x;
      }
      V extreme = lanes[0];
      uint8_t has_nan = nan_lanes[0];
      for (int l = 1; l < kLanes; ++l) {
        extreme = (kMax ? lanes[l] > extreme : lanes[l] < extreme) ? lanes[l] : extreme;
        has_nan |= nan_lanes[l];
      }
      if (has_nan) {  // the block's first NaN wins outright
        for (i = 0; load_native(block[i]) == load_native(block[i]); ++i) {
        }
        state_value<W>(s) = static_cast<W>(load_native(block[i]));
        s.index = first + j + i;
        return;
      }
      if (arg_better<W, kMax>(static_cast<W>(extreme), state_value<W>(s))) {
        for (i = 0; load_native(block[i]) != extreme; ++i) {
        }
        state_value<W>(s) = static_cast<W>(extreme);
        s.index = first + j + i;
      }
      j += len;
    }
    return;
  }
  W best = state_value<W>(s);
  int64_t best_j = -1;
  for (; j < n; ++j) {
    W x = static_cast<W>(load_native(in[j * stride]));
    if (arg_better<W, kMax>(x, best)) {
      best = x;
      best_j = j;
      if constexpr (kFloat) {
        if (std::isnan(x)) break;
      }
    }
  }
  if (best_j >= 0) {
    state_value<W>(s) = best;
    s.index = first + best_j;
  }
}

/// For j < n: the state of out element j (states[j * state_stride]) sees in[j * in_stride] at logical index r.
template <class T, bool kMax>
void arg_update_row(ArgState* states, int64_t state_stride, const void* in_ptr, int64_t n, int64_t in_stride,
                    int64_t r) {
  using W = ArgValue<T>;
  const T* in = static_cast<const T*>(in_ptr);
  for (int64_t j = 0; j < n; ++j) {
    ArgState& s = states[j * state_stride];
    W x = static_cast<W>(load_native(in[j * in_stride]));
    if (s.index < 0 || arg_better<W, kMax>(x, state_value<W>(s))) {
      state_value<W>(s) = x;
      s.index = r;
    }
  }
}

/// Merges `later` (covering higher indices) into `s`.
template <class T, bool kMax>
void arg_combine(ArgState& s, const ArgState& later) {
  using W = ArgValue<T>;
  if (later.index < 0) return;
  ArgState copy = later;
  if (s.index < 0 || arg_better<W, kMax>(state_value<W>(copy), state_value<W>(s))) s = later;
}

struct ArgKernels {
  void (*scan_run)(ArgState&, const void*, int64_t, int64_t, int64_t);
  void (*update_row)(ArgState*, int64_t, const void*, int64_t, int64_t, int64_t);
  void (*combine)(ArgState&, const ArgState&);
};

template <class T, class Op, detail::ReduceAcc acc>
ArgKernels arg_kernels_of() {
  if constexpr (acc == detail::ReduceAcc::Index)
    return {&arg_scan_run<T, Op::kIsMax>, &arg_update_row<T, Op::kIsMax>, &arg_combine<T, Op::kIsMax>};
  else
    throw ValueError("cpu reduce: not an index reduction");
}

/// The index kernels of argmax/argmin (`op`'s ArgOpOf) over `dtype`.
ArgKernels select_arg_kernels(ReduceOp op, DType dtype) {
  return visit_dtype(dtype, [op](auto tag) -> ArgKernels {
    using T = decltype(tag);
    switch (op) {
#define KILN_REDUCE_KERNEL(Code, result, empty, fuse, derivative, acc, cpu, ...) \
  case ReduceOp::Code:                                                                      \
    return arg_kernels_of<T, cpu, detail::ReduceAcc::acc>();
#include "core/reductions_internal.def"
      default:
        break;
    }
    throw ValueError(std::string("cpu reduce: ") + detail::reduce_op_name(op) + " is not an index reduction");
  });
}

/// One side (kept or reduced) of the core's plan as byte strides: `strides` of the input, `out_strides` of the
/// output (kept side only).
struct AxisWalk {
  std::vector<int64_t> sizes, strides, out_strides;  // the plan's order; strides in bytes
  int64_t count() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  /// Byte offset of the element with logical (C-order) linear index `linear`.
  int64_t offset_of(int64_t linear) const {
    int64_t offset = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      offset += (linear % sizes[d]) * strides[d];
      linear /= sizes[d];
    }
    return offset;
  }
  /// Byte offset in the output of kept element `linear`.
  int64_t out_offset_of(int64_t linear) const {
    int64_t offset = 0;
    for (size_t d = sizes.size(); d-- > 0;) {
      offset += (linear % sizes[d]) * out_strides[d];
      linear /= sizes[d];
    }
    return offset;
  }
};

/// Scans logical reduced indices [begin, end) starting from `base`, one innermost run at a time.
void arg_scan_range(const ArgKernels& k, ArgState& s, const char* base, const AxisWalk& reduced, int64_t begin,
                    int64_t end, int64_t itemsize) {
  const int64_t inner = reduced.sizes.back(), inner_stride = reduced.strides.back();
  for (int64_t r = begin; r < end;) {
    int64_t run = std::min(inner - r % inner, end - r);
    k.scan_run(s, base + reduced.offset_of(r), run, inner_stride / itemsize, r);
    r += run;
  }
}

}  // namespace

void cpu_arg_reduce(const detail::ReduceCall& call) {
  const Array& in = *call.in;
  const ArgKernels k = select_arg_kernels(call.op, in.dtype());
  const int64_t isz = itemsize(in.dtype());
  // The core's plan (call.plan): reduced axes in logical order, unflipped and merged where C order allows, so
  // a linear reduced index is the logical one NumPy's first-index rule counts in; kept axes sorted by stride
  // with the output's strides alongside.
  const detail::ReductionIteration<2>& plan = call.plan;
  AxisWalk reduced, kept;
  for (int d = 0; d < plan.reduced.ndim; ++d) {
    reduced.sizes.push_back(plan.reduced.shape[d]);
    reduced.strides.push_back(plan.reduced.strides[0][d] * isz);
  }
  for (int d = 0; d < plan.kept.ndim; ++d) {
    kept.sizes.push_back(plan.kept.shape[d]);
    kept.strides.push_back(plan.kept.strides[0][d] * isz);
    kept.out_strides.push_back(plan.kept.strides[1][d] * 8);
  }
  if (reduced.sizes.empty()) {
    reduced.sizes.push_back(1);
    reduced.strides.push_back(0);
  }
  if (kept.sizes.empty()) {
    kept.sizes.push_back(1);
    kept.strides.push_back(0);
    kept.out_strides.push_back(0);
  }
  // The row-update path when the innermost kept axis (the plan's last: the smallest kept stride) has the
  // smallest stride of all.
  int64_t reduced_min = std::numeric_limits<int64_t>::max();
  for (size_t d = 0; d < reduced.sizes.size(); ++d)
    if (reduced.sizes[d] > 1 && reduced.strides[d] != 0)
      reduced_min = std::min(reduced_min, std::abs(reduced.strides[d]));
  const int64_t kept_inner = std::abs(kept.strides.back());
  const bool innermost_kept = kept.sizes.back() > 1 && kept_inner != 0 && kept_inner < reduced_min;
  const int64_t n_reduced = reduced.count(), n_out = kept.count();
  const char* base = static_cast<const char*>(in.data_ptr()) + plan.offsets[0] * isz;
  char* out_base = static_cast<char*>(call.out.data_ptr()) + plan.offsets[1] * 8;
  auto out = [&](int64_t o) -> int64_t& { return *reinterpret_cast<int64_t*>(out_base + kept.out_offset_of(o)); };
  const int threads = max_threads();
  const bool parallel = n_reduced * n_out >= 2 * kParallelThreshold && threads > 1;

  if (innermost_kept && n_reduced > 1) {
    // Walk reduced indices in order, each time updating whole rows of per-output states.
    std::vector<ArgState> states(static_cast<size_t>(n_out));
    const int64_t row = kept.sizes.back(), row_stride = kept.strides.back() / isz;
    const int64_t rows = n_out / row;
    auto work = [&](int64_t begin, int64_t end) {  // columns [begin, end) of the innermost kept axis
      for (int64_t r = 0; r < n_reduced; ++r) {
        const char* rp = base + reduced.offset_of(r);
        for (int64_t q = 0; q < rows; ++q)
          k.update_row(&states[static_cast<size_t>(q * row + begin)], 1, rp + kept.offset_of(q * row + begin),
                       end - begin, row_stride, r);
      }
    };
    if (parallel)
      parallel_for(row, work, 64);
    else
      work(0, row);
    for (int64_t o = 0; o < n_out; ++o) out(o) = states[static_cast<size_t>(o)].index;
    return;
  }
  if (n_out == 1 && parallel) {  // one long scan: chunks in order, merged first to last
    const int64_t chunks = std::min<int64_t>(threads, n_reduced / kParallelThreshold);
    std::vector<ArgState> partial(static_cast<size_t>(std::max<int64_t>(chunks, 1)));
    parallel_chunks(chunks, [&](int64_t c) {
      arg_scan_range(k, partial[static_cast<size_t>(c)], base, reduced, n_reduced * c / chunks,
                     n_reduced * (c + 1) / chunks, isz);
    });
    ArgState s = partial[0];
    for (size_t c = 1; c < partial.size(); ++c) k.combine(s, partial[c]);
    out(0) = s.index;
    return;
  }
  auto work = [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      ArgState s;
      arg_scan_range(k, s, base + kept.offset_of(o), reduced, 0, n_reduced, isz);
      out(o) = s.index;
    }
  };
  if (parallel)
    parallel_for(n_out, work, std::max<int64_t>(1, kParallelThreshold / n_reduced));
  else
    work(0, n_out);
}

}  // namespace kiln::cpu_impl
