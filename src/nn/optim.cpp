// Optimizers (each parameter's update is one fused function with out=: one kernel on a GPU), gradient
// clipping and learning-rate schedules.
#include "kiln/optim.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <mutex>
#include <numbers>
#include <string>
#include <tuple>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "kiln/autograd.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"
#include "kiln/parallel.hpp"
#include "kiln/raw_module.hpp"

namespace kiln::optim {

// ---------------------------------------------------------------- multi-tensor kernels (GPU, float32)
// As PyTorch's foreach/fused paths: one launch updates up to kTensors parameters, each block one chunk of one
// tensor, the pointer table passed by value as a kernel parameter (no copy to the device). The arithmetic is
// the per-parameter fused functions' in the same order, float32, no contraction (--fmad=false), so both paths
// give the same bits.
namespace {

constexpr int kTensors = 36, kBlocks = 320;
constexpr int64_t kChunk = 8192;  // elements per block: 32 per thread, enough blocks to fill a GPU
struct MultiList {
  void* ptr[4][kTensors];
  int64_t n[kTensors];
  uint8_t tensor[kBlocks];
  int32_t chunk[kBlocks];
};
static_assert(sizeof(MultiList) <= 4000, "CUDA kernel parameters are limited to 4 KB");

constexpr const char* kMultiSource = R"(
#define TENSORS 36
#define BLOCKS 320
#define CHUNK 8192LL
struct MultiList { void* ptr[4][TENSORS]; long long n[TENSORS]; unsigned char tensor[BLOCKS]; int chunk[BLOCKS]; };
extern "C" __global__ void sgd_multi(MultiList l, int mode, float lr, float m, float keep, float wd) {
  const int t = l.tensor[blockIdx.x];
  float* p = (float*)l.ptr[0][t];
  const float* g = (const float*)l.ptr[1][t];
  float* v = (float*)l.ptr[2][t];
  const long long start = (long long)l.chunk[blockIdx.x] * CHUNK, end = min(start + CHUNK, l.n[t]);
  for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
    const float pi = p[i];
    const float d = g[i] + pi * wd;
    if (mode == 0) {
      p[i] = pi - d * lr;
    } else {
      const float v2 = v[i] * m + d * keep;
      v[i] = v2;
      p[i] = mode == 1 ? pi - v2 * lr : pi - (d + v2 * m) * lr;
    }
  }
}
// step_size_p / bc2_sqrt_p: capturable Adam reads these two from the device (0-d float32 arrays); else null
extern "C" __global__ void adam_multi(MultiList l, float b1, float omb1, float b2, float omb2, float step_size,
                                      float bc2_sqrt, const float* step_size_p, const float* bc2_sqrt_p, float eps,
                                      float wd, float decay) {
  if (step_size_p) {
    step_size = *step_size_p;
    bc2_sqrt = *bc2_sqrt_p;
  }
  const int t = l.tensor[blockIdx.x];
  float* p = (float*)l.ptr[0][t];
  const float* g = (const float*)l.ptr[1][t];
  float* mm = (float*)l.ptr[2][t];
  float* vv = (float*)l.ptr[3][t];
  const long long start = (long long)l.chunk[blockIdx.x] * CHUNK, end = min(start + CHUNK, l.n[t]);
  for (long long i = start + threadIdx.x; i < end; i += blockDim.x) {
    const float pi = p[i];
    const float d = g[i] + pi * wd;
    const float m2 = mm[i] * b1 + d * omb1;
    const float v2 = vv[i] * b2 + d * d * omb2;
    mm[i] = m2;
    vv[i] = v2;
    p[i] = pi * decay - m2 / (sqrtf(v2) / bc2_sqrt + eps) * step_size;
  }
}
)";

const RawModule& multi_module(Device d) {
  static std::mutex mutex;
  static std::map<int, std::unique_ptr<RawModule>> modules;
  std::lock_guard lock(mutex);
  auto& m = modules[d.index];
  if (!m)
    m = std::make_unique<RawModule>(kMultiSource,
                                    RawModuleOptions{.options = {"--fmad=false"}, .device = d, .name = "optim_multi"});
  return *m;
}

