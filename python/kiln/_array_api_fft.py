"""The Array API's FFT extension (2023.12), `xp.fft` of kiln.array_api: kiln.fft's transforms (FFTW on the CPU,
cuFFT on a GPU) under the standard's keyword-only signatures. Results keep the input's precision (complex64 for
float32 or complex64 input, complex128 for float64 or complex128; irfft, irfftn and hfft give the real dtype of
that precision), as kiln.fft's do; fftfreq and rfftfreq default to the namespace's real floating dtype (float32).
"""

from . import _kiln as _k

_fft = _k.fft

__all__ = ["fft", "ifft", "fftn", "ifftn", "rfft", "irfft", "rfftn", "irfftn", "hfft", "ihfft", "fftfreq",
           "rfftfreq", "fftshift", "ifftshift"]


def _axes(axes):
    return None if axes is None else tuple(axes)


def fft(x, /, *, n=None, axis=-1, norm="backward"):
    return _fft.fft(x, n, axis, norm)


def ifft(x, /, *, n=None, axis=-1, norm="backward"):
    return _fft.ifft(x, n, axis, norm)


def rfft(x, /, *, n=None, axis=-1, norm="backward"):
    return _fft.rfft(x, n, axis, norm)


def irfft(x, /, *, n=None, axis=-1, norm="backward"):
    return _fft.irfft(x, n, axis, norm)


def hfft(x, /, *, n=None, axis=-1, norm="backward"):
    return _fft.hfft(x, n, axis, norm)


def ihfft(x, /, *, n=None, axis=-1, norm="backward"):
    return _fft.ihfft(x, n, axis, norm)


def fftn(x, /, *, s=None, axes=None, norm="backward"):
    return _fft.fftn(x, _axes(s), _axes(axes), norm)


def ifftn(x, /, *, s=None, axes=None, norm="backward"):
    return _fft.ifftn(x, _axes(s), _axes(axes), norm)


def rfftn(x, /, *, s=None, axes=None, norm="backward"):
    return _fft.rfftn(x, _axes(s), _axes(axes), norm)


def irfftn(x, /, *, s=None, axes=None, norm="backward"):
    return _fft.irfftn(x, _axes(s), _axes(axes), norm)


def fftfreq(n, /, *, d=1.0, dtype=None, device=None):
    return _fft.fftfreq(n, d, dtype=_k.float32 if dtype is None else dtype, device=device)


def rfftfreq(n, /, *, d=1.0, dtype=None, device=None):
    return _fft.rfftfreq(n, d, dtype=_k.float32 if dtype is None else dtype, device=device)


def fftshift(x, /, *, axes=None):
    return _fft.fftshift(x, _axes(axes))


def ifftshift(x, /, *, axes=None):
    return _fft.ifftshift(x, _axes(axes))
