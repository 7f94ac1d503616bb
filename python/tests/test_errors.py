"""kiln's errors reach Python as exception types of the fitting kind, with kiln's messages."""

import pytest

import kiln


def test_exception_hierarchy():
    assert issubclass(kiln.ShapeError, kiln.Error) and issubclass(kiln.ShapeError, ValueError)
    assert issubclass(kiln.DTypeError, TypeError) and issubclass(kiln.DeviceError, kiln.Error)
    assert issubclass(kiln.OutOfMemoryError, MemoryError) and issubclass(kiln.LinAlgError, kiln.ValueError)
    assert issubclass(kiln.ValueError, ValueError)


def test_shape_errors_name_the_op_and_shapes():
    with pytest.raises(kiln.ShapeError, match=r"add: .*\(2, 3\).*\(4,\)"):
        kiln.ones((2, 3)) + kiln.ones(4)
    with pytest.raises(ValueError):
        kiln.ones(6).reshape(4, 2)


def test_dtype_errors_are_type_errors():
    with pytest.raises(kiln.DTypeError):
        kiln.bitwise_and(kiln.ones(2), kiln.ones(2))
    with pytest.raises(TypeError):
        kiln.asarray(["a", "b"])
    with pytest.raises(TypeError):
        kiln.zeros(3, dtype=object())
    with pytest.raises(kiln.DTypeError):
        kiln.zeros(3, dtype="complex256")


def test_device_errors():
    if kiln.num_gpus() == 0:
        with pytest.raises(kiln.DeviceError):
            kiln.cuda(0)
        assert kiln.try_gpu() == kiln.cpu()
    with pytest.raises(ValueError):
        kiln.device("tpu:0")


def test_value_errors():
    with pytest.raises(ValueError):
        kiln.arange(0, 5, 0)
    with pytest.raises(ValueError):
        kiln.random.uniform(1.0, 0.0, size=3)


def test_wrong_argument_types_raise_type_error():
    with pytest.raises(TypeError):
        kiln.ones(3) + object()
    with pytest.raises(TypeError):
        kiln.zeros("three")
