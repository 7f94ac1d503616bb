// CPU random kernels: one Philox block per iteration, through the same shared
// block functions (core/philox.hpp) that the CUDA backend compiles with NVRTC.
#include "cpu/random.hpp"

#include <cstdint>
#include <string>

#include "core/philox.hpp"
#include "cpu/parallel.hpp"

namespace kiln::cpu_impl {
namespace {

namespace philox = detail::philox;
using detail::RandomDistribution;

/// Blocks per chunk of a parallel loop: 4096 blocks are 8k-16k elements, tens of microseconds of work.
constexpr int64_t kBlockGrain = 1 << 12;

/// Calls fill(block) for every block in [0, blocks), split over threads for large counts.
/// `fill` captures by value and is copied to a local: the compiler can then keep its members in
/// registers, where a store through the output pointer (a float, or a char that may alias anything)
/// would otherwise force reloads after every element.
template <class F>
void for_each_block(uint64_t blocks, F fill) {
  parallel_for(
      static_cast<int64_t>(blocks),
      [fill](int64_t begin, int64_t end) {
        F local = fill;
        for (int64_t b = begin; b < end; ++b) local(static_cast<unsigned long long>(b));
      },
      kBlockGrain);
}

[[noreturn]] void unsupported(const detail::RandomCall& call) {
  throw DTypeError("cpu random: no kernel for dtype " + std::string(dtype_name(call.out.dtype())) +
                   " with this distribution; the random front-ends accept only floating dtypes for uniform/normal "
                   "and integer dtypes for randint");
}

void fill_uniform(const detail::RandomCall& call, long long n, uint64_t blocks) {
  unsigned long long seed = call.seed, offset = call.offset;
  DType dtype = call.out.dtype();
  void* data = call.out.data_ptr();
  philox::UniformParams params = philox::uniform_params(dtype, call.a, call.b);
  if (dtype == DType::Float64) {
    double low = params.low, scale = params.scale, limit = params.limit;
    auto* out = static_cast<double*>(data);
    for_each_block(blocks, [=](unsigned long long b) {
      philox::uniform_float64_block(out, n, seed, offset, b, low, scale, limit);
    });
    return;
  }
  // float16/bfloat16/float32 compute in float (the parameters are exact in float).
  float low = static_cast<float>(params.low), scale = static_cast<float>(params.scale);
  float limit = static_cast<float>(params.limit);
  auto* bits = static_cast<unsigned short*>(data);
  switch (dtype) {
    case DType::Float32:
      for_each_block(blocks, [=, out = static_cast<float*>(data)](unsigned long long b) {
        philox::uniform_float32_block(out, n, seed, offset, b, low, scale, limit);
      });
      return;
    case DType::Float16:
      for_each_block(blocks, [=](unsigned long long b) {
        philox::uniform_half_block(bits, n, seed, offset, b, low, scale, limit);
      });
      return;
    case DType::BFloat16:
      for_each_block(blocks, [=](unsigned long long b) {
        philox::uniform_bfloat16_block(bits, n, seed, offset, b, low, scale, limit);
      });
      return;
    default:
      unsupported(call);
  }
}

void fill_normal(const detail::RandomCall& call, long long n, uint64_t blocks) {
  unsigned long long seed = call.seed, offset = call.offset;
  DType dtype = call.out.dtype();
  void* data = call.out.data_ptr();
  if (dtype == DType::Float64) {
    double mean = call.a, stddev = call.b;
    auto* out = static_cast<double*>(data);
    for_each_block(blocks,
                   [=](unsigned long long b) { philox::normal_float64_block(out, n, seed, offset, b, mean, stddev); });
    return;
  }
  int kind = dtype == DType::Float32 ? 0 : dtype == DType::Float16 ? 1 : dtype == DType::BFloat16 ? 2 : -1;
  if (kind < 0) unsupported(call);
  float mean = static_cast<float>(call.a), stddev = static_cast<float>(call.b);
  for_each_block(
      blocks, [=](unsigned long long b) { philox::normal_float_block(data, kind, n, seed, offset, b, mean, stddev); });
}

template <class T>
void fill_randint_as(const detail::RandomCall& call, long long n, uint64_t blocks) {
  unsigned long long seed = call.seed, offset = call.offset;
  long long low = call.low;
  unsigned long long span = philox::randint_span(call.low, call.high);
  auto* out = static_cast<T*>(call.out.data_ptr());
  if (span <= (1ull << 32)) {
    for_each_block(blocks,
                   [=](unsigned long long b) { philox::randint32_block<T>(out, n, seed, offset, b, low, span); });
  } else {
    for_each_block(blocks,
                   [=](unsigned long long b) { philox::randint64_block<T>(out, n, seed, offset, b, low, span); });
  }
}

void fill_randint(const detail::RandomCall& call, long long n, uint64_t blocks) {
  switch (call.out.dtype()) {
    case DType::Int8:
      return fill_randint_as<int8_t>(call, n, blocks);
    case DType::Int16:
      return fill_randint_as<int16_t>(call, n, blocks);
    case DType::Int32:
      return fill_randint_as<int32_t>(call, n, blocks);
    case DType::Int64:
      return fill_randint_as<int64_t>(call, n, blocks);
    case DType::UInt8:
      return fill_randint_as<uint8_t>(call, n, blocks);
    default:
      unsupported(call);
  }
}

}  // namespace

void cpu_random(const detail::RandomCall& call) {
  long long n = call.out.size();
  if (n == 0) return;
  uint64_t span = call.distribution == RandomDistribution::RandInt ? philox::randint_span(call.low, call.high) : 0;
  uint64_t blocks = philox::block_count(call.distribution, call.out.dtype(), n, span);
  switch (call.distribution) {
    case RandomDistribution::Uniform:
      return fill_uniform(call, n, blocks);
    case RandomDistribution::Normal:
      return fill_normal(call, n, blocks);
    case RandomDistribution::RandInt:
      return fill_randint(call, n, blocks);
  }
}

}  // namespace kiln::cpu_impl
