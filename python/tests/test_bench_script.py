"""bench/python_overhead.py, bench/python_mlp.py and bench/python_fft_einsum.py run and write records in the bench
JSON format, and bench/python_mlp_steps.py runs its two modes (no timing is asserted)."""

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


def test_mlp_script_writes_train_records_under_the_cli_case_names(tmp_path):
    out = tmp_path / "mlp.json"
    script = SCRIPT.parent / "python_mlp.py"
    env = dict(os.environ, KILN_FASHION_MNIST=str(tmp_path))  # no data set there: random data of its shape
    subprocess.run([sys.executable, str(script), "--smoke", "--cpu-only", "--json", str(out)], check=True, env=env,
                   capture_output=True)
    report = json.loads(out.read_text())
    assert report["tool"] == "kiln-python" and report["smoke"]
    # The case names of tools/kiln/bench_train.cpp, so scripts/compare joins the two runs.
    assert [(r["workload"], r["case"], r["metric"]) for r in report["records"]] == [
        ("train", "cpu_mlp100_sgd", "seconds")]
    record = report["records"][0]
    assert record["value"] > 0 and record["check"] == "ok" and not record["higher_is_better"]
    assert {s["what"] for s in report["skipped"]} == {"train mlp100_sgd_hostbatches", "train mlp100_sgdm_device"}


def test_fft_einsum_script_checks_and_writes_records(tmp_path):
    out = tmp_path / "fft.json"
    script = SCRIPT.parent / "python_fft_einsum.py"
    subprocess.run([sys.executable, str(script), "--smoke", "--json", str(out)], check=True, env=dict(os.environ),
                   capture_output=True)
    report = json.loads(out.read_text())
    cases = {r["case"] for r in report["records"]}
    # The CPU FFT cases of kiln and NumPy at least (GPU cases where a GPU is present), each checked before timing.
    assert {"kiln_cpu_fft1d_2e20", "numpy_cpu_fft1d_2e20", "kiln_cpu_fft2d_1024", "numpy_cpu_fft2d_1024"} <= cases
    for record in report["records"]:
        assert record["workload"] in ("fft", "einsum") and record["metric"] == "ms"
        assert record["value"] > 0 and record["check"] == "ok"


def test_step_driver_runs_the_same_steps_as_a_loop_and_as_train_step():
    # bench/python_mlp_steps.py's two modes make the same steps (bench/mlp_steps.cpp prints the same loss from C++):
    # the loop of python_mlp.py and one TrainStep call a step.
    script = SCRIPT.parent / "python_mlp_steps.py"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = {}
    for mode in ("loop", "trainstep"):
        done = subprocess.run([sys.executable, str(script), mode, "1", "3"], check=True, env=env, capture_output=True,
                              text=True)
        printed_mode, loss = done.stdout.split()
        assert printed_mode == mode
        runs[mode] = float(loss)
    assert 2.0 < runs["loop"] < 2.6  # ln(10) = 2.30 at the start: ten classes of random data
    assert abs(runs["loop"] - runs["trainstep"]) < 1e-4
    wrong = subprocess.run([sys.executable, str(script), "step", "1", "3"], env=env, capture_output=True, text=True)
    assert wrong.returncode == 2 and "Usage" in wrong.stderr
