// cuDNN's two paths for convolutions (src/cuda/cudnn.cpp): the backend API's cached execution plans (the
// default) and the descriptor API (cudnn_force_descriptor_api, or a problem the backend API has no plan for). Both
// compute every step (forward, input and weight gradients) of a set of problems (groups, depthwise, strides,
// dilation, padding, channels-last, an operand 4 bytes past an aligned address) within each dtype's rounding of
// a float64 CPU reference, and the backend API has a plan for every float32/float16/bfloat16 problem.
#include <gtest/gtest.h>

#ifdef KILN_WITH_CUDA

#include <string>
#include <vector>

#include "cuda/ops.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

struct Problem {
  Shape xs, ws;
  ConvParams params;
};

const std::vector<Problem>& problems() {
  static const std::vector<Problem> all = {
      {{4, 8, 12, 10}, {16, 8, 3, 3}, {.stride = {1, 1}, .padding = {1, 1}}},
      {{2, 8, 9, 11}, {8, 4, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}, .groups = 2}},
      {{2, 16, 7, 7}, {16, 1, 3, 3}, {.padding = {1, 1}, .groups = 16}},      // depthwise
      {{3, 32, 5, 6}, {24, 32, 1, 1}, {}},                                    // 1x1
      {{2, 3, 15, 15}, {8, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}},  // a ResNet stem in small
  };
  return all;
}

Array normal_values(const Shape& s, uint64_t seed) {
  random::seed(seed);
  return random::normal(s, 0.0, 1.0, float64, cpu());
}

/// `a` on the GPU in `t`, as a view 1 element past the start of its storage when `offset` (so 2 or 4 bytes
/// past an aligned address), in channels-last memory when `cl`.
Array on_gpu(const Array& a, DType t, bool cl, bool offset) {
  Array g = a.astype(t).to(gpu(0));
  if (cl) g = to_channels_last(g);
  if (!offset) return g;
  Array flat = zeros({a.size() + 1}, t, gpu(0));
  flat.slice(0, 1, std::nullopt).assign(g.contiguous().flatten());
  Array view = flat.slice(0, 1, std::nullopt).reshape(a.shape());
  return cl ? to_channels_last(view) : view;
}

double relative_error(const Array& got, const Array& want) {
  const double scale = std::max(max(abs(want)).item<double>(), 1e-30);
  return max(abs(got.to(cpu()).astype(float64) - want)).item<double>() / scale;
}

struct Steps {
  Array y, dx, dw;
};

Steps run_steps(const Array& x, const Array& w, const Array& dy, const ConvParams& p) {
  return {conv2d_forward(x, w, p), conv2d_backward_input(dy, w, x.shape(), p),
          conv2d_backward_weight(dy, x, w.shape(), p)};
}

TEST(CudnnGpu, BothPathsComputeEveryStepOfEveryProblem) {
  KILN_REQUIRE_GPU();
  const bool tf32_was = cudnn::allow_tf32();
  cudnn::set_allow_tf32(false);  // float32 in float32: the tolerance below is float32 rounding's
  int k = 0;
  for (const Problem& pr : problems()) {
    const Array x = normal_values(pr.xs, 10 + k), w = normal_values(pr.ws, 20 + k) * 0.3;
    const Array dy64 = normal_values(conv2d_output_shape(pr.xs, pr.ws, pr.params), 30 + k);
    const Steps want = run_steps(x, w, dy64, pr.params);  // float64 on the CPU
    for (DType t : {float32, float64, float16, bfloat16})
      for (bool cl : {false, true})
        for (bool offset : {false, true})
          for (bool descriptor_api : {false, true}) {
            const std::string what = "problem " + std::to_string(k) + " " + std::string(dtype_name(t)) +
                                     (cl ? " channels-last" : "") + (offset ? " offset" : "") +
                                     (descriptor_api ? " descriptor API" : " backend API");
            cuda_impl::cudnn_force_descriptor_api(descriptor_api);
            const cuda_impl::CudnnPlanCounts before = cuda_impl::cudnn_plan_counts(0);
            Steps got;
            try {
              got =
                  run_steps(on_gpu(x, t, cl, offset), on_gpu(w, t, cl, false), on_gpu(dy64, t, cl, offset), pr.params);
            } catch (const Error& e) {
              cuda_impl::cudnn_force_descriptor_api(false);
              ADD_FAILURE() << what << ": " << e.what();
              continue;
            }
            const cuda_impl::CudnnPlanCounts after = cuda_impl::cudnn_plan_counts(0);
            cuda_impl::cudnn_force_descriptor_api(false);
            const double tol = t == float64 ? 1e-10 : t == float32 ? 1e-4 : t == float16 ? 1e-2 : 4e-2;
            EXPECT_LT(relative_error(got.y, want.y), tol) << what << " forward";
            EXPECT_LT(relative_error(got.dx, want.dx), tol) << what << " input gradient";
            EXPECT_LT(relative_error(got.dw, want.dw), tol) << what << " weight gradient";
            if (cl) {
              EXPECT_TRUE(is_channels_last(got.y)) << what;
            }
            if (descriptor_api) {
              EXPECT_EQ(after.plans, before.plans) << what << ": the descriptor API made backend plans";
            } else if (t != float64) {
              EXPECT_EQ(after.without, before.without) << what << ": the backend API had no plan: " << after.refusal;
            }
          }
    ++k;
  }
  cudnn::set_allow_tf32(tf32_was);
}

TEST(CudnnGpu, ARepeatedProblemReusesItsPlanAndBenchmarkingKeepsItsOwn) {
  KILN_REQUIRE_GPU();
  const Array x = normal_values({8, 16, 14, 14}, 1).astype(float32).to(gpu(0));
  const Array w = (normal_values({32, 16, 3, 3}, 2) * 0.2).astype(float32).to(gpu(0));
  const ConvParams p{.padding = {1, 1}};
  const Array first = conv2d_forward(x, w, p);
  const cuda_impl::CudnnPlanCounts once = cuda_impl::cudnn_plan_counts(0);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(allclose(conv2d_forward(x, w, p), first, 0.0, 0.0));
  const cuda_impl::CudnnPlanCounts again = cuda_impl::cudnn_plan_counts(0);
  EXPECT_EQ(again.plans, once.plans) << "a repeated problem built another plan";
  EXPECT_GE(once.plans, 1);
  // The benchmark times the acceptable engines on the operands and keeps the fastest under its own key; its
  // result agrees with the heuristics' plan to TF32 rounding.
  const bool was = cudnn::benchmark();
  cudnn::set_benchmark(true);
  const Array timed = conv2d_forward(x, w, p);
  const cuda_impl::CudnnPlanCounts benchmarked = cuda_impl::cudnn_plan_counts(0);
  cudnn::set_benchmark(was);
  EXPECT_EQ(benchmarked.plans, again.plans + 1)
      << "problems without a plan: " << again.without << " before, " << benchmarked.without << " after the benchmark ("
      << benchmarked.refusal << ")";
  EXPECT_TRUE(allclose(timed, first, 2e-2, 2e-2));
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
