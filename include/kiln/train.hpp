// A training loop in the spirit of Chainer's Trainer and Keras' fit: epochs over a DataLoader, an evaluation
// on a test set after each, metrics per epoch, callbacks, a progress line on a terminal (plain lines
// otherwise) and a JSON-lines log.
//
//   train::FitOptions options{.epochs = 20, .log_path = "train.jsonl"};
//   std::vector<train::EpochMetrics> history = train::fit(*model, opt, train_loader, &test_loader, options);
//
// Metrics stay on the device during an epoch (sums of losses and of correct predictions as 0-d arrays) and are
// read once at its end, so the loop never waits for the GPU between steps (tests prove a step makes no
// synchronisation with SyncDebugGuard). FitOptions::graph replays each step from a CUDA graph (TrainStep).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/data.hpp"
#include "kiln/nn.hpp"
#include "kiln/optim.hpp"

namespace kiln::train {

struct EpochMetrics {
  int64_t epoch = 0;           ///< 1-based
  double train_loss = 0;       ///< mean over the epoch's samples
  double train_accuracy = -1;  ///< -1 when not a classification (FitOptions::accuracy false)
  double test_loss = -1;       ///< -1 without a test loader
  double test_accuracy = -1;
  double seconds = 0;  ///< the epoch's training time (host clock after its metrics were read)
  double samples_per_second = 0;
  double lr = 0;
  /// Steps of the epoch skipped for a NaN or Inf loss (FitOptions::on_non_finite_loss = skip); -1 when not
  /// checked (keep_going).
  int64_t non_finite_skipped = -1;
  /// Steps of the epoch the GradScaler skipped (its gradients held an inf or a NaN); -1 without a scaler.
  int64_t scaler_skipped = -1;
  /// The record as one JSON object (the log's line; the two skip counts appear when counted).
  std::string json() const;
};

using LossFn = std::function<Array(const Array& output, const Array& target)>;

/// A NaN or Inf loss met under NonFiniteLoss::raise (a ValueError: catch either).
class NonFiniteLossError : public ValueError {
 public:
  using ValueError::ValueError;
};

/// What a training step does when its loss is NaN or Inf (PyTorch Lightning's choices). Any other than
/// keep_going reads the loss on the host before backward: one synchronisation per step.
enum class NonFiniteLoss {
  keep_going,  ///< step as usual, no check (the default; the parameters may become NaN)
  skip,        ///< no backward and no optimizer or scheduler step: parameters and optimizer state stay as they
               ///< were; the step is counted (TrainStep::non_finite_skipped, EpochMetrics::non_finite_skipped)
  raise,       ///< NonFiniteLossError naming the step (fit: the epoch and batch too) and the loss, before any update
};

struct FitOptions {
  int64_t epochs = 1;
  /// Default: nn::cross_entropy.
  LossFn loss{};
  /// Also count correct argmax predictions (classification).
  bool accuracy = true;
  /// JSON lines, one per epoch (appended); empty: none.
  std::string log_path{};
  /// Print progress: a line updated in place on a terminal, one line per epoch otherwise.
  bool progress = true;
  std::ostream* out = nullptr;  ///< default std::cout
  /// Capture each step in a CUDA graph (see TrainStep) after `graph_warmup` eager steps; ignored on the CPU.
  bool graph = false;
  /// Compile the step (StepOptions::compile; on every device) after `graph_warmup` eager steps.
  bool compile = false;
  int graph_warmup = 3;
  /// Called after each epoch's metrics are known (schedulers, checkpoints, early stopping: return false to stop).
  std::vector<std::function<bool(const EpochMetrics&)>> on_epoch_end{};
  /// Clip the gradients' joint 2-norm to this between backward and the optimizer step (0: no clipping).
  double max_grad_norm = 0;
  /// A schedule stepped after every training step (or, with scheduler_per_epoch, after each epoch, before the
  /// on_epoch_end callbacks); saved in the checkpoints. Not with graph (a replayed step keeps the capture's lr).
  optim::LRScheduler* scheduler = nullptr;
  bool scheduler_per_epoch = false;
  /// A NaN or Inf loss: go on (default), skip the step, or stop with a ValueError (see NonFiniteLoss).
  NonFiniteLoss on_non_finite_loss = NonFiniteLoss::keep_going;
  /// Loss scaling (see StepOptions::scaler); its skipped steps are counted per epoch (EpochMetrics, the log).
  optim::GradScaler* scaler = nullptr;
  /// The run's state (save_checkpoint: model, optimizer, scheduler, generator, position) is written crash-safely
  /// to this file at the end of each epoch and, when checkpoint_every > 0, after every that many steps. The
  /// position is fit's epoch, the loader's too when fit is the first to run it: pass a loader that has not run.
  std::string checkpoint{};
  int64_t checkpoint_every = 0;
  /// Load `checkpoint` first when the file exists, and go on from its position: the parameters end as those of
  /// a run never stopped, bit for bit. `epochs` counts the whole run's; the metrics of a resumed epoch cover
  /// the batches run after resuming.
  bool resume = false;
};

struct StepOptions {
  /// Default: nn::cross_entropy.
  LossFn loss{};
  /// Also count correct argmax predictions (classification).
  bool accuracy = true;
  /// On a GPU: capture the step in a CUDA graph after `warmup` eager steps and replay it from then on.
  bool graph = false;
  /// On any device: run the step through kiln::compile (docs/compile.md): after `warmup` eager steps it is traced
  /// twice and then replayed (the same results, bit for bit). Not with graph; the same limits as graph.
  bool compile = false;
  /// Eager steps before the capture or the traces (>= 1: they create the optimizer's state and compile the
  /// kernels).
  int warmup = 3;
  /// Clip the gradients' joint 2-norm to this (optim::clip_grad_norm) between backward and the optimizer step;
  /// 0: no clipping. Captured with the step under graph.
  double max_grad_norm = 0;
  /// Stepped after each optimizer step (a per-iteration schedule). Not with graph: ValueError (a replayed step
  /// keeps the lr of the capture). Not stepped when the optimizer was not (a skipped step).
  optim::LRScheduler* scheduler = nullptr;
  /// A NaN or Inf loss: go on (default), skip the step, or throw (see NonFiniteLoss). Not with graph.
  NonFiniteLoss on_non_finite_loss = NonFiniteLoss::keep_going;
  /// Loss scaling: backward from scaler->scale(loss), unscale before clipping, scaler->step(optimizer) (skipped
  /// when a gradient overflowed) and scaler->update(). Not with graph (GradScaler::step reads the host).
  optim::GradScaler* scaler = nullptr;
};

/// One training step (zero_grad, forward, loss, backward, optionally clipping, optimizer.step(), optionally
/// the scheduler's step) and the running sums of the loss
/// and of correct predictions, kept on the device and updated in place: a step makes no host synchronisation.
///
/// With StepOptions::graph on a GPU (torch.cuda.graphs' whole-network capture): the first `warmup` steps run
/// eagerly, the next is captured in a cuda::Graph together with the metric updates, and each later step copies
/// its batch into the graph's static inputs (laid out as the captured batch: channels-last images stay
/// channels-last; a device copy, or an asynchronous copy from pinned host memory)
/// and replays the graph: one launch. Dropout draws new numbers at every replay, and index checks still report
/// (at the next synchronisation). A batch of another shape than the captured one (a last partial batch) runs
/// eagerly. The optimizer must be capturable (Adam: AdamOptions::capturable); the lr stays the capture's.
/// `model` may be a dist::DistributedDataParallel: its gradient all-reduces are captured with the step and run
/// at each replay (every rank replays its graph at each step, as each would run its eager step).
///
///   train::TrainStep step(*model, opt, {.graph = true});
///   for (const data::Batch& b : loader) step(b.x, b.y);
///   double loss = step.mean_loss();  // reads the sums (synchronises)
class TrainStep {
 public:
  TrainStep(nn::Module& model, optim::Optimizer& optimizer, StepOptions options = {});
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;
  /// One step on inputs `x` and targets `y`.
  void operator()(const Array& x, const Array& y);
  /// Mean loss per sample and accuracy (-1 without StepOptions::accuracy) since reset_metrics (synchronises).
  double mean_loss() const;
  double accuracy() const;
  /// Samples seen since reset_metrics.
  int64_t samples() const;
  /// Zeroes the sums (in place; asynchronous).
  void reset_metrics();
  /// Steps run (skipped ones included) since construction.
  int64_t steps() const;
  /// Steps skipped for a NaN or Inf loss (NonFiniteLoss::skip) since construction; they add nothing to the
  /// metrics.
  int64_t non_finite_skipped() const;
  /// Steps the StepOptions::scaler skipped (overflowed gradients) since construction (0 without a scaler).
  int64_t scaler_skipped() const;
  /// True once a graph has been captured (or, with compile, the step compiled); the number of the graph's nodes
  /// (of the compiled step's recorded ops) and of replays so far.
  bool graphed() const;
  size_t graph_nodes() const;
  int64_t replays() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// Trains `model` with `optimizer` for options.epochs epochs (train mode), evaluating on `test` after each
/// (eval mode, no gradients). Returns the metrics of every epoch.
std::vector<EpochMetrics> fit(nn::Module& model, optim::Optimizer& optimizer, data::DataLoader& train,
                              data::DataLoader* test, const FitOptions& options = {});

/// Everything a training run needs to go on exactly where it stopped (save_checkpoint / load_checkpoint).
/// model and optimizer are required; the others are saved when set, and a checkpoint holding the state of one
/// that is not set is refused on load. The default generator's state (dropout, initialisers) is always saved.
///
///   train::Checkpoint ckpt{.model = model.get(), .optimizer = &opt, .scheduler = &sched, .loader = &loader};
///   if (std::filesystem::exists(path)) train::load_checkpoint(path, ckpt);  // position -> ckpt, loader
///   ... after each step: ckpt.batch = b.index + 1; ++ckpt.step; save_checkpoint(path, ckpt) when you like
struct Checkpoint {
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LRScheduler* scheduler = nullptr;
  optim::GradScaler* scaler = nullptr;
  data::DataLoader* loader = nullptr;  ///< load_checkpoint sets it to (epoch, batch) with DataLoader::set_epoch
  int64_t epoch = 0;                   ///< the epoch in progress (0-based)
  int64_t batch = 0;                   ///< the batches of that epoch done: the next one to run
  int64_t step = 0;                    ///< training steps done in all
};

/// Writes the run's state to one safetensors file, crash-safely (the previous checkpoint stays whole until the
/// new one is complete): "model.*" and "optimizer.*" (their state dicts), "scheduler.*", "scaler.*",
/// "random" (int64[2]: the generator's seed and offset, uint64 stored as int64 bit patterns) and "position"
/// (int64[3]: epoch, batch, step). Synchronises (copies GPU state to the host). ValueError without a model or an
/// optimizer, or when the file cannot be written.
void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
/// Restores a save_checkpoint file into the objects of `checkpoint`, strictly (every state dict as its
/// load_state_dict checks it; a section whose object is unset, or an object whose section is missing, is a
/// ValueError naming it), sets the generator's state, checkpoint.epoch/batch/step and the loader's position.
/// Build the objects as the saved run did (a scheduler may be built before or after: its base lr is restored).
void load_checkpoint(const std::string& path, Checkpoint& checkpoint);

/// The mean loss (and accuracy) of `model` over one pass of `loader`, in eval mode without gradients.
std::pair<double, double> evaluate(nn::Module& model, data::DataLoader& loader, const LossFn& loss = {},
                                   bool accuracy = true);

}  // namespace kiln::train
