"""Reductions (kiln/reductions.def) with axis and keepdims, shape ops and joins, against NumPy."""

import numpy as np
import pytest

import kiln

REF = np.array([[[3.0, -1.0, 2.5, 0.0], [7.0, 2.0, -4.0, 1.0], [0.5, 0.25, 9.0, -2.0]],
                [[1.0, 1.0, 1.0, 6.0], [-3.0, 8.0, 2.0, 2.0], [4.0, -5.0, 0.0, 3.0]]])
AXES = [None, 0, 1, 2, -1, (0, 2), (1, 2)]


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduction_matches_numpy(name, axis, keepdims, device):
    x = kiln.asarray(REF, device=device)
    want = getattr(np, name)(REF, axis=axis, keepdims=keepdims)
    for got in (getattr(kiln, name)(x, axis=axis, keepdims=keepdims), getattr(x, name)(axis=axis, keepdims=keepdims)):
        assert got.shape == np.shape(want)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("axis", [None, 0, 2], ids=str)
def test_arg_reductions_and_statistics_match_numpy(axis, device):
    x = kiln.asarray(REF, device=device)
    np.testing.assert_array_equal(x.argmax(axis=axis).numpy(), np.argmax(REF, axis=axis))
    np.testing.assert_array_equal(kiln.argmin(x, axis=axis).numpy(), np.argmin(REF, axis=axis))
    np.testing.assert_allclose(x.var(axis=axis).numpy(), np.var(REF, axis=axis), rtol=1e-12)
    np.testing.assert_allclose(kiln.std(x, axis=axis, ddof=1).numpy(), np.std(REF, axis=axis, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(x.cumsum(axis=axis).numpy(), np.cumsum(REF, axis=axis), rtol=1e-12)
    np.testing.assert_array_equal(kiln.all(x > -6, axis=axis).numpy(), np.all(REF > -6, axis=axis))
    np.testing.assert_array_equal((x > 8).any(axis=axis).numpy(), np.any(REF > 8, axis=axis))
    lse = np.log(np.sum(np.exp(REF), axis=axis))
    np.testing.assert_allclose(kiln.logsumexp(x, axis=axis).numpy(), lse, rtol=1e-12)


def test_integer_sum_gives_int64_as_numpy_2():
    a = np.arange(10, dtype=np.int8)
    assert kiln.asarray(a).sum().dtype == kiln.int64 and kiln.asarray(a).sum().item() == 45
    assert kiln.asarray(a).mean().dtype == kiln.float64


def test_shape_ops_match_numpy():
    ref = np.arange(24).reshape(2, 3, 4)
    x = kiln.asarray(ref)
    cases = [
        (x.reshape(4, 6), ref.reshape(4, 6)), (x.reshape((6, -1)), ref.reshape(6, -1)),
        (kiln.reshape(x, (24,)), ref.reshape(24)), (x.transpose(), ref.transpose()),
        (x.transpose(1, 0, 2), ref.transpose(1, 0, 2)), (kiln.transpose(x, (2, 0, 1)), ref.transpose(2, 0, 1)),
        (x.swapaxes(0, 2), ref.swapaxes(0, 2)), (kiln.moveaxis(x, 0, -1), np.moveaxis(ref, 0, -1)),
        (kiln.expand_dims(x, 1), np.expand_dims(ref, 1)), (kiln.expand_dims(x, 1).squeeze(), ref),
        (kiln.squeeze(kiln.asarray(np.ones((1, 3, 1))), axis=0), np.ones((3, 1))), (x.flatten(), ref.flatten()),
        (kiln.ravel(x), ref.ravel()), (kiln.broadcast_to(kiln.asarray([1, 2, 3, 4]), (3, 4)), np.broadcast_to([1, 2, 3, 4], (3, 4))),
    ]
    for got, want in cases:
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_concatenate_stack_split_match_numpy():
    a, b = np.arange(6).reshape(2, 3), np.arange(6, 12).reshape(2, 3)
    ka, kb = kiln.asarray(a), kiln.asarray(b)
    np.testing.assert_array_equal(kiln.concatenate([ka, kb]).numpy(), np.concatenate([a, b]))
    np.testing.assert_array_equal(kiln.concatenate((ka, kb), axis=1).numpy(), np.concatenate([a, b], axis=1))
    np.testing.assert_array_equal(kiln.stack([ka, kb], axis=1).numpy(), np.stack([a, b], axis=1))
    np.testing.assert_array_equal(kiln.concatenate([ka, b]).numpy(), np.concatenate([a, b]))  # NumPy operands too
    parts = kiln.split(kiln.asarray(np.arange(9)), 3)
    assert [p.tolist() for p in parts] == [p.tolist() for p in np.split(np.arange(9), 3)]
    parts = kiln.split(kiln.asarray(np.arange(9)), [2, 5])
    assert [p.tolist() for p in parts] == [p.tolist() for p in np.split(np.arange(9), [2, 5])]
