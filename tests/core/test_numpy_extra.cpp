// kiln/numpy_extra.hpp on every backend: the NumPy golden cases of tests/golden/numpy_extra_golden.py, gradchecks
// of the differentiable functions (central differences in float64), the error messages, and *_like keeping
// the input's memory layout (strides checked against hand-computed ones).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/io.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;
using Fn = std::function<Array(const std::vector<Array>&)>;

std::vector<Device> devices() { return harness::backends(); }

Array golden(const std::string& name, Device d) {
  return load(std::string(KILN_GOLDEN_DIR) + "/numpy_extra/" + name + ".npy", d);
}

/// Same shape, dtype and values: exact for integers and bools; within `tol` relative to max(1, |want|) for
/// floats (NaN matches NaN; tol 0 also checks the sign of zeros).
void expect_golden(const Array& got, const std::string& name, double tol = 1e-12) {
  SCOPED_TRACE(name);
  const Array want = golden(name, cpu());
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape()));
  ASSERT_EQ(dtype_name(got.dtype()), dtype_name(want.dtype()));
  if (!is_floating(want.dtype())) {
    EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>());
    return;
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << "[" << i << "]";
    } else if (tol == 0.0) {
      EXPECT_EQ(g[i], w[i]) << "[" << i << "]";
      EXPECT_EQ(std::signbit(g[i]), std::signbit(w[i])) << "[" << i << "] sign";
    } else {
      EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << "[" << i << "]";
    }
  }
}

Array ints(const std::vector<int64_t>& v, Device d) { return from_data(v, {}, d); }

// ---------------------------------------------------------------- golden cases
TEST(NumpyExtra, triangles_diagonals_and_products_match_numpy_on_every_backend) {
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    const Array x = golden("in_x", d), x3 = golden("in_x3", d), v = golden("in_v", d), w = golden("in_w", d);
    const Array xi = golden("in_xi", d);
    for (int64_t k : {-1, 0, 2}) {
      expect_golden(tril(x, k), "tril_k" + std::to_string(k), 0.0);
      expect_golden(triu(x, k), "triu_k" + std::to_string(k), 0.0);
    }
    expect_golden(tril(x3, 1), "tril_x3", 0.0);
    expect_golden(triu(xi, -1), "triu_xi");
    for (int64_t k : {0, 2, -1}) expect_golden(diag(v, k), "diag_v_k" + std::to_string(k), 0.0);
    for (int64_t k : {0, 1, -2}) expect_golden(diag(x, k), "diag_x_k" + std::to_string(k), 0.0);
    expect_golden(diagonal(x3, 1, 0, 2), "diagonal_x3_o1_a0_a2", 0.0);
    expect_golden(diagonal(x3, -1, 2, 1), "diagonal_x3_om1_a2_a1", 0.0);
    expect_golden(trace(x), "trace_x");
    expect_golden(trace(x3, 1, 1, 2), "trace_x3_o1_a1_a2");
    expect_golden(trace(xi), "trace_xi");
    expect_golden(outer(v, w), "outer_v_w", 0.0);
    expect_golden(tensordot(x3, golden("in_y3", d)), "tensordot_2");
    expect_golden(tensordot(x3, golden("in_z3", d), {0, 2}, {1, 0}), "tensordot_pairs");
    expect_golden(tensordot(v, w, 0), "tensordot_0");
  }
}

