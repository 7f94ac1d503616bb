// User kernels' device-neutral checks that run before any device work (the GPU side and the
// rest of the argument checks are in tests/cuda/test_user_kernels.cpp).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/user_kernel.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln_test::expect_error;

namespace {

// operator() returns one output, so a kernel with two is refused before call() checks the device,
// allocates its outputs or launches: CPU arrays get the ValueError, not call()'s DeviceError.
TEST(UserKernelSingleOutput, ReductionKernelWithTwoOutputsRefusesOperatorCallBeforeRunning) {
  ReductionKernel sum_and_square("T x", "T s, T q", "x", "a + b", "s = a; q = a * a", "0", "sum_sq");
  ASSERT_EQ(sum_and_square.nout(), 2);
  Array x = ones({3, 4}, float32, cpu());
  expect_error<ValueError>([&] { (void)sum_and_square(x); }, {"sum_sq", "2 outputs", "use call({...})"});
  expect_error<ValueError>([&] { (void)sum_and_square({x}, 1, true); }, {"sum_sq", "2 outputs"});
  // The outputs passed in are not written either: the refusal comes first.
  Array s = full({3}, 7.0f, float32, cpu()), q = full({3}, 7.0f, float32, cpu());
  expect_error<ValueError>([&] { (void)sum_and_square({x, s, q}, 1); }, {"sum_sq", "2 outputs"});
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{7, 7, 7}));
  // call() itself reaches the device check.
  expect_error<DeviceError>([&] { (void)sum_and_square.call({x}, 1); }, {"sum_sq", "CUDA"});
}

TEST(UserKernelSingleOutput, ElementwiseKernelGivesTheSameMessage) {
  ElementwiseKernel split("T x", "T a, T b", "a = x; b = -x", "split");
  expect_error<ValueError>([&] { (void)split(ones({2}, float32, cpu())); }, {"split", "2 outputs", "use call({...})"});
}

// ReductionKernel checks its axes with kiln's reductions' plan: the same messages as kiln::sum, before
// the device check (so CPU arrays reach them).
TEST(UserKernelAxes, ReductionKernelAxisErrorsMatchKilnReductions) {
  ReductionKernel l2("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm");
  Array x = ones({3, 4}, float32, cpu());
  expect_error<ShapeError>(
      [&] {
        (void)l2(x, {1, -1});
      },
      {"l2norm", "duplicate axis -1 (axis 1 of an array of ndim 2)", "list each axis once"});
  expect_error<ShapeError>([&] { (void)l2(x, 2); },
                           {"l2norm", "axis 2 is out of bounds for an array of ndim 2 (shape (3, 4))", "[-2, 2)"});
  expect_error<ShapeError>([&] { (void)sum(x, 2); },
                           {"sum", "axis 2 is out of bounds for an array of ndim 2 (shape (3, 4))", "[-2, 2)"});
}

// reduce_type takes every name parse_dtype reads plus the C spellings NumPy lacks (signed char,
// long long, unsigned char); anything else is a ValueError naming the kernel.
TEST(UserKernelTypes, ReduceTypeTakesParseDtypeNamesAndCSpellings) {
  EXPECT_EQ(detail::parse_type_spec("f4", "k", "reduce_type").dtype, DType::Float32);
  EXPECT_EQ(detail::parse_type_spec("short", "k", "reduce_type").dtype, DType::Int16);
  EXPECT_EQ(detail::parse_type_spec("signed  char", "k", "reduce_type").dtype, DType::Int8);
  EXPECT_EQ(detail::parse_type_spec("unsigned char", "k", "reduce_type").dtype, DType::UInt8);
  EXPECT_EQ(detail::parse_type_spec("long long", "k", "reduce_type").dtype, DType::Int64);
  expect_error<ValueError>([] { (void)detail::parse_type_spec("complex32", "k", "reduce_type"); },
                           {"k: unknown reduce_type 'complex32'", "C type"});
}

}  // namespace

TEST(UserKernelNames, NamesMustBeIdentifiersAndNotKilnsOwnPrefix) {
  expect_error<ValueError>([] { ElementwiseKernel("float32 x", "float32 y", "y = x", "2fast"); },
                           {"'2fast'", "not a C++ identifier", "my_kernel"});
  expect_error<ValueError>([] { ElementwiseKernel("float32 x", "float32 y", "y = x", "kiln_copy"); },
                           {"'kiln_copy'", "starts with kiln_", "my_kernel"});
}
