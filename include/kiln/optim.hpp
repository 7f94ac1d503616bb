// Optimizers and learning-rate schedules (as torch.optim), over the parameters of an nn::Module.
//
//   optim::Adam opt(model->parameters(), {.lr = 1e-3});
//   opt.zero_grad(); loss.backward(); optim::clip_grad_norm(model->parameters(), 1.0); opt.step();
//
// Make the optimizer after moving the model (Module::to makes new parameter arrays). A step updates the
// parameters and their state in place, unrecorded, without synchronising: float32 parameters on a GPU through
// multi-tensor kernels (one launch for up to 36 parameters), others with one fused kernel per parameter
// (kiln::fuse with out=); both give the CPU's bits. Parameters without a gradient are skipped. The update
// formulas are PyTorch's.
//
// A step can be captured in a CUDA graph (train::TrainStep does it) once an eager step has created the
// optimizer's state; Adam needs AdamOptions::capturable for its step count. A captured step keeps the lr of
// the capture.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/array.hpp"
#include "kiln/nn.hpp"

namespace kiln::optim {

class Optimizer {
 public:
  Optimizer(std::vector<Array> parameters, double lr);
  virtual ~Optimizer() = default;
  /// One update of every parameter that has a gradient.
  virtual void step() = 0;
  /// Clears every parameter's gradient.
  void zero_grad();
  double lr() const { return lr_; }
  void set_lr(double lr) { lr_ = lr; }
  const std::vector<Array>& parameters() const { return parameters_; }
  /// The optimizer's state, saved with the model: "lr", "step", "optimizer" (kind()'s name as uint8 ASCII
  /// bytes), "params_with_state" (bool, one per parameter: which have buffers yet) and those parameters' buffers
  /// ("momentum_buffer.3", "exp_avg.3", ...: buffers() names them).
  virtual nn::StateDict state_dict() const;
  /// Restores a state_dict() strictly, as Module::load_state_dict does: the state must be of an optimizer of the
  /// same kind over as many parameters, with every buffer its mask promises, no other key, and each buffer of
  /// its parameter's shape. Throws ValueError (another kind, another number of parameters, missing or
  /// unexpected keys, each named) or ShapeError (naming the key), leaving the optimizer unchanged.
  virtual void load_state_dict(const nn::StateDict& state);
  /// The kind's name, as state_dict() records it ("SGD", "Adam", "AdamW").
  virtual std::string kind() const { return "Optimizer"; }

 protected:
  /// The per-parameter buffers by name (one entry per parameter; undefined until the parameter's first
  /// step), which state_dict and load_state_dict save and restore.
  virtual std::vector<std::pair<std::string, std::vector<Array>*>> buffers() { return {}; }
  /// Throws ValueError naming `what` when a step is being captured in a CUDA graph on a parameter's GPU and
  /// `ready` is false (state that the first step creates must exist before a capture).
  void require_ready_for_capture(bool ready, const char* what) const;
  /// True when a parameter's GPU is capturing a CUDA graph on this thread.
  bool capturing() const;
  /// Throws ValueError naming `what` when a parameter was retired (Module::to replaced it after this optimizer
  /// was made: stepping the old array would change nothing the model reads).
  void require_live_parameters(const char* what) const;
  std::vector<Array> parameters_;
  double lr_;
  int64_t step_ = 0;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

/// Stochastic gradient descent with momentum (PyTorch's: the buffer starts as the first gradient), Nesterov
/// momentum and L2 weight decay.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Array> parameters, SGDOptions options = {});
  void step() override;
  std::string kind() const override { return "SGD"; }
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::pair<std::string, std::vector<Array>*>> buffers() override {
    return {{"momentum_buffer", &momentum_}};
  }

 private:
  SGDOptions options_;
  std::vector<Array> momentum_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  /// Keep the step count on the GPU (bias corrections computed there), so that a step captured in a CUDA graph
  /// advances at every replay (torch.optim.Adam(capturable=True)); one more small kernel per step and GPU.
  /// Adam::step throws inside a capture without it. The lr stays the one of the capture.
  bool capturable = false;
};

/// Adam (weight decay added to the gradient, L2) and, with decoupled = true, AdamW (the parameter shrinks by
/// lr * weight_decay before the Adam step).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Array> parameters, AdamOptions options = {}, bool decoupled = false);
  void step() override;
  nn::StateDict state_dict() const override;
  void load_state_dict(const nn::StateDict& state) override;
  std::string kind() const override { return decoupled_ ? "AdamW" : "Adam"; }

