// kiln::fuse on the GPU. Without a GPU: traced graphs have the expected structure and
// their generated kernels (every layout class, reductions, float16, scalar arguments)
// compile to PTX with NVRTC. With a GPU: fused results equal the unfused ops for
// float32/float64/float16/int32, broadcast and strided inputs, final reductions, and a
// repeated call compiles nothing.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/fuse_test_util.hpp"  // tests/core
#include "core/fusion.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/fusion.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
using kiln_test::chain_fn;
using kiln_test::expect_equal;
using kiln_test::expect_error;

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
}

/// Compiles the kernels of `specs` for `graph` in one program to PTX (sm_90) and checks every entry is there.
void expect_compiles(const detail::FusionGraph& graph, const std::vector<FusionKernelSpec>& specs) {
  std::string source = device_prelude();
  for (const FusionKernelSpec& spec : specs) source += fusion_kernel_code(graph, spec);
  CompileOptions options;
  options.options = builtin_kernel_options();
  std::string ptx;
  ASSERT_NO_THROW(ptx = compile_ptx(source, "fuse_test", 90, options)) << source;
  for (const FusionKernelSpec& spec : specs)
    EXPECT_NE(ptx.find(".entry " + fusion_kernel_name(graph, spec) + "("), std::string::npos)
        << fusion_kernel_name(graph, spec);
}

std::vector<FusionKernelSpec> elementwise_specs(int vector_width) {
  std::vector<FusionKernelSpec> specs;
  FusionKernelSpec s;
  s.layout = FusionLayout::Contiguous;
  s.vector_width = vector_width;
  specs.push_back(s);
  s.vector_width = 1;
  s.index64 = true;
  specs.push_back(s);
  s.layout = FusionLayout::Strided;
  s.index64 = false;
  for (int nd : {1, 3}) {
    s.ndim = nd;
    s.unroll = nd == 1 ? 4 : 1;
    specs.push_back(s);
  }
  s.index64 = true;
  s.ndim = 2;
  specs.push_back(s);
  return specs;
}

}  // namespace

// ------------------------------------------------------------------ without a GPU

TEST(FuseCodegen, ChainTracesToOneGraphAndCompilesInEveryLayout) {
  auto f = fuse(chain_fn, "chain");
  Array x = zeros({8}, float32, cpu());
  auto graph = f.graph(x);
  // arg, 3 constants (1.5, 0.3, 0.5) and 9 ops: multiply add tanh multiply negative multiply exp multiply subtract.
  EXPECT_EQ(graph->nodes.size(), 13u) << detail::fusion_describe(*graph);
  EXPECT_EQ(graph->slots.size(), 3u);
  EXPECT_EQ(graph->reduce, -1);
  EXPECT_EQ(fusion_array_arguments(*graph), std::vector<int>{0});
  const std::string code = fusion_kernel_code(*graph, elementwise_specs(4)[0]);
  EXPECT_EQ(count(code, "__global__"), 1) << code;
  EXPECT_EQ(count(code, "kd::op_tanh<float>"), 1);
  EXPECT_EQ(count(code, "kd::op_exp<float>"), 1);
  EXPECT_NE(code.find("uint4"), std::string::npos);  // 16-byte vector loads and stores
  EXPECT_NE(code.find("const float s0"), std::string::npos);
  EXPECT_EQ(f.cache_size(), 1u);
  expect_compiles(*graph, elementwise_specs(4));
}

TEST(FuseCodegen, Float16IntermediatesRoundWhereUnfusedOpsRound) {
  for (DType t : {float16, bfloat16}) {
    auto f = fuse(chain_fn, "chain_16");
    auto graph = f.graph(zeros({8}, t, cpu()));
    const std::string code = fusion_kernel_code(*graph, elementwise_specs(8)[0]);
    const std::string storage = t == float16 ? "kd::half_t" : "kd::bf16_t";
    // Every one of the 9 ops stores its value in the 16-bit type (then widens it for the next op), as 9
    // unfused kernels would; the math itself runs in float.
    EXPECT_EQ(count(code, "= kd::cast<" + storage + ">(kd::op_"), 9) << code;
    EXPECT_EQ(count(code, "kd::op_tanh<float>"), 1);
    EXPECT_EQ(graph->nodes[static_cast<size_t>(graph->output)].dtype, t);
    expect_compiles(*graph, elementwise_specs(8));
  }
}

