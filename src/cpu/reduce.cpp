// CPU reductions. The core's iteration plan (call.plan: negative strides flipped,
// mergeable axes coalesced) is walked with its axes ordered by stride (outermost
// first, kept and reduced interleaved), so the innermost loop
// either reduces one contiguous run into one accumulator (256 bytes of partials
// the compiler vectorises) or, when the innermost axis is kept, adds a whole row
// into a row of accumulators (out[j] op= in[i, j]) — never a large-stride walk.
// Accumulators live in a buffer of the accumulator type (sums and products:
// double for floats, wrapping 64-bit integers; max/min: the element's own type,
// float for 16-bit floats; all/any: bool), converted to out's dtype at the end
// (or they are `out` itself when the types agree).
// Large inputs split across OpenMP threads: over a kept axis when one is big
// enough, else over a reduced axis with a private accumulator buffer per thread.
// argmax/argmin walk the reduced axes in logical order so ties and NaNs resolve
// to the first index, as NumPy does.
#include "cpu/reduce.hpp"


#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "cpu/convert.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu_impl {
namespace {

using detail::ReduceOp;

// ---------------------------------------------------------------- element loading

template <class T>
constexpr bool kFloatInput = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

/// float16 bits to float with selects instead of branches, so loops over it vectorise.
inline float half_bits_to_float(uint16_t h) {
  constexpr uint32_t kExpMask = 0x7c00u << 13;
  uint32_t shifted = static_cast<uint32_t>(h & 0x7fffu) << 13;
  uint32_t exponent = shifted & kExpMask;
  uint32_t normal = shifted + ((127u - 15u) << 23);
  uint32_t inf_nan = normal + ((128u - 16u) << 23);
  // Zero and subnormals: renormalise through a float subtraction.
  float subnormal = std::bit_cast<float>(normal + (1u << 23)) - std::bit_cast<float>(113u << 23);
  uint32_t bits = exponent == kExpMask ? inf_nan : exponent == 0 ? std::bit_cast<uint32_t>(subnormal) : normal;
  return std::bit_cast<float>(bits | (static_cast<uint32_t>(h & 0x8000u) << 16));
}

/// The type max/min/argmax compare in: the element's own type (float for float16/bfloat16, uint8 for bool),
/// so the compiler vectorises over the narrowest lanes; conversions to it are exact.
template <class T>
using NativeValue = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                                       std::conditional_t<std::is_same_v<T, bool>, uint8_t, T>>;
template <class T>
inline NativeValue<T> load_native(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return half_bits_to_float(v.bits);
  else if constexpr (std::is_same_v<T, BFloat16>)
    return std::bit_cast<float>(static_cast<uint32_t>(v.bits) << 16);
  else
    return static_cast<NativeValue<T>>(v);
}
template <class T>
inline double to_double(T v) {
  return static_cast<double>(load_native(v));
}

/// An element as accumulator type A: the value for arithmetic ops (integers wrap into uint64 for sums).
template <class A, class T>
inline A load_value(T v) {
  if constexpr (kFloatInput<T>)
    return static_cast<A>(to_double(v));
  else
    return static_cast<A>(v);
}
/// An element as a truth value (NaN is true, as in NumPy).
template <class T>
inline uint8_t load_truth(T v) {
  return load_native(v) != NativeValue<T>(0);
}

// ---------------------------------------------------------------- the reduction ops

/// Sums and products: double for floats, uint64 (wrapping, read back as int64) for bool and integers.
struct ArithmeticOp {
  template <class T>
  using Acc = std::conditional_t<kFloatInput<T>, double, uint64_t>;
  template <class T>
  static constexpr DType acc_dtype() {
    return kFloatInput<T> ? DType::Float64 : DType::Int64;
  }
  template <class A, class T>
  static A load(T v) {
    return load_value<A>(v);
  }
};
struct SumOp : ArithmeticOp {
  template <class A>
  static A identity() {
    return A(0);
  }
  template <class A>
  static A apply(A a, A x) {
    return a + x;
  }
};
struct ProdOp : ArithmeticOp {
  template <class A>
  static A identity() {
    return A(1);
  }
  template <class A>
  static A apply(A a, A x) {
    return a * x;
  }
};
/// A sum or product into a floating out (mean, var): double for every input, so integer sums round like
/// NumPy's float64 accumulation instead of wrapping (the Arith accumulator of kiln/reductions.def).
template <class Op>
struct FloatArith : Op {
  template <class T>
  using Acc = double;
  template <class T>
  static constexpr DType acc_dtype() {
    return DType::Float64;
  }
  template <class A, class T>
  static A load(T v) {
    return to_double(v);
  }
};

/// linalg::norm: squares summed in double (any input dtype), the square root taken by `finalize`.
struct NormOp : FloatArith<SumOp> {
  template <class A, class T>
  static A load(T v) {
    const double x = to_double(v);
    return x * x;
  }
  template <class A>
  static void finalize(A* acc, int64_t n) {
    for (int64_t i = 0; i < n; ++i) acc[i] = std::sqrt(acc[i]);
  }
};

template <class T>
constexpr DType native_dtype() {
  if constexpr (std::is_same_v<NativeValue<T>, float>)
    return DType::Float32;
  else if constexpr (std::is_same_v<T, bool>)
    return DType::Bool;
  else
    return dtype_of<T>();
}

/// max/min compare in the element's own type.
struct CompareOp {
  template <class T>
  using Acc = NativeValue<T>;
  template <class T>
  static constexpr DType acc_dtype() {
    return native_dtype<T>();
  }
  template <class A, class T>
  static A load(T v) {
    return load_native(v);
  }
};
struct MaxOp : CompareOp {
  template <class A>
  static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return -std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::lowest();
  }
  // NaN propagates: once `a` is NaN no comparison replaces it; a NaN `x` always does. Two plain selects
  // (not `||`, which GCC turns into branches) so loops vectorise to max + masked move.
  template <class A>
  static A apply(A a, A x) {
    if constexpr (std::is_floating_point_v<A>) {
      A larger = x > a ? x : a;
      return x != x ? x : larger;
    } else {
      return x > a ? x : a;
    }
  }
};
struct MinOp : CompareOp {
  template <class A>
  static A identity() {
    if constexpr (std::is_floating_point_v<A>)
      return std::numeric_limits<A>::infinity();
    else
      return std::numeric_limits<A>::max();
  }
  template <class A>
  static A apply(A a, A x) {
    if constexpr (std::is_floating_point_v<A>) {
      A smaller = x < a ? x : a;
      return x != x ? x : smaller;
    } else {
      return x < a ? x : a;
    }
  }
};
/// all/any: truth values as uint8 (read back as bool).
struct TruthOp {
  template <class T>
  using Acc = uint8_t;
  template <class T>
  static constexpr DType acc_dtype() {
    return DType::Bool;
  }
  template <class A, class T>
  static A load(T v) {
    return load_truth(v);
  }
};
struct AllOp : TruthOp {
  template <class A>
  static A identity() {
    return 1;
  }
  template <class A>
  static A apply(A a, A x) {
    return a & x;
  }
};
struct AnyOp : TruthOp {
  template <class A>
  static A identity() {
    return 0;
  }
  template <class A>
  static A apply(A a, A x) {
    return a | x;
  }
};

