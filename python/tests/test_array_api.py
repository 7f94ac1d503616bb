"""kiln.array_api, the Array API namespace: the functions composed in Python and the array protocol, against
NumPy and hand-computed values (the Array API suite, ctest's python.array_api, checks the rest)."""

import math

import numpy as np
import pytest

import kiln
import kiln.array_api as xp


def test_namespace_identity_and_info():
    x = xp.asarray([1.0, 2.0])
    assert x.__array_namespace__() is xp and xp.__array_api_version__ == "2023.12"
    info = xp.__array_namespace_info__()
    assert info.default_device() == kiln.cpu() and kiln.cpu() in info.devices()
    assert info.default_dtypes()["real floating"] == xp.float32 and info.default_dtypes()["indexing"] == xp.int64
    assert set(info.dtypes(kind="integral")) == {"int8", "int16", "int32", "int64", "uint8"}
    assert xp.isdtype(xp.uint8, ("bool", "unsigned integer")) and not xp.isdtype(xp.float32, "integral")


def test_dtype_functions():
    assert xp.result_type(xp.int8, xp.uint8) == xp.int16
    assert xp.can_cast(xp.int8, xp.int32) and not xp.can_cast(xp.int32, xp.int8)
    assert not xp.can_cast(xp.bool, xp.int8) and not xp.can_cast(xp.int64, xp.float64)
    assert xp.finfo(xp.float32).eps == 2.0**-23 and xp.iinfo(xp.int8).min == -128 and xp.iinfo(xp.uint8).max == 255
    with pytest.raises(ValueError):
        xp.finfo(xp.int32)


def test_asarray_copy_semantics():
    x = xp.asarray([1, 2, 3])
    assert x.dtype == xp.int64
    assert xp.asarray(x, copy=False) is x
    y = xp.asarray(x, copy=True)
    y[0] = 9
    assert x.tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="copy=False"):
        xp.asarray([1, 2], copy=False)


def test_composed_elementwise_functions_match_numpy():
    v = np.array([-3.0, -0.5, 0.0, 0.5, 2.0, 1e30], dtype=np.float64)
    np.testing.assert_allclose(xp.asinh(xp.asarray(v)).numpy(), np.arcsinh(v), rtol=1e-14)
    w = np.array([1.0, 1.5, 10.0, 1e30])
    np.testing.assert_allclose(xp.acosh(xp.asarray(w)).numpy(), np.arccosh(w), rtol=1e-14)
    assert math.isnan(xp.acosh(xp.asarray([-math.inf])).item())
    u = np.array([-0.9, 0.0, 0.3])
    np.testing.assert_allclose(xp.atanh(xp.asarray(u)).numpy(), np.arctanh(u), rtol=1e-14, atol=1e-17)
    a, b = np.array([3.0, 1e200, 0.0, math.inf]), np.array([4.0, 1e200, 0.0, math.nan])
    np.testing.assert_allclose(xp.hypot(xp.asarray(a), xp.asarray(b)).numpy(), np.hypot(a, b), rtol=1e-15)
    s = xp.signbit(xp.asarray([-0.0, 0.0, -2.0, 1.0]))
    assert s.tolist() == [True, False, True, False]
    c = xp.copysign(xp.asarray([1.0, -2.0, 3.0]), xp.asarray([-0.0, 1.0, -5.0]))
    assert c.tolist() == [-1.0, 2.0, -3.0]


def test_bit_shifts_as_numpy():
    x = np.array([1, -8, 100, 7], dtype=np.int32)
    s = np.array([3, 1, 40, 0], dtype=np.int32)
    np.testing.assert_array_equal(xp.bitwise_left_shift(xp.asarray(x), xp.asarray(s)).numpy()[[0, 1, 3]],
                                  np.left_shift(x, s)[[0, 1, 3]])
    assert xp.bitwise_left_shift(xp.asarray(x), xp.asarray(s)).tolist()[2] == 0  # past the width: no bits left
    assert xp.bitwise_right_shift(xp.asarray(x), xp.asarray(s)).tolist() == [0, -4, 0, 7]
    y = xp.asarray(np.array([3], dtype=np.uint8))
    assert (y << 2).tolist() == [12] and (y >> 1).tolist() == [1]
    y <<= 1
    assert y.tolist() == [6] and y.dtype == xp.uint8


