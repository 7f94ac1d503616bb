"""Python modules held by C++ containers (Sequential, ModuleList, ModuleDict, a Python module's children): the garbage
collector sees those references, so cycles through them are freed (no nanobind "leaked" report at exit) and
reachable modules keep their state."""

import gc
import os
import pathlib
import subprocess
import sys
import textwrap
import weakref

import pytest

import kiln

PACKAGE_ROOT = pathlib.Path(kiln.__file__).resolve().parents[1]

PRELUDE = """
import kiln

class Double(kiln.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x):
        return x * self.scale

x = kiln.ones((2, 3))
"""

# Each holds a Python module in a C++ container at module level: the class's methods reach the module's globals,
# which reach the container, a cycle through C++ (and a leak report at exit without the collector's view of it).
SCRIPTS = {
    "sequential": "model = kiln.nn.Sequential(kiln.nn.Linear(3, 3), Double())\nmodel(x)",
    "module_list": "model = kiln.nn.ModuleList([Double(), kiln.nn.Linear(3, 3)])\nmodel[0](x)",
    "module_dict": "model = kiln.nn.ModuleDict({'double': Double()})\nmodel['double'](x)",
    "nested_python_modules": textwrap.dedent("""
        class Net(kiln.nn.Module):
            def __init__(self):
                super().__init__()
                self.body = kiln.nn.Sequential(kiln.nn.Linear(3, 3), Double())
                self.head = Double()

            def forward(self, x):
                return self.head(self.body(x))

        model = Net()
        model(x)"""),
    "child_of_a_cpp_layer": "layer = kiln.nn.Linear(3, 3)\nlayer.helper = Double()\nlayer(x)",
    "modules_holding_each_other": "d = Double()\nseq = kiln.nn.Sequential(d)\nd.parent = seq\nseq(x)",
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_no_leak_reported_at_exit(name, tmp_path):
    script = tmp_path / "script.py"
    script.write_text(PRELUDE + SCRIPTS[name] + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert [line for line in run.stderr.splitlines() if "leaked" in line] == [], run.stderr


class Scale(kiln.nn.Module):
    def __init__(self, factor):
        super().__init__()
        self.factor = factor

    def forward(self, x):
        return x * self.factor


def test_a_reachable_container_keeps_its_python_modules_through_a_collection():
    def make():
        return kiln.nn.Sequential(Scale(2.0), Scale(3.0))

    model = make()
    gc.collect()
    assert model(kiln.ones(2)).tolist() == [6.0, 6.0]  # the children's __dict__ (factor) survived


def test_an_unreachable_cycle_of_modules_is_freed():
    inner = Scale(2.0)
    outer = kiln.nn.Sequential(inner)
    inner.parent = outer  # registered as a child of inner: inner -> outer -> inner, through C++ only
    alive = weakref.ref(inner)
    del inner, outer
    gc.collect()
    freed = alive() is None  # not `assert alive() is None`: a failure would print the cycle's repr, which recurses
    assert freed


def test_a_module_shared_by_two_containers_is_reported_by_neither():
    # its one reference has two C++ holders: reporting it from both would count it twice
    shared = Scale(2.0)
    first, second = kiln.nn.Sequential(shared), kiln.nn.ModuleList([shared])
    assert not any(r is shared for r in gc.get_referents(first) + gc.get_referents(second))
    alone = Scale(3.0)
    assert any(r is alone for r in gc.get_referents(kiln.nn.Sequential(alone)))
