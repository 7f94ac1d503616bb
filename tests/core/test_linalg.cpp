// Tests of matmul, dot and linalg::norm: NumPy golden data from
// tests/golden/reduce_golden.py (every dtype, 1-d operands, broadcast batches,
// transposed / step-2 / negative-stride operands, mixed dtypes, dot's rules),
// float64 references for the BLAS paths, hand-computed values, and errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/autograd.hpp"
#include "kiln/io.hpp"
#include "kiln/ops.hpp"
#include "kiln/random.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

const std::string kDir = std::string(KILN_GOLDEN_DIR) + "/reduce/";

void expect_same(const Array& got, const Array& expected, const std::string& id) {
  ASSERT_EQ(dtype_name(got.dtype()), dtype_name(expected.dtype())) << id;
  ASSERT_EQ(shape_str(got.shape()), shape_str(expected.shape())) << id;
  if (is_floating(expected.dtype())) {
    std::vector<double> g = got.to_vector<double>(), e = expected.to_vector<double>();
    double scale = 1.0;
    for (double v : e) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < e.size(); ++i)
      EXPECT_NEAR(g[i], e[i], kiln_test::golden_matmul_tolerance(expected.dtype()) * scale) << id << " [" << i << "]";
  } else {
    EXPECT_EQ(got.to_vector<int64_t>(), expected.to_vector<int64_t>()) << id;
  }
}

void run_golden(const std::string& prefix) {
  std::ifstream f(kDir + "matmul_cases.txt");
  ASSERT_TRUE(f.good()) << "missing golden manifest " << kDir << "matmul_cases.txt";
  std::string line;
  int count = 0;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    std::string id, kind, a_name, a_view, b_name, b_view;
    in >> id >> kind >> a_name >> a_view >> b_name >> b_view;
    if (id.rfind(prefix, 0) != 0) continue;
    ++count;
    Array a = kiln_test::golden_matmul_view(load(kDir + a_name + ".npy"), a_view);
    Array b = kiln_test::golden_matmul_view(load(kDir + b_name + ".npy"), b_view);
    try {
      expect_same(kind == "dot" ? dot(a, b) : matmul(a, b), load(kDir + id + ".npy"), id);
    } catch (const std::exception& e) {
      ADD_FAILURE() << id << " threw: " << e.what();
    }
  }
  EXPECT_GT(count, 0) << "no golden cases start with " << prefix;
}

using kiln_test::expect_error;

/// Deterministic values in [-1, 1) for a (rows, cols) float64 matrix.
std::vector<double> pattern(int64_t rows, int64_t cols, int seed) {
  std::vector<double> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = static_cast<double>((i * 7919 + static_cast<size_t>(seed) * 104729) % 2000) / 1000.0 - 1.0;
  return v;
}

/// Naive float64 product of row-major (m, k) and (k, n) matrices.
std::vector<double> reference_product(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                                      int64_t n) {
  std::vector<double> c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j)
        c[static_cast<size_t>(i * n + j)] += a[static_cast<size_t>(i * k + p)] * b[static_cast<size_t>(p * n + j)];
  return c;
}

// ---------------------------------------------------------------- golden data

TEST(MatmulGolden, every_dtype_and_shape_rule_matches_numpy) { run_golden("mm_"); }
TEST(MatmulGolden, transposed_strided_and_reversed_operands_match_numpy) { run_golden("mmv_"); }
TEST(MatmulGolden, mixed_dtypes_promote_like_numpy) { run_golden("mmp_"); }
TEST(DotGolden, dot_follows_numpy_rules_for_every_rank) {
  run_golden("dot_");
  run_golden("doti_");
}

// ---------------------------------------------------------------- float64 references

