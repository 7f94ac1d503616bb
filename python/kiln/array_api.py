"""kiln as an Array API namespace (the 2023.12 standard): `xp = x.__array_namespace__()` or `import
kiln.array_api as xp`.

The functions take the standard's names and signatures (positional-only and keyword-only parameters as the
standard writes them) and run kiln's ops: most are the bindings themselves, the rest are composed of them here,
so every function runs on every device kiln has. The standard's two optional extensions are both here: `linalg`
(kiln.linalg under the standard's signatures) and `fft` (kiln.fft's). docs/python.md lists the Array API test
suite's results.
"""

import builtins as _builtins
import math as _math

from . import _kiln as _k
from ._kiln import Array as _Array

__array_api_version__ = "2023.12"

# ---------------------------------------------------------------- data types and constants
bool = _k.bool  # noqa: A001  (the standard's name)
int8, int16, int32, int64, uint8 = _k.int8, _k.int16, _k.int32, _k.int64, _k.uint8
float32, float64 = _k.float32, _k.float64
complex64, complex128 = _k.complex64, _k.complex128

e, pi, inf, nan = _math.e, _math.pi, _math.inf, _math.nan
newaxis = None

_SIGNED = (int8, int16, int32, int64)
_UNSIGNED = (uint8,)
_INTEGRAL = _SIGNED + _UNSIGNED
_FLOATING = (float32, float64)
_COMPLEX = (complex64, complex128)
_NUMERIC = _INTEGRAL + _FLOATING + _COMPLEX
_ALL = (bool,) + _NUMERIC


def _dtype(x):
    return x.dtype if isinstance(x, _Array) else _k.dtype(x)


# ---------------------------------------------------------------- the namespace's inspection API
class _Info:
    """What __array_namespace_info__() returns: kiln's devices, dtypes and capabilities."""

    __module__ = "kiln.array_api"

    def capabilities(self):
        # kiln::kMaxRank: the most axes an op's operands may have (views of any rank are fine).
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 16}

    def default_device(self):
        return _k.current_device()  # where creation functions allocate: kiln.set_current_device changes it

    def devices(self):
        return [_k.cpu()] + [_k.cuda(i) for i in range(_k.num_gpus())]

    def default_dtypes(self, *, device=None):
        return {"real floating": float32, "complex floating": complex64, "integral": int64, "indexing": int64}

    def dtypes(self, *, device=None, kind=None):
        if kind is None:
            chosen = _ALL
        else:
            chosen = tuple(t for t in _ALL if isdtype(t, kind))
        return {str(t): t for t in chosen}


def __array_namespace_info__():
    return _Info()


# ---------------------------------------------------------------- data type functions
def isdtype(dtype, kind):
    if isinstance(kind, tuple):
        return _builtins.any(isdtype(dtype, k) for k in kind)
    if isinstance(kind, str):
        groups = {
            "bool": (bool,),
            "signed integer": _SIGNED,
            "unsigned integer": _UNSIGNED,
            "integral": _INTEGRAL,
            "real floating": _FLOATING,
            "complex floating": _COMPLEX,
            "numeric": _NUMERIC,
        }
        if kind not in groups:
            raise ValueError(f"isdtype: unknown kind {kind!r} (one of {', '.join(groups)})")
        return dtype in groups[kind]
    return dtype == kind


def result_type(*arrays_and_dtypes):
    if not arrays_and_dtypes:
        raise ValueError("result_type: at least one array or dtype is required")
    dtypes = [_dtype(a) for a in arrays_and_dtypes]
    out = dtypes[0]
    for t in dtypes[1:]:
        out = _k.promote_types(out, t)
    return out


def _kind(dtype):
    # The standard's kinds, in the order its mixed-kind promotion allows: a real floating dtype promotes to a
    # complex one; no other kind mixes with another.
    return 0 if dtype == bool else 1 if dtype in _INTEGRAL else 2 if dtype in _FLOATING else 3


def can_cast(from_, to, /):
    source = _dtype(from_)
    if source == to:
        return True
    kinds = (_kind(source), _kind(to))
    if kinds[0] != kinds[1] and kinds != (2, 3):
        return False  # the standard promotes within a kind only (and real floating to complex floating)
    return _k.promote_types(source, to) == to


