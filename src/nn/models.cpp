// torchvision's ResNet family from kiln::nn layers (include/kiln/models.hpp), with its parameter names.
#include "kiln/models.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "kiln/autograd.hpp"
#include "kiln/conv.hpp"
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"

namespace kiln::models {
namespace {

using P = std::pair<int64_t, int64_t>;

struct Builder {
  DType dtype;
  std::optional<Device> device;

  std::shared_ptr<nn::Conv2d> conv(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad) const {
    auto c = std::make_shared<nn::Conv2d>(
        in, out, P{k, k}, nn::Conv2dOptions{.stride = {stride, stride}, .padding = {pad, pad}, .bias = false}, dtype,
        device);
    nn::init::kaiming_normal(c->weight(), 0.0, /*fan_in=*/false);  // torchvision: mode="fan_out", relu
    return c;
  }
  std::shared_ptr<nn::BatchNorm2d> bn(int64_t c) const {
    return std::make_shared<nn::BatchNorm2d>(c, 1e-5, 0.1, true, dtype, device);
  }
};

// The folded model's epilogue (ResNet::fold_batch_norm): one elementwise pass over a convolution's output v, in
// place: + its bias per channel, + the residual (and a downsample's bias), then the ReLU, summed in float32 (the
// bias's dtype) and rounded once to v's dtype, as cuDNN's fused epilogues.
Array conv_epilogue(Array v, const Array& bias, const Array& residual = {}, const Array& residual_bias = {}) {
  static auto bias_relu = fuse([](auto y, auto b) { return maximum(y + b, 0.0f).astype(y.dtype()); }, "conv_bias_relu");
  static auto bias_add_relu =
      fuse([](auto y, auto b, auto r) { return maximum(y + b + r, 0.0f).astype(y.dtype()); }, "conv_bias_add_relu");
  static auto bias_down_relu =
      fuse([](auto y, auto b, auto r, auto rb) { return maximum(y + b + (r + rb), 0.0f).astype(y.dtype()); },
           "conv_bias_down_relu");
  auto channels = [](const Array& b) { return b.reshape({b.size(), 1, 1}); };
  if (residual_bias.defined())
    bias_down_relu.out({v}, v, channels(bias), residual, channels(residual_bias));
  else if (residual.defined())
    bias_add_relu.out({v}, v, channels(bias), residual);
  else
    bias_relu.out({v}, v, channels(bias));
  return v;
}

/// conv(x) of a folded convolution without its bias (nn::conv2d: autocast applies); the bias goes to the epilogue.
Array conv_without_bias(nn::Conv2d& conv, const Array& x) {
  const nn::Conv2dOptions& o = conv.options();
  return nn::conv2d(x, conv.weight(), Array(), o.stride, o.padding, o.dilation, o.groups);
}

[[noreturn]] void folded_in_training(const std::string& who) {
  throw ValueError(who +
                   ": fold_batch_norm() made this model inference-only (its batch norms are folded into "
                   "the convolutions); call eval(), or train a model that was not folded");
}

/// relu(a + b), the end of a residual block, in one pass (an add and a ReLU are five passes over the block's
/// widest activation, this three) and, when a gradient is recorded, one node whose backward is relu's gradient
/// for both inputs. Equal to relu(a + b).
Array add_relu(const Array& a, const Array& b) {
  static const auto kernel = fuse([](auto p, auto q) { return relu(p + q); }, "residual_add_relu");
  const AutogradFunction f{"AddReluBackward",
                           [](const std::vector<Array>& in, std::vector<Array>& saved) {
                             const Array out = kernel(in[0], in[1]);
                             saved = {out};
                             return out;
                           },
                           [](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
                             const Array masked = relu_backward(saved[0], g);
                             return std::vector<Array>{masked, masked};
                           }};
  return f.apply({a, b});
}

/// A residual block: BasicBlock (two 3x3) or Bottleneck (1x1, 3x3 with the stride, 1x1 to 4x width).
class Block : public nn::Module {
 public:
  Block(const Builder& b, int64_t in, int64_t width, int64_t stride, bool bottleneck) : bottleneck_(bottleneck) {
    const int64_t out = bottleneck ? width * 4 : width;
    if (bottleneck) {
      convs_ = {register_module("conv1", b.conv(in, width, 1, 1, 0))};
      bns_ = {register_module("bn1", b.bn(width))};
      convs_.push_back(register_module("conv2", b.conv(width, width, 3, stride, 1)));
      bns_.push_back(register_module("bn2", b.bn(width)));
      convs_.push_back(register_module("conv3", b.conv(width, out, 1, 1, 0)));
      bns_.push_back(register_module("bn3", b.bn(out)));
    } else {
      convs_ = {register_module("conv1", b.conv(in, width, 3, stride, 1))};
      bns_ = {register_module("bn1", b.bn(width))};
      convs_.push_back(register_module("conv2", b.conv(width, width, 3, 1, 1)));
      bns_.push_back(register_module("bn2", b.bn(width)));
    }
    register_module("relu", std::make_shared<nn::ReLU>());
    if (stride != 1 || in != out) {
      auto down = std::make_shared<nn::Sequential>();
      down->push_back(b.conv(in, out, 1, stride, 0));
      down->push_back(b.bn(out));
      downsample_ = register_module("downsample", down);
    }
  }
  Array forward(const Array& x) override {
    if (folded_) return folded_forward(x);
    Array y = x;
    for (size_t i = 0; i < convs_.size(); ++i) {
      y = (*convs_[i])(y);
      y = i + 1 < convs_.size() ? bns_[i]->forward_relu(y) : (*bns_[i])(y);
    }
    return add_relu(y, downsample_ ? (*downsample_)(x) : x);
  }
  std::string name() const override { return bottleneck_ ? "Bottleneck" : "BasicBlock"; }

