"""python -m kiln bench [workloads] [--device D] [--quick] [--json FILE]: runs `kiln bench`, the benchmark
command of the `kiln` command-line tool (tools/kiln), so the workloads, tables, verdicts and JSON records are the
C++ tool's own (timing from Python would add the interpreter's per-call cost to every number).

The tool is looked for in $KILN_CLI, then in the build tree this package was built in (build/<preset>/tools/kiln/
kiln beside build/<preset>/python/kiln), then on PATH. A `pip install` of kiln ships no tool: build it with
`cmake --build --preset cpu --target kiln_cli` (or cuda) and point KILN_CLI at build/<preset>/tools/kiln/kiln.
"""

import argparse
import os
import pathlib
import shutil
import subprocess
import sys

HOW_TO_GET_IT = (
    "the `kiln` command-line tool was not found (looked in $KILN_CLI, {build} and PATH); build it with "
    "`cmake --build --preset cpu --target kiln_cli` (or --preset cuda) and set KILN_CLI=build/<preset>/tools/kiln/kiln"
)


def _build_tree_tool():
    # The package of a build tree lives in build/<preset>/python/kiln; the tool in build/<preset>/tools/kiln.
    return pathlib.Path(__file__).resolve().parent.parent.parent / "tools" / "kiln" / "kiln"


def find_tool():
    """The path of the `kiln` executable, or None."""
    explicit = os.environ.get("KILN_CLI")
    if explicit:
        return explicit if os.access(explicit, os.X_OK) else None
    built = _build_tree_tool()
    if built.is_file() and os.access(built, os.X_OK):
        return str(built)
    return shutil.which("kiln")


def _parser():
    parser = argparse.ArgumentParser(prog="python -m kiln", description="kiln's command-line tool from Python.")
    commands = parser.add_subparsers(dest="command", required=True)
    bench = commands.add_parser("bench", help="benchmark workloads, each with a table and a verdict (kiln bench)")
    bench.add_argument("workloads", nargs="*", help="workload names (default: all; `kiln bench --help` lists them)")
    bench.add_argument("--device", help="cpu or cuda:N (default: the best device present)")
    bench.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats")
    bench.add_argument("--json", metavar="FILE", help="write the records to this file")
    return parser


def bench_command(args):
    """The `kiln bench` command line for the parsed arguments (without the executable)."""
    command = ["bench", *args.workloads]
    if args.device:
        command += ["--device", args.device]
    if args.quick:
        command.append("--quick")
    if args.json:
        command += ["--json", args.json]
    return command


def main(argv=None):
    args = _parser().parse_args(argv)
    tool = find_tool()
    if tool is None:
        print("python -m kiln: " + HOW_TO_GET_IT.format(build=_build_tree_tool()), file=sys.stderr)
        return 2
    return subprocess.run([tool, *bench_command(args)]).returncode


if __name__ == "__main__":
    sys.exit(main())
