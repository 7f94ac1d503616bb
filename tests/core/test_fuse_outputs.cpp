// kiln::fuse with several outputs, out= (in-place updates and the aliasing rule) and elementwise work after
// reductions, on the CPU (the same callables run on a GPU in tests/cuda/test_fuse_gpu.cpp): an Adam and an
// SGD-momentum step against float64 references computed by hand, softmax and log_softmax against float64 loops.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include "core/fuse_steps.hpp"
#include "core/fuse_test_util.hpp"
#include "core/fusion.hpp"
#include "kiln/kiln.hpp"
#include "harness/op_harness.hpp"
#include "test_util.hpp"

using namespace kiln;
using namespace kiln_test;

TEST(FuseOutputs, TupleResultGivesOneArrayPerOutput) {
  auto f = fuse([](auto x, auto y) { return std::tuple{x + y, x * y, (x > y).astype(int32)}; }, "three");
  Array x = from_data(std::vector<float>{1, 2, 3}), y = from_data(std::vector<float>{4, 0.5f, 3});
  auto [s, p, gt] = f(x, y);
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{5, 2.5f, 6}));
  EXPECT_EQ(p.to_vector<float>(), (std::vector<float>{4, 1, 9}));
  EXPECT_EQ(gt.dtype(), int32);
  EXPECT_EQ(gt.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0}));
  // A pair works too, and an output that is an argument is its own array (a copy).
  auto g = fuse([](auto a) { return std::pair{a, a * 2}; });
  auto [same, twice] = g(x);
  EXPECT_FALSE(same.shares_storage(x));
  EXPECT_EQ(same.to_vector<float>(), x.to_vector<float>());
  EXPECT_EQ(twice.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(kiln::detail::fusion_describe(*f.graph(x, y)).empty(), false);
  EXPECT_EQ(f.graph(x, y)->outputs.size(), 3u);
}

TEST(FuseOutputs, AdamStepInPlaceMatchesFloat64Reference) {
  const Shape shape{7, 9};
  const size_t n = 63;
  std::vector<double> p0 = test_values(n, 1), m0(n, 0.0), v0(n, 0.0);
  Array p = f32_array(p0, shape), m = zeros(shape, float32), v = zeros(shape, float32);
  const void* p_data = p.data_ptr();
  auto step = fuse(adam_fn, "adam");
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<std::vector<double>> grads;
  for (int t = 0; t < 5; ++t) {
    grads.push_back(test_values(n, 10 + static_cast<uint32_t>(t), 2.0));
    Array g = f32_array(grads.back(), shape);
    const double c1 = 1 - std::pow(b1, t + 1), c2 = 1 - std::pow(b2, t + 1);
    step.out({p, m, v}, p, g, m, v, lr, b1, b2, eps, c1, c2);
  }
  EXPECT_EQ(p.data_ptr(), p_data);  // updated in place
  EXPECT_EQ(step.cache_size(), 1u);
  const AdamState want = adam_reference({p0, m0, v0}, grads, lr, b1, b2, eps);
  expect_near(p, want.p, 2e-6);
  expect_near(m, want.m, 2e-6);
  expect_near(v, want.v, 2e-6);
  // Without out=: new arrays, the inputs untouched.
  Array g = f32_array(grads[0], shape);
  Array before = p.copy();
  auto [p2, m2, v2] = step(p, g, m, v, lr, b1, b2, eps, 0.5, 0.5);
  expect_equal(p, before);
  EXPECT_FALSE(p2.shares_storage(p));
}

TEST(FuseOutputs, SgdMomentumStepInPlaceMatchesFloat64Reference) {
  const size_t n = 40;
  std::vector<double> p0 = test_values(n, 3), b0 = test_values(n, 4, 0.1);
  Array p = f32_array(p0, {n}), buf = f32_array(b0, {n});
  auto step = fuse(sgd_fn, "sgd");
  const double lr = 0.05, mu = 0.9, wd = 1e-2;
  for (int t = 0; t < 4; ++t) {
    std::vector<double> g = test_values(n, 20 + static_cast<uint32_t>(t));
    step.out({p, buf}, p, f32_array(g, {n}), buf, lr, mu, wd);
    for (size_t i = 0; i < n; ++i) {
      b0[i] = mu * b0[i] + (g[i] + wd * p0[i]);
      p0[i] -= lr * b0[i];
    }
  }
  expect_near(p, p0, 1e-6);
  expect_near(buf, b0, 1e-6);
}

