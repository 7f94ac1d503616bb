"""Python complex numbers meet kiln's complex64/complex128 (CPU): weak scalars as NEP 50, creation, conversion."""
import numpy as np
import pytest

import kiln


def test_a_complex_scalar_is_weak_and_keeps_its_imaginary_part():
    x = kiln.asarray([1.0, 2.0], dtype=kiln.float32)
    y = x + 1j
    assert y.dtype == kiln.complex64  # float32 array + Python complex: complex64 (NEP 50)
    np.testing.assert_array_equal(y.numpy(), np.array([1 + 1j, 2 + 1j], np.complex64))
    z = kiln.asarray([1, 2]) * 2j  # int64 array: complex128, as NumPy 2
    assert z.dtype == kiln.complex128
    np.testing.assert_array_equal(z.numpy(), np.array([2j, 4j]))


def test_creation_from_python_complex_numbers_uses_complex64_as_floats_use_float32():
    np.testing.assert_array_equal(kiln.full((2,), 1 + 2j).numpy(), np.full((2,), 1 + 2j, np.complex64))
    assert kiln.full((2,), 1 + 2j).dtype == kiln.complex64
    assert kiln.asarray(2j).dtype == kiln.complex64 and kiln.asarray([1 + 1j, 2]).dtype == kiln.complex64
    assert kiln.full((1,), 1 + 2j, dtype=kiln.complex128).dtype == kiln.complex128
    # NumPy arrays keep their dtype
    assert kiln.asarray(np.array([1 + 1j])).dtype == kiln.complex128


def test_complex_of_a_one_element_array_keeps_both_parts():
    assert complex(kiln.asarray(1.5 - 2.5j)) == 1.5 - 2.5j
    assert complex(kiln.asarray(2.5)) == 2.5 + 0j


@pytest.mark.skipif(kiln.num_gpus() == 0, reason="needs a GPU")
def test_complex_arithmetic_on_the_gpu_equals_numpys():
    x = kiln.asarray([1.0, 2.0], device=kiln.cuda(0))
    got = (x * (2 - 1j) + 1j).numpy()
    np.testing.assert_array_equal(got, np.array([1.0, 2.0]) * (2 - 1j) + 1j)
