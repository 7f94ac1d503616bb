// CPU matrix products. float32/float64 go to OpenBLAS: gemm (oneMKL's for large
// products in a KILN_MKL build), or gemv when one side is a single row/column; a column-major operand is passed as a
// transposed row-major one, so transposed views are never copied. Tiny float products and the other dtypes use a
// blocked loop over operands converted once to the accumulator type (float for float16/bfloat16, 64-bit wrapping
// integers, bool as or-of-ands), split by rows across OpenMP threads.
#include "cpu/matmul.hpp"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/env.hpp"
#include "cpu/convert.hpp"
#include "cpu/parallel.hpp"

#if KILN_HAVE_MKL
// libkiln_mkl.so (scripts/build-mkl, scripts/kiln_mkl.c): oneMKL's row-major C = A B with `threads` threads.
extern "C" {
void kiln_mkl_sgemm(int threads, int trans_a, int trans_b, int m, int n, int k, const float* a, int lda, const float* b,
                    int ldb, float* c, int ldc);
void kiln_mkl_dgemm(int threads, int trans_a, int trans_b, int m, int n, int k, const double* a, int lda,
                    const double* b, int ldb, double* c, int ldc);
}
#endif

namespace kiln::cpu_impl {
namespace {

/// One operand's matrices: (batch, rows, cols) with strides in elements.
struct Operand3 {
  const char* data;
  int64_t batch_stride, row_stride, col_stride, rows, cols;
  explicit Operand3(const Array& x)
      : data(static_cast<const char*>(x.data_ptr())),
        batch_stride(x.strides()[0]),
        row_stride(x.strides()[1]),
        col_stride(x.strides()[2]),
        rows(x.shape()[1]),
        cols(x.shape()[2]) {}
};

/// BLAS view of a matrix: row-major as is (NoTrans), or column-major read as a transposed row-major matrix.
bool blas_form(const Operand3& x, CBLAS_TRANSPOSE& trans, int64_t& ld) {
  if (x.col_stride == 1 && x.row_stride >= std::max<int64_t>(1, x.cols)) {
    trans = CblasNoTrans;
    ld = x.row_stride;
    return true;
  }
  if (x.row_stride == 1 && x.col_stride >= std::max<int64_t>(1, x.rows)) {
    trans = CblasTrans;
    ld = x.col_stride;
    return true;
  }
  return false;
}

/// OpenBLAS's thread count for an (m, n, k) product, for the product only: about one thread per 2^20
/// multiply-adds, at most OpenMP's count. OpenBLAS itself runs everything above 2^18 multiply-adds on every
/// core, and on 16 cores a 100x784x100 product (a small MLP's layer) then spends more time waking and joining
/// threads than computing. OpenBLAS's OpenMP build sets OpenMP's thread count along with its own (and follows
/// OpenMP's on every call), so the count is restored after the product: otherwise the first small product
/// would leave the calling thread at one OpenMP thread for good, and with it every later product, kiln's parallel
/// loops and oneDNN's convolutions.
///
/// After a oneDNN call with OpenBLAS's pthreads build (keep_openmp_team_hot), a product below 2^28 multiply-adds
/// runs on one thread: OpenBLAS's woken threads would spin for a while beside OpenMP's, which the next
/// convolution needs. Only the first product after such a call: a run of products with no OpenMP library call
/// between them (an MLP's step after a oneMKL product) goes back to OpenBLAS's threads
/// (bench/results/resnet50-h200-2026-11-26.md: a batch-16 ResNet-50 forward, whose only product is its classifier).
class BlasThreads {
 public:
  BlasThreads(int64_t m, int64_t n, int64_t k, bool float32) : full_(max_threads()) {
    const int64_t work = m * n * k;
    single_ = work < kOneThreadAfterOpenmp && keep_openmp_team_hot();
    const int want = single_ || contended_products(float32)
                         ? 1
                         : static_cast<int>(std::clamp<int64_t>(work >> 20, 1, std::max(1, full_)));
    if (want != full_ && !in_parallel()) {
      openblas_set_num_threads(want);
      changed_ = true;
    }
  }
  ~BlasThreads() {
    if (changed_) openblas_set_num_threads(full_);
  }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;
  /// Whether the product runs on the calling thread alone (OpenBLAS's own threads stay asleep).
  bool single() const { return single_ || full_ <= 1; }
  /// Whether it does because of keep_openmp_team_hot().
  bool kept() const { return single_; }

