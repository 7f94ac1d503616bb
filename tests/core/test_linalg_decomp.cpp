// Tests of kiln::linalg's factorisations and what is built on them (src/cpu/linalg_factor.cpp,
// src/cpu/linalg_grad.cpp, src/core/linalg_extra.cpp): the NumPy golden cases of
// tests/golden/linalg_golden.py on the CPU, result dtypes, empty matrices, the errors, and every gradient
// by gradcheck (float64 central differences of the function).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "harness/op_harness.hpp"
#include "kiln/kiln.hpp"
#include "linalg_golden_checks.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;

TEST(LinalgDecomp, numpy_golden_cases_on_the_cpu) { kiln_test::run_linalg_golden(cpu()); }

TEST(LinalgDecomp, float32_gives_float32_and_integers_float64) {
  const Array a32 = from_data({4.f, 1.f, 1.f, 3.f}, {2, 2});
  EXPECT_EQ(linalg::inv(a32).dtype(), float32);
  EXPECT_EQ(linalg::det(a32).dtype(), float32);
  EXPECT_EQ(linalg::cholesky(a32).dtype(), float32);
  EXPECT_EQ(linalg::svd(a32).U.dtype(), float32);
  EXPECT_EQ(linalg::eigh(a32).eigenvectors.dtype(), float32);
  EXPECT_EQ(linalg::norm(a32, "nuc").dtype(), float32);
  const Array ai = from_data(std::vector<int64_t>{4, 1, 1, 3}, Shape{2, 2});
  EXPECT_EQ(linalg::inv(ai).dtype(), float64);
  EXPECT_DOUBLE_EQ(linalg::det(ai).item<double>(), 11.0);  // 4 * 3 - 1 * 1
  EXPECT_EQ(linalg::matrix_power(ai, 2).dtype(), int64);
  EXPECT_EQ(linalg::matrix_power(ai, 2).to_vector<int64_t>(), (std::vector<int64_t>{17, 7, 7, 10}));
  EXPECT_EQ(linalg::matrix_rank(ai).dtype(), int64);
}

TEST(LinalgDecomp, empty_matrices_follow_numpy) {
  EXPECT_EQ(linalg::inv(zeros({0, 0}, float64)).shape(), (Shape{0, 0}));
  EXPECT_DOUBLE_EQ(linalg::det(zeros({0, 0}, float64)).item<double>(), 1.0);  // the empty product
  EXPECT_EQ(linalg::det(zeros({3, 0, 0}, float64)).shape(), (Shape{3}));
  const linalg::SvdResult r = linalg::svd(zeros({0, 3}, float64));
  EXPECT_EQ(r.U.shape(), (Shape{0, 0}));
  EXPECT_EQ(r.S.shape(), (Shape{0}));
  EXPECT_EQ(r.Vh.shape(), (Shape{3, 3}));
  EXPECT_EQ(linalg::pinv(zeros({0, 3}, float64)).shape(), (Shape{3, 0}));
  EXPECT_EQ(linalg::qr(zeros({2, 0}, float64)).Q.shape(), (Shape{2, 0}));
  EXPECT_EQ(linalg::matrix_rank(from_data({0.0, 0.0})).item<int64_t>(), 0);
  EXPECT_EQ(linalg::matrix_rank(from_data({0.0, 2.0})).item<int64_t>(), 1);
}

