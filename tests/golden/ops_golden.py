"""NumPy golden data for kiln's elementwise ops, casts and C++ operators (tests/harness/op_table_test.cpp).

Run as `python3 ops_golden.py OUTDIR`; writes OUTDIR/ops/OP.DTYPE.npy (the arrays of all cases of one op
and dtype, flattened and concatenated: a few hundred small files rather than thousands), OUTDIR/ops/manifest.txt
and finally OUTDIR/ops_golden.stamp. Needs NumPy >= 2 (NEP 50 weak Python scalars).

The OPS table below declares every op once: name, arity, NumPy reference, the dtypes it supports and whether its float results are correctly rounded ("exact":
compared bit for bit by the harness) or come from a libm-like function ("math": compared within a few ulps;
the reference is then computed in higher precision, float64 -- long double for float64 results -- and
rounded once to the result dtype; "approx" ops -- gelu's two forms -- are computed the same way and compared
within 64 ulps for float64). Ops with `large` get large |x| among their inputs besides the specials.
How an op's inputs are generated is the op table's domain column (src/core/ops_internal.def, read by
`table_domains`): DOMAINS below defines each domain name as one input generator per operand; the C++
operators (op_add, op_iadd, ...) use the domain of the op they call.
The harness (tests/harness/op_table_test.cpp) takes its op list from include/kiln/ops.def and these dtypes
from the manifest; a test fails when an op of ops.def has no cases here or its kind differs from the
accuracy column.

manifest.txt: lines starting with `#op NAME ARITY DTYPE,DTYPE,.. KIND` repeat the table; every other line is
one case, space separated `key=value` fields:
  op=NAME case=ID dtype=EXPECTED_DTYPE expected=SPEC [to=DTYPE] in=SPEC in=SPEC ...
  SPEC is  arr:FILE@OFFSET:SHAPE:RECIPE | bf16:FILE@OFFSET:SHAPE:RECIPE | int:VALUE | float:VALUE | bool:0|1
An array is the C-order block of prod(SHAPE) elements at element OFFSET of FILE (a 1-d .npy), SHAPE written
like NumPy: (3,1,5), (5,), ().
RECIPE rebuilds the layout NumPy used from the stored base array: `plain`, `T` (reverse all axes), or
`sliceAxSTEP` (e.g. slice1x2 = base[:, ::2]). int/float/bool operands are Python scalars (weak, NEP 50);
float values are written with repr() (round-trips exactly; inf/nan as `inf`, `-inf`, `nan`).
bfloat16 (absent from NumPy) is stored as int16 bit patterns (`bf16:` prefix): inputs are float32 values
exactly representable in bfloat16; results are computed in float32 (or higher) and rounded to bfloat16 with
round-to-nearest-even by bit manipulation. bfloat16 promotes as ml_dtypes does: like float16, except that
bfloat16 with float16 gives float32; a weak scalar meeting a bfloat16 computation is first rounded to
bfloat16 (as NumPy does for float16).

Case ids (D = dtype): basic_D (unary; float specials or integer extremes first, then random values in the
op's domain), broadcast_D ((E,1,3) with (E,3); binary ones hold every pair of specials/extremes), mixed_D1_D2,
transposed_D, strided_D, strided_transposed_D, zero_d_D, empty_D, zero_d_int8_int64_promotes (a 0-d array is
not weak), scalar_{int,float,bool}_D and scalar_left_{int,float}_D (Python scalars), zero_divisor_D,
negative_exponent_kiln_rule_D, scalar_out_of_range_D (comparisons); astype: SRC_to_DST (a transposed view;
floats going to integers stay in range, where C++ would be undefined), special_SRC_to_DST (NaN, inf, -0,
subnormals, overflow) and double_rounding_float64_to_float16 (NumPy rounds once, not through float32).

kiln's documented choices where NumPy raises or warns are encoded explicitly: integer floor_divide/remainder
by zero give 0 (NumPy agrees, with a warning), integer power with a negative exponent gives 0 (1 for base 1,
+-1 for base -1) where NumPy raises.
"""
import math
import os
import sys
import zlib
from dataclasses import dataclass, field

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib"))
from op_domains import *  # noqa: F401,F403 (dtypes, bfloat16 rounding, input domains, the op table's domain column)


@dataclass
class Op:
    name: str
    arity: int
    fn: object  # NumPy reference (values in, array out)
    dtypes: list
    domains: list  # one Domain per operand
    kind: str = "exact"  # "exact", "math" or "approx" (see the module docstring)
    extremes: bool = True  # integer min/max (and float specials) go into the inputs
    large: list = None  # extra float specials (large |x|, signbit's -NaN) injected after SPECIALS
    mixed: list = field(default_factory=list)  # extra dtype combinations, one tuple per case
    int_scalar: int = 3
    float_scalar: float = 0.1
    cast_to: str = None  # astype only


