// CPU elementwise engine: one strided iteration core for every op, copy and cast.
//
// 1. Operands (output first) get byte strides from the core's iteration plan
//    (call.plan: axes coalesced, so a contiguous problem is one long row).
// 2. The row loop calls one kernel per (op, compute type) on whole rows. An
//    operand whose dtype is not the compute type (a cast, float16, bfloat16) is
//    converted through a small stack buffer in blocks of kBlock elements; others
//    are read and written in place, strided or not.
// 3. Above a size threshold the flat range of elements is split across threads.
#include <array>
#include <cstring>
#include <utility>

#include "core/backend.hpp"
#include "cpu/convert.hpp"
#include "cpu/elementwise.hpp"
#include "cpu/kernels.hpp"
#include "cpu/parallel.hpp"
#include "cpu/vector_math.hpp"

// On a CPU with AVX-512 (a native build), the row loops use the 512-bit registers the libmvec rows use anyway:
// GCC's tuning otherwise keeps loops at 256 bits. Elements are independent, so the width changes no result.
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif

namespace kiln::cpu_impl {

namespace {

constexpr int64_t kBlock = 512;
constexpr int kMaxOperands = 4;

using KernelFn = ElementwiseKernel;

// Steps are in elements of each operand's type: 0 (broadcast), 1 (contiguous) or any.
template <OpCode OP, class T>
void kernel(char* const* p, const int64_t* s, int64_t n) {
  using R = result_t<OP, T>;
  R* o = reinterpret_cast<R*>(p[0]);
  constexpr int arity = arity_of(OP);
  if constexpr (OP == OpCode::Where) {
    const bool* c = reinterpret_cast<const bool*>(p[1]);
    const T* x = reinterpret_cast<const T*>(p[2]);
    const T* y = reinterpret_cast<const T*>(p[3]);
    for (int64_t i = 0; i < n; ++i) o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];
  } else if constexpr (arity == 1) {
    const T* a = reinterpret_cast<const T*>(p[1]);
#ifdef KILN_VECTOR_MATH
    if constexpr (std::is_same_v<T, float> && vector_math_f32(OP).avx2 != nullptr) {
      if (s[0] == 1 && s[1] == 1) return apply_vector_f32(vector_math_f32(OP), a, o, n);
    }
#endif
    if (s[0] == 1 && s[1] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = apply<OP, T>(a[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = apply<OP, T>(a[i * s[1]]);
    }
  } else if constexpr (arity == 2) {
    const T* a = reinterpret_cast<const T*>(p[1]);
    const T* b = reinterpret_cast<const T*>(p[2]);
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = apply<OP, T>(a[i], b[i]);
    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
      const T bv = b[0];
      for (int64_t i = 0; i < n; ++i) o[i] = apply<OP, T>(a[i], bv);
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      const T av = a[0];
      for (int64_t i = 0; i < n; ++i) o[i] = apply<OP, T>(av, b[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) o[i * s[0]] = apply<OP, T>(a[i * s[1]], b[i * s[2]]);
    }
  } else {
    const T* a = reinterpret_cast<const T*>(p[1]);
    const T* b = reinterpret_cast<const T*>(p[2]);
    const T* c = reinterpret_cast<const T*>(p[3]);
    for (int64_t i = 0; i < n; ++i) o[i * s[0]] = apply<OP, T>(a[i * s[1]], b[i * s[2]], c[i * s[3]]);
  }
}

// Kernel table: [op][compute dtype], nullptr where the op has no kernel for that type.
template <size_t I, class T> constexpr KernelFn entry() {
  constexpr auto op = static_cast<OpCode>(I);
  if constexpr (has_kernel<op, T>()) return &kernel<op, T>;
  else return nullptr;
}
template <class T, size_t... I>
constexpr std::array<KernelFn, sizeof...(I)> row(std::index_sequence<I...>) {
  return {entry<I, T>()...};
}
constexpr size_t kNumOps = static_cast<size_t>(OpCode::Count);
using Row = std::array<KernelFn, kNumOps>;
const Row kKernels[kNumDTypes] = {
    row<bool>(std::make_index_sequence<kNumOps>{}),    row<int8_t>(std::make_index_sequence<kNumOps>{}),
    row<int16_t>(std::make_index_sequence<kNumOps>{}), row<int32_t>(std::make_index_sequence<kNumOps>{}),
    row<int64_t>(std::make_index_sequence<kNumOps>{}), row<uint8_t>(std::make_index_sequence<kNumOps>{}),
    Row{},                                             Row{},
    row<float>(std::make_index_sequence<kNumOps>{}),   row<double>(std::make_index_sequence<kNumOps>{}),
    row<complex64_t>(std::make_index_sequence<kNumOps>{}), row<complex128_t>(std::make_index_sequence<kNumOps>{}),
};

// Raw copies for Identity between equal dtypes: by item size, no conversion (float16 stays bits).
template <class W> void raw_copy(char* const* p, const int64_t* s, int64_t n) {
  W* o = reinterpret_cast<W*>(p[0]);
  const W* a = reinterpret_cast<const W*>(p[1]);
  if (s[0] == 1 && s[1] == 1) std::memcpy(o, a, static_cast<size_t>(n) * sizeof(W));
  else for (int64_t i = 0; i < n; ++i) o[i * s[0]] = a[i * s[1]];
}
KernelFn raw_copy_kernel(int64_t size) {
  switch (size) {
    case 1: return &raw_copy<uint8_t>;
    case 2: return &raw_copy<uint16_t>;
    case 4: return &raw_copy<uint32_t>;
    case 8: return &raw_copy<uint64_t>;
    default: return &raw_copy<complex128_t>;
  }
}

struct Plan {
  int num = 0;                       // operands, output first
  char* base[kMaxOperands];          // byte address of element 0
  DType dtype[kMaxOperands];         // storage dtype
  DType kernel_dtype[kMaxOperands];  // dtype the kernel reads/writes
  bool buffered[kMaxOperands];
  int64_t ndim = 0;
  int64_t shape[kMaxRank];
  int64_t strides[kMaxOperands][kMaxRank];  // bytes
  KernelFn fn = nullptr;
  alignas(16) unsigned char scalars[kMaxOperands][16];
};

// Runs rows of the coalesced problem covering flat elements [begin, end).
void run_range(const Plan& p, int64_t begin, int64_t end) {
  const int64_t nd = p.ndim, inner = p.shape[nd - 1];
  int64_t idx[kMaxRank] = {};
  int64_t rest = begin / inner;
  for (int64_t d = nd - 2; d >= 0; --d) {
    idx[d] = rest % p.shape[d];
    rest /= p.shape[d];
  }
  int64_t col = begin % inner;
  bool any_buffered = false;
  for (int k = 0; k < p.num; ++k) any_buffered |= p.buffered[k];
  alignas(64) unsigned char buffers[kMaxOperands][kBlock * 16];  // up to complex128
  char* ptrs[kMaxOperands];
  int64_t steps[kMaxOperands];
  for (int64_t pos = begin; pos < end;) {
    int64_t len = std::min(inner - col, end - pos);
    char* row[kMaxOperands];
    for (int k = 0; k < p.num; ++k) {
      int64_t off = col * p.strides[k][nd - 1];
      for (int64_t d = 0; d < nd - 1; ++d) off += idx[d] * p.strides[k][d];
      row[k] = p.base[k] + off;
    }
    for (int64_t done = 0; done < len;) {
      int64_t n = any_buffered ? std::min(kBlock, len - done) : len - done;
      for (int k = 0; k < p.num; ++k) {
        int64_t es = itemsize(p.dtype[k]);
        char* at = row[k] + done * p.strides[k][nd - 1];
        if (p.buffered[k]) {
          ptrs[k] = reinterpret_cast<char*>(buffers[k]);
          steps[k] = 1;
          if (k > 0)
            convert(at, p.dtype[k], p.strides[k][nd - 1] / es, buffers[k], p.kernel_dtype[k], 1, n);
        } else {
          ptrs[k] = at;
          steps[k] = p.strides[k][nd - 1] / es;
        }
      }
      p.fn(ptrs, steps, n);
      if (p.buffered[0]) {
        int64_t es = itemsize(p.dtype[0]);
        convert(buffers[0], p.kernel_dtype[0], 1, row[0] + done * p.strides[0][nd - 1], p.dtype[0],
                p.strides[0][nd - 1] / es, n);
      }
      done += n;
    }
    pos += len;
    col = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      if (++idx[d] < p.shape[d]) break;
      idx[d] = 0;
    }
  }
}

template <class T> void store_scalar(unsigned char* dst, const Scalar& s) {
  T v = s.to<T>();
  std::memcpy(dst, &v, sizeof(T));
}

// out[i] = start + i * step (Arange), with the last element set to stop for Linspace's endpoint.
void sequence(const detail::ElementwiseCall& call) {
  const Array& out = call.out;
  double start = call.params[0].to_double(), step = call.params[1].to_double();
  bool integral = out.dtype() == DType::Bool || is_integral(out.dtype());
  int64_t istart = call.params[0].to_int64(), istep = call.params[1].to_int64();
  bool exact_int = integral && !call.params[0].is_floating() && !call.params[1].is_floating();
  int64_t n = out.size();
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* o = out.data<T>();
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
          o[i] = T(static_cast<float>(start + static_cast<double>(i) * step));
        else if (exact_int)
          o[i] = static_cast<T>(istart + i * istep);
        else
          o[i] = static_cast<T>(start + static_cast<double>(i) * step);
      }
    });
    if (call.op == OpCode::Linspace && call.params[2].to_bool() && n > 1) {
      double stop = call.params[3].to_double();
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) o[n - 1] = T(static_cast<float>(stop));
      else o[n - 1] = static_cast<T>(stop);
    }
  });
}

}  // namespace

