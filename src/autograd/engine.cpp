// The autograd engine: linking each recorded node to the nodes of its inputs, gradient accumulation into
// leaves, and backward(). Which op a node belongs to is none of its business: each op records its own
// backward (core/autograd.hpp's `record`), so adding a primitive never touches this file.
#include "autograd/engine.hpp"

#include <atomic>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/autograd.hpp"
#include "kiln/autograd.hpp"
#include "kiln/complex.hpp"
#include "kiln/conv.hpp"
#include "kiln/ops.hpp"

namespace kiln::autograd {

using detail::AutogradMeta;
using detail::Edge;
using detail::Node;

namespace {

std::atomic<uint64_t> g_sequence{0};
std::atomic<bool> g_anomaly{false};
/// The labels of this thread's open AnomalyScopes, outermost first.
thread_local std::vector<std::string> t_anomaly_scopes;

std::string anomaly_context() {
  std::string s;
  for (const std::string& label : t_anomaly_scopes) s += (s.empty() ? "" : " > ") + label;
  return s;
}

/// Anomaly mode: ValueError when `g` (the gradient `what`) holds NaN or Inf.
void check_finite(const Array& g, const std::string& what, const std::string& context) {
  if (!g.defined() || !is_inexact(g.dtype()) || g.size() == 0) return;
  if (isfinite(g).all().item<bool>()) return;
  throw ValueError("backward (anomaly detection): " + what + " holds NaN or Inf (shape " + shape_str(g.shape()) +
                   ", " + std::string(dtype_name(g.dtype())) + ")" +
                   (context.empty() ? std::string() : "; the forward op ran in " + context) +
                   ". Look at that op's inputs: a log or sqrt at 0, a division by zero, an overflow (float16: use a "
                   "GradScaler), or a learning rate that made the parameters diverge");
}

/// The gradient accumulator of a leaf.
struct AccumulateGrad : Node {
  explicit AccumulateGrad(Array v) : Node("AccumulateGrad", &accumulate), variable(std::move(v)) {}
  static std::vector<Array> accumulate(const Node& node, const Array& grad) {
    const Array& variable = static_cast<const AccumulateGrad&>(node).variable;
    AutogradMeta& meta = *variable.autograd_meta();
    Array g = grad;
    for (const auto& hook : meta.hooks)
      if (Array replaced = hook(g); replaced.defined()) g = replaced;
    if (!meta.grad.defined()) {
      // Own the gradient: it is accumulated into in place later, so it must alias nothing else.
      const bool owned = g.storage().use_count() <= 2 && (g.is_contiguous() || is_channels_last(g)) &&
                         g.offset() == 0 && g.nbytes() == static_cast<int64_t>(g.storage()->nbytes());
      // A copy in g's layout (one pass): a channels-last weight keeps a channels-last gradient.
      const bool channels_last = is_channels_last(g) && !g.is_contiguous();
      meta.grad = owned ? g.detach() : channels_last ? g.permute({0, 2, 3, 1}).copy().permute({0, 3, 1, 2}) : g.copy();
    } else {
      add(meta.grad, g, meta.grad);
    }
    for (const auto& hook : meta.post_accumulate_hooks) hook(variable);
    return {};
  }
  Array variable;
};

Edge edge_of(const Array& in) {
  if (!detail::requires_grad(in)) return {};
  AutogradMeta& meta = *in.autograd_meta();
  if (meta.grad_fn) return {meta.grad_fn};
  std::shared_ptr<Node> acc = meta.accumulator.lock();
  if (!acc) {
    Array variable = in.detach();
    variable.set_autograd_meta(in.autograd_meta());
    acc = std::make_shared<AccumulateGrad>(std::move(variable));
    meta.accumulator = acc;
  }
  return {acc};
}

Node::InputInfo info_of(const Array& a) { return {a.shape(), a.dtype(), a.device()}; }

/// Adds input `a` (an edge, or none when it needs no gradient) to `node`.
void add_input(Node& node, const Array* a) {
  if (a && a->autograd_meta() && !a->autograd_meta()->retired.empty())
    throw ValueError(node.name + ": an input is retired: " + a->autograd_meta()->retired);
  node.next.push_back(a ? edge_of(*a) : Edge{});
  node.inputs.push_back(a ? info_of(*a) : Node::InputInfo{});
}

void attach(Array& out, const std::shared_ptr<Node>& node) {
  node->sequence_nr = g_sequence.fetch_add(1, std::memory_order_relaxed);
  auto meta = std::make_shared<AutogradMeta>();
  meta->requires_grad = true;
  meta->grad_fn = node;
  node->result = meta;
  out.set_autograd_meta(std::move(meta));
}

std::string bad_gradient(const std::string& who, const Array& g, const Shape& shape) {
  return who + "'s backward returned a gradient of shape " + shape_str(g.shape()) + " for an input of shape " +
         shape_str(shape) + ": a backward returns one gradient per input, of that input's shape (or one that "
         "broadcasting made it into)";
}

/// Sums `g` over the axes that broadcasting added or stretched, back to `shape`.
Array sum_to(const Array& g, const Shape& shape, const std::string& who) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.ndim() - static_cast<int64_t>(shape.size());
  if (lead < 0)
    throw ShapeError(bad_gradient(who, g, shape));
  Shape axes;
  for (int64_t d = 0; d < g.ndim(); ++d)
    if (d < lead || (shape[static_cast<size_t>(d - lead)] == 1 && g.shape(d) != 1))
      axes.push_back(d);
    else if (shape[static_cast<size_t>(d - lead)] != g.shape(d))
      throw ShapeError(bad_gradient(who, g, shape));
  return sum(g, axes, true).reshape(shape);
}

/// A gradient in its input's shape, dtype and device. A complex gradient of a real input keeps its real part
/// (dL/dx of the real input: PyTorch's handle_r_to_c); a real gradient of a complex input becomes complex.
Array fit(const Array& g, const Node::InputInfo& info, const std::string& who) {
  Array r = sum_to(g, info.shape, who);
  if (is_complex(r.dtype()) && !is_complex(info.dtype)) r = real(r).contiguous();
  if (r.dtype() != info.dtype) r = r.astype(info.dtype);
  if (r.device() != info.device) r = r.to(info.device);
  return r;
}

// Callbacks queued during the backward running on this thread (queue_callback); a backward started inside a
// hook gets its own list.
thread_local std::vector<std::function<void()>>* t_callbacks = nullptr;

/// A partial view's gradient added into the buffer of its input (Node::scatters): the first such gradient of an
/// input makes a zero buffer of the input's shape, later ones (and other gradients) add into it in place. False
/// when the node is not such a view or the input's buffer is one the engine does not own (apply then runs).
bool scatter_view_gradient(const Node& node, const Array& g, std::unordered_map<Node*, Array>& buffers,
                           std::unordered_set<Node*>& owned) {
  if (node.next.size() != 1 || !node.next[0].node || !node.scatters(g)) return false;
  Node* child = node.next[0].node.get();
  const Node::InputInfo& info = node.inputs[0];
  if (g.dtype() != info.dtype || g.device() != info.device) return false;
  auto it = buffers.find(child);
  if (it == buffers.end()) {
    Array buffer = zeros(info.shape, info.dtype, info.device);
    if (!node.scatter_add(g, buffer)) return false;
    buffers.emplace(child, std::move(buffer));
    owned.insert(child);
    return true;
  }
  return owned.count(child) && node.scatter_add(g, it->second);
}

// Set by backward_within for the backward it starts: that one queues its callbacks on the running backward's list.
thread_local bool t_within = false;

class CallbackScope {
 public:
  CallbackScope() : previous_(t_callbacks) {
    if (!t_within || !previous_) t_callbacks = &list_;
    t_within = false;
  }
  ~CallbackScope() { t_callbacks = previous_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  /// Runs the queued callbacks in order (one may queue another, which runs too).
  void run() {
    for (size_t i = 0; i < list_.size(); ++i) {
      auto f = std::move(list_[i]);
      f();
    }
    list_.clear();
  }

 private:
  std::vector<std::function<void()>>* previous_;
  std::vector<std::function<void()>> list_;
};

}  // namespace

void Engine::record(const std::shared_ptr<Node>& node, const std::vector<const Array*>& inputs, Array& out) {
  for (const Array* a : inputs) add_input(*node, a);
  if (g_anomaly.load(std::memory_order_relaxed)) node->anomaly_context = anomaly_context();
  attach(out, node);
}

void Engine::backward(const Array& root, const Array& gradient, bool retain_graph) {
  if (!detail::requires_grad(root))
    throw ValueError(
        "backward: the array does not require grad: no array it was computed from was marked with "
        "set_requires_grad(), or it was computed under a NoGradGuard");
  Array seed;
  if (!gradient.defined()) {
    if (root.size() != 1)
      throw ValueError("backward: the array has shape " + shape_str(root.shape()) +
                       "; only a size-1 array gets the "
                       "implicit gradient 1: reduce it first (sum, mean) or pass gradient= of the same shape");
    if (is_complex(root.dtype()))
      throw ValueError("backward: the array is " + std::string(dtype_name(root.dtype())) +
                       "; the implicit gradient 1 is defined only for a real scalar output (a complex loss has no "
                       "gradient): take a real loss first (real(z), abs(z), abs(z) * abs(z)) or pass gradient=");
    seed = ones_like(root);
  } else {
    if (!(gradient.shape() == root.shape()))
      throw ShapeError("backward: gradient has shape " + shape_str(gradient.shape()) + " but the array has shape " +
                       shape_str(root.shape()) + "; pass a gradient of the array's shape");
    if (gradient.device() != root.device())
      throw DeviceError("backward: gradient is on " + gradient.device().str() + " but the array is on " +
                        root.device().str() + "; move it with .to(" + root.device().str() + ")");
    seed = gradient.detach().astype(root.dtype());
  }
  const bool anomaly = g_anomaly.load(std::memory_order_relaxed);
  if (anomaly) check_finite(seed, "the gradient backward() starts from", "");
  NoGradGuard no_grad;  // formulas run unrecorded (no gradients of gradients)
  CallbackScope callbacks;
  const Edge start = edge_of(root);

  // Dependencies: how many edges reach each node from the root.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start.node.get()};
  deps[start.node.get()] = 0;
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.node) continue;
      auto [it, fresh] = deps.try_emplace(e.node.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.node.get());
    }
  }
  std::unordered_map<Node*, Array> buffers;
  // Buffers the engine allocated itself (sums, views' scatter buffers): nothing else sees them, so later
  // gradients are added into them in place.
  std::unordered_set<Node*> owned;
  buffers[start.node.get()] = seed;
  std::vector<std::shared_ptr<Node>> ready{start.node};
  while (!ready.empty()) {
    std::shared_ptr<Node> node = std::move(ready.back());
    ready.pop_back();
    Array g;
    if (auto it = buffers.find(node.get()); it != buffers.end()) {
      g = std::move(it->second);
      buffers.erase(it);
      owned.erase(node.get());
    }
    std::vector<Array> grads;
    if (g.defined()) {
      if (node->released)
        throw ValueError(node->name +
                         ": backward through the graph a second time, after its saved arrays were "
                         "freed; pass retain_graph=true to the first backward()");
      for (const auto& hook : node->pre_hooks)
        if (Array replaced = hook(g); replaced.defined()) g = replaced;
      if (auto meta = node->result.lock(); meta && meta->retains_grad)
        meta->grad = meta->grad.defined() ? add(meta->grad, g) : g.copy();
      if (!scatter_view_gradient(*node, g, buffers, owned)) grads = node->apply(g);
      if (anomaly)
        for (size_t i = 0; i < grads.size(); ++i)
          check_finite(grads[i], node->name + "'s gradient for input " + std::to_string(i), node->anomaly_context);
      if (!retain_graph) node->release();
    }
    for (size_t i = 0; i < node->next.size(); ++i) {
      const std::shared_ptr<Node>& child = node->next[i].node;
      if (!child) continue;
      if (i < grads.size() && grads[i].defined()) {
        Array gi = fit(grads[i], node->inputs[i], node->name);
        auto [it, fresh] = buffers.try_emplace(child.get(), gi);
        if (!fresh && owned.count(child.get())) {
          add(it->second, gi, it->second);
        } else if (!fresh) {
          it->second = add(it->second, gi);
          owned.insert(child.get());
        }
      }
      if (--deps[child.get()] == 0) ready.push_back(child);
    }
  }
  callbacks.run();
}