TEST(LinalgDecomp, errors_name_the_op_and_the_fix) {
  const Array singular = from_data({1.0, 2.0, 2.0, 4.0}, {2, 2});
  expect_error<LinAlgError>([&] { (void)linalg::inv(singular); }, {"linalg::inv", "singular", "pinv"});
  expect_error<LinAlgError>(
      [&] {
        (void)linalg::inv(stack({eye(2, {}, 0, float64), singular}));
      },
      {"linalg::inv", "matrix 1 of a (2, 2, 2)"});
  expect_error<LinAlgError>(
      [&] {
        (void)linalg::cholesky(from_data({1.0, 2.0, 2.0, 1.0}, {2, 2}));
      },
      {"linalg::cholesky", "not positive-definite", "order 2"});
  expect_error<LinAlgError>([&] { (void)linalg::matrix_power(singular, -1); }, {"linalg::inv", "singular"});
  expect_error<ShapeError>([] { (void)linalg::inv(ones({2, 3})); }, {"linalg::inv", "square", "(2, 3)"});
  expect_error<ShapeError>([] { (void)linalg::det(ones({3})); }, {"linalg::det", "(3,)", "reshape"});
  expect_error<ShapeError>([] { (void)linalg::svd(ones({3})); }, {"linalg::svd", "matrix"});
  expect_error<ShapeError>([] { (void)linalg::eigh(ones({2, 3})); }, {"linalg::eigh", "square"});
  expect_error<ValueError>([] { (void)linalg::eigh(eye(2), 'X'); }, {"linalg::eigh", "'L' or 'U'"});
  expect_error<ValueError>([] { (void)linalg::norm(ones({2, 2}), 3.0); }, {"linalg::norm", "not a matrix norm"});
  expect_error<ValueError>([] { (void)linalg::norm(ones({2}), "fro"); }, {"linalg::norm", "vector norm"});
  expect_error<ValueError>([] { (void)linalg::Ord("max"); }, {"\"max\"", "\"fro\""});
  expect_error<ShapeError>([] { (void)linalg::norm(ones({2, 2, 2}), 1.0); }, {"linalg::norm", "pass axis"});
  expect_error<ShapeError>(
      [] {
        (void)linalg::norm(ones({2, 2}), linalg::Ord(), {0, 1, 0});
      },
      {"linalg::norm", "3 axes"});
  expect_error<ValueError>(
      [] {
        (void)linalg::norm(ones({2, 2}), linalg::Ord(), {1, -1});
      },
      {"linalg::norm", "same axis"});
  expect_error<ShapeError>(
      [] {
        (void)linalg::norm(ones({2, 2}), linalg::Ord(), 2);
      },
      {"linalg::norm", "out of bounds"});
  expect_error<ShapeError>([] { (void)linalg::cross(ones({2}), ones({2})); }, {"linalg::cross", "3 elements"});
  expect_error<ShapeError>([] { (void)linalg::cond(ones({2, 3}), 1.0); }, {"linalg::cond", "square"});
  expect_error<ShapeError>([] { (void)linalg::matrix_power(ones({2, 3}), 2); }, {"linalg::matrix_power", "square"});
}

TEST(LinalgDecomp, gradients_that_do_not_exist_say_so) {
  const Array wide = from_data({1.0, 2.0, 3.0, 4.0, 5.0, 7.0}, {2, 3}).set_requires_grad();
  expect_error<DTypeError>([&] { (void)linalg::svd(wide, true); }, {"linalg::svd", "full_matrices=false"});
  expect_error<DTypeError>([&] { (void)linalg::qr(wide, linalg::QrMode::Complete); }, {"linalg::qr", "Reduced"});
  const linalg::QrResult r = linalg::qr(wide);
  expect_error<ValueError>([&] { sum(r.R).backward(); }, {"linalg::qr", "m >= n"});
}

// ---------------------------------------------------------------- gradients

Array ravel_all(const std::vector<Array>& parts) {
  std::vector<Array> flat;
  for (const Array& p : parts) flat.push_back(p.reshape({-1}));
  return concatenate(flat, 0);
}

Array well_conditioned(const Shape& shape, uint64_t seed) {
  random::seed(seed);
  const int64_t m = shape[shape.size() - 2], n = shape.back();
  return add(random::uniform(shape, float64, cpu()), multiply(eye(m, n, 0, float64), static_cast<double>(n)));
}

void expect_gradcheck(const std::function<Array(const std::vector<Array>&)>& f, const std::vector<Array>& in,
                      const std::string& what) {
  const GradcheckResult r = gradcheck(f, in);
  EXPECT_TRUE(r.passed) << what << ": " << r.report;
}

TEST(LinalgDecomp, inv_det_slogdet_gradients_pass_gradcheck) {
  const Array a = well_conditioned({2, 3, 3}, 1);
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::inv(x[0]); }, {a}, "inv");
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::det(x[0]); }, {a}, "det");
  const Array negative_det = multiply(a, from_data({-1.0, 1.0, 1.0}));  // a negative determinant
  expect_gradcheck(
      [](const std::vector<Array>& x) {
        const linalg::SlogdetResult r = linalg::slogdet(x[0]);
        return ravel_all({r.sign, r.logabsdet});
      },
      {negative_det}, "slogdet");
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::matrix_power(x[0], -2); }, {a}, "power -2");
}

TEST(LinalgDecomp, solve_gradient_passes_gradcheck) {
  // One matrix, a stack with a broadcast b, a 1-d b for a stack (its gradient summed over the stack), and a
  // matrix a broadcast over a stack of b (summed the same way).
  const Array a = well_conditioned({3, 3}, 4), stacked = well_conditioned({2, 1, 3, 3}, 5);
  random::seed(6);
  const Array b = random::uniform({3, 2}, float64, cpu()), bs = random::uniform({4, 3, 2}, float64, cpu());
  const Array v = random::uniform({3}, float64, cpu());
  const auto f = [](const std::vector<Array>& x) { return linalg::solve(x[0], x[1]); };
  expect_gradcheck(f, {a, b}, "solve");
  expect_gradcheck(f, {a, v}, "solve vector");
  expect_gradcheck(f, {stacked, bs}, "solve stacks");
  expect_gradcheck(f, {stacked, v}, "solve stack, vector");
  expect_gradcheck(f, {a, bs}, "solve matrix, stack");
}

