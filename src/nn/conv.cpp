// Convolution, pooling and batch normalisation layers: custom autograd functions (AutogradFunction::apply) over the
// primitives of kiln/conv.hpp, which run in cuDNN on a GPU and in kiln's reference (im2col + BLAS) elsewhere.
#include "kiln/conv.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln::nn {

Array conv2d(const Array& x_in, const Array& weight_in, const Array& bias_in, std::pair<int64_t, int64_t> stride,
             std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation, int64_t groups) {
  const Array x = autocast_low(x_in), weight = autocast_low(weight_in), bias = autocast_low(bias_in);
  const ConvParams p{stride, padding, dilation, groups};
  const Shape out_shape = conv2d_output_shape(x.shape(), weight.shape(), p);  // checks the shapes
  const int64_t out_c = out_shape[1];
  if (bias.defined() && !(bias.shape() == Shape{out_c}))
    throw ShapeError("conv2d: the bias must have shape (" + std::to_string(out_c) + ",), got " +
                     shape_str(bias.shape()));
  const AutogradFunction f{"Conv2dBackward",
                           [&](const std::vector<Array>& in, std::vector<Array>& saved) {
                             saved = {in[0], in[1]};
                             Array out = conv2d_forward(in[0], in[1], p);
                             if (in.size() > 2) out += in[2].reshape({1, out_c, 1, 1});
                             return out;
                           },
                           [p](const Array& grad, const std::vector<Array>& saved, const std::vector<bool>& needs) {
                             const Array &xs = saved[0], &w = saved[1];
                             std::vector<Array> grads(needs.size());
                             if (needs[0]) grads[0] = conv2d_backward_input(grad, w, xs.shape(), p);
                             if (needs[1]) grads[1] = conv2d_backward_weight(grad, xs, w.shape(), p);
                             if (needs.size() > 2 && needs[2]) grads[2] = sum(grad, {0, 2, 3});
                             return grads;
                           }};
  return bias.defined() ? f.apply({x, weight, bias}) : f.apply({x, weight});
}

Array max_pool2d(const Array& x, std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride,
                 std::pair<int64_t, int64_t> padding, std::pair<int64_t, int64_t> dilation) {
  const PoolParams p{kernel, stride.value_or(kernel), padding, dilation};
  const AutogradFunction f{"MaxPool2dBackward",
                           [&](const std::vector<Array>& in, std::vector<Array>& saved) {
                             MaxPoolOutput r = max_pool2d_forward(in[0], p);
                             saved = {in[0], r.y, r.indices};  // indices undefined when cuDNN pooled
                             return r.y;
                           },
                           [p](const Array& grad, const std::vector<Array>& saved, const std::vector<bool>&) {
                             return std::vector<Array>{max_pool2d_backward(grad, saved[0], saved[1], saved[2], p)};
                           }};
  return f.apply({x});
}

Array avg_pool2d(const Array& x, std::pair<int64_t, int64_t> kernel, std::optional<std::pair<int64_t, int64_t>> stride,
                 std::pair<int64_t, int64_t> padding) {
  const PoolParams p{kernel, stride.value_or(kernel), padding, {1, 1}};
  const Shape in_shape = x.shape();
  const AutogradFunction f{
      "AvgPool2dBackward",
      [&](const std::vector<Array>& in, std::vector<Array>&) { return avg_pool2d_forward(in[0], p); },
      [p, in_shape](const Array& grad, const std::vector<Array>&, const std::vector<bool>&) {
        return std::vector<Array>{avg_pool2d_backward(grad, in_shape, p)};
      }};
  return f.apply({x});
}

