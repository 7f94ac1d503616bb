// Optimizers (each update one fused function run over every parameter by Fused::each: a few kernels per step
// on a GPU), gradient clipping, loss scaling and learning-rate schedules.
#include "kiln/optim.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <string>
#include <tuple>

#include "kiln/autograd.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif
#include "kiln/fuse.hpp"
#include "kiln/ops.hpp"

namespace kiln::optim {

// ---------------------------------------------------------------- the update formulas
// Each written once, as a fused function that Fused::each runs over every parameter of one device and dtype: a
// few launches per step on a GPU (multi-tensor apply), one pass per parameter through the fused executor on the
// CPU. Scalars arrive as weak scalars (rounded to the parameters' dtype as the unfused ops round them), so CPU and
// GPU agree bit for bit (GPU kernels are compiled without contraction; the CPU flushes subnormals, see
// cpu/multi_tensor.cpp).
namespace {

/// SGD without momentum: p - lr (g + wd p).
constexpr auto sgd_formula = [](auto p, auto g, auto lr, auto wd) { return p - (g + p * wd) * lr; };

/// SGD with momentum (PyTorch's): d = g + wd p, v' = m v + keep d (keep = 1 - dampening), then p - lr v' or,
/// Nesterov, p - lr (d + m v'). The first step passes v = 0 and keep = 1, so the buffer starts as d.
template <bool Nesterov>
constexpr auto momentum_formula = [](auto p, auto g, auto v, auto lr, auto m, auto keep, auto wd) {
  auto d = g + p * wd;
  auto v2 = v * m + d * keep;
  if constexpr (Nesterov)
    return std::tuple{p - (d + v2 * m) * lr, v2};
  else
    return std::tuple{p - v2 * lr, v2};
};

/// Adam (AdamW with decay = 1 - lr wd and wd = 0): d = g + wd p, m' = b1 m + (1 - b1) d, v' = b2 v + (1 - b2) d^2,
/// p decay - step_size m' / (sqrt(v') / bc2_sqrt + eps), step_size = lr / (1 - b1^t), bc2_sqrt = sqrt(1 - b2^t)
/// (host scalars, or with `capturable` 0-d arrays on the device).
constexpr auto adam_formula = [](auto p, auto g, auto m, auto v, auto b1, auto one_minus_b1, auto b2, auto one_minus_b2,
                                 auto step_size, auto bc2_sqrt, auto eps, auto wd, auto decay) {
  auto d = g + p * wd;
  auto m2 = m * b1 + d * one_minus_b1;
  auto v2 = v * b2 + d * d * one_minus_b2;
  return std::tuple{p * decay - m2 / (sqrt(v2) / bc2_sqrt + eps) * step_size, m2, v2};
};

/// Parameters (and their gradients and state) of one device and dtype: what one Fused::each call takes.
struct Lists {
  Device device;
  int variant = 0;  ///< what else tells these parameters apart (SGD: 1 for buffers made in this step)
  std::vector<Array> params, grads, first, second;
};
/// The lists of each device and dtype, in the order the parameters come.
class ListsBy {
 public:
  Lists& of(const Array& p, int variant = 0) {
    const auto key = std::make_tuple(p.device().str(), static_cast<int>(p.dtype()), variant);
    auto [it, added] = index_.try_emplace(key, lists_.size());
    if (added) lists_.push_back({p.device(), variant, {}, {}, {}, {}});
    return lists_[it->second];
  }
  std::vector<Lists>& all() { return lists_; }

