// The matrix factorisations of kiln::linalg (inv, det, slogdet, cholesky, qr, svd, eigh) in float64, batched
// over leading axes. Operands on a device whose backend has factorisations (Backend::linalg_factor: cuSOLVER)
// are factored there; CPU operands, det/slogdet and other backends' operands use LAPACK from OpenBLAS on
// the host, one call per matrix (device operands copied there and the results back). The gradients (linalg_grad.cpp)
// are recorded here through one AutogradFunction whose result packs every output: the outputs users get are views of
// it, so a loss that uses only some of them gives zero gradients for the others.
//
// LAPACK is column-major and kiln row-major: a row-major buffer of A is the column-major A^T. inv, det and
// slogdet work on A^T directly (inv(A^T)^T = inv(A), det(A^T) = det(A)); cholesky and eigh read the other
// triangle of A^T; qr and svd transpose explicitly.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "cpu/linalg_grad.hpp"
#include "kiln/kiln.hpp"

extern "C" {
// Fortran character arguments carry a hidden length after the others (gfortran's ABI).
void dgetrf_(const int* m, const int* n, double* a, const int* lda, int* ipiv, int* info);
void dgetri_(const int* n, double* a, const int* lda, const int* ipiv, double* work, const int* lwork, int* info);
void dpotrf_(const char* uplo, const int* n, double* a, const int* lda, int* info, size_t uplo_len);
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work, const int* lwork,
             int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda, const double* tau, double* work,
             const int* lwork, int* info);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s, double* u,
             const int* ldu, double* vt, const int* ldvt, double* work, const int* lwork, int* iwork, int* info,
             size_t jobz_len);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda, double* w, double* work,
             const int* lwork, int* iwork, const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void zgesdd_(const char* jobz, const int* m, const int* n, kiln::complex128_t* a, const int* lda, double* s,
             kiln::complex128_t* u, const int* ldu, kiln::complex128_t* vt, const int* ldvt, kiln::complex128_t* work,
             const int* lwork, double* rwork, int* iwork, int* info, size_t jobz_len);
}

