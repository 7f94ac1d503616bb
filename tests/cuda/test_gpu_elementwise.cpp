// Every elementwise op, cast, fill and sequence on cuda:0 against the CPU backend,
// for random inputs of every dtype in each layout class: contiguous (odd sizes, so
// vector loads have a tail), strided (transposed, sliced, reversed), broadcast, and
// with scalar operands. Integer and bool results must be identical; float results
// identical for correctly rounded ops and within a few ulps for math-library ops
// (CUDA's and glibc's differ there). Skips without a GPU.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/elementwise.hpp"
#include "cuda/codegen.hpp"
#include "cuda/compiler.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using detail::OpCode;

namespace {
using kiln_test::epsilon;

constexpr DType kAllTypes[] = {DType::Bool,  DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
                               DType::UInt8, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

double smallest_normal(DType t) {
  switch (t) {
    case DType::Float16:
      return std::ldexp(1.0, -14);
    case DType::Float64:
      return std::ldexp(1.0, -1022);
    default:
      return std::ldexp(1.0, -126);
  }
}

/// Expects `gpu` (any device) to equal `cpu`: same dtype and shape, integers exact, floats within `ulps`
/// units in the last place of their dtype at max(|cpu value|, `magnitude`) (NaN matches NaN, infinities must
/// match exactly); `magnitude` defaults to the dtype's smallest normal.
void expect_matches(const Array& cpu, const Array& gpu, double ulps, const std::string& what, double magnitude = 0) {
  ASSERT_EQ(cpu.dtype(), gpu.dtype()) << what;
  ASSERT_EQ(cpu.shape(), gpu.shape()) << what;
  const Array host = gpu.to(kiln::cpu());
  if (is_floating(cpu.dtype())) {
    const std::vector<double> c = cpu.to_vector<double>(), g = host.to_vector<double>();
    int reported = 0;
    for (size_t i = 0; i < c.size() && reported < 5; ++i) {
      const bool ok =
          (std::isnan(c[i]) && std::isnan(g[i])) || c[i] == g[i] ||
          (std::isfinite(c[i]) && std::isfinite(g[i]) &&
           std::fabs(c[i] - g[i]) <=
               ulps * epsilon(cpu.dtype()) * std::max({std::fabs(c[i]), smallest_normal(cpu.dtype()), magnitude}));
      if (!ok) {
        ADD_FAILURE() << what << ": element " << i << " cpu " << c[i] << " gpu " << g[i];
        ++reported;
      }
    }
  } else {
    const std::vector<int64_t> c = cpu.to_vector<int64_t>(), g = host.to_vector<int64_t>();
    int reported = 0;
    for (size_t i = 0; i < c.size() && reported < 5; ++i)
      if (c[i] != g[i]) {
        ADD_FAILURE() << what << ": element " << i << " cpu " << c[i] << " gpu " << g[i];
        ++reported;
      }
  }
}

/// Random CPU values for `t`, with the special values each kind needs (NaN, infinities, signed zeros,
/// halves for round-half-even, integer extremes for wrapping).
Array random_values(const Shape& shape, DType t, std::mt19937_64& rng, bool small_ints = false) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<double> v(static_cast<size_t>(n));
  if (is_floating(t)) {
    std::uniform_real_distribution<double> u(-4.0, 4.0);
    const double special[] = {std::nan(""), INFINITY, -INFINITY, 0.0, -0.0, 0.5, 1.5, 2.5, -2.5, 1.0, -1.0, 1e-3};
    for (size_t i = 0; i < v.size(); ++i) v[i] = i % 17 == 3 ? special[(i / 17) % 12] : u(rng);
    return from_data(v, shape).astype(t);
  }
  if (t == DType::Bool) {
    std::vector<int64_t> b(static_cast<size_t>(n));
    for (auto& x : b) x = static_cast<int64_t>(rng() % 2);
    return from_data(b, shape).astype(t);
  }
  std::vector<int64_t> x(static_cast<size_t>(n));
  const int64_t lo = t == DType::UInt8 ? 0
                     : small_ints      ? -3
                                       : -100,
                hi = t == DType::UInt8 ? 255
                     : small_ints      ? 6
                                       : 100;
  std::uniform_int_distribution<int64_t> u(lo, hi);
  for (size_t i = 0; i < x.size(); ++i) x[i] = u(rng);
  if (!small_ints && t != DType::UInt8 && n > 40) {  // integer extremes: INT_MIN // -1, abs(INT_MIN), wrapping
    const int64_t bits = itemsize(t) * 8;
    const int64_t min = bits == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t{1} << (bits - 1));
    x[5] = min;
    x[6] = -1;
    x[7] = bits == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (bits - 1)) - 1;
    x[8] = 0;
  }
  return from_data(x, shape).astype(t);
}