/// Whether `arrays` (a parameter, its gradient, its state) are all defined, contiguous, of the parameter's
/// shape, dtype and device: what the multi-tensor kernels and the CPU loops read.
bool same_layout(const std::vector<Array>& arrays) {
  const Array& p = arrays[0];
  for (const Array& a : arrays)
    if (!a.defined() || !a.is_contiguous() || a.dtype() != p.dtype() || !(a.shape() == p.shape()) ||
        a.device() != p.device())
      return false;
  return true;
}

/// Whether a parameter goes through the multi-tensor kernels: float32 on a GPU (arrays as same_layout).
bool multi_ok(const std::vector<Array>& arrays) {
  return arrays[0].device().is_cuda() && arrays[0].dtype() == float32 && same_layout(arrays);
}

/// The arrays an update writes: all but the gradient (index 1), whose versions it bumps.
void bump_written(const std::vector<Array>& arrays) {
  for (size_t j = 0; j < arrays.size(); ++j)
    if (j != 1) arrays[j].storage()->bump_version();
}

/// Launches `kernel` over `tensors` (each: the arrays of one parameter, in the kernel's order), in as few
/// launches as the table sizes allow.
template <class... Scalars>
void multi_tensor_apply(const std::string& kernel, Device d, const std::vector<std::vector<Array>>& tensors,
                        Scalars... scalars) {
  const RawKernel k = multi_module(d).function(kernel);
  MultiList list{};
  int count = 0, blocks = 0;
  auto flush = [&] {
    if (blocks > 0) k.launch(Dim3(blocks), Dim3(256), list, scalars...);
    list = MultiList{};
    count = blocks = 0;
  };
  for (const std::vector<Array>& arrays : tensors) {
    const int64_t n = arrays[0].size();
    if (n == 0) continue;
    if (count == kTensors) flush();
    bump_written(arrays);
    for (size_t j = 0; j < arrays.size(); ++j) list.ptr[j][count] = arrays[j].data_ptr();
    list.n[count] = n;
    for (int64_t c = 0; c * kChunk < n; ++c) {
      if (blocks == kBlocks) {  // the table is full: launch, then carry this tensor over
        const int t = count;
        std::array<void*, 4> ptrs{};
        for (size_t j = 0; j < 4; ++j) ptrs[j] = list.ptr[j][t];
        flush();
        for (size_t j = 0; j < 4; ++j) list.ptr[j][0] = ptrs[j];
        list.n[0] = n;
        count = 0;
      }
      list.tensor[blocks] = static_cast<uint8_t>(count);
      list.chunk[blocks] = static_cast<int32_t>(c);
      ++blocks;
    }
    ++count;
  }
  flush();
}

// ---------------------------------------------------------------- the CPU's loops
// The same arithmetic as the multi-tensor kernels, element by element in one pass (the per-parameter fused
// functions run op by op on the CPU: a dozen passes over each parameter). float32 and float64, contiguous;
// compiled without contraction (-ffp-contract=off), so the bits are the kernels' and the fused functions'
// except in the subnormal range: the loops run with subnormals flushed to zero (FlushSubnormals), where a
// GPU keeps them.

/// For its scope, this thread's x86 SSE/AVX arithmetic flushes subnormal results to zero and reads subnormal
/// operands as zero (MXCSR's FTZ and DAZ bits; restored after). Moment estimates that decay geometrically
/// (Adam's exp_avg by beta1 each step, a momentum buffer by its factor) pass through the subnormal range on
/// their way to zero, and on x86 each operation on a subnormal takes a microcode assist, enough to make an
/// optimizer step several times slower once many moments sit there (bench/results/nn-train-h200-2026-11-26.md).
/// A flushed value is below 1.2e-38 (float32): its contribution to a parameter's update is below lr * 1e-30.
/// No-op elsewhere.
class FlushSubnormals {
 public:
#if defined(__x86_64__) || defined(__i386__)
  FlushSubnormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtz | kDaz); }
  ~FlushSubnormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFtz = 0x8000, kDaz = 0x0040;
  unsigned saved_;
