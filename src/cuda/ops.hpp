// The CUDA backend's op entry points (internal). CudaBackend (backend.cpp)
// makes the output's device current and calls these; each is defined in its
// own file (elementwise, reduce, matmul, random).
#pragma once

#include <string>

#include "core/backend.hpp"
#include "core/user_kernel.hpp"

namespace kiln::cuda_impl {

/// Runs an elementwise op (built-in ops, fills, casts, copies) on call.out's device and current stream.
void cuda_elementwise(const detail::ElementwiseCall& call);
/// Runs a reduction on call.out's device and current stream.
void cuda_reduce(const detail::ReduceCall& call);
/// Runs a (batched) matrix product with cuBLAS on call.out's device and current stream.
void cuda_matmul(const detail::MatmulCall& call);
/// Fills call.out from the Philox stream on its device and current stream.
void cuda_random(const detail::RandomCall& call);
/// linalg::solve / lstsq's SVD with cuSOLVER on the operands' device and current stream (linalg.cpp); LAPACK's
/// info (0: done), read back with one synchronising copy.
int cuda_solve(const detail::SolveCall& call);
int cuda_svd(const detail::SvdCall& call);
/// linalg's factorisations with cuSOLVER, matrix by matrix, on the operand's device and current stream
/// (linalg_factor.cpp).
bool cuda_factor(detail::FactorCall& call);
/// A Fourier transform with cuFFT on the operands' device and current stream (fft.cpp); false when the layout has
/// no cuFFT form (the core then passes its canonical one). cuda_fft_cached_plans: the plans cached for `device`.
bool cuda_fft(const detail::FftCall& call);
size_t cuda_fft_cached_plans(int device);
/// Stable sort/argsort of the rows of call.in on its device's current stream (sort.cpp).
bool cuda_sort(const detail::SortCall& call);
/// The NVRTC source of the sort kernels (sort_block, sort_merge, sort_gather) for `dtype` (no GPU needed).
std::string sort_source(DType dtype);
/// cumsum/cumprod along axis 1 of call.in on its device's current stream (scan.cpp).
void cuda_scan(const detail::ScanCall& call);
/// The NVRTC source of the scan kernels (scan_columns, scan_totals, scan_segments) from `in` into `out`.
std::string scan_source(detail::ReduceOp op, DType in, DType out);
/// Runs a user ElementwiseKernel / ReductionKernel on call.device's current stream (user_kernels.cpp).
void cuda_user_elementwise(const detail::UserElementwiseCall& call);
void cuda_user_reduction(const detail::UserReductionCall& call);

/// Runs a convolution step / batch normalisation in cuDNN on the operands' device and current stream
/// (cudnn.cpp); false when cuDNN cannot (the core then runs its reference).
bool cuda_convolution(const detail::ConvCall& call);
bool cuda_batch_norm(detail::BatchNormCall& call);
bool cuda_pooling(const detail::PoolCall& call);
/// Runs fused attention in cuDNN (cudnn_attention.cpp); false with call.refusal when cuDNN cannot.
bool cuda_attention(detail::AttentionCall& call);
/// Runs a recurrent network in cuDNN (cudnn_rnn.cpp); false with call.refusal when cuDNN cannot.
bool cuda_rnn(detail::RnnCall& call);
/// This thread's convolution problems on `device` so far (tests, diagnostics): those with a cached plan of
/// cuDNN's backend API, and those the backend API had no plan for (the descriptor API ran them).
struct CudnnPlanCounts {
  int64_t plans = 0, without = 0;
  std::string refusal;  ///< why the last problem without a plan has none
};
CudnnPlanCounts cudnn_plan_counts(int device);
/// Runs every convolution through cuDNN's descriptor API while on; tests
/// compare the two paths.
void cudnn_force_descriptor_api(bool on);
/// kiln's batch-normalisation kernels for channels-last arrays (batch_norm.cpp): training forward and backward,
/// evaluation; false otherwise.
bool cuda_batch_norm_kernels(detail::BatchNormCall& call);
/// Their NVRTC source for channels-last `in` arrays with `stats` statistics (bn_partials, bn_finalize, bn_apply).
std::string batch_norm_source(DType in, DType stats);

/// Cross entropy's rows (cross_entropy.cpp): the forward's loss and log-sum-exp, or the logits' gradient, on the
/// logits' device and current stream; false for what its kernels do not take (the caller runs its fused graph).
bool cuda_cross_entropy(detail::CrossEntropyCall& call);
/// Their NVRTC source for `logits` of that dtype (ce_forward_*, ce_backward_*; no GPU needed).
std::string cross_entropy_source(DType logits);
/// A layer norm's backward in one pass over x and dy (layer_norm.cpp): contiguous float32 rows of at most 2048
/// columns; false otherwise (the core's composed reference runs).
bool cuda_layer_norm_backward(detail::LayerNormBackwardCall& call);
/// Its NVRTC source (ln_backward_rows, ln_backward_finish) for `vector`-float runs, `chunks` runs a lane per row,
/// rows kept in registers between the two phases when `keep`.
std::string layer_norm_source(int vector, int chunks, bool keep);

/// Queues the range check of contiguous int64 `values` (core/device_check.hpp) on their GPU's current stream.
bool cuda_check_range(const Array& values, int64_t lo, int64_t hi, int32_t code);
/// Throws the error a check kernel recorded on `device` (and clears it); call after each synchronisation with
/// the device. One host load when nothing failed.
void raise_device_errors(int device);

}  // namespace kiln::cuda_impl
