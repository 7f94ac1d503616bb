#!/usr/bin/env python3
"""Puts bench_cpu's JSON (kiln) beside numpy_cpu.py's JSON (NumPy) in one
Markdown table of speed ratios and checks them against the CPU targets of
docs/architecture.md ("Performance targets"): elementwise and reductions at least NumPy's speed, float32 matmul
at least 90% of NumPy's.

The ratio is NumPy's time over kiln's time for the same workload, so > 1 means
kiln is faster, whatever the unit (GB/s, GFLOP/s or ns/elem).

Usage: compare_cpu.py KILN.json NUMPY.json [--out REPORT.md] [--note TEXT]...
"""

import argparse
import json
import os
import platform
import sys

# Minimum kiln/NumPy speed ratio per workload (docs/architecture.md "Performance targets").
TARGETS = {"add": 1.0, "chain": 1.0, "sum": 1.0, "sum_axis0": 1.0, "sum_axis1": 1.0, "matmul": 0.9}


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def fmt_throughput(r):
    return f"{r['throughput']:.3g} {r['unit']}" if r else "—"


def build(kiln, numpy, notes):
    lines = ["# kiln vs NumPy on the CPU", ""]
    lines.append(f"- machine: {cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}")
    lines.append(
        f"- kiln {kiln.get('version', '?')}: {kiln.get('build', '')}; threads {kiln.get('threads')} (OpenMP), "
        f"BLAS threads {kiln.get('blas_threads')}; BLAS {kiln.get('blas')} kernel {kiln.get('blas_kernel')}"
        + (f" (OPENBLAS_CORETYPE={kiln['openblas_coretype_env']})" if kiln.get("openblas_coretype_env") else ""))
    lines.append(
        f"- NumPy {numpy.get('version', '?')}: ufuncs and reductions on 1 thread (NumPy does not thread them), "
        f"BLAS threads {numpy.get('blas_threads')}; BLAS {numpy.get('blas')} kernel {numpy.get('blas_kernel')}"
        + (f" (OPENBLAS_CORETYPE={numpy['openblas_coretype_env']})" if numpy.get("openblas_coretype_env") else ""))
    lines.append(f"- timing: {kiln.get('warmup')} warm-up call(s), median of {kiln.get('repeat')} samples "
                 "(each sample repeats the call for >= 1-2 ms); same protocol on both sides")
    lines += [f"- {n}" for n in notes]
    lines += ["", "ratio = NumPy time / kiln time (> 1: kiln faster); target from docs/architecture.md; "
              "'min' uses each side's fastest sample, which is steadier on a busy machine.", ""]
    lines.append("| workload | size | kiln | NumPy | ratio (median) | ratio (min) | target | meets |")
    lines.append("|---|---|---:|---:|---:|---:|---:|---|")

    np_by_key = {(r["name"], r["size"]): r for r in numpy.get("results", [])}
    kiln_by_key = {(r["name"], r["size"]): r for r in kiln.get("results", [])}
    keys = list(kiln_by_key) + [k for k in np_by_key if k not in kiln_by_key]
    met = total = 0
    for key in keys:
        k, n = kiln_by_key.get(key), np_by_key.get(key)
        target = TARGETS.get(key[0])
        ratio = ratio_min = None
        if k and n and k["median_s"] > 0 and k["min_s"] > 0:
            ratio = n["median_s"] / k["median_s"]
            ratio_min = n["min_s"] / k["min_s"]
        verdict = "—"
        if ratio is not None and target is not None:
            total += 1
            ok = ratio >= target
            met += ok
            verdict = "yes" if ok else "**no**"
        for side, r in (("kiln", k), ("NumPy", n)):
            if r and r.get("check", "ok") != "ok":
                verdict += f" ({side} check: {r['check']})"
        lines.append(
            f"| {key[0]} | {key[1]} | {fmt_throughput(k)} | {fmt_throughput(n)} | "
            f"{f'{ratio:.2f}x' if ratio is not None else '—'} | "
            f"{f'{ratio_min:.2f}x' if ratio_min is not None else '—'} | "
            f"{f'>= {target:.2f}x' if target is not None else '—'} | {verdict} |")
    lines += ["", f"{met} of {total} compared workloads meet their target."]
    kk, nk = kiln.get("blas_kernel", "unknown"), numpy.get("blas_kernel", "unknown")
    if kk.lower() != nk.lower() and "unknown" not in (kk.lower(), nk.lower()):
        lines += ["", f"Note: matmul runs different OpenBLAS kernels on the two sides (kiln: {kk}, NumPy: {nk}), "
                      "so its ratio compares BLAS builds and kernel choice more than kiln itself."]
    errors = kiln.get("errors", []) + numpy.get("errors", [])
    if errors:
        lines += ["", "Errors:"] + [f"- {e}" for e in errors]
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kiln_json")
    p.add_argument("numpy_json")
    p.add_argument("--out", default="", help="also write the Markdown report here")
    p.add_argument("--note", action="append", default=[], help="a line to add under the header")
    args = p.parse_args()
    with open(args.kiln_json) as f:
        kiln = json.load(f)
    with open(args.numpy_json) as f:
        numpy = json.load(f)
    text = build(kiln, numpy, args.note)
    sys.stdout.write(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
