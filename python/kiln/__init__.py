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


def get_array_module(*args):
    """kiln when any argument is a kiln.Array, else NumPy: code written once for both, as CuPy's
    get_array_module and Chainer's backend.get_array_module."""
    for a in args:
        if isinstance(a, Array):
            return _kiln_module()
    import numpy

    return numpy


def _kiln_module():
    import sys

    return sys.modules[__name__]


__all__ += ["no_grad", "enable_grad", "newaxis", "get_array_module"]

