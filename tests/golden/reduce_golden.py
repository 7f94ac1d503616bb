"""NumPy golden data for kiln's reductions and matrix products
(tests/core/test_reduce.cpp, tests/core/test_linalg.cpp).

Run as `python3 reduce_golden.py OUTDIR`; writes into OUTDIR/reduce/ and finally OUTDIR/reduce_golden.stamp.

reduce_cases.txt: one case per line, `id op axes keepdims ddof input view`:
  op      sum prod mean var std max min argmax argmin all any logsumexp cumsum cumprod
          (cumsum/cumprod: axes is `none` (flattened) or one axis; keepdims unused)
  axes    `none` (all axes), `-` (the empty tuple), or comma-separated ints (negative allowed)
  input   in_<name>.npy, loaded by the test
  view    c (as stored), t (transpose), rev (x[::2, ..., ::-1]: negative and step-2 strides),
          bcast (np.broadcast_to(x, (3,) + x.shape): a stride-0 axis)
  expected: <id>.npy, with kiln's result dtype (NumPy's, except uint64 -> int64: kiln has no uint64).
  Float results are computed in float64 from the input's exact values and rounded once to the
  result dtype (the accurate answer kiln's float64 accumulation targets).
matmul_cases.txt: `id kind a_input a_view b_input b_view` (kind: matmul or dot; views c, t (swap the
  last two axes), s2 (x[..., ::2]: needs a copy before BLAS), neg (x[::-1]: negative first stride));
  expected: <id>.npy. Integer results wrap like NumPy; float16 is computed in float64 then rounded.
"""

import os
import sys
import warnings

import numpy as np

OUT = os.path.join(sys.argv[1], "reduce")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20240611)
warnings.simplefilter("ignore")  # mean of empty slices, ddof >= n: NumPy warns, the values are what we want

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]


def save(name, array):
    np.save(os.path.join(OUT, name + ".npy"), np.asarray(array))


def random_input(dtype, shape, kind="normal"):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < (0.85 if kind == "mostly" else 0.5)
    if dt.kind == "u":
        return rng.integers(0, 200, shape).astype(dt)
    if dt.kind == "i":
        return rng.integers(-100, 100, shape).astype(dt)
    if kind == "pow2":  # exact products in every float dtype
        return rng.choice([-2.0, -1.0, 0.5, 1.0, 2.0], shape).astype(dt)
    if kind == "offset":  # a large mean: one-pass variance formulas lose everything here
        return (1.0e4 + rng.standard_normal(shape)).astype(dt)
    return (rng.standard_normal(shape) * 3).astype(dt)


def apply_view(x, view):
    if view == "c":
        return x
    if view == "t":
        return x.T
    if view == "rev":
        return x[(slice(None, None, 2),) + (slice(None),) * (x.ndim - 2) + (slice(None, None, -1),)]
    if view == "bcast":
        return np.broadcast_to(x, (3,) + x.shape)
    raise ValueError(view)


def kiln_dtype(dt):
    return np.dtype(np.int64) if np.dtype(dt) == np.uint64 else np.dtype(dt)


def logsumexp(v, axis, keepdims):
    """Max-shifted in float64, with the float dtype np.exp gives the input (int8 -> float16, ...)."""
    out = np.exp(np.zeros((), v.dtype)).dtype
    w = np.asarray(v, dtype=np.float64)
    with np.errstate(all="ignore"):
        m = np.max(w, axis=axis, keepdims=True, initial=-np.inf)
        shift = np.where(np.isfinite(m), m, 0.0)
        r = np.log(np.sum(np.exp(w - shift), axis=axis, keepdims=True)) + shift
    if not keepdims:
        r = r.reshape(np.sum(w, axis=axis).shape)
    return r.astype(out)


def scan_axis(axis):
    return axis[0] if isinstance(axis, tuple) else axis


