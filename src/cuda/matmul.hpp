// GPU matrix products (internal): cuBLAS for float32/float64/float16/bfloat16,
// and a generated tiled kernel for the other dtypes (exact wrap-around integer
// products, or-of-ands for bool) and for layouts cuBLAS cannot read in place.
// The entry point, cuda_matmul, is declared in cuda/ops.hpp; the cuBLAS plan and
// the kernel source are exposed here so they are tested without a GPU.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kiln/array.hpp"
#include "kiln/dtype.hpp"

namespace kiln::cuda_impl {

/// Name of the generic (non-cuBLAS) matrix-product kernel for `dtype`, e.g. "kiln_matmul_tiled_i32".
std::string matmul_fallback_kernel_name(DType dtype);
/// Complete CUDA source (kiln's device prelude + the kernel) of the generic matrix-product kernel for
/// `dtype` (any dtype: integers accumulate in 64-bit wrap-around arithmetic like the CPU, bool as or-of-ands,
/// floats in float/double). Pure text: compiles to PTX without a GPU.
std::string matmul_fallback_source(DType dtype);

/// How cuBLAS computes a MatmulCall: the row-major C (m x n) = A (m x k) B (k x n) as the column-major
/// C^T = op(B) op(A), B being cuBLAS's first operand and A its second. Strides in elements.
struct GemmPlan {
  bool transpose_first = false;   ///< B is column-major (CUBLAS_OP_T), else row-major read as B^T (CUBLAS_OP_N)
  bool transpose_second = false;  ///< the same for A
  int64_t ld_first = 1, ld_second = 1;
  int64_t m = 0, n = 0, k = 0;  ///< of the row-major product (cuBLAS gets n, m, k); m includes folded batches
  int64_t batch = 1;
  int64_t first_batch_stride = 0, second_batch_stride = 0, out_batch_stride = 0;
  bool per_matrix = false;  ///< a negative batch stride: one gemm call per matrix instead of a strided batch
};
/// The plan for 3-d operands (batch, m, k) x (batch, k, n) -> out (batch, m, n) (a MatmulCall's), or nullopt
/// when a matrix's strides suit neither cuBLAS form. A broadcast B over a batch of stacked row-major A matrices
/// folds into one gemm of batch * m rows. Pure arithmetic on shapes and strides: no GPU needed.
std::optional<GemmPlan> plan_gemm(const Array& a, const Array& b, const Array& out);

/// Bytes of the cuBLAS workspace each (thread's handle, stream) pair gets on a GPU of compute capability `cc`.
size_t cublas_workspace_bytes(int cc);

}  // namespace kiln::cuda_impl
