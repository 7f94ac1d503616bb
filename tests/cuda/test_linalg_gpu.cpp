// kiln::linalg's factorisations on a GPU: every NumPy golden case of tests/golden/linalg_golden.py on gpu(0),
// results on the operands' device in their dtype (eig's too, computed on the host), the errors, and gradients
// equal to the CPU's (float64).
// Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"
#include "linalg_golden_checks.hpp"
#include "test_util.hpp"

namespace kiln {
namespace {

using kiln_test::expect_error;

TEST(LinalgGpu, numpy_golden_cases_on_the_gpu) {
  KILN_REQUIRE_GPU();
  kiln_test::run_linalg_golden(gpu(0));
}

TEST(LinalgGpu, results_stay_on_the_device_in_the_operands_dtype) {
  KILN_REQUIRE_GPU();
  const Array a = from_data({4.f, 1.f, 1.f, 3.f}, {2, 2}).to(gpu(0));
  for (const Array& r : {linalg::inv(a), linalg::det(a), linalg::cholesky(a), linalg::qr(a).Q, linalg::svd(a).S,
                         linalg::eigh(a).eigenvectors, linalg::pinv(a), linalg::norm(a, "nuc"), linalg::cond(a)}) {
    EXPECT_EQ(r.device(), gpu(0));
    EXPECT_EQ(r.dtype(), float32);
  }
  EXPECT_EQ(linalg::matrix_rank(a).device(), gpu(0));
  expect_error<LinAlgError>([] { (void)linalg::inv(zeros({2, 2}, float64, gpu(0))); }, {"linalg::inv", "singular"});
  expect_error<LinAlgError>([] { (void)linalg::cholesky(-eye(2, {}, 0, float64, gpu(0))); },
                            {"linalg::cholesky", "positive-definite"});
}

TEST(LinalgGpu, eig_runs_on_the_host_and_its_results_return_to_the_device) {
  KILN_REQUIRE_GPU();
  const Array a = from_data({0.0, -1.0, 1.0, 1.0, 2.0, 0.5, 0.0, 1.0, 3.0}, {3, 3});
  const linalg::EigResult host = linalg::eig(a), device = linalg::eig(a.to(gpu(0)));
  EXPECT_EQ(device.eigenvalues.device(), gpu(0));
  EXPECT_EQ(device.eigenvectors.device(), gpu(0));
  EXPECT_EQ(device.eigenvalues.dtype(), complex128);
  // The same LAPACK call on the same numbers: the same bits.
  EXPECT_EQ(device.eigenvalues.to_vector<complex128_t>(), host.eigenvalues.to_vector<complex128_t>());
  EXPECT_EQ(device.eigenvectors.to_vector<complex128_t>(), host.eigenvectors.to_vector<complex128_t>());
  const Array w32 = linalg::eigvals(a.astype(float32).to(gpu(0)));
  EXPECT_EQ(w32.device(), gpu(0));
  EXPECT_EQ(w32.dtype(), complex64);
}

/// d sum(f(x) * w)/dx on `d`, as a float64 CPU array.
Array gradient_on(const std::function<Array(const Array&)>& f, const Array& x, const Array& w, Device d) {
  Array xd = x.to(d).copy().set_requires_grad();  // a fresh leaf: no gradient carried over between cases
  sum(multiply(f(xd), w.to(d))).backward();
  return xd.grad().to(cpu());
}

TEST(LinalgGpu, gradients_equal_the_cpu_ones) {
  KILN_REQUIRE_GPU();
  random::seed(11);
  const Array sq = add(random::uniform({2, 3, 3}, float64, cpu()), multiply(eye(3, {}, 0, float64), 3.0));
  const Array tall = random::uniform({4, 3}, float64, cpu());
  auto ravel = [](const std::vector<Array>& parts) {
    std::vector<Array> flat;
    for (const Array& p : parts) flat.push_back(p.reshape({-1}));
    return concatenate(flat, 0);
  };
  const std::vector<std::pair<std::string, std::function<Array(const Array&)>>> cases = {
      {"inv", [](const Array& x) { return linalg::inv(x); }},
      {"det", [](const Array& x) { return linalg::det(x); }},
      {"cholesky", [](const Array& x) { return linalg::cholesky(matmul(x, swapaxes(x, -1, -2))); }},
      {"qr",
       [&](const Array& x) {
         return ravel({linalg::qr(x).Q, linalg::qr(x).R});
       }},
      {"svd",
       [&](const Array& x) {
         const linalg::SvdResult r = linalg::svd(x, false);
         return ravel({r.S, matmul(r.U, r.Vh)});
       }},
      {"eigh",
       [&](const Array& x) {
         const linalg::EighResult r = linalg::eigh(add(x, swapaxes(x, -1, -2)));
         return ravel({r.eigenvalues, multiply(r.eigenvectors, r.eigenvectors)});
       }},
      {"pinv", [](const Array& x) { return linalg::pinv(x); }},
      {"norm nuc",
       [](const Array& x) {
         return linalg::norm(x, "nuc", {-2, -1});
       }},
  };
  for (const auto& [name, f] : cases) {
    const Array x = name == "pinv" || name == "qr" ? tall : sq;
    NoGradGuard no_grad;
    const Array w = random::uniform(f(x).shape(), float64, cpu());
    EnableGradGuard grad;
    const std::vector<double> want = gradient_on(f, x, w, cpu()).to_vector<double>();
    const std::vector<double> got = gradient_on(f, x, w, gpu(0)).to_vector<double>();
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(got[i], want[i], 1e-9 * std::max(1.0, std::abs(want[i]))) << name;
  }
}

}  // namespace
}  // namespace kiln