TEST(FuseCodegen, MixedDtypesScalarArgumentsAndWhere) {
  auto f = fuse([](auto a, auto b, auto s, auto c) { return where(c, a * s, b.astype(float64)) + (a > 3); }, "mix");
  auto graph = f.graph(zeros({2, 3}, int32, cpu()), zeros({3}, int8, cpu()), 2.5, true);
  const std::string text = detail::fusion_describe(*graph);
  EXPECT_NE(text.find("multiply %0, %2 in float64 : float64 ndim 2"), std::string::npos) << text;
  EXPECT_NE(text.find("arg3 : weak bool"), std::string::npos) << text;
  const std::string code = fusion_kernel_code(*graph, elementwise_specs(2)[0]);
  EXPECT_NE(code.find("const kd::i32* __restrict__ in0"), std::string::npos) << code;
  EXPECT_NE(code.find("const kd::i8* __restrict__ in1"), std::string::npos) << code;
  EXPECT_NE(code.find("const double s"), std::string::npos) << code;
  EXPECT_NE(code.find("const bool s"), std::string::npos) << code;     // where's condition
  EXPECT_NE(code.find("const kd::i64 s"), std::string::npos) << code;  // 3 compared in int64
  expect_compiles(*graph, elementwise_specs(2));
}

TEST(FuseCodegen, ReductionKernelsCompile) {
  auto dot = fuse([](auto x, auto y) { return sum(x * y); }, "dot");
  auto g1 = dot.graph(zeros({4}, float32, cpu()), zeros({4}, float32, cpu()));
  std::vector<FusionKernelSpec> specs;
  FusionKernelSpec s;
  s.layout = FusionLayout::Reduce;
  s.op = detail::ReduceOp::Sum;
  s.out = float32;
  s.acc = float32;
  for (int group : {1, 4, 32, 256}) {
    s.group = group;
    s.kept_ndim = group == 256 ? 0 : 2;
    s.reduced_ndim = group == 1 ? 2 : 1;
    s.to_partials = group == 256;
    specs.push_back(s);
  }
  s.index64 = true;
  specs.push_back(s);
  expect_compiles(*g1, specs);
  const std::string code = fusion_kernel_code(*g1, specs[3]);
  EXPECT_NE(code.find("kd::red_sum<float>"), std::string::npos);
  EXPECT_NE(code.find("float* __restrict__ out"), std::string::npos);  // partial accumulators
  EXPECT_EQ(g1->nodes[static_cast<size_t>(g1->reduce)].axes, (Shape{0}));

  auto stats = fuse([](auto x) { return mean(x * 2, 1, true); }, "stats");
  auto g2 = stats.graph(zeros({4, 5}, float16, cpu()));
  EXPECT_EQ(g2->nodes[static_cast<size_t>(g2->output)].dtype, float16);
  FusionKernelSpec m;
  m.layout = FusionLayout::Reduce;
  m.op = fusion_reduce_op(detail::FusionReduction::Mean);
  m.out = float64;
  m.acc = reduce_accumulator_dtype(m.op, float16, float64);
  m.group = 8;
  m.kept_ndim = 1;
  expect_compiles(*g2, {m});

  auto any_neg = fuse([](auto x) { return any(x < 0, 0); }, "any_neg");
  auto g3 = any_neg.graph(zeros({4, 5}, int32, cpu()));
  FusionKernelSpec a;
  a.layout = FusionLayout::Reduce;
  a.op = detail::ReduceOp::Any;
  a.out = bool_;
  a.acc = bool_;
  a.kept_ndim = 1;
  expect_compiles(*g3, {a});
  auto isum = fuse([](auto x) { return sum(x * 3); }, "isum");
  auto g4 = isum.graph(zeros({4}, int32, cpu()));
  EXPECT_EQ(g4->nodes[static_cast<size_t>(g4->output)].dtype, int64);
  FusionKernelSpec i;
  i.layout = FusionLayout::Reduce;
  i.out = int64;
  i.acc = reduce_accumulator_dtype(detail::ReduceOp::Sum, int32, int64);
  EXPECT_EQ(i.acc, int64);
  i.group = 32;
  expect_compiles(*g4, {i});
}

TEST(FuseCodegen, KernelNamesTellSpecsApart) {
  auto f = fuse(chain_fn, "chain");
  auto graph = f.graph(zeros({8}, float32, cpu()));
  std::vector<FusionKernelSpec> specs = elementwise_specs(4);
  for (size_t i = 0; i < specs.size(); ++i)
    for (size_t j = i + 1; j < specs.size(); ++j) {
      EXPECT_NE(specs[i], specs[j]);
      EXPECT_NE(fusion_kernel_name(*graph, specs[i]), fusion_kernel_name(*graph, specs[j]));
    }
  EXPECT_EQ(fusion_kernel_name(*graph, specs[0]).rfind("kiln_fused_chain_", 0), 0u);
}

// ------------------------------------------------------------------ with a GPU

