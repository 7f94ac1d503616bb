#!/usr/bin/env python3
"""The workloads of bench/bench_cpu.cpp in NumPy, with the same sizes, timing
protocol and JSON schema, so scripts/compare_cpu.py can put both side by side.

Timing (as bench/bench_common.hpp): `warmup` untimed calls; calls per sample
doubled until a sample lasts >= min_sample_s; `repeat` samples, each in seconds
per call; time.perf_counter is CLOCK_MONOTONIC, like C++'s steady_clock.

Threads: NumPy's ufuncs and reductions always run on one thread; only matmul
(OpenBLAS) uses several. --threads N limits OpenBLAS through threadpoolctl when
it is installed; otherwise the caller must set OPENBLAS_NUM_THREADS /
OMP_NUM_THREADS before Python starts (scripts/bench-cpu does).

Usage: numpy_cpu.py [--threads N] [--quick] [--repeat N] [--warmup N]
                    [--filter SUBSTRING] [--json PATH]
"""

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

try:
    import threadpoolctl
except ImportError:  # optional: without it the environment decides BLAS threads
    threadpoolctl = None


def summarize(samples, inner):
    s = sorted(samples)
    return {
        "min_s": s[0],
        "median_s": statistics.median(s),
        "mean_s": statistics.fmean(s),
        "stddev_s": statistics.stdev(s) if len(s) > 1 else 0.0,
        "repeats": len(s),
        "inner": inner,
    }


def time_host(fn, warmup, repeat, min_sample_s, max_inner=1 << 16):
    def run(calls):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return time.perf_counter() - t0

    for _ in range(warmup):
        fn()
    inner = 1
    while inner < max_inner and run(inner) < min_sample_s:
        inner *= 2
    return summarize([run(inner) / inner for _ in range(repeat)], inner)


def pow2_label(n):
    return f"2^{int(math.log2(n))}"


def chain(x):
    return np.tanh(x * 1.5 + 0.3) * x - np.exp(-x * x) * 0.5


def check(got, want, rtol, atol):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    bad = np.abs(got - want) > atol + rtol * np.abs(want)
    if not bad.any():
        return "ok"
    i = int(np.argmax(bad))
    return f"MISMATCH at {i}: {got.flat[i]} vs reference {want.flat[i]}"


def workloads(rng):
    f32 = np.float32

    def add(n):
        a = rng.random(n, dtype=f32)
        b = rng.random(n, dtype=f32)
        ok = check(a + b, a.astype(np.float64) + b, 1e-7, 0)
        return (lambda: a + b), 3.0 * n * 4 / 1e9, "GB/s", ok

    def chain_workload(n):
        x = rng.uniform(-1, 1, n).astype(f32)
        xd = x.astype(np.float64)
        ok = check(chain(x), np.tanh(xd * 1.5 + 0.3) * xd - np.exp(-xd * xd) * 0.5, 1e-5, 1e-6)
        return (lambda: chain(x)), n / 1e9, "ns/elem", ok

    def total(n):
        x = rng.random(n, dtype=f32)
        ok = check(x.sum(), x.sum(dtype=np.float64), 1e-5, 0)
        return (lambda: x.sum()), n * 4 / 1e9, "GB/s", ok

    def axis_sum(axis):
        m = rng.random((4096, 4096), dtype=f32)
        ok = check(m.sum(axis=axis), m.sum(axis=axis, dtype=np.float64), 1e-5, 0)
        return (lambda: m.sum(axis=axis)), m.size * 4 / 1e9, "GB/s", ok

    def matmul(n):
        a = rng.uniform(-1, 1, (n, n)).astype(f32)
        b = rng.uniform(-1, 1, (n, n)).astype(f32)
        ok = check(a @ b, a.astype(np.float64) @ b, 0, 4e-6 * n)
        return (lambda: a @ b), 2.0 * n**3 / 1e9, "GFLOP/s", ok

    # (name, size label, setup); the setup returns (fn, work per call, unit, check verdict).
    w = [("add", pow2_label(n), lambda n=n: add(n)) for n in (1 << 16, 1 << 20, 1 << 24)]
    w += [("chain", pow2_label(n), lambda n=n: chain_workload(n)) for n in (1 << 20, 1 << 24)]
    w += [("sum", pow2_label(n), lambda n=n: total(n)) for n in (1 << 20, 1 << 24)]
    w += [(f"sum_axis{a}", "4096x4096", lambda a=a: axis_sum(a)) for a in (0, 1)]
    w += [("matmul", str(n), lambda n=n: matmul(n)) for n in (256, 1024, 2048)]
    return w