TEST(NumpyExtra, pad_tile_repeat_roll_flip_match_numpy_on_every_backend) {
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    const Array x = golden("in_x", d), x3 = golden("in_x3", d), v = golden("in_v", d);
    const Array xi = golden("in_xi", d), s = golden("in_short", d);
    expect_golden(pad(x, {1, 2}, "constant", 7.0), "pad_constant", 0.0);
    expect_golden(pad(x, std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {2, 3}}, "edge"), "pad_edge", 0.0);
    for (const char* mode : {"reflect", "symmetric", "wrap", "edge"}) {
      expect_golden(pad(s, {7, 8}, mode), std::string("pad_") + mode + "_wide", 0.0);
      expect_golden(pad(x, std::vector<std::pair<int64_t, int64_t>>{{2, 1}, {3, 4}}, mode),
                    std::string("pad_") + mode + "_2d", 0.0);
    }
    expect_golden(pad(xi, 1, "constant", -3), "pad_int_constant");
    expect_golden(tile(x, {2, 1, 2}), "tile_x_2_1_2", 0.0);
    expect_golden(tile(v, {2, 3}), "tile_v_2_3", 0.0);
    expect_golden(tile(x3, {2}), "tile_x3_2", 0.0);
    expect_golden(repeat(x, 2), "repeat_x_2_flat", 0.0);
    expect_golden(repeat(x, 3, 1), "repeat_x_3_axis1", 0.0);
    expect_golden(repeat(x, ints({1, 0, 2, 1}, d), 0), "repeat_x_counts_axis0", 0.0);
    expect_golden(roll(x, 2), "roll_x_2", 0.0);
    expect_golden(roll(x, -1, 1), "roll_x_m1_axis1", 0.0);
    expect_golden(roll(x, {1, 2}, {0, 1}), "roll_x_1_2_axes01", 0.0);
    expect_golden(roll(x, {1, 1}, {1, 1}), "roll_x_1_1_axes11", 0.0);
    expect_golden(flip(x3), "flip_x3_all", 0.0);
    expect_golden(flip(x3, 1), "flip_x3_axis1", 0.0);
    expect_golden(flip(x3, {0, 2}), "flip_x3_axes02", 0.0);
    EXPECT_TRUE(flip(x3).shares_storage(x3));  // a view, as NumPy's
    EXPECT_FALSE(tile(x, {1, 1}).shares_storage(x));  // a new array even when nothing repeats
  }
}

TEST(NumpyExtra, unique_quantiles_and_counting_match_numpy_on_every_backend) {
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    const UniqueResult u = unique(golden("in_ui", d), {.return_index = true, .return_inverse = true,
                                                       .return_counts = true});
    expect_golden(u.values, "unique_ui_values");
    expect_golden(u.indices, "unique_ui_index");
    expect_golden(u.inverse, "unique_ui_inverse");
    expect_golden(u.counts, "unique_ui_counts");
    const UniqueResult uf = unique(golden("in_uf", d), {.return_counts = true});
    expect_golden(uf.values, "unique_uf_values");  // one NaN, last; 0.0 and -0.0 are one value
    expect_golden(uf.counts, "unique_uf_counts");
    EXPECT_FALSE(uf.indices.defined());

    const Array x = golden("in_x", d), x3 = golden("in_x3", d), xi = golden("in_xi", d);
    expect_golden(quantile(x3, 0.3), "quantile_x3_q03");
    expect_golden(quantile(x3, std::vector<double>{0.0, 0.25, 0.5, 1.0}, 1), "quantile_x3_qs_axis1");
    expect_golden(quantile(x3, 0.7, {0, 2}, true), "quantile_x3_axes02_keep");
    expect_golden(median(x3, -1), "median_x3_last");
    expect_golden(median(x), "median_x");
    expect_golden(percentile(xi, 40.0, 0), "percentile_xi_40_axis0");
    expect_golden(median(golden("in_xn", d), 1), "median_xn_axis1");

    const Array data = golden("in_data", d);
    HistogramResult h = histogram(data, 10);
    expect_golden(h.hist, "histogram_10_hist");
    expect_golden(h.bin_edges, "histogram_10_edges", 1e-15);
    h = histogram(data, 5, std::pair{-1.0, 1.0});
    expect_golden(h.hist, "histogram_5_range_hist");
    expect_golden(h.bin_edges, "histogram_5_range_edges", 1e-15);
    expect_golden(histogram(data, golden("in_given_edges", d)).hist, "histogram_edges_hist");
    expect_golden(histogram(data, 4, std::pair{-2.0, 2.0}, golden("in_dw", d)).hist, "histogram_weights_hist");
    const Array bc = golden("in_bc", d);
    expect_golden(bincount(bc), "bincount");
    expect_golden(bincount(bc, {}, 10), "bincount_min10");
    expect_golden(bincount(bc, golden("in_bw", d)), "bincount_weights");

    const Array sa = golden("in_sa", d), sv = golden("in_sv", d);
    expect_golden(searchsorted(sa, sv), "searchsorted_left");
    expect_golden(searchsorted(sa, sv, "right"), "searchsorted_right");
    expect_golden(searchsorted(golden("in_sn", d), from_data({std::nan(""), 3.0, 2.0}, {3}, d)), "searchsorted_nan");

    const Array mx = arange(2.0, float64, d), my = arange(3.0, float64, d) + 10, mz = arange(4.0, float64, d) + 20;
    for (const char* indexing : {"xy", "ij"}) {
      const std::vector<Array> g3 = meshgrid({mx, my, mz}, indexing), g2 = meshgrid({mx, my}, indexing);
      for (size_t i = 0; i < 3; ++i)
        expect_golden(g3[i], "meshgrid3_" + std::string(indexing) + "_" + std::to_string(i), 0.0);
      for (size_t i = 0; i < 2; ++i)
        expect_golden(g2[i], "meshgrid2_" + std::string(indexing) + "_" + std::to_string(i), 0.0);
    }
  }
}