class finfo_object:
    """The machine limits of a floating dtype (finfo); those of a complex dtype are its parts' (dtype float32
    for complex64, float64 for complex128), as the standard says."""

    def __init__(self, dtype):
        single = dtype in (float32, complex64)
        self.bits = 32 if single else 64
        self.eps = 2.0**-23 if single else 2.0**-52
        self.max = 3.4028234663852886e38 if single else 1.7976931348623157e308
        self.min = -self.max
        self.smallest_normal = 2.0**-126 if single else 2.0**-1022
        self.dtype = float32 if single else float64


class iinfo_object:
    """The range of an integer dtype (iinfo)."""

    def __init__(self, dtype):
        self.bits = {int8: 8, int16: 16, int32: 32, int64: 64, uint8: 8}[dtype]
        signed = dtype in _SIGNED
        self.min = -(2 ** (self.bits - 1)) if signed else 0
        self.max = 2 ** (self.bits - 1) - 1 if signed else 2**self.bits - 1
        self.dtype = dtype


def finfo(type, /):  # noqa: A002  (the standard's name)
    dtype = _dtype(type)
    if dtype not in _FLOATING + _COMPLEX:
        raise ValueError(f"finfo: {dtype} is not a floating dtype (float32, float64, complex64, complex128)")
    return finfo_object(dtype)


def iinfo(type, /):  # noqa: A002
    dtype = _dtype(type)
    if dtype not in _INTEGRAL:
        raise ValueError(f"iinfo: {dtype} is not an integer dtype")
    return iinfo_object(dtype)


def astype(x, dtype, /, *, copy=True, device=None):
    if device is not None:
        x = x.to_device(device)
    if x.dtype == dtype:
        return _k.copy(x) if copy else x
    if x.dtype in _COMPLEX and dtype != bool and dtype not in _COMPLEX:
        # The standard: casting complex to a real dtype "should not be permitted" (which part would it keep?).
        raise TypeError(f"astype: cannot cast {x.dtype} to {dtype}, a real dtype (the imaginary part would be "
                        f"lost); take real(x) or imag(x), or abs(x), first")
    return x.astype(dtype)


# ---------------------------------------------------------------- creation functions
def asarray(obj, /, *, dtype=None, device=None, copy=None):
    if copy is False and not isinstance(obj, _Array) and not hasattr(obj, "__dlpack__"):
        raise ValueError("asarray: copy=False needs an array to share (this object must be copied)")
    flat = _flatten(obj) if isinstance(obj, (list, tuple)) else None
    arrays = [v for v in flat if isinstance(v, _Array)] if flat else []
    if arrays:
        # A nested sequence holding arrays (0-d ones, as x[i, j]): stacked where they are, so GPU arrays never
        # pass through NumPy.
        if copy is False:
            raise ValueError("asarray: copy=False but a sequence of arrays must be copied into one")
        where = device if device is not None else arrays[0].device
        out = _k.stack([asarray(v, device=where) for v in obj])
        return out if dtype is None or out.dtype == dtype else out.astype(dtype)
    if flat is not None and dtype is None:
        # The standard's default dtypes: a nested sequence of bools, ints, floats or complex numbers.
        if flat and _builtins.all(isinstance(v, _builtins.bool) for v in flat):
            dtype = bool
        elif flat and _builtins.all(isinstance(v, int) for v in flat):
            dtype = int64
        elif flat and _builtins.all(isinstance(v, (int, float)) for v in flat):
            dtype = float32
        elif flat and _builtins.all(isinstance(v, (int, float, complex)) for v in flat):
            dtype = complex64
    if copy is not True and isinstance(obj, _Array) and dtype in (None, obj.dtype) and device in (None, obj.device):
        return obj
    out = _k.asarray(obj, dtype=dtype, device=device)
    if copy and (isinstance(obj, _Array) or hasattr(obj, "__dlpack__")):
        out = _k.copy(out)  # the result may share obj's memory (a new Array object over the same storage)
    elif copy is False and out is not obj and isinstance(obj, _Array):
        raise ValueError("asarray: copy=False but the dtype or device asked for needs a copy")
    return out


