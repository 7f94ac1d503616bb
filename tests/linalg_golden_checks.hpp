// The NumPy golden checks of tests/golden/linalg_golden.py, run on one device: shared by
// tests/core/test_linalg_decomp.cpp (CPU) and tests/cuda/test_linalg_gpu.cpp (GPU).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kiln/io.hpp"
#include "kiln/kiln.hpp"

namespace kiln_test {

inline kiln::Array linalg_golden(const std::string& name, kiln::Device d) {
  // Built by append: g++ 12 at -O1 (kiln_tests' level) takes `string(literal) + literal + ...` for a buffer overflow.
  std::string path = KILN_GOLDEN_DIR;
  path.append("/linalg/").append(name).append(".npy");
  return kiln::load(path, d);
}

/// Same shape, dtype and values as golden `name`: integers exactly, floats within `tol` relative to max(1, |x|)
/// (infinities and NaN must match).
inline void expect_linalg(const kiln::Array& got, const std::string& name, double tol = 1e-10) {
  const kiln::Array want = linalg_golden(name, kiln::cpu());
  ASSERT_TRUE(got.defined()) << name;
  ASSERT_EQ(kiln::shape_str(got.shape()), kiln::shape_str(want.shape())) << name;
  ASSERT_EQ(kiln::dtype_name(got.dtype()), kiln::dtype_name(want.dtype())) << name;
  if (!kiln::is_floating(want.dtype())) {
    EXPECT_EQ(got.to_vector<int64_t>(), want.to_vector<int64_t>()) << name;
    return;
  }
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < w.size(); ++i) {
    if (std::isnan(w[i]) || std::isinf(w[i]))
      EXPECT_TRUE(std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i]) << name << " [" << i << "] " << g[i];
    else
      EXPECT_NEAR(g[i], w[i], tol * std::max(1.0, std::abs(w[i]))) << name << " [" << i << "]";
  }
}

/// Vectors defined up to sign (the columns of U or V, the rows of Vh): each is flipped to agree with NumPy's
/// before comparing. `axis` is the axis along which a vector runs (-2: columns, -1: rows).
inline void expect_linalg_up_to_sign(const kiln::Array& got, const std::string& name, int64_t axis, double tol = 1e-9) {
  const kiln::Array want = linalg_golden(name, got.device());
  ASSERT_EQ(kiln::shape_str(got.shape()), kiln::shape_str(want.shape())) << name;
  const kiln::Array dots = kiln::sum(kiln::multiply(got, want), axis, true);
  const kiln::Array flipped = kiln::multiply(got, kiln::where(kiln::less(dots, 0.0), -1.0, 1.0));
  expect_linalg(flipped, name, tol);
}

