"""NumPy golden data for kiln's NumPy-user API (tests/core/test_api.cpp, tests/cuda/test_api_gpu.cpp):
take/put, index arrays and boolean masks (reads and writes), isclose, sort/argsort, random permutations,
linalg.solve and linalg.lstsq.

Run as `python3 api_golden.py OUTDIR`; writes OUTDIR/api/<name>.npy and finally OUTDIR/api_golden.stamp.
Inputs are saved as in_<name>.npy and loaded by the tests; expected results as <name>.npy.
Permutations: kiln's permutation(n) at generator state (seed, 0) is the stable argsort of
randint(0, 2**32, n) keys; the keys come from random_golden.py's independent Philox implementation.
"""
import os
import sys

import numpy as np

sys.dont_write_bytecode = True  # keep __pycache__ out of the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import random_golden  # noqa: E402

OUT = os.path.join(sys.argv[1], "api")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20261123)


def save(name, array):
    np.save(os.path.join(OUT, name + ".npy"), np.asarray(array))


# ---- gathers: x (3, 4, 5) float64, an int64 index array with a negative entry
x = rng.standard_normal((3, 4, 5))
idx = np.array([[0, -1], [2, 1]], dtype=np.int64)
save("in_x", x)
save("in_idx", idx)
for axis in (0, 1, 2):
    save(f"take_axis{axis}", np.take(x, idx, axis=axis))
save("take_flat", np.take(x, np.array([0, 59, -1, 17, 17]), axis=None))
save("index_int_axis1", x[:, idx])          # x.index({Slice(), idx})
save("index_int_split", x[1, :, np.array([4, 0, -2])])  # int and array apart: the array's axes go first
save("index_int_adjacent", x[1, np.array([3, 0])])      # adjacent: they stay in place
save("index_array_then_int", x[idx, :, 1])               # array first: its axes lead anyway
mask2 = x[:, :, 0] > 0.0                     # (3, 4): a mask over the two leading axes
save("in_mask2", mask2)
save("index_mask2", x[mask2])
save("index_newaxis_mask2", x[None, mask2])
# several index arrays in one index: broadcast together; adjacent ones replace their axes, separated ones
# (by a slice) put the broadcast axes first; a mask among them counts as its nonzero() arrays
i_col = np.array([[0], [2]], dtype=np.int64)  # (2, 1)
j_row = np.array([1, -1, 3], dtype=np.int64)  # (3,)
save("in_i_col", i_col)
save("in_j_row", j_row)
save("index_two_arrays", x[i_col, j_row])                 # (2, 3, 5)
save("index_two_arrays_inner", x[:, j_row[:2], np.array([4, 0])])  # (3, 2): adjacent, in place
save("index_two_arrays_split", x[np.array([0, 2]), :, np.array([1, 4])])  # (2, 4): split, first
mask3 = np.array([True, False, True])
save("in_mask3", mask3)
save("index_mask_and_array", x[mask3, 1:3, np.array([0, 4])])  # mask -> [0, 2], split by a slice: (2, 2)
y2 = x.copy(); y2[i_col, j_row] = -5.0
save("put_two_arrays", y2)
y2 = x.copy(); y2[np.array([0, 2]), :, np.array([1, 4])] = np.arange(4.0)  # values (4,) broadcast to (2, 4)
save("put_two_arrays_split", y2)
mask_all = x > 0.5
save("in_mask_all", mask_all)
save("index_mask_all", x[mask_all])
mask_axis2 = np.array([True, False, True, True, False])
save("in_mask_axis2", mask_axis2)
save("index_mask_axis2", x[:, :, mask_axis2])

# ---- writes through a mask and through index arrays
y = x.copy(); y[mask_all] = 7.0
save("put_mask_scalar", y)
y = x.copy(); y[mask2] = np.arange(5.0)     # values broadcast to (count, 5)
save("put_mask2_rows", y)
y = x.copy(); y[:, idx] = -1.0
save("put_index_axis1", y)
y = x.copy(); np.put(y, np.array([0, 59, -3]), np.array([10.0, 20.0, 30.0]))
save("put_flat", y)

