// Every reduction on cuda:0 against the CPU backend: every op and dtype over
// various axes and layouts (contiguous, transposed, reversed and sliced, permuted),
// sizes that take each kernel path (a group of threads per row, a block per row,
// split reductions with a second pass, columns), NaN and tie handling of
// max/min/argmax/argmin, and a 2^27-element sum. Integer, bool, max/min and index
// results must be identical; float sums and products within the bound of the
// GPU's float32 accumulation (see src/cuda/reduce.cpp). Skips without a GPU.
#ifdef KILN_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/op_table.hpp"
#include "kiln/cuda.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;

namespace {
using kiln_test::epsilon;

constexpr DType kAllTypes[] = {DType::Bool,  DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
                               DType::UInt8, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};

// Every kernel row of kiln/reductions.def, on the GPU against the CPU: a new row is tested here (and fails
// until run() knows its public function).
using Op = detail::ReduceOp;
Op kernel_op(int i) { return static_cast<Op>(i); }
const char* op_name(Op op) { return detail::reduce_op_name(op); }

/// Random values suited to `op`: ties and (optionally) NaNs for max/min/arg ops, values near 1 for
/// products, mostly non-zero values for all/any.
Array values_for(Op op, const Shape& shape, DType t, std::mt19937_64& rng, bool with_nan) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  std::vector<double> v(static_cast<size_t>(n));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const bool fp = is_floating(t);
  for (double& x : v) {
    const double r = u(rng);
    switch (op) {
      case Op::Sum:
      case Op::Norm:
        x = fp ? 8 * r - 4 : std::floor(200 * r - 100);
        break;
      case Op::Prod:
        x = fp ? 0.9 + 0.2 * r : std::floor(5 * r - 2);
        break;
      case Op::All:
      case Op::Any:
        x = r < 0.01 ? 0.0 : std::floor(3 * r) + 1;
        break;
      default:
        x = std::floor(7 * r - 3);
        break;  // many ties
    }
    if (t == DType::UInt8 && x < 0) x = -x;
    if (fp && with_nan && u(rng) < 0.003) x = std::nan("");
  }
  if (t == DType::Bool)
    for (double& x : v) x = x != 0 && u(rng) < 0.97 ? 1 : 0;
  return from_data(v, shape).astype(t);
}

Array run(Op op, const Array& a, const std::optional<Shape>& axes) {
  const Axes ax = axes ? Axes(std::vector<int64_t>(axes->begin(), axes->end())) : Axes();
  const std::optional<int64_t> axis = axes ? std::optional<int64_t>((*axes)[0]) : std::nullopt;
  switch (op) {
    case Op::Sum:
      return sum(a, ax);
    case Op::Prod:
      return prod(a, ax);
    case Op::Max:
      return max(a, ax);
    case Op::Min:
      return min(a, ax);
    case Op::ArgMax:
      return argmax(a, axis);
    case Op::ArgMin:
      return argmin(a, axis);
    case Op::All:
      return all(a, ax);
    case Op::Any:
      return any(a, ax);
    case Op::Norm:
      return linalg::norm(a, ax);
    default:
      break;
  }
  throw std::logic_error(std::string("test_gpu_reduce: run() has no case for the kernel row ") + op_name(op));
}

