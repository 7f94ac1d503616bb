// Data-parallel benchmarks, one rank per GPU, started by `kiln launch --nproc N bench_dist [--json FILE]`
// (scripts/gpu-check --parts multi runs it with N = 1 and N = the GPUs present, beside its PyTorch peer
// bench/peers/torch_ddp.py under torchrun):
//   allreduce      all_reduce(sum) of 1 GiB of float32 over NCCL: time and bus bandwidth (2 (n-1)/n bytes per
//                  byte, NCCL's convention; the anchor is PyTorch's dist.all_reduce in the same call)
//   ddp_mlp        DistributedDataParallel training steps of the 784-1000-1000-10 MLP, batch 100 per GPU, SGD
//   ddp_resnet50   the same for ResNet-50, batch 128 per GPU, 224x224, float32, SGD momentum 0.9
// Throughput is samples per second over all ranks. Each timing is CUDA events on rank 0's current stream
// around a loop that ends with every rank's work queued (a barrier before the start event).
// --quick: smaller sizes and fewer steps; --bucket-mb / --first-bucket-mb: DdpOptions' bucket sizes.
#include <fmt/core.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

struct Record {
  std::string workload, metric, unit;
  double value;
};

/// Milliseconds of `steps` calls of f on the current stream, timed with events after `warmup` calls.
template <class F>
double time_ms(Device d, int warmup, int steps, F&& f) {
  for (int i = 0; i < warmup; ++i) f();
  synchronize(d);
  dist::barrier();
  Event start = Event::create(d), stop = Event::create(d);
  start.record();
  for (int i = 0; i < steps; ++i) f();
  stop.record();
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

double train_throughput(const std::shared_ptr<nn::Module>& model, const Shape& input, int64_t classes, Device d,
                        int warmup, int steps, double momentum) {
  dist::DistributedDataParallel ddp(model, g_ddp);
  optim::SGD opt(ddp.parameters(), {.lr = 0.01, .momentum = momentum});
  Array x = random::normal(input, float32, d);
  Array y = random::randint(0, classes, {input[0]}, int64, d);
  const double ms = time_ms(d, warmup, steps, [&] {
    opt.zero_grad();
    nn::cross_entropy(ddp(x), y).backward();
    opt.step();
  });
  return static_cast<double>(input[0] * dist::world_size() * steps) / (ms / 1000.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) json = argv[++i];
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
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

    {  // all-reduce
      const int64_t elems = quick ? (int64_t{1} << 24) : (int64_t{1} << 28);
      Array x = ones({elems}, float32, d);
      const int steps = quick ? 5 : 20;
      const double ms = time_ms(d, 5, steps, [&] { dist::all_reduce(x); }) / steps;
      const double bytes = static_cast<double>(elems) * 4.0;
      records.push_back({"allreduce", "seconds", "s", ms / 1000.0});
      if (n > 1) records.push_back({"allreduce", "busbw", "GB/s", bytes * 2.0 * (n - 1) / n / (ms / 1000.0) / 1e9});
    }
    random::seed(0);
    records.push_back(
        {"ddp_mlp", "throughput", "samples/s", train_throughput(mlp(d), {100, 784}, 10, d, 20, quick ? 50 : 300, 0.0)});
    {  // Where the MLP's time goes: the same step without DDP (each rank alone), and the all-reduce of its gradients.
      auto plain = mlp(d);
      optim::SGD opt(plain->parameters(), {.lr = 0.01});
      Array x = random::normal({100, 784}, float32, d);
      Array y = random::randint(0, 10, {100}, int64, d);
      const int steps = quick ? 50 : 300;
      const double ms = time_ms(d, 20, steps, [&] {
        opt.zero_grad();
        nn::cross_entropy((*plain)(x), y).backward();
        opt.step();
      });
      records.push_back({"mlp_no_ddp", "step", "s", ms / steps / 1000.0});
      int64_t numel = 0;
      for (const Array& p : plain->parameters()) numel += p.size();
      Array g = ones({numel}, float32, d);
      const double ar = time_ms(d, 5, 50, [&] { dist::all_reduce(g, dist::ReduceOp::avg); }) / 50;
      records.push_back({"allreduce_mlp_grads", "seconds", "s", ar / 1000.0});
    }
    if (!quick) {
      auto net = models::resnet50();
      net->to(d);
      cudnn::set_benchmark(true);
      records.push_back(
          {"ddp_resnet50", "throughput", "samples/s", train_throughput(net, {128, 3, 224, 224}, 1000, d, 5, 15, 0.9)});
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
