"""pad, quantile, percentile, median, histogram and bincount (python/src/statistics.cpp) against NumPy on the
same inputs, on every device."""

import numpy as np
import pytest

import kiln

RNG = np.random.default_rng(11)
A = RNG.standard_normal((4, 5))


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "symmetric", "wrap"])
@pytest.mark.parametrize("pad_width", [1, (1, 2), ((2, 0), (1, 3))])
def test_pad_matches_numpy(device, mode, pad_width):
    got = kiln.pad(kiln.asarray(A, device=device), pad_width, mode=mode)
    np.testing.assert_array_equal(got.numpy(), np.pad(A, pad_width, mode=mode))


def test_pad_constant_values_and_errors():
    got = kiln.pad(kiln.asarray(np.arange(3.0)), (2, 1), constant_values=-7)
    assert got.tolist() == [-7.0, -7.0, 0.0, 1.0, 2.0, -7.0]
    with pytest.raises(ValueError, match="pad"):
        kiln.pad(kiln.asarray(np.arange(3.0)), -1)
    with pytest.raises(ValueError, match="pad_width"):
        kiln.pad(kiln.asarray(np.arange(3.0)), (1, 2, 3))


@pytest.mark.parametrize("axis", [None, 0, 1, (0, 1)])
@pytest.mark.parametrize("keepdims", [False, True])
def test_quantile_percentile_median_match_numpy(device, axis, keepdims):
    x = kiln.asarray(A, device=device)
    for q in (0.0, 0.3, 0.5, 1.0):
        np.testing.assert_allclose(kiln.quantile(x, q, axis=axis, keepdims=keepdims).numpy(),
                                   np.quantile(A, q, axis=axis, keepdims=keepdims), rtol=1e-12, atol=1e-12)
    qs = [0.1, 0.5, 0.95]
    np.testing.assert_allclose(kiln.quantile(x, qs, axis=axis, keepdims=keepdims).numpy(),
                               np.quantile(A, qs, axis=axis, keepdims=keepdims), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kiln.percentile(x, [25, 75], axis=axis, keepdims=keepdims).numpy(),
                               np.percentile(A, [25, 75], axis=axis, keepdims=keepdims), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(kiln.median(x, axis=axis, keepdims=keepdims).numpy(),
                               np.median(A, axis=axis, keepdims=keepdims), rtol=1e-12, atol=1e-12)


def test_quantile_errors_name_the_fix():
    x = kiln.asarray(A)
    with pytest.raises(ValueError, match="quantile"):
        kiln.quantile(x, 1.5)
    with pytest.raises(ValueError, match="method='linear'"):
        kiln.quantile(x, 0.5, method="nearest")
    with pytest.raises(ValueError, match="percentile"):
        kiln.percentile(x, 101)


def test_histogram_matches_numpy(device):
    data = RNG.standard_normal(200)
    x = kiln.asarray(data, device=device)
    hist, edges = kiln.histogram(x, bins=7)
    want_hist, want_edges = np.histogram(data, bins=7)
    np.testing.assert_array_equal(hist.numpy(), want_hist)
    np.testing.assert_allclose(edges.numpy(), want_edges, rtol=1e-12)
    hist, edges = kiln.histogram(x, bins=4, range=(-1.0, 1.0))
    want_hist, want_edges = np.histogram(data, bins=4, range=(-1.0, 1.0))
    np.testing.assert_array_equal(hist.numpy(), want_hist)
    np.testing.assert_allclose(edges.numpy(), want_edges, rtol=1e-12)
    bins = np.array([-3.0, -0.5, 0.0, 0.25, 3.0])
    w = RNG.random(200)
    hist, edges = kiln.histogram(x, bins=kiln.asarray(bins, device=device), weights=kiln.asarray(w, device=device))
    want_hist, _ = np.histogram(data, bins=bins, weights=w)
    np.testing.assert_allclose(hist.numpy(), want_hist, rtol=1e-12)
    np.testing.assert_array_equal(edges.numpy(), bins)


def test_bincount_matches_numpy(device):
    values = np.array([0, 3, 3, 1, 7, 3], dtype=np.int64)
    x = kiln.asarray(values, device=device)
    np.testing.assert_array_equal(kiln.bincount(x).numpy(), np.bincount(values))
    np.testing.assert_array_equal(kiln.bincount(x, minlength=12).numpy(), np.bincount(values, minlength=12))
    w = np.array([0.5, 1.0, 2.0, -1.0, 4.0, 0.25])
    np.testing.assert_allclose(kiln.bincount(x, weights=kiln.asarray(w, device=device)).numpy(),
                               np.bincount(values, weights=w), rtol=1e-12)
    with pytest.raises(ValueError, match="bincount"):
        kiln.bincount(kiln.asarray(np.array([1, -2], dtype=np.int64)))
