// Dense linear solvers, as numpy.linalg.solve and numpy.linalg.lstsq.
// Computed in float64: on the CPU with LAPACK (OpenBLAS's dgesv/dgelsd), on a GPU with cuSOLVER on the device
// (LU getrf/getrs; the SVD gesvd for lstsq). Both synchronise: solve reads LAPACK's info to report a singular
// matrix, lstsq reads the singular values to find the rank.
#pragma once

#include <cstdint>
#include <optional>

#include "kiln/array.hpp"

namespace kiln::linalg {

/// x with a @ x = b for a square 2-d `a` and `b` of shape (n,) or (n, k). Result float32 for float32 (or
/// narrower float) operands, else float64, on a's device. Throws ShapeError (shapes), DeviceError (devices),
/// LinAlgError (a singular matrix). Syncs for GPU operands.
Array solve(const Array& a, const Array& b);

/// numpy.linalg.lstsq's four results.
struct LstsqResult {
  Array solution;         ///< x minimising ||a @ x - b||, shape (n,) or (n, k)
  Array residuals;        ///< squared residual norms per column, shape (k,) or (1,); (0,) unless rank == n < m
  int64_t rank = 0;       ///< effective rank of a
  Array singular_values;  ///< singular values of a, descending, shape (min(m, n),)
};
/// Least-squares solution of a @ x = b for a 2-d (m, n) `a` and b of shape (m,) or (m, k), via the SVD
/// (LAPACK dgelsd). Singular values below rcond * largest count as zero (default: eps * max(m, n), NumPy's).
/// Dtypes and devices as solve; throws ShapeError/DeviceError, LinAlgError when the SVD does not converge.
LstsqResult lstsq(const Array& a, const Array& b, std::optional<double> rcond = {});

}  // namespace kiln::linalg
