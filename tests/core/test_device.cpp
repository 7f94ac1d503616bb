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

TEST(Device, PeakBf16TflopsIsTheDatasheetFigure) {
  // Hand-computed: SMs x clock x dense bfloat16 FLOPs per SM and clock.
  DeviceProperties h100{.name = "NVIDIA H100 80GB HBM3", .major = 9, .minor = 0, .multiprocessors = 132};
  h100.clock_mhz = 1980;  // the reported boost; NVIDIA's 989.4 TFLOP/s uses 1830 MHz
  EXPECT_NEAR(peak_bf16_tflops(h100), 132 * 4096 * 1830e6 / 1e12, 1e-9);
  EXPECT_NEAR(peak_bf16_tflops(h100), 989.4, 0.1);
  DeviceProperties pcie = h100;
  pcie.name = "NVIDIA H100 PCIe";
  pcie.multiprocessors = 114;
  EXPECT_NEAR(peak_bf16_tflops(pcie), 756.0, 0.5);
  DeviceProperties a100{.name = "NVIDIA A100-SXM4-80GB", .major = 8, .minor = 0, .multiprocessors = 108};
  a100.clock_mhz = 1410;
  EXPECT_NEAR(peak_bf16_tflops(a100), 311.9, 0.1);  // NVIDIA's 312
  DeviceProperties turing{.name = "Tesla T4", .major = 7, .minor = 5, .multiprocessors = 40};
  turing.clock_mhz = 1590;
  EXPECT_EQ(peak_bf16_tflops(turing), 0.0);  // no bfloat16 tensor cores
  EXPECT_EQ(peak_bf16_tflops(device_properties(cpu())), 0.0);
}