/// Allowed ulps of an op's float result (0: correctly rounded on both devices, so bit-identical).
double ulps_for(OpCode op, DType result) {
  const detail::TypeRule rule = detail::op_info(op).rule;
  const bool math = (rule == detail::TypeRule::Float && op != OpCode::Sqrt) || op == OpCode::Power;
  if (!math) return 0;
  if (result == DType::Float16 || result == DType::BFloat16) return 1;  // float32 math, rounded once
  return result == DType::Float32 ? 8 : 4;
}

/// One layout of the test: how each operand's view is made from its base array.
struct Layout {
  const char* name;
  Shape base[3];
  std::function<Array(const Array&, int)> view;
  bool scalar_last = false;  ///< the last operand (of binary and ternary ops) is a C++ scalar
};

std::vector<Layout> layouts() {
  return {
      {"contiguous", {{1003}, {1003}, {1003}}, [](const Array& a, int) { return a; }},
      {"strided",
       {{29, 37}, {37, 58}, {29, 37}},
       [](const Array& a, int k) { return k == 1 ? a.slice(1, 0, std::nullopt, 2) : a.T(); }},
      {"broadcast",
       {{37, 1}, {1, 29}, {37, 29}},
       [](const Array& a, int k) { return k == 2 ? a.slice(0, std::nullopt, std::nullopt, -1) : a; }},
      {"scalar", {{5, 203}, {5, 203}, {5, 203}}, [](const Array& a, int) { return a; }, true},
  };
}

/// Runs `op` on inputs of dtype `t` in `layout` on the CPU and on cuda:0 and compares.
void check_op(OpCode op, DType t, const Layout& layout, std::mt19937_64& rng) {
  const int arity = detail::op_info(op).arity;
  const bool small = op == OpCode::Power;
  Array cpu_in[3], gpu_in[3];
  for (int k = 0; k < arity; ++k) {
    const DType dt = op == OpCode::Where && k == 0 ? DType::Bool : t;
    Shape shape = layout.base[arity == 1 ? 2 : k];
    const Array base = random_values(shape, dt, rng, small);
    cpu_in[k] = layout.view(base, arity == 1 ? 2 : k);
    gpu_in[k] = layout.view(base.to(gpu(0)), arity == 1 ? 2 : k);
  }
  const Scalar scalar = is_floating(t) ? Scalar(1.5) : t == DType::Bool ? Scalar(true) : Scalar(3);
  auto operands = [&](Array* in, std::vector<Operand>& ops) {
    for (int k = 0; k < arity; ++k) {
      if (layout.scalar_last && arity > 1 && k == arity - 1)
        ops.emplace_back(scalar);
      else
        ops.emplace_back(in[k]);
    }
  };
  std::vector<Operand> cpu_ops, gpu_ops;
  operands(cpu_in, cpu_ops);
  operands(gpu_in, gpu_ops);
  const std::string what = std::string(detail::op_info(op).name) + " " + std::string(dtype_name(t)) + " " + layout.name;
  Array expected;
  try {
    if (arity == 1)
      expected = detail::elementwise(op, {&cpu_ops[0]});
    else if (arity == 2)
      expected = detail::elementwise(op, {&cpu_ops[0], &cpu_ops[1]});
    else
      expected = detail::elementwise(op, {&cpu_ops[0], &cpu_ops[1], &cpu_ops[2]});
  } catch (const DTypeError&) {  // the op does not take this dtype: the GPU must refuse it the same way
    if (arity == 1) {
      EXPECT_THROW(detail::elementwise(op, {&gpu_ops[0]}), DTypeError) << what;
    } else if (arity == 2) {
      EXPECT_THROW(detail::elementwise(op, {&gpu_ops[0], &gpu_ops[1]}), DTypeError) << what;
    }
    return;
  }
  Array got;
  if (arity == 1)
    got = detail::elementwise(op, {&gpu_ops[0]});
  else if (arity == 2)
    got = detail::elementwise(op, {&gpu_ops[0], &gpu_ops[1]});
  else
    got = detail::elementwise(op, {&gpu_ops[0], &gpu_ops[1], &gpu_ops[2]});
  EXPECT_TRUE(got.device().is_cuda()) << what;
  // logaddexp returns max(a, b) + log1p(exp(-|a - b|)): that last addition rounds at the operands' magnitude
  // (up to 4 here), so a small result (a = -4, b = 0.01) carries the operands' ulps, on both devices alike.
  const double magnitude = op == OpCode::LogAddExp ? 4.0 : 0.0;
  expect_matches(expected, got, ulps_for(op, expected.dtype()), what, magnitude);
}