namespace kiln::linalg {
namespace {

/// A batch of matrices (..., m, n) as float64 row-major host data, with what the results need.
struct Batch {
  Shape batch;
  int64_t m = 0, n = 0, count = 1;
  DType result = float64;
  Device device;
  std::vector<double> data;
  std::string shape;  // the operand's shape, for messages
  const double* matrix(int64_t i) const { return data.data() + i * m * n; }
};

int lapack_int(int64_t v, const char* op) {
  if (v > std::numeric_limits<int>::max())
    throw ValueError(std::string(op) + ": extent " + std::to_string(v) + " exceeds LAPACK's 32-bit integers");
  return static_cast<int>(v);
}

/// The checks and the shapes, without the data (complex operands only where `complex_ok`).
Batch describe(const Array& a, const char* op, bool square, bool complex_ok = false) {
  if (!a.defined()) throw ValueError(std::string(op) + ": the operand is an undefined Array; create it first");
  if (is_complex(a.dtype()) && !complex_ok)
    throw DTypeError(std::string(op) + ": dtype " + std::string(dtype_name(a.dtype())) +
                     " is not supported yet (complex linear algebra comes after matmul)");
  if (a.ndim() < 2 || (square && a.shape(-1) != a.shape(-2)))
    throw ShapeError(std::string(op) + ": a must be a " +
                     (square ? "square matrix (..., n, n)" : "matrix (..., m, n)") +
                     " (a stack of them is batched), got shape " + shape_str(a.shape()) +
                     (a.ndim() < 2 ? "; reshape a vector to (1, n) or (n, 1)" : ""));
  Batch b;
  b.shape = shape_str(a.shape());
  b.batch = Shape(a.shape().begin(), a.shape().end() - 2);
  b.m = a.shape(-2);
  b.n = a.shape(-1);
  for (int64_t d : b.batch) b.count *= d;
  b.result = a.dtype() == complex64 || (is_floating(a.dtype()) && a.dtype() != float64 && !is_complex(a.dtype()))
                 ? float32
                 : float64;
  b.device = a.device();
  lapack_int(b.m, op);
  lapack_int(b.n, op);
  return b;
}

Batch load(const Array& a, const char* op, bool square) {
  Batch b = describe(a, op, square);
  b.data = a.astype(float64).to(cpu()).to_vector<double>();
  return b;
}

Shape with_batch(const Batch& b, std::initializer_list<int64_t> tail) {
  Shape s = b.batch;
  for (int64_t d : tail) s.push_back(d);
  return s;
}

Array result(const Batch& b, const std::vector<double>& v, const Shape& shape) {
  return from_data(v, shape, cpu()).astype(b.result).to(b.device);
}

template <class T>
std::vector<T> column_major(const T* p, int64_t rows, int64_t cols) {
  std::vector<T> c(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) c[static_cast<size_t>(j * rows + i)] = p[i * cols + j];
  return c;
}

/// Writes the leading (rows, cols) block of a column-major matrix with leading dimension `ld` row-major.
template <class T>
void from_column_major(const T* c, int64_t ld, int64_t rows, int64_t cols, T* out) {
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = c[j * ld + i];
}

/// The SVD of an empty matrix i of a batch: U (m, u_cols) and Vh (vt_rows, n) are identities of their sizes (NumPy's
/// result too).
template <class T>
void empty_svd_vectors(std::vector<T>& u, std::vector<T>& vt, int64_t i, int64_t m, int64_t n, int64_t u_cols,
                       int64_t vt_rows) {
  for (int64_t r = 0; r < u_cols && r < m; ++r) u[static_cast<size_t>(i * m * u_cols + r * u_cols + r)] = 1;
  for (int64_t r = 0; r < vt_rows && r < n; ++r) vt[static_cast<size_t>(i * vt_rows * n + r * n + r)] = 1;
}

std::string which(const Batch& b, int64_t i) {
  return b.count > 1 ? "matrix " + std::to_string(i) + " of a " + b.shape : "the matrix a " + b.shape;
}

[[noreturn]] void throw_singular(const char* op, const Batch& b, int64_t i, int info) {
  throw LinAlgError(std::string(op) + ": " + which(b, i) + " is singular (pivot " + std::to_string(info) +
                    " is exactly zero); use linalg::pinv for a pseudo-inverse or linalg::solve for a system");
}

[[noreturn]] void throw_not_positive_definite(const Batch& b, int64_t i, int info) {
  throw LinAlgError("linalg::cholesky: " + which(b, i) + " is not positive-definite (its leading minor of order " +
                    std::to_string(info) +
                    " is not positive); check that it is symmetric, or add a multiple of "
                    "the identity");
}

[[noreturn]] void throw_no_convergence(const char* op, const Batch& b, int64_t i, const char* what) {
  throw LinAlgError(std::string(op) + ": the " + what + " of " + which(b, i) +
                    " did not converge; check it for NaN or infinite values");
}

/// The factorisation on a GPU's backend: outputs of the per-matrix shapes `shapes` (an unset one stays
/// undefined), returned with the batch axes and the result dtype; `fail` throws for a positive info. nullopt
/// when a is on the CPU, empty, or its backend has no factorisations: the caller computes on the host.
std::optional<std::vector<Array>> on_device(const Array& a, const Batch& b, detail::FactorOp op,
                                            const std::vector<std::optional<Shape>>& shapes, bool upper, bool complete,
                                            const std::function<void(int64_t, int)>& fail) {
  if (b.device.is_cpu() || b.count == 0 || b.m == 0 || b.n == 0) return std::nullopt;
  const Array a3 = a.astype(float64).reshape({b.count, b.m, b.n}).contiguous();
  detail::FactorCall call;
  call.op = op;
  call.a = &a3;
  call.upper = upper;
  call.complete = complete;
  for (const std::optional<Shape>& s : shapes) {
    if (!s) {
      call.outputs.emplace_back();
      continue;
    }
    Shape full{b.count};
    for (int64_t d : *s) full.push_back(d);
    call.outputs.push_back(detail::make_array(full, float64, b.device));
  }
  if (!detail::backend_for(b.device).linalg_factor(call)) return std::nullopt;
  for (size_t i = 0; i < call.infos.size(); ++i)
    if (call.infos[i] > 0) fail(static_cast<int64_t>(i), call.infos[i]);
  std::vector<Array> out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (!shapes[i]) {
      out.emplace_back();
      continue;
    }
    Shape full = b.batch;
    for (int64_t d : *shapes[i]) full.push_back(d);
    out.push_back(call.outputs[i].reshape(full).astype(b.result));
  }
  return out;
}

/// LU factors of each matrix in place (A^T's, which have A's determinant); info per matrix.
std::vector<int> lu(Batch& b, std::vector<int>& pivots) {
  const int n = static_cast<int>(b.n), ld = std::max(n, 1);
  pivots.assign(static_cast<size_t>(std::max<int64_t>(b.count * b.n, 1)), 0);
  std::vector<int> infos(static_cast<size_t>(b.count), 0);
  if (n > 0)
    for (int64_t i = 0; i < b.count; ++i)
      dgetrf_(&n, &n, b.data.data() + i * b.n * b.n, &ld, pivots.data() + i * b.n, &infos[static_cast<size_t>(i)]);
  return infos;
}

/// sign and log|det| of each LU-factored matrix (sign 0, log -inf when a pivot is exactly zero).
void lu_slogdet(const Batch& b, const std::vector<int>& pivots, std::vector<double>& sign,
                std::vector<double>& logabs) {
  sign.assign(static_cast<size_t>(b.count), 1.0);
  logabs.assign(static_cast<size_t>(b.count), 0.0);
  for (int64_t i = 0; i < b.count; ++i) {
    const double* f = b.matrix(i);
    double s = 1, l = 0;
    for (int64_t k = 0; k < b.n; ++k) {
      const double d = f[k * b.n + k];
      if (pivots[static_cast<size_t>(i * b.n + k)] != k + 1) s = -s;
      if (d < 0) s = -s;
      if (d == 0) {
        s = 0;
        l = -std::numeric_limits<double>::infinity();
        break;
      }
      l += std::log(std::abs(d));
    }
    sign[static_cast<size_t>(i)] = s;
    logabs[static_cast<size_t>(i)] = l;
  }
}

Array inv_forward(const Array& a) {
  const char* op = "linalg::inv";
  const Batch described = describe(a, op, true);
  if (auto r = on_device(a, described, detail::FactorOp::Inverse, {Shape{described.n, described.n}}, false, false,
                         [&](int64_t i, int info) { throw_singular(op, described, i, info); }))
    return (*r)[0];
  Batch b = load(a, op, true);
  std::vector<int> pivots;
  const std::vector<int> infos = lu(b, pivots);
  const int n = static_cast<int>(b.n), ld = std::max(n, 1);
  for (int64_t i = 0; i < b.count && n > 0; ++i) {
    if (infos[static_cast<size_t>(i)] > 0) throw_singular(op, b, i, infos[static_cast<size_t>(i)]);
    int lwork = -1, info = 0;
    double query = 0;
    double* m = b.data.data() + i * b.n * b.n;
    dgetri_(&n, m, &ld, pivots.data() + i * b.n, &query, &lwork, &info);
    lwork = std::max(1, static_cast<int>(query));
    std::vector<double> work(static_cast<size_t>(lwork));
    dgetri_(&n, m, &ld, pivots.data() + i * b.n, work.data(), &lwork, &info);
  }
  return result(b, b.data, with_batch(b, {b.n, b.n}));
}

std::vector<Array> slogdet_forward(const Array& a, const char* op) {
  Batch b = load(a, op, true);
  std::vector<int> pivots;
  (void)lu(b, pivots);
  std::vector<double> sign, logabs;
  lu_slogdet(b, pivots, sign, logabs);
  return {result(b, sign, b.batch), result(b, logabs, b.batch)};
}

Array cholesky_forward(const Array& a, bool upper) {
  const char* op = "linalg::cholesky";
  const Batch described = describe(a, op, true);
  if (auto r = on_device(a, described, detail::FactorOp::Cholesky, {Shape{described.n, described.n}}, upper, false,
                         [&](int64_t i, int info) { throw_not_positive_definite(described, i, info); }))
    return (*r)[0];
  Batch b = load(a, op, true);
  const int n = static_cast<int>(b.n), ld = std::max(n, 1);
  // The buffer is A^T: A's lower triangle is its upper one.
  const char uplo = upper ? 'L' : 'U';
  for (int64_t i = 0; i < b.count && n > 0; ++i) {
    double* m = b.data.data() + i * b.n * b.n;
    int info = 0;
    dpotrf_(&uplo, &n, m, &ld, &info, 1);
    if (info > 0) throw_not_positive_definite(b, i, info);
    for (int64_t r = 0; r < b.n; ++r)
      for (int64_t c = 0; c < b.n; ++c)
        if (upper ? c < r : c > r) m[r * b.n + c] = 0;
  }
  return result(b, b.data, with_batch(b, {b.n, b.n}));
}

std::vector<Array> qr_forward(const Array& a, QrMode mode) {
  const char* op = "linalg::qr";
  {
    const Batch d = describe(a, op, false);
    const int64_t k = std::min(d.m, d.n), q = mode == QrMode::Complete ? d.m : k;
    const std::optional<Shape> q_shape = mode == QrMode::R ? std::nullopt : std::optional<Shape>(Shape{d.m, q});
    if (auto r = on_device(a, d, detail::FactorOp::Qr, {q_shape, Shape{q, d.n}}, false, mode == QrMode::Complete,
                           [](int64_t, int) {}))
      return mode == QrMode::R ? std::vector<Array>{(*r)[1]} : *r;
  }
  const Batch b = load(a, op, false);
  const int64_t m = b.m, n = b.n, k = std::min(m, n);
  const int64_t q_cols = mode == QrMode::Complete ? m : k, r_rows = mode == QrMode::Complete ? m : k;
  std::vector<double> q(static_cast<size_t>(b.count * m * q_cols)), r(static_cast<size_t>(b.count * r_rows * n), 0.0);
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k), qi = static_cast<int>(q_cols);
  const int ld = std::max(mi, 1);
  for (int64_t i = 0; i < b.count; ++i) {
    // A column-major (m, max(n, q_cols)) buffer: dorgqr builds Q over the reflectors in its first q_cols columns.
    std::vector<double> f = column_major(b.matrix(i), m, n);
    f.resize(static_cast<size_t>(m * std::max(n, q_cols)), 0.0);
    std::vector<double> tau(static_cast<size_t>(std::max<int64_t>(k, 1)));
    int info = 0, lwork = -1;
    double query = 0;
    if (k > 0) {
      dgeqrf_(&mi, &ni, f.data(), &ld, tau.data(), &query, &lwork, &info);
      lwork = std::max(1, static_cast<int>(query));
      std::vector<double> work(static_cast<size_t>(lwork));
      dgeqrf_(&mi, &ni, f.data(), &ld, tau.data(), work.data(), &lwork, &info);
    }
    double* ri = r.data() + i * r_rows * n;
    for (int64_t row = 0; row < std::min(r_rows, k); ++row)
      for (int64_t c = row; c < n; ++c) ri[row * n + c] = f[static_cast<size_t>(c * m + row)];
    if (mode == QrMode::R || m == 0) continue;
    if (q_cols > 0 && k == 0) {  // no reflectors: Q is the identity
      for (int64_t c = 0; c < q_cols; ++c)
        for (int64_t row = 0; row < m; ++row) f[static_cast<size_t>(c * m + row)] = row == c ? 1.0 : 0.0;
    } else if (q_cols > 0) {
      lwork = -1;
      dorgqr_(&mi, &qi, &ki, f.data(), &ld, tau.data(), &query, &lwork, &info);
      lwork = std::max(1, static_cast<int>(query));
      std::vector<double> work(static_cast<size_t>(lwork));
      dorgqr_(&mi, &qi, &ki, f.data(), &ld, tau.data(), work.data(), &lwork, &info);
    }
    from_column_major(f.data(), m, m, q_cols, q.data() + i * m * q_cols);
  }
  Array r_out = result(b, r, with_batch(b, {r_rows, n}));
  if (mode == QrMode::R) return {r_out};
  return {result(b, q, with_batch(b, {m, q_cols})), r_out};
}

