// kiln.linalg (kiln/linalg.hpp) beyond solve and matmul: the factorisations, what is built on them, norm with
// ord, and kiln.kron. A function that NumPy answers with a named tuple (slogdet, qr, svd, eig, eigh, lstsq) returns
// one of the same name and fields, so `sign, logabsdet = kiln.linalg.slogdet(a)` and `.logabsdet` both work.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <string>

#include "bindings.hpp"
#include "convert.hpp"
#include "typed.hpp"

namespace kiln::python {
namespace {

// numpy.linalg's result types, made once with collections.namedtuple and kept alive by the linalg module.
struct ResultTypes {
  nb::object slogdet, qr, svd, eig, eigh, lstsq;
};
ResultTypes result_types;

nb::object make_result_type(nb::module_& linalg, const char* name, const char* fields) {
  nb::object type = nb::module_::import_("collections").attr("namedtuple")(name, fields);
  type.attr("__module__") = "kiln._kiln.linalg";
  linalg.attr(name) = type;
  return type;
}

// numpy.linalg.norm's ord: None, a number (inf included), "fro" or "nuc".
linalg::Ord to_ord(nb::handle obj) {
  if (obj.is_none()) return {};
  if (nb::isinstance<nb::str>(obj)) return linalg::Ord(nb::cast<std::string>(obj));
  if (!is_python_scalar(obj) || nb::isinstance<nb::bool_>(obj))
    throw nb::type_error("kiln.linalg: ord must be None, a number, 'fro' or 'nuc'");
  return linalg::Ord(nb::cast<double>(obj));
}

linalg::QrMode to_qr_mode(const std::string& mode) {
  if (mode == "reduced") return linalg::QrMode::Reduced;
  if (mode == "complete") return linalg::QrMode::Complete;
  if (mode == "r") return linalg::QrMode::R;
  throw kiln::ValueError("kiln.linalg.qr: mode '" + mode + "' is not one of 'reduced', 'complete', 'r'");
}

char to_uplo(const std::string& uplo) {
  if (uplo != "L" && uplo != "U")
    throw kiln::ValueError("kiln.linalg.eigh: UPLO '" + uplo + "' is not 'L' or 'U'");
  return uplo[0];
}

}  // namespace

void bind_linalg(nb::module_& m) {
  nb::module_ la = nb::cast<nb::module_>(m.attr("linalg"));
  auto& types = result_types;
  types.slogdet = make_result_type(la, "SlogdetResult", "sign logabsdet");
  types.qr = make_result_type(la, "QRResult", "Q R");
  types.svd = make_result_type(la, "SVDResult", "U S Vh");
  types.eig = make_result_type(la, "EigResult", "eigenvalues eigenvectors");
  types.eigh = make_result_type(la, "EighResult", "eigenvalues eigenvectors");
  types.lstsq = make_result_type(la, "LstsqResult", "solution residuals rank singular_values");

  la.def("inv", [](ArrayLike a) { return linalg::inv(to_array(a)); }, "a"_a,
             "Inverse of each square matrix of a (..., n, n) (LinAlgError for a singular one; syncs).");
  la.def("det", [](ArrayLike a) { return linalg::det(to_array(a)); }, "a"_a,
             "Determinant of each square matrix of a (..., n, n), shape (...).");
  la.def("slogdet", [](ArrayLike a) {
    auto r = linalg::slogdet(to_array(a));
    return result_types.slogdet(r.sign, r.logabsdet);
  }, "a"_a, "SlogdetResult(sign, logabsdet) with det = sign * exp(logabsdet), as np.linalg.slogdet.");
  la.def("cholesky", [](ArrayLike a, bool upper) { return linalg::cholesky(to_array(a), upper); },
             "a"_a, "upper"_a = false,
             "Cholesky factor L (a = L L^T; upper: U with a = U^T U) of each symmetric positive-definite matrix "
             "(LinAlgError when not positive-definite).");
  la.def("qr", [](ArrayLike a, const std::string& mode) -> nb::object {
    auto r = linalg::qr(to_array(a), to_qr_mode(mode));
    if (mode == "r") return nb::cast(r.R);  // NumPy's mode 'r' returns R alone
    return result_types.qr(r.Q, r.R);
  }, "a"_a, "mode"_a = "reduced", "QRResult(Q, R) of each matrix of a (..., m, n); mode 'r' returns R only.");
  la.def("svd", [](ArrayLike a, bool full_matrices, bool compute_uv) -> nb::object {
    auto r = linalg::svd(to_array(a), full_matrices, compute_uv);
    if (!compute_uv) return nb::cast(r.S);  // NumPy returns S alone
    return result_types.svd(r.U, r.S, r.Vh);
  }, "a"_a, "full_matrices"_a = true, "compute_uv"_a = true,
     "SVDResult(U, S, Vh) with a = U @ (S[..., None] * Vh), S descending; compute_uv=False returns S only.");
  la.def("svdvals", [](ArrayLike a) { return linalg::svdvals(to_array(a)); }, "x"_a,
             "The singular values (..., min(m, n)), descending.");
  la.def("eig", [](ArrayLike a) {
    auto r = linalg::eig(to_array(a));
    return result_types.eig(r.eigenvalues, r.eigenvectors);
  }, "a"_a,
     "EigResult(eigenvalues, eigenvectors) of each general square matrix (LAPACK geev, on the host for any "
     "device): eigenvalues in LAPACK's order, unit-norm eigenvectors as columns; always complex (complex64 for "
     "float32 / complex64 input, else complex128), where NumPy returns a real dtype when all eigenvalues are real.");
  la.def("eigvals", [](ArrayLike a) { return linalg::eigvals(to_array(a)); }, "a"_a,
             "The eigenvalues (..., n) of each general square matrix, complex, as eig's.");
  la.def("eigh", [](ArrayLike a, const std::string& uplo) {
    auto r = linalg::eigh(to_array(a), to_uplo(uplo));
    return result_types.eigh(r.eigenvalues, r.eigenvectors);
  }, "a"_a, "UPLO"_a = "L",
     "EighResult(eigenvalues, eigenvectors) of each symmetric matrix: ascending eigenvalues, eigenvectors as "
     "columns.");
  la.def("eigvalsh", [](ArrayLike a, const std::string& uplo) { return linalg::eigvalsh(to_array(a), to_uplo(uplo)); },
             "a"_a, "UPLO"_a = "L", "The eigenvalues (..., n) of each symmetric matrix, ascending.");
  la.def("pinv", [](ArrayLike a, std::optional<double> rcond, bool hermitian) {
    return linalg::pinv(to_array(a), rcond, hermitian);
  }, "a"_a, "rcond"_a = nb::none(), "hermitian"_a = false,
     "Pseudo-inverse through the SVD; singular values at or below rcond * largest (default 1e-15) are dropped.");
  la.def("matrix_rank", [](ArrayLike a, std::optional<double> tol, bool hermitian) {
    return linalg::matrix_rank(to_array(a), tol, hermitian);
  }, "A"_a, "tol"_a = nb::none(), "hermitian"_a = false,
     "Number of singular values above tol (default NumPy's: largest * max(m, n) * eps), as int64.");
  la.def("norm", [](ArrayLike a, OrdLike ord, AxisLike axis, bool keepdims) {
    Array x = to_array(a);
    if (ord.is_none()) return linalg::norm(x, to_axes(axis), keepdims);
    return linalg::norm_ord(x, to_ord(ord), to_axes(axis), keepdims);
  }, "x"_a, "ord"_a = nb::none(), "axis"_a = nb::none(), "keepdims"_a = false,
     "Vector or matrix norm as np.linalg.norm: ord None, a number (inf, -inf, 0 included), 'fro' or 'nuc'; axis "
     "one axis (vector norm) or two (matrix norm).");
  la.def("cond", [](ArrayLike a, OrdLike p) { return linalg::cond(to_array(a), to_ord(p)); }, "x"_a,
             "p"_a = nb::none(), "Condition number of each matrix (inf for a singular one), as np.linalg.cond.");
  la.def("matrix_power", [](ArrayLike a, int64_t n) { return linalg::matrix_power(to_array(a), n); }, "a"_a,
             "n"_a, "a @ a @ ... n times (n = 0: the identity; n < 0: powers of inv(a)).");
  la.def("cross", [](ArrayLike a, ArrayLike b, int64_t axis) {
    Array x = to_array(a);
    return linalg::cross(x, to_array_near(b, x), axis);
  }, "x1"_a, "x2"_a, "axis"_a = -1, "Cross product of 3-vectors along axis, broadcast over the others.");
  la.def("lstsq", [](ArrayLike a, ArrayLike b, std::optional<double> rcond) {
    Array x = to_array(a);
    auto r = linalg::lstsq(x, to_array_near(b, x), rcond);
    return result_types.lstsq(r.solution, r.residuals, r.rank, r.singular_values);
  }, "a"_a, "b"_a, "rcond"_a = nb::none(),
     "LstsqResult(solution, residuals, rank, singular_values) minimising ||a @ x - b|| (rcond None: NumPy's "
     "default eps * max(m, n)).");
  m.def("kron", [](ArrayLike a, ArrayLike b) {
    Array x = to_array(a);
    return kiln::kron(x, to_array_near(b, x));
  }, "a"_a, "b"_a, "Kronecker product, as np.kron.");
}

}  // namespace kiln::python
