// The parts of kiln::linalg built from other array ops (the public API only): pinv, matrix_rank, norm with
// NumPy's ord, cond, matrix_power, cross, and kron. Their gradients come from their parts (the SVD's, the
// eigen-decomposition's, inv's and the elementwise ops'), as PyTorch's do.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln::linalg {
namespace {

Array mT(const Array& x) { return swapaxes(x, -1, -2); }

void require_matrix(const Array& a, const char* op, bool square) {
  if (!a.defined()) throw ValueError(std::string(op) + ": the operand is an undefined Array; create it first");
  if (a.ndim() < 2 || (square && a.shape(-1) != a.shape(-2)))
    throw ShapeError(std::string(op) + ": a must be a " +
                     (square ? "square matrix (..., n, n)" : "matrix (..., m, n)") + ", got shape " +
                     shape_str(a.shape()));
}

DType float_type(const Array& a) {
  if (is_complex(a.dtype())) detail::throw_no_complex(a.dtype());  // complex linear algebra comes later
  return is_floating(a.dtype()) ? a.dtype() : float64;
}

/// A (...) mask as (..., 1, 1), to pick whole matrices.
Array per_matrix_mask(const Array& m) { return expand_dims(expand_dims(m, -1), -1); }

Shape batch_shape(const Array& a) { return Shape(a.shape().begin(), a.shape().end() - 2); }

int64_t normalize_axis(int64_t axis, int64_t ndim, const char* op, const Shape& shape) {
  if (axis < -ndim || axis >= ndim)
    throw ShapeError(std::string(op) + ": axis " + std::to_string(axis) + " is out of bounds for shape " +
                     shape_str(shape) + "; pick one in [" + std::to_string(-ndim) + ", " + std::to_string(ndim) + ")");
  return axis < 0 ? axis + ndim : axis;
}

std::string ord_str(const Ord& ord) {
  switch (ord.kind) {
    case Ord::Kind::Default:
      return "unset";
    case Ord::Kind::Fro:
      return "\"fro\"";
    case Ord::Kind::Nuc:
      return "\"nuc\"";
    case Ord::Kind::Number:
      break;
  }
  return std::isinf(ord.p) ? (ord.p > 0 ? "inf" : "-inf") : std::to_string(ord.p);
}

Array vector_norm(const Array& x, const Ord& ord, int64_t axis, bool keepdims) {
  if (ord.kind == Ord::Kind::Default || (ord.kind == Ord::Kind::Number && ord.p == 2))
    return norm(x, Axes(axis), keepdims);
  if (ord.kind != Ord::Kind::Number)
    throw ValueError("linalg::norm: ord " + ord_str(ord) +
                     " is a matrix norm; a vector norm (one axis) takes a number");
  const double p = ord.p;
  if (std::isinf(p)) return p > 0 ? max(abs(x), axis, keepdims) : min(abs(x), axis, keepdims);
  if (p == 0) return sum(not_equal(x, 0.0), axis, keepdims).astype(x.dtype());
  if (p == 1) return sum(abs(x), axis, keepdims);
  return power(sum(power(abs(x), p), axis, keepdims), 1.0 / p);
}

Array matrix_norm(const Array& x, const Ord& ord, int64_t row, int64_t col, bool keepdims) {
  const char* op = "linalg::norm";
  if (row == col)
    throw ValueError(std::string(op) + ": the two axes of a matrix norm are the same axis " + std::to_string(row) +
                     "; pass two different axes");
  Array r;
  const bool number = ord.kind == Ord::Kind::Number;
  if (ord.kind == Ord::Kind::Default || ord.kind == Ord::Kind::Fro) {
    r = norm(x, Axes({row, col}), false);
  } else if (ord.kind == Ord::Kind::Nuc || (number && std::abs(ord.p) == 2)) {
    const Array s = svdvals(moveaxis(moveaxis(x, row, -1), row < col ? col - 1 : col, -1));
    // moveaxis twice: the row axis goes last, then the column axis after it; the matrix is (..., row, col).
    r = ord.kind == Ord::Kind::Nuc ? sum(s, -1) : ord.p > 0 ? max(s, -1) : min(s, -1);
  } else if (number && (std::abs(ord.p) == 1 || std::isinf(ord.p))) {
    // 1: the largest column sum (sum over rows, then the max over columns); inf: the largest row sum.
    const bool columns = std::abs(ord.p) == 1;
    const int64_t first = columns ? row : col;
    int64_t second = columns ? col : row;
    if (second > first) --second;
    const Array sums = sum(abs(x), first);
    r = ord.p > 0 ? max(sums, second) : min(sums, second);
  } else {
    throw ValueError(std::string(op) + ": ord " + ord_str(ord) +
                     " is not a matrix norm; use \"fro\", \"nuc\", 1, -1, 2, -2, inf or -inf");
  }
  if (keepdims) {
    r = expand_dims(r, std::min(row, col));
    r = expand_dims(r, std::max(row, col));
  }
  return r;
}

}  // namespace

