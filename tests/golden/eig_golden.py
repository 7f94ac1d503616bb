"""NumPy golden data for kiln::linalg::eig and eigvals (tests/core/test_linalg_eig.cpp): general real matrices
with complex-conjugate pairs, a rotation, a symmetric matrix, defective and repeated eigenvalues, 1x1, a batch,
float32, integers, complex64 and complex128 input.

Run as `python3 eig_golden.py OUTDIR`; writes OUTDIR/eig/in_<name>.npy (the input) and OUTDIR/eig/w_<name>.npy
(numpy.linalg.eigvals, always complex: kiln's eig returns complex as torch.linalg.eig, where NumPy casts real
eigenvalues of real input to a real dtype), then OUTDIR/eig_golden.stamp. The order of the eigenvalues is LAPACK's
in both, but the tests compare them as multisets; the eigenvectors are checked through a v = w v.
"""
import os
import sys

import numpy as np

OUT = os.path.join(sys.argv[1], "eig")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20261128)


def save(name, a):
    a = np.asarray(a)
    w = np.linalg.eigvals(a)
    single = a.dtype in (np.float32, np.complex64)
    np.save(os.path.join(OUT, "in_" + name + ".npy"), a)
    np.save(os.path.join(OUT, "w_" + name + ".npy"), w.astype(np.complex64 if single else np.complex128))
    return w


general = rng.standard_normal((5, 5))
assert np.any(save("general", general).imag != 0)  # at least one complex-conjugate pair
save("rotation", np.array([[0.0, -1.0], [1.0, 0.0]]))  # +-i
x = rng.standard_normal((4, 4))
save("symmetric", x + x.T)
s = rng.standard_normal((3, 3)) + 3 * np.eye(3)
jordan = np.array([[2.0, 1.0, 0.0], [0.0, 2.0, 1.0], [0.0, 0.0, 2.0]])
save("defective", s @ jordan @ np.linalg.inv(s))  # one eigenvalue 2 of multiplicity 3, one eigenvector
save("jordan2", np.array([[2.0, 1.0], [0.0, 2.0]]))
save("repeated", np.diag([3.0, 3.0, -1.0, 3.0]))
save("one", np.array([[-2.5]]))
save("batch", rng.standard_normal((2, 3, 4, 4)))
save("f32", rng.standard_normal((6, 6)).astype(np.float32))
save("int", np.array([[1, 2, 0], [-3, 1, 4], [0, 5, 2]], dtype=np.int64))
save("c64", (rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4))).astype(np.complex64))
save("c128", rng.standard_normal((4, 4)) + 1j * rng.standard_normal((4, 4)))
save("c128_batch", rng.standard_normal((2, 3, 3)) + 1j * rng.standard_normal((2, 3, 3)))

with open(os.path.join(sys.argv[1], "eig_golden.stamp"), "w") as f:
    f.write("ok\n")