TEST(LinalgDecomp, solve_gradient_by_hand) {
  // x = b / 2 for a = 2 I: d sum(x) / db = 1/2 each, d sum(x) / da = -(1/2)(x) per row: -x_j / 2 at (i, j).
  Array a = multiply(eye(2, {}, 0, float64), 2.0);
  a.set_requires_grad();
  Array b = from_data({2.0, 4.0});
  b.set_requires_grad();
  sum(linalg::solve(a, b)).backward();
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 0.5}));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{-0.5, -1.0, -0.5, -1.0}));
}

TEST(LinalgDecomp, cholesky_gradient_passes_gradcheck) {
  random::seed(2);
  const Array x = random::uniform({2, 3, 3}, float64, cpu());
  for (const bool upper : {false, true})
    expect_gradcheck(
        [upper](const std::vector<Array>& in) {
          const Array spd = add(matmul(in[0], swapaxes(in[0], -1, -2)), multiply(eye(3, {}, 0, float64), 3.0));
          return linalg::cholesky(spd, upper);
        },
        {x}, upper ? "cholesky upper" : "cholesky");
}

TEST(LinalgDecomp, qr_gradient_passes_gradcheck) {
  for (const Shape& shape : {Shape{5, 3}, Shape{2, 3, 3}}) {
    const Array a = well_conditioned(shape, 3);
    expect_gradcheck(
        [](const std::vector<Array>& x) {
          const linalg::QrResult r = linalg::qr(x[0]);
          return ravel_all({r.Q, r.R});
        },
        {a}, "qr " + shape_str(shape));
    expect_gradcheck([](const std::vector<Array>& x) { return linalg::qr(x[0]).R; }, {a}, "qr R only");
  }
}

// Complex SVD (LAPACK's zgesdd): A = U diag(S) Vh with orthonormal columns of U and rows of Vh, S real, descending
// and equal to the singular values of the real embedding [[X, -Y], [Y, X]] (each of which appears there twice).
TEST(LinalgDecomp, complex_svd_reconstructs_the_matrix_on_every_backend) {
  for (const Device& d : harness::backends()) {
    for (const Shape& shape : {Shape{4, 3}, Shape{3, 5}, Shape{2, 3, 3}}) {
      random::seed(21);
      const Array x = random::normal(shape, 0.0, 1.0, float64, cpu()), y = random::normal(shape, 0.0, 1.0, float64, cpu());
      const Array a = make_complex(x, y);
      for (DType t : {complex128, complex64}) {
        const std::string what = d.str() + " " + std::string(dtype_name(t)) + " " + shape_str(shape);
        const double tol = t == complex128 ? 1e-12 : 2e-5;
        for (bool full : {false, true}) {
          const linalg::SvdResult r = linalg::svd(a.astype(t).to(d), full);
          EXPECT_EQ(r.U.dtype(), t) << what;
          EXPECT_EQ(r.S.dtype(), t == complex128 ? float64 : float32) << what;
          EXPECT_EQ(r.U.device(), d) << what;
          const int64_t m = shape[shape.size() - 2], n = shape.back(), k = std::min(m, n);
          EXPECT_EQ(r.U.shape(-1), full ? m : k) << what;
          EXPECT_EQ(r.Vh.shape(-2), full ? n : k) << what;
          const Array u = r.U.to(cpu()).astype(complex128), vh = r.Vh.to(cpu()).astype(complex128);
          const Array s = r.S.to(cpu()).astype(float64);
          const Array uk = u.slice(-1, 0, k), vhk = vh.slice(-2, 0, k);
          const Array back = matmul(uk * expand_dims(s, -2).astype(complex128), vhk);
          EXPECT_TRUE(allclose(back, a, tol, tol)) << what << ": U diag(S) Vh";
          const Array uhu = matmul(conj(swapaxes(u, -1, -2)), u), vvh = matmul(vh, conj(swapaxes(vh, -1, -2)));
          EXPECT_TRUE(allclose(uhu, broadcast_to(eye(u.shape(-1), {}, 0, complex128), uhu.shape()), tol, tol)) << what;
          EXPECT_TRUE(allclose(vvh, broadcast_to(eye(vh.shape(-2), {}, 0, complex128), vvh.shape()), tol, tol)) << what;
        }
        // the embedding's singular values, every other one
        const Array embedded = concatenate({concatenate({x, -y}, -1), concatenate({y, x}, -1)}, -2);
        const Array want = linalg::svdvals(embedded).slice(-1, 0, {}, 2);
        EXPECT_TRUE(allclose(linalg::svdvals(a.astype(t).to(d)).to(cpu()).astype(float64), want, tol, tol)) << what;
      }
    }
  }
  const Array z = make_complex(ones({2, 2}, float64), ones({2, 2}, float64)).set_requires_grad();
  expect_error<DTypeError>([&] { (void)linalg::svd(z); }, {"linalg::svd", "complex", "no gradient"});
}