/// The SVD of complex matrices: LAPACK's zgesdd on the host in complex128 (an operand on a device is copied there
/// and the results back). S is real (float32 for complex64), U and Vh of the operand's dtype.
std::vector<Array> complex_svd_forward(const Array& a, bool full, bool uv, const char* op) {
  const Batch b = describe(a, op, false, true);
  const std::vector<complex128_t> data = a.astype(complex128).to(cpu()).to_vector<complex128_t>();
  const int64_t m = b.m, n = b.n, k = std::min(m, n);
  const int64_t u_cols = full ? m : k, vt_rows = full ? n : k;
  std::vector<complex128_t> u(static_cast<size_t>(uv ? b.count * m * u_cols : 0)),
      vt(static_cast<size_t>(uv ? b.count * vt_rows * n : 0));
  std::vector<double> s(static_cast<size_t>(b.count * k));
  const char jobz = !uv ? 'N' : full ? 'A' : 'S';
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ldu = std::max(mi, 1);
  const int ldvt = std::max(static_cast<int>(vt_rows), 1);
  const int64_t big = std::max(m, n);
  // LAPACK 3.7's sizes: 7 min(m, n) reals without vectors, else min(m, n) max(5 min(m, n) + 7, 2 max(m, n) +
  // 2 min(m, n) + 1).
  const int64_t lrwork = std::max<int64_t>(1, uv ? k * std::max(5 * k + 7, 2 * big + 2 * k + 1) : 7 * k);
  for (int64_t i = 0; i < b.count; ++i) {
    if (k == 0) {
      if (uv) empty_svd_vectors(u, vt, i, m, n, u_cols, vt_rows);
      continue;
    }
    std::vector<complex128_t> f = column_major(data.data() + i * m * n, m, n);
    std::vector<complex128_t> uc(static_cast<size_t>(uv ? m * u_cols : 1));
    std::vector<complex128_t> vtc(static_cast<size_t>(uv ? vt_rows * n : 1));
    std::vector<double> rwork(static_cast<size_t>(lrwork));
    std::vector<int> iwork(static_cast<size_t>(8 * k));
    int info = 0, lwork = -1;
    complex128_t query = 0;
    zgesdd_(&jobz, &mi, &ni, f.data(), &ldu, s.data() + i * k, uc.data(), &ldu, vtc.data(), &ldvt, &query, &lwork,
            rwork.data(), iwork.data(), &info, 1);
    lwork = std::max(1, static_cast<int>(query.real()));
    std::vector<complex128_t> work(static_cast<size_t>(lwork));
    zgesdd_(&jobz, &mi, &ni, f.data(), &ldu, s.data() + i * k, uc.data(), &ldu, vtc.data(), &ldvt, work.data(), &lwork,
            rwork.data(), iwork.data(), &info, 1);
    if (info > 0) throw_no_convergence(op, b, i, "SVD");
    if (info < 0) throw ValueError(std::string(op) + ": LAPACK zgesdd rejected argument " + std::to_string(-info));
    if (!uv) continue;
    from_column_major(uc.data(), m, m, u_cols, u.data() + i * m * u_cols);
    from_column_major(vtc.data(), vt_rows, vt_rows, n, vt.data() + i * vt_rows * n);
  }
  Array s_out = result(b, s, with_batch(b, {k}));
  if (!uv) return {s_out};
  const auto vectors = [&](const std::vector<complex128_t>& v, const Shape& shape) {
    return from_data(v, shape, cpu()).astype(a.dtype()).to(b.device);
  };
  return {vectors(u, with_batch(b, {m, u_cols})), s_out, vectors(vt, with_batch(b, {vt_rows, n}))};
}

