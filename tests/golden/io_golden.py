"""NumPy golden data for kiln's .npy reader/writer and NumPy-style printing.

Run as `python3 io_golden.py OUTDIR`; writes into OUTDIR/io/ and finally
OUTDIR/io_golden.stamp.

.npy files (tests/core/test_npy.cpp):
  <dtype>_c.npy, <dtype>_f.npy (Fortran order), <dtype>_be.npy (big-endian),
  <dtype>_fbe.npy (both), each with <name>.raw: the same values as raw
  little-endian C-order bytes (ndarray.tobytes()), the reference the test compares to.
  Special files: 0-d, empty, format 2.0 (long header) and 3.0, '=' byte order,
  unsupported dtypes, a truncated file, a bad magic.
  save_<dtype>.npy: np.save of np.arange(6).reshape(2, 3).astype(dtype), which
  kiln's save must reproduce byte for byte.
Print cases (tests/core/test_print.cpp):
  repr_cases.txt lists one case per line: `name threshold edgeitems precision linewidth`;
  repr_<name>.npy holds the array and repr_<name>.txt NumPy's repr() of it under those options.
"""

import os
import sys

import numpy as np

OUT = os.path.join(sys.argv[1], "io")
os.makedirs(OUT, exist_ok=True)


def path(name):
    return os.path.join(OUT, name)


def write_raw(name, a):
    with open(path(name + ".raw"), "wb") as f:
        f.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes())


DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64", "complex64",
          "complex128"]


def values(dtype, shape):
    n = int(np.prod(shape))
    i = np.arange(n)
    if dtype == "bool":
        v = (i * 7 % 3) == 1
    elif dtype in ("int8", "uint8"):
        v = (i * 37 + 11) % 256 - (128 if dtype == "int8" else 0)
    elif dtype.startswith("int"):
        info = np.iinfo(dtype)
        v = (i - n // 2) * (info.max // (n + 1)) + i % 5
    elif dtype.startswith("complex"):
        v = (i - n / 2) * 0.37 + 1j / (i + 3)
    else:
        v = (i - n / 2) * 0.37 + 1.0 / (i + 3)
    return v.astype(dtype).reshape(shape)


# ------------------------------------------------------------------ .npy files
for dt in DTYPES:
    a = values(dt, (2, 3, 4))
    np.save(path(f"{dt}_c.npy"), a)
    write_raw(f"{dt}_c", a)
    np.save(path(f"{dt}_f.npy"), np.asfortranarray(a))
    write_raw(f"{dt}_f", a)
    big = a.astype(a.dtype.newbyteorder(">"))
    np.save(path(f"{dt}_be.npy"), big)
    write_raw(f"{dt}_be", a)
    np.save(path(f"{dt}_fbe.npy"), np.asfortranarray(big))
    write_raw(f"{dt}_fbe", a)
    # Byte-exact reference for kiln's save.
    np.save(path(f"save_{dt}.npy"), np.arange(6).reshape(2, 3).astype(dt))

np.save(path("save_0d_float64.npy"), np.array(2.5))
np.save(path("save_empty_float32.npy"), np.zeros((0, 3), dtype=np.float32))
np.save(path("save_1d_int32.npy"), np.arange(5, dtype=np.int32))

# 0-d and empty arrays.
np.save(path("scalar_f64.npy"), np.array(3.25))
np.save(path("scalar_i32.npy"), np.array(-7, dtype=np.int32))
np.save(path("empty_f32.npy"), np.zeros((0, 3), dtype=np.float32))
np.save(path("empty_1d_i64.npy"), np.zeros((0,), dtype=np.int64))

# Fortran-order 2-d with a hand-checkable layout: [[0, 1, 2], [3, 4, 5]] stored column-major.
np.save(path("fortran_2x3_i32.npy"), np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3)))

# Format 3.0 and 2.0 written by NumPy itself.
a = values("float32", (3, 5))
with open(path("v3_f32.npy"), "wb") as f:
    np.lib.format.write_array(f, a, version=(3, 0))
write_raw("v3_f32", a)
with open(path("v2_f64.npy"), "wb") as f:
    np.lib.format.write_array(f, values("float64", (4, 2)), version=(2, 0))
write_raw("v2_f64", values("float64", (4, 2)))

