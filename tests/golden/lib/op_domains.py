"""Input generation shared by the golden scripts: dtype lists, bfloat16 rounding (absent from NumPy), the input
domains (one generator per operand) and the op table's domain column (src/core/ops_internal.def)."""
import os
from dataclasses import dataclass

import numpy as np

BOOL = ["bool"]
INTS = ["int8", "int16", "int32", "int64", "uint8"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
ALL = BOOL + INTS + FLOATS
NUMERIC = INTS + FLOATS
BITWISE = BOOL + INTS

SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.5, -0.5]


# ---------------------------------------------------------------- bfloat16 and dtype helpers

def f32_to_bf16_bits(x):
    """Rounds float32 values to bfloat16 (nearest even) and returns the uint16 bit patterns."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    quiet = ((u >> 16) | 0x40) & 0xFFFF
    return np.where(nan, quiet, rounded).astype(np.uint16).reshape(np.shape(x))


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_bf16(x):
    """float32 array holding x rounded to bfloat16 (through float32, as ml_dtypes and PyTorch do)."""
    with np.errstate(all="ignore"):
        return bf16_bits_to_f32(f32_to_bf16_bits(np.asarray(x, dtype=np.float64).astype(np.float32)))


def proxy_dtype(name):
    """NumPy dtype that types like `name` (float16 for bfloat16, see the module docstring)."""
    return np.dtype(np.float16 if name == "bfloat16" else name)


def to_dtype(values, name):
    """Converts values (float64/int64/bool) to the storage of dtype `name` (bfloat16 rounded)."""
    with np.errstate(all="ignore"):
        if name == "bfloat16":
            return round_bf16(values)
        if name == "bool":
            return np.asarray(values) != 0
        return np.asarray(values).astype(name)


def int_range(name):
    if name == "bool":
        return 0, 1
    info = np.iinfo(name)
    return int(info.min), int(info.max)


# ---------------------------------------------------------------- input generators

@dataclass
class Domain:
    """Values an operand takes: floats uniform in `floats`, integers in `ints` (None: the dtype's whole
    range), both clipped to the dtype; `pool` picks from a list instead; `nonzero` keeps zero out."""
    floats: tuple = (-4.0, 4.0)
    ints: tuple = None
    pool: list = None
    nonzero: bool = False
    halves: bool = False  # floats on a grid of 0.5 (exact ties for round)

    def generate(self, rng, name, shape):
        n = int(np.prod(shape, dtype=np.int64))
        if self.pool is not None:
            values = np.asarray(self.pool, dtype=np.float64)[rng.integers(0, len(self.pool), n)]
            if name in BOOL + INTS:
                lo, hi = int_range(name)
                values = np.clip(np.round(values), lo, hi).astype(np.int64)
        elif name == "bool":
            values = rng.integers(0, 2, n) if not self.nonzero else np.ones(n, dtype=np.int64)
        elif name in INTS:
            lo, hi = int_range(name)
            if self.ints is not None:
                lo, hi = max(lo, self.ints[0]), min(hi, self.ints[1])
            values = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64)
            if self.nonzero:
                values[values == 0] = 1 if hi >= 1 else -1
        else:
            lo, hi = self.floats
            values = rng.uniform(lo, hi, n)
            if self.halves:
                values = np.round(values * 2) / 2 + np.where(rng.random(n) < 0.5, 0, rng.uniform(-0.2, 0.2, n))
            if self.nonzero:
                small = np.abs(values) < 0.25
                values[small] = np.copysign(0.25, values[small]) + values[small]
        return to_dtype(values.reshape(shape), name)


ANY = Domain()
WIDE = Domain(floats=(-100.0, 100.0))
SMALL_INT = Domain(floats=(-10.0, 10.0), ints=(-10, 10))
POSITIVE = Domain(floats=(0.01, 20.0), ints=(1, 100))
UNIT = Domain(floats=(-1.0, 1.0), ints=(-1, 1))
NONZERO = Domain(floats=(-8.0, 8.0), nonzero=True)
SMALL_NONZERO = Domain(floats=(-8.0, 8.0), ints=(-12, 12), nonzero=True)
COMPARE = Domain(pool=[-1.0, -0.5, 0.0, 0.1, 0.5, 1.0, 1.5, 2.0])
LOGICAL = Domain(pool=[0.0, 0.0, 1.0, -1.0, 2.0, 0.5])


POWER_BASE = Domain(floats=(0.05, 4.0), ints=(-5, 5))
POWER_EXP = Domain(floats=(-3.0, 3.0), ints=(0, 4))


ACTIVATION = Domain(floats=(-12.0, 12.0), ints=(-20, 20))
LARGE = [30.0, -30.0, 100.0, -100.0, 1e30, -1e30]

# Each name of the op table's domain column (detail::InputDomain): the generator of each operand.
DOMAINS = {
    "Any": [ANY, ANY], "Positive": [POSITIVE], "Unit": [UNIT], "SmallInt": [SMALL_INT],
    "NonNegative": [Domain(floats=(0.0, 50.0), ints=(0, 100))],
    "AboveMinusOne": [Domain(floats=(-0.9, 10.0), ints=(0, 100))],
    "Moderate": [Domain(floats=(-6.0, 6.0), ints=(-6, 6))], "Activation": [ACTIVATION, ACTIVATION],
    "Halves": [Domain(halves=True)], "Logical": [LOGICAL, LOGICAL], "Compare": [COMPARE, COMPARE],
    "Divisor": [ANY, NONZERO], "IntDivisor": [WIDE, SMALL_NONZERO], "Power": [POWER_BASE, POWER_EXP],
    "Select": [LOGICAL, ANY, ANY],
    "Clip": [ANY, Domain(floats=(-3.0, 0.0), ints=(-3, 2)), Domain(floats=(0.5, 3.0), ints=(3, 9))],
    "None": [],
}

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")


def read_rows(path, macro, count):
    """The first `count` fields of each row `macro(...)` of an X-macro file (those fields hold no commas)."""
    with open(os.path.join(ROOT, path)) as f:
        return [[x.strip(" )\n") for x in line[len(macro) + 1:].split(",")[:count]]
                for line in f if line.startswith(macro + "(")]


def read_table_domains():
    """{op name: domain name} from include/kiln/ops.def (Code, name) and src/core/ops_internal.def (Code, ...,
    domain: the 7th field), whose rows pair up by Code."""
    names = {row[0]: row[1] for row in read_rows("include/kiln/ops.def", "KILN_OP", 2)}
    domains = {row[0]: row[6] for row in read_rows("src/core/ops_internal.def", "KILN_OP_IMPL", 7)}
    if names.keys() != domains.keys():
        raise SystemExit(f"ops_golden.py: ops.def and ops_internal.def have different rows: "
                         f"{sorted(names.keys() ^ domains.keys())}")
    for code, domain in domains.items():
        if domain not in DOMAINS:
            raise SystemExit(f"ops_golden.py: {names[code]}'s domain {domain} is not in DOMAINS")
    return {names[code]: domain for code, domain in domains.items()}


TABLE_DOMAINS = read_table_domains()


def table_domains(name, arity):
    """The generators of `name`'s operands from the op table: a C++ operator op_X (or in-place op_iX) uses X's."""
    op = name
    if op.startswith("op_"):
        op = op[3:]
        if op not in TABLE_DOMAINS and op.startswith("i"):
            op = op[1:]
    generators = DOMAINS[TABLE_DOMAINS[op]]
    return [generators[min(k, len(generators) - 1)] for k in range(arity)]
