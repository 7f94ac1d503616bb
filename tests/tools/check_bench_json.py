#!/usr/bin/env python3
"""Runs `kiln bench --quick --json FILE` on whatever device this machine has (or on --device) and checks the file:
the shared schema's top-level keys, well-formed records, and the records every run must contain
(CPU sides always; GPU cases when the device is a GPU; skipped workloads named with a reason).
With --device cuda:N on a machine without that GPU it runs nothing and exits 77 (ctest's skip): the cuda preset's
ctest asks for cuda:0, the cpu preset's runs on the CPU.

usage: check_bench_json.py KILN_BINARY OUTPUT.json [--device DEVICE]
"""
import json
import math
import re
import subprocess
import sys


def fail(msg):
    print("check_bench_json: FAIL: " + msg)
    sys.exit(1)


def main():
    if len(sys.argv) not in (3, 5) or len(sys.argv) == 5 and sys.argv[3] != "--device":
        fail(__doc__)
    kiln, out = sys.argv[1], sys.argv[2]
    device = sys.argv[4] if len(sys.argv) == 5 else None
    device_args = ["--device", device] if device else []
    if device and device != "cpu":
        info = subprocess.run([kiln, "info"], capture_output=True, text=True)
        gpus = re.search(r"^GPUs: (\d+)", info.stdout, re.MULTILINE)
        if info.returncode != 0 or not gpus:
            fail(f"`kiln info` exited with {info.returncode} and printed no GPU count: "
                 f"{info.stdout[-2000:]}{info.stderr[-2000:]}")
        index = int(device.partition(":")[2] or 0)
        if index >= int(gpus.group(1)):
            print(f"check_bench_json: no GPU {device} on this machine ({gpus.group(1)} GPUs): "
                  "kiln bench on it is skipped")
            sys.exit(77)
    run = subprocess.run([kiln, "bench", "--quick", "--json", out] + device_args, capture_output=True, text=True)
    sys.stdout.write(run.stdout[-4000:])
    if run.returncode != 0:
        fail(f"kiln bench exited with {run.returncode}: {run.stderr[-2000:]}")
    workloads = ["matmul", "timing", "transfer", "overlap", "logging", "elementwise", "reduction", "overhead",
                 "fusion", "alloc", "multigpu", "train", "resnet50", "attention", "lstm", "generate", "gpt2"]
    for name in workloads:
        if f"== {name}:" not in run.stdout:
            fail(f"workload {name} printed no title")
    if run.stdout.count("verdict:") != len(workloads):
        fail(f"expected {len(workloads)} verdict lines, got {run.stdout.count('verdict:')}")
    with open(out) as f:
        doc = json.load(f)
    if doc.get("tool") != "kiln":
        fail(f"tool is {doc.get('tool')!r}")
    for key, kind in [("version", str), ("device", str), ("date", str), ("host_threads", int), ("quick", bool),
                      ("records", list)]:
        if not isinstance(doc.get(key), kind):
            fail(f"top-level {key!r} missing or not {kind.__name__}")
    if doc["quick"] is not True:
        fail("the run used --quick but the file says quick is false")
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", doc["date"]):
        fail(f"date {doc['date']!r} is not ISO 8601 UTC")
    keys = {}
    for r in doc["records"]:
        if set(r) - {"check"} != {"workload", "case", "metric", "unit", "value", "higher_is_better"}:
            fail(f"record keys {sorted(r)}")
        if "check" in r and (not isinstance(r["check"], str) or not r["check"]):
            fail(f"check must be a non-empty string (\"ok\" or what went wrong) in {r}")
        if r.get("check", "ok") != "ok":
            fail(f"kiln's own result check failed: {r}")
        if not isinstance(r["value"], (int, float)) or not math.isfinite(r["value"]) or r["value"] < 0:
            fail(f"bad value in {r}")
        if not isinstance(r["higher_is_better"], bool):
            fail(f"higher_is_better not a bool in {r}")
        k = (r["workload"], r["case"], r["metric"])
        if k in keys:
            fail(f"duplicate record {k}")
        keys[k] = r
    gpu = doc["device"] != "cpu"
    if device and device != "cpu" and not gpu:
        fail(f"--device {device} but the file's device is {doc['device']!r}")
    need = [("matmul", f"cpu_{n}", m) for n in (1024, 4096) for m in ("seconds", "tflops")]
    need += [("timing", c, "seconds") for c in ("host_clock_no_sync", "host_clock_sync", "events")]
    need += [("logging", c, m) for c in ("copy_every_step", "on_device") for m in ("seconds", "syncs")]
    need += [("elementwise", c, "gbps") for c in ("copy", "add", "add_scalar")]
    need += [("reduction", "sum", "gbps"), ("fusion", "eager", "ms"), ("fusion", "floor", "ms"),
             ("alloc", "alloc_free_1MB", "us")]
    need += [("overhead", c, "us_per_op") for c in ("small_add", "small_add_out")]
    need += [("train", c, "seconds") for c in ("cpu_mlp100_sgd", "cpu_mlp1000_adam")]
    need += [("resnet50", "cpu_infer_b16", "seconds"), ("lstm", "cpu_fwd", "seconds"), ("lstm", "cpu_fwd_bwd", "seconds"),
             ("generate", "cpu_d6_token", "seconds")]
    need += [("gpt2", "cpu_gpt2_d6_step", m) for m in ("seconds", "tokens_per_s", "first_fast_s")]
    need += [("gpt2", "cpu_gpt2_d6_step_compiled", m) for m in ("seconds", "fused_ops", "record_gib", "first_fast_s")]
    if not gpu:
        need += [("attention", f"sdpa_t256_d64_{m}", "fwd_TFLOPs") for m in ("causal", "full")]
    if gpu:
        need += [("matmul", f"gpu_{n}", m) for n in (1024, 4096) for m in ("seconds", "tflops")]
        need += [("matmul", f"speedup_{n}", "x") for n in (1024, 4096)]
        need += [("transfer", f"{d}_{mb}", "gbps") for d in ("h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned")
                 for mb in (16, 256)]
        need += [("overlap", c, "seconds") for c in ("serial", "overlapped", "copy_only")]
        need += [("overlap", "overlapped", "hidden_copy_fraction"), ("overhead", "empty_launch", "us_per_op")]
        need += [("train", c, "seconds")
                 for c in ("mlp100_sgd_hostbatches", "mlp100_sgdm_device", "mlp1000_adam_device", "mlp1000_adam_graph")]
        need += [("attention", f"sdpa_t{t}_d{d}_{m}", p) for t in (1024, 4096) for d in (64, 128)
                 for m in ("causal", "full") for p in ("fwd_TFLOPs", "fwdbwd_TFLOPs")]
        need += [("resnet50", c, "seconds") for c in ("infer_fp32", "infer_fp32_folded", "train_fp32", "train_fp32_graph",
                                                      "infer_bf16_cl", "infer_bf16_cl_folded", "train_bf16_cl",
                                                      "train_bf16_cl_graph")]
        need += [("lstm", c, "seconds") for c in ("fwd_fp32", "fwd_bwd_fp32", "small_fwd_bwd_fp32")]
        need += [("generate", c, "seconds") for c in ("gpt2_124m_token", "gpt2_124m_token_eager")]
        need += [("gpt2", "gpt2_124m_step", m) for m in ("seconds", "tokens_per_s", "mfu", "peak_gib", "first_fast_s")]
        need += [("gpt2", "gpt2_124m_step_graph", m) for m in ("seconds", "tokens_per_s", "mfu")]
    missing = [k for k in need if k not in keys]
    if missing:
        fail(f"missing records: {missing}")
    # The workloads that check what they timed say so in the record (compare flags a failed check "(!)").
    checked = [("reduction", "sum", "gbps"), ("fusion", "fused", "ms"), ("logging", "copy_every_step", "seconds"),
               ("logging", "on_device", "seconds"), ("train", "cpu_mlp100_sgd", "seconds"),
               ("resnet50", "cpu_infer_b16", "seconds"), ("lstm", "cpu_fwd_bwd", "seconds"),
               ("generate", "cpu_d6_token", "seconds"), ("gpt2", "cpu_gpt2_d6_step", "seconds")]
    checked += [(k[0], k[1], k[2]) for k in keys if k[0] == "attention" and k[2] == "fwd_TFLOPs"]
    if gpu:
        checked += [("overlap", "serial", "seconds"), ("overlap", "overlapped", "seconds")]
    unchecked = [k for k in checked if keys.get(k, {}).get("check") != "ok"]
    if unchecked:
        fail(f"records without check \"ok\": {unchecked}")
    skipped = {s["what"]: s["reason"] for s in doc.get("skipped", [])}
    if not gpu:
        for what in ("transfer", "overlap", "multigpu", "matmul gpu_N", "train mlp1000_adam_graph", "resnet50 train_fp32",
                     "resnet50 train_bf16_cl_graph", "lstm fwd_bwd_fp32", "generate gpt2_124m_token", "gpt2 gpt2_124m_step"):
            if not skipped.get(what):
                fail(f"{what} should be listed as skipped with a reason on the CPU")
        if keys[("logging", "copy_every_step", "syncs")]["value"] != 0:
            fail("the CPU makes no syncs")
    else:
        if keys[("logging", "copy_every_step", "syncs")]["value"] < 1000:
            fail("copying every step on a GPU makes at least 1000 syncs")
        if keys[("logging", "on_device", "syncs")]["value"] > 1:
            fail("keeping the log on the device makes at most 1 sync")
    print(f"check_bench_json: ok ({len(keys)} records on {doc['device']})")


main()
