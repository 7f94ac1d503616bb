"""python -m kiln bench (python/kiln/__main__.py): the arguments it hands the `kiln` tool, its message when there
is no tool, and a quick run of the real tool's timing workload when the build tree has it (no timing asserted)."""

import json
import os
import subprocess
import sys

import pytest

from kiln import __main__ as main


def run_module(args, env_updates, cwd):
    # The child runs in another folder: it finds kiln where this process did (a relative PYTHONPATH would not).
    import kiln

    path = [os.path.dirname(os.path.dirname(os.path.abspath(kiln.__file__)))]
    path += [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, **env_updates, PYTHONPATH=os.pathsep.join(path))
    return subprocess.run([sys.executable, "-m", "kiln", *args], env=env, cwd=cwd, capture_output=True, text=True)


def test_arguments_reach_the_tool(tmp_path):
    seen = tmp_path / "argv.json"
    fake = tmp_path / "kiln"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(seen)!r}, 'w'))\n"
                    "sys.exit(3)\n")
    fake.chmod(0o755)
    run = run_module(["bench", "timing", "matmul", "--quick", "--device", "cpu", "--json", "out.json"],
                     {"KILN_CLI": str(fake)}, tmp_path)
    assert run.returncode == 3, run.stderr  # the tool's exit status is the module's
    assert json.loads(seen.read_text()) == ["bench", "timing", "matmul", "--device", "cpu", "--quick", "--json",
                                            "out.json"]


def test_without_the_tool_it_says_how_to_build_it(tmp_path):
    run = run_module(["bench", "--quick"], {"KILN_CLI": str(tmp_path / "missing")}, tmp_path)
    assert run.returncode == 2
    assert "kiln_cli" in run.stderr and "KILN_CLI" in run.stderr


def test_unknown_command_is_a_usage_error(tmp_path):
    run = run_module(["frobnicate"], {}, tmp_path)
    assert run.returncode == 2 and "usage" in run.stderr


@pytest.mark.skipif(main.find_tool() is None, reason="the kiln tool is not built beside this package")
def test_quick_timing_workload_writes_records(tmp_path):
    out = tmp_path / "bench.json"
    run = run_module(["bench", "timing", "--quick", "--device", "cpu", "--json", str(out)], {}, tmp_path)
    assert run.returncode == 0, run.stderr
    assert "== timing:" in run.stdout and "verdict:" in run.stdout
    report = json.loads(out.read_text())
    assert report["tool"] == "kiln" and report["quick"] is True
    assert {r["case"] for r in report["records"] if r["workload"] == "timing"} >= {"events", "host_clock_sync"}
