#!/usr/bin/env python3
"""bench/peers: the case list matches docs/bench-schema.md (the names `kiln bench` writes), the
scripts exit 0 with a clear message when their library is missing, and the JSON writer
produces the schema's fields. Measures nothing, so it runs the same with or without a GPU.
Run by ctest as scripts.peers."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEERS = os.path.join(ROOT, "bench", "peers")
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, PEERS)
import common  # noqa: E402

# Every (workload, case, metric) docs/bench-schema.md lists, written out by hand from its text.
REQUIRED_FULL = set()
for n in (1024, 2048, 4096, 8192, 15360):
    REQUIRED_FULL |= {("matmul", f"cpu_{n}", "seconds"), ("matmul", f"cpu_{n}", "tflops"),
                      ("matmul", f"gpu_{n}", "seconds"), ("matmul", f"gpu_{n}", "tflops")}
REQUIRED_FULL |= {("timing", "host_clock_no_sync", "seconds"), ("timing", "host_clock_sync", "seconds"),
                  ("timing", "events", "seconds")}
for mb in (1, 16, 256, 1024):
    for kind in ("h2d_pageable", "h2d_pinned", "d2h_pageable", "d2h_pinned"):
        REQUIRED_FULL.add(("transfer", f"{kind}_{mb}", "gbps"))
REQUIRED_FULL |= {("overlap", "serial", "seconds"), ("overlap", "overlapped", "seconds"),
                  ("overlap", "overlapped", "hidden_copy_fraction"),
                  ("logging", "copy_every_step", "seconds"), ("logging", "on_device", "seconds"),
                  ("elementwise", "copy", "gbps"), ("elementwise", "add", "gbps"), ("elementwise", "add_scalar", "gbps"),
                  ("reduction", "sum", "gbps"),
                  ("overhead", "small_add", "us_per_op"), ("overhead", "small_add_out", "us_per_op"),
                  ("overhead", "graph_replay", "us_per_op"), ("overhead", "empty_launch", "us_per_op"),
                  ("fusion", "eager", "ms"), ("fusion", "fused", "ms"), ("fusion", "floor", "ms"),
                  ("fusion", "fused", "x_floor"), ("alloc", "alloc_free_1MB", "us"),
                  ("multigpu", "one_gpu", "seconds"), ("multigpu", "two_gpus", "seconds"),
                  ("multigpu", "two_gpus", "speedup")}
REQUIRED_FULL |= {("train", c, "seconds") for c in ("mlp100_sgd_hostbatches", "mlp100_sgdm_device", "mlp1000_adam_device",
                                                    "mlp1000_adam_graph", "cpu_mlp100_sgd", "cpu_mlp1000_adam")}
REQUIRED_FULL |= {("resnet50", c, "seconds")
                  for c in ("infer_fp32", "infer_fp32_folded", "train_fp32", "infer_bf16_cl", "infer_bf16_cl_folded",
                            "train_bf16_cl", "cpu_infer_b16")}
REQUIRED_FULL |= {("lstm", c, "seconds")
                  for c in ("fwd_fp32", "fwd_bwd_fp32", "small_fwd_bwd_fp32", "cpu_fwd", "cpu_fwd_bwd")}
REQUIRED_FULL |= {("gpt2", c, m) for c in ("gpt2_124m_step", "cpu_gpt2_d6_step")
                  for m in ("seconds", "tokens_per_s", "first_fast_s")}


def script(tool):
    return os.path.join(PEERS, f"{tool}_bench.py")


class PeersTest(unittest.TestCase):
    def test_plan_covers_the_schema(self):
        planned = set(common.plan(common.Sizes("full")))
        self.assertEqual(REQUIRED_FULL - planned, set())
        self.assertEqual(len(planned), len(common.plan(common.Sizes("full"))), "no record planned twice")

    def test_quick_plan_uses_the_quick_sizes(self):
        quick = set(common.plan(common.Sizes("quick")))
        self.assertIn(("matmul", "gpu_4096", "tflops"), quick)
        self.assertNotIn(("matmul", "gpu_2048", "tflops"), quick)
        self.assertIn(("transfer", "h2d_pinned_256", "gbps"), quick)
        self.assertNotIn(("transfer", "h2d_pinned_1", "gbps"), quick)

    def test_orientation_of_metrics(self):
        self.assertTrue(common.METRICS["gbps"][1])
        self.assertTrue(common.METRICS["tflops"][1])
        self.assertTrue(common.METRICS["hidden_copy_fraction"][1])
        self.assertFalse(common.METRICS["seconds"][1])
        self.assertFalse(common.METRICS["us_per_op"][1])
        self.assertFalse(common.METRICS["x_floor"][1])

    def test_dry_run_lists_every_case(self):
        for tool in ("torch", "cupy"):
            out = subprocess.run([sys.executable, script(tool), "--dry-run", "--workloads", "overhead,fusion"],
                                 capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn("9 records", out.stdout)
            self.assertIn("graph_replay", out.stdout)
            self.assertIn("x_floor", out.stdout)
            self.assertNotIn("matmul", out.stdout)

    def test_unknown_workload_is_an_error(self):
        out = subprocess.run([sys.executable, script("torch"), "--workloads", "matmul,warp"],
                             capture_output=True, text=True)
        self.assertEqual(out.returncode, 2)
        self.assertIn("unknown workload(s) warp", out.stderr)

    def test_missing_library_exits_0_with_a_message(self):
        # sys.modules[name] = None makes `import name` raise ImportError, wherever torch/cupy are installed.
        for tool in ("torch", "cupy"):
            with tempfile.TemporaryDirectory() as tmp:
                out_json = os.path.join(tmp, "x.json")
                code = (f"import sys, runpy; sys.modules[{tool!r}] = None; "
                        f"sys.argv = [{script(tool)!r}, '--json', {out_json!r}]; "
                        f"runpy.run_path({script(tool)!r}, run_name='__main__')")
                out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
                self.assertEqual(out.returncode, 0, out.stderr)
                self.assertIn("not installed", out.stdout)
                self.assertIn("nothing measured", out.stdout)
                self.assertFalse(os.path.exists(out_json), "no JSON is written when nothing was measured")

    def test_recorder_writes_the_schema(self):
        rec = common.Recorder("torch", "2.11", "NVIDIA H200", common.Sizes("quick"), host_threads=16)
        rec.add("elementwise", "add", "gbps", 4000.0)
        rec.add("overhead", "small_add", "us_per_op", 9.3, note="n", check="ok")
        rec.skip("fusion", "fused", "ms", "torch.compile failed")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "torch.json")
            rec.write(path)
            with open(path) as f:
                doc = json.load(f)
        for key in ("tool", "version", "device", "date", "host_threads", "records"):
            self.assertIn(key, doc)
        self.assertTrue(doc["quick"])
        self.assertFalse(doc["smoke"])
        self.assertEqual(doc["tool"], "torch")
        self.assertRegex(doc["date"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        first, second, skipped = doc["records"]
        self.assertEqual(first, {"workload": "elementwise", "case": "add", "metric": "gbps", "unit": "GB/s",
                                 "value": 4000.0, "higher_is_better": True})
        self.assertFalse(second["higher_is_better"])
        self.assertIsNone(skipped["value"])
        self.assertEqual(skipped["skipped"], "torch.compile failed")

    def test_failed_workload_keeps_the_others_and_marks_its_records(self):
        rec = common.Recorder("cupy", "14", "gpu", common.Sizes("quick"))

        class Args:
            workloads = ["reduction", "alloc"]
            json = None

        def broken():
            raise RuntimeError("out of memory\nmore")

        common.run_workloads(rec, Args, {"reduction": broken,
                                         "alloc": lambda: rec.add("alloc", "alloc_free_1MB", "us", 2.0)})
        common.finish(rec, Args)
        by_key = {(r["workload"], r["case"], r["metric"]): r for r in rec.doc["records"]}
        self.assertEqual(by_key[("reduction", "sum", "gbps")]["skipped"], "RuntimeError: out of memory")
        self.assertEqual(by_key[("alloc", "alloc_free_1MB", "us")]["value"], 2.0)

    def run_with_fake(self, tool, gpus, **extra_env):
        """Runs a peer script end to end (--smoke sizes) on the NumPy stand-in of its library."""
        env = dict(os.environ, PYTHONPATH=os.path.join(HERE, f"fake_{tool}"), FAKE_GPUS=str(gpus),
                   PYTHONDONTWRITEBYTECODE="1", **extra_env)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{tool}.json")
            out = subprocess.run([sys.executable, script(tool), "--smoke", "--json", path], capture_output=True,
                                 text=True, env=env, timeout=300)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            with open(path) as f:
                doc = json.load(f)
        self.assertEqual(doc["tool"], tool)
        self.assertTrue(doc["smoke"])
        records = {(r["workload"], r["case"], r["metric"]): r for r in doc["records"]}
        self.assertEqual(set(records), set(common.plan(common.Sizes("smoke"))))
        return records, out.stdout + out.stderr

    def check_measured(self, records, log, allowed_skips=()):
        for key, r in records.items():
            if key[0] in ("train", "resnet50", "lstm", "generate", "gpt2"):
                # The stand-ins have no autograd: CuPy skips train by design (PyTorch is its peer), the fake torch
                # lacks torch.nn, so the workload is recorded as failed with the reason; it runs on the GPU machine.
                self.assertRegex(r.get("skipped", ""), "CuPy has no (autograd|layers)|has no attribute 'nn'", key)
                continue
            if key[0] in allowed_skips:
                self.assertIn("needs two GPUs", r.get("skipped", ""), key)
                continue
            if key[:2] == ("fusion", "fused") and "compile" in allowed_skips:
                self.assertIn("torch.compile failed: RuntimeError: Cannot find a working triton installation",
                              r.get("skipped", ""), key)
                continue
            self.assertNotIn("skipped", r, f"{key}: {r.get('skipped')}\n{log}")
            self.assertIsInstance(r["value"], float, key)
            self.assertEqual(r.get("check", "ok"), "ok", f"{key}: {r.get('check')}")

    def test_cupy_bench_runs_end_to_end_on_a_stand_in(self):
        records, log = self.run_with_fake("cupy", gpus=2)
        self.check_measured(records, log)
        self.assertAlmostEqual(records[("multigpu", "two_gpus", "speedup")]["value"],
                               records[("multigpu", "one_gpu", "seconds")]["value"] /
                               records[("multigpu", "two_gpus", "seconds")]["value"])
        records, log = self.run_with_fake("cupy", gpus=1)
        self.check_measured(records, log, allowed_skips=("multigpu",))

    def test_torch_bench_runs_end_to_end_on_a_stand_in(self):
        records, log = self.run_with_fake("torch", gpus=2)
        self.check_measured(records, log)
        fused, floor = records[("fusion", "fused", "ms")]["value"], records[("fusion", "floor", "ms")]["value"]
        self.assertAlmostEqual(records[("fusion", "fused", "x_floor")]["value"], fused / floor)
        # Without Triton torch.compile fails: "fused" is skipped with the reason, the rest is measured.
        records, log = self.run_with_fake("torch", gpus=1, FAKE_TORCH_COMPILE_FAILS="1")
        self.check_measured(records, log, allowed_skips=("multigpu", "compile"))


if __name__ == "__main__":
    unittest.main(verbosity=2)
