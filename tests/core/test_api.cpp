// Tests of the NumPy/PyTorch user's API (issue 11): assignment through temporary
// views, printing Shape/Device/DType (iostream and fmt), member reductions,
// reshape(-1), from_data from a braced list, to("cpu") / astype("float64"),
// the NumPy golden cases of tests/golden/api_golden.py on the CPU, and the
// error messages of the new functions. Values are hand-computed or NumPy's.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "api_golden_checks.hpp"
#include "harness/op_harness.hpp"
#include "kiln/fmt.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;
using F = std::vector<float>;
using I = std::vector<int64_t>;

TEST(Api, assignment_to_a_temporary_view_writes_through) {
  Array x = zeros({2, 3});
  x[0] = ones({3});  // Array source
  x[1] = 2.5;        // scalar source
  x.index({Slice(), 2}) = from_data({7.f, 8.f});
  EXPECT_EQ(x.to_vector<float>(), (F{1, 1, 7, 2.5f, 2.5f, 8}));
}

TEST(Api, assignment_to_a_named_array_rebinds_the_handle) {
  Array a = arange(3, float32);
  Array b = a;  // handle copy: same storage
  EXPECT_TRUE(b.shares_storage(a));
  Array c = ones({2});
  b = c;  // rebinds b; a is untouched
  EXPECT_TRUE(b.shares_storage(c));
  EXPECT_EQ(a.to_vector<float>(), (F{0, 1, 2}));
  EXPECT_EQ(b.shape(), (Shape{2}));
  Array row = a[1];  // a named view: assignment rebinds it too (as LibTorch's Tensor& operator=(...) &)
  row = zeros({});
  EXPECT_EQ(a.to_vector<float>(), (F{0, 1, 2}));
}

TEST(Api, shape_device_dtype_print_with_iostream_and_fmt) {
  std::ostringstream os;
  os << Shape{2, 3} << ' ' << Shape{5} << ' ' << cpu() << ' ' << Device{DeviceType::CUDA, 1} << ' ' << float32 << ' '
     << bool_;
  EXPECT_EQ(os.str(), "(2, 3) (5,) cpu cuda:1 float32 bool");
  EXPECT_EQ(fmt::format("{} {} {}", Shape{}, cpu(), bfloat16), "() cpu bfloat16");
  EXPECT_EQ(fmt::format("[{:>8}]", int64), "[   int64]");
}

