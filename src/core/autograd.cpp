// The core's autograd state: grad mode, the recorder primitives open, in-place checks, and the Array
// members of kiln/autograd.hpp. The engine is src/autograd (reached through autograd_hook()).
#include "core/autograd.hpp"

#include <string>

#include "kiln/autograd.hpp"
#include "kiln/ops.hpp"

namespace kiln::detail {

namespace {
thread_local bool t_grad_mode = true;
thread_local GradProbe* t_probe = nullptr;

AutogradMeta& meta_of(Array& a) {
  if (!a.autograd_meta()) a.set_autograd_meta(std::make_shared<AutogradMeta>());
  return *a.autograd_meta();
}
}  // namespace

bool grad_mode() { return t_grad_mode; }
void set_grad_mode(bool enabled) { t_grad_mode = enabled; }

GradProbe::GradProbe() : previous_(t_probe) { t_probe = this; }
GradProbe::~GradProbe() {
  t_probe = previous_;
  if (previous_ && seen_) previous_->note();
}

GradRecorder::GradRecorder(std::initializer_list<const Array*> inputs) {
  if (!t_grad_mode && !t_probe) return;
  for (const Array* a : inputs)
    if (a && requires_grad(*a)) active_ = true;
  start();
}

GradRecorder::GradRecorder(const std::vector<Array>& inputs) {
  if (!t_grad_mode && !t_probe) return;
  for (const Array& a : inputs)
    if (requires_grad(a)) active_ = true;
  start();
}

GradRecorder::GradRecorder(std::initializer_list<const Operand*> operands, int) {
  if (!t_grad_mode && !t_probe) return;
  for (const Operand* o : operands)
    if (o->is_array() && requires_grad(o->array())) active_ = true;
  start();
}

void GradRecorder::start() {
  if (!t_grad_mode) {  // a probe's op: noted, nothing recorded
    if (active_) t_probe->note();
    active_ = false;
    return;
  }
  if (active_) t_grad_mode = false;  // the op's internal ops record nothing
}

GradRecorder::~GradRecorder() {
  if (active_) t_grad_mode = true;
}

void note_inplace_write(const Array& dst, const char* op) {
  if (t_grad_mode && requires_grad(dst))
    throw ValueError(
        std::string(op) + ": writes in place into an array that requires grad (" +
        (dst.is_leaf() ? std::string("a leaf marked with set_requires_grad") : "the result of " + dst.grad_fn_name()) +
        "); autograd does not record in-place writes. Write the op out of place (y = y + x), or "
        "update parameters under a NoGradGuard");
  if (dst.storage()) dst.storage()->bump_version();
}

SavedArray::SavedArray(const Array& a) : data_(a.detach()), version_(a.storage() ? a.storage()->version() : 0) {}

const Array& SavedArray::get(const std::string& node) const {
  if (data_.defined() && data_.storage()->version() != version_)
    throw ValueError(node + ": an array it saved for the backward pass (shape " + shape_str(data_.shape()) + ", " +
                     std::string(dtype_name(data_.dtype())) + ") was modified in place afterwards (version " +
                     std::to_string(data_.storage()->version()) + ", saved at " + std::to_string(version_) +
                     "); its gradient would be wrong. Modify a copy() instead, or do the in-place write before "
                     "using the array");
  return data_;
}

void record(Array& out, std::shared_ptr<Node> node, const std::vector<const Array*>& inputs) {
  autograd_hook().record(node, inputs, out);
}

void record(Array& out, std::shared_ptr<Node> node, std::initializer_list<const Array*> inputs) {
  record(out, std::move(node), std::vector<const Array*>(inputs));
}

void record(Array& out, std::shared_ptr<Node> node, const std::vector<Array>& inputs) {
  std::vector<const Array*> pointers;
  pointers.reserve(inputs.size());
  for (const Array& a : inputs) pointers.push_back(&a);
  record(out, std::move(node), pointers);
}

void throw_not_differentiable(const std::string& op, const char* fix) {
  throw DTypeError(op + ": has no gradient, and an input requires grad; " + fix +
                   " (or detach() the input, or run it under a NoGradGuard)");
}

void reject_grad(std::initializer_list<const Array*> inputs, const char* op, const char* fix) {
  if (!t_grad_mode) return;
  for (const Array* a : inputs)
    if (a && requires_grad(*a))
      throw DTypeError(std::string(op) + ": has no gradient, and an input requires grad; " + fix +
                       " (or detach() the input, or run it under a NoGradGuard)");
}

}  // namespace kiln::detail

