"""The type stubs shipped beside the extension (nanobind's stubgen, a stub package _kiln/ with one file per
submodule) exist, parse and describe the API."""

import ast
import pathlib

import kiln


def names(stub):
    tree = ast.parse(stub.read_text())
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    return classes, functions


def test_stubs_parse_and_name_the_api():
    folder = pathlib.Path(kiln._kiln.__file__).parent
    assert (folder / "py.typed").exists()
    classes, functions = names(folder / "_kiln" / "__init__.pyi")
    assert {"Array", "Device", "dtype"} <= classes
    assert {"asarray", "zeros", "add", "sum", "matmul", "from_dlpack", "kron"} <= functions


def test_submodule_stubs_name_their_functions():
    folder = pathlib.Path(kiln._kiln.__file__).parent / "_kiln"
    classes, functions = names(folder / "linalg.pyi")
    assert {"SlogdetResult", "QRResult", "SVDResult", "EighResult", "LstsqResult"} <= classes
    assert {"solve", "inv", "det", "slogdet", "qr", "svd", "eigh", "norm", "lstsq", "cross"} <= functions
    classes, functions = names(folder / "models.pyi")
    assert {"GPT2", "GPT2Config", "Llama", "LlamaConfig", "CausalLM", "ResNet"} <= classes
    assert {"generate", "generate_batch", "load_gpt2", "load_llama", "resnet18"} <= functions
    classes, functions = names(folder / "nn.pyi")
    assert "Module" in classes and {"load_safetensors", "save_safetensors", "cross_entropy"} <= functions