def relu(x):
    return np.maximum(x, np.zeros((), dtype=x.dtype))


def sigmoid(x):
    x = np.asarray(x)
    x = x.astype(np.exp(np.zeros((), x.dtype)).dtype)  # integers and bool: the float type exp gives
    return 1 / (1 + np.exp(-x))


def float_loop(fn):
    """fn computed in float64 (or the longdouble the math reference passes) on the dtype NumPy's float
    loops give the input, as np.exp types its result: bool/int8/uint8 -> float16, int16 -> float32, ..."""
    def run(*xs):
        xs = [np.asarray(x) for x in xs]
        out = np.result_type(*[np.exp(np.zeros((), x.dtype)) for x in xs])
        high = np.longdouble if out == np.longdouble else np.float64
        with np.errstate(all="ignore"):
            return np.asarray(fn(*[x.astype(high) for x in xs])).astype(out)
    return run


_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])
SQRT_2_OVER_PI = np.sqrt(np.longdouble(2) / np.pi)


def gelu(x):
    """x * Phi(x) = x/2 * erfc(z), z = -x/sqrt(2), with z in long double: math.erfc takes z rounded to double
    (z_hi) and the rest (z - z_hi) is added to first order, erfc(z) = erfc(z_hi) - 2/sqrt(pi) exp(-z_hi^2) r."""
    z = -x.astype(np.longdouble) / np.sqrt(np.longdouble(2))
    z_hi = z.astype(np.float64)
    r = np.nan_to_num(z - z_hi.astype(np.longdouble), nan=0.0, posinf=0.0, neginf=0.0)
    e = _erfc(z_hi).astype(np.longdouble) - 2 / np.sqrt(np.longdouble(np.pi)) * np.exp(-np.square(z_hi.astype(np.longdouble))) * r
    return (0.5 * x * e).astype(x.dtype)


def gelu_tanh(x):  # PyTorch's approximate="tanh": x/2 * (1 + tanh(u)) = x / (1 + exp(-2u))
    u = SQRT_2_OVER_PI.astype(x.dtype) * (x + 0.044715 * x ** 3)
    return x / (1 + np.exp(-2 * u))


def iop(fn):
    """In-place form `a op= b`: the result is cast to a's dtype (same_kind), as NumPy's `a += b`."""
    def run(a, b):
        out = np.array(a, copy=True)
        fn(out, b, out=out, casting="same_kind")
        return out
    return run


ARITH_MIXED = [("int8", "uint8"), ("bool", "int16"), ("int32", "float32"), ("int16", "float16"),
               ("float16", "bfloat16"), ("bfloat16", "int8")]
INT_MIXED = [("int8", "uint8"), ("bool", "int32"), ("int16", "int64")]

def unary(name, fn, dtypes, kind="exact", **kw):
    return Op(name, 1, fn, dtypes, table_domains(name, 1), kind, **kw)


def binary(name, fn, dtypes, kind="exact", **kw):
    return Op(name, 2, fn, dtypes, table_domains(name, 2), kind, **kw)


def ternary(name, fn, dtypes, kind="exact", **kw):
    return Op(name, 3, fn, dtypes, table_domains(name, 3), kind, **kw)


