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
// argmax/argmin (reduce_arg.cpp) walk the reduced axes in logical order so ties
// and NaNs resolve to the first index, as NumPy does.
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
#include "cpu/reduce_kernels.hpp"
#include "cpu/reduce_ops.hpp"

namespace kiln::cpu_impl {
namespace {

using detail::ReduceOp;
using namespace reduce_ops;

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

template <class A, class Op>
void finalize_acc(void* acc_ptr, int64_t n) {
  Op::template finalize<A>(static_cast<A*>(acc_ptr), n);
}

template <class T, class Op>
ReduceKernels kernels_for() {
  using A = typename Op::template Acc<T>;
  void (*finalize)(void*, int64_t) = nullptr;
  if constexpr (requires(A * a) { Op::template finalize<A>(a, int64_t{0}); }) finalize = &finalize_acc<A, Op>;
  return {&reduce_run<T, Op>,  &accumulate_run<T, Op>,          &accumulate_rows<T, Op>,     &init_acc<A, Op>,
          &combine_acc<A, Op>, static_cast<int64_t>(sizeof(A)), Op::template acc_dtype<T>(), finalize};
}

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

template <class T>
ReduceKernels complex_kernels(ReduceOp op) {
  if (op == ReduceOp::Sum) return kernels_for<T, SumOp>();  // complex128 accumulators (ArithmeticOp)
  if (op == ReduceOp::Prod) return kernels_for<T, ProdOp>();
  throw DTypeError(std::string("cpu reduce: ") + detail::reduce_op_name(op) + " has no kernel for dtype " +
                   std::string(dtype_name(dtype_of<T>())));
}

}  // namespace

/// The kernels of `op` (a kernel row of kiln/reductions.def) over `dtype` into `out_dtype`.
ReduceKernels select_kernels(ReduceOp op, DType dtype, DType out_dtype) {
  // Complex inputs: sum and prod only (the core refuses the others).
  if (dtype == DType::Complex64) return complex_kernels<complex64_t>(op);
  if (dtype == DType::Complex128) return complex_kernels<complex128_t>(op);
  return visit_dtype(dtype, [op, out_dtype](auto tag) -> ReduceKernels {
    using T = decltype(tag);
    switch (op) {
#define KILN_REDUCE_KERNEL(Code, result, empty, fuse, derivative, acc, cpu, ...) \
  case ReduceOp::Code:                                                                      \
    return kernels_of<T, cpu, detail::ReduceAcc::acc>(out_dtype);
#include "core/reductions_internal.def"
      default:
        break;
    }
    throw ValueError(std::string("cpu reduce: ") + detail::reduce_op_name(op) + " has no kernel of its own");
  });
}

namespace {

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
  const ReductionSplit split = choose_reduction_split(plan.dims, threads, acc_count);
  const size_t axis = split.axis;
  const int64_t size = plan.dims[axis].size;
  const int64_t chunks = std::min<int64_t>({threads, size, total / kParallelThreshold});
  if (chunks <= 1) {
    run_plan(plan, k, acc);
    return;
  }
  if (split.kept) {
    parallel_chunks(
        chunks, [&](int64_t c) { run_plan(sub_plan(plan, axis, size * c / chunks, size * (c + 1) / chunks), k, acc); });
    return;
  }
  reduce_chunks_privately(k, acc, acc_count, chunks, [&](int64_t c, char* target) {
    run_plan(sub_plan(plan, axis, size * c / chunks, size * (c + 1) / chunks), k, target);
  });
}

}  // namespace

void cpu_reduce(const detail::ReduceCall& call) {
  if (detail::is_index_reduction(call.op)) {
    if (call.out.size() > 0) cpu_arg_reduce(call);
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