struct EinsumCase {
  int index;
  std::string subscripts;
  int operands;
};

std::vector<EinsumCase> einsum_cases() {
  std::ifstream in(std::string(KILN_GOLDEN_DIR) + "/numpy_extra/einsum_cases.txt");
  std::vector<EinsumCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string index, subscripts, count;
    std::getline(fields, index, '|');
    std::getline(fields, subscripts, '|');
    std::getline(fields, count, '|');
    cases.push_back({std::stoi(index), subscripts, std::stoi(count)});
  }
  return cases;
}

TEST(NumpyExtra, einsum_matches_numpy_on_every_backend) {
  const std::vector<EinsumCase> cases = einsum_cases();
  ASSERT_GE(cases.size(), 15u);
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    for (const EinsumCase& c : cases) {
      SCOPED_TRACE(c.subscripts);
      std::vector<Array> operands;
      for (int j = 0; j < c.operands; ++j)
        operands.push_back(golden("in_einsum" + std::to_string(c.index) + "_" + std::to_string(j), d));
      expect_golden(einsum(c.subscripts, operands), "einsum" + std::to_string(c.index));
    }
    expect_golden(einsum("ij,jk", {golden("in_einsum_int_a", d), golden("in_einsum_int_b", d)}), "einsum_int");
  }
}

// ---------------------------------------------------------------- gradients
/// Deterministic distinct float64 values in [-1, 1].
Array values(const Shape& shape, uint64_t salt, Device d) {
  const int64_t n = shape_numel(shape);
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] =
        2.0 * std::fmod(0.6180339887 * static_cast<double>(i + 1) + 0.1234 * static_cast<double>(salt), 1.0) - 1.0;
  return from_data(v, shape, d);
}

void expect_gradcheck(const Fn& f, const std::vector<Array>& inputs, const std::string& what) {
  const GradcheckResult r = gradcheck(f, inputs);
  EXPECT_TRUE(r.passed) << what << " on " << inputs[0].device().str() << ": " << r.report;
}

TEST(NumpyExtra, shape_functions_pass_gradcheck_on_every_backend) {
  for (Device d : devices()) {
    const Array m = values({3, 4}, 1, d), v = values({3}, 2, d), w = values({4}, 3, d), t = values({2, 3, 4}, 4, d);
    expect_gradcheck([](const auto& a) { return tril(a[0], 1); }, {m}, "tril");
    expect_gradcheck([](const auto& a) { return triu(a[0], -1); }, {t}, "triu");
    expect_gradcheck([](const auto& a) { return diag(a[0], -1); }, {v}, "diag of a vector");
    expect_gradcheck([](const auto& a) { return diag(a[0], 1); }, {m}, "diag of a matrix");
    expect_gradcheck([](const auto& a) { return trace(a[0], 1, 0, 2); }, {t}, "trace");
    expect_gradcheck([](const auto& a) { return outer(a[0], a[1]); }, {v, w}, "outer");
    expect_gradcheck([](const auto& a) { return tensordot(a[0], a[1], 1); }, {t, values({4, 2}, 5, d)}, "tensordot");
    for (const char* mode : {"constant", "edge", "reflect", "symmetric", "wrap"})
      expect_gradcheck([mode](const auto& a) { return pad(a[0], {{2, 5}, {1, 0}}, mode, 0.5); }, {m},
                       std::string("pad ") + mode);
    expect_gradcheck([](const auto& a) { return tile(a[0], {2, 1, 2}); }, {m}, "tile");
    expect_gradcheck([](const auto& a) { return repeat(a[0], 2, 1); }, {m}, "repeat");
    expect_gradcheck([d](const auto& a) { return repeat(a[0], ints({2, 0, 3}, d), 0); }, {m}, "repeat counts");
    expect_gradcheck([](const auto& a) { return roll(a[0], {1, -2}, {0, 1}); }, {m}, "roll");
    expect_gradcheck([](const auto& a) { return flip(a[0], {0, 2}); }, {t}, "flip");
  }
}

