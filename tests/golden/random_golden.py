"""NumPy golden data for kiln's random streams (tests/core/test_random.cpp).

Run as `python3 random_golden.py OUTDIR`; writes OUTDIR/random/<case>.npy and OUTDIR/random_golden.stamp.

An independent, pure-NumPy implementation of Philox4x32-10 (checked here against the Random123
known-answer vectors) and of the stream layout documented in include/kiln/random.hpp. Each case
draws n elements at generator state (seed, offset); the expected values are saved in the output
dtype, except bfloat16, saved as float32 (exact; NumPy has no bfloat16).
fma is done exactly: float32 by an error-free transformation in float64, float64 with fractions.
log/sin/cos are evaluated in float64 and rounded (kiln's libm may differ by an ulp or two: the test
compares normal within a few ulp, uniform and randint bit-exactly).
Keep CASES in sync with kCases in tests/core/test_random.cpp.
"""
import os
import sys
from fractions import Fraction

import numpy as np

M32 = 0xFFFFFFFF
F32, F64 = np.float32, np.float64

# name, distribution, dtype, seed, offset, a, b, n
#   uniform: a, b = low, high; normal: a, b = mean, stddev; randint: a, b = low, high (ints)
CASES = [
    ("uniform_f32_a", "uniform", "float32", 0, 0, 0.0, 1.0, 1001),
    ("uniform_f32_b", "uniform", "float32", 42, 7, -2.5, 3.25, 998),
    ("uniform_f32_c", "uniform", "float32", 0xDEADBEEFCAFEBABE, (1 << 32) + 3, 1.0, 2.0, 4096),
    ("uniform_f64_a", "uniform", "float64", 0, 0, 0.0, 1.0, 999),
    ("uniform_f64_b", "uniform", "float64", 12345678901234567, 5, -1000.5, 0.001, 1000),
    ("uniform_f16_a", "uniform", "float16", 7, 0, 0.0, 1.0, 1000),
    ("uniform_f16_b", "uniform", "float16", 8, 1, -3.0, 5.5, 1003),
    ("uniform_bf16_a", "uniform", "bfloat16", 9, 0, 0.0, 1.0, 1000),
    ("uniform_bf16_b", "uniform", "bfloat16", 10, 3, -100.0, 100.0, 1002),
    ("normal_f32_a", "normal", "float32", 0, 0, 0.0, 1.0, 1001),
    ("normal_f32_b", "normal", "float32", (1 << 40) + 5, 1 << 33, 1.5, 2.0, 1000),
    ("normal_f64_a", "normal", "float64", 0, 0, 0.0, 1.0, 999),
    ("normal_f64_b", "normal", "float64", 77, 11, -3.0, 0.5, 1000),
    ("normal_f16", "normal", "float16", 3, 0, 0.0, 1.0, 1000),
    ("normal_bf16", "normal", "bfloat16", 4, 2, 10.0, 3.0, 1001),
    ("randint_i64_small", "randint", "int64", 0, 0, -5, 17, 1001),
    ("randint_i32", "randint", "int32", 1, 2, 0, 1000, 1000),
    ("randint_i64_big", "randint", "int64", 2, 0, -(1 << 62), 1 << 62, 999),
    ("randint_i64_full", "randint", "int64", 3, 9, -(1 << 63), (1 << 63) - 1, 1000),
    ("randint_u8", "randint", "uint8", 4, 0, 0, 256, 1000),
    ("randint_i8", "randint", "int8", 5, 0, -128, 128, 1000),
    ("randint_i16", "randint", "int16", 6, 4, -1000, 30000, 1000),
    ("randint_i64_span2p32", "randint", "int64", 7, 0, 0, 1 << 32, 1000),
    ("randint_i64_span2p32p1", "randint", "int64", 8, 0, 0, (1 << 32) + 1, 1000),
]