TEST(Matmul, float32_blas_product_matches_float64_reference) {
  const int64_t m = 130, k = 257, n = 71;
  std::vector<double> a = pattern(m, k, 1), b = pattern(k, n, 2);
  std::vector<double> want = reference_product(a, b, m, k, n);
  Array a32 = from_data(a, Shape{m, k}).astype(float32), b32 = from_data(b, Shape{k, n}).astype(float32);
  std::vector<double> got = matmul(a32, b32).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
  // The same product with both operands stored transposed (BLAS transposes, no copy).
  Array at = from_data(a, Shape{m, k}).transpose().contiguous().astype(float32).transpose();
  Array bt = from_data(b, Shape{k, n}).transpose().contiguous().astype(float32).transpose();
  got = matmul(at, bt).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4) << i;
}

TEST(Matmul, large_products_match_float64_reference) {
  // 2^27 multiply-adds and more: oneMKL's gemm in a KILN_MKL build, OpenBLAS's otherwise.
  const int64_t m = 520, k = 530, n = 510;
  std::vector<double> a = pattern(m, k, 5), b = pattern(k, n, 6);
  std::vector<double> want = reference_product(a, b, m, k, n);
  std::vector<double> got = matmul(from_data(a, Shape{m, k}), from_data(b, Shape{k, n})).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-9) << i;
  Array a32 = from_data(a, Shape{m, k}).astype(float32), b32 = from_data(b, Shape{k, n}).astype(float32);
  got = matmul(a32, b32).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3) << i;
  // Both operands stored transposed: BLAS reads them transposed, without a copy.
  Array at = a32.transpose().contiguous().transpose(), bt = b32.transpose().contiguous().transpose();
  got = matmul(at, bt).to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-3) << i;
}

TEST(Matmul, a_small_product_leaves_openmps_thread_count_alone) {
  // OpenBLAS's OpenMP build sets OpenMP's thread count with its own; kiln runs small products on fewer threads
  // and must restore the count, or every later product, parallel loop and oneDNN call runs on one thread.
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  const Array a = random::normal({100, 100}, float32), b = random::normal({100, 10}, float32);
  const Array c = matmul(a, b);  // 10^5 multiply-adds: one BLAS thread
  EXPECT_EQ(omp_get_max_threads(), 4);
  const Array big = random::normal({256, 256}, float32);
  (void)matmul(big, big);
  EXPECT_EQ(omp_get_max_threads(), 4);
  EXPECT_TRUE(allclose(c.astype(float64), matmul(a.astype(float64), b.astype(float64)), 1e-4, 1e-4));
  omp_set_num_threads(saved);
}

TEST(Matmul, float64_batched_product_with_broadcast_batch_matches_reference) {
  const int64_t batch = 3, m = 20, k = 30, n = 10;
  std::vector<double> a = pattern(batch * m, k, 3), b = pattern(k, n, 4);
  Array result = matmul(from_data(a, Shape{batch, m, k}), from_data(b, Shape{k, n}));
  ASSERT_EQ(shape_str(result.shape()), "(3, 20, 10)");
  std::vector<double> got = result.to_vector<double>();
  std::vector<double> want = reference_product(a, b, batch * m, k, n);  // the batch stacks rows
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-12) << i;
}

TEST(Matmul, bfloat16_product_accumulates_in_float) {
  const int64_t m = 9, k = 40, n = 7;
  std::vector<double> a = pattern(m, k, 5), b = pattern(k, n, 6);
  Array ab = from_data(a, Shape{m, k}).astype(bfloat16), bb = from_data(b, Shape{k, n}).astype(bfloat16);
  std::vector<double> a_rounded = ab.to_vector<double>(), b_rounded = bb.to_vector<double>();
  std::vector<double> want = reference_product(a_rounded, b_rounded, m, k, n);
  Array result = matmul(ab, bb);
  EXPECT_EQ(result.dtype(), bfloat16);
  std::vector<double> got = result.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 8e-3 * std::max(1.0, std::abs(want[i]))) << i;
}