def blas_info():
    """(threads, kernel, description) of NumPy's BLAS, from threadpoolctl when it is installed."""
    if threadpoolctl is None:
        return None, "unknown (pip install threadpoolctl to see it)", "unknown"
    for lib in threadpoolctl.threadpool_info():
        if lib.get("user_api") == "blas":
            desc = f"{lib.get('internal_api')} {lib.get('version')} ({lib.get('threading_layer')})"
            return lib.get("num_threads"), lib.get("architecture") or "unknown", desc
    return None, "unknown", "no BLAS found by threadpoolctl"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=0, help="BLAS threads (0: leave the default)")
    p.add_argument("--quick", action="store_true", help="fewer samples (1 warm-up, 5 samples, 1 ms each)")
    p.add_argument("--repeat", type=int, default=0)
    p.add_argument("--warmup", type=int, default=-1)
    p.add_argument("--filter", default="")
    p.add_argument("--json", default="")
    args = p.parse_args()

    warmup, repeat, min_sample_s = (1, 5, 1e-3) if args.quick else (2, 10, 2e-3)
    repeat = args.repeat or repeat
    warmup = args.warmup if args.warmup >= 0 else warmup

    limiter = None
    if args.threads > 0 and threadpoolctl is not None:
        limiter = threadpoolctl.threadpool_limits(limits=args.threads, user_api="blas")
    blas_threads, kernel, blas_desc = blas_info()
    threads = args.threads or blas_threads or int(os.environ.get("OPENBLAS_NUM_THREADS", "0")) or os.cpu_count()

    print(f"== NumPy {np.__version__} CPU benchmarks | BLAS threads {blas_threads} | {blas_desc} kernel {kernel}")
    print("   ufuncs and reductions run on one thread in NumPy; only matmul uses BLAS threads")
    print(f"   {warmup} warm-up call(s), median of {repeat} samples; each sample >= {min_sample_s * 1e3:g} ms of calls\n")
    print(f"{'workload':<12} {'size':>10} {'dtype':>8} {'median':>11} {'min':>11} {'+-%':>7} {'throughput':>12} "
          f"{'unit':<8} check")

    rng = np.random.default_rng(0)
    results = []
    for name, size, setup in workloads(rng):
        if args.filter and args.filter not in f"{name} {size}":
            continue
        fn, work, unit, verdict = setup()
        st = time_host(fn, warmup, repeat, min_sample_s)
        med = st["median_s"]
        throughput = med / work if unit == "ns/elem" else work / med
        rel = 100 * st["stddev_s"] / med if med > 0 else 0.0
        print(f"{name:<12} {size:>10} {'float32':>8} {fmt_s(med):>11} {fmt_s(st['min_s']):>11} {rel:>7.1f} "
              f"{throughput:>12.3f} {unit:<8} {verdict}", flush=True)
        results.append({"name": name, "size": size, "dtype": "float32", **st, "throughput": throughput,
                        "unit": unit, "check": verdict})
        del fn

    report = {
        "suite": "cpu",
        "library": "numpy",
        "device": "cpu",
        "version": np.__version__,
        "threads": threads,
        "blas_threads": blas_threads if blas_threads is not None else -1,
        "blas": blas_desc,
        "blas_kernel": kernel,
        "openblas_coretype_env": os.environ.get("OPENBLAS_CORETYPE", ""),
        "threadpoolctl": threadpoolctl is not None,
        "warmup": warmup,
        "repeat": repeat,
        "errors": [],
        "results": results,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
        print(f"\nwrote {args.json}")
    if limiter is not None:
        limiter.restore_original_limits()
    return 0 if all(r["check"] == "ok" for r in results) else 1


def fmt_s(s):
    for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "us")):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


if __name__ == "__main__":
    sys.exit(main())
