"""The elementwise ops of include/kiln/ops.def, operators and matmul, against NumPy (float64 references)."""

import math
import pathlib
import re

import numpy as np
import pytest

import kiln

OPS_DEF = pathlib.Path(__file__).resolve().parents[2] / "include" / "kiln" / "ops.def"
ROWS = re.findall(r"^KILN_OP\(\s*\w+,\s*(\w+),\s*(\d),\s*(\w+)\)", OPS_DEF.read_text(), re.M)
UNARY = [name for name, arity, api in ROWS if api == "Fn" and arity == "1"]
BINARY = [name for name, arity, api in ROWS if api == "Fn" and arity == "2"]


def _erf(v):
    return np.vectorize(math.erf)(v)


# References for the ops NumPy does not have, in float64 from their definitions.
EXTRA = {
    "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)),
    "relu": lambda v: np.maximum(v, 0.0),
    "erf": _erf,
    "softplus": lambda v: np.log1p(np.exp(v)),
    "gelu": lambda v: v * 0.5 * (1.0 + _erf(v / math.sqrt(2.0))),
    "gelu_tanh": lambda v: 0.5 * v * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (v + 0.044715 * v**3))),
    "silu": lambda v: v / (1.0 + np.exp(-v)),
}
BOOL_RESULT = {"logical_not", "isnan", "isinf", "isfinite", "signbit"}
INTEGER_ONLY = {"bitwise_not", "bitwise_and", "bitwise_or", "bitwise_xor"}


def test_every_public_op_of_ops_def_is_bound():
    assert len(UNARY) > 30 and len(BINARY) > 20
    missing = [name for name in UNARY + BINARY if not callable(getattr(kiln, name, None))]
    assert missing == []


@pytest.mark.parametrize("name", UNARY)
def test_unary_op_matches_reference(name, device):
    if name in INTEGER_ONLY:
        ref = np.array([-3, 0, 5, 127], np.int64)
        np.testing.assert_array_equal(getattr(kiln, name)(kiln.asarray(ref, device=device)).numpy(), ~ref)
        return
    ref = np.linspace(0.05, 0.95, 13)  # inside every op's domain (arcsin, log, sqrt...)
    want = EXTRA[name](ref) if name in EXTRA else getattr(np, name)(ref)
    got = getattr(kiln, name)(kiln.asarray(ref, device=device)).numpy()
    if name in BOOL_RESULT:
        np.testing.assert_array_equal(got, want)
    else:
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_signbit_reads_the_sign_of_zeros_and_nans(dtype, device):
    values = np.array([-0.0, 0.0, -np.nan, np.nan, -np.inf, np.inf, -2.5, 3.0], dtype)
    assert np.signbit(values[2]) and not np.signbit(values[3])  # the NaNs keep their signs in NumPy's cast
    got = kiln.signbit(kiln.asarray(values, device=device)).numpy()
    np.testing.assert_array_equal(got, [True, False, True, False, True, False, True, False])


def test_signbit_of_integers_and_bool_is_x_below_zero(device):
    ints = np.array([-128, -1, 0, 1, 127], np.int8)
    np.testing.assert_array_equal(kiln.signbit(kiln.asarray(ints, device=device)).numpy(), np.signbit(ints))
    np.testing.assert_array_equal(kiln.signbit(kiln.asarray(np.array([255, 0], np.uint8), device=device)).numpy(),
                                  [False, False])
    np.testing.assert_array_equal(kiln.signbit(kiln.asarray([True, False], device=device)).numpy(), [False, False])


@pytest.mark.parametrize("name", BINARY)
def test_binary_op_matches_numpy(name, device):
    if name in INTEGER_ONLY or name.startswith("logical"):
        a, b = np.array([0, 3, 12, -7], np.int32), np.array([5, 3, 10, 2], np.int32)
    else:
        a, b = np.linspace(0.5, 3.0, 6), np.linspace(2.0, 0.25, 6)
    got = getattr(kiln, name)(kiln.asarray(a, device=device), kiln.asarray(b, device=device)).numpy()
    want = getattr(np, name)(a, b)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_out_argument_writes_in_place():
    a = kiln.asarray(np.array([1.0, 4.0, 9.0]))
    out = kiln.zeros(3, dtype=kiln.float64)
    kiln.sqrt(a, out=out)
    kiln.add(out, 1.0, out=out)
    np.testing.assert_array_equal(out.numpy(), [2.0, 3.0, 4.0])