#endif
};

/// Whether a parameter goes through the CPU loops: float32/float64 on the CPU (arrays as same_layout).
bool cpu_loop_ok(const std::vector<Array>& arrays) {
  const Array& p = arrays[0];
  return p.device().is_cpu() && (p.dtype() == float32 || p.dtype() == float64) && same_layout(arrays);
}

constexpr int64_t kCpuGrain = 1 << 16;  // elements per range of kiln::parallel_for

template <class T>
void sgd_loop(T* p, const T* g, T* v, int64_t n, int mode, T lr, T m, T keep, T wd) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T pi = p[i];
    const T d = g[i] + pi * wd;
    if (mode == 0) {
      p[i] = pi - d * lr;
    } else {
      const T v2 = v[i] * m + d * keep;
      v[i] = v2;
      p[i] = mode == 1 ? pi - v2 * lr : pi - (d + v2 * m) * lr;
    }
  }
}

template <class T>
void adam_loop(T* p, const T* g, T* mm, T* vv, int64_t n, T b1, T omb1, T b2, T omb2, T step_size, T bc2_sqrt, T eps,
               T wd, T decay) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T pi = p[i];
    const T d = g[i] + pi * wd;
    const T m2 = mm[i] * b1 + d * omb1;
    const T v2 = vv[i] * b2 + d * d * omb2;
    mm[i] = m2;
    vv[i] = v2;
    p[i] = pi * decay - m2 / (std::sqrt(v2) / bc2_sqrt + eps) * step_size;
  }
}

/// Bumps the written arrays' versions, then calls loop(float{}) or loop(double{}) by the parameter's dtype.
template <class Loop>
void cpu_update(const std::vector<Array>& arrays, Loop loop) {
  bump_written(arrays);
  if (arrays[0].dtype() == float32)
    loop(float{});
  else
    loop(double{});
}

}  // namespace

// ---------------------------------------------------------------- Optimizer
Optimizer::Optimizer(std::vector<Array> parameters, double lr) : parameters_(std::move(parameters)), lr_(lr) {
  if (!(lr >= 0.0)) throw ValueError("optimizer: lr must be non-negative, got " + std::to_string(lr));
  for (size_t i = 0; i < parameters_.size(); ++i)
    if (!parameters_[i].requires_grad())
      throw ValueError("optimizer: parameter " + std::to_string(i) + " (shape " + shape_str(parameters_[i].shape()) +
                       ") does not require grad; pass module->parameters() or arrays marked with set_requires_grad()");
}

bool Optimizer::capturing() const {
#ifdef KILN_WITH_CUDA
  for (const Array& p : parameters_)
    if (p.device().is_cuda() && cuda::is_capturing(p.device())) return true;
#endif
  return false;
}

void Optimizer::require_ready_for_capture(bool ready, const char* what) const {
  if (!ready && capturing())
    throw ValueError(std::string(what) +
                     " inside a CUDA graph capture, before an eager step created the optimizer's state (which a "
                     "replay would create anew each time); run one step eagerly first, as torch.cuda.graphs' warm-up "
                     "does (train::TrainStep does it)");
}

void Optimizer::zero_grad() {
  for (Array& p : parameters_) p.set_grad(Array());
}

nn::StateDict Optimizer::state_dict() const {
  nn::StateDict state;
  state.insert("lr", scalar_array(lr_, float64, cpu()));
  state.insert("step", scalar_array(step_, int64, cpu()));
  return state;
}

void Optimizer::load_state_dict(const nn::StateDict& state) {
  lr_ = state.at("lr").item<double>();
  step_ = state.at("step").item<int64_t>();
}

Array Optimizer::load_buffer(const nn::StateDict& state, const std::string& name, size_t i) const {
  const std::string key = name + "." + std::to_string(i);
  const Array* value = state.find(key);
  if (!value) return Array();
  const Array& p = parameters_[i];
  if (!(value->shape() == p.shape()))
    throw ShapeError("optimizer load_state_dict: \"" + key + "\" has shape " + shape_str(value->shape()) +
                     " but parameter " + std::to_string(i) + " has shape " + shape_str(p.shape()) +
                     "; load the state of an optimizer over the same parameters");
  return value->to(p.device()).astype(p.dtype()).copy();
}

