// bench_layers: the layers of ResNet-50 one at a time on one device, float32 NCHW against bfloat16
// channels-last (the two ways `kiln bench resnet50` runs the network), so a slow layer shows up by name:
// convolutions (forward, and backward for input and weight), batch normalisation (training, evaluation,
// backward), ReLU, the residual add, max pooling, and one Bottleneck block forward and backward.
// GPU times are CUDA-event medians (kiln::bench); on the CPU, host medians.
// --network (with --cpu): instead, one float32 ResNet-50 inference forward walked module by module, the host
// time of each kind of layer summed over the network (median of 3 passes): where a CPU forward spends its time.
// bench/peers/torch_layers.py --cpu --network walks torchvision's model the same way.
//
// Usage: bench_layers [--cpu] [--batch N] [--filter SUBSTRING] [--network]
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

std::shared_ptr<nn::Module> child(nn::Module& m, const std::string& name) {
  for (auto& [k, c] : m.named_children())
    if (k == name) return c;
  throw ValueError("bench_layers --network: ResNet-50 has no child '" + name + "'");
}

/// One forward of `net` (eval, no grad) re-walked as ResNet::forward and Block::forward do it (ReLU out of place),
/// adding each kind of layer's host time to `acc`.
Array walk_resnet(nn::Module& net, const Array& x, std::map<std::string, double>& acc) {
  auto timed = [&](const std::string& kind, const std::function<Array()>& f) {
    const auto t = std::chrono::steady_clock::now();
    Array y = f();
    acc[kind] += std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    return y;
  };
  auto conv = [&](nn::Module& m, const Array& in) {
    const Array& w = m.named_parameters()[0].second;
    return timed("conv " + std::to_string(w.shape(2)) + "x" + std::to_string(w.shape(3)), [&] { return m(in); });
  };
  auto bn = [&](nn::Module& m, const Array& in) { return timed("batch norm", [&] { return m(in); }); };
  Array y = bn(*child(net, "bn1"), conv(*child(net, "conv1"), x));
  y = timed("relu", [&] { return relu(y); });
  y = timed("max pool", [&] { return (*child(net, "maxpool"))(y); });
  for (const char* stage : {"layer1", "layer2", "layer3", "layer4"})
    for (auto& [name, block] : child(net, stage)->named_children()) {
      Array z = y;
      for (int i = 1; i <= 3; ++i) {
        z = bn(*child(*block, "bn" + std::to_string(i)), conv(*child(*block, "conv" + std::to_string(i)), z));
        if (i < 3) z = timed("relu", [&] { return relu(z); });
      }
      Array r = y;
      for (auto& [k, d] : block->named_children())
        if (k == "downsample") r = bn(*d->named_children()[1].second, conv(*d->named_children()[0].second, y));
      y = timed("add", [&] { return z + r; });
      y = timed("relu", [&] { return relu(y); });
    }
  y = timed("avg pool", [&] { return (*child(net, "avgpool"))(y); });
  return timed("linear", [&] { return (*child(net, "fc"))(y.reshape({y.shape(0), -1})); });
}