/// Every golden case on device `d`.
inline void run_linalg_golden(kiln::Device d) {
  using namespace kiln;
  auto in = [d](const std::string& name) { return linalg_golden("in_" + name, d); };
  const double inf = std::numeric_limits<double>::infinity();

  for (const std::string name : {"sq", "sq_batch", "one"}) {
    expect_linalg(linalg::inv(in(name)), "inv_" + name);
    expect_linalg(linalg::det(in(name)), "det_" + name);
    const linalg::SlogdetResult r = linalg::slogdet(in(name));
    expect_linalg(r.sign, "slogdet_sign_" + name);
    expect_linalg(r.logabsdet, "slogdet_log_" + name);
  }
  expect_linalg(linalg::inv(in("sq_f32")), "inv_sq_f32", 1e-5);
  expect_linalg(linalg::det(in("singular")), "det_singular");
  expect_linalg(linalg::slogdet(in("singular")).sign, "slogdet_sign_singular");
  expect_linalg(linalg::slogdet(in("singular")).logabsdet, "slogdet_log_singular");

  // The upper triangle is not read: garbage there changes nothing.
  const Array sym = in("sym"), lower_only = add(tril(sym), triu(full({4, 4}, 9.0, float64, d), 1));
  expect_linalg(linalg::cholesky(lower_only), "cholesky_sym");
  expect_linalg(linalg::cholesky(in("sym_batch")), "cholesky_sym_batch");
  const Array upper_only = add(triu(sym), tril(full({4, 4}, 9.0, float64, d), -1));  // NumPy reads the upper one
  expect_linalg(linalg::cholesky(upper_only, true), "cholesky_upper_sym");

  for (const std::string name : {"tall", "wide", "rect_batch"}) {
    const linalg::QrResult reduced = linalg::qr(in(name));
    expect_linalg(reduced.Q, "qr_reduced_q_" + name);
    expect_linalg(reduced.R, "qr_reduced_r_" + name);
    const linalg::QrResult complete = linalg::qr(in(name), linalg::QrMode::Complete);
    expect_linalg(complete.Q, "qr_complete_q_" + name);
    expect_linalg(complete.R, "qr_complete_r_" + name);
    const linalg::QrResult r_only = linalg::qr(in(name), linalg::QrMode::R);
    EXPECT_FALSE(r_only.Q.defined());
    expect_linalg(r_only.R, "qr_r_" + name);
  }

  for (const std::string name : {"tall", "wide", "rect_batch", "sq_batch", "deficient"}) {
    for (const bool full_matrices : {true, false}) {
      const std::string tag = full_matrices ? "full" : "reduced";
      const linalg::SvdResult r = linalg::svd(in(name), full_matrices);
      expect_linalg(r.S, "svdvals_" + name);
      if (name == "deficient") continue;  // a repeated (zero) singular value: its vectors are not unique
      const int64_t k = r.S.shape(-1);
      // Vectors past min(m, n) (full_matrices) span the null space in any basis: compare the first k, and
      // check that the columns of U are orthonormal: U^T U = I.
      expect_linalg_up_to_sign(r.U.index({Ellipsis{}, Slice(0, k)}), "svd_" + tag + "_u_" + name + "_k", -2);
      expect_linalg_up_to_sign(r.Vh.index({Ellipsis{}, Slice(0, k), Slice()}), "svd_" + tag + "_vh_" + name + "_k", -1);
      const Array utu = matmul(swapaxes(r.U, -1, -2), r.U);
      EXPECT_LT(max(abs(subtract(utu, eye(r.U.shape(-1), {}, 0, float64, d)))).item<double>(), 1e-12) << name;
    }
    expect_linalg(linalg::svdvals(in(name)), "svdvals_" + name);
    EXPECT_FALSE(linalg::svd(in(name), true, false).U.defined());
  }

  for (const char uplo : {'L', 'U'}) {
    const linalg::EighResult r = linalg::eigh(in("uneven"), uplo);
    expect_linalg(r.eigenvalues, std::string("eigh_w_") + uplo);
    expect_linalg_up_to_sign(r.eigenvectors, std::string("eigh_v_") + uplo, -2);
    expect_linalg(linalg::eigvalsh(in("uneven"), uplo), std::string("eigh_w_") + uplo);
  }
  const linalg::EighResult eb = linalg::eigh(in("sym_batch"));
  expect_linalg(eb.eigenvalues, "eigh_w_sym_batch");
  expect_linalg_up_to_sign(eb.eigenvectors, "eigh_v_sym_batch", -2);
  expect_linalg(linalg::eigvalsh(in("sym_batch")), "eigvalsh_sym_batch");

  expect_linalg(linalg::pinv(in("tall")), "pinv_tall");
  expect_linalg(linalg::pinv(in("wide")), "pinv_wide");
  expect_linalg(linalg::pinv(in("rect_batch")), "pinv_rect_batch");
  expect_linalg(linalg::pinv(in("deficient"), 1e-10), "pinv_deficient", 1e-8);
  expect_linalg(linalg::pinv(in("sym"), {}, true), "pinv_sym_hermitian");
  expect_linalg(linalg::matrix_rank(in("deficient")), "rank_deficient");
  expect_linalg(linalg::matrix_rank(in("sq_batch")), "rank_sq_batch");
  expect_linalg(linalg::matrix_rank(in("singular")), "rank_singular");
  expect_linalg(linalg::matrix_rank(from_data({3.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1e-3}, {3, 3}, d), 1e-2),
                "rank_tol");
  expect_linalg(linalg::matrix_rank(in("sym"), {}, true), "rank_sym_hermitian");

  const Array vec = in("vec");
  const std::vector<std::pair<std::string, linalg::Ord>> vector_ords = {
      {"none", {}}, {"inf", inf}, {"ninf", -inf}, {"0", 0.0}, {"1", 1.0}, {"2", 2.0}, {"3", 3.0}, {"0p5", 0.5}};
  for (const auto& [tag, ord] : vector_ords) expect_linalg(linalg::norm(vec, ord), "norm_vec_" + tag);
  const std::vector<std::pair<std::string, linalg::Ord>> matrix_ords = {{"none", {}}, {"fro", "fro"}, {"nuc", "nuc"},
                                                                        {"1", 1.0},   {"n1", -1.0},   {"2", 2.0},
                                                                        {"n2", -2.0}, {"inf", inf},   {"ninf", -inf}};
  for (const auto& [tag, ord] : matrix_ords) expect_linalg(linalg::norm(in("tall"), ord), "norm_mat_" + tag);
  const Array cube = in("cube");
  expect_linalg(linalg::norm(cube, linalg::Ord()), "norm_cube_all");
  expect_linalg(linalg::norm(cube, 3.0, 1), "norm_cube_axis1_3");
  expect_linalg(linalg::norm(cube, linalg::Ord(), 1, true), "norm_cube_axis1_keep");
  expect_linalg(linalg::norm(cube, 1.0, {2, 0}), "norm_cube_axes20_1");
  expect_linalg(linalg::norm(cube, inf, {2, 0}, true), "norm_cube_axes20_inf_keep");
  expect_linalg(linalg::norm(cube, "nuc", {1, 2}), "norm_cube_axes12_nuc");
  expect_linalg(linalg::norm(cube, 2.0, {2, 1}), "norm_cube_axes21_2");

  const std::vector<std::pair<std::string, linalg::Ord>> cond_ords = {
      {"none", {}}, {"2", 2.0}, {"n2", -2.0}, {"1", 1.0}, {"inf", inf}, {"fro", "fro"}, {"nuc", "nuc"}};
  for (const auto& [tag, p] : cond_ords) expect_linalg(linalg::cond(in("sq"), p), "cond_sq_" + tag, 1e-9);
  expect_linalg(linalg::cond(in("tall")), "cond_tall", 1e-9);
  expect_linalg(linalg::cond(in("sq_batch")), "cond_sq_batch", 1e-9);
  // Exactly singular: singular values (2, 0); NumPy gives inf for p unset and 0 for -2.
  const Array diagonal_singular = from_data({2.0, 0.0, 0.0, 0.0}, {2, 2}, d);
  EXPECT_TRUE(std::isinf(linalg::cond(diagonal_singular).item<double>()));
  EXPECT_EQ(linalg::cond(diagonal_singular, -2.0).item<double>(), 0.0);
  expect_linalg(linalg::cond(in("singular"), 1.0), "cond_singular_1");

  expect_linalg(linalg::matrix_power(in("sq"), 3), "power_sq_3");
  expect_linalg(linalg::matrix_power(in("sq"), 0), "power_sq_0");
  expect_linalg(linalg::matrix_power(in("sq"), -2), "power_sq_n2");
  expect_linalg(linalg::matrix_power(in("sq_batch"), 5), "power_sq_batch_5", 1e-9);
  expect_linalg(linalg::matrix_power(in("ints"), 5), "power_ints_5");

  expect_linalg(linalg::cross(in("u3"), in("v3")), "cross_rows");
  expect_linalg(linalg::cross(swapaxes(in("u3"), 0, 1), in("w3"), 0), "cross_axis0");
  expect_linalg(kron(in("tall").index({Slice(0, 2)}), in("wide").index({Slice(0, 2), Slice(0, 2)})), "kron_mat");
  expect_linalg(kron(vec.index({Slice(0, 3)}), in("tall").index({Slice(0, 2)})), "kron_vec_mat");
  expect_linalg(kron(cube, in("ints")), "kron_cube");
}

}  // namespace kiln_test
