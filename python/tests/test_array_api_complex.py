"""kiln.array_api's complex64/complex128: the dtypes and their inspection, casting rules, creation, and the
functions composed in Python for complex arguments (acos...atanh, expm1, log1p, log2, log10, sign, round,
cumulative_sum, vecdot, the norms), against NumPy (CPU)."""

import cmath
import math

import numpy as np
import pytest

import kiln
import kiln.array_api as xp

# Values across the plane: both half-planes, the axes, near 0, near +-1 and +-i (the branch points), large.
VALUES = np.array([0.3 + 0.4j, -0.3 + 0.4j, 0.3 - 0.4j, -0.3 - 0.4j, 2.0 + 3.0j, -2.0 - 3.0j, 1e-7 + 2e-7j,
                   1.5 + 0.0j, -1.5 + 0.0j, 0.0 + 1.5j, 0.0 - 1.5j, 0.5 + 0.0j, 1e5 - 1e5j, -1e5 + 1e5j,
                   0.999 + 1e-3j, -1.0 + 1e-6j, 1e100 + 1e100j])


def kiln_of(values, dtype):
    return xp.asarray(values.astype(dtype))


def test_the_namespace_lists_the_complex_dtypes():
    info = xp.__array_namespace_info__()
    assert info.dtypes(kind="complex floating") == {"complex64": xp.complex64, "complex128": xp.complex128}
    assert info.default_dtypes()["complex floating"] == xp.complex64
    assert set(info.dtypes(kind="numeric")) >= {"complex64", "complex128", "float32", "int8"}
    assert "complex128" in info.dtypes()
    assert xp.isdtype(xp.complex64, "complex floating") and xp.isdtype(xp.complex128, "numeric")
    assert not xp.isdtype(xp.complex64, "real floating") and not xp.isdtype(xp.float64, "complex floating")
    assert xp.complex64 == kiln.complex64 and "complex64" in xp.__all__ and "complex128" in xp.__all__


def test_finfo_of_a_complex_dtype_is_its_parts():
    for complex_dtype, part in ((xp.complex64, np.float32), (xp.complex128, np.float64)):
        f, ref = xp.finfo(complex_dtype), np.finfo(part)
        assert f.dtype == (xp.float32 if part == np.float32 else xp.float64)
        assert (f.bits, f.eps, f.max, f.min, f.smallest_normal) == (
            ref.bits, float(ref.eps), float(ref.max), float(ref.min), float(ref.smallest_normal))
    assert xp.finfo(xp.asarray([1j])).dtype == xp.float32


def test_promotion_and_casting_follow_the_standard():
    assert xp.result_type(xp.complex64, xp.float32) == xp.complex64
    assert xp.result_type(xp.complex64, xp.float64) == xp.complex128
    assert xp.result_type(xp.complex64, xp.complex128) == xp.complex128
    assert xp.can_cast(xp.float32, xp.complex64) and xp.can_cast(xp.float64, xp.complex128)
    assert xp.can_cast(xp.complex64, xp.complex128) and not xp.can_cast(xp.complex128, xp.complex64)
    assert not xp.can_cast(xp.float64, xp.complex64)  # float64 + complex64 is complex128
    assert not xp.can_cast(xp.complex64, xp.float64) and not xp.can_cast(xp.int8, xp.complex64)
    assert not xp.can_cast(xp.bool, xp.complex64)


def test_astype_refuses_complex_to_real_but_not_to_bool_or_complex():
    z = xp.asarray([1 + 2j, 0j])
    with pytest.raises(TypeError, match=r"astype: cannot cast complex64 to float32.*real\(x\)"):
        xp.astype(z, xp.float32)
    with pytest.raises(TypeError, match="int64"):
        xp.astype(z, xp.int64)
    assert xp.astype(z, xp.bool).tolist() == [True, False]
    w = xp.astype(z, xp.complex128)
    assert w.dtype == xp.complex128
    np.testing.assert_array_equal(w.numpy(), np.array([1 + 2j, 0j]))
    assert xp.astype(xp.asarray([True, False]), xp.complex64).numpy().tolist() == [1 + 0j, 0j]
    assert xp.astype(xp.asarray([1.5]), xp.complex128).numpy().tolist() == [1.5 + 0j]


