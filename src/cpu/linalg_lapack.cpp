// linalg::solve and linalg::lstsq. GPU operands go to the device's backend
// (Backend::linalg_solve / linalg_svd: cuSOLVER, float64 on the device); a backend
// without solvers, and CPU operands, use LAPACK on the host (OpenBLAS ships it:
// dgesv_, dgelsd_): operands copied to the host as float64, column-major; results
// cast to the result dtype and moved to the operands' device. solve takes stacks
// (NumPy 2's rule: b is one vector only when it is 1-d, else (..., n, k), the stacks
// broadcast): one factorisation per matrix; its gradient is torch.linalg.solve's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "core/autograd.hpp"
#include "core/backend.hpp"
#include "kiln/kiln.hpp"

extern "C" {
void dgesv_(const int* n, const int* nrhs, double* a, const int* lda, int* ipiv, double* b, const int* ldb, int* info);
void dgelsd_(const int* m, const int* n, const int* nrhs, double* a, const int* lda, double* b, const int* ldb,
             double* s, const double* rcond, int* rank, double* work, const int* lwork, int* iwork, int* info);
}

namespace kiln::linalg {
namespace {

struct Operands {
  std::vector<double> a, b;  // column-major
  int64_t m = 0, n = 0, k = 0;
  bool vector_b = false;
  DType result = float64;
  Device device;
};

std::vector<double> column_major(const Array& x) {
  return transpose(x).to_vector<double>();  // to_vector reads C order: the transpose's C order is x's column order
}

/// Checks the operands and fills everything but the host copies.
Operands check_operands(const Array& a, const Array& b, const char* op, bool square) {
  if (!a.defined() || !b.defined())
    throw ValueError(std::string(op) + ": an operand is an undefined Array; create it first");
  if (a.device() != b.device())
    throw DeviceError(std::string(op) + ": a is on " + a.device().str() + " but b is on " + b.device().str() +
                      "; move one with .to(" + a.device().str() + ")");
  for (const Array* x : {&a, &b})
    if (is_complex(x->dtype()))
      throw DTypeError(std::string(op) + ": dtype " + std::string(dtype_name(x->dtype())) +
                       " is not supported yet (complex linear algebra comes after matmul)");
  const std::string shapes = "a " + shape_str(a.shape()) + ", b " + shape_str(b.shape());
  if (a.ndim() != 2 || (square && a.shape(0) != a.shape(1)))
    throw ShapeError(std::string(op) + ": a must be a " + (square ? "square " : "") + "2-d matrix, got " + shapes +
                     (a.ndim() > 2 ? "; batched operands are not supported yet: loop over the batch" : ""));
  if ((b.ndim() != 1 && b.ndim() != 2) || b.shape(0) != a.shape(0))
    throw ShapeError(std::string(op) + ": b must have shape (" + std::to_string(a.shape(0)) + ",) or (" +
                     std::to_string(a.shape(0)) + ", k) to match a, got " + shapes);
  Operands o;
  o.m = a.shape(0);
  o.n = a.shape(1);
  o.vector_b = b.ndim() == 1;
  o.k = o.vector_b ? 1 : b.shape(1);
  const DType t = promote_types(a.dtype(), b.dtype());
  o.result = is_floating(t) && t != float64 ? float32 : float64;
  o.device = a.device();
  return o;
}

Operands prepare(const Array& a, const Array& b, const char* op, bool square) {
  Operands o = check_operands(a, b, op, square);
  o.a = column_major(a);
  o.b = column_major(o.vector_b ? b.reshape(Shape{o.m, 1}) : b);
  return o;
}

/// The operands as float64 C-contiguous matrices on their device (b as (m, k)), for a device backend.
struct DeviceOperands {
  Array a, b;
};
DeviceOperands device_operands(const Operands& o, const Array& a, const Array& b) {
  return {a.astype(float64).contiguous(), (o.vector_b ? b.reshape(Shape{o.m, 1}) : b).astype(float64).contiguous()};
}

/// A (rows, k) float64 device result as the caller's shape ((rows,) for a vector b) and result dtype.
Array device_result(const Operands& o, const Array& x) {
  return (o.vector_b ? x.reshape(Shape{x.shape(0)}) : x).astype(o.result);
}

[[noreturn]] void throw_singular(const Array& a, int info) {
  throw LinAlgError("linalg::solve: the matrix a " + shape_str(a.shape()) + " is singular (pivot " +
                    std::to_string(info) + " is exactly zero); use linalg::lstsq for a least-squares solution");
}

[[noreturn]] void throw_no_convergence(const Array& a, int info) {
  throw LinAlgError("linalg::lstsq: the SVD of a " + shape_str(a.shape()) + " did not converge (" +
                    std::to_string(info) + " off-diagonal elements); check a for NaN or infinite values");
}

/// lstsq on a device with an SVD: x = V diag(1/s where s > rcond * s_max) U^T b; the rank and the cut-off need
/// the singular values on the host (one small copy). nullopt when the backend has no SVD.
std::optional<LstsqResult> device_lstsq(const Operands& o, const Array& a, const Array& b, double rc) {
  const DeviceOperands d = device_operands(o, a, b);
  const int64_t r = std::min(o.m, o.n);
  detail::SvdCall call{&d.a, detail::make_array({o.m, r}, float64, o.device), detail::make_array({r}, float64, o.device),
                       detail::make_array({r, o.n}, float64, o.device)};
  const int info = detail::backend_for(o.device).linalg_svd(call);
  if (info < 0) return std::nullopt;
  if (info > 0) throw_no_convergence(a, info);
  const std::vector<double> s = call.s.to_vector<double>();
  const double cutoff = rc * (s.empty() ? 0.0 : s[0]);
  std::vector<double> inverse(s.size());
  int64_t rank = 0;
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] > cutoff) {
      inverse[i] = 1.0 / s[i];
      ++rank;
    }
  const Array scale = from_data(inverse, Shape{r, 1}, cpu()).to(o.device);
  const Array x = matmul(transpose(call.vt), multiply(scale, matmul(transpose(call.u), d.b)));  // (n, k)
  LstsqResult result;
  result.rank = rank;
  result.solution = device_result(o, x);
  if (rank == o.n && o.m > o.n) {
    const Array residual = subtract(matmul(d.a, x), d.b);
    result.residuals = sum(multiply(residual, residual), 0).astype(o.result);
  } else {
    result.residuals = zeros({0}, o.result, o.device);
  }
  result.singular_values = call.s.astype(o.result);
  return result;
}

