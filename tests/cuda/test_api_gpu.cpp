// The NumPy-user API on a GPU (issue 11): every golden case of
// tests/golden/api_golden.py on gpu(0) (gathers and scatters through the
// generated NVRTC kernels, masks, sort/argsort on the device, linalg with cuSOLVER),
// assignment through temporary views, device errors. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "api_golden_checks.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

TEST(ApiGpu, numpy_golden_cases_on_the_gpu) {
  KILN_REQUIRE_GPU();
  kiln_test::run_api_golden(gpu(0));
}

TEST(ApiGpu, every_dtype_gathers_and_scatters) {
  KILN_REQUIRE_GPU();
  for (int t = 0; t < kNumDTypes; ++t) {
    const DType d = static_cast<DType>(t);
    const Array x = arange(10, int64, gpu(0)).astype(d).reshape(2, 5);
    const Array idx = from_data({int64_t{4}, int64_t{0}, int64_t{-1}}, {3}, gpu(0));
    const std::vector<double> want =
        d == bool_ ? std::vector<double>{1, 0, 1, 1, 1, 1} : std::vector<double>{4, 0, 4, 9, 5, 9};
    EXPECT_EQ(take(x, idx, 1).to_vector<double>(), want) << dtype_name(d);
    Array y = zeros({2, 5}, d, gpu(0));
    y.index_put({Slice(), idx}, 1);
    EXPECT_EQ(y.to_vector<double>(), (std::vector<double>{1, 0, 0, 0, 1, 1, 0, 0, 0, 1})) << dtype_name(d);
  }
}

// take's gradient along an axis (an embedding's backward) sums each row's contributions on the GPU in the order the
// CPU does: bit for bit the CPU's, and the same on every run (no atomics), for rows hit many times, on the middle
// axis of a 3-d array, float32 and float64.
TEST(ApiGpu, take_gradient_along_an_axis_equals_the_cpus_bits) {
  KILN_REQUIRE_GPU();
  for (DType d : {float32, float64}) {
    random::seed(11);
    const Array x_cpu = random::normal({3, 40, 33}, 0.0, 1.0, d, cpu());
    const Array idx_cpu = random::randint(0, 40, {7, 61}, int64, cpu());  // 427 draws of 40 rows: ~11 a row
    const Array weights_cpu = random::normal({3, 7, 61, 33}, 0.0, 1.0, d, cpu());
    auto gradient = [&](Device dev) {
      Array x = x_cpu.to(dev).detach();
      x.set_requires_grad(true);
      (take(x, idx_cpu.to(dev), 1) * weights_cpu.to(dev)).sum().backward();
      return x.grad().to(cpu());
    };
    const Array want = gradient(cpu());
    const Array got = gradient(gpu(0));
    EXPECT_TRUE(array_equal(got, want)) << dtype_name(d) << ": the GPU's sums differ from the CPU's bits";
    EXPECT_TRUE(array_equal(gradient(gpu(0)), got)) << dtype_name(d) << ": two GPU runs differ";
    // The values: each row's sum of the weights it was taken with, by hand in double.
    const std::vector<int64_t> idx = idx_cpu.to_vector<int64_t>();
    const std::vector<double> w = weights_cpu.to_vector<double>();
    std::vector<double> sums(3 * 40 * 33, 0.0);
    for (int64_t o = 0; o < 3; ++o)
      for (int64_t k = 0; k < 7 * 61; ++k)
        for (int64_t c = 0; c < 33; ++c) sums[(o * 40 + idx[k]) * 33 + c] += w[(o * 7 * 61 + k) * 33 + c];
    EXPECT_TRUE(allclose(got.astype(float64), from_data(sums, Shape{3, 40, 33}, cpu()), 1e-5, 1e-5)) << dtype_name(d);
  }
}

TEST(ApiGpu, assignment_to_a_temporary_view_writes_through) {
  KILN_REQUIRE_GPU();
  Array x = zeros({2, 3}, float32, gpu(0));
  x[0] = ones({3}, float32, gpu(0));
  x[1] = 2.0;
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(x.to("cpu").device(), cpu());
}

TEST(ApiGpu, index_arrays_on_another_device_name_both) {
  KILN_REQUIRE_GPU();
  const Array x = ones({3}, float32, gpu(0));
  kiln_test::expect_error<DeviceError>([&] { (void)take(x, from_data({int64_t{0}})); },
                                       {"take", "cuda:0", "cpu", ".to(cuda:0)"});
  kiln_test::expect_error<DeviceError>(
      [&] {
        (void)linalg::solve(ones({2, 2}, float32, gpu(0)), ones({2}));
      },
      {"linalg::solve", "cuda:0", "cpu"});
}

/// max |x - y| / max |y| over the elements (float64 copies on the host).
double relative_difference(const Array& x, const Array& y) {
  const std::vector<double> a = x.to_vector<double>(), b = y.to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    scale = std::max(scale, std::fabs(b[i]));
  }
  return diff / scale;
}

