// Reverse-mode automatic differentiation (define-by-run, as PyTorch's autograd).
//
//   Array w = random::normal({3, 1}).set_requires_grad();
//   Array b = zeros({1}).set_requires_grad();
//   Array loss = mean(square(matmul(x, w) + b - y));
//   loss.backward();            // w.grad() and b.grad() now hold d loss / d w, d loss / d b
//   { NoGradGuard no_grad; w -= w.grad() * 0.1; }   // update parameters in place, unrecorded
//   w.set_grad(Array());        // zero_grad: the next backward starts a fresh gradient
//
// One array type: an Array that requires grad records the ops applied to it (each op records its own backward;
// the ops of kiln/ops.def and kiln/reductions.def derive it from kiln's op table), and backward() walks that
// graph once, adding each leaf's gradient to leaf.grad() (so gradients accumulate until set_grad(Array())).
// Differentiable: every floating elementwise op (broadcasting reduced back to each input's shape; weak C++
// scalars get no gradient), where and clip, sum/prod/mean/max/min/var/std/logsumexp/linalg::norm, cumsum,
// matmul/dot, every view (reshape, transpose/permute, slicing and basic indexing, broadcast_to/expand_dims,
// squeeze, split, as_strided), concatenate/stack, take and take_along_axis (the gradient is scattered back with
// additions),
// copy/contiguous/astype and to(device) (the gradient goes back to the input's dtype and device). Index and
// bool results (argmax, comparisons, all/any) carry no gradient. Ops without one throw DTypeError when an input
// requires grad (sort, cumprod, indexing with index arrays or masks): never a silently missing gradient.
//
// In-place writes (out=, +=, assign, fill, index_put, put, copy_from, fused out=) are not recorded: they throw
// when the destination requires grad and grad mode is on (run parameter updates under NoGradGuard), and they
// bump the storage's version, so a backward that needs an array overwritten since it was saved throws instead
// of computing a wrong gradient. Gradients of gradients (create_graph) are not supported: backward runs with
// grad mode off.
//
// Complex arrays (complex64, complex128) take part as in PyTorch: for a real loss L of z = x + iy, z.grad() is
// dL/dx + i dL/dy (twice the conjugate Wirtinger derivative), so a holomorphic f passes g * conj(f'(z)) back and
// gradient descent z -= lr * z.grad() lowers L. A real input whose gradient comes back complex (a real array
// times a complex one) keeps the real part; a complex result needs backward(gradient) (take real(), abs() or
// another real loss first for the implicit 1). Differentiable on complex arrays: the elementwise ops that take
// them, where, sum/prod/mean, matmul/dot/einsum/tensordot, views, concatenate, take, conversions between real
// and complex, real/imag/conj/angle/make_complex (kiln/complex.hpp) and the Fourier transforms (kiln/fft.hpp).
// linalg::eig records no gradient (its derivative is not implemented).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/array.hpp"

