// GPU random kernels: one generated kernel per (distribution, dtype, randint
// width), built from core/philox.hpp's cuda_source() — the very text the CPU
// compiles — so the GPU maps Philox words to values exactly as the CPU does.
//
// Each thread runs one Philox block at a time (grid-stride over the call's
// blocks, a grid of one wave of resident blocks): it computes the block's 2 or
// 4 elements with the shared per-element functions, in the element order of
// include/kiln/random.hpp, and writes them with one 4..32-byte vector store when
// the block is complete and its address aligned (else element by element, the
// tail of an odd size). Host parameters come from the same helpers the CPU uses
// (block_count, randint_span, uniform_params), so no backend rounds differently.
// A draw captured in a CUDA graph passes a device pointer to the graph's (seed, base
// offset) word, which kiln_random_graph_state rewrites before each replay (graph.cpp).
#include "cuda/random.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/philox.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/launch.hpp"
#include "cuda/ops.hpp"
#include "cuda/runtime.hpp"
#include "cuda/template.hpp"
#include "kernel_sources/random.cuh.in.hpp"
#include "kernel_sources/random_graph_state.cuh.hpp"

namespace kiln::cuda_impl {
namespace {

namespace philox = detail::philox;
using detail::RandomDistribution;

/// Resident 256-thread blocks per multiprocessor the grid is sized for (a full SM since Volta).
constexpr int kBlocksPerMultiprocessor = 8;

const char* distribution_name(RandomDistribution distribution) {
  switch (distribution) {
    case RandomDistribution::Uniform:
      return "uniform";
    case RandomDistribution::Normal:
      return "normal";
    default:
      return "randint";
  }
}

[[noreturn]] void unsupported(const RandomKernelSpec& spec) {
  throw DTypeError("cuda random: no " + std::string(distribution_name(spec.distribution)) + " kernel for dtype " +
                   std::string(dtype_name(spec.dtype)) +
                   "; the random front-ends accept only floating dtypes for uniform/normal and integer dtypes "
                   "for randint");
}

/// The C type the kernel stores (16-bit floats as their bits).
const char* storage_type(const RandomKernelSpec& spec) {
  const bool integral = spec.distribution == RandomDistribution::RandInt;
  switch (spec.dtype) {
    case DType::Float32:
      if (!integral) return "float";
      break;
    case DType::Float64:
      if (!integral) return "double";
      break;
    case DType::Float16:
    case DType::BFloat16:
      if (!integral) return "unsigned short";
      break;
    case DType::Int8:
      if (integral) return "signed char";
      break;
    case DType::Int16:
      if (integral) return "short";
      break;
    case DType::Int32:
      if (integral) return "int";
      break;
    case DType::Int64:
      if (integral) return "long long";
      break;
    case DType::UInt8:
      if (integral) return "unsigned char";
      break;
    default:
      break;
  }
  unsupported(spec);
}

/// Elements per Philox block (philox::elements_per_block with the span reduced to the wide flag).
int elements_per_block(const RandomKernelSpec& spec) {
  if (spec.distribution == RandomDistribution::RandInt) return spec.wide ? 2 : 4;
  return spec.dtype == DType::Float64 ? 2 : 4;
}

/// Statements (inside the block loop, after `Words r`) that set v[0..E) for `spec`; `setup` gets the
/// statements before the loop (parameters converted once).
std::string element_code(const RandomKernelSpec& spec, std::string& setup) {
  const std::string ns = "kiln_philox::";
  switch (spec.distribution) {
    case RandomDistribution::Uniform:
      if (spec.dtype == DType::Float64)
        return "    for (int k = 0; k < 2; ++k) v[k] = " + ns +
               "uniform_float64(r.w[2 * k], r.w[2 * k + 1], p0, p1, p2);\n";
      setup = "  const float u_low = (float)p0, u_scale = (float)p1, u_limit = (float)p2;  // exact in float\n";
      return "    for (int k = 0; k < 4; ++k) v[k] = " + ns +
             (spec.dtype == DType::Float32   ? "uniform_float32"
              : spec.dtype == DType::Float16 ? "uniform_half"
                                             : "uniform_bfloat16") +
             "(r.w[k], u_low, u_scale, u_limit);\n";
    case RandomDistribution::Normal:
      if (spec.dtype == DType::Float64)
        return "    double z[2];\n    " + ns + "normal_pair_double(r.w[0], r.w[1], r.w[2], r.w[3], &z[0], &z[1]);\n" +
               "    for (int k = 0; k < 2; ++k) v[k] = " + ns + "fma_d(z[k], p1, p0);\n";
      setup = "  const float mean = (float)p0, stddev = (float)p1;\n";
      return "    float z[4];\n    " + ns + "normal_pair_float(r.w[0], r.w[1], &z[0], &z[1]);\n    " + ns +
             "normal_pair_float(r.w[2], r.w[3], &z[2], &z[3]);\n" + "    for (int k = 0; k < 4; ++k) {\n" +
             "      const float value = " + ns + "fma_f(z[k], stddev, mean);\n" + "      v[k] = " +
             (spec.dtype == DType::Float32   ? std::string("value")
              : spec.dtype == DType::Float16 ? ns + "float_to_half_bits(value)"
                                             : ns + "float_to_bfloat16_bits(value)") +
             ";\n    }\n";
    case RandomDistribution::RandInt:
      if (spec.wide)
        return "    for (int k = 0; k < 2; ++k) v[k] = (T)" + ns +
               "randint_from_words(r.w[2 * k], r.w[2 * k + 1], low, span);\n";
      return "    for (int k = 0; k < 4; ++k) v[k] = (T)" + ns + "randint_from_word(r.w[k], low, span);\n";
  }
  unsupported(spec);
}

/// The compiled kernel of one (device, spec); created once, never freed (like the built-in kernel table).
struct RandomKernel {
  cudaKernel_t function = nullptr;
  std::shared_ptr<Module> module;
  std::string name;
};

// RandInt is the last distribution: one added after it must widen this (random_kernel checks the index).
constexpr size_t kDistributions = static_cast<size_t>(detail::RandomDistribution::RandInt) + 1;
constexpr size_t kSpecSlots = kDistributions * kNumDTypes * 2;  // distribution x dtype x wide

/// The kernel held by `slot`, compiled from source() under `name` on first use (a thread that loses the race
/// to store it keeps the other's).
template <class Source>
const RandomKernel& cached_kernel(std::atomic<const RandomKernel*>& slot, int device, std::string name, Source source) {
  if (const RandomKernel* kernel = slot.load(std::memory_order_acquire)) return *kernel;
  auto kernel = std::make_unique<RandomKernel>();
  kernel->name = std::move(name);
  CompileOptions options;
  options.options = builtin_kernel_options();
  kernel->module = load_module(source(), kernel->name, device, options);
  kernel->function = kernel->module->function(kernel->name);
  const RandomKernel* expected = nullptr;
  if (slot.compare_exchange_strong(expected, kernel.get(), std::memory_order_acq_rel)) return *kernel.release();
  return *expected;  // another thread stored the same kernel first
}

const RandomKernel& random_kernel(int device, const RandomKernelSpec& spec) {
  static std::array<std::atomic<const RandomKernel*>, kMaxDevices * kSpecSlots> table{};
  const size_t index = (static_cast<size_t>(spec.distribution) * kNumDTypes + static_cast<size_t>(spec.dtype)) * 2 +
                       static_cast<size_t>(spec.wide);
  if (index >= kSpecSlots)
    throw std::logic_error("random_kernel: spec outside the slot table (a distribution after RandInt?)");
  return cached_kernel(table[static_cast<size_t>(device) * kSpecSlots + index], device, random_kernel_name(spec),
                       [&] { return random_source(spec); });
}

constexpr const char kGraphStateName[] = "kiln_random_graph_state";

}  // namespace

std::string graph_state_source() { return std::string(kernel_sources::random_graph_state_cuh); }

void write_graph_random_state(int device, void* state, const void* source, uint64_t seed, uint64_t offset,
                              cudaStream_t stream) {
  static std::array<std::atomic<const RandomKernel*>, kMaxDevices> table{};
  // A pointer, not a reference: g++ 13 takes the temporary name string for what the reference binds to.
  const RandomKernel* kernel =
      &cached_kernel(table[static_cast<size_t>(device)], device, kGraphStateName, [] { return graph_state_source(); });
  unsigned long long seed_arg = seed, offset_arg = offset;
  void* args[] = {&state, &source, &seed_arg, &offset_arg};
  launch(kernel->function, dim3(1), dim3(1), 0, stream, args, kernel->name.c_str());
}

std::string random_kernel_name(const RandomKernelSpec& spec) {
  std::string name = std::string("kiln_random_") + distribution_name(spec.distribution) + "_" + dtype_tag(spec.dtype);
  return spec.distribution == RandomDistribution::RandInt && spec.wide ? name + "_w64" : name;
}

std::string random_source(const RandomKernelSpec& spec) {
  const std::string type = storage_type(spec);  // throws for unsupported combinations
  const int per_block = elements_per_block(spec);
  const int bytes = per_block * static_cast<int>(itemsize(spec.dtype));  // 2..32
  const std::string raw = bytes >= 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "unsigned int" : "unsigned short";
  const int raw_count = bytes > 16 ? bytes / 16 : 1;
  const int alignment = std::min(bytes, 16);
  const std::string name = random_kernel_name(spec);
  std::string setup;
  const std::string elements = element_code(spec, setup);

  return philox::cuda_source() + fill_template("random.cuh.in", kernel_sources::random_cuh_in,
                                               {{"name", name},
                                                {"type", type},
                                                {"per_block", std::to_string(per_block)},
                                                {"raw", raw},
                                                {"raw_count", std::to_string(raw_count)},
                                                {"block_size", std::to_string(kBlockSize)},
                                                {"setup", setup},
                                                {"elements", elements},
                                                {"alignment_mask", std::to_string(alignment - 1)}});
}

void cuda_random(const detail::RandomCall& call) {
  const Array& out = call.out;
  long long n = out.size();
  if (n == 0) return;
  if (!out.is_contiguous()) throw Error("internal: cuda_random needs a contiguous output");
  RandomKernelSpec spec;
  spec.distribution = call.distribution;
  spec.dtype = out.dtype();
  uint64_t span = 0;
  if (call.distribution == RandomDistribution::RandInt) {
    span = philox::randint_span(call.low, call.high);
    spec.wide = span > (uint64_t{1} << 32);
  }
  unsigned long long blocks = philox::block_count(call.distribution, out.dtype(), n, span);
  double p0 = call.a, p1 = call.b, p2 = 0.0;
  if (call.distribution == RandomDistribution::Uniform) {
    if (!is_floating(out.dtype())) unsupported(spec);
    const philox::UniformParams params = philox::uniform_params(out.dtype(), call.a, call.b);
    p0 = params.low;
    p1 = params.scale;
    p2 = params.limit;
  }
  const int device = out.device().index;
  set_device(device);
  const RandomKernel& kernel = random_kernel(device, spec);
  void* data = out.data_ptr();
  unsigned long long seed = call.seed, offset = call.offset, span_arg = span;
  long long low = call.low;
  const void* state = call.graph_state;
  void* args[] = {&data, &n, &seed, &offset, &state, &blocks, &p0, &p1, &p2, &low, &span_arg};
  const unsigned long long grid_blocks = (blocks + kBlockSize - 1) / kBlockSize;
  const unsigned long long cap =
      static_cast<unsigned long long>(multiprocessor_count(device)) * kBlocksPerMultiprocessor;
  const dim3 grid(static_cast<unsigned>(std::max<unsigned long long>(1, std::min(grid_blocks, cap))));
  launch(kernel.function, grid, dim3(kBlockSize), 0, current_stream(device), args, kernel.name.c_str());
}

}  // namespace kiln::cuda_impl