TEST(FuseOutputs, OutArraysAreCheckedAndOverlapsRefused) {
  auto f = fuse([](auto x, auto y) { return std::tuple{x + y, x - y}; }, "pair");
  Array x = arange(6, float32), y = ones({6}, float32);
  expect_error<ShapeError>([&] { (void)f.out({zeros({5}, float32)}, x, y); },
                           {"fuse(pair)", "out= array 0", "(5,)", "(6,)"});
  expect_error<DTypeError>(
      [&] {
        (void)f.out({Array(), zeros({6}, float64)}, x, y);
      },
      {"fuse(pair)", "out= array 1", "float64", "float32", "astype"});
  Array buffer = zeros({8}, float32);
  expect_error<ValueError>(
      [&] {
        (void)f.out({buffer.slice(0, 0, 6), buffer.slice(0, 2, 8)}, x, y);
      },
      {"out= array 1", "overlaps out= array 0"});
  Array z = arange(6, float32);
  EXPECT_NO_THROW((void)f.out({z.slice(0, 0, 6), Array()}, z, y));  // the same view of an input: fine
  EXPECT_EQ(z.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Array shifted = arange(7, float32);
  expect_error<ValueError>([&] { (void)f.out({shifted.slice(0, 1, 7)}, shifted.slice(0, 0, 6), y); },
                           {"fuse(pair)", "out= array 0", "overlaps argument 0", "same view"});
  expect_error<ValueError>([&] { (void)f.out({x, y, x}, x, y); }, {"3 out= arrays for 2 outputs"});
  // A reduced-shape output may not overwrite an input (other rows' elements still read it)...
  auto total = fuse([](auto a, auto b) { return sum(a, -1, true) + b; });
  Array rows = ones({2, 1}, float32);
  expect_error<ValueError>([&] { (void)total.out({rows}, ones({2, 3}, float32), rows); }, {"overlaps argument 1"});
  // ...but a full-shape one may: softmax in place (every reduction reads the row before it is written).
  Array logits = from_data(std::vector<double>{1, 2, 3, 1, 1, 1}).reshape({2, 3});
  fuse(softmax_fn).out({logits}, logits);
  expect_near(logits, {0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 1 / 3.0, 1 / 3.0, 1 / 3.0}, 1e-15);
  // In place on the very input: x + y into x, x - y into y (each replaced element by element).
  Array a = arange(4, float32), b = full({4}, 10.0f, float32);
  f.out({a, b}, a, b);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{10, 11, 12, 13}));
  EXPECT_EQ(b.to_vector<float>(), (std::vector<float>{-10, -9, -8, -7}));
}

TEST(FuseStages, SoftmaxAndLogSoftmaxMatchFloat64) {
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 17}, Shape{1}}) {
    const int64_t cols = shape.back(), rows = shape_numel(shape) / cols;
    std::vector<double> x = test_values(static_cast<size_t>(rows * cols), 5, 6.0);
    Array a = f32_array(x, shape);
    Array y = fuse(softmax_fn, "softmax")(a);
    EXPECT_EQ(y.shape(), shape);
    EXPECT_EQ(y.dtype(), float32);
    expect_near(y, softmax_reference(x, rows, cols, false), 1e-6);
    expect_near(fuse(log_softmax_fn)(a), softmax_reference(x, rows, cols, true), 1e-6);
    // float64 input: float64 throughout.
    expect_near(fuse(softmax_fn)(a.astype(float64)), softmax_reference(x, rows, cols, false), 1e-14);
  }
  // NumPy: scipy.special.softmax([[1, 2, 3], [1, 1, 1]], axis=-1)
  Array s = fuse(softmax_fn)(from_data(std::vector<double>{1, 2, 3, 1, 1, 1}).reshape({2, 3}));
  expect_near(s, {0.09003057317038046, 0.24472847105479767, 0.6652409557748219, 1 / 3.0, 1 / 3.0, 1 / 3.0}, 1e-15);
}