TEST(Api, member_reductions_match_hand_computed_values) {
  const Array x = from_data({1.f, 5.f, 3.f, 4.f, 2.f, 6.f}, {2, 3});
  EXPECT_EQ(x.argmax(1).to_vector<int64_t>(), (I{1, 2}));
  EXPECT_EQ(x.argmin(1).to_vector<int64_t>(), (I{0, 1}));
  EXPECT_EQ(x.argmax().item<int64_t>(), 5);
  EXPECT_EQ(x.argmin(0, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(x.prod().item<float>(), 720.f);
  EXPECT_EQ(x.prod(0).to_vector<float>(), (F{4, 10, 18}));
  // rows: mean 3 and 4; var = ((1-3)^2 + (5-3)^2 + 0) / 3 = 8/3, ((4-4)^2 + (2-4)^2 + (6-4)^2) / 3 = 8/3
  EXPECT_NEAR(x.var(1).to_vector<float>()[0], 8.f / 3, 1e-6);
  EXPECT_NEAR(x.var(1, 1).to_vector<float>()[1], 4.f, 1e-6);
  EXPECT_NEAR(x.std().item<float>(), std::sqrt(35.f / 12), 1e-6);  // all six: mean 3.5, var 17.5/6
  EXPECT_EQ(x.std(Axes{}, 0, true).shape(), (Shape{1, 1}));
  const Array m = from_data(std::vector<bool>{true, false, true, true}, Shape{2, 2});
  EXPECT_EQ(m.all(1).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ(m.any(0).to_vector<bool>(), (std::vector<bool>{true, true}));
  EXPECT_FALSE(m.all().item<bool>());
}

TEST(Api, reshape_takes_extents_as_arguments) {
  const Array x = arange(6, float32).reshape({2, 3});
  EXPECT_EQ(x.reshape(-1).shape(), (Shape{6}));
  EXPECT_EQ(x.reshape(3, -1).shape(), (Shape{3, 2}));
  EXPECT_EQ(x.reshape(1, 2, 3).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(x.reshape(-1).to_vector<float>(), (F{0, 1, 2, 3, 4, 5}));
  expect_error<ShapeError>([&] { (void)x.reshape(4, -1); }, {"reshape"});
}

TEST(Api, from_data_takes_a_braced_list) {
  const Array x = from_data({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3});
  EXPECT_EQ(x.dtype(), float32);
  EXPECT_EQ(x.shape(), (Shape{2, 3}));
  EXPECT_EQ(x[1].to_vector<float>(), (F{4, 5, 6}));
  EXPECT_EQ(from_data({1.0, 2.0}).dtype(), float64);
  EXPECT_EQ(from_data({int64_t{1}, int64_t{2}}).to_vector<int64_t>(), (I{1, 2}));
  expect_error<ShapeError>([] { (void)from_data({1.f, 2.f, 3.f}, {2, 2}); }, {"from_data", "3 values", "(2, 2)"});
}

TEST(Api, to_and_astype_take_names) {
  const Array x = from_data({1.5f, -2.f});
  EXPECT_TRUE(x.to("cpu").shares_storage(x));
  const Array d = x.astype("float64");
  EXPECT_EQ(d.dtype(), float64);
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(x.astype("int").dtype(), int64);      // NumPy: int is int64
  EXPECT_EQ(x.astype("float").dtype(), float64);  // NumPy: float is float64
  expect_error<DTypeError>([&] { (void)x.astype("complex32"); }, {"parse_dtype", "complex32"});
  expect_error<ValueError>([&] { (void)x.to("tpu:0"); }, {"tpu:0"});
  if (num_gpus() < 8) expect_error<DeviceError>([&] { (void)x.to("cuda:7"); }, {"gpu(7)", "try_gpu"});
}

TEST(Api, numpy_golden_cases_on_the_cpu) { kiln_test::run_api_golden(cpu()); }

TEST(Api, allclose_and_array_equal) {
  const Array a = from_data({1.0, 2.0, std::nan("")});
  EXPECT_FALSE(allclose(a, a));
  EXPECT_TRUE(allclose(a, a, 1e-5, 1e-8, true));
  EXPECT_TRUE(allclose(from_data({1.f, 2.f}), from_data({1.f + 1e-6f, 2.f})));
  EXPECT_FALSE(allclose(from_data({1.f, 2.f}), from_data({1.1f, 2.f})));
  EXPECT_TRUE(allclose(from_data({1, 2}), from_data({1.0, 2.0})));  // ints compare as floats
  EXPECT_FALSE(array_equal(a, a));
  EXPECT_TRUE(array_equal(a, a, true));
  EXPECT_TRUE(array_equal(arange(4), from_data({0.0, 1.0, 2.0, 3.0})));
  EXPECT_FALSE(array_equal(arange(4), arange(4).reshape(2, 2)));  // shapes differ
}

TEST(Api, shuffle_permutes_rows_in_place_reproducibly) {
  Array x = arange(12, int64).reshape(6, 2);
  random::seed(7);
  random::shuffle(x);
  random::seed(7);
  const Array perm = random::permutation(6);
  // row i of the shuffled x is the original row perm[i]: (2 p, 2 p + 1)
  std::vector<int64_t> want;
  for (int64_t p : perm.to_vector<int64_t>()) {
    want.push_back(2 * p);
    want.push_back(2 * p + 1);
  }
  EXPECT_EQ(x.to_vector<int64_t>(), want);
  std::vector<int64_t> sorted = perm.to_vector<int64_t>();
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (I{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(random::permutation(0).shape(), (Shape{0}));
}

// take along an axis of a contiguous CPU array copies whole runs (its fast path): every item size, an empty
// index, and the same values as the element-by-element path of a non-contiguous view.
TEST(Api, take_along_an_axis_copies_runs_of_any_dtype) {
  const Array x = arange(12, int64).reshape(3, 4);
  const Array idx = from_data({int64_t{3}, int64_t{0}, int64_t{-1}});
  const std::vector<int64_t> want{3, 0, 3, 7, 4, 7, 11, 8, 11};
  for (DType t : {uint8, bool_, int16, float32, float64}) {
    const Array a = x.astype(t), strided = a.T().copy().T();  // the same values, not C-contiguous
    ASSERT_FALSE(strided.is_contiguous());
    const Array fast = take(a, idx, 1);
    EXPECT_EQ(fast.dtype(), t);
    EXPECT_TRUE(array_equal(fast, take(strided, idx, 1))) << dtype_name(t);
    if (t != bool_) {
      EXPECT_EQ(fast.astype(int64).to_vector<int64_t>(), want) << dtype_name(t);
    }
  }
  EXPECT_EQ(take(x, from_data({int64_t{-1}, int64_t{0}}), 0).to_vector<int64_t>(),
            (std::vector<int64_t>{8, 9, 10, 11, 0, 1, 2, 3}));
  EXPECT_EQ(take(x, zeros({0}, int64), 1).shape(), (Shape{3, 0}));
  EXPECT_EQ(take(x, zeros({2, 0}, int64), 0).shape(), (Shape{2, 0, 4}));
}

// take and put without an axis address the C-order positions of any layout (transposed, stepped, reversed,
// broadcast, offset, 0-d): the same values as on a contiguous copy, on every backend, with the gradient of take
// scattered back to those positions.
TEST(Api, take_and_put_without_an_axis_follow_any_layout) {
  for (const Device& d : harness::backends()) {
    const Array base = arange(60, float32, d).reshape(3, 4, 5);
    const Array idx = from_data({int64_t{0}, int64_t{7}, int64_t{-1}, int64_t{13}, int64_t{7}}).to(d);
    const std::vector<std::pair<std::string, Array>> views = {
        {"transposed", base.permute({2, 0, 1})}, {"stepped", base.slice(2, 0, 5, 2)},
        {"reversed", base.slice(1, 3, -5, -1)},  {"broadcast", base[1][2].reshape({1, 5}).broadcast_to({4, 5})},
        {"offset", base.slice(0, 1, 3).T()},
    };
    for (const auto& [name, v] : views) {
      ASSERT_FALSE(v.is_contiguous()) << name;
      const Array want = take(v.contiguous(), idx);
      EXPECT_EQ(take(v, idx).to(kiln::cpu()).to_vector<float>(), want.to(kiln::cpu()).to_vector<float>())
          << d.str() << " " << name;
      // put writes through the view: the contiguous copy's positions, written the same way, agree.
      if (name == "broadcast") continue;  // a broadcast view is read-only
      Array target = base.copy();
      Array view_of_target = name == "transposed" ? target.permute({2, 0, 1})
                             : name == "stepped"  ? target.slice(2, 0, 5, 2)
                             : name == "reversed" ? target.slice(1, 3, -5, -1)
                                                  : target.slice(0, 1, 3).T();
      Array copy = view_of_target.contiguous();
      const Array values = from_data({-1.f, -2.f, -3.f, -4.f, -5.f}).to(d);
      put(view_of_target, idx, values);
      put(copy, idx, values);
      EXPECT_TRUE(array_equal(view_of_target, copy)) << d.str() << " put " << name;
    }
    // The gradient of take of a transposed view: ones at the picked positions, counted for repeats.
    const Array x = base.astype(float64).set_requires_grad();
    take(x.permute({2, 0, 1}), idx).sum().backward();
    Array want = zeros({5, 3, 4}, float64);
    for (int64_t i : {0, 7, 59, 13, 7}) want.reshape({60}).index_put({i}, want.reshape({60})[i].item<double>() + 1);
    EXPECT_TRUE(array_equal(x.grad().to(kiln::cpu()), want.permute({1, 2, 0}))) << d.str() << " gradient";
    EXPECT_EQ(take(scalar_array(4.0, float32, d), from_data({int64_t{0}, int64_t{-1}}).to(d))
                  .to(kiln::cpu())
                  .to_vector<float>(),
              (std::vector<float>{4, 4}));
  }
}

TEST(Api, bad_indices_and_masks_name_the_problem) {
  const Array x = arange(12, float32).reshape(3, 4);
  expect_error<ShapeError>(
      [&] {
        (void)take(x, from_data({int64_t{0}, int64_t{4}}), 1);
      },
      {"take", "index 4", "size 4", "[-4, 4)"});
  expect_error<ShapeError>([&] { (void)x.index({from_data({int64_t{-4}})}); }, {"index", "-4", "size 3"});
  expect_error<DTypeError>([&] { (void)take(x, from_data({0.5f})); }, {"take", "float32", "astype(int64)"});
  expect_error<ShapeError>(
      [&] {
        (void)x.index({from_data(std::vector<bool>{true, false})});
      },
      {"index", "mask has shape (2,)", "(3,)", "(3, 4)"});
  // Several index arrays broadcast together (NumPy); shapes that do not broadcast name both.
  expect_error<ShapeError>(
      [&] {
        (void)x.index({from_data({int64_t{0}, int64_t{1}}), from_data({int64_t{0}, int64_t{1}, int64_t{2}})});
      },
      {"index", "(2,)", "(3,)"});
  Array y = x.copy();
  expect_error<ShapeError>([&] { y.index_put({y > 5.f}, from_data({1.f, 2.f})); }, {"index_put", "(2,)", "(6,)"});
  expect_error<ShapeError>([&] { put(y, from_data({int64_t{12}}), 1.0); }, {"put", "index 12", "size 12"});
}

TEST(Api, bad_linear_systems_name_the_problem) {
  const Array singular = from_data({1.0, 2.0, 2.0, 4.0}, {2, 2});
  expect_error<LinAlgError>(
      [&] {
        (void)linalg::solve(singular, from_data({1.0, 2.0}));
      },
      {"linalg::solve", "singular", "lstsq"});
  expect_error<ShapeError>([&] { (void)linalg::solve(ones({2, 3}), ones({2})); }, {"linalg::solve", "square"});
  expect_error<ShapeError>([&] { (void)linalg::solve(ones({2, 2}), ones({3})); }, {"linalg::solve", "(2,) or (2, k)"});
  expect_error<ShapeError>([&] { (void)linalg::lstsq(ones({2, 2, 2}), ones({2})); }, {"linalg::lstsq", "batched"});
  // Stacks: the singular matrix is named by its place in the stack; b's stack must broadcast with a's.
  const Array stack_a = stack({eye(2, {}, 0, float64), singular});
  expect_error<LinAlgError>([&] { (void)linalg::solve(stack_a, ones({2}, float64)); },
                            {"linalg::solve", "matrix 1 of the stack", "singular", "lstsq"});
  expect_error<ShapeError>(
      [&] {
        (void)linalg::solve(ones({3, 2, 2}), ones({4, 2, 1}));
      },
      {"linalg::solve", "stacks", "(3, 2, 2)", "(4, 2, 1)", "(3,) against (4,)"});
  expect_error<ShapeError>(
      [&] {
        (void)linalg::solve(ones({3, 2, 2}), ones({3, 2}));
      },
      {"linalg::solve", "(2,) or (..., 2, k)", "only when it is 1-d"});
  expect_error<ShapeError>(
      [&] {
        (void)linalg::solve(ones({3, 2, 3}), ones({3, 2, 1}));
      },
      {"linalg::solve", "square matrix or a stack"});
  // float32 operands give a float32 solution (NumPy's rule)
  const Array x = linalg::solve(from_data({2.f, 0.f, 0.f, 4.f}, {2, 2}), from_data({1.f, 1.f}));
  EXPECT_EQ(x.dtype(), float32);
  EXPECT_EQ(x.to_vector<float>(), (F{0.5f, 0.25f}));
}

TEST(Api, sort_rejects_zero_d) {
  expect_error<ShapeError>([] { (void)sort(scalar_array(1.0)); }, {"sort", "0-d", "reshape(-1)"});
  expect_error<ShapeError>([] { (void)argsort(ones({2}), 1); }, {"argsort"});
}

}  // namespace
}  // namespace kiln
