// GPU matrix products (internal): cuBLAS for float32/float64/float16/bfloat16,
// and a generated tiled kernel for the other dtypes (exact wrap-around integer
// products, or-of-ands for bool) and for layouts cuBLAS cannot read in place.
// The entry point, cuda_matmul, is declared in cuda/ops.hpp.
#pragma once

#include <string>

#include "kiln/dtype.hpp"

namespace kiln::cuda_impl {

/// Name of the generic (non-cuBLAS) matrix-product kernel for `dtype`, e.g. "kiln_matmul_tiled_i32".
std::string matmul_fallback_kernel_name(DType dtype);
/// Complete CUDA source (kiln's device prelude + the kernel) of the generic matrix-product kernel for
/// `dtype` (any dtype: integers accumulate in 64-bit wrap-around arithmetic like the CPU, bool as or-of-ands,
/// floats in float/double). Pure text: compiles to PTX without a GPU.
std::string matmul_fallback_source(DType dtype);

/// Bytes of the cuBLAS workspace each (thread's handle, stream) pair gets on a GPU of compute capability `cc`.
size_t cublas_workspace_bytes(int cc);

}  // namespace kiln::cuda_impl