/// Compares a GPU reduction with the CPU's: exact except float sums/products and norms, which may differ by the
/// accumulation bound: 64 float32 (or float64) epsilons of the sum of magnitudes (products: of the
/// magnitude times the count; norms, accumulated in float64: of the norm), plus two ulps of the result dtype.
void expect_reduction_matches(Op op, const Array& input, const std::optional<Shape>& axes, const std::string& what) {
  const Array expected = run(op, input, axes);
  const Array got = run(op, input.to(gpu(0)), axes);
  ASSERT_EQ(expected.dtype(), got.dtype()) << what;
  ASSERT_EQ(expected.shape(), got.shape()) << what;
  const Array host = got.to(kiln::cpu());
  const bool inexact = is_floating(expected.dtype()) && (op == Op::Sum || op == Op::Prod || op == Op::Norm);
  if (!inexact) {
    const std::vector<double> c = expected.to_vector<double>(), g = host.to_vector<double>();
    for (size_t i = 0; i < c.size(); ++i) {
      const bool same = c[i] == g[i] || (std::isnan(c[i]) && std::isnan(g[i]));
      if (!same) {
        ADD_FAILURE() << what << ": element " << i << " cpu " << c[i] << " gpu " << g[i];
        return;
      }
    }
    return;
  }
  const DType out = expected.dtype();
  const double acc_eps = out == DType::Float64 || op == Op::Norm ? epsilon(DType::Float64) : epsilon(DType::Float32);
  const Axes ax = axes ? Axes(std::vector<int64_t>(axes->begin(), axes->end())) : Axes();
  const std::vector<double> magnitude = sum(abs(input.astype(DType::Float64)), ax).to_vector<double>();
  const int64_t count = input.size() / std::max<int64_t>(1, expected.size());
  const std::vector<double> c = expected.to_vector<double>(), g = host.to_vector<double>();
  for (size_t i = 0; i < c.size(); ++i) {
    if ((std::isnan(c[i]) && std::isnan(g[i])) || c[i] == g[i]) continue;
    const double scale = op == Op::Sum    ? magnitude[i]
                         : op == Op::Norm ? std::fabs(c[i])
                                          : std::fabs(c[i]) * static_cast<double>(count);
    const double subnormal = out == DType::Float16    ? std::ldexp(1.0, -24)
                             : out == DType::BFloat16 ? std::ldexp(1.0, -133)
                             : out == DType::Float32  ? std::ldexp(1.0, -149)
                                                      : 0.0;
    const double tolerance = 64 * acc_eps * scale + 2 * epsilon(out) * std::fabs(c[i]) + 2 * subnormal;
    if (!(std::fabs(c[i] - g[i]) <= tolerance)) {
      ADD_FAILURE() << what << ": element " << i << " cpu " << c[i] << " gpu " << g[i] << " tolerance " << tolerance;
      return;
    }
  }
}

struct Case {
  const char* name;
  Shape base;
  std::function<Array(const Array&)> view;
  std::vector<std::optional<Shape>> axes;  ///< nullopt: all axes
};

Array same(const Array& a) { return a; }

std::vector<Case> small_cases() {
  return {
      {"vector", {1000}, same, {std::nullopt, Shape{0}}},
      {"matrix", {64, 300}, same, {std::nullopt, Shape{0}, Shape{1}, Shape{0, 1}}},
      {"rank3", {7, 33, 65}, same, {Shape{0, 2}, Shape{1}, Shape{0, 1}, Shape{2}, std::nullopt}},
      {"transposed", {40, 50}, [](const Array& a) { return a.T(); }, {Shape{0}, Shape{1}, std::nullopt}},
      {"reversed_sliced",
       {100, 37},
       [](const Array& a) {
         return a.slice(0, std::nullopt, std::nullopt, -1).slice(1, std::nullopt, std::nullopt, 2);
       },
       {Shape{0}, Shape{1}, std::nullopt}},
      {"permuted",
       {6, 10, 12},
       [](const Array& a) {
         return a.permute({2, 0, 1});
       },
       {Shape{0, 2}, Shape{1}, Shape{2}}},
      {"short_rows", {4099, 3}, same, {Shape{1}, Shape{0}}},
  };
}

bool valid_axes_for(Op op, const std::optional<Shape>& axes) {
  return !(op == Op::ArgMax || op == Op::ArgMin) || !axes || axes->size() == 1;
}

class GpuReduceOp : public ::testing::TestWithParam<int> {};

TEST_P(GpuReduceOp, MatchesTheCpuForEveryDtypeAxesAndLayout) {
  KILN_REQUIRE_GPU();
  const Op op = kernel_op(GetParam());
  std::mt19937_64 rng(99 + GetParam());
  for (const Case& c : small_cases())
    for (DType t : kAllTypes) {
      const Array input = c.view(values_for(op, c.base, t, rng, false));
      for (const auto& axes : c.axes) {
        if (!valid_axes_for(op, axes)) continue;
        const std::string what = std::string(op_name(op)) + " " + std::string(dtype_name(t)) + " " + c.name + " axes " +
                                 (axes ? shape_str(*axes) : std::string("all"));
        expect_reduction_matches(op, input, axes, what);
      }
    }
}