class GpuElementwiseOp : public ::testing::TestWithParam<int> {};

TEST_P(GpuElementwiseOp, MatchesTheCpuForEveryDtypeAndLayout) {
  KILN_REQUIRE_GPU();
  const OpCode op = static_cast<OpCode>(GetParam());
  std::mt19937_64 rng(1234 + GetParam());
  for (const Layout& layout : layouts()) {
    if (layout.scalar_last && detail::op_info(op).arity == 1) continue;
    for (DType t : kAllTypes) check_op(op, t, layout, rng);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryOp, GpuElementwiseOp, ::testing::Range(0, static_cast<int>(OpCode::Fill)),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(detail::op_info(static_cast<OpCode>(info.param)).name);
                         });

/// Values every dtype holds exactly after the cast (the overlapping range of all targets).
Array cast_source(DType from, DType to, const Shape& shape, std::mt19937_64& rng) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<double> v(static_cast<size_t>(n));
  // Negative values only when the target is signed or floating; fractions only from floats; NaN and
  // infinities only into floats and bool (casting them to integers is undefined in C++).
  const bool negative = to != DType::UInt8 && from != DType::UInt8 && from != DType::Bool;
  std::uniform_real_distribution<double> u(negative ? -100.0 : 0.0, 100.0);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = is_floating(from) ? u(rng) : std::floor(u(rng));
    if (from == DType::Bool) v[i] = static_cast<double>(rng() % 2);
    if (is_floating(from) && (is_floating(to) || to == DType::Bool) && i % 13 == 0)
      v[i] = i % 39 == 0 ? std::nan("") : i % 39 == 13 ? INFINITY : -0.0;
  }
  return from_data(v, shape).astype(from);
}

// gelu_tanh into float16/bfloat16 takes a float path where float's error bound decides the rounding and the
// double formula elsewhere (kd::ops::gelu_tanh_narrow): every one of the 65536 values of each dtype (NaNs,
// infinities, subnormals, both zeros) must give the CPU's bits, contiguous and strided (the vector and the
// one-element kernels).
TEST(GpuElementwise, GeluTanhOfEveryHalfAndBfloat16ValueEqualsTheCpuBitForBit) {
  KILN_REQUIRE_GPU();
  std::vector<uint16_t> bits(65536);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<uint16_t>(i);
  for (DType t : {DType::BFloat16, DType::Float16}) {
    const Array x = from_data(bits.data(), {65536}, t, kiln::cpu());
    const Array want = gelu_tanh(x);
    const Array got = gelu_tanh(x.to(gpu(0))).to(kiln::cpu());
    const auto* w = static_cast<const uint16_t*>(want.data_ptr());
    const auto* g = static_cast<const uint16_t*>(got.data_ptr());
    int reported = 0;
    for (size_t i = 0; i < bits.size() && reported < 5; ++i) {
      const bool both_nan = std::isnan(want[static_cast<int64_t>(i)].item<double>()) &&
                            std::isnan(got[static_cast<int64_t>(i)].item<double>());
      if (w[i] != g[i] && !both_nan) {
        ADD_FAILURE() << dtype_name(t) << " gelu_tanh of bits " << i << " ("
                      << x[static_cast<int64_t>(i)].item<double>() << "): cpu "
                      << want[static_cast<int64_t>(i)].item<double>() << ", gpu "
                      << got[static_cast<int64_t>(i)].item<double>();
        ++reported;
      }
    }
    const Array strided = gelu_tanh(x.to(gpu(0)).reshape({256, 256}).T()).to(kiln::cpu());
    EXPECT_TRUE(array_equal(strided, gelu_tanh(x.reshape({256, 256}).T()), true)) << dtype_name(t) << " strided";
  }
}

