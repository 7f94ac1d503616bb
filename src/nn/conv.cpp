// Convolution, pooling and batch normalisation over NCHW arrays, on every backend, written with the public API:
// conv2d and the poolings are custom autograd functions (kiln::apply) whose forward gathers each output's input
// window with a strided view (im2col) and, for conv2d, multiplies by the weights (BLAS / cuBLAS), and whose
// backward scatters window gradients back with one strided add per kernel offset (col2im). batch_norm2d is
// composed of recorded ops. The engines issue "Convolutional networks" names (cuDNN, oneDNN) are to replace
// these forwards and backwards for speed; these are the reference they must match.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/autograd.hpp"
#include "kiln/indexing.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"

namespace kiln::nn {

namespace {

struct Geometry {
  int64_t n, c, h, w;  // input
  int64_t kh, kw;      // window
  int64_t sh, sw;      // stride
  int64_t ph, pw;      // padding
  int64_t dh, dw;      // dilation
  int64_t oh, ow;      // output
  int64_t hp() const { return h + 2 * ph; }
  int64_t wp() const { return w + 2 * pw; }
};

Geometry geometry(const Array& x, std::pair<int64_t, int64_t> kernel, std::pair<int64_t, int64_t> stride,
                  std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation, const char* op) {
  if (x.ndim() != 4)
    throw ShapeError(std::string(op) + ": the input must be (N, C, H, W), got shape " + shape_str(x.shape()) +
                     "; add a batch axis with reshape");
  if (kernel.first <= 0 || kernel.second <= 0 || stride.first <= 0 || stride.second <= 0 || dilation.first <= 0 ||
      dilation.second <= 0 || padding.first < 0 || padding.second < 0)
    throw ValueError(std::string(op) + ": kernel, stride and dilation must be positive and padding non-negative");
  Geometry g{x.shape(0),
             x.shape(1),
             x.shape(2),
             x.shape(3),
             kernel.first,
             kernel.second,
             stride.first,
             stride.second,
             padding.first,
             padding.second,
             dilation.first,
             dilation.second,
             0,
             0};
  g.oh = (g.hp() - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.ow = (g.wp() - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  if (g.hp() < g.dh * (g.kh - 1) + 1 || g.wp() < g.dw * (g.kw - 1) + 1)
    throw ShapeError(std::string(op) + ": the padded input " + std::to_string(g.hp()) + "x" + std::to_string(g.wp()) +
                     " is smaller than the dilated kernel " + std::to_string(g.dh * (g.kh - 1) + 1) + "x" +
                     std::to_string(g.dw * (g.kw - 1) + 1));
  return g;
}

/// A pooling's geometry, with PyTorch's rules: a floating input, padding at most half the kernel.
Geometry pool_geometry(const Array& x, std::pair<int64_t, int64_t> kernel, std::pair<int64_t, int64_t> stride,
                       std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation, const char* op) {
  const Geometry g = geometry(x, kernel, stride, padding, dilation, op);
  if (2 * g.ph > g.kh || 2 * g.pw > g.kw)
    throw ValueError(std::string(op) + ": padding must be at most half the kernel (PyTorch's rule), got padding " +
                     std::to_string(g.ph) + "x" + std::to_string(g.pw) + " for a " + std::to_string(g.kh) + "x" +
                     std::to_string(g.kw) + " kernel");
  if (!is_floating(x.dtype()))
    throw DTypeError(std::string(op) + ": the input must be floating, got " + std::string(dtype_name(x.dtype())));
  return g;
}

/// x padded with `fill` (grad mode is off inside a custom function's forward and backward).
Array padded(const Array& x, const Geometry& g, double fill) {
  if (g.ph == 0 && g.pw == 0) return x.contiguous();
  Array out = full({g.n, g.c, g.hp(), g.wp()}, fill, x.dtype(), x.device());
  out.slice(2, g.ph, g.ph + g.h).slice(3, g.pw, g.pw + g.w).assign(x);
  return out;
}

/// The (N, C, KH, KW, OH, OW) view of every output's window in a padded, contiguous input.
Array windows(const Array& xp, const Geometry& g) {
  const Shape& s = xp.strides();
  return as_strided(xp, {g.n, g.c, g.kh, g.kw, g.oh, g.ow},
                    {s[0], s[1], s[2] * g.dh, s[3] * g.dw, s[2] * g.sh, s[3] * g.sw}, xp.offset());
}

/// col2im: the gradient of the input from the gradient of its windows (N, C, KH, KW, OH, OW), cropped.
Array from_windows(const Array& dwin, const Geometry& g) {
  Array dxp = zeros({g.n, g.c, g.hp(), g.wp()}, dwin.dtype(), dwin.device());
  const Shape s = dxp.strides();
  for (int64_t i = 0; i < g.kh; ++i)
    for (int64_t j = 0; j < g.kw; ++j) {
      Array target = as_strided(dxp, {g.n, g.c, g.oh, g.ow}, {s[0], s[1], s[2] * g.sh, s[3] * g.sw},
                                dxp.offset() + i * g.dh * s[2] + j * g.dw * s[3]);
      target += dwin.index({Slice(), Slice(), i, j});
    }
  return dxp.slice(2, g.ph, g.ph + g.h).slice(3, g.pw, g.pw + g.w);
}

}  // namespace

Array conv2d(const Array& x, const Array& weight, const Array& bias, std::pair<int64_t, int64_t> stride,
             std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation, int64_t groups) {
  if (weight.ndim() != 4)
    throw ShapeError("conv2d: the weight must be (out_channels, in_channels / groups, KH, KW), got shape " +
                     shape_str(weight.shape()));
  const Geometry g = geometry(x, {weight.shape(2), weight.shape(3)}, stride, padding, dilation, "conv2d");
  const int64_t out_c = weight.shape(0);
  if (groups <= 0 || g.c % groups != 0 || out_c % groups != 0 || weight.shape(1) * groups != g.c)
    throw ShapeError("conv2d: " + std::to_string(g.c) + " input channels, a weight of shape " +
                     shape_str(weight.shape()) + " and groups " + std::to_string(groups) +
                     " do not fit: in_channels and out_channels must divide by groups and the weight's second axis "
                     "must be in_channels / groups");
  if (bias.defined() && !(bias.shape() == Shape{out_c}))
    throw ShapeError("conv2d: the bias must have shape (" + std::to_string(out_c) + ",), got " +
                     shape_str(bias.shape()));
  const int64_t ckk = g.c / groups * g.kh * g.kw, l = g.oh * g.ow;
  // cols: (N, G, C/G * KH * KW, OH * OW); weights: (G, O/G, C/G * KH * KW)
  auto cols_of = [g, groups, ckk, l](const Array& x_in) {
    return windows(padded(x_in, g, 0.0), g).reshape({g.n, groups, ckk, l});
  };
  const AutogradFunction f{
      "Conv2dBackward",
      [&](const std::vector<Array>& in, std::vector<Array>& saved) {
        saved = {in[0], in[1]};
        Array out =
            matmul(in[1].reshape({groups, out_c / groups, ckk}), cols_of(in[0])).reshape({g.n, out_c, g.oh, g.ow});
        if (in.size() > 2) out = out + in[2].reshape({1, out_c, 1, 1});
        return out;
      },
      [g, groups, ckk, l, out_c, cols_of](const Array& grad, const std::vector<Array>& saved,
                                          const std::vector<bool>& needs) {
        const Array &xs = saved[0], &w = saved[1];
        const Array g4 = grad.reshape({g.n, groups, out_c / groups, l});
        std::vector<Array> grads(needs.size());
        if (needs[1]) grads[1] = sum(matmul(g4, swapaxes(cols_of(xs), -1, -2)), 0).reshape(w.shape());
        if (needs[0]) {
          const Array dcols = matmul(swapaxes(w.reshape({groups, out_c / groups, ckk}), -1, -2), g4);
          grads[0] = from_windows(dcols.reshape({g.n, g.c, g.kh, g.kw, g.oh, g.ow}), g);
        }
        if (needs.size() > 2 && needs[2]) grads[2] = sum(grad, {0, 2, 3});
        return grads;
      }};
  return bias.defined() ? apply(f, {x, weight, bias}) : apply(f, {x, weight});
}

Array max_pool2d(const Array& x, std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride,
                 std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation) {
  const Geometry g = pool_geometry(x, kernel, stride.value_or(kernel), padding, dilation, "max_pool2d");
  const int64_t k = g.kh * g.kw;
  const AutogradFunction f{
      "MaxPool2dBackward",
      [&](const std::vector<Array>& in, std::vector<Array>& saved) {
        const Array win =
            windows(padded(in[0], g, -std::numeric_limits<double>::infinity()), g).reshape({g.n, g.c, k, g.oh, g.ow});
        const Array where_max = argmax(win, 2, true);  // the first maximum of each window, as PyTorch
        saved = {where_max};
        return take_along_axis(win, where_max, 2).reshape({g.n, g.c, g.oh, g.ow});
      },
      [g, k](const Array& grad, const std::vector<Array>& saved, const std::vector<bool>&) {
        const Array dwin = scatter_add(zeros({g.n, g.c, k, g.oh, g.ow}, grad.dtype(), grad.device()), 2, saved[0],
                                       grad.reshape({g.n, g.c, 1, g.oh, g.ow}));
        return std::vector<Array>{from_windows(dwin.reshape({g.n, g.c, g.kh, g.kw, g.oh, g.ow}), g)};
      }};
  return apply(f, {x});
}

Array avg_pool2d(const Array& x, std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride,
                 std::pair<int64_t, int64_t> padding) {
  const Geometry g = pool_geometry(x, kernel, stride.value_or(kernel), padding, {1, 1}, "avg_pool2d");
  const double scale = 1.0 / static_cast<double>(g.kh * g.kw);  // padding counts (count_include_pad)
  const AutogradFunction f{
      "AvgPool2dBackward",
      [&](const std::vector<Array>& in, std::vector<Array>&) {
        return windows(padded(in[0], g, 0.0), g).reshape({g.n, g.c, g.kh * g.kw, g.oh, g.ow}).mean(2);
      },
      [g, scale](const Array& grad, const std::vector<Array>&, const std::vector<bool>&) {
        const Array dwin =
            broadcast_to((grad * scale).reshape({g.n, g.c, 1, 1, g.oh, g.ow}), {g.n, g.c, g.kh, g.kw, g.oh, g.ow});
        return std::vector<Array>{from_windows(dwin, g)};
      }};
  return apply(f, {x});
}

Array adaptive_avg_pool2d(const Array& x, std::pair<int64_t, int64_t> output_size) {
  if (x.ndim() != 4)
    throw ShapeError("adaptive_avg_pool2d: the input must be (N, C, H, W), got shape " + shape_str(x.shape()));
  const auto [oh, ow] = output_size;
  if (oh <= 0 || ow <= 0 || x.shape(2) % oh != 0 || x.shape(3) % ow != 0)
    throw ValueError("adaptive_avg_pool2d: output size " + std::to_string(oh) + "x" + std::to_string(ow) +
                     " must divide the input's " + std::to_string(x.shape(2)) + "x" + std::to_string(x.shape(3)) +
                     " (uneven windows are not implemented yet)");
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
  const int64_t kh = x.shape(2) / oh, kw = x.shape(3) / ow;
  return avg_pool2d(x, {kh, kw}, std::pair<int64_t, int64_t>{kh, kw}, {0, 0});
}

Array batch_norm2d(const Array& x, Array& running_mean, Array& running_var, const Array& weight, const Array& bias,
                   bool training, double momentum, double eps) {
  if (x.ndim() != 4)
    throw ShapeError("batch_norm2d: the input must be (N, C, H, W), got shape " + shape_str(x.shape()));
  const int64_t c = x.shape(1);
  const Shape per_channel{1, c, 1, 1};
  Array mean_c, var_c;
  if (training) {
    const int64_t count = x.shape(0) * x.shape(2) * x.shape(3);
    if (count <= 1)
      throw ValueError("batch_norm2d: training needs more than one value per channel, got input shape " +
                       shape_str(x.shape()));
    mean_c = mean(x, {0, 2, 3}, true);
    var_c = mean(square(x - mean_c), {0, 2, 3}, true);  // biased, for normalising (as PyTorch)
    if (running_mean.defined()) {
      NoGradGuard no_grad;
      const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
      running_mean.assign(running_mean * (1.0 - momentum) + mean_c.detach().reshape({c}) * momentum);
      running_var.assign(running_var * (1.0 - momentum) + var_c.detach().reshape({c}) * (momentum * unbias));
    }
  } else {
    if (!running_mean.defined())
      throw ValueError("batch_norm2d: evaluation needs running statistics (track_running_stats)");
    mean_c = running_mean.reshape(per_channel);
    var_c = running_var.reshape(per_channel);
  }
  Array y = (x - mean_c) / sqrt(var_c + eps);
  if (weight.defined()) y = y * weight.reshape(per_channel);
  if (bias.defined()) y = y + bias.reshape(per_channel);
  return y;
}

// ---------------------------------------------------------------- modules
Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::pair<int64_t, int64_t> kernel_size,
               Conv2dOptions options, DType dtype, std::optional<Device> device)
    : in_(in_channels), out_(out_channels), kernel_(kernel_size), options_(options) {
  if (in_channels <= 0 || out_channels <= 0 || kernel_size.first <= 0 || kernel_size.second <= 0 ||
      options.groups <= 0 || in_channels % options.groups != 0 || out_channels % options.groups != 0)
    throw ValueError("Conv2d: channels and kernel must be positive and the channels divisible by groups, got " +
                     std::to_string(in_channels) + " -> " + std::to_string(out_channels) + ", groups " +
                     std::to_string(options.groups));
  Array& w = register_parameter(
      "weight",
      empty({out_channels, in_channels / options.groups, kernel_size.first, kernel_size.second}, dtype, device));
  init::kaiming_uniform(w, std::sqrt(5.0));  // PyTorch's default
  if (options.bias) {
    const double bound =
        1.0 / std::sqrt(static_cast<double>(in_channels / options.groups * kernel_size.first * kernel_size.second));
    init::uniform(register_parameter("bias", empty({out_channels}, dtype, device)), -bound, bound);
  }
}

Array Conv2d::forward(const Array& x) {
  return conv2d(x, parameter("weight"), options_.bias ? parameter("bias") : Array(), options_.stride, options_.padding,
                options_.dilation, options_.groups);
}

std::string Conv2d::name() const {
  return "Conv2d(" + std::to_string(in_) + ", " + std::to_string(out_) + ", kernel_size=(" +
         std::to_string(kernel_.first) + ", " + std::to_string(kernel_.second) + "), stride=(" +
         std::to_string(options_.stride.first) + ", " + std::to_string(options_.stride.second) + "), padding=(" +
         std::to_string(options_.padding.first) + ", " + std::to_string(options_.padding.second) +
         "), groups=" + std::to_string(options_.groups) + ")";
}

MaxPool2d::MaxPool2d(std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride,
                     std::pair<int64_t, int64_t> padding)
    : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
Array MaxPool2d::forward(const Array& x) { return max_pool2d(x, kernel_, stride_, padding_); }
std::string MaxPool2d::name() const {
  return "MaxPool2d(kernel_size=" + std::to_string(kernel_.first) + ", stride=" + std::to_string(stride_.first) + ")";
}

AvgPool2d::AvgPool2d(std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride,
                     std::pair<int64_t, int64_t> padding)
    : kernel_(kernel), stride_(stride.value_or(kernel)), padding_(padding) {}
Array AvgPool2d::forward(const Array& x) { return avg_pool2d(x, kernel_, stride_, padding_); }
std::string AvgPool2d::name() const {
  return "AvgPool2d(kernel_size=" + std::to_string(kernel_.first) + ", stride=" + std::to_string(stride_.first) + ")";
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(std::pair<int64_t, int64_t> output_size) : size_(output_size) {}
Array AdaptiveAvgPool2d::forward(const Array& x) { return adaptive_avg_pool2d(x, size_); }
std::string AdaptiveAvgPool2d::name() const {
  return "AdaptiveAvgPool2d(" + std::to_string(size_.first) + ", " + std::to_string(size_.second) + ")";
}

BatchNorm2d::BatchNorm2d(int64_t num_features, double eps, double momentum, bool affine, DType dtype,
                         std::optional<Device> device)
    : features_(num_features), eps_(eps), momentum_(momentum), affine_(affine) {
  if (num_features <= 0) throw ValueError("BatchNorm2d: num_features must be positive");
  if (affine) {
    register_parameter("weight", ones({num_features}, dtype, device));
    register_parameter("bias", zeros({num_features}, dtype, device));
  }
  register_buffer("running_mean", zeros({num_features}, dtype, device));
  register_buffer("running_var", ones({num_features}, dtype, device));
  register_buffer("num_batches_tracked", zeros({}, int64, device));
}

Array BatchNorm2d::forward(const Array& x) {
  if (x.ndim() != 4 || x.shape(1) != features_)
    throw ShapeError(name() + ": the input must be (N, " + std::to_string(features_) + ", H, W), got shape " +
                     shape_str(x.shape()));
  Array& rm = buffer("running_mean");
  Array& rv = buffer("running_var");
  if (is_training()) {
    NoGradGuard no_grad;
    buffer("num_batches_tracked") += 1;
  }
  return batch_norm2d(x, rm, rv, affine_ ? parameter("weight") : Array(), affine_ ? parameter("bias") : Array(),
                      is_training(), momentum_, eps_);
}

std::string BatchNorm2d::name() const {
  return "BatchNorm2d(" + std::to_string(features_) + ", eps=" + std::to_string(eps_) +
         ", momentum=" + std::to_string(momentum_) + ")";
}

}  // namespace kiln::nn