# Format 2.0 with a header over 64 KiB (NumPy only writes these for huge structured
# dtypes, so pad a plain header with spaces the way NumPy pads; np.load accepts it).
a = values("int16", (7, 3))
header = "{'descr': '<i2', 'fortran_order': False, 'shape': (7, 3), }" + " " * 70000
hlen = len(header) + 1
pad = 64 - ((6 + 2 + 4 + hlen) % 64)
with open(path("v2_long_header_i16.npy"), "wb") as f:
    f.write(b"\x93NUMPY\x02\x00" + (hlen + pad).to_bytes(4, "little") + header.encode("latin1") +
            b" " * pad + b"\n" + a.tobytes())
assert np.array_equal(np.load(path("v2_long_header_i16.npy"), allow_pickle=True), a)
write_raw("v2_long_header_i16", a)

# '=' (native) byte order, written by hand (NumPy always writes '<' or '>').
a = values("float64", (5,))
header = "{'descr': '=f8', 'fortran_order': False, 'shape': (5,), }"
hlen = len(header) + 1
pad = 64 - ((6 + 2 + 2 + hlen) % 64)
with open(path("native_order_f64.npy"), "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + (hlen + pad).to_bytes(2, "little") + header.encode("latin1") +
            b" " * pad + b"\n" + a.astype("<f8").tobytes())
write_raw("native_order_f64", a)

# Files kiln must reject.
np.save(path("complex256.npy"), (np.arange(4) * (1 + 2j)).astype(np.clongdouble))
np.save(path("object.npy"), np.array([1, "a", None], dtype=object), allow_pickle=True)
np.save(path("uint16.npy"), np.arange(4, dtype=np.uint16))
np.save(path("structured.npy"), np.zeros(3, dtype=[("x", "<f4"), ("y", "<i4")]))
with open(path("float32_c.npy"), "rb") as f:
    whole = f.read()
with open(path("truncated.npy"), "wb") as f:
    f.write(whole[:-10])
with open(path("truncated_header.npy"), "wb") as f:
    f.write(whole[:40])
with open(path("bad_magic.npy"), "wb") as f:
    f.write(b"\x93NUMPX" + whole[6:])
with open(path("bad_version.npy"), "wb") as f:
    f.write(whole[:6] + b"\x07\x00" + whole[8:])

# ------------------------------------------------------------------ print cases
rng = np.random.default_rng(20240601)
DEFAULTS = (1000, 3, 8, 75)
cases = {}


def case(name, a, options=DEFAULTS):
    cases[name] = (np.asarray(a), options)


