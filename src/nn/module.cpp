// nn::Module (parameter/buffer registries, device and dtype moves, state dicts) and the layers.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/conv.hpp"
#include "kiln/fuse.hpp"
#include "kiln/indexing.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"

namespace kiln::nn {

// ---------------------------------------------------------------- StateDict
void StateDict::insert(std::string name, Array value) {
  for (auto& [key, v] : items_)
    if (key == name) {
      v = std::move(value);
      return;
    }
  items_.emplace_back(std::move(name), std::move(value));
}

const Array* StateDict::find(const std::string& name) const {
  for (const auto& [key, v] : items_)
    if (key == name) return &v;
  return nullptr;
}

const Array& StateDict::at(const std::string& name) const {
  if (const Array* v = find(name)) return *v;
  throw ValueError("StateDict: no entry named \"" + name + "\" (it has " + std::to_string(items_.size()) +
                   " entries); check the key, or the model the state came from");
}

// ---------------------------------------------------------------- Module
Array Module::forward(const Array&) {
  throw ValueError(name() + " does not take one array: call its forward(...) with the inputs it declares (a module "
                   "with several inputs or outputs cannot be a step of a Sequential)");
}

namespace {
/// `text` with every line after the first indented by two spaces (a child's repr inside its parent's).
std::string indent_lines(const std::string& text) {
  std::string out;
  for (char c : text) {
    out += c;
    if (c == '\n') out += "  ";
  }
  return out;
}
}  // namespace

std::string Module::repr() const {
  if (children_.empty()) return name();
  std::string s = name() + "(\n";
  for (const auto& [key, child] : children_) s += "  (" + key + "): " + indent_lines(child->repr()) + "\n";
  return s + ")";
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const auto& [name, p] : named_parameters())
    if (!trainable_only || p.requires_grad()) n += p.size();
  return n;
}

Array checkpoint(std::shared_ptr<Module> module, const Array& x) {
  if (!module) throw ValueError("nn::checkpoint: the module is null");
  return autograd::checkpoint([module](const std::vector<Array>& in) { return (*module)(in[0]); }, {x});
}

std::ostream& operator<<(std::ostream& out, const Module& module) {
  const int64_t all = module.num_parameters(), trainable = module.num_parameters(true);
  out << module.repr() << "\n" << all << " parameters";
  if (trainable != all) out << " (" << trainable << " trainable)";
  return out;
}

Array& Module::register_parameter(std::string name, Array value) {
  if (!value.defined()) throw ValueError("register_parameter(\"" + name + "\"): the array is undefined");
  for (const auto& [key, v] : parameters_)
    if (key == name) throw ValueError("register_parameter: \"" + name + "\" is already registered");
  value = value.detach();
  value.set_requires_grad();
  parameters_.emplace_back(std::move(name), std::move(value));
  return parameters_.back().second;
}

Array& Module::register_buffer(std::string name, Array value) {
  buffers_.emplace_back(std::move(name), value.detach());
  return buffers_.back().second;
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  auto it = std::find_if(children_.begin(), children_.end(), [&](const auto& c) { return c.first == name; });
  if (it == children_.end()) throw ValueError(this->name() + ": no child module named '" + name + "' to replace");
  if (module)
    it->second = std::move(module);
  else
    children_.erase(it);
}

Array& Module::parameter(const std::string& name) {
  for (auto& [key, v] : parameters_)
    if (key == name) return v;
  throw ValueError(this->name() + ": no parameter named \"" + name + "\"");
}

Array& Module::buffer(const std::string& name) {
  for (auto& [key, v] : buffers_)
    if (key == name) return v;
  throw ValueError(this->name() + ": no buffer named \"" + name + "\"");
}

void Module::visit(const std::string& prefix, const std::function<void(const std::string&, Module&)>& f) {
  f(prefix, *this);
  for (auto& [name, child] : children_) child->visit(prefix + name + ".", f);
}

std::vector<std::pair<std::string, Array>> Module::collect(bool recurse, Entries Module::*which) const {
  std::vector<std::pair<std::string, Array>> out;
  auto* self = const_cast<Module*>(this);
  auto add = [&](const std::string& prefix, Module& m) {
    for (const auto& [name, a] : m.*which) out.emplace_back(prefix + name, a);
  };
  if (recurse)
    self->visit("", add);
  else
    add("", *self);
  return out;
}

