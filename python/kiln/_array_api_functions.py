"""The Array API's functions over kiln's (kiln.array_api re-exports them): elementwise, linear algebra,
manipulation, searching, sets, sorting, statistics and utilities, with the standard's signatures."""

from collections import namedtuple as _namedtuple

from . import _kiln as _k
from ._kiln import Array as _Array

__all__ = []


def _export(function):
    __all__.append(function.__name__)
    return function


# ---------------------------------------------------------------- elementwise functions
# The standard's name -> kiln's, for the functions whose binding already has the standard's semantics.
_UNARY = {
    "abs": "abs", "bitwise_invert": "bitwise_not", "ceil": "ceil", "cos": "cos", "cosh": "cosh", "exp": "exp",
    "floor": "floor", "isfinite": "isfinite", "isinf": "isinf", "isnan": "isnan", "log": "log",
    "logical_not": "logical_not", "negative": "negative", "signbit": "signbit", "sin": "sin", "sinh": "sinh",
    "square": "square", "sqrt": "sqrt", "tan": "tan", "trunc": "trunc",
}
_BINARY = {
    "add": "add", "atan2": "arctan2", "bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor", "divide": "divide", "equal": "equal", "floor_divide": "floor_divide",
    "greater": "greater", "greater_equal": "greater_equal", "less": "less", "less_equal": "less_equal",
    "logaddexp": "logaddexp", "logical_and": "logical_and", "logical_or": "logical_or",
    "logical_xor": "logical_xor", "maximum": "maximum", "minimum": "minimum", "multiply": "multiply",
    "not_equal": "not_equal", "pow": "power", "remainder": "remainder", "subtract": "subtract",
}


def _unary(name, kiln_name):
    kiln_function = getattr(_k, kiln_name)

    def function(x, /):
        return kiln_function(x)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"The Array API's {name}: kiln.{kiln_name}."
    return function


def _binary(name, kiln_name):
    kiln_function = getattr(_k, kiln_name)

    def function(x1, x2, /):
        return kiln_function(x1, x2)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"The Array API's {name}: kiln.{kiln_name}."
    return function


for _name, _kiln_name in _UNARY.items():
    globals()[_name] = _unary(_name, _kiln_name)
    __all__.append(_name)
for _name, _kiln_name in _BINARY.items():
    globals()[_name] = _binary(_name, _kiln_name)
    __all__.append(_name)


# ---------------------------------------------------------------- complex numbers
# kiln's core computes complex64/complex128 for the ops NumPy defines on them (exp, log, sqrt, the trigonometric
# and hyperbolic functions...); the standard's other complex functions are composed here from the parts, in
# complex128 for complex64 arguments (so that squares do not overflow), then rounded back once.
_COMPLEX = (_k.complex64, _k.complex128)
_LN2, _LN10, _PI_2 = 0.6931471805599453, 2.302585092994046, 1.5707963267948966


def _is_complex(x):
    return isinstance(x, _Array) and x.dtype in _COMPLEX


def _widened(z):
    """z in complex128 (a complex64 z converted), and the dtype to return."""
    return (z if z.dtype == _k.complex128 else z.astype(_k.complex128)), z.dtype


def _join(re, im, dtype):
    out = _k.make_complex(re, im)
    return out if out.dtype == dtype else out.astype(dtype)


def _plus_real(z, c):
    """z + c for a real c, on the real part only: z + c would add c + 0j, turning an imaginary -0.0 into +0.0
    (the side of a branch cut)."""
    return _k.make_complex(_k.real(z) + c, _k.imag(z))


def _times_i(z):
    """i * z, exactly: (-imag, real) (the product i * z would make NaNs of infinite parts)."""
    return _k.make_complex(-_k.imag(z), _k.real(z))


@_export
def conj(x, /):
    return _k.conj(x)


@_export
def real(x, /):
    return _k.copy(_k.real(x)) if _is_complex(x) else _k.copy(x)


@_export
def imag(x, /):
    return _k.copy(_k.imag(x)) if _is_complex(x) else _k.zeros_like(x)


@_export
def positive(x, /):
    return _k.copy(x)


