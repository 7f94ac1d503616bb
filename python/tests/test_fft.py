"""kiln.fft against numpy.fft: every function, real and complex input, n / s padding and cropping, axes, norms,
NumPy 2's result dtypes, on the CPU (FFTW) and on GPU 0 (cuFFT) when there is one."""

import numpy as np
import pytest

import kiln

# s without axes (the last len(s) axes) is deprecated in NumPy 2 but still its meaning, and kiln's.
pytestmark = pytest.mark.filterwarnings("ignore:`axes` should not be `None`:DeprecationWarning")
rng = np.random.default_rng(36)


def _cpu_has_fftw():
    try:
        kiln.fft.fft(kiln.ones(2))
        return True
    except kiln.Error as e:
        assert "apt-get install libfftw3-dev" in str(e)
        return False


if not _cpu_has_fftw():
    pytest.skip("kiln was built without FFTW (apt-get install libfftw3-dev): no CPU transforms",
                allow_module_level=True)
NORMS = [None, "backward", "ortho", "forward"]


def signal(shape, dtype):
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-4, 5, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def check(got, want):
    got = got.numpy() if got.device.type == "cpu" else got.to("cpu").numpy()
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    single = want.dtype in (np.float32, np.complex64)
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=0, atol=(1e-5 if single else 1e-12) * scale)


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.complex64, np.complex128])
def test_one_dimensional_transforms_match_numpy(device, dtype, norm):
    for size in (1, 5, 8, 17):
        x = signal((3, size), dtype)
        kx = kiln.asarray(x, device=device)
        for n in (None, size + 2, max(1, size - 1)):
            check(kiln.fft.fft(kx, n=n, norm=norm), np.fft.fft(x, n=n, norm=norm))
            check(kiln.fft.ifft(kx, n, 0, norm), np.fft.ifft(x, n, 0, norm))
            check(kiln.fft.irfft(kx, n=n or 2 * size + 1, norm=norm), np.fft.irfft(x, n=n or 2 * size + 1, norm=norm))
            check(kiln.fft.hfft(kx, n=n or 2 * size, norm=norm), np.fft.hfft(x, n=n or 2 * size, norm=norm))
            if not np.issubdtype(dtype, np.complexfloating):
                check(kiln.fft.rfft(kx, n=n, norm=norm), np.fft.rfft(x, n=n, norm=norm))
                check(kiln.fft.ihfft(kx, n=n, norm=norm), np.fft.ihfft(x, n=n, norm=norm))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
def test_n_dimensional_transforms_match_numpy(device, dtype):
    x = signal((4, 5, 6), dtype)
    kx = kiln.asarray(x, device=device)
    for s, axes in ((None, None), ((3, 8), None), ((5, 2, 7), (2, 0, 1)), (None, (1,)), ((6, 3), (0, 0))):
        for name in ("fftn", "ifftn", "irfftn"):
            check(getattr(kiln.fft, name)(kx, s=s, axes=axes, norm="ortho"),
                  getattr(np.fft, name)(x, s=s, axes=axes, norm="ortho"))
        if not np.issubdtype(dtype, np.complexfloating):
            check(kiln.fft.rfftn(kx, s, axes), np.fft.rfftn(x, s, axes))
    for name in ("fft2", "ifft2", "irfft2"):
        check(getattr(kiln.fft, name)(kx), getattr(np.fft, name)(x))
        check(getattr(kiln.fft, name)(kx, s=(4, 7), axes=(0, 2)), getattr(np.fft, name)(x, s=(4, 7), axes=(0, 2)))
    if not np.issubdtype(dtype, np.complexfloating):
        check(kiln.fft.rfft2(kx, axes=(2, 1)), np.fft.rfft2(x, axes=(2, 1)))


def test_strided_input_matches_numpy(device):
    x = signal((6, 8), np.complex128)
    kx = kiln.asarray(x, device=device)
    check(kiln.fft.fft(kx.T), np.fft.fft(x.T))
    check(kiln.fft.fft2(kx[:, ::2]), np.fft.fft2(x[:, ::2]))


