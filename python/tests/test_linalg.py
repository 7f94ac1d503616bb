"""kiln.linalg's factorisations and what is built on them, and kiln.kron, against numpy.linalg on random
float64 inputs (kiln computes in float64 with LAPACK, so the results agree to rounding)."""

import numpy as np
import pytest

import kiln

rng = np.random.default_rng(34)
TOL = dict(rtol=1e-9, atol=1e-10)


def k(x):
    return kiln.asarray(np.asarray(x, dtype=np.float64))


def spd(n, batch=()):
    a = rng.standard_normal(batch + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def test_linalg_error_is_a_value_error():
    assert issubclass(kiln.LinAlgError, ValueError)
    with pytest.raises(kiln.LinAlgError):
        kiln.linalg.inv(k(np.ones((3, 3))))
    with pytest.raises(ValueError):
        kiln.linalg.cholesky(k(-np.eye(2)))


def test_inv_det_slogdet_match_numpy_on_a_batch():
    a = rng.standard_normal((2, 3, 4, 4))
    np.testing.assert_allclose(kiln.linalg.inv(k(a)).numpy(), np.linalg.inv(a), **TOL)
    np.testing.assert_allclose(kiln.linalg.det(k(a)).numpy(), np.linalg.det(a), **TOL)
    got = kiln.linalg.slogdet(k(a))
    want = np.linalg.slogdet(a)
    assert type(got).__name__ == "SlogdetResult"
    sign, logabsdet = got
    np.testing.assert_array_equal(sign.numpy(), want.sign)
    np.testing.assert_allclose(got.logabsdet.numpy(), want.logabsdet, **TOL)


def test_slogdet_of_a_singular_matrix_is_zero_and_minus_inf():
    sign, logabsdet = kiln.linalg.slogdet(k([[1.0, 2.0], [2.0, 4.0]]))
    assert float(sign.numpy()) == 0.0 and float(logabsdet.numpy()) == -np.inf


def test_cholesky_lower_and_upper():
    a = spd(5, (3,))
    lower = np.linalg.cholesky(a)
    np.testing.assert_allclose(kiln.linalg.cholesky(k(a)).numpy(), lower, **TOL)
    np.testing.assert_allclose(kiln.linalg.cholesky(k(a), upper=True).numpy(), np.swapaxes(lower, -1, -2), **TOL)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (2, 4, 4)])
def test_qr_modes_match_numpy(shape):
    a = rng.standard_normal(shape)
    for mode in ("reduced", "complete"):
        got = kiln.linalg.qr(k(a), mode=mode)
        want = np.linalg.qr(a, mode=mode)
        assert type(got).__name__ == "QRResult"
        # LAPACK's Householder QR on both sides: the same signs, so the factors compare directly.
        np.testing.assert_allclose(got.Q.numpy(), want.Q, **TOL)
        np.testing.assert_allclose(got.R.numpy(), want.R, **TOL)
    np.testing.assert_allclose(kiln.linalg.qr(k(a), mode="r").numpy(), np.linalg.qr(a, mode="r"), **TOL)
    with pytest.raises(ValueError, match="mode"):
        kiln.linalg.qr(k(a), mode="full")


@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd_reconstructs_and_matches_numpys_singular_values(full_matrices):
    a = rng.standard_normal((2, 5, 3))
    U, S, Vh = kiln.linalg.svd(k(a), full_matrices=full_matrices)
    want = np.linalg.svd(a, full_matrices=full_matrices)
    assert U.shape == want.U.shape and Vh.shape == want.Vh.shape
    np.testing.assert_allclose(S.numpy(), want.S, **TOL)
    u, s, vh = U.numpy(), S.numpy(), Vh.numpy()
    kk = s.shape[-1]
    np.testing.assert_allclose((u[..., :kk] * s[..., None, :]) @ vh[..., :kk, :], a, **TOL)
    # singular vectors are unique up to sign for distinct singular values
    np.testing.assert_allclose(np.abs(u[..., :kk]), np.abs(want.U[..., :kk]), **TOL)
    s_only = kiln.linalg.svd(k(a), compute_uv=False)
    np.testing.assert_allclose(s_only.numpy(), want.S, **TOL)
    np.testing.assert_allclose(kiln.linalg.svdvals(k(a)).numpy(), want.S, **TOL)


