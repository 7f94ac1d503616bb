// `kiln bench lstm`: nn::LSTM with 2 layers, input and hidden 1024, a sequence of 256 steps in a batch of 64,
// float32, as its PyTorch peer bench/peers/torch_bench.py --workloads lstm runs torch.nn.LSTM (the same records;
// cases in bench/peers/common.py, LSTM_CASES): fwd_fp32 (forward under no-grad), fwd_bwd_fp32 (forward, the sum
// of the output, backward into every parameter and the input) on the GPU, timed with events (median);
// cpu_fwd and cpu_fwd_bwd (hidden and input 256, 32 steps, batch 16) on the CPU with the host clock, and
// small_fwd_bwd_fp32, that shape on the GPU. Both run cuDNN's LSTM on the GPU (kiln's parameters are views of
// cuDNN's weight space, as PyTorch's after flatten_parameters); on the CPU kiln runs its own recurrence (the
// input projection of all steps in one product, then per step one product and one fused gate kernel).
// --quick: 64 steps on the GPU.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace kiln_cli {

using namespace kiln;

namespace {

struct LstmShape {
  int64_t steps, batch, input, hidden, layers;
};

std::string finite(const Array& a) {
  const double s = sum(a.astype(float64)).item<double>();
  return std::isfinite(s) ? "ok" : "the result is not finite";
}

}  // namespace

void run_lstm(BenchContext& ctx) {
  const bool smoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
  const LstmShape gpu_shape{smoke ? 8 : ctx.quick ? 64 : 256, smoke ? 4 : 64, smoke ? 32 : 1024, smoke ? 32 : 1024, 2};
  const LstmShape cpu_shape{smoke ? 4 : 32, smoke ? 2 : 16, smoke ? 16 : 256, smoke ? 16 : 256, 2};
  title("lstm", fmt::format("nn::LSTM, {} layers, hidden {}, {} steps, batch {} (GPU), forward and forward+backward; "
                            "CPU: hidden {}, {} steps, batch {}",
                            gpu_shape.layers, gpu_shape.hidden, gpu_shape.steps, gpu_shape.batch, cpu_shape.hidden,
                            cpu_shape.steps, cpu_shape.batch));
  Table table({"case", "device", "shape (T, N, H)", "median", "check"});
  auto run = [&](const std::string& name, const LstmShape& s, Device d, bool backward) {
    random::seed(0);
    nn::LSTM lstm(s.input, s.hidden, {.num_layers = s.layers, .device = d});
    Array x = random::normal({s.steps, s.batch, s.input}, 0.0, 1.0, float32, d);
    if (backward) x.set_requires_grad();
    Array y;
    auto step = [&] {
      if (backward) {
        lstm.zero_grad();
        x.set_grad(Array());
        y = lstm(x);
        sum(y).backward();
      } else {
        NoGradGuard no_grad;
        y = lstm(x);
      }
    };
    const BenchResult r = bench(name, step, ctx.options(2, 10, 30));
    const std::string check = backward ? finite(x.grad()) : finite(y);
    ctx.record("lstm", name, "seconds", "s", ctx.seconds(r), false, check);
    table.row({name, d.str(), fmt::format("({}, {}, {})", s.steps, s.batch, s.hidden), format_seconds(ctx.seconds(r)),
               check});
  };
  if (ctx.gpu()) {
    run("fwd_fp32", gpu_shape, ctx.device, false);
    run("fwd_bwd_fp32", gpu_shape, ctx.device, true);
    run("small_fwd_bwd_fp32", cpu_shape, ctx.device, true);
  } else {
    for (const char* c : {"fwd_fp32", "fwd_bwd_fp32", "small_fwd_bwd_fp32"})
      ctx.skip(std::string("lstm ") + c, ctx.no_gpu_reason());
  }
  run("cpu_fwd", cpu_shape, cpu(), false);
  run("cpu_fwd_bwd", cpu_shape, cpu(), true);
  table.print();
  verdict("compare with bench/peers/torch_bench.py --workloads lstm (torch.nn.LSTM, cuDNN on the GPU)");
}

}  // namespace kiln_cli
