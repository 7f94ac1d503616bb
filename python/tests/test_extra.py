"""The NumPy functions of python/src/extra.cpp (sorting, gathers, triangles, products, tiling...), checked
against NumPy's results on the same inputs."""

import numpy as np
import pytest

import kiln

RNG = np.random.default_rng(7)
A = RNG.standard_normal((3, 4)).astype(np.float32)


def k(a):
    return kiln.asarray(a)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_sort_and_argsort_match_numpy(axis):
    np.testing.assert_array_equal(kiln.sort(k(A), axis=axis).numpy(), np.sort(A, axis=axis))
    np.testing.assert_array_equal(kiln.argsort(k(A), axis=axis).numpy(), np.argsort(A, axis=axis, kind="stable"))


def test_argsort_is_stable():
    ties = np.array([2, 1, 2, 1, 0], dtype=np.int64)
    assert kiln.argsort(k(ties)).tolist() == [4, 1, 3, 0, 2]


def test_searchsorted_both_sides():
    a, v = np.array([1.0, 2.0, 2.0, 3.0]), np.array([0.5, 2.0, 3.5])
    for side in ("left", "right"):
        np.testing.assert_array_equal(kiln.searchsorted(k(a), k(v), side=side).numpy(), np.searchsorted(a, v, side))


def test_unique_with_counts_and_inverse():
    x = np.array([3, 1, 3, 2, 1, 3])
    values, index, inverse, counts = kiln.unique(k(x), True, True, True)
    want = np.unique(x, return_index=True, return_inverse=True, return_counts=True)
    for got, expected in zip((values, index, inverse, counts), want):
        np.testing.assert_array_equal(got.numpy(), expected)
    assert kiln.unique_values(k(x)).tolist() == [1, 2, 3]
    assert kiln.flatnonzero(k(np.array([0, 2, 0, 5]))).tolist() == [1, 3]


def test_take_and_take_along_axis():
    idx = np.array([2, 0, 3])
    np.testing.assert_array_equal(kiln.take(k(A), k(idx), axis=1).numpy(), np.take(A, idx, axis=1))
    np.testing.assert_array_equal(kiln.take(k(A), [5, 0]).numpy(), np.take(A, [5, 0]))
    order = np.argsort(A, axis=1)
    np.testing.assert_array_equal(kiln.take_along_axis(k(A), k(order), 1).numpy(), np.sort(A, axis=1))


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_triangles_diagonals_and_trace(diagonal):
    np.testing.assert_array_equal(kiln.tril(k(A), diagonal).numpy(), np.tril(A, diagonal))
    np.testing.assert_array_equal(kiln.triu(k(A), diagonal).numpy(), np.triu(A, diagonal))
    np.testing.assert_array_equal(kiln.diagonal(k(A), diagonal).numpy(), np.diagonal(A, diagonal))
    np.testing.assert_allclose(kiln.trace(k(A), diagonal).item(), np.trace(A, diagonal), rtol=1e-6)
    np.testing.assert_array_equal(kiln.diag(k(A[0]), diagonal).numpy(), np.diag(A[0], diagonal))


def test_products_match_float64():
    b = RNG.standard_normal((4, 2)).astype(np.float32)
    want = A.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(kiln.tensordot(k(A), k(b), 1).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.tensordot(k(A), k(b), ([1], [0])).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.einsum("ij,jk->ik", k(A), k(b)).numpy(), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(kiln.outer(k(A[0]), k(b[:, 0])).numpy(), np.outer(A[0], b[:, 0]), rtol=1e-6)
    with pytest.raises(TypeError, match="pair of axis lists"):
        kiln.tensordot(k(A), k(b), ([1], [0], [2]))


def test_tile_repeat_roll_flip():
    np.testing.assert_array_equal(kiln.tile(k(A), (2, 1)).numpy(), np.tile(A, (2, 1)))
    np.testing.assert_array_equal(kiln.repeat(k(A), 2, axis=0).numpy(), np.repeat(A, 2, axis=0))
    np.testing.assert_array_equal(kiln.repeat(k(A), [1, 0, 2], axis=0).numpy(), np.repeat(A, [1, 0, 2], axis=0))
    np.testing.assert_array_equal(kiln.roll(k(A), 2).numpy(), np.roll(A, 2))
    np.testing.assert_array_equal(kiln.roll(k(A), (1, -1), axis=(0, 1)).numpy(), np.roll(A, (1, -1), axis=(0, 1)))
    np.testing.assert_array_equal(kiln.roll(k(A), 1, axis=(0, 1)).numpy(), np.roll(A, 1, axis=(0, 1)))
    np.testing.assert_array_equal(kiln.flip(k(A)).numpy(), np.flip(A))
    np.testing.assert_array_equal(kiln.flip(k(A), axis=1).numpy(), np.flip(A, axis=1))


def test_meshgrid_both_indexings():
    x, y = np.arange(3), np.arange(2)
    for indexing in ("xy", "ij"):
        for got, want in zip(kiln.meshgrid(k(x), k(y), indexing=indexing), np.meshgrid(x, y, indexing=indexing)):
            np.testing.assert_array_equal(got.numpy(), want)


def test_closeness():
    a, b = np.array([1.0, 2.0, np.nan]), np.array([1.0 + 1e-9, 2.1, np.nan])
    np.testing.assert_array_equal(kiln.isclose(k(a), k(b)).numpy(), np.isclose(a, b))
    assert kiln.allclose(k(a[:1]), k(b[:1])) and not kiln.allclose(k(a), k(b))
    assert kiln.array_equal(k(a), k(a), equal_nan=True) and not kiln.array_equal(k(a), k(a))


def test_linalg_solve_against_float64():
    m = np.array([[4.0, 1.0], [2.0, 3.0]])
    rhs = np.array([1.0, 2.0])
    np.testing.assert_allclose(kiln.linalg.solve(k(m), k(rhs)).numpy(), [0.1, 0.6], rtol=1e-12)
    with pytest.raises(kiln.LinAlgError):
        kiln.linalg.solve(k(np.zeros((2, 2))), k(rhs))
