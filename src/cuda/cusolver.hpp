// What the cuSOLVER files (linalg.cpp, linalg_factor.cpp) share: the status check and this thread's handle.
#pragma once

#include <cusolverDn.h>

namespace kiln::cuda_impl {

/// Throws CudaError naming `op`, the call and the status unless `status` is success.
void cusolver_check(cusolverStatus_t status, const char* call, const char* op, int device);
#define KILN_CUSOLVER(expr, op, device) ::kiln::cuda_impl::cusolver_check((expr), #expr, op, device)

/// Makes `device` current and returns this thread's cuSOLVER handle bound to its current stream.
cusolverDnHandle_t cusolver_begin(int device, const char* op);

}  // namespace kiln::cuda_impl
