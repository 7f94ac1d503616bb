// torchvision's ResNet family from kiln::nn layers (include/kiln/models.hpp), with its parameter names.
#include "kiln/models.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "kiln/autograd.hpp"
#include "kiln/conv.hpp"
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"
#include "kiln/raw_module.hpp"

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

// The folded model's epilogues (ResNet::fold_batch_norm): one elementwise pass over a convolution's output v,
// in place: + its bias per channel, + the residual (and a downsample's bias), then the ReLU, summed in float32
// and rounded once to v's dtype (as cuDNN's fused epilogues). On a GPU, float32 and bfloat16 activations of a
// dense layout (NCHW or channels-last, the residual laid out alike) go through the kernel below: 16-byte loads
// and stores, the channel from the element's index (kiln::fuse's strided kernel, the fallback, loads one
// element at a time, which costs bfloat16's 2-byte elements half the bandwidth).
constexpr const char* kEpilogueSource = R"(
__device__ inline float ld(float x) { return x; }
__device__ inline float ld(unsigned short x) { return __uint_as_float(((unsigned)x) << 16); }
__device__ inline void st(float& d, float x) { d = x; }
__device__ inline void st(unsigned short& d, float x) {  // round to nearest even; NaN stays NaN
  unsigned u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) { d = (unsigned short)((u >> 16) | 0x40u); return; }
  u += 0x7fffu + ((u >> 16) & 1u);
  d = (unsigned short)(u >> 16);
}
// v[i] = max(v[i] + b[c] (+ r[i] (+ rb[c])), 0), c = (i / inner) % C: inner = H*W for NCHW, 1 for channels-last.
template <class S, int VEC>
__device__ void epilogue(S* __restrict__ v, const float* __restrict__ b, const S* __restrict__ r,
                         const float* __restrict__ rb, unsigned n, unsigned C, unsigned inner) {
  const unsigned step = gridDim.x * blockDim.x * VEC;
  for (unsigned i0 = (blockIdx.x * blockDim.x + threadIdx.x) * VEC; i0 < n; i0 += step) {
    if (VEC > 1 && i0 + VEC <= n) {
      uint4 pv = *reinterpret_cast<const uint4*>(v + i0), pr = make_uint4(0, 0, 0, 0);
      if (r) pr = *reinterpret_cast<const uint4*>(r + i0);
      S* ev = reinterpret_cast<S*>(&pv);
      const S* er = reinterpret_cast<const S*>(&pr);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const unsigned c = ((i0 + j) / inner) % C;
        float a = ld(ev[j]) + b[c];
        if (r) a += ld(er[j]) + (rb ? rb[c] : 0.0f);
        st(ev[j], fmaxf(a, 0.0f));
      }
      *reinterpret_cast<uint4*>(v + i0) = pv;
    } else {
      for (unsigned i = i0; i < n && i < i0 + VEC; ++i) {
        const unsigned c = (i / inner) % C;
        float a = ld(v[i]) + b[c];
        if (r) a += ld(r[i]) + (rb ? rb[c] : 0.0f);
        st(v[i], fmaxf(a, 0.0f));
      }
    }
  }
}
#define EPILOGUE(NAME, S, VEC)                                                                                  \
  extern "C" __global__ void NAME(S* v, const float* b, const S* r, const float* rb, unsigned n, unsigned C, \
                                  unsigned inner) {                                                             \
    epilogue<S, VEC>(v, b, r, rb, n, C, inner);                                                                 \
  }
EPILOGUE(epilogue_f32_v, float, 4)
EPILOGUE(epilogue_f32_s, float, 1)
EPILOGUE(epilogue_bf16_v, unsigned short, 8)
EPILOGUE(epilogue_bf16_s, unsigned short, 1)
)";

/// The epilogue in the kernel above when v, bias and residual allow it (see there); false otherwise.
bool epilogue_kernel(Array& v, const Array& bias, const Array& residual, const Array& residual_bias) {
  if (!v.device().is_cuda() || v.ndim() != 4 || (v.dtype() != float32 && v.dtype() != bfloat16)) return false;
  if (bias.dtype() != float32 || !bias.is_contiguous() || bias.device() != v.device()) return false;
  if (residual_bias.defined() &&
      (residual_bias.dtype() != float32 || !residual_bias.is_contiguous() || residual_bias.device() != v.device()))
    return false;
  if (residual.defined() && (residual.dtype() != v.dtype() || !(residual.shape() == v.shape()) ||
                             residual.strides() != v.strides() || residual.device() != v.device()))
    return false;
  const int64_t n = v.size(), C = v.shape(1);
  if (n == 0 || n > int64_t{0xffffffff} - 64) return false;
  int64_t inner;
  if (v.is_contiguous())
    inner = v.shape(2) * v.shape(3);
  else if (is_channels_last(v))
    inner = 1;
  else
    return false;
  // The module and its four kernels, made once per GPU (this runs after every folded convolution).
  struct Kernels {
    RawModule module;
    RawKernel f32_v, f32_s, bf16_v, bf16_s;
    explicit Kernels(Device d)
        : module(kEpilogueSource, RawModuleOptions{.device = d, .name = "resnet_folded_epilogue"}),
          f32_v(module.function("epilogue_f32_v")),
          f32_s(module.function("epilogue_f32_s")),
          bf16_v(module.function("epilogue_bf16_v")),
          bf16_s(module.function("epilogue_bf16_s")) {}
  };
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<Kernels>> per_device;
  const Kernels* kernels;
  {
    std::lock_guard lock(mutex);
    auto& k = per_device[v.device().index];
    if (!k) k = std::make_unique<Kernels>(v.device());
    kernels = k.get();
  }
  auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool vec = aligned(v.data_ptr()) && (!residual.defined() || aligned(residual.data_ptr()));
  const bool bf16 = v.dtype() == bfloat16;
  const int per = vec ? (bf16 ? 8 : 4) : 1;
  const RawKernel& k = bf16 ? (vec ? kernels->bf16_v : kernels->bf16_s) : (vec ? kernels->f32_v : kernels->f32_s);
  const int64_t blocks = std::min<int64_t>((n / per + 255) / 256 + 1, 8192);
  const void* r = residual.defined() ? residual.data_ptr() : nullptr;
  const void* rb = residual_bias.defined() ? residual_bias.data_ptr() : nullptr;
  k.launch(Dim3(static_cast<unsigned>(blocks)), Dim3(256), v.data_ptr(), static_cast<const void*>(bias.data_ptr()), r,
           rb, static_cast<uint32_t>(n), static_cast<uint32_t>(C), static_cast<uint32_t>(inner));
  return true;
}

Array conv_epilogue(Array v, const Array& bias, const Array& residual = {}, const Array& residual_bias = {}) {
  if (epilogue_kernel(v, bias, residual, residual_bias)) return v;
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
                             Array out;
                             if (in[0].device().is_cpu()) {  // kiln::fuse runs op by op there: ReLU in place
                               out = in[0] + in[1];
                               relu(out, out);
                             } else {
                               out = kernel(in[0], in[1]);
                             }
                             saved = {out};
                             return out;
                           },
                           [](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
                             const Array masked = relu_backward(saved[0], g);
                             return std::vector<Array>{masked, masked};
                           }};
  return apply(f, {a, b});
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
