// linalg::eig and linalg::eigvals: the eigen-decomposition of general square matrices with LAPACK's geev from
// OpenBLAS, batched by a loop over the leading axes. Real input runs sgeev (float32 and narrower floats) or dgeev
// (float64, integers, bool), whose real results are assembled into complex ones: LAPACK stores a complex-conjugate
// pair's eigenvectors as two real columns (re, im) at the pair's first index. Complex input runs cgeev / zgeev.
// Results are complex64 or complex128 (torch.linalg.eig's rule; NumPy casts them to real when every eigenvalue of
// real input is real). Operands on another device are copied to the host and the results back (cuSOLVER's Xgeev
// is a later step). No gradient (eig's backward, PyTorch's linalg_eig_backward, is not implemented).
//
// LAPACK is column-major and kiln row-major: each matrix is transposed on the way in (swapaxes before the host
// copy) and the eigenvectors on the way out.
#include <algorithm>
#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "core/autograd.hpp"
#include "kiln/kiln.hpp"

extern "C" {
// Fortran character arguments carry a hidden length after the others (gfortran's ABI).
void sgeev_(const char* jobvl, const char* jobvr, const int* n, float* a, const int* lda, float* wr, float* wi,
            float* vl, const int* ldvl, float* vr, const int* ldvr, float* work, const int* lwork, int* info,
            size_t jobvl_len, size_t jobvr_len);
void dgeev_(const char* jobvl, const char* jobvr, const int* n, double* a, const int* lda, double* wr, double* wi,
            double* vl, const int* ldvl, double* vr, const int* ldvr, double* work, const int* lwork, int* info,
            size_t jobvl_len, size_t jobvr_len);
void cgeev_(const char* jobvl, const char* jobvr, const int* n, kiln::complex64_t* a, const int* lda,
            kiln::complex64_t* w, kiln::complex64_t* vl, const int* ldvl, kiln::complex64_t* vr, const int* ldvr,
            kiln::complex64_t* work, const int* lwork, float* rwork, int* info, size_t jobvl_len, size_t jobvr_len);
void zgeev_(const char* jobvl, const char* jobvr, const int* n, kiln::complex128_t* a, const int* lda,
            kiln::complex128_t* w, kiln::complex128_t* vl, const int* ldvl, kiln::complex128_t* vr, const int* ldvr,
            kiln::complex128_t* work, const int* lwork, double* rwork, int* info, size_t jobvl_len, size_t jobvr_len);
}