def test_eigh_and_eigvalsh_match_numpy():
    a = rng.standard_normal((3, 4, 4))
    sym = a + np.swapaxes(a, -1, -2)
    for uplo in ("L", "U"):
        w, v = kiln.linalg.eigh(k(a), UPLO=uplo)  # reads one triangle only, as NumPy
        want = np.linalg.eigh(a, UPLO=uplo)
        np.testing.assert_allclose(w.numpy(), want.eigenvalues, **TOL)
        np.testing.assert_allclose(np.abs(v.numpy()), np.abs(want.eigenvectors), **TOL)
        np.testing.assert_allclose(kiln.linalg.eigvalsh(k(a), UPLO=uplo).numpy(), want.eigenvalues, **TOL)
    result = kiln.linalg.eigh(k(sym))
    assert type(result).__name__ == "EighResult"
    vals, vecs = result.eigenvalues.numpy(), result.eigenvectors.numpy()
    np.testing.assert_allclose(sym @ vecs, vecs * vals[..., None, :], **TOL)


def test_pinv_matrix_rank_cond_match_numpy():
    a = rng.standard_normal((4, 6))
    np.testing.assert_allclose(kiln.linalg.pinv(k(a)).numpy(), np.linalg.pinv(a), **TOL)
    s = spd(4)
    np.testing.assert_allclose(kiln.linalg.pinv(k(s), hermitian=True).numpy(), np.linalg.pinv(s, hermitian=True),
                               **TOL)
    low_rank = rng.standard_normal((6, 2)) @ rng.standard_normal((2, 5))
    assert int(kiln.linalg.matrix_rank(k(low_rank)).numpy()) == np.linalg.matrix_rank(low_rank) == 2
    assert int(kiln.linalg.matrix_rank(k(low_rank), tol=1e20).numpy()) == 0
    b = rng.standard_normal((3, 3))
    for p in (None, 2, -2, 1, -1, np.inf, -np.inf, "fro", "nuc"):
        np.testing.assert_allclose(kiln.linalg.cond(k(b), p).numpy(), np.linalg.cond(b, p), rtol=1e-8)


@pytest.mark.parametrize("ord", [None, 1, 2, 3.5, 0, np.inf, -np.inf, -1])
def test_vector_norm_with_ord(ord):
    x = rng.standard_normal((3, 7))
    np.testing.assert_allclose(kiln.linalg.norm(k(x), ord, axis=1).numpy(), np.linalg.norm(x, ord, axis=1), **TOL)
    np.testing.assert_allclose(kiln.linalg.norm(k(x[0]), ord).numpy(), np.linalg.norm(x[0], ord), **TOL)


@pytest.mark.parametrize("ord", [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf])
def test_matrix_norm_with_ord(ord):
    x = rng.standard_normal((2, 4, 5))
    got = kiln.linalg.norm(k(x), ord=ord, axis=(1, 2), keepdims=True)
    np.testing.assert_allclose(got.numpy(), np.linalg.norm(x, ord=ord, axis=(1, 2), keepdims=True), **TOL)
    np.testing.assert_allclose(kiln.linalg.norm(k(x[0]), ord).numpy(), np.linalg.norm(x[0], ord), **TOL)


def test_norm_keeps_its_axis_keyword():
    x = rng.standard_normal((3, 4))
    np.testing.assert_allclose(kiln.linalg.norm(k(x), axis=0).numpy(), np.linalg.norm(x, axis=0), **TOL)
    with pytest.raises(ValueError):
        kiln.linalg.norm(k(x), "max")