/// The first `rows` rows of the column-major (ld x k) block as an array of shape (rows,) or (rows, k).
Array result_array(const Operands& o, const std::vector<double>& col_major, int64_t ld, int64_t rows) {
  std::vector<double> c(static_cast<size_t>(rows * o.k));
  for (int64_t j = 0; j < o.k; ++j)
    for (int64_t i = 0; i < rows; ++i) c[static_cast<size_t>(i * o.k + j)] = col_major[static_cast<size_t>(j * ld + i)];
  Shape s = o.vector_b ? Shape{rows} : Shape{rows, o.k};
  return from_data(c, s, cpu()).astype(o.result).to(o.device);
}

int lapack_int(int64_t v, const char* op) {
  if (v > std::numeric_limits<int>::max())
    throw ValueError(std::string(op) + ": extent " + std::to_string(v) + " exceeds LAPACK's 32-bit integers");
  return static_cast<int>(v);
}

/// solve of one 2-d a and a b of shape (n,) or (n, k).
Array solve_matrix(const Array& a, const Array& b) {
  const Operands checked = check_operands(a, b, "linalg::solve", true);
  if (!checked.device.is_cpu() && checked.n > 0 && checked.k > 0) {
    const DeviceOperands d = device_operands(checked, a, b);
    detail::SolveCall call{&d.a, &d.b, detail::make_array({checked.n, checked.k}, float64, checked.device)};
    const int info = detail::backend_for(checked.device).linalg_solve(call);
    if (info > 0) throw_singular(a, info);
    if (info == 0) return device_result(checked, call.x);
  }
  Operands o = prepare(a, b, "linalg::solve", true);
  const int n = lapack_int(o.n, "linalg::solve"), k = lapack_int(o.k, "linalg::solve"), ld = std::max(n, 1);
  std::vector<int> ipiv(static_cast<size_t>(std::max(n, 1)));
  int info = 0;
  if (n > 0 && k > 0) dgesv_(&n, &k, o.a.data(), &ld, ipiv.data(), o.b.data(), &ld, &info);
  if (info > 0) throw_singular(a, info);
  if (info < 0) throw ValueError("linalg::solve: LAPACK dgesv rejected argument " + std::to_string(-info));
  return result_array(o, o.b, ld, o.n);
}

[[noreturn]] void throw_singular_in_stack(const Array& a, int64_t index, int info) {
  throw LinAlgError("linalg::solve: matrix " + std::to_string(index) + " of the stack a " + shape_str(a.shape()) +
                    " (counted in C order over the broadcast stack) is singular (pivot " + std::to_string(info) +
                    " is exactly zero); use linalg::lstsq for a least-squares solution");
}

