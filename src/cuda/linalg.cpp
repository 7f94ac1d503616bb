// Dense solvers on the GPU with cuSOLVER (CudaBackend::linalg_solve, linalg_svd):
// LU with partial pivoting (getrf + getrs) for linalg::solve and the SVD (gesvd)
// for linalg::lstsq, in float64 on the device's current stream.
//
// kiln's matrices are row-major; cuSOLVER's are column-major. A row-major (r, c)
// buffer is the column-major (c, r) matrix, its transpose: solve factors a's
// buffer (a^T) and solves with CUBLAS_OP_T; gesvd takes the orientation with at
// least as many rows as columns (its requirement) and the factors are read back
// through the same identity. Handles: one per (device, thread), created on first
// use and never destroyed (as the cuBLAS handles: destroying them at process exit
// is unsafe). Workspaces come from the caching allocator on the call's stream.
#include <cusolverDn.h>

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "core/backend.hpp"
#include "cuda/cusolver.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "kiln/error.hpp"
#include "kiln/kiln.hpp"

namespace kiln::cuda_impl {
namespace {

const char* status_name(cusolverStatus_t status) {
  switch (status) {
    case CUSOLVER_STATUS_NOT_INITIALIZED:
      return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED:
      return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE:
      return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH:
      return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_EXECUTION_FAILED:
      return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR:
      return "CUSOLVER_STATUS_INTERNAL_ERROR";
    default:
      return "cuSOLVER error";
  }
}

}  // namespace

void cusolver_check(cusolverStatus_t status, const char* call, const char* op, int device) {
  if (status != CUSOLVER_STATUS_SUCCESS)
    throw CudaError(std::string(op) + ": " + call + " failed on cuda:" + std::to_string(device) + " (" +
                    status_name(status) + ", status " + std::to_string(static_cast<int>(status)) +
                    "); linalg functions also run on the CPU: move the operands with .to(cpu())");
}

namespace {

/// This thread's cuSOLVER handle for `device` (the current device), bound to `stream`.
cusolverDnHandle_t solver_handle(int device, cudaStream_t stream, const char* op) {
  thread_local std::array<cusolverDnHandle_t, kMaxDevices> handles{};
  cusolverDnHandle_t& h = handles[static_cast<size_t>(device)];
  if (h == nullptr) {
    RelaxedCaptureMode relaxed;  // creation allocates
    KILN_CUSOLVER(cusolverDnCreate(&h), op, device);
  }
  KILN_CUSOLVER(cusolverDnSetStream(h, stream), op, device);
  return h;
}

double* f64(const Array& a) { return static_cast<double*>(a.data_ptr()); }

/// The int32 infos the calls wrote (one synchronising copy; counted by sync debugging as the op's).
std::vector<int32_t> read_infos(const Array& info) { return info.to_vector<int32_t>(); }

}  // namespace

cusolverDnHandle_t cusolver_begin(int device, const char* op) {
  set_device(device);
  return solver_handle(device, current_stream(device), op);
}

int cuda_solve(const detail::SolveCall& call) {
  const char* op = "linalg::solve";
  const Device d = call.a->device();
  const int device = d.index;
  cusolverDnHandle_t h = cusolver_begin(device, op);
  const int n = static_cast<int>(call.a->shape(0)), k = static_cast<int>(call.b->shape(1));
  Array lu = call.a->copy();                    // row-major a = column-major a^T, factored in place
  Array xt = transpose(*call.b).copy();         // row-major (k, n) = column-major (n, k) b, solved in place
  Array info = zeros({2}, DType::Int32, d);     // getrf's info, getrs's info
  Array pivots = empty({n}, DType::Int32, d);
  int lwork = 0;
  KILN_CUSOLVER(cusolverDnDgetrf_bufferSize(h, n, n, f64(lu), n, &lwork), op, device);
  Array work = empty({std::max(lwork, 1)}, DType::Float64, d);
  int32_t* infos = static_cast<int32_t*>(info.data_ptr());
  int32_t* ipiv = static_cast<int32_t*>(pivots.data_ptr());
  KILN_CUSOLVER(cusolverDnDgetrf(h, n, n, f64(lu), n, f64(work), ipiv, infos), op, device);
  // (a^T)^T x = b: the transposed solve of the factored a^T.
  KILN_CUSOLVER(cusolverDnDgetrs(h, CUBLAS_OP_T, n, k, f64(lu), n, ipiv, f64(xt), n, infos + 1), op, device);
  const std::vector<int32_t> status = read_infos(info);
  if (status[0] < 0 || status[1] < 0)
    throw ValueError(std::string(op) + ": cuSOLVER rejected argument " +
                     std::to_string(-(status[0] < 0 ? status[0] : status[1])));
  if (status[0] > 0) return status[0];  // U(i, i) is exactly zero: singular
  Array x = call.x;
  x.assign(transpose(xt));
  return 0;
}

int cuda_svd(const detail::SvdCall& call) {
  const char* op = "linalg::lstsq";
  const Device d = call.a->device();
  const int device = d.index;
  cusolverDnHandle_t h = cusolver_begin(device, op);
  const int64_t m = call.a->shape(0), n = call.a->shape(1);
  // gesvd needs rows >= columns. m >= n: factor a itself (column-major a = row-major a^T, copied);
  // m < n: factor a^T (a's own row-major buffer, copied).
  const bool tall = m >= n;
  const int rows = static_cast<int>(tall ? m : n), cols = static_cast<int>(tall ? n : m);
  Array w = tall ? transpose(*call.a).copy() : call.a->copy();
  Array uc = empty({cols, rows}, DType::Float64, d);  // column-major (rows, cols): the first cols left vectors
  Array vtc = empty({cols, cols}, DType::Float64, d);  // column-major (cols, cols)
  Array s = empty({cols}, DType::Float64, d);
  Array info = zeros({1}, DType::Int32, d);
  int lwork = 0;
  KILN_CUSOLVER(cusolverDnDgesvd_bufferSize(h, rows, cols, &lwork), op, device);
  Array work = empty({std::max(lwork, 1)}, DType::Float64, d);
  Array rwork = empty({std::max(cols - 1, 1)}, DType::Float64, d);
  KILN_CUSOLVER(cusolverDnDgesvd(h, 'S', 'S', rows, cols, f64(w), rows, f64(s), f64(uc), rows, f64(vtc), cols,
                                 f64(work), lwork, f64(rwork), static_cast<int32_t*>(info.data_ptr())),
                op, device);
  const int status = read_infos(info)[0];
  if (status < 0) throw ValueError(std::string(op) + ": cuSOLVER gesvd rejected argument " + std::to_string(-status));
  if (status > 0) return status;
  // The factor M = U' S V'^T of the matrix factored. Row-major views: uc is U'^T (cols, rows), vtc is V' (cols x
  // cols, since a column-major V'^T is a row-major V').
  Array u = call.u, vt = call.vt, sv = call.s;
  if (tall) {  // M = a: u = U', vt = V'^T
    u.assign(transpose(uc));
    vt.assign(transpose(vtc));
  } else {  // M = a^T = U' S V'^T, so a = V' S U'^T: u = V', vt = U'^T
    u.assign(vtc);
    vt.assign(uc);
  }
  sv.assign(s);
  return 0;
}

}  // namespace kiln::cuda_impl
