// The core's iteration plan (src/core/iteration.hpp) against hand-computed plans, and the rank limit
// (kiln::kMaxRank) on every backend.
#include <gtest/gtest.h>

#include <vector>

#include "core/iteration.hpp"
#include "test_util.hpp"

namespace {

using kiln::Array;
using kiln::Shape;
using kiln::detail::ElementwiseIteration;
using kiln::detail::ReductionIteration;
using kiln_test::expect_error;

using Plan = ElementwiseIteration<4>;

Plan plan_of(const Shape& shape, std::vector<Array> arrays) {
  std::vector<const Array*> pointers;
  for (const Array& a : arrays) pointers.push_back(&a);
  Plan plan;
  kiln::detail::plan_elementwise(plan, shape, pointers.data(), static_cast<int>(pointers.size()), "test");
  return plan;
}

template <int M>
std::vector<int64_t> sizes(const kiln::detail::StridedAxes<M>& p) {
  return {p.shape, p.shape + p.ndim};
}
template <int M>
std::vector<int64_t> strides(const kiln::detail::StridedAxes<M>& p, int k) {
  return {p.strides[k], p.strides[k] + p.ndim};
}

Array buffer(int64_t n) { return kiln::arange(n, kiln::float32, kiln::cpu()); }

TEST(IterationPlan, contiguous_operands_become_one_axis) {
  const Shape shape{2, 3, 4};
  Plan p = plan_of(shape, {kiln::empty(shape), kiln::empty(shape)});
  EXPECT_EQ(sizes(p), (std::vector<int64_t>{24}));
  EXPECT_EQ(strides(p, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(strides(p, 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(p.numel, 24);
  EXPECT_TRUE(p.contiguous);
  EXPECT_TRUE(p.index32);
}

TEST(IterationPlan, broadcast_row_keeps_two_axes_with_stride_zero) {
  const Shape shape{2, 3};
  Plan p = plan_of(shape, {kiln::empty(shape), buffer(3).broadcast_to(shape)});
  EXPECT_EQ(sizes(p), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(strides(p, 0), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(strides(p, 1), (std::vector<int64_t>{0, 1}));
  EXPECT_FALSE(p.contiguous);
}

TEST(IterationPlan, broadcast_column_of_a_scalar_array_merges) {
  // A (1, 1) array broadcast to (2, 3) steps by 0 on both axes, which merge (0 == 0 * 3).
  const Shape shape{2, 3};
  Plan p = plan_of(shape, {kiln::empty(shape), buffer(1).reshape({1, 1}).broadcast_to(shape)});
  EXPECT_EQ(sizes(p), (std::vector<int64_t>{6}));
  EXPECT_EQ(strides(p, 1), (std::vector<int64_t>{0}));
  EXPECT_FALSE(p.contiguous);
}

TEST(IterationPlan, negative_strides_stay_negative_for_elementwise) {
  const Shape shape{2, 3};
  Array reversed = kiln::as_strided(buffer(6), shape, {3, -1}, 2);
  Plan p = plan_of(shape, {kiln::empty(shape), reversed});
  EXPECT_EQ(sizes(p), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(strides(p, 1), (std::vector<int64_t>{3, -1}));
  // Reversed rows of a reversed array merge: stride -1 over 6 elements.
  Array flat_reversed = kiln::as_strided(buffer(6), shape, {-3, -1}, 5);
  Plan q = plan_of(shape, {kiln::empty(shape), flat_reversed});
  EXPECT_EQ(sizes(q), (std::vector<int64_t>{6}));
  EXPECT_EQ(strides(q, 1), (std::vector<int64_t>{-1}));
}

TEST(IterationPlan, size_one_axes_are_dropped) {
  const Shape shape{1, 4, 1, 5};
  Array transposed = buffer(20).reshape({5, 4}).T().reshape({1, 4, 1, 5});
  Plan p = plan_of(shape, {kiln::empty(shape), transposed});
  EXPECT_EQ(sizes(p), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(strides(p, 0), (std::vector<int64_t>{5, 1}));
  EXPECT_EQ(strides(p, 1), (std::vector<int64_t>{1, 4}));
  EXPECT_FALSE(p.contiguous);
  EXPECT_TRUE(p.index32);
}

TEST(IterationPlan, all_size_one_is_one_element) {
  const Shape shape{1, 1};
  Plan p = plan_of(shape, {kiln::empty(shape), kiln::empty(shape)});
  EXPECT_EQ(sizes(p), (std::vector<int64_t>{1}));
  EXPECT_EQ(strides(p, 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(p.numel, 1);
  EXPECT_TRUE(p.contiguous);
}

TEST(IterationPlan, zero_size_plans_zero_elements) {
  const Shape shape{0, 3};
  Plan p = plan_of(shape, {kiln::empty(shape), kiln::empty(shape)});
  EXPECT_EQ(p.numel, 0);
  EXPECT_EQ(sizes(p), (std::vector<int64_t>{0}));
}

TEST(IterationPlan, more_than_int32_elements_need_64_bit_indices) {
  // 2^32 elements as broadcast views (no memory behind them): the flat index does not fit 32 bits.
  const Shape shape{65536, 65536};
  Plan p = plan_of(shape, {buffer(1).reshape({1, 1}).broadcast_to(shape), buffer(65536).broadcast_to(shape)});
  EXPECT_EQ(p.numel, int64_t{1} << 32);
  EXPECT_FALSE(p.index32);
  Plan q = plan_of({65536, 32767}, {buffer(1).reshape({1, 1}).broadcast_to({65536, 32767})});
  EXPECT_TRUE(q.index32);  // 2^31 - 65536 elements
}

ReductionIteration<2> reduction_of(const Array& in, const std::vector<int64_t>& axes, bool arg = false) {
  bool reduced[kiln::kMaxRank] = {};
  Shape keep = in.shape();
  for (int64_t a : axes) {
    reduced[a] = true;
    keep[static_cast<size_t>(a)] = 1;
  }
  const Array out = kiln::empty(keep, kiln::float32, kiln::cpu());
  const Array* arrays[2] = {&in, &out};
  kiln::detail::ReductionOrder order;
  order.flip_reduced = order.sort_reduced = !arg;
  ReductionIteration<2> plan;
  kiln::detail::plan_reduction_axes(plan, in.shape(), reduced, arrays, 2, 1, order, "test");
  return plan;
}

TEST(IterationPlan, reduction_of_a_transposed_input_splits_kept_and_reduced) {
  Array in = buffer(12).reshape({3, 4}).T();  // (4, 3), strides (1, 4)
  auto p = reduction_of(in, {0});
  EXPECT_EQ(sizes(p.kept), (std::vector<int64_t>{3}));
  EXPECT_EQ(strides(p.kept, 0), (std::vector<int64_t>{4}));
  EXPECT_EQ(strides(p.kept, 1), (std::vector<int64_t>{1}));
  EXPECT_EQ(sizes(p.reduced), (std::vector<int64_t>{4}));
  EXPECT_EQ(strides(p.reduced, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(strides(p.reduced, 1), (std::vector<int64_t>{0}));
  EXPECT_EQ(p.num_out, 3);
  EXPECT_EQ(p.num_reduced, 4);
}

TEST(IterationPlan, reduced_axes_sort_by_stride_and_merge) {
  Array in = buffer(24).reshape({2, 3, 4}).permute({2, 0, 1});  // (4, 2, 3), strides (1, 12, 4)
  auto p = reduction_of(in, {1, 2});
  EXPECT_EQ(sizes(p.reduced), (std::vector<int64_t>{6}));
  EXPECT_EQ(strides(p.reduced, 0), (std::vector<int64_t>{4}));
  EXPECT_EQ(sizes(p.kept), (std::vector<int64_t>{4}));
  EXPECT_EQ(strides(p.kept, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(strides(p.kept, 1), (std::vector<int64_t>{1}));
  // Outer and inner axes reduced, the middle kept: the reduced axes cannot merge.
  auto q = reduction_of(buffer(24).reshape({2, 3, 4}), {0, 2});
  EXPECT_EQ(sizes(q.reduced), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(strides(q.reduced, 0), (std::vector<int64_t>{12, 1}));
}

TEST(IterationPlan, arg_reductions_keep_logical_order) {
  Array in = buffer(6).reshape({2, 3}).T();  // (3, 2), strides (1, 3)
  auto sum = reduction_of(in, {0, 1});
  EXPECT_EQ(sizes(sum.reduced), (std::vector<int64_t>{6}));
  EXPECT_EQ(strides(sum.reduced, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(sum.kept.ndim, 0);
  auto arg = reduction_of(in, {0, 1}, true);
  EXPECT_EQ(sizes(arg.reduced), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(strides(arg.reduced, 0), (std::vector<int64_t>{1, 3}));
}

TEST(IterationPlan, reduction_flips_negative_strides_and_moves_the_base) {
  Array in = kiln::as_strided(buffer(6), {2, 3}, {3, -1}, 2);
  auto p = reduction_of(in, {1});
  EXPECT_EQ(strides(p.reduced, 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(p.offsets[0], -2);
  EXPECT_EQ(p.offsets[1], 0);
  // A reversed kept axis: the input walks forwards from its last row, the output backwards from its last element.
  Array rows = kiln::as_strided(buffer(6), {2, 3}, {-3, 1}, 3);
  auto q = reduction_of(rows, {1});
  EXPECT_EQ(strides(q.kept, 0), (std::vector<int64_t>{3}));
  EXPECT_EQ(strides(q.kept, 1), (std::vector<int64_t>{-1}));
  EXPECT_EQ(q.offsets[0], -3);
  EXPECT_EQ(q.offsets[1], 1);
  // argmax keeps a reversed reduced axis as it is.
  auto arg = reduction_of(in, {1}, true);
  EXPECT_EQ(strides(arg.reduced, 0), (std::vector<int64_t>{-1}));
  EXPECT_EQ(arg.offsets[0], 0);
}

TEST(IterationPlan, reduction_over_size_one_axes_has_one_trivial_reduced_axis) {
  auto p = reduction_of(buffer(3).reshape({3, 1}), {1});
  EXPECT_EQ(sizes(p.reduced), (std::vector<int64_t>{1}));
  EXPECT_EQ(strides(p.reduced, 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(p.num_reduced, 1);
  EXPECT_EQ(sizes(p.kept), (std::vector<int64_t>{3}));
}

/// The rank limit, on `device`: kMaxRank dimensions work, one more throws a ShapeError naming op and fix.
void check_rank_limit(kiln::Device device) {
  const Shape ok(static_cast<size_t>(kiln::kMaxRank), 1);
  Shape too_many(static_cast<size_t>(kiln::kMaxRank) + 1, 1);
  too_many[0] = 2;
  Array a = kiln::ones(ok, kiln::float32, device);
  EXPECT_EQ((a + 1).sum().item<float>(), 2.0f);
  Array b = kiln::ones({2}, kiln::float32, device).reshape(too_many);  // a view of any rank is fine
  expect_error<kiln::ShapeError>([&] { (void)(b + 1); }, {"add", "17 dimensions", "kMaxRank", "reshape"});
  expect_error<kiln::ShapeError>([&] { (void)b.sum(); }, {"sum", "(2, 1, 1", "kMaxRank"});
  expect_error<kiln::ShapeError>([&] { (void)kiln::argmax(b, 0); }, {"argmax", "kMaxRank"});
  expect_error<kiln::ShapeError>([&] { (void)b.astype(kiln::int32); }, {"kMaxRank"});
}

TEST(IterationPlan, rank_limit_is_a_clear_error_on_cpu) { check_rank_limit(kiln::cpu()); }

TEST(IterationPlan, rank_limit_is_a_clear_error_on_gpu) {
  KILN_REQUIRE_GPU();
  check_rank_limit(kiln::gpu(0));
}

}  // namespace
