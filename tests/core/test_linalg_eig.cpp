// Tests of kiln::linalg::eig and eigvals (src/cpu/linalg_eig.cpp): the NumPy golden cases of
// tests/golden/eig_golden.py (eigenvalues as multisets, since their order is LAPACK's; every eigenpair through
// a v = w v and a unit 2-norm), result dtypes and shapes, empty matrices, and the errors.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>
#include <limits>
#include <string>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/kiln.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;
using C = std::complex<double>;

Array golden(const std::string& name) {
  std::string path = KILN_GOLDEN_DIR;  // appended: see linalg_golden_checks.hpp
  path.append("/eig/").append(name).append(".npy");
  return load(path, cpu());
}

/// Every expected eigenvalue matched to the nearest unused computed one, within tol * max(1, |w|).
void expect_same_multiset(const Array& got, const Array& want, double tol, const std::string& name) {
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << name;
  const std::vector<C> g = got.to_vector<C>(), w = want.to_vector<C>();
  const int64_t n = want.shape(-1);
  for (size_t start = 0; start < w.size(); start += static_cast<size_t>(n)) {
    std::vector<bool> used(static_cast<size_t>(n), false);
    for (int64_t i = 0; i < n; ++i) {
      const C target = w[start + static_cast<size_t>(i)];
      int64_t best = -1;
      for (int64_t j = 0; j < n; ++j)
        if (!used[static_cast<size_t>(j)] && (best < 0 || std::abs(g[start + static_cast<size_t>(j)] - target) <
                                                              std::abs(g[start + static_cast<size_t>(best)] - target)))
          best = j;
      used[static_cast<size_t>(best)] = true;
      EXPECT_LE(std::abs(g[start + static_cast<size_t>(best)] - target), tol * std::max(1.0, std::abs(target)))
          << name << " eigenvalue " << target << " of matrix " << start / static_cast<size_t>(n);
    }
  }
}

/// a v_i = w_i v_i for every column v_i of every matrix: |a v - w v| <= tol |a|_F |v|, and |v| = 1.
void expect_eigenpairs(const Array& a, const linalg::EigResult& r, double tol, const std::string& name) {
  const int64_t n = a.shape(-1);
  const std::vector<C> m = a.to_vector<C>(), w = r.eigenvalues.to_vector<C>(), v = r.eigenvectors.to_vector<C>();
  const size_t count = m.size() / static_cast<size_t>(n * n);
  ASSERT_EQ(v.size(), m.size()) << name;
  for (size_t k = 0; k < count; ++k) {
    const C* A = m.data() + k * n * n;
    const C* V = v.data() + k * n * n;
    double norm_a = 0;
    for (int64_t i = 0; i < n * n; ++i) norm_a += std::norm(A[i]);
    norm_a = std::sqrt(norm_a);
    for (int64_t col = 0; col < n; ++col) {
      double residual = 0, norm_v = 0;
      for (int64_t row = 0; row < n; ++row) {
        C av = 0;
        for (int64_t j = 0; j < n; ++j) av += A[row * n + j] * V[j * n + col];
        residual += std::norm(av - w[k * n + col] * V[row * n + col]);
        norm_v += std::norm(V[row * n + col]);
      }
      EXPECT_LE(std::sqrt(residual), tol * std::max(norm_a, 1e-300)) << name << " matrix " << k << " pair " << col;
      EXPECT_NEAR(std::sqrt(norm_v), 1.0, tol) << name << " matrix " << k << " vector " << col;
    }
  }
}

struct Case {
  const char* name;
  DType result;
  double tol;  // eigenvalues against NumPy's
  double residual;
};

TEST(LinalgEig, numpy_golden_cases_as_multisets_and_eigenpairs) {
  const Case cases[] = {
      {"general", complex128, 1e-10, 1e-13},    {"rotation", complex128, 1e-12, 1e-14},
      {"symmetric", complex128, 1e-10, 1e-13},  {"defective", complex128, 1e-4, 1e-12},
      {"jordan2", complex128, 1e-12, 1e-14},    {"repeated", complex128, 1e-12, 1e-14},
      {"one", complex128, 1e-14, 1e-15},        {"batch", complex128, 1e-10, 1e-13},
      {"f32", complex64, 1e-4, 1e-5},           {"int", complex128, 1e-10, 1e-13},
      {"c64", complex64, 1e-4, 1e-5},           {"c128", complex128, 1e-10, 1e-13},
      {"c128_batch", complex128, 1e-10, 1e-13},
  };
  for (const Case& c : cases) {
    const Array a = golden(std::string("in_") + c.name), want = golden(std::string("w_") + c.name);
    const linalg::EigResult r = linalg::eig(a);
    ASSERT_EQ(r.eigenvalues.dtype(), c.result) << c.name;
    ASSERT_EQ(r.eigenvectors.dtype(), c.result) << c.name;
    Shape vshape = want.shape();
    vshape.push_back(want.shape(-1));
    EXPECT_EQ(r.eigenvectors.shape(), vshape) << c.name;
    expect_same_multiset(r.eigenvalues, want, c.tol, c.name);
    expect_eigenpairs(a, r, c.residual, c.name);
    const Array values = linalg::eigvals(a);
    EXPECT_EQ(values.dtype(), c.result) << c.name;
    EXPECT_EQ(values.to_vector<C>(), r.eigenvalues.to_vector<C>()) << c.name;  // the same geev, the same order
  }
}