def test_creation_from_python_complex_numbers():
    a = xp.asarray([1, 2.5, 3j])
    assert a.dtype == xp.complex64
    np.testing.assert_array_equal(a.numpy(), np.array([1, 2.5, 3j], np.complex64))
    assert xp.asarray([[1j], [2]]).dtype == xp.complex64
    assert xp.asarray(1 - 1j, dtype=xp.complex128).dtype == xp.complex128
    f = xp.full((2,), 1 - 2j)
    assert f.dtype == xp.complex64 and f.numpy().tolist() == [1 - 2j, 1 - 2j]
    assert xp.zeros((2,), dtype=xp.complex128).dtype == xp.complex128
    assert xp.eye(2, dtype=xp.complex64).numpy().tolist() == [[1, 0], [0, 1]]
    assert complex(xp.asarray(2 - 3j)) == 2 - 3j


def test_linspace_of_complex_end_points_spaces_both_parts():
    out = xp.linspace(0, 1 + 2j, 5)
    assert out.dtype == xp.complex64
    np.testing.assert_allclose(out.numpy(), np.linspace(0, 1 + 2j, 5), rtol=1e-6)
    out = xp.linspace(-1j, 4 + 1j, 4, endpoint=False, dtype=xp.complex128)
    assert out.dtype == xp.complex128
    np.testing.assert_allclose(out.numpy(), np.linspace(-1j, 4 + 1j, 4, endpoint=False), rtol=1e-15)
    assert xp.linspace(0.0, 1.0, 3, dtype=xp.complex64).numpy().tolist() == [0j, 0.5 + 0j, 1 + 0j]


def test_real_imag_conj_are_new_arrays():
    values = np.array([1 + 2j, -3.5 - 0.5j], np.complex128)
    z = xp.asarray(values)
    re, im, c = xp.real(z), xp.imag(z), xp.conj(z)
    assert re.dtype == xp.float64 and im.dtype == xp.float64 and c.dtype == xp.complex128
    np.testing.assert_array_equal(re.numpy(), values.real)
    np.testing.assert_array_equal(im.numpy(), values.imag)
    np.testing.assert_array_equal(c.numpy(), values.conj())
    re[0] = 10.0  # a copy: z is unchanged
    assert z.numpy()[0] == 1 + 2j
    assert xp.real(xp.asarray([1j], dtype=xp.complex64)).dtype == xp.float32


@pytest.mark.parametrize("dtype, rtol", [(np.complex128, 1e-12), (np.complex64, 2e-6)])
@pytest.mark.parametrize("name, ref", [
    ("acos", np.arccos), ("asin", np.arcsin), ("atan", np.arctan), ("acosh", np.arccosh),
    ("asinh", np.arcsinh), ("atanh", np.arctanh), ("expm1", np.expm1), ("log1p", np.log1p),
    ("log2", np.log2), ("log10", np.log10),
])
def test_composed_complex_functions_match_numpy(name, ref, dtype, rtol):
    values = VALUES if dtype == np.complex128 else VALUES[:-1]  # 1e100 is past complex64's range
    if name == "expm1":
        values = values[np.abs(values.real) < 100]  # exp of the large ones overflows
    out = getattr(xp, name)(kiln_of(values, dtype))
    assert out.dtype == (xp.complex128 if dtype == np.complex128 else xp.complex64)
    values = values.astype(dtype).astype(np.complex128)  # the reference at the values kiln's dtype holds
    expected = ref(values)
    if name == "log1p":  # NumPy's log1p(z) is log(hypot(1 + x, y)): inexact near 0, where a series is exact
        near = np.abs(values) < 1e-3
        expected[near] = values[near] - values[near] ** 2 / 2 + values[near] ** 3 / 3
    got = out.numpy().astype(np.complex128)
    # to rtol of the modulus (a part can be a rounding error of 0 next to a large other part)
    assert np.all(np.abs(got - expected) <= rtol * np.abs(expected) + 1e-300), (name, values, got, expected)


