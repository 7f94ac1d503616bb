// autograd::checkpoint (kiln/autograd.hpp): activation recomputation. The forward runs fn unrecorded and one
// node keeps fn's inputs; that node's backward runs fn again with gradients on and a backward of its own through
// the recomputed graph (backward_within), which accumulates into the parameters fn reads and into fresh leaves
// standing for the inputs, whose gradients the node passes on.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.hpp"
#include "core/autograd.hpp"
#include "kiln/autocast.hpp"
#include "kiln/autograd.hpp"
#include "kiln/random.hpp"

namespace kiln::autograd {

namespace {

/// Puts the default generator back where it was when constructed, also when the recomputation throws.
class GeneratorRestore {
 public:
  GeneratorRestore() : state_(random::get_state()) {}
  ~GeneratorRestore() { random::set_state(state_); }
  GeneratorRestore(const GeneratorRestore&) = delete;
  GeneratorRestore& operator=(const GeneratorRestore&) = delete;

 private:
  random::GeneratorState state_;
};

/// A leaf standing for input `x` in the recomputation (a copy where x is a broadcast view, which cannot be one).
Array input_leaf(const Array& x) {
  bool broadcast = false;
  for (size_t d = 0; d < x.shape().size(); ++d) broadcast = broadcast || (x.strides()[d] == 0 && x.shape()[d] > 1);
  Array leaf = broadcast ? x.copy() : x.detach();
  return leaf.set_requires_grad();
}

constexpr const char* kNoGrad =
    "checkpoint: fn's result does not depend on any array that requires grad (no input requires grad and fn reads "
    "no parameter that does), so there is nothing to recompute for; call fn directly, or mark the arrays whose "
    "gradients you want with set_requires_grad()";

}  // namespace

Array checkpoint(const std::function<Array(const std::vector<Array>&)>& fn, std::vector<Array> inputs) {
  if (!fn) throw ValueError("checkpoint: fn is empty; pass the function to run (and run again in backward)");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (!inputs[i].defined())
      throw ValueError("checkpoint: input " + std::to_string(i) + " is undefined; pass defined arrays");
  if (!is_grad_enabled()) return fn(inputs);
  const random::GeneratorState generator = random::get_state();
  const std::optional<DType> amp = autocast_dtype();
  Array out;
  bool reads_grad = false;
  {
    detail::GradProbe probe;
    NoGradGuard no_grad;
    out = fn(inputs);
    reads_grad = probe.seen();
  }
  if (!out.defined()) throw ValueError("checkpoint: fn returned an undefined array");
  for (const Array& x : inputs) reads_grad = reads_grad || x.requires_grad();
  if (!reads_grad && !out.requires_grad()) throw ValueError(kNoGrad);
  Array result = out.detach();  // the node attaches to a fresh handle, never to an input fn returned
  std::vector<detail::SavedArray> saved;
  saved.reserve(inputs.size());
  for (const Array& x : inputs) saved.emplace_back(x);
  auto backward = [fn, generator, amp](const detail::Node& node, const Array& grad) {
    std::vector<Array> xs;
    xs.reserve(node.saved.size());
    for (size_t i = 0; i < node.saved.size(); ++i) {
      try {
        xs.push_back(node.saved_array(i));
      } catch (const ValueError&) {
        throw ValueError("checkpoint: input " + std::to_string(i) +
                         " was modified in place after the checkpointed forward, so recomputing fn would see other "
                         "values than the forward did; pass a copy() of it to checkpoint, or modify it only after "
                         "backward");
      }
      if (node.needs(i)) xs[i] = input_leaf(xs[i]);
    }
    Array again;
    {
      GeneratorRestore restore;  // the generator's position afterwards is the one backward found
      random::set_state(generator);
      EnableGradGuard grad_on;
      AutocastGuard autocast(amp);
      again = fn(xs);
    }
    if (!again.defined() || !again.requires_grad()) throw ValueError(kNoGrad);
    if (!(again.shape() == grad.shape()))
      throw ShapeError("checkpoint: fn returned shape " + shape_str(again.shape()) + " when recomputed but " +
                       shape_str(grad.shape()) + " in the forward; fn must compute the same thing from the same "
                       "inputs both times");
    backward_within(again, grad);
    std::vector<Array> grads(xs.size());
    for (size_t i = 0; i < xs.size(); ++i)
      if (node.needs(i)) grads[i] = xs[i].grad();
    return grads;
  };
  detail::record(result, std::make_shared<detail::Node>("CheckpointBackward", std::move(backward), std::move(saved)),
                 inputs);
  return result;
}

}  // namespace kiln::autograd
