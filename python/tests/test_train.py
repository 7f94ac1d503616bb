"""kiln.optim's schedules, GradScaler and state dicts, and kiln.train (python/src/train.cpp), against hand-computed
values and NumPy float64 computations of the same steps."""

import math

import numpy as np
import pytest

import kiln

F64 = kiln.float64


def test_step_cosine_and_linear_schedules_follow_their_formulas():
    opt = kiln.optim.SGD(kiln.nn.Linear(1, 1).parameters(), lr=1.0)
    step = kiln.optim.StepLR(opt, step_size=2, gamma=0.5)
    seen = []
    for _ in range(5):
        step.step()
        seen.append(opt.lr)
    assert seen == [1.0, 0.5, 0.5, 0.25, 0.25] and step.last_epoch == 5 and step.get_last_lr() == [0.25]
    assert step.base_lrs == [1.0]

    opt.lr = 0.2
    cosine = kiln.optim.CosineAnnealingLR(opt, T_max=4, eta_min=0.1)
    for k in range(1, 7):
        cosine.step()
        assert opt.lr == pytest.approx(0.1 + 0.1 * (1 + math.cos(math.pi * min(k, 4) / 4)) / 2, abs=1e-15)

    opt.lr = 0.3
    warm = kiln.optim.LinearLR(opt, start_factor=0.5, total_iters=4)  # sets the first lr at once, as PyTorch's
    assert opt.lr == pytest.approx(0.15)
    for k in range(1, 6):
        warm.step()
        assert opt.lr == pytest.approx(0.3 * (0.5 + 0.5 * min(k, 4) / 4))
    with pytest.raises(ValueError, match="end_factor"):
        kiln.optim.LinearLR(opt, end_factor=0.5)
    assert isinstance(kiln.optim.LinearWarmupLR(opt, 3), kiln.optim.LRScheduler)


def test_lambda_lr_scales_the_base_lr_by_a_python_function_also_inside_fit():
    model = kiln.nn.Linear(2, 1, dtype=F64)
    opt = kiln.optim.SGD(model.parameters(), lr=0.5)
    sched = kiln.optim.LambdaLR(opt, lambda count: 1.0 / (count + 1))
    assert opt.lr == 0.5  # the factor of count 0, set at once as PyTorch's
    sched.step()
    assert opt.lr == 0.25
    x, y = regression_data(8)
    kiln.train.fit(model, opt, kiln.data.DataLoader(x, y, batch_size=2), progress=False, loss=kiln.nn.mse_loss,
                   accuracy=False, scheduler=sched)  # four steps, with the GIL released
    assert sched.last_epoch == 5 and opt.lr == pytest.approx(0.5 / 6)
    with pytest.raises(TypeError, match="callable"):
        kiln.optim.LambdaLR(opt, 0.5)


def test_a_schedule_resumes_from_its_state_dict():
    opt = kiln.optim.SGD(kiln.nn.Linear(1, 1).parameters(), lr=0.8)
    sched = kiln.optim.StepLR(opt, 3, gamma=0.1)
    for _ in range(4):
        sched.step()
    state = sched.state_dict()
    assert int(state["count"]) == 4 and float(state["base_lr"]) == 0.8
    other = kiln.optim.SGD(kiln.nn.Linear(1, 1).parameters(), lr=5.0)
    resumed = kiln.optim.StepLR(other, 3, gamma=0.1)
    resumed.load_state_dict(state)
    assert other.lr == pytest.approx(0.08) and resumed.last_epoch == 4
    resumed.step(), resumed.step()
    assert other.lr == pytest.approx(0.008)
    with pytest.raises(ValueError):
        resumed.load_state_dict({"count": kiln.asarray(1)})


def test_optimizer_state_dict_round_trips_momentum():
    def make():
        model = kiln.nn.Linear(2, 1, bias=False, dtype=F64)
        model.load_state_dict({"weight": np.array([[1.0, -1.0]])})
        return model, kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    model, opt = make()
    x = kiln.asarray(np.array([[1.0, 2.0]]))
    for _ in range(2):
        opt.zero_grad()
        kiln.sum(model(x)).backward()  # the gradient is x: [1, 2]
        opt.step()
    state = opt.state_dict()
    np.testing.assert_allclose(np.asarray(state["momentum_buffer.0"]), [[1.9, 3.8]])  # 1, then 0.9 * 1 + 1
    assert bytes(np.asarray(state["optimizer"])) == b"SGD"
    model2, opt2 = make()
    model2.load_state_dict(model.state_dict())
    opt2.load_state_dict(state)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        kiln.sum(m(x)).backward()
        o.step()
    w = np.array([1.0, -1.0]) - 0.1 * (np.array([1, 2]) + np.array([1.9, 3.8]) + np.array([2.71, 5.42]))
    np.testing.assert_allclose(np.asarray(model.weight)[0], w)
    np.testing.assert_array_equal(np.asarray(model2.weight), np.asarray(model.weight))
    with pytest.raises(ValueError, match="Adam"):
        kiln.optim.Adam(model.parameters()).load_state_dict(state)