TEST(NumpyExtra, einsum_and_quantile_pass_gradcheck_on_every_backend) {
  for (Device d : devices()) {
    const Array a = values({2, 3}, 1, d), b = values({3, 4}, 2, d), c = values({4, 2}, 3, d);
    const Array sq = values({3, 3}, 4, d), batch = values({2, 3, 4}, 5, d);
    expect_gradcheck([](const auto& x) { return einsum("ij,jk->ik", x); }, {a, b}, "einsum matmul");
    expect_gradcheck([](const auto& x) { return einsum("ij,jk,ki->", x); }, {a, b, c}, "einsum chain");
    expect_gradcheck([](const auto& x) { return einsum("ii", x); }, {sq}, "einsum trace");
    expect_gradcheck([](const auto& x) { return einsum("ii->i", x); }, {sq}, "einsum diagonal");
    expect_gradcheck([](const auto& x) { return einsum("...j,jk->...k", x); }, {batch, c}, "einsum ellipsis");
    expect_gradcheck([](const auto& x) { return einsum("i,j->ji", x); }, {values({3}, 6, d), values({2}, 7, d)},
                     "einsum outer");
    expect_gradcheck([](const auto& x) { return quantile(x[0], std::vector<double>{0.1, 0.5, 0.9}, 1); }, {batch},
                     "quantile");
    expect_gradcheck([](const auto& x) { return median(x[0]); }, {b}, "median");
  }
}

// ---------------------------------------------------------------- errors
TEST(NumpyExtra, bad_arguments_throw_errors_naming_the_function_and_the_fix) {
  const Array m = zeros({3, 4}), v = zeros({3});
  expect_error<ShapeError>([&] { tril(v); }, {"tril", "at least 2 dimensions", "(3,)"});
  expect_error<ShapeError>([&] { diagonal(m, 0, 1, -1); }, {"diagonal", "same axis", "different axes"});
  expect_error<ShapeError>([&] { diagonal(m, 0, 0, 2); }, {"diagonal", "axis 2"});
  expect_error<ShapeError>([&] { diag(zeros({2, 2, 2})); }, {"diag", "(2, 2, 2)", "diagonal()"});
  expect_error<ShapeError>([&] { tensordot(m, m, 1); }, {"tensordot", "(3, 4)", "4 elements", "3", "equal extent"});
  expect_error<ShapeError>([&] { tensordot(m, m, 3); }, {"tensordot", "axes=3", "smaller rank"});
  expect_error<ShapeError>([&] { tensordot(m, m, {0, 0}, {0, 1}); }, {"tensordot", "repeated"});
  expect_error<ValueError>([&] { pad(m, 1, "mirror"); }, {"pad", "'mirror'", "\"reflect\""});
  expect_error<ValueError>([&] { pad(m, {-1, 2}); }, {"pad", "negative", ">= 0"});
  expect_error<ShapeError>([&] { pad(m, std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 1}, {1, 1}}); },
                           {"pad", "3 (before, after) pairs", "(3, 4)"});
  expect_error<ValueError>([&] { pad(zeros({0, 2}), 1, "wrap"); }, {"pad", "empty", "\"constant\""});
  expect_error<ValueError>([&] { repeat(m, -1); }, {"repeat", "-1", ">= 0"});
  expect_error<ShapeError>([&] { repeat(m, ints({1, 2}, cpu()), 0); }, {"repeat", "2 counts", "(3, 4)"});
  expect_error<ShapeError>([&] { roll(m, {1, 2}, {0}); }, {"roll", "[1, 2]", "[0]", "one shift per axis"});
  expect_error<ShapeError>([&] { flip(m, {1, -1}); }, {"flip", "repeated", "once"});
  expect_error<ValueError>([&] { quantile(m, 1.5); }, {"quantile", "outside [0, 1]"});
  expect_error<ValueError>([&] { percentile(m, -1.0); }, {"percentile", "outside [0, 100]"});
  expect_error<ValueError>([&] { median(zeros({0})); }, {"median", "no elements"});
  expect_error<ValueError>([&] { bincount(ints({1, -2}, cpu())); }, {"bincount", "-2", ">= 0"});
  expect_error<DTypeError>([&] { bincount(v); }, {"bincount", "float32", "astype(int64)"});
  expect_error<ValueError>([&] { searchsorted(v, v, "middle"); }, {"searchsorted", "'middle'", "\"right\""});
  expect_error<ShapeError>([&] { searchsorted(m, v); }, {"searchsorted", "1-d", "(3, 4)"});
  expect_error<ValueError>([&] { histogram(v, from_data({0.0, 2.0, 1.0})); }, {"histogram", "monotonically"});
  expect_error<ValueError>([&] { histogram(v, 0); }, {"histogram", "bins is 0"});
  expect_error<ValueError>([&] { meshgrid({v}, "yx"); }, {"meshgrid", "'yx'", "\"ij\""});
}

