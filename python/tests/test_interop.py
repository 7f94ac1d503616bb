"""Exchange with NumPy and DLPack consumers: buffer protocol, __array__, __dlpack__, from_dlpack (zero-copy)."""

import numpy as np
import pytest

import kiln
from conftest import requires_gpu


def test_numpy_views_share_memory_with_cpu_arrays():
    x = kiln.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    view = np.asarray(x)
    x[0, 0] = 42.0
    assert view[0, 0] == 42.0  # a view, not a copy
    assert np.asarray(x).ctypes.data == x.data_ptr


def test_non_contiguous_views_keep_their_strides():
    ref = np.arange(24, dtype=np.int32).reshape(4, 6)
    x = kiln.asarray(ref)[::2, 1::2]
    np.testing.assert_array_equal(np.asarray(x), ref[::2, 1::2])
    np.testing.assert_array_equal(np.asarray(kiln.asarray(ref).T), ref.T)


def test_buffer_protocol():
    x = kiln.asarray(np.array([1.5, 2.5], np.float64))
    m = memoryview(x)
    assert m.format == "d" and m.shape == (2,) and m.tolist() == [1.5, 2.5]
    np.testing.assert_array_equal(np.frombuffer(x, dtype=np.float64), [1.5, 2.5])


def test_array_protocol_dtype_and_copy():
    x = kiln.asarray([1, 2, 3])
    assert np.asarray(x, dtype=np.float32).dtype == np.float32
    c = np.array(x, copy=True)
    x[0] = 10
    assert c[0] == 1


def test_the_view_keeps_the_array_alive():
    view = np.asarray(kiln.arange(1000, dtype=kiln.int64))
    import gc

    gc.collect()
    assert view.sum() == 999 * 1000 // 2


def test_numpy_from_dlpack_is_zero_copy():
    x = kiln.asarray(np.arange(5, dtype=np.float32))
    y = np.from_dlpack(x)
    assert x.__dlpack_device__() == (1, 0)
    x[1] = -7.0
    assert y[1] == -7.0
    np.testing.assert_array_equal(y, [0, -7, 2, 3, 4])


def test_kiln_from_dlpack_is_zero_copy():
    ref = np.arange(12, dtype=np.float64).reshape(3, 4)
    x = kiln.from_dlpack(ref)
    assert x.shape == (3, 4) and x.dtype == kiln.float64 and x.data_ptr == ref.ctypes.data
    ref[2, 3] = 100.0
    assert x[2, 3].item() == 100.0
    reversed_view = kiln.from_dlpack(ref[::-1, ::2])  # negative strides
    np.testing.assert_array_equal(reversed_view.numpy(), ref[::-1, ::2])


def test_kiln_from_dlpack_of_a_kiln_array_is_the_same_array():
    x = kiln.arange(3)
    assert kiln.from_dlpack(x).data_ptr == x.data_ptr


def test_torch_exchange_when_installed():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    x = kiln.from_dlpack(t)
    t[0, 0] = 9.0
    assert x[0, 0].item() == 9.0
    back = torch.from_dlpack(kiln.ones(4))
    assert back.tolist() == [1.0, 1.0, 1.0, 1.0]


def test_cpu_arrays_have_no_cuda_array_interface():
    assert not hasattr(kiln.ones(2), "__cuda_array_interface__")


@requires_gpu
def test_gpu_arrays_export_cuda_interfaces():
    x = kiln.arange(8, dtype=kiln.float32, device=kiln.cuda(0))
    cai = x.__cuda_array_interface__
    assert cai["shape"] == (8,) and cai["typestr"] == "<f4" and cai["data"][0] == x.data_ptr and cai["version"] == 3
    assert x.__dlpack_device__() == (2, 0)
    with pytest.raises(TypeError):
        np.asarray(x)
    np.testing.assert_array_equal(x.numpy(), np.arange(8, dtype=np.float32))
    y = kiln.from_dlpack(x)
    assert y.data_ptr == x.data_ptr and y.device == kiln.cuda(0)


@requires_gpu
def test_gpu_exchange_with_torch_and_cupy_when_installed():
    for name in ("torch", "cupy"):
        try:
            lib = __import__(name)
        except ImportError:
            continue
        x = kiln.arange(4, dtype=kiln.float32, device=kiln.cuda(0))
        other = lib.from_dlpack(x)
        assert other.tolist() == [0.0, 1.0, 2.0, 3.0]
        back = kiln.from_dlpack(other)
        assert back.device == kiln.cuda(0) and back.data_ptr == x.data_ptr


def test_array_api_methods_have_inspectable_signatures():
    import inspect

    x = kiln.ones(2)
    assert list(inspect.signature(x.__dlpack__).parameters) == ["stream", "max_version", "dl_device", "copy"]
    assert list(inspect.signature(x.__array_namespace__).parameters) == ["api_version"]
    assert list(inspect.signature(x.to_device).parameters) == ["device", "stream"]


def test_dlpack_to_an_unsupported_device_is_a_buffer_error():
    with pytest.raises(BufferError, match="dl_device"):
        kiln.ones(2).__dlpack__(dl_device=(2, 3))


@requires_gpu
def test_dlpack_of_a_gpu_array_to_the_cpu_exports_a_host_copy():
    x = kiln.arange(5, dtype=kiln.float32, device=kiln.cuda(0))

    class HostExport:  # what a consumer asking for dl_device=(kDLCPU, 0) sees
        def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
            return x.__dlpack__(dl_device=(1, 0), max_version=max_version)

        def __dlpack_device__(self):
            return (1, 0)

    np.testing.assert_array_equal(np.from_dlpack(HostExport()), np.arange(5, dtype=np.float32))
    with pytest.raises(BufferError, match="copy=False"):
        x.__dlpack__(dl_device=(1, 0), copy=False)


@requires_gpu
def test_array_api_asarray_of_gpu_scalars_stays_on_the_gpu():
    import kiln.array_api as xp

    a = kiln.asarray(np.array([[True, False], [False, True]]), device=kiln.cuda(0))
    t = xp.asarray([[a[j, i] for j in range(2)] for i in range(2)], dtype=xp.bool)
    assert t.device == kiln.cuda(0)
    np.testing.assert_array_equal(t.numpy(), np.array([[True, False], [False, True]]).T)