def reference(op, x, axis, keepdims, ddof):
    """NumPy's answer with kiln's dtype; float results from float64 arithmetic rounded once."""
    numpy_result = {
        "sum": lambda v: np.sum(v, axis=axis, keepdims=keepdims),
        "prod": lambda v: np.prod(v, axis=axis, keepdims=keepdims),
        "mean": lambda v: np.mean(v, axis=axis, keepdims=keepdims),
        "var": lambda v: np.var(v, axis=axis, keepdims=keepdims, ddof=ddof),
        "std": lambda v: np.std(v, axis=axis, keepdims=keepdims, ddof=ddof),
        "max": lambda v: np.max(v, axis=axis, keepdims=keepdims),
        "min": lambda v: np.min(v, axis=axis, keepdims=keepdims),
        "argmax": lambda v: np.argmax(v, axis=axis, keepdims=keepdims),
        "argmin": lambda v: np.argmin(v, axis=axis, keepdims=keepdims),
        "all": lambda v: np.all(v, axis=axis, keepdims=keepdims),
        "any": lambda v: np.any(v, axis=axis, keepdims=keepdims),
        "logsumexp": lambda v: logsumexp(v, axis, keepdims),
        "cumsum": lambda v: np.cumsum(v, axis=scan_axis(axis)),
        "cumprod": lambda v: np.cumprod(v, axis=scan_axis(axis)),
    }[op]
    result = np.asarray(numpy_result(x))
    dt = kiln_dtype(result.dtype)
    if x.dtype.kind == "f" and dt.kind == "f":
        result = np.asarray(numpy_result(x.astype(np.float64)))
    return result.astype(dt)


reduce_lines = []
inputs = {}


def add_input(name, array):
    if name not in inputs:
        inputs[name] = array
        save("in_" + name, array)
    return name


def add_case(case_id, op, axes, keepdims, ddof, input_name, view):
    x = apply_view(inputs[input_name], view)
    axis = None if axes == "none" else () if axes == "-" else tuple(int(a) for a in axes.split(","))
    if isinstance(axis, tuple) and len(axis) == 1 and op.startswith("arg"):
        axis = axis[0]
    save(case_id, reference(op, x, axis, keepdims, ddof))
    reduce_lines.append(f"{case_id} {op} {axes} {int(keepdims)} {ddof} {input_name} {view}")


AXES = [("none", False), ("0", False), ("1", False), ("-1", False), ("0,2", False), ("1,2", False),
        ("-", False), ("none", True), ("0,2", True), ("1", True)]
ALL_OPS = ["sum", "prod", "mean", "var", "std", "max", "min", "argmax", "argmin", "all", "any"]


def arg_ok(op, axes):
    return not op.startswith("arg") or axes == "none" or "," not in axes and axes != "-"


# Set A: every dtype, every op, axes combinations, keepdims.
for dt in DTYPES:
    add_input(f"{dt}", random_input(dt, (4, 5, 6)))
    add_input(f"{dt}_pow2", random_input(dt, (4, 5, 6), "pow2") if np.dtype(dt).kind == "f"
              else (rng.integers(-2, 3, (4, 5, 6)).astype(dt) if dt != "bool" else random_input(dt, (4, 5, 6), "mostly")))
    for op in ALL_OPS:
        for k, (axes, keepdims) in enumerate(AXES):
            if not arg_ok(op, axes) or (op == "prod" and axes in ("none", "-") and dt != "bool"):
                continue
            source = f"{dt}_pow2" if op in ("prod", "all") else f"{dt}"
            add_case(f"dtype_{dt}_{op}_{k}", op, axes, keepdims, 1 if op in ("var", "std") and k % 2 else 0,
                     source, "c")

# Set B: strided layouts (transposed, negative/step-2 strides, broadcast stride 0).
for dt in ["float32", "int32", "bool", "float16", "float64"]:
    for view in ["t", "rev", "bcast"]:
        for op in ["sum", "max", "min", "argmax", "argmin", "mean", "var", "all", "any"]:
            for k, (axes, keepdims) in enumerate(AXES):
                if view == "bcast" and axes == "1,2":
                    axes = "0,3"
                if not arg_ok(op, axes):
                    continue
                add_case(f"layout_{dt}_{view}_{op}_{k}", op, axes, keepdims, 0, f"{dt}", view)

# Set C: NaN propagation (max/min/sum/mean: NaN; argmax/argmin: the first NaN; any/all: NaN is true).
for dt in ["float16", "float32", "float64"]:
    x = random_input(dt, (6, 7))
    x[1, 3] = np.nan
    x[1, 5] = np.nan
    x[4, 0] = np.nan
    x[2, 6] = np.inf
    x[3, 2] = -np.inf
    add_input(f"nan_{dt}", x)
    for op in ["max", "min", "argmax", "argmin", "sum", "mean", "any", "all", "var"]:
        for k, (axes, keepdims) in enumerate([("none", False), ("0", False), ("1", False), ("-1", True)]):
            add_case(f"nan_{dt}_{op}_{k}", op, axes, keepdims, 0, f"nan_{dt}", "c")
            add_case(f"nan_{dt}_{op}_{k}_t", op, axes, keepdims, 0, f"nan_{dt}", "t")

