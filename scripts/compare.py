#!/usr/bin/env python3
"""Joins kiln's GPU benchmark JSON with peers.json (PyTorch/CuPy, same machine,
same call) into one Markdown table of figures and ratios against the targets.

    python3 scripts/compare.py OUTDIR   # reads OUTDIR/bench_gpu.json and OUTDIR/peers.json
"""
import json
import os
import sys


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("OUT", ".")
    kiln = json.load(open(os.path.join(out, "bench_gpu.json")))
    peers_path = os.path.join(out, "peers.json")
    peers = json.load(open(peers_path)) if os.path.exists(peers_path) else {}
    k = {(r["name"], r["size"]): r for r in kiln["results"]}

    def kv(name, size):
        r = k.get((name, size))
        return r["throughput"] if r else None

    def num(x):
        return isinstance(x, (int, float))

    rows = []  # (workload, kiln, torch, cupy, unit, ratio text, target)

    def add(label, kval, tval, cval, unit, ratio=None, target=""):
        rows.append((label, kval, tval, cval, unit, ratio, target))

    size = "2^28" if ("copy", "2^28") in k else "2^24"
    copy = peers.get("torch_copy_GBs")
    add("device copy f32 " + size, kv("copy", size), copy, None, "GB/s",
        kv("copy", size) / copy if num(copy) and kv("copy", size) else None, "")
    add("add f32 " + size, kv("add", size), peers.get("torch_add_GBs"), peers.get("cupy_add_GBs"), "GB/s",
        kv("add", size) / copy if num(copy) and kv("add", size) else None, ">= 0.95 of copy")
    add("add scalar f32 " + size, kv("add_scalar", size), peers.get("torch_add_scalar_GBs"), None, "GB/s",
        kv("add_scalar", size) / copy if num(copy) and kv("add_scalar", size) else None, ">= 0.95 of copy")
    add("sum f32 " + size, kv("sum", size), peers.get("torch_sum_GBs"), peers.get("cupy_sum_GBs"), "GB/s",
        kv("sum", size) / copy if num(copy) and kv("sum", size) else None, ">= 0.95 of copy")
    t = peers.get("torch_small_op_us")
    add("small add (1000 el.) host time", kv("small_add", "1000"), t, peers.get("cupy_small_op_us"), "us/op",
        kv("small_add", "1000") / t if num(t) and kv("small_add", "1000") else None, "<= 0.33 of torch")
    t = peers.get("torch_small_op_out_us")
    add("small add out= host time", kv("small_add_out", "1000"), t, None, "us/op",
        kv("small_add_out", "1000") / t if num(t) and kv("small_add_out", "1000") else None, "")
    add("empty kernel launch (floor)", kv("launch_empty", "1"), None, peers.get("cupy_empty_launch_us"), "us/op",
        None, "")
    t = peers.get("chain_torch_eager_ms")
    add("chain eager 2^26", kv("chain_eager", "2^26"), t, peers.get("chain_cupy_eager_ms"), "ms",
        kv("chain_eager", "2^26") / t if num(t) and kv("chain_eager", "2^26") else None, "")
    floor = kv("fusion_chain_floor", "2^26")
    fused = kv("fusion_chain_fused", "2^26")
    add("chain fused 2^26 (kiln::fuse; torch.compile, cupy.fuse)", fused, peers.get("chain_torch_compile_ms"),
        peers.get("chain_cupy_fuse_ms"), "ms", fused / floor if num(floor) and fused else None,
        "<= 1.15 of the copy floor")
    add("chain bandwidth floor 2^26", floor, peers.get("chain_floor_ms"), None, "ms", None, "")
    for n in (4096, 8192, 15360):
        t = peers.get(f"torch_sgemm_{n}_TFLOPs")
        v = kv("matmul", str(n))
        add(f"matmul f32 {n}", v, t, peers.get(f"cupy_sgemm_{n}_TFLOPs"), "TFLOP/s",
            v / t if num(t) and v else None, ">= 0.98 of torch")
    for key, label, target in (("h2d_pageable", "H2D pageable 1 GiB", ">= 1.0 of torch"),
                               ("h2d_pinned", "H2D pinned 1 GiB", ">= 0.95 of torch"),
                               ("d2h_pageable", "D2H pageable 1 GiB", ">= 1.0 of torch"),
                               ("d2h_pinned", "D2H pinned 1 GiB", ">= 0.95 of torch")):
        t = peers.get(key + "_GBs")
        v = kv(key, "1GiB")
        add(label, v, t, None, "GB/s", v / t if num(t) and v else None, target)
    t = peers.get("cupy_elementwise_cold_compile_ms")
    add("first compile of a new kernel", kv("compile_cold", "1"), None, t, "ms", None, "<= 150 ms")
    add("kernel disk-cache hit", kv("compile_disk_hit", "1"), None, peers.get("cupy_elementwise_second_call_ms"),
        "ms", None, "<= 2 ms")
    add("caching alloc+free 1 MiB", kv("alloc_free", "1MiB"), None, None, "us/op", None, "")

    def f(x):
        if x is None:
            return "–"
        if isinstance(x, str):
            return x
        return f"{x:.3g}" if abs(x) < 100 else f"{x:.0f}"

    print(f"GPU: {kiln.get('device')} | peers GPU: {peers.get('gpu', '–')}\n")
    print("| workload | kiln | PyTorch | CuPy | unit | ratio | target |")
    print("|---|---|---|---|---|---|---|")
    for label, kval, tval, cval, unit, ratio, target in rows:
        print(f"| {label} | {f(kval)} | {f(tval)} | {f(cval)} | {unit} | {f(ratio)} | {target} |")


if __name__ == "__main__":
    main()
