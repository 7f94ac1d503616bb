// GPU random numbers (src/cuda/random.cpp) against the CPU backend. Without a
// GPU: every generated kernel (each distribution and dtype, both randint widths)
// compiles to PTX, names follow the spec, and unsupported dtypes throw. On
// cuda:0: uniform and randint bit-identical to the CPU for several seeds,
// offsets and sizes (odd sizes leave partial Philox blocks, large ones run many
// grid-stride steps), normal within 4 ulp of max(|x|, stddev), the generator's
// offset advancing as on the CPU, and misaligned outputs (the scalar store path).
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/backend.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "cuda/random.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using detail::RandomDistribution;

namespace {

constexpr DType kFloatTypes[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
constexpr DType kIntTypes[] = {DType::Int8, DType::Int16, DType::Int32, DType::Int64, DType::UInt8};
const int64_t kSizes[] = {1, 2, 3, 4, 5, 7, 8, 9, 1023, 4097, 100003};
const random::GeneratorState kStates[] = {{0, 0}, {42, 7}, {0x123456789abcdefull, (uint64_t{1} << 33) + 5}};

/// The bytes of `x` (any device), copied to the host.
std::vector<unsigned char> bytes_of(const Array& x) {
  const Array host = x.to(kiln::cpu()).contiguous();
  std::vector<unsigned char> bytes(static_cast<size_t>(host.nbytes()));
  if (!bytes.empty()) std::memcpy(bytes.data(), host.data_ptr(), bytes.size());
  return bytes;
}

/// Draws with `draw(device)` from `state` on cuda:0 and on the CPU; expects identical bytes and the same
/// generator state afterwards (the offset advanced by the same number of blocks).
template <class Draw>
void expect_bit_identical(const random::GeneratorState& state, Draw draw, const std::string& what) {
  random::set_state(state);
  const Array on_gpu = draw(gpu(0));
  const random::GeneratorState after_gpu = random::get_state();
  random::set_state(state);
  const Array on_cpu = draw(kiln::cpu());
  const random::GeneratorState after_cpu = random::get_state();
  ASSERT_EQ(on_gpu.device(), gpu(0)) << what;
  EXPECT_EQ(after_gpu.seed, after_cpu.seed) << what;
  EXPECT_EQ(after_gpu.offset, after_cpu.offset) << what;
  const std::vector<unsigned char> g = bytes_of(on_gpu), c = bytes_of(on_cpu);
  ASSERT_EQ(g.size(), c.size()) << what;
  const size_t item = static_cast<size_t>(itemsize(on_cpu.dtype()));
  for (size_t i = 0; i < g.size(); i += item) {
    if (std::memcmp(&g[i], &c[i], item) != 0) {
      ADD_FAILURE() << what << ": element " << i / item << " differs (gpu "
                    << on_gpu.to(kiln::cpu()).flatten().to_vector<double>()[i / item] << ", cpu "
                    << on_cpu.flatten().to_vector<double>()[i / item] << ")";
      return;
    }
  }
}

std::string state_str(const random::GeneratorState& s) {
  return "seed " + std::to_string(s.seed) + " offset " + std::to_string(s.offset);
}

/// One unit in the last place of `dtype` at magnitude |v| (normal numbers).
double ulp(DType dtype, double v) {
  const int mantissa_bits = dtype == DType::Float16    ? 10
                            : dtype == DType::BFloat16 ? 7
                            : dtype == DType::Float32  ? 23
                                                       : 52;
  int exponent = 0;
  std::frexp(std::abs(v), &exponent);  // |v| = f * 2^exponent, f in [0.5, 1)
  return std::ldexp(1.0, exponent - 1 - mantissa_bits);
}

// ---------------------------------------------------------------- without a GPU

std::vector<cuda_impl::RandomKernelSpec> every_spec() {
  std::vector<cuda_impl::RandomKernelSpec> specs;
  for (DType t : kFloatTypes) {
    specs.push_back({RandomDistribution::Uniform, t, false});
    specs.push_back({RandomDistribution::Normal, t, false});
  }
  for (DType t : kIntTypes) {
    specs.push_back({RandomDistribution::RandInt, t, false});
    specs.push_back({RandomDistribution::RandInt, t, true});
  }
  return specs;
}

TEST(RandomCodegen, every_kernel_compiles_to_ptx) {
  const std::vector<cuda_impl::RandomKernelSpec> specs = every_spec();
  cuda_impl::CompileOptions options;
  options.options = cuda_impl::builtin_kernel_options();
  std::vector<std::string> failures;
  std::mutex mutex;
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < specs.size(); i = next++) {
      const std::string name = cuda_impl::random_kernel_name(specs[i]);
      std::string failure;
      try {
        const std::string ptx = cuda_impl::compile_ptx(cuda_impl::random_source(specs[i]), name, 90, options);
        if (ptx.find(".entry " + name + "(") == std::string::npos) failure = "no .entry for " + name + " in the PTX";
      } catch (const std::exception& e) {
        failure = name + ": " + e.what();
      }
      if (!failure.empty()) {
        std::lock_guard<std::mutex> lock(mutex);
        failures.push_back(failure);
      }
    }
  };
  std::vector<std::thread> threads;
  const unsigned count = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  for (unsigned t = 0; t < count; ++t) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failures) ADD_FAILURE() << f;
}