std::vector<std::pair<std::string, Array>> Module::named_parameters(bool recurse) const {
  return collect(recurse, &Module::parameters_);
}

std::vector<std::pair<std::string, Array>> Module::named_buffers(bool recurse) const {
  return collect(recurse, &Module::buffers_);
}

std::vector<Array> Module::parameters(bool recurse) const {
  std::vector<Array> out;
  for (auto& [name, p] : named_parameters(recurse)) out.push_back(p);
  return out;
}

namespace {
/// A parameter moved or converted: a new leaf that requires grad, its gradient converted alike. The old leaf is
/// retired (kiln::retire), so a kept copy of it fails loudly instead of training an array nobody reads.
Array moved_parameter(const Array& p, const std::string& name, const std::string& how,
                      const std::function<Array(const Array&)>& convert) {
  NoGradGuard no_grad;
  Array moved = convert(p.detach());
  if (moved.shares_storage(p) && moved.dtype() == p.dtype()) return p;  // already there
  Array grad = p.grad();
  moved = moved.detach();
  moved.set_requires_grad(p.requires_grad());
  if (grad.defined()) moved.set_grad(convert(grad));
  retire(p, "parameter \"" + name + "\" was replaced by " + how +
                "; use the module's entry (the reference register_parameter returned, module.parameter(name) or "
                "named_parameters()), not a copy of the Array kept from before, and make optimizers after moving "
                "the model");
  return moved;
}
}  // namespace

Module& Module::to(Device device) {
  const std::string how = "Module::to(" + device.str() + ")";
  visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, p] : m.parameters_)
      p = moved_parameter(p, prefix + name, how, [&](const Array& a) { return a.to(device); });
    for (auto& [name, b] : m.buffers_) b = b.to(device);
    m.parameters_moved();
  });
  return *this;
}

Module& Module::to(DType dtype) {
  if (!is_floating(dtype))
    throw DTypeError("Module::to: parameters must stay floating, got dtype " + std::string(dtype_name(dtype)));
  const std::string how = "Module::to(" + std::string(dtype_name(dtype)) + ")";
  visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, p] : m.parameters_)
      p = moved_parameter(p, prefix + name, how, [&](const Array& a) { return a.astype(dtype); });
    for (auto& [name, b] : m.buffers_)
      if (is_floating(b.dtype())) b = b.astype(dtype);
    m.parameters_moved();
  });
  return *this;
}

Module& Module::to_channels_last() {
  visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [name, p] : m.parameters_)
      if (p.ndim() == 4)
        p = moved_parameter(p, prefix + name, "Module::to_channels_last()",
                            [](const Array& a) { return kiln::to_channels_last(a); });
  });
  return *this;
}

Module& Module::train(bool on) {
  visit("", [&](const std::string&, Module& m) { m.training_ = on; });
  return *this;
}

void Module::zero_grad() {
  visit("", [&](const std::string&, Module& m) {
    for (auto& [name, p] : m.parameters_) p.set_grad(Array());
  });
}

StateDict Module::state_dict() const {
  StateDict state;
  for (auto& [name, p] : named_parameters()) state.insert(name, p.detach());
  for (auto& [name, b] : named_buffers()) state.insert(name, b);
  return state;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  std::vector<std::string> missing, seen;
  NoGradGuard no_grad;
  auto load = [&](const std::string& key, Array& target) {
    const Array* value = state.find(key);
    if (!value) {
      missing.push_back(key);
      return;
    }
    seen.push_back(key);
    if (!(value->shape() == target.shape()))
      throw ShapeError("load_state_dict: \"" + key + "\" has shape " + shape_str(value->shape()) +
                       " in the state but " + shape_str(target.shape()) + " in the model (" + name() +
                       "); load a state saved from a model of the same architecture");
    target.assign(value->to(target.device()));
  };
  visit("", [&](const std::string& prefix, Module& m) {
    for (auto& [n, p] : m.parameters_) load(prefix + n, p);
    for (auto& [n, b] : m.buffers_) load(prefix + n, b);
  });
  if (!strict) return;
  std::vector<std::string> unexpected;
  for (const auto& [key, v] : state)
    if (std::find(seen.begin(), seen.end(), key) == seen.end()) unexpected.push_back(key);
  if (missing.empty() && unexpected.empty()) return;
  auto join = [](const std::vector<std::string>& keys) {
    std::string s;
    for (const std::string& k : keys) s += (s.empty() ? "\"" : ", \"") + k + "\"";
    return s.empty() ? std::string("none") : s;
  };
  throw ValueError("load_state_dict: missing keys: " + join(missing) + "; unexpected keys: " + join(unexpected) +
                   "; pass strict=false to load the matching entries only");
}