 private:
  std::map<std::tuple<std::string, int, int>, size_t> index_;
  std::vector<Lists> lists_;
};

}  // namespace

// ---------------------------------------------------------------- state dicts
namespace {

/// Throws unless `state` has exactly `keys` (the small fixed states of schedules and scalers).
void require_keys(const nn::StateDict& state, std::initializer_list<const char*> keys, const std::string& op) {
  std::string missing, unexpected;
  for (const char* k : keys)
    if (!state.find(k)) missing += (missing.empty() ? "\"" : ", \"") + std::string(k) + "\"";
  for (const auto& entry : state)  // not a structured binding: clang 14 (the fuzz preset) cannot capture one
    if (std::none_of(keys.begin(), keys.end(), [&](const char* k) { return entry.first == k; }))
      unexpected += (unexpected.empty() ? "\"" : ", \"") + entry.first + "\"";
  if (!missing.empty() || !unexpected.empty())
    throw ValueError(op + ": missing keys: " + (missing.empty() ? "none" : missing) +
                     "; unexpected keys: " + (unexpected.empty() ? "none" : unexpected) +
                     "; pass the state_dict() of the same kind of object, unchanged");
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

void Optimizer::require_live_parameters(const char* what) const {
  for (size_t i = 0; i < parameters_.size(); ++i)
    if (std::string why = retired_reason(parameters_[i]); !why.empty())
      throw ValueError(std::string(what) + ": parameter " + std::to_string(i) + " is retired (" + why +
                       "); make the optimizer after moving the model: model.to(...), then optimizer(model.parameters())");
}

void Optimizer::zero_grad() {
  for (Array& p : parameters_) p.set_grad(Array());
}

nn::StateDict Optimizer::state_dict() const {
  // buffers() hands out the subclass's vectors for load_state_dict too; they are only read here.
  const auto named = const_cast<Optimizer*>(this)->buffers();
  nn::StateDict state;
  state.insert("lr", scalar_array(lr_, float64, cpu()));
  state.insert("step", scalar_array(step_, int64, cpu()));
  const std::string name = kind();
  state.insert("optimizer", from_data(std::vector<uint8_t>(name.begin(), name.end())));
  std::vector<uint8_t> with_state(parameters_.size(), 0);
  for (size_t i = 0; i < parameters_.size(); ++i)
    for (const auto& [buffer, values] : named)
      if ((*values)[i].defined()) with_state[i] = 1;
  state.insert("params_with_state", from_data(with_state).astype(bool_));
  for (size_t i = 0; i < parameters_.size(); ++i)
    if (with_state[i])
      for (const auto& [buffer, values] : named) state.insert(buffer + "." + std::to_string(i), (*values)[i]);
  return state;
}

void Optimizer::load_state_dict(const nn::StateDict& state) {
  const std::string me = kind();
  const std::string op = me + "::load_state_dict: ";
  auto required = [&](const char* key) -> const Array& {
    const Array* v = state.find(key);
    if (!v)
      throw ValueError(op + "the state has no \"" + key + "\" entry; pass the optimizer's own state_dict() (a " +
                       "model's state dict, or a checkpoint's optimizer entries without their prefix, are not one)");
    return *v;
  };
  const Array& kind_bytes = required("optimizer");
  const std::vector<uint8_t> bytes = kind_bytes.astype(uint8).to_vector<uint8_t>();
  const std::string saved(bytes.begin(), bytes.end());
  if (saved != me)
    throw ValueError(op + "the state is of a " + saved + " optimizer, not of a " + me +
                     "; load it into the kind that saved it (the buffers of one kind mean nothing to another)");
  const Array& mask = required("params_with_state");
  if (mask.ndim() != 1 || mask.shape(0) != static_cast<int64_t>(parameters_.size()))
    throw ValueError(op + "the state is of " + std::to_string(mask.ndim() == 1 ? mask.shape(0) : -1) +
                     " parameters but this optimizer has " + std::to_string(parameters_.size()) +
                     "; build the optimizer over the same parameters (model->parameters() of the same architecture)");
  const std::vector<uint8_t> with_state = mask.astype(uint8).to_vector<uint8_t>();
  const double lr = required("lr").item<double>();
  const int64_t step = required("step").item<int64_t>();
  // Everything is checked before anything changes: a refused state leaves the optimizer as it was.
  auto named = buffers();
  std::vector<std::string> missing, seen{"lr", "step", "optimizer", "params_with_state"};
  std::vector<std::vector<Array>> loaded(named.size(), std::vector<Array>(parameters_.size()));
  for (size_t b = 0; b < named.size(); ++b)
    for (size_t i = 0; i < parameters_.size(); ++i) {
      if (!with_state[i]) continue;
      const std::string key = named[b].first + "." + std::to_string(i);
      const Array* value = state.find(key);
      if (!value) {
        missing.push_back(key);
        continue;
      }
      seen.push_back(key);
      const Array& p = parameters_[i];
      if (!(value->shape() == p.shape()))
        throw ShapeError(op + "\"" + key + "\" has shape " + shape_str(value->shape()) + " but parameter " +
                         std::to_string(i) + " has shape " + shape_str(p.shape()) +
                         "; load the state of an optimizer over the same parameters");
      loaded[b][i] = value->to(p.device()).astype(p.dtype()).copy();
    }
  std::vector<std::string> unexpected;
  for (const auto& [key, v] : state)
    if (std::find(seen.begin(), seen.end(), key) == seen.end()) unexpected.push_back(key);
  if (!missing.empty() || !unexpected.empty()) {
    auto join = [](const std::vector<std::string>& keys) {
      std::string s;
      for (const std::string& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
      return s.empty() ? std::string("none") : s;
    };
    throw ValueError(op + "missing keys: " + join(missing) + "; unexpected keys: " + join(unexpected) +
                     "; load a state_dict() saved by a " + me + " with the same options over the same parameters, " +
                     "complete and unchanged");
  }
  lr_ = lr;
  step_ = step;
  for (size_t b = 0; b < named.size(); ++b) *named[b].second = std::move(loaded[b]);
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
  require_live_parameters("SGD::step");
  NoGradGuard no_grad;
  static const auto plain = fuse(sgd_formula, "sgd");
  static const auto heavy_ball = fuse(momentum_formula<false>, "sgd_momentum");
  static const auto nesterov = fuse(momentum_formula<true>, "sgd_nesterov");
  const SGDOptions& o = options_;
  ListsBy by;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Array& p = parameters_[i];
    const Array g = p.grad();
    if (!g.defined()) continue;
    bool first = false;
    if (o.momentum != 0) {
      require_ready_for_capture(momentum_[i].defined(), "SGD::step with momentum");
      first = !momentum_[i].defined();
      if (first) momentum_[i] = zeros_like(p);
    }
    Lists& l = by.of(p, first);
    l.params.push_back(p);
    l.grads.push_back(g);
    if (o.momentum != 0) l.first.push_back(momentum_[i]);
  }
  for (Lists& l : by.all()) {
    if (o.momentum == 0) {
      plain.each({l.params}, l.params, l.grads, lr_, o.weight_decay);
      continue;
    }
    // A buffer made in this step starts as d (v = 0, keep = 1), as PyTorch's starts as the first gradient.
    const double keep = l.variant == 1 ? 1.0 : 1.0 - o.dampening;
    if (o.nesterov)
      nesterov.each({l.params, l.first}, l.params, l.grads, l.first, lr_, o.momentum, keep, o.weight_decay);
    else
      heavy_ball.each({l.params, l.first}, l.params, l.grads, l.first, lr_, o.momentum, keep, o.weight_decay);
  }
  ++step_;
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
  require_live_parameters(decoupled_ ? "AdamW::step" : "Adam::step");
  NoGradGuard no_grad;
  static const auto update = fuse(adam_formula, "adam");
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
  ListsBy by;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Array& p = parameters_[i];
    const Array g = p.grad();
    if (!g.defined()) continue;
    if (!exp_avg_[i].defined()) {
      require_ready_for_capture(false, "Adam::step (its first step)");
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
    }
    Lists& l = by.of(p);
    l.params.push_back(p);
    l.grads.push_back(g);
    l.first.push_back(exp_avg_[i]);
    l.second.push_back(exp_avg_sq_[i]);
  }
  std::map<std::string, bool> corrected;  // devices whose step count advanced in this call
  for (Lists& l : by.all()) {
    if (!o.capturable) {
      update.each({l.params, l.first, l.second}, l.params, l.grads, l.first, l.second, o.beta1, 1.0 - o.beta1, o.beta2,
                  1.0 - o.beta2, lr_ / bc1, std::sqrt(bc2), o.eps, l2, decay);
      continue;
    }
    const Device d = l.device;
    DeviceStep& s = device_steps_[d.str()];
    if (!corrected[d.str()]) {
      if (!s.count.defined()) {
        require_ready_for_capture(false, "Adam::step (capturable, its first step)");
        s.count = full({}, t - 1.0, float64, d);
        s.step_size = empty({}, float64, d);
        s.bc2_sqrt = empty({}, float64, d);
        s.step_size32 = empty({}, float32, d);
        s.bc2_sqrt32 = empty({}, float32, d);
      }
      corrections.out({s.count, s.step_size, s.bc2_sqrt, s.step_size32, s.bc2_sqrt32}, s.count, o.beta1, o.beta2, lr_);
      corrected[d.str()] = true;
    }
    // The corrections in the parameters' dtype, as the host path rounds its scalars.
    const DType dtype = l.params.front().dtype();
    const Array step_size = dtype == float32 ? s.step_size32 : s.step_size.astype(dtype);
    const Array bc2_sqrt = dtype == float32 ? s.bc2_sqrt32 : s.bc2_sqrt.astype(dtype);
    update.each({l.params, l.first, l.second}, l.params, l.grads, l.first, l.second, o.beta1, 1.0 - o.beta1, o.beta2,
                1.0 - o.beta2, step_size, bc2_sqrt, o.eps, l2, decay);
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
  return state;
}

void Adam::load_state_dict(const nn::StateDict& state) {
  Optimizer::load_state_dict(state);
  device_steps_.clear();  // made again from step_ at the next step
}

AdamW::AdamW(std::vector<Array> parameters, AdamOptions options) : Adam(std::move(parameters), options, true) {}

// ---------------------------------------------------------------- clipping
Array clip_grad_norm(const std::vector<Array>& parameters, double max_norm) {
  NoGradGuard no_grad;
  // The gradients by device and dtype (the lists the scaling below runs over); each gradient's sum of squares in
  // one fused kernel, written into its slot of one vector per list; the vectors summed on the first list's device.
  static const auto squares_of = fuse([](auto g) { return sum(square(astype(g, float32))); }, "grad_norm_squares");
  ListsBy by;
  for (const Array& p : parameters)
    if (Array g = p.grad(); g.defined()) by.of(g).grads.push_back(g);
  if (by.all().empty())
    return parameters.empty() ? zeros({}, float32, cpu()) : zeros({}, float32, parameters[0].device());
  Array total;
  for (const Lists& l : by.all()) {
    const Array squares = empty({static_cast<int64_t>(l.grads.size())}, float32, l.device);
    for (size_t i = 0; i < l.grads.size(); ++i) squares_of.out({squares[static_cast<int64_t>(i)]}, l.grads[i]);
    const Array part = sum(squares).to(by.all().front().device);
    total = total.defined() ? total + part : part;
  }
  total = sqrt(total);
  static const auto scale_by = fuse([](auto g, auto s) { return g * s; }, "clip_grad_norm");
  const Array scale = minimum(divide(max_norm, total + 1e-6), 1.0);
  for (Lists& l : by.all()) scale_by.each({l.grads}, l.grads, scale.to(l.device).astype(l.grads.front().dtype()));
  return total;
}

// ---------------------------------------------------------------- loss scaling
GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || !(options.growth_factor > 1) || !(options.backoff_factor > 0) ||
      !(options.backoff_factor < 1) || options.growth_interval <= 0)
    throw ValueError(
        "GradScaler: init_scale must be positive, growth_factor above 1, backoff_factor in (0, 1) and "
        "growth_interval positive");
}

Array GradScaler::scale(const Array& loss) const { return options_.enabled ? loss * scale_ : loss; }

void GradScaler::unscale(Optimizer& optimizer) {
  if (!options_.enabled || unscaled_) return;
  NoGradGuard no_grad;
  static const auto unscale_by = fuse([](auto g, auto inverse) { return g * inverse; }, "grad_scaler_unscale");
  std::map<std::string, Array> bad;  // per device: how many gradient values are inf or NaN
  ListsBy by;
  for (const Array& p : optimizer.parameters()) {
    const Array g = p.grad();
    if (!g.defined()) continue;
    const Array count = sum(logical_not(isfinite(g)).astype(int64));
    Array& total = bad[g.device().str()];
    total = total.defined() ? total + count : count;
    by.of(g).grads.push_back(g);
  }
  for (Lists& l : by.all()) unscale_by.each({l.grads}, l.grads, 1.0 / scale_);
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
  if (found_inf_) {
    ++skipped_steps_;
    return false;
  }
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

nn::StateDict GradScaler::state_dict() const {
  nn::StateDict state;
  state.insert("scale", scalar_array(scale_, float64, cpu()));
  state.insert("growth_tracker", scalar_array(growth_tracker_, int64, cpu()));
  return state;
}

void GradScaler::load_state_dict(const nn::StateDict& state) {
  require_keys(state, {"scale", "growth_tracker"}, "GradScaler::load_state_dict");
  scale_ = state.at("scale").item<double>();
  growth_tracker_ = state.at("growth_tracker").item<int64_t>();
  unscaled_ = found_inf_ = false;
}

// ---------------------------------------------------------------- schedules
void LRScheduler::step() {
  ++count_;
  optimizer_->set_lr(lr_at(count_));
}

nn::StateDict LRScheduler::state_dict() const {
  nn::StateDict state;
  state.insert("count", scalar_array(count_, int64, cpu()));
  state.insert("base_lr", scalar_array(base_lr_, float64, cpu()));
  return state;
}

void LRScheduler::load_state_dict(const nn::StateDict& state) {
  require_keys(state, {"count", "base_lr"}, "LRScheduler::load_state_dict");
  count_ = state.at("count").item<int64_t>();
  base_lr_ = state.at("base_lr").item<double>();
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
