"""kiln.compile (python/src/compile.cpp, docs/compile.md): a Python training step traced, then replayed without
Python, against the same steps run eagerly, bit for bit; and what tracing refuses."""

import numpy as np
import pytest

import kiln


def make_mlp(seed):
    kiln.random.seed(seed)
    model = kiln.nn.Sequential(kiln.nn.Linear(6, 16), kiln.nn.ReLU(), kiln.nn.Dropout(0.2), kiln.nn.Linear(16, 3))
    opt = kiln.optim.Adam(model.parameters(), lr=0.01, capturable=True)
    return model, opt


def batches(n):
    rng = np.random.default_rng(0)
    return [(kiln.asarray(rng.standard_normal((8, 6)).astype(np.float32)),
             kiln.asarray(rng.integers(0, 3, 8).astype(np.int64))) for _ in range(n)]


def test_a_compiled_python_step_equals_its_eager_steps_and_stops_calling_python():
    data = batches(6)
    model_a, opt_a = make_mlp(1)
    model_b, opt_b = make_mlp(1)
    calls = []

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = kiln.nn.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    def traced(x, y):
        calls.append(kiln.tracing_step())
        return step(model_b, opt_b, x, y)

    compiled = kiln.compile(traced)
    kiln.random.seed(5)
    eager = [step(model_a, opt_a, x, y).item() for x, y in data]
    kiln.random.seed(5)
    replayed = [compiled(x, y).item() for x, y in data]
    assert eager == replayed
    for pa, pb in zip(model_a.parameters(), model_b.parameters()):
        np.testing.assert_array_equal(np.asarray(pa), np.asarray(pb))
    assert calls == [False, True, True]  # one warm-up call, two traces; the three replays call no Python
    assert compiled.compiled and compiled.replays == 3 and compiled.recorded_ops > 10
    assert "matmul" in compiled.summary()


def test_tracing_refuses_host_reads_and_bad_results():
    x = kiln.arange(4, dtype=kiln.float32)
    with pytest.raises(ValueError, match="reading array values on the host"):
        kiln.compile(lambda a: a * float(a.sum().item()), warmup=0)(x)
    with pytest.raises(TypeError, match="return a kiln.Array"):
        kiln.compile(lambda a: 3, warmup=0)(x)
    with pytest.raises(TypeError, match="callable"):
        kiln.compile(4)
    pair = kiln.compile(lambda a: (a + 1, a * 2), warmup=0)
    for _ in range(3):
        p, q = pair(x)
    assert p.tolist() == [1, 2, 3, 4] and q.tolist() == [0, 2, 4, 6] and pair.replays == 1


def test_train_step_takes_compile():
    data = batches(5)
    model, opt = make_mlp(2)
    step = kiln.train.TrainStep(model, opt, compile=True, warmup=1)
    for x, y in data:
        step(x, y)
    assert step.graphed and step.replays == 2


def test_fit_takes_compile():
    model, opt = make_mlp(3)
    x = kiln.asarray(np.random.default_rng(1).standard_normal((40, 6)).astype(np.float32))
    y = kiln.asarray(np.random.default_rng(2).integers(0, 3, 40).astype(np.int64))
    history = kiln.train.fit(model, opt, kiln.data.DataLoader(x, y, batch_size=4), epochs=2, progress=False,
                             compile=True)
    assert len(history) == 2 and np.isfinite(history[-1].train_loss)


def test_the_fusion_pass_merges_a_python_chain_and_keeps_its_bits():
    rng = np.random.default_rng(3)
    w = kiln.asarray(rng.standard_normal((5, 7)).astype(np.float32))
    b = kiln.asarray(rng.standard_normal(7).astype(np.float32))

    def chain(x):
        return kiln.exp(x * w) + b

    fused = kiln.compile(chain)
    plain = kiln.compile(chain, fuse=False)
    for _ in range(5):
        x = kiln.asarray(rng.standard_normal((5, 7)).astype(np.float32))
        want = np.asarray(chain(x))
        np.testing.assert_array_equal(np.asarray(fused(x)), want)
        np.testing.assert_array_equal(np.asarray(plain(x)), want)
    assert fused.fused_ops == 2 and fused.recorded_ops == 1, fused.summary()
    assert plain.fused_ops == 0 and plain.recorded_ops == 3, plain.summary()
    assert "fused multiply+exp+add: 1" in fused.summary()
    assert 0 < fused.memory_bytes <= plain.memory_bytes