TEST(RandomCodegen, kernel_names_say_distribution_dtype_and_width) {
  EXPECT_EQ(cuda_impl::random_kernel_name({RandomDistribution::Uniform, DType::Float32, false}),
            "kiln_random_uniform_f32");
  EXPECT_EQ(cuda_impl::random_kernel_name({RandomDistribution::Normal, DType::BFloat16, false}),
            "kiln_random_normal_bf16");
  EXPECT_EQ(cuda_impl::random_kernel_name({RandomDistribution::RandInt, DType::Int64, true}),
            "kiln_random_randint_i64_w64");
  EXPECT_EQ(cuda_impl::random_kernel_name({RandomDistribution::RandInt, DType::UInt8, false}),
            "kiln_random_randint_u8");
}

TEST(RandomCodegen, unsupported_dtypes_throw_dtype_error_naming_distribution_and_dtype) {
  struct Case {
    RandomDistribution distribution;
    DType dtype;
    const char* distribution_name;
    const char* dtype_name;
  };
  for (Case c : {Case{RandomDistribution::Uniform, DType::Int32, "uniform", "int32"},
                 Case{RandomDistribution::Normal, DType::Bool, "normal", "bool"},
                 Case{RandomDistribution::RandInt, DType::Float32, "randint", "float32"},
                 Case{RandomDistribution::RandInt, DType::Bool, "randint", "bool"}}) {
    try {
      (void)cuda_impl::random_source({c.distribution, c.dtype, false});
      ADD_FAILURE() << "no exception for " << c.distribution_name << " " << c.dtype_name;
    } catch (const DTypeError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(c.distribution_name), std::string::npos) << m;
      EXPECT_NE(m.find(c.dtype_name), std::string::npos) << m;
      EXPECT_NE(m.find("floating dtypes for uniform/normal"), std::string::npos) << m;
    }
  }
}

// ---------------------------------------------------------------- on the GPU

TEST(GpuRandom, uniform_is_bit_identical_to_the_cpu) {
  KILN_REQUIRE_GPU();
  for (DType t : kFloatTypes)
    for (const random::GeneratorState& state : kStates)
      for (int64_t n : kSizes)
        expect_bit_identical(
            state, [&](Device d) { return random::uniform({n}, t, d); },
            std::string(dtype_name(t)) + " uniform n=" + std::to_string(n) + " " + state_str(state));
  // Other intervals, including a narrow one where rounding reaches high and the clamp decides, and 2-d shapes.
  struct Range {
    double low, high;
  };
  for (DType t : kFloatTypes)
    for (Range r : {Range{-3.0, 5.5}, Range{1.0, 1.0009765625}, Range{-1e-3, 0.0}, Range{100.0, 1000.0}})
      expect_bit_identical(
          {7, 3},
          [&](Device d) {
            return random::uniform({37, 29}, r.low, r.high, t, d);
          },
          std::string(dtype_name(t)) + " uniform [" + std::to_string(r.low) + ", " + std::to_string(r.high) + ")");
  // Many grid-stride steps per thread.
  for (DType t : {DType::Float32, DType::Float64})
    expect_bit_identical(
        {9, 1}, [&](Device d) { return random::uniform({(int64_t{1} << 24) + 3}, t, d); },
        std::string(dtype_name(t)) + " uniform 2^24 + 3");
}