// ---------------------------------------------------------------- inner kernels

/// *acc = op(*acc, op over in[0], in[stride], ..., in[(n-1)*stride]).
template <class T, class Op>
void reduce_run(void* acc_ptr, const void* in_ptr, int64_t n, int64_t stride) {
  using A = typename Op::template Acc<T>;
  const T* __restrict in = static_cast<const T*>(in_ptr);
  // Independent partial accumulators (256 bytes: four 512-bit registers): without -ffast-math this is what
  // lets the compiler vectorise. The lane loop must stay a loop (not unrolled) for GCC to vectorise it whole.
  constexpr int kLanes = static_cast<int>(256 / sizeof(A));
  A part[kLanes];
  for (A& p : part) p = Op::template identity<A>();
  int64_t i = 0;
  if (stride == 1) {
    for (; i + kLanes <= n; i += kLanes) {
#pragma GCC unroll 1
      for (int l = 0; l < kLanes; ++l) part[l] = Op::apply(part[l], Op::template load<A>(in[i + l]));
    }
    for (; i < n; ++i) part[i % kLanes] = Op::apply(part[i % kLanes], Op::template load<A>(in[i]));
  } else {
    for (; i + 4 <= n; i += 4)
      for (int l = 0; l < 4; ++l) part[l] = Op::apply(part[l], Op::template load<A>(in[(i + l) * stride]));
    for (; i < n; ++i) part[0] = Op::apply(part[0], Op::template load<A>(in[i * stride]));
  }
  A total = part[0];
  for (int l = 1; l < kLanes; ++l) total = Op::apply(total, part[l]);
  A* acc = static_cast<A*>(acc_ptr);
  *acc = Op::apply(*acc, total);
}