OPS = [
    unary("negative", np.negative, NUMERIC),
    unary("abs", np.abs, ALL),
    unary("sign", np.sign, NUMERIC),
    unary("exp", np.exp, ALL, "math"),
    unary("exp2", np.exp2, ALL, "math"),
    unary("log", np.log, ALL, "math"),
    unary("log2", np.log2, ALL, "math"),
    unary("log10", np.log10, ALL, "math"),
    unary("log1p", np.log1p, ALL, "math"),
    unary("expm1", np.expm1, ALL, "math"),
    unary("sqrt", np.sqrt, ALL, "math"),
    unary("square", np.square, ALL),
    unary("sin", np.sin, ALL, "math"),
    unary("cos", np.cos, ALL, "math"),
    unary("tan", np.tan, ALL, "math"),
    unary("arcsin", np.arcsin, ALL, "math"),
    unary("arccos", np.arccos, ALL, "math"),
    unary("arctan", np.arctan, ALL, "math"),
    unary("sinh", np.sinh, ALL, "math"),
    unary("cosh", np.cosh, ALL, "math"),
    unary("tanh", np.tanh, ALL, "math"),
    unary("sigmoid", sigmoid, ALL, "math"),
    unary("relu", relu, ALL),
    unary("erf", float_loop(_erf), ALL, "math", large=LARGE),
    unary("softplus", float_loop(lambda x: np.logaddexp(np.zeros((), x.dtype), x)), ALL, "math", large=LARGE),
    unary("gelu", float_loop(gelu), ALL, "approx", large=LARGE),
    # float64 results of the tanh form lose about 0.1 * |x|^3 ulp below x = -6 (exp magnifies u's rounding):
    # its domain, Moderate, stays above
    unary("gelu_tanh", float_loop(gelu_tanh), ALL, "approx", large=LARGE),
    unary("silu", float_loop(lambda x: x / (1 + np.exp(-x))), ALL, "math", large=LARGE),
    unary("floor", np.floor, ALL),
    unary("ceil", np.ceil, ALL),
    unary("round", np.round, ALL),
    unary("trunc", np.trunc, ALL),
    unary("logical_not", np.logical_not, ALL),
    unary("isnan", np.isnan, ALL),
    unary("isinf", np.isinf, ALL),
    unary("isfinite", np.isfinite, ALL),
    # -NaN besides the specials' NaN: only the sign bit tells them apart
    unary("signbit", np.signbit, ALL, large=[-np.nan]),
    unary("bitwise_not", np.bitwise_not, BITWISE),
    binary("add", np.add, ALL, mixed=ARITH_MIXED),
    binary("subtract", np.subtract, NUMERIC, mixed=ARITH_MIXED[:1] + ARITH_MIXED[2:]),
    binary("multiply", np.multiply, ALL, mixed=ARITH_MIXED),
    binary("divide", np.divide, ALL, mixed=ARITH_MIXED),
    binary("floor_divide", np.floor_divide, ALL, mixed=ARITH_MIXED, int_scalar=5),
    binary("remainder", np.remainder, ALL, mixed=ARITH_MIXED, int_scalar=5),
    binary("power", np.power, ALL, "math", mixed=ARITH_MIXED, int_scalar=2, float_scalar=0.5),
    binary("maximum", np.maximum, ALL, mixed=ARITH_MIXED),
    binary("minimum", np.minimum, ALL, mixed=ARITH_MIXED),
    binary("arctan2", np.arctan2, ALL, "math", mixed=ARITH_MIXED),
    binary("logaddexp", np.logaddexp, ALL, "math", mixed=ARITH_MIXED, large=LARGE),
    binary("equal", np.equal, ALL, mixed=ARITH_MIXED, int_scalar=1),
    binary("not_equal", np.not_equal, ALL, mixed=ARITH_MIXED, int_scalar=1),
    binary("less", np.less, ALL, mixed=ARITH_MIXED, int_scalar=1),
    binary("less_equal", np.less_equal, ALL, mixed=ARITH_MIXED, int_scalar=1),
    binary("greater", np.greater, ALL, mixed=ARITH_MIXED, int_scalar=1),
    binary("greater_equal", np.greater_equal, ALL, mixed=ARITH_MIXED, int_scalar=1),
    binary("logical_and", np.logical_and, ALL, mixed=ARITH_MIXED[:3]),
    binary("logical_or", np.logical_or, ALL, mixed=ARITH_MIXED[:3]),
    binary("logical_xor", np.logical_xor, ALL, mixed=ARITH_MIXED[:3]),
    binary("bitwise_and", np.bitwise_and, BITWISE, mixed=INT_MIXED),
    binary("bitwise_or", np.bitwise_or, BITWISE, mixed=INT_MIXED),
    binary("bitwise_xor", np.bitwise_xor, BITWISE, mixed=INT_MIXED),
    ternary("where", np.where, ALL, mixed=[("int8", "uint8"), ("float16", "bfloat16"), ("int32", "float32"),
                                            ("bool", "float16")]),
    ternary("clip", np.clip, ALL,
            mixed=[("int8", "int16"), ("float32", "float64"), ("float16", "bfloat16"), ("uint8", "int8")]),
    # C++ operators of ops.hpp/array.hpp, checked against the same NumPy functions.
    binary("op_add", np.add, ["bool", "int32", "float16", "float32"]),
    binary("op_subtract", np.subtract, ["int8", "float32"]),
    binary("op_multiply", np.multiply, ["int32", "float64"]),
    binary("op_divide", np.divide, ["int32", "float32"]),
    binary("op_remainder", np.remainder, ["int16", "float32"], int_scalar=5),
    binary("op_equal", np.equal, ["int32", "float32"], int_scalar=1),
    binary("op_not_equal", np.not_equal, ["int32", "float32"], int_scalar=1),
    binary("op_less", np.less, ["int32", "float32"], int_scalar=1),
    binary("op_less_equal", np.less_equal, ["int32", "float32"], int_scalar=1),
    binary("op_greater", np.greater, ["int32", "float32"], int_scalar=1),
    binary("op_greater_equal", np.greater_equal, ["int32", "float32"], int_scalar=1),
    binary("op_bitwise_and", np.bitwise_and, ["bool", "int32"]),
    binary("op_bitwise_or", np.bitwise_or, ["bool", "uint8"]),
    binary("op_bitwise_xor", np.bitwise_xor, ["bool", "int64"]),
    unary("op_negative", np.negative, ["int32", "float32"]),
    unary("op_logical_not", np.logical_not, ["bool", "float32"]),
    unary("op_bitwise_not", np.bitwise_not, ["bool", "int8"]),
    binary("op_iadd", iop(np.add), ["int32", "float16", "float32"],
           mixed=[("int8", "int16"), ("float32", "float64"), ("int32", "float32")]),
    binary("op_isubtract", iop(np.subtract), ["int32", "float32"], mixed=[("int8", "int16")]),
    binary("op_imultiply", iop(np.multiply), ["int32", "float32"], mixed=[("float32", "float64")]),
    binary("op_idivide", iop(np.divide), ["float32", "float64"], mixed=[("float32", "int32")]),
]