# ---- isclose: infinities, NaN, tolerances
a = np.array([1.0, 1.0 + 1e-6, 1.0 + 1e-4, np.inf, -np.inf, np.inf, np.nan, np.nan, 0.0, 1e-9])
b = np.array([1.0, 1.0, 1.0, np.inf, np.inf, 1.0, np.nan, 1.0, 1e-9, 0.0])
save("in_close_a", a)
save("in_close_b", b)
save("isclose_default", np.isclose(a, b))
save("isclose_equal_nan", np.isclose(a, b, equal_nan=True))
save("isclose_tight", np.isclose(a, b, rtol=1e-7, atol=0.0))

# ---- sort / argsort: duplicates (stability) and NaN (last)
s = np.array([[3.0, np.nan, 1.0, 3.0, -2.0, 1.0, np.nan, 0.0],
              [5.0, 5.0, 5.0, -1.0, np.inf, -np.inf, 2.0, 2.0],
              [0.5, -0.5, 0.5, -0.5, 0.0, -0.0, 9.0, 1.0]])
save("in_sort_f", s)
for axis in (0, 1):
    save(f"argsort_f_axis{axis}", np.argsort(s, axis=axis, kind="stable"))
    save(f"sort_f_axis{axis}", np.sort(s, axis=axis, kind="stable"))
si = rng.integers(-5, 5, size=(4, 7)).astype(np.int32)
save("in_sort_i", si)
save("argsort_i", np.argsort(si, axis=-1, kind="stable"))
save("sort_i", np.sort(si, axis=-1, kind="stable"))

# ---- permutations
for seed, n in ((0, 10), (42, 1000)):
    keys = random_golden.randint("int64", seed, 0, 0, 1 << 32, n)
    save(f"permutation_s{seed}_n{n}", np.argsort(keys, kind="stable").astype(np.int64))

# ---- linalg
A = rng.standard_normal((5, 5)) + 5 * np.eye(5)
B = rng.standard_normal((5, 3))
save("in_solve_a", A)
save("in_solve_b", B)
save("solve_mat", np.linalg.solve(A, B))
save("solve_vec", np.linalg.solve(A, B[:, 0]))
# Stacks (NumPy 2's rule: b is one vector only when 1-d): a (2, 1, 3, 3) with b (4, 3, 2) broadcast to (2, 4);
# the stack a with one 1-d b; one matrix a with a stack b; float32 stacks.
SA = rng.standard_normal((2, 1, 3, 3)) + 3 * np.eye(3)
SB = rng.standard_normal((4, 3, 2))
SV = rng.standard_normal(3)
save("in_solve_stack_a", SA)
save("in_solve_stack_b", SB)
save("in_solve_stack_v", SV)
save("solve_stack", np.linalg.solve(SA, SB))
save("solve_stack_vec", np.linalg.solve(SA, SV))
save("solve_one_a_stack_b", np.linalg.solve(SA[1, 0], SB))
save("solve_stack_f32", np.linalg.solve(SA.astype(np.float32), SB.astype(np.float32)))
M = rng.standard_normal((8, 3))
Y = rng.standard_normal((8, 2))
save("in_lstsq_a", M)
save("in_lstsq_b", Y)
sol, res, rank, sv = np.linalg.lstsq(M, Y, rcond=None)
save("lstsq_x", sol)
save("lstsq_res", res)
save("lstsq_sv", sv)
assert rank == 3
R = np.column_stack([M[:, 0], M[:, 1], M[:, 0] + M[:, 1]])  # rank 2: no residuals, minimum-norm solution
save("in_lstsq_rd", R)
sol, res, rank, sv = np.linalg.lstsq(R, Y[:, 0], rcond=None)
assert rank == 2 and res.shape == (0,)
save("lstsq_rd_x", sol)
save("lstsq_rd_sv", sv)

with open(os.path.join(sys.argv[1], "api_golden.stamp"), "w") as f:
    f.write("ok\n")
