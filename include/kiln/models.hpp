// Reference models, built from kiln::nn layers with torchvision's layout and parameter names, so a torchvision
// state_dict saved as safetensors (as scripts/resnet-reference.py saves one) loads with load_state_dict directly.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kiln/nn.hpp"

namespace kiln::models {

/// torchvision.models.ResNet: conv1 (7x7, stride 2) bn1 relu maxpool, layer1..layer4 of residual blocks, avgpool,
/// fc. BasicBlock (resnet18/34): two 3x3 convolutions; Bottleneck (resnet50/101): 1x1, 3x3 (carrying the
/// stride, as torchvision's v1.5), 1x1 to 4x the width. A block whose shape changes adds downsample
/// (1x1 convolution + BatchNorm2d). Convolutions start kaiming-normal (fan_out, ReLU gain), BatchNorm weight 1
/// and bias 0, fc as nn::Linear: torchvision's initialisation (from kiln's Philox, so CPU and GPU models start
/// bit-identical). Input (N, 3, H, W), output (N, num_classes) logits.
class ResNet : public nn::Module {
 public:
  /// `blocks`: blocks per stage (e.g. {3, 4, 6, 3}); `bottleneck`: Bottleneck blocks, else BasicBlock.
  ResNet(std::vector<int64_t> blocks, bool bottleneck, int64_t num_classes = 1000, DType dtype = float32,
         std::optional<Device> device = {});
  Array forward(const Array& x) override;
  std::string name() const override;

  /// For inference (torch.fx's conv/bn fusion, or torch.jit.freeze's): folds every BatchNorm2d into the
  /// convolution before it (nn::fuse_conv_bn_eval: its running statistics and affine parameters become the
  /// convolution's weight and bias) and runs each convolution's bias, the ReLU and the residual add as one fused
  /// elementwise pass over the convolution's output, in place (a downsample's bias joins the block's last one):
  /// per block 2-3 passes over its activations instead of 5-8 (batch norm, ReLU and add each reading and writing
  /// them). The model must be in evaluation mode, and stays for inference: forward in training mode then throws
  /// ValueError. The state dict changes accordingly ("conv1.bias" appears, "bn1.*" goes), as a folded PyTorch
  /// model's does. Returns *this.
  ResNet& fold_batch_norm();
  bool folded() const { return folded_; }

 private:
  std::vector<int64_t> blocks_;
  bool bottleneck_;
  bool folded_ = false;
  std::vector<std::shared_ptr<nn::Module>> stem_, stages_, head_;
};

std::shared_ptr<ResNet> resnet18(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});
std::shared_ptr<ResNet> resnet34(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});
std::shared_ptr<ResNet> resnet50(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});
std::shared_ptr<ResNet> resnet101(int64_t num_classes = 1000, DType dtype = float32, std::optional<Device> device = {});

}  // namespace kiln::models