def test_operators_and_reflected_operators_match_numpy():
    a_np = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    b_np = np.array([2.0, 0.5, 4.0], np.float32)
    a, b = kiln.asarray(a_np), kiln.asarray(b_np)
    pairs = [
        (a + b, a_np + b_np), (a - b, a_np - b_np), (a * b, a_np * b_np), (a / b, a_np / b_np),
        (a // b, a_np // b_np), (a % b, a_np % b_np), (a ** 2, a_np**2), (2 ** a, 2**a_np),
        (1 - a, 1 - a_np), (3 / a, 3 / a_np), (-a, -a_np), (abs(-a), a_np), (+a, a_np),
        (a < b, a_np < b_np), (a <= 3, a_np <= 3), (a > b, a_np > b_np), (a >= b, a_np >= b_np),
        (a == 2, a_np == 2), (a != 2, a_np != 2), (a + b_np, a_np + b_np), (b_np + a, b_np + a_np),
        (a + [1, 2, 3], a_np + np.array([1, 2, 3])),
    ]
    for got, want in pairs:
        assert got.dtype == want.dtype, (got, want)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_python_scalars_are_weak_as_in_numpy_2():
    x = kiln.asarray(np.array([1, 2], np.int8))
    assert (x + 1).dtype == kiln.int8
    assert (x * 1.5).dtype == kiln.float64 and (np.array([1, 2], np.int8) * 1.5).dtype == np.float64
    assert (kiln.asarray([1.0], dtype=kiln.float16) + 2.0).dtype == kiln.float16


def test_integer_and_bool_operators():
    a_np, b_np = np.array([12, 5, -3]), np.array([10, 3, 6])
    a, b = kiln.asarray(a_np), kiln.asarray(b_np)
    for got, want in [(a & b, a_np & b_np), (a | b, a_np | b_np), (a ^ b, a_np ^ b_np), (~a, ~a_np)]:
        np.testing.assert_array_equal(got.numpy(), want)
    m = kiln.asarray([True, False, True])
    np.testing.assert_array_equal((~m).numpy(), [False, True, False])


def test_inplace_operators_keep_the_array():
    x = kiln.asarray(np.array([1.0, 2.0, 3.0], np.float32))
    before = x.data_ptr
    x += 1
    x *= kiln.asarray([2.0, 2.0, 2.0])
    x -= 0.5
    x /= 2
    assert x.data_ptr == before and x.dtype == kiln.float32
    np.testing.assert_allclose(x.numpy(), ((np.array([1, 2, 3]) + 1) * 2 - 0.5) / 2)


def test_where_and_clip():
    c_np = np.array([True, False, True])
    np.testing.assert_array_equal(kiln.where(kiln.asarray(c_np), 1.0, kiln.asarray([5.0, 6.0, 7.0])).numpy(),
                                  np.where(c_np, 1.0, np.array([5.0, 6.0, 7.0], np.float32)))
    v = np.linspace(-2, 2, 9)
    np.testing.assert_array_equal(kiln.clip(kiln.asarray(v), -1.0, 0.5).numpy(), np.clip(v, -1.0, 0.5))
    np.testing.assert_array_equal(kiln.asarray(v).clip(-1.0, 0.5).numpy(), np.clip(v, -1.0, 0.5))


def test_matmul_and_dot_match_numpy(device):
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    a, b = kiln.asarray(a_np, device=device), kiln.asarray(b_np, device=device)
    np.testing.assert_allclose((a @ b).numpy(), a_np @ b_np, rtol=1e-12)
    np.testing.assert_allclose(kiln.matmul(a, b).numpy(), a_np @ b_np, rtol=1e-12)
    v = rng.standard_normal(4)
    np.testing.assert_allclose((a @ kiln.asarray(v, device=device)).numpy(), a_np @ v, rtol=1e-12)
    np.testing.assert_allclose(kiln.dot(kiln.asarray(v), kiln.asarray(v)).item(), v @ v, rtol=1e-12)
    batch = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose((kiln.asarray(batch) @ kiln.asarray(b_np)).numpy(), batch @ b_np, rtol=1e-12)
    np.testing.assert_allclose(kiln.linalg.norm(kiln.asarray(a_np)).item(), np.linalg.norm(a_np), rtol=1e-12)