  /// ResNet::fold_batch_norm's work on this block: each convN/bnN pair becomes one convN with a bias, and
  /// downsample's pair one convolution whose bias joins the last convolution's epilogue.
  void fold() {
    for (size_t i = 0; i < convs_.size(); ++i) {
      const std::string n = std::to_string(i + 1);
      auto fused = nn::fuse_conv_bn_eval(*convs_[i], *bns_[i]);
      replace_module("conv" + n, fused);
      replace_module("bn" + n, nullptr);
      convs_[i] = fused;
    }
    bns_.clear();
    if (downsample_) {
      auto conv = std::dynamic_pointer_cast<nn::Conv2d>(downsample_->named_children().at(0).second);
      auto bn = std::dynamic_pointer_cast<nn::BatchNorm2d>(downsample_->named_children().at(1).second);
      down_ = nn::fuse_conv_bn_eval(*conv, *bn);
      auto down = std::make_shared<nn::Sequential>();
      down->push_back(down_);
      down->train(false);
      replace_module("downsample", down);
      downsample_ = down;
    }
    folded_ = true;
  }

 private:
  Array folded_forward(const Array& x) {
    if (is_training()) folded_in_training(name());
    Array y = x;
    for (size_t i = 0; i < convs_.size(); ++i) {
      Array v = conv_without_bias(*convs_[i], y);
      const Array& b = convs_[i]->parameter("bias");
      if (i + 1 < convs_.size()) {
        y = conv_epilogue(v, b);
      } else if (down_) {  // the residual: the downsample's convolution, its bias in this epilogue
        y = conv_epilogue(v, b, conv_without_bias(*down_, x), down_->parameter("bias"));
      } else {
        y = conv_epilogue(v, b, x);
      }
    }
    return y;
  }

