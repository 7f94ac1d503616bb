// kiln::fuse on the CPU: tracing (graph structure, the per-signature cache), results equal to
// the unfused ops dtype for dtype, NumPy golden values, NEP 50 scalars, broadcasting, a final
// reduction with axes, and the errors (non-fusable ops, devices). Several outputs, out= and
// work after reductions: test_fuse_outputs.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/fusion.hpp"
#include "fuse_test_util.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln_test::chain_fn;
using kiln_test::expect_equal;
using kiln_test::expect_error;

namespace {

const std::vector<float> kX = {-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 3.0f, -0.1f, 0.7f};

}  // namespace

TEST(Fuse, ChainMatchesNumpyGoldenFloat32) {
  auto f = fuse(chain_fn, "chain");
  Array y = f(from_data(kX));
  // np.tanh(x*np.float32(1.5)+np.float32(0.3))*x - np.exp(-x*x)*np.float32(0.5), float32
  const std::vector<double> golden = {1.972857117652893,   -0.17845086753368378, -0.5,
                                      -0.3226417303085327, 0.7628663182258606,   2.9995319843292236,
                                      -0.509913444519043,  0.30552414059638977};
  ASSERT_EQ(y.dtype(), float32);
  std::vector<float> got = y.to_vector<float>();
  for (size_t i = 0; i < golden.size(); ++i) EXPECT_NEAR(got[i], golden[i], 2e-7 * (1 + std::abs(golden[i]))) << i;
  expect_equal(y, chain_fn(from_data(kX)));
}

TEST(Fuse, ChainFloat16StaysFloat16AndMatchesNumpy) {
  auto f = fuse(chain_fn);
  Array x = from_data(kX).astype(float16);
  Array y = f(x);
  // The same chain in NumPy on float16 (weak Python scalars): every step rounds to float16.
  const std::vector<double> golden = {1.9736328125, -0.178466796875, -0.5,        -0.32275390625, 0.7626953125,
                                      3.0,          -0.51025390625,  0.3056640625};
  ASSERT_EQ(y.dtype(), float16);
  std::vector<double> got = y.to_vector<double>();
  for (size_t i = 0; i < golden.size(); ++i) EXPECT_NEAR(got[i], golden[i], 1e-3 * (1 + std::abs(golden[i]))) << i;
  expect_equal(y, chain_fn(x));
}

TEST(Fuse, TracesOncePerSignature) {
  int traces = 0;
  auto f = fuse([&traces](auto x, auto y) {
    ++traces;
    return x * y + 1;
  });
  Array a = arange(6, float32).reshape({2, 3}), b = arange(3, float32);
  expect_equal(f(a, b), a * b + 1);
  expect_equal(f(b, a), b * a + 1);  // same dtypes, other ranks: a new signature
  expect_equal(f(a * 2, b), a * 2 * b + 1);
  EXPECT_EQ(traces, 2);
  EXPECT_EQ(f.cache_size(), 2u);
  expect_equal(f(a.astype(float64), b), a.astype(float64) * b + 1);
  EXPECT_EQ(f.cache_size(), 3u);
  // A scalar argument is part of the signature by kind, not value.
  expect_equal(f(a, 2.5), a * 2.5 + 1);
  expect_equal(f(a, -1.0), a * -1.0 + 1);
  EXPECT_EQ(f.cache_size(), 4u);
  EXPECT_EQ(traces, 4);
}

