// Tests of the reductions (sum, prod, mean, var, std, max, min, argmax, argmin,
// all, any, logsumexp) and the scans (cumsum, cumprod): NumPy golden data from tests/golden/reduce_golden.py for every
// dtype, axes combination, keepdims, strided/transposed/broadcast layouts, NaN
// and empty cases, large (parallel) inputs; float64 references for bfloat16 and
// accuracy; hand-computed values for edge cases; and every error thrown.
#include <gtest/gtest.h>

#include "test_util.hpp"

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/op_table.hpp"
#include "core/reduce.hpp"
#include "kiln/io.hpp"
#include "kiln/ops.hpp"

namespace kiln {
namespace {

const std::string kDir = std::string(KILN_GOLDEN_DIR) + "/reduce/";

struct ReduceCase {
  std::string id, op, axes;
  bool keepdims = false;
  int64_t ddof = 0;
  std::string input, view;
};

std::vector<ReduceCase> load_cases(const std::string& prefix) {
  std::ifstream f(kDir + "reduce_cases.txt");
  EXPECT_TRUE(f.good()) << "missing golden manifest " << kDir << "reduce_cases.txt";
  std::vector<ReduceCase> cases;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    ReduceCase c;
    int keepdims = 0;
    in >> c.id >> c.op >> c.axes >> keepdims >> c.ddof >> c.input >> c.view;
    c.keepdims = keepdims != 0;
    if (c.id.rfind(prefix, 0) == 0) cases.push_back(c);
  }
  EXPECT_FALSE(cases.empty()) << "no golden cases start with " << prefix;
  return cases;
}

std::vector<int64_t> parse_axes(const std::string& text) {
  std::vector<int64_t> axes;
  if (text == "-") return axes;
  std::istringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) axes.push_back(std::stoll(part));
  return axes;
}

/// The same view reduce_golden.py's apply_view takes.
Array apply_view(const Array& x, const std::string& view) {
  if (view == "t") return x.transpose();
  if (view == "rev") return x.slice(0, {}, {}, 2).slice(x.ndim() - 1, {}, {}, -1);
  if (view == "bcast") {
    Shape s = x.shape();
    s.insert(0, 3);
    return broadcast_to(x, s);
  }
  return x;
}

