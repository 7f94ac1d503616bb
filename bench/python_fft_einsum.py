#!/usr/bin/env python3
"""FFT and einsum from kiln's Python package beside PyTorch, CuPy and NumPy (each when importable), on GPU 0 and
on the CPU: the cases of issue "What a CuPy user still misses".

FFT (complex64, forward and inverse in one timed call):
  fft1d_2e24   fft then ifft of 2^24 points (GPU); 2^20 on the CPU
  fft2d_4096   fft2 then ifft2 of 4096 x 4096 (GPU); 1024 x 1024 on the CPU
einsum (float32, GPU):
  bmm        "bij,bjk->bik", 64 x 512 x 512 by 64 x 512 x 512
  attention  "bhqd,bhkd->bhqk", 8 x 16 x 1024 x 64 against the same shape
  outer      "i,j->ij", 8192 by 8192
  trace      "ii->", 8192 x 8192

Every library gets the same NumPy-made inputs, moved to its device before timing. GPU calls are timed with the
library's own CUDA events on its current stream (kiln.Event, torch.cuda.Event, cupy.cuda.Event): `warmup` untimed
calls, then `repeat` samples of `calls` calls each; the median and the minimum milliseconds per call. CPU calls by
the host clock the same way. Each timed result is checked once against NumPy (float64 for einsum) before timing.

Writes records in the format of docs/bench-schema.md section 1 (workloads "fft" and "einsum", case
"<library>_<device>_<case>", metric "ms") and prints a table with each case's time relative to PyTorch's (GPU) or
NumPy's (CPU FFT).

Usage: python_fft_einsum.py [--repeat N] [--calls N] [--json PATH] [--smoke]
       (PYTHONPATH=build/cuda/python, or an installed kiln)
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

import numpy as np


def gpu_timer(library):
    """(record_start, elapsed_ms_since_start) closures for `library`'s CUDA events on its current stream."""
    if library == "kiln":
        import kiln

        make, elapsed = lambda: kiln.Event(kiln.cuda(0)), lambda e0, e1: e0.elapsed_time(e1)
    elif library == "torch":
        import torch

        make, elapsed = lambda: torch.cuda.Event(enable_timing=True), lambda e0, e1: e0.elapsed_time(e1)
    else:
        import cupy

        make, elapsed = cupy.cuda.Event, cupy.cuda.get_elapsed_time

    def start():
        events = make(), make()
        events[0].record()
        return events

    def stop(events):
        events[1].record()
        events[1].synchronize()
        return elapsed(*events)

    return start, stop


def time_calls(fn, device, library, warmup, repeat, calls):
    for _ in range(warmup):
        fn()
    samples = []
    if device == "cuda":
        start, stop = gpu_timer(library)
        for _ in range(repeat):
            events = start()
            for _ in range(calls):
                fn()
            samples.append(stop(events) / calls)
    else:
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            samples.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(samples), min(samples)


def libraries(gpu_only_peers):
    """{(library, device): (to_device(ndarray), to_numpy(array), namespace)} for what is importable."""
    out = {}
    try:
        import kiln

        out[("kiln", "cpu")] = (lambda v: kiln.asarray(v), lambda a: np.asarray(a), kiln)
        if kiln.num_gpus() > 0:
            gpu = kiln.cuda(0)
            out[("kiln", "cuda")] = (lambda v: kiln.asarray(v).to(gpu), lambda a: np.asarray(a.to(kiln.cpu())), kiln)
    except ImportError as e:
        print(f"kiln not importable ({e}): set PYTHONPATH=build/cuda/python or pip install .", file=sys.stderr)
    out[("numpy", "cpu")] = (lambda v: v.copy(), lambda a: a, np)
    try:
        import torch

        if torch.cuda.is_available():
            out[("torch", "cuda")] = (lambda v: torch.from_numpy(v.copy()).cuda(), lambda a: a.cpu().numpy(), torch)
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            out[("cupy", "cuda")] = (lambda v: cupy.asarray(v), lambda a: cupy.asnumpy(a), cupy)
    except Exception:  # ImportError, or CuPy without a usable driver
        pass
    return out