# ---------------------------------------------------------------- operands and layouts

@dataclass
class Operand:
    dtype: str = None  # kiln dtype of an array operand
    base: np.ndarray = None  # stored array (float32 storage for bfloat16)
    recipe: str = "plain"
    scalar: object = None  # Python bool/int/float for a scalar operand

    def is_array(self):
        return self.base is not None

    def view(self):
        return apply_recipe(self.base, self.recipe)


def apply_recipe(base, recipe):
    if recipe == "plain":
        return base
    if recipe == "T":
        return base.T
    axis, step = (int(v) for v in recipe[len("slice"):].split("x"))
    index = [slice(None)] * base.ndim
    index[axis] = slice(None, None, step)
    return base[tuple(index)]


def stored_shape(view_shape, recipe):
    if recipe == "T":
        return tuple(reversed(view_shape))
    if recipe.startswith("slice"):
        axis, step = (int(v) for v in recipe[len("slice"):].split("x"))
        shape = list(view_shape)
        shape[axis] *= step
        return tuple(shape)
    return tuple(view_shape)


def make_array(rng, op, index, dtype, shape, recipe="plain"):
    base = op.domains[index].generate(rng, dtype, stored_shape(shape, recipe))
    return Operand(dtype=dtype, base=base, recipe=recipe)


def scalar_text(value):
    if isinstance(value, (bool, np.bool_)):
        return f"bool:{int(value)}"
    if isinstance(value, int):
        return f"int:{value}"
    return f"float:{float(value)!r}"


# ---------------------------------------------------------------- reference computation

def is_float(name):
    return name in FLOATS


def expected_dtype(op, operands):
    """kiln dtype of op's result, from NumPy run on proxies (bfloat16 -> float16); None if NumPy refuses."""
    with np.errstate(all="ignore"):  # large float32 values overflow the float16 proxy of bfloat16: only the dtype matters
        args = [np.asarray(o.view()).astype(proxy_dtype(o.dtype)) if o.is_array() else o.scalar for o in operands]
    try:
        with np.errstate(all="ignore"):
            result = np.asarray(op.fn(*args))
    except (TypeError, ValueError, OverflowError):
        return None
    name = result.dtype.name
    promoting = operands[1:] if op.name == "where" else operands
    if name == "float16" and any(o.is_array() and o.dtype == "bfloat16" for o in promoting):
        real_half = any(o.is_array() and o.dtype == "float16" for o in promoting)
        name = "float32" if real_half else "bfloat16"
    return name


def compute_dtype(op, operands):
    """The dtype weak scalars are cast to: the promoted dtype of the array operands (NEP 50)."""
    promoting = operands[1:] if op.name == "where" else operands
    arrays = [o for o in promoting if o.is_array()]
    if not arrays:
        return None
    proxies = [np.zeros((), proxy_dtype(o.dtype)) for o in arrays]
    scalars = [o.scalar for o in promoting if not o.is_array()]
    name = np.result_type(*proxies, *scalars).name
    if name == "float16" and any(o.dtype == "bfloat16" for o in arrays):
        name = "float32" if any(o.dtype == "float16" for o in arrays) else "bfloat16"
    return name


