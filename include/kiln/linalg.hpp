// numpy.linalg for real dtypes: solvers (solve, lstsq), factorisations (inv, det, slogdet, cholesky, qr, svd,
// eigh) and what is built on them (pinv, matrix_rank, norm with ord, cond, matrix_power, cross; kron).
// Computed in float64 (results float32 for float32 or narrower float operands, float64 otherwise, as solve):
// with LAPACK (OpenBLAS) on the CPU, with cuSOLVER on a GPU (det and slogdet: LAPACK on the host, GPU
// operands copied there and back). All of them synchronise: they read the solver's info to report a singular
// / not positive-definite matrix. Factorisations take a batch of
// matrices (..., m, n) as NumPy does. eig/eigvals (general square matrices, complex results) use LAPACK's geev on
// the host for every device, in float32 or float64 as their input (see their comments).
// Gradients as torch.linalg's: solve, inv, det, slogdet, cholesky, qr (reduced, m >= n), svd (reduced or square,
// distinct singular values), eigh (distinct eigenvalues); pinv, norm, cond, matrix_power, cross, kron through
// their parts.
#pragma once

#include <concepts>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/ops.hpp"

namespace kiln::linalg {

/// x with a @ x = b for square matrices a (..., n, n) and b (..., n, k), the stacks broadcast (NumPy 2's rule),
/// or a 1-d b (n,), one vector for every matrix (x (..., n)). Result float32 for float32 (or narrower float)
/// operands, else float64, on a's device. Throws ShapeError (shapes), DeviceError (devices), LinAlgError (a
/// singular matrix). Syncs for GPU operands (one solver call per matrix). Differentiable in a and b.
Array solve(const Array& a, const Array& b);

/// numpy.linalg.lstsq's four results.
struct LstsqResult {
  Array solution;         ///< x minimising ||a @ x - b||, shape (n,) or (n, k)
  Array residuals;        ///< squared residual norms per column, shape (k,) or (1,); (0,) unless rank == n < m
  int64_t rank = 0;       ///< effective rank of a
  Array singular_values;  ///< singular values of a, descending, shape (min(m, n),)
};
/// Least-squares solution of a @ x = b for a 2-d (m, n) `a` and b of shape (m,) or (m, k), via the SVD
/// (LAPACK dgelsd). Singular values below rcond * largest count as zero (default: eps * max(m, n), NumPy's).
/// Dtypes and devices as solve; throws ShapeError/DeviceError, LinAlgError when the SVD does not converge.
LstsqResult lstsq(const Array& a, const Array& b, std::optional<double> rcond = {});

/// Inverse of each square matrix of a (..., n, n) (LAPACK dgetrf + dgetri). LinAlgError for a singular matrix.
Array inv(const Array& a);
/// Determinant of each square matrix of a (..., n, n), shape (...) (from the LU factors; 0 for singular).
Array det(const Array& a);
/// numpy.linalg.slogdet's results: det = sign * exp(logabsdet); sign 0 and logabsdet -inf for a singular matrix.
struct SlogdetResult {
  Array sign, logabsdet;
};
SlogdetResult slogdet(const Array& a);
/// Cholesky factor of each symmetric positive-definite matrix (..., n, n): lower L with a = L L^T (upper: U
/// with a = U^T U). Reads only a's lower (upper) triangle, as NumPy. LinAlgError when not positive-definite.
Array cholesky(const Array& a, bool upper = false);

/// numpy.linalg.qr's modes: "reduced" (Q (..., m, k), R (..., k, n), k = min(m, n)), "complete" (Q (..., m, m),
/// R (..., m, n)), "r" (R only, Q undefined).
enum class QrMode { Reduced, Complete, R };
struct QrResult {
  Array Q, R;
};
/// QR factorisation of each matrix of a (..., m, n) (dgeqrf + dorgqr).
QrResult qr(const Array& a, QrMode mode = QrMode::Reduced);

/// numpy.linalg.svd's results: a = U @ (S[..., None] * Vh); S descending.
struct SvdResult {
  Array U, S, Vh;
};
/// SVD of each matrix of a (..., m, n) (dgesdd). full_matrices: U (..., m, m), Vh (..., n, n); else (..., m, k)
/// and (..., k, n). compute_uv false: only S (U and Vh undefined). LinAlgError when it does not converge.
SvdResult svd(const Array& a, bool full_matrices = true, bool compute_uv = true);
/// The singular values (..., k), descending (numpy.linalg.svdvals).
Array svdvals(const Array& a);

/// numpy.linalg.eigh's results: ascending eigenvalues (..., n) and the eigenvectors as columns (..., n, n).
struct EighResult {
  Array eigenvalues, eigenvectors;
};
/// Eigen-decomposition of each symmetric matrix of a (..., n, n) reading its lower ('L') or upper ('U')
/// triangle (dsyevd). LinAlgError when it does not converge.
EighResult eigh(const Array& a, char uplo = 'L');
/// The eigenvalues only (..., n), ascending.
Array eigvalsh(const Array& a, char uplo = 'L');

/// numpy.linalg.eig's results: the eigenvalues (..., n) in LAPACK's order and the right eigenvectors as columns
/// (..., n, n), each of unit 2-norm (a @ v[..., :, i] = w[..., i] * v[..., :, i]).
struct EigResult {
  Array eigenvalues, eigenvectors;
};
/// Eigen-decomposition of each general square matrix of a (..., n, n) with LAPACK geev (sgeev/dgeev for real
/// input, cgeev/zgeev for complex). Always complex, as torch.linalg.eig (NumPy returns a real dtype when every
/// eigenvalue of real input is real): complex64 for float32 (and 16-bit floats) and complex64 input, complex128
/// otherwise. Computed on the host for any device, results on a's device (syncs). Throws ShapeError (not square /
/// < 2-d), LinAlgError (infs or NaNs, no convergence), DTypeError when a requires grad (eig has no gradient).
EigResult eig(const Array& a);
/// The eigenvalues only (..., n), as eig's.
Array eigvals(const Array& a);

/// Pseudo-inverse (..., n, m) of a (..., m, n) through the SVD (the eigen-decomposition when hermitian):
/// singular values at or below rcond * largest are dropped. rcond defaults to NumPy's 1e-15.
Array pinv(const Array& a, std::optional<double> rcond = {}, bool hermitian = false);
/// Number of singular values above tol (default: largest * max(m, n) * eps of the result dtype, NumPy's), per
/// matrix of a (..., m, n), as int64 (..); a 1-d a has rank 1 unless it is all zeros.
Array matrix_rank(const Array& a, std::optional<double> tol = {}, bool hermitian = false);

/// numpy.linalg.norm's `ord`: unset (2-norm of a vector, Frobenius of a matrix), a number (inf and -inf
/// included; 0 counts the non-zeros of a vector) or "fro" / "nuc".
struct Ord {
  Ord() = default;
  Ord(double p) : kind(Kind::Number), p(p) {}          // NOLINT: a number reads as NumPy's ord
  Ord(const char* name);                               // NOLINT: "fro" or "nuc"; ValueError otherwise
  Ord(const std::string& name) : Ord(name.c_str()) {}  // NOLINT
  enum class Kind { Default, Number, Fro, Nuc } kind = Kind::Default;
  double p = 0;
};
/// Vector or matrix norm as numpy.linalg.norm(a, ord, axis, keepdims): `axis` one axis (a vector norm) or two
/// (a matrix norm); unset, a must be 1-d or 2-d. ValueError for an ord that kind of norm lacks; ShapeError for
/// axes. The ord is a floating number, "fro"/"nuc" or an Ord: an integer second argument is an axis, the
/// norm(a, axes, keepdims) above (write 1.0, not 1, for ord 1).
Array norm_ord(const Array& a, const Ord& ord, Axes axis = {}, bool keepdims = false);
/// What norm's ord may be: a floating number, "fro" / "nuc", or an Ord.
template <class O>
concept NormOrder = std::floating_point<O> || std::same_as<O, Ord> || std::convertible_to<const O&, const char*>;
template <NormOrder O>
Array norm(const Array& a, const O& ord, Axes axis = {}, bool keepdims = false) {
  return norm_ord(a, Ord(ord), std::move(axis), keepdims);
}
/// The same with one axis given as an integer (exactly matched, so the norm(a, axes, keepdims) above does not
/// compete for it).
template <NormOrder O, std::integral A>
Array norm(const Array& a, const O& ord, A axis, bool keepdims = false) {
  return norm_ord(a, Ord(ord), Axes(static_cast<int64_t>(axis)), keepdims);
}
/// Condition number of each matrix of a (..., m, n): s_max / s_min for an unset p, 2 or -2 (any shape), else
/// norm(a, p) * norm(inv(a), p) for square a; inf for a singular matrix (NumPy's result).
Array cond(const Array& a, Ord p = {});
/// a @ a @ ... (n times) for square a (..., k, k) by repeated squaring; n = 0 gives the identity, n < 0 the
/// power of inv(a). Integer a stays integer for n >= 0 (as NumPy); LinAlgError for a singular a and n < 0.
Array matrix_power(const Array& a, int64_t n);
/// Cross product of 3-vectors along `axis` of both (broadcast over the other axes), as numpy.linalg.cross.
Array cross(const Array& a, const Array& b, int64_t axis = -1);

}  // namespace kiln::linalg

namespace kiln {
/// Kronecker product (numpy.kron): the block array whose block (i, j, ...) is a[i, j, ...] * b, the operands'
/// ndims equalised by leading 1s.
Array kron(const Array& a, const Array& b);
}  // namespace kiln
