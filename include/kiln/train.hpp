// A training loop in the spirit of Chainer's Trainer and Keras' fit: epochs over a DataLoader, an evaluation
// on a test set after each, metrics per epoch, callbacks, a progress line on a terminal (plain lines
// otherwise) and a JSON-lines log.
//
//   train::FitOptions options{.epochs = 20, .log_path = "train.jsonl"};
//   std::vector<train::EpochMetrics> history = train::fit(*model, opt, train_loader, &test_loader, options);
//
// Metrics stay on the device during an epoch (sums of losses and of correct predictions as 0-d arrays) and are
// read once at its end, so the loop never waits for the GPU between steps (beyond what the ops themselves do).
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
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
  /// The record as one JSON object (the log's line).
  std::string json() const;
};

using LossFn = std::function<Array(const Array& output, const Array& target)>;

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
  /// Called after each epoch's metrics are known (schedulers, checkpoints, early stopping: return false to stop).
  std::vector<std::function<bool(const EpochMetrics&)>> on_epoch_end{};
};

/// Trains `model` with `optimizer` for options.epochs epochs (train mode), evaluating on `test` after each
/// (eval mode, no gradients). Returns the metrics of every epoch.
std::vector<EpochMetrics> fit(nn::Module& model, optim::Optimizer& optimizer, data::DataLoader& train,
                              data::DataLoader* test, const FitOptions& options = {});

/// The mean loss (and accuracy) of `model` over one pass of `loader`, in eval mode without gradients.
std::pair<double, double> evaluate(nn::Module& model, data::DataLoader& loader, const LossFn& loss = {},
                                   bool accuracy = true);

}  // namespace kiln::train
