"""NumPy golden data for kiln's complex64/complex128 support (tests/core/test_complex.cpp).

Run as `python3 complex_golden.py OUTDIR`; writes into OUTDIR/complex/ and finally OUTDIR/complex_golden.stamp.

cases.txt lists one case per line: `name op check n_inputs`, where check is
  exact  bit-exact (NaN where NaN): arithmetic NumPy does in one rounding per part, predicates, views;
  arith  within a few ulps of the part dtype (products and quotients: NumPy's SIMD loops may fuse);
  math   within the C library's complex functions' error (exp, log, sqrt, trig, power).
Inputs are <name>_in<k>.npy, the expected result <name>_out.npy. An input file named <name>_in<k>_scalar.npy
(0-d) is passed as a Python scalar (a weak scalar, NEP 50).
"""

import os
import sys

import numpy as np

OUT = os.path.join(sys.argv[1], "complex")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(36)

listing = []


def case(name, op, check, inputs, expected, scalar_inputs=()):
    for k, x in enumerate(inputs):
        suffix = "_scalar" if k in scalar_inputs else ""
        np.save(os.path.join(OUT, f"{name}_in{k}{suffix}.npy"), np.asarray(x))
    np.save(os.path.join(OUT, f"{name}_out.npy"), np.asarray(expected))
    listing.append(f"{name} {op} {check} {len(inputs)}")


def finite(dtype, shape):
    re = rng.uniform(-3, 3, shape)
    im = rng.uniform(-3, 3, shape)
    return (re + 1j * im).astype(dtype)


def special(dtype):
    """Finite values, signed zeros, infinities and NaNs in either part."""
    inf, nan = np.inf, np.nan
    values = [complex(1.5, -2.25), complex(-0.0, 0.0), complex(0.0, -0.0), complex(inf, 0), complex(-inf, 1),
              complex(1, inf), complex(2, -inf), complex(nan, 0), complex(0, nan), complex(inf, inf),
              complex(nan, nan), complex(-3, 0.5)]
    return np.array(values, dtype=dtype)


UNARY = {  # name: (numpy function, check, inputs with special values too)
    "negative": (np.negative, "exact", True),
    "conj": (np.conjugate, "exact", True),
    "real": (np.real, "exact", True),
    "imag": (np.imag, "exact", True),
    "isnan": (np.isnan, "exact", True),
    "isinf": (np.isinf, "exact", True),
    "isfinite": (np.isfinite, "exact", True),
    "abs": (np.abs, "arith", True),  # kiln: hypot; NumPy's own loop differs from hypot by an ulp at times
    "angle": (np.angle, "math", False),
    "square": (np.square, "arith", False),
    "exp": (np.exp, "math", False),
    "log": (np.log, "math", False),
    "sqrt": (np.sqrt, "math", True),
    "sin": (np.sin, "math", False),
    "cos": (np.cos, "math", False),
    "tan": (np.tan, "math", False),
    "sinh": (np.sinh, "math", False),
    "cosh": (np.cosh, "math", False),
    "tanh": (np.tanh, "math", False),
}
BINARY = {
    "add": (np.add, "exact", True),
    "subtract": (np.subtract, "exact", True),
    "multiply": (np.multiply, "arith", False),
    "divide": (np.divide, "arith", False),
    "power": (np.power, "math", False),
    "equal": (np.equal, "exact", True),
    "not_equal": (np.not_equal, "exact", True),
}