std::vector<Array> svd_forward(const Array& a, bool full, bool uv, const char* op) {
  if (a.defined() && is_complex(a.dtype())) return complex_svd_forward(a, full, uv, op);
  {
    const Batch d = describe(a, op, false);
    const int64_t k = std::min(d.m, d.n);
    std::vector<std::optional<Shape>> shapes{Shape{k}};
    if (uv) {
      shapes.emplace_back(Shape{d.m, full ? d.m : k});
      shapes.emplace_back(Shape{full ? d.n : k, d.n});
    }
    if (auto r = on_device(a, d, detail::FactorOp::Svd, shapes, false, full,
                           [&](int64_t i, int) { throw_no_convergence(op, d, i, "SVD"); }))
      return uv ? std::vector<Array>{(*r)[1], (*r)[0], (*r)[2]} : *r;
  }
  const Batch b = load(a, op, false);
  const int64_t m = b.m, n = b.n, k = std::min(m, n);
  const int64_t u_cols = full ? m : k, vt_rows = full ? n : k;
  std::vector<double> u(static_cast<size_t>(uv ? b.count * m * u_cols : 0)),
      vt(static_cast<size_t>(uv ? b.count * vt_rows * n : 0)), s(static_cast<size_t>(b.count * k));
  const char jobz = !uv ? 'N' : full ? 'A' : 'S';
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ldu = std::max(mi, 1);
  const int ldvt = std::max(static_cast<int>(vt_rows), 1);
  for (int64_t i = 0; i < b.count; ++i) {
    if (k == 0) {
      if (uv) empty_svd_vectors(u, vt, i, m, n, u_cols, vt_rows);
      continue;
    }
    std::vector<double> f = column_major(b.matrix(i), m, n);
    std::vector<double> uc(static_cast<size_t>(uv ? m * u_cols : 1)), vtc(static_cast<size_t>(uv ? vt_rows * n : 1));
    std::vector<int> iwork(static_cast<size_t>(8 * k));
    int info = 0, lwork = -1;
    double query = 0;
    dgesdd_(&jobz, &mi, &ni, f.data(), &ldu, s.data() + i * k, uc.data(), &ldu, vtc.data(), &ldvt, &query, &lwork,
            iwork.data(), &info, 1);
    lwork = std::max(1, static_cast<int>(query));
    std::vector<double> work(static_cast<size_t>(lwork));
    dgesdd_(&jobz, &mi, &ni, f.data(), &ldu, s.data() + i * k, uc.data(), &ldu, vtc.data(), &ldvt, work.data(), &lwork,
            iwork.data(), &info, 1);
    if (info > 0) throw_no_convergence(op, b, i, "SVD");
    if (info < 0) throw ValueError(std::string(op) + ": LAPACK dgesdd rejected argument " + std::to_string(-info));
    if (!uv) continue;
    from_column_major(uc.data(), m, m, u_cols, u.data() + i * m * u_cols);
    from_column_major(vtc.data(), vt_rows, vt_rows, n, vt.data() + i * vt_rows * n);
  }
  Array s_out = result(b, s, with_batch(b, {k}));
  if (!uv) return {s_out};
  return {result(b, u, with_batch(b, {m, u_cols})), s_out, result(b, vt, with_batch(b, {vt_rows, n}))};
}

