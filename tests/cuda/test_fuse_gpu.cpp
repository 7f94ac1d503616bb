// kiln::fuse on the GPU. Without a GPU: traced graphs have the expected structure and
// their generated kernels (every layout class, reductions, float16, scalar arguments)
// compile to PTX with NVRTC. With a GPU: fused results equal the unfused ops for
// float32/float64/float16/int32, broadcast and strided inputs, final reductions, and a
// repeated call compiles nothing. Several outputs, out= and staged graphs (softmax, norm):
// multi-output and rows kernels compile; on a GPU they match float64 references in one kernel.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/fuse_steps.hpp"      // tests/core
#include "core/fuse_test_util.hpp"  // tests/core
#include "core/fusion.hpp"
#include "cuda/compiler.hpp"
#include "cuda/device_functions.hpp"
#include "cuda/fusion.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "cuda/fuse_codegen_util.hpp"  // tests/cuda
#include "test_util.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
using kiln_test::expect_compiles;
using kiln_test::chain_fn;
using kiln_test::expect_equal;
using kiln_test::expect_error;

namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
  return n;
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
  s.layout = FusionLayout::Broadcast;  // dense operands in vectors, the first input read per element
  s.vector_width = vector_width;
  s.broadcast_mask = 1;
  specs.push_back(s);
  s.index64 = false;
  s.ndim = 3;
  s.broadcast_mask = 0;
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
  m.op = fusion_reduce_op(detail::ReduceOp::Mean);
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

TEST(FuseCodegen, MultiOutputAndAliasedKernelsCompile) {
  auto step = fuse(kiln_test::adam_fn, "adam");
  Array z = zeros({8}, float32, cpu());
  auto graph = step.graph(z, z, z, z, 0.1, 0.9, 0.999, 1e-8, 0.1, 0.001);
  ASSERT_EQ(graph->outputs.size(), 3u);
  std::vector<FusionKernelSpec> specs = elementwise_specs(4);
  for (size_t i = 0, n = specs.size(); i < n; ++i) {
    FusionKernelSpec aliased = specs[i];
    aliased.aliased = true;
    EXPECT_NE(aliased, specs[i]);
    EXPECT_NE(fusion_kernel_name(*graph, aliased), fusion_kernel_name(*graph, specs[i]));
    specs.push_back(aliased);
  }
  expect_compiles(*graph, specs);
  const std::string code = fusion_kernel_code(*graph, specs[0]);
  EXPECT_NE(code.find("float* __restrict__ out2"), std::string::npos);
  EXPECT_EQ(fusion_kernel_code(*graph, specs.back()).find("__restrict__"), std::string::npos);
  EXPECT_EQ(count(code, "reinterpret_cast<uint4*>(out"), 3);  // each output stored as 16-byte vectors
}

TEST(FuseCodegen, RowsKernelsCompileForSoftmaxAndNorm) {
  Array x = zeros({4, 6}, float32, cpu());
  auto softmax = fuse(kiln_test::softmax_fn, "softmax");
  auto g1 = softmax.graph(x);
  EXPECT_TRUE(g1->staged);
  EXPECT_EQ(g1->reductions.size(), 2u);
  std::vector<FusionKernelSpec> specs;
  FusionKernelSpec s;
  s.layout = FusionLayout::Rows;
  for (int group : {1, 8, 32, 256}) {
    s.group = group;
    s.kept_ndim = group == 1 ? 2 : 1;
    s.reduced_ndim = group == 1 ? 2 : 1;
    specs.push_back(s);
  }
  s.index64 = true;
  s.aliased = true;
  specs.push_back(s);
  expect_compiles(*g1, specs);
  const std::string code = fusion_kernel_code(*g1, specs[3]);
  EXPECT_EQ(count(code, "for (IDX r = lane; r < num_red;"), 3);  // max, sum, then the writing pass
  EXPECT_NE(code.find("kd::red_max<float>"), std::string::npos);
  EXPECT_NE(code.find("kd::red_sum<float>"), std::string::npos);
  // Two outputs of two shapes: log-sum-exp (written once per row) and log_softmax.
  auto both = fuse([](auto v) {
    auto m = max(v, -1, true);
    auto lse = m + log(sum(exp(v - m), -1, true));
    return std::tuple{lse, v - lse};
  });
  FusionKernelSpec k = specs[2];
  k.kept_mask = 1;
  expect_compiles(*both.graph(x), {k});
  EXPECT_NE(fusion_kernel_code(*both.graph(x), k).find("if (lane == 0)"), std::string::npos);
  // The norm: a float64 sum of squares, its root and the cast in one kernel; mean divides in the kernel.
  auto norm = fuse([](auto v) {
    auto w = v.astype(float64);
    return sqrt(sum(w * w)).astype(v.dtype());
  });
  FusionKernelSpec n;
  n.layout = FusionLayout::Rows;
  n.group = 256;
  n.kept_mask = 1;
  expect_compiles(*norm.graph(x), {n});
  EXPECT_NE(fusion_kernel_code(*norm.graph(x), n).find("kd::red_sum<double>"), std::string::npos);
  auto centred = fuse([](auto v) { return v - mean(v, 0, true); });
  expect_compiles(*centred.graph(x.astype(float16)), {specs[0]});
}