TEST_P(GpuReduceOp, LargeInputsTakeTheSplitAndVectorPathsAndStillMatch) {
  KILN_REQUIRE_GPU();
  const Op op = kernel_op(GetParam());
  if (op == Op::Prod) GTEST_SKIP() << "products of ~10^5 values over/underflow differently in float32 and float64";
  std::mt19937_64 rng(7 + GetParam());
  const std::vector<Case> cases = {
      {"full", {1 << 20}, same, {std::nullopt}},
      {"long_rows", {3, 1 << 18}, same, {Shape{1}, Shape{0}}},
      {"few_columns", {1 << 18, 3}, same, {Shape{0}}},
      {"wide", {513, 4096}, same, {Shape{1}, Shape{0}}},
      {"odd_offset", {(1 << 19) + 7}, [](const Array& a) { return a.slice(0, 3, std::nullopt); }, {std::nullopt}},
  };
  for (const Case& c : cases)
    for (DType t : {DType::Bool, DType::Int8, DType::Int32, DType::Int64, DType::Float16, DType::BFloat16,
                    DType::Float32, DType::Float64}) {
      const Array input = c.view(values_for(op, c.base, t, rng, false));
      for (const auto& axes : c.axes)
        expect_reduction_matches(op, input, axes,
                                 std::string(op_name(op)) + " " + std::string(dtype_name(t)) + " " + c.name + " axes " +
                                     (axes ? shape_str(*axes) : std::string("all")));
    }
}

INSTANTIATE_TEST_SUITE_P(EveryKernelRow, GpuReduceOp, ::testing::Range(0, detail::kNumReduceKernels),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::string(op_name(kernel_op(info.param)));
                         });

/// NumPy's argmax/argmin of row `values[begin + k * step]`, k < n: the first NaN, else the first extreme.
int64_t numpy_arg(const std::vector<double>& values, int64_t begin, int64_t step, int64_t n, bool is_max) {
  int64_t best = 0;
  for (int64_t k = 0; k < n; ++k) {
    const double x = values[static_cast<size_t>(begin + k * step)];
    if (std::isnan(x)) return k;
    const double b = values[static_cast<size_t>(begin + best * step)];
    if (is_max ? x > b : x < b) best = k;
  }
  return best;
}

TEST(GpuReduce, NanPropagatesThroughMaxMinAndTheFirstNanWinsArgmaxArgmin) {
  KILN_REQUIRE_GPU();
  std::mt19937_64 rng(5);
  for (DType t : {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64}) {
    const std::string type(dtype_name(t));
    for (Op op : {Op::Max, Op::Min, Op::All, Op::Any, Op::Sum})
      for (const Shape& shape : {Shape{300, 257}, Shape{1 << 18}}) {
        const Array input = values_for(op, shape, t, rng, true);
        expect_reduction_matches(op, input, std::nullopt, std::string(op_name(op)) + " with NaN " + type);
        if (shape.size() == 1) continue;
        expect_reduction_matches(op, input, Shape{0}, std::string(op_name(op)) + " with NaN axis 0 " + type);
        expect_reduction_matches(op, input, Shape{1}, std::string(op_name(op)) + " with NaN axis 1 " + type);
      }
    // argmax/argmin against NumPy's rule directly (ties and NaNs: the first one).
    for (bool is_max : {true, false}) {
      const Op op = is_max ? Op::ArgMax : Op::ArgMin;
      const Array input = values_for(op, {300, 257}, t, rng, true);
      const std::vector<double> v = input.to_vector<double>();
      const Array g = input.to(gpu(0));
      const std::vector<int64_t> rows = run(op, g, Shape{1}).to(kiln::cpu()).to_vector<int64_t>();
      const std::vector<int64_t> cols = run(op, g, Shape{0}).to(kiln::cpu()).to_vector<int64_t>();
      for (int64_t i = 0; i < 300; ++i)
        ASSERT_EQ(rows[static_cast<size_t>(i)], numpy_arg(v, i * 257, 1, 257, is_max))
            << op_name(op) << " " << type << " row " << i;
      for (int64_t j = 0; j < 257; ++j)
        ASSERT_EQ(cols[static_cast<size_t>(j)], numpy_arg(v, j, 257, 300, is_max))
            << op_name(op) << " " << type << " column " << j;
      EXPECT_EQ(run(op, g, std::nullopt).item<int64_t>(), numpy_arg(v, 0, 1, 300 * 257, is_max))
          << op_name(op) << " " << type;
      const Array big = values_for(op, {1 << 18}, t, rng, true);
      EXPECT_EQ(run(op, big.to(gpu(0)), std::nullopt).item<int64_t>(),
                numpy_arg(big.to_vector<double>(), 0, 1, 1 << 18, is_max))
          << op_name(op) << " " << type << " 2^18";
    }
  }
  // Hand-checked: the first of equal maxima, the first NaN (also when it is element 0).
  const Array a = from_data(std::vector<float>{1, 5, 2, 5, NAN, 3, NAN}, Shape{7}, gpu(0));
  EXPECT_EQ(argmax(a).item<int64_t>(), 4);
  EXPECT_EQ(argmin(a).item<int64_t>(), 4);
  EXPECT_EQ(argmax(a.slice(0, 0, 4)).item<int64_t>(), 1);
  EXPECT_EQ(argmax(a.slice(0, 4, std::nullopt)).item<int64_t>(), 0);
  EXPECT_TRUE(std::isnan(max(a).item<float>()));
  EXPECT_EQ(min(a.slice(0, 0, 4)).item<float>(), 1.0f);
}

