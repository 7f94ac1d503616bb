"""bench/python_overhead.py runs and writes records in the bench JSON format (no timing is asserted)."""

import json
import os
import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "bench" / "python_overhead.py"


def test_overhead_script_writes_records(tmp_path):
    out = tmp_path / "overhead.json"
    subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--json", str(out)], check=True, env=dict(os.environ),
                   capture_output=True)
    report = json.loads(out.read_text())
    cases = {r["case"] for r in report["records"]}
    assert {"kiln_cpu_add_arrays", "kiln_cpu_add_scalar", "numpy_cpu_add_arrays"} <= cases
    for record in report["records"]:
        assert record["workload"] == "python_overhead" and record["metric"] == "us_per_op"
        assert record["value"] > 0