def _complex_asinh(z):
    # asinh is odd: computed on w = z with the real part's sign made positive (where w + sqrt(w*w + 1) has no
    # cancellation), and the sign put back. Large |w|: log(2w), as w*w would overflow; small: w - w^3/6.
    w, dtype = _widened(z)
    flip = _k.signbit(_k.real(w))
    w = _k.where(flip, -w, w)
    size = _k.maximum(_k.abs(_k.real(w)), _k.abs(_k.imag(w)))
    out = _k.log(w + _k.sqrt(_plus_real(w * w, 1)))
    out = _k.where(size > 1e150, _plus_real(_k.log(w), _LN2), out)
    out = _k.where(size < 1e-5, w - w * w * w / 6, out)
    out = _k.where(flip, -out, out)
    # The axes exactly, and C99's (the standard's) values where a part is NaN and the other infinite
    x, y = _k.real(z), _k.imag(z)
    re, im = _k.real(out), _k.imag(out)
    on_real_axis, on_unit_segment = y == 0, _k.logical_and(x == 0, _k.abs(y) <= 1)  # asinh(iy) = i asin(y)
    nan_inf, inf_nan = _k.logical_and(_k.isnan(x), _k.isinf(y)), _k.logical_and(_k.isinf(x), _k.isnan(y))
    re = _k.where(on_unit_segment, x, _k.where(nan_inf, float("inf"), _k.where(inf_nan, x, re)))
    im = _k.where(on_real_axis, y, _k.where(on_unit_segment, _k.arcsin(y), _k.where(inf_nan, float("nan"), im)))
    return _join(re, im, dtype)


def _complex_atanh(z):
    # Kahan's real-part formula 1/4 log1p(4x / ((1 - x)^2 + y^2)) (no cancellation near 0), the imaginary part
    # 1/2 atan2(2y, (1 - x)(1 + x) - y^2) halved inside so that 2y cannot overflow.
    # atanh is odd: computed for a non-negative real part (the log1p's argument then is too), the sign put back.
    w, dtype = _widened(z)
    flip = _k.signbit(_k.real(w))
    w = _k.where(flip, -w, w)
    x, y = _k.real(w), _k.imag(w)
    re = 0.25 * _k.log1p(4 * x / ((1 - x) * (1 - x) + y * y))
    im = 0.5 * _k.arctan2(y, 0.5 * ((1 - x) * (1 + x)) - 0.5 * y * y)
    # Exactly: 0 on the imaginary axis (atanh(iy) = i atan(y)) and at infinity, where the quotient is inf / inf;
    # +-pi/2 for an infinite imaginary part (atan2(inf, -inf) would be 3pi/4).
    re = _k.where(_k.logical_or(x == 0, _k.logical_or(_k.isinf(x), _k.isinf(y))), 0.0, re)
    im = _k.where(_k.isinf(y), copysign(_k.full_like(y, _PI_2), y), im)
    out = _k.make_complex(re, im)
    out = _k.where(flip, -out, out)
    return out if out.dtype == dtype else out.astype(dtype)


@_export
def acos(x, /):
    if not _is_complex(x):
        return _k.arccos(x)
    # acos(z) = pi/2 - asin(z)
    s = asin(x)
    return _join(_PI_2 - _k.real(s), -_k.imag(s), x.dtype)


@_export
def asin(x, /):
    if not _is_complex(x):
        return _k.arcsin(x)
    # asin(z) = -i asinh(i z)
    h = _complex_asinh(_times_i(x))
    return _join(_k.imag(h), -_k.real(h), x.dtype)


@_export
def atan(x, /):
    if not _is_complex(x):
        return _k.arctan(x)
    # atan(z) = -i atanh(i z)
    h = _complex_atanh(_times_i(x))
    return _join(_k.imag(h), -_k.real(h), x.dtype)


@_export
def acosh(x, /):
    if _is_complex(x):
        # acosh(z) = i acos(z) in the upper half-plane, -i acos(z) in the lower one (the sign of imag(z), -0.0
        # included, picks the side: a non-negative real part, as C's cacosh)
        a = acos(x)
        re, im = _k.real(a), _k.imag(a)
        lower = _k.signbit(_k.imag(x))
        return _join(_k.abs(im), _k.where(lower, -re, re), x.dtype)
    # x < 1 (-inf included, where x + sqrt(x * x - 1) would be inf) is outside the domain.
    return _k.where(x < 1, float("nan"), _k.log(x + _k.sqrt(x * x - 1)))


@_export
def asinh(x, /):
    if _is_complex(x):
        return _complex_asinh(x)
    # asinh(-x) = -asinh(x): computing on |x| keeps the large negative arguments from cancelling.
    a = _k.abs(x)
    return _k.where(x == 0, x, _k.sign(x) * _k.log(a + _k.sqrt(a * a + 1)))  # keeps -0.0