def test_composed_functions_take_their_special_values():
    def one(name, z, dtype=xp.complex128):
        return complex(getattr(xp, name)(xp.asarray(z, dtype=dtype)))

    assert one("atanh", 1 + 0j) == complex(math.inf, 0)
    assert one("expm1", complex(math.inf, 0)) == complex(math.inf, 0)
    assert math.copysign(1, one("expm1", complex(-0.0, 0)).real) == 1  # the standard's +0 + 0j
    assert one("log1p", -1 + 0j).real == -math.inf
    assert one("asinh", 0j) == 0j and one("acos", 0j) == complex(math.pi / 2, 0)
    assert one("log2", 8 + 0j) == 3 + 0j and one("log10", 100j) == complex(2, math.pi / 2 / math.log(10))
    assert one("asinh", complex(1e300, 1e300)) == pytest.approx(cmath.asinh(complex(1e300, 1e300)), rel=1e-15)
    assert one("atanh", complex(1e300, -1e300)) == pytest.approx(cmath.atanh(complex(1e300, -1e300)), abs=1e-15)
    # -0.0's sign picks the side of asinh's branch cut, as C's casinh
    assert one("asinh", complex(-0.0, 2)) == pytest.approx(cmath.asinh(complex(-0.0, 2)), rel=1e-15)
    assert one("asinh", complex(0.0, 2)) == pytest.approx(cmath.asinh(complex(0.0, 2)), rel=1e-15)


def test_sign_is_z_over_its_modulus_and_zero_at_zero():
    values = np.array([3 + 4j, -2j, 0j, -5 + 0j, 1e-30 + 1e-30j], np.complex128)
    out = xp.sign(xp.asarray(values))
    assert out.dtype == xp.complex128
    with np.errstate(invalid="ignore"):
        expected = np.where(values == 0, 0, values / np.abs(values))
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-15)
    assert xp.sign(xp.asarray([3 + 4j])).dtype == xp.complex64
    assert xp.sign(xp.asarray([-2.0, 0.0, 3.0])).tolist() == [-1.0, 0.0, 1.0]  # real: unchanged


def test_round_rounds_each_part_half_to_even():
    out = xp.round(xp.asarray(np.array([0.5 + 1.5j, -2.5 - 0.4j, 1.6 + 2.5j])))
    assert out.dtype == xp.complex128
    np.testing.assert_array_equal(out.numpy(), np.array([0 + 2j, -2 - 0j, 2 + 2j]))


def test_core_functions_take_complex_arguments_through_the_namespace():
    values = VALUES[np.abs(VALUES) < 10]  # exp and sin of the large ones overflow
    z = kiln_of(values, np.complex128)
    for name, ref in (("exp", np.exp), ("log", np.log), ("sqrt", np.sqrt), ("sin", np.sin), ("tanh", np.tanh),
                      ("square", np.square), ("negative", np.negative), ("positive", np.positive)):
        np.testing.assert_allclose(getattr(xp, name)(z).numpy(), ref(values), rtol=1e-13, err_msg=name)
    np.testing.assert_allclose(xp.abs(z).numpy(), np.abs(values), rtol=1e-15)
    assert xp.abs(z).dtype == xp.float64
    assert xp.isnan(xp.asarray([complex(0, math.nan), 1j])).tolist() == [True, False]
    assert xp.isinf(xp.asarray([complex(math.inf, 0), 1j])).tolist() == [True, False]
    assert xp.isfinite(xp.asarray([complex(1, math.inf), 1j])).tolist() == [False, True]
    assert xp.equal(xp.asarray([1j, 2]), xp.asarray([1j, 2j])).tolist() == [True, False]
    np.testing.assert_allclose(xp.pow(z, 2).numpy(), values**2, rtol=1e-13)
    np.testing.assert_allclose(xp.divide(z, 1 + 1j).numpy(), values / (1 + 1j), rtol=1e-15)


