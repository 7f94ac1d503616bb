// `kiln train`: training walkthroughs on the best device present.
#pragma once

#include <cstdint>
#include <string>

namespace kiln_cli {

struct TrainArgs {
  std::string model = "mlp";
  std::string device;  ///< empty: the best device present
  std::string data = "/usr/share/datasets/fashion-mnist";
  int64_t epochs = 20;
  int64_t batch = 100;
  int64_t units = 100;
  double dropout = 0.5;
  std::string optimizer = "sgd";
  double lr = 0.01;
  double momentum = 0.0;
  uint64_t seed = 0;
  std::string log;         ///< JSON-lines log
  std::string checkpoint;  ///< safetensors file written at the end
};

int train_mlp(const TrainArgs& args);

}  // namespace kiln_cli
