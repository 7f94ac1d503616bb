"""NumPy golden data for kiln::linalg's factorisations and what is built on them (tests/linalg_golden_checks.hpp,
run by tests/core/test_linalg_decomp.cpp on the CPU and tests/cuda/test_linalg_gpu.cpp on a GPU): inv, det,
slogdet, cholesky, qr, svd, eigh, pinv, matrix_rank, norm with ord, cond, matrix_power, cross and kron, with
batched, 1x1, singular and non-square cases.

Run as `python3 linalg_golden.py OUTDIR`; writes OUTDIR/linalg/<name>.npy and finally OUTDIR/linalg_golden.stamp.
Inputs are saved as in_<name>.npy; expected results as <name>.npy. Singular vectors and eigenvectors are
defined up to sign: the tests compare them after matching each vector's sign to NumPy's.
"""
import os
import sys

import numpy as np

OUT = os.path.join(sys.argv[1], "linalg")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20261128)
LA = np.linalg


def save(name, array):
    np.save(os.path.join(OUT, name + ".npy"), np.asarray(array))


def spd(*shape):
    x = rng.standard_normal(shape)
    return x @ np.swapaxes(x, -1, -2) + shape[-1] * np.eye(shape[-1])


# ---- inputs
sq = rng.standard_normal((4, 4)) + 2 * np.eye(4)
sq_batch = rng.standard_normal((2, 3, 3, 3))
one = np.array([[-2.5]])
singular = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
tall = rng.standard_normal((5, 3))
wide = rng.standard_normal((3, 5))
rect_batch = rng.standard_normal((2, 4, 3))
sym = spd(4, 4)
sym_batch = spd(2, 3, 3)
deficient = rng.standard_normal((4, 2)) @ rng.standard_normal((2, 4))  # rank 2
for name, a in (("sq", sq), ("sq_batch", sq_batch), ("one", one), ("singular", singular), ("tall", tall),
                ("wide", wide), ("rect_batch", rect_batch), ("sym", sym), ("sym_batch", sym_batch),
                ("deficient", deficient)):
    save("in_" + name, a)
save("in_sq_f32", sq.astype(np.float32))

# ---- inv, det, slogdet
for name, a in (("sq", sq), ("sq_batch", sq_batch), ("one", one)):
    save("inv_" + name, LA.inv(a))
    save("det_" + name, LA.det(a))
    sign, logabs = LA.slogdet(a)
    save("slogdet_sign_" + name, sign)
    save("slogdet_log_" + name, logabs)
save("inv_sq_f32", LA.inv(sq.astype(np.float32)))
save("det_singular", LA.det(singular))
sign, logabs = LA.slogdet(singular)
assert sign == 0 and logabs == -np.inf
save("slogdet_sign_singular", sign)
save("slogdet_log_singular", logabs)

# ---- cholesky (a perturbed upper triangle must not matter: NumPy reads the lower one)
save("cholesky_sym", LA.cholesky(sym))
save("cholesky_sym_batch", LA.cholesky(sym_batch))
save("cholesky_upper_sym", LA.cholesky(sym, upper=True))

# ---- qr
for name, a in (("tall", tall), ("wide", wide), ("rect_batch", rect_batch)):
    for mode in ("reduced", "complete"):
        q, r = LA.qr(a, mode=mode)
        save(f"qr_{mode}_q_{name}", q)
        save(f"qr_{mode}_r_{name}", r)
    save(f"qr_r_{name}", LA.qr(a, mode="r"))

# ---- svd, svdvals
for name, a in (("tall", tall), ("wide", wide), ("rect_batch", rect_batch), ("sq_batch", sq_batch),
                ("deficient", deficient)):
    for full in (True, False):
        u, s, vh = LA.svd(a, full_matrices=full)
        tag = "full" if full else "reduced"
        k = min(a.shape[-2:])  # vectors past k span a null space in no particular basis
        save(f"svd_{tag}_u_{name}_k", u[..., :k])
        save(f"svd_{tag}_vh_{name}_k", vh[..., :k, :])
    save(f"svdvals_{name}", LA.svd(a, compute_uv=False))