def test_reductions_of_complex_arrays_keep_the_dtype():
    values = np.array([[1 + 2j, 3 - 1j, -0.5j], [2, 1j, 1 + 1j]], np.complex64)
    z = xp.asarray(values)
    for name, ref in (("sum", np.sum), ("prod", np.prod), ("mean", np.mean)):
        out = getattr(xp, name)(z, axis=1)
        assert out.dtype == xp.complex64, name
        np.testing.assert_allclose(out.numpy(), ref(values, axis=1), rtol=1e-6, err_msg=name)
    assert xp.sum(z, dtype=xp.complex128).dtype == xp.complex128
    with pytest.raises(TypeError, match=r"sum: dtype=float64 is real but x is complex64.*real\(x\)"):
        xp.sum(z, dtype=xp.float64)
    with pytest.raises(TypeError, match="prod: dtype=float32"):
        xp.prod(z, dtype=xp.float32)
    with pytest.raises(TypeError, match="cumulative_sum"):
        xp.cumulative_sum(z, axis=1, dtype=xp.float64)
    c = xp.cumulative_sum(z, axis=1, include_initial=True)
    assert c.dtype == xp.complex64
    np.testing.assert_allclose(c.numpy()[:, 1:], np.cumsum(values, axis=1), rtol=1e-6)
    assert c.numpy()[:, 0].tolist() == [0j, 0j]


def test_vecdot_conjugates_its_first_argument():
    x1, x2 = xp.asarray([1j, 2j, 3j]), xp.asarray([1, 2j, 3])
    assert complex(xp.vecdot(x1, x2)) == pytest.approx(4 - 10j)  # the suite's test_vecdot_conj
    assert complex(xp.linalg.vecdot(x1, x2)) == pytest.approx(4 - 10j)
    a = np.array([[1 + 1j, 2 - 1j], [0.5j, 3]], np.complex128)
    b = np.array([[2j, 1], [1 - 1j, -1j]], np.complex128)
    np.testing.assert_allclose(xp.vecdot(xp.asarray(a), xp.asarray(b), axis=0).numpy(),
                               np.vecdot(a, b, axis=0), rtol=1e-15)


def test_matmul_and_norms_of_complex_matrices():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))
    b = rng.standard_normal((4, 2)) + 1j * rng.standard_normal((4, 2))
    np.testing.assert_allclose(xp.matmul(xp.asarray(a), xp.asarray(b)).numpy(), a @ b, rtol=1e-13)
    z = xp.asarray(a)
    norm = xp.linalg.vector_norm(z)
    assert norm.dtype == xp.float64
    np.testing.assert_allclose(norm.numpy(), np.linalg.norm(a.ravel()), rtol=1e-14)
    np.testing.assert_allclose(xp.linalg.vector_norm(z, axis=1, ord=1).numpy(), np.abs(a).sum(axis=1), rtol=1e-14)
    for order in ("fro", 1, -1, math.inf, -math.inf, 2, -2, "nuc"):
        got = xp.linalg.matrix_norm(z, ord=order)
        assert got.dtype == xp.float64
        np.testing.assert_allclose(got.numpy(), np.linalg.norm(a, ord=order), rtol=1e-14, err_msg=str(order))
    np.testing.assert_allclose(xp.linalg.trace(xp.asarray(a[:, :3])).numpy(), np.trace(a[:, :3]), rtol=1e-15)


def test_unique_of_complex_values_in_numpy_order_with_every_nan_distinct():
    values = np.array([[2 + 1j, 1 - 1j, 2 + 1j], [complex(math.nan, 0), 1 + 3j, -0.0 + 0j],
                       [0j, 1 - 1j, complex(0, math.nan)]], np.complex128)
    got = xp.unique_all(xp.asarray(values))
    vals, idx, inv, cnt = np.unique(values, return_index=True, return_inverse=True, return_counts=True,
                                    equal_nan=False)
    assert got.values.dtype == xp.complex128
    np.testing.assert_array_equal(got.values.numpy(), vals)
    np.testing.assert_array_equal(got.indices.numpy(), idx)
    np.testing.assert_array_equal(got.inverse_indices.numpy(), inv.reshape(values.shape))
    np.testing.assert_array_equal(got.counts.numpy(), cnt)
    z = xp.asarray(values.astype(np.complex64))
    assert xp.unique_values(z).dtype == xp.complex64 and xp.unique_values(z).shape == (6,)
    assert xp.unique_counts(z).counts.numpy().tolist() == cnt.tolist()
    np.testing.assert_array_equal(xp.unique_inverse(z).inverse_indices.numpy(), inv.reshape(values.shape))
    empty = xp.unique_all(xp.zeros((0, 2), dtype=xp.complex128))
    assert empty.values.shape == (0,) and empty.inverse_indices.shape == (0, 2) and empty.counts.shape == (0,)


