// `kiln train`: training walkthroughs on the best device present.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
  double lr = 0.01;
  double momentum = 0.0;
  uint64_t seed = 0;
  std::string log;         ///< JSON-lines log
  std::string checkpoint;  ///< safetensors file written at the end
  bool graph = false;  ///< capture each step in a CUDA graph (GPU only)
};

int train_mlp(const TrainArgs& args);
/// "100,100" -> {100, 100}; throws kiln::ValueError for anything else than positive integers.
std::vector<int64_t> parse_widths(const std::string& text);

}  // namespace kiln_cli