TEST(Fuse, GraphRecordsTypesLikeTheUnfusedOps) {
  auto fn = [](auto x, auto s) { return exp(x) * s + (x > 2); };
  auto f = fuse(fn);
  Array x = arange(4, int32);
  Array y = f(x, 0.5);
  // exp(int32) -> float64 (NumPy's loop); * weak float keeps float64; + bool keeps float64.
  EXPECT_EQ(y.dtype(), float64);
  expect_equal(y, exp(x) * 0.5 + (x > 2));
  // Inspect the graph through a fresh trace of the same function.
  std::vector<detail::FusionArgument> args = {detail::fusion_argument(x), detail::fusion_argument(0.5)};
  auto cache = detail::make_fusion_cache();
  struct Ctx {
    decltype(fn)* f;
  } ctx{&fn};
  auto graph = detail::fusion_trace(
      *cache, "g", args,
      [](void* c, const std::vector<FusionValue>& v) {
        return std::vector<FusionValue>{(*static_cast<Ctx*>(c)->f)(v[0], v[1])};
      },
      &ctx);
  const std::string text = detail::fusion_describe(*graph);
  EXPECT_NE(text.find("%0 = arg0 : int32 ndim 1"), std::string::npos) << text;
  EXPECT_NE(text.find("%1 = arg1 : weak float64 ndim 0"), std::string::npos) << text;
  // (C++ leaves the order operands are evaluated in, so node numbers after %1, open.)
  EXPECT_NE(text.find(" = exp %0 in float64 : float64 ndim 1"), std::string::npos) << text;
  EXPECT_NE(text.find(" = multiply %"), std::string::npos) << text;
  EXPECT_NE(text.find(", %1 in float64 : float64 ndim 1"), std::string::npos) << text;
  EXPECT_NE(text.find(" = const 2 : weak int64 ndim 0"), std::string::npos) << text;
  EXPECT_NE(text.find(" = greater %0, %"), std::string::npos) << text;
  EXPECT_NE(text.find(" in int64 : bool ndim 1"), std::string::npos) << text;  // weak int: int64 compare
  EXPECT_EQ(graph->slots.size(), 2u);                                          // s into multiply, 2 into greater
  EXPECT_EQ(graph->reduce, -1);
  EXPECT_EQ(graph->output, static_cast<int>(graph->nodes.size()) - 1);
}

TEST(Fuse, WeakScalarsFollowNep50) {
  auto plus = fuse([](auto x) { return x + 1; });
  auto times_float = fuse([](auto x) { return x * 2.5; });
  auto f16 = fuse([](auto x) { return x + 0.1; });
  Array i8 = from_data(std::vector<int8_t>{1, -2, 100});
  EXPECT_EQ(plus(i8).dtype(), int8);
  expect_equal(plus(i8), i8 + 1);
  Array i32 = from_data(std::vector<int32_t>{1, -2, 7});
  EXPECT_EQ(times_float(i32).dtype(), float64);
  expect_equal(times_float(i32), i32 * 2.5);
  Array h = from_data(std::vector<float>{1.0f, 2.0f, 1000.0f}).astype(float16);
  Array r = f16(h);
  EXPECT_EQ(r.dtype(), float16);
  expect_equal(r, h + 0.1);  // 0.1 rounded to float16 first, as NumPy
  EXPECT_EQ(r.to_vector<double>()[0], 1.099609375);
  // Scalar arguments are weak too, and ops on scalar arguments only stay scalars (C++'s arithmetic).
  auto g = fuse([](auto x, auto s) { return x * (s * 2); });
  expect_equal(g(i8, 3), i8 * 6);
  EXPECT_EQ(g(i8, 3).dtype(), int8);
  // An integer scalar out of the array's range throws as the unfused op does.
  expect_error<ValueError>([&] { (void)g(i8, 100); }, {"multiply", "200", "int8"});
  expect_error<ValueError>([&] { (void)fuse([](auto x) { return x + 300; })(from_data(std::vector<uint8_t>{1})); },
                           {"add", "300", "uint8"});
}

// where's condition is only read as a bool (np.where(300, x, y) is x), as a constant of the function and
// as a scalar argument, so fuse does not range-check it against the uint8 values.
TEST(Fuse, WhereScalarConditionIsNotRangeChecked) {
  Array x = from_data(std::vector<uint8_t>{1, 2, 3}), y = from_data(std::vector<uint8_t>{7, 8, 9});
  auto constant = fuse([](auto a, auto b) { return where(300, a, b); });
  Array r = constant(x, y);
  EXPECT_EQ(r.dtype(), uint8);
  EXPECT_EQ(r.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3}));
  auto argument = fuse([](auto c, auto a, auto b) { return where(c, a, b); });
  EXPECT_EQ(argument(256, x, y).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(argument(0, x, y).to_vector<uint8_t>(), (std::vector<uint8_t>{7, 8, 9}));
  // A value operand out of range still throws, as the unfused where does.
  auto value = fuse([](auto c, auto a) { return where(c, a, 300); });
  expect_error<ValueError>(
      [&] {
        (void)value(from_data(std::vector<bool>{true, false, true}), x);
      },
      {"where", "300", "uint8"});
}

