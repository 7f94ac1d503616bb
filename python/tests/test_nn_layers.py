"""kiln.nn's layers beyond the basic ones (python/src/nn_layers.cpp), checked against NumPy float64 references
written from PyTorch's documented formulas, with the layers' own parameters as the references' inputs."""

import numpy as np
import pytest

import kiln

F64 = kiln.float64


def params(module):
    return {name: np.asarray(value) for name, value in module.state_dict().items()}


def conv2d_ref(x, w, b, stride, padding, dilation, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0], padding[0]), (padding[1], padding[1])))
    oh = (h + 2 * padding[0] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + 2 * padding[1] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for oc in range(o):
        g = oc // per_group
        for i in range(oh):
            for j in range(ow):
                rows = i * stride[0] + dilation[0] * np.arange(kh)
                cols = j * stride[1] + dilation[1] * np.arange(kw)
                window = xp[:, g * cg:(g + 1) * cg][:, :, rows][:, :, :, cols]
                out[:, oc, i, j] = (window * w[oc]).sum(axis=(1, 2, 3))
    return out + (0 if b is None else b[None, :, None, None])


def test_conv2d_matches_a_direct_convolution():
    rng = np.random.default_rng(0)
    conv = kiln.nn.Conv2d(4, 6, (3, 2), stride=2, padding=1, dilation=(1, 2), groups=2, dtype=F64)
    assert conv.kernel_size == (3, 2) and conv.stride == (2, 2) and conv.groups == 2
    x = rng.standard_normal((2, 4, 7, 8))
    p = params(conv)
    assert p["weight"].shape == (6, 2, 3, 2) and p["bias"].shape == (6,)
    expected = conv2d_ref(x, p["weight"], p["bias"], (2, 2), (1, 1), (1, 2), 2)
    np.testing.assert_allclose(np.asarray(conv(kiln.asarray(x))), expected, rtol=1e-10, atol=1e-12)
    functional = kiln.nn.conv2d(kiln.asarray(x), p["weight"], p["bias"], stride=2, padding=1, dilation=(1, 2), groups=2)
    np.testing.assert_allclose(np.asarray(functional), expected, rtol=1e-10, atol=1e-12)


def test_conv2d_same_padding_keeps_the_size_and_refuses_what_it_cannot_do():
    x = kiln.ones((1, 2, 5, 6))
    assert kiln.nn.Conv2d(2, 3, 3, padding="same")(x).shape == (1, 3, 5, 6)
    assert kiln.nn.Conv2d(2, 3, 3, padding="valid")(x).shape == (1, 3, 3, 4)
    assert kiln.nn.Conv2d(2, 3, 3, bias=False).state_dict().keys() == {"weight"}
    with pytest.raises(ValueError, match="even kernel"):
        kiln.nn.Conv2d(2, 3, 2, padding="same")
    with pytest.raises(ValueError, match="stride=1"):
        kiln.nn.Conv2d(2, 3, 3, stride=2, padding="same")


def test_pooling_layers_match_numpy_windows():
    x = np.arange(2 * 3 * 6 * 6, dtype=np.float64).reshape(2, 3, 6, 6) % 7
    windows = x.reshape(2, 3, 3, 2, 3, 2)
    np.testing.assert_array_equal(np.asarray(kiln.nn.MaxPool2d(2)(kiln.asarray(x))), windows.max(axis=(3, 5)))
    np.testing.assert_allclose(np.asarray(kiln.nn.AvgPool2d(2)(kiln.asarray(x))), windows.mean(axis=(3, 5)))
    np.testing.assert_allclose(np.asarray(kiln.nn.AdaptiveAvgPool2d(1)(kiln.asarray(x))),
                               x.mean(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(np.asarray(kiln.nn.AdaptiveAvgPool2d((3, 2))(kiln.asarray(x))),
                               x.reshape(2, 3, 3, 2, 2, 3).mean(axis=(3, 5)))
    # stride 1, padding 1 (the padding counts as -inf for max, as zeros for the average)
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    expected = np.max([padded[:, :, i:i + 6, j:j + 6] for i in range(3) for j in range(3)], axis=0)
    got = kiln.nn.max_pool2d(kiln.asarray(x), 3, stride=1, padding=1)
    np.testing.assert_array_equal(np.asarray(got), expected)
    zeros = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.mean([zeros[:, :, i:i + 6, j:j + 6] for i in range(3) for j in range(3)], axis=0)
    np.testing.assert_allclose(np.asarray(kiln.nn.avg_pool2d(kiln.asarray(x), 3, 1, 1)), expected)


def test_batchnorm2d_normalises_with_batch_statistics_and_updates_the_running_ones():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((4, 3, 2, 5)) * 3 + 1
    bn = kiln.nn.BatchNorm2d(3, dtype=F64)
    assert {"weight", "bias", "running_mean", "running_var", "num_batches_tracked"} <= set(bn.state_dict())
    y = np.asarray(bn(kiln.asarray(x)))
    mean = x.mean(axis=(0, 2, 3))
    var = x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(y, (x - mean[None, :, None, None]) / np.sqrt(var[None, :, None, None] + 1e-5),
                               rtol=1e-10, atol=1e-10)
    p = params(bn)
    np.testing.assert_allclose(p["running_mean"], 0.1 * mean, rtol=1e-12)
    np.testing.assert_allclose(p["running_var"], 0.9 + 0.1 * x.var(axis=(0, 2, 3), ddof=1), rtol=1e-12)
    bn.eval()
    y = np.asarray(bn(kiln.asarray(x)))
    expected = (x - p["running_mean"][None, :, None, None]) / np.sqrt(p["running_var"][None, :, None, None] + 1e-5)
    np.testing.assert_allclose(y, expected, rtol=1e-10, atol=1e-10)


def test_functional_batch_norm_updates_the_callers_running_statistics_in_place():
    x = np.arange(2 * 2 * 3 * 1, dtype=np.float64).reshape(2, 2, 3, 1)
    running_mean, running_var = kiln.zeros(2, dtype=F64), kiln.ones(2, dtype=F64)
    kiln.nn.batch_norm(kiln.asarray(x), running_mean, running_var, training=True, momentum=0.5)
    np.testing.assert_allclose(running_mean.tolist(), 0.5 * x.mean(axis=(0, 2, 3)))
    np.testing.assert_allclose(running_var.tolist(), 0.5 + 0.5 * x.var(axis=(0, 2, 3), ddof=1))
    y = kiln.nn.batch_norm(kiln.asarray(x), None, None, training=True)
    assert abs(float(kiln.mean(y))) < 1e-12


def test_rmsnorm_and_unflatten():
    x = np.random.default_rng(2).standard_normal((3, 4))
    norm = kiln.nn.RMSNorm(4, eps=1e-6, dtype=F64)
    expected = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6)
    np.testing.assert_allclose(np.asarray(norm(kiln.asarray(x))), expected, rtol=1e-12)
    assert kiln.nn.Unflatten(1, (2, 2))(kiln.asarray(x)).shape == (3, 2, 2)


def softmax(s, axis=-1):
    e = np.exp(s - s.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_scaled_dot_product_attention_with_causal_and_boolean_masks():
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((2, 4, 5, 8)), rng.standard_normal((2, 4, 6, 8)), rng.standard_normal((2, 4, 6, 3))
    scores = q @ k.swapaxes(-1, -2) / np.sqrt(8)
    got = kiln.nn.scaled_dot_product_attention(kiln.asarray(q), k, v)
    np.testing.assert_allclose(np.asarray(got), softmax(scores) @ v, rtol=1e-10)
    allowed = rng.random((5, 6)) > 0.3
    allowed[:, 0] = True
    got = kiln.nn.scaled_dot_product_attention(kiln.asarray(q), k, v, attn_mask=allowed)  # True: takes part
    np.testing.assert_allclose(np.asarray(got), softmax(np.where(allowed, scores, -np.inf)) @ v, rtol=1e-10)
    qs = q[:, :, :5]
    causal = np.tril(np.ones((5, 5), bool))
    s = qs @ k[:, :, :5].swapaxes(-1, -2) * 0.5
    got = kiln.nn.scaled_dot_product_attention(kiln.asarray(qs), k[:, :, :5], v[:, :, :5], is_causal=True, scale=0.5)
    np.testing.assert_allclose(np.asarray(got), softmax(np.where(causal, s, -np.inf)) @ v[:, :, :5], rtol=1e-10)


def mha_ref(p, query, key, value, heads, key_padding_mask=None):
    e = query.shape[-1]
    w, b = p["in_proj_weight"], p["in_proj_bias"]
    q = query @ w[:e].T + b[:e]
    k = key @ w[e:2 * e].T + b[e:2 * e]
    v = value @ w[2 * e:].T + b[2 * e:]
    L, N, _ = q.shape
    S = k.shape[0]
    hd = e // heads
    split = lambda t, n: t.reshape(n, N, heads, hd).transpose(1, 2, 0, 3)  # noqa: E731  (N, H, n, hd)
    scores = split(q, L) @ split(k, S).swapaxes(-1, -2) / np.sqrt(hd)
    if key_padding_mask is not None:
        scores = np.where(key_padding_mask[:, None, None, :], -np.inf, scores)
    attn = softmax(scores)
    out = (attn @ split(v, S)).transpose(2, 0, 1, 3).reshape(L, N, e)
    return out @ p["out_proj.weight"].T + p["out_proj.bias"], attn.mean(axis=1)


def test_multihead_attention_matches_pytorchs_formula_and_returns_a_pair():
    rng = np.random.default_rng(4)
    mha = kiln.nn.MultiheadAttention(8, 2, dtype=F64)
    p = params(mha)
    assert p["in_proj_weight"].shape == (24, 8)
    query, key, value = rng.standard_normal((3, 2, 8)), rng.standard_normal((5, 2, 8)), rng.standard_normal((5, 2, 8))
    out, weights = mha(kiln.asarray(query), key, value)
    expected_out, expected_weights = mha_ref(p, query, key, value, 2)
    np.testing.assert_allclose(np.asarray(out), expected_out, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(weights), expected_weights, rtol=1e-10, atol=1e-12)
    padding = np.array([[False, False, True, False, True], [False] * 5])  # True: not allowed
    out, weights = mha(kiln.asarray(query), key, value, key_padding_mask=padding, need_weights=False)
    assert weights is None
    np.testing.assert_allclose(np.asarray(out), mha_ref(p, query, key, value, 2, padding)[0], rtol=1e-10, atol=1e-12)
    batch_first = kiln.nn.MultiheadAttention(8, 2, batch_first=True, dtype=F64)
    batch_first.load_state_dict(mha.state_dict())
    out, _ = batch_first(kiln.asarray(query.transpose(1, 0, 2)), key.transpose(1, 0, 2), value.transpose(1, 0, 2))
    np.testing.assert_allclose(np.asarray(out), expected_out.transpose(1, 0, 2), rtol=1e-10, atol=1e-12)


def test_transformer_stacks_start_as_copies_of_the_given_layer():
    rng = np.random.default_rng(5)
    layer = kiln.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, dtype=F64)
    encoder = kiln.nn.TransformerEncoder(layer, 2, norm=kiln.nn.LayerNorm(8, dtype=F64))
    state = params(encoder)
    for name, value in params(layer).items():
        np.testing.assert_array_equal(state["layers.0." + name], value)
        np.testing.assert_array_equal(state["layers.1." + name], value)
    assert "norm.weight" in state
    x = rng.standard_normal((4, 3, 8))
    twice = np.asarray(layer(layer(kiln.asarray(x))))
    mean, var = twice.mean(axis=-1, keepdims=True), twice.var(axis=-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(encoder(kiln.asarray(x))), (twice - mean) / np.sqrt(var + 1e-5),
                               rtol=1e-9, atol=1e-10)
    mask = ~np.tril(np.ones((4, 4), bool))  # True: not allowed, as PyTorch's module masks
    causal = np.asarray(layer(kiln.asarray(x), src_mask=mask))
    np.testing.assert_allclose(causal, np.asarray(layer(kiln.asarray(x), is_causal=True, src_mask=mask)), rtol=1e-12)
    # position 0 sees only itself: changing later positions leaves its output alone
    x2 = x.copy()
    x2[1:] += 1.0
    np.testing.assert_allclose(np.asarray(layer(kiln.asarray(x2), src_mask=mask))[0], causal[0], rtol=1e-12)

    dlayer = kiln.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, dtype=F64)
    decoder = kiln.nn.TransformerDecoder(dlayer, 2)
    tgt, memory = rng.standard_normal((3, 2, 8)), rng.standard_normal((5, 2, 8))
    expected = dlayer(dlayer(kiln.asarray(tgt), memory), memory)
    np.testing.assert_allclose(np.asarray(decoder(kiln.asarray(tgt), memory)), np.asarray(expected), rtol=1e-10)


def sigmoid(t):
    return 1 / (1 + np.exp(-t))


def test_lstm_returns_output_and_state_pair_as_pytorch():
    rng = np.random.default_rng(6)
    lstm = kiln.nn.LSTM(3, 4, dtype=F64)
    p = params(lstm)
    x = rng.standard_normal((5, 2, 3))
    h0, c0 = rng.standard_normal((1, 2, 4)), rng.standard_normal((1, 2, 4))
    out, (h_n, c_n) = lstm(kiln.asarray(x), (h0, c0))
    h, c, outs = h0[0], c0[0], []
    for t in range(5):
        gates = x[t] @ p["weight_ih_l0"].T + p["bias_ih_l0"] + h @ p["weight_hh_l0"].T + p["bias_hh_l0"]
        i, f, g, o = np.split(gates, 4, axis=-1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        h = sigmoid(o) * np.tanh(c)
        outs.append(h)
    np.testing.assert_allclose(np.asarray(out), np.stack(outs), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(h_n), h[None], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(c_n), c[None], rtol=1e-10, atol=1e-12)
    out0, _ = lstm(kiln.asarray(x))  # no state: zeros
    out_zero, _ = lstm(kiln.asarray(x), (np.zeros((1, 2, 4)), np.zeros((1, 2, 4))))
    np.testing.assert_array_equal(np.asarray(out0), np.asarray(out_zero))
    cell = kiln.nn.LSTMCell(3, 4, dtype=F64)
    cp = params(cell)
    h1, c1 = cell(kiln.asarray(x[0]), (h0[0], c0[0]))
    gates = x[0] @ cp["weight_ih"].T + cp["bias_ih"] + h0[0] @ cp["weight_hh"].T + cp["bias_hh"]
    i, f, g, o = np.split(gates, 4, axis=-1)
    c_ref = sigmoid(f) * c0[0] + sigmoid(i) * np.tanh(g)
    np.testing.assert_allclose(np.asarray(c1), c_ref, rtol=1e-10)
    np.testing.assert_allclose(np.asarray(h1), sigmoid(o) * np.tanh(c_ref), rtol=1e-10)


def gru_step(p, x, h, suffix=""):
    gi = x @ p["weight_ih" + suffix].T + p["bias_ih" + suffix]
    gh = h @ p["weight_hh" + suffix].T + p["bias_hh" + suffix]
    ir, iz, i_n = np.split(gi, 3, axis=-1)
    hr, hz, hn = np.split(gh, 3, axis=-1)
    r, z = sigmoid(ir + hr), sigmoid(iz + hz)
    n = np.tanh(i_n + r * hn)
    return (1 - z) * n + z * h


def test_gru_rnn_and_their_cells_match_the_recurrences():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 3))  # batch_first: (N, T, in)
    gru = kiln.nn.GRU(3, 5, batch_first=True, dtype=F64)
    p = params(gru)
    out, h_n = gru(kiln.asarray(x))
    h = np.zeros((2, 5))
    outs = []
    for t in range(4):
        h = gru_step(p, x[:, t], h, "_l0")
        outs.append(h)
    np.testing.assert_allclose(np.asarray(out), np.stack(outs, axis=1), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(np.asarray(h_n), h[None], rtol=1e-10, atol=1e-12)

    rnn = kiln.nn.RNN(3, 5, nonlinearity="relu", batch_first=True, dtype=F64)
    p = params(rnn)
    out, h_n = rnn(kiln.asarray(x))
    h = np.zeros((2, 5))
    for t in range(4):
        h = np.maximum(x[:, t] @ p["weight_ih_l0"].T + p["bias_ih_l0"] + h @ p["weight_hh_l0"].T + p["bias_hh_l0"], 0)
    np.testing.assert_allclose(np.asarray(h_n)[0], h, rtol=1e-10, atol=1e-12)

    cell = kiln.nn.GRUCell(3, 5, dtype=F64)
    h0 = rng.standard_normal((2, 5))
    np.testing.assert_allclose(np.asarray(cell(kiln.asarray(x[:, 0]), h0)), gru_step(params(cell), x[:, 0], h0),
                               rtol=1e-10)
    cell = kiln.nn.RNNCell(3, 5, dtype=F64)
    cp = params(cell)
    expected = np.tanh(x[:, 0] @ cp["weight_ih"].T + cp["bias_ih"] + cp["bias_hh"])
    np.testing.assert_allclose(np.asarray(cell(kiln.asarray(x[:, 0]))), expected, rtol=1e-10)

    bidirectional = kiln.nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    out, (h_n, c_n) = bidirectional(kiln.random.normal(size=(6, 2, 3)))
    assert out.shape == (6, 2, 8) and h_n.shape == (4, 2, 4) and c_n.shape == (4, 2, 4)
    assert "weight_hh_l1_reverse" in bidirectional.state_dict()


def test_module_list_and_dict_register_their_modules_in_a_python_module():
    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = kiln.nn.ModuleList([kiln.nn.Linear(4, 4, dtype=F64) for _ in range(2)])
            self.heads = kiln.nn.ModuleDict({"a": kiln.nn.Linear(4, 1, dtype=F64), "b": kiln.nn.Linear(4, 2, dtype=F64)})
            self.attn = kiln.nn.MultiheadAttention(4, 2, dtype=F64)

        def forward(self, x, head="a"):
            for block in self.blocks:
                x = kiln.tanh(block(x))
            x, _ = self.attn(x, x, x, need_weights=False)
            return self.heads[head](x)

    net = Net()
    names = [name for name, _ in net.named_parameters()]
    assert names[:4] == ["blocks.0.weight", "blocks.0.bias", "blocks.1.weight", "blocks.1.bias"]
    assert "heads.b.weight" in names and "attn.in_proj_weight" in names
    assert len(net.blocks) == 2 and "b" in net.heads and net.heads.keys() == ["a", "b"]
    x = kiln.random.normal(size=(3, 2, 4), dtype=F64)
    assert net(x, "b").shape == (3, 2, 2)  # several arguments reach the Python forward
    assert net(x).shape == (3, 2, 1)
    kiln.sum(net(x)).backward()
    assert net.attn.in_proj_weight.grad is not None and net.blocks[0].weight.grad is not None
    net.blocks.append(kiln.nn.ReLU())
    assert len(net.blocks) == 3 and repr(net.blocks[-1]) == "ReLU"
    with pytest.raises(IndexError):
        net.blocks[3]
    with pytest.raises(KeyError):
        net.heads["c"]


def test_layers_are_sequential_steps_and_errors_name_the_fix():
    model = kiln.nn.Sequential(kiln.nn.Conv2d(1, 2, 3, padding=1), kiln.nn.BatchNorm2d(2), kiln.nn.ReLU(),
                               kiln.nn.MaxPool2d(2), kiln.nn.Flatten(), kiln.nn.Linear(2 * 2 * 2, 3))
    assert model(kiln.ones((5, 1, 4, 4))).shape == (5, 3)
    with pytest.raises(TypeError, match="pair"):
        kiln.nn.LSTM(2, 3)(kiln.ones((4, 1, 2)), kiln.ones((1, 1, 3)))
    with pytest.raises(ValueError, match="kernel_size"):
        kiln.nn.MaxPool2d((1, 2, 3))


def test_a_python_module_of_conv_batchnorm_and_lstm_layers_trains():
    class Net(kiln.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = kiln.nn.Conv2d(1, 2, 3, padding=1)
            self.bn = kiln.nn.BatchNorm2d(2)
            self.lstm = kiln.nn.LSTM(2, 3, batch_first=True)
            self.head = kiln.nn.Linear(3, 2)

        def forward(self, x):  # (N, 1, 4, 4) images read as sequences of 16 two-channel steps
            h = kiln.nn.max_pool2d(kiln.maximum(self.bn(self.conv(x)), 0.0), 1)
            seq = h.reshape(h.shape[0], 2, 16).swapaxes(1, 2)
            out, (h_n, _) = self.lstm(seq)
            return self.head(h_n[0])

    net = Net()
    names = {name for name, _ in net.named_parameters()}
    assert {"conv.weight", "bn.weight", "lstm.weight_ih_l0", "head.bias"} <= names
    assert {name for name, _ in net.named_buffers()} >= {"bn.running_mean", "bn.running_var"}
    x = kiln.random.normal(size=(6, 1, 4, 4))
    labels = kiln.asarray([0, 1, 0, 1, 1, 0])
    opt = kiln.optim.Adam(net.parameters(), lr=0.05)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = kiln.nn.cross_entropy(net(x), labels)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert all(p.grad is not None for p in net.parameters())
    assert losses[-1] < 0.5 * losses[0]


def test_fuse_conv_bn_eval_and_channels_last_keep_the_values():
    rng = np.random.default_rng(8)
    conv, bn = kiln.nn.Conv2d(2, 3, 3, padding=1, dtype=F64), kiln.nn.BatchNorm2d(3, dtype=F64)
    bn.load_state_dict({**bn.state_dict(), "running_mean": rng.standard_normal(3), "running_var": rng.random(3) + 0.5,
                        "weight": rng.standard_normal(3), "bias": rng.standard_normal(3)})
    bn.eval()
    x = rng.standard_normal((2, 2, 5, 5))
    p, b = params(conv), params(bn)
    y = conv2d_ref(x, p["weight"], p["bias"], (1, 1), (1, 1), (1, 1), 1)
    scale = b["weight"] / np.sqrt(b["running_var"] + 1e-5)
    expected = (y - b["running_mean"][None, :, None, None]) * scale[None, :, None, None] + b["bias"][None, :, None, None]
    fused = kiln.nn.fuse_conv_bn_eval(conv, bn)
    np.testing.assert_allclose(np.asarray(fused(kiln.asarray(x))), expected, rtol=1e-10, atol=1e-10)
    assert conv.to_channels_last() is conv
    assert not conv.weight.is_contiguous and conv.weight.shape == (3, 2, 3, 3)
    np.testing.assert_allclose(np.asarray(conv(kiln.asarray(x))), y, rtol=1e-10, atol=1e-12)
