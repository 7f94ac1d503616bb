"""kiln.Array's attributes, creation functions, conversions and printing, against NumPy."""

import numpy as np
import pytest

import kiln


def test_attributes_match_numpy():
    ref = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = kiln.asarray(ref)
    assert x.shape == ref.shape
    assert x.ndim == 3 and x.size == 24 and x.nbytes == 96 and x.itemsize == 4
    assert x.strides == ref.strides
    assert x.dtype == kiln.float32 and x.dtype == "float32" and x.dtype == np.float32
    assert str(x.dtype) == "float32" and repr(x.dtype) == "kiln.float32"
    assert x.device == kiln.cpu() and str(x.device) == "cpu"
    assert len(x) == 2
    np.testing.assert_array_equal(x.T.numpy(), ref.T)


@pytest.mark.parametrize("name", ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"])
def test_dtype_attributes_round_trip_through_numpy(name):
    ref = (np.arange(6) % 3).astype(name)
    x = kiln.asarray(ref)
    assert x.dtype == getattr(kiln, name if name != "bool" else "bool_")
    assert x.dtype.itemsize == np.dtype(name).itemsize
    back = np.asarray(x)
    assert back.dtype == np.dtype(name)
    np.testing.assert_array_equal(back, ref)


def test_python_values_take_the_default_dtypes():
    assert kiln.asarray([1, 2, 3]).dtype == kiln.int64
    assert kiln.asarray([1.5, 2.0]).dtype == kiln.float32  # kiln's default float, as PyTorch
    assert kiln.asarray([True, False]).dtype == kiln.bool_
    assert kiln.asarray(np.array([1.5])).dtype == kiln.float64  # NumPy arrays keep theirs
    assert kiln.asarray([[1, 2], [3, 4]], dtype=kiln.float64).dtype == kiln.float64
    assert kiln.asarray(3.0).shape == ()


def test_creation_functions_match_numpy(device):
    cases = [
        (kiln.zeros((2, 3), device=device), np.zeros((2, 3), np.float32)),
        (kiln.ones(4, dtype=kiln.int32, device=device), np.ones(4, np.int32)),
        (kiln.full((2, 2), 7, device=device), np.full((2, 2), 7, np.int64)),
        (kiln.full((2, 2), 2.5, dtype="float64", device=device), np.full((2, 2), 2.5)),
        (kiln.arange(5, device=device), np.arange(5)),
        (kiln.arange(1, 10, 3, device=device), np.arange(1, 10, 3)),
        (kiln.arange(0.0, 1.0, 0.25, device=device), np.arange(0.0, 1.0, 0.25, dtype=np.float32)),
        (kiln.linspace(0, 1, 5, device=device), np.linspace(0, 1, 5, dtype=np.float32)),
        (kiln.linspace(0, 1, 4, endpoint=False, dtype=kiln.float64, device=device), np.linspace(0, 1, 4, endpoint=False)),
        (kiln.eye(3, device=device), np.eye(3, dtype=np.float32)),
        (kiln.eye(3, 4, k=1, dtype=kiln.int8, device=device), np.eye(3, 4, k=1, dtype=np.int8)),
    ]
    for got, want in cases:
        assert got.device == device
        assert got.dtype == want.dtype, (got, want)
        np.testing.assert_array_equal(got.numpy(), want)


def test_like_functions_follow_their_argument(device):
    x = kiln.asarray(np.arange(6, dtype=np.int16).reshape(2, 3), device=device)
    for fn, fill in [(kiln.zeros_like, 0), (kiln.ones_like, 1)]:
        y = fn(x)
        assert y.shape == (2, 3) and y.dtype == kiln.int16 and y.device == device
        np.testing.assert_array_equal(y.numpy(), np.full((2, 3), fill, np.int16))
    y = kiln.full_like(x, 9, dtype=kiln.float64)
    np.testing.assert_array_equal(y.numpy(), np.full((2, 3), 9.0))
    assert kiln.empty_like(x).shape == (2, 3)
    assert kiln.empty((3, 1)).shape == (3, 1)


def test_repr_matches_numpy():
    for ref in [np.arange(6).reshape(2, 3), np.array([0.5, 1.25, -3.0], np.float32), np.array([True, False]),
                np.float64(2.5) * np.ones(3), np.array(7)]:
        assert repr(kiln.asarray(ref)) == repr(ref)


def test_item_tolist_and_scalar_conversions():
    x = kiln.asarray(np.array([[1.5, 2.0], [3.0, 4.0]]))
    assert x.tolist() == [[1.5, 2.0], [3.0, 4.0]]
    assert x[1, 0].item() == 3.0 and isinstance(x[1, 0].item(), float)
    assert kiln.asarray([7]).item() == 7 and isinstance(kiln.asarray([7]).item(), int)
    assert kiln.asarray([True]).item() is True
    assert float(x[0, 0]) == 1.5 and int(kiln.arange(3)[2]) == 2
    assert [1, 2, 3][kiln.arange(3)[1]] == 2  # __index__
    assert bool(kiln.asarray([1]))
    with pytest.raises(ValueError):
        bool(kiln.arange(3))
    with pytest.raises(ValueError):
        x.item()


def test_astype_copy_and_to(device):
    x = kiln.asarray([1.7, -2.2, 3.5], device=device)
    np.testing.assert_array_equal(x.astype(kiln.int32).numpy(), np.array([1.7, -2.2, 3.5], np.float32).astype(np.int32))
    assert x.astype("float64").dtype == kiln.float64
    assert x.astype(np.float16).dtype == kiln.float16
    y = x.copy()
    y[0] = 100.0
    assert x[0].item() == pytest.approx(1.7)
    assert x.to(device) .device == device
    assert x.to("cpu").device == kiln.cpu()


def test_bfloat16_arrays_convert_through_float32():
    x = kiln.asarray([1.0, 2.5, -3.0]).astype(kiln.bfloat16)
    assert x.dtype == kiln.bfloat16 and x.itemsize == 2
    assert x.tolist() == [1.0, 2.5, -3.0]
    with pytest.raises(TypeError, match="bfloat16"):
        np.asarray(x)


def test_iteration_yields_rows():
    x = kiln.asarray(np.arange(6).reshape(3, 2))
    assert [row.tolist() for row in x] == [[0, 1], [2, 3], [4, 5]]


def test_copy_deepcopy_and_pickle_round_trip():
    import copy
    import pickle

    x = kiln.asarray(np.arange(6, dtype=np.int16).reshape(2, 3))
    for y in (copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert y.dtype == kiln.int16 and y.device == x.device and y.data_ptr != x.data_ptr
        np.testing.assert_array_equal(y.numpy(), np.arange(6, dtype=np.int16).reshape(2, 3))
    b = pickle.loads(pickle.dumps(kiln.asarray([1.5, -2.0]).astype(kiln.bfloat16)))
    assert b.dtype == kiln.bfloat16 and b.tolist() == [1.5, -2.0]


def test_array_api_namespace_and_to_device():
    x = kiln.ones(2)
    assert x.__array_namespace__() is kiln.array_api
    assert x.__array_namespace__(api_version="2023.12") is kiln.array_api
    with pytest.raises(ValueError, match="2023.12"):
        x.__array_namespace__(api_version="1999.01")
    assert x.to_device(kiln.cpu()).device == kiln.cpu()


def test_array_copies_and_asarray_shares():
    x = kiln.arange(3)
    assert kiln.asarray(x).data_ptr == x.data_ptr
    assert kiln.array(x).data_ptr != x.data_ptr
    assert kiln.array(x, copy=False).data_ptr == x.data_ptr
    assert kiln.Array([1, 2]).tolist() == [1, 2] and kiln.Array(np.ones(2), dtype="int8").dtype == kiln.int8