@_export
def atanh(x, /):
    if _is_complex(x):
        return _complex_atanh(x)
    return 0.5 * _k.log1p(2 * x / (1 - x))


@_export
def expm1(x, /):
    if not _is_complex(x):
        return _k.expm1(x)
    # |x| < 1 (and y finite): exp(x + iy) - 1 = expm1(x) cos(y) - 2 sin(y/2)^2 + i exp(x) sin(y), without
    # exp(z) - 1's cancellation near 0 (and 2 pi i k); elsewhere |exp(z)| is e^|x| >= e or <= 1/e, far from 1, and
    # exp(z) - 1 takes C's cexp's values at infinities and NaNs.
    w, dtype = _widened(x)
    a, b = _k.real(w), _k.imag(w)
    half = _k.sin(b / 2)
    # (+ 0.0: the standard's expm1(-0 + 0j) is +0 + 0j, where -0 - 0 would be -0)
    re = (_k.expm1(a) * _k.cos(b) - 2 * half * half) + 0.0
    near = _k.make_complex(re, _k.where(b == 0, b, _k.exp(a) * _k.sin(b)))
    out = _k.where(_k.logical_and(_k.abs(a) < 1, _k.isfinite(b)), near, _plus_real(_k.exp(w), -1))
    return out if out.dtype == dtype else out.astype(dtype)


@_export
def log1p(x, /):
    if not _is_complex(x):
        return _k.log1p(x)
    # |z| < 1/2: log|1 + z| = 1/2 log1p(2x + x^2 + y^2) (no cancellation near 0); elsewhere log(1 + z)
    w, dtype = _widened(x)
    a, b = _k.real(w), _k.imag(w)
    near = _k.abs(w) < 0.5
    small = _k.make_complex(0.5 * _k.log1p(a * (2 + a) + b * b), _k.arctan2(b, 1 + a))
    out = _k.where(near, small, _k.log(_plus_real(w, 1)))
    return out if out.dtype == dtype else out.astype(dtype)


def _log_base(name, kiln_function, ln_base):
    def function(x, /):
        if not _is_complex(x):
            return kiln_function(x)
        # log(z) / log(base), part by part (a complex quotient would make NaNs of log(0)'s infinite part)
        out = _k.log(x)
        return _join(_k.real(out) / ln_base, _k.imag(out) / ln_base, x.dtype)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"The Array API's {name}: kiln.{name}; of complex z, log(z) / log({name[3:]})."
    return _export(function)


log2 = _log_base("log2", _k.log2, _LN2)
log10 = _log_base("log10", _k.log10, _LN10)


@_export
def tanh(x, /):
    out = _k.tanh(x)
    if not _is_complex(x):
        return out
    # tanh(+-inf + iy), y finite: the standard's +-1 + 0j with the sign of y on the zero (tanh is odd and commutes
    # with conj); C's ctanh (kiln's kernel) gives 0 * sin(2y), whose sign is sin(2y)'s
    re, im = _k.real(x), _k.imag(x)
    fix = _k.logical_and(_k.isinf(re), _k.isfinite(im))
    return _join(_k.real(out), _k.where(fix, copysign(_k.zeros_like(im), im), _k.imag(out)), x.dtype)


@_export
def sign(x, /):
    if not _is_complex(x):
        return _k.sign(x)
    # the standard's (and NumPy 2's) z / |z|, 0 at 0
    size = _k.abs(x)
    zero = size == 0
    safe = _k.where(zero, 1, size)
    return _join(_k.where(zero, 0, _k.real(x) / safe), _k.where(zero, 0, _k.imag(x) / safe), x.dtype)


@_export
def round(x, /):  # noqa: A001  (the standard's name)
    if not _is_complex(x):
        return _k.round(x)
    return _join(_k.round(_k.real(x)), _k.round(_k.imag(x)), x.dtype)


@_export
def copysign(x1, x2, /):
    magnitude = _k.abs(x1)
    out = _k.where(signbit(x2), -magnitude, magnitude)
    return _k.astype(out, _k.promote_types(x1.dtype, x2.dtype))


@_export
def hypot(x1, x2, /):
    a, b = _k.abs(x1), _k.abs(x2)
    big, small = _k.maximum(a, b), _k.minimum(a, b)
    # big * sqrt(1 + (small / big)^2) cannot overflow where big^2 would; inf wins over NaN as C's hypot.
    ratio = _k.where(big == 0, 0 * big, small / _k.where(big == 0, 1 + 0 * big, big))
    out = big * _k.sqrt(1 + ratio * ratio)
    return _k.where(_k.logical_or(_k.isinf(a), _k.isinf(b)), _k.full_like(out, float("inf")), out)


