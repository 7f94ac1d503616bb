// kiln's channels-last batch-normalisation kernels (src/cuda/batch_norm.cpp): their source compiles for every
// input and statistics dtype (no GPU needed), and on a GPU they give the CPU's float64 results for the training
// forward (statistics, running averages), its backward and evaluation, for wide and narrow channel counts and an
// operand one element off its allocation's start.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <string>

#include "cuda/compiler.hpp"
#include "cuda/ops.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

TEST(BatchNormCodegen, KernelsCompileForEveryInputAndStatisticsDtype) {
  for (DType in : {float32, float64, float16, bfloat16})
    for (DType stats : {float32, float64}) {
      const std::string ptx = cuda_impl::compile_ptx(cuda_impl::batch_norm_source(in, stats), "bn_test", 90);
      for (const char* kernel : {"bn_partials", "bn_finalize", "bn_apply"})
        EXPECT_NE(ptx.find(std::string(".entry ") + kernel + "("), std::string::npos)
            << kernel << " " << dtype_name(in) << " " << dtype_name(stats);
    }
}

Array normal_values(const Shape& s, uint64_t seed) {
  random::seed(seed);
  return random::normal(s, 0.0, 1.0, float64, cpu());
}

/// `a` (float64, CPU) as `t` on the GPU in channels-last memory; one element past an aligned start when `offset`.
Array channels_last_on_gpu(const Array& a, DType t, bool offset) {
  const Array g = to_channels_last(a.astype(t).to(gpu(0)));
  if (!offset) return g;
  Array flat = zeros({a.size() + 1}, t, gpu(0));
  // (N, H, W, C) memory order, one element in
  flat.slice(0, 1, std::nullopt).assign(g.permute({0, 2, 3, 1}).contiguous().flatten());
  const Shape& s = a.shape();
  return flat.slice(0, 1, std::nullopt).reshape({s[0], s[2], s[3], s[1]}).permute({0, 3, 1, 2});
}

double relative_error(const Array& got, const Array& want) {
  const double scale = std::max(max(abs(want)).item<double>(), 1e-30);
  return max(abs(got.to(cpu()).astype(float64) - want)).item<double>() / scale;
}

TEST(BatchNormGpu, ChannelsLastKernelsGiveTheCpusResults) {
  KILN_REQUIRE_GPU();
  struct Case {
    int64_t c;
    bool offset;
  };
  for (const Case& k : {Case{64, false}, Case{6, false}, Case{64, true}})
    for (DType t : {float32, bfloat16}) {
      const std::string what = "C " + std::to_string(k.c) + (k.offset ? " offset " : " ") + std::string(dtype_name(t));
      const Shape s{4, k.c, 5, 3};
      const Array x64 = normal_values(s, 1) * 2.0 + 0.5, dy64 = normal_values(s, 2);
      const Array w = normal_values({k.c}, 3).astype(float32), b = normal_values({k.c}, 4).astype(float32);
      // The reference: the same rounded inputs in float64 on the CPU
      const Array xr = x64.astype(t).astype(float64), dyr = dy64.astype(t).astype(float64);
      Array rm_ref = zeros({k.c}, float64, cpu()), rv_ref = ones({k.c}, float64, cpu());
      const BatchNormOutput want =
          batch_norm_forward(xr, w.astype(float64), b.astype(float64), rm_ref, rv_ref, true, 0.1, 1e-5);
      const BatchNormGrads want_g = batch_norm_backward(dyr, xr, w.astype(float64), want.mean, want.invstd, 1e-5);

      const Array x = channels_last_on_gpu(x64, t, k.offset), dy = channels_last_on_gpu(dy64, t, k.offset);
      ASSERT_TRUE(is_channels_last(x)) << what;
      Array rm = zeros({k.c}, float32, gpu(0)), rv = ones({k.c}, float32, gpu(0));
      const BatchNormOutput got = batch_norm_forward(x, w.to(gpu(0)), b.to(gpu(0)), rm, rv, true, 0.1, 1e-5);
      const BatchNormGrads got_g = batch_norm_backward(dy, x, w.to(gpu(0)), got.mean, got.invstd, 1e-5);
      const double tol = t == float32 ? 1e-5 : 1e-2;  // the output's rounding
      EXPECT_TRUE(is_channels_last(got.y)) << what;
      EXPECT_LT(relative_error(got.y, want.y), tol) << what << " y";
      EXPECT_LT(relative_error(got.mean, want.mean), 1e-6) << what << " mean";
      EXPECT_LT(relative_error(rm, rm_ref), 1e-6) << what << " running mean";
      EXPECT_LT(relative_error(rv, rv_ref), 1e-6) << what << " running variance";
      EXPECT_LT(relative_error(got_g.input, want_g.input), tol) << what << " input gradient";
      EXPECT_LT(relative_error(got_g.weight, want_g.weight), 1e-5) << what << " weight gradient";
      EXPECT_LT(relative_error(got_g.bias, want_g.bias), 1e-5) << what << " bias gradient";
      // evaluation with the running statistics
      const Array want_eval =
          batch_norm_forward(xr, w.astype(float64), b.astype(float64), rm_ref, rv_ref, false, 0.1, 1e-5).y;
      const Array got_eval = batch_norm_forward(x, w.to(gpu(0)), b.to(gpu(0)), rm, rv, false, 0.1, 1e-5).y;
      EXPECT_LT(relative_error(got_eval, want_eval), tol) << what << " evaluation";
    }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