 private:
  static constexpr int64_t kOneThreadAfterOpenmp = int64_t{1} << 28;
  int full_;
  bool single_ = false;
  bool changed_ = false;
};

}  // namespace

bool blas_has_own_threads() { return openblas_get_parallel() == 1; }  // 0 sequential, 1 pthreads, 2 OpenMP

namespace {

#if KILN_HAVE_MKL
/// Products of at least this many multiply-adds go to oneMKL in a KILN_MKL build: oneMKL is faster for large
/// products. Alone in a process it is faster for the smaller ones too, but with every product on MKL a small
/// MLP's epoch is slower: kiln's loops on OpenMP's team beside MKL's threads lose more than MKL gains. With kiln's
/// own pool and MKL's threads spinning briefly (KILN_CPU_POOL=kiln GOMP_SPINCOUNT=10000, read by libgomp at load)
/// every product on MKL is fastest (bench/results/resnet50-h200-2026-11-26.md): KILN_MKL_MIN_WORK=0 asks for that
/// split. On two threads or fewer every product goes to oneMKL: there the MLPs' epochs of `kiln bench train` took
/// half the time or less that way (docs/building.md, "BLAS").
constexpr int64_t kMklMinWork = int64_t{1} << 27;
/// The split beside OpenBLAS's pthreads build: products of 2^34 multiply-adds and more on oneMKL, long enough that
/// its speed outweighs the other library's spinning threads.
constexpr int64_t kMklMinWorkBesidePthreads = int64_t{1} << 34;

/// set_mkl_min_work_for_testing's split while >= 0.
std::atomic<int64_t> g_mkl_min_work_for_testing{-1};

/// oneMKL's conditional numerical reproducibility in its strict mode (MKL_CBWR=<branch>,STRICT): a product's bits
/// do not depend on its thread count (without it a 10x100x100 float32 product on one thread and on two differed in
/// their last bits). The branch is named, the widest vectors the CPU has: with AUTO,STRICT 5x32x16 products still
/// differed on an AVX2 machine. Set for the process, before oneMKL's first call reads it, where every product goes to
/// oneMKL (on two threads or fewer: the load watch then runs products on one thread,
/// float32_products_keep_bits) and MKL_CBWR is not set. Not measured on many cores, where the large
/// products alone go to oneMKL: left as it was there.
bool mkl_strict() {
  static const bool strict = [] {
    if (std::getenv("MKL_CBWR") == nullptr && mkl_min_work() == 0) {
      const char* branch = __builtin_cpu_supports("avx512f") ? "AVX512,STRICT"
                           : __builtin_cpu_supports("avx2")  ? "AVX2,STRICT"
                                                             : "COMPATIBLE,STRICT";
      setenv("MKL_CBWR", branch, 0);
    }
    const char* v = std::getenv("MKL_CBWR");
    return v != nullptr && (std::strstr(v, "STRICT") != nullptr || std::strstr(v, "strict") != nullptr);
  }();
  return strict;
}
#endif

}  // namespace

bool float32_products_keep_bits() {
#if KILN_HAVE_MKL
  return mkl_strict() && mkl_min_work() == 0;
#else
  return false;
#endif
}

int64_t mkl_min_work() {
#if KILN_HAVE_MKL
  if (const int64_t forced = g_mkl_min_work_for_testing.load(std::memory_order_relaxed); forced >= 0) return forced;
  static const int64_t set = detail::env_int("KILN_MKL_MIN_WORK", -1);
  if (set >= 0) return set;
  // OpenBLAS's pthreads build (Ubuntu's default) keeps threads of its own, which spin (yielding) for up to 2^28
  // cycles after each product, beside MKL's OpenMP team: products alternating between the two fight for the
  // cores (a GPT-2 step several times slower), and every product on oneMKL made an MLP's epoch slower still
  // (bench/results/session26-h200-2026-11-29.md). So only products far longer than that spin go to oneMKL there.
  static const bool beside_pthreads = blas_has_own_threads();  // fixed by the OpenBLAS build loaded
  if (beside_pthreads) return kMklMinWorkBesidePthreads;
  return max_threads() <= 2 ? 0 : kMklMinWork;
#else
  return std::numeric_limits<int64_t>::max();
#endif
}

namespace {

template <class T>
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, const T* a, int lda, const T* b, int ldb, T* c,
          int ldc) {
#if KILN_HAVE_MKL
  if (int64_t{m} * n * k >= mkl_min_work() && !in_parallel()) {
    // MKL's GNU OpenMP threads are OpenMP's team: later loops run there (note_openmp_library_call).
    (void)mkl_strict();  // before oneMKL's first call
    const int ta_ = ta == CblasTrans, tb_ = tb == CblasTrans;
    if constexpr (std::is_same_v<T, float>)
      kiln_mkl_sgemm(contended_products(true) ? 1 : max_threads(), ta_, tb_, m, n, k, a, lda, b, ldb, c, ldc);
    else
      kiln_mkl_dgemm(contended_products(false) ? 1 : max_threads(), ta_, tb_, m, n, k, a, lda, b, ldb, c, ldc);
    note_openmp_library_call();
    return;
  }
#endif
  const BlasThreads threads(m, n, k, std::is_same_v<T, float>);
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
  else
    cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
  if (threads.kept())
    note_kept_product();
  else if (!threads.single())
    note_blas_call();
}

template <class T>
void gemv(CBLAS_TRANSPOSE trans, int rows, int cols, const T* a, int lda, const T* x, int incx, T* y) {
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemv(CblasRowMajor, trans, rows, cols, 1.0f, a, lda, x, incx, 0.0f, y, 1);
  else
    cblas_dgemv(CblasRowMajor, trans, rows, cols, 1.0, a, lda, x, incx, 0.0, y, 1);
  note_blas_call();
}

/// One (m, k) x (k, n) product through BLAS; the operands are in BLAS form (checked by the caller).
template <class T>
void blas_product(const Operand3& a, const Operand3& b, const char* a_data, const char* b_data, T* c, int64_t m,
                  int64_t n, int64_t k) {
  const T* pa = reinterpret_cast<const T*>(a_data);
  const T* pb = reinterpret_cast<const T*>(b_data);
  CBLAS_TRANSPOSE ta = CblasNoTrans, tb = CblasNoTrans;
  int64_t lda = 1, ldb = 1;
  blas_form(a, ta, lda);
  blas_form(b, tb, ldb);
  const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
  if (n == 1 && b.row_stride > 0) {
    // y(m) = A x, x = b's only column. A column-major is the row-major (k, m) matrix A^T.
    if (ta == CblasNoTrans)
      gemv(CblasNoTrans, im, ik, pa, static_cast<int>(lda), pb, static_cast<int>(b.row_stride), c);
    else
      gemv(CblasTrans, ik, im, pa, static_cast<int>(lda), pb, static_cast<int>(b.row_stride), c);
  } else if (m == 1 && a.col_stride > 0) {
    // y(n) = B^T x, x = a's only row.
    if (tb == CblasNoTrans)
      gemv(CblasTrans, ik, in, pb, static_cast<int>(ldb), pa, static_cast<int>(a.col_stride), c);
    else
      gemv(CblasNoTrans, in, ik, pb, static_cast<int>(ldb), pa, static_cast<int>(a.col_stride), c);
  } else {
    gemm(ta, tb, im, in, ik, pa, static_cast<int>(lda), pb, static_cast<int>(ldb), c, in);
  }
}

// ---------------------------------------------------------------- the loop for everything else

/// Copies the (rows, cols) matrix at `data` into a contiguous buffer of the accumulator dtype.
template <class Acc>
void load_matrix(const char* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                 DType acc_dtype, Acc* dst) {
  const int64_t isz = itemsize(dtype);
  for (int64_t r = 0; r < rows; ++r)
    convert(data + r * row_stride * isz, dtype, col_stride, dst + r * cols, acc_dtype, 1, cols);
}

/// c[i, j] (+)= sum_p a[i, p] (*) b[p, j] over rows [row_begin, row_end), cache-blocked in k and n.
template <class Acc>
void loop_product_rows(const Acc* a, const Acc* b, Acc* c, int64_t row_begin, int64_t row_end, int64_t n, int64_t k) {
  constexpr int64_t kBlockK = 128, kBlockN = 256;  // a (kBlockK x kBlockN) tile of b stays in L2
  for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
    const int64_t j1 = std::min(n, j0 + kBlockN);
    for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
      const int64_t p1 = std::min(k, p0 + kBlockK);
      for (int64_t i = row_begin; i < row_end; ++i) {
        Acc* __restrict crow = c + i * n;
        for (int64_t p = p0; p < p1; ++p) {
          const Acc x = a[i * k + p];
          if constexpr (!std::is_floating_point_v<Acc>) {  // floats keep 0 * inf = nan
            if (x == Acc(0)) continue;
          }
          const Acc* __restrict brow = b + p * n;
          if constexpr (std::is_same_v<Acc, uint8_t>) {
            for (int64_t j = j0; j < j1; ++j) crow[j] |= brow[j];
          } else {
            for (int64_t j = j0; j < j1; ++j) crow[j] += x * brow[j];
          }
        }
      }
    }
  }
}