namespace kiln::linalg {
namespace {

template <class T>
struct Real {
  using type = T;
};
template <class R>
struct Real<std::complex<R>> {
  using type = R;
};

/// geev of one column-major n x n matrix `a` (overwritten): eigenvalues into w (n), and with `vectors` the right
/// eigenvectors row-major into v (n x n, one per column). Returns LAPACK's info.
template <class T>
int geev(int n, T* a, std::complex<typename Real<T>::type>* w, std::complex<typename Real<T>::type>* v) {
  using R = typename Real<T>::type;
  using C = std::complex<R>;
  const char jobvl = 'N', jobvr = v != nullptr ? 'V' : 'N';
  const int ld = std::max(n, 1), ldvl = 1;
  std::vector<T> vr(v != nullptr ? static_cast<size_t>(n) * static_cast<size_t>(n) : 1);
  T vl{};
  int info = 0, lwork = -1;
  T query{};
  if constexpr (std::is_same_v<T, R>) {
    std::vector<R> wr(static_cast<size_t>(n)), wi(static_cast<size_t>(n));
    auto call = [&](T* work) {
      if constexpr (std::is_same_v<R, float>)
        sgeev_(&jobvl, &jobvr, &n, a, &ld, wr.data(), wi.data(), &vl, &ldvl, vr.data(), &ld, work, &lwork, &info, 1, 1);
      else
        dgeev_(&jobvl, &jobvr, &n, a, &ld, wr.data(), wi.data(), &vl, &ldvl, vr.data(), &ld, work, &lwork, &info, 1, 1);
    };
    call(&query);
    lwork = std::max(1, static_cast<int>(query));
    std::vector<T> work(static_cast<size_t>(lwork));
    call(work.data());
    if (info != 0) return info;
    for (int j = 0; j < n; ++j) w[j] = C(wr[static_cast<size_t>(j)], wi[static_cast<size_t>(j)]);
    if (v == nullptr) return 0;
    for (int j = 0; j < n; ++j) {
      const R* re = vr.data() + static_cast<ptrdiff_t>(j) * n;
      if (wi[static_cast<size_t>(j)] > 0 && j + 1 < n) {
        // A conjugate pair: columns j and j+1 hold the real and imaginary parts of the first vector.
        const R* im = re + n;
        for (int r = 0; r < n; ++r) {
          v[r * n + j] = C(re[r], im[r]);
          v[r * n + j + 1] = C(re[r], -im[r]);
        }
        ++j;
      } else {
        for (int r = 0; r < n; ++r) v[r * n + j] = C(re[r], 0);
      }
    }
  } else {
    std::vector<R> rwork(static_cast<size_t>(std::max(2 * n, 1)));
    auto call = [&](T* work) {
      if constexpr (std::is_same_v<R, float>)
        cgeev_(&jobvl, &jobvr, &n, a, &ld, w, &vl, &ldvl, vr.data(), &ld, work, &lwork, rwork.data(), &info, 1, 1);
      else
        zgeev_(&jobvl, &jobvr, &n, a, &ld, w, &vl, &ldvl, vr.data(), &ld, work, &lwork, rwork.data(), &info, 1, 1);
    };
    call(&query);
    lwork = std::max(1, static_cast<int>(query.real()));
    std::vector<T> work(static_cast<size_t>(lwork));
    call(work.data());
    if (info != 0) return info;
    if (v == nullptr) return 0;
    for (int r = 0; r < n; ++r)
      for (int j = 0; j < n; ++j) v[r * n + j] = vr[static_cast<size_t>(j) * static_cast<size_t>(n) + r];
  }
  return 0;
}

template <class T>
bool finite(const T& x) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isfinite(x);
  else
    return std::isfinite(x.real()) && std::isfinite(x.imag());
}

std::string which(const Array& a, int64_t count, int64_t i) {
  return count > 1 ? "matrix " + std::to_string(i) + " of a " + shape_str(a.shape())
                   : "the matrix a " + shape_str(a.shape());
}

/// eig of every matrix of `a`, computed in T (float, double, complex64_t or complex128_t).
template <class T>
std::vector<Array> eig_in(const Array& a, bool vectors, const char* op) {
  using C = std::complex<typename Real<T>::type>;
  const DType out = dtype_of<C>();
  const Shape batch(a.shape().begin(), a.shape().end() - 2);
  const int64_t n64 = a.shape(-1);
  if (n64 > std::numeric_limits<int>::max())
    throw ValueError(std::string(op) + ": extent " + std::to_string(n64) + " exceeds LAPACK's 32-bit integers");
  const int n = static_cast<int>(n64);
  int64_t count = 1;
  for (int64_t d : batch) count *= d;
  // Each matrix's column-major buffer is the row-major buffer of its transpose.
  std::vector<T> data = swapaxes(a.detach(), -1, -2).to_vector<T>();
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<C> w(static_cast<size_t>(count) * static_cast<size_t>(n)),
      v(vectors ? static_cast<size_t>(count) * nn : 0);
  for (int64_t i = 0; i < count && n > 0; ++i) {
    T* m = data.data() + static_cast<size_t>(i) * nn;
    if (!std::all_of(m, m + nn, [](const T& x) { return finite(x); }))
      throw LinAlgError(std::string(op) + ": Array must not contain infs or NaNs (" + which(a, count, i) +
                        " has one); replace them first, e.g. with nan_to_num or where(isfinite(a), a, 0)");
    const int info = geev(n, m, w.data() + i * n, vectors ? v.data() + static_cast<size_t>(i) * nn : nullptr);
    if (info > 0)
      throw LinAlgError(std::string(op) + ": Eigenvalues did not converge for " + which(a, count, i) +
                        " (LAPACK geev found only the last " + std::to_string(n - info) +
                        " of them); check the matrix's scaling, or use linalg::eigh for a symmetric one");
    if (info < 0) throw ValueError(std::string(op) + ": LAPACK geev rejected argument " + std::to_string(-info));
  }
  Shape w_shape = batch;
  w_shape.push_back(n64);
  std::vector<Array> r{from_data(w.data(), w_shape, out, cpu()).to(a.device())};
  if (vectors) {
    Shape v_shape = w_shape;
    v_shape.push_back(n64);
    r.push_back(from_data(v.data(), v_shape, out, cpu()).to(a.device()));
  }
  return r;
}

std::vector<Array> eig_forward(const Array& a, bool vectors, const char* op) {
  if (!a.defined()) throw ValueError(std::string(op) + ": the operand is an undefined Array; create it first");
  detail::reject_grad({&a}, op,
                      "eig has no gradient in kiln; compute it on a detached input (a.detach()), or use "
                      "linalg::eigh for a symmetric matrix");
  if (a.ndim() < 2)
    throw ShapeError(std::string(op) + ": " + std::to_string(a.ndim()) +
                     "-dimensional array given. Array must be at least two-dimensional (a square matrix (..., n, "
                     "n)); reshape a to (1, 1) for a scalar or build a matrix from a vector with diag");
  if (a.shape(-1) != a.shape(-2))
    throw ShapeError(std::string(op) + ": Last 2 dimensions of the array must be square, got shape " +
                     shape_str(a.shape()) +
                     "; eigenvalues exist for square matrices only (use linalg::svd for "
                     "singular values of a rectangular one)");
  const DType t = a.dtype();
  if (t == complex64) return eig_in<complex64_t>(a, vectors, op);
  if (t == complex128) return eig_in<complex128_t>(a, vectors, op);
  if (t == float32 || t == float16 || t == bfloat16) return eig_in<float>(a, vectors, op);
  return eig_in<double>(a, vectors, op);
}

}  // namespace

EigResult eig(const Array& a) {
  std::vector<Array> r = eig_forward(a, true, "linalg::eig");
  return {r[0], r[1]};
}

Array eigvals(const Array& a) { return eig_forward(a, false, "linalg::eigvals")[0]; }

}  // namespace kiln::linalg