TEST(FuseCodegen, RowsKernelsInVectorsLoadDenseInputsAsVectorsAndConstantOnesPerElement) {
  // Softmax in vectors of 4: every pass steps 4 elements a lane, the written row stored as one vector.
  auto softmax = fuse(kiln_test::softmax_fn, "softmax");
  auto g1 = softmax.graph(zeros({4, 8}, float32, cpu()));
  FusionKernelSpec s;
  s.layout = FusionLayout::Rows;
  s.kept_ndim = s.reduced_ndim = 1;
  s.vector_width = 4;
  for (int group : {8, 32, 256}) {
    s.group = group;
    expect_compiles(*g1, {s});
  }
  const std::string code = fusion_kernel_code(*g1, s);
  EXPECT_EQ(count(code, "for (IDX r = lane * 4; r < num_red; r += 1024)"), 3) << code;
  EXPECT_EQ(count(code, "x0.raw = *reinterpret_cast<const uint4*>(in0 + o0);"), 3) << code;
  EXPECT_EQ(count(code, "*reinterpret_cast<uint4*>(out0 + o1) = y0.raw;"), 1) << code;
  // Cross entropy's gradient: bfloat16 logits and int32 class ids (1, C) dense along the row, the row's
  // log-sum-exp and label (N, 1) constant along it (broadcast_mask bits 1 and 3): read one element each.
  auto grad = fuse([](auto x, auto lse, auto ids, auto label) {
    auto e = exp(x.astype(float32) - lse);
    return where(ids == label, e - 1.0, e).astype(x.dtype());
  });
  auto g2 = grad.graph(zeros({4, 8}, bfloat16, cpu()), zeros({4, 1}, float32, cpu()), zeros({1, 8}, int32, cpu()),
                       zeros({4, 1}, int32, cpu()));
  FusionKernelSpec c = s;
  c.broadcast_mask = 0b1010u;
  expect_compiles(*g2, {c});
  const std::string ce = fusion_kernel_code(*g2, c);
  EXPECT_NE(ce.find("x0.raw = *reinterpret_cast<const uint2*>(in0 + o0);"), std::string::npos) << ce;
  EXPECT_NE(ce.find("x2.raw = *reinterpret_cast<const uint4*>(in2 + o2);"), std::string::npos) << ce;
  EXPECT_NE(ce.find("in1[o1]"), std::string::npos) << ce;
  EXPECT_NE(ce.find("in3[o3]"), std::string::npos) << ce;
  EXPECT_EQ(ce.find("VecIn1"), std::string::npos) << ce;
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

TEST(FuseGpu, PerChannelOperandsOfNchwAndChannelsLastActivations) {
  // The broadcast layout: dense activations in vectors, the (C, 1, 1) operand per element; in place as the
  // ResNet epilogue runs it, with odd channel counts (tails), and misaligned views (narrower or no vectors).
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  auto epilogue = fuse([](auto y, auto b, auto r) { return maximum(y * 2 + b + r, 0.0f).astype(y.dtype()); },
                       "per_channel_test");
  for (DType t : {float32, bfloat16, float16, float64}) {
    for (int64_t c : {int64_t{3}, int64_t{64}, int64_t{67}}) {
      Array nchw = random::normal({2, c, 5, 7}, float32, d).astype(t);
      Array cl = nchw.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});  // channels-last strides
      Array b = random::normal({c, 1, 1}, float32, d);
      Array wide = random::normal({2 * c * 35 + 1}, float32, d).astype(t);
      Array shifted = wide.slice(0, 1, 2 * c * 35 + 1).reshape({2, c, 5, 7});  // one element off alignment
      for (const Array& y : {nchw, cl, shifted}) {
        Array r = random::normal(y.shape(), float32, d).astype(t);
        Array want = maximum(y * 2 + b + r, 0.0f).astype(t);
        expect_equal(epilogue(y, b, r), want);
        Array v = y.copy();
        epilogue.out({v}, v, b, r);
        expect_equal(v, want);
      }
    }
  }
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