Array adaptive_avg_pool2d(const Array& x, std::pair<int64_t, int64_t> output_size) {
  if (x.ndim() != 4)
    throw ShapeError("adaptive_avg_pool2d: the input must be (N, C, H, W), got shape " + shape_str(x.shape()));
  const auto [oh, ow] = output_size;
  const int64_t h = x.shape(2), w = x.shape(3);
  if (oh <= 0 || ow <= 0)
    throw ValueError("adaptive_avg_pool2d: the output size must be positive, got " + std::to_string(oh) + "x" +
                     std::to_string(ow));
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
  if (h % oh == 0 && w % ow == 0) {  // even windows: one average pooling
    const int64_t kh = h / oh, kw = w / ow;
    return avg_pool2d(x, {kh, kw}, std::pair<int64_t, int64_t>{kh, kw}, {0, 0});
  }
  // Uneven windows, as PyTorch: output (i, j) averages rows floor(i*H/oh) .. ceil((i+1)*H/oh) and the same for
  // columns (windows may overlap by one). One mean per output position, recorded, so the gradient follows.
  std::vector<Array> rows;
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t r0 = i * h / oh, r1 = ((i + 1) * h + oh - 1) / oh;
    std::vector<Array> cols;
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t c0 = j * w / ow, c1 = ((j + 1) * w + ow - 1) / ow;
      cols.push_back(mean(x.slice(2, r0, r1).slice(3, c0, c1), {2, 3}));
    }
    rows.push_back(stack(cols, -1));
  }
  return stack(rows, -2);
}

namespace {

/// batch_norm2d, then ReLU when `relu` (one node: the fused pass where the backend has one).
Array batch_norm_node(const Array& x, Array& running_mean, Array& running_var, const Array& weight, const Array& bias,
                      bool training, double momentum, double eps, bool relu) {
  // Inputs of the function: x, then weight and bias when defined (their gradients at those positions).
  std::vector<Array> inputs{x};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  const bool has_weight = weight.defined(), has_bias = bias.defined();
  bool records = false;  // whether apply records a node (then the backward needs the statistics)
  if (is_grad_enabled())
    for (const Array& a : inputs) records = records || a.requires_grad();
  const AutogradFunction f{
      relu ? (training ? "BatchNormReluBackward" : "BatchNormReluEvalBackward")
           : (training ? "BatchNormBackward" : "BatchNormEvalBackward"),
      [&](const std::vector<Array>& in, std::vector<Array>& saved) {
        const Array w = has_weight ? in[1] : Array();
        const Array b = has_bias ? in[has_weight ? 2 : 1] : Array();
        BatchNormOutput r = batch_norm_forward(in[0], w, b, running_mean, running_var, training, momentum, eps, relu);
        if (!training && records) {  // the running statistics as of this call: training updates them in place
          r.mean = running_mean.copy();
          r.invstd = 1.0 / sqrt(running_var + eps);
        }
        saved = {in[0], w, r.mean, r.invstd};
        if (relu && records) saved.insert(saved.end(), {r.y, r.scale_shift});  // the ReLU's mask
        return r.y;
      },
      [training, eps, has_weight, has_bias, relu](const Array& grad, const std::vector<Array>& saved,
                                                  const std::vector<bool>& needs) {
        const Array &xs = saved[0], &w = saved[1], &m = saved[2], &is = saved[3];
        std::vector<Array> grads(needs.size());
        Array dx, dw, db;
        if (training) {
          BatchNormGrads g = relu ? batch_norm_relu_backward(grad, xs, saved[4], w, m, is, saved[5], eps)
                                  : batch_norm_backward(grad, xs, w, m, is, eps);
          dx = g.input, dw = g.weight, db = g.bias;
        } else {  // y = (x - m) * is * w + b with constant statistics
          const Array g = relu ? relu_backward(saved[4], grad) : grad;
          const int64_t c = xs.shape(1);
          const Shape per{1, c, 1, 1};
          const Array scale = (w.defined() ? is * w.astype(is.dtype()) : is).reshape(per);
          dx = (g.astype(is.dtype()) * scale).astype(xs.dtype());
          if (needs.size() > 1) {
            const Array gf = g.astype(is.dtype());
            db = sum(gf, {0, 2, 3});
            dw = sum(gf * ((xs.astype(is.dtype()) - m.reshape(per)) * is.reshape(per)), {0, 2, 3});
          }
        }
        if (needs[0]) grads[0] = dx;
        size_t next = 1;
        if (has_weight && needs[next++]) grads[1] = dw.astype(w.dtype());
        if (has_bias && needs[next]) grads[next] = db;
        return grads;
      }};
  return f.apply(inputs);
}

}  // namespace

