// kiln::compile: a step function traced once and replayed, on the CPU and on GPUs.
//
//   kiln::CompiledStep step = kiln::compile([&](const std::vector<kiln::Array>& in) {
//     opt.zero_grad();
//     kiln::Array loss = nn::cross_entropy(model(in[0]), in[1]);
//     loss.backward();
//     opt.step();
//     return std::vector<kiln::Array>{loss};
//   });
//   for (const data::Batch& b : loader) kiln::Array loss = step({b.x, b.y})[0];
//
// The first `warmup` calls run the function as it is (optimizers make their state on their first step). The
// next two calls run it while tracing: every op it starts — forward, backward and optimizer alike — is run and
// recorded with its operands, and the two records must agree op for op (the same ops, shapes, dtypes and scalar
// values, on the same parameters and state). From then on a call copies its inputs into the traced inputs and
// replays the record: no autograd graph, no module code, no dispatch decisions — the backend calls only, in
// order, on the storages the trace used, so the results are bit for bit those of eager steps (random draws
// included: each replay draws at the traced places past the default generator's state, as the eager step would;
// only StepCompileOptions::epilogues, on a GPU in 16-bit dtypes, rounds a folded product's result once instead).
//
// The same rules as a CUDA graph's (train::TrainStep with graph): a replay repeats what the traced step did to
// the arrays, not the host code around it. Host values the step reads once — a learning rate from a scheduler,
// Adam's step count without AdamOptions::capturable — are those of the trace; two traces that saw different
// values throw ValueError naming the first op that differs. Reading array values on the host inside the step
// (item(), to_vector(), printing) and draws from a user's Generator are refused while tracing with a ValueError,
// as are raw kernels, linear-algebra factorisations, recurrent layers (their results are inspected on the host)
// and kiln::dist's collectives. Inputs of another shape, dtype or device than the traced ones run the function
// eagerly. The outputs are the traced step's arrays, overwritten by each replay (copy one to keep it). The record
// holds the memory of the step's arrays: those the step dropped gave theirs to later ones while it was traced,
// so a replay needs about the memory of one eager step at its peak (memory_bytes()). A fusion pass merges
// elementwise work into the call whose result it reads where nothing else reads that result
// (StepCompileOptions::fuse).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/array.hpp"

namespace kiln {

struct StepCompileOptions {
  /// Eager calls before the two traced ones.
  int warmup = 1;
  /// The fusion pass: elementwise work merged into the elementwise or fused call whose result it reads, where
  /// nothing else reads that result (a layer norm and the cast of its output, a gradient and its accumulation):
  /// one kernel instead of two, the intermediate never written. The replays' results keep their bits.
  bool fuse = true;
  /// With `fuse`: a product whose result only gelu_tanh's gradient reads (an MLP's backward under bfloat16 or
  /// float16 autocast) computes that gradient in its epilogue where the backend can (cuBLASLt's DGELU on a GPU):
  /// the product is multiplied before its one rounding instead of rounded, stored and read again, so those
  /// gradients may differ from the eager step's in their last bit. false keeps every bit of the eager step.
  bool epilogues = true;
};

class CompiledStep {
 public:
  using Function = std::function<std::vector<Array>(const std::vector<Array>& inputs)>;

  explicit CompiledStep(Function fn, StepCompileOptions options = {});
  ~CompiledStep();
  CompiledStep(CompiledStep&&) noexcept;
  CompiledStep& operator=(CompiledStep&&) noexcept;

  /// Runs the step on `inputs` (eagerly, traced, or replayed; see above) and returns its outputs.
  std::vector<Array> operator()(const std::vector<Array>& inputs);

  /// True once two traces agreed: later calls with the traced inputs' shapes replay.
  bool compiled() const;
  /// Ops the replay runs (backend calls and the core's host steps, such as a CPU gather).
  int64_t recorded_ops() const;
  /// Recorded calls the fusion pass merged into others (StepCompileOptions::fuse).
  int64_t fused_ops() const;
  /// Bytes of device and host memory the replays' arrays use: the most the traced step's arrays held at once
  /// (arrays it dropped gave their memory to later ones, as in an eager step); 0 before compiled().
  int64_t memory_bytes() const;
  /// Calls run eagerly (warm-up, or inputs unlike the traced ones), traced, and replayed.
  int64_t eager_calls() const;
  int64_t traced_calls() const;
  int64_t replays() const;
  /// The replayed ops counted by kind, one "kind: count" per line, most frequent first.
  std::string summary() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// A CompiledStep of `fn` (see above).
CompiledStep compile(CompiledStep::Function fn, StepCompileOptions options = {});

/// True while this thread traces a step for kiln::compile: work that a replay would not repeat (kiln::dist's
/// collectives) refuses to run then.
bool tracing_step();

}  // namespace kiln
