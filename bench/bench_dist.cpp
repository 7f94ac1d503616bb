// Data-parallel benchmarks, one rank per GPU, started by `kiln launch --nproc N bench_dist [--json FILE]`
// (scripts/gpu-check --parts multi runs it with N = 1 and N = the GPUs present, beside its PyTorch peer
// bench/peers/torch_ddp.py under torchrun):
//   allreduce      all_reduce(sum) of 1 GiB of float32 over NCCL: time and bus bandwidth (2 (n-1)/n bytes per
//                  byte, NCCL's convention; the anchor is PyTorch's dist.all_reduce in the same call)
//   ddp_mlp        DistributedDataParallel training steps of the 784-1000-1000-10 MLP, batch 100 per GPU, SGD
//                  (the median of 5 windows of 300 steps); ddp_mlp_graph: the same steps, each captured once in
//                  a CUDA graph with its all-reduces (train::TrainStep) and replayed
//   ddp_resnet50   the same for ResNet-50, batch 128 per GPU, 224x224, float32, SGD momentum 0.9
//   ddp_gpt2       `kiln bench gpt2`'s training step (bench/gpt2_step.hpp: GPT-2 124M, vocabulary 50304, dropout 0,
//                  bfloat16 autocast, AdamW as two parameter groups, clip_grad_norm 1.0) in DistributedDataParallel,
//                  batch 16 x 1024 tokens per GPU, each rank's own random tokens (seeded by rank); 20 warm-up and
//                  50 timed steps. Records seconds (per step), tokens_per_s (over all ranks) and mfu (per GPU);
//                  the scaling against one rank is the table's (scripts/gpu-check) or `kiln bench gpt2 --nproc N`'s.
//                  --quick: d6, batch 4 x 128.
// Throughput is samples per second over all ranks. Each timing is CUDA events on rank 0's current stream
// around a loop that ends with every rank's work queued (a barrier before the start event).
// --quick: smaller sizes and fewer steps; --bucket-mb / --first-bucket-mb: DdpOptions' bucket sizes;
// --workloads allreduce,ddp_mlp,ddp_resnet50,ddp_gpt2: a subset (default all; ddp_mlp includes ddp_mlp_graph, the
// captured MLP step, which may also be asked for alone).
// --mlp-batches 1000,4000: the MLP's eager and graphed DDP steps again at these batches per GPU (records
// ddp_mlp_bB, ddp_mlp_graph_bB): at batch 100 a step computes for ~0.16 ms and the all-reduce of the first
// layer's gradient, the last one ready, cannot overlap anything; larger batches show how scaling grows with
// the compute a step has to hide its communication behind.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpt2_step.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

struct Record {
  std::string workload, metric, unit;
  double value;
};

/// Milliseconds of `steps` calls of f on the current stream, timed with events after `warmup` calls.
/// host_ms (optional) gets the host's time to queue the calls: near the event time, the loop is bound by the
/// host (or waits for the GPU inside a call); well below it, by the GPU.
template <class F>
double time_ms(Device d, int warmup, int steps, F&& f, double* host_ms = nullptr) {
  for (int i = 0; i < warmup; ++i) f();
  synchronize(d);
  dist::barrier();
  Event start = Event::create(d), stop = Event::create(d);
  const auto t0 = std::chrono::steady_clock::now();
  start.record();
  for (int i = 0; i < steps; ++i) f();
  stop.record();
  if (host_ms) *host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  stop.synchronize();
  return start.elapsed_ms(stop);
}

std::shared_ptr<nn::Module> mlp(Device d) {
  auto m = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(784, 1000), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 1000),
      std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(1000, 10)});
  m->to(d);
  return m;
}

dist::DdpOptions g_ddp;  // --bucket-mb, --first-bucket-mb