std::vector<Array> eigh_forward(const Array& a, char uplo, bool vectors, const char* op) {
  if (uplo != 'L' && uplo != 'U')
    throw ValueError(std::string(op) + ": uplo must be 'L' or 'U', got '" + std::string(1, uplo) + "'");
  {
    const Batch d = describe(a, op, true);
    std::vector<std::optional<Shape>> shapes{Shape{d.n}};
    if (vectors) shapes.emplace_back(Shape{d.n, d.n});
    if (auto r = on_device(a, d, detail::FactorOp::Eigh, shapes, uplo == 'U', false,
                           [&](int64_t i, int) { throw_no_convergence(op, d, i, "eigen-decomposition"); }))
      return *r;
  }
  Batch b = load(a, op, true);
  const int n = static_cast<int>(b.n), ld = std::max(n, 1);
  const char job = vectors ? 'V' : 'N', lapack_uplo = uplo == 'L' ? 'U' : 'L';  // the buffer is A^T
  std::vector<double> w(static_cast<size_t>(b.count * b.n)), v(static_cast<size_t>(vectors ? b.count * b.n * b.n : 0));
  for (int64_t i = 0; i < b.count && n > 0; ++i) {
    double* m = b.data.data() + i * b.n * b.n;
    int info = 0, lwork = -1, liwork = -1, iquery = 0;
    double query = 0;
    dsyevd_(&job, &lapack_uplo, &n, m, &ld, w.data() + i * b.n, &query, &lwork, &iquery, &liwork, &info, 1, 1);
    lwork = std::max(1, static_cast<int>(query));
    liwork = std::max(1, iquery);
    std::vector<double> work(static_cast<size_t>(lwork));
    std::vector<int> iwork(static_cast<size_t>(liwork));
    dsyevd_(&job, &lapack_uplo, &n, m, &ld, w.data() + i * b.n, work.data(), &lwork, iwork.data(), &liwork, &info, 1,
            1);
    if (info > 0) throw_no_convergence(op, b, i, "eigen-decomposition");
    if (vectors) from_column_major(m, b.n, b.n, b.n, v.data() + i * b.n * b.n);  // eigenvectors are its columns
  }
  Array w_out = result(b, w, with_batch(b, {b.n}));
  if (!vectors) return {w_out};
  return {w_out, result(b, v, with_batch(b, {b.n, b.n}))};
}

}  // namespace

