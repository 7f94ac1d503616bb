"""kiln.nn modules and losses, Python subclasses of kiln.nn.Module, and kiln.optim, against NumPy formulas."""

import numpy as np
import pytest

import kiln
from kiln import nn, optim


def test_linear_computes_x_w_transpose_plus_b():
    layer = nn.Linear(4, 3, dtype=kiln.float64)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (3, 4) and b.shape == (3,) and np.all(np.abs(w) <= 0.5)  # uniform(+-1/sqrt(4))
    x = np.linspace(-1, 1, 8).reshape(2, 4)
    np.testing.assert_allclose(layer(kiln.asarray(x)).numpy(), x @ w.T + b, rtol=1e-12)
    assert [name for name, _ in layer.named_parameters()] == ["weight", "bias"]
    assert layer.num_parameters() == 15
    assert "Linear" in repr(layer)


def test_sequential_chains_modules():
    model = nn.Sequential(nn.Linear(3, 5, dtype=kiln.float64), nn.ReLU(), nn.Linear(5, 2, dtype=kiln.float64))
    state = model.state_dict()
    assert list(state) == ["0.weight", "0.bias", "2.weight", "2.bias"] and len(model) == 3
    x = np.array([[0.5, -1.0, 2.0]])
    h = np.maximum(x @ state["0.weight"].numpy().T + state["0.bias"].numpy(), 0)
    want = h @ state["2.weight"].numpy().T + state["2.bias"].numpy()
    np.testing.assert_allclose(model(kiln.asarray(x)).numpy(), want, rtol=1e-12)


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(2, 8, dtype=kiln.float64)
        self.fc2 = nn.Linear(8, 1, dtype=kiln.float64)
        self.scale = kiln.ones(1, dtype=kiln.float64)
        self.note = "plain attribute"

    def forward(self, x):
        return self.fc2(kiln.tanh(self.fc1(x))) * self.scale


def test_python_subclass_registers_children_and_parameters():
    model = TwoLayer()
    names = [name for name, _ in model.named_parameters()]
    assert names == ["scale", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    assert model.note == "plain attribute" and isinstance(model.fc1, nn.Linear)
    assert model(kiln.zeros((5, 2), dtype=kiln.float64)).shape == (5, 1)
    assert "TwoLayer" in repr(model)


def test_sgd_step_is_param_minus_lr_times_grad():
    layer = nn.Linear(3, 2, dtype=kiln.float64)
    x, y = kiln.asarray(np.array([[1.0, 2.0, -1.0]])), kiln.asarray(np.array([[0.5, -0.5]]))
    opt = optim.SGD(layer.parameters(), lr=0.1)
    w0 = layer.weight.numpy().copy()
    nn.mse_loss(layer(x), y).backward()
    g = layer.weight.grad.numpy().copy()
    residual = (x.numpy() @ w0.T + layer.bias.numpy()) - y.numpy()
    np.testing.assert_allclose(g, 2 * residual.T @ x.numpy() / 2, rtol=1e-12)  # mean over 2 outputs
    opt.step()
    np.testing.assert_allclose(layer.weight.numpy(), w0 - 0.1 * g, rtol=1e-12)
    opt.zero_grad()
    assert layer.weight.grad is None


def test_adam_first_step_moves_each_parameter_by_lr():
    p = kiln.asarray(np.array([1.0, -2.0, 3.0])).requires_grad_()
    opt = optim.Adam([p], lr=0.01)
    (p * kiln.asarray([2.0, -3.0, 0.5], dtype=kiln.float64)).sum().backward()
    opt.step()
    g = np.array([2.0, -3.0, 0.5])
    # step 1: m_hat = g, v_hat = g^2, so the update is lr * g / (|g| + eps)
    np.testing.assert_allclose(p.numpy(), np.array([1.0, -2.0, 3.0]) - 0.01 * g / (np.abs(g) + 1e-8), rtol=1e-12)


def test_training_a_python_model_lowers_the_loss():
    kiln.random.seed(0)
    model = TwoLayer()
    x_np = np.random.default_rng(0).uniform(-1, 1, (64, 2))
    y_np = (x_np[:, :1] * x_np[:, 1:]) * 2.0
    x, y = kiln.asarray(x_np), kiln.asarray(y_np)
    opt = optim.Adam(model.parameters(), lr=0.02)
    losses = []
    for _ in range(150):
        opt.zero_grad()
        loss = nn.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.2 * losses[0]


def test_losses_match_numpy():
    logits = np.array([[2.0, 0.5, -1.0], [0.1, 0.2, 3.0]])
    labels = np.array([0, 2])
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    want = -log_p[np.arange(2), labels].mean()
    got = nn.cross_entropy(kiln.asarray(logits), kiln.asarray(labels))
    np.testing.assert_allclose(got.item(), want, rtol=1e-12)
    np.testing.assert_allclose(nn.log_softmax(kiln.asarray(logits)).numpy(), log_p, rtol=1e-12)
    np.testing.assert_allclose(nn.softmax(kiln.asarray(logits), 1).numpy(), np.exp(log_p), rtol=1e-12)
    np.testing.assert_allclose(nn.cross_entropy(kiln.asarray(logits), labels, reduction="none").numpy(),
                               -log_p[np.arange(2), labels], rtol=1e-12)
    assert nn.accuracy(kiln.asarray(logits), labels).item() == 1.0
    with pytest.raises(ValueError):
        nn.cross_entropy(kiln.asarray(logits), labels, reduction="avg")


def test_eval_mode_turns_dropout_off():
    drop = nn.Dropout(0.5)
    x = kiln.ones(100)
    assert drop.training
    drop.eval()
    assert not drop.training
    np.testing.assert_array_equal(drop(x).numpy(), np.ones(100, np.float32))


def test_module_to_dtype_and_load_state_dict():
    layer = nn.Linear(2, 2)
    layer.to(kiln.float64)
    assert layer.weight.dtype == kiln.float64
    other = nn.Linear(2, 2, dtype=kiln.float64)
    other.load_state_dict(layer.state_dict())
    np.testing.assert_array_equal(other.weight.numpy(), layer.weight.numpy())