TEST(Matmul, vector_operands_drop_their_added_axis) {
  Array v = from_data(std::vector<double>{1, 2, 3});
  Array m = from_data(std::vector<double>{1, 0, 0, 1, 1, 1}, Shape{3, 2});
  EXPECT_EQ(matmul(v, v).item<double>(), 14.0);
  EXPECT_EQ(shape_str(matmul(v, v).shape()), "()");
  EXPECT_EQ(matmul(v, m).to_vector<double>(), (std::vector<double>{4, 5}));
  EXPECT_EQ(matmul(m.transpose(), v).to_vector<double>(), (std::vector<double>{4, 5}));
}

TEST(Matmul, empty_contraction_gives_zeros_and_empty_extents_give_empty_results) {
  Array z = matmul(ones({3, 0}), ones({0, 4}));
  EXPECT_EQ(shape_str(z.shape()), "(3, 4)");
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(shape_str(matmul(ones({0, 5}), ones({5, 4})).shape()), "(0, 4)");
  EXPECT_EQ(shape_str(matmul(ones({2, 0, 5}, int32), ones({5, 4}, int32)).shape()), "(2, 0, 4)");
}

TEST(Matmul, integer_products_wrap_and_bool_is_or_of_ands) {
  Array a = full({1, 3}, 100, int8), b = full({3, 1}, 1, int8);
  EXPECT_EQ(matmul(a, b).item<int64_t>(), 44);  // 300 mod 256, as NumPy
  Array t = from_data(std::vector<bool>{true, false, false, false}, Shape{2, 2});
  Array u = from_data(std::vector<bool>{false, true, true, false}, Shape{2, 2});
  EXPECT_EQ(matmul(t, u).to_vector<bool>(), (std::vector<bool>{false, true, false, false}));
}

TEST(Dot, zero_d_operand_multiplies) {
  Array s = scalar_array(2.0);
  Array v = from_data(std::vector<double>{1, 2});
  EXPECT_EQ(dot(s, v).to_vector<double>(), (std::vector<double>{2, 4}));
  EXPECT_EQ(dot(v, v).item<double>(), 5.0);
}

TEST(Norm, vector_and_matrix_norms_are_square_roots_of_sums_of_squares) {
  EXPECT_DOUBLE_EQ(linalg::norm(from_data(std::vector<double>{3, 4})).item<double>(), 5.0);
  Array m = from_data(std::vector<double>{3, 4, 6, 8}, Shape{2, 2});
  EXPECT_EQ(linalg::norm(m, 1).to_vector<double>(), (std::vector<double>{5, 10}));
  EXPECT_EQ(shape_str(linalg::norm(m, 0, true).shape()), "(1, 2)");
  EXPECT_DOUBLE_EQ(linalg::norm(m).item<double>(), std::sqrt(125.0));
}

TEST(Norm, float32_norm_neither_overflows_nor_loses_precision) {
  Array big = full({2}, 1e20f, float32);  // squares overflow float32
  EXPECT_FLOAT_EQ(linalg::norm(big).item<float>(), static_cast<float>(1e20 * std::sqrt(2.0)));
  Array many = full({1'000'000}, 0.1f, float32);
  const double want = std::sqrt(1e6 * static_cast<double>(0.1f) * static_cast<double>(0.1f));
  EXPECT_EQ(linalg::norm(many).item<float>(), static_cast<float>(want));
}

TEST(Norm, result_dtype_keeps_floats_and_makes_integers_float64) {
  EXPECT_EQ(linalg::norm(ones({3}, float16)).dtype(), float16);
  EXPECT_EQ(linalg::norm(ones({3}, int32)).dtype(), float64);
  EXPECT_NEAR(linalg::norm(ones({4}, float16)).item<double>(), 2.0, 1e-3);
}

// ---------------------------------------------------------------- errors

TEST(MatmulErrors, contraction_mismatch_names_both_shapes) {
  expect_error<ShapeError>([] { matmul(ones({2, 3}), ones({4, 5})); }, {"matmul", "(2, 3)", "(4, 5)", "3", "4"});
  expect_error<ShapeError>([] { matmul(ones({2, 3}), ones({4})); }, {"matmul", "(2, 3)", "(4,)"});
  expect_error<ShapeError>([] { dot(ones({2, 3}), ones({2, 3})); }, {"dot", "(2, 3)"});
}