case("f32_2x2", np.array([[1, 2], [3, 4]], dtype=np.float32))
case("f64_halves", np.array([1.5, 2.25, -3.0]))
case("f32_normal_3x4", rng.standard_normal((3, 4)).astype(np.float32))
case("f64_normal_5", rng.standard_normal(5))
case("f64_normal_4x6", rng.standard_normal((4, 6)))
case("f16_values", np.array([0.1, 1.5, -2.25, 100.0], dtype=np.float16))
case("f16_large", np.array([1000.0, 2.0], dtype=np.float16))
case("f32_sci_range", np.array([1e-5, 1.0, 1e5], dtype=np.float32))
case("f32_sci_digits", np.array([0.3, 1.2345678e-5], dtype=np.float32))
case("f32_million", np.array([1e6], dtype=np.float32))
case("f32_below_million", np.array([999999.0, 1.5], dtype=np.float32))
case("f64_1e8", np.array([1e8, 1.0]))
case("f64_1e7", np.array([1e7, 1.5]))
case("f64_tiny_huge", np.array([1e-100, 1.0, 1e100]))
case("f64_1e-4", np.array([1e-4, 1.0]))
case("f64_cutoff", np.array([0.1, 1 / 3, 2 / 3]))
case("f32_cutoff", np.array([0.1, 1 / 3, 2 / 3], dtype=np.float32))
case("f64_round_up", np.array([0.999999999, 1.5]))
case("f64_nan_inf", np.array([np.nan, 1.5, -np.inf]))
case("f64_nan_posinf", np.array([np.nan, np.inf]))
case("f32_all_nan", np.array([np.nan, np.nan], dtype=np.float32))
case("f64_nan_sci", np.array([np.nan, 1e-8, 1.0]))
case("f64_negzero", np.array([-0.0, 1.0]))
case("f64_zeros", np.zeros((2, 2)))
case("f32_zeros", np.zeros(3, dtype=np.float32))
case("f64_zero_sci", np.array([0.0, 1e-9, 2.0]))
case("f64_linspace30", np.linspace(0, 1, 30))
case("f32_wide_2d", (np.arange(90, dtype=np.float32) * 1.25).reshape(3, 30))
case("f64_3d", np.arange(24, dtype=np.float64).reshape(2, 3, 4) / 4)
case("f32_4d", np.arange(16, dtype=np.float32).reshape(2, 2, 2, 2))
case("f64_summary_1d", np.arange(2000) / 7)
case("f64_summary_2d", np.arange(2000.0).reshape(40, 50))
case("f32_summary_3d", np.arange(2000, dtype=np.float32).reshape(10, 10, 20))
case("f64_summary_narrow", np.arange(3000.0).reshape(1000, 3))
case("i64_arange", np.arange(10))
case("i64_summary", np.arange(1001))
case("i64_wide", np.arange(100) * 1000)
case("i64_extremes", np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max]))
case("i32_negative", np.array([[-5, 10], [300, -4000]], dtype=np.int32))
case("i8_values", np.array([-128, 0, 127], dtype=np.int8))
case("u8_values", np.array([0, 7, 255], dtype=np.uint8))
case("i16_3d", (np.arange(24, dtype=np.int16) - 12).reshape(2, 3, 4))
case("bool_1d", np.array([True, False, True]))
case("bool_all_true", np.array([True, True]))
case("bool_2d", np.array([[True, False], [False, False]]))
case("bool_0d", np.array(True))
case("f64_0d", np.array(3.5))
case("f32_0d", np.array(3.5, dtype=np.float32))
case("f64_0d_nan", np.array(np.nan))
case("f64_0d_sci", np.array(1.5e-7))
case("i64_0d", np.array(42))
case("i32_0d", np.array(-3, dtype=np.int32))
case("f32_empty", np.zeros(0, dtype=np.float32))
case("f64_empty", np.zeros(0))
case("i64_empty", np.zeros(0, dtype=np.int64))
case("bool_empty", np.zeros(0, dtype=bool))
case("f32_empty_2d", np.zeros((0, 3), dtype=np.float32))
case("i64_empty_2d", np.zeros((2, 0), dtype=np.int64))
case("f32_dtype_wraps", np.arange(13, dtype=np.float32) + 0.5)
case("i8_dtype_wraps", np.arange(19, dtype=np.int8) * 5)
case("f32_precision3", rng.standard_normal((2, 3)).astype(np.float32), (1000, 3, 3, 75))
case("f64_precision0", np.array([0.5, 1.5, 2.25]), (1000, 3, 0, 75))
case("i64_threshold5", np.arange(10), (5, 3, 8, 75))
case("f64_edgeitems1", np.arange(100.0).reshape(10, 10), (50, 1, 8, 75))
case("f64_linewidth40", np.arange(20.0) / 3, (1000, 3, 8, 40))
case("i64_linewidth20_2d", np.arange(30).reshape(3, 10), (1000, 3, 8, 20))
# Complex: the real and imaginary parts are formatted apart (the imaginary one with its sign), then joined.
case("c8_basic", np.array([1 + 2j, -1j], dtype=np.complex64))
case("c16_implied_dtype", np.array([1.5 + 2j, 0.25 - 3j]))
case("c16_nan_inf", np.array([1.5 + 2j, complex(np.nan, 1), complex(np.inf, -np.inf), complex(0, np.nan)]))
case("c16_sci", np.array([1e-8 + 1j, 2 + 3e10j]))
case("c8_2d", (np.arange(6, dtype=np.float32) / 3 - 1j * np.arange(6, dtype=np.float32)).reshape(2, 3))
case("c16_0d", np.array(-0.5 + 0.25j))
case("c8_empty", np.zeros(0, dtype=np.complex64))
case("c16_summary", np.arange(2000) * (1 + 0.5j))
case("c16_negzero", np.array([complex(-0.0, -0.0), complex(0.0, 0.0)]))

with open(path("repr_cases.txt"), "w") as listing:
    for name, (a, (threshold, edgeitems, precision, linewidth)) in cases.items():
        np.save(path(f"repr_{name}.npy"), a)
        with np.printoptions(threshold=threshold, edgeitems=edgeitems, precision=precision,
                             linewidth=linewidth):
            text = repr(a)
        with open(path(f"repr_{name}.txt"), "w") as f:
            f.write(text)
        listing.write(f"{name} {threshold} {edgeitems} {precision} {linewidth}\n")

with open(os.path.join(sys.argv[1], "io_golden.stamp"), "w") as f:
    f.write("ok\n")