TEST(Fuse, BroadcastingAndMixedDtypes) {
  auto f = fuse([](auto a, auto b) { return where(a > b, a - b, maximum(b, 0)) * 2; });
  Array a = arange(6, int32).reshape({2, 3});
  Array b = from_data(std::vector<int8_t>{1, 2, 3});
  Array y = f(a, b);
  EXPECT_EQ(y.dtype(), int32);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_vector<int32_t>(), (std::vector<int32_t>{2, 4, 6, 4, 4, 4}));
  expect_equal(y, where(a > b, a - b, maximum(b, 0)) * 2);
  auto eq = fuse([](auto a, auto b) { return (a == b) | (a != 2) | !(b <= 1); });
  expect_equal(eq(a, b), (a == b) | (a != 2) | !(b <= 1));
  // numpy: (a*b+1) for int32 a (2,3), int8 b (3,)
  auto g = fuse([](auto a, auto b) { return a * b + 1; });
  EXPECT_EQ(g(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 7, 4, 9, 16}));
  // Strided and transposed inputs.
  Array m = arange(12, float32).reshape({3, 4});
  auto h = fuse([](auto x, auto y) { return sqrt(x) + y.astype(float64); });
  Array strided = m.slice(1, 0, 3), transposed = m.T().slice(0, 1, 4);  // both (3, 3)
  expect_equal(h(strided, transposed), sqrt(strided) + transposed.astype(float64));
  EXPECT_EQ(h(strided, transposed).dtype(), float64);
}

TEST(Fuse, FinalReductionWithAxes) {
  Array a = arange(6, int32).reshape({2, 3});
  Array b = from_data(std::vector<int8_t>{1, 2, 3});
  // NumPy: np.sum(a*b+2.5, axis=1) = [15.5, 33.5]; np.max(a-b, axis=0, keepdims=True) = [[2, 2, 2]];
  // np.mean(a*b, axis=0) = [1.5, 5.0, 10.5].
  Array s = fuse([](auto a, auto b) { return sum(a * b + 2.5, 1); })(a, b);
  EXPECT_EQ(s.dtype(), float64);
  EXPECT_EQ(s.to_vector<double>(), (std::vector<double>{15.5, 33.5}));
  Array m = fuse([](auto a, auto b) { return (a - b).max(0, true); })(a, b);
  EXPECT_EQ(m.dtype(), int32);
  EXPECT_EQ(m.shape(), (Shape{1, 3}));
  EXPECT_EQ(m.to_vector<int32_t>(), (std::vector<int32_t>{2, 2, 2}));
  Array mu = fuse([](auto a, auto b) { return mean(a * b, 0); })(a, b);
  EXPECT_EQ(mu.dtype(), float64);
  EXPECT_EQ(mu.to_vector<double>(), (std::vector<double>{1.5, 5.0, 10.5}));
  Array total = fuse([](auto x) { return sum(x * x); })(from_data(kX));
  EXPECT_EQ(total.dtype(), float32);
  EXPECT_EQ(total.ndim(), 0);
  EXPECT_FLOAT_EQ(total.item<float>(), 14.8125f);
  Array any_big = fuse([](auto x) { return any(x > 2.5f, -1); })(from_data(kX).reshape({2, 4}));
  EXPECT_EQ(any_big.to_vector<bool>(), (std::vector<bool>{false, true}));
  expect_equal(fuse([](auto x) { return prod(x + 1, {0, 1}, true); })(a), prod(a + 1, {0, 1}, true));
  expect_equal(fuse([](auto x) { return min(x * -1); })(a), min(a * -1));
  // Empty reductions go through the unfused ops (same results and errors).
  Array empty_rows = zeros({0, 3}, float32);
  expect_equal(fuse([](auto x) { return sum(x * 2, 0); })(empty_rows), sum(empty_rows * 2, 0));
  expect_error<ValueError>([&] { (void)fuse([](auto x) { return max(x * 2, 0); })(empty_rows); }, {"max"});
  expect_error<ShapeError>([&] { (void)fuse([](auto x) { return sum(x, 2); })(a); }, {"axis 2"});
}