/// acc[j * acc_stride] = op(acc[j * acc_stride], in[j * in_stride]) for j < n: one row into a row of accumulators.
template <class T, class Op>
void accumulate_run(void* acc_ptr, int64_t acc_stride, const void* in_ptr, int64_t n, int64_t in_stride) {
  using A = typename Op::template Acc<T>;
  A* __restrict acc = static_cast<A*>(acc_ptr);
  const T* __restrict in = static_cast<const T*>(in_ptr);
  if (acc_stride == 1 && in_stride == 1) {
    for (int64_t j = 0; j < n; ++j) acc[j] = Op::apply(acc[j], Op::template load<A>(in[j]));
  } else {
    for (int64_t j = 0; j < n; ++j)
      acc[j * acc_stride] = Op::apply(acc[j * acc_stride], Op::template load<A>(in[j * in_stride]));
  }
}

/// acc[j] = op(acc[j], in[r * row_stride + j] for r < rows) for j < n, four rows per pass over acc (in column
/// blocks that keep acc in L2): the outer-axis reduction of a C-contiguous matrix.
template <class T, class Op>
void accumulate_rows(void* acc_ptr, const void* in_ptr, int64_t n, int64_t rows, int64_t row_stride) {
  using A = typename Op::template Acc<T>;
  constexpr int64_t kColumns = 16384;
  for (int64_t j0 = 0; j0 < n; j0 += kColumns) {
    const int64_t width = std::min(kColumns, n - j0);
    A* __restrict acc = static_cast<A*>(acc_ptr) + j0;
    const T* base = static_cast<const T*>(in_ptr) + j0;
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      const T* __restrict p0 = base + r * row_stride;
      const T* __restrict p1 = p0 + row_stride;
      const T* __restrict p2 = p1 + row_stride;
      const T* __restrict p3 = p2 + row_stride;
      for (int64_t j = 0; j < width; ++j) {
        A pair01 = Op::apply(Op::template load<A>(p0[j]), Op::template load<A>(p1[j]));
        A pair23 = Op::apply(Op::template load<A>(p2[j]), Op::template load<A>(p3[j]));
        acc[j] = Op::apply(acc[j], Op::apply(pair01, pair23));
      }
    }
    for (; r < rows; ++r) {
      const T* __restrict p = base + r * row_stride;
      for (int64_t j = 0; j < width; ++j) acc[j] = Op::apply(acc[j], Op::template load<A>(p[j]));
    }
  }
}

template <class A, class Op>
void init_acc(void* acc_ptr, int64_t n) {
  A* acc = static_cast<A*>(acc_ptr);
  std::fill(acc, acc + n, Op::template identity<A>());
}

template <class A, class Op>
void combine_acc(void* dst_ptr, const void* src_ptr, int64_t n) {
  A* dst = static_cast<A*>(dst_ptr);
  const A* src = static_cast<const A*>(src_ptr);
  for (int64_t i = 0; i < n; ++i) dst[i] = Op::apply(dst[i], src[i]);
}