Ord::Ord(const char* name) {
  const std::string n = name == nullptr ? "" : name;
  if (n == "fro") {
    kind = Kind::Fro;
  } else if (n == "nuc") {
    kind = Kind::Nuc;
  } else {
    throw ValueError("linalg::Ord: \"" + n + "\" is not a norm order; use \"fro\", \"nuc\" or a number");
  }
}

Array norm_ord(const Array& a, const Ord& ord, Axes axis, bool keepdims) {
  const char* op = "linalg::norm";
  if (!a.defined()) throw ValueError(std::string(op) + ": the operand is an undefined Array; create it first");
  const Array x = a.astype(float_type(a));
  const int64_t nd = x.ndim();
  std::vector<int64_t> axes;
  if (!axis.all()) {
    for (int64_t ax : axis.list()) axes.push_back(normalize_axis(ax, nd, op, a.shape()));
  } else {
    if (ord.kind == Ord::Kind::Default) return norm(x, Axes(), keepdims);
    if (nd != 1 && nd != 2)
      throw ShapeError(std::string(op) + ": ord " + ord_str(ord) + " needs a 1-d or 2-d array, got shape " +
                       shape_str(a.shape()) + "; pass axis to pick the vector or matrix axes");
    for (int64_t d = 0; d < nd; ++d) axes.push_back(d);
  }
  if (axes.size() == 1) return vector_norm(x, ord, axes[0], keepdims);
  if (axes.size() == 2) return matrix_norm(x, ord, axes[0], axes[1], keepdims);
  throw ShapeError(std::string(op) + ": axis names " + std::to_string(axes.size()) +
                   " axes; pass one (a vector norm) or two (a matrix norm)");
}

Array pinv(const Array& a, std::optional<double> rcond, bool hermitian) {
  require_matrix(a, "linalg::pinv", hermitian);
  const double rc = rcond.value_or(1e-15);
  const int64_t m = a.shape(-2), n = a.shape(-1);
  if (a.size() == 0) {
    Shape s = batch_shape(a);
    s.push_back(n);
    s.push_back(m);
    return zeros(s, float_type(a) == float64 ? float64 : float32, a.device());
  }
  // Values at or below the cut-off are dropped; the inner where keeps their reciprocal (and its gradient)
  // finite.
  auto inverted = [rc](const Array& s, const Array& magnitude) {
    const Array keep = greater(magnitude, multiply(max(magnitude, -1, true), rc));
    return where(keep, divide(1.0, where(keep, s, 1.0)), 0.0);
  };
  if (hermitian) {
    const EighResult e = eigh(a);
    const Array w_inv = inverted(e.eigenvalues, abs(e.eigenvalues));
    return matmul(multiply(e.eigenvectors, expand_dims(w_inv, -2)), mT(e.eigenvectors));
  }
  const SvdResult d = svd(a, false);
  const Array s_inv = inverted(d.S, d.S);
  return matmul(mT(d.Vh), multiply(expand_dims(s_inv, -1), mT(d.U)));
}

Array matrix_rank(const Array& a, std::optional<double> tol, bool hermitian) {
  if (!a.defined()) throw ValueError("linalg::matrix_rank: the operand is an undefined Array; create it first");
  NoGradGuard no_grad;
  if (a.ndim() < 2) return full({}, int64_t{any(not_equal(a, 0)).item<bool>() ? 1 : 0}, int64, a.device());
  if (a.size() == 0) return zeros(batch_shape(a), int64, a.device());
  const Array s = hermitian ? abs(eigvalsh(a)) : svdvals(a);
  Array cutoff;
  if (tol) {
    cutoff = full({}, *tol, s.dtype(), a.device());
  } else {
    const double eps =
        s.dtype() == float32 ? std::numeric_limits<float>::epsilon() : std::numeric_limits<double>::epsilon();
    cutoff = multiply(max(s, -1, true), eps * static_cast<double>(std::max(a.shape(-2), a.shape(-1))));
  }
  return sum(greater(s, cutoff), -1);
}