// ---------------------------------------------------------------- layers
Sequential::Sequential(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  if (!module) throw ValueError("Sequential::push_back: a null module");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  if (!module) throw ValueError("ModuleList::push_back: a null module");
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Module& ModuleList::operator[](int64_t i) const {
  const auto n = static_cast<int64_t>(modules_.size());
  if (i < -n || i >= n)
    throw ValueError("ModuleList: index " + std::to_string(i) + " is out of range for " + std::to_string(n) +
                     " modules");
  return *modules_[static_cast<size_t>(i < 0 ? i + n : i)];
}

void ModuleDict::insert(const std::string& key, std::shared_ptr<Module> module) {
  if (!module) throw ValueError("ModuleDict::insert(\"" + key + "\"): a null module");
  if (key.empty() || key.find('.') != std::string::npos)
    throw ValueError("ModuleDict::insert: key \"" + key + "\" must be non-empty and have no '.' (it is a state-dict "
                     "name part)");
  if (contains(key))
    replace_module(key, std::move(module));
  else
    register_module(key, std::move(module));
}

bool ModuleDict::contains(const std::string& key) const {
  for (const auto& [name, m] : named_children())
    if (name == key) return true;
  return false;
}

Module& ModuleDict::operator[](const std::string& key) const {
  for (const auto& [name, m] : named_children())
    if (name == key) return *m;
  std::string keys;
  for (const std::string& k : this->keys()) keys += (keys.empty() ? "\"" : ", \"") + k + "\"";
  throw ValueError("ModuleDict: no module named \"" + key + "\" (keys: " + (keys.empty() ? "none" : keys) + ")");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> out;
  for (const auto& [name, m] : named_children()) out.push_back(name);
  return out;
}

Array Sequential::forward(const Array& x) {
  Array y = x;
  for (auto& m : modules_) y = (*m)(y);  // through operator(): anomaly mode names the child
  return y;
}

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, DType dtype, std::optional<Device> device)
    : in_(in_features), out_(out_features), has_bias_(bias) {
  if (in_features <= 0 || out_features <= 0)
    throw ValueError("Linear: in_features and out_features must be positive, got " + std::to_string(in_features) +
                     " and " + std::to_string(out_features));
  Array& w = register_parameter("weight", empty({out_features, in_features}, dtype, device));
  init::kaiming_uniform(w, std::sqrt(5.0));
  if (bias) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform(register_parameter("bias", empty({out_features}, dtype, device)), -bound, bound);
  }
}

Array Linear::forward(const Array& x) {
  if (x.ndim() == 0 || x.shape(-1) != in_)
    throw ShapeError(name() + ": the input has shape " + shape_str(x.shape()) + "; its last axis must have " +
                     std::to_string(in_) + " features");
  const Array xa = autocast_low(x), wa = autocast_low(parameter("weight"));
  // As PyTorch: no silent promotion of a float64 or integer input (autocast casts both sides alike).
  if (xa.dtype() != wa.dtype())
    throw DTypeError(name() + ": the input is " + std::string(dtype_name(x.dtype())) + " but the weight is " +
                     std::string(dtype_name(wa.dtype())) + "; convert the input (x.astype(" +
                     std::string(dtype_name(wa.dtype())) + ")) or the module (module.to(" +
                     std::string(dtype_name(x.dtype())) + "))");
  // One 2-d product over every position (addmm with the bias: cuBLASLt's bias epilogue on a GPU). The weight's
  // gradient is made in its own layout (g^T x: the core's product backward sees the transposed weight) and no
  // work is done for inputs without a gradient.
  Shape shape = x.shape();
  shape.back() = out_;
  const bool flat = x.ndim() == 2;
  const Array x2 = flat ? xa : xa.reshape({-1, in_});
  const Array y = has_bias_ ? addmm(autocast_low(parameter("bias")), x2, wa.T()) : matmul(x2, wa.T());
  return flat ? y : y.reshape(shape);
}

std::string Linear::name() const {
  return "Linear(in_features=" + std::to_string(in_) + ", out_features=" + std::to_string(out_) +
         ", bias=" + (has_bias_ ? "true" : "false") + ")";
}