Array inv(const Array& a) {
  return detail_linalg::with_grad(
      "InvBackward", a, [&] { return std::vector<Array>{inv_forward(a)}; }, &detail_linalg::inv_backward)[0];
}

SlogdetResult slogdet(const Array& a) {
  std::vector<Array> r = detail_linalg::with_grad(
      "SlogdetBackward", a, [&] { return slogdet_forward(a, "linalg::slogdet"); }, &detail_linalg::slogdet_backward);
  return {r[0], r[1]};
}

Array det(const Array& a) {
  return detail_linalg::with_grad(
      "DetBackward", a,
      [&] {
        const std::vector<Array> sl = slogdet_forward(a, "linalg::det");
        return std::vector<Array>{multiply(sl[0], exp(sl[1]))};
      },
      &detail_linalg::det_backward)[0];
}

Array cholesky(const Array& a, bool upper) {
  return detail_linalg::with_grad(
      upper ? "CholeskyUpperBackward" : "CholeskyBackward", a,
      [&] { return std::vector<Array>{cholesky_forward(a, upper)}; },
      upper ? &detail_linalg::cholesky_upper_backward : &detail_linalg::cholesky_backward)[0];
}

QrResult qr(const Array& a, QrMode mode) {
  if (mode == QrMode::Reduced) {
    std::vector<Array> r = detail_linalg::with_grad(
        "QrBackward", a, [&] { return qr_forward(a, mode); }, &detail_linalg::qr_backward);
    return {r[0], r[1]};
  }
  detail::reject_grad({&a}, "linalg::qr", "only mode Reduced has a gradient");
  std::vector<Array> r = qr_forward(a, mode);
  if (mode == QrMode::R) return {Array(), r[0]};
  return {r[0], r[1]};
}