_BITS = {_k.int8: 8, _k.int16: 16, _k.int32: 32, _k.int64: 64, _k.uint8: 8}


def _shift_amount(x1, x2):
    # The shift in int64, and its two halves as powers of two (2**31 at most each, so that neither power
    # overflows int64 and x1 * low * high wraps as C's shift does).
    shift = _k.astype(_k.asarray(x2, device=x1.device), _k.int64)
    low = _k.minimum(shift, 31)
    high = _k.maximum(_k.minimum(shift, 62) - 31, 0)
    two = _k.asarray(2, dtype=_k.int64, device=x1.device)
    return shift, _k.power(two, low), _k.power(two, high)


@_export
def bitwise_left_shift(x1, x2, /):
    shift, low, high = _shift_amount(x1, x2)
    out = _k.astype(_k.multiply(_k.multiply(_k.astype(x1, _k.int64), low), high), x1.dtype)
    # Shifts by the width or more leave no bits (the standard's choice, as NumPy's).
    return _k.where(shift >= _BITS[x1.dtype], _k.zeros_like(out), out)


@_export
def bitwise_right_shift(x1, x2, /):
    shift, low, high = _shift_amount(x1, x2)
    out = _k.astype(_k.floor_divide(_k.floor_divide(_k.astype(x1, _k.int64), low), high), x1.dtype)
    # An arithmetic shift by the width or more leaves the sign: -1 for negatives, 0 otherwise.
    sign = _k.astype(_k.where(x1 < 0, -1, 0), x1.dtype)
    return _k.where(shift >= _BITS[x1.dtype] - 1, sign, out) if x1.dtype != _k.uint8 else \
        _k.where(shift >= 8, _k.zeros_like(out), out)


@_export
def clip(x, /, min=None, max=None):  # noqa: A002  (the standard's names)
    out = x
    # A Python bound is made in x's dtype directly: through float32 (kiln's default) a float64 bound would round.
    if min is not None:
        bound = min if isinstance(min, _Array) else _k.asarray(min, dtype=x.dtype, device=x.device)
        out = _k.where(out < bound, _k.astype(bound, x.dtype), out)
    if max is not None:
        bound = max if isinstance(max, _Array) else _k.asarray(max, dtype=x.dtype, device=x.device)
        out = _k.where(out > bound, _k.astype(bound, x.dtype), out)
    return out if out is not x else _k.copy(x)


# ---------------------------------------------------------------- linear algebra
@_export
def matmul(x1, x2, /):
    return _k.matmul(x1, x2)


@_export
def matrix_transpose(x, /):
    return x.mT


@_export
def tensordot(x1, x2, /, *, axes=2):
    return _k.tensordot(x1, x2, axes)


@_export
def vecdot(x1, x2, /, *, axis=-1):
    if x1.shape[axis] != x2.shape[axis]:
        raise ValueError(f"vecdot: axis {axis} has {x1.shape[axis]} elements in x1 but {x2.shape[axis]} in x2 "
                         "(the contracted axis is not broadcast)")
    product = (_k.conj(x1) if _is_complex(x1) else x1) * x2  # the standard's sum of conj(x1) * x2
    return _k.astype(_k.sum(product, axis=axis), product.dtype)


# ---------------------------------------------------------------- manipulation functions
@_export
def broadcast_arrays(*arrays):
    return list(_k.broadcast_arrays(*arrays))


@_export
def broadcast_to(x, /, shape):
    return _k.broadcast_to(x, shape)


@_export
def concat(arrays, /, *, axis=0):
    if axis is None:
        return _k.concatenate([_k.ravel(a) for a in arrays], 0)
    return _k.concatenate(list(arrays), axis)


@_export
def expand_dims(x, /, axis=0):
    if not -x.ndim - 1 <= axis <= x.ndim:  # the standard asks for IndexError here (kiln raises ShapeError)
        raise IndexError(f"expand_dims: axis {axis} is out of bounds for an array of {x.ndim} axes "
                         f"(valid: {-x.ndim - 1} .. {x.ndim})")
    return _k.expand_dims(x, axis)


@_export
def flip(x, /, *, axis=None):
    return _k.flip(x, axis)


