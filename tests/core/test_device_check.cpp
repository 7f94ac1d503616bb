// check_in_range and the index checks built on it: at once on the CPU, at the next synchronisation on a GPU
// (a check kernel; no synchronisation when the values are good), recoverable, and captured in graphs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/debug.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln_test::expect_error;

namespace {

Array ints(const std::vector<int64_t>& v, Device d) { return from_data(v, Shape{static_cast<int64_t>(v.size())}, d); }

TEST(DeviceCheck, GoodValuesPassOnEveryBackend) {
  for (Device d : harness::backends()) {
    check_in_range(ints({0, 4, 9}, d), 0, 10, "label {value} out of range");
    check_in_range(ints({}, d), 0, 0, "never");  // nothing to check
    check_in_range(from_data(std::vector<int32_t>{-3, 2}, Shape{2}, d), -3, 3, "never");
    check_in_range(ints({5, 1, 7, 2}, d).reshape({2, 2}).T(), 1, 8, "never");  // a strided view
    synchronize(d);
  }
}

TEST(DeviceCheck, BadValueThrowsWithTheValueAndIsCleared) {
  for (Device d : harness::backends()) {
    expect_error<ValueError>(
        [&] {
          check_in_range(ints({0, 12, 3}, d), 0, 10, "my_op: label {value} is not in [0, 10)");
          synchronize(d);
        },
        {"my_op: label 12 is not in [0, 10)"});
    // Cleared once thrown: the next synchronisation does not throw it again.
    synchronize(d);
    EXPECT_EQ(ints({1, 2}, d).to_vector<int64_t>(), (std::vector<int64_t>{1, 2})) << d.str();
    // Negative values and the lower bound.
    expect_error<ValueError>(
        [&] {
          check_in_range(ints({-1}, d), 0, 10, "v={value}");
          (void)ints({1}, d).item<int64_t>();  // item() synchronises: it reports the error
        },
        {"v=-1"});
  }
}

TEST(DeviceCheck, RejectsNonIntegers) {
  for (Device d : harness::backends())
    expect_error<DTypeError>([&] { check_in_range(zeros({2}, float32, d), 0, 1, "x"); },
                             {"check_in_range", "float32", "astype(int64)"});
}

TEST(DeviceCheck, TakeAndIndexReportOutOfBoundsIndices) {
  for (Device d : harness::backends()) {
    const Array a = arange(10, float32, d);
    expect_error<ShapeError>(
        [&] {
          (void)take(a, ints({3, 10}, d));
          synchronize(d);
        },
        {"take", "index 10", "size 10", "[-10, 10)"});
    expect_error<ShapeError>(
        [&] {
          (void)a.index({ints({-11}, d)});
          synchronize(d);
        },
        {"index -11", "size 10"});
    // Good negative indices count from the end on every backend.
    EXPECT_EQ(take(a, ints({-1, -10, 2}, d)).to_vector<float>(), (std::vector<float>{9, 0, 2})) << d.str();
    if (d.is_cuda()) {
      // An index into an empty axis is an error at once (there is nothing to read safely).
      expect_error<ShapeError>([&] { (void)take(zeros({0}, float32, d), ints({0}, d)); }, {"take", "size 0"});
    }
  }
}

TEST(DeviceCheck, GpuChecksDoNotSynchronise) {
  for (Device d : harness::backends()) {
    if (!d.is_cuda()) continue;
    const Array a = arange(100, float32, d), idx = ints({1, 50, 99}, d), labels = ints({0, 2, 1}, d);
    const Array logits = random::normal({3, 3}, 0.0, 1.0, float32, d);
    (void)take(a, idx);  // compile the kernels first
    (void)nn::cross_entropy(logits, labels);
    SyncDebugGuard guard(SyncDebugMode::error);
    (void)take(a, idx);
    (void)nn::cross_entropy(logits, labels);
    check_in_range(idx, 0, 100, "x");
    EXPECT_EQ(guard.counters().syncs, 0u) << d.str();
  }
}

}  // namespace
