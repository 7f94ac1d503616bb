// The option structs in the designated-initialiser forms the docs write ({.warmup = 3, .repeat = 20}, ...;
// docs/measuring.md, docs/gpu.md).
// This file is compiled with -Wall -Wextra -Wmissing-field-initializers -Werror (tests/CMakeLists.txt; kiln itself
// builds with -Wno-missing-field-initializers, users do not):
// a member without a default member initialiser would make GCC's -Wmissing-field-initializers (part of
// -Wextra) fail the build here, as it would warn in a user's code. Each form's omitted fields keep their
// documented defaults.
#include <gtest/gtest.h>

#include "kiln/kiln.hpp"
#include "kiln/train.hpp"

using namespace kiln;

TEST(ReadmeOptions, bench_options_in_the_readme_form_keep_the_other_defaults) {
  const BenchOptions o = {.warmup = 3, .repeat = 20};
  EXPECT_EQ(o.warmup, 3);
  EXPECT_EQ(o.repeat, 20);
  EXPECT_EQ(o.max_seconds, 10.0);
  EXPECT_TRUE(o.devices.empty());
  EXPECT_FALSE(o.flush_l2);
  EXPECT_TRUE(o.name.empty());
  // The docs' call, timing the host only.
  const BenchResult r = bench("noop", [] {}, {.warmup = 1, .repeat = 2, .devices = {cpu()}});
  EXPECT_EQ(r.repeats(), 2);
}

TEST(ReadmeOptions, array_stream_and_transfer_options_in_the_readme_form) {
  const ArrayOptions pinned = {.pinned = true};
  EXPECT_TRUE(pinned.pinned);
  const StreamOptions stream = {.non_blocking = true, .priority = -1};
  EXPECT_TRUE(stream.non_blocking);
  EXPECT_EQ(stream.priority, -1);
  const TransferOptions transfer = {.non_blocking = true};
  EXPECT_TRUE(transfer.non_blocking);
  const PrintOptions print = {.precision = 3};
  EXPECT_EQ(print.threshold, 1000);
  EXPECT_EQ(print.precision, 3);
}

TEST(ReadmeOptions, kernel_and_module_options_in_the_readme_form) {
  const ElementwiseKernelOptions elementwise = {.options = {"--use_fast_math"},
                                                .preamble = "__device__ float sq(float v) { return v * v; }"};
  EXPECT_EQ(elementwise.options.size(), 1u);
  const ReductionKernelOptions reduction = {.reduce_type = "double"};
  EXPECT_TRUE(reduction.options.empty());
  EXPECT_TRUE(reduction.preamble.empty());
  EXPECT_EQ(reduction.reduce_type, "double");
  const RawModuleOptions module = {.name_expressions = {"scale<float>"}};
  EXPECT_FALSE(module.device.has_value());
  EXPECT_TRUE(module.name.empty());
  const RawModuleOptions with_options = {.options = {"--use_fast_math", "-DN=4"}};
  EXPECT_EQ(with_options.options.size(), 2u);
  const LaunchOptions launch = {.shared_mem = 64 << 10};
  EXPECT_EQ(launch.shared_mem, size_t{64} << 10);
  EXPECT_FALSE(launch.stream.has_value());
}

TEST(ReadmeOptions, nn_options_in_the_readme_form_keep_the_other_defaults) {
  const optim::SGDOptions sgd = {.lr = 0.1, .momentum = 0.9};
  EXPECT_EQ(sgd.weight_decay, 0.0);
  EXPECT_FALSE(sgd.nesterov);
  const optim::AdamOptions adam = {.lr = 1e-3};
  EXPECT_EQ(adam.beta2, 0.999);
  const data::DataLoaderOptions loader = {.batch_size = 100, .shuffle = true, .device = cpu()};
  EXPECT_FALSE(loader.drop_last);
  EXPECT_EQ(loader.workers, 2);
  const train::FitOptions fit = {.epochs = 20, .log_path = "log.jsonl"};
  EXPECT_TRUE(fit.accuracy);
  EXPECT_TRUE(fit.on_epoch_end.empty());
  const GradcheckOptions check = {.eps = 1e-6};
  EXPECT_EQ(check.rtol, 1e-3);
}