TEST(GpuRandom, randint_is_bit_identical_to_the_cpu) {
  KILN_REQUIRE_GPU();
  struct Range {
    int64_t low, high;
  };
  for (DType t : kIntTypes) {
    std::vector<Range> ranges = {{0, 2}, {0, 10}};
    if (t != DType::UInt8) ranges.push_back({-5, 6});  // uint8 holds no negative values
    switch (t) {
      case DType::Int8:
        ranges.push_back({-128, 128});
        break;
      case DType::UInt8:
        ranges.push_back({0, 256});
        break;
      case DType::Int16:
        ranges.push_back({-32768, 32768});
        break;
      case DType::Int32:
        ranges.push_back({INT32_MIN, int64_t{INT32_MAX} + 1});
        break;  // span 2^32: 32-bit words
      default:  // int64: spans above 2^32 take 64-bit words
        ranges.push_back({-(int64_t{1} << 40), (int64_t{1} << 40) + 3});
        ranges.push_back({INT64_MIN, INT64_MAX});
        ranges.push_back({0, (int64_t{1} << 32) + 1});
        break;
    }
    for (Range r : ranges)
      for (const random::GeneratorState& state : kStates)
        for (int64_t n : kSizes)
          expect_bit_identical(
              state, [&](Device d) { return random::randint(r.low, r.high, {n}, t, d); },
              std::string(dtype_name(t)) + " randint [" + std::to_string(r.low) + ", " + std::to_string(r.high) +
                  ") n=" + std::to_string(n) + " " + state_str(state));
  }
}

TEST(GpuRandom, normal_agrees_with_the_cpu_within_4_ulp) {
  KILN_REQUIRE_GPU();
  struct Params {
    double mean, stddev;
  };
  for (DType t : kFloatTypes)
    for (Params p : {Params{0.0, 1.0}, Params{3.0, 0.5}, Params{-100.0, 20.0}})
      for (const random::GeneratorState& state : kStates)
        for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{6}, int64_t{4097}, int64_t{100003}}) {
          const std::string what = std::string(dtype_name(t)) + " normal(" + std::to_string(p.mean) + ", " +
                                   std::to_string(p.stddev) + ") n=" + std::to_string(n) + " " + state_str(state);
          random::set_state(state);
          const Array g = random::normal({n}, p.mean, p.stddev, t, gpu(0));
          const random::GeneratorState after_gpu = random::get_state();
          random::set_state(state);
          const Array c = random::normal({n}, p.mean, p.stddev, t, kiln::cpu());
          EXPECT_EQ(after_gpu.offset, random::get_state().offset) << what;
          const std::vector<double> gv = g.to(kiln::cpu()).to_vector<double>(), cv = c.to_vector<double>();
          ASSERT_EQ(gv.size(), cv.size()) << what;
          int failures = 0;
          for (size_t i = 0; i < gv.size() && failures < 5; ++i) {
            // mean + stddev * z cancels when |mean| > |x|: the error scales with the larger operand.
            const double allowed = 4.0 * ulp(t, std::max({std::abs(cv[i]), std::abs(p.mean), p.stddev}));
            if (!(std::abs(gv[i] - cv[i]) <= allowed)) {
              ++failures;
              ADD_FAILURE() << what << " [" << i << "]: gpu " << gv[i] << ", cpu " << cv[i] << ", allowed " << allowed;
            }
          }
        }
}

