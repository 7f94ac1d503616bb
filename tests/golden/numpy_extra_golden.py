"""NumPy golden data for kiln/numpy_extra.hpp (tests/core/test_numpy_extra.cpp): tril/triu, diag/diagonal/trace,
outer, tensordot, pad, tile, repeat, roll, flip, unique, quantile/percentile/median, histogram, bincount,
searchsorted, meshgrid and einsum.

Run as `python3 numpy_extra_golden.py OUTDIR`; writes OUTDIR/numpy_extra/<name>.npy, the einsum cases in
OUTDIR/numpy_extra/einsum_cases.txt (one `index|subscripts|operand count` line each; operand j of case k is
in_einsum<k>_<j>.npy, its result einsum<k>.npy) and finally OUTDIR/numpy_extra_golden.stamp.
Inputs are saved as in_<name>.npy and loaded by the tests; expected results as <name>.npy.
"""
import os
import sys

import numpy as np

OUT = os.path.join(sys.argv[1], "numpy_extra")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20261127)


def save(name, array):
    np.save(os.path.join(OUT, name + ".npy"), np.asarray(array))


x = rng.standard_normal((4, 5))
x3 = rng.standard_normal((2, 3, 4))
v = rng.standard_normal(4)
w = rng.standard_normal(3)
xi = rng.integers(-9, 9, size=(4, 5)).astype(np.int32)
save("in_x", x)
save("in_x3", x3)
save("in_v", v)
save("in_w", w)
save("in_xi", xi)

# ---- triangles and diagonals
for k in (-1, 0, 2):
    save(f"tril_k{k}", np.tril(x, k))
    save(f"triu_k{k}", np.triu(x, k))
save("tril_x3", np.tril(x3, 1))          # the last two axes of every batch element
save("triu_xi", np.triu(xi, -1))         # the dtype is kept
for k in (0, 2, -1):
    save(f"diag_v_k{k}", np.diag(v, k))
for k in (0, 1, -2):
    save(f"diag_x_k{k}", np.diag(x, k))
save("diagonal_x3_o1_a0_a2", np.diagonal(x3, 1, 0, 2))
save("diagonal_x3_om1_a2_a1", np.diagonal(x3, -1, 2, 1))
save("trace_x", np.trace(x))
save("trace_x3_o1_a1_a2", np.trace(x3, 1, 1, 2))
save("trace_xi", np.trace(xi))            # int64, as sum

# ---- products
save("outer_v_w", np.outer(v, w))
y3 = rng.standard_normal((3, 4, 5))
z3 = rng.standard_normal((4, 2, 6))
save("in_y3", y3)
save("in_z3", z3)
save("tensordot_2", np.tensordot(x3, y3, axes=2))
save("tensordot_pairs", np.tensordot(x3, z3, axes=([0, 2], [1, 0])))
save("tensordot_0", np.tensordot(v, w, axes=0))

# ---- pad, tile, repeat, roll, flip
short = np.array([1.5, -2.0, 4.0])
save("in_short", short)
save("pad_constant", np.pad(x, (1, 2), mode="constant", constant_values=7.0))
save("pad_edge", np.pad(x, [(1, 0), (2, 3)], mode="edge"))
for mode in ("reflect", "symmetric", "wrap", "edge"):
    save(f"pad_{mode}_wide", np.pad(short, (7, 8), mode=mode))  # wider than the axis: the pattern repeats
    save(f"pad_{mode}_2d", np.pad(x, [(2, 1), (3, 4)], mode=mode))
save("pad_int_constant", np.pad(xi, 1, constant_values=-3))
save("tile_x_2_1_2", np.tile(x, (2, 1, 2)))
save("tile_v_2_3", np.tile(v, (2, 3)))
save("tile_x3_2", np.tile(x3, 2))
save("repeat_x_2_flat", np.repeat(x, 2))
save("repeat_x_3_axis1", np.repeat(x, 3, axis=1))
save("repeat_x_counts_axis0", np.repeat(x, [1, 0, 2, 1], axis=0))
save("roll_x_2", np.roll(x, 2))
save("roll_x_m1_axis1", np.roll(x, -1, axis=1))
save("roll_x_1_2_axes01", np.roll(x, (1, 2), axis=(0, 1)))
save("roll_x_1_1_axes11", np.roll(x, (1, 1), axis=(1, 1)))  # a repeated axis adds its shifts
save("flip_x3_all", np.flip(x3))
save("flip_x3_axis1", np.flip(x3, 1))
save("flip_x3_axes02", np.flip(x3, (0, 2)))