TEST(FuseStages, ElementwiseAfterReductionsAndReducedShapeOutputs) {
  Array a = arange(6, float32).reshape({2, 3});
  // sum + 1, a mean-centred copy, and (log-sum-exp, softmax) as two outputs of two shapes.
  EXPECT_EQ(fuse([](auto x) { return sum(x) + 1; })(a).item<float>(), 16.0f);
  Array centred = fuse([](auto x) { return x - mean(x, 0); })(a);
  EXPECT_EQ(centred.to_vector<float>(), (std::vector<float>{-1.5f, -1.5f, -1.5f, 1.5f, 1.5f, 1.5f}));
  auto both = fuse([](auto x) {
    auto m = max(x, 1, true);
    auto lse = m + log(sum(exp(x - m), 1, true));
    return std::tuple{lse, exp(x - lse)};
  });
  auto [lse, p] = both(a);
  EXPECT_EQ(lse.shape(), (Shape{2, 1}));
  // log(e^0 + e^1 + e^2) = 2.40760596444438, log(e^3 + e^4 + e^5) = 5.40760596444438
  expect_near(lse, {2.40760596444438, 5.40760596444438}, 1e-6);
  std::vector<double> x = {0, 1, 2, 3, 4, 5};
  expect_near(p, softmax_reference(x, 2, 3, false), 1e-6);
  // A reduction of a reduction, and reductions over other axes: the ops one by one.
  EXPECT_EQ(fuse([](auto v) { return sum(max(v, 0)); })(a).item<float>(), 3.0f + 4.0f + 5.0f);
  Array other = fuse([](auto v) { return sum(v, 0, true) + max(v, 1, true); })(a);
  EXPECT_EQ(other.to_vector<float>(), (std::vector<float>{5, 7, 9, 8, 10, 12}));
  // A dead reduction is not run.
  EXPECT_EQ(fuse([](auto v) {
              (void)sum(v);
              return v * 2;
            })(a)
                .to_vector<float>(),
            (std::vector<float>{0, 2, 4, 6, 8, 10}));
}

// A fused result keeps its arguments' channels-last layout, as the unfused ops' results do (on a GPU it was
// C-contiguous: a transposing kernel, and a copy wherever the next op wanted channels-last); a broadcast operand
// does not count, and C-contiguous arguments give a C-contiguous result.
TEST(FuseOutputs, ResultFollowsChannelsLastArguments) {
  auto f = fuse([](auto o, auto g, auto b) { return where(o > 0, g, 0.0) + b; }, "relu_grad_bias");
  for (Device d : harness::backends()) {
    const Array o = random::normal({2, 3, 4, 5}, 0.0, 1.0, float32, d),
                g = random::normal({2, 3, 4, 5}, 0.0, 1.0, float32, d);
    const Array b = random::normal({1, 3, 1, 1}, 0.0, 1.0, float32, d);
    const Array want = where(o > 0, g, 0.0) + b;
    const Array cl = f(to_channels_last(o), to_channels_last(g), b);
    EXPECT_TRUE(is_channels_last(cl) && !cl.is_contiguous()) << d.str();
    EXPECT_TRUE(array_equal(cl, want)) << d.str();
    const Array plain = f(o, g, b);
    EXPECT_TRUE(plain.is_contiguous()) << d.str();
    EXPECT_TRUE(array_equal(plain, want)) << d.str();
    const Array mixed = f(o, to_channels_last(g), b);  // as the unfused ops: channels-last when any operand is
    EXPECT_EQ(is_channels_last(mixed), is_channels_last(where(o > 0, to_channels_last(g), 0.0) + b)) << d.str();
    EXPECT_TRUE(array_equal(mixed, want)) << d.str();
  }
}
