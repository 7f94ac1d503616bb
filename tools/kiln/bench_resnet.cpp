// `kiln bench resnet50`: torchvision's ResNet-50 (models::resnet50, random weights) at 224x224, as its PyTorch
// peer bench/peers/torch_bench.py --workloads resnet50 runs it (the same records): batch-128
// inference (evaluation mode, no gradient; again with the batch norms folded, ResNet::fold_batch_norm) and a
// training step (zero_grad, forward, cross_entropy, backward,
// SGD with momentum 0.9 and weight decay 1e-4) on the GPU, in float32 (NCHW) and with bfloat16 autocast
// (network and images channels-last), timed with events (median); batch-16
// inference on the CPU, timed with the host clock. cuDNN's benchmark mode is on (the peer sets
// torch.backends.cudnn.benchmark too); float32 convolutions may use TF32 as PyTorch's do by default.
// The training step again captured in a CUDA graph (train::TrainStep) and replayed: train_fp32_graph and
// train_bf16_cl_graph (no counterpart in the peer, bench/peers/torch_bench.py's resnet50 workload).
// --quick: batch 32 on the GPU, 4 on the CPU.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "bench_common.hpp"
#ifdef KILN_WITH_CUDA
#include "kiln/cuda.hpp"
#endif
#include "kiln/models.hpp"
#include "kiln/train.hpp"

namespace kiln_cli {

using namespace kiln;

namespace {

std::string finite_check(const Array& a) {
  const double s = sum(a.astype(float64)).item<double>();
  return std::isfinite(s) ? "ok" : "the logits are not finite";
}

/// The network's forward under an autocast scope (none for float32), so train::TrainStep runs the bench's step.
class AutocastForward final : public nn::Module {
 public:
  AutocastForward(std::shared_ptr<nn::Module> net, std::optional<DType> cast)
      : net_(register_module("net", std::move(net))), cast_(cast) {}
  Array forward(const Array& x) override {
    AutocastGuard autocast(cast_);
    return (*net_)(x);
  }
  std::string name() const override { return "AutocastForward"; }