int network(int64_t batch) {
  random::seed(0);
  auto net = models::resnet50(1000, float32, cpu());
  net->eval();
  const Array x = random::normal({batch, 3, 224, 224}, 0.0, 1.0, float32, cpu());
  NoGradGuard no_grad;
  std::map<std::string, double> acc;
  const Array want = (*net)(x), got = walk_resnet(*net, x, acc);
  if (!array_equal(want, got)) throw ValueError("bench_layers --network: the walk does not reproduce the forward");
  std::map<std::string, std::vector<double>> passes;
  std::vector<double> totals;
  for (int pass = 0; pass < 3; ++pass) {
    acc.clear();
    (void)walk_resnet(*net, x, acc);
    double total = 0;
    for (auto& [k, v] : acc) passes[k].push_back(v), total += v;
    totals.push_back(total);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  fmt::print("bench_layers --network on cpu, batch {}: ResNet-50 float32 inference, host time per kind of layer\n",
             batch);
  fmt::print("{:<12} {:>12}\n", "layer", "ms per pass");
  for (auto& [k, v] : passes) fmt::print("{:<12} {:>12.1f}\n", k, 1e3 * median(v));
  fmt::print("{:<12} {:>12.1f}\n", "total", 1e3 * median(totals));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool use_cpu = false;
  int64_t batch = 128;
  std::string filter;
  bool walk = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--cpu"))
      use_cpu = true;
    else if (!std::strcmp(argv[i], "--network"))
      walk = true;
    else if (!std::strcmp(argv[i], "--batch") && i + 1 < argc)
      batch = std::atoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--filter") && i + 1 < argc)
      filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_layers [--cpu] [--batch N] [--filter SUBSTRING] [--network]\n");
      return 2;
    }
  }
  if (walk) {
    if (!use_cpu) {
      std::fprintf(stderr, "bench_layers: --network times the CPU's layers by the host clock; add --cpu\n");
      return 2;
    }
    return network(batch);
  }
  const Device d = use_cpu ? cpu() : try_gpu(0);
  cudnn::set_benchmark(true);
  fmt::print("bench_layers on {}, batch {}: ResNet-50's layers, float32 NCHW vs bfloat16 channels-last\n", d.str(),
             batch);
  fmt::print("{:<34} {:>14} {:>14}\n", "layer", "fp32 NCHW", "bf16 NHWC");
  struct Case {
    std::string name;
    std::function<std::function<void()>(DType, bool)> make;  // (dtype, channels-last) -> the timed call
  };
  auto input = [&](Shape s, DType t, bool cl) {
    Array a = random::normal(s, 0.0, 1.0, float32, d).astype(t);
    return cl ? to_channels_last(a) : a;
  };
  const std::vector<Case> cases = {
      {"conv 3x3 64->64 @56 forward",
       [&](DType t, bool cl) {
         Array x = input({batch, 64, 56, 56}, t, cl), w = input({64, 64, 3, 3}, t, cl);
         return std::function<void()>([=] { (void)conv2d_forward(x, w, {.padding = {1, 1}}); });
       }},
      {"conv 1x1 256->64 @56 forward",
       [&](DType t, bool cl) {
         Array x = input({batch, 256, 56, 56}, t, cl), w = input({64, 256, 1, 1}, t, cl);
         return std::function<void()>([=] { (void)conv2d_forward(x, w); });
       }},
      {"conv 3x3 64->64 @56 backward input",
       [&](DType t, bool cl) {
         Array g = input({batch, 64, 56, 56}, t, cl), w = input({64, 64, 3, 3}, t, cl);
         return std::function<void()>([=] {
           (void)conv2d_backward_input(g, w, {batch, 64, 56, 56}, {.padding = {1, 1}});
         });
       }},
      {"conv 3x3 64->64 @56 backward weight",
       [&](DType t, bool cl) {
         Array g = input({batch, 64, 56, 56}, t, cl), x = input({batch, 64, 56, 56}, t, cl);
         return std::function<void()>([=] { (void)conv2d_backward_weight(g, x, {64, 64, 3, 3}, {.padding = {1, 1}}); });
       }},
      {"conv 7x7/2 3->64 @224 forward",
       [&](DType t, bool cl) {
         Array x = input({batch, 3, 224, 224}, t, cl), w = input({64, 3, 7, 7}, t, cl);
         return std::function<void()>([=] { (void)conv2d_forward(x, w, {.stride = {2, 2}, .padding = {3, 3}}); });
       }},
      {"batch norm 256 @56 training",
       [&](DType t, bool cl) {
         Array x = input({batch, 256, 56, 56}, t, cl);
         Array rm = zeros({256}, float32, d), rv = ones({256}, float32, d);
         return std::function<void()>([=] { (void)batch_norm_forward(x, {}, {}, rm, rv, true, 0.1, 1e-5); });
       }},
      {"batch norm 256 @56 evaluation",
       [&](DType t, bool cl) {
         Array x = input({batch, 256, 56, 56}, t, cl);
         Array rm = zeros({256}, float32, d), rv = ones({256}, float32, d);
         return std::function<void()>([=] { (void)batch_norm_forward(x, {}, {}, rm, rv, false, 0.1, 1e-5); });
       }},
      {"batch norm 256 @56 backward",
       [&](DType t, bool cl) {
         Array x = input({batch, 256, 56, 56}, t, cl), g = input({batch, 256, 56, 56}, t, cl);
         Array rm = zeros({256}, float32, d), rv = ones({256}, float32, d);
         const BatchNormOutput r = batch_norm_forward(x, {}, {}, rm, rv, true, 0.1, 1e-5);
         return std::function<void()>([=] { (void)batch_norm_backward(g, x, {}, r.mean, r.invstd, 1e-5); });
       }},
      {"batch norm+relu 64 @56 training",
       [&](DType t, bool cl) {
         Array x = input({batch, 64, 56, 56}, t, cl);
         Array rm = zeros({64}, float32, d), rv = ones({64}, float32, d);
         return std::function<void()>([=] { (void)batch_norm_forward(x, {}, {}, rm, rv, true, 0.1, 1e-5, true); });
       }},
      {"batch norm+relu 64 @56 backward",
       [&](DType t, bool cl) {
         Array x = input({batch, 64, 56, 56}, t, cl), g = input({batch, 64, 56, 56}, t, cl);
         Array rm = zeros({64}, float32, d), rv = ones({64}, float32, d);
         const BatchNormOutput r = batch_norm_forward(x, {}, {}, rm, rv, true, 0.1, 1e-5, true);
         return std::function<void()>(
             [=] { (void)batch_norm_relu_backward(g, x, r.y, {}, r.mean, r.invstd, r.scale_shift, 1e-5); });
       }},
      {"batch norm 2048 @7 training",
       [&](DType t, bool cl) {
         Array x = input({batch, 2048, 7, 7}, t, cl);
         Array rm = zeros({2048}, float32, d), rv = ones({2048}, float32, d);
         return std::function<void()>([=] { (void)batch_norm_forward(x, {}, {}, rm, rv, true, 0.1, 1e-5); });
       }},
      {"batch norm 2048 @7 backward",
       [&](DType t, bool cl) {
         Array x = input({batch, 2048, 7, 7}, t, cl), g = input({batch, 2048, 7, 7}, t, cl);
         Array rm = zeros({2048}, float32, d), rv = ones({2048}, float32, d);
         const BatchNormOutput r = batch_norm_forward(x, {}, {}, rm, rv, true, 0.1, 1e-5);
         return std::function<void()>([=] { (void)batch_norm_backward(g, x, {}, r.mean, r.invstd, 1e-5); });
       }},
      {"relu 256 @56",
       [&](DType t, bool cl) {
         Array x = input({batch, 256, 56, 56}, t, cl);
         return std::function<void()>([=] { (void)relu(x); });
       }},
      {"residual add 256 @56",
       [&](DType t, bool cl) {
         Array x = input({batch, 256, 56, 56}, t, cl), y = input({batch, 256, 56, 56}, t, cl);
         return std::function<void()>([=] { (void)(x + y); });
       }},
      {"residual add+relu 256 @56",
       [&](DType t, bool cl) {
         static const auto add_relu = fuse([](auto p, auto q) { return relu(p + q); }, "bench_add_relu");
         Array x = input({batch, 256, 56, 56}, t, cl), y = input({batch, 256, 56, 56}, t, cl);
         return std::function<void()>([=] { (void)add_relu(x, y); });
       }},
      {"max pool 3x3/2 64 @112",
       [&](DType t, bool cl) {
         Array x = input({batch, 64, 112, 112}, t, cl);
         return std::function<void()>([=] { (void)max_pool2d_forward(x, {{3, 3}, {2, 2}, {1, 1}, {1, 1}}); });
       }},
      {"bottleneck 256 @56 forward+backward",
       [&](DType t, bool cl) {
         random::seed(0);
         auto net = models::resnet50(1000, float32, d);
         if (cl) net->to_channels_last();
         auto block = std::dynamic_pointer_cast<nn::Sequential>(net->named_children()[4].second);
         Array x = input({batch, 256, 56, 56}, float32, cl);
         const std::optional<DType> cast = t == bfloat16 ? std::optional<DType>(bfloat16) : std::nullopt;
         return std::function<void()>([=] {
           Array y;
           {
             AutocastGuard amp(cast);
             y = (*block)[1](x);
           }
           sum(y.astype(float32)).backward();
         });
       }},
  };
  for (const Case& c : cases) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    std::string cells[2];
    int k = 0;
    for (const auto& [t, cl] : {std::pair<DType, bool>{float32, false}, std::pair<DType, bool>{bfloat16, true}}) {
      try {
        const std::function<void()> fn = c.make(t, cl);
        const BenchResult r = bench(c.name, fn, {.warmup = 3, .repeat = 10, .max_seconds = 10});
        cells[k] = kiln::benchutil::format_seconds(r.seconds());
      } catch (const std::exception& e) {
        cells[k] = std::string("error: ") + e.what();
      }
      ++k;
    }
    fmt::print("{:<34} {:>14} {:>14}\n", c.name, cells[0], cells[1]);
  }
  return 0;
}