# ---- eigh, eigvalsh (lower and upper triangles of a matrix whose triangles differ)
uneven = sym + np.triu(rng.standard_normal((4, 4)), 1)
save("in_uneven", uneven)
for uplo in ("L", "U"):
    w, v = LA.eigh(uneven, UPLO=uplo)
    save(f"eigh_w_{uplo}", w)
    save(f"eigh_v_{uplo}", v)
w, v = LA.eigh(sym_batch)
save("eigh_w_sym_batch", w)
save("eigh_v_sym_batch", v)
save("eigvalsh_sym_batch", LA.eigvalsh(sym_batch))

# ---- pinv, matrix_rank
save("pinv_tall", LA.pinv(tall))
save("pinv_wide", LA.pinv(wide))
save("pinv_rect_batch", LA.pinv(rect_batch))
save("pinv_deficient", LA.pinv(deficient, rcond=1e-10))
save("pinv_sym_hermitian", LA.pinv(sym, hermitian=True))
save("rank_deficient", LA.matrix_rank(deficient))
save("rank_sq_batch", LA.matrix_rank(sq_batch))
save("rank_singular", LA.matrix_rank(singular))
save("rank_tol", LA.matrix_rank(np.diag([3.0, 1.0, 1e-3]), tol=1e-2))
save("rank_sym_hermitian", LA.matrix_rank(sym, hermitian=True))

# ---- norm
vec = np.array([3.0, -4.0, 0.0, 1.5, -0.5, 0.0, 2.0])
save("in_vec", vec)
for tag, ord_ in (("none", None), ("inf", np.inf), ("ninf", -np.inf), ("0", 0), ("1", 1), ("2", 2), ("3", 3),
                  ("0p5", 0.5)):
    save(f"norm_vec_{tag}", LA.norm(vec, ord_))
for tag, ord_ in (("none", None), ("fro", "fro"), ("nuc", "nuc"), ("1", 1), ("n1", -1), ("2", 2), ("n2", -2),
                  ("inf", np.inf), ("ninf", -np.inf)):
    save(f"norm_mat_{tag}", LA.norm(tall, ord_))
cube = rng.standard_normal((2, 3, 4))
save("in_cube", cube)
save("norm_cube_all", LA.norm(cube))
save("norm_cube_axis1_3", LA.norm(cube, 3, axis=1))
save("norm_cube_axis1_keep", LA.norm(cube, axis=1, keepdims=True))
save("norm_cube_axes20_1", LA.norm(cube, 1, axis=(2, 0)))
save("norm_cube_axes20_inf_keep", LA.norm(cube, np.inf, axis=(2, 0), keepdims=True))
save("norm_cube_axes12_nuc", LA.norm(cube, "nuc", axis=(1, 2)))
save("norm_cube_axes21_2", LA.norm(cube, 2, axis=(2, 1)))

# ---- cond
for tag, p in (("none", None), ("2", 2), ("n2", -2), ("1", 1), ("inf", np.inf), ("fro", "fro"), ("nuc", "nuc")):
    save(f"cond_sq_{tag}", LA.cond(sq, p))
save("cond_tall", LA.cond(tall))
save("cond_sq_batch", LA.cond(sq_batch))
save("cond_singular_1", LA.cond(singular, 1))

# ---- matrix_power
save("power_sq_3", LA.matrix_power(sq, 3))
save("power_sq_0", LA.matrix_power(sq, 0))
save("power_sq_n2", LA.matrix_power(sq, -2))
save("power_sq_batch_5", LA.matrix_power(sq_batch, 5))
ints = np.array([[1, 2], [3, 4]], dtype=np.int64)
save("in_ints", ints)
save("power_ints_5", LA.matrix_power(ints, 5))

# ---- cross, kron
u3 = rng.standard_normal((4, 3))
v3 = rng.standard_normal(3)
save("in_u3", u3)
save("in_v3", v3)
save("cross_rows", LA.cross(u3, v3))
w3 = rng.standard_normal((3, 1))
save("in_w3", w3)
save("cross_axis0", LA.cross(u3.T, np.broadcast_to(w3, (3, 4)), axis=0))
save("kron_mat", np.kron(tall[:2], wide[:2, :2]))
save("kron_vec_mat", np.kron(vec[:3], tall[:2]))
save("kron_cube", np.kron(cube, ints))

with open(os.path.join(sys.argv[1], "linalg_golden.stamp"), "w") as f:
    f.write("ok\n")
