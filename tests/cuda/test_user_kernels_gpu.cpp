// User ElementwiseKernel and ReductionKernel (include/kiln/kernels.hpp) on a GPU: results against CPU
// computations and kiln's built-ins, broadcasting, strides, outputs passed in, raw and scalar parameters, i/n,
// float16 and bfloat16, a non-current device, the variant cache, reductions over axes with keepdims. Parsing,
// argument errors and the generated code compiled to PTX (no GPU) are in test_user_kernels.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

#ifdef KILN_WITH_CUDA

#include "cuda/compiler.hpp"

using namespace kiln;
using namespace kiln::cuda_impl;
using kiln_test::expect_error;

namespace {

TEST(UserKernelGpu, PlusOneGivesOneToTen) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel plus_one("int32 x", "int32 y", "y = x + 1", "plus_one");
  Array y = plus_one(arange(10, int32, gpu(0)));
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(y.device(), gpu(0));
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
}

TEST(UserKernelGpu, BroadcastsInputsAndResolvesPlaceholders) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel add("T x, T y", "T z", "z = x * 10 + y", "bcast_add");
  Array x = arange(3, float64, gpu(0)).reshape({3, 1});
  Array y = arange(4, float64, gpu(0));
  Array z = add(x, y);
  EXPECT_EQ(z.shape(), (Shape{3, 4}));
  EXPECT_EQ(z.dtype(), DType::Float64);
  std::vector<double> expected;
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) expected.push_back(r * 10.0 + c);
  EXPECT_EQ(z.to_vector<double>(), expected);
}

TEST(UserKernelGpu, StridedTransposedAndReversedInputsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel k("float32 x, float32 y", "float32 z", "z = x * 2.0f - y", "strided_k");
  Array xc = random::normal({64, 48}, float32, cpu());
  Array yc = random::normal({48, 64}, float32, cpu());
  Array xs = xc.slice(1, {}, {}, -1);  // reversed columns
  Array ys = yc.T();                   // transposed
  Array z = k(xs.to(gpu(0)).T().T(), ys.to(gpu(0)));
  Array zg = k(xc.to(gpu(0)).slice(1, {}, {}, -1), yc.to(gpu(0)).T());  // views made on the GPU
  const std::vector<float> expected = (xs * 2.0f - ys).to_vector<float>();
  EXPECT_EQ(z.to_vector<float>(), expected);
  EXPECT_EQ(zg.to_vector<float>(), expected);
  // A broadcast operand (stride 0) and a step-2 slice.
  Array row = random::normal({48}, float32, cpu());
  Array big = random::normal({64, 96}, float32, cpu());
  Array w = k(big.to(gpu(0)).slice(1, {}, {}, 2), row.to(gpu(0)));
  EXPECT_EQ(w.to_vector<float>(), (big.slice(1, {}, {}, 2) * 2.0f - row).to_vector<float>());
}

TEST(UserKernelGpu, OutputsPassedInAreWrittenAndReturned) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel k("T x", "T y", "y = y + x", "accumulate");
  Array acc = full({5}, 100, int64, gpu(0));
  Array x = arange(5, int64, gpu(0));
  Array r = k(x, acc);
  EXPECT_TRUE(r.shares_storage(acc));
  EXPECT_EQ(acc.to_vector<int64_t>(), (std::vector<int64_t>{100, 101, 102, 103, 104}));
  // A strided output view: every other element of a buffer.
  Array buf = zeros({10}, int64, gpu(0));
  k(x, buf.slice(0, {}, {}, 2));
  EXPECT_EQ(buf.to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 1, 0, 2, 0, 3, 0, 4, 0}));
}