struct ReduceKernels {
  void (*reduce_run)(void* acc, const void* in, int64_t n, int64_t stride);
  void (*accumulate_run)(void* acc, int64_t acc_stride, const void* in, int64_t n, int64_t in_stride);
  void (*accumulate_rows)(void* acc, const void* in, int64_t n, int64_t rows, int64_t row_stride);
  void (*init)(void* acc, int64_t n);
  void (*combine)(void* dst, const void* src, int64_t n);
  int64_t acc_itemsize;
  DType acc_dtype;  ///< the dtype whose bits the accumulator holds (uint64 sums read as int64, uint8 truth as bool)
  void (*finalize)(void* acc, int64_t n);  ///< applied to the finished accumulators (norm's sqrt); may be null
};

template <class A, class Op>
void finalize_acc(void* acc_ptr, int64_t n) {
  Op::template finalize<A>(static_cast<A*>(acc_ptr), n);
}

template <class T, class Op>
ReduceKernels kernels_for() {
  using A = typename Op::template Acc<T>;
  void (*finalize)(void*, int64_t) = nullptr;
  if constexpr (requires(A* a) { Op::template finalize<A>(a, int64_t{0}); }) finalize = &finalize_acc<A, Op>;
  return {&reduce_run<T, Op>,
          &accumulate_run<T, Op>,
          &accumulate_rows<T, Op>,
          &init_acc<A, Op>,
          &combine_acc<A, Op>,
          static_cast<int64_t>(sizeof(A)),
          Op::template acc_dtype<T>(),
          finalize};
}

/// argmax/argmin's CPU ops (the `cpu` column of their rows): they take the index path (arg_reduce).
template <bool kMax>
struct ArgOpOf {
  static constexpr bool kIsMax = kMax;
};
using ArgMaxOp = ArgOpOf<true>;
using ArgMinOp = ArgOpOf<false>;

/// The kernels of a row with CPU op `Op` and accumulator rule `acc` over input type T into `out_dtype`.
template <class T, class Op, detail::ReduceAcc acc>
ReduceKernels kernels_of(DType out_dtype) {
  if constexpr (acc == detail::ReduceAcc::Index) {
    (void)out_dtype;
    throw ValueError("cpu reduce: argmax/argmin take the index path");
  } else {
    if constexpr (acc == detail::ReduceAcc::Arith && !kFloatInput<T>) {
      if (is_floating(out_dtype)) return kernels_for<T, FloatArith<Op>>();
    }
    return kernels_for<T, Op>();
  }
}

/// The kernels of `op` (a kernel row of kiln/reductions.def) over `dtype` into `out_dtype`.
ReduceKernels select_kernels(ReduceOp op, DType dtype, DType out_dtype) {
  return visit_dtype(dtype, [op, out_dtype](auto tag) -> ReduceKernels {
    using T = decltype(tag);
    switch (op) {
#define KILN_REDUCE_KERNEL(Code, name, api, result, empty, fuse, derivative, acc, cpu, ...) \
  case ReduceOp::Code:                                                                       \
    return kernels_of<T, cpu, detail::ReduceAcc::acc>(out_dtype);
#include "kiln/reductions.def"
      default:
        break;
    }
    throw ValueError(std::string("cpu reduce: ") + detail::reduce_op_name(op) + " has no kernel of its own");
  });
}

// ---------------------------------------------------------------- iteration plan

struct Dim {
  int64_t size;
  int64_t in_stride;   ///< elements
  int64_t acc_stride;  ///< elements; 0 on reduced axes
  bool reduced;
};

/// The axes to walk, outermost first; the last one is the inner kernel's.
struct Plan {
  std::vector<Dim> dims;
  const char* in = nullptr;
  int64_t acc_offset = 0;  ///< elements from the accumulator buffer's start (negative strides shift it)
  int64_t in_itemsize = 0;
};

