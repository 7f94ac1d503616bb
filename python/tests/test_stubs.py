"""The type stubs shipped beside the extension (nanobind's stubgen) exist, parse and describe the API."""

import ast
import pathlib

import kiln


def test_stubs_parse_and_name_the_api():
    folder = pathlib.Path(kiln._kiln.__file__).parent
    stub = folder / "_kiln.pyi"
    assert (folder / "py.typed").exists()
    tree = ast.parse(stub.read_text())
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {"Array", "Device", "dtype"} <= classes
    assert {"asarray", "zeros", "add", "sum", "matmul", "from_dlpack"} <= functions
