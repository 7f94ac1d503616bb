// torchvision's ResNet family from kiln::nn layers (include/kiln/models.hpp), with its parameter names.
#include "kiln/models.hpp"

#include <string>
#include <utility>

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
    Array y = x;
    for (size_t i = 0; i < convs_.size(); ++i) {
      y = (*bns_[i])((*convs_[i])(y));
      if (i + 1 < convs_.size()) y = relu(y);
    }
    return relu(y + (downsample_ ? (*downsample_)(x) : x));
  }
  std::string name() const override { return bottleneck_ ? "Bottleneck" : "BasicBlock"; }

 private:
  bool bottleneck_;
  std::vector<std::shared_ptr<nn::Conv2d>> convs_;
  std::vector<std::shared_ptr<nn::BatchNorm2d>> bns_;
  std::shared_ptr<nn::Sequential> downsample_;
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
  for (auto& m : stem_) y = (*m)(y);
  for (auto& m : stages_) y = (*m)(y);
  for (auto& m : head_) y = (*m)(y);
  return y;
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