def test_grad_scaler_scales_unscales_skips_and_grows():
    model = kiln.nn.Linear(1, 1, bias=False)
    model.load_state_dict({"weight": np.array([[2.0]], np.float32)})
    opt = kiln.optim.SGD(model.parameters(), lr=0.5)
    scaler = kiln.optim.GradScaler(init_scale=4.0, growth_interval=2)
    x = kiln.asarray([[3.0]])
    loss = kiln.sum(model(x))
    assert float(scaler.scale(loss)) == 4.0 * 6.0
    scaler.scale(loss).backward()
    assert scaler.step(opt) and not scaler.found_inf
    assert model.weight.tolist() == [[2.0 - 0.5 * 3.0]]  # the unscaled gradient, 3
    scaler.update()
    opt.zero_grad()
    scaler.scale(kiln.sum(model(x))).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 8.0  # two steps without overflow
    opt.zero_grad()
    scaler.scale(kiln.sum(model(kiln.asarray([[3e38]])))).backward()  # 8 * 3e38 overflows float32
    before = model.weight.tolist()
    assert not scaler.step(opt) and scaler.found_inf and scaler.skipped_steps == 1
    assert model.weight.tolist() == before
    scaler.update()
    assert scaler.get_scale() == 4.0
    assert float(scaler.state_dict()["scale"]) == 4.0
    fresh = kiln.optim.GradScaler()
    fresh.load_state_dict(scaler.state_dict())
    assert fresh.get_scale() == 4.0


def regression_data(n=16):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 2))
    y = x @ np.array([[1.5], [-0.5]]) + 0.25
    return x, y


def test_train_step_with_a_python_loss_matches_a_numpy_sgd_step():
    x, y = regression_data(8)
    model = kiln.nn.Linear(2, 1, dtype=F64)
    w, b = np.asarray(model.weight).copy(), np.asarray(model.bias).copy()
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)
    calls = []

    def loss(output, target):
        calls.append(output.shape)
        return kiln.nn.mse_loss(output, target)

    step = kiln.train.TrainStep(model, opt, loss=loss, accuracy=False)
    step(x, y)
    pred = x @ w.T + b
    np.testing.assert_allclose(step.mean_loss(), np.mean((pred - y) ** 2), rtol=1e-12)
    grad = 2 * (pred - y) / len(x)
    np.testing.assert_allclose(np.asarray(model.weight), w - 0.1 * grad.T @ x, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(model.bias), b - 0.1 * grad.sum(axis=0), rtol=1e-12)
    assert calls == [(8, 1)] and step.steps == 1 and step.samples == 8 and step.accuracy() == -1
    step.reset_metrics()
    assert step.samples == 0


def test_train_step_steps_a_scheduler_and_skips_non_finite_losses():
    model = kiln.nn.Linear(2, 1, dtype=F64)
    opt = kiln.optim.SGD(model.parameters(), lr=1.0)
    sched = kiln.optim.StepLR(opt, 1, gamma=0.5)
    step = kiln.train.TrainStep(model, opt, loss=kiln.nn.mse_loss, accuracy=False, scheduler=sched,
                                on_non_finite_loss="skip")
    x, y = regression_data(4)
    step(x, y)
    step(x, y)
    assert opt.lr == 0.25
    before = np.asarray(model.weight).copy()
    step(x, np.full((4, 1), np.nan))
    assert step.non_finite_skipped == 1 and opt.lr == 0.25
    np.testing.assert_array_equal(np.asarray(model.weight), before)
    with pytest.raises(ValueError, match="on_non_finite_loss"):
        kiln.train.TrainStep(model, opt, on_non_finite_loss="ignore")


def cross_entropy_ref(logits, labels):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    return -log_probs[np.arange(len(labels)), labels].mean()


def test_fit_reports_the_epochs_metrics_and_stops_when_a_callback_says_so():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((24, 3))
    labels = rng.integers(0, 4, 24)
    model = kiln.nn.Linear(3, 4, dtype=F64)
    w, b = np.asarray(model.weight).copy(), np.asarray(model.bias).copy()
    opt = kiln.optim.SGD(model.parameters(), lr=0.0)  # the model stays put: its loss is known beforehand
    train = kiln.data.DataLoader(x, labels, batch_size=8)
    test = kiln.data.DataLoader(x[:16], labels[:16], batch_size=16)
    seen = []
    history = kiln.train.fit(model, opt, train, test, epochs=3, progress=False,
                             on_epoch_end=lambda m: seen.append(m.epoch) or m.epoch < 2)
    assert seen == [1, 2] and [m.epoch for m in history] == [1, 2]
    logits = x @ w.T + b
    m = history[0]
    assert m.train_loss == pytest.approx(cross_entropy_ref(logits, labels), rel=1e-9)
    assert m.train_accuracy == pytest.approx(np.mean(logits.argmax(axis=1) == labels))
    assert m.test_loss == pytest.approx(cross_entropy_ref(logits[:16], labels[:16]), rel=1e-9)
    assert m.lr == 0.0 and '"epoch": 1' in m.json()
    loss, accuracy = kiln.train.evaluate(model, test)
    assert loss == pytest.approx(cross_entropy_ref(logits[:16], labels[:16]), rel=1e-9)
    assert accuracy == pytest.approx(np.mean(logits[:16].argmax(axis=1) == labels[:16]))


