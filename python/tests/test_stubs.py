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
    assert {"real", "imag", "conj", "angle", "make_complex"} <= functions


def test_submodule_stubs_name_their_functions():
    folder = pathlib.Path(kiln._kiln.__file__).parent / "_kiln"
    classes, functions = names(folder / "linalg.pyi")
    assert {"SlogdetResult", "QRResult", "SVDResult", "EigResult", "EighResult", "LstsqResult"} <= classes
    assert {"solve", "inv", "det", "slogdet", "qr", "svd", "eigh", "norm", "lstsq", "cross"} <= functions
    _, functions = names(folder / "fft.pyi")
    assert {"fft", "ifft", "rfft", "irfft", "hfft", "ihfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn",
            "rfftn", "irfftn", "fftfreq", "rfftfreq", "fftshift", "ifftshift"} <= functions
    classes, functions = names(folder / "models.pyi")
    assert {"GPT2", "GPT2Config", "Llama", "LlamaConfig", "CausalLM", "ResNet"} <= classes
    assert {"generate", "generate_batch", "load_gpt2", "load_llama", "resnet18"} <= functions
    classes, functions = names(folder / "nn" / "__init__.pyi")
    assert "Module" in classes and {"load_safetensors", "save_safetensors", "cross_entropy"} <= functions
    _, functions = names(folder / "nn" / "init.pyi")  # torch's in-place names end in "_", which stubgen calls private
    assert {"uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "xavier_uniform_", "xavier_normal_",
            "kaiming_uniform_", "kaiming_normal_", "calculate_gain"} <= functions


def test_layer_training_and_memory_stubs_name_their_api():
    folder = pathlib.Path(kiln._kiln.__file__).parent / "_kiln"
    classes, functions = names(folder / "nn" / "__init__.pyi")
    assert {"Conv2d", "BatchNorm2d", "MaxPool2d", "MultiheadAttention", "TransformerEncoder", "LSTM", "GRU",
            "ModuleList", "ModuleDict", "RMSNorm"} <= classes
    assert {"conv2d", "scaled_dot_product_attention", "batch_norm"} <= functions
    classes, functions = names(folder / "optim.pyi")
    assert {"StepLR", "CosineAnnealingLR", "LinearWarmupLR", "GradScaler", "LRScheduler"} <= classes
    classes, functions = names(folder / "train.pyi")
    assert {"TrainStep", "EpochMetrics"} <= classes
    assert {"fit", "evaluate", "save_checkpoint", "load_checkpoint"} <= functions
    classes, functions = names(folder / "data.pyi")
    assert {"DataLoader", "WorkerInfo"} <= classes and "get_worker_info" in functions
    _, functions = names(folder / "__init__.pyi")
    assert {"memory_allocated", "memory_reserved", "empty_cache", "set_memory_limit"} <= functions