Array run_case(const ReduceCase& c, const Array& x) {
  const Axes axes = c.axes == "none" ? Axes() : Axes(parse_axes(c.axes));
  std::optional<int64_t> axis;
  if (c.axes != "none" && c.op.rfind("arg", 0) == 0) axis = parse_axes(c.axes).at(0);
  const bool k = c.keepdims;
  // Every `Axes` row of kiln/reductions.def by its table name; the `Own` rows by hand.
#define KILN_REDUCTION(Code, name, api) KILN_RUN_##api(name)
#define KILN_RUN_Axes(name) \
  if (c.op == #name) return name(x, axes, k);
#define KILN_RUN_Own(name)
#define KILN_RUN_None(name)
#include "kiln/reductions.def"
#undef KILN_RUN_Axes
#undef KILN_RUN_Own
#undef KILN_RUN_None
  if (c.op == "var") return var(x, axes, c.ddof, k);
  if (c.op == "std") return kiln::std(x, axes, c.ddof, k);
  if (c.op == "argmax") return argmax(x, axis, k);
  if (c.op == "argmin") return argmin(x, axis, k);
  const std::optional<int64_t> scan_axis =
      c.axes == "none" ? std::nullopt : std::optional<int64_t>(parse_axes(c.axes).at(0));
  if (c.op == "cumsum") return cumsum(x, scan_axis);
  if (c.op == "cumprod") return cumprod(x, scan_axis);
  throw std::runtime_error("unknown op " + c.op);
}

/// Relative tolerance (scaled by max(1, max |expected|)) for a float result dtype.
double tolerance(DType t, const std::string& op) {
  const bool second_order = op == "var" || op == "std";
  switch (t) {
    case DType::Float16:
      return second_order ? 4e-3 : 2e-3;
    case DType::BFloat16:
      return 1.6e-2;
    case DType::Float32:
      return second_order ? 2e-5 : 2e-6;
    default:
      return 1e-12;
  }
}

/// Expects `got` to equal `expected` in dtype, shape and values (floats within tolerance, NaN where NaN).
void expect_same(const Array& got, const Array& expected, const std::string& op, const std::string& id) {
  ASSERT_EQ(dtype_name(got.dtype()), dtype_name(expected.dtype())) << id;
  ASSERT_EQ(shape_str(got.shape()), shape_str(expected.shape())) << id;
  if (is_floating(expected.dtype())) {
    std::vector<double> g = got.to_vector<double>(), e = expected.to_vector<double>();
    double scale = 1.0;
    for (double v : e)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    const double tol = tolerance(expected.dtype(), op) * scale;
    for (size_t i = 0; i < e.size(); ++i) {
      if (std::isnan(e[i]))
        EXPECT_TRUE(std::isnan(g[i])) << id << " [" << i << "]: got " << g[i] << ", want nan";
      else if (std::isinf(e[i]))
        EXPECT_EQ(g[i], e[i]) << id << " [" << i << "]";
      else
        EXPECT_NEAR(g[i], e[i], tol) << id << " [" << i << "]";
    }
  } else {
    EXPECT_EQ(got.to_vector<int64_t>(), expected.to_vector<int64_t>()) << id;
  }
}

void run_golden(const std::string& prefix) {
  std::map<std::string, Array> inputs;
  for (const ReduceCase& c : load_cases(prefix)) {
    if (!inputs.count(c.input)) inputs[c.input] = load(kDir + "in_" + c.input + ".npy");
    const Array x = apply_view(inputs[c.input], c.view);
    try {
      expect_same(run_case(c, x), load(kDir + c.id + ".npy"), c.op, c.id);
    } catch (const std::exception& e) {
      ADD_FAILURE() << c.id << " threw: " << e.what();
    }
  }
}

using kiln_test::expect_error;

Array matrix_2x3() { return from_data(std::vector<double>{1, 5, 3, 4, 2, 6}, Shape{2, 3}); }

// ---------------------------------------------------------------- golden data

TEST(ReduceGolden, every_dtype_op_and_axes_combination_matches_numpy) { run_golden("dtype_"); }
TEST(ReduceGolden, transposed_negative_step_and_broadcast_views_match_numpy) { run_golden("layout_"); }
TEST(ReduceGolden, nan_propagates_and_first_nan_wins_like_numpy) { run_golden("nan_"); }
TEST(ReduceGolden, empty_arrays_give_identities_empty_results_and_nan_means) { run_golden("empty_"); }
TEST(ReduceGolden, variance_is_two_pass_accurate_with_a_large_mean) { run_golden("offset_"); }
TEST(ReduceGolden, large_inputs_on_the_parallel_paths_match_numpy) { run_golden("big_"); }
TEST(ReduceGolden, logsumexp_cumsum_and_cumprod_match_numpy_with_its_dtypes_and_specials) { run_golden("scan_"); }

// ---------------------------------------------------------------- the reduction table

TEST(ReduceTable, golden_data_covers_every_public_reduction_and_names_only_table_rows) {
  std::set<std::string> golden;
  for (const ReduceCase& c : load_cases("")) golden.insert(c.op);
  for (int i = 0; i < detail::kNumReduceOps; ++i) {
    const detail::ReduceInfo& info = detail::kReduceInfo[i];
    if (info.api != detail::ReduceApi::None) {
      EXPECT_TRUE(golden.count(info.name)) << "reduce_golden.py has no cases for '" << info.name << "'";
    }
  }
  for (const std::string& op : golden) {
    EXPECT_TRUE(detail::reduce_op_by_name(op.c_str())) << "golden op '" << op << "' is not in kiln/reductions.def";
  }
}

TEST(ReduceTable, kernel_rows_come_first_and_names_round_trip) {
  for (int i = 0; i < detail::kNumReduceOps; ++i) {
    const auto op = static_cast<detail::ReduceOp>(i);
    EXPECT_EQ(detail::is_reduce_kernel(op), detail::reduce_info(op).kind == detail::ReduceKind::Kernel) << i;
    EXPECT_EQ(detail::is_reduce_kernel(op), detail::reduce_info(op).acc != detail::ReduceAcc::None) << i;
    EXPECT_EQ(detail::reduce_op_by_name(detail::reduce_op_name(op)), op) << detail::reduce_op_name(op);
  }
  EXPECT_FALSE(detail::reduce_op_by_name("no_such_reduction"));
}

/// The `Axes` rows by table name (the public functions the table declares).
Array run_axes_row(detail::ReduceOp op, const Array& x, const Axes& axes) {
  switch (op) {
#define KILN_REDUCTION(Code, name, api) KILN_CASE_##api(Code, name)
#define KILN_CASE_Axes(Code, name) \
  case detail::ReduceOp::Code:     \
    return name(x, axes);
#define KILN_CASE_Own(Code, name)
#define KILN_CASE_None(Code, name)
#include "kiln/reductions.def"
#undef KILN_CASE_Axes
#undef KILN_CASE_Own
#undef KILN_CASE_None
    default:
      break;
  }
  throw std::logic_error("not an Axes row");
}

TEST(ReduceTable, result_dtypes_and_empty_values_are_what_the_table_says) {
  for (int i = 0; i < detail::kNumReduceOps; ++i) {
    const auto op = static_cast<detail::ReduceOp>(i);
    const detail::ReduceInfo& info = detail::reduce_info(op);
    if (info.api != detail::ReduceApi::Axes) continue;
    for (DType t : {DType::Bool, DType::Int8, DType::UInt8, DType::Int32, DType::Int64, DType::Float16,
                    DType::BFloat16, DType::Float32, DType::Float64}) {
      const Array x = ones({2, 3}, t);
      EXPECT_EQ(run_axes_row(op, x, 1).dtype(), detail::reduce_result_dtype(op, t)) << info.name << " " << dtype_name(t);
      const Array empty = zeros({2, 0}, t);
      if (info.empty == detail::ReduceEmpty::Throws) {
        EXPECT_THROW(run_axes_row(op, empty, 1), ValueError) << info.name;
        continue;
      }
      const Array got = run_axes_row(op, empty, 1).astype(DType::Float64);
      const double want = detail::reduce_empty_value(op).to_double();
      for (double v : got.to_vector<double>()) {
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(v)) << info.name << " " << dtype_name(t);
        else
          EXPECT_EQ(v, want) << info.name << " " << dtype_name(t);
      }
    }
  }
}