with np.errstate(all="ignore"):
    for dtype, tag in ((np.complex64, "c8"), (np.complex128, "c16")):
        for op, (fn, check, with_special) in UNARY.items():
            x = finite(dtype, (3, 4))
            case(f"{op}_{tag}", op, check, [x], fn(x))
            if with_special:
                s = special(dtype)
                case(f"{op}_{tag}_special", op, check, [s], fn(s))
        for op, (fn, check, with_special) in BINARY.items():
            a, b = finite(dtype, (3, 4)), finite(dtype, (4,))  # broadcast
            if op in ("equal", "not_equal"):
                b = np.where(np.arange(4) % 2 == 0, a[0], b).astype(dtype)
            case(f"{op}_{tag}", op, check, [a, b], fn(a, b))
            if with_special:
                s = special(dtype)
                case(f"{op}_{tag}_special", op, check, [s, s[::-1].copy()], fn(s, s[::-1]))
        # Integer powers take NumPy's repeated products; others exp(b log a).
        base = finite(dtype, (6,))
        exps = np.array([0, 1, 2, 3, -2, 7], dtype=dtype)
        case(f"power_int_{tag}", "power", "math", [base, exps], np.power(base, exps))
        # Reductions (complex sums accumulate in complex128 in kiln; NumPy pairwise in the dtype).
        r = finite(dtype, (4, 5))
        case(f"sum_all_{tag}", "sum", "arith", [r], np.sum(r))
        case(f"sum_axis0_{tag}", "sum_axis0", "arith", [r], np.sum(r, axis=0))
        case(f"prod_axis1_{tag}", "prod_axis1", "arith", [r], np.prod(r, axis=1))
        case(f"mean_axis1_{tag}", "mean_axis1", "arith", [r], np.mean(r, axis=1))
        # Matrix products (BLAS cgemm/zgemm), a transposed operand included.
        m1, m2 = finite(dtype, (2, 3, 4)), finite(dtype, (4, 5))
        case(f"matmul_{tag}", "matmul", "arith", [m1, m2], np.matmul(m1, m2))
        case(f"matmul_t_{tag}", "matmul_t", "arith", [m2, m2], np.matmul(m2.T, m2))
        # isclose and where.
        c = finite(dtype, (6,))
        d = (c + np.array([0, 1e-9, 1e-3, 0, 0, 0]) * (1 + 1j)).astype(dtype)
        c[3] = complex(np.nan, 0)
        d[3] = complex(np.nan, 0)
        c[4] = complex(np.inf, 1)
        d[4] = complex(np.inf, 1)
        case(f"isclose_{tag}", "isclose", "exact", [c, d], np.isclose(c, d))
        cond = np.array([True, False, True, False, True, False])
        case(f"where_{tag}", "where", "exact", [cond, c, d], np.where(cond, c, d))
        # astype both ways: complex -> float keeps the real part; float -> complex has imaginary 0.
        case(f"astype_real_{tag}", "astype_float64", "exact", [c], c.real.astype(np.float64))

    # Promotion (NumPy 2, NEP 50): arrays promote by dtype, Python scalars are weak.
    c8 = finite(np.complex64, (4,))
    f64 = rng.uniform(-2, 2, 4)
    i64 = np.arange(4, dtype=np.int64) - 2
    f32 = rng.uniform(-2, 2, 4).astype(np.float32)
    f16 = rng.uniform(-2, 2, 4).astype(np.float16)
    case("promote_c8_f64", "add", "exact", [c8, f64], np.add(c8, f64))
    case("promote_c8_i64", "add", "exact", [c8, i64], np.add(c8, i64))
    case("promote_f16_c8", "add", "exact", [f16, c8], np.add(f16, c8))
    case("promote_f32_complex_scalar", "multiply", "arith", [f32, np.complex128(0.5 - 2j)],
         np.multiply(f32, 0.5 - 2j), scalar_inputs=(1,))
    case("promote_i64_complex_scalar", "add", "exact", [i64, np.complex128(1 + 1j)], np.add(i64, 1 + 1j),
         scalar_inputs=(1,))
    case("promote_c8_float_scalar", "add", "exact", [c8, np.float64(0.1)], np.add(c8, 0.1), scalar_inputs=(1,))
    case("true_divide_i64_c8", "divide", "arith", [i64, c8], np.divide(i64, c8))
    case("exp_f32_to_c16", "exp", "math", [(f32 + 1j * f64).astype(np.complex128)],
         np.exp((f32 + 1j * f64).astype(np.complex128)))

with open(os.path.join(OUT, "cases.txt"), "w") as f:
    f.write("\n".join(listing) + "\n")
with open(os.path.join(sys.argv[1], "complex_golden.stamp"), "w") as f:
    f.write("ok\n")