# ---- unique
ui = rng.integers(0, 6, size=(3, 4)).astype(np.int64)
save("in_ui", ui)
values, index, inverse, counts = np.unique(ui, return_index=True, return_inverse=True, return_counts=True)
save("unique_ui_values", values)
save("unique_ui_index", index)
save("unique_ui_inverse", inverse)
save("unique_ui_counts", counts)
uf = np.array([2.5, np.nan, -1.0, 2.5, np.nan, 0.0, -0.0, 7.0, -1.0])
save("in_uf", uf)
values, counts = np.unique(uf, return_counts=True)
save("unique_uf_values", values)
save("unique_uf_counts", counts)

# ---- quantiles
save("quantile_x3_q03", np.quantile(x3, 0.3))
save("quantile_x3_qs_axis1", np.quantile(x3, [0.0, 0.25, 0.5, 1.0], axis=1))
save("quantile_x3_axes02_keep", np.quantile(x3, 0.7, axis=(0, 2), keepdims=True))
save("median_x3_last", np.median(x3, axis=-1))
save("median_x", np.median(x))
save("percentile_xi_40_axis0", np.percentile(xi, 40, axis=0))
xn = x.copy()
xn[1, 3] = np.nan
save("in_xn", xn)
save("median_xn_axis1", np.median(xn, axis=1))

# ---- histogram, bincount
data = rng.standard_normal(200)
save("in_data", data)
hist, edges = np.histogram(data, bins=10)
save("histogram_10_hist", hist)
save("histogram_10_edges", edges)
hist, edges = np.histogram(data, bins=5, range=(-1.0, 1.0))
save("histogram_5_range_hist", hist)
save("histogram_5_range_edges", edges)
given = np.array([-2.0, -1.0, 0.0, 0.5, 3.0])
save("in_given_edges", given)
hist, _ = np.histogram(data, bins=given)
save("histogram_edges_hist", hist)
dw = rng.random(200)
save("in_dw", dw)
hist, _ = np.histogram(data, bins=4, range=(-2.0, 2.0), weights=dw)
save("histogram_weights_hist", hist)
bc = np.array([0, 1, 1, 3, 2, 1, 7], dtype=np.int64)
bw = np.array([0.5, 1.0, -2.0, 0.25, 3.0, 1.5, 4.0])
save("in_bc", bc)
save("in_bw", bw)
save("bincount", np.bincount(bc))
save("bincount_min10", np.bincount(bc, minlength=10))
save("bincount_weights", np.bincount(bc, weights=bw))

# ---- searchsorted, meshgrid
sa = np.array([1.0, 2.0, 2.0, 3.0, 5.0, 8.0, 8.0])
sv = np.array([[2.0, 0.0, 8.0], [9.0, 3.5, 1.0]])
save("in_sa", sa)
save("in_sv", sv)
save("searchsorted_left", np.searchsorted(sa, sv, side="left"))
save("searchsorted_right", np.searchsorted(sa, sv, side="right"))
sn = np.array([1.0, 2.0, np.nan])
save("in_sn", sn)
save("searchsorted_nan", np.searchsorted(sn, np.array([np.nan, 3.0, 2.0])))
mx, my, mz = np.arange(2.0), np.arange(3.0) + 10, np.arange(4.0) + 20
for indexing in ("xy", "ij"):
    for i, g in enumerate(np.meshgrid(mx, my, mz, indexing=indexing)):
        save(f"meshgrid3_{indexing}_{i}", g)
    for i, g in enumerate(np.meshgrid(mx, my, indexing=indexing)):
        save(f"meshgrid2_{indexing}_{i}", g)

# ---- einsum
EINSUM = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ii", [(4, 4)]),
    ("ii->i", [(4, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("ijk,jl,lk->i", [(3, 4, 5), (4, 6), (6, 5)]),
    ("abc,cd,de,ea->b", [(2, 3, 4), (4, 5), (5, 6), (6, 2)]),
    ("iij->ji", [(3, 3, 2)]),
    ("i,i", [(1,), (3,)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("Ba,aB->B", [(2, 3), (3, 2)]),
    ("...i->...", [(2, 3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("ab,bc,cd,de->ae", [(2, 3), (3, 8), (8, 2), (2, 3)]),
]
with open(os.path.join(OUT, "einsum_cases.txt"), "w") as f:
    for k, (subscripts, shapes) in enumerate(EINSUM):
        operands = [rng.standard_normal(s) for s in shapes]
        for j, op in enumerate(operands):
            save(f"in_einsum{k}_{j}", op)
        save(f"einsum{k}", np.einsum(subscripts, *operands))
        f.write(f"{k}|{subscripts}|{len(operands)}\n")
ea = rng.integers(-4, 4, size=(3, 4)).astype(np.int32)
eb = rng.integers(-4, 4, size=(4, 2)).astype(np.int32)
save("in_einsum_int_a", ea)
save("in_einsum_int_b", eb)
save("einsum_int", np.einsum("ij,jk", ea, eb))  # int32 stays int32

with open(os.path.join(sys.argv[1], "numpy_extra_golden.stamp"), "w") as f:
    f.write("ok\n")