TEST(FuseGpu, ChainMatchesUnfusedOpsInEveryFloatDtype) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  auto f = fuse(chain_fn, "chain");
  for (DType t : {float32, float64, float16, bfloat16}) {
    for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000003}}) {
      Array x = random::normal({n}, float32, d).astype(t);
      Array fused = f(x);
      // Same device functions and rounding steps as the unfused kernels: bit-identical.
      expect_equal(fused, chain_fn(x));
      // And the CPU agrees to a few ulp (its tanh/exp come from another library).
      expect_equal(fused.to(cpu()), chain_fn(x.to(cpu())),
                   t == bfloat16  ? 2e-2
                   : t == float16 ? 2e-3
                   : t == float32 ? 4e-6
                                  : 1e-14);
    }
  }
}

TEST(FuseGpu, Int32AndMixedDtypesMatchUnfused) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array a = random::randint(-100, 100, {1000, 37}, int32, d);
  Array b = random::randint(-5, 5, {37}, int8, d);
  auto g = fuse([](auto a, auto b, auto s) { return (a * s + b) / 3; });
  expect_equal(fuse([](auto a, auto b) { return where(a > b, a * b + 3, maximum(a, b) % 7); })(a, b),
               where(a > b, a * b + 3, maximum(a, b) % 7));
  expect_equal(g(a, b, 2), (a * 2 + b) / 3);
  expect_equal(g(a, b, 0.5), (a * 0.5 + b) / 3);
}

TEST(FuseGpu, BroadcastAndStridedInputs) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array m = random::normal({300, 500}, float32, d);
  Array row = random::normal({500}, float32, d);
  Array col = random::normal({300, 1}, float64, d);
  auto f = fuse([](auto x, auto r, auto c) { return sigmoid(x * r) + c; });
  expect_equal(f(m, row, col), sigmoid(m * row) + col);
  Array t = m.T();                     // transposed
  Array s = m.slice(1, 0, 500, 2);     // every other column
  Array rev = m.slice(0, {}, {}, -1);  // reversed rows
  auto g = fuse([](auto x, auto y) { return x * 2 - sqrt(abs(y)); });
  expect_equal(g(t, t), t * 2 - sqrt(abs(t)));
  expect_equal(g(s, rev.slice(1, 0, 250)), s * 2 - sqrt(abs(rev.slice(1, 0, 250))));
  Array h = m.astype(float16);
  expect_equal(g(h.T(), h.T()), h.T() * 2 - sqrt(abs(h.T())));
}

TEST(FuseGpu, FinalReductionsMatchUnfused) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = random::normal({512, 700}, float32, d), y = random::normal({512, 700}, float32, d);
  auto dot = fuse([](auto a, auto b) { return sum(a * b); });
  // Different summation trees: equal to float32 rounding of the accumulation.
  expect_equal(dot(x, y), sum(x * y), 1e-3);
  for (int64_t axis : {0, 1}) {
    expect_equal(fuse([axis](auto a, auto b) { return sum(a * b + 1, axis); })(x, y), sum(x * y + 1, axis), 1e-5);
    expect_equal(fuse([axis](auto a) { return max(tanh(a), axis, true); })(x), max(tanh(x), axis, true));
    expect_equal(fuse([axis](auto a) { return mean(a * a, axis); })(x), mean(x * x, axis), 1e-6);
    expect_equal(fuse([axis](auto a) { return any(a > 3.5f, axis); })(x), any(x > 3.5f, axis));
  }
  Array i = random::randint(-1000, 1000, {100000}, int32, d);
  expect_equal(fuse([](auto a) { return sum(a * 3); })(i), sum(i * 3));
  expect_equal(fuse([](auto a) { return min(a - 1); })(i), min(i - 1));
  Array h = random::normal({64, 33, 5}, float16, d);
  expect_equal(fuse([](auto a) { return sum(a * a, {0, 2}); })(h), sum(h * h, {0, 2}), 2e-3);
  expect_equal(fuse([](auto a) { return sum(a, 1); })(h.T()), sum(h.T(), 1), 2e-3);
}

TEST(FuseGpu, SecondCallCompilesNothing) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  auto f = fuse(chain_fn, "chain_cache");
  Array x = random::normal({1 << 20}, float32, d);
  Array first = f(x);
  synchronize(d);
  const CacheStats before = cache_stats();
  Array second = f(x);
  synchronize(d);
  const CacheStats after = cache_stats();
  EXPECT_EQ(after.nvrtc_compiles, before.nvrtc_compiles);
  EXPECT_EQ(after.memory_hits, before.memory_hits);  // not even a module-cache lookup: the graph holds the kernel
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_EQ(f.cache_size(), 1u);
  expect_equal(second, first);
}

TEST(FuseGpu, MixedDevicesThrowDeviceError) {
  KILN_REQUIRE_GPU();
  auto f = fuse([](auto a, auto b) { return a + b; }, "mixed");
  expect_error<DeviceError>([&] { (void)f(ones({3}, float32, gpu(0)), ones({3}, float32, cpu())); },
                            {"fuse(mixed)", "cuda:0", "cpu", ".to("});
}

#endif  // KILN_WITH_CUDA
