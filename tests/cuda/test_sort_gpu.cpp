// sort/argsort on the GPU (src/cuda/sort.cpp): the generated kernels compile for every dtype without a GPU;
// on a GPU, results equal the host's stable sort (itself NumPy-golden tested in tests/core) for every dtype, NaN
// and signed zeros, ties (stability), rows shorter and longer than one block's chunk (the merge passes), a long
// row, other axes; and nothing goes through the host.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/compiler.hpp"
#include "cuda/ops.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

TEST(SortCodegen, KernelsCompileForEveryDtype) {
  for (int t = 0; t < kNumDTypes; ++t) {
    const DType d = static_cast<DType>(t);
    if (is_complex(d)) continue;  // sort refuses complex (docs/numpy-users.md)
    const std::string ptx = cuda_impl::compile_ptx(cuda_impl::sort_source(d), "sort_test", 90);
    for (const char* kernel : {"sort_block", "sort_merge", "sort_gather"})
      EXPECT_NE(ptx.find(std::string(".entry ") + kernel + "("), std::string::npos) << kernel << " " << dtype_name(d);
  }
}

/// Values with many ties, both zeros and (for floats) NaNs, as `dtype`.
Array tricky_values(const Shape& shape, DType dtype, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(-20, 20);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) {
    const int r = pick(rng);
    x = r == 20 && is_floating(dtype) ? std::nan("") : r == -20 && is_floating(dtype) ? -0.0 : r / 2.0;
    if (dtype == uint8 || dtype == bool_) x = std::fabs(x);
    if (!is_floating(dtype)) x = std::floor(x);
  }
  return from_data(v, shape).astype(dtype);
}

/// Expects the GPU's sort and argsort of `x` (a CPU array) along `axis` to equal the host's, bit for bit.
void expect_like_host(const Array& x, int64_t axis, const std::string& what) {
  const Array g = x.to(gpu(0));
  const Array want_idx = argsort(x, axis), want = sort(x, axis);
  Array got_idx, got;
  SyncCounters counted;
  {
    SyncDebugGuard guard(SyncDebugMode::off);
    got_idx = argsort(g, axis);
    got = sort(g, axis);
    counted = guard.counters();
  }
  EXPECT_EQ(counted.d2h_copies + counted.h2d_copies, 0u) << what << ": " << counted.str();
  ASSERT_EQ(got_idx.device(), gpu(0)) << what;
  EXPECT_EQ(got_idx.dtype(), int64) << what;
  EXPECT_EQ(got.dtype(), x.dtype()) << what;
  EXPECT_EQ(got_idx.to_vector<int64_t>(), want_idx.to_vector<int64_t>()) << what;
  // Values through float64 (NaN != NaN): compare bits of the sign and NaN-ness too.
  const std::vector<double> a = got.to_vector<double>(), b = want.to_vector<double>();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    const bool same = (std::isnan(a[i]) && std::isnan(b[i])) || (a[i] == b[i] && std::signbit(a[i]) == std::signbit(b[i]));
    if (!same) {
      ADD_FAILURE() << what << ": element " << i << " gpu " << a[i] << " host " << b[i];
      return;
    }
  }
}

TEST(SortGpu, EveryDtypeMatchesTheHostsStableSort) {
  KILN_REQUIRE_GPU();
  for (int t = 0; t < kNumDTypes; ++t) {
    const DType d = static_cast<DType>(t);
    if (is_complex(d)) continue;  // sort refuses complex (docs/numpy-users.md)
    expect_like_host(tricky_values({6, 333}, d, 7 + t), -1, std::string("rows of 333, ") + std::string(dtype_name(d)));
  }
}

TEST(SortGpu, LengthsAroundTheBlockChunkAndLongRows) {
  KILN_REQUIRE_GPU();
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{2047}, int64_t{2048}, int64_t{2049}, int64_t{5000},
                    int64_t{8192}, int64_t{100003}})
    expect_like_host(tricky_values({3, n}, float32, 11 + n), 1, "float32 rows of " + std::to_string(n));
  expect_like_host(tricky_values({1000003}, float64, 5), 0, "one float64 row of 1000003");
  expect_like_host(tricky_values({1 << 20}, int32, 6), 0, "one int32 row of 2^20");
  // int64 beyond float64's 53 bits: order by the integer, not by a float.
  const Array big = from_data(std::vector<int64_t>{(int64_t{1} << 60) + 1, int64_t{1} << 60, -(int64_t{1} << 62),
                                                   std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()});
  expect_like_host(big, 0, "int64 extremes");
}

TEST(SortGpu, OtherAxesAndViews) {
  KILN_REQUIRE_GPU();
  const Array x = tricky_values({5, 7, 300}, float16, 3);
  for (int64_t axis : {0, 1, 2, -1}) expect_like_host(x, axis, "float16 (5, 7, 300) axis " + std::to_string(axis));
  expect_like_host(tricky_values({400, 9}, bfloat16, 4).T(), 1, "a transposed bfloat16 view");
  // permutation on a GPU: the same permutation as on the CPU for the same seed (argsort of the same keys).
  random::seed(123);
  const Array on_gpu = random::permutation(10000, gpu(0));
  random::seed(123);
  const Array on_cpu = random::permutation(10000, cpu());
  EXPECT_EQ(on_gpu.to_vector<int64_t>(), on_cpu.to_vector<int64_t>());
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
