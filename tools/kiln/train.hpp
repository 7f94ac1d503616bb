// `kiln train`: training walkthroughs on the best device present.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/nn.hpp"

namespace kiln_cli {

struct TrainArgs {
  std::string model = "mlp";
  std::string device;  ///< empty: the best device present
  std::string data = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 20;
  int64_t batch = 100;
  int64_t units = 100;
  std::vector<int64_t> hidden;  ///< widths of the hidden layers (empty: two of `units`)
  double dropout = 0.5;
  std::string optimizer = "sgd";
  std::optional<double> lr;  ///< unset: the optimizer's default (SGD 0.01, the walkthrough's; Adam 0.001, PyTorch's)
  double momentum = 0.0;
  uint64_t seed = 0;
  std::string log;                ///< JSON-lines log
  std::string checkpoint;         ///< safetensors file written at the end
  std::string resume;             ///< the run's state (train::save_checkpoint): loaded if present, kept current
  int64_t save_every = 0;         ///< steps between saves of `resume` (0: at each epoch's end only)
  double max_grad_norm = 0;       ///< gradient clipping (0: none)
  bool graph = false;             ///< capture each step in a CUDA graph (GPU only)
  bool compile = false;           ///< replay each step with kiln::compile (any device)
  int nproc = 1;                  ///< data-parallel ranks (kiln launch starts them; each trains on its share)
  std::vector<std::string> argv;  ///< the command line, to start the ranks with
};

int train_mlp(const TrainArgs& args);
/// The data-parallel start of `kiln train` (--nproc N): in the first process (not `launched`, i.e. no rank of a
/// launch) with nproc > 1, starts N ranks running this command line under kiln launch and returns their exit
/// status; otherwise nullopt (train here). Checks --resume/--save-every against --nproc (ValueError).
std::optional<int> start_ranks(const TrainArgs& args, bool launched);
/// The device this process trains on (--device, else the best present); a launched rank first joins the
/// process group (on the CPU when there are fewer GPUs than ranks) and trains on the group's device.
kiln::Device join_ranks(const TrainArgs& args, bool launched);
/// 784 -> hidden... -> 10 with ReLU (and Dropout(dropout) when positive) after each hidden layer, float32 on
/// `device`: the walkthrough's MLP, for `kiln train` and `kiln bench train`.
std::shared_ptr<kiln::nn::Sequential> mlp_model(const std::vector<int64_t>& hidden, double dropout,
                                                kiln::Device device);
/// "100,100" -> {100, 100}; throws kiln::ValueError for anything else than positive integers.
std::vector<int64_t> parse_widths(const std::string& text);

}  // namespace kiln_cli