ElementwiseKernel cpu_kernel(OpCode op, DType compute) {
  return kKernels[static_cast<int>(compute_dtype(compute))][static_cast<size_t>(op)];
}

bool cpu_has_kernel(OpCode op, DType compute) {
  if (compute == DType::Float16 || compute == DType::BFloat16) compute = DType::Float32;
  return kKernels[static_cast<int>(compute)][static_cast<size_t>(op)] != nullptr;
}

void cpu_elementwise(const detail::ElementwiseCall& call) {
  if (call.op == OpCode::Arange || call.op == OpCode::Linspace) {
    if (!call.out.is_contiguous()) throw Error("internal: sequence ops need a contiguous output");
    sequence(call);
    return;
  }
  Plan p;
  p.num = 1 + call.num_inputs;
  DType compute = compute_dtype(call.compute);
  // Casts and copies convert source -> destination dtype in one step (convert(), through the
  // input buffer when the dtypes differ), then copy raw bytes: float64 -> float16 rounds once.
  bool raw = call.op == OpCode::Identity && call.inputs[0].array;
  // The core's plan (call.plan) covers the array operands, output first; scalars step by 0.
  const detail::ElementwiseIteration<detail::kMaxElementwiseOperands>& plan = call.plan;
  p.ndim = plan.ndim;
  for (int d = 0; d < plan.ndim; ++d) p.shape[d] = plan.shape[d];
  int array_index = 0;
  for (int k = 0; k < p.num; ++k) {
    const Array* a = k == 0 ? &call.out : call.inputs[k - 1].array;
    DType want;
    if (raw) want = call.out.dtype();
    else if (k == 0) want = detail::returns_bool(call.op) ? DType::Bool
                            : detail::returns_real(call.op) ? real_dtype(compute) : compute;
    else if (call.op == OpCode::Where && k == 1) want = DType::Bool;
    else want = compute;
    p.kernel_dtype[k] = want;
    if (a) {
      p.base[k] = static_cast<char*>(a->data_ptr());
      p.dtype[k] = a->dtype();
      p.buffered[k] = a->dtype() != want;
      for (int d = 0; d < plan.ndim; ++d) p.strides[k][d] = plan.strides[array_index][d] * itemsize(a->dtype());
      ++array_index;
    } else {  // a scalar: stored once in the compute type, read with stride 0
      visit_any_dtype(want, [&](auto tag) { store_scalar<decltype(tag)>(p.scalars[k], call.inputs[k - 1].scalar); });
      p.base[k] = reinterpret_cast<char*>(p.scalars[k]);
      p.dtype[k] = want;
      p.buffered[k] = false;
      for (int d = 0; d < plan.ndim; ++d) p.strides[k][d] = 0;
    }
  }
  p.fn = raw ? raw_copy_kernel(itemsize(call.out.dtype()))
             : kKernels[static_cast<int>(compute)][static_cast<size_t>(call.op)];
  if (!p.fn)
    throw DTypeError(std::string(detail::op_info(call.op).name) + ": no CPU kernel for dtype " +
                     std::string(dtype_name(call.compute)));
  int64_t total = call.out.size();
  bool heavy = detail::op_info(call.op).rule == detail::TypeRule::Float;
  parallel_for(total, [&](int64_t b, int64_t e) { run_range(p, b, e); },
               // Waking a worker costs microseconds: cheap ops split only above 2^17 elements.
               heavy ? kParallelThreshold / 8 : kParallelThreshold * 4);
}

}  // namespace kiln::cpu_impl
