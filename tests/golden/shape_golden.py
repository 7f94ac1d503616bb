"""NumPy golden data for kiln's views and shape ops (tests/core/test_shape_ops.cpp).

Run as `python3 shape_golden.py OUTDIR`; writes OUTDIR/shape_golden.txt and OUTDIR/shape_golden.stamp.
Each line of the .txt is one case: `ops | shape | strides | offset | view | values`, where `ops` is a chain
of `;`-separated steps applied to base = arange(n, int64).reshape(shape) (the first step, `base D,D,..`):
  T                      transpose
  perm A,B,..            permute axes
  swap A B               swapaxes
  move S D               moveaxis
  expand A               expand_dims
  squeeze                squeeze all size-1 axes
  bcast D,D,..           broadcast_to
  slice A START STOP STEP  (START/STOP may be `_` for None)
  index E E ..           basic index, entries: i:N  s:START:STOP:STEP  n (newaxis)  e (ellipsis)
  reshape D,D,..         reshape (one extent may be -1)
Expected results: shape; strides in elements (`_` on axes of extent <= 1, whose stride does not matter);
offset in elements from the base's first element; view = 1 when the result shares the base's memory
(`_` when empty);
values in C order. Strides and offset are `_` for empty results, the offset also for copies.
"""
import os
import random
import sys

import numpy as np


def csv(values):
    return ",".join(str(int(v)) for v in values)


def opt(v):
    return "_" if v is None else str(v)


def random_slice(rng, extent):
    step = rng.choice([1, 1, 2, 3, -1, -2, -3])
    pick = lambda: rng.choice([None, rng.randint(-extent - 2, extent + 2)])  # noqa: E731
    return pick(), pick(), step


def random_index(rng, ndim, extents):
    """A random basic index for an array of `extents`: returns (numpy tuple, kiln spec)."""
    entries, spec = [], []
    axis = 0
    use_ellipsis = rng.random() < 0.3
    consumed = rng.randint(0, ndim)
    ellipsis_at = rng.randint(0, consumed) if use_ellipsis else -1
    for k in range(consumed + 1):
        if k == ellipsis_at:
            entries.append(Ellipsis)
            spec.append("e")
            axis += ndim - consumed
        if k == consumed:
            break
        if rng.random() < 0.15:
            entries.append(None)
            spec.append("n")
        extent = extents[axis]
        if rng.random() < 0.3 and extent > 0:
            i = rng.randint(-extent, extent - 1)
            entries.append(i)
            spec.append(f"i:{i}")
        else:
            start, stop, step = random_slice(rng, extent)
            entries.append(slice(start, stop, step))
            spec.append(f"s:{opt(start)}:{opt(stop)}:{step}")
        axis += 1
    if rng.random() < 0.15:
        entries.append(None)
        spec.append("n")
    return tuple(entries), "index " + " ".join(spec)


def random_view(rng, a):
    """One random view step: returns (new array, step text)."""
    kind = rng.choice(["T", "perm", "swap", "move", "slice", "index", "expand", "squeeze", "bcast"])
    nd = a.ndim
    if kind == "T":
        return a.T, "T"
    if kind == "perm" and nd > 0:
        axes = list(range(nd))
        rng.shuffle(axes)
        return np.transpose(a, axes), "perm " + csv(axes)
    if kind == "swap" and nd > 0:
        i, j = rng.randint(-nd, nd - 1), rng.randint(-nd, nd - 1)
        return np.swapaxes(a, i, j), f"swap {i} {j}"
    if kind == "move" and nd > 0:
        i, j = rng.randint(-nd, nd - 1), rng.randint(-nd, nd - 1)
        return np.moveaxis(a, i, j), f"move {i} {j}"
    if kind == "slice" and nd > 0:
        axis = rng.randint(0, nd - 1)
        start, stop, step = random_slice(rng, a.shape[axis])
        index = [slice(None)] * nd
        index[axis] = slice(start, stop, step)
        return a[tuple(index)], f"slice {axis} {opt(start)} {opt(stop)} {step}"
    if kind == "index":
        entries, spec = random_index(rng, nd, a.shape)
        if Ellipsis not in entries:  # a trailing ellipsis changes nothing but keeps 0-d results views, as in kiln
            entries += (Ellipsis,)
        return a[entries], spec
    if kind == "expand" and nd < 5:
        axis = rng.randint(-nd - 1, nd)
        return np.expand_dims(a, axis), f"expand {axis}"
    if kind == "squeeze":
        return np.squeeze(a), "squeeze"
    if kind == "bcast" and nd < 5:
        shape = [rng.choice([1, 2, 3])] * rng.randint(0, 1) + [e if e != 1 else rng.choice([1, 3]) for e in a.shape]
        return np.broadcast_to(a, shape), "bcast " + csv(shape)
    return a.T, "T"


def random_factorization(rng, n):
    """A random shape with product n (n >= 1), possibly with size-1 axes and one -1."""
    factors = []
    rest = n
    for d in range(2, n + 1):
        while rest % d == 0:
            factors.append(d)
            rest //= d
    rng.shuffle(factors)
    dims = []
    while factors:
        take = rng.randint(1, len(factors))
        dims.append(int(np.prod(factors[:take])))
        factors = factors[take:]
    for _ in range(rng.randint(0, 2)):
        dims.insert(rng.randint(0, len(dims)), 1)
    if not dims:
        dims = [1] * rng.randint(0, 2)
    shown = list(dims)
    if shown and rng.random() < 0.3:
        shown[rng.randrange(len(shown))] = -1
    return shown


def describe(base, r):
    """The expected-result columns for a result `r` derived from `base`."""
    itemsize = r.itemsize
    strides, offset, view = "_", "_", "_"  # an empty result has no meaningful layout and shares nothing
    if r.size > 0:
        strides = ",".join("_" if e <= 1 else str(s // itemsize) for e, s in zip(r.shape, r.strides))
        view = "1" if np.shares_memory(r, base) else "0"
        if view == "1":
            offset = (r.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // itemsize
    return f"{csv(r.shape)} | {strides} | {offset} | {view} | {csv(r.ravel())}"


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(20240611)
    lines = []
    for case in range(900):
        ndim = rng.randint(0, 4)
        shape = [rng.randint(1, 4) for _ in range(ndim)]
        base = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        steps = [f"base {csv(shape)}"]
        a = base
        for _ in range(rng.randint(1, 3)):
            a, step = random_view(rng, a)
            steps.append(step)
        if case % 2 == 0 and a.size > 0:  # half the cases end in a reshape of the view
            new_shape = random_factorization(rng, a.size)
            a = a.reshape(new_shape)
            steps.append("reshape " + csv(new_shape))
        lines.append("; ".join(steps) + " | " + describe(base, a))
    with open(os.path.join(out_dir, "shape_golden.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "shape_golden.stamp"), "w") as f:
        f.write("ok\n")


if __name__ == "__main__":
    main()
