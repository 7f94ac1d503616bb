// Creation functions against hand-computed values (and NumPy's documented semantics).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.hpp"

using namespace kiln;

TEST(Creation, ZerosOnesFullHaveShapeDtypeAndValues) {
  Array z = zeros({2, 3});
  EXPECT_EQ(z.shape(), (Shape{2, 3}));
  EXPECT_EQ(z.dtype(), float32);
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones({4}, int8).to_vector<int8_t>(), std::vector<int8_t>(4, 1));
  Array f = full({2, 2}, 2.5, float16);
  EXPECT_EQ(f.dtype(), float16);
  EXPECT_EQ(f.to_vector<float>(), std::vector<float>(4, 2.5f));
  EXPECT_EQ(full({3}, 7).dtype(), int64);
  EXPECT_EQ(full({3}, true).dtype(), bool_);
  EXPECT_EQ(full({3}, 1.5).dtype(), float32);
}

TEST(Creation, NegativeExtentThrowsValueError) {
  try {
    empty({2, -1});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("(2, -1)"), std::string::npos);
  }
}

TEST(Creation, ArangeMatchesNumPy) {
  EXPECT_EQ(arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5).dtype(), int64);
  EXPECT_EQ(arange(2, 11, 3).to_vector<int64_t>(), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(arange(10, 0, -4).to_vector<int64_t>(), (std::vector<int64_t>{10, 6, 2}));
  EXPECT_EQ(arange(3, 3, 1).size(), 0);
  EXPECT_EQ(arange(5, 3, 1).size(), 0);
  Array f = arange(0.0, 1.0, 0.25);
  EXPECT_EQ(f.dtype(), float32);
  EXPECT_EQ(f.to_vector<float>(), (std::vector<float>{0.0f, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(arange(0, 10, 1, int32).dtype(), int32);
  EXPECT_THROW(arange(0, 10, 0), ValueError);
  // Lengths whose (span + step - 1) would overflow 64 bits (NumPy: np.arange(2, step=2**63 - 1) is [0]).
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(), kMin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(arange(int64_t{0}, int64_t{2}, kMax).to_vector<int64_t>(), (std::vector<int64_t>{0}));
  EXPECT_EQ(arange(int64_t{0}, int64_t{2}, kMax, float32).to_vector<float>(), (std::vector<float>{0.0f}));
  EXPECT_EQ(arange(kMin, kMax, int64_t{1} << 62).to_vector<int64_t>(),
            (std::vector<int64_t>{kMin, -(int64_t{1} << 62), 0, int64_t{1} << 62}));
  EXPECT_EQ(arange(int64_t{0}, int64_t{-10}, int64_t{-3}).to_vector<int64_t>(), (std::vector<int64_t>{0, -3, -6, -9}));
  EXPECT_EQ(arange(kMax, kMin, kMin).to_vector<int64_t>(), (std::vector<int64_t>{kMax, -1}));
  EXPECT_THROW(arange(kMin, kMax, int64_t{1}), ValueError);  // 2^64 - 1 elements
}

TEST(Creation, LinspaceIncludesStopExactly) {
  Array l = linspace(0.0, 1.0, 5, true, float64);
  EXPECT_EQ(l.to_vector<double>(), (std::vector<double>{0.0, 0.25, 0.5, 0.75, 1.0}));
  Array m = linspace(0.0, 1.0, 4, false, float64);
  EXPECT_EQ(m.to_vector<double>(), (std::vector<double>{0.0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(linspace(0.1, 0.7, 7, true, float64).to_vector<double>().back(), 0.7);
  EXPECT_EQ(linspace(3.0, 4.0, 1, true, float64).to_vector<double>(), (std::vector<double>{3.0}));
  EXPECT_THROW(linspace(0, 1, -1), ValueError);
}

TEST(Creation, EyeWithOffsetDiagonals) {
  EXPECT_EQ(eye(3).to_vector<float>(), (std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(eye(2, 3, 1, int32).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0, 0, 0, 1}));
  EXPECT_EQ(eye(3, 2, -1, int32).to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 1, 0, 0, 1}));
  EXPECT_EQ(eye(2, 2, 5).to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(Creation, LikeFunctionsKeepShapeAndDtype) {
  Array a = arange(6, int16).reshape({2, 3});
  EXPECT_EQ(zeros_like(a).shape(), a.shape());
  EXPECT_EQ(zeros_like(a).dtype(), int16);
  EXPECT_EQ(ones_like(a, float64).dtype(), float64);
  EXPECT_EQ(full_like(a, 9).to_vector<int16_t>(), std::vector<int16_t>(6, 9));
  EXPECT_EQ(empty_like(a).shape(), a.shape());
}

TEST(Creation, FromDataCopiesTheValues) {
  std::vector<float> v{1, 2, 3, 4, 5, 6};
  Array a = from_data(v, Shape{2, 3});
  v[0] = 100;  // the array owns a copy
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(from_data(std::vector<bool>{true, false}).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_THROW(from_data(v, Shape{4}), ShapeError);
  Array s = scalar_array(3.5);
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.dtype(), float64);
  EXPECT_EQ(s.item<double>(), 3.5);
}

TEST(Creation, ItemOfALargerArrayThrows) {
  EXPECT_THROW(zeros({2}).item<float>(), ValueError);
  EXPECT_THROW(Array().item<float>(), ValueError);
}

TEST(Creation, LinspaceRoundsLikeNumPyWithoutFusedMultiplyAdd) {
  // np.linspace(-20, 100, 51, dtype=np.uint8)[10] == 4: -20 + 10 * 2.4 = 4.000000000000002 in two
  // roundings, 3.99999... with a fused multiply-add.
  EXPECT_EQ(linspace(-20, 100, 51, true, uint8).to_vector<uint8_t>()[10], 4);
}
