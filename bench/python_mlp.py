#!/usr/bin/env python3
"""Seconds per epoch of Chainer's MNIST MLP (784-100-100-10, ReLU, dropout 0.5, SGD, batch 100) trained from
kiln's Python package: the mlp100 cases of `kiln bench train` (tools/kiln/bench_train.cpp) step for step, so the
two records differ only by what Python adds to each step (the calls of zero_grad, the layers, the loss, backward
and step from the interpreter, where the C++ tool's train::TrainStep calls them from C++).

The cases, under the C++ tool's names (workload "train", metric "seconds"):
  cpu_mlp100_sgd           the CPU, SGD lr 0.01; each batch gathered from the host set (take) at the step
  mlp100_sgd_hostbatches   GPU 0, the same; each batch gathered on the host and copied to the GPU at the step
  mlp100_sgdm_device       GPU 0, SGD lr 0.1 momentum 0.9; the set on the GPU, batches gathered there

As the C++ tool: Fashion-MNIST's 60000 training images ($KILN_FASHION_MNIST, else Debian's folder), or random
data of their shape without them; --quick trains on the first 12000 (two epochs a case, else three); the
parameters drawn after kiln.random.seed(0); the epoch's mean loss summed on the device, so a step makes no host
synchronisation; an epoch timed by the host clock from a synchronisation to the read of that loss; the median of
the epochs after the first is recorded. The shuffles differ (NumPy's generator here, std::mt19937_64 there),
which changes which images share a batch, not the work.

Writes records in the format of docs/bench-schema.md section 1 with tool "kiln-python", so scripts/compare puts
them beside `kiln bench train --json`'s (the ratio column kiln/kiln-python > 1: C++ faster):

    PYTHONPATH=build/cuda/python python3 bench/python_mlp.py --json py.json
    build/cuda/tools/kiln/kiln bench train --json cxx.json
    scripts/compare cxx.json py.json

Usage: python_mlp.py [--quick] [--smoke] [--cpu-only] [--json PATH]
"""

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
BATCH = 100


def training_set(kiln, keep):
    """(x (N, 784) float32, y (N,) int64) on the CPU and where they came from, as bench_train.cpp's train_data."""
    folder = os.environ.get("KILN_FASHION_MNIST") or FASHION_MNIST_DIR
    if any(os.path.exists(os.path.join(folder, f)) for f in ("train-images-idx3-ubyte.gz", "train-images-idx3-ubyte")):
        x, y = kiln.data.fashion_mnist(True, folder)
        source = "Fashion-MNIST"
    else:
        kiln.random.seed(0)
        x = kiln.random.uniform(0.0, 1.0, (60000, 784), dtype=kiln.float32, device=kiln.cpu())
        y = kiln.random.randint(0, 10, (60000,), device=kiln.cpu())
        source = f"random data of Fashion-MNIST's shape (no data set in {folder})"
    return x[:keep], y[:keep], source


def mlp(kiln, device):
    """784-100-100-10 with ReLU and dropout 0.5 after each hidden layer (tools/kiln/train.cpp's mlp_model)."""
    nn = kiln.nn
    kiln.random.seed(0)
    return nn.Sequential(nn.Linear(784, 100, device=device), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(100, 100, device=device), nn.ReLU(), nn.Dropout(0.5),
                         nn.Linear(100, 10, device=device))


def epochs(kiln, x, y, model, optimizer, device, host_batches, count):
    """(median seconds of the epochs after the first, the last epoch's mean loss)."""
    import numpy as np

    n = y.shape[0]
    if not host_batches:
        x, y = x.to(device), y.to(device)
    rng = np.random.default_rng(0)
    model.train()
    times, loss = [], math.nan
    for _ in range(count):
        kiln.synchronize(device)
        t0 = time.perf_counter()
        perm = kiln.asarray(rng.permutation(n), device=kiln.cpu() if host_batches else device)
        total = kiln.zeros((), dtype=kiln.float32, device=device)
        steps = 0
        for i in range(0, n, BATCH):
            idx = perm[i:i + BATCH]
            if host_batches:
                xb, yb = kiln.take(x, idx, axis=0).to(device), kiln.take(y, idx, axis=0).to(device)
            else:
                xb, yb = kiln.take(x, idx, axis=0), kiln.take(y, idx, axis=0)
            optimizer.zero_grad()
            step_loss = kiln.nn.cross_entropy(model(xb), yb)
            step_loss.backward()
            optimizer.step()
            total += step_loss.detach()
            steps += 1
        loss = total.item() / steps  # waits for the epoch's work
        times.append(time.perf_counter() - t0)
    return statistics.median(times[1:]), loss


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 12000 images, two epochs a case")
    parser.add_argument("--smoke", action="store_true", help="2000 images, two epochs: checks the script only")
    parser.add_argument("--cpu-only", action="store_true", help="the CPU case alone")
    parser.add_argument("--json", help="write the records here")
    args = parser.parse_args()
    # The C++ tool's --quick keeps a fifth of the set; its smoke runs (KILN_BENCH_SMOKE) 2000 images.
    keep = 2000 if args.smoke else 12000 if args.quick else 60000
    count = 2 if args.quick or args.smoke else 3

    import kiln

    x, y, source = training_set(kiln, keep)
    cases = [("cpu_mlp100_sgd", kiln.cpu(), True, 0.01, 0.0)]
    gpu = kiln.num_gpus() > 0 and not args.cpu_only
    if gpu:
        cases += [("mlp100_sgd_hostbatches", kiln.cuda(0), True, 0.01, 0.0),
                  ("mlp100_sgdm_device", kiln.cuda(0), False, 0.1, 0.9)]
    print(f"seconds per epoch, batch {BATCH}, {y.shape[0]} images of {source}, from Python")
    print(f"{'case':<26} {'device':<8} {'epoch s':>9} {'last loss':>10}  check")
    records = []
    for name, device, host_batches, lr, momentum in cases:
        model = mlp(kiln, device)
        optimizer = kiln.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
        seconds, loss = epochs(kiln, x, y, model, optimizer, device, host_batches, count)
        check = "ok" if math.isfinite(loss) else f"the loss is {loss}"
        records.append({"workload": "train", "case": name, "metric": "seconds", "unit": "s", "value": seconds,
                        "higher_is_better": False, "check": check,
                        "note": f"kiln from Python; {source}; seconds per epoch, median after the first"})
        print(f"{name:<26} {str(device):<8} {seconds:>9.3f} {loss:>10.4f}  {check}")
    if args.json:
        props = kiln.device_properties(kiln.cuda(0)) if gpu else None
        report = {"tool": "kiln-python", "version": "0.1.0", "device": props["name"] if props else "cpu",
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "host_threads": os.cpu_count(), "quick": args.quick, "smoke": args.smoke, "records": records}
        if not gpu:
            why = "--cpu-only" if args.cpu_only else "no GPU"
            report["skipped"] = [{"what": f"train {c}", "reason": why}
                                 for c in ("mlp100_sgd_hostbatches", "mlp100_sgdm_device")]
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0 if all(r["check"] == "ok" for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