/// c[i][j] += bias[j] for an m x n row-major block (addmm's folded bias, before the block's one rounding).
template <class T>
void add_bias_rows(T* c, const T* bias, int64_t m, int64_t n) {
  parallel_for(
      m,
      [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          T* __restrict row = c + i * n;
          for (int64_t j = 0; j < n; ++j) row[j] += bias[j];
        }
      },
      std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(1, n)));
}

/// addmm_gelu's epilogue on a row-major block of `count` sums (product + bias, in the accumulator type Acc): the
/// sums stored into `pre` (of dtype `dtype`, rounded there), then c = gelu_tanh(c) in Acc, before the rounding to
/// the output.
template <class Acc>
void gelu_epilogue(Acc* c, int64_t count, void* pre, DType acc_dtype, DType dtype) {
  convert(c, acc_dtype, 1, pre, dtype, 1, count);
  parallel_for(
      count,
      [&](int64_t begin, int64_t end) {
        const Acc k0 = Acc(0.7978845608028654), k1 = Acc(0.044715), half = Acc(0.5), one = Acc(1);
        for (int64_t i = begin; i < end; ++i) {
          const Acc x = c[i];
          c[i] = half * x * (one + std::tanh(k0 * (x + k1 * x * x * x)));
        }
      },
      kParallelThreshold);
}