@_export
def moveaxis(x, source, destination, /):
    if isinstance(source, int):
        return _k.moveaxis(x, source, destination)
    order = [a % x.ndim for a in source]
    targets = [d % x.ndim for d in destination]
    rest = [a for a in range(x.ndim) if a not in order]
    axes = [None] * x.ndim
    for s, d in zip(order, targets):
        axes[d] = s
    it = iter(rest)
    return _k.permute_dims(x, [a if a is not None else next(it) for a in axes])


@_export
def permute_dims(x, /, axes):
    return _k.permute_dims(x, axes)


@_export
def repeat(x, repeats, /, *, axis=None):
    return _k.repeat(x, repeats, axis)


@_export
def reshape(x, /, shape, *, copy=None):
    out = _k.reshape(x, shape)
    return _k.copy(out) if copy else out


@_export
def roll(x, /, shift, *, axis=None):
    return _k.roll(x, shift, axis)


@_export
def squeeze(x, /, axis):
    return _k.squeeze(x, axis)


@_export
def stack(arrays, /, *, axis=0):
    return _k.stack(list(arrays), axis)


@_export
def tile(x, repetitions, /):
    return _k.tile(x, repetitions)


@_export
def unstack(x, /, *, axis=0):
    moved = _k.moveaxis(x, axis, 0)
    return tuple(moved[i] for i in range(moved.shape[0]))


@_export
def take(x, indices, /, *, axis=None):
    return _k.take(x, indices, axis)


# ---------------------------------------------------------------- searching functions
@_export
def argmax(x, /, *, axis=None, keepdims=False):
    return _k.argmax(x, axis, keepdims)


@_export
def argmin(x, /, *, axis=None, keepdims=False):
    return _k.argmin(x, axis, keepdims)