TEST(FuseGpu, AdamAndSgdStepsInPlaceMatchFloat64References) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  const Shape shape{300, 77};  // odd sizes: vector body and scalar tail
  const size_t n = 300 * 77;
  std::vector<double> p0 = kiln_test::test_values(n, 1), zero(n, 0.0);
  Array p = kiln_test::f32_array(p0, shape, d), m = zeros(shape, float32, d), v = zeros(shape, float32, d);
  const void* p_data = p.data_ptr();
  auto step = fuse(kiln_test::adam_fn, "adam");
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<std::vector<double>> grads;
  for (int t = 0; t < 3; ++t) {
    grads.push_back(kiln_test::test_values(n, 10 + static_cast<uint32_t>(t), 2.0));
    Array g = kiln_test::f32_array(grads.back(), shape, d);
    step.out({p, m, v}, p, g, m, v, lr, b1, b2, eps, 1 - std::pow(b1, t + 1), 1 - std::pow(b2, t + 1));
  }
  EXPECT_EQ(p.data_ptr(), p_data);
  const kiln_test::AdamState want = kiln_test::adam_reference({p0, zero, zero}, grads, lr, b1, b2, eps);
  kiln_test::expect_near(p, want.p, 2e-6);
  kiln_test::expect_near(m, want.m, 2e-6);
  kiln_test::expect_near(v, want.v, 2e-6);
  // SGD with momentum on a strided (transposed) parameter: the strided kernel, in place.
  std::vector<double> q0 = kiln_test::test_values(n, 3), b0(n, 0.0), g0 = kiln_test::test_values(n, 4);
  Array q = kiln_test::f32_array(q0, {77, 300}, d).T(), buf = zeros({300, 77}, float32, d);
  Array g = kiln_test::f32_array(g0, {77, 300}, d).T();
  fuse(kiln_test::sgd_fn).out({q, buf}, q, g, buf, 0.05, 0.9, 0.01);
  std::vector<double> want_q(n), want_b(n);  // row-major over the (300, 77) views
  for (size_t i = 0; i < 300; ++i)
    for (size_t j = 0; j < 77; ++j) {
      const size_t src = j * 300 + i;
      want_b[i * 77 + j] = g0[src] + 0.01 * q0[src];
      want_q[i * 77 + j] = q0[src] - 0.05 * want_b[i * 77 + j];
    }
  kiln_test::expect_near(q, want_q, 1e-6);
  kiln_test::expect_near(buf, want_b, 1e-6);
}

/// Kernels one call of `f` launches, counted as the nodes of a CUDA graph capturing it.
template <class F>
size_t kernels_of(Device d, F&& f) {
  f();  // compile first
  synchronize(d);
  Stream s = Stream::create(d);
  kiln::cuda::Graph graph;
  {
    kiln::cuda::GraphCapture capture(graph, s);
    f();
  }
  return graph.num_nodes();
}

