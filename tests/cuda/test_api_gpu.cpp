// The NumPy-user API on a GPU (issue 11): every golden case of
// tests/golden/api_golden.py on gpu(0) (gathers and scatters through the
// generated NVRTC kernels, masks, sort/argsort and linalg through the host),
// assignment through temporary views, device errors. Skips without a GPU.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace kiln
