// linalg's factorisations on the GPU with cuSOLVER (CudaBackend::linalg_factor): inverse (getrf + getrs of the
// identity), Cholesky (potrf), QR (geqrf + orgqr), SVD (gesvd) and the symmetric eigen-decomposition (syevd),
// in float64, one cuSOLVER call per matrix of the batch on the device's current stream, with one workspace
// and one info array for the whole batch: the infos are read back once, at the end.
//
// kiln's matrices are row-major and cuSOLVER's column-major: a row-major buffer of A is the column-major A^T.
// inv(A^T) = inv(A)^T, so the inverse of the buffer read back row-major is inv(A); Cholesky and syevd read
// A's lower triangle as the buffer's upper one; QR and the SVD transpose explicitly (gesvd needs rows >=
// columns: a wide matrix is factored as A^T = U' S V'^T, so A = V' S U'^T).
#include <cusolverDn.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "cuda/cusolver.hpp"
#include "cuda/ops.hpp"
#include "kiln/error.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cuda_impl {
namespace {

double* f64(const Array& a) { return static_cast<double*>(a.data_ptr()); }
int32_t* i32(const Array& a) { return static_cast<int32_t*>(a.data_ptr()); }

Array mT(const Array& x) { return swapaxes(x, -1, -2); }

struct Batch {
  int device = 0;
  int64_t count = 0, m = 0, n = 0;
  Array infos;  // int32 (count,)
};

Batch begin_batch(const detail::FactorCall& call) {
  Batch b;
  b.device = call.a->device().index;
  b.count = call.a->shape(0);
  b.m = call.a->shape(1);
  b.n = call.a->shape(2);
  b.infos = zeros({b.count}, DType::Int32, call.a->device());
  return b;
}

Array workspace(int lwork, Device d) { return empty({std::max(lwork, 1)}, DType::Float64, d); }

void finish(detail::FactorCall& call, const Batch& b, const char* op) {
  const std::vector<int32_t> infos = b.infos.to_vector<int32_t>();
  for (int32_t info : infos)
    if (info < 0) throw ValueError(std::string(op) + ": cuSOLVER rejected argument " + std::to_string(-info));
  call.infos.assign(infos.begin(), infos.end());
}

void inverse(detail::FactorCall& call, cusolverDnHandle_t h, const Batch& b) {
  const char* op = "linalg::inv";
  const Device d = call.a->device();
  const int n = static_cast<int>(b.n);
  Array lu = call.a->copy();
  Array x = call.outputs[0];
  x.assign(broadcast_to(eye(b.n, {}, 0, DType::Float64, d), x.shape()));
  Array pivots = empty({b.count, b.n}, DType::Int32, d);
  Array solve_infos = zeros({b.count}, DType::Int32, d);
  int lwork = 0;
  KILN_CUSOLVER(cusolverDnDgetrf_bufferSize(h, n, n, f64(lu), n, &lwork), op, b.device);
  Array work = workspace(lwork, d);
  for (int64_t i = 0; i < b.count; ++i) {
    double* m = f64(lu) + i * b.n * b.n;
    KILN_CUSOLVER(cusolverDnDgetrf(h, n, n, m, n, f64(work), i32(pivots) + i * b.n, i32(b.infos) + i), op, b.device);
    // A singular factor makes getrs divide by zero: harmless, the info reports it and the result is dropped.
    KILN_CUSOLVER(cusolverDnDgetrs(h, CUBLAS_OP_N, n, n, m, n, i32(pivots) + i * b.n, f64(x) + i * b.n * b.n, n,
                                   i32(solve_infos) + i),
                  op, b.device);
  }
}

void cholesky(detail::FactorCall& call, cusolverDnHandle_t h, const Batch& b) {
  const char* op = "linalg::cholesky";
  const Device d = call.a->device();
  const int n = static_cast<int>(b.n);
  Array f = call.a->copy();
  const cublasFillMode_t fill = call.upper ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;  // the buffer is A^T
  int lwork = 0;
  KILN_CUSOLVER(cusolverDnDpotrf_bufferSize(h, fill, n, f64(f), n, &lwork), op, b.device);
  Array work = workspace(lwork, d);
  for (int64_t i = 0; i < b.count; ++i)
    KILN_CUSOLVER(cusolverDnDpotrf(h, fill, n, f64(f) + i * b.n * b.n, n, f64(work), lwork, i32(b.infos) + i), op,
                  b.device);
  Array out = call.outputs[0];
  out.assign(call.upper ? triu(f) : tril(f));
}

void qr(detail::FactorCall& call, cusolverDnHandle_t h, const Batch& b) {
  const char* op = "linalg::qr";
  const Device d = call.a->device();
  const int64_t m = b.m, n = b.n, k = std::min(m, n);
  const bool want_q = call.outputs[0].defined();
  const int64_t q_cols = call.complete ? m : k, r_rows = call.complete ? m : k;
  // Column-major A (m, n) with room for q_cols columns: row-major (batch, max(n, q_cols), m).
  const int64_t cols = std::max(n, q_cols);
  Array f = zeros({b.count, cols, m}, DType::Float64, d);
  f.index({Slice(), Slice(0, n)}).assign(mT(*call.a));
  Array tau = empty({b.count, k}, DType::Float64, d);
  const int mi = static_cast<int>(m), ni = static_cast<int>(n), ki = static_cast<int>(k), qi = static_cast<int>(q_cols);
  int lwork = 0, lwork_q = 0;
  KILN_CUSOLVER(cusolverDnDgeqrf_bufferSize(h, mi, ni, f64(f), mi, &lwork), op, b.device);
  if (want_q) KILN_CUSOLVER(cusolverDnDorgqr_bufferSize(h, mi, qi, ki, f64(f), mi, f64(tau), &lwork_q), op, b.device);
  Array work = workspace(std::max(lwork, lwork_q), d);
  for (int64_t i = 0; i < b.count; ++i)
    KILN_CUSOLVER(cusolverDnDgeqrf(h, mi, ni, f64(f) + i * cols * m, mi, f64(tau) + i * k, f64(work),
                                   std::max(lwork, lwork_q), i32(b.infos) + i),
                  op, b.device);
  // R: the upper triangle of the factored A's first r_rows rows (rows past k are zero).
  Array r = call.outputs[1];
  const Array factored = mT(f.index({Slice(), Slice(0, n)}));  // (batch, m, n)
  r.assign(triu(factored.index({Slice(), Slice(0, std::min(r_rows, m))})));
  if (!want_q) return;
  for (int64_t i = 0; i < b.count; ++i)
    KILN_CUSOLVER(cusolverDnDorgqr(h, mi, qi, ki, f64(f) + i * cols * m, mi, f64(tau) + i * k, f64(work),
                                   std::max(lwork, lwork_q), i32(b.infos) + i),
                  op, b.device);
  Array q = call.outputs[0];
  q.assign(mT(f.index({Slice(), Slice(0, q_cols)})));
}

void svd(detail::FactorCall& call, cusolverDnHandle_t h, const Batch& b) {
  const char* op = "linalg::svd";
  const Device d = call.a->device();
  const bool vectors = call.outputs.size() == 3;
  const bool tall = b.m >= b.n;
  const int64_t rows = tall ? b.m : b.n, cols = tall ? b.n : b.m;
  const int64_t u_cols = call.complete ? rows : cols;
  // gesvd factors the column-major (rows, cols) M: a tall A is the transposed buffer, a wide A's buffer is A^T.
  Array w = tall ? mT(*call.a).copy() : call.a->copy();
  Array uc = empty({b.count, vectors ? u_cols : 1, vectors ? rows : 1}, DType::Float64, d);  // column-major U'
  Array vtc = empty({b.count, vectors ? cols : 1, vectors ? cols : 1}, DType::Float64, d);   // column-major V'^T
  Array s = call.outputs[0];
  const char job = !vectors ? 'N' : call.complete ? 'A' : 'S';
  const int ri = static_cast<int>(rows), ci = static_cast<int>(cols);
  int lwork = 0;
  KILN_CUSOLVER(cusolverDnDgesvd_bufferSize(h, ri, ci, &lwork), op, b.device);
  Array work = workspace(lwork, d);
  Array rwork = empty({std::max<int64_t>(cols - 1, 1)}, DType::Float64, d);
  const int ldu = vectors ? ri : 1, ldvt = vectors ? ci : 1;
  for (int64_t i = 0; i < b.count; ++i)
    KILN_CUSOLVER(
        cusolverDnDgesvd(h, job, job, ri, ci, f64(w) + i * rows * cols, ri, f64(s) + i * cols,
                         f64(uc) + i * uc.shape(1) * uc.shape(2), ldu, f64(vtc) + i * vtc.shape(1) * vtc.shape(2), ldvt,
                         f64(work), lwork, f64(rwork), i32(b.infos) + i),
        op, b.device);
  if (!vectors) return;
  // Row-major views: uc is U'^T (u_cols, rows); vtc is V' (cols, cols).
  Array u = call.outputs[1], vh = call.outputs[2];
  if (tall) {  // M = A: U = U', Vh = V'^T
    u.assign(mT(uc));
    vh.assign(mT(vtc));
  } else {  // M = A^T: U = V', Vh = U'^T
    u.assign(vtc);
    vh.assign(uc);
  }
}

void eigh(detail::FactorCall& call, cusolverDnHandle_t h, const Batch& b) {
  const char* op = "linalg::eigh";
  const Device d = call.a->device();
  const bool vectors = call.outputs.size() == 2;
  const int n = static_cast<int>(b.n);
  Array f = call.a->copy();
  Array w = call.outputs[0];
  const cublasFillMode_t fill = call.upper ? CUBLAS_FILL_MODE_LOWER : CUBLAS_FILL_MODE_UPPER;  // the buffer is A^T
  const cusolverEigMode_t mode = vectors ? CUSOLVER_EIG_MODE_VECTOR : CUSOLVER_EIG_MODE_NOVECTOR;
  int lwork = 0;
  KILN_CUSOLVER(cusolverDnDsyevd_bufferSize(h, mode, fill, n, f64(f), n, f64(w), &lwork), op, b.device);
  Array work = workspace(lwork, d);
  for (int64_t i = 0; i < b.count; ++i)
    KILN_CUSOLVER(cusolverDnDsyevd(h, mode, fill, n, f64(f) + i * b.n * b.n, n, f64(w) + i * b.n, f64(work), lwork,
                                   i32(b.infos) + i),
                  op, b.device);
  if (!vectors) return;
  Array v = call.outputs[1];
  v.assign(mT(f));  // the eigenvectors are the columns of the column-major buffer
}

}  // namespace

bool cuda_factor(detail::FactorCall& call) {
  const char* names[] = {"linalg::inv", "linalg::cholesky", "linalg::qr", "linalg::svd", "linalg::eigh"};
  const char* op = names[static_cast<int>(call.op)];
  const Batch b = begin_batch(call);
  cusolverDnHandle_t h = cusolver_begin(b.device, op);
  switch (call.op) {
    case detail::FactorOp::Inverse:
      inverse(call, h, b);
      break;
    case detail::FactorOp::Cholesky:
      cholesky(call, h, b);
      break;
    case detail::FactorOp::Qr:
      qr(call, h, b);
      break;
    case detail::FactorOp::Svd:
      svd(call, h, b);
      break;
    case detail::FactorOp::Eigh:
      eigh(call, h, b);
      break;
  }
  finish(call, b, op);
  return true;
}

}  // namespace kiln::cuda_impl
