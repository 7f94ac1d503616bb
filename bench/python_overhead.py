#!/usr/bin/env python3
"""The Python cost of a small call: `x + y` and `x + 1.0` on 16-element float32 arrays, from kiln's Python
package beside NumPy, PyTorch and CuPy (each when importable), on the CPU and on GPU 0 when there is one.

What is timed is the whole call from Python: argument conversion, dispatch, the op on a tiny array (no
measurable compute) and the result object. On a GPU the loop queues `calls` ops and synchronises once at the
end, so the figure is the per-call cost on the host (launch included), as PyTorch's and CuPy's are quoted.

Timing (as bench/numpy_cpu.py): `warmup` untimed calls; calls per sample doubled until a sample lasts
>= min_sample_s; `repeat` samples; the median and the minimum in microseconds per call.

Writes records in the format of docs/bench-schema.md section 1 (workload "python_overhead", case
"<library>_<device>_<op>", metric "us_per_op"), and prints a table.

Usage: python_overhead.py [--repeat N] [--warmup N] [--min-sample-s S] [--json PATH] [--smoke]
       (PYTHONPATH=build/cpu/python, or an installed kiln)
"""

import argparse
import datetime
import json
import os
import statistics
import sys
import time

N = 16


def time_calls(fn, sync, warmup, repeat, min_sample_s):
    for _ in range(warmup):
        fn()
    sync()

    def sample(calls):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        return time.perf_counter() - t0

    calls = 1
    while sample(calls) < min_sample_s and calls < (1 << 24):
        calls *= 2
    samples = [sample(calls) / calls * 1e6 for _ in range(repeat)]
    return statistics.median(samples), min(samples), calls


def libraries():
    """(library, device name, make(values) -> array, sync(), version) for every importable library and device."""
    import numpy as np

    out = []
    noop = lambda: None  # noqa: E731
    try:
        import kiln

        out.append(("kiln", "cpu", lambda v: kiln.asarray(v), noop, "0.1.0"))
        if kiln.num_gpus() > 0:
            gpu = kiln.cuda(0)
            out.append(("kiln", "cuda", lambda v: kiln.asarray(v, device=gpu), lambda: kiln.synchronize(gpu), "0.1.0"))
    except ImportError as e:
        print(f"kiln not importable ({e}): set PYTHONPATH=build/cpu/python or pip install .", file=sys.stderr)
    out.append(("numpy", "cpu", lambda v: v.copy(), noop, np.__version__))
    try:
        import torch

        out.append(("torch", "cpu", lambda v: torch.from_numpy(v.copy()), noop, torch.__version__))
        if torch.cuda.is_available():
            out.append(("torch", "cuda", lambda v: torch.from_numpy(v.copy()).cuda(), torch.cuda.synchronize,
                        torch.__version__))
    except ImportError:
        pass
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            out.append(("cupy", "cuda", lambda v: cupy.asarray(v),
                        lambda: cupy.cuda.get_current_stream().synchronize(), cupy.__version__))
    except Exception:  # ImportError, or CuPy without a usable driver
        pass
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1000)
    parser.add_argument("--min-sample-s", type=float, default=0.05)
    parser.add_argument("--smoke", action="store_true", help="tiny runs: checks the script, numbers meaningless")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args()
    if args.smoke:
        args.repeat, args.warmup, args.min_sample_s = 2, 10, 0.001

    import numpy as np

    values_x = np.linspace(0.0, 1.0, N, dtype=np.float32)
    values_y = np.linspace(1.0, 2.0, N, dtype=np.float32)
    records, rows = [], []
    for library, device, make, sync, version in libraries():
        x, y = make(values_x), make(values_y)
        for op, fn in (("add_arrays", lambda: x + y), ("add_scalar", lambda: x + 1.0)):
            median_us, min_us, calls = time_calls(fn, sync, args.warmup, args.repeat, args.min_sample_s)
            case = f"{library}_{device}_{op}"
            records.append({"workload": "python_overhead", "case": case, "metric": "us_per_op", "unit": "us/op",
                            "value": median_us, "higher_is_better": False,
                            "note": f"{library} {version}; median of {args.repeat} samples of {calls} calls, "
                                    f"min {min_us:.3f} us"})
            rows.append((case, median_us, min_us, calls))
    print(f"{'case':<28} {'median us/op':>13} {'min us/op':>10} {'calls':>9}")
    for case, median_us, min_us, calls in rows:
        print(f"{case:<28} {median_us:>13.3f} {min_us:>10.3f} {calls:>9}")
    if args.json:
        try:
            import kiln

            device = "cuda:0" if kiln.num_gpus() > 0 else "cpu"
        except ImportError:
            device = "cpu"
        report = {"tool": "python_overhead", "version": "0.1.0", "device": device,
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "host_threads": os.cpu_count(), "quick": False, "smoke": args.smoke, "records": records}
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