def test_frequencies_and_shifts_match_numpy(device):
    for n in (1, 4, 7):
        for d in (1.0, 0.3):
            got = kiln.fft.fftfreq(n, d, device=device)
            assert got.device == device
            np.testing.assert_array_equal(got.to("cpu").numpy(), np.fft.fftfreq(n, d))
            np.testing.assert_array_equal(kiln.fft.rfftfreq(n, d, device=device).to("cpu").numpy(),
                                          np.fft.rfftfreq(n, d))
    assert kiln.fft.fftfreq(4, dtype="float32").dtype == kiln.float32
    x = signal((4, 5), np.complex64)
    for axes in (None, 1, (0, 1)):
        np.testing.assert_array_equal(kiln.fft.fftshift(kiln.asarray(x, device=device), axes).to("cpu").numpy(),
                                      np.fft.fftshift(x, axes))
        np.testing.assert_array_equal(kiln.fft.ifftshift(kiln.asarray(x, device=device), axes).to("cpu").numpy(),
                                      np.fft.ifftshift(x, axes))


def test_errors_are_value_errors_naming_the_function():
    with pytest.raises(ValueError, match="fft::fft: n gives 0 points"):
        kiln.fft.fft(kiln.ones(4), n=0)
    with pytest.raises(ValueError, match='norm "bad"'):
        kiln.fft.ifft(kiln.ones(4), norm="bad")
    with pytest.raises(TypeError, match="fft::rfft: the input must be real"):
        kiln.fft.rfft(kiln.asarray(np.ones(4, np.complex64)))
    with pytest.raises(ValueError, match="s has 1 entries and axes 2"):
        kiln.fft.fftn(kiln.ones((2, 2)), s=(2,), axes=(0, 1))


def test_fft_is_differentiable_as_pytorch():
    # sum |fft(x)|^2 = n sum |x|^2: its gradient is 2 n x (PyTorch's convention for complex inputs too).
    x = kiln.asarray(np.arange(1.0, 9.0)).requires_grad_()
    kiln.sum(kiln.abs(kiln.fft.fft(x)) ** 2).backward()
    np.testing.assert_allclose(np.asarray(x.grad), 16 * np.arange(1.0, 9.0), rtol=1e-12)
    z = kiln.asarray(np.arange(4.0) + 1j * np.arange(4.0, 0.0, -1.0)).requires_grad_()
    kiln.sum(kiln.abs(kiln.fft.ifft(z, norm="ortho")) ** 2).backward()
    np.testing.assert_allclose(np.asarray(z.grad), 2 * (np.arange(4.0) + 1j * np.arange(4.0, 0.0, -1.0)), rtol=1e-12)


def test_array_api_extension_matches_numpy(device):
    """kiln.array_api.fft: the standard's keyword-only signatures over kiln.fft, values as numpy.fft's; fftfreq and
    rfftfreq in the namespace's default real dtype (float32) unless dtype says otherwise."""
    import kiln.array_api as xp

    assert xp.fft is not None and "fft" in xp.__all__
    x = signal((4, 6), np.complex64)
    r = signal((4, 6), np.float64)
    kx, kr = kiln.asarray(x, device=device), kiln.asarray(r, device=device)
    check(xp.fft.fft(kx, n=8, axis=0, norm="ortho"), np.fft.fft(x, n=8, axis=0, norm="ortho"))
    check(xp.fft.ifft(kx), np.fft.ifft(x))
    check(xp.fft.fftn(kx, s=[3, 5], axes=[1, 0]), np.fft.fftn(x, s=[3, 5], axes=[1, 0]))
    check(xp.fft.ifftn(kx, norm="forward"), np.fft.ifftn(x, norm="forward"))
    check(xp.fft.rfft(kr, n=5), np.fft.rfft(r, n=5))
    check(xp.fft.irfft(kx, axis=0), np.fft.irfft(x, axis=0))
    check(xp.fft.rfftn(kr, axes=[0]), np.fft.rfftn(r, axes=[0]))
    check(xp.fft.irfftn(kx, s=[4, 10], axes=[0, 1]), np.fft.irfftn(x, s=[4, 10], axes=[0, 1]))
    check(xp.fft.hfft(kx, n=9), np.fft.hfft(x, n=9))
    check(xp.fft.ihfft(kr), np.fft.ihfft(r))
    check(xp.fft.fftshift(kr, axes=[1]), np.fft.fftshift(r, axes=[1]))
    check(xp.fft.ifftshift(kr), np.fft.ifftshift(r))
    check(xp.fft.fftfreq(7, d=0.5, device=device), np.fft.fftfreq(7, d=0.5).astype(np.float32))
    check(xp.fft.rfftfreq(8, dtype=xp.float64, device=device), np.fft.rfftfreq(8))
    with pytest.raises(TypeError):
        xp.fft.fft(kx, 8)  # n is keyword-only in the standard
