#!/usr/bin/env python3
"""scripts/bench-before-after on hand-made benchmark JSON: the ratio's orientation (> 1 means the
after run is better whichever way the metric points), the noise threshold, the peer columns and
records present in one file only. Run by ctest as scripts.before_after (python3 only)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "bench-before-after")


def rec(workload, value, higher, metric="m"):
    return {"workload": workload, "case": "c", "metric": metric, "unit": "u", "value": value,
            "higher_is_better": higher}


class BeforeAfter(unittest.TestCase):
    def run_script(self, before, after, peer=None, *extra):
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, records in (("before", before), ("after", after), ("peer", peer)):
                if records is None:
                    continue
                path = os.path.join(d, name + ".json")
                with open(path, "w") as f:
                    json.dump({"tool": "torch" if name == "peer" else "kiln", "device": "GPU", "records": records}, f)
                paths.append(path)
            out = subprocess.run([sys.executable, SCRIPT, *paths, *extra], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout

    def row(self, text, workload):
        return next(line for line in text.splitlines() if line.startswith(f"| {workload} |"))

    def test_orientation_and_noise(self):
        text = self.run_script([rec("bw", 100.0, True), rec("t", 1.0, False), rec("flat", 100.0, True)],
                               [rec("bw", 97.0, True), rec("t", 0.5, False), rec("flat", 98.5, True)])
        self.assertIn("| 0.97 **worse** |", self.row(text, "bw"))     # 3% less bandwidth
        self.assertIn("| 2 |", self.row(text, "t"))                   # half the time: 2x better
        self.assertNotIn("worse", self.row(text, "flat"))             # 1.5% is within the 2% noise
        self.assertIn("3 records compared", text)
        self.assertIn("1 worse beyond noise: bw/c/m", text)

    def test_noise_option_and_peer_columns(self):
        text = self.run_script([rec("bw", 100.0, True)], [rec("bw", 98.5, True)], [rec("bw", 50.0, True)],
                               "--noise", "0.01")
        row = self.row(text, "bw")
        self.assertIn("**worse**", row)
        self.assertIn("| 2 | 1.97 |", row)  # kiln/torch before and after
        self.assertIn("after/torch", text)

    def run_runs(self, before_runs, after_runs):
        """Several runs per side, passed comma-separated."""
        with tempfile.TemporaryDirectory() as d:
            sides = []
            for side, runs in (("before", before_runs), ("after", after_runs)):
                paths = []
                for i, records in enumerate(runs):
                    path = os.path.join(d, f"{side}{i}.json")
                    with open(path, "w") as f:
                        json.dump({"tool": "kiln", "device": "GPU", "records": records}, f)
                    paths.append(path)
                sides.append(",".join(paths))
            out = subprocess.run([sys.executable, SCRIPT, *sides], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            return out.stdout

    def test_several_runs_median_and_spread(self):
        # Lower is better. Before runs 3, 4, 5 (median 4); after runs 4.4, 4.5, 6 (median 4.5):
        # 4/4.5 = 0.889 < 0.98, but the runs overlap (after's best 4.4 < before's worst 5): within spread.
        text = self.run_runs([[rec("t", 3.0, False)], [rec("t", 4.0, False)], [rec("t", 5.0, False)]],
                             [[rec("t", 4.4, False)], [rec("t", 4.5, False)], [rec("t", 6.0, False)]])
        row = self.row(text, "t")
        self.assertIn("| 4 | 4.5 | 50.0% | 35.6% | 0.8889 within spread |", row)
        self.assertIn("3 run(s) before, 3 run(s) after", text)
        self.assertIn("0 worse beyond noise", text)
        self.assertIn("1 below 1 - noise but within the runs' spread: t/c/m", text)
        # Separate runs: every after run slower than every before run: worse.
        text = self.run_runs([[rec("t", 3.0, False)], [rec("t", 3.1, False)]],
                             [[rec("t", 3.5, False)], [rec("t", 3.6, False)]])
        self.assertIn("**worse**", self.row(text, "t"))
        self.assertIn("1 worse beyond noise: t/c/m", text)

    def test_records_in_one_file_only_are_named(self):
        text = self.run_script([rec("a", 1.0, True)], [rec("a", 1.0, True), rec("new", 2.0, True)])
        self.assertIn("in one file only: new/c/m", text)


if __name__ == "__main__":
    unittest.main()