TEST(GpuRandom, generator_offset_advances_as_on_the_cpu_and_draws_chain) {
  KILN_REQUIRE_GPU();
  // Blocks per call: ceil(n / 4), or ceil(n / 2) for float64 and wide randint (hand-computed here).
  struct Case {
    int kind;
    DType dtype;
    int64_t n;
    uint64_t blocks;
  };
  for (Case c : {Case{0, DType::Float32, 10, 3}, Case{0, DType::Float64, 5, 3}, Case{1, DType::Float16, 4, 1},
                 Case{1, DType::Float64, 7, 4}, Case{2, DType::Int32, 9, 3}, Case{3, DType::Int64, 9, 5}}) {
    random::set_state({5, 100});
    if (c.kind == 0) (void)random::uniform({c.n}, c.dtype, gpu(0));
    if (c.kind == 1) (void)random::normal({c.n}, c.dtype, gpu(0));
    if (c.kind == 2) (void)random::randint(0, 1000, {c.n}, c.dtype, gpu(0));
    if (c.kind == 3) (void)random::randint(0, int64_t{1} << 40, {c.n}, c.dtype, gpu(0));
    EXPECT_EQ(random::get_state().offset, 100 + c.blocks) << "case kind " << c.kind << " n " << c.n;
    EXPECT_EQ(random::get_state().seed, 5u);
  }
  // Two consecutive draws on the GPU equal the same two draws on the CPU.
  random::set_state({77, 0});
  const Array g1 = random::uniform({13}, float32, gpu(0)), g2 = random::randint(-9, 9, {11}, int32, gpu(0));
  random::set_state({77, 0});
  const Array c1 = random::uniform({13}, float32, kiln::cpu()), c2 = random::randint(-9, 9, {11}, int32, kiln::cpu());
  EXPECT_EQ(bytes_of(g1), bytes_of(c1));
  EXPECT_EQ(bytes_of(g2), bytes_of(c2));
  EXPECT_NE(bytes_of(g1), bytes_of(random::uniform({13}, float32, gpu(0)))) << "the offset must move on";
}

TEST(GpuRandom, misaligned_outputs_take_the_scalar_path_and_still_match) {
  KILN_REQUIRE_GPU();
  // Backend calls on an output that starts one element into its storage (no 16-byte vector stores there).
  for (DType t : {DType::Float32, DType::Float64, DType::Float16, DType::Int64, DType::Int8}) {
    const bool integral = is_integral(t);
    for (int64_t n : {int64_t{5}, int64_t{4096}, int64_t{1001}}) {
      detail::RandomCall call;
      call.distribution = integral ? RandomDistribution::RandInt : RandomDistribution::Uniform;
      call.seed = 11;
      call.offset = 3;
      call.a = -2.0;
      call.b = 2.0;
      call.low = -100;
      call.high = integral && t == DType::Int64 ? (int64_t{1} << 36) : 100;
      const Array gpu_full = empty({n + 1}, t, gpu(0));
      call.out = gpu_full.slice(0, 1, {});
      ASSERT_TRUE(call.out.is_contiguous());
      detail::backend_for(gpu(0)).random(call);
      const Array cpu_out = empty({n}, t, kiln::cpu());
      detail::RandomCall cpu_call = call;
      cpu_call.out = cpu_out;
      detail::backend_for(kiln::cpu()).random(cpu_call);
      EXPECT_EQ(bytes_of(call.out), bytes_of(cpu_out)) << dtype_name(t) << " n=" << n;
    }
  }
}

TEST(GpuRandom, backend_rejects_a_distribution_the_dtype_cannot_hold) {
  KILN_REQUIRE_GPU();
  detail::RandomCall call;
  call.distribution = RandomDistribution::Uniform;
  call.out = empty({8}, int32, gpu(0));
  try {
    detail::backend_for(gpu(0)).random(call);
    ADD_FAILURE() << "expected DTypeError";
  } catch (const DTypeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("uniform"), std::string::npos) << m;
    EXPECT_NE(m.find("int32"), std::string::npos) << m;
  }
}

}  // namespace

#endif  // KILN_WITH_CUDA