  bool bottleneck_;
  bool folded_ = false;
  std::vector<std::shared_ptr<nn::Conv2d>> convs_;
  std::vector<std::shared_ptr<nn::BatchNorm2d>> bns_;
  std::shared_ptr<nn::Sequential> downsample_;
  std::shared_ptr<nn::Conv2d> down_;  // the folded downsample convolution
};

}  // namespace

ResNet::ResNet(std::vector<int64_t> blocks, bool bottleneck, int64_t num_classes, DType dtype,
               std::optional<Device> device)
    : blocks_(std::move(blocks)), bottleneck_(bottleneck) {
  if (blocks_.size() != 4)
    throw ValueError("ResNet: blocks must list 4 stages (e.g. {3, 4, 6, 3}), got " + std::to_string(blocks_.size()));
  for (int64_t n : blocks_)
    if (n <= 0) throw ValueError("ResNet: every stage needs at least one block");
  if (num_classes <= 0) throw ValueError("ResNet: num_classes must be positive");
  const Builder b{dtype, device};
  stem_ = {register_module("conv1", b.conv(3, 64, 7, 2, 3)), register_module("bn1", b.bn(64)),
           register_module("relu", std::make_shared<nn::ReLU>()),
           register_module("maxpool", std::make_shared<nn::MaxPool2d>(P{3, 3}, P{2, 2}, P{1, 1}))};
  int64_t in = 64;
  const int64_t expansion = bottleneck ? 4 : 1;
  for (size_t s = 0; s < 4; ++s) {
    const int64_t width = int64_t{64} << s;
    auto stage = std::make_shared<nn::Sequential>();
    for (int64_t i = 0; i < blocks_[s]; ++i) {
      stage->push_back(std::make_shared<Block>(b, in, width, i == 0 && s > 0 ? 2 : 1, bottleneck));
      in = width * expansion;
    }
    stages_.push_back(register_module("layer" + std::to_string(s + 1), stage));
  }
  head_ = {register_module("avgpool", std::make_shared<nn::AdaptiveAvgPool2d>(P{1, 1})),
           register_module("flatten", std::make_shared<nn::Flatten>()),
           register_module("fc", std::make_shared<nn::Linear>(in, num_classes, true, dtype, device))};
}

Array ResNet::forward(const Array& x) {
  if (x.ndim() != 4 || x.shape(1) != 3)
    throw ShapeError(name() + ": the input must be (N, 3, H, W) images, got shape " + shape_str(x.shape()));
  Array y = x;
  std::optional<NoGradGuard> no_grad;
  if (folded_) {
    if (is_training()) folded_in_training(name());
    no_grad.emplace();  // an inference-only model records nothing (its epilogues write in place)
    // stem_ is the folded conv1 (bn1 and relu in its epilogue), then maxpool
    auto& conv = static_cast<nn::Conv2d&>(*stem_[0]);
    y = conv_epilogue(conv_without_bias(conv, y), conv.parameter("bias"));
    for (size_t i = 1; i < stem_.size(); ++i) y = (*stem_[i])(y);
  } else {  // conv1, bn1 and relu in one (batch_norm_relu2d), maxpool
    y = static_cast<nn::BatchNorm2d&>(*stem_[1]).forward_relu((*stem_[0])(y));
    y = (*stem_[3])(y);
  }
  for (auto& m : stages_) y = (*m)(y);
  for (auto& m : head_) y = (*m)(y);
  return y;
}

ResNet& ResNet::fold_batch_norm() {
  if (folded_) return *this;
  if (is_training())
    throw ValueError(name() +
                     ": fold_batch_norm() folds the running statistics, which only evaluation uses; call "
                     "eval() first");
  auto conv = std::static_pointer_cast<nn::Conv2d>(stem_[0]);
  auto bn = std::static_pointer_cast<nn::BatchNorm2d>(stem_[1]);
  NoGradGuard no_grad;
  auto fused = nn::fuse_conv_bn_eval(*conv, *bn);
  replace_module("conv1", fused);
  replace_module("bn1", nullptr);
  replace_module("relu", nullptr);
  stem_ = {fused, stem_[3]};  // conv1 (bias and ReLU in its epilogue), maxpool
  for (auto& stage : stages_)
    for (auto& [name, block] : stage->named_children()) std::static_pointer_cast<Block>(block)->fold();
  train(false);
  folded_ = true;
  return *this;
}

std::string ResNet::name() const {
  int64_t layers = 2;  // conv1 and fc
  for (int64_t n : blocks_) layers += n * (bottleneck_ ? 3 : 2);
  return "ResNet" + std::to_string(layers);
}

std::shared_ptr<ResNet> resnet18(int64_t c, DType t, std::optional<Device> d) {
  return std::make_shared<ResNet>(std::vector<int64_t>{2, 2, 2, 2}, false, c, t, d);
}
std::shared_ptr<ResNet> resnet34(int64_t c, DType t, std::optional<Device> d) {
  return std::make_shared<ResNet>(std::vector<int64_t>{3, 4, 6, 3}, false, c, t, d);
}
std::shared_ptr<ResNet> resnet50(int64_t c, DType t, std::optional<Device> d) {
  return std::make_shared<ResNet>(std::vector<int64_t>{3, 4, 6, 3}, true, c, t, d);
}
std::shared_ptr<ResNet> resnet101(int64_t c, DType t, std::optional<Device> d) {
  return std::make_shared<ResNet>(std::vector<int64_t>{3, 4, 23, 3}, true, c, t, d);
}

}  // namespace kiln::models