 private:
  std::shared_ptr<nn::Module> net_;
  std::optional<DType> cast_;
};

}  // namespace

void run_resnet50(BenchContext& ctx) {
  const bool smoke = std::getenv("KILN_BENCH_SMOKE") != nullptr;
  const int64_t side = smoke ? 64 : 224;
  const int64_t gpu_batch = smoke ? 2 : ctx.quick ? 32 : 128;
  const int64_t cpu_batch = smoke ? 1 : ctx.quick ? 4 : 16;
  title("resnet50", fmt::format("ResNet-50, {}x{} images: GPU batch {} inference and training step (float32, "
                                "bfloat16 channels-last), CPU batch {} float32 inference",
                                side, side, gpu_batch, cpu_batch));
  const bool was_benchmark = cudnn::benchmark();
  cudnn::set_benchmark(true);
  Table table({"case", "device", "batch", "median", "check"});
  std::string peak;
  double gpu_per_image = 0;
  if (ctx.gpu()) {
#ifdef KILN_WITH_CUDA
    cuda::reset_peak_memory_stats(ctx.device);
    size_t eager_peak = 0;
#endif
    const Array x = random::normal({gpu_batch, 3, side, side}, 0.0, 1.0, float32, ctx.device);
    const Array labels = random::randint(0, 1000, {gpu_batch}, int64, ctx.device);
    // float32 NCHW, then bfloat16 autocast with the network and the images channels-last (as
    // bench/peers/torch_bench.py's cases)
    for (const bool amp : {false, true}) {
      const std::string suffix = amp ? "_bf16_cl" : "_fp32";
      random::seed(0);
      auto net = models::resnet50(1000, float32, ctx.device);
      if (amp) net->to_channels_last();
      const Array input = amp ? to_channels_last(x) : x;
      const std::optional<DType> cast = amp ? std::optional<DType>(bfloat16) : std::nullopt;
      net->eval();
      {
        NoGradGuard no_grad;
        AutocastGuard autocast(cast);
        // The walkthrough's two extra figures: the first call (one-time costs: cuDNN's algorithm search, kernel
        // loading, the allocator's first blocks) and the WRONG host clock without a synchronisation.
        synchronize(ctx.device);
        double t0 = now_s();
        const std::string check = finite_check((*net)(input));  // reads the logits: synchronises
        const double first = now_s() - t0;
        std::vector<double> no_sync;
        for (int i = 0; i < 5; ++i) {
          t0 = now_s();
          (void)(*net)(input);
          no_sync.push_back(now_s() - t0);  // WRONG ON PURPOSE: the work is only queued
          synchronize(ctx.device);
        }
        table.row({"infer" + suffix + " first call", ctx.device.str(), std::to_string(gpu_batch), format_seconds(first),
                   "one-time costs included"});
        table.row({"infer" + suffix + " no sync", ctx.device.str(), std::to_string(gpu_batch),
                   format_seconds(summarize(no_sync).median), "WRONG: host clock, no synchronisation"});
        const BenchResult r = bench(
            "infer" + suffix, [&] { (void)(*net)(input); }, ctx.options(3, 10, 20));
        ctx.record("resnet50", "infer" + suffix, "seconds", "s", ctx.seconds(r), false, check);
        if (!amp) gpu_per_image = ctx.seconds(r) / static_cast<double>(gpu_batch);
        table.row(
            {"infer" + suffix, ctx.device.str(), std::to_string(gpu_batch), format_seconds(ctx.seconds(r)), check});
      }
      {  // the same inference with the batch norms folded into the convolutions (a copy: training goes on below)
        random::seed(0);
        auto folded = models::resnet50(1000, float32, ctx.device);
        if (amp) folded->to_channels_last();
        folded->eval();
        folded->fold_batch_norm();
        NoGradGuard no_grad;
        AutocastGuard autocast(cast);
        const std::string check = finite_check((*folded)(input));
        const BenchResult r = bench(
            "infer" + suffix + "_folded", [&] { (void)(*folded)(input); }, ctx.options(3, 10, 20));
        ctx.record("resnet50", "infer" + suffix + "_folded", "seconds", "s", ctx.seconds(r), false, check);
        table.row({"infer" + suffix + "_folded", ctx.device.str(), std::to_string(gpu_batch),
                   format_seconds(ctx.seconds(r)), check});
#ifdef KILN_WITH_CUDA
        // The folded forward captured once in a CUDA graph (after the calls above chose the algorithms) and
        // replayed: one launch, so the host's cost of queueing ~110 ops per forward drops out (a table row only;
        // its PyTorch counterpart would be torch.cuda.graphs, which the peer does not run).
        Stream side = Stream::create(ctx.device);
        cuda::Graph graph;
        Array logits;
        {
          cuda::GraphCapture capture(graph, side);
          logits = (*folded)(input);
        }
        const BenchResult g = bench(
            "infer" + suffix + "_folded_graph", [&] { graph.replay(Stream::current(ctx.device)); },
            ctx.options(3, 10, 20));
        table.row({"infer" + suffix + "_folded graph", ctx.device.str(), std::to_string(gpu_batch),
                   format_seconds(ctx.seconds(g)), finite_check(logits)});
#endif
      }
      net->train();
      optim::SGD opt(net->parameters(), {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-4});
      Array loss;
      auto step = [&] {
        opt.zero_grad();
        {
          AutocastGuard autocast(cast);
          loss = nn::cross_entropy((*net)(input), labels);
        }
        loss.backward();
        opt.step();
      };
      const BenchResult r = bench("train" + suffix, step, ctx.options(3, 10, 30));
      {  // the host's time to queue one step (the GPU idles when it exceeds the step's GPU time)
        std::vector<double> queue;
        for (int i = 0; i < 5; ++i) {
          synchronize(ctx.device);
          const double t0 = now_s();
          step();
          queue.push_back(now_s() - t0);
        }
        synchronize(ctx.device);
        table.row({"train" + suffix + " host queue", ctx.device.str(), std::to_string(gpu_batch),
                   format_seconds(summarize(queue).median), "host time to queue a step (no synchronisation)"});
      }
      const std::string check = std::isfinite(loss.item<double>()) ? "ok" : "the loss is not finite";
      ctx.record("resnet50", "train" + suffix, "seconds", "s", ctx.seconds(r), false, check);
      table.row({"train" + suffix, ctx.device.str(), std::to_string(gpu_batch), format_seconds(ctx.seconds(r)), check});
#ifdef KILN_WITH_CUDA
      {  // the same step captured once in a CUDA graph and replayed (one launch a step: the host drops out)
        eager_peak = std::max(eager_peak, cuda::memory_stats(ctx.device).peak_allocated);
        AutocastForward forward(net, cast);
        train::TrainStep graphed(forward, opt,
                                 {.loss =
                                      [&](const Array& out, const Array& y) {
                                        AutocastGuard autocast(cast);
                                        return nn::cross_entropy(out, y);
                                      },
                                  .accuracy = false,
                                  .graph = true,
                                  .warmup = 1});
        const BenchResult g = bench(
            "train" + suffix + "_graph", [&] { graphed(input, labels); }, ctx.options(3, 10, 30));
        const double mean_loss = graphed.mean_loss();
        const std::string graph_check = std::isfinite(mean_loss) ? "ok" : "the loss is not finite";
        ctx.record("resnet50", "train" + suffix + "_graph", "seconds", "s", ctx.seconds(g), false, graph_check);
        table.row({"train" + suffix + "_graph", ctx.device.str(), std::to_string(gpu_batch),
                   format_seconds(ctx.seconds(g)), graph_check});
      }
      // The graph's private memory is gone with it; the eager steps' peak is what the verdict reports.
      cuda::reset_peak_memory_stats(ctx.device);
#endif
    }
#ifdef KILN_WITH_CUDA
    eager_peak = std::max(eager_peak, cuda::memory_stats(ctx.device).peak_allocated);
    peak = fmt::format(
        "; peak GPU memory allocated {:.2f} GiB without the graphed steps (torch.cuda.max_memory_allocated's "
        "measure)",
        static_cast<double>(eager_peak) / (1 << 30));
#endif
  } else {
    for (const char* c : {"infer_fp32", "infer_fp32_folded", "train_fp32", "train_fp32_graph", "infer_bf16_cl",
                          "infer_bf16_cl_folded", "train_bf16_cl", "train_bf16_cl_graph"})
      ctx.skip(std::string("resnet50 ") + c, ctx.no_gpu_reason());
  }
  {
    random::seed(0);
    auto net = models::resnet50(1000, float32, cpu());
    net->eval();
    const Array x = random::normal({cpu_batch, 3, side, side}, 0.0, 1.0, float32, cpu());
    NoGradGuard no_grad;
    const std::string check = finite_check((*net)(x));
    const BenchResult r =
        bench("cpu_infer", [&] { (void)(*net)(x); },
              {.warmup = ctx.quick ? 0 : 1, .repeat = ctx.quick ? 2 : 3, .max_seconds = 60, .devices = {cpu()}});
    ctx.record("resnet50", "cpu_infer_b16", "seconds", "s", summarize(r.host_seconds).median, false, check);
    table.row(
        {"cpu_infer_b16", "cpu", std::to_string(cpu_batch), format_seconds(summarize(r.host_seconds).median), check});
    if (gpu_per_image > 0)
      peak += fmt::format("; float32 inference per image: the GPU {:.0f}x the CPU ({} vs {})",
                          summarize(r.host_seconds).median / static_cast<double>(cpu_batch) / gpu_per_image,
                          format_seconds(gpu_per_image),
                          format_seconds(summarize(r.host_seconds).median / static_cast<double>(cpu_batch)));
  }
  cudnn::set_benchmark(was_benchmark);
  table.print();
  verdict("compare with bench/peers/torch_bench.py --workloads resnet50 (scripts/compare joins the records)" + peak);
}

}  // namespace kiln_cli