Array ReLU::forward(const Array& x) { return relu(x); }
Array Sigmoid::forward(const Array& x) { return sigmoid(x); }
Array Tanh::forward(const Array& x) { return tanh(x); }

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  if (approximate_ != "none" && approximate_ != "tanh")
    throw ValueError("GELU: approximate must be \"none\" or \"tanh\", got \"" + approximate_ + "\"");
}
Array GELU::forward(const Array& x) { return approximate_ == "tanh" ? gelu_tanh(x) : gelu(x); }

Dropout::Dropout(double p) : p_(p) {
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError("Dropout: p must be in [0, 1], got " + std::to_string(p));
}

Array Dropout::forward(const Array& x) {
  if (!is_training() || p_ == 0.0) return x;
  if (p_ == 1.0) return x * 0.0;
  // The kept elements' scale, or 0, in one fused kernel after the draw; x * mask records one multiply, whose
  // gradient is g * mask (PyTorch's formulation: a NaN or infinity in a dropped element stays NaN).
  static const auto mask_of =
      fuse([](auto u, auto p, auto scale) { return (u >= p).astype(float32) * scale; }, "dropout_mask");
  Array mask = mask_of(random::uniform(x.shape(), 0.0, 1.0, float32, x.device()), p_, 1.0 / (1.0 - p_));
  if (mask.dtype() != x.dtype()) mask = mask.astype(x.dtype());
  return x * mask;
}

std::string Dropout::name() const { return "Dropout(p=" + std::to_string(p_) + ")"; }

Array Unflatten::forward(const Array& x) {
  const int64_t axis = normalize_axis(dim_, x.ndim(), "Unflatten");
  int64_t product = 1;
  for (int64_t s : sizes_) product *= s;
  if (product != x.shape(axis))
    throw ShapeError(name() + ": axis " + std::to_string(axis) + " of the input has " + std::to_string(x.shape(axis)) +
                     " elements, the sizes make " + std::to_string(product));
  Shape shape;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (d != axis) {
      shape.push_back(x.shape(d));
      continue;
    }
    for (int64_t s : sizes_) shape.push_back(s);
  }
  return x.reshape(shape);
}

Array Flatten::forward(const Array& x) {
  if (x.ndim() == 0) return x.reshape({1});
  const int64_t first = normalize_axis(start_, x.ndim(), "Flatten"), last = normalize_axis(end_, x.ndim(), "Flatten");
  if (first > last) return x;
  Shape shape;
  int64_t merged = 1;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (d < first || d > last) {
      if (d == last + 1) shape.push_back(merged);
      shape.push_back(x.shape(d));
    } else {
      merged *= x.shape(d);
    }
  }
  if (last == x.ndim() - 1) shape.push_back(merged);
  return x.reshape(shape);
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim, DType dtype, std::optional<Device> device)
    : num_(num_embeddings), dim_(embedding_dim) {
  init::normal(register_parameter("weight", empty({num_embeddings, embedding_dim}, dtype, device)), 0.0, 1.0);
}

Array Embedding::forward(const Array& indices) {
  if (is_floating(indices.dtype()) || indices.dtype() == bool_)
    throw DTypeError(name() + ": indices must be integers, got " + std::string(dtype_name(indices.dtype())));
  return take(parameter("weight"), indices, 0);
}

std::string Embedding::name() const { return "Embedding(" + std::to_string(num_) + ", " + std::to_string(dim_) + ")"; }

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, DType dtype,
                     std::optional<Device> device)
    : shape_(std::move(normalized_shape)), eps_(eps), affine_(elementwise_affine) {
  if (affine_) {
    register_parameter("weight", ones(shape_, dtype, device));
    register_parameter("bias", zeros(shape_, dtype, device));
  }
}

namespace {
/// The last axes of `x` that a norm over `shape` reduces; ShapeError naming `who` unless x ends with `shape`.
Shape normalized_axes(const std::string& who, const Array& x, const Shape& shape) {
  const int64_t k = static_cast<int64_t>(shape.size());
  bool fits = x.ndim() >= k;
  for (int64_t i = 0; fits && i < k; ++i) fits = x.shape(x.ndim() - k + i) == shape[static_cast<size_t>(i)];
  if (!fits)
    throw ShapeError(who + ": the input has shape " + shape_str(x.shape()) + "; its last axes must be " +
                     shape_str(shape));
  Shape axes;
  for (int64_t d = x.ndim() - k; d < x.ndim(); ++d) axes.push_back(d);
  return axes;
}
}  // namespace