TEST(MatmulErrors, batch_axes_that_do_not_broadcast_name_both_shapes) {
  expect_error<ShapeError>(
      [] {
        matmul(ones({2, 2, 3}), ones({3, 3, 4}));
      },
      {"matmul", "(2, 2, 3)", "(3, 3, 4)", "batch"});
}

TEST(MatmulErrors, zero_d_operand_is_rejected) {
  expect_error<ShapeError>([] { matmul(scalar_array(1.0), ones({2})); }, {"matmul", "0-d", "multiply"});
}

TEST(MatmulErrors, undefined_operand_and_bad_norm_axis) {
  expect_error<ValueError>([] { matmul(Array(), ones({2})); }, {"matmul", "undefined"});
  expect_error<ShapeError>([] { linalg::norm(ones({2, 2}), 2); }, {"norm", "axis 2", "ndim 2"});
}

// ---------------------------------------------------------------- addmm (the bias folded into the product)

/// Reference values of addmm for one output element: the exact sum, the exact product alone (a @ b), and the
/// magnitude (|a| |b|) + |bias| that scales the accumulation error.
struct AddmmReference {
  std::vector<double> exact, product, magnitude;
};

/// Bound on |got - exact| for addmm's element j of row i: float32 accumulation (float64 for float64) of a depth-k
/// product scaled by (|a| |b|)[i][j] + |bias[j]|, plus the roundings: half an ulp of the output dtype at the exact
/// value where the sum is rounded once (the CPU, every float32/float64 product); for float16/bfloat16 on a GPU,
/// whose cuBLASLt epilogue rounds the product to the output dtype before it adds the bias (as PyTorch's addmm),
/// half an ulp at the product's magnitude on top (which exceeds the result's when the bias cancels the product).
void expect_addmm_close(const Array& got, const AddmmReference& ref, DType t, int64_t k, const std::string& what) {
  const std::vector<double>& exact = ref.exact;
  const bool rounds_product = (t == float16 || t == bfloat16) && got.device().is_cuda();
  const double u_acc = t == float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  const int mantissa = t == float16 ? 11 : t == bfloat16 ? 8 : t == float32 ? 24 : 53;
  const std::vector<double> g = got.astype(float64).to(kiln::cpu()).to_vector<double>();
  ASSERT_EQ(g.size(), exact.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    // the output's half ulp at the exact value (one rounding), with float accumulation's error on top
    const auto ulp = [&](double v) { return std::ldexp(1.0, std::ilogb(std::max(std::abs(v), 1e-30)) - mantissa + 1); };
    const double rounding = 0.5 * ulp(exact[i]) + (rounds_product ? 0.5 * ulp(ref.product[i]) : 0.0);
    const double allowed = 2.0 * static_cast<double>(k + 2) * u_acc * ref.magnitude[i] + rounding * (1 + 1e-9);
    ASSERT_LE(std::abs(g[i] - exact[i]), allowed) << what << " [" << i << "]: got " << g[i] << ", exact " << exact[i];
  }
}

/// a @ b + bias (bias a row of n) in float64 from the operands' stored values, a @ b, and (|a| |b|) + |bias|.
AddmmReference addmm_reference(const Array& a, const Array& b, const Array& bias) {
  const Array a64 = a.to(kiln::cpu()).astype(float64), b64 = b.to(kiln::cpu()).astype(float64);
  const Array bias64 = bias.to(kiln::cpu()).astype(float64);
  const Array product = matmul(a64, b64);
  return {(product + bias64).to_vector<double>(), product.to_vector<double>(),
          (matmul(abs(a64), abs(b64)) + abs(bias64)).to_vector<double>()};
}