TEST(ApiGpu, solve_runs_on_the_gpu_with_cusolver_and_matches_the_cpu) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const Array a = add(random::normal({64, 64}, float64, cpu()), multiply(eye(64, {}, 0, float64), 8.0));
  const Array b = random::normal({64, 5}, float64, cpu());
  const Array want = linalg::solve(a, b);  // LAPACK on the host (NumPy-golden tested in test_api)
  const Array ag = a.to(d), bg = b.to(d);
  Array x;
  SyncCounters counted;
  {
    SyncDebugGuard guard(SyncDebugMode::off);
    x = linalg::solve(ag, bg);
    counted = guard.counters();
  }
  // On the device: the only copy is cuSOLVER's two int32 infos; no operand goes to the host and back.
  EXPECT_EQ(counted.h2d_copies, 0u) << counted.str();
  EXPECT_EQ(counted.d2h_copies, 1u) << counted.str();
  EXPECT_EQ(counted.d2h_bytes, 8u) << counted.str();
  EXPECT_EQ(x.device(), d);
  EXPECT_LT(relative_difference(x, want), 1e-12);
  const Array xv = linalg::solve(ag, bg.index({Slice(), 0}));  // a vector b gives a vector
  EXPECT_EQ(xv.shape(), Shape{64});
  EXPECT_LT(relative_difference(xv, want.index({Slice(), 0})), 1e-12);
  const Array x32 = linalg::solve(ag.astype(float32), bg.astype(float32));  // float32 in, float32 out
  EXPECT_EQ(x32.dtype(), float32);
  EXPECT_LT(relative_difference(x32, want), 1e-5);
  // A singular matrix: LinAlgError as on the CPU.
  kiln_test::expect_error<LinAlgError>(
      [&] { (void)linalg::solve(from_data({1.0, 2.0, 2.0, 4.0}, {2, 2}, d), from_data({1.0, 2.0}, {2}, d)); },
      {"linalg::solve", "singular", "lstsq"});
  // In a stack: the matrix is named by its place (a solver call per matrix).
  const Array stacked = stack({eye(2, {}, 0, float64, d), from_data({1.0, 2.0, 2.0, 4.0}, {2, 2}, d)});
  kiln_test::expect_error<LinAlgError>([&] { (void)linalg::solve(stacked, from_data({1.0, 2.0}, {2}, d)); },
                                       {"linalg::solve", "matrix 1 of the stack", "singular"});
}

TEST(ApiGpu, lstsq_runs_on_the_gpu_with_the_svd_and_matches_the_cpu) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  // Tall (residuals), wide (minimum-norm solution), rank-deficient (a repeated column), vector b.
  const Array tall = random::normal({40, 6}, float64, cpu()), wide = random::normal({5, 12}, float64, cpu());
  const Array base = random::normal({20, 3}, float64, cpu());
  const Array deficient = concatenate({base, base.index({Slice(), Slice(0, 1)})}, 1);
  for (const Array& a : {tall, wide, deficient}) {
    const Array b = random::normal({a.shape(0), 2}, float64, cpu());
    const linalg::LstsqResult want = linalg::lstsq(a, b);
    SyncCounters counted;
    linalg::LstsqResult got;
    {
      SyncDebugGuard guard(SyncDebugMode::off);
      got = linalg::lstsq(a.to(d), b.to(d));
      counted = guard.counters();
    }
    const std::string what = "a " + shape_str(a.shape());
    EXPECT_EQ(counted.d2h_copies, 2u) << what << ": the SVD's info and the singular values, " << counted.str();
    EXPECT_EQ(counted.h2d_copies, 3u) << what << ": the operands and the cut-off scale, " << counted.str();
    EXPECT_EQ(got.rank, want.rank) << what;
    EXPECT_EQ(got.solution.device(), d) << what;
    EXPECT_LT(relative_difference(got.solution, want.solution), 1e-10) << what;
    EXPECT_LT(relative_difference(got.singular_values, want.singular_values), 1e-12) << what;
    ASSERT_EQ(got.residuals.shape(), want.residuals.shape()) << what;
    if (want.residuals.size() > 0) {
      EXPECT_LT(relative_difference(got.residuals, want.residuals), 1e-9) << what;
    }
    const linalg::LstsqResult vec = linalg::lstsq(a.to(d), b.to(d).index({Slice(), 1}));
    EXPECT_EQ(vec.solution.shape(), Shape{a.shape(1)}) << what;
    EXPECT_LT(relative_difference(vec.solution, want.solution.index({Slice(), 1})), 1e-10) << what;
  }
  EXPECT_EQ(linalg::lstsq(deficient.to(d), random::normal({20}, float64, d)).rank, 3);
}

}  // namespace
}  // namespace kiln
