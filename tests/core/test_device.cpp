// Devices: naming, parsing, fallbacks without a GPU, and the current-device guard.
#include <gtest/gtest.h>

#include "kiln/kiln.hpp"

using namespace kiln;

TEST(Device, NamesAndParsing) {
  EXPECT_EQ(cpu().str(), "cpu");
  EXPECT_EQ((Device{DeviceType::CUDA, 1}).str(), "cuda:1");
  EXPECT_EQ(parse_device("cpu"), cpu());
  EXPECT_EQ(parse_device("cuda:2"), (Device{DeviceType::CUDA, 2}));
  EXPECT_EQ(parse_device("cuda"), (Device{DeviceType::CUDA, 0}));
  EXPECT_THROW(parse_device("tpu:0"), ValueError);
  EXPECT_THROW(parse_device("cuda:x"), ValueError);
}

TEST(Device, TryGpuFallsBackToTheCpu) {
  int n = num_gpus();
  EXPECT_GE(n, 0);
  if (n == 0) {
    EXPECT_EQ(try_gpu(), cpu());
    EXPECT_EQ(try_all_gpus(), std::vector<Device>{cpu()});
  }
  EXPECT_EQ(try_gpu(n), cpu());  // one past the last GPU
  EXPECT_EQ(try_gpu(-1), cpu());
}

TEST(Device, GpuOfAMissingIndexThrowsWithTheFix) {
  try {
    gpu(num_gpus());
    FAIL();
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("try_gpu"), std::string::npos);
  }
}

TEST(Device, GuardRestoresThePreviousDevice) {
  EXPECT_EQ(current_device(), cpu());
  {
    DeviceGuard g(cpu());
    EXPECT_EQ(zeros({2}).device(), cpu());
  }
  EXPECT_EQ(current_device(), cpu());
  EXPECT_THROW(DeviceGuard(Device{DeviceType::CUDA, num_gpus()}), DeviceError);
  EXPECT_EQ(current_device(), cpu());
}