def reference(op, operands, out_dtype):
    """Expected values as an array of out_dtype's storage (float32 for bfloat16)."""
    with np.errstate(all="ignore"):
        if op.kind in ("math", "approx") and is_float(out_dtype):
            # Inputs take the compute dtype first (as the ufunc loop would), then go up in precision.
            high = np.longdouble if out_dtype == "float64" else np.float64
            args = []
            for o in operands:
                value = o.view() if o.is_array() else o.scalar
                args.append(np.asarray(to_dtype(np.asarray(value, dtype=np.float64), out_dtype), dtype=high))
            result = np.asarray(op.fn(*args), dtype=high)
            return to_dtype(result.astype(np.float64), out_dtype) if out_dtype != "float64" else \
                result.astype(np.float64)
        scalar_dtype = compute_dtype(op, operands)
        args = []
        for o in operands:
            if o.is_array():
                args.append(o.view())
            elif scalar_dtype == "bfloat16" and not isinstance(o.scalar, bool):
                args.append(np.float32(round_bf16(o.scalar)))  # weak scalar rounded to bfloat16 first
            else:
                args.append(o.scalar)
        result = np.asarray(op.fn(*args))
        if out_dtype == "bfloat16":
            return round_bf16(result.astype(np.float64))
        assert result.dtype.name == out_dtype, (op.name, result.dtype, out_dtype)
        return result


# ---------------------------------------------------------------- writing

class Writer:
    """Collects cases; the arrays of one (op, dtype) go into one pooled 1-d .npy file."""

    def __init__(self, outdir):
        self.dir = os.path.join(outdir, "ops")
        os.makedirs(self.dir, exist_ok=True)
        for old in os.listdir(self.dir):
            if old.endswith(".npy") or old == "manifest.txt":
                os.remove(os.path.join(self.dir, old))
        self.lines = [f"#op {op.name} {op.arity} {','.join(op.dtypes)} {op.kind}" for op in OPS]
        self.lines.append(f"#op astype 1 {','.join(ALL)} exact")
        self.ids = set()
        self.pools = {}  # file name -> list of flat arrays

    def add(self, op_name, array, dtype, recipe="plain"):
        """Appends an array to its pool; returns its operand spec (see the module docstring)."""
        if dtype == "bfloat16":
            array = f32_to_bf16_bits(array).view(np.int16)
        array = np.asarray(array)
        name = f"{op_name}.{dtype}.npy"
        pool = self.pools.setdefault(name, [])
        offset = sum(p.size for p in pool)
        pool.append(np.ascontiguousarray(array).reshape(-1))
        shape = "(" + ",".join(str(n) for n in array.shape) + ("," if array.ndim == 1 else "") + ")"
        kind = "bf16" if dtype == "bfloat16" else "arr"
        return f"{kind}:ops/{name}@{offset}:{shape}:{recipe}"

    def case(self, op, case_id, operands, out_dtype=None, expected=None):
        """Adds one case; computes dtype and values with NumPy unless given. Returns False when NumPy
        refuses the combination (a TypeError or OverflowError: kiln's error tests cover those)."""
        key = f"{op.name}__{case_id}"
        assert key not in self.ids, key
        if out_dtype is None:
            out_dtype = expected_dtype(op, operands)
            if out_dtype is None:
                return False
        if expected is None:
            expected = reference(op, operands, out_dtype)
        fields = [f"op={op.name}", f"case={case_id}", f"dtype={out_dtype}"]
        fields.append("expected=" + self.add(op.name, expected, out_dtype))
        if op.cast_to:
            fields.append(f"to={op.cast_to}")
        for o in operands:
            fields.append("in=" + (self.add(op.name, o.base, o.dtype, o.recipe) if o.is_array()
                                   else scalar_text(o.scalar)))
        self.ids.add(key)
        self.lines.append(" ".join(fields))
        return True

    def finish(self, outdir):
        total = 0
        for name, pool in self.pools.items():
            data = np.concatenate(pool)
            total += data.nbytes
            np.save(os.path.join(self.dir, name), data)
        with open(os.path.join(self.dir, "manifest.txt"), "w") as f:
            f.write("\n".join(self.lines) + "\n")
        with open(os.path.join(outdir, "ops_golden.stamp"), "w") as f:
            f.write(f"{len(self.ids)} cases, {len(self.pools)} files, {total} bytes of data\n")


def rng_for(op_name, case_id):
    return np.random.default_rng(zlib.crc32(f"{op_name}/{case_id}".encode()))


def extremes(name):
    """Integer min/max and neighbours; float specials."""
    if is_float(name):
        return to_dtype(np.array(SPECIALS), name)
    lo, hi = int_range(name)
    values = sorted(v for v in {lo, lo + 1, -1, 0, 1, 2, hi - 1, hi} if lo <= v <= hi)
    return to_dtype(np.array(values, dtype=np.int64), name)


def specials(op, name):
    """extremes(name), with the op's large values appended for float dtypes."""
    values = extremes(name)
    if op.large and is_float(name):
        values = np.concatenate([values, to_dtype(np.array(op.large), name)])
    return values


