// train::fit: the loop, device-side metrics, progress output and the JSON-lines log.
#include "kiln/train.hpp"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "kiln/autograd.hpp"
#include "kiln/compile.hpp"
#include "kiln/conv.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif
#include "kiln/fuse.hpp"
#include "kiln/json.hpp"
#include "kiln/ops.hpp"

namespace kiln::train {

namespace {

using Clock = std::chrono::steady_clock;

Array default_loss(const Array& output, const Array& target) { return nn::cross_entropy(output, target); }

/// Sums of the loss (times the batch size) and of correct predictions: 0-d arrays on the output's device, made
/// at the first add and updated in place (two small kernels, no allocation; captured in a graph, they go on
/// summing at each replay). `samples` is counted on the host by the caller of add.
struct Totals {
  Array loss, correct;
  int64_t samples = 0;
  void add(const Array& batch_loss, const Array& output, const Array& target, bool accuracy) {
    NoGradGuard no_grad;
    static const auto add_loss =
        fuse([](auto acc, auto l, auto n) { return acc + l.astype(float64) * n; }, "train_loss_sum");
    static const auto count_equal = fuse([](auto a, auto b) { return sum(equal(a, b)); }, "count_equal");
    const int64_t rows = output.ndim() > 0 ? output.shape(0) : 1;
    if (!loss.defined()) {
      loss = zeros({}, float64, output.device());
      correct = zeros({}, int64, output.device());
    }
    add_loss.out({loss}, loss, batch_loss.detach(), static_cast<double>(rows));
    if (accuracy) correct += count_equal(argmax(output.detach(), -1), target.reshape({rows}).astype(int64));
  }
  void reset() {
    if (loss.defined()) {
      loss.fill(0);
      correct.fill(0);
    }
    samples = 0;
  }
  double mean_loss() const { return samples ? loss.item<double>() / static_cast<double>(samples) : 0.0; }
  double accuracy(bool counted) const {
    return counted && samples ? static_cast<double>(correct.item<int64_t>()) / static_cast<double>(samples) : -1.0;
  }
};

int64_t rows_of(const Array& x) { return x.ndim() > 0 ? x.shape(0) : 1; }

#ifdef KILN_WITH_CUDA
/// A graph's static input for batches like `a`: its shape and dtype, and channels-last when `a` is (a
/// channels-last network then sees channels-last images in its replays, as in its eager steps).
Array static_slot(const Array& a) {
  if (a.is_contiguous() || !is_channels_last(a)) return empty(a.shape(), a.dtype(), a.device());
  const Shape& s = a.shape();
  return empty({s[0], s[2], s[3], s[1]}, a.dtype(), a.device()).permute({0, 3, 1, 2});  // (N, H, W, C) memory
}
#endif

std::string number(double v) { return json_number(v); }

}  // namespace

// ---------------------------------------------------------------- TrainStep
struct TrainStep::Impl {
  nn::Module* model;
  optim::Optimizer* optimizer;
  StepOptions options;
  LossFn loss_fn;
  Totals totals;  // samples counts every step, eager or replayed
  int64_t steps = 0, replays = 0, non_finite_skipped = 0, scaler_skipped = 0;
#ifdef KILN_WITH_CUDA
  std::unique_ptr<cuda::Graph> graph;
  Array static_x, static_y;
#endif
  std::unique_ptr<CompiledStep> compiled;

  /// What became of a step: the optimizer stepped, the scaler skipped it (overflowed gradients), or it was
  /// skipped for a non-finite loss before backward.
  enum class Outcome { stepped, scaler_skipped, loss_skipped };

  /// Under a NaN/Inf check: whether the loss is finite (a host read). Summed in float64 so a loss of any
  /// shape is one read; NaN and Inf survive the sum.
  static bool finite_loss(const Array& loss, double& value) {
    NoGradGuard no_grad;
    value = sum(loss.detach().astype(float64)).item<double>();
    return std::isfinite(value);
  }