TEST(UserKernelGpu, RawParametersIndexTheFlatArray) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel reverse("raw T x", "T y", "y = x[n - 1 - i]", "reverse_k");
  Array x = arange(8, int32, gpu(0));
  Array y = empty({8}, int32, gpu(0));
  reverse(x, y);
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{7, 6, 5, 4, 3, 2, 1, 0}));
  // A transposed raw array is indexed in its own C order; shape() gives its shape.
  ElementwiseKernel flat("raw T m", "T y", "y = m[i] + (T)(m.shape()[1] * 1000)", "flat_k");
  Array m = arange(6, int32, cpu()).reshape({2, 3});
  Array out = empty({6}, int32, gpu(0));
  flat(m.to(gpu(0)).T(), out);
  std::vector<int32_t> expected;
  for (int32_t v : m.T().to_vector<int32_t>()) expected.push_back(v + 2000);
  EXPECT_EQ(out.to_vector<int32_t>(), expected);
  // Only raw arguments: the size comes from the call.
  ElementwiseKernel fill("T v", "raw T out", "out[i] = v * (T)i", "fill_k");
  Array dst = zeros({5}, float32, gpu(0));
  DeviceGuard guard(gpu(0));
  fill.call({2.0f, dst}, 5);
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{0, 2, 4, 6, 8}));
}

TEST(UserKernelGpu, ScalarParametersAndIndexAndSize) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel saxpy("T x, T a, T b", "T y", "y = a * x + b", "saxpy");
  Array y = saxpy(arange(4, float32, gpu(0)), 2.5, -1);
  EXPECT_EQ(y.dtype(), DType::Float32);  // the scalars are weak
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{-1.0f, 1.5f, 4.0f, 6.5f}));
  ElementwiseKernel index("T x", "int64 y", "y = i * 100 + n", "index_k");
  Array z = index(zeros({2, 3}, float32, gpu(0)));
  EXPECT_EQ(z.to_vector<int64_t>(), (std::vector<int64_t>{6, 106, 206, 306, 406, 506}));
}

TEST(UserKernelGpu, Float16ComputesInFloatAndRoundsOnStoreLikeTheCpu) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel k("T x, T y", "T z", "z = x * y + 0.1f", "half_fma");
  Array x = random::normal({1000}, float16, cpu());
  Array y = random::normal({1000}, float16, cpu());
  Array z = k(x.to(gpu(0)), y.to(gpu(0)));
  EXPECT_EQ(z.dtype(), DType::Float16);
  // Reference: float32 arithmetic on the widened values, one rounding to float16 at the end.
  const std::vector<float> xs = x.to_vector<float>(), ys = y.to_vector<float>();
  const std::vector<float> got = z.to_vector<float>();
  for (size_t k2 = 0; k2 < xs.size(); ++k2) {
    const float expected = static_cast<float>(Half(xs[k2] * ys[k2] + 0.1f));
    // The GPU may contract x*y+0.1f into one fma (NVRTC's default), which can differ by one float16 ulp.
    EXPECT_NEAR(got[k2], expected, std::fabs(expected) * std::ldexp(1.0, -10) + 1e-7) << k2;
  }
}

TEST(UserKernelGpu, RunsOnTheArraysDeviceNotTheCurrentOne) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel plus_one("int32 x", "int32 y", "y = x + 1", "plus_one");
  const int last = num_gpus() - 1;
  Array x = arange(4, int32, gpu(last));
  DeviceGuard guard(last == 0 ? cpu() : gpu(0));  // the current device is another one
  Array y = plus_one(x);
  EXPECT_EQ(y.device(), gpu(last));
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
  if (num_gpus() >= 2)
    expect_error<DeviceError>([&] { plus_one(arange(4, int32, gpu(0)), zeros({4}, int32, gpu(1))); },
                              {"plus_one", "different devices", "cuda:0", "cuda:1"});
}

TEST(UserKernelGpu, SecondCallCompilesNothing) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel k("T x", "T y", "y = x * x + 3", "cache_probe_k");
  Array x = arange(100, float32, gpu(0));
  k(x);  // compiles (or loads from disk) once
  const CacheStats before = cache_stats();
  Array y = k(x);
  const CacheStats after = cache_stats();
  EXPECT_EQ(after.nvrtc_compiles, before.nvrtc_compiles);
  EXPECT_EQ(after.memory_hits, before.memory_hits);  // found in the kernel's own variant cache
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  EXPECT_FLOAT_EQ(y.to_vector<float>()[7], 52.0f);
  // Another dtype is another variant: one more load.
  k(arange(10, float64, gpu(0)));
  EXPECT_GT(cache_stats().nvrtc_compiles + cache_stats().disk_hits + cache_stats().memory_hits,
            after.nvrtc_compiles + after.disk_hits + after.memory_hits);
}

