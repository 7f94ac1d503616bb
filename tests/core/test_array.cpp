// Array basics: copies, casts, device moves, in-place assignment and compound operators.
#include <gtest/gtest.h>

#include <cmath>

#include "kiln/kiln.hpp"

using namespace kiln;

TEST(Array, ToSameDeviceReturnsSameStorage) {
  Array a = arange(4, float32);
  Array b = a.to(a.device());
  EXPECT_TRUE(b.shares_storage(a));
  EXPECT_EQ(b.data_ptr(), a.data_ptr());
}

TEST(Array, ToAMissingGpuThrowsDeviceError) {
  Array a = arange(4, float32);
  EXPECT_THROW(a.to(Device{DeviceType::CUDA, num_gpus()}), DeviceError);
}

TEST(Array, ToAMissingGpuNamesTheCallAndTheDeviceNotGpu) {
  const int n = num_gpus();
  const Device missing{DeviceType::CUDA, n};  // as `Device gpu0{DeviceType::CUDA, 0}` in user code
  const std::string name = "cuda:" + std::to_string(n);
  try {
    (void)arange(4, float32).to(missing);
    FAIL() << "no DeviceError";
  } catch (const DeviceError& e) {
    const std::string m = e.what();
    const std::string prefix =
        "to(" + name + "): " + name + " does not exist; this machine has " + std::to_string(n) + " usable GPU(s)";
    EXPECT_EQ(m.rfind(prefix, 0), 0u) << m;
    EXPECT_NE(m.find("try_gpu(" + std::to_string(n) + ")"), std::string::npos) << m;
    EXPECT_EQ(m.find("gpu(" + std::to_string(n) + "):"), std::string::npos) << "the user never called gpu(): " << m;
  }
}

TEST(Array, CompoundAssignmentThatWouldChangeTheDtypeSpeaksOfTheArrayNotOut) {
  Array r = zeros({3}, int64);
  try {
    r += 1.5;
    FAIL() << "no DTypeError";
  } catch (const DTypeError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m,
              "add (a += x): the result is float64, which the int64 array a cannot hold (an in-place update keeps "
              "a's dtype); write a = a + x for a new float64 array, or pass x of a's kind");
  }
  Array b = ones({2}, int32);
  try {
    b /= 2;  // true division gives float64
    FAIL() << "no DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("divide (a /= x): the result is float64, which the int32 array a"),
              std::string::npos)
        << e.what();
  }
  // An explicit out that is not an operand keeps the out wording.
  Array iout = zeros({2}, int32);
  try {
    add(zeros({2}), 1, iout);
    FAIL() << "no DTypeError";
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("into out of dtype int32"), std::string::npos) << e.what();
  }
}

TEST(Array, CopyOwnsNewStorage) {
  Array a = arange(4, int32);
  Array c = a.copy();
  EXPECT_FALSE(c.shares_storage(a));
  c.fill(7);
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(c.to_vector<int32_t>(), (std::vector<int32_t>{7, 7, 7, 7}));
}

TEST(Array, ContiguousCopiesATransposedView) {
  Array a = arange(6, int32).reshape({2, 3});
  Array t = a.T();
  EXPECT_FALSE(t.is_contiguous());
  Array c = t.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector<int32_t>(), (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(a.contiguous().shares_storage(a));
}

TEST(Array, AstypeConvertsLikeCpp) {
  Array f = from_data(std::vector<float>{-1.75f, 0.0f, 2.5f, 300.0f});
  EXPECT_EQ(f.astype(int32).to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, 2, 300}));
  EXPECT_EQ(f.astype(bool_).to_vector<bool>(), (std::vector<bool>{true, false, true, true}));
  EXPECT_EQ(f.astype(float16).to_vector<float>(), (std::vector<float>{-1.75f, 0.0f, 2.5f, 300.0f}));
  EXPECT_EQ(f.astype(bfloat16).astype(float64).to_vector<double>(), (std::vector<double>{-1.75, 0, 2.5, 300}));
  EXPECT_TRUE(f.astype(float32).shares_storage(f));
}

TEST(Array, AssignBroadcastsIntoAView) {
  Array a = zeros({3, 4}, int32);
  a.index({Slice(1, 3), Slice()}).assign(arange(4, int32));
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 0, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_THROW(a.assign(arange(3, int32)), ShapeError);
}

TEST(Array, FillOnAStridedView) {
  Array a = zeros({6}, float64);
  a.slice(0, 0, std::nullopt, 2).fill(1.5);
  EXPECT_EQ(a.to_vector<double>(), (std::vector<double>{1.5, 0, 1.5, 0, 1.5, 0}));
}

TEST(Array, CompoundAssignmentWritesInPlace) {
  Array a = arange(4, float32);
  void* p = a.data_ptr();
  a += 1;
  a *= a;
  a -= arange(4, float32);
  a /= 2;
  EXPECT_EQ(a.data_ptr(), p);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{0.5f, 1.5f, 3.5f, 6.5f}));
}

TEST(Array, CompoundAssignmentRejectsAKindWideningCast) {
  Array a = arange(4, int32);
  try {
    a += 1.5;
    FAIL();
  } catch (const DTypeError& e) {
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos);
  }
  Array b = arange(4, int32);
  EXPECT_THROW(b /= 2, DTypeError);  // true division gives float64: not castable to int32
}

TEST(Array, CopyFromOnTheSameDeviceWritesIntoTheBuffer) {
  Array dst = zeros({2, 3}, float32);
  void* p = dst.data_ptr();
  dst.copy_from(arange(6, float32).reshape({2, 3}));
  EXPECT_EQ(dst.data_ptr(), p);
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_THROW(dst.copy_from(Array()), ValueError);
}

TEST(Array, PinnedMemoryNeedsTheCudaBackend) {
  Array a = arange(4, float32);
  if (!built_with_cuda()) {
    try {
      (void)a.pin_memory();
      FAIL() << "pin_memory must throw in a CPU-only build";
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("CUDA"), std::string::npos) << e.what();
    }
  }
  EXPECT_FALSE(a.is_pinned());
  EXPECT_THROW((void)empty({2}, float32, Device{DeviceType::CUDA, 0}, ArrayOptions{.pinned = true}), DeviceError);
}