TEST(FuseGpu, LogsumexpIsOneKernelAndMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  for (const Shape& shape : {Shape{1000, 10}, Shape{64, 3000}, Shape{2, 40000}, Shape{3, 5, 257}}) {
    const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
    std::vector<double> x = kiln_test::test_values(static_cast<size_t>(rows * cols), 11, 30.0);
    Array host = kiln_test::f32_array(x, shape);
    Array a = host.to(d);
    kiln_test::expect_near(logsumexp(a, -1), logsumexp(host, -1).to_vector<double>(), 1e-6);
    EXPECT_EQ(kernels_of(d, [&] { (void)logsumexp(a, -1); }), 1u) << shape_str(shape);
    // Over the leading axes: the rows are strided views, still one kernel.
    kiln_test::expect_near(logsumexp(a, 0), logsumexp(host, 0).to_vector<double>(), 1e-6);
    EXPECT_EQ(kernels_of(d, [&] { (void)logsumexp(a, 0); }), 1u) << shape_str(shape);
    // Inside a user's fused function: log_softmax as x - logsumexp(x).
    auto log_softmax = fuse([](auto v) { return v - logsumexp(v, -1, true); }, "log_softmax_lse");
    kiln_test::expect_near(log_softmax(a), kiln_test::softmax_reference(x, rows, cols, true), 1e-5);
    Array y = empty(shape, float32, d);
    EXPECT_EQ(kernels_of(d, [&] { log_softmax.out({y}, a); }), 1u) << shape_str(shape);
  }
}

TEST(FuseGpu, SoftmaxAndLogSoftmaxAreOneKernelAndMatchFloat64) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  auto softmax = fuse(kiln_test::softmax_fn, "softmax");
  auto log_softmax = fuse(kiln_test::log_softmax_fn, "log_softmax");
  // Short rows (sub-warp groups), long rows (a block per row), and few rows of one long axis.
  for (const Shape& shape : {Shape{1000, 10}, Shape{64, 3000}, Shape{3, 5, 257}, Shape{2, 40000}}) {
    const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
    std::vector<double> x = kiln_test::test_values(static_cast<size_t>(rows * cols), 7, 8.0);
    Array a = kiln_test::f32_array(x, shape, d);
    kiln_test::expect_near(softmax(a), kiln_test::softmax_reference(x, rows, cols, false), 1e-6);
    kiln_test::expect_near(log_softmax(a), kiln_test::softmax_reference(x, rows, cols, true), 1e-6);
    kiln_test::expect_near(softmax(a.astype(float64)), kiln_test::softmax_reference(x, rows, cols, false), 1e-13);
    Array y = empty(shape, float32, d);
    EXPECT_LE(kernels_of(d, [&] { softmax.out({y}, a); }), 2u) << shape_str(shape);
    EXPECT_EQ(kernels_of(d, [&] { log_softmax.out({y}, a); }), 1u) << shape_str(shape);
  }
  // Over a leading axis (one thread per column), and in place.
  auto softmax0 = fuse([](auto v) {
    auto e = exp(v - max(v, 0, true));
    return e / sum(e, 0, true);
  });
  std::vector<double> x = kiln_test::test_values(50 * 300, 9, 4.0);
  Array a = kiln_test::f32_array(x, {50, 300}, d);
  std::vector<double> xt(x.size());
  for (size_t i = 0; i < 50; ++i)
    for (size_t j = 0; j < 300; ++j) xt[j * 50 + i] = x[i * 300 + j];
  Array y = softmax0(a);
  kiln_test::expect_near(y.T(), kiln_test::softmax_reference(xt, 300, 50, false), 1e-6);
  softmax.out({a}, a);
  kiln_test::expect_near(a, kiln_test::softmax_reference(x, 50, 300, false), 1e-6);
}

TEST(FuseGpu, StagedGraphsMatchTheUnfusedOps) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  Array x = random::normal({128, 33}, float32, d), b = random::normal({33}, float32, d);
  auto centred = fuse([](auto v, auto bias) { return (v - mean(v, 1, true)) * bias; });
  expect_equal(centred(x, b), (x - mean(x, 1, true)) * b, 1e-5);
  auto both = fuse([](auto v) {
    auto m = max(v, -1, true);
    auto lse = m + log(sum(exp(v - m), -1, true));
    return std::tuple{lse, v - lse};
  });
  auto [lse, ls] = both(x);
  Array m = max(x, -1, true);
  Array want = m + log(sum(exp(x - m), -1, true));
  expect_equal(lse, want, 1e-6);
  expect_equal(ls, x - want, 1e-6);
  Array h = random::normal({16, 40}, float16, d);
  expect_equal(fuse(kiln_test::softmax_fn)(h), exp(h - max(h, -1, true)) / sum(exp(h - max(h, -1, true)), -1, true),
               2e-3);
  // Rows of different reductions' axes: the ops one by one, same values.
  expect_equal(fuse([](auto v) { return sum(v, 0, true) + max(v, 1, true); })(x), sum(x, 0, true) + max(x, 1, true),
               1e-6);
}