TEST(UserKernelGpu, OperationThatDoesNotCompileThrowsCompileError) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel bad("int32 x", "int32 y", "y = x + undefined_thing", "bad_kernel");
  expect_error<CompileError>([&] { bad(arange(3, int32, gpu(0))); },
                             {"bad_kernel", "undefined_thing", "| y = x + undefined_thing"});
}

TEST(UserKernelGpu, UserL2NormMatchesLinalgNorm) {
  KILN_REQUIRE_GPU();
  ReductionKernel l2("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
  for (int64_t n : {int64_t{7}, int64_t{1000}, int64_t{1} << 22}) {
    Array xc = random::normal({n}, float32, cpu());
    Array got = l2(xc.to(gpu(0)));
    EXPECT_EQ(got.ndim(), 0);
    const double ref = linalg::norm(xc.astype(float64)).item<double>();
    EXPECT_NEAR(got.item<float>(), ref, ref * 1e-5) << n;
    EXPECT_NEAR(got.item<float>(), linalg::norm(xc.to(gpu(0))).item<float>(), ref * 1e-5) << n;
  }
  // Per row and per column, keepdims, against the CPU's norm.
  Array m = random::normal({300, 500}, float32, cpu());
  Array mg = m.to(gpu(0));
  for (int axis : {0, 1})
    for (bool keepdims : {false, true}) {
      Array got = l2(mg, axis, keepdims);
      Array ref = linalg::norm(m.astype(float64), axis, keepdims);
      ASSERT_EQ(got.shape(), ref.shape());
      const std::vector<float> g = got.to_vector<float>();
      const std::vector<double> r = ref.to_vector<double>();
      for (size_t k = 0; k < g.size(); ++k) EXPECT_NEAR(g[k], r[k], r[k] * 1e-5) << axis << " " << k;
    }
}

TEST(UserKernelGpu, UserMaxMatchesBuiltinMax) {
  KILN_REQUIRE_GPU();
  ReductionKernel mx("T x", "T y", "x", "max(a, b)", "y = a", "", "user_max");  // no identity
  ReductionKernel mx_int("T x", "T y", "x", "a > b ? a : b", "y = a", "(T)(-2147483647 - 1)", "user_max_i32");
  Array f = random::normal({37, 41, 5}, float32, cpu()) - 10.0f;  // all negative: an identity of 0 would show
  Array fg = f.to(gpu(0));
  for (Axes axes : {Axes(), Axes(0), Axes(1), Axes(2), Axes({0, 2}), Axes({-1, -2})}) {
    EXPECT_EQ(mx(fg, axes).to_vector<float>(), max(f, axes).to_vector<float>());
    EXPECT_EQ(mx(fg, axes, true).to_vector<float>(), max(f, axes, true).to_vector<float>());
    EXPECT_EQ(mx(fg, axes).to_vector<float>(), max(fg, axes).to_vector<float>());
  }
  Array i = random::randint(-1000000, 1000000, {1 << 20}, int32, cpu());
  EXPECT_EQ(mx_int(i.to(gpu(0))).item<int32_t>(), max(i).item<int32_t>());
  EXPECT_EQ(mx(i.to(gpu(0)).reshape({1024, 1024}).T(), 1).to(cpu()).to_vector<int32_t>(),
            max(i.reshape({1024, 1024}).T(), 1).to_vector<int32_t>());
}

TEST(UserKernelGpu, ReductionsOverAxesAndLayoutsMatchTheCpu) {
  KILN_REQUIRE_GPU();
  ReductionKernel sum_k("T x", "T y", "x", "a + b", "y = a", "0", "user_sum");
  ReductionKernel dot("T x, T w", "float64 y", "(double)x * (double)w", "a + b", "y = a", "0", "user_dot",
                      {.reduce_type = "double"});
  Array x = random::randint(-50, 50, {6, 7, 300}, int64, cpu());
  Array xg = x.to(gpu(0));
  for (Axes axes : {Axes(), Axes(0), Axes(1), Axes(2), Axes({0, 1}), Axes({0, 2}), Axes({1, 2})})
    for (bool keepdims : {false, true}) {
      Array got = sum_k(xg, axes, keepdims);
      Array ref = sum(x, axes, keepdims);
      ASSERT_EQ(got.shape(), ref.shape());
      EXPECT_EQ(got.to_vector<int64_t>(), ref.to_vector<int64_t>());
      // Transposed and reversed inputs.
      Array t = xg.permute({2, 0, 1}).slice(0, {}, {}, -1);
      EXPECT_EQ(sum_k(t, axes, keepdims).to_vector<int64_t>(),
                sum(x.permute({2, 0, 1}).slice(0, {}, {}, -1), axes, keepdims).to_vector<int64_t>());
    }
  // A large column reduction (split over threads, then a second pass) and a broadcast second input.
  Array a = random::normal({20000, 3}, float32, cpu());
  Array w = random::normal({3}, float32, cpu());
  Array got = dot.call({a.to(gpu(0)), w.to(gpu(0))}, 0)[0];
  Array ref = sum(a.astype(float64) * w.astype(float64), 0);
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  ASSERT_EQ(g.size(), 3u);
  for (size_t k = 0; k < 3; ++k) EXPECT_NEAR(g[k], r[k], 1e-9 * (1 + std::fabs(r[k])));
  // An output passed in, and an empty reduction with an identity.
  Array out = full({7}, -1, int64, gpu(0));
  sum_k.call({xg, out}, {0, 2});
  EXPECT_EQ(out.to_vector<int64_t>(), sum(x, {0, 2}).to_vector<int64_t>());
  EXPECT_EQ(sum_k(zeros({3, 0}, int64, gpu(0)), 1).to_vector<int64_t>(), (std::vector<int64_t>{0, 0, 0}));
  // float16 input reduced in float (the reduce type of a float16 output).
  Array h = random::uniform({4096}, 0.0, 1.0, float16, cpu());
  EXPECT_NEAR(sum_k(h.to(gpu(0))).item<float>(), sum(h.astype(float64)).item<double>(), 4096 * 1e-3);
}

TEST(UserKernelGpu, SeveralOutputsScalarsAndRawArraysInReductions) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel two("T x", "T y, int8 z", "y = x * 2; z = (signed char)(x > 2)", "two_outputs");
  std::vector<Array> outs = two.call({arange(5, int32, gpu(0))});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(outs[1].dtype(), DType::Int8);
  EXPECT_EQ(outs[1].to_vector<int8_t>(), (std::vector<int8_t>{0, 0, 0, 1, 1}));
  // A scalar and a raw array in map_expr, two outputs from one reduction, bfloat16 input reduced in float.
  ReductionKernel stats("T x, T s, raw int32 shift", "float32 total, float32 squares", "(float)x * s + shift[0]",
                        "a + b", "total = a; squares = a * a", "0", "scaled_sum", {.reduce_type = "float"});
  Array x = random::uniform({64, 256}, -1.0, 1.0, bfloat16, cpu());
  Array shift = from_data(std::vector<int32_t>{3}, {}, gpu(0));
  std::vector<Array> r = stats.call({x.to(gpu(0)), 0.5, shift}, 1);
  ASSERT_EQ(r.size(), 2u);
  const std::vector<double> ref = sum(x.astype(float64) * 0.5 + 3.0, 1).to_vector<double>();
  const std::vector<float> total = r[0].to_vector<float>(), squares = r[1].to_vector<float>();
  ASSERT_EQ(total.size(), 64u);
  for (size_t k = 0; k < ref.size(); ++k) {
    EXPECT_NEAR(total[k], ref[k], 1e-4 * std::fabs(ref[k]) + 1e-3) << k;
    EXPECT_NEAR(squares[k], total[k] * total[k], 1e-6 * total[k] * total[k]) << k;
  }
}

TEST(UserKernelGpu, Bfloat16OutputsRoundLikeAstype) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel to_bf16("float32 x", "bfloat16 y", "y = x * 3.0f", "to_bf16");
  Array x = random::normal({4096}, float32, cpu());
  Array y = to_bf16(x.to(gpu(0)));
  EXPECT_EQ(y.dtype(), DType::BFloat16);
  EXPECT_EQ(y.to_vector<float>(), (x * 3.0f).astype(bfloat16).to_vector<float>());
}

// The gather and scatter kernels behind take/put/index arrays/masks (src/core/indexing.hpp), for every dtype:

}  // namespace

#endif  // KILN_WITH_CUDA