TEST(GpuElementwise, CastsBetweenEveryPairOfDtypesMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  for (DType from : kAllTypes)
    for (DType to : kAllTypes) {
      const Array base = cast_source(from, to, {33, 41}, rng);
      const std::string what = std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to));
      expect_matches(base.astype(to), base.to(gpu(0)).astype(to), 0, what + " contiguous");
      expect_matches(base.T().astype(to), base.to(gpu(0)).T().astype(to), 0, what + " transposed");
    }
}

TEST(GpuElementwise, CopiesIntoStridedViewsAndFillsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  for (DType t : kAllTypes) {
    const std::string what(dtype_name(t));
    Array cpu_dst = zeros({40, 30}, t), gpu_dst = zeros({40, 30}, t, gpu(0));
    const Array src = random_values({20, 30}, t, rng);
    cpu_dst.slice(1, 5, 25).slice(0, 0, std::nullopt, 2).slice(0, 0, 15).assign(src.T().slice(0, 0, 15));
    gpu_dst.slice(1, 5, 25).slice(0, 0, std::nullopt, 2).slice(0, 0, 15).assign(src.to(gpu(0)).T().slice(0, 0, 15));
    expect_matches(cpu_dst, gpu_dst, 0, what + " strided assign");
    cpu_dst.slice(0, 1, std::nullopt, 3).fill(Scalar(2.5));
    gpu_dst.slice(0, 1, std::nullopt, 3).fill(Scalar(2.5));
    expect_matches(cpu_dst, gpu_dst, 0, what + " strided fill");
    expect_matches(full({1001}, Scalar(-7), t), full({1001}, Scalar(-7), t, gpu(0)), 0, what + " full");
  }
}

/// NumPy's sequence values: start + i * step with two roundings (never an fma), the last one `stop`
/// when `endpoint`, converted to `t` as kiln casts float64.
Array numpy_sequence(double start, double step, int64_t n, bool endpoint, double stop, DType t) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    volatile double product = static_cast<double>(i) * step;  // volatile: no contraction into an fma
    v[static_cast<size_t>(i)] = start + product;
  }
  if (endpoint && n > 1) v.back() = stop;
  return from_data(v, Shape{n}).astype(t);
}

