"""A stand-in for PyTorch built on NumPy, for tests/scripts/test_peers.py only: it runs
bench/peers/torch_bench.py end to end on a machine without a GPU (with --smoke sizes), so the
script's control flow, result checks and JSON are tested. It implements only the calls the
script makes, synchronously on the host; its timings mean nothing. FAKE_GPUS sets the GPU
count, FAKE_TORCH_COMPILE_FAILS=1 makes torch.compile raise (as without Triton)."""

import contextlib
import os
import time
import types

import numpy

__version__ = "0.0-fake"
float32 = numpy.float32
float64 = numpy.float64


class device:
    def __init__(self, type, index=None):
        self.type, self.index = type, index


class Tensor(numpy.ndarray):
    def cpu(self):
        return _tensor(numpy.array(self, copy=True))

    def numpy(self):
        return numpy.asarray(self).view(numpy.ndarray)

    def to(self, dev):
        return _tensor(numpy.array(self, copy=True))

    def pin_memory(self):
        return _tensor(numpy.array(self, copy=True))

    def copy_(self, src, non_blocking=False):
        if src.shape != self.shape:
            raise RuntimeError("copy_: shapes differ")
        self[...] = src
        return self

    def mul_(self, v):
        numpy.multiply(self, v, out=self, casting="same_kind")
        return self

    def add_(self, v):
        numpy.add(self, v, out=self, casting="same_kind")
        return self

    def double(self):
        return self.astype(numpy.float64)

    def zero_(self):
        self[...] = 0
        return self


def _tensor(a):
    return numpy.asarray(a).view(Tensor)


class Generator:
    def __init__(self, device=None):
        self.rng = numpy.random.default_rng()

    def manual_seed(self, s):
        self.rng = numpy.random.default_rng(s)
        return self


_default_generator = Generator().manual_seed(0)


def randn(*shape, device=None, generator=None):
    return _tensor((generator or _default_generator).rng.standard_normal(shape, dtype=numpy.float32))


def rand(*shape, device=None, generator=None):
    return _tensor((generator or _default_generator).rng.random(shape, dtype=numpy.float32))


def empty(*shape, device=None):
    return _tensor(numpy.empty(shape, dtype=numpy.float32))


def empty_like(t):
    return _tensor(numpy.empty_like(t))


def add(a, b, out=None):
    return numpy.add(a, b, out=out, casting="same_kind")


tanh = numpy.tanh
exp = numpy.exp


def equal(a, b):
    return bool(numpy.array_equal(a, b))


def compile(fn):
    if os.environ.get("FAKE_TORCH_COMPILE_FAILS") == "1":
        raise RuntimeError("Cannot find a working triton installation\nmore detail")
    return fn


_threads = [os.cpu_count()]


def set_num_threads(n):
    _threads[0] = n


def get_num_threads():
    return _threads[0]


linalg = types.SimpleNamespace(norm=lambda a: _tensor(numpy.array(numpy.linalg.norm(a), dtype=a.dtype)))
backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(allow_tf32=True)),
                                 cudnn=types.SimpleNamespace(allow_tf32=True))


class _Event:
    def __init__(self, enable_timing=False):
        self.timing, self.t = enable_timing, None

    def record(self, stream=None):
        self.t = time.perf_counter()

    def synchronize(self):
        if self.t is None:
            raise RuntimeError("event not recorded")

    def elapsed_time(self, end):
        if not (self.timing and end.timing):
            raise RuntimeError("elapsed_time needs events created with enable_timing=True")
        return (end.t - self.t) * 1e3


class _Stream:
    def wait_event(self, event):
        if event.t is None:
            raise RuntimeError("wait_event: event not recorded")

    def wait_stream(self, other):
        pass


_current = [_Stream()]


class _CUDAGraph:
    def __init__(self):
        self.captured = False

    def replay(self):
        if not self.captured:
            raise RuntimeError("replay of a graph that was not captured")


@contextlib.contextmanager
def _stream(s):
    previous = _current[0]
    _current[0] = s
    try:
        yield
    finally:
        _current[0] = previous


@contextlib.contextmanager
def _graph(g):
    yield
    g.captured = True


def _gpus():
    return int(os.environ.get("FAKE_GPUS", "1"))


cuda = types.SimpleNamespace(
    is_available=lambda: _gpus() > 0,
    device_count=_gpus,
    get_device_name=lambda i=0: "Fake GPU (NumPy)",
    synchronize=lambda i=None: None,
    empty_cache=lambda: None,
    Event=_Event,
    Stream=_Stream,
    stream=_stream,
    current_stream=lambda: _current[0],
    CUDAGraph=_CUDAGraph,
    graph=_graph,
    _sleep=lambda cycles: None,
)