// ---------------------------------------------------------------- SGD
SGD::SGD(std::vector<Array> parameters, SGDOptions options)
    : Optimizer(std::move(parameters), options.lr), options_(options), momentum_(parameters_.size()) {
  if (options.momentum < 0 || options.weight_decay < 0)
    throw ValueError("SGD: momentum and weight_decay must be non-negative");
  if (options.nesterov && (options.momentum <= 0 || options.dampening != 0))
    throw ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening 0");
}

void SGD::step() {
  NoGradGuard no_grad;
  static const auto plain = fuse([](auto p, auto g, auto lr, auto wd) { return p - (g + p * wd) * lr; }, "sgd");
  static const auto heavy_ball = fuse(
      [](auto p, auto g, auto v, auto lr, auto m, auto keep, auto wd) {
        auto v2 = v * m + (g + p * wd) * keep;
        return std::tuple{p - v2 * lr, v2};
      },
      "sgd_momentum");
  static const auto nesterov = fuse(
      [](auto p, auto g, auto v, auto lr, auto m, auto keep, auto wd) {
        auto d = g + p * wd;
        auto v2 = v * m + d * keep;
        return std::tuple{p - (d + v2 * m) * lr, v2};
      },
      "sgd_nesterov");
  const SGDOptions& o = options_;
  const int mode = o.momentum == 0 ? 0 : o.nesterov ? 2 : 1;  // the kernels' and loops' update rule
  std::map<int, std::vector<std::vector<Array>>> multi;       // by GPU
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Array& p = parameters_[i];
    const Array g = p.grad();
    if (!g.defined()) continue;
    if (o.momentum != 0) require_ready_for_capture(momentum_[i].defined(), "SGD::step with momentum");
    const std::vector<Array> arrays =
        o.momentum == 0 ? std::vector<Array>{p, g} : std::vector<Array>{p, g, momentum_[i]};
    if (multi_ok(arrays)) {
      multi[p.device().index].push_back(arrays);
      continue;
    }
    if (cpu_loop_ok(arrays)) {
      cpu_update(arrays, [&](auto zero) {
        using T = decltype(zero);
        T* pp = static_cast<T*>(p.data_ptr());
        const T* gp = static_cast<const T*>(g.data_ptr());
        T* vp = o.momentum == 0 ? nullptr : static_cast<T*>(momentum_[i].data_ptr());
        parallel_for(
            p.size(),
            [&](int64_t b, int64_t e) {
              [[maybe_unused]] FlushSubnormals flush;  // a decaying momentum buffer
              sgd_loop<T>(pp + b, gp + b, vp ? vp + b : nullptr, e - b, mode, static_cast<T>(lr_),
                          static_cast<T>(o.momentum), static_cast<T>(1.0 - o.dampening),
                          static_cast<T>(o.weight_decay));
            },
            kCpuGrain);
      });
      continue;
    }
    if (o.momentum == 0) {
      plain.out({p}, p, g, lr_, o.weight_decay);
      continue;
    }
    Array& v = momentum_[i];
    if (!v.defined()) {  // the buffer starts as the first gradient (PyTorch)
      v = o.weight_decay != 0 ? g + p * o.weight_decay : g.copy();
      p -= (o.nesterov ? v + v * o.momentum : v) * lr_;
      continue;
    }
    if (o.nesterov)
      nesterov.out({p, v}, p, g, v, lr_, o.momentum, 1.0 - o.dampening, o.weight_decay);
    else
      heavy_ball.out({p, v}, p, g, v, lr_, o.momentum, 1.0 - o.dampening, o.weight_decay);
  }
  for (const auto& [index, tensors] : multi)
    multi_tensor_apply("sgd_multi", gpu(index), tensors, int32_t(mode), static_cast<float>(lr_),
                       static_cast<float>(o.momentum), static_cast<float>(1.0 - o.dampening),
                       static_cast<float>(o.weight_decay));
  ++step_;
}