def inject(operand, values):
    """Overwrites the first elements of an operand's base with `values`."""
    flat = operand.base.reshape(-1)
    k = min(len(flat), len(values))
    flat[:k] = values[:k]


# ---------------------------------------------------------------- case lists

LAYOUT_DTYPES = ["float32", "int32", "bfloat16"]


def unary_cases(w, op):
    for d in op.dtypes:
        rng = rng_for(op.name, f"basic_{d}")
        a = make_array(rng, op, 0, d, (3, 4, 5))
        if op.extremes and d != "bool":
            inject(a, specials(op, d))
        w.case(op, f"basic_{d}", [a])
    layout_dtypes = [d for d in LAYOUT_DTYPES if d in op.dtypes] or op.dtypes[:1]
    for d in layout_dtypes:
        rng = rng_for(op.name, f"layouts_{d}")
        w.case(op, f"transposed_{d}", [make_array(rng, op, 0, d, (4, 6), "T")])
        w.case(op, f"strided_{d}", [make_array(rng, op, 0, d, (4, 5), "slice1x2")])
        if d == layout_dtypes[0]:
            w.case(op, f"zero_d_{d}", [make_array(rng, op, 0, d, ())])
            w.case(op, f"empty_{d}", [make_array(rng, op, 0, d, (0, 3))])


def binary_cases(w, op):
    name = op.name
    inplace = name.startswith("op_i")  # `a op= b` writes into a, so a has the broadcast shape
    operator = name.startswith("op_")
    is_int = lambda d: d in INTS  # noqa: E731
    # Broadcasting (E,1,3) with (E,3): column 0 of both holds the special values (floats) or the
    # integer extremes, so the result holds every pair of them; the other columns are random.
    for d in op.dtypes:
        rng = rng_for(name, f"broadcast_{d}")
        if operator:
            a_shape = (3, 4, 5) if inplace else (3, 1, 5)
            w.case(op, f"broadcast_{d}", [make_array(rng, op, 0, d, a_shape), make_array(rng, op, 1, d, (4, 5))])
            continue
        values = specials(op, d) if d != "bool" and op.extremes else None
        rows = len(values) if values is not None else 4
        a, b = make_array(rng, op, 0, d, (rows, 1, 3)), make_array(rng, op, 1, d, (rows, 3))
        if values is not None:
            b_values = values
            if name == "power" and is_int(d):
                b_values = to_dtype(np.array([0, 1, 2, 3, 5]), d)  # no negative exponents (see below)
            if name in ("floor_divide", "remainder") and is_int(d):
                b_values = values[values != 0]  # zero divisors have their own case
            a.base[:, 0, 0] = values
            b.base[:len(b_values), 0] = b_values
        w.case(op, f"broadcast_{d}", [a, b])
    for d1, d2 in op.mixed:
        rng = rng_for(name, f"mixed_{d1}_{d2}")
        w.case(op, f"mixed_{d1}_{d2}", [make_array(rng, op, 0, d1, (4, 5)), make_array(rng, op, 1, d2, (4, 1))])
    if name in ("floor_divide", "remainder"):
        for d in INTS:  # kiln's documented choice: x // 0 == x % 0 == 0 (NumPy agrees, with a warning)
            divisors = [0, 1, -1, 0] if d != "uint8" else [0, 1, 0]
            w.case(op, f"zero_divisor_{d}", [Operand(d, extremes(d).reshape(-1, 1)),
                                             Operand(d, to_dtype(np.array(divisors).reshape(1, -1), d))])
    if name == "power":
        for d in ["int8", "int16", "int32", "int64"]:  # kiln's documented choice; NumPy raises
            base = to_dtype(np.array([-3, -2, -1, 0, 1, 2, 3]).reshape(-1, 1), d)
            exponent = to_dtype(np.array([-1, -2, -3, -8]).reshape(1, -1), d)
            b64 = np.broadcast_to(base.astype(np.int64), (7, 4))
            e64 = np.broadcast_to(exponent.astype(np.int64), (7, 4))
            expected = np.where(b64 == 1, 1, np.where(b64 == -1, np.where(e64 % 2 == 1, -1, 1), 0))
            w.case(op, f"negative_exponent_kiln_rule_{d}", [Operand(d, base), Operand(d, exponent)], d,
                   expected.astype(d))
    # Layouts: a transposed view, a strided slice, both, a 0-d array, an empty array.
    layout_dtypes = [d for d in LAYOUT_DTYPES if d in op.dtypes] or op.dtypes[:1]
    for d in [] if operator and not inplace else layout_dtypes:
        rng = rng_for(name, f"layouts_{d}")
        w.case(op, f"transposed_{d}", [make_array(rng, op, 0, d, (4, 5), "T"), make_array(rng, op, 1, d, (4, 5))])
        if not inplace:
            w.case(op, f"strided_{d}", [make_array(rng, op, 0, d, (4, 5)),
                                        make_array(rng, op, 1, d, (4, 5), "slice1x2")])
        if d == layout_dtypes[0]:
            w.case(op, f"strided_transposed_{d}", [make_array(rng, op, 0, d, (3, 4), "slice0x3"),
                                                   make_array(rng, op, 1, d, (3, 4), "T")])
            w.case(op, f"zero_d_{d}", [make_array(rng, op, 0, d, (4, 5)), make_array(rng, op, 1, d, ())])
            if not inplace:
                w.case(op, f"empty_{d}", [make_array(rng, op, 0, d, (0, 5)), make_array(rng, op, 1, d, (5,))])
    if not operator:  # a 0-d array is not weak: int8 with a 0-d int64 gives int64
        rng = rng_for(name, "zero_d_promotes")
        w.case(op, "zero_d_int8_int64_promotes", [make_array(rng, op, 0, "int8", (4, 5)),
                                                  make_array(rng, op, 1, "int64", ())])
    # Python scalars (weak, NEP 50): int, float and bool on the right; int and float on the left.
    def picked(names):
        return op.dtypes if operator else [d for d in op.dtypes if d in names]
    for d in op.dtypes:
        rng = rng_for(name, f"scalar_{d}")
        a = make_array(rng, op, 0, d, (4, 5))
        if d in picked(["bool", "int8", "uint8", "float16", "bfloat16", "float32"]):
            w.case(op, f"scalar_int_{d}", [a, Operand(scalar=op.int_scalar)])
        if d in picked(["int32", "float16", "bfloat16", "float32"]):
            w.case(op, f"scalar_float_{d}", [a, Operand(scalar=op.float_scalar)])
        if d in picked(["bool", "float32"]) and not operator:
            w.case(op, f"scalar_bool_{d}", [a, Operand(scalar=True)])
        if d in picked(["int8", "float32"]) and not inplace:
            w.case(op, f"scalar_left_int_{d}", [Operand(scalar=op.int_scalar), make_array(rng, op, 1, d, (2, 3))])
        if d in picked(["int32", "bfloat16"]) and not inplace:
            w.case(op, f"scalar_left_float_{d}", [Operand(scalar=op.float_scalar + 2),
                                                  make_array(rng, op, 1, d, (2, 3))])
    if name in ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal"):
        # An integer scalar outside the array's range compares exactly (NumPy 2 does not raise here).
        rng = rng_for(name, "scalar_out_of_range")
        w.case(op, "scalar_out_of_range_uint8", [make_array(rng, op, 0, "uint8", (2, 5)), Operand(scalar=300)])
        w.case(op, "scalar_out_of_range_int8", [make_array(rng, op, 0, "int8", (2, 5)), Operand(scalar=-1000)])