std::vector<std::string> split_commas(const std::string& list) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(list.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

/// Host milliseconds per step spent queueing each phase of a training step (where a step's host time goes).
struct Phases {
  double forward = 0, backward = 0, update = 0;
};

/// Samples per second of DDP training steps over all ranks: the median of `windows` timings of `steps` steps
/// each (a small model's sub-millisecond steps move with the host's jitter; the median of several windows is
/// steadier than one). host_ms_per_step / phases get the host's time per step in the median window. graph:
/// each step (forward, backward with the buckets' all-reduces, optimizer) captured once in a CUDA graph by
/// train::TrainStep and replayed, so the host's time per step is one launch.
double train_throughput(const std::shared_ptr<nn::Module>& model, const Shape& input, int64_t classes, Device d,
                        int warmup, int steps, double momentum, int windows = 1, double* host_ms_per_step = nullptr,
                        Phases* phases = nullptr, bool graph = false) {
  dist::DistributedDataParallel ddp(model, g_ddp);
  optim::SGD opt(ddp.parameters(), {.lr = 0.01, .momentum = momentum});
  Array x = random::normal(input, float32, d);
  Array y = random::randint(0, classes, {input[0]}, int64, d);
  using Clock = std::chrono::steady_clock;
  Phases sum;
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  std::optional<Stream> side;
  std::optional<StreamGuard> on_side;
  std::unique_ptr<train::TrainStep> graphed;
  if (graph) {  // replays on a stream of its own, as the plain graph_step below
    side.emplace(Stream::create(d));
    on_side.emplace(*side);
    graphed = std::make_unique<train::TrainStep>(ddp, opt, train::StepOptions{.accuracy = false, .graph = true});
  }
  auto step = [&] {
    if (graphed) return (*graphed)(x, y);  // after 3 eager steps (the warm-up), one replay of the captured step
    auto t = Clock::now();
    opt.zero_grad();
    Array loss = nn::cross_entropy(ddp(x), y);
    sum.forward += ms_since(t);
    t = Clock::now();
    loss.backward();
    sum.backward += ms_since(t);
    t = Clock::now();
    opt.step();
    sum.update += ms_since(t);
  };
  struct Window {
    double ms, host;
    Phases phases;
    bool operator<(const Window& o) const { return ms < o.ms; }
  };
  std::vector<Window> timings;
  for (int w = 0; w < windows; ++w) {
    if (w == 0)
      for (int i = 0; i < warmup; ++i) step();
    sum = {};
    double host = 0;
    const double ms = time_ms(d, 0, steps, step, &host);
    timings.push_back({ms, host, {sum.forward / steps, sum.backward / steps, sum.update / steps}});
  }
  std::sort(timings.begin(), timings.end());
  const Window& median = timings[timings.size() / 2];
  if (host_ms_per_step) *host_ms_per_step = median.host / steps;
  if (phases) *phases = median.phases;
  return static_cast<double>(input[0] * dist::world_size() * steps) / (median.ms / 1000.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  std::string workloads = "allreduce,ddp_mlp,ddp_resnet50,ddp_gpt2";
  std::vector<int64_t> mlp_batches;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--mlp-batches") == 0 && i + 1 < argc)
      for (const std::string& b : split_commas(argv[++i])) mlp_batches.push_back(std::stoll(b));
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--workloads") == 0 && i + 1 < argc) workloads = argv[++i];
    if (std::strcmp(argv[i], "--bucket-mb") == 0 && i + 1 < argc) g_ddp.bucket_cap_mb = std::atof(argv[++i]);
    if (std::strcmp(argv[i], "--first-bucket-mb") == 0 && i + 1 < argc) g_ddp.first_bucket_mb = std::atof(argv[++i]);
  }
  try {
    if (num_gpus() == 0) {
      std::fprintf(stderr, "bench_dist: no GPU; these benchmarks time NCCL (start it on a GPU machine)\n");
      return 0;
    }
    dist::init_process_group();
    const Device d = dist::default_group().device();
    set_current_device(d);
    const int n = dist::world_size();
    std::vector<Record> records;
    const std::vector<std::string> picked = split_commas(workloads);
    auto wanted = [&](const std::string& w) { return std::find(picked.begin(), picked.end(), w) != picked.end(); };

    if (wanted("allreduce")) {
      const int64_t elems = quick ? (int64_t{1} << 24) : (int64_t{1} << 28);
      Array x = ones({elems}, float32, d);
      const int steps = quick ? 5 : 20;
      const double ms = time_ms(d, 5, steps, [&] { dist::all_reduce(x); }) / steps;
      const double bytes = static_cast<double>(elems) * 4.0;
      records.push_back({"allreduce", "seconds", "s", ms / 1000.0});
      if (n > 1) records.push_back({"allreduce", "busbw", "GB/s", bytes * 2.0 * (n - 1) / n / (ms / 1000.0) / 1e9});
    }
    random::seed(0);
    if (wanted("ddp_mlp")) {
      double host = 0;
      Phases ph;
      records.push_back(
          {"ddp_mlp", "throughput", "samples/s",
           train_throughput(mlp(d), {100, 784}, 10, d, 20, quick ? 50 : 300, 0.0, quick ? 1 : 5, &host, &ph)});
      records.push_back({"ddp_mlp", "host_step", "s", host / 1000.0});
      records.push_back({"ddp_mlp", "host_forward", "s", ph.forward / 1000.0});
      records.push_back({"ddp_mlp", "host_backward", "s", ph.backward / 1000.0});
      records.push_back({"ddp_mlp", "host_update", "s", ph.update / 1000.0});
    }
    if (wanted("ddp_mlp") || wanted("ddp_mlp_graph")) {  // the same steps, each replayed from a CUDA graph
      double host = 0;
      records.push_back({"ddp_mlp_graph", "throughput", "samples/s",
                         train_throughput(mlp(d), {100, 784}, 10, d, 20, quick ? 50 : 300, 0.0, quick ? 1 : 5, &host,
                                          nullptr, true)});
      records.push_back({"ddp_mlp_graph", "host_step", "s", host / 1000.0});
    }
    if (wanted("ddp_mlp")) {  // Where the MLP's time goes: the same step without DDP (each rank alone), and the
                              // all-reduce of its gradients.
      auto plain = mlp(d);
      optim::SGD opt(plain->parameters(), {.lr = 0.01});
      Array x = random::normal({100, 784}, float32, d);
      Array y = random::randint(0, 10, {100}, int64, d);
      const int steps = quick ? 50 : 300;
      double host = 0;
      const double ms = time_ms(
          d, 20, steps,
          [&] {
            opt.zero_grad();
            nn::cross_entropy((*plain)(x), y).backward();
            opt.step();
          },
          &host);
      records.push_back({"mlp_no_ddp", "step", "s", ms / steps / 1000.0});
      records.push_back({"mlp_no_ddp", "host_step", "s", host / steps / 1000.0});
      // The host's cost of queueing 20 steps (too few to fill CUDA's launch queue: the host never waits), and
      // the GPU's time for a step (captured in a CUDA graph and replayed: one launch a step).
      double enqueue = 0;
      time_ms(
          d, 0, 20,
          [&] {
            opt.zero_grad();
            nn::cross_entropy((*plain)(x), y).backward();
            opt.step();
          },
          &enqueue);
      records.push_back({"mlp_no_ddp", "host_enqueue", "s", enqueue / 20 / 1000.0});
      {
        Stream side = Stream::create(d);
        StreamGuard on(side);
        train::TrainStep graphed(*plain, opt, {.accuracy = false, .graph = true});
        const double gms = time_ms(d, 10, steps, [&] { graphed(x, y); });
        records.push_back({"mlp_no_ddp", "graph_step", "s", gms / steps / 1000.0});
      }
      int64_t numel = 0;
      for (const Array& p : plain->parameters()) numel += p.size();
      Array g = ones({numel}, float32, d);
      const double ar = time_ms(d, 5, 50, [&] { dist::all_reduce(g, dist::ReduceOp::avg); }) / 50;
      records.push_back({"allreduce_mlp_grads", "seconds", "s", ar / 1000.0});
    }
    for (const int64_t batch : mlp_batches) {  // --mlp-batches: the same steps with more compute per step
      const std::string b = "_b" + std::to_string(batch);
      const int steps = quick ? 20 : std::max<int>(50, static_cast<int>(30000 / batch));
      records.push_back({"ddp_mlp" + b, "throughput", "samples/s",
                         train_throughput(mlp(d), {batch, 784}, 10, d, 10, steps, 0.0, quick ? 1 : 5)});
      records.push_back(
          {"ddp_mlp_graph" + b, "throughput", "samples/s",
           train_throughput(mlp(d), {batch, 784}, 10, d, 10, steps, 0.0, quick ? 1 : 5, nullptr, nullptr, true)});
    }
    if (!quick && wanted("ddp_resnet50")) {
      auto net = models::resnet50();
      net->to(d);
      cudnn::set_benchmark(true);
      records.push_back(
          {"ddp_resnet50", "throughput", "samples/s", train_throughput(net, {128, 3, 224, 224}, 1000, d, 5, 15, 0.9)});
    }
    if (wanted("ddp_gpt2")) {
      const int64_t batch = quick ? 4 : 16, seq = quick ? 128 : 1024;
      kiln_bench::Gpt2DdpRun run(quick ? "d6" : "124m", batch, seq, true, g_ddp, d);
      Array loss;
      const int steps = quick ? 10 : 50;
      const double seconds = time_ms(d, quick ? 3 : 20, steps, [&] { loss = run(); }) / steps / 1000.0;
      if (!std::isfinite(loss.item<double>()))
        throw Error("ddp_gpt2: the loss is not finite after " + std::to_string(steps) + " timed steps");
      const double tokens = static_cast<double>(batch * seq);
      records.push_back({"ddp_gpt2", "seconds", "s", seconds});
      records.push_back({"ddp_gpt2", "tokens_per_s", "tokens/s", tokens * n / seconds});
      const double peak = peak_bf16_tflops(device_properties(d));
      if (peak > 0)
        records.push_back(
            {"ddp_gpt2", "mfu", "fraction", tokens * run.step.flops_per_token(seq) / seconds / (peak * 1e12)});
    }
    if (dist::rank() == 0) {
      fmt::print("bench_dist: {} rank(s), {} each\n", n, d.str());
      for (const Record& r : records)
        fmt::print("  {:<14} {:<11} {:>12.4g} {}\n", r.workload, r.metric, r.value, r.unit);
      if (!json.empty()) {
        std::ofstream f(json);
        f << "{\"world_size\": " << n << ", \"gpu\": \"" << device_properties(d).name << "\", \"records\": [";
        for (size_t i = 0; i < records.size(); ++i)
          f << (i ? ", " : "") << "{\"workload\": \"" << records[i].workload << "\", \"metric\": \""
            << records[i].metric << "\", \"unit\": \"" << records[i].unit << "\", \"value\": " << records[i].value
            << "}";
        f << "]}\n";
      }
    }
    dist::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dist: %s\n", e.what());
    return 1;
  }
  return 0;
}
