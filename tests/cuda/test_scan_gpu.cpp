// cumsum/cumprod on the GPU (src/cuda/scan.cpp): the generated kernels compile for every (op, dtype) without a
// GPU; on a GPU, results equal the CPU's (itself NumPy-golden tested in tests/core: sequential, in float64 or
// wrapping int64) on every path -- a thread per line (strided or short lines), a block per line, and long
// lines split into segments with carried totals -- for every dtype, with no host round trip and at most two
// kernels.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/op_table.hpp"
#include "cuda/compiler.hpp"
#include "cuda/ops.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using detail::ReduceOp;

TEST(ScanCodegen, KernelsCompileForEveryOpAndDtype) {
  for (ReduceOp op : {ReduceOp::CumSum, ReduceOp::CumProd})
    for (int t = 0; t < kNumDTypes; ++t) {
      const DType in = static_cast<DType>(t);
      if (is_complex(in)) continue;  // the scans refuse complex (docs/numpy-users.md)
      const DType out = detail::reduce_result_dtype(op, in);
      const std::string ptx = cuda_impl::compile_ptx(cuda_impl::scan_source(op, in, out), "scan_test", 90);
      for (const char* kernel : {"scan_columns", "scan_totals", "scan_segments"})
        EXPECT_NE(ptx.find(std::string(".entry ") + kernel + "("), std::string::npos)
            << kernel << " " << detail::reduce_op_name(op) << " " << dtype_name(in);
    }
  EXPECT_THROW((void)cuda_impl::scan_source(ReduceOp::Sum, DType::Float32, DType::Float32), ValueError);
}

/// Values for `op`: small integers for sums (exact in every dtype), values near 1 for products.
Array scan_values(ReduceOp op, const Shape& shape, DType t, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> pick(-8, 8);
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (double& x : v) {
    const int r = pick(rng);
    if (op == ReduceOp::CumProd)
      x = is_floating(t) ? 1.0 + r / 1024.0 : (r % 3 == 0 ? -1 : 1);
    else
      x = is_floating(t) ? r / 4.0 : r;
    if (t == uint8 || t == bool_) x = std::fabs(x) > 4 ? 1 : 0;
  }
  return from_data(v).reshape(shape).astype(t);
}

Array run_scan(ReduceOp op, const Array& x, std::optional<int64_t> axis) {
  return op == ReduceOp::CumSum ? cumsum(x, axis) : cumprod(x, axis);
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

/// Expects the GPU's scan of `x` (a CPU array) to equal the CPU's: integers exactly, floats within the
/// float64 accumulation's reordering (64 float64 epsilons of the running magnitude) plus one ulp of the
/// output dtype.
void expect_like_cpu(ReduceOp op, const Array& x, std::optional<int64_t> axis, const std::string& what) {
  const Array want = run_scan(op, x, axis);
  const Array on_gpu = x.to(gpu(0));
  synchronize(gpu(0));
  Array got;
  SyncCounters counted;
  {
    SyncDebugGuard guard(SyncDebugMode::off);
    got = run_scan(op, on_gpu, axis);
    counted = guard.counters();
  }
  EXPECT_EQ(counted.d2h_copies + counted.h2d_copies, 0u) << what << ": " << counted.str();
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> c = want.to_vector<double>(), g = got.to(kiln::cpu()).to_vector<double>();
  if (!is_floating(want.dtype())) {
    const std::vector<int64_t> ci = want.to_vector<int64_t>(), gi = got.to(kiln::cpu()).to_vector<int64_t>();
    for (size_t i = 0; i < ci.size(); ++i)
      if (ci[i] != gi[i]) {
        ADD_FAILURE() << what << ": element " << i << " cpu " << ci[i] << " gpu " << gi[i];
        return;
      }
    return;
  }
  const std::vector<double> magnitude = cumsum(abs(x.astype(float64)), axis).to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    const double scale = op == ReduceOp::CumSum ? magnitude[i] : std::fabs(c[i]) * 64;
    const double tolerance = 64 * kiln_test::epsilon(float64) * scale + kiln_test::epsilon(want.dtype()) * std::fabs(c[i]);
    if (!(std::fabs(c[i] - g[i]) <= tolerance)) {
      ADD_FAILURE() << what << ": element " << i << " cpu " << c[i] << " gpu " << g[i] << " tolerance " << tolerance;
      return;
    }
  }
}

TEST(ScanGpu, EveryDtypeAndPathMatchesTheCpu) {
  KILN_REQUIRE_GPU();
  struct Case {
    Shape shape;
    std::optional<int64_t> axis;
    const char* path;
  };
  const std::vector<Case> cases = {
      {{300, 200}, 1, "short contiguous lines: a thread per line"},
      {{500, 300}, 0, "strided lines (inner 300, moved last: few lines)"},
      {{70000, 3}, 0, "strided lines, many: a thread per line"},
      {{40, 5000}, 1, "long contiguous lines: a block per line"},
      {{3, 1000003}, 1, "few very long lines: segments with carried totals"},
      {{2, 3, 4}, std::nullopt, "flattened"},
      {{5, 0}, 1, "empty"},
  };
  uint64_t seed = 1;
  for (ReduceOp op : {ReduceOp::CumSum, ReduceOp::CumProd})
    for (DType t : {bool_, int8, uint8, int16, int32, int64, float16, bfloat16, float32, float64})
      for (const Case& c : cases) {
        if (op == ReduceOp::CumProd && shape_numel(c.shape) > 100000 && is_floating(t)) continue;  // over/underflow
        expect_like_cpu(op, scan_values(op, c.shape, t, seed++), c.axis,
                        std::string(detail::reduce_op_name(op)) + " " + std::string(dtype_name(t)) + " " +
                            shape_str(c.shape) + " (" + c.path + ")");
      }
}

TEST(ScanGpu, OneLongLineOfTenMillionIsAccurateAndAtMostTwoKernels) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  const int64_t n = 10'000'000;
  const Array ones_gpu = ones({n}, float32, d);
  const std::vector<float> got = cumsum(ones_gpu).to(kiln::cpu()).to_vector<float>();
  for (int64_t i : {int64_t{0}, int64_t{1023}, int64_t{1024}, int64_t{4'999'999}, n - 1})
    EXPECT_EQ(got[static_cast<size_t>(i)], static_cast<float>(i + 1)) << i;
  const Array ints = arange(n, int64, d);
  const std::vector<int64_t> tri = cumsum(ints).to(kiln::cpu()).to_vector<int64_t>();
  EXPECT_EQ(tri.back(), n * (n - 1) / 2);
  EXPECT_EQ(tri[123456], int64_t{123456} * 123457 / 2);
  EXPECT_EQ(kernels_of(d, [&] { (void)cumsum(ones_gpu); }), 2u);  // the segments' totals, then the scan
  // int64 wraps like NumPy's, and products of -1/1 keep their sign exactly.
  const Array wrap = from_data(std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 1, 1}).to(d);
  EXPECT_EQ(cumsum(wrap).to(kiln::cpu()).to_vector<int64_t>(),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min(),
                                  std::numeric_limits<int64_t>::min() + 1}));
}

}  // namespace
}  // namespace kiln

#endif  // KILN_WITH_CUDA
