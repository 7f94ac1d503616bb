"""NumPy golden data for kiln::fft (tests/core/test_fft.cpp): every function of numpy.fft.

Run as `python3 fft_golden.py OUTDIR` (NumPy >= 2: its result dtypes); writes into OUTDIR/fft/ and finally
OUTDIR/fft_golden.stamp.

cases.txt lists one case per line: `name func view n axis s axes norm`, where `-` stands for an argument left
unset (NumPy's None), and s / axes are comma-separated. `view` tells the test which view of the stored input to
transform, so strided operands are covered: `plain` (the array), `T` (its transpose), `step` (every other element
of the last axis, x[..., ::2]) or `flip` (the last axis reversed, a negative stride). The input is
<name>_in.npy (NumPy computed on the same view), the expected result <name>_out.npy. The test's tolerance is a
multiple of log2(points) * eps of the result's precision, relative to the largest magnitude of the result.
"""

import os
import sys
import warnings

import numpy as np

# s without axes is deprecated in NumPy 2 (kiln keeps its meaning: the last len(s) axes); the case stays covered.
warnings.filterwarnings("ignore", category=DeprecationWarning, message=".*axes.*should not be .None.")

OUT = os.path.join(sys.argv[1], "fft")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(2)
listing = []

VIEWS = {"plain": lambda x: x, "T": lambda x: x.T, "step": lambda x: x[..., ::2], "flip": lambda x: x[..., ::-1]}


def arg(value):
    if value is None:
        return "-"
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    return str(value)


def data(shape, dtype):
    if np.issubdtype(dtype, np.complexfloating):
        return (rng.uniform(-1, 1, shape) + 1j * rng.uniform(-1, 1, shape)).astype(dtype)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-5, 6, shape).astype(dtype)
    return rng.uniform(-1, 1, shape).astype(dtype)


def case(name, func, x, view="plain", n=None, axis=None, s=None, axes=None, norm=None):
    fn = getattr(np.fft, func)
    v = VIEWS[view](x)
    kwargs = {}
    if func in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
        kwargs = {"n": n, "axis": -1 if axis is None else axis}
    else:
        if s is not None:
            kwargs["s"] = s
        if axes is not None:
            kwargs["axes"] = axes
    expected = fn(v, norm=norm, **kwargs)
    np.save(os.path.join(OUT, f"{name}_in.npy"), x)
    np.save(os.path.join(OUT, f"{name}_out.npy"), expected)
    listing.append(" ".join([name, func, view, arg(n), arg(axis), arg(s), arg(axes), arg(norm)]))


NORMS = [None, "backward", "ortho", "forward"]
SIZES = [1, 2, 5, 8, 17, 64]
REAL_IN = {"f32": np.float32, "f64": np.float64, "i64": np.int64}
COMPLEX_IN = {"c8": np.complex64, "c16": np.complex128}

