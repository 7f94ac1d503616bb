// The NumPy golden checks of tests/golden/api_golden.py, run on one device: shared by
// tests/core/test_api.cpp (CPU) and tests/cuda/test_api_gpu.cpp (GPU).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/kiln.hpp"

namespace kiln_test {

inline kiln::Array api_golden(const std::string& name, kiln::Device d) {
  return kiln::load(std::string(KILN_GOLDEN_DIR) + "/api/" + name + ".npy", d);
}

/// Same shape, dtype and values (exact for integers and bools, within `tol` relative to max(1, |x|) for floats;
/// NaN matches NaN).
inline void expect_golden(const kiln::Array& got, const std::string& name, double tol = 0.0) {
  const kiln::Array want = api_golden(name, kiln::cpu());
  ASSERT_EQ(kiln::shape_str(got.shape()), kiln::shape_str(want.shape())) << name;
  ASSERT_EQ(kiln::dtype_name(got.dtype()), kiln::dtype_name(want.dtype())) << name;
  if (kiln::is_floating(want.dtype())) {
    const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::isnan(w[i])) {
        EXPECT_TRUE(std::isnan(g[i])) << name << " [" << i << "]";
      } else if (tol == 0.0) {
        EXPECT_EQ(g[i], w[i]) << name << " [" << i << "]";
        EXPECT_EQ(std::signbit(g[i]), std::signbit(w[i])) << name << " [" << i << "] sign";
      } else {
        EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << name << " [" << i << "]";
      }
    }
  } else {
    EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>()) << name;
  }
}