// ---------------------------------------------------------------- hand-computed values

TEST(Reduce, sum_over_axes_with_and_without_keepdims) {
  Array a = matrix_2x3();
  EXPECT_EQ(sum(a).item<double>(), 21.0);
  EXPECT_EQ(sum(a, 0).to_vector<double>(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum(a, -1).to_vector<double>(), (std::vector<double>{9, 12}));
  EXPECT_EQ(shape_str(sum(a, 1, true).shape()), "(2, 1)");
  EXPECT_EQ(shape_str(sum(a, {0, 1}, true).shape()), "(1, 1)");
  EXPECT_EQ(shape_str(sum(a).shape()), "()");
}

TEST(Reduce, array_members_match_the_free_functions) {
  Array a = matrix_2x3();
  EXPECT_EQ(a.sum(0).to_vector<double>(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(a.mean().item<double>(), 3.5);
  EXPECT_EQ(a.max(1).to_vector<double>(), (std::vector<double>{5, 6}));
  EXPECT_EQ(a.min(1, true).to_vector<double>(), (std::vector<double>{1, 2}));
  EXPECT_EQ(shape_str(a.min(1, true).shape()), "(2, 1)");
}

TEST(Reduce, result_dtypes_follow_numpy2) {
  EXPECT_EQ(sum(ones({3}, bool_)).dtype(), int64);
  EXPECT_EQ(sum(ones({3}, uint8)).dtype(), int64);  // NumPy: uint64, which kiln lacks
  EXPECT_EQ(prod(ones({3}, int8)).dtype(), int64);
  EXPECT_EQ(sum(ones({3}, float16)).dtype(), float16);
  EXPECT_EQ(sum(ones({3}, bfloat16)).dtype(), bfloat16);
  EXPECT_EQ(mean(ones({3}, int32)).dtype(), float64);
  EXPECT_EQ(mean(ones({3}, float16)).dtype(), float16);
  EXPECT_EQ(var(ones({3}, bool_)).dtype(), float64);
  EXPECT_EQ(kiln::std(ones({3}, float32)).dtype(), float32);
  EXPECT_EQ(max(ones({3}, int16)).dtype(), int16);
  EXPECT_EQ(argmax(ones({3}, float32)).dtype(), int64);
  EXPECT_EQ(all(ones({3}, float32)).dtype(), bool_);
}

TEST(Reduce, argmax_and_argmin_return_the_first_of_ties) {
  Array a = from_data(std::vector<int32_t>{1, 3, 3, 0, 2, 0});
  EXPECT_EQ(argmax(a).item<int64_t>(), 1);
  EXPECT_EQ(argmin(a).item<int64_t>(), 3);
  Array m = from_data(std::vector<int32_t>{1, 7, 7, 7, 0, 7}, Shape{2, 3});
  EXPECT_EQ(argmax(m, 1).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(argmax(m, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 0}));
  Array f = from_data(std::vector<int32_t>{1, 5, 9, 9, 0, 2}, Shape{2, 3});
  EXPECT_EQ(argmax(f).item<int64_t>(), 2);
  EXPECT_EQ(argmax(f.transpose()).item<int64_t>(), 1);  // C order of the transposed view: 1 9 5 0 9 2
  EXPECT_EQ(shape_str(argmax(m, {}, true).shape()), "(1, 1)");
}

TEST(Reduce, zero_d_arrays_reduce_to_their_element) {
  Array s = scalar_array(5.0);
  EXPECT_EQ(sum(s).item<double>(), 5.0);
  EXPECT_EQ(max(s).item<double>(), 5.0);
  EXPECT_EQ(argmax(s).item<int64_t>(), 0);
  EXPECT_EQ(mean(s).item<double>(), 5.0);
  EXPECT_EQ(var(s).item<double>(), 0.0);
}

TEST(Reduce, reducing_over_no_axes_converts_and_copies) {
  Array a = matrix_2x3();
  Array same = sum(a, std::vector<int64_t>{});
  EXPECT_FALSE(same.shares_storage(a));
  EXPECT_EQ(same.to_vector<double>(), a.to_vector<double>());
  Array b = from_data(std::vector<bool>{true, false});
  Array counted = sum(b, std::vector<int64_t>{});
  EXPECT_EQ(counted.dtype(), int64);
  EXPECT_EQ(counted.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  // No identity is needed when nothing is reduced, even for an empty array.
  EXPECT_EQ(max(zeros({0}), std::vector<int64_t>{}).size(), 0);
}

TEST(Reduce, empty_reductions_use_numpy_identities) {
  Array e = zeros({0, 3}, float32);
  EXPECT_EQ(sum(e).item<float>(), 0.0f);
  EXPECT_EQ(prod(e).item<float>(), 1.0f);
  EXPECT_TRUE(all(e).item<bool>());
  EXPECT_FALSE(any(e).item<bool>());
  EXPECT_TRUE(std::isnan(mean(e).item<float>()));
  EXPECT_EQ(sum(e, 0).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(shape_str(max(e, 1).shape()), "(0,)");  // nothing reduced into nothing: no error
}

TEST(Reduce, integer_sums_wrap_like_numpy) {
  const int64_t big = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(sum(full({4}, big, int64)).item<int64_t>(), -4);        // 4 * (2^63 - 1) mod 2^64
  EXPECT_EQ(sum(full({1000}, 100, int8)).item<int64_t>(), 100000);  // accumulates in int64, not int8
}

TEST(Reduce, integer_means_accumulate_in_float64_without_wrapping) {
  const int64_t big = int64_t{1} << 62;
  EXPECT_EQ(mean(full({4}, big, int64)).item<double>(), 4611686018427387904.0);  // the int64 sum would wrap to 0
  EXPECT_EQ(var(from_data(std::vector<int64_t>{big, big})).item<double>(), 0.0);
}

TEST(Reduce, large_float32_sum_is_the_rounded_double_sum) {
  const int64_t n = 3'000'001;  // a float32 accumulator would be off by percents
  Array x = full({n}, 0.1f, float32);
  const float expected = static_cast<float>(static_cast<double>(n) * static_cast<double>(0.1f));
  EXPECT_EQ(sum(x).item<float>(), expected);
  EXPECT_EQ(mean(x).item<float>(), 0.1f);
  Array wide = full({3, n / 3}, 0.1f, float32);  // parallel split of a reduced axis with private accumulators
  for (float v : sum(wide, 1).to_vector<float>())
    EXPECT_EQ(v, static_cast<float>(static_cast<double>(n / 3) * static_cast<double>(0.1f)));
}

TEST(Reduce, large_integer_sums_are_exact_on_every_path) {
  const int64_t n = 4'000'000;
  Array r = arange(n, int64);
  EXPECT_EQ(sum(r).item<int64_t>(), n * (n - 1) / 2);
  Array m = r.reshape({2000, 2000});
  std::vector<int64_t> cols = sum(m, 0).to_vector<int64_t>(), rows = sum(m, 1).to_vector<int64_t>();
  for (int64_t j = 0; j < 2000; ++j) {
    ASSERT_EQ(cols[j], 2000 * j + int64_t{2000} * 1999 / 2 * 2000);
    ASSERT_EQ(rows[j], 2000 * (2000 * j) + 1999 * 2000 / 2);
  }
  EXPECT_EQ(argmax(m.transpose(), 0).to_vector<int64_t>()[5], 1999);
  EXPECT_EQ(argmax(r).item<int64_t>(), n - 1);
  EXPECT_EQ(argmin(r).item<int64_t>(), 0);
}

TEST(Reduce, variance_of_a_large_mean_is_exact) {
  Array x = from_data(std::vector<double>{1e9, 1e9 + 1, 1e9 + 2, 1e9 + 3});
  EXPECT_DOUBLE_EQ(var(x).item<double>(), 1.25);
  EXPECT_DOUBLE_EQ(var(x, {}, 1).item<double>(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(kiln::std(x).item<double>(), std::sqrt(1.25));
  EXPECT_TRUE(std::isnan(var(x, {}, 4).item<double>()) || std::isinf(var(x, {}, 4).item<double>()));
}

TEST(Reduce, bfloat16_reductions_match_a_float64_reference) {
  std::vector<float> values;
  for (int i = 0; i < 64; ++i) values.push_back(static_cast<float>((i * 37 % 29) - 14) * 0.25f);
  std::vector<BFloat16> raw(values.begin(), values.end());
  Array x = from_data(raw, Shape{8, 8});
  double total = 0, best = -1e30;
  int64_t best_index = 0;
  std::vector<double> row_sums(8, 0.0);
  for (int i = 0; i < 64; ++i) {
    double v = static_cast<float>(raw[static_cast<size_t>(i)]);
    total += v;
    row_sums[static_cast<size_t>(i / 8)] += v;
    if (v > best) {
      best = v;
      best_index = i;
    }
  }
  EXPECT_EQ(sum(x).dtype(), bfloat16);
  EXPECT_EQ(sum(x).item<double>(), static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(total)))));
  EXPECT_EQ(max(x).item<double>(), best);
  EXPECT_EQ(argmax(x).item<int64_t>(), best_index);
  std::vector<double> got = sum(x.transpose(), 0).to_vector<double>();
  for (size_t i = 0; i < 8; ++i)
    EXPECT_EQ(got[i], static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(row_sums[i])))));
  EXPECT_NEAR(mean(x).item<double>(), total / 64, 1e-2);
}

TEST(Reduce, nan_is_truthy_and_propagates_through_max_and_sum) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  Array x = from_data(std::vector<double>{1, nan, 3, nan});
  EXPECT_TRUE(std::isnan(max(x).item<double>()));
  EXPECT_TRUE(std::isnan(min(x).item<double>()));
  EXPECT_TRUE(std::isnan(sum(x).item<double>()));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 1);
  EXPECT_TRUE(all(from_data(std::vector<double>{nan, 1})).item<bool>());
}

