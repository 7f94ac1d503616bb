"""The Python walkthroughs (examples/python/): each runs here (on the CPU without a GPU) and its results are
checked against NumPy's float64 or hand-computed values."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import kiln

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "python"
HAVE_GPU = kiln.num_gpus() > 0


def load(name):
    spec = importlib.util.spec_from_file_location(f"kiln_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_devices(capsys):
    r = load("devices").main()
    assert r["num_gpus"] == kiln.num_gpus() and r["try_gpu"] == (kiln.cuda(0) if HAVE_GPU else kiln.cpu())
    assert "does not exist" in r["cuda_n_error"]
    np.testing.assert_allclose(r["sum"], r["y"] + 1.0, rtol=1e-7)
    assert (r["mixed_error"] is not None) == HAVE_GPU
    assert "try_all_gpus()" in capsys.readouterr().out


def test_matmul_cpu_vs_gpu_checks_against_float64(capsys):
    r = load("matmul_cpu_vs_gpu").main(n_cpu=96, n_gpu=256, repeat=3)
    assert r["cpu_error"] < 1e-5 and r["cpu_seconds"] > 0
    assert ("gpu_error" in r) == HAVE_GPU and r.get("gpu_error", 0.0) < 1e-5
    assert ("no GPU: skipping" in capsys.readouterr().out) != HAVE_GPU


def test_nn_on_gpu_gradient_by_hand():
    r = load("nn_on_gpu").main()
    d = kiln.try_gpu()
    assert r["device"] == d and all(p == d for p in r["param_devices"])
    assert r["out"].tolist() == [[1.75], [1.75]] and r["loss"] == pytest.approx(1.75**2)
    np.testing.assert_allclose(r["grad"], [[3.5, 3.5, 3.5]], rtol=1e-6)  # 2 * 1.75 * x, x all ones
    np.testing.assert_allclose(r["weight"], [[0.5 - 0.35, -1.0 - 0.35, 2.0 - 0.35]], rtol=1e-6)


def test_plus_one_kernels():
    r = load("plus_one").main()
    assert r["gpu"] == HAVE_GPU
    np.testing.assert_allclose(r["raw"], r["want"], rtol=1e-7)
    np.testing.assert_allclose(r["elementwise"], r["want"], rtol=1e-7)
    np.testing.assert_allclose(r["norms"], r["want_norms"], rtol=1e-5)


def test_add_two_array_2d():
    r = load("add_two_array_2d").main(nx=37, ny=21)  # not a multiple of the 16x16 blocks
    assert r["gpu"] == HAVE_GPU and r["res"].shape == (21, 37)
    np.testing.assert_array_equal(r["res"], r["want"].astype(np.float32))


def test_pinned_streams_pipeline_matches_numpy():
    r = load("pinned_streams").main(chunks=4, n=4096)
    assert r["wrong"] == {"one stream": 0, "two streams": 0} and r["pinned"] == HAVE_GPU


def test_generic_code_runs_on_numpy_and_kiln():
    r = load("generic_code").main()
    assert set(r["results"]) >= {"numpy", "cpu"}
    for sp, lse in r["results"].values():
        np.testing.assert_allclose(sp, r["want_softplus"], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(lse, r["want_lse"], rtol=1e-6)
    assert kiln.get_array_module(np.ones(2)) is np and kiln.get_array_module(1, kiln.ones(2)) is kiln


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz")
                    and "KILN_FASHION_MNIST" not in os.environ, reason="no Fashion-MNIST (dataset-fashion-mnist)")
def test_mnist_mlp_learns():
    history = load("mnist_mlp").main(epochs=2, train_images=3000)
    assert history[1]["train_loss"] < history[0]["train_loss"] < 2.3  # below chance's log(10) and falling
    assert history[1]["test_accuracy"] > 0.5


def test_a_walkthrough_runs_as_a_script():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(EXAMPLES / "add_two_array_2d.py")], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "add_two_array_2d" in done.stdout


def test_resnet_timing_walkthrough_agrees_on_the_cpu(capsys):
    r = load("resnet50_timing").main(batch=1, model="resnet18", size=32, cpu_repeat=1, gpu_repeat=2)
    assert r["cpu"]["logits"].shape == (1, 1000)
    assert r["cpu"]["first"] > 0 and r["cpu"]["with_sync"] > 0
    if HAVE_GPU:  # the same weights (seed 0) on both devices
        np.testing.assert_allclose(r["cuda:0"]["logits"].numpy(), r["cpu"]["logits"].numpy(), rtol=2e-3, atol=2e-3)
    assert "host clock + synchronize" in capsys.readouterr().out