SvdResult svd(const Array& a, bool full_matrices, bool compute_uv) {
  const char* op = "linalg::svd";
  if (a.defined() && is_complex(a.dtype())) {
    detail::reject_grad({&a}, op, "the SVD of a complex matrix has no gradient yet; take it of a real matrix");
    std::vector<Array> r = svd_forward(a, full_matrices, compute_uv, op);
    return compute_uv ? SvdResult{r[0], r[1], r[2]} : SvdResult{Array(), r[0], Array()};
  }
  const bool square = a.defined() && a.ndim() >= 2 && a.shape(-1) == a.shape(-2);
  if (!compute_uv) {
    // The singular values' gradient needs the vectors: take them, differentiably, and return S alone.
    if (a.defined() && a.requires_grad() && is_grad_enabled()) return {Array(), svd(a, false, true).S, Array()};
    return {Array(), svd_forward(a, false, false, op)[0], Array()};
  }
  if (full_matrices && !square) {
    detail::reject_grad({&a}, op, "full_matrices=true of a non-square matrix has none; pass full_matrices=false");
    std::vector<Array> r = svd_forward(a, true, true, op);
    return {r[0], r[1], r[2]};
  }
  std::vector<Array> r = detail_linalg::with_grad(
      "SvdBackward", a, [&] { return svd_forward(a, full_matrices, true, op); }, &detail_linalg::svd_backward);
  return {r[0], r[1], r[2]};
}

Array svdvals(const Array& a) { return svd(a, false, false).S; }

EighResult eigh(const Array& a, char uplo) {
  std::vector<Array> r = detail_linalg::with_grad(
      "EighBackward", a, [&] { return eigh_forward(a, uplo, true, "linalg::eigh"); }, &detail_linalg::eigh_backward);
  return {r[0], r[1]};
}

Array eigvalsh(const Array& a, char uplo) {
  if (a.defined() && a.requires_grad() && is_grad_enabled()) return eigh(a, uplo).eigenvalues;
  return eigh_forward(a, uplo, false, "linalg::eigvalsh")[0];
}

}  // namespace kiln::linalg