  /// forward, loss, backward, optimizer step and the metric updates (no zero_grad: the caller clears).
  Outcome body(const Array& x, const Array& y) {
    const Array output = (*model)(x);
    const Array loss = loss_fn(output, y);
    double value = 0;
    if (options.on_non_finite_loss != NonFiniteLoss::keep_going && !finite_loss(loss, value)) {
      if (options.on_non_finite_loss == NonFiniteLoss::skip) return Outcome::loss_skipped;
      throw NonFiniteLossError("TrainStep: the loss of step " + std::to_string(steps + 1) + " is " +
                               (std::isnan(value) ? "nan"
                                : value > 0       ? "inf"
                                                  : "-inf") +
                               " (on_non_finite_loss = raise; nothing was updated); find the op that made it "
                               "with autograd::DetectAnomalyGuard, lower the learning rate or clip the "
                               "gradients, or skip such steps with NonFiniteLoss::skip");
    }
    Outcome outcome = Outcome::stepped;
    if (options.scaler) {
      options.scaler->scale(loss).backward();
      if (options.max_grad_norm > 0) {
        options.scaler->unscale(*optimizer);  // clip the true gradients
        optim::clip_grad_norm(optimizer->parameters(), options.max_grad_norm);
      }
      if (!options.scaler->step(*optimizer)) outcome = Outcome::scaler_skipped;
      options.scaler->update();
    } else {
      loss.backward();
      if (options.max_grad_norm > 0) optim::clip_grad_norm(optimizer->parameters(), options.max_grad_norm);
      optimizer->step();
    }
    totals.add(loss, output, y, options.accuracy);  // the first (eager) step makes the sums
    return outcome;
  }

#ifdef KILN_WITH_CUDA
  void capture(const Array& x, const Array& y) {
    const Device d = x.device();
    static_x = static_slot(x);
    static_y = static_slot(y);
    static_x.copy_from(x);
    static_y.copy_from(y);
    const Stream side = Stream::create(d, {.non_blocking = true});
    Event ready = Event::create(d, false);
    ready.record();  // the capture stream starts after the work queued so far
    ready.wait(side);
    optimizer->zero_grad();  // the captured backward makes the gradients in the graph's pool
    graph = std::make_unique<cuda::Graph>();
    {
      cuda::GraphCapture scope(*graph, side);
      body(static_x, static_y);  // stepped: a graph has no scaler nor loss check (refused at construction)
    }
    graph->replay(Stream::current(d));
    ++replays;
  }
#endif

  void step(const Array& x, const Array& y) {
    const Outcome outcome = run(x, y);
    ++steps;
    if (outcome == Outcome::loss_skipped) {
      ++non_finite_skipped;
      return;
    }
    if (outcome == Outcome::scaler_skipped) ++scaler_skipped;
    if (outcome == Outcome::stepped && options.scheduler) options.scheduler->step();
    totals.samples += rows_of(x);
  }