TEST(LinalgDecomp, svd_gradient_passes_gradcheck) {
  // Functions of U and V that a sign flip of a singular pair leaves alone: U*U, Vh*Vh and U @ Vh.
  for (const Shape& shape : {Shape{5, 3}, Shape{3, 5}, Shape{2, 3, 3}}) {
    random::seed(4);
    const Array a = random::uniform(shape, float64, cpu());
    for (const bool full : {false, true}) {
      if (full && shape[0] != shape[1] && shape.size() == 2) continue;
      expect_gradcheck(
          [full](const std::vector<Array>& x) {
            const linalg::SvdResult r = linalg::svd(x[0], full);
            return ravel_all({r.S, multiply(r.U, r.U), multiply(r.Vh, r.Vh), matmul(r.U, r.Vh)});
          },
          {a}, "svd " + shape_str(shape));
    }
    expect_gradcheck([](const std::vector<Array>& x) { return linalg::svdvals(x[0]); }, {a}, "svdvals");
  }
}

TEST(LinalgDecomp, singular_values_of_a_rank_deficient_matrix_have_finite_gradients) {
  // Two zero singular values: only the values' term is used, so no 1/(s_i^2 - s_j^2) appears.
  Array a = from_data({1.0, 2.0, 3.0, 2.0, 4.0, 6.0, 3.0, 6.0, 9.0}, {3, 3}).set_requires_grad();
  linalg::svdvals(a)[0].backward();
  // The largest singular value of the rank-1 a = s u v^T has gradient u v^T = a / s.
  const std::vector<double> g = a.grad().to_vector<double>(), v = a.to_vector<double>();
  const double s = 14.0;  // ||(1, 2, 3)||^2
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], v[i] / s, 1e-12) << i;
}

TEST(LinalgDecomp, eigh_gradient_passes_gradcheck) {
  random::seed(5);
  const Array x = random::uniform({2, 3, 3}, float64, cpu());
  for (const char uplo : {'L', 'U'}) {
    expect_gradcheck(
        [uplo](const std::vector<Array>& in) {
          const linalg::EighResult r = linalg::eigh(add(in[0], swapaxes(in[0], -1, -2)), uplo);
          return ravel_all({r.eigenvalues, multiply(r.eigenvectors, r.eigenvectors)});
        },
        {x}, std::string("eigh ") + uplo);
  }
  expect_gradcheck([](const std::vector<Array>& in) { return linalg::eigvalsh(add(in[0], swapaxes(in[0], -1, -2))); },
                   {x}, "eigvalsh");
}

TEST(LinalgDecomp, composite_gradients_pass_gradcheck) {
  random::seed(6);
  const Array tall = random::uniform({4, 3}, float64, cpu()), sq = well_conditioned({3, 3}, 7);
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::pinv(x[0]); }, {tall}, "pinv");
  expect_gradcheck(
      [](const std::vector<Array>& x) { return linalg::pinv(add(x[0], swapaxes(x[0], -1, -2)), {}, true); }, {sq},
      "pinv hermitian");
  for (const linalg::Ord& ord :
       std::vector<linalg::Ord>{"fro", "nuc", 2.0, -2.0, 1.0, std::numeric_limits<double>::infinity()})
    expect_gradcheck([ord](const std::vector<Array>& x) { return linalg::norm(x[0], ord); }, {tall}, "matrix norm");
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::norm(x[0], 3.0, 0); }, {tall}, "vector 3-norm");
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::cond(x[0]); }, {sq}, "cond");
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::cond(x[0], 1.0); }, {sq}, "cond 1");
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::matrix_power(x[0], 3); }, {sq}, "power 3");
  expect_gradcheck([](const std::vector<Array>& x) { return linalg::cross(x[0], x[1]); },
                   {tall, random::uniform({3}, float64, cpu())}, "cross");
  expect_gradcheck([](const std::vector<Array>& x) { return kron(x[0], x[1]); }, {tall, sq}, "kron");
}

}  // namespace
}  // namespace kiln