TEST(GpuElementwise, ArangeAndLinspaceMatchNumPysFormulaForEveryDtype) {
  KILN_REQUIRE_GPU();
  // The reference is NumPy's formula computed here (numpy_sequence), independent of kiln's CPU backend (which
  // the library builds with -ffp-contract=off for the same two roundings): the GPU is checked against NumPy.
  for (DType t : kAllTypes) {
    const std::string what(dtype_name(t));
    if (t != DType::Bool) {
      const Array ints = arange(Scalar(-5), Scalar(200), Scalar(3), t, gpu(0));
      expect_matches(arange(Scalar(-5), Scalar(200), Scalar(3), DType::Int64).astype(t), ints, 0, what + " arange int");
    }
    if (is_floating(t)) {
      const Array a = arange(Scalar(-1.25), Scalar(7.5), Scalar(0.1), t, gpu(0));
      expect_matches(numpy_sequence(-1.25, 0.1, a.size(), false, 0, t), a, 0, what + " arange float");
      expect_matches(numpy_sequence(-2.0, 0.05, 101, true, 3.0, t), linspace(-2.0, 3.0, 101, true, t, gpu(0)), 0,
                     what + " linspace endpoint");
      expect_matches(numpy_sequence(0.1, (0.7 - 0.1) / 7, 7, false, 0, t), linspace(0.1, 0.7, 7, false, t, gpu(0)), 0,
                     what + " linspace");
    } else {
      // linspace(-20, 100, 51)[10] is 4 in NumPy (10 * 2.4 rounds to 24); an fma would give 3.999... -> 3.
      expect_matches(numpy_sequence(-20.0, 2.4, 51, true, 100.0, t), linspace(-20.0, 100.0, 51, true, t, gpu(0)), 0,
                     what + " linspace");
    }
  }
  EXPECT_EQ(linspace(-2.0, 3.0, 101, true, DType::Float64, gpu(0))[19].item<double>(), -1.0499999999999998);
  EXPECT_EQ(linspace(-20.0, 100.0, 51, true, DType::UInt8, gpu(0))[10].item<int64_t>(), 4);
}

TEST(GpuElementwise, ScalarOperandsComputeInTheArraysTypeAndLargeShapesUse64BitIndices) {
  KILN_REQUIRE_GPU();
  // float16 + 0.1: the scalar stays float (not rounded to float16) until the result is rounded, on both devices.
  const Array h = linspace(-3.0, 3.0, 999, true, DType::Float16);
  expect_matches(add(h, 0.1), add(h.to(gpu(0)), 0.1), 0, "float16 + 0.1");
  expect_matches(multiply(h.astype(DType::BFloat16), 3), multiply(h.astype(DType::BFloat16).to(gpu(0)), 3), 0,
                 "bfloat16 * 3");
  expect_matches(where(greater(h, 0.0), h, 2.0), where(greater(h.to(gpu(0)), 0.0), h.to(gpu(0)), 2.0), 0, "where");
  expect_matches(clip(h, -1.0, 0.5), clip(h.to(gpu(0)), -1.0, 0.5), 0, "clip");
  // A broadcast whose offsets need more than 32 bits: 2^31 + 4 int8 elements of a transposed view.
  const int64_t rows = (int64_t{1} << 20) + 2, cols = 2048;
  Array column = arange(Scalar(0), Scalar(rows), Scalar(1), DType::Int8, gpu(0)).reshape({rows, 1});
  Array big = add(column, zeros({1, cols}, DType::Int8, gpu(0)));  // (rows, cols) through the strided path
  EXPECT_EQ(big.size(), rows * cols);
  Array tail = big.slice(0, rows - 3, std::nullopt).to(kiln::cpu());
  for (int64_t r = 0; r < 3; ++r)
    EXPECT_EQ(tail[r][cols - 1].item<int64_t>(), static_cast<int8_t>(rows - 3 + r)) << "row " << rows - 3 + r;
}

TEST(GpuElementwise, ASecondCallReusesTheCompiledKernel) {
  KILN_REQUIRE_GPU();
  const Array a = ones({777}, DType::Float32, gpu(0)), b = full({777}, Scalar(2.0f), DType::Float32, gpu(0));
  (void)subtract(a, b);  // first use: may compile (or find it in the disk cache)
  cuda_impl::KernelTable& table = cuda_impl::kernel_table();
  const uint64_t misses = table.misses(), hits = table.hits();
  const uint64_t compiles = cuda_impl::cache_stats().nvrtc_compiles;
  Array c = subtract(a, b);
  EXPECT_EQ(table.misses(), misses);
  EXPECT_GT(table.hits(), hits);
  EXPECT_EQ(cuda_impl::cache_stats().nvrtc_compiles, compiles);
  EXPECT_EQ(c.to(kiln::cpu()).to_vector<float>(), std::vector<float>(777, -1.0f));
}

}  // namespace

#endif  // KILN_WITH_CUDA
