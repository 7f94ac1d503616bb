"""kiln for Python: n-d arrays with NumPy's semantics on the CPU and CUDA GPUs (docs/python.md)."""

from contextlib import contextmanager as _contextmanager

from . import _kiln
from ._kiln import *  # noqa: F401,F403  (the functions, dtypes and exceptions of the C++ core)
from ._kiln import Array, linalg, random  # noqa: F401

__all__ = [name for name in dir(_kiln) if not name.startswith("_")]
newaxis = None


class no_grad:
    """Context manager (and decorator) under which ops record no gradients, as torch.no_grad()."""

    def __enter__(self):
        self._previous = _kiln.is_grad_enabled()
        _kiln.set_grad_enabled(False)

    def __exit__(self, *exc):
        _kiln.set_grad_enabled(self._previous)
        return False

    def __call__(self, function):
        def wrapper(*args, **kwargs):
            with no_grad():
                return function(*args, **kwargs)

        wrapper.__wrapped__ = function
        return wrapper


class enable_grad(no_grad):
    """Context manager under which ops record gradients again inside no_grad()."""

    def __enter__(self):
        self._previous = _kiln.is_grad_enabled()
        _kiln.set_grad_enabled(True)


__all__ += ["no_grad", "enable_grad", "newaxis"]


# NumPy's ufuncs (np.add(x, 1), np.sin(x), ndarray + kiln.Array) on kiln arrays run kiln's op of the same name and
# return a kiln.Array; ufuncs and methods kiln has no op for run in NumPy on copies of CPU arrays.
_UFUNC_NAMES = {"true_divide": "divide", "absolute": "abs", "conjugate": "positive"}


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    name = _UFUNC_NAMES.get(ufunc.__name__, ufunc.__name__)
    out = kwargs.pop("out", None)
    if method == "__call__" and name in _kiln._elementwise_ops and not kwargs:
        fn = getattr(_kiln, name)
        if out is not None:
            if len(out) != 1 or not isinstance(out[0], Array):
                return NotImplemented
            return fn(*inputs, out=out[0])
        return fn(*inputs)
    if out is not None:
        return NotImplemented
    import numpy as np

    converted = [np.asarray(v) if isinstance(v, Array) else v for v in inputs]
    return getattr(ufunc, method)(*converted, **kwargs)


Array.__array_ufunc__ = _array_ufunc
Array.__iter__ = lambda self: (self[i] for i in range(len(self)))
