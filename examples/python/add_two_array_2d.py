"""Walkthrough 4 in Python: a whole CUDA C++ module written as a string, compiled at run time with NVRTC and
launched on a 2-d grid, as PyCUDA's SourceModule (cf. examples/add_two_array_2d.cpp).

    PYTHONPATH=build/cuda/python python3 examples/python/add_two_array_2d.py

res = a + b on an ny x nx grid covered by 2x5 blocks of 16x16 threads. Without a GPU the example says so and
computes a + b with kiln's built-in add on the CPU.
"""

import sys

import numpy as np

import kiln

SOURCE = r"""
extern "C" __global__ void add_two_array_2d(int nx, int ny, float* res, const float* a, const float* b) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;  // column
  const int y = blockIdx.y * blockDim.y + threadIdx.y;  // row
  if (x < nx && y < ny) {
    const int i = y * nx + x;
    res[i] = a[i] + b[i];
  }
}
"""


def main(nx=80, ny=32):
    kiln.random.seed(2)
    a_host, b_host = kiln.random.uniform(size=(ny, nx)), kiln.random.uniform(size=(ny, nx))
    want = a_host.numpy().astype(np.float64) + b_host.numpy()
    if kiln.num_gpus() == 0:
        print("add_two_array_2d: no CUDA GPU (kiln.num_gpus() == 0): a + b with the built-in add instead")
        return {"gpu": False, "res": (a_host + b_host).numpy(), "want": want}
    d = kiln.cuda(0)
    module = kiln.RawModule(SOURCE)
    kernel = module.get_function("add_two_array_2d")
    a, b = a_host.to(d), b_host.to(d)
    res = kiln.empty((ny, nx), device=d)
    block = (16, 16)
    grid = ((nx + block[0] - 1) // block[0], (ny + block[1] - 1) // block[1])  # 5 x 2 blocks
    kernel(grid, block, (np.int32(nx), np.int32(ny), res, a, b))
    print(f"add_two_array_2d on a {grid} grid of {block} blocks: res[0, :4] = {res[0, :4].to(kiln.cpu()).tolist()}")
    return {"gpu": True, "res": res.to(kiln.cpu()).numpy(), "want": want}


if __name__ == "__main__":
    r = main()
    sys.exit(0 if np.array_equal(r["res"], r["want"].astype(np.float32)) else 1)