def _flatten(seq):
    out = []
    for v in seq:
        if isinstance(v, (list, tuple)):
            out.extend(_flatten(v))
        else:
            out.append(v)
    return out


def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
    if stop is None:
        start, stop = 0, start
    if dtype is None and _builtins.all(isinstance(v, int) for v in (start, stop, step)):
        dtype = int64
    return _k.arange(start, stop, step, dtype=dtype, device=device)


def empty(shape, *, dtype=None, device=None):
    return _k.empty(shape, dtype=dtype, device=device)


def zeros(shape, *, dtype=None, device=None):
    return _k.zeros(shape, dtype=dtype, device=device)


def ones(shape, *, dtype=None, device=None):
    return _k.ones(shape, dtype=dtype, device=device)


def full(shape, fill_value, *, dtype=None, device=None):
    if dtype is None:
        dtype = bool if isinstance(fill_value, _builtins.bool) else int64 if isinstance(fill_value, int) \
            else complex64 if isinstance(fill_value, complex) else float32
    return _k.full(shape, fill_value, dtype=dtype, device=device)


def empty_like(x, /, *, dtype=None, device=None):
    return _k.empty_like(x, dtype=dtype, device=device)


def zeros_like(x, /, *, dtype=None, device=None):
    return _k.zeros_like(x, dtype=dtype, device=device)


def ones_like(x, /, *, dtype=None, device=None):
    return _k.ones_like(x, dtype=dtype, device=device)


def full_like(x, /, fill_value, *, dtype=None, device=None):
    return _k.full_like(x, fill_value, dtype=dtype, device=device)


def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
    width = n_rows if n_cols is None else n_cols
    k = _builtins.max(_builtins.min(k, width), -n_rows)  # a diagonal past the corner: all zeros, as any k beyond
    return _k.eye(n_rows, n_cols, k, dtype=dtype, device=device)


def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
    if isinstance(start, complex) or isinstance(stop, complex) or dtype in _COMPLEX:
        # The real and imaginary parts are each evenly spaced: two real linspaces, joined.
        dtype = complex64 if dtype is None else dtype
        part = float32 if dtype == complex64 else float64
        start, stop = complex(start), complex(stop)
        re = _k.linspace(start.real, stop.real, num, endpoint=endpoint, dtype=part, device=device)
        im = _k.linspace(start.imag, stop.imag, num, endpoint=endpoint, dtype=part, device=device)
        return _k.make_complex(re, im)
    return _k.linspace(start, stop, num, endpoint=endpoint, dtype=dtype, device=device)


def meshgrid(*arrays, indexing="xy"):
    return list(_k.meshgrid(*arrays, indexing=indexing))


def tril(x, /, *, k=0):
    return _k.tril(x, k)


def triu(x, /, *, k=0):
    return _k.triu(x, k)


def from_dlpack(x, /, *, device=None, copy=None):
    out = _k.from_dlpack(x)  # shares x's memory
    if device is not None and out.device != device:
        if copy is False:
            raise ValueError(f"from_dlpack: copy=False but x is on {out.device}, not {device}")
        return out.to(device)
    return _k.copy(out) if copy else out


from ._array_api_functions import *  # noqa: E402,F401,F403  (elementwise, manipulation, statistics...)
from ._array_api_functions import __all__ as _functions  # noqa: E402
from . import _array_api_linalg as linalg  # noqa: E402  (the linear algebra extension)
from . import _array_api_fft as fft  # noqa: E402  (the FFT extension)

__all__ = [
    "__array_api_version__", "__array_namespace_info__", "bool", "int8", "int16", "int32", "int64", "uint8",
    "float32", "float64", "complex64", "complex128", "e", "pi", "inf", "nan", "newaxis", "isdtype", "result_type",
    "can_cast", "finfo", "iinfo", "astype", "asarray", "arange", "empty", "zeros", "ones", "full", "empty_like",
    "zeros_like", "ones_like", "full_like", "eye", "linspace", "meshgrid", "tril", "triu", "from_dlpack", "linalg",
    "fft",
] + _functions