Array cond(const Array& a, Ord p) {
  const char* op = "linalg::cond";
  const bool svd_based =
      p.kind == Ord::Kind::Default || (p.kind == Ord::Kind::Number && std::abs(p.p) == 2 && !std::isinf(p.p));
  require_matrix(a, op, !svd_based);
  if (svd_based) {
    const Array s = svdvals(a);
    const Array big = max(s, -1), small = min(s, -1);
    // As NumPy: a singular matrix has an infinite condition number for p unset or 2, and 0 for -2; a zero
    // matrix (0/0) gives inf for both.
    const double inf = std::numeric_limits<double>::infinity();
    if (p.kind == Ord::Kind::Number && p.p < 0) return where(equal(big, 0.0), inf, divide(small, big));
    return where(equal(small, 0.0), inf, divide(big, small));
  }
  // norm(a) * norm(inv(a)); singular matrices are replaced by the identity for inv, their result by inf.
  const Array x = a.astype(float_type(a));
  const Array singular = equal(slogdet(x).sign, 0.0);
  const Array safe = where(per_matrix_mask(singular), eye(x.shape(-1), {}, 0, x.dtype(), x.device()), x);
  const Array r = multiply(norm_ord(x, p, {-2, -1}), norm_ord(inv(safe), p, {-2, -1}));
  return where(singular, std::numeric_limits<double>::infinity(), r);
}

Array matrix_power(const Array& a, int64_t n) {
  require_matrix(a, "linalg::matrix_power", true);
  if (n == 0) return broadcast_to(eye(a.shape(-1), {}, 0, a.dtype(), a.device()), a.shape()).copy();
  Array z = n < 0 ? inv(a) : a;
  uint64_t k = n < 0 ? static_cast<uint64_t>(-(n + 1)) + 1 : static_cast<uint64_t>(n);
  Array result;
  while (true) {
    if (k & 1) result = result.defined() ? matmul(result, z) : z;
    k >>= 1;
    if (k == 0) break;
    z = matmul(z, z);
  }
  return result;
}

Array cross(const Array& a, const Array& b, int64_t axis) {
  const char* op = "linalg::cross";
  if (!a.defined() || !b.defined()) throw ValueError(std::string(op) + ": an operand is an undefined Array");
  const int64_t axis_a = normalize_axis(axis, a.ndim(), op, a.shape());
  const int64_t axis_b = normalize_axis(axis, b.ndim(), op, b.shape());
  if (a.shape(axis_a) != 3 || b.shape(axis_b) != 3)
    throw ShapeError(std::string(op) + ": both operands need 3 elements along axis " + std::to_string(axis) +
                     ", got shapes " + shape_str(a.shape()) + " and " + shape_str(b.shape()) +
                     "; 2-vectors: pad them with a zero third component");
  const Array x = moveaxis(a, axis_a, 0), y = moveaxis(b, axis_b, 0);
  const Array c0 = subtract(multiply(x[1], y[2]), multiply(x[2], y[1]));
  const Array c1 = subtract(multiply(x[2], y[0]), multiply(x[0], y[2]));
  const Array c2 = subtract(multiply(x[0], y[1]), multiply(x[1], y[0]));
  const Array c = stack({c0, c1, c2}, 0);
  return moveaxis(c, 0, normalize_axis(axis, c.ndim(), op, c.shape()));
}

}  // namespace kiln::linalg

namespace kiln {

Array kron(const Array& a, const Array& b) {
  if (!a.defined() || !b.defined()) throw ValueError("kron: an operand is an undefined Array; create it first");
  const int64_t nd = std::max(a.ndim(), b.ndim());
  if (nd == 0) return multiply(a, b);
  // a as (a0, 1, a1, 1, ...) times b as (1, b0, 1, b1, ...): the product's axes pair up as (a_i, b_i) blocks.
  Shape sa, sb, out;
  for (int64_t d = 0; d < nd; ++d) {
    const int64_t da = d < nd - a.ndim() ? 1 : a.shape(d - (nd - a.ndim()));
    const int64_t db = d < nd - b.ndim() ? 1 : b.shape(d - (nd - b.ndim()));
    sa.push_back(da);
    sa.push_back(1);
    sb.push_back(1);
    sb.push_back(db);
    out.push_back(da * db);
  }
  return multiply(a.reshape(sa), b.reshape(sb)).reshape(out);
}

}  // namespace kiln