# One-dimensional transforms: every size and norm, each input dtype, n below and above the length.
for func in ("fft", "ifft", "rfft", "irfft", "hfft", "ihfft"):
    takes_complex = func not in ("rfft", "ihfft")
    dtypes = dict(REAL_IN, **COMPLEX_IN) if takes_complex else REAL_IN
    halved = func in ("irfft", "hfft")  # default n = 2 (m - 1): a length-1 input has no default n
    for size in SIZES:
        for k, norm in enumerate(NORMS):
            for tag, dtype in dtypes.items():
                if size == 1 and halved:
                    continue
                if k > 0 and tag not in ("f64", "c8"):
                    continue  # every norm on two dtypes; the others with the default norm
                case(f"{func}_{size}_{tag}_{norm}", func, data((size,), dtype), norm=norm)
        for tag in ("f32", "c16") if takes_complex else ("f32", "f64"):
            x = data((size,), dtypes[tag])
            for n in sorted({max(1, size // 2), size + 3, 2 * size + 1}):
                case(f"{func}_{size}_{tag}_n{n}", func, x, n=n)
    # Along an axis of a 2-d array, negative and positive, and through strided views.
    src = data((6, 10), np.complex128 if takes_complex else np.float64)
    case(f"{func}_2d_axis0", func, src, axis=0)
    case(f"{func}_2d_axism2_ortho", func, src, axis=-2, norm="ortho")
    case(f"{func}_2d_T", func, src, view="T", axis=1)
    case(f"{func}_2d_step", func, src, view="step", n=7)
    case(f"{func}_2d_flip", func, src, view="flip", axis=0)
    case(f"{func}_3d_axis1", func, data((3, 5, 4), np.float32), axis=1, norm="forward")

# n-dimensional transforms: 2-d and 3-d shapes, every norm, s below and above, axes permuted.
for func in ("fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn"):
    takes_complex = not func.startswith("rfft")
    base = np.complex128 if takes_complex else np.float64
    for shape in ((4, 6), (3, 5, 7), (2, 3, 4, 5)):
        shape_tag = "x".join(map(str, shape))
        for norm in NORMS:
            case(f"{func}_{shape_tag}_{norm}", func, data(shape, base), norm=norm)
        case(f"{func}_{shape_tag}_f32", func, data(shape, np.float32))
        case(f"{func}_{shape_tag}_i64", func, data(shape, np.int64))
        if takes_complex:
            case(f"{func}_{shape_tag}_c8", func, data(shape, np.complex64))
        case(f"{func}_{shape_tag}_T", func, data(shape, base), view="T")
        case(f"{func}_{shape_tag}_step", func, data(shape, base), view="step")
        case(f"{func}_{shape_tag}_flip", func, data(shape, base), view="flip")
    x3 = data((4, 5, 6), base)
    if func.endswith("2"):
        case(f"{func}_s_small", func, x3, s=(3, 4))
        case(f"{func}_s_large", func, x3, s=(6, 9), norm="ortho")
        case(f"{func}_axes_10", func, x3, axes=(1, 0))
        case(f"{func}_axes_m1m3_s", func, x3, s=(7, 2), axes=(-1, -3), norm="forward")
    else:
        case(f"{func}_s_small", func, x3, s=(3, 4, 5))
        case(f"{func}_s_large", func, x3, s=(5, 8, 9), norm="ortho")
        case(f"{func}_s_only", func, x3, s=(3, 8))  # the last two axes
        case(f"{func}_s_keep", func, x3, s=(-1, 8), axes=(0, 2))  # -1 keeps the length
        case(f"{func}_axes_201", func, x3, axes=(2, 0, 1))
        case(f"{func}_axes_1", func, x3, axes=(1,), norm="forward")
        case(f"{func}_axes_repeat", func, x3, s=(3, 5), axes=(0, 0))  # NumPy transforms axis 0 twice
        case(f"{func}_axes_20_s", func, x3, s=(6, 3), axes=(2, 0))
    case(f"{func}_5d", func, data((2, 3, 2, 3, 4), base))  # more than cuFFT's three axes at once

# Frequencies and shifts.
for n in SIZES + [9, 10]:
    for d in (1.0, 0.25, 3.0):
        np.save(os.path.join(OUT, f"fftfreq_{n}_{d}_out.npy"), np.fft.fftfreq(n, d))
        np.save(os.path.join(OUT, f"rfftfreq_{n}_{d}_out.npy"), np.fft.rfftfreq(n, d))
for shape, axes in (((7,), None), ((4, 5), None), ((4, 5), (1,)), ((3, 4, 5), (0, 2)), ((3, 4, 5), (-1,))):
    for tag, dtype in (("f32", np.float32), ("i64", np.int64), ("c16", np.complex128)):
        x = data(shape, dtype)
        name = f"shift_{'x'.join(map(str, shape))}_{arg(axes)}_{tag}".replace(",", "_")
        np.save(os.path.join(OUT, f"{name}_in.npy"), x)
        np.save(os.path.join(OUT, f"{name}_fftshift.npy"), np.fft.fftshift(x, axes))
        np.save(os.path.join(OUT, f"{name}_ifftshift.npy"), np.fft.ifftshift(x, axes))
        listing.append(f"{name} shift plain - - - {arg(axes)} -")

with open(os.path.join(OUT, "cases.txt"), "w") as f:
    f.write("\n".join(listing) + "\n")
with open(os.path.join(sys.argv[1], "fft_golden.stamp"), "w") as f:
    f.write("ok\n")
