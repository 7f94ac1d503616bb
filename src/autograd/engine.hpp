// The autograd engine (src/autograd): the core's AutogradHook. It links each node an op records to the nodes
// of the op's inputs (a leaf's gradient accumulator where an input is a leaf) and runs backward; it knows no
// op: every op records its own backward through core/autograd.hpp's `record`.
#pragma once

#include <memory>
#include <vector>

#include "core/autograd.hpp"

namespace kiln::autograd {

class Engine final : public detail::AutogradHook {
 public:
  /// Gives `node` one edge and input info per entry of `inputs` (null: no gradient) and attaches it to `out`.
  void record(const std::shared_ptr<detail::Node>& node, const std::vector<const Array*>& inputs, Array& out) override;
  /// Runs backward from `root`: seeds it with `gradient` (ones for a size-1 root), runs each node once all
  /// the gradients reaching it are summed, accumulates into leaves, then runs queued callbacks.
  void backward(const Array& root, const Array& gradient, bool retain_graph) override;
};

/// Runs backward from `root` (without retain_graph) as part of the backward running on this thread (a node that
/// runs a graph of its own, as checkpoint's): what queue_callback queues in it runs when the outer backward ends.
void backward_within(const Array& root, const Array& gradient);

}  // namespace kiln::autograd