def fft_cases(smoke):
    rng = np.random.default_rng(0)

    def signal(shape):
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)

    gpu_1d, gpu_2d = (1 << 12, (64, 64)) if smoke else (1 << 24, (4096, 4096))
    cpu_1d, cpu_2d = (1 << 12, (64, 64)) if smoke else (1 << 20, (1024, 1024))
    return [
        ("fft1d_2e24", "cuda", signal(gpu_1d), lambda xp, x: xp.fft.ifft(xp.fft.fft(x))),
        ("fft2d_4096", "cuda", signal(gpu_2d), lambda xp, x: xp.fft.ifft2(xp.fft.fft2(x))),
        ("fft1d_2e20", "cpu", signal(cpu_1d), lambda xp, x: xp.fft.ifft(xp.fft.fft(x))),
        ("fft2d_1024", "cpu", signal(cpu_2d), lambda xp, x: xp.fft.ifft2(xp.fft.fft2(x))),
    ]


def einsum_cases(smoke):
    rng = np.random.default_rng(1)

    def f32(*shape):
        return rng.standard_normal(shape).astype(np.float32)

    s = 8 if smoke else 1
    return [
        ("bmm", "bij,bjk->bik", [f32(64 // s, 512 // s, 512 // s), f32(64 // s, 512 // s, 512 // s)]),
        ("attention", "bhqd,bhkd->bhqk", [f32(8 // s, 16, 1024 // s, 64), f32(8 // s, 16, 1024 // s, 64)]),
        ("outer", "i,j->ij", [f32(8192 // s), f32(8192 // s)]),
        ("trace", "ii->", [f32(8192 // s, 8192 // s)]),
    ]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one sample: checks the script only")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args()
    if args.smoke:
        args.repeat, args.calls, args.warmup = 1, 1, 1
    libs = libraries(False)
    records, failures = [], []
    print(f"{'workload':<8} {'case':<12} {'library':<6} {'device':<6} {'median ms':>10} {'min ms':>9} "
          f"{'x peer':>7}  check")

    def run(workload, case, device, make_call, reference, peer, rtol):
        timed = {}
        for (library, dev), (to_device, to_numpy, xp) in libs.items():
            if dev != device:
                continue
            call = make_call(xp, to_device)
            try:
                got = to_numpy(call())
            except Exception as e:  # a library without the function: reported, not timed
                print(f"{workload:<8} {case:<12} {library:<6} {device:<6} {'-':>10} {'-':>9} {'':>7}  {e}")
                continue
            err = float(np.max(np.abs(got - reference)) / max(float(np.max(np.abs(reference))), 1e-30))
            check = "ok" if err <= rtol else f"relative error {err:.2e} > {rtol:.0e}"
            if check != "ok":
                failures.append(f"{library} {device} {case}: {check}")
            median, best = time_calls(call, device, library, args.warmup, args.repeat, args.calls)
            timed[library] = median
            records.append({"workload": workload, "case": f"{library}_{device}_{case}", "metric": "ms", "unit": "ms",
                            "value": median, "min": best, "higher_is_better": False, "check": check})
        for library, median in timed.items():
            ratio = f"{timed[peer] / median:.2f}" if peer in timed else "-"
            check = next(r["check"] for r in records if r["case"] == f"{library}_{device}_{case}")
            best = next(r["min"] for r in records if r["case"] == f"{library}_{device}_{case}")
            print(f"{workload:<8} {case:<12} {library:<6} {device:<6} {median:>10.3f} {best:>9.3f} {ratio:>7}  {check}")

    for case, device, x, fn in fft_cases(args.smoke):
        if not any(dev == device for (_, dev) in libs):
            continue
        reference = x.astype(np.complex128)  # ifft(fft(x)) returns x
        run("fft", case, device, lambda xp, to_device, x=x, fn=fn: (lambda a=to_device(x): fn(xp, a)),
            reference, "torch" if device == "cuda" else "numpy", 1e-5)
    for case, subscripts, operands in einsum_cases(args.smoke):
        if not any(dev == "cuda" for (_, dev) in libs):
            break
        reference = np.einsum(subscripts, *[o.astype(np.float64) for o in operands])
        # float32 products: TF32 is off by default in kiln, PyTorch and CuPy alike.
        run("einsum", case, "cuda",
            lambda xp, to_device, s=subscripts, ops=operands: (
                lambda arrays=[to_device(o) for o in ops]: xp.einsum(s, *arrays)),
            reference, "torch", 1e-4)
    if args.json:
        import platform

        report = {"tool": "kiln-python", "version": "0.1.0",
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "host": platform.node(), "host_threads": os.cpu_count(), "smoke": args.smoke, "records": records}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    for failure in failures:
        print(f"check failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