nn::StateDict SGD::state_dict() const {
  nn::StateDict state = Optimizer::state_dict();
  for (size_t i = 0; i < momentum_.size(); ++i)
    if (momentum_[i].defined()) state.insert("momentum_buffer." + std::to_string(i), momentum_[i]);
  return state;
}

void SGD::load_state_dict(const nn::StateDict& state) {
  Optimizer::load_state_dict(state);
  for (size_t i = 0; i < parameters_.size(); ++i) momentum_[i] = load_buffer(state, "momentum_buffer", i);
}

// ---------------------------------------------------------------- Adam, AdamW
Adam::Adam(std::vector<Array> parameters, AdamOptions options, bool decoupled)
    : Optimizer(std::move(parameters), options.lr),
      options_(options),
      decoupled_(decoupled),
      exp_avg_(parameters_.size()),
      exp_avg_sq_(parameters_.size()) {
  if (!(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1))
    throw ValueError("Adam: betas must be in [0, 1), got " + std::to_string(options.beta1) + " and " +
                     std::to_string(options.beta2));
  if (!(options.eps >= 0) || !(options.weight_decay >= 0))
    throw ValueError("Adam: eps and weight_decay must be non-negative");
}

void Adam::step() {
  NoGradGuard no_grad;
  static const auto update = fuse(
      [](auto p, auto g, auto m, auto v, auto b1, auto one_minus_b1, auto b2, auto one_minus_b2, auto step_size,
         auto bc2_sqrt, auto eps, auto wd, auto decay) {
        auto d = g + p * wd;
        auto m2 = m * b1 + d * one_minus_b1;
        auto v2 = v * b2 + d * d * one_minus_b2;
        return std::tuple{p * decay - m2 / (sqrt(v2) / bc2_sqrt + eps) * step_size, m2, v2};
      },
      "adam");
  // capturable: t += 1 and the bias corrections, on the device (float64, then float32 as the host path rounds)
  static const auto corrections = fuse(
      [](auto t, auto b1, auto b2, auto lr) {
        auto t2 = t + 1.0;
        auto step_size = lr / (1.0 - power(b1, t2));
        auto bc2_sqrt = sqrt(1.0 - power(b2, t2));
        return std::tuple{t2, step_size, bc2_sqrt, step_size.astype(float32), bc2_sqrt.astype(float32)};
      },
      "adam_corrections");
  const AdamOptions& o = options_;
  if (!o.capturable && capturing())
    throw ValueError(
        "Adam::step inside a CUDA graph capture: the bias corrections would keep the step count of the capture at "
        "every replay; construct the optimizer with AdamOptions{.capturable = true} (torch.optim.Adam's "
        "capturable=True), which keeps the step count on the GPU");
  ++step_;
  const double t = static_cast<double>(step_);
  const double bc1 = 1.0 - std::pow(o.beta1, t), bc2 = 1.0 - std::pow(o.beta2, t);
  const double l2 = decoupled_ ? 0.0 : o.weight_decay;
  const double decay = decoupled_ ? 1.0 - lr_ * o.weight_decay : 1.0;
  std::map<int, bool> corrected;  // GPUs whose device step advanced in this call
  auto device_step = [&](int index) -> const DeviceStep& {
    DeviceStep& s = device_steps_[index];
    if (!corrected[index]) {
      if (!s.count.defined()) {
        require_ready_for_capture(false, "Adam::step (capturable, its first step)");
        s.count = full({}, t - 1.0, float64, gpu(index));
        s.step_size = empty({}, float64, gpu(index));
        s.bc2_sqrt = empty({}, float64, gpu(index));
        s.step_size32 = empty({}, float32, gpu(index));
        s.bc2_sqrt32 = empty({}, float32, gpu(index));
      }
      corrections.out({s.count, s.step_size, s.bc2_sqrt, s.step_size32, s.bc2_sqrt32}, s.count, o.beta1, o.beta2,
                      lr_);
      corrected[index] = true;
    }
    return s;
  };
  std::map<int, std::vector<std::vector<Array>>> multi;  // by GPU
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Array& p = parameters_[i];
    const Array g = p.grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      require_ready_for_capture(false, "Adam::step (its first step)");
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
    }
    const std::vector<Array> arrays{p, g, exp_avg_[i], exp_avg_sq_[i]};
    if (multi_ok(arrays)) {
      multi[p.device().index].push_back(arrays);
      continue;
    }
    if (cpu_loop_ok(arrays)) {
      cpu_update(arrays, [&](auto zero) {
        using T = decltype(zero);
        auto c = [](double v) { return static_cast<T>(v); };
        T* pp = static_cast<T*>(p.data_ptr());
        const T* gp = static_cast<const T*>(g.data_ptr());
        T* mp = static_cast<T*>(exp_avg_[i].data_ptr());
        T* vp = static_cast<T*>(exp_avg_sq_[i].data_ptr());
        parallel_for(
            p.size(),
            [&](int64_t b, int64_t e) {
              [[maybe_unused]] FlushSubnormals flush;  // decaying moments
              adam_loop<T>(pp + b, gp + b, mp + b, vp + b, e - b, c(o.beta1), c(1.0 - o.beta1), c(o.beta2),
                           c(1.0 - o.beta2), c(lr_ / bc1), c(std::sqrt(bc2)), c(o.eps), c(l2), c(decay));
            },
            kCpuGrain);
      });
      continue;
    }
    if (o.capturable && p.device().is_cuda()) {
      const DeviceStep& s = device_step(p.device().index);
      update.out({p, exp_avg_[i], exp_avg_sq_[i]}, p, g, exp_avg_[i], exp_avg_sq_[i], o.beta1, 1.0 - o.beta1,
                 o.beta2, 1.0 - o.beta2, s.step_size, s.bc2_sqrt, o.eps, l2, decay);
      continue;
    }
    update.out({p, exp_avg_[i], exp_avg_sq_[i]}, p, g, exp_avg_[i], exp_avg_sq_[i], o.beta1, 1.0 - o.beta1, o.beta2,
               1.0 - o.beta2, lr_ / bc1, std::sqrt(bc2), o.eps, l2, decay);
  }
  auto f = [](double v) { return static_cast<float>(v); };
  for (const auto& [index, tensors] : multi) {
    if (o.capturable) {
      const DeviceStep& s = device_step(index);
      multi_tensor_apply("adam_multi", gpu(index), tensors, f(o.beta1), f(1.0 - o.beta1), f(o.beta2),
                         f(1.0 - o.beta2), 0.0f, 0.0f, static_cast<const float*>(s.step_size32.data_ptr()),
                         static_cast<const float*>(s.bc2_sqrt32.data_ptr()), f(o.eps), f(l2), f(decay));
      continue;
    }
    const float* none = nullptr;
    multi_tensor_apply("adam_multi", gpu(index), tensors, f(o.beta1), f(1.0 - o.beta1), f(o.beta2), f(1.0 - o.beta2),
                       f(lr_ / bc1), f(std::sqrt(bc2)), none, none, f(o.eps), f(l2), f(decay));
  }
}