def complex_matrices(shape, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


@pytest.mark.parametrize("dtype, rtol", [(np.complex128, 1e-10), (np.complex64, 1e-4)])
def test_linalg_of_complex_matrices_through_the_real_embedding(dtype, rtol):
    a = complex_matrices((2, 3, 3)).astype(dtype)
    b = complex_matrices((2, 3, 2), seed=1).astype(dtype)
    v = complex_matrices((3,), seed=2).astype(dtype)
    xa = xp.asarray(a)
    want = np.complex64 if dtype == np.complex64 else np.complex128
    for name, got, expected in (
        ("inv", xp.linalg.inv(xa), np.linalg.inv(a)),
        ("solve", xp.linalg.solve(xa, xp.asarray(b)), np.linalg.solve(a, b)),
        ("solve vector", xp.linalg.solve(xa, xp.asarray(v)), np.linalg.solve(a, v[None, :, None])[..., 0]),
        ("pinv", xp.linalg.pinv(xp.asarray(b)), np.linalg.pinv(b)),
        ("det", xp.linalg.det(xa), np.linalg.det(a)),
    ):
        assert got.dtype == xp.asarray(np.zeros(1, want)).dtype, name
        np.testing.assert_allclose(got.numpy(), expected, rtol=rtol, atol=rtol, err_msg=name)
    s = xp.linalg.svdvals(xp.asarray(b))
    assert s.dtype == (xp.float64 if dtype == np.complex128 else xp.float32) and s.shape == (2, 2)
    np.testing.assert_allclose(s.numpy(), np.linalg.svd(b, compute_uv=False), rtol=rtol)
    sign, logabsdet = xp.linalg.slogdet(xa)
    ref_sign, ref_log = np.linalg.slogdet(a)
    np.testing.assert_allclose(sign.numpy(), ref_sign, rtol=rtol)
    np.testing.assert_allclose(logabsdet.numpy(), ref_log, rtol=rtol)
    hermitian = a + np.conj(np.swapaxes(a, -1, -2))
    np.testing.assert_allclose(xp.linalg.eigvalsh(xp.asarray(hermitian)).numpy(), np.linalg.eigvalsh(hermitian),
                               rtol=rtol, atol=rtol)
    spd = (a @ np.conj(np.swapaxes(a, -1, -2)) + 3 * np.eye(3)).astype(dtype)
    lower = xp.linalg.cholesky(xp.asarray(spd))
    assert lower.dtype == xp.asarray(np.zeros(1, want)).dtype
    np.testing.assert_allclose(lower.numpy(), np.linalg.cholesky(spd), rtol=rtol, atol=rtol)
    upper = xp.linalg.cholesky(xp.asarray(spd), upper=True).numpy()
    np.testing.assert_array_equal(upper, np.triu(upper))
    np.testing.assert_allclose(upper, np.conj(np.swapaxes(np.linalg.cholesky(spd), -1, -2)), rtol=rtol, atol=rtol)
    singular = np.array([[1 + 1j, 2 - 1j], [2 + 2j, 4 - 2j]], dtype)  # second row twice the first
    assert xp.linalg.matrix_rank(xp.asarray(singular)).tolist() == 1
    assert xp.linalg.matrix_rank(xp.asarray(a)).tolist() == [3, 3]
    np.testing.assert_allclose(xp.linalg.matrix_power(xa, -2).numpy(), np.linalg.matrix_power(a, -2), rtol=rtol * 10,
                               atol=rtol)
    assert xp.linalg.matrix_norm(xa, ord=2, keepdims=True).shape == (2, 1, 1)


def test_any_all_nonzero_where_and_data_movement_of_complex_arrays():
    values = np.array([[0j, 1j], [complex(0, -0.0), 2 + 0j]], np.complex64)
    z = xp.asarray(values)
    assert xp.any(z, axis=1).tolist() == [True, True] and xp.all(z, axis=0).tolist() == [False, True]
    assert xp.any(xp.asarray(0j)).tolist() is False and xp.all(xp.asarray([1j, 1])).tolist() is True
    assert [a.tolist() for a in xp.nonzero(z)] == [[0, 1], [1, 1]]
    np.testing.assert_array_equal(xp.where(xp.asarray([True, False]), z[0], z[1]).numpy(), [0j, 2 + 0j])
    for got, expected in ((xp.concat([z, z], axis=1), np.concatenate([values, values], 1)),
                          (xp.flip(z, axis=0), values[::-1]), (xp.permute_dims(z, (1, 0)), values.T),
                          (xp.take(z, xp.asarray([1, 0]), axis=1), values[:, ::-1]),
                          (xp.stack([z[0], z[1]]), values), (xp.roll(z, 1), np.roll(values, 1))):
        assert got.dtype == xp.complex64
        np.testing.assert_array_equal(got.numpy(), expected)


def test_python_scalars_of_a_complex_array():
    z = xp.asarray(1.5 - 2j)
    assert complex(z) == 1.5 - 2j and bool(z) is True and bool(xp.asarray(0j)) is False
    with pytest.raises(TypeError, match=r"float\(\) of a complex64 array would drop the imaginary part"):
        float(z)
    with pytest.raises(TypeError, match=r"int\(\) of a complex128 array"):
        int(xp.asarray(1j, dtype=xp.complex128))
    assert float(xp.asarray(2.5)) == 2.5 and int(xp.asarray(3)) == 3


@pytest.mark.parametrize("dtype, tol", [(np.complex128, 1e-12), (np.complex64, 1e-5)])
@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 3, 3), (3, 0), (0, 2)])
def test_qr_of_complex_matrices_is_unitary_times_upper_triangular(shape, dtype, tol):
    a = complex_matrices(shape, seed=3).astype(dtype)
    if len(shape) == 3:
        a[1, :, 1] = 0  # a zero column: no reflection there
    m, n = shape[-2:]
    for mode, q_cols in (("reduced", min(m, n)), ("complete", m)):
        q, r = xp.linalg.qr(xp.asarray(a), mode=mode)
        assert q.dtype == r.dtype == xp.asarray(a).dtype
        assert q.shape == shape[:-2] + (m, q_cols) and r.shape == shape[:-2] + (q_cols, n)
        qn, rn = q.numpy(), r.numpy()
        np.testing.assert_array_equal(rn, np.triu(rn))
        np.testing.assert_allclose(qn @ rn, a, atol=tol * 10)
        np.testing.assert_allclose(np.conj(np.swapaxes(qn, -1, -2)) @ qn, np.broadcast_to(np.eye(q_cols), qn.shape[:-2]
                                   + (q_cols, q_cols)), atol=tol * 10)
        # unique up to the phases of R's diagonal where A has full rank (not the matrix with a zero column): |R|
        full_rank = rn if len(shape) == 2 else rn[0]
        expected = np.linalg.qr(a if len(shape) == 2 else a[0], mode=mode)[1]
        np.testing.assert_allclose(np.abs(full_rank), np.abs(expected), atol=tol * 10)


