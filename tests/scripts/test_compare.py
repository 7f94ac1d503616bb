#!/usr/bin/env python3
"""scripts/compare on hand-made benchmark JSON: the join on (workload, case, metric), the
ratio orientation (> 1 means kiln is better, whichever way the metric points), skipped and
failed-check records, peer-only records, file order, bad input and the PNG chart.
Run by ctest as scripts.compare (needs only python3; the chart part checks matplotlib's
absence is reported when it is not installed)."""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "compare")


def load_compare():
    loader = importlib.machinery.SourceFileLoader("kiln_compare", SCRIPT)
    spec = importlib.util.spec_from_loader("kiln_compare", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def rec(workload, case, metric, value, higher, unit="", **extra):
    r = {"workload": workload, "case": case, "metric": metric, "unit": unit, "value": value,
         "higher_is_better": higher}
    r.update(extra)
    return r


def doc(tool, records, device="NVIDIA H200"):
    return {"tool": tool, "version": "0", "device": device, "date": "2026-11-22T03:00:00Z", "host_threads": 16,
            "records": records}


KILN = doc("kiln", [
    rec("elementwise", "add", "gbps", 3000.0, True, "GB/s"),
    rec("overhead", "small_add", "us_per_op", 3.0, False, "us/op"),
    rec("fusion", "fused", "ms", 0.2, False, "ms"),
    rec("matmul", "gpu_4096", "seconds", 0.003, False, "s"),
    rec("matmul", "speedup_4096", "x", 100.0, True, "x"),
    rec("reduction", "sum", "gbps", 1000.0, True, "GB/s", check="got 1 want 2"),
    rec("timing", "host_clock_no_sync", "seconds", 1e-5, False, "s"),  # the deliberately wrong timing
    rec("fusion", "fused", "x_floor", 1.1, False, "x"),
])
# `kiln bench` lists what it skipped as a whole at the top level.
KILN["skipped"] = [{"what": "overhead graph_replay", "reason": "no CUDA graphs in this build"},
                   {"what": "matmul gpu_N", "reason": "no GPU"}]
TORCH = doc("torch", [
    rec("elementwise", "add", "gbps", 4000.0, True, "GB/s"),
    rec("overhead", "small_add", "us_per_op", 9.0, False, "us/op"),
    rec("fusion", "fused", "ms", None, False, "ms", skipped="torch.compile failed: no Triton"),
    rec("matmul", "gpu_4096", "seconds", 0.0027, False, "s"),
    rec("reduction", "sum", "gbps", 4000.0, True, "GB/s"),
    rec("alloc", "alloc_free_1MB", "us", 4.0, False, "us"),  # kiln has no such record
    rec("overhead", "graph_replay", "us_per_op", 1.2, False, "us/op"),
    rec("matmul", "gpu_8192", "tflops", 50.0, True, "TFLOP/s"),
    rec("timing", "host_clock_no_sync", "seconds", 9.6e-5, False, "s"),  # 9.6x "better": not counted
    rec("fusion", "fused", "x_floor", 1.4, False, "x"),  # derived: not counted
])
CUPY = doc("cupy", [
    rec("elementwise", "add", "gbps", 2000.0, True, "GB/s"),
    rec("overhead", "small_add", "us_per_op", 6.0, False, "us/op"),
    rec("fusion", "fused", "ms", 0.4, False, "ms"),
    rec("matmul", "speedup_4096", "x", 50.0, True, "x"),
    rec("matmul", "gpu_4096", "seconds", 0.00303, False, "s"),  # 1.01x: within noise, counted as even
])


def table_rows(markdown):
    """{(workload, case, metric): [cells]} of the Markdown table."""
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| ") and not line.startswith("| workload"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[tuple(cells[:3])] = cells
    return rows


class CompareTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.compare = load_compare()
        cls.tmp = tempfile.TemporaryDirectory()
        cls.paths = {}
        for d in (KILN, TORCH, CUPY):
            path = os.path.join(cls.tmp.name, d["tool"] + ".json")
            with open(path, "w") as f:
                json.dump(d, f)
            cls.paths[d["tool"]] = path

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)

    def test_ratio_higher_is_better_is_kiln_over_peer(self):
        r = self.compare.ratio(rec("e", "add", "gbps", 3000.0, True), rec("e", "add", "gbps", 4000.0, True))
        self.assertAlmostEqual(r, 0.75)

    def test_ratio_lower_is_better_is_peer_over_kiln(self):
        r = self.compare.ratio(rec("o", "s", "us_per_op", 3.0, False), rec("o", "s", "us_per_op", 9.0, False))
        self.assertAlmostEqual(r, 3.0)

    def test_ratio_missing_skipped_or_nonpositive_is_none(self):
        k = rec("f", "fused", "ms", 0.2, False)
        self.assertIsNone(self.compare.ratio(k, rec("f", "fused", "ms", None, False, skipped="no")))
        self.assertIsNone(self.compare.ratio(k, rec("f", "fused", "ms", 0.0, False)))
        self.assertIsNone(self.compare.ratio(k, rec("f", "fused", "ms", float("nan"), False)))
        self.assertIsNone(self.compare.ratio(k, rec("f", "fused", "ms", "fail", False)))

    def test_table_values_and_oriented_ratios(self):
        out = self.run_script(self.paths["kiln"], self.paths["torch"], self.paths["cupy"])
        self.assertEqual(out.returncode, 0, out.stderr)
        rows = table_rows(out.stdout)
        # columns: workload case metric unit kiln torch cupy kiln/torch kiln/cupy
        add = rows[("elementwise", "add", "gbps")]
        self.assertEqual(add[3:], ["GB/s", "3000", "4000", "2000", "0.75x", "1.50x"])
        small = rows[("overhead", "small_add", "us_per_op")]
        self.assertEqual(small[7:], ["3.00x", "2.00x"])  # kiln 3 us vs 9 and 6 us: kiln better
        fused = rows[("fusion", "fused", "ms")]
        self.assertEqual(fused[5:], ["skipped", "0.4", "–", "2.00x"])
        gemm = rows[("matmul", "gpu_4096", "seconds")]
        self.assertEqual(gemm[7:], ["0.90x", "1.01x"])  # 0.0027 / 0.003, 0.00303 / 0.003
        speedup = rows[("matmul", "speedup_4096", "x")]
        self.assertEqual(speedup[7:], ["–", "2.00x"])
        total = rows[("reduction", "sum", "gbps")]
        self.assertEqual(total[4], "1000 (!)")  # kiln's own check failed: flagged
        alloc = rows[("alloc", "alloc_free_1MB", "us")]  # peer-only record still listed
        self.assertEqual(alloc[4:6], ["–", "4"])
        graph = rows[("overhead", "graph_replay", "us_per_op")]  # kiln lists it as skipped at the top level
        self.assertEqual(graph[4:], ["skipped", "1.2", "–", "–", "–"])
        gemm_8192 = rows[("matmul", "gpu_8192", "tflops")]  # "matmul gpu_N" covers every size
        self.assertEqual(gemm_8192[4:6], ["skipped", "50"])

    def test_header_summary_and_notes(self):
        out = self.run_script(self.paths["kiln"], self.paths["torch"], self.paths["cupy"])
        self.assertIn("GPU: NVIDIA H200", out.stdout)
        self.assertIn("date: 2026-11-22T03:00:00Z", out.stdout)
        self.assertIn("torch fusion/fused/ms skipped: torch.compile failed: no Triton", out.stdout)
        self.assertIn("kiln reduction/sum/gbps check failed: got 1 want 2", out.stdout)
        self.assertIn("kiln overhead graph_replay skipped: no CUDA graphs in this build", out.stdout)
        self.assertEqual(out.stdout.count("kiln matmul gpu_N skipped: no GPU"), 1)
        # kiln vs torch ratios: 0.75, 3, 0.9, 0.25 -> 1 of 4 better, geometric mean (0.50625)^(1/4); the
        # host_clock_no_sync (9.6x) and x_floor (1.27x) ratios are shown but not counted
        self.assertIn("kiln vs torch: 4 compared: kiln better in 1, even in 0 (within 2%), worse in 3; "
                      "geometric mean 0.84x", out.stdout)
        # kiln vs cupy ratios: 1.5, 2, 2, 1.01 -> 3 better, 1.01 within 2% is even; (6.06)^(1/4); speedup_4096
        # (2x) is derived and not counted
        self.assertIn("kiln vs cupy: 4 compared: kiln better in 3, even in 1 (within 2%), worse in 0; "
                      "geometric mean 1.57x", out.stdout)
        left_out = [line for line in out.stdout.splitlines() if line.startswith("- left out of these counts")]
        self.assertEqual(len(left_out), 1, out.stdout)
        for name in ("matmul/speedup_4096/x: derived", "timing/host_clock_no_sync/seconds: the deliberately wrong",
                     "fusion/fused/x_floor: derived"):
            self.assertIn(name, left_out[0])
        self.assertNotIn("elementwise/add", left_out[0])

    def test_not_tallied_covers_the_wrong_timing_and_derived_ratios_only(self):
        nt = self.compare.not_tallied
        self.assertIsNotNone(nt(("timing", "host_clock_no_sync", "seconds")))
        self.assertIsNone(nt(("timing", "host_clock_sync", "seconds")))
        self.assertIsNone(nt(("timing", "events", "seconds")))
        self.assertIsNotNone(nt(("matmul", "speedup_15360", "x")))
        self.assertIsNone(nt(("matmul", "cpu_1024", "seconds")))
        self.assertIsNone(nt(("matmul", "gpu_4096", "tflops")))
        self.assertIsNotNone(nt(("multigpu", "two_gpus", "speedup")))
        self.assertIsNone(nt(("multigpu", "two_gpus", "seconds")))
        self.assertIsNotNone(nt(("fusion", "eager", "x_floor")))
        self.assertIsNone(nt(("fusion", "fused", "ms")))
        self.assertIsNotNone(nt(("overlap", "overlapped", "hidden_copy_fraction")))
        self.assertIsNone(nt(("overlap", "overlapped", "seconds")))

    def test_file_order_does_not_matter(self):
        a = self.run_script(self.paths["kiln"], self.paths["torch"], self.paths["cupy"])
        b = self.run_script(self.paths["cupy"], self.paths["kiln"], self.paths["torch"])
        self.assertEqual(a.returncode, 0, a.stderr)
        self.assertEqual(b.returncode, 0, b.stderr)
        self.assertIn("kiln vs torch: 4 compared", a.stdout)  # a real comparison, not two empty outputs
        self.assertEqual(a.stdout, b.stdout)

    def test_different_devices_are_flagged(self):
        other = dict(CUPY, device="NVIDIA H100 80GB HBM3")
        path = os.path.join(self.tmp.name, "cupy_h100.json")
        with open(path, "w") as f:
            json.dump(other, f)
        out = self.run_script(self.paths["kiln"], path)
        self.assertIn("different devices", out.stdout)

    def test_needs_exactly_one_kiln_file(self):
        out = self.run_script(self.paths["torch"], self.paths["cupy"])
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("exactly one kiln JSON", out.stderr)
        bad = os.path.join(self.tmp.name, "bad.json")
        with open(bad, "w") as f:
            f.write("{not json")
        out = self.run_script(self.paths["kiln"], bad)
        self.assertNotEqual(out.returncode, 0)
        self.assertIn("cannot read", out.stderr)

    def test_out_file_and_chart(self):
        md = os.path.join(self.tmp.name, "table.md")
        png = os.path.join(self.tmp.name, "ratios.png")
        out = self.run_script(self.paths["kiln"], self.paths["torch"], self.paths["cupy"], "--out", md, "--png", png)
        self.assertEqual(out.returncode, 0, out.stderr)
        with open(md) as f:
            self.assertEqual(f.read(), out.stdout.split("\nchart:")[0] if "\nchart:" in out.stdout else out.stdout)
        if importlib.util.find_spec("matplotlib") is None:
            self.assertIn("matplotlib is not installed", out.stderr)
            self.assertFalse(os.path.exists(png))
            return
        with open(png, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_chart_skipped_with_a_note_without_matplotlib(self):
        png = os.path.join(self.tmp.name, "none.png")
        code = ("import sys, runpy; sys.modules['matplotlib'] = None; "
                f"sys.argv = ['compare', {self.paths['kiln']!r}, {self.paths['torch']!r}, '--png', {png!r}]; "
                f"runpy.run_path({SCRIPT!r}, run_name='__main__')")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("matplotlib is not installed: no chart", out.stderr)
        self.assertIn("| elementwise | add | gbps |", out.stdout)
        self.assertFalse(os.path.exists(png))


if __name__ == "__main__":
    unittest.main(verbosity=2)