TEST(NumpyExtra, einsum_errors_name_the_subscripts_the_operands_and_the_fix) {
  const Array a = zeros({2, 3}), b = zeros({4, 5});
  expect_error<ValueError>([&] { einsum("ij,j1", {a, b}); }, {"einsum", "'1'", "letters"});
  expect_error<ValueError>([&] { einsum("ij,jk", {a}); }, {"einsum", "2 operand(s)", "1 were given"});
  expect_error<ShapeError>([&] { einsum("ijk", {a}); }, {"einsum", "operand 0", "(2, 3)", "'ijk'", "3 axes"});
  expect_error<ShapeError>([&] { einsum("ij,jk->ik", {a, b}); },
                           {"einsum", "'j'", "extent 3", "operand 0", "(2, 3)", "4", "operand 1", "(4, 5)"});
  expect_error<ValueError>([&] { einsum("ij->iz", {a}); }, {"einsum", "'z'", "no operand"});
  expect_error<ValueError>([&] { einsum("ij->ii", {a}); }, {"einsum", "repeats", "once"});
  expect_error<ValueError>([&] { einsum("...j->j", {zeros({2, 3, 4})}); }, {"einsum", "'...'", "add '...'"});
  expect_error<ValueError>([&] { einsum("i..j.", {a}); }, {"einsum", "'...'"});
  expect_error<ShapeError>([&] { einsum("ii", {a}); }, {"einsum", "'i'", "repeats", "equal extents"});
}

// ---------------------------------------------------------------- *_like layouts
TEST(NumpyExtra, like_functions_keep_a_permuted_dense_layout_on_every_backend) {
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    // (N, C, H, W) = (2, 3, 4, 5) channels-last: memory (N, H, W, C), strides (60, 1, 15, 3).
    const Array cl = to_channels_last(arange(120.0, float32, d).reshape({2, 3, 4, 5}));
    ASSERT_EQ(cl.strides(), (Shape{60, 1, 15, 3}));
    const Array e = empty_like(cl);
    EXPECT_EQ(e.strides(), (Shape{60, 1, 15, 3}));
    EXPECT_EQ(e.dtype(), float32);
    const Array z = zeros_like(cl, float64);
    EXPECT_EQ(z.strides(), (Shape{60, 1, 15, 3}));
    EXPECT_EQ(z.dtype(), float64);
    EXPECT_EQ(z.sum().item<double>(), 0.0);
    const Array o = ones_like(cl);
    EXPECT_EQ(o.strides(), (Shape{60, 1, 15, 3}));
    EXPECT_EQ(o.sum().item<double>(), 120.0);
    const Array f = full_like(cl, 2.5);
    EXPECT_EQ(f.strides(), (Shape{60, 1, 15, 3}));
    EXPECT_EQ(f.to_vector<float>(), std::vector<float>(120, 2.5f));
    // A transpose keeps its (column-major) strides; a C-contiguous array stays C-contiguous.
    const Array t = zeros({3, 4}, float32, d).T();
    EXPECT_EQ(zeros_like(t).strides(), (Shape{1, 4}));
    EXPECT_EQ(zeros_like(zeros({3, 4}, float32, d)).strides(), (Shape{4, 1}));
    // Not dense: packed in the input's axis order (NumPy's order='K').
    const Array strided = zeros({6, 8}, float32, d).T().slice(0, 0, 8, 2);  // shape (4, 6), strides (2, 8)
    EXPECT_EQ(empty_like(strided).strides(), (Shape{1, 4}));
    // Negative strides are packed forward.
    EXPECT_EQ(empty_like(flip(zeros({3, 4}, float32, d))).strides(), (Shape{4, 1}));
    // Channels-last with N = 1: the size-1 axis does not disturb the order.
    const Array one = to_channels_last(zeros({1, 3, 2, 2}, float32, d));
    EXPECT_TRUE(is_channels_last(ones_like(one)));
  }
}

}  // namespace
}  // namespace kiln
