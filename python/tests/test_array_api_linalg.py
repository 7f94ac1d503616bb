"""kiln.array_api.linalg, the Array API's linalg extension, against NumPy 2's numpy.linalg (which follows the same
standard) in float64 and hand-computed values. The Array API suite (ctest's python.array_api) checks the shapes,
dtypes and stacking; these check the numbers."""

import math

import numpy as np
import pytest

import kiln.array_api as xp

rng = np.random.default_rng(34)


def close(got, want, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(np.asarray(got), want, rtol=rtol, atol=atol)


def test_the_namespace_has_every_2023_12_name():
    names = ["cholesky", "cross", "det", "diagonal", "eigh", "eigvalsh", "inv", "matmul", "matrix_norm",
             "matrix_power", "matrix_rank", "matrix_transpose", "outer", "pinv", "qr", "slogdet", "solve", "svd",
             "svdvals", "tensordot", "trace", "vecdot", "vector_norm"]
    assert sorted(xp.linalg.__all__) == sorted(names)
    assert all(callable(getattr(xp.linalg, n)) for n in names)


def test_solve_broadcasts_stacks_and_takes_a_1d_x2_as_one_vector():
    a = rng.standard_normal((3, 1, 4, 4)) + 4 * np.eye(4)
    b = rng.standard_normal((2, 4, 5))
    close(xp.linalg.solve(xp.asarray(a), xp.asarray(b)), np.linalg.solve(a, b), rtol=1e-10)
    v = rng.standard_normal(4)
    close(xp.linalg.solve(xp.asarray(a), xp.asarray(v)), np.linalg.solve(a, v), rtol=1e-10)
    # One matrix, a stack of right-hand sides (solved as the columns of one system).
    close(xp.linalg.solve(xp.asarray(a[0, 0]), xp.asarray(b)), np.linalg.solve(a[0, 0], b), rtol=1e-10)
    # Hand-computed: diag(2, 4) x = (1, 1).
    assert xp.linalg.solve(xp.asarray([[2.0, 0.0], [0.0, 4.0]]), xp.asarray([1.0, 1.0])).tolist() == [0.5, 0.25]
    assert xp.linalg.solve(xp.zeros((0, 3, 3)), xp.zeros((3,))).shape == (0, 3)
    with pytest.raises(ValueError, match="linalg::solve"):
        xp.linalg.solve(xp.zeros((2, 3, 3)), xp.zeros((2, 2)))


@pytest.mark.parametrize("ord", [2, 1, 0, -1, -2, math.inf, -math.inf, 3, 0.5, -1.5])
@pytest.mark.parametrize("axis", [None, 1, (0, 2), (-1,)])
def test_vector_norm(ord, axis):
    x = rng.standard_normal((3, 4, 5))
    x[0, 0, :2] = 0.0  # zeros for ord 0 and the negative orders
    for keepdims in (False, True):
        with np.errstate(divide="ignore"):  # the negative orders' 1/0 = inf, as intended
            want = np.linalg.vector_norm(x, axis=axis, keepdims=keepdims, ord=ord)
        got = xp.linalg.vector_norm(xp.asarray(x), axis=axis, keepdims=keepdims, ord=ord)
        assert got.shape == want.shape and got.dtype == xp.float64
        close(got, want, rtol=1e-12)
    assert xp.linalg.vector_norm(xp.asarray([3.0, -4.0])).item() == 5.0
    assert xp.linalg.vector_norm(xp.asarray(x, dtype=xp.float32), ord=ord).dtype == xp.float32


@pytest.mark.parametrize("ord", ["fro", "nuc", 1, -1, 2, -2, math.inf, -math.inf])
def test_matrix_norm(ord):
    x = rng.standard_normal((2, 3, 4))
    close(xp.linalg.matrix_norm(xp.asarray(x), ord=ord), np.linalg.matrix_norm(x, ord=ord), rtol=1e-10)
    close(xp.linalg.matrix_norm(xp.asarray(x), ord=ord, keepdims=True),
          np.linalg.matrix_norm(x, ord=ord, keepdims=True), rtol=1e-10)
    # An empty matrix's norm is 0 (NumPy raises for the orders that take a max or min).
    assert xp.linalg.matrix_norm(xp.zeros((2, 0, 3)), ord=ord).tolist() == [0.0, 0.0]


def test_matrix_rank_and_pinv_take_a_relative_tolerance():
    # Singular values 4, 1, 0.01: rtol 0.1 drops the last (0.01 <= 0.1 * 4), rtol 0.001 keeps it.
    u, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    v, _ = np.linalg.qr(rng.standard_normal((3, 3)))
    a = u @ np.diag([4.0, 1.0, 0.01]) @ v.T
    assert xp.linalg.matrix_rank(xp.asarray(a)).item() == 3
    assert xp.linalg.matrix_rank(xp.asarray(a), rtol=0.1).item() == 2
    stack = np.stack([a, a])
    ranks = xp.linalg.matrix_rank(xp.asarray(stack), rtol=xp.asarray([0.1, 0.001]))
    assert ranks.dtype == xp.int64 and ranks.tolist() == [2, 3]
    np.testing.assert_array_equal(np.asarray(ranks), np.linalg.matrix_rank(stack, rtol=np.array([0.1, 0.001])))
    close(xp.linalg.pinv(xp.asarray(a)), np.linalg.pinv(a), rtol=1e-9)
    close(xp.linalg.pinv(xp.asarray(a), rtol=0.1), np.linalg.pinv(a, rtol=0.1), rtol=1e-9)
    close(xp.linalg.pinv(xp.asarray(stack), rtol=xp.asarray([0.1, 0.001])),
          np.linalg.pinv(stack, rtol=np.array([0.1, 0.001])), rtol=1e-9, atol=1e-9)
    assert xp.linalg.matrix_rank(xp.zeros((2, 0, 3))).tolist() == [0, 0]
    assert xp.linalg.pinv(xp.zeros((2, 0, 3)), rtol=xp.asarray([0.1, 0.1])).shape == (2, 3, 0)


def test_factorisations_against_numpy():
    a = rng.standard_normal((2, 4, 3))
    spd = a.transpose(0, 2, 1) @ a + np.eye(3)
    x, s = xp.asarray(a), xp.asarray(spd)
    close(xp.linalg.cholesky(s), np.linalg.cholesky(spd), rtol=1e-10)
    close(xp.linalg.cholesky(s, upper=True), np.linalg.cholesky(spd, upper=True), rtol=1e-10)
    close(xp.linalg.det(s), np.linalg.det(spd), rtol=1e-10)
    sign, logabsdet = xp.linalg.slogdet(s)
    close(sign, np.linalg.slogdet(spd).sign)
    close(logabsdet, np.linalg.slogdet(spd).logabsdet, rtol=1e-10)
    close(xp.linalg.inv(s), np.linalg.inv(spd), rtol=1e-9)
    close(xp.linalg.eigvalsh(s), np.linalg.eigvalsh(spd), rtol=1e-10)
    w, v = xp.linalg.eigh(s)
    close(np.asarray(v) @ (np.asarray(w)[..., None] * np.asarray(v).transpose(0, 2, 1)), spd, rtol=1e-9)
    close(xp.linalg.svdvals(x), np.linalg.svdvals(a), rtol=1e-10)
    u, sv, vh = xp.linalg.svd(x, full_matrices=False)
    close(np.asarray(u) @ (np.asarray(sv)[..., None] * np.asarray(vh)), a, rtol=1e-9, atol=1e-12)
    q, r = xp.linalg.qr(x, mode="complete")
    assert q.shape == (2, 4, 4) and r.shape == (2, 4, 3)
    close(np.asarray(q) @ np.asarray(r), a, rtol=1e-9, atol=1e-12)
    close(xp.linalg.matrix_power(s, -2), np.linalg.matrix_power(spd, -2), rtol=1e-9)
    with pytest.raises(ValueError, match="mode"):
        xp.linalg.qr(x, mode="r")


def test_integer_functions_are_exact():
    x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    np.testing.assert_array_equal(np.asarray(xp.linalg.diagonal(xp.asarray(x), offset=1)),
                                  np.linalg.diagonal(x, offset=1))
    np.testing.assert_array_equal(np.asarray(xp.linalg.trace(xp.asarray(x), offset=-1)),
                                  np.linalg.trace(x, offset=-1))
    assert xp.linalg.trace(xp.asarray(x), dtype=xp.int32).dtype == xp.int32
    assert xp.linalg.trace(xp.asarray(x, dtype=xp.float32)).dtype == xp.float32
    a, b = np.array([1, 2, 3], np.int64), np.array([[4, 5, 6], [-1, 0, 2]], np.int64)
    assert xp.linalg.cross(xp.asarray(a), xp.asarray(b)).tolist() == [[-3, 6, -3], [4, -5, 2]]
    assert xp.linalg.cross(xp.asarray(b.T), xp.asarray(a[:, None]), axis=-2).tolist() == \
        np.linalg.cross(b.T, a[:, None], axis=-2).tolist()
    assert xp.linalg.outer(xp.asarray([1, 2]), xp.asarray([3, 4, 5])).tolist() == [[3, 4, 5], [6, 8, 10]]
    with pytest.raises(ValueError, match="3 elements"):
        xp.linalg.cross(xp.asarray([1, 2]), xp.asarray([3, 4]))
    with pytest.raises(ValueError, match="1-d"):
        xp.linalg.outer(xp.ones((2, 2)), xp.ones(2))