/// The core's plan (call.plan: size-1 axes dropped, negative strides flipped, kept and reduced axes each
/// sorted and merged) with both sides interleaved by input stride.
Plan make_plan(const detail::ReduceCall& call) {
  const detail::ReductionIteration<2>& it = call.plan;
  Plan plan;
  plan.in_itemsize = itemsize(call.in->dtype());
  plan.in = static_cast<const char*>(call.in->data_ptr()) + it.offsets[0] * plan.in_itemsize;
  plan.acc_offset = it.offsets[1];  // out is contiguous, as the accumulator buffer is
  plan.dims.reserve(static_cast<size_t>(it.kept.ndim + it.reduced.ndim));
  for (int d = 0; d < it.kept.ndim; ++d)
    plan.dims.push_back(Dim{it.kept.shape[d], it.kept.strides[0][d], it.kept.strides[1][d], false});
  for (int d = 0; d < it.reduced.ndim; ++d)
    if (it.reduced.shape[d] > 1) plan.dims.push_back(Dim{it.reduced.shape[d], it.reduced.strides[0][d], 0, true});
  // Largest stride outermost; broadcast (stride 0) axes outside everything so inner runs read fresh memory.
  auto key = [](const Dim& d) { return d.in_stride == 0 ? std::numeric_limits<int64_t>::max() : d.in_stride; };
  std::stable_sort(plan.dims.begin(), plan.dims.end(), [&](const Dim& a, const Dim& b) { return key(a) > key(b); });
  if (plan.dims.empty()) plan.dims.push_back(Dim{1, 1, 0, true});
  return plan;
}

/// Runs the plan into the accumulator buffer `acc` (its first element; plan.acc_offset is added).
void run_plan(const Plan& plan, const ReduceKernels& k, char* acc) {
  const int outer = static_cast<int>(plan.dims.size()) - 1;
  const Dim& inner = plan.dims.back();
  // Contiguous kept columns under a reduced axis: the rows kernel takes both axes at once.
  const bool rows = !inner.reduced && inner.in_stride == 1 && inner.acc_stride == 1 && outer >= 1 &&
                    plan.dims[static_cast<size_t>(outer - 1)].reduced;
  const int looped = rows ? outer - 1 : outer;
  int64_t outer_count = 1;
  for (int d = 0; d < looped; ++d) outer_count *= plan.dims[static_cast<size_t>(d)].size;
  std::vector<int64_t> index(static_cast<size_t>(std::max(looped, 1)), 0);
  const char* ip = plan.in;
  char* ap = acc + plan.acc_offset * k.acc_itemsize;
  for (int64_t it = 0; it < outer_count; ++it) {
    if (rows) {
      const Dim& row_dim = plan.dims[static_cast<size_t>(outer - 1)];
      k.accumulate_rows(ap, ip, inner.size, row_dim.size, row_dim.in_stride);
    } else if (inner.reduced) {
      k.reduce_run(ap, ip, inner.size, inner.in_stride);
    } else {
      k.accumulate_run(ap, inner.acc_stride, ip, inner.size, inner.in_stride);
    }
    for (int d = looped - 1; d >= 0; --d) {
      const Dim& dim = plan.dims[static_cast<size_t>(d)];
      ip += dim.in_stride * plan.in_itemsize;
      ap += dim.acc_stride * k.acc_itemsize;
      if (++index[static_cast<size_t>(d)] < dim.size) break;
      ip -= dim.in_stride * dim.size * plan.in_itemsize;
      ap -= dim.acc_stride * dim.size * k.acc_itemsize;
      index[static_cast<size_t>(d)] = 0;
    }
  }
}

/// The plan restricted to elements [begin, end) of axis `d`.
Plan sub_plan(const Plan& plan, size_t d, int64_t begin, int64_t end) {
  Plan sub = plan;
  sub.dims[d].size = end - begin;
  sub.in += begin * plan.dims[d].in_stride * plan.in_itemsize;
  sub.acc_offset += begin * plan.dims[d].acc_stride;
  return sub;
}