namespace {

/// Layer norm of rows (M, D) with weight and bias (D,) (undefined: 1 and 0), as one function: a forward of one
/// staged kernel (each row's mean, then its variance about it, then the normalised, scaled, shifted row; the mean
/// and 1/std kept for backward) and a backward of layer_norm_backward (one pass over x and g on a GPU; a rows
/// kernel and column reductions elsewhere) instead of the ~10 kernels and (M, D) temporaries of the composed ops.
Array layer_norm_rows(const Array& x, const Array& w, const Array& b, double eps) {
  static const auto forward = fuse(
      [](auto x, auto w, auto b, auto eps) {
        auto mu = mean(x, 1, true);
        auto c = x - mu;
        auto rstd = 1.0 / sqrt(mean(c * c, 1, true) + eps);
        return std::tuple{c * rstd * w + b, mu, rstd};
      },
      "layer_norm");
  const bool affine = w.defined();
  const AutogradFunction f{
      "LayerNormBackward",
      [eps, affine](const std::vector<Array>& in, std::vector<Array>& saved) {
        auto [y, mu, rstd] = affine ? forward(in[0], in[1], in[2], eps) : forward(in[0], 1.0, 0.0, eps);
        saved = {in[0], affine ? in[1] : Array(), mu, rstd};
        return y;
      },
      [affine](const Array& g, const std::vector<Array>& saved, const std::vector<bool>& needs) {
        const bool wants_w = affine && needs[1], wants_b = affine && needs[2];
        LayerNormGrads r = layer_norm_backward(g, saved[0], saved[1], saved[2], saved[3],
                                               {.input = needs[0], .weight = wants_w, .bias = wants_b});
        if (!affine) return std::vector<Array>{r.input};
        return std::vector<Array>{r.input, r.weight, r.bias};
      }};
  return affine ? f.apply({x, w, b}) : f.apply({x});
}

}  // namespace

Array LayerNorm::forward(const Array& x_in) {
  const Array x = autocast_float32(x_in);
  const Shape axes = normalized_axes(name(), x, shape_);
  int64_t d = 1;
  for (int64_t n : shape_) d *= n;
  if (d == 0 || x.size() == 0) {  // nothing to normalise: the composed ops give the empty (or NaN) result
    const Array mu = mean(x, axes, true);
    const Array centred = x - mu;
    const Array y = centred / sqrt(mean(square(centred), axes, true) + eps_);
    return affine_ ? y * parameter("weight") + parameter("bias") : y;
  }
  const Array rows = x.reshape({x.size() / d, d});
  if (!affine_) return layer_norm_rows(rows, Array(), Array(), eps_).reshape(x.shape());
  return layer_norm_rows(rows, parameter("weight").reshape({d}), parameter("bias").reshape({d}), eps_)
      .reshape(x.shape());
}

std::string LayerNorm::name() const { return "LayerNorm(" + shape_str(shape_) + ")"; }

// ---------------------------------------------------------------- RMSNorm
RMSNorm::RMSNorm(Shape normalized_shape, std::optional<double> eps, bool elementwise_affine, DType dtype,
                 std::optional<Device> device)
    : shape_(std::move(normalized_shape)), eps_(eps), affine_(elementwise_affine) {
  if (eps_ && !(*eps_ >= 0.0)) throw ValueError("RMSNorm: eps must be >= 0, got " + std::to_string(*eps_));
  if (affine_) register_parameter("weight", ones(shape_, dtype, device));
}

Array RMSNorm::forward(const Array& x_in) {
  const Array x = autocast_float32(x_in);
  const Shape axes = normalized_axes(name(), x, shape_);
  const double eps = eps_ ? *eps_
                     : x.dtype() == float64 ? std::numeric_limits<double>::epsilon()
                                            : static_cast<double>(std::numeric_limits<float>::epsilon());
  const Array y = x / sqrt(square(x).mean(axes, true) + eps);
  return affine_ ? y * parameter("weight") : y;
}

std::string RMSNorm::name() const {
  return "RMSNorm(" + shape_str(shape_) + (eps_ ? ", eps=" + std::to_string(*eps_) : std::string()) +
         (affine_ ? "" : ", elementwise_affine=false") + ")";
}

}  // namespace kiln::nn
