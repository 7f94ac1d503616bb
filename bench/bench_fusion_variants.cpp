// Launch shapes for a fused elementwise chain: the chain of the fusion target,
// tanh(x*1.5+0.3)*x - exp(-x*x)*0.5 on 2^26 float32, written once as a template
// kernel and run with several (vector loads in flight per thread, grid) shapes,
// each timed with events (median of 20 after warm-up) and checked against the
// first. Compiled with the built-in kernels' NVRTC option (--fmad=false, no fast
// math), so the figures guide the shape kiln's fusion code generator uses.
//   bench_fusion_variants [--json FILE]
#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "kiln/kiln.hpp"

using namespace kiln;

namespace {

const char* kSource = R"(
__device__ __forceinline__ float chain(float x) { return tanhf(x * 1.5f + 0.3f) * x - expf(-x * x) * 0.5f; }
// U float4 loads in flight per thread. STRIDE: iteration u of a thread reads vector v + u * gridDim*blockDim
// (grid-wide strides); otherwise a block's iteration reads one contiguous chunk of U*blockDim vectors.
template <int U, bool STRIDE>
__global__ void __launch_bounds__(256) fused(float* __restrict__ out, const float* __restrict__ in, unsigned n) {
  const unsigned vectors = n / 4;
  const unsigned threads = gridDim.x * blockDim.x;
  const unsigned first = STRIDE ? blockIdx.x * blockDim.x + threadIdx.x : blockIdx.x * (U * 256) + threadIdx.x;
  const unsigned step = STRIDE ? U * threads : gridDim.x * (U * 256);
  const unsigned lane = STRIDE ? threads : 256;
  for (unsigned v = first; v < vectors; v += step) {
    float4 x[U];
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (v + u * lane < vectors) x[u] = reinterpret_cast<const float4*>(in)[v + u * lane];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (v + u * lane >= vectors) break;
      float4 o;
      o.x = chain(x[u].x); o.y = chain(x[u].y); o.z = chain(x[u].z); o.w = chain(x[u].w);
      reinterpret_cast<float4*>(out)[v + u * lane] = o;
    }
  }
}
)";

struct Variant {
  const char* kernel;
  int unroll;
  int waves;  // grid = waves x (resident blocks); 0: one pass (enough blocks that every thread iterates once)
};

}  // namespace

int main(int argc, char** argv) {
  std::string json;
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) json = argv[++i];
  if (num_gpus() == 0) {
    fmt::print("bench_fusion_variants: no GPU (num_gpus() == 0): nothing to measure\n");
    return 0;
  }
  Device d = gpu(0);
  const DeviceProperties props = device_properties(d);
  const unsigned n = 1u << 26;
  const std::vector<Variant> variants = {
      {"fused<4, true>", 4, 1},  {"fused<2, true>", 2, 1},  {"fused<1, true>", 1, 1},  {"fused<4, true>", 4, 2},
      {"fused<4, true>", 4, 0},  {"fused<2, true>", 2, 0},  {"fused<1, true>", 1, 0},  {"fused<4, false>", 4, 1},
      {"fused<2, false>", 2, 1}, {"fused<4, false>", 4, 0}, {"fused<2, false>", 2, 0},
  };
  std::vector<std::string> names;
  for (const auto& v : variants)
    if (std::find(names.begin(), names.end(), v.kernel) == names.end()) names.push_back(v.kernel);
  RawModule module(kSource, {.options = {"--fmad=false"}, .name_expressions = names, .device = d});
  Array x = random::normal({n}, float32, d);
  Array first_out;
  // Device copy bandwidth for the floor (2 x 4 bytes per element).
  Array copy_out = empty({n}, float32, d);
  // Event time per call (kiln::bench: 3 warm-up calls, median of 20).
  auto event_time = [&](const std::function<void()>& fn) {
    return benchutil::per_call(kiln::bench(fn, {.warmup = 3, .repeat = 20, .devices = {d}}).device(d), 1);
  };
  // The floor: a device copy moves the same bytes (one read and one write of 2^26 floats).
  const double floor_ms = event_time([&] { copy_out.assign(x); }).median * 1e3;
  benchutil::Report report("gpu", "kiln", props.name);
  fmt::print("{:<18} {:>6} {:>8} {:>10} {:>8} {:>8}\n", "kernel", "unroll", "grid", "ms", "x floor", "check");
  for (const auto& v : variants) {
    RawKernel k = module.function(v.kernel);
    const int regs = std::max(1, k.attributes().num_regs);
    const int resident = std::clamp(65536 / (regs * 256), 1, 8);  // blocks of 256 per SM the registers allow
    const unsigned pass = (n / 4 + 256u * v.unroll - 1) / (256u * v.unroll);
    const unsigned grid = v.waves == 0 ? pass : std::min<unsigned>(pass, v.waves * resident * props.multiprocessors);
    Array out = empty({n}, float32, d);
    const benchutil::Timing t = event_time([&] { k.launch({grid}, {256}, out, x, n); });
    const double ms = t.median * 1e3;
    std::string check = "ok";
    if (!first_out.defined()) first_out = out;
    else if (any(not_equal(out, first_out)).item<bool>()) check = "DIFFERS";
    fmt::print("{:<18} {:>6} {:>8} {:>10.4f} {:>8.3f} {:>8}  ({} registers)\n", v.kernel, v.unroll, grid, ms,
               ms / floor_ms, check, regs);
    report.add(benchutil::Result{std::string(v.kernel) + (v.waves == 0 ? " one-pass" : " waves=" + std::to_string(v.waves)),
                                 "2^26", "float32", t, ms / floor_ms, "x floor", check});
  }
  fmt::print("floor (device copy of the same bytes): {:.4f} ms\n", floor_ms);
  if (!json.empty()) report.write_json(json);
  return 0;
}
