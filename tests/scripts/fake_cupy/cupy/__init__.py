"""A stand-in for CuPy built on NumPy, for tests/scripts/test_peers.py only: it runs
bench/peers/cupy_bench.py end to end on a machine without a GPU (with --smoke sizes), so the
script's control flow, result checks and JSON are tested. It implements only the calls the
script makes, synchronously on the host; its timings mean nothing."""

import os
import time

import numpy

__version__ = "0.0-fake"
float32 = numpy.float32
float64 = numpy.float64


class ndarray(numpy.ndarray):
    """A 'device' array: a NumPy array with CuPy's host-transfer methods."""

    @property
    def data(self):
        return _Memory(self)

    def get(self, stream=None, out=None, blocking=True):
        if out is None:
            return numpy.array(self, copy=True).view(numpy.ndarray)
        if out.shape != self.shape or out.dtype != self.dtype:
            raise ValueError("get: out has the wrong shape or dtype")
        out[...] = self
        return out

    def set(self, arr, stream=None):
        if not isinstance(arr, numpy.ndarray) or isinstance(arr, ndarray):
            raise TypeError("Only numpy.ndarray can be set to cupy.ndarray")
        if arr.shape != self.shape or arr.dtype != self.dtype:
            raise ValueError("set: shape or dtype mismatch")
        self[...] = arr


class _Memory:
    def __init__(self, array):
        self.array = array

    def copy_from_device_async(self, src, nbytes, stream=None):
        self.array.reshape(-1).view(numpy.uint8)[:nbytes] = src.array.reshape(-1).view(numpy.uint8)[:nbytes]


def _device(a):
    return numpy.asarray(a).view(ndarray)


def asarray(a, dtype=None):
    return _device(numpy.array(a, dtype=dtype, copy=True))


def empty(shape, dtype=float32):
    return _device(numpy.empty(shape, dtype=dtype))


def empty_like(a):
    return _device(numpy.empty_like(a))


def add(a, b, out=None):
    return numpy.add(a, b, out=out, casting="same_kind")


def multiply(a, b, out=None):
    return numpy.multiply(a, b, out=out, casting="same_kind")


tanh = numpy.tanh
exp = numpy.exp


def fuse(fn):
    return fn


def get_default_memory_pool():
    return _Pool()


def get_default_pinned_memory_pool():
    return _Pool()


class _Pool:
    def free_all_blocks(self):
        pass


class RawKernel:
    def __init__(self, code, name):
        if name not in code:
            raise ValueError(f"RawKernel: {name} is not defined in the source")

    def __call__(self, grid, block, args):
        pass


class _Random:
    def __init__(self):
        self.rng = numpy.random.default_rng(0)

    def seed(self, s):
        self.rng = numpy.random.default_rng(s)

    def standard_normal(self, size=None, dtype=float64):
        return _device(self.rng.standard_normal(size, dtype=dtype))

    def random(self, size=None, dtype=float64):
        return _device(self.rng.random(size, dtype=dtype))


random = _Random()


class _Linalg:
    @staticmethod
    def norm(a):
        return _device(numpy.array(numpy.linalg.norm(a), dtype=a.dtype))


linalg = _Linalg()


class _Event:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.t = None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        if self.t is None:
            raise RuntimeError("event not recorded")


class _Graph:
    def __init__(self, calls):
        self.calls = calls

    def launch(self, stream=None):
        pass


class _Stream:
    current = None

    def __init__(self, null=False, non_blocking=False, ptr=0):
        self.capturing = False

    def __enter__(self):
        self.previous, _Stream.current = _Stream.current, self
        return self

    def __exit__(self, *exc):
        _Stream.current = self.previous

    def wait_event(self, event):
        if event.t is None:
            raise RuntimeError("wait_event: event not recorded")

    def record(self, event=None):
        event = event or _Event()
        event.record(self)
        return event

    def synchronize(self):
        pass

    def begin_capture(self, mode=None):
        if self is _NULL_STREAM:
            raise RuntimeError("cannot capture the null stream")
        self.capturing = True

    def end_capture(self):
        if not self.capturing:
            raise RuntimeError("end_capture without begin_capture")
        self.capturing = False
        return _Graph([])


_NULL_STREAM = _Stream(null=True)


class _Device:
    def __init__(self, index=0):
        if index >= _Runtime.getDeviceCount():
            raise RuntimeError(f"no device {index}")
        self.id = index

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def synchronize(self):
        pass


class _Runtime:
    @staticmethod
    def getDeviceCount():
        return int(os.environ.get("FAKE_GPUS", "2"))

    @staticmethod
    def getDeviceProperties(index):
        return {"name": b"Fake GPU (NumPy)"}


class _Cuda:
    Device = _Device
    Event = _Event
    Stream = _Stream
    runtime = _Runtime

    @staticmethod
    def get_current_stream():
        return _Stream.current or _NULL_STREAM

    @staticmethod
    def get_elapsed_time(start, end):
        return (end.t - start.t) * 1e3


cuda = _Cuda()
