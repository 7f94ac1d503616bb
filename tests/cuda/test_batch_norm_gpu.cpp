// kiln's batch-normalisation kernels (src/cuda/batch_norm.cpp): their source compiles for every input and
// statistics dtype (no GPU needed), and on a GPU they give the CPU's float64 results for the training forward
// (statistics, running averages), its backward and evaluation, channels-last and NCHW, for wide and narrow channel
// counts, planes smaller and larger than a block and an operand one element off its allocation's start; with a
// fused ReLU they give relu() of the plain result and the plain backward of relu's gradient, bit for bit.
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
      for (const char* kernel : {"bn_partials", "bn_partials_nchw", "bn_partials_nchw4", "bn_finalize", "bn_apply",
                                 "bn_apply_nchw", "bn_apply_nchw4"})
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

/// `a` (float64, CPU) as `t` on the GPU, NCHW-contiguous; one element past an aligned start when `offset`.
Array nchw_on_gpu(const Array& a, DType t, bool offset) {
  const Array g = a.astype(t).to(gpu(0));
  if (!offset) return g;
  Array flat = zeros({a.size() + 1}, t, gpu(0));
  flat.slice(0, 1, std::nullopt).assign(g.flatten());
  return flat.slice(0, 1, std::nullopt).reshape(a.shape());
}

TEST(BatchNormGpu, KernelsGiveTheCpusResults) {
  KILN_REQUIRE_GPU();
  struct Case {
    Shape s;
    bool offset;
  };
  // Planes of 15, 49 (7x7), 24 and 400 (more than a block's 256 threads) elements; 64 and 6 channels. NCHW
  // planes of a multiple of 4 elements on aligned operands take the kernels' 4-element loads (24, 400 without
  // the offset), the others single elements.
  const std::vector<Case> cases = {{{4, 64, 5, 3}, false}, {{4, 6, 5, 3}, false},  {{4, 64, 5, 3}, true},
                                   {{5, 9, 7, 7}, false},  {{3, 2, 20, 20}, true}, {{3, 2, 20, 20}, false},
                                   {{2, 5, 4, 6}, false}};
  for (const Case& k : cases)
    for (bool cl : {true, false})
      for (DType t : {float32, bfloat16}) {
        const int64_t c = k.s[1];
        const std::string what = shape_str(k.s) + (cl ? " channels-last" : " NCHW") + (k.offset ? " offset " : " ") +
                                 std::string(dtype_name(t));
        const Array x64 = normal_values(k.s, 1) * 2.0 + 0.5, dy64 = normal_values(k.s, 2);
        const Array w = normal_values({c}, 3).astype(float32), b = normal_values({c}, 4).astype(float32);
        // The reference: the same rounded inputs in float64 on the CPU
        const Array xr = x64.astype(t).astype(float64), dyr = dy64.astype(t).astype(float64);
        Array rm_ref = zeros({c}, float64, cpu()), rv_ref = ones({c}, float64, cpu());
        const BatchNormOutput want =
            batch_norm_forward(xr, w.astype(float64), b.astype(float64), rm_ref, rv_ref, true, 0.1, 1e-5);
        const BatchNormGrads want_g = batch_norm_backward(dyr, xr, w.astype(float64), want.mean, want.invstd, 1e-5);

        const Array x = cl ? channels_last_on_gpu(x64, t, k.offset) : nchw_on_gpu(x64, t, k.offset);
        const Array dy = cl ? channels_last_on_gpu(dy64, t, k.offset) : nchw_on_gpu(dy64, t, k.offset);
        ASSERT_EQ(is_channels_last(x) && !x.is_contiguous(), cl) << what;
        const Array wg = w.to(gpu(0)), bg = b.to(gpu(0));
        Array rm = zeros({c}, float32, gpu(0)), rv = ones({c}, float32, gpu(0));
        const BatchNormOutput got = batch_norm_forward(x, wg, bg, rm, rv, true, 0.1, 1e-5);
        const BatchNormGrads got_g = batch_norm_backward(dy, x, wg, got.mean, got.invstd, 1e-5);
        const double tol = t == float32 ? 1e-5 : 1e-2;  // the output's rounding
        EXPECT_EQ(is_channels_last(got.y) && !got.y.is_contiguous(), cl) << what;
        EXPECT_LT(relative_error(got.y, want.y), tol) << what << " y";
        EXPECT_LT(relative_error(got.mean, want.mean), 1e-6) << what << " mean";
        EXPECT_LT(relative_error(got.invstd, want.invstd), 1e-6) << what << " invstd";
        EXPECT_LT(relative_error(rm, rm_ref), 1e-6) << what << " running mean";
        EXPECT_LT(relative_error(rv, rv_ref), 1e-6) << what << " running variance";
        EXPECT_LT(relative_error(got_g.input, want_g.input), tol) << what << " input gradient";
        EXPECT_LT(relative_error(got_g.weight, want_g.weight), 1e-5) << what << " weight gradient";
        EXPECT_LT(relative_error(got_g.bias, want_g.bias), 1e-5) << what << " bias gradient";
        // evaluation with the running statistics
        const Array want_eval =
            batch_norm_forward(xr, w.astype(float64), b.astype(float64), rm_ref, rv_ref, false, 0.1, 1e-5).y;
        const Array got_eval = batch_norm_forward(x, wg, bg, rm, rv, false, 0.1, 1e-5).y;
        EXPECT_LT(relative_error(got_eval, want_eval), tol) << what << " evaluation";

        // The fused ReLU: relu() of the plain result, and the plain backward of relu's gradient, bit for bit.
        Array rm2 = zeros({c}, float32, gpu(0)), rv2 = ones({c}, float32, gpu(0));
        const BatchNormOutput fused = batch_norm_forward(x, wg, bg, rm2, rv2, true, 0.1, 1e-5, /*relu=*/true);
        ASSERT_TRUE(fused.scale_shift.defined()) << what << ": the kernels keep the ReLU's (scale, shift)";
        EXPECT_TRUE(array_equal(fused.y, relu(got.y))) << what << " fused forward";
        EXPECT_TRUE(array_equal(rm2, rm) && array_equal(rv2, rv)) << what << " fused running statistics";
        const BatchNormGrads fused_g =
            batch_norm_relu_backward(dy, x, fused.y, wg, fused.mean, fused.invstd, fused.scale_shift, 1e-5);
        const BatchNormGrads plain_g =
            batch_norm_backward(relu_backward(fused.y, dy), x, wg, fused.mean, fused.invstd, 1e-5);
        EXPECT_TRUE(array_equal(fused_g.input, plain_g.input)) << what << " fused input gradient";
        EXPECT_TRUE(array_equal(fused_g.weight, plain_g.weight)) << what << " fused weight gradient";
        EXPECT_TRUE(array_equal(fused_g.bias, plain_g.bias)) << what << " fused bias gradient";
        // ... and the float64 reference's (a ReLU's mask on it)
        const Array mask_ref = relu_backward(relu(want.y), dyr);
        const BatchNormGrads want_rg =
            batch_norm_backward(mask_ref, xr, w.astype(float64), want.mean, want.invstd, 1e-5);
        EXPECT_LT(relative_error(fused_g.input, want_rg.input), 10 * tol) << what << " fused vs float64";
        const Array fused_eval = batch_norm_forward(x, wg, bg, rm, rv, false, 0.1, 1e-5, /*relu=*/true).y;
        EXPECT_TRUE(array_equal(fused_eval, relu(got_eval))) << what << " fused evaluation";
      }
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
