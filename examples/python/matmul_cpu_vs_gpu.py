"""Walkthrough 2 in Python: the same float32 matmul on the CPU and on the GPU, timed right (cf.
examples/matmul_cpu_vs_gpu.cpp, and the PyTorch walkthrough it follows).

    PYTHONPATH=build/cpu/python python3 examples/python/matmul_cpu_vs_gpu.py [N_CPU [N_GPU]]

Timing rules: warm up first (the first GPU call loads cuBLAS, the first CPU calls start the thread pool), take
the median of many runs, and time GPU work with events recorded in the stream: a host clock read right after
a launch measures only the launch. Both products are checked against a float64 product in NumPy. Without a GPU
the GPU half is skipped, saying so.
"""

import statistics
import sys
import time

import numpy as np

import kiln


def relative_error(got, a, b):
    """Largest |got - a @ b| over the scale of the float64 product."""
    want = np.asarray(a.to(kiln.cpu()), dtype=np.float64) @ np.asarray(b.to(kiln.cpu()), dtype=np.float64)
    return float(np.abs(got.to(kiln.cpu()).numpy() - want).max() / np.abs(want).max())


def time_cpu(fn, warmup=3, repeat=10):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_gpu(fn, device, warmup=3, repeat=10):
    """Median seconds between two events around fn, recorded in the device's current stream."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start, end = kiln.Event(device), kiln.Event(device)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def main(n_cpu=512, n_gpu=4096, repeat=10):
    kiln.random.seed(42)
    a = kiln.random.normal(size=(n_cpu, n_cpu))
    b = kiln.random.normal(size=(n_cpu, n_cpu))
    flop = 2.0 * n_cpu**3
    results = {}
    cpu_s = time_cpu(lambda: a @ b, repeat=repeat)
    results["cpu_error"] = relative_error(a @ b, a, b)
    results["cpu_seconds"] = cpu_s
    print(f"cpu     {n_cpu:5d}^2 float32 matmul: {cpu_s * 1e3:10.3f} ms median  {flop / cpu_s / 1e12:7.3f} TFLOP/s"
          f"  (max error {results['cpu_error']:.1e})")
    if kiln.num_gpus() == 0:
        print("no GPU: skipping the GPU half (run this on a machine with an NVIDIA GPU and a CUDA build)")
        return results
    d = kiln.cuda(0)
    print(f"gpu: {kiln.device_properties(d)['name']}")
    ga, gb = a.to(d), b.to(d)  # the same numbers on both sides
    gpu_s = time_gpu(lambda: ga @ gb, d, repeat=repeat)
    results["gpu_error"] = relative_error(ga @ gb, a, b)
    results["gpu_seconds"] = gpu_s
    print(f"cuda:0  {n_cpu:5d}^2 float32 matmul: {gpu_s * 1e3:10.3f} ms median  {flop / gpu_s / 1e12:7.3f} TFLOP/s"
          f"  (max error {results['gpu_error']:.1e}) -> {cpu_s / gpu_s:.0f}x the CPU")
    if n_gpu != n_cpu:
        x, y = kiln.random.normal(size=(n_gpu, n_gpu), device=d), kiln.random.normal(size=(n_gpu, n_gpu), device=d)
        big_s = time_gpu(lambda: x @ y, d, repeat=repeat)
        tflops = 2.0 * n_gpu**3 / big_s / 1e12
        print(f"cuda:0  {n_gpu:5d}^2 float32 matmul: {big_s * 1e3:10.3f} ms  {tflops:7.3f} TFLOP/s")
        results["gpu_big_seconds"] = big_s
    return results


if __name__ == "__main__":
    sizes = [int(v) for v in sys.argv[1:3]]
    r = main(*sizes)
    sys.exit(0 if r["cpu_error"] < 1e-5 and r.get("gpu_error", 0.0) < 1e-5 else 1)