  Outcome run(const Array& x, const Array& y) {
    if (options.compile) {
      if (!compiled)
        compiled = std::make_unique<CompiledStep>(compile(
            [this](const std::vector<Array>& in) {
              optimizer->zero_grad();
              body(in[0], in[1]);  // stepped: no scaler nor loss check (refused at construction)
              return std::vector<Array>{};
            },
            {.warmup = options.warmup}));
      const int64_t before = compiled->replays();
      (*compiled)({x, y});
      replays += compiled->replays() - before;
      return Outcome::stepped;
    }
#ifdef KILN_WITH_CUDA
    if (options.graph && x.device().is_cuda()) {
      auto fits = [](const Array& a, const Array& slot) {
        return a.shape() == slot.shape() && a.dtype() == slot.dtype() && a.device() == slot.device();
      };
      if (graph && fits(x, static_x) && fits(y, static_y)) {
        static_x.copy_from(x, {.non_blocking = true});
        static_y.copy_from(y, {.non_blocking = true});
        graph->replay(Stream::current(x.device()));
        ++replays;
        return Outcome::stepped;
      }
      if (!graph && steps >= options.warmup) {
        capture(x, y);
        return Outcome::stepped;
      }
    }
#endif
    optimizer->zero_grad();
    return body(x, y);
  }
};

TrainStep::TrainStep(nn::Module& model, optim::Optimizer& optimizer, StepOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (options.graph && options.compile)
    throw ValueError("TrainStep: graph and compile both replay the step; choose one (graph: a CUDA graph on a GPU, "
                     "compile: kiln::compile on any device)");
  const char* replayed = options.graph ? "graph" : "compile";
  if ((options.graph || options.compile) && options.warmup < 1)
    throw ValueError(std::string("TrainStep: a ") + (options.graph ? "graph-captured" : "compiled") +
                     " step needs warmup >= 1 eager steps (they create the optimizer's state and the metric sums), "
                     "got " + std::to_string(options.warmup));
  if ((options.graph || options.compile) && options.scheduler)
    throw ValueError(std::string("TrainStep: a scheduler with ") + replayed +
                     ": each replay would keep the lr of the capture; schedule an eager loop (" + replayed +
                     " = false), or keep the lr constant");
  if ((options.graph || options.compile) &&
      (options.scaler || options.on_non_finite_loss != NonFiniteLoss::keep_going))
    throw ValueError(std::string("TrainStep: a GradScaler or a non-finite loss check with ") + replayed +
                     ": both read the host at each step, which a replay cannot; train eagerly (" + replayed +
                     " = false) or drop the scaler and the check");
  if (!(options.max_grad_norm >= 0))
    throw ValueError("TrainStep: max_grad_norm must be >= 0 (0: no clipping), got " +
                     std::to_string(options.max_grad_norm));
  impl_->model = &model;
  impl_->optimizer = &optimizer;
  impl_->loss_fn = options.loss ? options.loss : LossFn(default_loss);
  impl_->options = std::move(options);
}

TrainStep::~TrainStep() = default;

void TrainStep::operator()(const Array& x, const Array& y) { impl_->step(x, y); }

double TrainStep::mean_loss() const { return impl_->totals.mean_loss(); }
double TrainStep::accuracy() const { return impl_->totals.accuracy(impl_->options.accuracy); }
int64_t TrainStep::samples() const { return impl_->totals.samples; }
void TrainStep::reset_metrics() { impl_->totals.reset(); }
int64_t TrainStep::steps() const { return impl_->steps; }
int64_t TrainStep::non_finite_skipped() const { return impl_->non_finite_skipped; }
int64_t TrainStep::scaler_skipped() const { return impl_->scaler_skipped; }

bool TrainStep::graphed() const {
  if (impl_->compiled) return impl_->compiled->compiled();
#ifdef KILN_WITH_CUDA
  return impl_->graph != nullptr;
#else
  return false;
#endif
}

size_t TrainStep::graph_nodes() const {
  if (impl_->compiled) return static_cast<size_t>(impl_->compiled->recorded_ops());
#ifdef KILN_WITH_CUDA
  return impl_->graph ? impl_->graph->num_nodes() : 0;
#else
  return 0;
#endif
}

int64_t TrainStep::replays() const { return impl_->replays; }

std::string EpochMetrics::json() const {
  std::string s = "{\"epoch\": " + std::to_string(epoch) + ", \"train_loss\": " + number(train_loss);
  if (train_accuracy >= 0) s += ", \"train_accuracy\": " + number(train_accuracy);
  if (test_loss >= 0) s += ", \"test_loss\": " + number(test_loss);
  if (test_accuracy >= 0) s += ", \"test_accuracy\": " + number(test_accuracy);
  s += ", \"seconds\": " + number(seconds) + ", \"samples_per_second\": " + number(samples_per_second) +
       ", \"lr\": " + number(lr);
  if (non_finite_skipped >= 0) s += ", \"non_finite_skipped\": " + std::to_string(non_finite_skipped);
  if (scaler_skipped >= 0) s += ", \"scaler_skipped\": " + std::to_string(scaler_skipped);
  s += "}";
  return s;
}

std::pair<double, double> evaluate(nn::Module& model, data::DataLoader& loader, const LossFn& loss, bool accuracy) {
  const LossFn& fn = loss ? loss : LossFn(default_loss);
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  Totals totals;
  for (const data::Batch& b : loader) {
    const Array out = model(b.x);
    totals.add(fn(out, b.y), out, b.y, accuracy);
    totals.samples += rows_of(out);
  }
  model.train(was_training);
  return {totals.mean_loss(), totals.accuracy(accuracy)};
}

std::vector<EpochMetrics> fit(nn::Module& model, optim::Optimizer& optimizer, data::DataLoader& train,
                              data::DataLoader* test, const FitOptions& options) {
  std::ostream& out = options.out ? *options.out : std::cout;
  const bool terminal = options.progress && (&out == &std::cout) && isatty(fileno(stdout));
  const LossFn loss_fn = options.loss ? options.loss : LossFn(default_loss);
  std::ofstream log;
  if (!options.log_path.empty()) {
    log.open(options.log_path, std::ios::app);
    if (!log) throw ValueError("train::fit: cannot open the log " + options.log_path + " for appending");
  }
  std::vector<EpochMetrics> history;
  const int64_t batches = train.num_batches();
  Checkpoint ckpt{.model = &model,
                  .optimizer = &optimizer,
                  .scheduler = options.scheduler,
                  .scaler = options.scaler,
                  .loader = &train};
  if (!options.checkpoint.empty() && options.resume && std::filesystem::exists(options.checkpoint))
    load_checkpoint(options.checkpoint, ckpt);
  TrainStep step(model, optimizer,
                 {.loss = loss_fn,
                  .accuracy = options.accuracy,
                  .graph = options.graph,
                  .compile = options.compile,
                  .warmup = options.graph_warmup,
                  .max_grad_norm = options.max_grad_norm,
                  .scheduler = options.scheduler_per_epoch ? nullptr : options.scheduler,
                  .on_non_finite_loss = options.on_non_finite_loss,
                  .scaler = options.scaler});
  for (int64_t e = ckpt.epoch + 1; e <= options.epochs; ++e) {
    model.train();
    step.reset_metrics();
    const auto start = Clock::now();
    const int64_t loss_skipped_before = step.non_finite_skipped(), scaler_skipped_before = step.scaler_skipped();
    for (const data::Batch& b : train) {
      try {
        step(b.x, b.y);
      } catch (const NonFiniteLossError& error) {
        throw NonFiniteLossError("train::fit: epoch " + std::to_string(e) + ", batch " + std::to_string(b.index + 1) +
                                 " of " + std::to_string(batches) + ": " + error.what());
      }
      ++ckpt.step;
      if (options.checkpoint_every > 0 && !options.checkpoint.empty() && ckpt.step % options.checkpoint_every == 0) {
        ckpt.epoch = e - 1;
        ckpt.batch = b.index + 1;
        save_checkpoint(options.checkpoint, ckpt);
      }
      if (terminal && (b.index % 20 == 0 || b.index + 1 == batches)) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        const double rate = static_cast<double>(b.index + 1) / std::max(elapsed, 1e-9);
        const int done = static_cast<int>(30 * (b.index + 1) / batches);
        out << "\repoch " << e << "/" << options.epochs << " [" << std::string(static_cast<size_t>(done), '#')
            << std::string(static_cast<size_t>(30 - done), '.') << "] " << (b.index + 1) << "/" << batches << " "
            << static_cast<int64_t>(rate) << " batches/s, ETA "
            << static_cast<int64_t>(static_cast<double>(batches - b.index - 1) / rate) << " s" << std::flush;
      }
    }
    EpochMetrics m;
    m.epoch = e;
    m.train_loss = step.mean_loss();  // the one read of the epoch's metrics (synchronises)
    m.train_accuracy = step.accuracy();
    m.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    m.samples_per_second = static_cast<double>(step.samples()) / std::max(m.seconds, 1e-12);
    m.lr = optimizer.lr();
    if (options.on_non_finite_loss != NonFiniteLoss::keep_going)
      m.non_finite_skipped = step.non_finite_skipped() - loss_skipped_before;
    if (options.scaler) m.scaler_skipped = step.scaler_skipped() - scaler_skipped_before;
    if (test) std::tie(m.test_loss, m.test_accuracy) = evaluate(model, *test, loss_fn, options.accuracy);
    history.push_back(m);
    if (log) log << m.json() << "\n" << std::flush;
    if (options.progress) {
      char line[256];
      std::snprintf(line, sizeof line, "epoch %3lld  loss %.4f", static_cast<long long>(e), m.train_loss);
      std::string text = line;
      if (m.train_accuracy >= 0) text += "  acc " + std::to_string(m.train_accuracy).substr(0, 6);
      if (m.test_loss >= 0) {
        std::snprintf(line, sizeof line, "  test loss %.4f", m.test_loss);
        text += line;
      }
      if (m.test_accuracy >= 0) text += "  test acc " + std::to_string(m.test_accuracy).substr(0, 6);
      std::snprintf(line, sizeof line, "  %.2f s  %.0f samples/s", m.seconds, m.samples_per_second);
      text += line;
      if (m.non_finite_skipped > 0) text += "  skipped (NaN/Inf loss) " + std::to_string(m.non_finite_skipped);
      if (m.scaler_skipped > 0) text += "  skipped (scaler) " + std::to_string(m.scaler_skipped);
      out << (terminal ? "\r\033[K" : "") << text << "\n" << std::flush;
    }
    if (options.scheduler && options.scheduler_per_epoch) options.scheduler->step();
    bool go_on = true;
    for (const auto& callback : options.on_epoch_end) go_on = callback(m) && go_on;
    if (!options.checkpoint.empty()) {
      ckpt.epoch = e;
      ckpt.batch = 0;
      save_checkpoint(options.checkpoint, ckpt);
    }
    if (!go_on) break;
  }
  return history;
}

}  // namespace kiln::train