def test_matrix_power_cross_kron():
    a = rng.standard_normal((2, 3, 3))
    for n in (0, 1, 5, -3):
        np.testing.assert_allclose(kiln.linalg.matrix_power(k(a), n).numpy(), np.linalg.matrix_power(a, n),
                                   rtol=1e-8, atol=1e-9)
    ints = np.array([[1, 1], [1, 0]], dtype=np.int64)
    fib = kiln.linalg.matrix_power(kiln.asarray(ints), 10)
    assert fib.dtype == kiln.int64 and fib.numpy().tolist() == [[89, 55], [55, 34]]
    u, v = rng.standard_normal((4, 3)), rng.standard_normal((1, 3))
    np.testing.assert_allclose(kiln.linalg.cross(k(u), k(v)).numpy(), np.cross(u, v), **TOL)
    ut, vt = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(kiln.linalg.cross(k(ut), k(vt), axis=0).numpy(), np.cross(ut, vt, axis=0), **TOL)
    p, q = rng.standard_normal((2, 3)), rng.standard_normal((4, 1, 2))
    np.testing.assert_allclose(kiln.kron(k(p), k(q)).numpy(), np.kron(p, q), **TOL)


@pytest.mark.parametrize("shape", [(6, 3), (3, 6)])
def test_lstsq_matches_numpy(shape):
    a = rng.standard_normal(shape)
    b = rng.standard_normal((shape[0], 2))
    got = kiln.linalg.lstsq(k(a), k(b))
    want = np.linalg.lstsq(a, b, rcond=None)
    assert type(got).__name__ == "LstsqResult"
    x, residuals, rank, sv = got
    np.testing.assert_allclose(x.numpy(), want[0], **TOL)
    np.testing.assert_allclose(residuals.numpy(), want[1], **TOL)
    assert rank == want[2]
    np.testing.assert_allclose(sv.numpy(), want[3], **TOL)


def test_float32_operands_give_float32_results():
    a = spd(3).astype(np.float32)
    assert kiln.linalg.inv(kiln.asarray(a)).dtype == kiln.float32
    np.testing.assert_allclose(kiln.linalg.inv(kiln.asarray(a)).numpy(), np.linalg.inv(a.astype(np.float64)),
                               rtol=1e-5, atol=1e-6)


def _sorted(w):
    return np.sort_complex(np.asarray(w, dtype=np.complex128).ravel())


def test_eig_and_eigvals_match_numpy_as_multisets_and_eigenpairs():
    a = rng.standard_normal((2, 5, 5))  # general real matrices: complex-conjugate pairs
    result = kiln.linalg.eig(k(a))
    assert type(result).__name__ == "EigResult"
    w, v = result
    assert w.dtype == kiln.complex128 and v.dtype == kiln.complex128
    want = np.linalg.eig(a)
    for i in range(2):
        np.testing.assert_allclose(_sorted(w.numpy()[i]), _sorted(want.eigenvalues[i]), **TOL)
    vals, vecs = result.eigenvalues.numpy(), result.eigenvectors.numpy()
    np.testing.assert_allclose(a @ vecs, vecs * vals[..., None, :], **TOL)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=-2), 1.0, **TOL)
    np.testing.assert_allclose(kiln.linalg.eigvals(k(a)).numpy(), vals, **TOL)


def test_eig_dtypes_complex_input_and_errors():
    a32 = rng.standard_normal((4, 4)).astype(np.float32)
    w32 = kiln.linalg.eigvals(kiln.asarray(a32))
    assert w32.dtype == kiln.complex64
    np.testing.assert_allclose(_sorted(w32.numpy()), _sorted(np.linalg.eigvals(a32)), rtol=1e-4, atol=1e-4)
    c = rng.standard_normal((3, 3, 3)) + 1j * rng.standard_normal((3, 3, 3))
    w, v = kiln.linalg.eig(kiln.asarray(c))
    assert w.dtype == kiln.complex128
    np.testing.assert_allclose(c @ v.numpy(), v.numpy() * w.numpy()[..., None, :], **TOL)
    sym = np.array([[2.0, 1.0], [1.0, 2.0]])  # NumPy returns float64 here; kiln stays complex
    np.testing.assert_allclose(_sorted(kiln.linalg.eigvals(k(sym)).numpy()), _sorted(np.linalg.eigvals(sym)), **TOL)
    with pytest.raises(ValueError, match="Last 2 dimensions of the array must be square"):
        kiln.linalg.eig(k(np.ones((2, 3))))
    with pytest.raises(kiln.LinAlgError, match="Array must not contain infs or NaNs"):
        kiln.linalg.eigvals(k(np.array([[1.0, np.nan], [0.0, 1.0]])))
