// Elementwise semantics with hand-computed values: the cases NumPy defines
// specially (integer division, NaN propagation, weak scalars, overlap).
// Broad coverage against NumPy lives in the op harness (tests/harness).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.hpp"

using namespace kiln;

namespace {
template <class T> Array vec(std::vector<T> v) { return from_data(v); }
}  // namespace

TEST(Elementwise, IntegerFloorDivideAndRemainderFollowPython) {
  Array a = vec<int32_t>({7, -7, 7, -7, 5, INT32_MIN});
  Array b = vec<int32_t>({2, 2, -2, -2, 0, -1});
  EXPECT_EQ(floor_divide(a, b).to_vector<int32_t>(), (std::vector<int32_t>{3, -4, -4, 3, 0, INT32_MIN}));
  EXPECT_EQ(remainder(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, -1, -1, 0, 0}));
  EXPECT_EQ((a % b).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, -1, -1, 0, 0}));
}

TEST(Elementwise, FloatFloorDivideAndRemainderFollowPython) {
  Array a = vec<double>({7.5, -7.5, 1.0, 0.0});
  Array b = vec<double>({2.0, 2.0, 0.0, -3.0});
  auto q = floor_divide(a, b).to_vector<double>();
  EXPECT_EQ(q[0], 3.0);
  EXPECT_EQ(q[1], -4.0);
  EXPECT_TRUE(std::isinf(q[2]));
  auto r = remainder(a, b).to_vector<double>();
  EXPECT_EQ(r[0], 1.5);
  EXPECT_EQ(r[1], 0.5);
  EXPECT_TRUE(std::isnan(r[2]));
  EXPECT_TRUE(std::signbit(r[3]));  // 0 % -3 is -0.0 in Python
}

TEST(Elementwise, TrueDivideOfIntegersGivesFloat64) {
  Array q = vec<int32_t>({1, 3}) / vec<int32_t>({2, 0});
  EXPECT_EQ(q.dtype(), float64);
  auto v = q.to_vector<double>();
  EXPECT_EQ(v[0], 0.5);
  EXPECT_TRUE(std::isinf(v[1]));
}

TEST(Elementwise, IntegerPowerWithNegativeExponent) {
  Array b = vec<int64_t>({2, 1, -1, -1, 3});
  Array e = vec<int64_t>({-1, -5, -3, -2, 4});
  EXPECT_EQ(power(b, e).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, -1, 1, 81}));
}

TEST(Elementwise, MaximumAndMinimumPropagateNaN) {
  double nan = std::numeric_limits<double>::quiet_NaN();
  Array a = vec<double>({1.0, nan, 3.0});
  Array b = vec<double>({2.0, 0.0, nan});
  auto mx = maximum(a, b).to_vector<double>();
  EXPECT_EQ(mx[0], 2.0);
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_TRUE(std::isnan(mx[2]));
  auto mn = minimum(a, b).to_vector<double>();
  EXPECT_EQ(mn[0], 1.0);
  EXPECT_TRUE(std::isnan(mn[2]));
}

TEST(Elementwise, WeakScalarsKeepTheArrayDtype) {
  Array i8 = vec<int8_t>({100, -100});
  Array s = i8 + 100;  // wraps in int8, as NumPy
  EXPECT_EQ(s.dtype(), int8);
  EXPECT_EQ(s.to_vector<int8_t>(), (std::vector<int8_t>{-56, 0}));
  EXPECT_EQ((i8 * 2.5).dtype(), float64);
  EXPECT_EQ((vec<float>({1}) * 2.5).dtype(), float32);
  EXPECT_EQ((vec<bool>({true}) + 1).dtype(), int64);
  EXPECT_EQ((2 - vec<int16_t>({5})).to_vector<int16_t>(), std::vector<int16_t>{-3});
}

TEST(Elementwise, OutOfRangeIntegerScalarThrowsForArithmetic) {
  Array u = vec<uint8_t>({1, 2});
  try {
    (void)(u + 300);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("300"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("uint8"), std::string::npos);
  }
  EXPECT_EQ((u < 300).to_vector<bool>(), (std::vector<bool>{true, true}));  // comparisons are exact
  EXPECT_EQ((u > -1).to_vector<bool>(), (std::vector<bool>{true, true}));
}

