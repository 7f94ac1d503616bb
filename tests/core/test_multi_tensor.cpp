// Fused::each (multi-tensor apply) on the CPU: the same bits as calling the fused function once per tensor
// (out=), a float64 reference computed by hand, many tensors of odd sizes, tensors whose arrays are not dense
// (run on their own), a shared 0-d argument, and the argument checks with their messages.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "kiln/kiln.hpp"
#include "test_util.hpp"

using namespace kiln;
using kiln_test::expect_error;

namespace {

const auto adam_like = [](auto p, auto g, auto m, auto v, auto b1, auto b2, auto step, auto eps) {
  auto m2 = m * b1 + g * (1.0 - b1);
  auto v2 = v * b2 + g * g * (1.0 - b2);
  return std::tuple{p - m2 / (sqrt(v2) + eps) * step, m2, v2};
};

std::vector<Array> random_list(const std::vector<int64_t>& sizes, DType dtype, uint64_t seed) {
  random::seed(seed);
  std::vector<Array> list;
  for (int64_t n : sizes) list.push_back(random::normal({n}, 0.0, 1.0, dtype, cpu()));
  return list;
}

std::vector<Array> copies(const std::vector<Array>& list) {
  std::vector<Array> out;
  for (const Array& a : list) out.push_back(a.copy());
  return out;
}

template <class T>
bool same_bits(const Array& a, const Array& b) {
  const std::vector<T> x = a.to_vector<T>(), y = b.to_vector<T>();
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0);
}

/// Odd sizes around the GPU chunk (8192) and table, more tensors than one launch's table takes.
std::vector<int64_t> odd_sizes() {
  std::vector<int64_t> sizes = {1, 7, 8191, 8192, 8193, 3 * 8192 + 5, 0};
  for (int i = 0; i < 300; ++i) sizes.push_back(1 + (i * 37) % 301);
  return sizes;
}

template <class T>
void each_equals_per_tensor(DType dtype) {
  const auto f = fuse(adam_like, "adam_like");
  const std::vector<int64_t> sizes = odd_sizes();
  const std::vector<Array> p = random_list(sizes, dtype, 1), g = random_list(sizes, dtype, 2),
                           m = random_list(sizes, dtype, 3), v0 = random_list(sizes, dtype, 4);
  std::vector<Array> v;
  for (const Array& x : v0) v.push_back(square(x));  // second moments are non-negative
  std::vector<Array> p1 = copies(p), m1 = copies(m), v1 = copies(v);
  std::vector<Array> p2 = copies(p), m2 = copies(m), v2 = copies(v);
  for (int step = 0; step < 2; ++step) {
    f.each({p1, m1, v1}, p1, g, m1, v1, 0.9, 0.999, 0.01, 1e-8);
    for (size_t i = 0; i < sizes.size(); ++i)
      f.out({p2[i], m2[i], v2[i]}, p2[i], g[i], m2[i], v2[i], 0.9, 0.999, 0.01, 1e-8);
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_TRUE(same_bits<T>(p1[i], p2[i])) << "parameter " << i << " of " << sizes[i];
    EXPECT_TRUE(same_bits<T>(m1[i], m2[i])) << "first moment " << i;
    EXPECT_TRUE(same_bits<T>(v1[i], v2[i])) << "second moment " << i;
  }
}

}  // namespace

TEST(MultiTensor, EachGivesThePerTensorBitsFloat32) { each_equals_per_tensor<float>(float32); }
TEST(MultiTensor, EachGivesThePerTensorBitsFloat64) { each_equals_per_tensor<double>(float64); }

TEST(MultiTensor, SgdStepMatchesAFloat64ReferenceByHand) {
  const auto sgd = fuse([](auto p, auto g, auto lr, auto wd) { return p - (g + p * wd) * lr; }, "sgd_test");
  std::vector<Array> ps = {from_data(std::vector<double>{1.0, -2.0, 3.5}), from_data(std::vector<double>{0.25}),
                           from_data(std::vector<double>{4.0, 8.0})};
  const std::vector<Array> gs = {from_data(std::vector<double>{0.5, 0.5, -1.0}), from_data(std::vector<double>{2.0}),
                                 from_data(std::vector<double>{-0.5, 1.0})};
  sgd.each({ps}, ps, gs, 0.1, 0.01);
  // p - 0.1 (g + 0.01 p), by hand
  EXPECT_EQ(ps[0].to_vector<double>(),
            (std::vector<double>{1.0 - (0.5 + 1.0 * 0.01) * 0.1, -2.0 - (0.5 + -2.0 * 0.01) * 0.1,
                                 3.5 - (-1.0 + 3.5 * 0.01) * 0.1}));
  EXPECT_EQ(ps[1].to_vector<double>(), (std::vector<double>{0.25 - (2.0 + 0.25 * 0.01) * 0.1}));
  EXPECT_EQ(ps[2].to_vector<double>(),
            (std::vector<double>{4.0 - (-0.5 + 4.0 * 0.01) * 0.1, 8.0 - (1.0 + 8.0 * 0.01) * 0.1}));
}