TEST(Addmm, folded_bias_is_the_product_plus_the_bias_for_every_float_dtype) {
  const int64_t m = 37, k = 70, n = 19;
  for (const Device& device : harness::backends()) {
    for (DType t : {float64, float32, float16, bfloat16}) {
      random::set_state({7, 0});
      const Array a = random::uniform({m, k}, -1.0, 1.0, t, device), w = random::uniform({n, k}, -1.0, 1.0, t, device);
      const Array bias = random::uniform({n}, -4.0, 4.0, t, device);
      const std::string what = device.str() + " " + std::string(dtype_name(t));
      const Array y = addmm(bias, a, w.T());  // the Linear layer's form: the weight read transposed, no copy
      EXPECT_EQ(y.dtype(), t) << what;
      EXPECT_EQ(shape_str(y.shape()), "(37, 19)") << what;
      expect_addmm_close(y, addmm_reference(a, w.T(), bias), t, k, what + " a @ w.T + b");
      // a (1, n) bias folds too; a row-major b
      expect_addmm_close(addmm(bias.reshape({1, n}), a, w.T().contiguous()),
                         addmm_reference(a, w.T().contiguous(), bias), t, k, what + " (1, n) bias");
    }
  }
}

TEST(Addmm, other_biases_broadcast_as_matmul_plus_add) {
  const int64_t m = 5, k = 4, n = 3;
  for (const Device& device : harness::backends()) {
    const Array a = from_data(pattern(m, k, 1), Shape{m, k}).to(device);
    const Array b = from_data(pattern(k, n, 2), Shape{k, n}).to(device);
    const Array full = from_data(pattern(m, n, 3), Shape{m, n}).to(device);
    const Array column = from_data(pattern(m, 1, 4), Shape{m, 1}).to(device);
    for (const Array& bias : {full, column, Array(full.astype(float32)), scalar_array(2.5, float64, device)}) {
      const Array want = matmul(a, b) + bias;  // float64 (and the float32 bias promotes to it)
      const Array got = addmm(bias, a, b);
      EXPECT_EQ(got.dtype(), want.dtype());
      EXPECT_TRUE(allclose(got.to(kiln::cpu()), want.to(kiln::cpu()), 1e-13, 1e-13))
          << device.str() << " bias " << shape_str(bias.shape());
    }
    // an empty contraction leaves the bias
    const Array y = addmm(from_data(std::vector<double>{1, 2, 3}, Shape{3}).to(device), zeros({2, 0}, float64, device),
                          zeros({0, 3}, float64, device));
    EXPECT_EQ(y.to(kiln::cpu()).to_vector<double>(), (std::vector<double>{1, 2, 3, 1, 2, 3})) << device.str();
  }
}

TEST(Addmm, gradients_of_the_bias_and_both_matrices_pass_gradcheck) {
  random::set_state({11, 0});
  const Array a = random::normal({4, 6}, float64), w = random::normal({3, 6}, float64);
  for (const Array& bias :
       {random::normal({3}, float64), random::normal({1, 3}, float64), random::normal({4, 3}, float64)}) {
    const GradcheckResult r =
        gradcheck([](const std::vector<Array>& in) { return addmm(in[0], in[1], in[2].T()); }, {bias, a, w});
    EXPECT_TRUE(r.passed) << "bias " << shape_str(bias.shape()) << ": " << r.report;
  }
}

TEST(AddmmErrors, shapes_name_the_op_and_the_fix) {
  const Array a = zeros({2, 3}), b = zeros({3, 4});
  expect_error<ShapeError>(
      [&] {
        addmm(zeros({4}), zeros({2, 2, 3}), b);
      },
      {"addmm", "(2, 2, 3)", "must have 2 axes", "matmul(a, b) + bias"});
  expect_error<ShapeError>([&] { addmm(zeros({4}), a, zeros({2, 4})); }, {"addmm", "do not align"});
  expect_error<ShapeError>([&] { addmm(zeros({5}), a, b); },
                           {"addmm", "bias of shape (5,)", "(2, 4)", "pass a bias of shape (4,)"});
}

// ---------------------------------------------------------------- addmm_gelu (GELU folded into the product)