def test_fit_with_a_python_loss_scheduler_and_log(tmp_path):
    x, y = regression_data(16)
    model = kiln.nn.Linear(2, 1, dtype=F64)
    opt = kiln.optim.SGD(model.parameters(), lr=0.1)
    sched = kiln.optim.StepLR(opt, 1, gamma=0.5)
    log = tmp_path / "train.jsonl"
    history = kiln.train.fit(model, opt, kiln.data.DataLoader(x, y, batch_size=4), epochs=2, progress=False,
                             loss=lambda out, target: kiln.nn.mse_loss(out, target), accuracy=False,
                             scheduler=sched, scheduler_per_epoch=True, log_path=str(log))
    assert opt.lr == pytest.approx(0.025) and sched.last_epoch == 2
    assert history[0].train_accuracy == -1 and history[0].test_loss == -1
    assert history[1].train_loss < history[0].train_loss
    assert len(log.read_text().splitlines()) == 2


def test_fit_trains_a_python_module_on_a_python_dataset_with_workers():
    class Data:
        def __init__(self):
            self.x, self.y = regression_data(32)

        def __len__(self):
            return 32

        def __getitem__(self, i):
            return self.x[i], self.y[i]

    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = kiln.nn.Linear(2, 1, dtype=F64)

        def forward(self, x):
            return self.fc(x)

    net = Net()
    opt = kiln.optim.SGD(net.parameters(), lr=0.1)
    loader = kiln.data.DataLoader(Data(), batch_size=4, shuffle=True, workers=2)
    history = kiln.train.fit(net, opt, loader, epochs=8, progress=False, loss=kiln.nn.mse_loss, accuracy=False)
    assert history[-1].train_loss < 0.1 * history[0].train_loss
    np.testing.assert_allclose(np.asarray(net.fc.weight), [[1.5, -0.5]], atol=0.1)


def test_checkpoint_restores_model_optimizer_schedule_and_position(tmp_path):
    x, y = regression_data(20)
    model = kiln.nn.Linear(2, 1, dtype=F64)
    opt = kiln.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = kiln.optim.StepLR(opt, 1, gamma=0.5)
    loader = kiln.data.DataLoader(x, y, batch_size=4)
    step = kiln.train.TrainStep(model, opt, loss=kiln.nn.mse_loss, accuracy=False, scheduler=sched)
    for xb, yb in loader:
        step(xb, yb)
    path = str(tmp_path / "run.safetensors")
    saved = {k: np.asarray(v).copy() for k, v in model.state_dict().items()}
    momentum = np.asarray(opt.state_dict()["momentum_buffer.0"]).copy()
    kiln.train.save_checkpoint(path, model, opt, scheduler=sched, loader=loader, epoch=1, batch=3, step=5)
    for xb, yb in loader:  # the run goes on, then is restored
        step(xb, yb)
    position = kiln.train.load_checkpoint(path, model, opt, scheduler=sched, loader=loader)
    assert position == {"epoch": 1, "batch": 3, "step": 5}
    for name, value in model.state_dict().items():
        np.testing.assert_array_equal(np.asarray(value), saved[name])
    np.testing.assert_array_equal(np.asarray(opt.state_dict()["momentum_buffer.0"]), momentum)
    assert sched.last_epoch == 5 and opt.lr == pytest.approx(0.1 * 0.5 ** 5)
    assert len(list(loader)) == 2  # the restored epoch goes on at its batch 3 of 5
    with pytest.raises(ValueError, match="scheduler"):
        kiln.train.load_checkpoint(path, model, opt)
    assert kiln.nn.load_safetensors(path)["position"].tolist() == [1, 3, 5]


@pytest.mark.skipif(kiln.num_gpus() == 0, reason="no CUDA GPU in this build or on this machine")
def test_a_graphed_train_step_with_a_python_loss_matches_eager_steps_on_the_cpu():
    x, y = regression_data(8)
    runs = {}
    for device, graph in ((kiln.cpu(), False), (kiln.cuda(0), True)):
        model = kiln.nn.Linear(2, 1)
        model.load_state_dict({"weight": np.array([[0.1, 0.2]], np.float32), "bias": np.array([0.0], np.float32)})
        model.to(device)
        opt = kiln.optim.Adam(model.parameters(), lr=0.01, capturable=graph)
        step = kiln.train.TrainStep(model, opt, loss=lambda o, t: kiln.nn.mse_loss(o, t), accuracy=False,
                                    graph=graph, warmup=2)
        xs, ys = kiln.asarray(x.astype(np.float32), device=device), kiln.asarray(y.astype(np.float32), device=device)
        for _ in range(6):
            step(xs, ys)
        if graph:
            assert step.graphed and step.replays == 4  # the captured step replays too
        runs[graph] = model.weight.numpy()
    np.testing.assert_allclose(runs[True], runs[False], rtol=1e-5, atol=1e-6)