void execute(const Plan& plan, const ReduceKernels& k, char* acc, int64_t total, int64_t acc_count) {
  const int threads = max_threads();
  if (total < 2 * kParallelThreshold || threads <= 1) {
    run_plan(plan, k, acc);
    return;
  }
  int kept = -1, red = -1;
  for (size_t d = 0; d < plan.dims.size(); ++d) {
    int& best = plan.dims[d].reduced ? red : kept;
    if (best < 0 || plan.dims[d].size > plan.dims[static_cast<size_t>(best)].size) best = static_cast<int>(d);
  }
  const int64_t kept_size = kept >= 0 ? plan.dims[static_cast<size_t>(kept)].size : 0;
  const int64_t red_size = red >= 0 ? plan.dims[static_cast<size_t>(red)].size : 0;
  // Splitting a kept axis needs no extra memory; splitting a reduced one needs a private buffer per thread.
  const bool split_kept = kept >= 0 && (kept_size >= 4 * threads || red_size < 2 * threads ||
                                        acc_count * static_cast<int64_t>(threads) > (int64_t{1} << 22));
  const size_t axis = static_cast<size_t>(split_kept ? kept : red);
  const int64_t size = plan.dims[axis].size;
  const int64_t chunks = std::min<int64_t>({threads, size, total / kParallelThreshold});
  if (chunks <= 1) {
    run_plan(plan, k, acc);
    return;
  }
  if (split_kept) {
    parallel_chunks(chunks, [&](int64_t c) {
      run_plan(sub_plan(plan, axis, size * c / chunks, size * (c + 1) / chunks), k, acc);
    });
    return;
  }
  // Chunk 0 accumulates into `acc`; the others into private buffers combined afterwards.
  const int64_t words = (acc_count * k.acc_itemsize + 7) / 8;
  std::vector<std::vector<uint64_t>> privates(static_cast<size_t>(chunks - 1), std::vector<uint64_t>(words));
  parallel_chunks(chunks, [&](int64_t c) {
    char* target = acc;
    if (c > 0) {
      target = reinterpret_cast<char*>(privates[static_cast<size_t>(c - 1)].data());
      k.init(target, acc_count);
    }
    run_plan(sub_plan(plan, axis, size * c / chunks, size * (c + 1) / chunks), k, target);
  });
  for (const auto& buffer : privates) k.combine(acc, buffer.data(), acc_count);
}

// ---------------------------------------------------------------- argmax / argmin

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
#define KILN_REDUCE_KERNEL(Code, name, api, result, empty, fuse, derivative, acc, cpu, ...) \
  case ReduceOp::Code:                                                                       \
    return arg_kernels_of<T, cpu, detail::ReduceAcc::acc>();
#include "kiln/reductions.def"
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

void arg_reduce(const detail::ReduceCall& call) {
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
    if (reduced.sizes[d] > 1 && reduced.strides[d] != 0) reduced_min = std::min(reduced_min, std::abs(reduced.strides[d]));
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

}  // namespace

void cpu_reduce(const detail::ReduceCall& call) {
  if (detail::is_index_reduction(call.op)) {
    if (call.out.size() > 0) arg_reduce(call);
    return;
  }
  const Array& out = call.out;
  const int64_t acc_count = out.size();
  if (acc_count == 0) return;
  const ReduceKernels k = select_kernels(call.op, call.in->dtype(), out.dtype());
  // Accumulate straight into `out` when it already has the accumulator's layout.
  const bool direct = out.dtype() == k.acc_dtype && out.is_contiguous();
  std::vector<uint64_t> buffer;
  char* acc;
  if (direct) {
    acc = static_cast<char*>(out.data_ptr());
  } else {
    buffer.resize(static_cast<size_t>((acc_count * k.acc_itemsize + 7) / 8));
    acc = reinterpret_cast<char*>(buffer.data());
  }
  k.init(acc, acc_count);
  if (call.in->size() > 0) execute(make_plan(call), k, acc, call.in->size(), acc_count);
  if (k.finalize) k.finalize(acc, acc_count);
  if (!direct) convert(acc, k.acc_dtype, 1, out.data_ptr(), out.dtype(), 1, acc_count);
}

}  // namespace kiln::cpu_impl