TEST(Reduce, argmax_of_permuted_reversed_and_broadcast_views_equals_that_of_a_contiguous_copy) {
  // Many ties (values 0..3) and views whose kept axes are not in C order in memory, so the index path walks
  // the core's plan: kept axes sorted by stride with the output's strides, reduced axes in logical order.
  std::vector<double> v(4 * 5 * 6);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>((i * 7 + i / 11) % 4);
  const Array x = from_data(v).reshape({4, 5, 6});
  const std::vector<Array> views = {x.permute({2, 0, 1}), x.slice(2, {}, {}, -1).permute({1, 2, 0}),
                                    broadcast_to(x.slice(0, 1, 2), {3, 5, 6}).permute({2, 1, 0}), x.T()};
  for (size_t k = 0; k < views.size(); ++k)
    for (int64_t axis = 0; axis < 3; ++axis) {
      const Array copy = views[k].copy();
      EXPECT_EQ(argmax(views[k], axis).to_vector<int64_t>(), argmax(copy, axis).to_vector<int64_t>()) << k << " " << axis;
      EXPECT_EQ(argmin(views[k], axis, true).to_vector<int64_t>(), argmin(copy, axis, true).to_vector<int64_t>())
          << k << " " << axis;
    }
}

TEST(Reduce, long_runs_find_the_first_extreme_and_the_first_nan) {
  // Long enough for the blocked scan, the parallel chunks and the private-accumulator split.
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const size_t n = 1 << 20;
  std::vector<float> v(n, 0.0f);
  v[3000] = 1.0f;
  v[700000] = 1.0f;
  v[5] = -2.0f;
  v[999999] = -2.0f;
  Array x = from_data(v);
  EXPECT_EQ(argmax(x).item<int64_t>(), 3000);
  EXPECT_EQ(argmin(x).item<int64_t>(), 5);
  v[900000] = static_cast<float>(nan);
  v[950000] = static_cast<float>(nan);
  Array y = from_data(v);
  EXPECT_EQ(argmax(y).item<int64_t>(), 900000);
  EXPECT_EQ(argmin(y).item<int64_t>(), 900000);
  EXPECT_TRUE(std::isnan(max(y).item<float>()));
  EXPECT_TRUE(std::isnan(min(y.reshape({4, static_cast<int64_t>(n / 4)}), 1).to_vector<float>()[3]));
  EXPECT_FALSE(std::isnan(min(y.reshape({4, static_cast<int64_t>(n / 4)}), 1).to_vector<float>()[2]));
  EXPECT_TRUE(std::isnan(max(y.reshape({static_cast<int64_t>(n / 4), 4}), 0).to_vector<float>()[0]));
  Array low = full({5000}, -inf, float64);
  EXPECT_EQ(argmax(low).item<int64_t>(), 0);
  EXPECT_EQ(max(low).item<double>(), -inf);
  std::vector<int8_t> bytes(5000, 7);
  bytes[4000] = 9;
  bytes[4500] = 9;
  EXPECT_EQ(argmax(from_data(bytes)).item<int64_t>(), 4000);
  EXPECT_EQ(argmin(from_data(bytes)).item<int64_t>(), 0);
}