TEST(GpuReduce, MeanVarAndStdComposeTheGpuSum) {
  KILN_REQUIRE_GPU();
  std::mt19937_64 rng(3);
  for (DType t : {DType::Int32, DType::Float16, DType::Float32, DType::Float64}) {
    const Array x = values_for(Op::Sum, {123, 77}, t, rng, false);
    const Array g = x.to(gpu(0));
    for (int axis : {0, 1}) {
      const std::string what = std::string(dtype_name(t)) + " axis " + std::to_string(axis);
      const Array m = mean(x, axis), gm = mean(g, axis).to(kiln::cpu());
      const Array s = kiln::std(x, axis), gs = kiln::std(g, axis).to(kiln::cpu());
      ASSERT_EQ(m.dtype(), gm.dtype()) << what;
      const std::vector<double> mv = m.to_vector<double>(), gmv = gm.to_vector<double>();
      const std::vector<double> sv = s.to_vector<double>(), gsv = gs.to_vector<double>();
      const double tolerance = 4 * epsilon(m.dtype()) + 1e-12;
      for (size_t i = 0; i < mv.size(); ++i) {
        EXPECT_NEAR(mv[i], gmv[i], tolerance * (std::fabs(mv[i]) + 4)) << what << " mean " << i;
        EXPECT_NEAR(sv[i], gsv[i], tolerance * (std::fabs(sv[i]) + 4)) << what << " std " << i;
      }
    }
  }
}

TEST(GpuReduce, LogsumexpCumsumAndCumprodMatchTheCpu) {
  KILN_REQUIRE_GPU();
  std::mt19937_64 rng(7);
  for (DType t : {DType::Int32, DType::UInt8, DType::Float16, DType::Float32, DType::Float64}) {
    for (const Shape& shape : {Shape{5, 300}, Shape{1000, 3}, Shape{4, 0}}) {
      const Array x = values_for(Op::Sum, shape, t, rng, false), g = x.to(gpu(0));
      const std::string what = std::string(dtype_name(t)) + " " + shape_str(shape);
      const Array p = values_for(Op::Prod, shape, t, rng, false), gp = p.to(gpu(0));
      auto expect_close = [&](const Array& cpu_result, const Array& gpu_result, const std::string& op) {
        ASSERT_EQ(cpu_result.dtype(), gpu_result.dtype()) << what << " " << op;
        const std::vector<double> c = cpu_result.to_vector<double>(), gc = gpu_result.to_vector<double>();
        ASSERT_EQ(c.size(), gc.size()) << what << " " << op;
        for (size_t i = 0; i < c.size(); ++i)  // equal infinities (logsumexp of an empty row is -inf) match
          if (c[i] != gc[i]) {
            EXPECT_NEAR(c[i], gc[i], 1e-9 * (std::fabs(c[i]) + 1)) << what << " " << op;
          }
      };
      for (int64_t axis : {0, 1}) {
        // Integer scans are exact (int64, wrapping); float scans accumulate in float64 on both devices.
        expect_close(cumsum(x, axis), cumsum(g, axis), "cumsum");
        expect_close(cumprod(p, axis), cumprod(gp, axis), "cumprod");
        expect_close(logsumexp(x, Axes(axis)), logsumexp(g, Axes(axis)), "logsumexp");
      }
      // Flattened: one contiguous line, block-scanned on the GPU (float64 sums in another order than the CPU's
      // sequential one: close, not equal; integers exact).
      expect_close(cumsum(x), cumsum(g), "cumsum flattened");
    }
  }
}