@_export
def nonzero(x, /):
    if x.ndim == 0:
        raise ValueError("nonzero: a 0-d array has no axes to index (x[None] for a 1-d one)")
    flat = _k.flatnonzero(x)
    out, stride = [], 1
    for extent in reversed(x.shape):
        out.append((flat // stride) % extent)
        stride *= extent
    return tuple(reversed(out))


@_export
def searchsorted(x1, x2, /, *, side="left", sorter=None):
    if sorter is not None:
        x1 = _k.take(x1, sorter)
    return _k.searchsorted(x1, x2, side)


@_export
def where(condition, x1, x2, /):
    return _k.where(condition, x1, x2)


# ---------------------------------------------------------------- set functions
UniqueAllResult = _namedtuple("UniqueAllResult", ["values", "indices", "inverse_indices", "counts"])
UniqueCountsResult = _namedtuple("UniqueCountsResult", ["values", "counts"])
UniqueInverseResult = _namedtuple("UniqueInverseResult", ["values", "inverse_indices"])


def _complex_unique(x):
    """kiln's unique sorts, and complex numbers have no order there: values, first indices, inverse indices and
    counts from stable sorts instead, in NumPy's order (the values without NaNs by real part, then imaginary
    part; then those with a NaN imaginary part, a NaN real part, both). Every value with a NaN part is distinct
    (NaN != NaN), as the standard asks."""
    flat = _k.reshape(x, (-1,))
    if flat.shape[0] == 0:
        empty = _k.zeros((0,), dtype=_k.int64, device=x.device)
        return flat, empty, _k.reshape(empty, x.shape), empty
    re, im = _k.real(flat), _k.imag(flat)
    order = _k.argsort(im, 0)
    for key in (re, _k.astype(_k.isnan(im), _k.int8) + 2 * _k.astype(_k.isnan(re), _k.int8)):
        order = _k.take(order, _k.argsort(_k.take(key, order), 0))  # stable: equal keys keep the last order
    ordered = _k.take(flat, order)
    new = _k.concatenate([_k.ones((1,), dtype=_k.bool, device=x.device),
                          _k.not_equal(ordered[1:], ordered[:-1])], 0)
    starts = _k.flatnonzero(new)
    ends = _k.concatenate([starts[1:], _k.full((1,), flat.shape[0], dtype=starts.dtype, device=x.device)], 0)
    group = _k.cumsum(_k.astype(new, _k.int64), 0) - 1
    inverse = _k.take(group, _k.argsort(order, 0))
    return _k.take(ordered, starts), _k.take(order, starts), _k.reshape(inverse, x.shape), ends - starts


@_export
def unique_all(x, /):
    if _is_complex(x):
        return UniqueAllResult(*_complex_unique(x))
    values, indices, inverse, counts = _k.unique(x, True, True, True)
    return UniqueAllResult(values, indices, _k.reshape(inverse, x.shape), counts)


@_export
def unique_counts(x, /):
    if _is_complex(x):
        values, _, _, counts = _complex_unique(x)
        return UniqueCountsResult(values, counts)
    values, counts = _k.unique(x, False, False, True)
    return UniqueCountsResult(values, counts)


@_export
def unique_inverse(x, /):
    if _is_complex(x):
        values, _, inverse, _ = _complex_unique(x)
        return UniqueInverseResult(values, inverse)
    values, inverse = _k.unique(x, False, True, False)
    return UniqueInverseResult(values, _k.reshape(inverse, x.shape))


@_export
def unique_values(x, /):
    return _complex_unique(x)[0] if _is_complex(x) else _k.unique_values(x)


# ---------------------------------------------------------------- sorting functions
@_export
def argsort(x, /, *, axis=-1, descending=False, stable=True):
    if not descending:
        return _k.argsort(x, axis)
    # Stable descending order: sort the flipped array ascending, then map the indices back and flip again.
    n = x.shape[axis] if x.ndim else 1
    return _k.flip(n - 1 - _k.argsort(_k.flip(x, axis), axis), axis)


@_export
def sort(x, /, *, axis=-1, descending=False, stable=True):
    out = _k.sort(x, axis)
    return _k.flip(out, axis) if descending else out


# ---------------------------------------------------------------- statistical and utility functions
def _cast_for(name, x, dtype):
    """x in the dtype= asked of a reduction; complex to real refused, as astype refuses it."""
    if _is_complex(x) and dtype not in _COMPLEX:
        raise TypeError(f"{name}: dtype={dtype} is real but x is {x.dtype} (the imaginary part would be lost); "
                        f"reduce real(x), imag(x) or abs(x), or pass a complex dtype")
    return x.astype(dtype)


def _reduce(kiln_function, x, axis, keepdims, dtype=None):
    if dtype is not None and dtype != x.dtype:
        x = _cast_for(kiln_function.__name__, x, dtype)
    out = kiln_function(x, axis, keepdims)
    return out.astype(dtype) if dtype is not None and out.dtype != dtype else out


@_export
def max(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _k.max(x, axis, keepdims)


@_export
def min(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _k.min(x, axis, keepdims)


@_export
def mean(x, /, *, axis=None, keepdims=False):
    return _k.mean(x, axis, keepdims)


@_export
def sum(x, /, *, axis=None, dtype=None, keepdims=False):  # noqa: A001
    return _reduce(_k.sum, x, axis, keepdims, dtype)


@_export
def prod(x, /, *, axis=None, dtype=None, keepdims=False):
    return _reduce(_k.prod, x, axis, keepdims, dtype)


def _moments(x, axis, correction, keepdims):
    mu = _k.mean(x, axis, True)
    d = x - mu
    total = _k.sum(d * d, axis, keepdims)
    count = x.size if axis is None else 1
    if axis is not None:
        for a in (axis,) if isinstance(axis, int) else axis:
            count *= x.shape[a]
    return total / (count - correction)


@_export
def var(x, /, *, axis=None, correction=0.0, keepdims=False):
    return _moments(x, axis, correction, keepdims)


@_export
def std(x, /, *, axis=None, correction=0.0, keepdims=False):
    return _k.sqrt(_moments(x, axis, correction, keepdims))


@_export
def cumulative_sum(x, /, *, axis=None, dtype=None, include_initial=False):
    if axis is None:
        if x.ndim > 1:
            raise ValueError("cumulative_sum: axis is required for an array of more than one axis")
        axis = 0
    if dtype is not None and dtype != x.dtype:
        x = _cast_for("cumulative_sum", x, dtype)
    if _is_complex(x):  # kiln's cumsum takes real arrays: the parts' sums, joined
        out = _join(_k.cumsum(_k.real(x), axis), _k.cumsum(_k.imag(x), axis), x.dtype)
    else:
        out = _k.cumsum(x, axis)
    if dtype is not None and out.dtype != dtype:
        out = out.astype(dtype)
    if include_initial:
        shape = list(out.shape)
        shape[axis] = 1
        out = _k.concatenate([_k.zeros(tuple(shape), dtype=out.dtype, device=out.device), out], axis)
    return out


@_export
def all(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _k.all(_k.not_equal(x, 0) if _is_complex(x) else x, axis, keepdims)  # kiln's take real arrays


@_export
def any(x, /, *, axis=None, keepdims=False):  # noqa: A001
    return _k.any(_k.not_equal(x, 0) if _is_complex(x) else x, axis, keepdims)


del _name, _kiln_name