// ---------------------------------------------------------------- errors

TEST(ReduceErrors, axis_out_of_range_names_the_axis_and_ndim) {
  Array a = matrix_2x3();
  expect_error<ShapeError>([&] { sum(a, 2); }, {"sum", "axis 2", "ndim 2", "(2, 3)"});
  expect_error<ShapeError>([&] { mean(a, -3); }, {"mean", "axis -3", "ndim 2"});
  expect_error<ShapeError>([&] { argmax(a, 5); }, {"argmax", "axis 5", "ndim 2"});
  expect_error<ShapeError>([&] { all(scalar_array(1.0), 0); }, {"all", "axis 0", "ndim 0"});
}

TEST(ReduceErrors, duplicate_axis_names_the_axis_and_ndim) {
  Array a = matrix_2x3();
  expect_error<ShapeError>([&] { sum(a, {0, 0}); }, {"sum", "duplicate axis 0", "ndim 2"});
  expect_error<ShapeError>([&] { max(a, {1, -1}); }, {"max", "duplicate axis -1", "ndim 2"});
}

TEST(ReduceErrors, max_min_of_an_empty_reduction_throw_value_error) {
  Array e = zeros({0, 3});
  expect_error<ValueError>([&] { max(e); }, {"max", "zero-size", "(0, 3)", "no identity"});
  expect_error<ValueError>([&] { min(e, 0); }, {"min", "zero-size", "(0,)"});
  expect_error<ValueError>([&] { max(zeros({0, 0}), 1); }, {"max", "zero-size"});
}