TEST(LinalgEig, real_input_pairs_come_out_conjugate_with_conjugate_vectors) {
  // A rotation by 90 degrees: eigenvalues +-i, eigenvectors (1, -+i) / sqrt(2).
  const Array a = from_data({0.0, -1.0, 1.0, 0.0}, {2, 2});
  const linalg::EigResult r = linalg::eig(a);
  const std::vector<C> w = r.eigenvalues.to_vector<C>(), v = r.eigenvectors.to_vector<C>();
  EXPECT_NEAR(std::abs(w[0] - std::conj(w[1])), 0.0, 1e-15);
  EXPECT_NEAR(std::abs(std::abs(w[0].imag()) - 1.0), 0.0, 1e-15);
  for (int row = 0; row < 2; ++row) EXPECT_EQ(v[row * 2 + 1], std::conj(v[row * 2]));
}

TEST(LinalgEig, dtypes_follow_the_input_precision) {
  EXPECT_EQ(linalg::eigvals(eye(2, {}, 0, float32)).dtype(), complex64);
  EXPECT_EQ(linalg::eigvals(eye(2, {}, 0, float16)).dtype(), complex64);
  EXPECT_EQ(linalg::eigvals(eye(2, {}, 0, float64)).dtype(), complex128);
  EXPECT_EQ(linalg::eigvals(eye(2, {}, 0, int32)).dtype(), complex128);
  EXPECT_EQ(linalg::eigvals(eye(2, {}, 0, float64).astype(complex64)).dtype(), complex64);
  EXPECT_EQ(linalg::eig(eye(2, {}, 0, float64).astype(complex128)).eigenvectors.dtype(), complex128);
  const std::vector<C> w = linalg::eigvals(from_data(std::vector<int64_t>{2, 0, 0, 5}, Shape{2, 2})).to_vector<C>();
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NEAR(std::abs(w[0] - 2.0), 0.0, 1e-15);  // a diagonal matrix: its diagonal, in order
  EXPECT_NEAR(std::abs(w[1] - 5.0), 0.0, 1e-15);
}

TEST(LinalgEig, empty_matrices_and_stacks_follow_numpy) {
  const linalg::EigResult r = linalg::eig(zeros({0, 0}, float64));
  EXPECT_EQ(r.eigenvalues.shape(), (Shape{0}));
  EXPECT_EQ(r.eigenvectors.shape(), (Shape{0, 0}));
  EXPECT_EQ(r.eigenvalues.dtype(), complex128);
  const linalg::EigResult s = linalg::eig(zeros({0, 3, 3}, float32));
  EXPECT_EQ(s.eigenvalues.shape(), (Shape{0, 3}));
  EXPECT_EQ(s.eigenvectors.shape(), (Shape{0, 3, 3}));
  EXPECT_EQ(s.eigenvectors.dtype(), complex64);
}

TEST(LinalgEig, a_strided_view_reads_its_own_elements) {
  // The transpose of a: the eigenvalues are the same, the eigenvectors those of a^T.
  const Array a = from_data({1.0, 2.0, 0.0, 3.0}, {2, 2});  // upper triangular: eigenvalues 1 and 3
  const Array at = transpose(a);
  const linalg::EigResult r = linalg::eig(at);
  expect_eigenpairs(at, r, 1e-14, "transpose");
  expect_same_multiset(r.eigenvalues, from_data(std::vector<C>{1.0, 3.0}.data(), Shape{2}, complex128, cpu()), 1e-14,
                       "transpose");
}

TEST(LinalgEig, errors_name_the_op_and_the_fix) {
  expect_error<ShapeError>(
      [] {
        (void)linalg::eig(from_data({1.0, 2.0}));
      },
      {"linalg::eig", "1-dimensional array given. Array must be at least two-dimensional"});
  expect_error<ShapeError>(
      [] {
        (void)linalg::eigvals(zeros({2, 3}, float64));
      },
      {"linalg::eigvals", "Last 2 dimensions of the array must be square", "(2, 3)", "svd"});
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  expect_error<LinAlgError>(
      [&] {
        (void)linalg::eig(from_data({1.0, nan, 0.0, 1.0}, {2, 2}));
      },
      {"linalg::eig", "Array must not contain infs or NaNs", "the matrix a (2, 2)"});
  expect_error<LinAlgError>(
      [&] {
        (void)linalg::eigvals(from_data({1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, inf}, {2, 2, 2}));
      },
      {"linalg::eigvals", "Array must not contain infs or NaNs", "matrix 1 of a (2, 2, 2)"});
  Array g = eye(2, {}, 0, float64);
  g.set_requires_grad();
  expect_error<DTypeError>([&] { (void)linalg::eig(g); }, {"linalg::eig", "has no gradient", "detach"});
  expect_error<DTypeError>([&] { (void)linalg::eigvals(g); }, {"linalg::eigvals", "has no gradient"});
  {
    NoGradGuard no_grad;  // outside grad mode nothing is recorded: no error
    EXPECT_EQ(linalg::eigvals(g).shape(), (Shape{2}));
  }
  expect_error<ValueError>([] { (void)linalg::eig(Array()); }, {"linalg::eig", "undefined"});
}

}  // namespace
}  // namespace kiln
