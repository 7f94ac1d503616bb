// libFuzzer target: train::load_checkpoint on arbitrary bytes, into a small model (Linear 3->2), Adam, a StepLR
// schedule and a GradScaler. A file that is not a whole, matching checkpoint must be refused with a kiln::Error.
// With KILN_FUZZ_WRITE_SEED=PATH set, the program writes a checkpoint of these objects to PATH (after a step, so
// that every section holds state) and exits: make_corpus.py makes the seeds from it.
#include <cstdlib>
#include <memory>

#include "fuzz_util.hpp"
#include "kiln/nn.hpp"
#include "kiln/ops.hpp"
#include "kiln/optim.hpp"
#include "kiln/train.hpp"

namespace {

struct Run {
  std::shared_ptr<kiln::nn::Linear> model = std::make_shared<kiln::nn::Linear>(3, 2);
  kiln::optim::Adam opt{model->parameters(), kiln::optim::AdamOptions{.lr = 0.01}};
  kiln::optim::StepLR schedule{opt, 4, 0.5};
  kiln::optim::GradScaler scaler;
  kiln::train::Checkpoint checkpoint{
      .model = model.get(), .optimizer = &opt, .scheduler = &schedule, .scaler = &scaler};
};

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* seed = std::getenv("KILN_FUZZ_WRITE_SEED");
  if (seed == nullptr) return 0;
  Run run;
  kiln::Array loss = kiln::sum(run.model->forward(kiln::ones({4, 3})));
  run.scaler.scale(loss).backward();
  run.scaler.step(run.opt);
  run.scaler.update();
  run.schedule.step();
  run.checkpoint.epoch = 1;
  run.checkpoint.batch = 2;
  run.checkpoint.step = 3;
  kiln::train::save_checkpoint(seed, run.checkpoint);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = kiln_fuzz::scratch_path(".ckpt.safetensors");
  kiln_fuzz::write_file(path, {reinterpret_cast<const char*>(data), size});
  Run run;  // fresh objects per input: a refused file may have restored some of them before the error
  kiln_fuzz::expect_kiln_errors_only([&] { kiln::train::load_checkpoint(path, run.checkpoint); });
  return 0;
}