/// gelu_tanh in float64.
double gelu_tanh64(double x) { return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

TEST(AddmmGelu, is_gelu_of_the_sum_for_every_float_dtype) {
  const int64_t m = 37, k = 70, n = 24;
  for (const Device& device : harness::backends()) {
    for (DType t : {float64, float32, float16, bfloat16}) {
      random::set_state({13, 0});
      const Array a = random::uniform({m, k}, -1.0, 1.0, t, device), w = random::uniform({n, k}, -1.0, 1.0, t, device);
      const Array bias = random::uniform({n}, -2.0, 2.0, t, device);
      const std::string what = device.str() + " " + std::string(dtype_name(t));
      for (const bool transposed : {true, false}) {  // Linear's w.T(), and a row-major b
        const Array b = transposed ? w.T() : w.T().contiguous();
        const Array y = addmm_gelu(bias, a, b);
        EXPECT_EQ(y.dtype(), t) << what;
        ASSERT_EQ(shape_str(y.shape()), "(37, 24)") << what;
        const AddmmReference ref = addmm_reference(a, b, bias);
        const std::vector<double> got = y.astype(float64).to(kiln::cpu()).to_vector<double>();
        // |gelu'| <= 1.13: the sum's error (as addmm's bound, the product's rounding on a GPU for 16-bit types,
        // the sum's rounding before gelu_tanh on a GPU for float32/float64) carries over at most 1.13-fold; then the
        // activation's own evaluation (the epilogue's approximation on a GPU: 2^-10 relative) and the output's
        // half ulp.
        const int mantissa = t == float16 ? 11 : t == bfloat16 ? 8 : t == float32 ? 24 : 53;
        const double u_acc = t == float64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
        const bool rounds_product = (t == float16 || t == bfloat16) && device.is_cuda();
        const bool rounds_sum = (t == float32 || t == float64) && device.is_cuda();  // gelu_tanh of addmm's result
        const double eval = rounds_product ? std::ldexp(1.0, -10) : 8 * u_acc;
        const auto ulp = [&](double v) {
          return std::ldexp(1.0, std::ilogb(std::max(std::abs(v), 1e-30)) - mantissa + 1);
        };
        for (size_t i = 0; i < got.size(); ++i) {
          const double x = ref.exact[i], want = gelu_tanh64(x);
          const double sum_error = 2.0 * static_cast<double>(k + 2) * u_acc * ref.magnitude[i] +
                                   (rounds_product ? ulp(ref.product[i]) + ulp(x) : 0.0) +
                                   (rounds_sum ? 0.5 * ulp(x) : 0.0);
          const double allowed = 1.13 * sum_error + eval * std::abs(x) + 0.5 * ulp(want) * (1 + 1e-9) + 1e-300;
          ASSERT_LE(std::abs(got[i] - want), allowed)
              << what << (transposed ? " w.T" : " row-major b") << " [" << i << "]: got " << got[i] << ", want " << want
              << " (sum " << x << ")";
        }
      }
    }
  }
}

TEST(AddmmGelu, other_forms_are_gelu_of_addmm_and_errors_name_addmm_gelu) {
  const int64_t m = 5, k = 4, n = 3;
  for (const Device& device : harness::backends()) {
    const Array a = from_data(pattern(m, k, 1), Shape{m, k}).to(device);
    const Array b = from_data(pattern(k, n, 2), Shape{k, n}).to(device);
    const Array full = from_data(pattern(m, n, 3), Shape{m, n}).to(device);
    for (const Array& bias : {full, Array(full.astype(float32))}) {
      const Array got = addmm_gelu(bias, a, b);
      EXPECT_TRUE(allclose(got.to(kiln::cpu()), gelu_tanh(matmul(a, b) + bias).to(kiln::cpu()), 1e-13, 1e-13))
          << device.str() << " bias " << shape_str(bias.shape());
    }
    // an empty contraction: gelu of the bias
    const Array bias = from_data(std::vector<double>{-1, 0.5, 3}, Shape{3}).to(device);
    const Array y = addmm_gelu(bias, zeros({2, 0}, float64, device), zeros({0, 3}, float64, device));
    const std::vector<double> g = y.to(kiln::cpu()).to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_NEAR(g[i], gelu_tanh64(std::vector<double>{-1, 0.5, 3}[i % 3]), 1e-15) << device.str();
  }
  expect_error<ShapeError>(
      [&] {
        addmm_gelu(zeros({4}), zeros({2, 2, 3}), zeros({3, 4}));
      },
      {"addmm_gelu", "(2, 2, 3)", "must have 2 axes"});
  expect_error<ShapeError>(
      [&] {
        addmm_gelu(zeros({5}), zeros({2, 3}), zeros({3, 4}));
      },
      {"addmm_gelu", "bias of shape (5,)", "pass a bias of shape (4,)"});
}

TEST(AddmmGelu, gradients_pass_gradcheck) {
  random::set_state({17, 0});
  const Array a = random::normal({4, 6}, float64), w = random::normal({3, 6}, float64);
  for (const bool transposed : {true, false}) {
    const GradcheckResult r = gradcheck(
        [transposed](const std::vector<Array>& in) {
          return addmm_gelu(in[0], in[1], transposed ? in[2].T() : in[2].T().contiguous());
        },
        {random::normal({3}, float64), a, w});
    EXPECT_TRUE(r.passed) << (transposed ? "w.T: " : "row-major b: ") << r.report;
  }
}

TEST(AddmmGelu, gradients_on_every_backend_equal_float64s) {
  // addmm's and addmm_gelu's gradients in both layouts of b (nn.Linear's weight.T() gets its own layout's).
  const int64_t m = 48, k = 40, n = 32;
  random::set_state({19, 0});
  const Array a64 = random::uniform({m, k}, -1.0, 1.0, float64), w64 = random::uniform({n, k}, -1.0, 1.0, float64);
  const Array bias64 = random::uniform({n}, -1.0, 1.0, float64), gout = random::uniform({m, n}, -1.0, 1.0, float64);
  for (const bool gelu : {false, true}) {
    for (const bool transposed : {true, false}) {
      auto grads = [&](const Device& device, DType t) {
        const Array a = a64.astype(t).to(device).set_requires_grad(), w = w64.astype(t).to(device);
        const Array wt = (transposed ? w.T() : w.T().contiguous()).set_requires_grad();
        const Array bias = bias64.astype(t).to(device).set_requires_grad();
        const Array y = gelu ? addmm_gelu(bias, a, wt) : addmm(bias, a, wt);
        sum(y * gout.astype(t).to(device)).backward();
        return std::vector<Array>{a.grad().to(kiln::cpu()), wt.grad().to(kiln::cpu()), bias.grad().to(kiln::cpu())};
      };
      const std::vector<Array> want = grads(kiln::cpu(), float64);
      for (const Device& device : harness::backends()) {
        const std::vector<Array> got = grads(device, float32);
        const char* names[] = {"a", "b", "bias"};
        for (size_t i = 0; i < 3; ++i)
          EXPECT_TRUE(allclose(got[i].astype(float64), want[i], 1e-5, 1e-5))
              << device.str() << (gelu ? " addmm_gelu " : " addmm ") << (transposed ? "w.T " : "row-major b ")
              << names[i] << "'s gradient";
      }
    }
  }
}

TEST(MatmulErrors, operands_on_two_devices_name_both) {
  if (num_gpus() == 0) GTEST_SKIP() << "no GPU: a second device is needed to mix devices";
  Array g = ones({2, 2}, float32, gpu(0));
  expect_error<DeviceError>([&] { matmul(ones({2, 2}), g); }, {"matmul", "cpu", "cuda:0"});
  expect_error<DeviceError>([&] { dot(ones({2, 2}), g); }, {"dot", "cpu", "cuda:0"});
}

}  // namespace
}  // namespace kiln
