"""Walkthrough 4 in Python: GPU kernels from strings, as with PyCUDA's SourceModule and CuPy's
ElementwiseKernel / ReductionKernel (cf. examples/plus_one.cpp).

    PYTHONPATH=build/cuda/python python3 examples/python/plus_one.py

plus_one is PyCUDA's first kernel (`a[idx] += 1` over a 4x4 float32 array) as a RawKernel, then the same as an
ElementwiseKernel, then an L2 norm as a ReductionKernel checked against kiln's built-in norm. User kernels run
on GPUs only: without one the example says so and computes the same results with kiln's built-in ops, which
run on the CPU too.
"""

import sys

import numpy as np

import kiln

PLUS_ONE = r"""
extern "C" __global__ void plus_one(float* a) {
  const int idx = threadIdx.x + threadIdx.y * 4;
  a[idx] += 1;
}
"""


def main():
    kiln.random.seed(1)
    host = kiln.random.normal(size=(4, 4))
    want = host.numpy() + 1
    rows = kiln.random.normal(size=(3, 5))
    if kiln.num_gpus() == 0:
        print("plus_one: no CUDA GPU found; user kernels run on GPUs only, so the built-in ops compute it here")
        plus = host + 1
        norms = kiln.sqrt(kiln.sum(rows * rows, axis=1))
        return {"gpu": False, "raw": plus.numpy(), "elementwise": plus.numpy(), "want": want,
                "norms": norms.numpy(), "want_norms": np.linalg.norm(rows.numpy().astype(np.float64), axis=1)}
    d = kiln.cuda(0)
    a = host.to(d)
    kernel = kiln.RawKernel(PLUS_ONE, "plus_one")  # compiled by NVRTC at construction, cached on disk
    kernel((1,), (4, 4), (a,))  # one block of 4x4 threads, as PyCUDA's func(a_gpu, block=(4, 4, 1))
    print(f"RawKernel plus_one:\n{a.to(kiln.cpu())}")
    add_one = kiln.ElementwiseKernel("float32 x", "float32 y", "y = x + 1", "add_one")
    b = add_one(host.to(d))
    l2 = kiln.ReductionKernel("T x", "T y", "x * x", "a + b", "y = sqrt(a)", "0", "l2norm")
    norms = l2(rows.to(d), axis=1)
    print(f"ReductionKernel l2norm over rows: {norms.to(kiln.cpu()).tolist()}")
    return {"gpu": True, "raw": a.to(kiln.cpu()).numpy(), "elementwise": b.to(kiln.cpu()).numpy(), "want": want,
            "norms": norms.to(kiln.cpu()).numpy(),
            "want_norms": np.linalg.norm(rows.numpy().astype(np.float64), axis=1)}


if __name__ == "__main__":
    r = main()
    ok = np.allclose(r["raw"], r["want"]) and np.allclose(r["elementwise"], r["want"]) and \
        np.allclose(r["norms"], r["want_norms"], rtol=1e-5)
    sys.exit(0 if ok else 1)