TEST(Elementwise, BroadcastFailureNamesBothShapes) {
  try {
    (void)(zeros({2, 3}) + zeros({4}));
    FAIL();
  } catch (const ShapeError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("add"), std::string::npos);
    EXPECT_NE(m.find("(2, 3)"), std::string::npos);
    EXPECT_NE(m.find("(4,)"), std::string::npos);
  }
}

TEST(Elementwise, BroadcastingOuterProduct) {
  Array col = arange(3, int32).reshape({3, 1});
  Array row = arange(4, int32);
  Array p = col * row;
  EXPECT_EQ(p.shape(), (Shape{3, 4}));
  EXPECT_EQ(p.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 2, 3, 0, 2, 4, 6}));
}

TEST(Elementwise, UnsupportedDtypesThrowNamingTheOp) {
  try {
    (void)bitwise_and(zeros({2}), zeros({2}));
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("bitwise_and"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos);
  }
  EXPECT_THROW((void)(vec<bool>({true}) - vec<bool>({false})), DTypeError);
  EXPECT_THROW((void)-vec<bool>({true}), DTypeError);
}

TEST(Elementwise, OverlappingInPlaceUpdateReadsOldValues) {
  Array a = arange(5, int32);
  Array tail = a.slice(0, 1, std::nullopt);
  add(tail, a.slice(0, 0, 4), tail);  // a[1:] += a[:-1] with NumPy semantics
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 3, 5, 7}));
}

TEST(Elementwise, OutMustHaveTheBroadcastShapeAndACompatibleDtype) {
  Array out = zeros({2, 2});
  EXPECT_THROW(add(zeros({2, 3}), 1, out), ShapeError);
  Array iout = zeros({2}, int32);
  EXPECT_THROW(add(zeros({2}), 1, iout), DTypeError);
  Array wide = zeros({2}, float64);
  add(arange(2, int32), 1, wide);  // int32 result into float64 out is a same-kind-safe cast
  EXPECT_EQ(wide.to_vector<double>(), (std::vector<double>{1, 2}));
}

TEST(Elementwise, Float16ComputesInFloat32AndRoundsOnStore) {
  Array h = vec<float>({1.0f, 2048.0f}).astype(float16);
  Array r = h + 1;  // 2049 is not a float16: rounds to even (2048)
  EXPECT_EQ(r.dtype(), float16);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{2.0f, 2048.0f}));
  Array b = vec<float>({1.0f, 3.0f}).astype(bfloat16);
  EXPECT_EQ((b * b).to_vector<float>(), (std::vector<float>{1.0f, 9.0f}));
}

TEST(Elementwise, UnaryMathMatchesTheCppLibrary) {
  std::vector<double> x{-2.5, -0.5, 0.0, 0.5, 2.5};
  Array a = vec<double>(x);
  auto check = [&](const Array& got, double (*ref)(double)) {
    auto v = got.to_vector<double>();
    for (size_t i = 0; i < x.size(); ++i) EXPECT_DOUBLE_EQ(v[i], ref(x[i])) << i;
  };
  check(exp(a), [](double v) { return std::exp(v); });
  check(tanh(a), [](double v) { return std::tanh(v); });
  check(sigmoid(a), [](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  check(relu(a), [](double v) { return v > 0 ? v : 0.0; });
  check(round(a), [](double v) { return std::nearbyint(v); });  // half to even: -2, -0, 0, 0, 2
  check(abs(a), [](double v) { return std::fabs(v); });
  EXPECT_EQ(round(a).to_vector<double>(), (std::vector<double>{-2, -0.0, 0, 0, 2}));
}

TEST(Elementwise, WhereAndClip) {
  Array c = vec<bool>({true, false, true});
  EXPECT_EQ(where(c, vec<int32_t>({1, 2, 3}), 0).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 3}));
  EXPECT_EQ(where(c, 1.5, vec<float>({9, 9, 9})).dtype(), float32);
  EXPECT_EQ(clip(arange(6, int32), 1, 4).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 2, 3, 4, 4}));
}

