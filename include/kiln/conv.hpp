// Convolution and batch normalisation primitives over (N, C, H, W) arrays, as ATen's convolution / convolution_backward
// and native_batch_norm / native_batch_norm_backward: the engines under nn::conv2d and nn::batch_norm2d, and
// layer_norm_backward (over rows, under nn::LayerNorm). On a GPU they run in cuDNN (float32, float64, float16,
// bfloat16; channels-last batch norm and layer_norm_backward in kiln's own kernels); on the CPU float32 forward
// convolutions run in oneDNN where the build found it and pooling in direct loops; everything else in kiln's reference
// implementation (im2col through a strided view and one matrix product; batch statistics with kiln's reductions), which
// every backend can run. They record no gradient (nn's functions do): an input that requires grad while grad mode is on
// is refused.
//
// Layouts: an array is NCHW-contiguous, or channels-last (its shape stays (N, C, H, W); its memory is
// (N, H, W, C), as torch.channels_last). A convolution's result is channels-last when its input or weight
// is; the other operands are laid out to match (one copy each when they are not).
#pragma once

#include <cstdint>
#include <utility>

#include "kiln/array.hpp"

namespace kiln {

/// Geometry of a 2-d convolution; pairs are (height, width).
struct ConvParams {
  std::pair<int64_t, int64_t> stride{1, 1};
  std::pair<int64_t, int64_t> padding{0, 0};
  std::pair<int64_t, int64_t> dilation{1, 1};
  int64_t groups = 1;
};

/// The output shape of x (N, C, H, W) convolved with weight (O, C / groups, KH, KW). Throws ShapeError when they
/// do not fit (naming both shapes and the fix), ValueError for non-positive sizes.
Shape conv2d_output_shape(const Shape& input, const Shape& weight, const ConvParams& params);

/// y (N, O, OH, OW) = x convolved with weight (cross-correlation, as torch.nn.functional.conv2d, no bias).
/// Operands of one floating dtype and one device.
Array conv2d_forward(const Array& x, const Array& weight, const ConvParams& params = {});
/// The gradient of conv2d_forward's input of shape `input_shape`, from the output's gradient.
Array conv2d_backward_input(const Array& grad_out, const Array& weight, const Shape& input_shape,
                            const ConvParams& params = {});
/// The gradient of conv2d_forward's weight of shape `weight_shape`, from the output's gradient and the input.
Array conv2d_backward_weight(const Array& grad_out, const Array& x, const Shape& weight_shape,
                             const ConvParams& params = {});

/// batch_norm_forward's results: y (x's shape, dtype and layout), and per channel (C,) the batch mean and
/// 1 / sqrt(biased variance + eps) (float32 for float16/bfloat16 inputs; undefined in evaluation).
struct BatchNormOutput {
  Array y, mean, invstd;
  /// With relu in training, when the backend fused it (kiln's GPU kernels): the per-channel (scale, shift)
  /// (2C,) the normalisation used, for batch_norm_relu_backward's mask; undefined otherwise.
  Array scale_shift;
};
/// Normalises each channel of x (N, C, H, W): training uses the batch's statistics and, when running_mean and
/// running_var are defined, updates them in place (running = (1 - momentum) running + momentum batch, the
/// variance unbiased); evaluation uses the running ones. Then * weight + bias (each (C,), or undefined: 1 and 0).
/// weight, bias and the running statistics are float32 for a float16/bfloat16 x (torch.autocast's rule), else
/// x's dtype. relu: y = max(batch norm, 0), in one pass where the backend can (kiln's GPU kernels, the CPU's
/// evaluation), equal to relu() of the plain result.
BatchNormOutput batch_norm_forward(const Array& x, const Array& weight, const Array& bias, const Array& running_mean,
                                   const Array& running_var, bool training, double momentum, double eps,
                                   bool relu = false);
/// The gradients of a training batch_norm_forward (x, weight; mean and invstd are its saved statistics):
/// input (x's shape and layout), weight and bias (C,) (float32 for float16/bfloat16 inputs).
struct BatchNormGrads {
  Array input, weight, bias;
};
BatchNormGrads batch_norm_backward(const Array& grad_y, const Array& x, const Array& weight, const Array& mean,
                                   const Array& invstd, double eps);
/// relu's gradient from its result: grad where out > 0, else 0 (one fused kernel on a GPU; the comparison and a
/// where as separate ops are two passes and a bool temporary).
Array relu_backward(const Array& out, const Array& grad);
/// The gradients of a training batch_norm_forward(..., relu = true) whose result is y, from y's gradient: the
/// ReLU's mask (where y > 0) and the batch norm's backward in one pass where scale_shift (the forward's) is defined
/// and the backend masks (kiln's GPU kernels, which recompute the mask from x); else relu_backward, then
/// batch_norm_backward. Equal to those two either way.
BatchNormGrads batch_norm_relu_backward(const Array& grad_y, const Array& x, const Array& y, const Array& weight,
                                        const Array& mean, const Array& invstd, const Array& scale_shift, double eps);

/// Which gradients layer_norm_backward computes (the others come back undefined).
struct LayerNormWanted {
  bool input = true, weight = true, bias = true;
};
/// layer_norm_backward's results: input (M, D), weight and bias (D,).
struct LayerNormGrads {
  Array input, weight, bias;
};
/// The gradients of a layer norm over the rows of x (M, D), y = (x - mean) * rstd * weight + bias, from y's
/// gradient grad_y (M, D), the weight (D,) (undefined: 1, and then no weight or bias gradient) and the forward's
/// per-row mean and rstd = 1 / sqrt(var + eps) (M, 1): the engine under nn::LayerNorm's backward. On a GPU,
/// contiguous float32 rows of up to 2048 columns take one pass over x and grad_y (dx per row, the weight's and
/// bias's column sums from per-block partial sums added in a fixed order: the same bits on every run); otherwise
/// a fused rows kernel gives the input's gradient and a column reduction each the weight's and the bias's.
LayerNormGrads layer_norm_backward(const Array& grad_y, const Array& x, const Array& weight, const Array& mean,
                                   const Array& rstd, LayerNormWanted wanted = {});

/// Geometry of a 2-d pooling window (stride defaults to the kernel in nn's functions).
struct PoolParams {
  std::pair<int64_t, int64_t> kernel{1, 1};
  std::pair<int64_t, int64_t> stride{1, 1};
  std::pair<int64_t, int64_t> padding{0, 0};
  std::pair<int64_t, int64_t> dilation{1, 1};
};
/// max_pool2d_forward's results: the maximum of each window (padding counts as -inf), and where it lies in its
/// window (int64, row-major over the KH x KW window; the first maximum, as PyTorch) when kiln's reference
/// computed it (undefined when cuDNN did: its backward reads x and y instead).
struct MaxPoolOutput {
  Array y, indices;
};
/// Pooling of a floating x (N, C, H, W); padding at most half the kernel (PyTorch's rule; ValueError otherwise).
/// The result is channels-last when x is.
MaxPoolOutput max_pool2d_forward(const Array& x, const PoolParams& params);
/// The input's gradient from the output's, given the forward's input x, output y and indices (may be undefined).
/// Where windows tie, cuDNN may route the gradient to another of the tied maxima than the reference does.
Array max_pool2d_backward(const Array& grad_out, const Array& x, const Array& y, const Array& indices,
                          const PoolParams& params);
/// The mean of each window, padding counted as zeros (count_include_pad), and its gradient.
Array avg_pool2d_forward(const Array& x, const PoolParams& params);
Array avg_pool2d_backward(const Array& grad_out, const Shape& input_shape, const PoolParams& params);

/// Whether a 4-d array is laid out channels-last: (N, H, W, C) in memory, C innermost.
bool is_channels_last(const Array& x);
/// x with its shape kept and its memory in (N, H, W, C) order (x itself when it already is), as
/// x.to(memory_format=torch.channels_last). Throws ShapeError for a non-4-d array.
Array to_channels_last(const Array& x);

/// cuDNN settings (no effect where no GPU runs the op), as torch.backends.cudnn.
namespace cudnn {
/// benchmark: time every algorithm cuDNN offers once per shape, dtype and layout, and keep the fastest
/// (torch.backends.cudnn.benchmark); off: cuDNN's heuristics choose. Process-wide; off by default.
void set_benchmark(bool on);
bool benchmark();
/// Whether float32 convolutions may use TF32 tensor cores (torch.backends.cudnn.allow_tf32; on by default,
/// as PyTorch). Separate from kiln::cuda::set_allow_tf32, which governs matrix products.
void set_allow_tf32(bool allow);
bool allow_tf32();
}  // namespace cudnn

}  // namespace kiln
