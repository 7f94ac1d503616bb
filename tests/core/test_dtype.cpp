// DType names, parsing, promotion (NumPy 2 table, hand-checked) and 16-bit float conversion.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/kiln.hpp"

using namespace kiln;

TEST(DType, ItemsizesMatchNumPy) {
  EXPECT_EQ(itemsize(bool_), 1);
  EXPECT_EQ(itemsize(int16), 2);
  EXPECT_EQ(itemsize(int64), 8);
  EXPECT_EQ(itemsize(float16), 2);
  EXPECT_EQ(itemsize(bfloat16), 2);
  EXPECT_EQ(itemsize(float64), 8);
}

TEST(DType, ParsesNamesAndNumPyCodes) {
  EXPECT_EQ(parse_dtype("float32"), float32);
  EXPECT_EQ(parse_dtype("f4"), float32);
  EXPECT_EQ(parse_dtype("<f8"), float64);
  EXPECT_EQ(parse_dtype("int32"), int32);
  EXPECT_EQ(parse_dtype("i8"), int64);
  EXPECT_EQ(parse_dtype("|b1"), bool_);
  EXPECT_EQ(parse_dtype("u1"), uint8);
  EXPECT_EQ(parse_dtype("bf16"), bfloat16);
  for (int i = 0; i < kNumDTypes; ++i) EXPECT_EQ(parse_dtype(dtype_name(DType(i))), DType(i));
}

TEST(DType, FindDtypeReadsWhatParseDtypeReadsAndNeverThrows) {
  EXPECT_EQ(find_dtype("<f8"), float64);
  EXPECT_EQ(find_dtype("double"), float64);
  EXPECT_EQ(find_dtype("int"), int64);  // NumPy: np.dtype("int") is int64
  EXPECT_EQ(find_dtype("float"), float64);  // np.dtype("float") is float64
  EXPECT_EQ(parse_dtype("float"), float64);
  EXPECT_EQ(parse_dtype("int"), int64);
  EXPECT_EQ(find_dtype("?"), bool_);
  EXPECT_EQ(find_dtype("complex64"), complex64);
  EXPECT_EQ(find_dtype("complex32"), std::nullopt);
  EXPECT_EQ(find_dtype(""), std::nullopt);
  EXPECT_EQ(find_dtype("long long"), std::nullopt);  // a C spelling, not a NumPy name
}

TEST(DType, UnknownNameThrowsWithTheValidNames) {
  try {
    parse_dtype("complex32");
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("complex32"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("complex128"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos);
  }
}

TEST(DType, PromotionFollowsNumPy2) {
  // Values from np.promote_types.
  EXPECT_EQ(promote_types(int8, uint8), int16);
  EXPECT_EQ(promote_types(int32, float32), float64);
  EXPECT_EQ(promote_types(int16, float16), float32);
  EXPECT_EQ(promote_types(int8, float16), float16);
  EXPECT_EQ(promote_types(bool_, int8), int8);
  EXPECT_EQ(promote_types(uint8, int64), int64);
  EXPECT_EQ(promote_types(float16, float32), float32);
  EXPECT_EQ(promote_types(bfloat16, float16), float32);
  for (int a = 0; a < kNumDTypes; ++a)
    for (int b = 0; b < kNumDTypes; ++b) EXPECT_EQ(promote_types(DType(a), DType(b)), promote_types(DType(b), DType(a)));
}

TEST(DType, WeakScalarsFollowNep50) {
  EXPECT_EQ(promote_with_scalar(int8, Scalar(1)), int8);
  EXPECT_EQ(promote_with_scalar(int8, Scalar(1.5)), float64);
  EXPECT_EQ(promote_with_scalar(float16, Scalar(1.5)), float16);
  EXPECT_EQ(promote_with_scalar(bool_, Scalar(2)), int64);
  EXPECT_EQ(promote_with_scalar(uint8, Scalar(true)), uint8);
}

TEST(DType, FloatResultTypeMatchesNumPyUfuncs) {
  EXPECT_EQ(float_result_type(int8), float16);
  EXPECT_EQ(float_result_type(int16), float32);
  EXPECT_EQ(float_result_type(int32), float64);
  EXPECT_EQ(float_result_type(bool_), float16);
  EXPECT_EQ(float_result_type(float32), float32);
}

TEST(Half, RoundTripsEveryFiniteHalf) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    uint16_t bits = static_cast<uint16_t>(b);
    if ((bits & 0x7c00) == 0x7c00 && (bits & 0x3ff)) continue;  // NaN payloads
    EXPECT_EQ(float_to_half(half_to_float(bits)), bits) << b;
  }
}

TEST(Half, RoundsToNearestEvenAndSaturatesToInf) {
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 1.0f / 2048)), 1.0f);           // tie -> even
  EXPECT_EQ(half_to_float(float_to_half(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie -> even (up)
  EXPECT_EQ(half_to_float(float_to_half(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(65520.0f))));
  EXPECT_EQ(half_to_float(float_to_half(5.9604645e-08f)), 5.9604645e-08f);  // smallest subnormal
  EXPECT_EQ(half_to_float(float_to_half(2.0e-08f)), 0.0f);
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(BFloat16, KeepsTheUpperHalfRoundedToNearestEven) {
  EXPECT_EQ(float(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(float(BFloat16(1.00390625f)), 1.0f);  // 1 + 2^-8: tie -> even
  EXPECT_EQ(float(BFloat16(1.01171875f)), 1.015625f);  // 1 + 3*2^-8: tie -> even (up)
  EXPECT_TRUE(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
}
