// Tests for basic indexing (Array::index, operator[], Array::slice): NumPy's
// semantics for integers, Python slices (negative steps, clamping), newaxis and
// ellipsis, checked against hand-computed values, strides and offsets.
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <string>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln {
namespace {

using Values = std::vector<int64_t>;

/// arange(n) as int64 reshaped to `shape`: element values equal their C-order position.
Array iota(const Shape& shape) { return arange(shape_numel(shape), int64).reshape(shape); }

using kiln_test::expect_error;

TEST(Indexing, integer_drops_the_axis_and_views_the_row) {
  Array a = iota({3, 4});
  Array row = a[1];
  EXPECT_EQ(row.shape(), (Shape{4}));
  EXPECT_EQ(row.strides(), (Shape{1}));
  EXPECT_EQ(row.offset(), 4);
  EXPECT_TRUE(row.shares_storage(a));
  EXPECT_EQ(row.to_vector<int64_t>(), (Values{4, 5, 6, 7}));
}

TEST(Indexing, negative_integer_counts_from_the_end) {
  Array a = iota({3, 4});
  EXPECT_EQ(a[-1].to_vector<int64_t>(), (Values{8, 9, 10, 11}));
  EXPECT_EQ(a[-3].to_vector<int64_t>(), (Values{0, 1, 2, 3}));
  EXPECT_EQ(a.index({-1, -2}).item<int64_t>(), 10);
}

TEST(Indexing, integers_on_every_axis_give_a_zero_d_view) {
  Array a = iota({2, 3, 4});
  Array e = a.index({1, 2, 3});
  EXPECT_EQ(e.ndim(), 0);
  EXPECT_EQ(e.offset(), 23);
  EXPECT_EQ(e.item<int64_t>(), 23);
  EXPECT_TRUE(e.shares_storage(a));
}

TEST(Indexing, integer_out_of_range_throws_shape_error_naming_index_axis_and_extent) {
  Array a = iota({3, 4});
  expect_error<ShapeError>([&] { (void)a[3]; }, {"index 3", "axis 0", "size 3", "(3, 4)"});
  expect_error<ShapeError>([&] { (void)a[-4]; }, {"index -4", "axis 0", "size 3"});
  expect_error<ShapeError>([&] { a.index({0, 4}); }, {"index 4", "axis 1", "size 4"});
  expect_error<ShapeError>([&] { a.index({Slice(), -5}); }, {"index -5", "axis 1", "size 4"});
}

TEST(Indexing, slice_with_start_stop_step) {
  Array a = iota({10});
  Array s = a.index({Slice(1, 8, 3)});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(s.strides(), (Shape{3}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(s.to_vector<int64_t>(), (Values{1, 4, 7}));
  EXPECT_EQ(a.index({Slice(-3, {})}).to_vector<int64_t>(), (Values{7, 8, 9}));
  EXPECT_EQ(a.index({Slice({}, -7)}).to_vector<int64_t>(), (Values{0, 1, 2}));
}

TEST(Indexing, negative_step_reverses_with_negative_strides) {
  Array a = iota({10});
  Array r = a.index({Slice({}, {}, -1)});
  EXPECT_EQ(r.strides(), (Shape{-1}));
  EXPECT_EQ(r.offset(), 9);
  EXPECT_EQ(r.to_vector<int64_t>(), (Values{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));
  // a[7:2:-2] -> 7, 5, 3
  Array s = a.index({Slice(7, 2, -2)});
  EXPECT_EQ(s.strides(), (Shape{-2}));
  EXPECT_EQ(s.to_vector<int64_t>(), (Values{7, 5, 3}));
  // a[::-3] -> 9, 6, 3, 0
  EXPECT_EQ(a.index({Slice({}, {}, -3)}).to_vector<int64_t>(), (Values{9, 6, 3, 0}));
  // a[-2::-4] -> 8, 4, 0
  EXPECT_EQ(a.index({Slice(-2, {}, -4)}).to_vector<int64_t>(), (Values{8, 4, 0}));
}

TEST(Indexing, slice_bounds_clamp_like_python) {
  Array a = iota({5});
  EXPECT_EQ(a.index({Slice(-100, 100)}).to_vector<int64_t>(), (Values{0, 1, 2, 3, 4}));
  EXPECT_EQ(a.index({Slice(100, -100, -2)}).to_vector<int64_t>(), (Values{4, 2, 0}));
  EXPECT_EQ(a.index({Slice(3, 1)}).shape(), (Shape{0}));
  EXPECT_EQ(a.index({Slice(10, {})}).shape(), (Shape{0}));
  EXPECT_EQ(a.index({Slice(1, 3, -1)}).shape(), (Shape{0}));
  EXPECT_EQ(a.index({Slice(-100, {}, -1)}).shape(), (Shape{0}));
  EXPECT_EQ(a.index({Slice({}, -100, -1)}).to_vector<int64_t>(), (Values{4, 3, 2, 1, 0}));
}

TEST(Indexing, slices_on_two_axes_compose_strides_and_offset) {
  Array a = iota({4, 5});
  // a[1:, ::-2] -> rows 1..3, columns 4, 2, 0
  Array v = a.index({Slice(1, {}), Slice({}, {}, -2)});
  EXPECT_EQ(v.shape(), (Shape{3, 3}));
  EXPECT_EQ(v.strides(), (Shape{5, -2}));
  EXPECT_EQ(v.offset(), 9);
  EXPECT_EQ(v.to_vector<int64_t>(), (Values{9, 7, 5, 14, 12, 10, 19, 17, 15}));
}

TEST(Indexing, newaxis_inserts_size_one_axes) {
  Array a = iota({2, 3});
  Array v = a.index({newaxis, Slice(), newaxis});
  EXPECT_EQ(v.shape(), (Shape{1, 2, 1, 3}));
  EXPECT_EQ(v.to_vector<int64_t>(), (Values{0, 1, 2, 3, 4, 5}));
  Array w = a.index({1, newaxis});  // a[1, None] -> shape (1, 3)
  EXPECT_EQ(w.shape(), (Shape{1, 3}));
  EXPECT_EQ(w.to_vector<int64_t>(), (Values{3, 4, 5}));
}

TEST(Indexing, ellipsis_stands_for_the_remaining_axes) {
  Array a = iota({2, 3, 4});
  Array last = a.index({ellipsis, 1});  // a[..., 1]
  EXPECT_EQ(last.shape(), (Shape{2, 3}));
  EXPECT_EQ(last.to_vector<int64_t>(), (Values{1, 5, 9, 13, 17, 21}));
  Array first = a.index({1, ellipsis});  // a[1, ...]
  EXPECT_EQ(first.shape(), (Shape{3, 4}));
  EXPECT_EQ(first.offset(), 12);
  Array middle = a.index({0, ellipsis, Slice({}, {}, -1)});  // a[0, ..., ::-1]
  EXPECT_EQ(middle.shape(), (Shape{3, 4}));
  EXPECT_EQ(middle.to_vector<int64_t>(), (Values{3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8}));
  Array all = a.index({ellipsis});
  EXPECT_EQ(all.shape(), a.shape());
  EXPECT_EQ(all.strides(), a.strides());
  Array expanded = a.index({ellipsis, newaxis});  // a[..., None]
  EXPECT_EQ(expanded.shape(), (Shape{2, 3, 4, 1}));
  Array none_left = a.index({0, 1, ellipsis, 2});  // ellipsis matching no axis
  EXPECT_EQ(none_left.ndim(), 0);
  EXPECT_EQ(none_left.item<int64_t>(), 6);
}

TEST(Indexing, empty_index_returns_a_view_of_everything) {
  Array a = iota({2, 3});
  Array v = a.index({});
  EXPECT_EQ(v.shape(), a.shape());
  EXPECT_TRUE(v.shares_storage(a));
}

TEST(Indexing, zero_d_array_takes_newaxis_and_ellipsis_only) {
  Array s = scalar_array(int64_t{7});
  EXPECT_EQ(s.index({}).item<int64_t>(), 7);
  EXPECT_EQ(s.index({ellipsis}).ndim(), 0);
  EXPECT_EQ(s.index({newaxis}).shape(), (Shape{1}));
  expect_error<ShapeError>([&] { s.index({0}); }, {"too many indices", "()"});
}

TEST(Indexing, too_many_indices_throw_shape_error) {
  Array a = iota({2, 3});
  expect_error<ShapeError>([&] { a.index({0, 0, 0}); }, {"index", "too many indices", "(2, 3)", "3", "2 dimensions"});
  expect_error<ShapeError>([&] { a.index({Slice(), ellipsis, 0, Slice()}); }, {"too many indices"});
  // newaxis consumes no axis, so this is fine: a[None, 0, 0]
  EXPECT_EQ(a.index({newaxis, 0, 0}).shape(), (Shape{1}));
}

TEST(Indexing, two_ellipses_throw_shape_error) {
  Array a = iota({2, 3});
  expect_error<ShapeError>([&] { a.index({ellipsis, 0, ellipsis}); }, {"single ellipsis"});
}

TEST(Indexing, zero_step_throws_value_error) {
  Array a = iota({4});
  expect_error<ValueError>([&] { a.index({Slice(0, 3, 0)}); }, {"index", "step cannot be zero"});
  expect_error<ValueError>([&] { a.slice(0, 0, 3, 0); }, {"slice", "step cannot be zero"});
}

TEST(Indexing, view_writes_reach_the_source) {
  Array a = zeros({3, 4}, int64);
  a.index({Slice(), Slice(1, {}, 2)}).fill(5);  // a[:, 1::2] = 5
  EXPECT_EQ(a.to_vector<int64_t>(), (Values{0, 5, 0, 5, 0, 5, 0, 5, 0, 5, 0, 5}));
  a[2].fill(9);
  EXPECT_EQ(a.to_vector<int64_t>(), (Values{0, 5, 0, 5, 0, 5, 0, 5, 9, 9, 9, 9}));
}

TEST(Indexing, index_of_a_view_accumulates_offset) {
  Array a = iota({4, 5});
  Array v = a.slice(0, 1, {});                // rows 1..3, offset 5
  Array w = v.index({Slice({}, {}, -1), 2});  // a[1:][::-1, 2] -> 17, 12, 7
  EXPECT_EQ(w.offset(), 17);
  EXPECT_EQ(w.strides(), (Shape{-5}));
  EXPECT_EQ(w.to_vector<int64_t>(), (Values{17, 12, 7}));
  Array t = a.transpose().index({1});  // a.T[1] = column 1
  EXPECT_EQ(t.to_vector<int64_t>(), (Values{1, 6, 11, 16}));
}

TEST(Slicing, slice_member_on_one_axis) {
  Array a = iota({3, 4});
  Array s = a.slice(1, 1, 3);
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.strides(), (Shape{4, 1}));
  EXPECT_EQ(s.offset(), 1);
  EXPECT_EQ(s.to_vector<int64_t>(), (Values{1, 2, 5, 6, 9, 10}));
  Array r = a.slice(-2, {}, {}, -1);  // axis -2 reversed
  EXPECT_EQ(r.strides(), (Shape{-4, 1}));
  EXPECT_EQ(r.offset(), 8);
  EXPECT_EQ(r.to_vector<int64_t>(), (Values{8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3}));
  Array e = a.slice(0, 5, 7);
  EXPECT_EQ(e.shape(), (Shape{0, 4}));
  EXPECT_EQ(e.size(), 0);
  EXPECT_TRUE(s.shares_storage(a));
}

TEST(Slicing, slice_axis_out_of_range_throws_shape_error) {
  Array a = iota({3, 4});
  expect_error<ShapeError>([&] { a.slice(2, 0, 1); }, {"slice", "axis 2", "ndim 2"});
}

TEST(Indexing, undefined_array_throws_value_error) {
  Array undefined;
  expect_error<ValueError>([&] { undefined.index({0}); }, {"index", "undefined"});
  expect_error<ValueError>([&] { undefined.slice(0, 0, 1); }, {"slice", "undefined"});
}

// take's gradient along an axis (summed row by row, from the indices) has the bits of the flat take's gradient
// (an element-by-element scatter in order), for rows hit many times, on a middle axis.
TEST(Indexing, take_gradient_along_an_axis_has_the_flat_scatters_bits) {
  random::seed(5);
  const Array x = random::normal({3, 40, 33}, 0.0, 1.0, float32, cpu());
  const Array idx = random::randint(0, 40, {7, 61}, int64, cpu());
  const Array w = random::normal({3, 7, 61, 33}, 0.0, 1.0, float32, cpu());
  const std::vector<int64_t> rows = idx.to_vector<int64_t>();
  std::vector<int64_t> flat;
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t k = 0; k < 7 * 61; ++k)
      for (int64_t c = 0; c < 33; ++c) flat.push_back((o * 40 + rows[static_cast<size_t>(k)]) * 33 + c);
  const Array offsets = from_data(flat, Shape{3, 7, 61, 33}, cpu());
  auto gradient = [&](bool along_axis) {
    Array v = x.detach();
    v.set_requires_grad(true);
    const Array taken = along_axis ? take(v, idx, 1) : take(v, offsets);
    (taken * w).sum().backward();
    return v.grad();
  };
  const Array by_rows = gradient(true), by_elements = gradient(false);
  EXPECT_TRUE(array_equal(by_rows, by_elements));
  EXPECT_GT(abs(by_rows).max().item<float>(), 1.0f);  // rows were hit: not an all-zero gradient
}

}  // namespace
}  // namespace kiln
