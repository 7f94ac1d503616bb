#!/usr/bin/env python3
"""Test accuracy of the 784-1000-1000-10 Adam model (batch 100, lr 1e-3, 5 epochs, Fashion-MNIST) over
several seeds with PyTorch (data /255, default Linear init, Adam defaults, per-epoch NumPy shuffles): the spread
that a one-seed accuracy figure sits in, beside `kiln train mlp --units 1000 --dropout 0 --optimizer adam --seed S`.

    python3 bench/peers/torch_seeds.py --data DIR [--seeds 0,1,2,3,4] [--epochs 5] [--json FILE]

Each seed sets torch.manual_seed (initialisation) and the NumPy generator of the shuffles.
"""
import argparse
import json
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def load(directory, train):
    stems = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte") if train else \
        ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    paths = []
    for stem in stems:
        path = next((os.path.join(directory, stem + ext) for ext in (".gz", "")
                     if os.path.exists(os.path.join(directory, stem + ext))), None)
        if path is None:
            raise SystemExit(f"torch_seeds: no {stem}(.gz) in {directory}")
        paths.append(path)
    (n, rows, cols), images = common.read_idx(paths[0])
    _, labels = common.read_idx(paths[1])
    x = np.frombuffer(images, dtype=np.uint8).reshape(n, rows * cols).astype(np.float32) / 255.0
    return x, np.frombuffer(labels, dtype=np.uint8).astype(np.int64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    import torch
    import torch.nn.functional as F
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    xtr, ytr = load(args.data, True)
    xte, yte = load(args.data, False)
    xd, yd = torch.from_numpy(xtr).to(dev), torch.from_numpy(ytr).to(dev)
    xt = torch.from_numpy(xte).to(dev)
    accs = {}
    for seed in (int(s) for s in args.seeds.split(",")):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(784, 1000), torch.nn.ReLU(), torch.nn.Linear(1000, 1000),
                                    torch.nn.ReLU(), torch.nn.Linear(1000, 10)).to(dev)
        opt = torch.optim.Adam(model.parameters())
        rng = np.random.default_rng(seed)
        for _ in range(args.epochs):
            perm = torch.from_numpy(rng.permutation(len(xtr))).to(dev)
            for i in range(0, len(xtr), 100):
                idx = perm[i:i + 100]
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(xd[idx]), yd[idx]).backward()
                opt.step()
        model.eval()
        with torch.no_grad():
            pred = torch.cat([model(xt[i:i + 1000]).argmax(1) for i in range(0, len(xt), 1000)])
        accs[seed] = float((pred.cpu().numpy() == yte).mean())
        print(f"seed {seed}: test accuracy {accs[seed]:.4f}", flush=True)
    values = list(accs.values())
    summary = {"torch": torch.__version__, "device": str(dev), "epochs": args.epochs, "accuracy": accs,
               "mean": statistics.mean(values), "stdev": statistics.stdev(values) if len(values) > 1 else 0.0}
    print(f"mean {summary['mean']:.4f} stdev {summary['stdev']:.4f} over {len(values)} seeds")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
