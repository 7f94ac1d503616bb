"""kiln for Python: n-d arrays with NumPy's semantics on the CPU and CUDA GPUs (docs/python.md)."""

from contextlib import contextmanager as _contextmanager

from . import _kiln
from ._kiln import *  # noqa: F401,F403  (the functions, dtypes and exceptions of the C++ core)
from ._kiln import Array, fft, linalg, random  # noqa: F401

__all__ = [name for name in dir(_kiln) if not name.startswith("_")]

# The Array API's three keyword-only methods, defined in Python so inspect.signature sees their parameters
# (a compiled method's signature is opaque to it, or (*args, **kwargs), depending on the Python version).
_array_namespace_impl = Array.__array_namespace__
_dlpack_impl = Array.__dlpack__
_to_device_impl = Array.to_device
_DL_CPU = 1  # DLPack's kDLCPU


def _array_namespace(self, /, *, api_version=None):
    """kiln.array_api, the Array API namespace of kiln's arrays."""
    return _array_namespace_impl(self, api_version=api_version)


def _dlpack(self, /, *, stream=None, max_version=None, dl_device=None, copy=None):
    """A DLPack capsule of this array. dl_device=(kDLCPU, 0) on a GPU array exports a host copy (not with
    copy=False, which must share memory)."""
    if dl_device is not None and tuple(dl_device) != tuple(self.__dlpack_device__()):
        if tuple(dl_device) != (_DL_CPU, 0):
            raise BufferError(f"__dlpack__: kiln exports to the array's own device or the CPU, not dl_device={dl_device}")
        if self.device.type != "cpu":  # a pinned host array is exported to the CPU as it is, below
            if copy is False:
                raise BufferError("__dlpack__: dl_device=CPU for a GPU array needs a copy, but copy=False; pass copy=None")
            return _dlpack_impl(self.to(_kiln.cpu()), max_version=max_version)
    return _dlpack_impl(self, stream=stream, max_version=max_version, dl_device=dl_device, copy=copy)


def _to_device(self, device, /, *, stream=None):
    """This array on `device` (itself when it is there already)."""
    if stream is not None:
        raise ValueError("to_device: kiln orders copies on its current stream; pass stream=None")
    return _to_device_impl(self, device)


Array.__array_namespace__ = _array_namespace
Array.__dlpack__ = _dlpack
Array.to_device = _to_device
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


def _register_submodules(module, prefix):
    """The extension's submodules (kiln.nn, kiln.nn.init, kiln.optim...) in sys.modules, so that
    `import kiln.nn.init` and `from kiln.nn import init` work as they do for torch.nn.init."""
    import sys
    import types

    for name in dir(module):
        sub = getattr(module, name)
        if name.startswith("_") or not isinstance(sub, types.ModuleType):
            continue
        full = prefix + "." + name
        if sys.modules.setdefault(full, sub) is sub:
            _register_submodules(sub, full)


_register_submodules(_kiln, __name__)

__all__ += ["no_grad", "enable_grad", "newaxis", "get_array_module"]