// NumPy reads where's condition as a bool only: np.where(300, x, y) is x (uint8), np.where(256, ...)
// too (bool(256) is True, not uint8(256) = 0), np.where(0, x, y) is y. No range check applies to it.
TEST(Elementwise, WhereScalarConditionIsReadAsBoolWithoutRangeCheck) {
  Array x = vec<uint8_t>({1, 2, 3}), y = vec<uint8_t>({7, 8, 9});
  Array r = where(300, x, y);
  EXPECT_EQ(r.dtype(), uint8);
  EXPECT_EQ(r.to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(where(256, x, y).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(where(-5, x, 4).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(where(0, x, y).to_vector<uint8_t>(), (std::vector<uint8_t>{7, 8, 9}));
  // The value operands are still checked: 300 does not fit uint8 (NumPy 2 raises OverflowError).
  EXPECT_THROW((void)where(vec<bool>({true, false, true}), x, 300), ValueError);
}

TEST(Elementwise, ComparisonAndLogicalOperators) {
  Array a = arange(4, int32);
  EXPECT_EQ((a >= 2).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(((a == 1) | (a == 3)).to_vector<bool>(), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ((!(a < 2)).to_vector<bool>(), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ((a ^ 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 3, 2}));
  EXPECT_EQ(logical_xor(a, 1).to_vector<bool>(), (std::vector<bool>{true, false, false, false}));
}

TEST(Elementwise, LargeArraysTakeTheParallelPathCorrectly) {
  const int64_t n = (1 << 20) + 7;
  Array a = arange(n, int64);
  Array b = (a * 3 + 1).sum();
  EXPECT_EQ(b.item<int64_t>(), 3 * (n - 1) * n / 2 + n);
  Array t = arange(n, float64).reshape({n}).slice(0, std::nullopt, std::nullopt, -1);
  auto v = (t + 0.5).to_vector<double>();
  EXPECT_EQ(v.front(), static_cast<double>(n - 1) + 0.5);
  EXPECT_EQ(v.back(), 0.5);
}

TEST(Elementwise, TemporariesLendTheirMemoryToTheResult) {
  const int64_t n = 1 << 17;  // 512 KiB of float32: above the 256 KiB elision threshold
  Array x = arange(n, float32);
  Array t = x * 2;
  void* p = t.data_ptr();
  Array r = std::move(t) + 1;  // t is given up: its buffer holds the result
  EXPECT_EQ(r.data_ptr(), p);
  auto v = r.to_vector<float>();
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[n - 1], 2.0f * static_cast<float>(n - 1) + 1.0f);
  // A named array, a view, a dtype change or a broadcast never lends its memory.
  Array named = x * 2;
  Array r2 = named + 1;
  EXPECT_NE(r2.data_ptr(), named.data_ptr());
  EXPECT_EQ(named.to_vector<float>()[1], 2.0f);
  Array i = arange(n, int32);
  Array f = (i * 1) * 2.5;  // int32 temporary, float64 result: a new array
  EXPECT_EQ(f.dtype(), float64);
  EXPECT_EQ(f.to_vector<double>()[2], 5.0);
  Array col = arange(n, float32).reshape({n, 1});
  Array outer = (col * 1) + arange(2, float32);  // the result is (n, 2): larger than the temporary
  EXPECT_EQ(outer.shape(), (Shape{n, 2}));
  EXPECT_EQ(outer.to_vector<float>()[3], 2.0f);
  // The benchmarks' fused chain (docs/architecture.md) through temporaries equals the same chain through named arrays.
  Array y = random::normal({n}, float32);
  Array chained = tanh(y * 1.5f + 0.3f) * y - exp(-y * y) * 0.5f;
  Array a1 = y * 1.5f, a2 = a1 + 0.3f, a3 = tanh(a2), a4 = a3 * y, b1 = -y, b2 = b1 * y, b3 = exp(b2), b4 = b3 * 0.5f;
  Array named_chain = a4 - b4;
  EXPECT_EQ(chained.to_vector<float>(), named_chain.to_vector<float>());
}