namespace kiln {

namespace detail {
bool grad_mode();
void set_grad_mode(bool enabled);
}  // namespace detail

/// True when ops on this thread record gradients (the default).
inline bool is_grad_enabled() { return detail::grad_mode(); }
inline void set_grad_enabled(bool enabled) { detail::set_grad_mode(enabled); }

/// While alive, ops on this thread record nothing (inference, parameter updates), as torch.no_grad().
class NoGradGuard {
 public:
  NoGradGuard() : previous_(detail::grad_mode()) { detail::set_grad_mode(false); }
  ~NoGradGuard() { detail::set_grad_mode(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

/// While alive, ops on this thread record gradients even inside a NoGradGuard.
class EnableGradGuard {
 public:
  EnableGradGuard() : previous_(detail::grad_mode()) { detail::set_grad_mode(true); }
  ~EnableGradGuard() { detail::set_grad_mode(previous_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool previous_;
};

/// Retires the leaf `leaf` (and every copy of its handle, which share its autograd state): an op that would record
/// a gradient through it from then on throws ValueError with `why`. For code that replaces an array in place of
/// another one users may still hold, as Module::to does with its parameters: a kept handle of the old parameter
/// would train an array nobody reads. `retired_reason` is "" for a live array.
void retire(const Array& leaf, std::string why);
std::string retired_reason(const Array& a);

/// Anomaly detection, as torch.autograd.set_detect_anomaly: while on, backward checks every gradient each node
/// computes and throws ValueError at the first NaN or Inf, naming the node (its forward op: "SqrtBackward"), the
/// input whose gradient it is, and where the forward op ran: the labels of the AnomalyScopes open when it was
/// recorded (every nn::Module call opens one with the module's name). Each check reads the gradient back (a
/// synchronisation on a GPU): for finding a fault, not for training runs. Off by default; process-wide.
void set_detect_anomaly(bool enabled);
bool is_anomaly_enabled();

/// Anomaly mode on while alive (off again, or as it was, afterwards), as torch.autograd.detect_anomaly().
class DetectAnomalyGuard {
 public:
  explicit DetectAnomalyGuard(bool enabled = true) : previous_(is_anomaly_enabled()) { set_detect_anomaly(enabled); }
  ~DetectAnomalyGuard() { set_detect_anomaly(previous_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool previous_;
};

/// A label for the ops recorded on this thread while alive, shown by anomaly mode's error ("Sequential >
/// Linear(...)"); costs nothing when anomaly mode is off.
class AnomalyScope {
 public:
  explicit AnomalyScope(const std::string& label);
  ~AnomalyScope();
  AnomalyScope(const AnomalyScope&) = delete;
  AnomalyScope& operator=(const AnomalyScope&) = delete;

 private:
  bool open_ = false;
};

/// A differentiable op given by its forward and backward, as torch.autograd.Function: for fused kernels (a
/// loss, a layer) whose gradient is known in closed form and cheaper than the recorded ops'.
///
///   AutogradFunction square_fn{
///       "SquareBackward",
///       [](const std::vector<Array>& in, std::vector<Array>& saved) { saved = {in[0]}; return in[0] * in[0]; },
///       [](const Array& g, const std::vector<Array>& saved, const std::vector<bool>&) {
///         return std::vector<Array>{g * saved[0] * 2.0};
///       }};
///   Array y = square_fn.apply({x});
struct AutogradFunction {
  /// The node's name, in error messages.
  std::string name;
  /// The result (computed with grad mode off: nothing inside is recorded); it may add arrays the backward
  /// needs to `saved` (an in-place change to one of them before backward makes backward throw, as for
  /// built-in ops; an undefined one comes back undefined).
  std::function<Array(const std::vector<Array>& inputs, std::vector<Array>& saved)> forward;
  /// One gradient per input from the result's gradient (undefined for an input that gets none); each is summed
  /// to its input's shape and cast to its dtype and device, like the built-in ops' gradients. needs_input_grad[i]
  /// says whether input i wants one (ctx.needs_input_grad in PyTorch): skip the work for the others.
  std::function<std::vector<Array>(const Array& grad, const std::vector<Array>& saved,
                                   const std::vector<bool>& needs_input_grad)>
      backward;

  /// Runs the function on `inputs`, recording one node when grad mode is on and an input requires grad
  /// (torch's Function.apply). Throws ValueError when forward or backward is missing, and (at backward) when
  /// backward returns another number of gradients than there are inputs.
  Array apply(const std::vector<Array>& inputs) const;
};

/// Queues `callback` to run once when the backward() now running has finished (every gradient accumulated),
/// on the thread that called backward(), as torch's Variable._execution_engine.queue_callback. For hooks that
/// start work during backward and must finish it before backward returns (DistributedDataParallel waits for
/// its gradient all-reduces). ValueError when no backward is running on this thread.
void queue_callback(std::function<void()> callback);


namespace autograd {

/// Activation recomputation, as torch.utils.checkpoint.checkpoint (use_reentrant=False where kiln can): runs
/// `fn(inputs)` without recording (none of fn's intermediate arrays is kept for backward) and keeps only the
/// inputs. Backward runs fn again from them, with gradients on, and passes the result's gradient through the
/// recomputed graph: the inputs that require grad get their gradients, and so does every other array fn reads
/// that requires grad (module parameters the lambda captures), as without checkpoint. Memory for compute: fn's
/// activations are freed after the forward and exist again only while its gradient is computed.
///
///   auto block = std::make_shared<nn::Sequential>(...);
///   Array y = autograd::checkpoint([&](const std::vector<Array>& in) { return (*block)(in[0]); }, {x});
///   loss(y).backward();  // block's parameters and x get their gradients; block's forward ran twice
///
/// The recomputation sees what the forward saw: the default generator is set back to its state at the forward
/// around it (dropout draws the same masks; kiln has one generator for every device, and the generator's
/// position afterwards is the one backward found) and the forward's autocast dtype (kiln/autocast.hpp) is on.
/// fn must compute the same thing twice from the same inputs: draws from a random::Generator the lambda
/// captures, module modes (train/eval) or captured arrays changed between forward and backward are not replayed.
/// A parameter that fn reads gets its gradient from a backward run inside the checkpoint's node (its hooks run
/// there; queue_callback adds to the outer backward's list): a parameter read by several checkpoints or also
/// outside one gets its parts added in another order than without checkpoint (equal up to rounding).
/// Without grad mode (NoGradGuard) checkpoint just calls fn. Errors (ValueError, naming checkpoint): fn's result
/// depends on no array that requires grad (nothing to recompute: call fn directly, or mark the inputs); an
/// input written in place between the forward and backward (its storage version moved: pass a copy()).
Array checkpoint(const std::function<Array(const std::vector<Array>&)>& fn, std::vector<Array> inputs);

}  // namespace autograd

struct GradcheckOptions {
  double eps = 1e-6;   ///< central-difference step (inputs are float64)
  double atol = 1e-5;  ///< |numeric - analytic| <= atol + rtol * |numeric| for every element
  double rtol = 1e-3;
  uint64_t seed = 0;  ///< seed of the random projection of the output
};

struct GradcheckResult {
  bool passed = false;
  double max_abs_error = 0;  ///< largest |numeric - analytic| over every element of every checked input
  std::string report;        ///< where the worst element is, with both values
};

/// Compares the analytic gradient of `f` with central finite differences, in float64, as
/// torch.autograd.gradcheck: every floating input is converted to a float64 copy that requires grad (complex
/// inputs to complex128), the output is projected on a fixed random array v (L = sum(f(x) * v); for a complex
/// output v is complex and L = sum(re(f(x)) re(v) + im(f(x)) im(v)), whose gradient is backward(v)'s),
/// L.backward() gives the analytic gradient and (L(x + eps e_j) - L(x - eps e_j)) / 2 eps the numeric one,
/// element by element; a complex element's real and imaginary parts are stepped apart and compared with the
/// real and imaginary parts of its gradient (dL/dx + i dL/dy). Keep the inputs small: tens of elements. Inputs
/// stay on their device; integer and bool inputs are passed as they are. Throws ValueError when f's result is
/// neither floating nor complex.
GradcheckResult gradcheck(const std::function<Array(const std::vector<Array>&)>& f, const std::vector<Array>& inputs,
                          GradcheckOptions options = {});

}  // namespace kiln