/// Every golden case on device `d`.
inline void run_api_golden(kiln::Device d) {
  using namespace kiln;
  const Array x = api_golden("in_x", d), idx = api_golden("in_idx", d);
  for (int64_t axis = 0; axis < 3; ++axis) expect_golden(take(x, idx, axis), "take_axis" + std::to_string(axis));
  expect_golden(take(x, from_data(std::vector<int64_t>{0, 59, -1, 17, 17}, {}, d)), "take_flat");
  expect_golden(x.index({Slice(), idx}), "index_int_axis1");
  const Array split = from_data(std::vector<int64_t>{4, 0, -2}, {}, d);
  expect_golden(x.index({1, Slice(), split}), "index_int_split");
  expect_golden(x.index({1, from_data(std::vector<int64_t>{3, 0}, {}, d)}), "index_int_adjacent");
  expect_golden(x.index({idx, Slice(), 1}), "index_array_then_int");
  const Array mask2 = api_golden("in_mask2", d), mask_all = api_golden("in_mask_all", d);
  EXPECT_TRUE(array_equal(mask2, x.index({Slice(), Slice(), 0}) > 0.0));
  expect_golden(x.index({mask2}), "index_mask2");
  expect_golden(x.index({newaxis, mask2}), "index_newaxis_mask2");
  expect_golden(x.index({x > 0.5}), "index_mask_all");
  expect_golden(x.index({Slice(), Slice(), api_golden("in_mask_axis2", d)}), "index_mask_axis2");
  const Array i_col = api_golden("in_i_col", d), j_row = api_golden("in_j_row", d);
  const Array two = from_data(std::vector<int64_t>{0, 2}, {}, d), ends = from_data(std::vector<int64_t>{1, 4}, {}, d);
  expect_golden(x.index({i_col, j_row}), "index_two_arrays");
  expect_golden(x.index({Slice(), j_row.index({Slice(0, 2)}), from_data(std::vector<int64_t>{4, 0}, {}, d)}),
                "index_two_arrays_inner");
  expect_golden(x.index({two, Slice(), ends}), "index_two_arrays_split");
  expect_golden(x.index({api_golden("in_mask3", d), Slice(1, 3), from_data(std::vector<int64_t>{0, 4}, {}, d)}),
                "index_mask_and_array");

  Array y = x.copy();
  y.index_put({mask_all}, 7.0);
  expect_golden(y, "put_mask_scalar");
  y = x.copy();
  y.index_put({mask2}, arange(5, float64, d));
  expect_golden(y, "put_mask2_rows");
  y = x.copy();
  y.index_put({Slice(), idx}, -1.0);
  expect_golden(y, "put_index_axis1");
  y = x.copy();
  put(y, from_data(std::vector<int64_t>{0, 59, -3}, {}, d), from_data({10.0, 20.0, 30.0}, {3}, d));
  expect_golden(y, "put_flat");
  y = x.copy();
  y.index_put({i_col, j_row}, -5.0);
  expect_golden(y, "put_two_arrays");
  y = x.copy();
  y.index_put({two, Slice(), ends}, arange(4, float64, d));
  expect_golden(y, "put_two_arrays_split");

  const Array a = api_golden("in_close_a", d), b = api_golden("in_close_b", d);
  expect_golden(isclose(a, b), "isclose_default");
  expect_golden(isclose(a, b, 1e-5, 1e-8, true), "isclose_equal_nan");
  expect_golden(isclose(a, b, 1e-7, 0.0), "isclose_tight");

  const Array sf = api_golden("in_sort_f", d), si = api_golden("in_sort_i", d);
  for (int64_t axis = 0; axis < 2; ++axis) {
    expect_golden(argsort(sf, axis), "argsort_f_axis" + std::to_string(axis));
    expect_golden(sort(sf, axis), "sort_f_axis" + std::to_string(axis));
  }
  expect_golden(argsort(si), "argsort_i");
  expect_golden(sort(si), "sort_i");

  random::seed(0);
  expect_golden(random::permutation(10, d), "permutation_s0_n10");
  random::seed(42);
  const Array perm = random::permutation(1000, d);
  EXPECT_EQ(perm.device(), d);
  expect_golden(perm, "permutation_s42_n1000");

  const Array sa = api_golden("in_solve_a", d), sb = api_golden("in_solve_b", d);
  expect_golden(linalg::solve(sa, sb), "solve_mat", 1e-12);
  expect_golden(linalg::solve(sa, sb.index({Slice(), 0})), "solve_vec", 1e-12);
  const Array ta = api_golden("in_solve_stack_a", d), tb = api_golden("in_solve_stack_b", d);
  const Array tv = api_golden("in_solve_stack_v", d);
  expect_golden(linalg::solve(ta, tb), "solve_stack", 1e-12);
  expect_golden(linalg::solve(ta, tv), "solve_stack_vec", 1e-12);
  expect_golden(linalg::solve(ta.index({1, 0}), tb), "solve_one_a_stack_b", 1e-12);
  expect_golden(linalg::solve(ta.astype(float32), tb.astype(float32)), "solve_stack_f32", 1e-5);
  EXPECT_EQ(linalg::solve(ta, tb).device(), d);
  EXPECT_EQ(linalg::solve(zeros({0, 3, 3}, float64, d), tv).shape(), (Shape{0, 3}));
  EXPECT_EQ(linalg::solve(ta, zeros({4, 3, 0}, float64, d)).shape(), (Shape{2, 4, 3, 0}));
  const linalg::LstsqResult r = linalg::lstsq(api_golden("in_lstsq_a", d), api_golden("in_lstsq_b", d));
  expect_golden(r.solution, "lstsq_x", 1e-12);
  expect_golden(r.residuals, "lstsq_res", 1e-12);
  expect_golden(r.singular_values, "lstsq_sv", 1e-12);
  EXPECT_EQ(r.rank, 3);
  const Array yb = api_golden("in_lstsq_b", d).index({Slice(), 0});
  const linalg::LstsqResult rd = linalg::lstsq(api_golden("in_lstsq_rd", d), yb);
  expect_golden(rd.solution, "lstsq_rd_x", 1e-10);
  expect_golden(rd.singular_values, "lstsq_rd_sv", 1e-10);
  EXPECT_EQ(rd.rank, 2);
  EXPECT_EQ(rd.residuals.shape(), (Shape{0}));
}

}  // namespace kiln_test