def test_manipulation_and_searching():
    a = np.arange(24).reshape(2, 3, 4)
    x = xp.asarray(a)
    np.testing.assert_array_equal(xp.moveaxis(x, (0, 1), (2, 0)).numpy(), np.moveaxis(a, (0, 1), (2, 0)))
    assert [t.tolist() for t in xp.unstack(xp.asarray([[1, 2], [3, 4]]), axis=1)] == [[1, 3], [2, 4]]
    assert xp.concat([xp.asarray([[1]]), xp.asarray([[2, 3]])], axis=None).tolist() == [1, 2, 3]
    with pytest.raises(IndexError):
        xp.expand_dims(x, axis=4)
    rows, cols = xp.nonzero(xp.asarray([[0, 5], [7, 0]]))
    assert rows.tolist() == [0, 1] and cols.tolist() == [1, 0]
    assert xp.searchsorted(xp.asarray([3, 1, 2]), xp.asarray([2]), sorter=xp.asarray([1, 2, 0])).tolist() == [1]


def test_sorting_descending_is_stable():
    v = xp.asarray([1, 3, 1, 2, 3])
    assert xp.sort(v, descending=True).tolist() == [3, 3, 2, 1, 1]
    assert xp.argsort(v, descending=True).tolist() == [1, 4, 3, 0, 2]


def test_sets():
    v = xp.asarray([[2, 1], [2, 3]])
    r = xp.unique_all(v)
    assert r.values.tolist() == [1, 2, 3] and r.indices.tolist() == [1, 0, 3] and r.counts.tolist() == [1, 2, 1]
    assert r.inverse_indices.tolist() == [[1, 0], [1, 2]]
    assert xp.unique_counts(v).counts.tolist() == [1, 2, 1]


def test_statistics():
    a = np.array([[1.0, 2.0, 4.0], [3.0, 5.0, 9.0]])
    x = xp.asarray(a)
    np.testing.assert_allclose(xp.var(x, axis=1, correction=1.5).numpy(),
                               ((a - a.mean(1, keepdims=True)) ** 2).sum(1) / 1.5, rtol=1e-14)
    np.testing.assert_allclose(xp.std(x, correction=1).item(), np.std(a, ddof=1), rtol=1e-14)
    assert xp.cumulative_sum(xp.asarray([1, 2, 3]), include_initial=True).tolist() == [0, 1, 3, 6]
    assert xp.sum(xp.asarray([200, 100], dtype=xp.uint8), dtype=xp.uint8).item() == 44  # wraps as uint8
    assert xp.vecdot(xp.asarray([1, 2], dtype=xp.uint8), xp.asarray([3, 4], dtype=xp.uint8)).dtype == xp.uint8
    with pytest.raises(ValueError, match="not broadcast"):
        xp.vecdot(xp.ones((2, 3)), xp.ones((2, 1)))


def test_zero_d_and_empty_masks():
    x = xp.asarray(5)
    assert x[xp.asarray(True)].tolist() == [5] and x[xp.asarray(False)].shape == (0,)
    y = xp.asarray([1, 2, 3])
    assert y[xp.asarray([], dtype=xp.bool)].shape == (0,)
    y[xp.asarray(True)] = 7
    assert y.tolist() == [7, 7, 7]
    assert y[None].shape == (1, 3) and complex(xp.asarray(2.5)) == 2.5 + 0j
    with pytest.raises(IndexError):
        y[xp.asarray([True, False])]


def test_from_dlpack_shares_unless_asked_to_copy():
    host = np.arange(4.0)
    shared = xp.from_dlpack(host)
    copied = xp.from_dlpack(host, copy=True)
    host[0] = 7.0
    assert shared.tolist()[0] == 7.0 and copied.tolist()[0] == 0.0
    assert xp.__array_namespace_info__().capabilities()["max dimensions"] == 16


def test_clip_keeps_float64_bounds_exact():
    x = xp.asarray(np.array([1.0, -1.0, 1e-70]))
    assert xp.clip(x, max=1.0412656316598786e-68).tolist() == [1.0412656316598786e-68, -1.0, 1e-70]
    assert xp.clip(x, min=-0.5, max=xp.asarray(np.array(0.5))).tolist() == [0.5, -0.5, 1e-70]
