"""Devices, kiln.random and autograd from Python."""

import math

import numpy as np
import pytest

import kiln
from conftest import requires_gpu


def test_devices():
    assert kiln.cpu() == kiln.Device("cpu") == "cpu"
    assert repr(kiln.cpu()) == "kiln.cpu()" and kiln.cpu().type == "cpu"
    assert kiln.try_gpu() == (kiln.cuda(0) if kiln.num_gpus() > 0 else kiln.cpu())
    assert kiln.device("cpu") == kiln.cpu()
    assert kiln.dtype("f4") == kiln.float32 and kiln.promote_types(kiln.int8, kiln.float16) == kiln.float16


@requires_gpu
def test_to_gpu_and_back():
    ref = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = kiln.asarray(ref).to(kiln.cuda(0))
    assert x.device == kiln.cuda(0) and str(x.device) == "cuda:0"
    np.testing.assert_array_equal(((x * 2).to(kiln.cpu())).numpy(), ref * 2)
    assert "device='cuda:0'" in repr(x)
    # NumPy arrays and lists meeting a GPU array are copied to its device
    y = x + np.ones(3, np.float32)
    assert y.device == kiln.cuda(0)
    np.testing.assert_array_equal(y.numpy(), ref + 1)
    x[0] = [7.0, 8.0, 9.0]
    np.testing.assert_array_equal(x[0].numpy(), [7.0, 8.0, 9.0])
    np.testing.assert_array_equal(x[[1, 0]].numpy(), np.array([ref[1], [7.0, 8.0, 9.0]], np.float32))


def test_random_is_reproducible_and_shaped():
    kiln.random.seed(123)
    a = kiln.random.normal(size=(3, 4))
    kiln.random.seed(123)
    b = kiln.random.normal(size=(3, 4))
    assert a.shape == (3, 4) and a.dtype == kiln.float32
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert kiln.random.normal().shape == ()
    u = kiln.random.uniform(2.0, 3.0, size=1000, dtype=kiln.float64).numpy()
    assert u.min() >= 2.0 and u.max() < 3.0
    r = kiln.random.randint(5, size=100).numpy()
    assert r.dtype == np.int64 and r.min() >= 0 and r.max() < 5
    assert sorted(kiln.random.permutation(6).tolist()) == list(range(6))


def test_random_moments_are_close_to_the_distribution():
    kiln.random.seed(0)
    n = 200_000
    z = kiln.random.normal(1.0, 2.0, size=n, dtype=kiln.float64).numpy()
    # 6 standard errors: a failure means a wrong distribution, not bad luck
    assert abs(z.mean() - 1.0) < 6 * 2.0 / math.sqrt(n)
    assert abs(z.std() - 2.0) < 6 * 2.0 / math.sqrt(2 * n)


def test_state_round_trip():
    kiln.random.seed(5)
    state = kiln.random.get_state()
    a = kiln.random.uniform(size=4)
    kiln.random.set_state(state)
    np.testing.assert_array_equal(kiln.random.uniform(size=4).numpy(), a.numpy())


def test_backward_gives_hand_computed_gradients():
    x = kiln.asarray([1.0, -2.0, 3.0], dtype=kiln.float64)
    x.requires_grad = True
    w = kiln.asarray([0.5, 0.25, 2.0], dtype=kiln.float64).requires_grad_()
    loss = (x * x * w).sum()  # d/dx = 2 x w, d/dw = x^2
    assert loss.requires_grad and not loss.is_leaf and loss.grad_fn is not None
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), [1.0, -1.0, 12.0])
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 4.0, 9.0])
    x.grad = None
    assert x.grad is None


def test_no_grad_records_nothing():
    x = kiln.ones(3).requires_grad_()
    with kiln.no_grad():
        assert not kiln.is_grad_enabled()
        y = x * 2
    assert kiln.is_grad_enabled() and not y.requires_grad
    assert (x * 2).requires_grad

    @kiln.no_grad()
    def double(v):
        return v * 2

    assert not double(x).requires_grad
    assert not x.detach().requires_grad


def test_backward_with_an_explicit_gradient():
    x = kiln.asarray([1.0, 2.0]).requires_grad_()
    y = x * 3.0
    y.backward(kiln.asarray([1.0, 10.0]))
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 30.0])
    with pytest.raises(kiln.DTypeError):
        kiln.arange(3).requires_grad = True