/// The whole call through the loop: Acc is float, double, uint64_t (integers, wrapping) or uint8_t (bool).
template <class Acc>
void loop_matmul(const detail::MatmulCall& call, DType acc_dtype) {
  const Operand3 a(*call.a), b(*call.b);
  const DType dtype = call.a->dtype();
  const int64_t batches = call.out.shape()[0], m = a.rows, k = a.cols, n = b.cols, isz = itemsize(dtype);
  std::vector<Acc> abuf(static_cast<size_t>(m * k)), bbuf(static_cast<size_t>(k * n)), cbuf(static_cast<size_t>(m * n));
  std::vector<Acc> bias;  // addmm's bias in the accumulator type, added before the one rounding to the output
  if (call.bias) {
    bias.resize(static_cast<size_t>(n));
    convert(call.bias->data_ptr(), dtype, 1, bias.data(), acc_dtype, 1, n);
  }
  char* out = static_cast<char*>(call.out.data_ptr());
  for (int64_t batch = 0; batch < batches; ++batch) {
    load_matrix(a.data + batch * a.batch_stride * isz, dtype, m, k, a.row_stride, a.col_stride, acc_dtype, abuf.data());
    load_matrix(b.data + batch * b.batch_stride * isz, dtype, k, n, b.row_stride, b.col_stride, acc_dtype, bbuf.data());
    std::fill(cbuf.begin(), cbuf.end(), Acc(0));
    parallel_for(
        m,
        [&](int64_t begin, int64_t end) { loop_product_rows(abuf.data(), bbuf.data(), cbuf.data(), begin, end, n, k); },
        std::max<int64_t>(1, kParallelThreshold / std::max<int64_t>(1, n * k)));
    if (call.bias) add_bias_rows(cbuf.data(), bias.data(), m, n);
    if constexpr (std::is_floating_point_v<Acc>) {
      if (call.bias && call.pre_gelu)
        gelu_epilogue(cbuf.data(), m * n, static_cast<char*>(call.pre_gelu->data_ptr()) + batch * m * n * isz,
                      acc_dtype, dtype);
    }
    convert(cbuf.data(), acc_dtype, 1, out + batch * m * n * isz, call.out.dtype(), 1, m * n);
  }
}

/// complex64/complex128 through cblas_cgemm/cblas_zgemm on contiguous copies of each batch's operands (the
/// strides of a complex view need not suit BLAS, and a copy costs little beside the product's 4x flops).
template <class C>
void complex_matmul(const detail::MatmulCall& call) {
  const Operand3 a(*call.a), b(*call.b);
  const DType dtype = call.a->dtype();
  const int64_t batches = call.out.shape()[0], m = a.rows, k = a.cols, n = b.cols, isz = itemsize(dtype);
  if (std::max({m, n, k}) > INT_MAX)
    throw ValueError("matmul: a (" + std::to_string(m) + ", " + std::to_string(k) + ") x (" + std::to_string(k) +
                     ", " + std::to_string(n) + ") complex product has an extent beyond the 32-bit BLAS interface; "
                     "split the product into blocks");
  std::vector<C> abuf(static_cast<size_t>(m * k)), bbuf(static_cast<size_t>(k * n));
  const C one(1), zero(0);
  char* out = static_cast<char*>(call.out.data_ptr());
  for (int64_t batch = 0; batch < batches; ++batch) {
    load_matrix(a.data + batch * a.batch_stride * isz, dtype, m, k, a.row_stride, a.col_stride, dtype, abuf.data());
    load_matrix(b.data + batch * b.batch_stride * isz, dtype, k, n, b.row_stride, b.col_stride, dtype, bbuf.data());
    C* c = reinterpret_cast<C*>(out + batch * m * n * isz);  // out is a fresh contiguous array
    const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
    if constexpr (std::is_same_v<C, complex64_t>)
      cblas_cgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, in, ik, &one, abuf.data(), ik, bbuf.data(), in,
                  &zero, c, in);
    else
      cblas_zgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, im, in, ik, &one, abuf.data(), ik, bbuf.data(), in,
                  &zero, c, in);
  }
}

}  // namespace