// A fused reduction checks its axes as kiln::sum does (one plan_reduction): the same ShapeErrors.
TEST(Fuse, ReductionAxisErrorsMatchTheUnfusedReduction) {
  Array a = ones({2, 3});
  expect_error<ShapeError>([&] { (void)fuse([](auto x) {
                                   return sum(x * 2, {1, -1});
                                 })(a); },
                           {"sum", "duplicate axis -1 (axis 1 of an array of ndim 2)", "list each axis once"});
  expect_error<ShapeError>(
      [&] {
        (void)sum(a * 2, {1, -1});
      },
      {"sum", "duplicate axis -1 (axis 1 of an array of ndim 2)", "list each axis once"});
  expect_error<ShapeError>([&] { (void)fuse([](auto x) { return max(x, -3); })(a); },
                           {"max", "axis -3 is out of bounds for an array of ndim 2", "use an axis in [-2, 2)"});
}

TEST(Fuse, NonFusableOpsThrowValueErrorNamingTheOp) {
  Array a = ones({2, 2});
  expect_error<ValueError>([&] { (void)fuse([](auto x) { return matmul(x, x) + 1; }, "mm")(a); },
                           {"fuse(mm)", "matmul", "split"});
  expect_error<ValueError>([&] { (void)fuse([](auto x) { return argmax(x); })(a); }, {"argmax", "split"});
  expect_error<ValueError>([&] { (void)fuse([&a](auto x) { return x + a; })(a); }, {"fuse", "captured", "argument"});
  expect_error<DTypeError>([&] { (void)fuse([](auto x) { return x & 1; })(a); }, {"bitwise_and", "float32"});
}

TEST(Fuse, LogsumexpIsTracedAsItsPartsAndMatchesTheUnfusedOne) {
  // Rows with large values (no overflow), an -inf row (gives -inf) and a +inf element (gives +inf).
  std::vector<double> v(4 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = 700.0 + static_cast<double>(i % 7) * 3.5 - static_cast<double>(i / 6);
  for (int j = 0; j < 6; ++j) v[static_cast<size_t>(6 + j)] = -std::numeric_limits<double>::infinity();
  v[20] = std::numeric_limits<double>::infinity();
  const Array x = from_data(v).reshape({4, 6}).astype(float32);
  auto log_softmax = fuse([](auto t) { return t - logsumexp(t, -1, true); }, "log_softmax");
  const Array want = subtract(x, logsumexp(x, -1, true));
  const Array got = log_softmax(x);
  ASSERT_EQ(got.dtype(), float32);
  const std::vector<float> g = got.to_vector<float>(), w = want.to_vector<float>();
  for (size_t i = 0; i < w.size(); ++i)
    if (!(std::isnan(w[i]) && std::isnan(g[i]))) {
      EXPECT_EQ(g[i], w[i]) << i;
    }
  // Without keepdims, over two axes, and of an integer input (a float64 result).
  auto lse = fuse([](auto t) { return logsumexp(t, {0, 1}); });
  EXPECT_EQ(lse(x).to_vector<float>(), logsumexp(x, {0, 1}).to_vector<float>());
  const Array ints = arange(12).reshape({3, 4});
  EXPECT_EQ(fuse([](auto t) { return logsumexp(t, 1); })(ints).dtype(), float64);
  EXPECT_EQ(fuse([](auto t) { return logsumexp(t, 1); })(ints).to_vector<double>(),
            logsumexp(ints, 1).to_vector<double>());
  const std::vector<double> lv = logsumexp(x, -1).to_vector<double>();
  EXPECT_EQ(lv[1], -std::numeric_limits<double>::infinity());
  EXPECT_EQ(lv[3], std::numeric_limits<double>::infinity());
}

TEST(Fuse, DeadValuesAreNeitherRunNorBroadcast) {
  auto f = fuse([](auto x, auto y) {
    auto unused = y * 2;
    (void)unused;
    return x + 1;
  });
  Array x = arange(3, float32), y = arange(4, float32);
  expect_equal(f(x, y), x + 1);  // y's shape (4,) would not broadcast with (3,)
}

TEST(Fuse, CastsAndScalarOnlyValues) {
  auto f = fuse([](auto x, auto s) { return x.astype(float16) * 3 + s.astype(float16); });
  Array x = from_data(std::vector<float>{0.1f, 1.0f, 2049.0f});
  Array y = f(x, 0.3);
  EXPECT_EQ(y.dtype(), float16);
  expect_equal(y, x.astype(float16) * 3 + scalar_array(0.3).astype(float16));
}