/// solve over stacks: a (..., n, n) and b (..., n, k) broadcast against each other, or b (n,) for every matrix.
Array solve_stack(const Array& a, const Array& b) {
  const char* op = "linalg::solve";
  const int64_t n = a.shape(-1);
  const bool vector_b = b.ndim() == 1;
  const Array bm = vector_b ? b.reshape(Shape{n, 1}) : b;
  const int64_t k = bm.shape(-1);
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(bm.shape().begin(), bm.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(a_batch, b_batch, op);
  } catch (const ShapeError&) {
    throw ShapeError("linalg::solve: the stacks of a " + shape_str(a.shape()) + " and b " + shape_str(b.shape()) +
                     " do not broadcast (" + shape_str(a_batch) + " against " + shape_str(b_batch) +
                     "); each stack axis must match or be 1");
  }
  int64_t count = 1;
  for (int64_t e : batch) count *= e;
  Shape a_full = batch, b_full = batch, out = batch;
  a_full.push_back(n);
  a_full.push_back(n);
  b_full.push_back(n);
  b_full.push_back(k);
  out.push_back(n);
  if (!vector_b) out.push_back(k);
  const DType t = promote_types(a.dtype(), b.dtype());
  const DType result = is_floating(t) && t != float64 ? float32 : float64;
  const Device device = a.device();
  if (count == 0 || n == 0 || k == 0) return zeros(out, result, device);
  const Array as = broadcast_to(a, a_full).reshape(Shape{count, n, n});
  const Array bs = broadcast_to(bm, b_full).reshape(Shape{count, n, k});
  if (!device.is_cpu()) {
    // The backend's solver takes one matrix: a call per matrix, each reading its info.
    std::vector<Array> parts;
    for (int64_t i = 0; i < count; ++i) {
      const Array ai = as.index({i}).astype(float64).contiguous(), bi = bs.index({i}).astype(float64).contiguous();
      detail::SolveCall call{&ai, &bi, detail::make_array({n, k}, float64, device)};
      const int info = detail::backend_for(device).linalg_solve(call);
      if (info < 0) break;  // no solver on this backend: LAPACK on the host below
      if (info > 0) throw_singular_in_stack(a, i, info);
      parts.push_back(call.x);
    }
    if (static_cast<int64_t>(parts.size()) == count) return stack(parts, 0).reshape(out).astype(result);
  }
  // Each matrix's column-major buffer is the row-major buffer of its transpose.
  std::vector<double> ca = swapaxes(as, -1, -2).to_vector<double>(), cb = swapaxes(bs, -1, -2).to_vector<double>();
  const int ni = lapack_int(n, op), ki = lapack_int(k, op);
  std::vector<int> ipiv(static_cast<size_t>(ni));
  for (int64_t i = 0; i < count; ++i) {
    int info = 0;
    dgesv_(&ni, &ki, ca.data() + i * n * n, &ni, ipiv.data(), cb.data() + i * n * k, &ni, &info);
    if (info > 0) throw_singular_in_stack(a, i, info);
    if (info < 0) throw ValueError("linalg::solve: LAPACK dgesv rejected argument " + std::to_string(-info));
  }
  return swapaxes(from_data(cb, Shape{count, k, n}, cpu()), -1, -2).reshape(out).astype(result).to(device);
}

/// solve without recording: one matrix, or stacks.
Array solve_forward(const Array& a, const Array& b) {
  if (!a.defined() || !b.defined())
    throw ValueError("linalg::solve: an operand is an undefined Array; create it first");
  if (a.ndim() == 2 && b.ndim() <= 2) return solve_matrix(a, b);
  const std::string shapes = "a " + shape_str(a.shape()) + ", b " + shape_str(b.shape());
  if (a.ndim() < 2 || a.shape(-1) != a.shape(-2))
    throw ShapeError("linalg::solve: a must be a square matrix or a stack of them (..., n, n), got " + shapes);
  if (a.device() != b.device())
    throw DeviceError("linalg::solve: a is on " + a.device().str() + " but b is on " + b.device().str() +
                      "; move one with .to(" + a.device().str() + ")");
  const int64_t n = a.shape(-1);
  if (b.ndim() == 0 || (b.ndim() == 1 ? b.shape(0) : b.shape(-2)) != n)
    throw ShapeError("linalg::solve: b must have shape (" + std::to_string(n) + ",) or (..., " + std::to_string(n) +
                     ", k) to match a, got " + shapes + " (b is one vector only when it is 1-d)");
  return solve_stack(a, b);
}

}  // namespace