TEST(GpuReduce, HugeSumOf2To27ElementsIsAccurate) {
  KILN_REQUIRE_GPU();
  const int64_t n = int64_t{1} << 27;
  // 0, 1, ..., 1023 repeated: the exact sum is known; float32 accumulation must stay within 1e-6 relative.
  const Array pattern = remainder(arange(Scalar(0), Scalar(n), Scalar(1), DType::Int32, gpu(0)), 1024);
  const Array x = pattern.astype(DType::Float32);
  const double exact = static_cast<double>(n / 1024) * (1023.0 * 1024.0 / 2.0);
  const double got = sum(x).item<double>();
  EXPECT_NEAR(got, exact, 1e-6 * exact);
  EXPECT_EQ(sum(pattern).item<int64_t>(), static_cast<int64_t>(exact));
  EXPECT_EQ(max(x).item<float>(), 1023.0f);
  EXPECT_EQ(argmax(x).item<int64_t>(), 1023);
  EXPECT_EQ(argmin(x.slice(0, 5, std::nullopt)).item<int64_t>(), 1019);
  EXPECT_NEAR(mean(x).item<double>(), 511.5, 1e-9);
  EXPECT_TRUE(any(x).item<bool>());
  EXPECT_FALSE(all(x).item<bool>());
}


TEST(GpuReduce, NormIsOneKernelWithItsSquareRootInTheEpilogue) {
  KILN_REQUIRE_GPU();
  const Device d = gpu(0);
  // Hand-computed: ||(3, 4)|| = 5; float16 squares overflow float16 (300^2 > 65504) but not the float64 accumulator.
  EXPECT_EQ(linalg::norm(from_data(std::vector<float>{3, 4}).to(d)).item<float>(), 5.0f);
  const Array big = full({2}, 300.0, DType::Float16, d);
  EXPECT_NEAR(linalg::norm(big).item<double>(), 300.0 * std::sqrt(2.0), 0.25);  // float16 spacing at 424 is 0.25
  EXPECT_EQ(linalg::norm(big).dtype(), DType::Float16);
  EXPECT_EQ(linalg::norm(full({4}, 2, DType::Int32, d)).item<double>(), 4.0);  // ints give float64
  EXPECT_EQ(linalg::norm(full({2, 3}, -2.0, DType::Float32, d), 1).to_vector<float>(),
            (std::vector<float>{std::sqrt(12.0f), std::sqrt(12.0f)}));
  EXPECT_EQ(linalg::norm(full(Shape{}, -7.0, DType::Float64, d)).item<double>(), 7.0);  // 0-d: |x|
  // The logging walkthrough's norm (100x100 float32) captured in a graph: one kernel node, no copies or casts.
  const Array x = random::normal({100, 100}, float32, d);
  const double expected = linalg::norm(x.to(kiln::cpu())).item<double>();
  Stream s = Stream::create(d);
  Array result;
  (void)linalg::norm(x);  // compiled outside the capture
  synchronize(d);
  cuda::Graph g;
  {
    cuda::GraphCapture capture(g, s);
    result = linalg::norm(x);
  }
  EXPECT_EQ(g.num_nodes(), 1u);
  g.replay();
  s.synchronize();
  EXPECT_NEAR(result.item<float>(), expected, 1e-6 * expected);  // float64 sums in another order, one rounding
}

}  // namespace

#endif  // KILN_WITH_CUDA
