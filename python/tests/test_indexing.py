"""Indexing and assignment with NumPy's rules: basic slices, integers, newaxis/ellipsis, index arrays, masks."""

import numpy as np
import pytest

import kiln

REF = np.arange(60).reshape(3, 4, 5)

KEYS = [
    1, -1, (0, 2), (2, -1, 4), slice(None), slice(1, None), slice(None, None, -1), (slice(None), slice(1, 3)),
    (Ellipsis, 2), (1, Ellipsis, slice(None, None, 2)), (None, 1), (slice(None), None, 2), (0, slice(3, 0, -2), 1),
    (), ([0, 2],), (np.int64(1), slice(None)), np.array([2, 0]), (slice(None), [3, 0, 0]), ([0, 1], [1, 2]), ([[0], [2]], [1, 3]),
]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_getitem_matches_numpy(key, device):
    x = kiln.asarray(REF, device=device)
    want = REF[key]
    got = x[key]
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(got.numpy(), want)


def test_index_arrays_and_masks_as_kiln_arrays(device):
    x = kiln.asarray(REF, device=device)
    mask = REF % 7 == 0
    np.testing.assert_array_equal(x[kiln.asarray(mask, device=device)].numpy(), REF[mask])
    np.testing.assert_array_equal(x[x > 50].numpy(), REF[REF > 50])
    np.testing.assert_array_equal(x[kiln.asarray([2, 0], device=device)].numpy(), REF[[2, 0]])
    np.testing.assert_array_equal(x[np.array([1, 1])].numpy(), REF[np.array([1, 1])])
    np.testing.assert_array_equal(x[:, mask[0, :, 0]].numpy(), REF[:, mask[0, :, 0]])


def test_basic_indexing_returns_views():
    x = kiln.asarray(REF.copy())
    row = x[1, :, 2]
    x[1, :, 2] = 0
    assert row.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("key,value", [
    ((0, 1, 2), 99), ((slice(None), 0), -5), ((Ellipsis, slice(None, None, 2)), 7),
    ((1,), np.arange(20).reshape(4, 5)), ((slice(None), slice(None), 0), np.array([1, 2, 3, 4])),
    (([0, 2], 1), 8), ((REF > 40,), 0),
], ids=repr)
def test_setitem_matches_numpy(key, value, device):
    want = REF.copy()
    want[key] = value
    x = kiln.asarray(REF, device=device)
    x[key] = kiln.asarray(value) if isinstance(value, np.ndarray) and key == (1,) else value
    np.testing.assert_array_equal(x.numpy(), want)


def test_out_of_range_raises_index_error():
    x = kiln.asarray(REF)
    with pytest.raises(IndexError):
        x[3]
    with pytest.raises(IndexError):
        x[0, -5]
    with pytest.raises(IndexError):
        x[0, 0, 0, 0]
    with pytest.raises(IndexError):
        x[kiln.asarray([0, 7])]
    with pytest.raises(IndexError):
        x[5] = 1