TEST(ReduceErrors, argmax_argmin_of_an_empty_sequence_throw_value_error) {
  expect_error<ValueError>([&] { argmax(zeros({0})); }, {"argmax", "empty sequence", "(0,)"});
  expect_error<ValueError>([&] { argmin(zeros({3, 0}), 1); }, {"argmin", "empty sequence", "(3, 0)", "axis 1"});
}

TEST(ReduceErrors, undefined_array_throws_value_error) {
  expect_error<ValueError>([&] { sum(Array()); }, {"sum", "undefined"});
  expect_error<ValueError>([&] { argmin(Array()); }, {"argmin", "undefined"});
}

TEST(Reduce, scans_of_large_arrays_match_a_sequential_reference_on_every_path) {
  // Long lines (parallel over few lines), many short lines across a kept inner axis (the line-per-thread
  // path), few lines across an inner axis (moved last), and integer wrap-around.
  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
           {{3, 100003}, 1}, {{70001, 3}, 0}, {{5, 4001, 2}, 1}, {{2, 3, 50000}, 2}}) {
    const int64_t total = shape_numel(shape);
    std::vector<double> v(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) v[static_cast<size_t>(i)] = static_cast<double>((i * 37) % 19) - 9;
    const Array x = from_data(v).reshape(shape);
    const Array s64 = cumsum(x, axis), s32 = cumsum(x.astype(int32), axis);
    ASSERT_EQ(s32.dtype(), int64);
    const std::vector<double> got = s64.to_vector<double>();
    const std::vector<int64_t> got_int = s32.to_vector<int64_t>();
    int64_t inner = 1;
    for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
    const int64_t n = shape[static_cast<size_t>(axis)];
    for (int64_t line = 0; line < total / n; ++line) {
      const int64_t o = line / inner, i = line % inner;
      double running = 0;
      for (int64_t k = 0; k < n; ++k) {
        const size_t at = static_cast<size_t>((o * n + k) * inner + i);
        running += v[at];
        ASSERT_EQ(got[at], running) << shape_str(shape) << " line " << line << " k " << k;
        ASSERT_EQ(got_int[at], static_cast<int64_t>(running)) << shape_str(shape) << " line " << line << " k " << k;
      }
    }
  }
  // int64 wraps like NumPy's.
  const Array big = from_data(std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 1, 1});
  EXPECT_EQ(cumsum(big).to_vector<int64_t>(), (std::vector<int64_t>{std::numeric_limits<int64_t>::max(),
                                                                    std::numeric_limits<int64_t>::min(),
                                                                    std::numeric_limits<int64_t>::min() + 1}));
}

