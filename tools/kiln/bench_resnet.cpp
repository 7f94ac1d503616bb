// `kiln bench resnet50`: torchvision's ResNet-50 (models::resnet50, random weights) at 224x224, as
// ../shared/anchors/peers_nn.py and bench/peers/torch_bench.py --workloads resnet50 run it: batch-128
// inference (evaluation mode, no gradient) and a training step (zero_grad, forward, cross_entropy, backward,
// SGD with momentum 0.9 and weight decay 1e-4) on the GPU, float32, timed with events (median); batch-16
// inference on the CPU, timed with the host clock. cuDNN's benchmark mode is on (the peer sets
// torch.backends.cudnn.benchmark too); float32 convolutions may use TF32 as PyTorch's do by default.
// --quick: batch 32 on the GPU, 4 on the CPU.
#include <cmath>
#include <cstdlib>
#include <string>

#include "bench_common.hpp"
#include "kiln/models.hpp"

namespace kiln_cli {

using namespace kiln;

namespace {

std::string finite_check(const Array& a) {
  const double s = sum(a.astype(float64)).item<double>();
  return std::isfinite(s) ? "ok" : "the logits are not finite";
}

}  // namespace

void run_resnet50(BenchContext& ctx) {
  const bool smoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
  const int64_t side = smoke ? 64 : 224;
  const int64_t gpu_batch = smoke ? 2 : ctx.quick ? 32 : 128;
  const int64_t cpu_batch = smoke ? 1 : ctx.quick ? 4 : 16;
  title("resnet50", fmt::format("ResNet-50, {}x{} images, float32: GPU batch {} inference and training step, CPU "
                                "batch {} inference",
                                side, side, gpu_batch, cpu_batch));
  const bool was_benchmark = cudnn::benchmark();
  cudnn::set_benchmark(true);
  Table table({"case", "device", "batch", "median", "check"});
  if (ctx.gpu()) {
    random::seed(0);
    auto net = models::resnet50(1000, float32, ctx.device);
    const Array x = random::normal({gpu_batch, 3, side, side}, 0.0, 1.0, float32, ctx.device);
    const Array labels = random::randint(0, 1000, {gpu_batch}, int64, ctx.device);
    net->eval();
    std::string check;
    {
      NoGradGuard no_grad;
      check = finite_check((*net)(x));
      const BenchResult r = bench("infer_fp32", [&] { (void)(*net)(x); }, ctx.options(3, 10, 20));
      ctx.record("resnet50", "infer_fp32", "seconds", "s", ctx.seconds(r), false, check);
      table.row({"infer_fp32", ctx.device.str(), std::to_string(gpu_batch), format_seconds(ctx.seconds(r)), check});
    }
    net->train();
    optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
    Array loss;
    const BenchResult r = bench(
        "train_fp32",
        [&] {
          opt.zero_grad();
          loss = nn::cross_entropy((*net)(x), labels);
          loss.backward();
          opt.step();
        },
        ctx.options(3, 10, 30));
    check = std::isfinite(loss.item<double>()) ? "ok" : "the loss is not finite";
    ctx.record("resnet50", "train_fp32", "seconds", "s", ctx.seconds(r), false, check);
    table.row({"train_fp32", ctx.device.str(), std::to_string(gpu_batch), format_seconds(ctx.seconds(r)), check});
  } else {
    ctx.skip("resnet50 infer_fp32", ctx.no_gpu_reason());
    ctx.skip("resnet50 train_fp32", ctx.no_gpu_reason());
  }
  {
    random::seed(0);
    auto net = models::resnet50(1000, float32, cpu());
    net->eval();
    const Array x = random::normal({cpu_batch, 3, side, side}, 0.0, 1.0, float32, cpu());
    NoGradGuard no_grad;
    const std::string check = finite_check((*net)(x));
    const BenchResult r = bench("cpu_infer", [&] { (void)(*net)(x); },
                                {.warmup = ctx.quick ? 0 : 1, .repeat = ctx.quick ? 2 : 3, .max_seconds = 60,
                                 .devices = {cpu()}});
    ctx.record("resnet50", "cpu_infer_b16", "seconds", "s", summarize(r.host_seconds).median, false, check);
    table.row({"cpu_infer_b16", "cpu", std::to_string(cpu_batch), format_seconds(summarize(r.host_seconds).median), check});
  }
  cudnn::set_benchmark(was_benchmark);
  table.print();
  verdict("compare with bench/peers/torch_bench.py --workloads resnet50 (scripts/compare joins the records)");
}

}  // namespace kiln_cli