def philox4x32_10(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint64 arrays holding 32-bit values (Random123's philox4x32_R with R = 10)."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in (c0, c1, c2, c3))
    k0, k1 = np.uint64(k0), np.uint64(k1)
    m = np.uint64(M32)
    for r in range(10):
        if r:
            k0 = (k0 + np.uint64(0x9E3779B9)) & m
            k1 = (k1 + np.uint64(0xBB67AE85)) & m
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m
    return c0, c1, c2, c3


def check_known_answers():
    """Random123's kat_vectors for philox4x32_10."""
    kats = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((M32,) * 4, (M32, M32), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
         (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
    ]
    for ctr, key, want in kats:
        got = tuple(int(x) for x in philox4x32_10(*ctr, *key))
        assert got == want, (ctr, key, [hex(g) for g in got])


def stream_words(seed, offset, nblocks):
    """The stream's words, shape (nblocks, 4) uint64: block b has counter (b, offset) and key seed."""
    b = np.arange(nblocks, dtype=np.uint64)
    full = lambda v: np.full(nblocks, v, dtype=np.uint64)  # noqa: E731
    words = philox4x32_10(b & np.uint64(M32), b >> np.uint64(32), full(offset & M32), full(offset >> 32),
                          seed & M32, seed >> 32)
    return np.stack(words, axis=1)


def words32(seed, offset, n):
    """Word i of the stream for i < n (element i of the 4-per-block layouts)."""
    return stream_words(seed, offset, (n + 3) // 4).reshape(-1)[:n]


def words64(seed, offset, n):
    """(lo, hi) of element i in the 2-per-block layouts: words 2(i%2), 2(i%2)+1 of block i/2."""
    w = stream_words(seed, offset, (n + 1) // 2).reshape(-1, 2)[:n]
    return w[:, 0], w[:, 1]


def unit24(w, open_low=False):
    top = (w >> np.uint64(8)) + np.uint64(1 if open_low else 0)
    return top.astype(F32) * F32(2.0**-24)


def unit53(lo, hi, open_low=False):
    top = (hi << np.uint64(21)) | (lo >> np.uint64(11))
    return (top + np.uint64(1 if open_low else 0)).astype(F64) * 2.0**-53


def fma_f32(a, b, c):
    """fma in float32, rounded once: a*b is exact in float64, TwoSum gives the exact a*b + c = s + e."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F32), np.asarray(b, F32), np.asarray(c, F32))
    p = a.astype(F64) * b.astype(F64)
    c64 = c.astype(F64)
    s = p + c64
    bp = s - p
    e = (p - (s - bp)) + (c64 - bp)
    r = s.astype(F32)
    d = s - r.astype(F64)
    toward = np.nextafter(r, np.where(d > 0, F32(np.inf), F32(-np.inf)))
    midpoint = (d != 0) & (s == (r.astype(F64) + toward.astype(F64)) / 2)
    return np.where(midpoint & (np.sign(e) == np.sign(d)), toward, r)


def fma_f64(a, b, c):
    a, b, c = np.broadcast_arrays(np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64))
    return np.array([float(Fraction(x) * Fraction(y) + Fraction(z)) for x, y, z in zip(a, b, c)], F64)


def bfloat16_round(x):
    """float32 -> bfloat16 (round to nearest even), returned as the float32 value."""
    bits = np.asarray(x, F32).view(np.uint32).astype(np.uint64)
    bits = (bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return (bits << np.uint64(16)).astype(np.uint32).view(F32)


def largest_below(dtype, high):
    """The largest value of dtype strictly below high."""
    if dtype == "float64":
        return np.nextafter(F64(high), -np.inf)
    if dtype == "bfloat16":
        values = (np.arange(1 << 16, dtype=np.uint32) << np.uint32(16)).view(F32)
        values = values[np.isfinite(values)]
        values = values[values.astype(F64) < high]
        return F32(values.max())
    t = F32 if dtype == "float32" else np.float16
    x = np.array(high, F64).astype(t)  # NumPy rounds float64 -> float16 directly (one rounding)
    if float(x) >= high:
        x = np.nextafter(x, t(-np.inf))
    return x


def uniform(dtype, seed, offset, low, high, n):
    limit = largest_below(dtype, high)
    if dtype == "float64":
        lo, hi = words64(seed, offset, n)
        v = fma_f64(unit53(lo, hi), high - low, low)
        return np.minimum(v, limit)
    v = fma_f32(unit24(words32(seed, offset, n)), F32(high - low), F32(low))
    if dtype == "float32":
        return np.minimum(v, limit)
    r = v.astype(np.float16) if dtype == "float16" else bfloat16_round(v)
    return np.where(r.astype(F64) > float(limit), limit, r).astype(r.dtype)


def normal(dtype, seed, offset, mean, stddev, n):
    if dtype == "float64":
        w = stream_words(seed, offset, (n + 1) // 2)
        u1, u2 = unit53(w[:, 0], w[:, 1], open_low=True), unit53(w[:, 2], w[:, 3])
        r = np.sqrt(-2.0 * np.log(u1))
        theta = 6.283185307179586 * u2
        z = np.stack([r * np.cos(theta), r * np.sin(theta)], axis=1).reshape(-1)[:n]
        return fma_f64(z, stddev, mean)
    w = stream_words(seed, offset, (n + 3) // 4).reshape(-1, 2)  # one Box-Muller pair per row
    u1, u2 = unit24(w[:, 0], open_low=True), unit24(w[:, 1])
    r = np.sqrt(F32(-2.0) * np.log(u1.astype(F64)).astype(F32))
    theta = F32(6.283185307179586) * u2
    cos = np.cos(theta.astype(F64)).astype(F32)
    sin = np.sin(theta.astype(F64)).astype(F32)
    z = np.stack([r * cos, r * sin], axis=1).reshape(-1)[:n]
    v = fma_f32(z, F32(stddev), F32(mean))
    if dtype == "float16":
        return v.astype(np.float16)
    return bfloat16_round(v) if dtype == "bfloat16" else v


def randint(dtype, seed, offset, low, high, n):
    span = high - low
    if span <= 1 << 32:
        x = [int(w) for w in words32(seed, offset, n)]
        steps = [(v * span) >> 32 for v in x]
    else:
        lo, hi = words64(seed, offset, n)
        steps = [((int(h) << 32 | int(l)) * span) >> 64 for l, h in zip(lo, hi)]
    values = [low + s for s in steps]
    assert all(low <= v < high for v in values)
    return np.array(values, dtype=np.dtype(dtype))


def main():
    out = sys.argv[1]
    os.makedirs(os.path.join(out, "random"), exist_ok=True)
    check_known_answers()
    for name, dist, dtype, seed, offset, a, b, n in CASES:
        values = {"uniform": uniform, "normal": normal, "randint": randint}[dist](dtype, seed, offset, a, b, n)
        values = np.asarray(values)
        if dtype == "bfloat16":
            values = values.astype(F32)
        assert values.shape == (n,) and values.dtype == (F32 if dtype == "bfloat16" else np.dtype(dtype)), name
        np.save(os.path.join(out, "random", name + ".npy"), values)
    with open(os.path.join(out, "random_golden.stamp"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
