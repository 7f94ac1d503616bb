"""kiln.fuse of Python functions: results against NumPy's float64 formulas, several outputs, out=, the cache."""

import numpy as np
import pytest

import kiln

X = np.linspace(-2.0, 2.0, 24, dtype=np.float32).reshape(4, 6)


def test_fused_elementwise_chain_matches_the_formula(device):
    f = kiln.fuse(lambda x: kiln.tanh(x * 1.5 + 0.3) * x - kiln.exp(-x * x) * 0.5)
    got = f(kiln.asarray(X, device=device))
    x = X.astype(np.float64)
    assert got.dtype == kiln.float32 and got.shape == X.shape
    np.testing.assert_allclose(got.numpy(), np.tanh(x * 1.5 + 0.3) * x - np.exp(-x * x) * 0.5, rtol=2e-6, atol=1e-6)
    assert f.name == "fused" and f.cache_size == 1


def test_softmax_with_reductions(device):
    def softmax(x):
        e = kiln.exp(x - x.max(axis=-1, keepdims=True))
        return e / kiln.sum(e, axis=-1, keepdims=True)

    got = kiln.fuse(softmax)(kiln.asarray(X, device=device)).numpy()
    x = X.astype(np.float64)
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=-1, keepdims=True), rtol=1e-6)


def test_several_outputs_scalars_and_out():
    sgd = kiln.fuse(lambda p, g, v, lr: (p - lr * (v * 0.9 + g), v * 0.9 + g), "sgd")
    p, g, v = (kiln.asarray(np.array(a, np.float32)) for a in ([1.0, 2.0], [0.5, -1.0], [0.1, 0.2]))
    new_p, new_v = sgd(p, g, v, 0.1)
    np.testing.assert_allclose(new_v.numpy(), [0.59, -0.82], rtol=1e-6)
    np.testing.assert_allclose(new_p.numpy(), [1.0 - 0.059, 2.0 + 0.082], rtol=1e-6)
    before = p.data_ptr
    sgd(p, g, v, 0.1, out=(p, v))  # in place: p and v are updated
    assert p.data_ptr == before
    np.testing.assert_allclose(p.numpy(), new_p.numpy(), rtol=0)
    np.testing.assert_allclose(v.numpy(), new_v.numpy(), rtol=0)
    assert sgd.name == "sgd"


def test_a_new_signature_is_traced_again():
    f = kiln.fuse(lambda a, b: a * b + 1)
    f(kiln.ones(3), kiln.ones(3))
    f(kiln.ones(5), kiln.ones(5))  # same dtypes and ranks: same trace
    assert f.cache_size == 1
    out = f(kiln.ones(3, dtype=kiln.float64), 2.0)
    assert f.cache_size == 2 and out.dtype == kiln.float64 and out.tolist() == [3.0, 3.0, 3.0]


def test_captured_arrays_and_bad_results_are_refused():
    y = kiln.ones(3)
    with pytest.raises(ValueError):
        kiln.fuse(lambda x: x + y)(kiln.ones(3))
    with pytest.raises(TypeError):
        kiln.fuse(lambda x: 3)(kiln.ones(3))


def test_a_module_level_fused_function_is_freed_at_exit():
    # The lambda's globals hold the Fused that holds the lambda: a cycle only the garbage collector can free, so
    # Fused must let it see the function (nanobind reports leaked instances, types and functions at exit).
    import os
    import subprocess
    import sys
    program = (
        "import kiln\n"
        "f = kiln.fuse(lambda a, b: a * b + 1)\n"
        "y = f(kiln.asarray([1.0, 2.0]), kiln.asarray([3.0, 4.0]))\n"
        "class M(kiln.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.l = kiln.nn.Linear(2, 2)\n"
        "    def forward(self, x):\n"
        "        return self.l(x)\n"
        "m = M()\n"
        "m(kiln.asarray([[1.0, 2.0]])).sum().backward()\n"
        "print(y.tolist())\n")
    done = subprocess.run([sys.executable, "-c", program], env=dict(os.environ), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[4.0, 9.0]"
    assert "leaked" not in done.stderr, done.stderr