 protected:
  std::vector<std::pair<std::string, std::vector<Array>*>> buffers() override {
    return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}};
  }

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<Array> exp_avg_, exp_avg_sq_;
  /// capturable: per device (Device::str()), the step count, the bias-corrected step size and sqrt(1 - beta2^t)
  /// (float64; and float32 for float32 parameters), all 0-d arrays on that device.
  struct DeviceStep {
    Array count, step_size, bc2_sqrt, step_size32, bc2_sqrt32;
  };
  std::map<std::string, DeviceStep> device_steps_;
};

/// AdamW: Adam with decoupled weight decay (default 0.01, as PyTorch).
class AdamW : public Adam {
 public:
  AdamW(std::vector<Array> parameters, AdamOptions options = {.weight_decay = 0.01});
};

/// Scales the gradients so that their joint 2-norm is at most max_norm (in place); returns that norm before
/// clipping (0-d float32 on the first parameter's device; no synchronisation).
Array clip_grad_norm(const std::vector<Array>& parameters, double max_norm);

/// torch.amp.GradScaler's options: the loss scale starts at init_scale, is multiplied by backoff_factor after a
/// step whose gradients hold an inf or a NaN (that step is skipped), and by growth_factor after growth_interval
/// steps in a row without one. enabled = false makes every call a pass-through (scale(loss) is loss).
struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

/// Loss scaling for float16 training (torch.amp.GradScaler): small gradients that would underflow in float16
/// are computed from a scaled loss, unscaled before the optimizer reads them, and a step with overflowed
/// gradients is skipped.
///
///   scaler.scale(loss).backward(); scaler.step(opt); scaler.update();
///
/// step() reads whether any gradient overflowed with one synchronisation (as PyTorch's step does).
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  /// loss * scale (loss as is when disabled).
  Array scale(const Array& loss) const;
  /// Divides the optimizer's gradients by the scale in place (once per step; step() calls it when you did
  /// not, e.g. before clip_grad_norm) and notes whether any is inf or NaN.
  void unscale(Optimizer& optimizer);
  /// optimizer.step() unless a gradient overflowed; returns whether it stepped.
  bool step(Optimizer& optimizer);
  /// Adjusts the scale for the next iteration (call once per iteration, after step()).
  void update();
  double get_scale() const { return scale_; }
  /// Whether this iteration's unscale() found an inf or a NaN (reset by update()).
  bool found_inf() const { return found_inf_; }
  /// The steps step() skipped (overflowed gradients) since construction; not part of the state dict.
  int64_t skipped_steps() const { return skipped_steps_; }
  /// The scaler's state between iterations: "scale" (float64) and "growth_tracker" (int64), 0-d.
  nn::StateDict state_dict() const;
  /// Restores a state_dict() (call between iterations); ValueError naming a missing or unexpected key.
  void load_state_dict(const nn::StateDict& state);

 private:
  GradScalerOptions options_;
  double scale_;
  int64_t growth_tracker_ = 0;
  int64_t skipped_steps_ = 0;
  bool unscaled_ = false, found_inf_ = false;
};

/// A learning-rate schedule: step() (once per epoch or per iteration, as you choose) sets the optimizer's lr
/// to the schedule's value at the next count. The base lr is the optimizer's lr when the schedule is built;
/// load_state_dict restores the saved one, so a schedule built after loading a checkpoint resumes exactly.
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& optimizer) : optimizer_(&optimizer), base_lr_(optimizer.lr()) {}
  virtual ~LRScheduler() = default;
  void step();
  int64_t count() const { return count_; }
  double base_lr() const { return base_lr_; }
  /// "count" (int64) and "base_lr" (float64), 0-d.
  nn::StateDict state_dict() const;
  /// Restores a state_dict() and sets the optimizer's lr to lr_at(count), as the saved schedule had it.
  /// ValueError naming a missing or unexpected key.
  void load_state_dict(const nn::StateDict& state);
  /// The lr after `count` steps.
  virtual double lr_at(int64_t count) const = 0;

 protected:
  Optimizer* optimizer_;
  double base_lr_;
  int64_t count_ = 0;
};

/// lr = base * gamma^(count / step_size).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t count) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

/// lr = eta_min + (base - eta_min) (1 + cos(pi count / t_max)) / 2.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
  double lr_at(int64_t count) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

/// Linear warm-up from base * start_factor to base over `warmup` steps, then constant.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(Optimizer& optimizer, int64_t warmup, double start_factor = 1.0 / 3.0);
  double lr_at(int64_t count) const override;

 private:
  int64_t warmup_;
  double start_factor_;
};

}  // namespace kiln::optim