void backward_within(const Array& root, const Array& gradient) {
  t_within = true;
  try {
    detail::autograd_hook().backward(root, gradient, false);
  } catch (...) {
    t_within = false;
    throw;
  }
}

}  // namespace kiln::autograd

namespace kiln {
void retire(const Array& leaf, std::string why) {
  if (!leaf.defined() || !leaf.autograd_meta()) return;  // nothing can record through it anyway
  leaf.autograd_meta()->retired = std::move(why);
}

std::string retired_reason(const Array& a) { return a.autograd_meta() ? a.autograd_meta()->retired : std::string(); }

void set_detect_anomaly(bool enabled) { autograd::g_anomaly.store(enabled, std::memory_order_relaxed); }
bool is_anomaly_enabled() { return autograd::g_anomaly.load(std::memory_order_relaxed); }

AnomalyScope::AnomalyScope(const std::string& label) {
  if (!is_anomaly_enabled()) return;
  autograd::t_anomaly_scopes.push_back(label);
  open_ = true;
}
AnomalyScope::~AnomalyScope() {
  if (open_) autograd::t_anomaly_scopes.pop_back();
}

void queue_callback(std::function<void()> callback) {
  if (!autograd::t_callbacks)
    throw ValueError("queue_callback: no backward() is running on this thread; call it from a hook during backward");
  autograd::t_callbacks->push_back(std::move(callback));
}
}  // namespace kiln

namespace kiln::detail {
AutogradHook& autograd_hook() {
  static autograd::Engine engine;
  return engine;
}
}  // namespace kiln::detail