TEST(MultiTensor, ASharedZeroDArrayIsReadByEveryTensor) {
  const auto scale = fuse([](auto g, auto s) { return g * s; }, "scale_test");
  std::vector<Array> gs = {from_data(std::vector<float>{1, 2, 3}), from_data(std::vector<float>{-4}),
                           from_data(std::vector<float>{0.5f, 6})};
  const Array s = full({}, 0.5, float32, cpu());
  scale.each({gs}, gs, s);
  EXPECT_EQ(gs[0].to_vector<float>(), (std::vector<float>{0.5f, 1, 1.5f}));
  EXPECT_EQ(gs[1].to_vector<float>(), (std::vector<float>{-2}));
  EXPECT_EQ(gs[2].to_vector<float>(), (std::vector<float>{0.25f, 3}));
}

TEST(MultiTensor, TensorsThatAreNotDenseRunOnTheirOwn) {
  const auto axpy = fuse([](auto y, auto x, auto a) { return y + x * a; }, "axpy_test");
  // A transposed output over a C-contiguous input, a broadcast row, a channels-last pair and a plain pair.
  Array y0 = zeros({3, 4}, float32, cpu()).transpose();  // (4, 3), strides (1, 4)
  Array x0 = arange(12, float32).reshape({4, 3});
  Array y1 = zeros({2, 3}, float32, cpu());
  Array x1 = from_data(std::vector<float>{1, 2, 3}).reshape({1, 3});
  Array y2 = to_channels_last(ones({2, 3, 2, 2}, float32, cpu()));
  Array x2 = to_channels_last(arange(24, float32).reshape({2, 3, 2, 2}));
  Array y3 = ones({5}, float32, cpu());
  Array x3 = arange(5, float32);
  std::vector<Array> ys = {y0, y1, y2, y3}, xs = {x0, x1, x2, x3};
  axpy.each({ys}, ys, xs, 2.0);
  std::vector<float> want0;
  for (int i = 0; i < 12; ++i) want0.push_back(2.0f * static_cast<float>(i));
  EXPECT_EQ(y0.to_vector<float>(), want0);  // logical order
  EXPECT_EQ(y1.to_vector<float>(), (std::vector<float>{2, 4, 6, 2, 4, 6}));
  std::vector<float> want2;
  for (int i = 0; i < 24; ++i) want2.push_back(1.0f + 2.0f * static_cast<float>(i));
  EXPECT_EQ(y2.to_vector<float>(), want2);
  EXPECT_EQ(y3.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9}));
}

TEST(MultiTensor, AnEmptyListDoesNothing) {
  const auto f = fuse([](auto x) { return x * 2; }, "double_test");
  std::vector<Array> none;
  f.each({none}, none);
}

TEST(MultiTensor, ErrorsNameTheListAndTheFix) {
  const auto f = fuse([](auto p, auto g) { return p - g; }, "step_test");
  std::vector<Array> ps = {zeros({3}), zeros({4})};
  std::vector<Array> three = {zeros({3}), zeros({4}), zeros({5})};
  expect_error<ValueError>([&] { f.each({ps}, ps, three); },
                           {"fuse(step_test).each", "argument 1 has 3 arrays", "one array per tensor"});
  std::vector<Array> mixed = {zeros({3}), zeros({4}, float64)};
  expect_error<DTypeError>([&] { f.each({ps}, ps, mixed); },
                           {"fuse(step_test).each", "argument 1 of tensor 1", "float64", "once per dtype"});
  std::vector<Array> wrong_shape = {zeros({3}), zeros({2, 4})};
  expect_error<ShapeError>([&] { f.each({ps}, ps, wrong_shape); }, {"output 0 of tensor 1", "(2, 4)"});
  std::vector<Array> undefined = {zeros({3}), Array()};
  expect_error<ValueError>([&] { f.each({undefined}, ps, ps); }, {"output 0 of tensor 1", "undefined"});
  // Outputs overlapping each other, or an input of another tensor.
  Array base = zeros({6});
  std::vector<Array> overlapping = {base.slice(0, 0, 4), base.slice(0, 2, 6)};
  std::vector<Array> gs = {zeros({4}), zeros({4})};
  expect_error<ValueError>([&] { f.each({overlapping}, overlapping, gs); }, {"overlaps", "separate arrays"});
  std::vector<Array> qs = {zeros({3}), zeros({3})};
  std::vector<Array> crossed = {qs[1], qs[0]};
  expect_error<ValueError>([&] { f.each({qs}, crossed, crossed); }, {"of tensor", "overlaps"});
  // A reduction, and an in-place write autograd would miss.
  const auto norm = fuse([](auto x) { return sum(x); }, "norm_test");
  std::vector<Array> scalars = {zeros({}), zeros({})};
  expect_error<ValueError>([&] { norm.each({scalars}, ps); }, {"reduces", "once per tensor"});
  std::vector<Array> leaves = {zeros({3}).set_requires_grad()};
  std::vector<Array> grads = {zeros({3})};
  expect_error<ValueError>([&] { f.each({leaves}, leaves, grads); }, {"requires grad", "NoGradGuard"});
}
