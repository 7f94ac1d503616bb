"""NumPy float64 golden data for kiln's recurrent layers (tests/core/test_rnn.cpp): RNN (tanh, relu), LSTM and
GRU, written from PyTorch's documented equations (torch.nn.RNN / LSTM / GRU), not from kiln's code:

  RNN:  h' = tanh(W_ih x + b_ih + W_hh h + b_hh)               (or relu)
  LSTM: i, f, g, o = sigma, sigma, tanh, sigma of (W_ih x + b_ih + W_hh h + b_hh), split in that order
        c' = f * c + i * g,  h' = o * tanh(c')  (with proj_size: h' = W_hr (o * tanh(c')))
  GRU:  r, z = sigma(W_i{r,z} x + b_i{r,z} + W_h{r,z} h + b_h{r,z})
        n = tanh(W_in x + b_in + r * (W_hn h + b_hn)),  h' = (1 - z) * n + z * h

Layer k > 0 reads the concatenated outputs of layer k - 1's directions; the reverse direction runs from the last
step to the first and writes its outputs at their own steps; h_n / c_n are stacked as (layers * directions, N, H).

Gradients: of L = sum(y * gy) + sum(h_n * gh) + sum(c_n * gc) (gy, gh, gc random) with respect to the input, the
initial states and every parameter, by central differences in float64 (step 1e-6: error ~1e-9).

Run as `python3 rnn_golden.py OUTDIR`; writes OUTDIR/rnn/<case>_<name>.npy and finally OUTDIR/rnn_golden.stamp.
Per case: p_<param> (the parameters by PyTorch's names), x, h0, c0 (when given), gy, gh, gc, then the expected y,
hn, cn and d_x, d_h0, d_c0, d_<param>.
"""
import os
import sys

import numpy as np

OUT = os.path.join(sys.argv[1], "rnn")
os.makedirs(OUT, exist_ok=True)
rng = np.random.default_rng(20261127)

GATES = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}


def sigmoid(v):
    return 1.0 / (1.0 + np.exp(-v))


def cell(mode, p, suffix, x, h, c):
    """One step of one layer and direction: x (N, in), h and c (N, H). Returns h', c'."""
    w_ih, w_hh = p["weight_ih" + suffix], p["weight_hh" + suffix]
    b_ih = p.get("bias_ih" + suffix, 0.0)
    b_hh = p.get("bias_hh" + suffix, 0.0)
    gi = x @ w_ih.T + b_ih
    gh = h @ w_hh.T + b_hh
    H = w_hh.shape[0] // GATES[mode]
    if mode == "lstm":
        pre = gi + gh
        i, f, g, o = (pre[:, k * H:(k + 1) * H] for k in range(4))
        i, f, g, o = sigmoid(i), sigmoid(f), np.tanh(g), sigmoid(o)
        c2 = f * c + i * g
        h2 = o * np.tanh(c2)
        if "weight_hr" + suffix in p:  # proj_size: h = W_hr (o * tanh(c))
            h2 = h2 @ p["weight_hr" + suffix].T
        return h2, c2
    if mode == "gru":
        r = sigmoid(gi[:, :H] + gh[:, :H])
        z = sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = np.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        return (1.0 - z) * n + z * h, None
    pre = gi + gh
    return (np.tanh(pre) if mode == "rnn_tanh" else np.maximum(pre, 0.0)), None


def layers_forward(cfg, p, x, h0, c0):
    """x (T, N, in) (batch_first and unbatched are undone by the caller); h0, c0 (L*D, N, H)."""
    mode, L, D = cfg["mode"], cfg["layers"], cfg["dirs"]
    hn, cn = [], []
    for k in range(L):
        outs = []
        for d in range(D):
            suffix = "_l%d%s" % (k, "_reverse" if d else "")
            h, c = h0[k * D + d], (c0[k * D + d] if c0 is not None else None)
            T = x.shape[0]
            ys = [None] * T
            for t in (reversed(range(T)) if d else range(T)):
                h, c = cell(mode, p, suffix, x[t], h, c)
                ys[t] = h
            outs.append(np.stack(ys))
            hn.append(h)
            cn.append(c)
        x = np.concatenate(outs, axis=-1)
    return x, np.stack(hn), (np.stack(cn) if mode == "lstm" else None)


def module_forward(cfg, p, x, h0, c0):
    """As the module: batch_first / unbatched input and states."""
    if cfg.get("cell"):
        suffix = ""
        unb = x.ndim == 1
        xb = x[None] if unb else x
        hb = h0[None] if unb else h0
        cb = (c0[None] if unb else c0) if c0 is not None else None
        h, c = cell(cfg["mode"], p, suffix, xb, hb, cb)
        if unb:
            h, c = h[0], (c[0] if c is not None else None)
        return h, h, c  # y is h' for a cell (gy weights it; gh then weights it again)
    unb = x.ndim == 2
    if unb:
        x, h0 = x[:, None], h0[:, None]
        c0 = c0[:, None] if c0 is not None else None
    elif cfg["batch_first"]:
        x = x.transpose(1, 0, 2)
    y, hn, cn = layers_forward(cfg, p, x, h0, c0)
    if unb:
        y, hn = y[:, 0], hn[:, 0]
        cn = cn[:, 0] if cn is not None else None
    elif cfg["batch_first"]:
        y = y.transpose(1, 0, 2)
    return y, hn, cn


