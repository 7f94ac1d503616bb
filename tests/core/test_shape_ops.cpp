// Tests for views and shape ops (src/core/shape_ops.cpp): reshape's view-or-copy
// rule, axis permutations, squeeze/expand_dims, broadcasting, as_strided, joins
// and splits, each error's type and message, and ~900 random view chains checked
// against NumPy golden data (tests/golden/shape_golden.py).
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kiln/kiln.hpp"

namespace kiln {
namespace {

using Values = std::vector<int64_t>;

/// arange(n) as int64 reshaped to `shape`: element values equal their C-order position.
Array iota(const Shape& shape) { return arange(shape_numel(shape), int64).reshape(shape); }

Values values(const Array& a) { return a.to_vector<int64_t>(); }

using kiln_test::expect_error;

// ---------------------------------------------------------------- reshape

TEST(Reshape, contiguous_array_gives_a_view_with_c_strides) {
  Array a = arange(6, int64);
  Array r = reshape(a, {2, 3});
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(r.strides(), (Shape{3, 1}));
  EXPECT_TRUE(r.shares_storage(a));
  EXPECT_EQ(values(r), (Values{0, 1, 2, 3, 4, 5}));
}

TEST(Reshape, minus_one_extent_is_inferred) {
  Array a = iota({2, 3, 4});
  EXPECT_EQ(a.reshape({-1, 4}).shape(), (Shape{6, 4}));
  EXPECT_EQ(a.reshape({3, -1}).shape(), (Shape{3, 8}));
  EXPECT_EQ(a.reshape({-1}).shape(), (Shape{24}));
}

TEST(Reshape, transposed_array_is_copied_when_axes_must_merge) {
  Array t = iota({2, 3}).transpose();  // [[0, 3], [1, 4], [2, 5]], strides (1, 3)
  Array r = t.reshape({6});
  EXPECT_FALSE(r.shares_storage(t));
  EXPECT_EQ(values(r), (Values{0, 3, 1, 4, 2, 5}));
  Array r2 = t.reshape({2, 3});
  EXPECT_FALSE(r2.shares_storage(t));
  EXPECT_EQ(values(r2), (Values{0, 3, 1, 4, 2, 5}));
}

TEST(Reshape, transposed_array_stays_a_view_when_only_size_one_axes_change) {
  Array t = iota({2, 3}).transpose();
  Array r = t.reshape({3, 1, 2});
  EXPECT_TRUE(r.shares_storage(t));
  EXPECT_EQ(r.strides()[0], 1);
  EXPECT_EQ(r.strides()[2], 3);
  EXPECT_EQ(values(r), (Values{0, 3, 1, 4, 2, 5}));
}

TEST(Reshape, negative_step_slice_reshapes_as_a_view) {
  Array a = arange(6, int64).slice(0, {}, {}, -1);  // 5, 4, ..., 0
  Array r = a.reshape({2, 3});
  EXPECT_TRUE(r.shares_storage(a));
  EXPECT_EQ(r.strides(), (Shape{-3, -1}));
  EXPECT_EQ(r.offset(), 5);
  EXPECT_EQ(values(r), (Values{5, 4, 3, 2, 1, 0}));
}

TEST(Reshape, column_slice_splits_axes_as_view_but_merges_by_copy) {
  Array a = iota({3, 4}).slice(1, 0, 2);  // strides (4, 1)
  Array split_view = a.reshape({3, 2, 1});
  EXPECT_TRUE(split_view.shares_storage(a));
  EXPECT_EQ(split_view.strides()[0], 4);
  EXPECT_EQ(split_view.strides()[1], 1);
  Array merged = a.reshape({6});
  EXPECT_FALSE(merged.shares_storage(a));
  EXPECT_EQ(values(merged), (Values{0, 1, 4, 5, 8, 9}));
  // Splitting the strided axis: rows (stride 4) -> (3, 1) is a view too.
  Array rows = a.reshape({3, 1, 2});
  EXPECT_TRUE(rows.shares_storage(a));
  EXPECT_EQ(values(rows), (Values{0, 1, 4, 5, 8, 9}));
}

TEST(Reshape, broadcast_array_merges_by_copy) {
  Array b = broadcast_to(arange(3, int64), {2, 3});  // strides (0, 1)
  Array merged = b.reshape({6});
  EXPECT_FALSE(merged.shares_storage(b));
  EXPECT_EQ(values(merged), (Values{0, 1, 2, 0, 1, 2}));
  Array kept = b.reshape({2, 3, 1});
  EXPECT_TRUE(kept.shares_storage(b));
  EXPECT_EQ(kept.strides()[0], 0);
  EXPECT_EQ(kept.strides()[1], 1);
}

TEST(Reshape, zero_d_and_size_one_shapes) {
  Array s = scalar_array(int64_t{7});
  Array r = s.reshape({1, 1});
  EXPECT_EQ(r.shape(), (Shape{1, 1}));
  EXPECT_TRUE(r.shares_storage(s));
  Array back = r.reshape({});
  EXPECT_EQ(back.ndim(), 0);
  EXPECT_EQ(back.item<int64_t>(), 7);
  EXPECT_EQ(s.reshape({-1}).shape(), (Shape{1}));
}

TEST(Reshape, empty_array_reshapes_as_a_view) {
  Array z = zeros({0, 3}, float32);
  Array r = z.reshape({3, 0, 5});
  EXPECT_EQ(r.shape(), (Shape{3, 0, 5}));
  EXPECT_TRUE(r.shares_storage(z));
  EXPECT_EQ(z.reshape({-1}).shape(), (Shape{0}));
}

TEST(Reshape, size_mismatch_throws_shape_error_naming_both_shapes_and_sizes) {
  Array a = iota({2, 3});
  expect_error<ShapeError>([&] { a.reshape({4, 2}); }, {"reshape", "(2, 3)", "size 6", "(4, 2)", "size 8"});
  expect_error<ShapeError>([&] { a.reshape({4, -1}); }, {"reshape", "(2, 3)", "size 6", "(4, -1)", "-1"});
  expect_error<ShapeError>([&] { a.reshape({-1, -1}); }, {"reshape", "only one extent may be -1"});
  expect_error<ShapeError>([&] { a.reshape({-2, -3}); }, {"reshape", "(-2, -3)", "negative"});
  expect_error<ShapeError>([&] { zeros({0}).reshape({0, -1}); }, {"reshape", "(0, -1)", "cannot be inferred"});
}

TEST(Reshape, ravel_views_contiguous_and_copies_others) {
  Array a = iota({2, 3});
  Array r = ravel(a);
  EXPECT_TRUE(r.shares_storage(a));
  EXPECT_EQ(r.shape(), (Shape{6}));
  Array t = ravel(a.transpose());
  EXPECT_FALSE(t.shares_storage(a));
  EXPECT_EQ(values(t), (Values{0, 3, 1, 4, 2, 5}));
}

TEST(Reshape, flatten_always_copies) {
  Array a = iota({2, 3});
  Array f = a.flatten();
  EXPECT_FALSE(f.shares_storage(a));
  EXPECT_EQ(f.shape(), (Shape{6}));
  EXPECT_EQ(values(f), (Values{0, 1, 2, 3, 4, 5}));
  Array g = a.slice(1, {}, {}, -1).flatten();
  EXPECT_EQ(values(g), (Values{2, 1, 0, 5, 4, 3}));
  EXPECT_TRUE(g.is_contiguous());
}

// ---------------------------------------------------------------- axis permutations

TEST(Permute, transpose_reverses_shape_and_strides) {
  Array a = iota({2, 3, 4});
  Array t = transpose(a);
  EXPECT_EQ(t.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(t.strides(), (Shape{1, 4, 12}));
  EXPECT_TRUE(t.shares_storage(a));
  EXPECT_EQ(a.T().shape(), (Shape{4, 3, 2}));
  Array m = iota({2, 3}).T();
  EXPECT_EQ(values(m), (Values{0, 3, 1, 4, 2, 5}));
}

TEST(Permute, permute_reorders_axes_and_accepts_negative_axes) {
  Array a = iota({2, 3, 4});
  Array p = a.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_EQ(permute(a, {-1, -3, -2}).strides(), (Shape{1, 12, 4}));
  // p[1, 1, 2] = a[1, 2, 1] = 12 + 8 + 1
  EXPECT_EQ(p.index({1, 1, 2}).item<int64_t>(), 21);
}

TEST(Permute, permute_rejects_non_permutations) {
  Array a = iota({2, 3, 4});
  expect_error<ShapeError>([&] { a.permute({0, 1}); }, {"permute", "[0, 1]", "(2, 3, 4)", "all 3 axes"});
  expect_error<ShapeError>([&] { a.permute({0, 1, 1}); }, {"permute", "[0, 1, 1]", "repeat axis 1"});
  expect_error<ShapeError>([&] { a.permute({0, 1, 3}); }, {"permute", "axis 3", "ndim 3"});
}

TEST(Permute, swapaxes_and_moveaxis) {
  Array a = iota({2, 3, 4});
  Array s = swapaxes(a, 0, -1);
  EXPECT_EQ(s.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(s.strides(), (Shape{1, 4, 12}));
  Array m = moveaxis(a, 0, -1);
  EXPECT_EQ(m.shape(), (Shape{3, 4, 2}));
  EXPECT_EQ(m.strides(), (Shape{4, 1, 12}));
  Array back = moveaxis(a, -1, 0);
  EXPECT_EQ(back.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(back.strides(), (Shape{1, 12, 4}));
  Array middle = moveaxis(a, 2, 1);
  EXPECT_EQ(middle.shape(), (Shape{2, 4, 3}));
  expect_error<ShapeError>([&] { swapaxes(a, 0, 3); }, {"swapaxes", "axis 3"});
  expect_error<ShapeError>([&] { moveaxis(a, 0, -4); }, {"moveaxis", "axis -4"});
}

// ---------------------------------------------------------------- squeeze / expand_dims

TEST(Squeeze, drops_all_size_one_axes_by_default) {
  Array a = iota({1, 3, 1, 2});
  Array s = a.squeeze();
  EXPECT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.strides(), (Shape{2, 1}));
  EXPECT_TRUE(s.shares_storage(a));
  EXPECT_EQ(squeeze(iota({1, 1})).ndim(), 0);
}

TEST(Squeeze, drops_only_listed_axes) {
  Array a = iota({1, 3, 1, 2});
  EXPECT_EQ(squeeze(a, 0).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(squeeze(a, -2).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(squeeze(a, {0, 2}).shape(), (Shape{3, 2}));
}

TEST(Squeeze, listed_axis_of_other_extent_throws_shape_error) {
  Array a = iota({1, 3, 1, 2});
  expect_error<ShapeError>([&] { squeeze(a, 1); }, {"squeeze", "axis 1", "(1, 3, 1, 2)", "extent 3"});
  expect_error<ShapeError>([&] { squeeze(a, {0, -4}); }, {"squeeze", "repeat axis 0"});
  expect_error<ShapeError>([&] { squeeze(a, 4); }, {"squeeze", "axis 4"});
}

TEST(ExpandDims, inserts_a_size_one_axis_at_any_position) {
  Array a = iota({2, 3});
  EXPECT_EQ(a.expand_dims(0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(a.expand_dims(1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(a.expand_dims(2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(a, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(expand_dims(a, -3).shape(), (Shape{1, 2, 3}));
  Array e = a.expand_dims(1);
  EXPECT_EQ(e.strides()[0], 3);
  EXPECT_EQ(e.strides()[2], 1);
  EXPECT_TRUE(e.shares_storage(a));
  EXPECT_EQ(values(e), (Values{0, 1, 2, 3, 4, 5}));
  expect_error<ShapeError>([&] { a.expand_dims(3); }, {"expand_dims", "axis 3"});
  expect_error<ShapeError>([&] { a.expand_dims(-4); }, {"expand_dims", "axis -4"});
}

// ---------------------------------------------------------------- broadcasting

TEST(Broadcast, broadcast_to_uses_zero_strides) {
  Array a = iota({3, 1});
  Array b = a.broadcast_to({2, 3, 4});
  EXPECT_EQ(b.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(b.strides(), (Shape{0, 1, 0}));
  EXPECT_TRUE(b.shares_storage(a));
  Values expected;
  for (int rep = 0; rep < 2; ++rep)
    for (int64_t i = 0; i < 3; ++i)
      for (int j = 0; j < 4; ++j) expected.push_back(i);
  EXPECT_EQ(values(b), expected);
}

TEST(Broadcast, broadcast_to_incompatible_shape_throws_naming_both_shapes) {
  Array a = iota({2, 3});
  expect_error<ShapeError>([&] { broadcast_to(a, {2, 4}); }, {"broadcast_to", "(2, 3)", "(2, 4)", "axis 1"});
  expect_error<ShapeError>([&] { broadcast_to(a, {3}); }, {"broadcast_to", "(2, 3)", "(3,)", "fewer dimensions"});
  expect_error<ShapeError>([&] { broadcast_to(a, {-1, 2, 3}); }, {"broadcast_to", "non-negative"});
}

TEST(Broadcast, broadcast_arrays_gives_common_shape_views) {
  Array a = iota({3, 1});
  Array b = iota({4});
  std::vector<Array> out = broadcast_arrays({a, b});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].shape(), (Shape{3, 4}));
  EXPECT_EQ(out[1].shape(), (Shape{3, 4}));
  EXPECT_EQ(values(out[0]), (Values{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2}));
  EXPECT_EQ(values(out[1]), (Values{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_TRUE(out[1].shares_storage(b));
  EXPECT_TRUE(broadcast_arrays({}).empty());
  expect_error<ShapeError>([&] { broadcast_arrays({a, b, iota({2, 1})}); }, {"broadcast_arrays", "(3, 4)", "(2, 1)"});
}

// ---------------------------------------------------------------- as_strided

TEST(AsStrided, sliding_windows_overlap) {
  Array a = arange(6, int64);
  Array w = as_strided(a, {4, 3}, {1, 1});
  EXPECT_TRUE(w.shares_storage(a));
  EXPECT_EQ(values(w), (Values{0, 1, 2, 1, 2, 3, 2, 3, 4, 3, 4, 5}));
}

TEST(AsStrided, negative_stride_with_offset) {
  Array a = arange(6, int64);
  EXPECT_EQ(values(as_strided(a, {6}, {-1}, 5)), (Values{5, 4, 3, 2, 1, 0}));
  EXPECT_EQ(values(as_strided(a, {2, 2}, {-2, 1}, 2)), (Values{2, 3, 0, 1}));
}

TEST(AsStrided, reaching_outside_the_storage_throws_shape_error) {
  Array a = arange(6, int64);
  expect_error<ShapeError>(
      [&] {
        as_strided(a, {4, 3}, {2, 1});
      },
      {"as_strided", "(4, 3)", "strides (2, 1)", "0 to 8", "6 int64 elements"});
  expect_error<ShapeError>([&] { as_strided(a, {3}, {-1}, 1); }, {"as_strided", "-1 to 1", "outside"});
  expect_error<ShapeError>([&] { as_strided(a, {1}, {1}, 6); }, {"as_strided", "offset 6"});
  expect_error<ShapeError>([&] { as_strided(a, {2, 2}, {1}); }, {"as_strided", "2 extents but 1 strides"});
  expect_error<ShapeError>([&] { as_strided(a, {-1}, {1}); }, {"as_strided", "non-negative"});
  // Nothing is reachable in an empty view, so any strides are fine.
  EXPECT_EQ(as_strided(a, {0, 3}, {100, 100}).size(), 0);
}

TEST(AsStrided, checks_the_whole_storage_not_the_view) {
  Array base = arange(6, int64);
  Array tail = base.slice(0, 4, {});        // offset 4, two elements
  Array w = as_strided(tail, {3}, {1}, 0);  // reads base[0:3] through the view's storage
  EXPECT_EQ(values(w), (Values{0, 1, 2}));
  EXPECT_EQ(values(as_strided(tail, {2}, {1})), (Values{4, 5}));  // offset defaults to the view's
}

// ---------------------------------------------------------------- concatenate / stack

TEST(Concatenate, joins_along_axis_zero_and_one) {
  Array a = iota({2, 3});
  Array b = iota({1, 3}) + int64_t{100};
  Array c = concatenate({a, b});
  EXPECT_EQ(c.shape(), (Shape{3, 3}));
  EXPECT_EQ(values(c), (Values{0, 1, 2, 3, 4, 5, 100, 101, 102}));
  Array d = iota({2, 2}) + int64_t{10};
  Array e = concatenate({a, d}, 1);
  EXPECT_EQ(e.shape(), (Shape{2, 5}));
  EXPECT_EQ(values(e), (Values{0, 1, 2, 10, 11, 3, 4, 5, 12, 13}));
  EXPECT_EQ(values(concatenate({a, d}, -1)), values(e));
  EXPECT_FALSE(c.shares_storage(a));
}

TEST(Concatenate, accepts_strided_views_and_empty_parts) {
  Array a = iota({3, 2}).transpose();           // [[0, 2, 4], [1, 3, 5]]
  Array b = iota({2, 3}).slice(1, {}, {}, -1);  // [[2, 1, 0], [5, 4, 3]]
  Array empty_part = zeros({2, 0}, int64);
  Array c = concatenate({a, empty_part, b}, 1);
  EXPECT_EQ(c.shape(), (Shape{2, 6}));
  EXPECT_EQ(values(c), (Values{0, 2, 4, 2, 1, 0, 1, 3, 5, 5, 4, 3}));
  Array only_empty = concatenate({empty_part, empty_part}, 1);
  EXPECT_EQ(only_empty.shape(), (Shape{2, 0}));
}

TEST(Concatenate, promotes_dtypes) {
  Array i = arange(2, int32);
  Array f = full({1}, 0.5, float32);
  Array c = concatenate({i, f});
  EXPECT_EQ(c.dtype(), float64);  // NumPy: int32 + float32 -> float64
  EXPECT_EQ(c.to_vector<double>(), (std::vector<double>{0.0, 1.0, 0.5}));
  Array b = concatenate({full({2}, true, bool_), arange(2, int8)});
  EXPECT_EQ(b.dtype(), int8);
  EXPECT_EQ(values(b), (Values{1, 1, 0, 1}));
  EXPECT_EQ(concatenate({arange(2, uint8), arange(2, int8)}).dtype(), int16);
}

TEST(Concatenate, mismatched_shapes_throw_shape_error_naming_shapes_and_axis) {
  Array a = iota({2, 3});
  expect_error<ShapeError>(
      [&] {
        concatenate({a, iota({2, 4})});
      },
      {"concatenate", "(2, 3)", "(2, 4)", "axis 0", "axis 1"});
  expect_error<ShapeError>(
      [&] {
        concatenate({a, iota({3})});
      },
      {"concatenate", "(2, 3)", "(3,)", "same number of dimensions"});
  expect_error<ShapeError>([&] { concatenate({a, a}, 2); }, {"concatenate", "axis 2"});
  expect_error<ShapeError>([&] { concatenate({scalar_array(1), scalar_array(2)}); }, {"concatenate", "0-d"});
  expect_error<ValueError>([&] { concatenate({}); }, {"concatenate", "at least one"});
  expect_error<ValueError>([&] { concatenate({a, Array()}); }, {"concatenate", "undefined"});
}

TEST(Concatenate, arrays_on_different_devices_throw_device_error_naming_both) {
  // A storage that claims to live on cuda:0; the device check runs before any data is touched.
  auto gpu_storage = std::make_shared<Storage>(nullptr, 24, Device{DeviceType::CUDA, 0}, nullptr, nullptr);
  Array on_gpu(gpu_storage, {6}, {1}, 0, float32);
  Array on_cpu = zeros({6});
  expect_error<DeviceError>([&] { concatenate({on_cpu, on_gpu}); }, {"concatenate", "cpu", "cuda:0", ".to(cpu())"});
  expect_error<DeviceError>([&] { stack({on_gpu, on_cpu}); }, {"stack", "cuda:0", "cpu", ".to(gpu(0))"});
}

TEST(Stack, joins_along_a_new_axis) {
  Array a = iota({2, 3});
  Array b = iota({2, 3}) + int64_t{10};
  Array s0 = stack({a, b});
  EXPECT_EQ(s0.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(s0), (Values{0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15}));
  Array s1 = stack({a, b}, 1);
  EXPECT_EQ(s1.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(values(s1), (Values{0, 1, 2, 10, 11, 12, 3, 4, 5, 13, 14, 15}));
  Array s2 = stack({a, b}, -1);
  EXPECT_EQ(s2.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(values(s2), (Values{0, 10, 1, 11, 2, 12, 3, 13, 4, 14, 5, 15}));
  Array scalars = stack({scalar_array(int64_t{1}), scalar_array(int64_t{2})});
  EXPECT_EQ(values(scalars), (Values{1, 2}));
}

TEST(Stack, mismatched_shapes_and_bad_axis_throw) {
  Array a = iota({2, 3});
  expect_error<ShapeError>([&] { stack({a, iota({3, 2})}); }, {"stack", "(2, 3)", "(3, 2)", "same shape"});
  expect_error<ShapeError>([&] { stack({a, a}, 3); }, {"stack", "axis 3"});
  expect_error<ValueError>([&] { stack({}); }, {"stack", "at least one"});
}

// ---------------------------------------------------------------- split

TEST(Split, equal_sections_are_views) {
  Array a = iota({6, 2});
  std::vector<Array> parts = split(a, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[1].shape(), (Shape{2, 2}));
  EXPECT_EQ(values(parts[1]), (Values{4, 5, 6, 7}));
  EXPECT_TRUE(parts[2].shares_storage(a));
  std::vector<Array> columns = split(a, 2, -1);
  EXPECT_EQ(values(columns[1]), (Values{1, 3, 5, 7, 9, 11}));
}

TEST(Split, indices_follow_numpy_slicing) {
  Array a = arange(7, int64);
  std::vector<Array> p = split(a, std::vector<int64_t>{2, 5});
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(values(p[0]), (Values{0, 1}));
  EXPECT_EQ(values(p[1]), (Values{2, 3, 4}));
  EXPECT_EQ(values(p[2]), (Values{5, 6}));
  // np.split(arange(7), [3, 10]) -> [0..2], [3..6], []
  std::vector<Array> clamped = split(a, std::vector<int64_t>{3, 10});
  EXPECT_EQ(values(clamped[1]), (Values{3, 4, 5, 6}));
  EXPECT_EQ(clamped[2].size(), 0);
  // np.split(arange(7), [4, 1]) -> [0..3], [], [1..6]
  std::vector<Array> unordered = split(a, std::vector<int64_t>{4, 1});
  EXPECT_EQ(unordered[1].size(), 0);
  EXPECT_EQ(values(unordered[2]), (Values{1, 2, 3, 4, 5, 6}));
  // np.split(arange(7), [-2]) -> [0..4], [5, 6]
  std::vector<Array> negative = split(a, std::vector<int64_t>{-2});
  EXPECT_EQ(values(negative[1]), (Values{5, 6}));
}

TEST(Split, sections_that_do_not_divide_throw_shape_error) {
  Array a = iota({5, 2});
  expect_error<ShapeError>([&] { split(a, 2); }, {"split", "axis 0", "(5, 2)", "extent 5", "2 equal sections"});
  expect_error<ValueError>([&] { split(a, 0); }, {"split", "positive"});
  expect_error<ShapeError>([&] { split(a, 1, 2); }, {"split", "axis 2"});
}

// ---------------------------------------------------------------- NumPy golden chains

/// Array::index for a run-time list of entries (index takes an initializer_list).
template <size_t... I>
Array index_with(const Array& a, const std::vector<Index>& entries, std::index_sequence<I...>) {
  return a.index({entries[I]...});
}
Array index_dynamic(const Array& a, const std::vector<Index>& e) {
  switch (e.size()) {
    case 0:
      return a.index({});
    case 1:
      return index_with(a, e, std::make_index_sequence<1>{});
    case 2:
      return index_with(a, e, std::make_index_sequence<2>{});
    case 3:
      return index_with(a, e, std::make_index_sequence<3>{});
    case 4:
      return index_with(a, e, std::make_index_sequence<4>{});
    case 5:
      return index_with(a, e, std::make_index_sequence<5>{});
    case 6:
      return index_with(a, e, std::make_index_sequence<6>{});
    case 7:
      return index_with(a, e, std::make_index_sequence<7>{});
    case 8:
      return index_with(a, e, std::make_index_sequence<8>{});
    case 9:
      return index_with(a, e, std::make_index_sequence<9>{});
    case 10:
      return index_with(a, e, std::make_index_sequence<10>{});
    default:
      throw std::runtime_error("golden index with too many entries");
  }
}

std::vector<std::string> split_on(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(s);
  while (std::getline(in, item, sep)) out.push_back(item);
  if (!s.empty() && s.back() == sep) out.emplace_back();
  return out;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(' '), e = s.find_last_not_of(' ');
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

Shape parse_shape(const std::string& text) {
  Shape s;
  for (const std::string& part : split_on(trim(text), ','))
    if (!part.empty()) s.push_back(std::stoll(part));
  return s;
}

std::optional<int64_t> parse_bound(const std::string& text) {
  if (text == "_") return std::nullopt;
  return std::stoll(text);
}

/// Applies one step of a golden chain (see tests/golden/shape_golden.py).
Array apply_step(const Array& a, const std::string& step) {
  std::istringstream in(step);
  std::string op;
  in >> op;
  std::vector<std::string> args;
  for (std::string arg; in >> arg;) args.push_back(arg);
  if (op == "base") return iota(args.empty() ? Shape{} : parse_shape(args[0]));
  if (op == "T") return a.T();
  if (op == "perm") return a.permute(args.empty() ? Shape{} : parse_shape(args[0]));
  if (op == "swap") return swapaxes(a, std::stoll(args[0]), std::stoll(args[1]));
  if (op == "move") return moveaxis(a, std::stoll(args[0]), std::stoll(args[1]));
  if (op == "expand") return a.expand_dims(std::stoll(args[0]));
  if (op == "squeeze") return a.squeeze();
  if (op == "bcast") return a.broadcast_to(args.empty() ? Shape{} : parse_shape(args[0]));
  if (op == "reshape") return a.reshape(args.empty() ? Shape{} : parse_shape(args[0]));
  if (op == "slice")
    return a.slice(std::stoll(args[0]), parse_bound(args[1]), parse_bound(args[2]), std::stoll(args[3]));
  if (op == "index") {
    std::vector<Index> entries;
    for (const std::string& arg : args) {
      if (arg == "n")
        entries.emplace_back(newaxis);
      else if (arg == "e")
        entries.emplace_back(ellipsis);
      else if (arg.rfind("i:", 0) == 0)
        entries.emplace_back(static_cast<int64_t>(std::stoll(arg.substr(2))));
      else {
        std::vector<std::string> f = split_on(arg.substr(2), ':');
        entries.emplace_back(Slice(parse_bound(f[0]), parse_bound(f[1]), std::stoll(f[2])));
      }
    }
    return index_dynamic(a, entries);
  }
  throw std::runtime_error("unknown golden step: " + step);
}

TEST(Golden, random_view_chains_match_numpy) {
  std::ifstream file(std::string(KILN_GOLDEN_DIR) + "/shape_golden.txt");
  ASSERT_TRUE(file) << "missing golden data; build the kiln_golden target";
  int cases = 0;
  for (std::string line; std::getline(file, line);) {
    if (line.empty()) continue;
    std::vector<std::string> cols = split_on(line, '|');
    ASSERT_EQ(cols.size(), 6u) << line;
    SCOPED_TRACE(line);
    Array base, result;
    for (const std::string& step : split_on(cols[0], ';')) {
      result = apply_step(result, trim(step));
      if (!base.defined()) base = result;
    }
    const Shape shape = parse_shape(cols[1]);
    EXPECT_EQ(result.shape(), shape);
    const std::string strides = trim(cols[2]), offset = trim(cols[3]), view = trim(cols[4]);
    if (strides != "_" && !shape.empty()) {
      std::vector<std::string> expected = split_on(strides, ',');
      ASSERT_EQ(expected.size(), shape.size());
      for (size_t i = 0; i < shape.size(); ++i) {
        if (expected[i] != "_") {
          EXPECT_EQ(result.strides()[i], std::stoll(expected[i])) << "axis " << i;
        }
      }
    }
    if (offset != "_") {
      EXPECT_EQ(result.offset() - base.offset(), std::stoll(offset));
    }
    if (view != "_") {
      EXPECT_EQ(result.shares_storage(base), view == "1");
    }
    Values expected_values;
    for (int64_t v : parse_shape(cols[5])) expected_values.push_back(v);
    EXPECT_EQ(values(result), expected_values);
    ++cases;
  }
  EXPECT_GE(cases, 900);
}

}  // namespace
}  // namespace kiln