# Set D: empty arrays (identities, empty outputs, nan means).
for dt in ["float32", "int32", "bool"]:
    for shape in [(0, 3), (3, 0), (0,)]:
        name = f"empty_{dt}_{shape[0]}x{shape[1] if len(shape) > 1 else ''}"
        add_input(name, np.zeros(shape, dtype=dt))
        axes_options = ["none", "0"] + (["1"] if len(shape) > 1 else [])
        for op in ["sum", "prod", "mean", "var", "all", "any", "max", "argmax"]:
            for k, axes in enumerate(axes_options):
                x = inputs[name]
                reduced = x.size if axes == "none" else x.shape[int(axes)]
                if op in ("max", "argmax") and reduced == 0:
                    continue  # errors: tested in C++
                add_case(f"{name}_{op}_{k}", op, axes, False, 0, name, "c")

# Set E: accuracy and the parallel paths (inputs above the 64k-element threshold).
add_input("offset_float32", random_input("float32", (64, 300), "offset"))
add_input("offset_float64", random_input("float64", (64, 300), "offset"))
for dt in ["float32", "float64"]:
    for op in ["var", "std", "mean"]:
        for ddof in [0, 1, 2]:
            for k, axes in enumerate(["none", "0", "1"]):
                add_case(f"offset_{dt}_{op}_{ddof}_{k}", op, axes, False, ddof, f"offset_{dt}", "c")
add_input("large_float32", (rng.standard_normal((256, 1024)) + 0.25).astype(np.float32))
add_input("large_int32", rng.integers(-1000, 1000, (256, 1024)).astype(np.int32))
add_input("wide_float32", rng.standard_normal((3, 70000)).astype(np.float32))
add_input("tall_float64", rng.standard_normal((70000, 3)))
for name in ["large_float32", "large_int32", "wide_float32", "tall_float64"]:
    for op in ["sum", "max", "argmax", "argmin", "mean", "any"]:
        for k, axes in enumerate(["none", "0", "1"]):
            for view in ["c", "t"]:
                add_case(f"big_{name}_{op}_{k}_{view}", op, axes, False, 0, name, view)

# Set F: logsumexp (axes as the reductions) and cumsum/cumprod (one axis or none: flattened), every dtype,
# plus specials: a row of -inf (gives -inf), +inf, NaN, and values whose exp overflows float64.
for dt in DTYPES:
    for k, (axes, keepdims) in enumerate(AXES):
        if dt != "bool":
            add_case(f"scan_{dt}_logsumexp_{k}", "logsumexp", axes, keepdims, 0, f"{dt}", "c")
    for k, axes in enumerate(["none", "0", "1", "-1", "2"]):
        add_case(f"scan_{dt}_cumsum_{k}", "cumsum", axes, False, 0, f"{dt}", "c")
        add_case(f"scan_{dt}_cumprod_{k}", "cumprod", axes, False, 0, f"{dt}_pow2", "c")
for dt in ["float32", "float64"]:
    for view in ["t", "rev"]:
        add_case(f"scan_{dt}_cumsum_{view}", "cumsum", "1", False, 0, f"{dt}", view)
        add_case(f"scan_{dt}_logsumexp_{view}", "logsumexp", "1", False, 0, f"{dt}", view)
for dt in ["float16", "float32", "float64"]:
    x = (rng.standard_normal((5, 7)) * 3).astype(dt)
    x[0, :] = -np.inf
    x[1, 2] = np.inf
    x[2, 4] = np.nan
    x[3, :] = [800.0, 799.0, -800.0, 0.0, 700.0, 1.0, 2.0] if dt == "float64" else [60.0, 59.0, -60.0, 0, 50.0, 1, 2]
    add_input(f"lse_special_{dt}", x)
    for k, (axes, keepdims) in enumerate([("1", False), ("0", True), ("none", False)]):
        add_case(f"scan_special_{dt}_logsumexp_{k}", "logsumexp", axes, keepdims, 0, f"lse_special_{dt}", "c")
    add_case(f"scan_special_{dt}_cumsum", "cumsum", "1", False, 0, f"lse_special_{dt}", "c")