def save(case, name, a):
    np.save(os.path.join(OUT, "%s_%s.npy" % (case, name)), np.asarray(a, dtype=np.float64))


def make_case(case, cfg):
    mode, H, I = cfg["mode"], cfg["hidden"], cfg["input"]
    G = GATES[mode]
    L, D = cfg.get("layers", 1), cfg.get("dirs", 1)
    cfg.setdefault("layers", L)
    cfg.setdefault("dirs", D)
    cfg.setdefault("batch_first", False)
    bias = cfg.get("bias", True)
    k = 1.0 / np.sqrt(H)
    P = cfg.get("proj", 0)
    R = P or H  # the size of h (and of the output per direction)
    p = {}
    if cfg.get("cell"):
        p["weight_ih"] = rng.uniform(-k, k, (G * H, I))
        p["weight_hh"] = rng.uniform(-k, k, (G * H, H))
        if bias:
            p["bias_ih"] = rng.uniform(-k, k, G * H)
            p["bias_hh"] = rng.uniform(-k, k, G * H)
    else:
        for layer in range(L):
            for d in range(D):
                s = "_l%d%s" % (layer, "_reverse" if d else "")
                p["weight_ih" + s] = rng.uniform(-k, k, (G * H, I if layer == 0 else R * D))
                p["weight_hh" + s] = rng.uniform(-k, k, (G * H, R))
                if bias:
                    p["bias_ih" + s] = rng.uniform(-k, k, G * H)
                    p["bias_hh" + s] = rng.uniform(-k, k, G * H)
                if P:
                    p["weight_hr" + s] = rng.uniform(-k, k, (P, H))
    T, N = cfg["T"], cfg["N"]
    unb = cfg.get("unbatched", False)
    if cfg.get("cell"):
        x = rng.standard_normal((I,) if unb else (N, I))
        sshape = (H,) if unb else (N, H)
    else:
        x = rng.standard_normal((T, I) if unb else ((N, T, I) if cfg["batch_first"] else (T, N, I)))
        sshape = (L * D, H) if unb else (L * D, N, H)
    hshape = sshape[:-1] + (R,)
    given = cfg.get("states", True)
    h0 = rng.standard_normal(hshape) if given else np.zeros(hshape)
    c0 = (rng.standard_normal(sshape) if given else np.zeros(sshape)) if mode == "lstm" else None
    y, hn, cn = module_forward(cfg, p, x, h0, c0)
    gy, gh = rng.standard_normal(y.shape), rng.standard_normal(hn.shape)
    gc = rng.standard_normal(cn.shape) if cn is not None else None

    def loss():
        y2, hn2, cn2 = module_forward(cfg, p, x, h0, c0)
        v = np.sum(y2 * gy) + np.sum(hn2 * gh)
        return v + (np.sum(cn2 * gc) if cn2 is not None else 0.0)

    def numeric(a):
        g = np.zeros_like(a)
        flat, gflat = a.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + 1e-6
            up = loss()
            flat[i] = old - 1e-6
            down = loss()
            flat[i] = old
            gflat[i] = (up - down) / 2e-6
        return g

    for name, a in p.items():
        save(case, "p_" + name, a)
        save(case, "d_" + name, numeric(a))
    save(case, "x", x)
    save(case, "d_x", numeric(x))
    if given:
        save(case, "h0", h0)
        save(case, "d_h0", numeric(h0))
        if c0 is not None:
            save(case, "c0", c0)
            save(case, "d_c0", numeric(c0))
    save(case, "y", y)
    save(case, "hn", hn)
    save(case, "gy", gy)
    save(case, "gh", gh)
    if cn is not None:
        save(case, "cn", cn)
        save(case, "gc", gc)


CASES = {
    "lstm_bi2": dict(mode="lstm", input=2, hidden=3, layers=2, dirs=2, T=4, N=2),
    "gru_bi2_bf": dict(mode="gru", input=2, hidden=3, layers=2, dirs=2, T=4, N=2, batch_first=True),
    "rnn_tanh_bi2": dict(mode="rnn_tanh", input=2, hidden=3, layers=2, dirs=2, T=4, N=2),
    "rnn_relu_nobias": dict(mode="rnn_relu", input=3, hidden=4, T=5, N=3, bias=False, states=False),
    "lstm_proj_bi2": dict(mode="lstm", input=2, hidden=4, proj=3, layers=2, dirs=2, T=4, N=2),
    "lstm_unbatched": dict(mode="lstm", input=3, hidden=2, layers=2, T=3, N=1, unbatched=True),
    "gru_nobias_nostate": dict(mode="gru", input=2, hidden=3, T=3, N=2, bias=False, states=False),
    "lstm_cell": dict(mode="lstm", input=3, hidden=4, T=1, N=2, cell=True),
    "gru_cell": dict(mode="gru", input=3, hidden=4, T=1, N=2, cell=True),
    "rnn_cell": dict(mode="rnn_tanh", input=3, hidden=4, T=1, N=2, cell=True),
    "gru_cell_unbatched": dict(mode="gru", input=3, hidden=2, T=1, N=1, cell=True, unbatched=True),
}

for case_name, case_cfg in CASES.items():
    make_case(case_name, case_cfg)

with open(os.path.join(sys.argv[1], "rnn_golden.stamp"), "w") as stamp:
    stamp.write("ok\n")
