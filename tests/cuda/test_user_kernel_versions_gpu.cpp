// Writes through user kernels count as in-place writes: an ElementwiseKernel or ReductionKernel output passed
// in, and every array passed to a RawKernel launch, move their storage's version on, so a backward that saved
// the overwritten array throws instead of computing a gradient from the new values. GPU tests (user kernels
// run on CUDA devices only); they compile in every preset and skip without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;

/// y = x * w with w requiring grad: the product saves x for w's gradient.
struct Saved {
  Array x, w, y;
  Saved() {
    x = arange(1.0, 4.0, 1.0, float32, gpu(0));
    w = full({3}, 2.0, float32, gpu(0));
    w.set_requires_grad(true);
    y = x * w;
  }
};

TEST(UserKernelVersions, ElementwiseKernelOutputPassedInBumpsTheVersion) {
  KILN_REQUIRE_GPU();
  ElementwiseKernel twice("T a", "T out", "out = a * 2", "version_twice");
  {
    Saved s;
    const Array unrelated = zeros({3}, float32, gpu(0));
    twice(s.x, unrelated);  // x is only read: the backward still works
    sum(s.y).backward();
    EXPECT_EQ(s.w.grad().to_vector<float>(), (std::vector<float>{1, 2, 3}));
  }
  Saved s;
  twice(s.x, s.x);  // x overwritten with 2x
  expect_error<ValueError>([&] { sum(s.y).backward(); }, {"modified in place"});
}

TEST(UserKernelVersions, ReductionKernelOutputPassedInBumpsTheVersion) {
  KILN_REQUIRE_GPU();
  ReductionKernel column_sum("T v", "T out", "v", "a + b", "out = a", "0", "version_column_sum");
  Saved s;
  const Array m = ones({2, 3}, float32, gpu(0));
  column_sum({m, s.x}, Axes{0});  // x becomes (2, 2, 2)
  EXPECT_EQ(s.x.to_vector<float>(), (std::vector<float>{2, 2, 2}));
  expect_error<ValueError>([&] { sum(s.y).backward(); }, {"modified in place"});
}

constexpr const char* kFill = R"(extern "C" __global__ void version_fill(float* p, int n) {
  if (threadIdx.x < n) p[threadIdx.x] = 7.0f;
})";

#ifdef KILN_WITH_CUDA
TEST(UserKernelVersions, TheRawKernelCompilesWithoutAGpu) {
  EXPECT_NE(RawModule::compile_ptx(kFill, {}, 90).find(".entry version_fill"), std::string::npos);
}
#endif

TEST(UserKernelVersions, EveryArrayOfARawKernelLaunchCountsAsWritten) {
  KILN_REQUIRE_GPU();
  const RawModule module(kFill);
  const RawKernel fill = module.function("version_fill");
  Saved s;
  fill.launch({1}, {32}, s.x, int32_t{3});
  EXPECT_EQ(s.x.to_vector<float>(), (std::vector<float>{7, 7, 7}));
  expect_error<ValueError>([&] { sum(s.y).backward(); }, {"modified in place"});
}

}  // namespace
}  // namespace kiln