nn::StateDict Adam::state_dict() const {
  nn::StateDict state = Optimizer::state_dict();
  // capturable: graph replays advance the device count, not step_ (all GPUs' counts agree; read one)
  for (const auto& [index, s] : device_steps_)
    if (s.count.defined()) {
      state.insert("step", scalar_array(static_cast<int64_t>(s.count.item<double>()), int64, cpu()));
      break;
    }
  for (size_t i = 0; i < exp_avg_.size(); ++i)
    if (exp_avg_[i].defined()) {
      state.insert("exp_avg." + std::to_string(i), exp_avg_[i]);
      state.insert("exp_avg_sq." + std::to_string(i), exp_avg_sq_[i]);
    }
  return state;
}

void Adam::load_state_dict(const nn::StateDict& state) {
  Optimizer::load_state_dict(state);
  device_steps_.clear();  // made again from step_ at the next step
  for (size_t i = 0; i < parameters_.size(); ++i) {
    exp_avg_[i] = load_buffer(state, "exp_avg", i);
    exp_avg_sq_[i] = load_buffer(state, "exp_avg_sq", i);
  }
}

AdamW::AdamW(std::vector<Array> parameters, AdamOptions options) : Adam(std::move(parameters), options, true) {}

// ---------------------------------------------------------------- clipping
Array clip_grad_norm(const std::vector<Array>& parameters, double max_norm) {
  NoGradGuard no_grad;
  Array total;
  for (const Array& p : parameters) {
    const Array g = p.grad();
    if (!g.defined()) continue;
    Array squares = sum(square(g.astype(float32)));
    if (total.defined()) squares = squares.to(total.device());
    total = total.defined() ? total + squares : squares;
  }
  if (!total.defined())
    return parameters.empty() ? zeros({}, float32, cpu()) : zeros({}, float32, parameters[0].device());
  total = sqrt(total);
  const Array scale = minimum(divide(max_norm, total + 1e-6), 1.0);
  for (const Array& p : parameters) {
    Array g = p.grad();
    if (!g.defined()) continue;
    g *= scale.to(g.device()).astype(g.dtype());
  }
  return total;
}