namespace kiln {

using detail::AutogradMeta;

bool Array::requires_grad() const { return detail::requires_grad(*this); }

Array& Array::set_requires_grad(bool enabled) {
  require_defined("set_requires_grad");
  if (autograd_ && autograd_->grad_fn) {
    if (enabled) return *this;
    throw ValueError("set_requires_grad(false): the array is the result of " + grad_fn_name() +
                     ", not a leaf; use detach() for a copy of the handle cut from the graph");
  }
  if (enabled && !is_inexact(dtype_))
    throw DTypeError("set_requires_grad: only floating and complex arrays can require gradients, got dtype " +
                     std::string(dtype_name(dtype_)) + "; convert it first with astype(float32)");
  if (enabled) {
    // A leaf that overlaps itself (a broadcast view) would accumulate one gradient per alias.
    for (size_t d = 0; d < shape_.size(); ++d)
      if (strides_[d] == 0 && shape_[d] > 1)
        throw ValueError("set_requires_grad: the array is a broadcast view (stride 0 on axis " + std::to_string(d) +
                         ") whose elements alias each other; mark a copy() of it instead");
  }
  detail::meta_of(*this).requires_grad = enabled;
  return *this;
}

Array Array::grad() const { return autograd_ ? autograd_->grad : Array(); }

void Array::set_grad(const Array& grad) {
  require_defined("set_grad");
  if (grad.defined()) {
    if (!(grad.shape() == shape_) || grad.dtype() != dtype_ || grad.device() != device())
      throw ValueError("set_grad: the gradient must match the array: shape " + shape_str(shape_) + ", dtype " +
                       std::string(dtype_name(dtype_)) + ", device " + device().str() + "; got shape " +
                       shape_str(grad.shape()) + ", dtype " + std::string(dtype_name(grad.dtype())) + ", device " +
                       grad.device().str());
  }
  if (!autograd_ && !grad.defined()) return;
  detail::meta_of(*this).grad = grad.defined() ? grad.detach() : Array();
}

void Array::backward() const { backward(Array(), false); }

void Array::backward(const Array& gradient, bool retain_graph) const {
  require_defined("backward");
  detail::autograd_hook().backward(*this, gradient, retain_graph);
}

Array Array::detach() const {
  Array out = *this;
  out.autograd_.reset();
  return out;
}

Array AutogradFunction::apply(const std::vector<Array>& inputs) const {
  const AutogradFunction& f = *this;
  if (!f.forward || !f.backward)
    throw ValueError("AutogradFunction::apply(" + f.name + "): the function needs both a forward and a backward");
  detail::GradRecorder recorder(inputs);
  std::vector<Array> saved;
  Array out = f.forward(inputs, saved);
  if (!out.defined()) throw ValueError("AutogradFunction::apply(" + f.name + "): forward returned an undefined array");
  if (recorder) {
    out = out.detach();  // a fresh handle: the node attaches to it, never to an input forward returned
    std::vector<detail::SavedArray> kept(saved.begin(), saved.end());
    auto backward = [label = f.name, fn = f.backward](const detail::Node& node, const Array& g) {
      std::vector<Array> arrays;
      arrays.reserve(node.saved.size());
      // An array saved undefined (an optional operand the forward did not have) comes back undefined.
      for (size_t i = 0; i < node.saved.size(); ++i) arrays.push_back(node.saved_array(i));
      std::vector<bool> needs(node.next.size());
      for (size_t i = 0; i < needs.size(); ++i) needs[i] = node.needs(i);
      std::vector<Array> r = fn(g, arrays, needs);
      if (r.size() != node.next.size())
        throw ValueError(label + ": backward returned " + std::to_string(r.size()) + " gradients for " +
                         std::to_string(node.next.size()) +
                         " inputs; return one per input (an undefined Array for none)");
      return r;
    };
    detail::record(out, std::make_shared<detail::Node>(f.name, std::move(backward), std::move(kept)), inputs);
  }
  return out;
}

bool Array::is_leaf() const { return !autograd_ || !autograd_->grad_fn; }

Array& Array::retain_grad() {
  if (!requires_grad())
    throw ValueError(
        "retain_grad: the array does not require grad, so it never gets a gradient; call it on a "
        "result computed from arrays marked with set_requires_grad()");
  if (autograd_->grad_fn) autograd_->retains_grad = true;
  return *this;
}

void Array::register_hook(std::function<Array(const Array&)> hook) {
  if (!requires_grad())
    throw ValueError(
        "register_hook: the array does not require grad, so the hook would never run; mark it with "
        "set_requires_grad() first");
  if (autograd_->grad_fn)
    autograd_->grad_fn->pre_hooks.push_back(std::move(hook));
  else
    autograd_->hooks.push_back(std::move(hook));
}

void Array::register_post_accumulate_grad_hook(std::function<void(const Array&)> hook) {
  if (!requires_grad() || !is_leaf())
    throw ValueError(
        "register_post_accumulate_grad_hook: only a leaf that requires grad accumulates a gradient; "
        "register it on a parameter (set_requires_grad())");
  autograd_->post_accumulate_hooks.push_back(std::move(hook));
}

std::string Array::grad_fn_name() const {
  return autograd_ && autograd_->grad_fn ? autograd_->grad_fn->name : std::string();
}

}  // namespace kiln