Array solve(const Array& a, const Array& b) {
  const bool record = is_grad_enabled() && ((a.defined() && a.requires_grad()) || (b.defined() && b.requires_grad()));
  if (!record) return solve_forward(a, b);
  // X = A^-1 B: dX = A^-1 (dB - dA X), so G_B = A^-T G_X and G_A = -G_B X^T (torch.linalg.solve's). A 1-d b is
  // a column here; the autograd engine sums each gradient over the stack axes its input was broadcast along.
  const bool vector_b = b.ndim() == 1;
  AutogradFunction fn{"linalg::solve",
                      [](const std::vector<Array>& in, std::vector<Array>& saved) {
                        const Array x = solve_forward(in[0], in[1]);
                        saved = {in[0], x};
                        return x;
                      },
                      [vector_b](const Array& g, const std::vector<Array>& saved, const std::vector<bool>& needs) {
                        const Array x = vector_b ? expand_dims(saved[1], -1) : saved[1];
                        const Array gx = vector_b ? expand_dims(g, -1) : g;
                        const Array gb = solve_forward(swapaxes(saved[0].astype(g.dtype()), -1, -2), gx);
                        Array ga;
                        if (needs[0]) ga = negative(matmul(gb, swapaxes(x.astype(g.dtype()), -1, -2)));
                        return std::vector<Array>{ga, needs[1] ? (vector_b ? squeeze(gb, {-1}) : gb) : Array()};
                      }};
  return fn.apply({a, b});
}

LstsqResult lstsq(const Array& a, const Array& b, std::optional<double> rcond) {
  detail::reject_grad({&a, &b}, "linalg::lstsq", "it has no gradient yet");
  const char* op = "linalg::lstsq";
  const Operands checked = check_operands(a, b, op, false);
  if (!checked.device.is_cpu() && checked.m > 0 && checked.n > 0 && checked.k > 0) {
    const double rc = rcond.value_or(std::numeric_limits<double>::epsilon() *
                                     static_cast<double>(std::max(checked.m, checked.n)));
    if (std::optional<LstsqResult> result = device_lstsq(checked, a, b, rc)) return *std::move(result);
  }
  Operands o = prepare(a, b, op, false);
  const int m = lapack_int(o.m, op), n = lapack_int(o.n, op), k = lapack_int(o.k, op);
  const int lda = std::max(m, 1), ldb = std::max({m, n, 1});
  // b grows to ldb rows: dgelsd writes the n-row solution over it.
  std::vector<double> bb(static_cast<size_t>(ldb) * static_cast<size_t>(std::max(k, 1)));
  for (int64_t j = 0; j < o.k; ++j)
    for (int64_t i = 0; i < o.m; ++i) bb[static_cast<size_t>(j * ldb + i)] = o.b[static_cast<size_t>(j * o.m + i)];
  std::vector<double> s(static_cast<size_t>(std::max(std::min(m, n), 1)));
  const double rc = rcond.value_or(std::numeric_limits<double>::epsilon() * std::max(m, n));
  int rank = 0, info = 0;
  if (m > 0 && n > 0 && k > 0) {
    int lwork = -1, iwork_query = 0;
    double work_query = 0;
    dgelsd_(&m, &n, &k, o.a.data(), &lda, bb.data(), &ldb, s.data(), &rc, &rank, &work_query, &lwork, &iwork_query,
            &info);
    lwork = static_cast<int>(work_query);
    std::vector<double> work(static_cast<size_t>(std::max(lwork, 1)));
    std::vector<int> iwork(static_cast<size_t>(std::max(iwork_query, 1)));
    dgelsd_(&m, &n, &k, o.a.data(), &lda, bb.data(), &ldb, s.data(), &rc, &rank, work.data(), &lwork, iwork.data(),
            &info);
  }
  if (info > 0) throw_no_convergence(a, info);
  if (info < 0) throw ValueError("linalg::lstsq: LAPACK dgelsd rejected argument " + std::to_string(-info));
  LstsqResult r;
  r.rank = rank;
  r.solution = result_array(o, bb, ldb, o.n);
  std::vector<double> res;
  if (rank == n && m > n)
    for (int64_t j = 0; j < o.k; ++j) {
      double sum = 0;
      for (int64_t i = o.n; i < o.m; ++i)
        sum += bb[static_cast<size_t>(j * ldb + i)] * bb[static_cast<size_t>(j * ldb + i)];
      res.push_back(sum);
    }
  r.residuals = from_data(res, Shape{static_cast<int64_t>(res.size())}, cpu()).astype(o.result).to(o.device);
  s.resize(static_cast<size_t>(std::min(m, n)));
  r.singular_values = from_data(s, Shape{static_cast<int64_t>(s.size())}, cpu()).astype(o.result).to(o.device);
  return r;
}

}  // namespace kiln::linalg