def ternary_cases(w, op):
    name = op.name
    is_where = name == "where"
    shapes = [(3, 1, 5), (4, 5), (4, 1)]
    for d in op.dtypes:
        rng = rng_for(name, f"broadcast_{d}")
        types = ["bool", d, d] if is_where else [d, d, d]
        operands = [make_array(rng, op, k, t, s) for k, (t, s) in enumerate(zip(types, shapes))]
        if d != "bool" and is_float(d):
            inject(operands[1] if is_where else operands[0], extremes(d))
        w.case(op, f"broadcast_{d}", operands)
    for d1, d2 in op.mixed:
        rng = rng_for(name, f"mixed_{d1}_{d2}")
        types = ["bool", d1, d2] if is_where else [d1, d2, d2]
        operands = [make_array(rng, op, k, t, (4, 5)) for k, t in enumerate(types)]
        w.case(op, f"mixed_{d1}_{d2}", operands)
    for d in [d for d in LAYOUT_DTYPES if d in op.dtypes]:
        rng = rng_for(name, f"layouts_{d}")
        types = ["bool", d, d] if is_where else [d, d, d]
        w.case(op, f"layouts_{d}", [make_array(rng, op, 0, types[0], (4, 5), "T"),
                                    make_array(rng, op, 1, types[1], (4, 5), "slice1x2"),
                                    make_array(rng, op, 2, types[2], ())])
        w.case(op, f"empty_{d}", [make_array(rng, op, k, t, (0, 5)) for k, t in enumerate(types)])
    for d in ["bool", "int8", "uint8", "int32", "float16", "bfloat16", "float32", "float64"]:
        rng = rng_for(name, f"scalars_{d}")
        if is_where:
            cond, x = make_array(rng, op, 0, "bool", (4, 5)), make_array(rng, op, 1, d, (4, 5))
            w.case(op, f"scalar_int_{d}", [cond, x, Operand(scalar=1)])
            w.case(op, f"scalar_float_{d}", [cond, Operand(scalar=2.5), x])
        else:
            a = make_array(rng, op, 0, d, (4, 5))
            lo, hi = (0, 1) if d in ["bool", "uint8"] else (-2, 2)
            w.case(op, f"scalar_int_{d}", [a, Operand(scalar=lo), Operand(scalar=hi)])
            w.case(op, f"scalar_float_{d}", [a, Operand(scalar=-0.1), Operand(scalar=2.5)])
            w.case(op, f"scalar_mixed_{d}", [a, make_array(rng, op, 1, d, (5,)), Operand(scalar=hi)])
    if is_where:
        rng = rng_for(name, "conditions")
        w.case(op, "scalar_values", [make_array(rng, op, 0, "bool", (3, 4)), Operand(scalar=1), Operand(scalar=2)])
        w.case(op, "scalar_condition", [Operand(scalar=True), make_array(rng, op, 1, "int16", (3, 4)),
                                        make_array(rng, op, 2, "int16", (4,))])
        for d in ["float32", "int8"]:  # a non-bool condition: nonzero (NaN included) is true
            cond = make_array(rng, op, 0, d, (3, 4))
            if d == "float32":
                inject(cond, np.array([np.nan, 0.0, -0.0, 2.0], dtype=np.float32))
            w.case(op, f"condition_{d}", [cond, make_array(rng, op, 1, "float64", (3, 4)),
                                          make_array(rng, op, 2, "float64", (3, 4))])


