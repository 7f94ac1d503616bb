#!/usr/bin/env python3
"""The data-parallel table: bench_dist (kiln) and torch_ddp.py (PyTorch) JSON files of one gpu-check call.

    python3 scripts/dist-table.py OUT_DIR      (reads dist-kiln-N.json, dist-torch-N.json; prints Markdown)

Per workload (allreduce, ddp_mlp, ddp_resnet50, ddp_gpt2, ...): kiln and PyTorch at each world size, kiln/PyTorch (higher is better for kiln: bandwidth and
throughput; for seconds PyTorch/kiln), and each library's scaling from 1 GPU to N (throughput ratio).
Extra rounds (dist-kiln-N-rK.json, ...; gpu-check runs the MLP's again, alternating world sizes, since its
sub-millisecond steps move with the host's jitter between processes) make a record the median of its runs;
the runs are listed under the table.
"""
import glob
import json
import os
import re
import sys


def load(out, tool):
    runs, values = {}, {}
    for path in sorted(glob.glob(os.path.join(out, f"dist-{tool}-*.json"))):
        m = re.search(r"-(\d+)(-r\d+)?\.json$", path)
        if not m:
            continue
        n = int(m.group(1))
        with open(path) as f:
            for r in json.load(f)["records"]:
                key = (r["workload"], r["metric"])
                runs.setdefault(n, {}).setdefault(key, dict(r))
                values.setdefault((n, key), []).append(r["value"])
    for (n, key), vals in values.items():
        if len(vals) > 1:
            runs[n][key]["value"] = sorted(vals)[len(vals) // 2]
            runs[n][key]["runs"] = vals
    return runs


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "."
    kiln, torch = load(out, "kiln"), load(out, "torch")
    sizes = sorted(set(kiln) | set(torch))
    keys = sorted({k for runs in (kiln, torch) for recs in runs.values() for k in recs})
    print("| workload | metric | GPUs | kiln | PyTorch | kiln vs PyTorch |")
    print("|---|---|---|---|---|---|")
    for key in keys:
        for n in sizes:
            k, t = kiln.get(n, {}).get(key), torch.get(n, {}).get(key)
            if not k and not t:
                continue
            unit = (k or t)["unit"]
            ratio = ""
            if k and t and k["value"] > 0 and t["value"] > 0:
                r = t["value"] / k["value"] if unit == "s" else k["value"] / t["value"]
                ratio = f"{r:.2f}x"
            fmt = lambda r: f"{r['value']:.4g} {unit}" if r else "-"
            print(f"| {key[0]} | {key[1]} | {n} | {fmt(k)} | {fmt(t)} | {ratio} |")
    notes = [f"- {name} {key[0]} {key[1]}, {n} GPU(s): median of {', '.join(f'{v:.4g}' for v in rec['runs'])}"
             for name, runs in (("kiln", kiln), ("PyTorch", torch)) for n in sizes for key, rec in
             sorted(runs.get(n, {}).items()) if "runs" in rec]
    if notes:
        print("\nRecords of several runs (separate processes, world sizes alternating):")
        print("\n".join(notes))
    if len(sizes) > 1:
        lo, hi = sizes[0], sizes[-1]
        print(f"\nScaling from {lo} to {hi} GPUs (throughput ratio; the target is >= 1.9x for 2 GPUs):")
        for key in keys:
            if key[1] not in ("throughput", "tokens_per_s"):  # samples/s, and ddp_gpt2's tokens/s
                continue
            for name, runs in (("kiln", kiln), ("PyTorch", torch)):
                a, b = runs.get(lo, {}).get(key), runs.get(hi, {}).get(key)
                if a and b:
                    print(f"- {key[0]} {name}: {b['value'] / a['value']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