TEST(FuseGpu, RowsInVectorsAndPerElementGiveTheCpusValues) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  // Cross entropy's gradient (to a bfloat16 ulp of the CPU's) and a log-sum-exp with the max-shifted rows
  // (reductions: to float32 rounding; the shift exact) over rows of a (300, cols + 8) array's columns: from the
  // start (vectors of 4: the int32 ids are the widest), a length of 2 mod 4 (vectors of 2), and from column 1
  // (rows start one element past a vector boundary: no vectors).
  auto grad = fuse([](auto x, auto lse, auto ids, auto label) {
    auto e = exp(x.astype(float32) - lse);
    return where(ids == label, e - 1.0, e).astype(x.dtype());
  });
  auto lse_of = fuse([](auto x) {
    auto v = x.astype(float32);
    auto m = max(v, -1, true);
    return std::tuple{m + log(sum(exp(v - m), -1, true)), v - m};
  });
  // Rows of 1024 and more make the gradient (an elementwise graph with per-row inputs) a rows kernel too.
  for (auto [start, cols] : {std::pair<int64_t, int64_t>{0, 64}, {0, 62}, {1, 64}, {0, 2048}, {0, 2046}, {1, 2048}}) {
    Array full = random::normal({300, cols + 8}, float32, cpu()).astype(bfloat16);
    Array full_gpu = full.to(d);
    Array x = full.slice(1, start, start + cols), x_gpu = full_gpu.slice(1, start, start + cols);
    Array ids = arange(cols, int32, cpu()).reshape({1, cols});
    Array label = random::randint(0, cols, {300, 1}, int32, cpu());
    auto [lse, shifted] = lse_of(x);
    auto [lse_gpu, shifted_gpu] = lse_of(x_gpu);
    expect_equal(lse_gpu.to(cpu()), lse, 1e-6);
    EXPECT_TRUE(array_equal(shifted_gpu.to(cpu()), shifted)) << start << " " << cols;
    Array want = grad(x, lse, ids, label);
    Array got = grad(x_gpu, lse.to(d), ids.to(d), label.to(d));
    // exp is within a few ulps of the CPU's (not correctly rounded), so a bfloat16 result may round one ulp apart.
    EXPECT_TRUE(allclose(got.to(cpu()).astype(float32), want.astype(float32), 1.0 / 128, 1e-6)) << start << " " << cols;
    Array lse_gpu_in = lse.to(d), ids_gpu = ids.to(d), label_gpu = label.to(d);
    EXPECT_EQ(kernels_of(d, [&] { (void)grad(x_gpu, lse_gpu_in, ids_gpu, label_gpu); }), 1u) << cols;
  }
}

TEST(FuseGpu, NormIsOneKernelAndMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  Device d = gpu(0);
  for (const Shape& shape : {Shape{100, 100}, Shape{7}, Shape{3, 4, 5}}) {
    Array host = random::normal(shape, float32, cpu());
    Array a = host.to(d);
    expect_equal(linalg::norm(a).to(cpu()), linalg::norm(host), 1e-7);
    expect_equal(linalg::norm(a, {}, true).to(cpu()), linalg::norm(host, {}, true), 1e-7);
    expect_equal(linalg::norm(a.astype(float16)).to(cpu()), linalg::norm(host.astype(float16)), 1e-3);
    expect_equal(linalg::norm(a.astype(int32)).to(cpu()), linalg::norm(host.astype(int32)), 1e-15);
    EXPECT_EQ(kernels_of(d, [&] { (void)linalg::norm(a); }), 1u) << shape_str(shape);
  }
  Array big = random::normal({1 << 20}, float32, cpu());  // long single row: the unfused path
  expect_equal(linalg::norm(big.to(d)).to(cpu()), linalg::norm(big), 1e-6);
}

#endif  // KILN_WITH_CUDA
