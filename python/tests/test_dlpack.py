"""DLPack's Python protocol over kiln's C++ exchange: capsule names and versions, the "used_" rename, memory shared
both ways with NumPy, producers older than DLPack 1.0, read-only tensors and refusals."""

import ctypes

import numpy as np
import pytest

import kiln
from conftest import requires_gpu

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_get_name = ctypes.pythonapi.PyCapsule_GetName
_get_name.restype = ctypes.c_char_p
_get_name.argtypes = [ctypes.py_object]


class _DLTensor(ctypes.Structure):  # dlpack.h's DLTensor
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32),
                ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8),
                ("lanes", ctypes.c_uint16), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Versioned(ctypes.Structure):  # dlpack.h's DLManagedTensorVersioned
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


def _name(capsule):
    return _get_name(capsule).decode()


def _versioned(capsule):
    """The capsule's struct (valid while the capsule lives: keep a reference)."""
    return _Versioned.from_address(_get_pointer(capsule, b"dltensor_versioned"))


def test_capsule_names_follow_max_version():
    x = kiln.arange(3, dtype=kiln.float32)
    assert _name(x.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert _name(x.__dlpack__(max_version=(1, 7))) == "dltensor_versioned"
    assert _name(x.__dlpack__()) == "dltensor"
    assert _name(x.__dlpack__(max_version=(0, 8))) == "dltensor"


def test_versioned_capsule_fields():
    x = kiln.arange(12, dtype=kiln.int16).reshape(3, 4)[:, 1::2]
    capsule = x.__dlpack__(max_version=(1, 0))
    m = _versioned(capsule)
    t = m.dl_tensor
    assert (m.major, m.minor) == (1, 1) and m.flags == 0  # writable, not a copy
    assert (t.device_type, t.device_id) == (1, 0)  # kDLCPU
    assert (t.code, t.bits, t.lanes) == (0, 16, 1)  # kDLInt, 16 bits
    assert t.ndim == 2 and [t.shape[i] for i in range(2)] == [3, 2] and [t.strides[i] for i in range(2)] == [4, 2]
    assert t.data == x.data_ptr and t.byte_offset == 0
    copied_capsule = x.__dlpack__(max_version=(1, 0), copy=True)
    copied = _versioned(copied_capsule)
    assert copied.flags == 2 and copied.dl_tensor.data != x.data_ptr  # DLPACK_FLAG_BITMASK_IS_COPIED


def test_a_consumer_renames_the_capsule_and_it_cannot_be_taken_twice():
    x = kiln.arange(4, dtype=kiln.float64)
    capsule = x.__dlpack__(max_version=(1, 0))
    y = kiln.from_dlpack(capsule)
    assert _name(capsule) == "used_dltensor_versioned"
    assert y.data_ptr == x.data_ptr
    with pytest.raises(TypeError, match="already consumed"):
        kiln.from_dlpack(capsule)
    legacy = x.__dlpack__()
    kiln.from_dlpack(legacy)
    assert _name(legacy) == "used_dltensor"


def test_a_capsule_keeps_the_array_alive_until_consumed_or_dropped():
    capsule = kiln.arange(1000, dtype=kiln.int64).__dlpack__(max_version=(1, 0))
    import gc

    gc.collect()
    assert kiln.from_dlpack(capsule).sum().item() == 999 * 1000 // 2
    dropped = kiln.ones(3).__dlpack__()
    del dropped  # the unconsumed capsule's destructor releases the tensor (no leak, no double free)
    gc.collect()


def test_numpy_and_kiln_share_memory_both_ways():
    x = kiln.zeros(4, dtype=kiln.float32)
    n = np.from_dlpack(x)
    n[1] = 5.0  # NumPy writes, kiln reads
    x[2] = 7.0  # kiln writes, NumPy reads
    np.testing.assert_array_equal(x.numpy(), [0, 5, 7, 0])
    np.testing.assert_array_equal(n, [0, 5, 7, 0])

    ref = np.zeros(3, dtype=np.int32)
    k = kiln.from_dlpack(ref)
    k[0] = 11
    ref[2] = 13
    np.testing.assert_array_equal(ref, [11, 0, 13])
    assert k.tolist() == [11, 0, 13]


def test_every_dtype_round_trips_through_numpy():
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"):
        ref = (np.arange(6) % 3).astype(name).reshape(2, 3)
        x = kiln.from_dlpack(ref)
        assert x.dtype == getattr(kiln, name if name != "bool" else "bool_") and x.data_ptr == ref.ctypes.data
        back = np.from_dlpack(x)
        assert back.dtype == ref.dtype
        np.testing.assert_array_equal(back, ref)


def test_bfloat16_exports_as_kdlbfloat():
    x = kiln.asarray([1.0, -2.0], dtype=kiln.bfloat16)
    capsule = x.__dlpack__(max_version=(1, 0))
    t = _versioned(capsule).dl_tensor
    assert (t.code, t.bits) == (4, 16)  # kDLBfloat
    assert ctypes.cast(t.data, ctypes.POINTER(ctypes.c_uint16))[1] == 0xC000  # -2.0 in bfloat16


def test_producers_older_than_dlpack_1_get_no_max_version():
    ref = np.arange(3, dtype=np.float32)
    calls = []

    class Old:  # a DLPack 0.x producer: __dlpack__(stream=None) only
        def __dlpack__(self, stream=None):
            calls.append(stream)
            return ref.__dlpack__()

        def __dlpack_device__(self):
            return (1, 0)

    x = kiln.from_dlpack(Old())
    assert calls == [None] and x.data_ptr == ref.ctypes.data and x.tolist() == [0.0, 1.0, 2.0]


def test_read_only_numpy_arrays_are_imported():
    ref = np.arange(3, dtype=np.float64)
    ref.flags.writeable = False
    assert _name(ref.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert kiln.from_dlpack(ref).tolist() == [0.0, 1.0, 2.0]


def test_refusals():
    with pytest.raises(TypeError, match="unsigned"):
        kiln.from_dlpack(np.ones(2, dtype=np.uint32))
    with pytest.raises(TypeError, match="no __dlpack__"):
        kiln.from_dlpack(3.5)
    with pytest.raises(BufferError, match="dl_device"):
        kiln.ones(2).__dlpack__(dl_device=(2, 0))


@requires_gpu
def test_gpu_capsules_order_the_consumer_stream_and_refuse_stream_0():
    x = kiln.arange(5, dtype=kiln.float32, device=kiln.cuda(0))
    consumer = kiln.Stream(device=kiln.cuda(0))
    capsule = x.__dlpack__(max_version=(1, 0), stream=consumer.ptr)
    t = _versioned(capsule).dl_tensor
    assert (t.device_type, t.device_id) == (2, 0) and t.data == x.data_ptr  # kDLCUDA, zero-copy
    for stream in (None, 1, 2, -1):
        assert kiln.from_dlpack(x.__dlpack__(max_version=(1, 0), stream=stream)).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(BufferError, match="stream=0"):
        x.__dlpack__(stream=0)


@requires_gpu
def test_pinned_host_arrays_export_as_cuda_host():
    x = kiln.arange(3, dtype=kiln.float32).pin_memory()
    assert x.__dlpack_device__() == (3, 0)  # kDLCUDAHost, as PyTorch reports pinned tensors
    capsule = x.__dlpack__(max_version=(1, 0), dl_device=(1, 0))
    assert _versioned(capsule).dl_tensor.device_type == 1
    np.testing.assert_array_equal(np.from_dlpack(x), [0, 1, 2])


@requires_gpu
def test_torch_and_cupy_read_kiln_work_queued_on_a_side_stream_when_installed():
    for name in ("torch", "cupy"):
        try:
            lib = __import__(name)
        except ImportError:
            continue
        side = kiln.Stream(device=kiln.cuda(0), non_blocking=True)  # no implicit order with their stream
        with side:
            x = kiln.zeros(1 << 18, dtype=kiln.float32, device=kiln.cuda(0))
            for _ in range(50):  # sums stay below 2**24: exact in float32
                x += 1.0  # queued on the side stream
            other = lib.from_dlpack(x)  # their stream waits for kiln's event; the host does not
            assert int(other.sum().item()) == 50 * (1 << 18), name
        back = kiln.from_dlpack(other)  # kiln's stream waits for theirs, zero-copy
        assert back.data_ptr == x.data_ptr and back.sum().item() == 50 * (1 << 18)
