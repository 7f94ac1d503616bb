"""Streams, events, pinned memory, device properties and user kernels (python/src/gpu.cpp): their CPU
behaviour everywhere (no-op streams, host-clock events, clear errors for GPU-only features) and, where a GPU
is present, their results against hand-computed values."""

import time

import numpy as np
import pytest

import kiln

HAVE_GPU = kiln.num_gpus() > 0
gpu_only = pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU")


def test_stream_context_makes_it_current():
    d = kiln.try_gpu()
    s = kiln.Stream(d, non_blocking=True)
    assert s.device == d
    with s:
        assert kiln.current_stream(d) == s
        with s:  # nested blocks stack
            assert kiln.current_stream(d) == s
        assert kiln.current_stream(d) == s
    assert kiln.current_stream(d) == kiln.Stream.null(d) or not HAVE_GPU
    s.synchronize()
    assert s.query()


def test_events_time_the_work_between_them():
    d = kiln.try_gpu()
    start, end = kiln.Event(d), kiln.Event(d)
    start.record()
    host_start = time.perf_counter()
    x = kiln.ones((256, 256), device=d)
    for _ in range(3):
        x = x @ x / 256.0
    end.record()
    end.synchronize()
    host_ms = (time.perf_counter() - host_start) * 1e3
    ms = kiln.get_elapsed_time(start, end)
    assert ms == start.elapsed_time(end) and 0.0 <= ms <= host_ms + 1.0
    assert end.query() and x.tolist()[0][0] == 1.0
    with pytest.raises(ValueError):
        kiln.Event(d).elapsed_time(end)  # never recorded


def test_stream_record_and_wait_event():
    d = kiln.try_gpu()
    producer, consumer = kiln.Stream(d), kiln.Stream(d)
    with producer:
        y = kiln.full((1000,), 2.0, device=d) * 3.0
    done = producer.record()
    consumer.wait_event(done)
    with consumer:
        z = y + 1.0
    consumer.synchronize()
    assert z.numpy().tolist() == [7.0] * 1000


def test_device_properties_and_all_gpus():
    p = kiln.device_properties(kiln.cpu())
    assert p["name"] and p["multiprocessors"] >= 1
    gpus = kiln.try_all_gpus()
    assert gpus == ([kiln.cuda(i) for i in range(kiln.num_gpus())] if HAVE_GPU else [kiln.cpu()])


def test_pinned_memory_needs_a_cuda_build_or_pins():
    x = kiln.arange(4.0)
    assert not x.is_pinned
    try:
        p = x.pin_memory()
    except kiln.DeviceError as e:
        assert "CUDA" in str(e)
        with pytest.raises(kiln.DeviceError):
            kiln.empty_pinned((2, 3))
    else:
        assert p.is_pinned and p.tolist() == [0.0, 1.0, 2.0, 3.0]
        assert kiln.empty_pinned((2, 3), dtype=kiln.int32).is_pinned


def test_user_kernels_refuse_cpu_arrays():
    plus_one = kiln.ElementwiseKernel("int32 x", "int32 y", "y = x + 1", "plus_one")
    assert (plus_one.name, plus_one.nin, plus_one.nout) == ("plus_one", 1, 1)
    with pytest.raises(kiln.DeviceError, match="plus_one"):
        plus_one(kiln.arange(3, dtype=kiln.int32))
    with pytest.raises(ValueError):
        kiln.ElementwiseKernel("int32 x y", "int32 y", "y = x", "bad")


@gpu_only
def test_elementwise_and_reduction_kernels():
    d = kiln.cuda(0)
    plus_one = kiln.ElementwiseKernel("int32 x", "int32 y", "y = x + 1", "plus_one")
    assert plus_one(kiln.arange(10, dtype=kiln.int32, device=d)).tolist() == list(range(1, 11))
    l2 = kiln.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm")
    rows = l2(kiln.asarray([[3.0, 4.0], [6.0, 8.0]], device=d), axis=1)
    np.testing.assert_allclose(rows.numpy(), [5.0, 10.0], rtol=1e-6)


@gpu_only
def test_raw_kernel_launch():
    code = r'''extern "C" __global__ void twice(float* y, const float* x, int n) {
      int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] = 2 * x[i]; }'''
    twice = kiln.RawKernel(code, "twice")
    x = kiln.arange(100, dtype=kiln.float32, device=kiln.cuda(0))
    y = kiln.zeros(100, device=kiln.cuda(0))
    twice((1,), (128,), (y, x, np.int32(100)))
    assert y.tolist() == [2.0 * i for i in range(100)]
    assert "twice" in kiln.RawModule(code).kernel_names
