"""Runs the Array API test suite (third_party/array-api-tests) against kiln.array_api, bounded for CI.

    PYTHONPATH=build/cpu/python python3 python/tests/array_api/run_suite.py [--max-examples N] [pytest args...]
    PYTHONPATH=build/cuda/python python3 python/tests/array_api/run_suite.py --device cuda:0   # on a GPU

ctest's `python.array_api` runs it. The tests listed in xfails.txt (each group under a `#` line giving its
reason) are expected to fail; any other failure fails the run. Hypothesis is derandomized (the same examples
every run, so CI does not flake on a newly found counterexample); `--random` draws fresh ones, to look for
new failures. `--list-failures FILE` writes the ids of every failing test, xfails included, in xfails.txt's format.
Exits 77 (ctest's skip) when the suite's dependencies (hypothesis, ndindex, pytest-json-report) are missing, and
when --device names a GPU this machine does not have (the cuda preset's ctest asks for cuda:0; the cpu preset's
runs the suite on the CPU).
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = HERE.parents[2] / "third_party" / "array-api-tests"
# The standard's dtypes that kiln lacks: the suite draws no arrays of them.
MISSING_DTYPES = "uint16,uint32,uint64"


class _Failures:
    """A pytest plugin that collects the ids of the tests that failed (xfailed ones included)."""

    def __init__(self):
        self.ids = []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and (report.failed or hasattr(report, "wasxfail") and report.skipped):
            self.ids.append(report.nodeid)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-examples", type=int, default=20, help="hypothesis examples per test (20)")
    parser.add_argument("--random", action="store_true", help="fresh random examples instead of the fixed ones")
    parser.add_argument("--device", default="cpu",
                        help="the device the suite's arrays are made on (kiln's current device): cpu or cuda:0")
    parser.add_argument("--list-failures", metavar="FILE", help="write every failing test id to FILE")
    args, pytest_args = parser.parse_known_args()

    missing = []
    for module in ("pytest", "hypothesis", "ndindex", "pytest_jsonreport"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        print(f"run_suite: missing {', '.join(missing)} (make deps installs them): the Array API suite is skipped")
        return 77

    import pytest

    import kiln

    device = kiln.device(args.device)
    if device != kiln.cpu() and kiln.try_gpu(device.index) != device:
        print(f"run_suite: no GPU {args.device} on this machine: the Array API suite on it is skipped")
        return 77
    # Creation functions without a device allocate on this thread's current device, where pytest runs the suite.
    kiln.set_current_device(device)
    os.environ.setdefault("ARRAY_API_TESTS_MODULE", "kiln.array_api")
    os.environ.setdefault("ARRAY_API_TESTS_SKIP_DTYPES", MISSING_DTYPES)
    # Hypothesis keeps its example database out of the source tree.
    os.environ.setdefault("HYPOTHESIS_STORAGE_DIRECTORY", str(Path(tempfile.gettempdir()) / "kiln-hypothesis"))
    os.chdir(SUITE)  # the suite's conftest.py and pytest.ini
    options = ["-q", "-c", str(SUITE / "pytest.ini"), "--rootdir", str(SUITE), "-p", "no:cacheprovider",
               "--disable-deadline", "--max-examples", str(args.max_examples),
               "--xfails-file", str(HERE / "xfails.txt"), "--skips-file", str(HERE / "skips.txt")]
    if not args.random:
        options.append("--hypothesis-derandomize")
    failures = _Failures()
    code = pytest.main(options + (pytest_args or ["array_api_tests"]), plugins=[failures])
    if args.list_failures:
        Path(args.list_failures).write_text("".join(f"{i}\n" for i in failures.ids), encoding="utf-8")
    return int(code)


if __name__ == "__main__":
    sys.exit(main())