@pytest.mark.parametrize("shape", [(4, 3), (3, 5), (2, 3, 3)])
@pytest.mark.parametrize("full_matrices", [False, True])
def test_svd_of_complex_matrices_reconstructs_them_as_numpy(shape, full_matrices):
    rng = np.random.default_rng(7)
    a = rng.normal(size=shape) + 1j * rng.normal(size=shape)
    u, s, vh = xp.linalg.svd(xp.asarray(a), full_matrices=full_matrices)
    u, s, vh = np.asarray(u), np.asarray(s), np.asarray(vh)
    assert u.dtype == np.complex128 and s.dtype == np.float64 and vh.dtype == np.complex128
    k = min(shape[-2:])
    np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], a, atol=1e-12)
    np.testing.assert_allclose(s, np.linalg.svd(a, compute_uv=False), rtol=1e-12)
    identity = np.broadcast_to(np.eye(u.shape[-1]), u.shape[:-2] + (u.shape[-1],) * 2)
    np.testing.assert_allclose(np.conj(np.swapaxes(u, -1, -2)) @ u, identity, atol=1e-12)
    s64 = np.asarray(xp.linalg.svdvals(xp.asarray(a.astype(np.complex64))))
    assert s64.dtype == np.float32
    np.testing.assert_allclose(s64, np.linalg.svd(a, compute_uv=False), rtol=1e-5)
