// The device-neutral parts of RawModule / RawKernel (include/kiln/raw_module.hpp, src/core/raw_module.cpp):
// launch dimensions, how launch() arguments are described, and the errors of a build without CUDA.
// The CUDA side is tested in tests/cuda/test_raw_module.cpp.
#include <gtest/gtest.h>

#include <cstdint>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln_test::expect_error;

TEST(RawKernelFront, MakeKernelArgKeepsExactWidths) {
  const int32_t i32 = 1;
  const int64_t i64 = 2;
  const uint8_t u8 = 3;
  const double f64 = 4;
  const float f32 = 5;
  const Half f16(1.5f);
  const bool flag = true;
  float* pointer = nullptr;
  struct Case {
    detail::RawLaunchArg arg;
    const void* object;
    size_t size;
    const char* type_name;
  };
  const Case cases[] = {
      {detail::make_raw_launch_arg(i32), &i32, 4, "int32"},   {detail::make_raw_launch_arg(i64), &i64, 8, "int64"},
      {detail::make_raw_launch_arg(u8), &u8, 1, "uint8"},     {detail::make_raw_launch_arg(f64), &f64, 8, "float64"},
      {detail::make_raw_launch_arg(f32), &f32, 4, "float32"}, {detail::make_raw_launch_arg(f16), &f16, 2, "float16"},
      {detail::make_raw_launch_arg(flag), &flag, 1, "bool"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.type_name);
    EXPECT_EQ(c.arg.kind, detail::RawLaunchArg::Kind::Value);
    EXPECT_EQ(c.arg.value, c.object);
    EXPECT_EQ(c.arg.size, c.size);
    EXPECT_STREQ(c.arg.type_name, c.type_name);
  }
  const auto h = detail::make_raw_launch_arg(pointer), n = detail::make_raw_launch_arg(nullptr);
  EXPECT_EQ(h.kind, detail::RawLaunchArg::Kind::Pointer);
  EXPECT_EQ(h.size, 8u);
  EXPECT_EQ(n.kind, detail::RawLaunchArg::Kind::Pointer);
  const Array x;
  const auto arr = detail::make_raw_launch_arg(x);
  EXPECT_EQ(arr.kind, detail::RawLaunchArg::Kind::Array);
  EXPECT_EQ(arr.array, &x);
  EXPECT_EQ(arr.size, 8u);
}

TEST(RawKernelFront, Dim3ConvertsFromAnyIntegerType) {
  const Dim3 a = {3};
  EXPECT_EQ(a, (Dim3{3, 1, 1}));
  const size_t gx = 7;
  const int gy = 2;
  const Dim3 b = {gx, gy, 1};
  EXPECT_EQ(b.x, 7);
  EXPECT_EQ(b.y, 2);
  EXPECT_EQ(b.z, 1);
  const Dim3 saturated = {~uint64_t{0}};
  EXPECT_EQ(saturated.x, INT64_MAX);  // still rejected at launch
  EXPECT_EQ(Dim3{}, (Dim3{1, 1, 1}));
}

#ifndef KILN_WITH_CUDA
TEST(RawKernelFront, WithoutCudaEveryEntryPointThrowsDeviceError) {
  const std::string source = "extern \"C\" __global__ void k(int* p) { p[0] = 1; }";
  const std::vector<std::string> fragments = {"built without CUDA", "KILN_CUDA=OFF", "cmake --preset cuda"};
  expect_error<DeviceError>([&] { RawModule m(source); }, fragments);
  expect_error<DeviceError>([&] { (void)RawModule::compile_ptx(source); }, fragments);
  expect_error<DeviceError>([] { (void)RawModule::from_ptx(".version 8.0\n.target sm_80\n"); }, fragments);
  expect_error<DeviceError>(
      [] {
        (void)RawModule::from_cubin(
            std::string("\x7f"
                        "ELF",
                        4));
      },
      fragments);
}
#endif