add_input("long_float64", rng.standard_normal((3, 1000)))
add_case("scan_long_float64_cumsum", "cumsum", "1", False, 0, "long_float64", "c")
add_case("scan_long_float64_logsumexp", "logsumexp", "1", False, 0, "long_float64", "c")
for name in ["empty_float32_0x3", "empty_int32_3x0"]:
    add_case(f"scan_{name}_logsumexp", "logsumexp", "1", False, 0, name, "c")
    add_case(f"scan_{name}_cumsum", "cumsum", "1", False, 0, name, "c")

with open(os.path.join(OUT, "reduce_cases.txt"), "w") as f:
    f.write("\n".join(reduce_lines) + "\n")

# ---------------------------------------------------------------- matmul / dot
matmul_lines = []


def matmul_view(x, view):
    if view == "c":
        return x
    if view == "t":
        return np.swapaxes(x, -1, -2)
    if view == "s2":
        return x[..., ::2]
    if view == "neg":
        return x[::-1]
    raise ValueError(view)


def matmul_reference(kind, a, b):
    fn = np.matmul if kind == "matmul" else np.dot
    result = np.asarray(fn(a, b))
    if result.dtype.kind == "f":
        result = np.asarray(fn(a.astype(np.float64), b.astype(np.float64))).astype(result.dtype)
    return result


def stored(x, view):
    """The array to store so that applying `view` gives x's shape back (t: store the swapped array)."""
    if view == "t":
        return np.ascontiguousarray(np.swapaxes(x, -1, -2))
    if view == "s2":
        return np.repeat(x, 2, axis=-1)
    return x


def add_matmul(case_id, kind, dt_a, shape_a, view_a, dt_b, shape_b, view_b):
    a = stored(random_input(dt_a, shape_a), view_a)
    b = stored(random_input(dt_b, shape_b), view_b)
    save(f"{case_id}_a", a)
    save(f"{case_id}_b", b)
    save(case_id, matmul_reference(kind, matmul_view(a, view_a), matmul_view(b, view_b)))
    matmul_lines.append(f"{case_id} {kind} {case_id}_a {view_a} {case_id}_b {view_b}")


SHAPES = [  # (shape a, shape b) as the operands are used
    ((7, 5), (5, 9)), ((5,), (5, 9)), ((7, 5), (5,)), ((5,), (5,)), ((3, 7, 5), (5, 9)),
    ((7, 5), (2, 5, 9)), ((2, 1, 7, 5), (3, 5, 9)), ((4, 3, 1, 5), (4, 1, 5, 2)), ((1, 5), (5, 1)),
    ((40, 33), (33, 50)), ((64, 1), (1, 64)), ((100,), (100, 30)), ((30, 100), (100,)), ((2, 30, 20), (2, 20, 1)),
    ((3, 1, 20), (20, 40)),
]
for dt in DTYPES:
    for s, (sa, sb) in enumerate(SHAPES):
        add_matmul(f"mm_{dt}_{s}", "matmul", dt, sa, "c", dt, sb, "c")
for dt in ["float32", "float64", "int32", "float16"]:
    for s, (sa, sb) in enumerate(SHAPES):
        for va, vb in [("t", "c"), ("c", "t"), ("t", "t"), ("s2", "c"), ("c", "s2"), ("neg", "neg")]:
            if (va == "t" and len(sa) < 2) or (vb == "t" and len(sb) < 2):
                continue
            add_matmul(f"mmv_{dt}_{s}_{va}_{vb}", "matmul", dt, sa, va, dt, sb, vb)
for s, (da, db) in enumerate([("int8", "float32"), ("int32", "float32"), ("bool", "int16"), ("float16", "float32"),
                              ("uint8", "int8")]):
    add_matmul(f"mmp_{s}", "matmul", da, (6, 4), "c", db, (4, 3), "c")
for s, (sa, sb) in enumerate([((2, 3, 4), (5, 4, 6)), ((4,), (3, 4, 2)), ((2, 3, 4), (4,)), ((3, 4), (2, 4, 5)),
                              ((2, 2, 3, 4), (4, 2))]):
    add_matmul(f"dot_{s}", "dot", "float64", sa, "c", "float64", sb, "c")
    add_matmul(f"doti_{s}", "dot", "int16", sa, "c", "int16", sb, "c")

with open(os.path.join(OUT, "matmul_cases.txt"), "w") as f:
    f.write("\n".join(matmul_lines) + "\n")

with open(os.path.join(sys.argv[1], "reduce_golden.stamp"), "w") as f:
    f.write(f"{len(reduce_lines)} reduce cases, {len(matmul_lines)} matmul cases\n")