def cast_values(rng, src, dst, shape):
    """Source values whose conversion to dst NumPy defines (floats to integers stay in range, no NaN)."""
    n = int(np.prod(shape))
    if is_float(src) and dst in INTS:
        lo, hi = int_range(dst)
        values = np.concatenate([rng.uniform(-1.9, 1.9, n // 2), rng.uniform(max(lo, -1e5), min(hi, 1e5), n // 4),
                                 rng.uniform(lo, hi, n - n // 2 - n // 4)])
        values = to_dtype(values, src).astype(np.float64)
        values[(values < lo) | (values > hi)] = 0  # rounding to src can leave the range (C++: undefined)
        return to_dtype(values.reshape(shape), src)
    if is_float(src):
        values = np.concatenate([rng.uniform(-3, 3, n // 2), rng.normal(0, 1e4, n - n // 2)])
        return to_dtype(values.reshape(shape), src)
    return Domain().generate(rng, src, shape)


def cast_cases(w):
    for src in ALL:
        for dst in ALL:
            op = Op("astype", 1, None, ALL, [ANY], cast_to=dst)
            rng = rng_for("astype", f"{src}_to_{dst}")
            base = cast_values(rng, src, dst, (6, 4))
            a = Operand(dtype=src, base=base, recipe="T")
            w.case(op, f"{src}_to_{dst}", [a], dst, cast_reference(a.view(), src, dst))
            if is_float(src) and (is_float(dst) or dst == "bool"):
                specials = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-6, -3e-5, 65504.0, 65519.0, 65520.0,
                            1e39, -1e39, 3.4e38, 1.5, -2.75, 1e-40]
                a = Operand(dtype=src, base=to_dtype(np.array(specials), src))
                w.case(op, f"special_{src}_to_{dst}", [a], dst, cast_reference(a.view(), src, dst))
    # float64 -> float16 rounds once (NumPy); through float32 it would round twice and differ here.
    op = Op("astype", 1, None, ALL, [ANY], cast_to="float16")
    values = np.array([1 + 2.0 ** -11 + 2.0 ** -40, -(1 + 2.0 ** -11 + 2.0 ** -40), 2048 + 1 + 2.0 ** -30])
    a = Operand(dtype="float64", base=values)
    w.case(op, "double_rounding_float64_to_float16", [a], "float16", cast_reference(a.view(), "float64", "float16"))


def cast_reference(values, src, dst):
    with np.errstate(all="ignore"):
        if dst == "bfloat16":
            return round_bf16(np.asarray(values).astype(np.float32).astype(np.float64))
        return np.asarray(values).astype(dst)  # bfloat16 sources are float32 storage: exact


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: python3 ops_golden.py OUTDIR")
    assert int(np.__version__.split(".")[0]) >= 2, "NumPy >= 2 is needed (NEP 50 promotion)"
    outdir = sys.argv[1]
    w = Writer(outdir)
    for op in OPS:
        {1: unary_cases, 2: binary_cases, 3: ternary_cases}[op.arity](w, op)
    cast_cases(w)
    w.finish(outdir)


if __name__ == "__main__":
    main()