// ---------------------------------------------------------------- loss scaling
GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || !(options.growth_factor > 1) || !(options.backoff_factor > 0) ||
      !(options.backoff_factor < 1) || options.growth_interval <= 0)
    throw ValueError("GradScaler: init_scale must be positive, growth_factor above 1, backoff_factor in (0, 1) and "
                     "growth_interval positive");
}

Array GradScaler::scale(const Array& loss) const { return options_.enabled ? loss * scale_ : loss; }

void GradScaler::unscale(Optimizer& optimizer) {
  if (!options_.enabled || unscaled_) return;
  NoGradGuard no_grad;
  std::map<std::string, Array> bad;  // per device: how many gradient values are inf or NaN
  const double inverse = 1.0 / scale_;
  for (const Array& p : optimizer.parameters()) {
    Array g = p.grad();
    if (!g.defined()) continue;
    const Array count = sum(logical_not(isfinite(g)).astype(int64));
    Array& total = bad[g.device().str()];
    total = total.defined() ? total + count : count;
    g *= inverse;
  }
  found_inf_ = false;
  for (const auto& [device, total] : bad) found_inf_ = found_inf_ || total.item<int64_t>() > 0;
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  unscale(optimizer);
  if (found_inf_) return false;
  optimizer.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    growth_tracker_ = 0;
  }
  unscaled_ = false;
  found_inf_ = false;
}

// ---------------------------------------------------------------- schedules
void LRScheduler::step() {
  ++count_;
  optimizer_->set_lr(lr_at(count_));
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  if (step_size <= 0) throw ValueError("StepLR: step_size must be positive, got " + std::to_string(step_size));
}
double StepLR::lr_at(int64_t count) const {
  return base_lr_ * std::pow(gamma_, static_cast<double>(count / step_size_));
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  if (t_max <= 0) throw ValueError("CosineAnnealingLR: t_max must be positive, got " + std::to_string(t_max));
}
double CosineAnnealingLR::lr_at(int64_t count) const {
  const double c = static_cast<double>(std::min(count, t_max_));
  return eta_min_ + (base_lr_ - eta_min_) * (1 + std::cos(std::numbers::pi * c / static_cast<double>(t_max_))) / 2;
}

LinearWarmupLR::LinearWarmupLR(Optimizer& optimizer, int64_t warmup, double start_factor)
    : LRScheduler(optimizer), warmup_(warmup), start_factor_(start_factor) {
  if (warmup <= 0) throw ValueError("LinearWarmupLR: warmup must be positive, got " + std::to_string(warmup));
  optimizer.set_lr(lr_at(0));
}
double LinearWarmupLR::lr_at(int64_t count) const {
  if (count >= warmup_) return base_lr_;
  const double f = start_factor_ + (1.0 - start_factor_) * static_cast<double>(count) / static_cast<double>(warmup_);
  return base_lr_ * f;
}

}  // namespace kiln::optim