Array batch_norm2d(const Array& x, Array& running_mean, Array& running_var, const Array& weight, const Array& bias,
                   bool training, double momentum, double eps) {
  return batch_norm_node(x, running_mean, running_var, weight, bias, training, momentum, eps, false);
}

Array batch_norm_relu2d(const Array& x, Array& running_mean, Array& running_var, const Array& weight, const Array& bias,
                        bool training, double momentum, double eps) {
  return batch_norm_node(x, running_mean, running_var, weight, bias, training, momentum, eps, true);
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

Array BatchNorm2d::forward(const Array& x) { return run(x, false); }

Array BatchNorm2d::forward_relu(const Array& x) { return run(x, true); }

Array BatchNorm2d::run(const Array& x, bool relu) {
  if (x.ndim() != 4 || x.shape(1) != features_)
    throw ShapeError(name() + ": the input must be (N, " + std::to_string(features_) + ", H, W), got shape " +
                     shape_str(x.shape()));
  Array& rm = buffer("running_mean");
  Array& rv = buffer("running_var");
  if (is_training()) {
    NoGradGuard no_grad;
    buffer("num_batches_tracked") += 1;
  }
  return batch_norm_node(x, rm, rv, affine_ ? parameter("weight") : Array(), affine_ ? parameter("bias") : Array(),
                         is_training(), momentum_, eps_, relu);
}

std::shared_ptr<Conv2d> fuse_conv_bn_eval(Conv2d& conv, BatchNorm2d& bn) {
  if (bn.num_features() != conv.out_channels())
    throw ShapeError("fuse_conv_bn_eval: " + bn.name() + " has " + std::to_string(bn.num_features()) +
                     " features but " + conv.name() + " has " + std::to_string(conv.out_channels()) +
                     " output channels; fold a batch norm into the convolution that feeds it");
  NoGradGuard no_grad;
  Array& w = conv.weight();
  const Device d = w.device();
  const int64_t o = conv.out_channels();
  const Array var = bn.buffer("running_var").astype(float64), mean = bn.buffer("running_mean").astype(float64);
  const Array gamma = bn.affine() ? bn.parameter("weight").astype(float64) : ones({o}, float64, d);
  const Array beta = bn.affine() ? bn.parameter("bias").astype(float64) : zeros({o}, float64, d);
  const Array scale = gamma / sqrt(var + bn.eps());
  const Array bias = conv.options().bias ? conv.parameter("bias").astype(float64) : zeros({o}, float64, d);
  Conv2dOptions options = conv.options();
  options.bias = true;
  // The new layer's initial values are overwritten below: its initialisation must not move the default
  // generator (folding a model would otherwise change every later draw).
  const random::GeneratorState rng = random::get_state();
  auto fused = std::make_shared<Conv2d>(conv.in_channels(), o, conv.kernel_size(), options, w.dtype(), d);
  random::set_state(rng);
  fused->weight().assign((w.astype(float64) * scale.reshape({o, 1, 1, 1})).astype(w.dtype()));
  fused->parameter("bias").assign(((bias - mean) * scale + beta).astype(w.dtype()));
  if (is_channels_last(w)) fused->to_channels_last();
  return fused;
}

std::string BatchNorm2d::name() const {
  return "BatchNorm2d(" + std::to_string(features_) + ", eps=" + std::to_string(eps_) +
         ", momentum=" + std::to_string(momentum_) + ")";
}

}  // namespace kiln::nn
