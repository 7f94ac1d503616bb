#!/usr/bin/env python3
"""kiln's recurrent layers beside torch.nn's: reads the safetensors files bench/rnn_equivalence.cpp wrote (one per
case: kiln's parameters, inputs, loss weights, outputs and gradients), loads the parameters into the matching
torch.nn layer (LSTM, GRU, RNN, LSTMCell) with load_state_dict (strict: the names must be PyTorch's), runs it on
the same inputs, backpropagates L = sum(y gy) + sum(h_n gh) + sum(c_n gc), and compares outputs and gradients.

    build/cuda/bench/rnn_equivalence OUT cuda:0            # kiln side, on the GPU (float32)
    python3 bench/peers/rnn_equivalence.py OUT [--device cuda] [--json OUT/rnn_equivalence.json]

Prints one line per case and quantity with the largest relative error (|kiln - torch| / (1 + |torch|)); exits 1
when one exceeds the tolerance (float32: 1e-4, float64: 1e-10). PyTorch's float32 matmuls run without TF32.
Needs torch and numpy; reads safetensors itself (no safetensors package needed).
"""
import argparse
import glob
import json
import os
import struct
import sys

import numpy as np

DTYPES = {"F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64, "I32": np.int32}


def read_safetensors(path):
    """(tensors by name as NumPy arrays, metadata dict) of a safetensors file."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        data = f.read()
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=DTYPES[info["dtype"]]).reshape(info["shape"]).copy()
    return tensors, meta


def compare(torch, path, device):
    t, meta = read_safetensors(path)
    mode = meta["mode"]
    dtype = torch.float64 if meta["dtype"] == "float64" else torch.float32
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    dev = torch.device(device)
    inp, hidden = int(meta["input_size"]), int(meta["hidden_size"])
    layers, bidir, bf = int(meta["num_layers"]), meta["bidirectional"] == "1", meta["batch_first"] == "1"
    if mode == "lstm":
        m = torch.nn.LSTM(inp, hidden, num_layers=layers, bidirectional=bidir, batch_first=bf,
                          proj_size=int(meta.get("proj_size", "0")))
    elif mode == "gru":
        m = torch.nn.GRU(inp, hidden, num_layers=layers, bidirectional=bidir, batch_first=bf)
    elif mode in ("rnn_tanh", "rnn_relu"):
        m = torch.nn.RNN(inp, hidden, num_layers=layers, nonlinearity=mode[4:], bidirectional=bidir, batch_first=bf)
    elif mode == "lstm_cell":
        m = torch.nn.LSTMCell(inp, hidden)
    else:
        raise ValueError(f"{path}: unknown mode {mode!r}")
    m = m.to(dev, dtype)
    state = {k[len("param."):]: torch.from_numpy(v) for k, v in t.items() if k.startswith("param.")}
    m.load_state_dict(state, strict=True)

    def tensor(name, grad=False):
        return torch.from_numpy(t[name]).to(dev, dtype).requires_grad_(grad)

    x, h0 = tensor("input.x", True), tensor("input.h0", True)
    lstm = "input.c0" in t
    c0 = tensor("input.c0", True) if lstm else None
    if mode == "lstm":
        y, (hn, cn) = m(x, (h0, c0))
    elif mode == "lstm_cell":
        hn, cn = m(x, (h0, c0))
        y = hn
    else:
        y, hn = m(x, h0)
        cn = None
    loss = (y * tensor("loss.gy")).sum() + (hn * tensor("loss.gh")).sum()
    if lstm:
        loss = loss + (cn * tensor("loss.gc")).sum()
    loss.backward()

    got = {"out.y": y, "out.hn": hn, "grad.x": x.grad, "grad.h0": h0.grad}
    if lstm:
        got.update({"out.cn": cn, "grad.c0": c0.grad})
    for name, p in m.named_parameters():
        got["grad." + name] = p.grad
    rows = []
    for name, want in got.items():
        ref = want.detach().double().cpu().numpy()
        kiln = t[name].astype(np.float64)
        err = float(np.max(np.abs(kiln - ref) / (1.0 + np.abs(ref)))) if kiln.shape == ref.shape else float("inf")
        rows.append({"case": os.path.basename(path)[:-len(".safetensors")], "quantity": name, "error": err,
                     "ok": err <= tol, "kiln_device": meta.get("device"), "dtype": meta["dtype"]})
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", help="the folder the bench program rnn_equivalence wrote (bench/rnn_equivalence.cpp)")
    p.add_argument("--device", default=None, help="torch device (default: cuda when available, else cpu)")
    p.add_argument("--json", help="write the rows to this file")
    args = p.parse_args()
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    files = sorted(glob.glob(os.path.join(args.dir, "*.safetensors")))
    if not files:
        print(f"rnn_equivalence: no .safetensors files in {args.dir}; run build/cuda/bench/rnn_equivalence {args.dir} first")
        return 1
    rows = []
    for path in files:
        rows += compare(torch, path, device)
    bad = [r for r in rows if not r["ok"]]
    for r in rows:
        print(f"{r['case']:10s} {r['quantity']:28s} {r['error']:.2e} {'ok' if r['ok'] else 'MISMATCH'}"
              f"  (kiln on {r['kiln_device']}, {r['dtype']}; torch on {device})")
    print(f"rnn_equivalence: {len(rows) - len(bad)}/{len(rows)} quantities agree"
          + ("" if not bad else f"; {len(bad)} MISMATCH"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "device": device, "rows": rows}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
