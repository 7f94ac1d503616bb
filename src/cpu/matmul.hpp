// CPU matrix products (internal): batched (batch, m, k) x (batch, k, n) through
// OpenBLAS for float32/float64 and a plain row-times-matrix loop for the rest.
#pragma once

#include "core/backend.hpp"

namespace kiln::cpu_impl {

/// out[b] = a[b] @ b[b] for the 3-d views of `call` (batch stride 0 allowed, matrices row- or column-major).
/// float32/float64 call cblas_sgemm/dgemm (gemv for a single row or column); integers accumulate in 64 bits
/// (wrapping), float16/bfloat16 in float, bool as or-of-ands.
void cpu_matmul(const detail::MatmulCall& call);

/// True when the BLAS kiln links runs products on threads of its own (OpenBLAS's pthreads build), not on
/// OpenMP's team (its OpenMP build) or the calling thread.
bool blas_has_own_threads();
/// Products of at least this many multiply-adds go to oneMKL; INT64_MAX in a build without oneMKL.
/// KILN_MKL_MIN_WORK sets it; else 2^34 beside OpenBLAS's pthreads build (see matmul.cpp), 2^27 on teams of more
/// than two threads and 0 (every product) on smaller ones.
int64_t mkl_min_work();
/// True when every float32 product gives the same bits on any thread count: all of them go to oneMKL
/// (mkl_min_work() is 0) and oneMKL runs in its strict reproducible mode (MKL_CBWR=<the CPU's branch>,STRICT,
/// which kiln sets unless MKL_CBWR is set; float64 products differed on one thread and on two even so). The CPU
/// load watch is on by default then (KILN_CPU_LOAD=auto: parallel.hpp).
bool float32_products_keep_bits();
/// Tests: products of at least `work` multiply-adds go to oneMKL (in a KILN_MKL build); -1 goes back to the
/// default split (KILN_MKL_MIN_WORK, else by the team's size).
void set_mkl_min_work_for_testing(int64_t work);

}  // namespace kiln::cpu_impl