void set_mkl_min_work_for_testing(int64_t work) {
#if KILN_HAVE_MKL
  g_mkl_min_work_for_testing.store(work, std::memory_order_relaxed);
#else
  (void)work;
#endif
}

void cpu_matmul(const detail::MatmulCall& call) {
  const Array& out = call.out;
  if (call.gelu_grad_of) return;  // no DGELU epilogue here (Backend::folds_gelu_grad is false): nothing computed
  if (out.size() == 0) return;
  const DType dtype = call.a->dtype();
  const Operand3 a(*call.a), b(*call.b);
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  if (k == 0) {
    std::fill_n(static_cast<char*>(out.data_ptr()), out.nbytes(), char{0});
    return;
  }
  if (dtype == DType::Complex64) return complex_matmul<complex64_t>(call);
  const bool gelu = call.bias && call.pre_gelu;  // addmm_gelu (a floating dtype)
  if (dtype == DType::Complex128) return complex_matmul<complex128_t>(call);
  if (dtype == DType::Float32 || dtype == DType::Float64) {
    CBLAS_TRANSPOSE trans = CblasNoTrans;
    int64_t ld_a = 1, ld_b = 1;
    const bool fits = std::max({m, n, k, a.row_stride, a.col_stride, b.row_stride, b.col_stride}) <= INT_MAX;
    if (!fits)
      throw ValueError("matmul: a (" + std::to_string(m) + ", " + std::to_string(k) + ") x (" + std::to_string(k) +
                       ", " + std::to_string(n) +
                       ") product has an extent or stride beyond the 32-bit BLAS interface; "
                       "split the product into blocks");
    // Tiny products cost less in the loop than in a BLAS call.
    const bool tiny = m * n * k <= 512;
    char* pre = gelu ? static_cast<char*>(call.pre_gelu->data_ptr()) : nullptr;
    if (!tiny && blas_form(a, trans, ld_a) && blas_form(b, trans, ld_b)) {
      const int64_t isz = itemsize(dtype), batches = out.shape()[0];
      char* c = static_cast<char*>(out.data_ptr());
      for (int64_t batch = 0; batch < batches; ++batch) {
        const char* pa = a.data + batch * a.batch_stride * isz;
        const char* pb = b.data + batch * b.batch_stride * isz;
        if (dtype == DType::Float32) {
          float* block = reinterpret_cast<float*>(c + batch * m * n * isz);
          blas_product(a, b, pa, pb, block, m, n, k);
          if (call.bias) add_bias_rows(block, static_cast<const float*>(call.bias->data_ptr()), m, n);
          if (gelu) gelu_epilogue(block, m * n, pre + batch * m * n * isz, dtype, dtype);
        } else {
          double* block = reinterpret_cast<double*>(c + batch * m * n * isz);
          blas_product(a, b, pa, pb, block, m, n, k);
          if (call.bias) add_bias_rows(block, static_cast<const double*>(call.bias->data_ptr()), m, n);
          if (gelu) gelu_epilogue(block, m * n, pre + batch * m * n * isz, dtype, dtype);
        }
      }
      call.bias_added = call.bias != nullptr;
      call.gelu_applied = gelu;
      return;
    }
    if (dtype == DType::Float32)
      loop_matmul<float>(call, DType::Float32);
    else
      loop_matmul<double>(call, DType::Float64);
    call.bias_added = call.bias != nullptr;
    call.gelu_applied = gelu;
    return;
  }
  switch (dtype) {
    case DType::Bool:
      loop_matmul<uint8_t>(call, DType::Bool);
      break;
    case DType::Float16:
    case DType::BFloat16:
      loop_matmul<float>(call, DType::Float32);
      call.bias_added = call.bias != nullptr;
      call.gelu_applied = gelu;
      break;
    default:
      loop_matmul<uint64_t>(call, DType::Int64);
      break;  // integers wrap modulo 2^64, then to the dtype
  }
}

}  // namespace kiln::cpu_impl