TEST(ReduceErrors, scan_axis_out_of_range_names_the_op_axis_and_shape) {
  expect_error<ShapeError>([&] { cumsum(zeros({2, 3}), 2); }, {"cumsum", "axis 2", "(2, 3)"});
  expect_error<ShapeError>([&] { cumprod(scalar_array(2.0), 0); }, {"cumprod", "axis 0", "()"});
  expect_error<ValueError>([&] { logsumexp(Array()); }, {"logsumexp", "undefined"});
}

TEST(Scan, hand_computed_values_with_and_without_an_axis) {
  Array a = from_data(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_EQ(cumsum(a).to_vector<int64_t>(), (std::vector<int64_t>{1, 3, 6, 10, 15, 21}));
  EXPECT_EQ(cumsum(a, 0).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(cumprod(a, -1).to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 6, 4, 20, 120}));
  EXPECT_EQ(cumsum(a).dtype(), DType::Int64);
  EXPECT_EQ(cumsum(scalar_array(2.5)).shape(), (Shape{1}));  // a 0-d array flattens to one element
  // log(e^1000 + e^1000) = 1000 + log 2 without overflow; all -inf gives -inf.
  Array big = from_data(std::vector<double>{1000, 1000});
  EXPECT_DOUBLE_EQ(logsumexp(big).item<double>(), 1000 + std::log(2.0));
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(logsumexp(from_data(std::vector<double>{-inf, -inf})).item<double>(), -inf);
}

TEST(ArgReduce, a_nan_first_element_wins_like_numpy) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // np.argmax([nan, 2, nan]) == 0, np.argmin([nan, 2, nan]) == 0
  Array a = from_data(std::vector<double>{nan, 2.0, nan});
  EXPECT_EQ(argmax(a).item<int64_t>(), 0);
  EXPECT_EQ(argmin(a).item<int64_t>(), 0);
  const float fnan = std::numeric_limits<float>::quiet_NaN();
  Array f = from_data(std::vector<float>{fnan, 5.0f, 1.0f, fnan}).astype(float16);
  EXPECT_EQ(argmax(f).item<int64_t>(), 0);
}

}  // namespace
}  // namespace kiln
