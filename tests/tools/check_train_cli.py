#!/usr/bin/env python3
"""Runs `kiln train mlp` on the CPU over a small IDX data set this script writes (two separable classes of
28x28 images) and checks what a user sees: the learning rate each optimizer gets when --lr is not given (SGD
0.01, the walkthrough's; Adam 0.001, torch.optim.Adam's), that --lr overrides it, one JSON line per epoch in
--log with the metrics named, a model that learns the easy set, and the error for a missing data folder.

usage: check_train_cli.py KILN_BINARY WORK_DIR
"""
import json
import os
import re
import struct
import subprocess
import sys


def fail(msg):
    print("check_train_cli: FAIL: " + msg)
    sys.exit(1)


def write_idx(path, dims, code, payload):
    with open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, code, len(dims)))
        f.write(struct.pack(">" + "I" * len(dims), *dims))
        f.write(payload)


def write_set(folder, stem, n):
    """n images: label 0 is bright in the top half, label 1 in the bottom half (deterministic pixels)."""
    images, labels = bytearray(), bytearray()
    for i in range(n):
        label = i % 2
        for r in range(28):
            bright = (r < 14) == (label == 0)
            images.extend(((200 + (i * 7 + r * 3 + c) % 50) if bright else (i + r + c) % 30) for c in range(28))
        labels.append(label)
    write_idx(os.path.join(folder, f"{stem}-images-idx3-ubyte"), [n, 28, 28], 0x08, bytes(images))
    write_idx(os.path.join(folder, f"{stem}-labels-idx1-ubyte"), [n], 0x08, bytes(labels))


def train(kiln, folder, *extra):
    cmd = [kiln, "train", "mlp", "--device", "cpu", "--data", folder, "--epochs", "2", "--batch", "50",
           "--dropout", "0", *extra]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    return run, " ".join(cmd)


def main():
    if len(sys.argv) != 3:
        fail(__doc__)
    kiln, work = sys.argv[1], sys.argv[2]
    folder = os.path.join(work, "idx")
    os.makedirs(folder, exist_ok=True)
    write_set(folder, "train", 400)
    write_set(folder, "t10k", 100)

    for opt, flags, lr in (("sgd", [], "0.01"), ("adam", [], "0.001"), ("adam", ["--lr", "0.005"], "0.005"),
                           ("sgd", ["--lr", "0.1"], "0.1")):
        log = os.path.join(work, f"train-{opt}-{lr}.jsonl")
        if os.path.exists(log):
            os.remove(log)
        run, cmd = train(kiln, folder, "--optimizer", opt, "--log", log, *flags)
        if run.returncode != 0:
            fail(f"{cmd} exited with {run.returncode}: {run.stderr[-2000:]}")
        header = next((line for line in run.stdout.splitlines() if line.startswith("kiln train mlp")), "")
        if f"{opt} (lr {lr}" not in header:
            fail(f"{cmd}: expected '{opt} (lr {lr}' in the header line, got: {header!r}")
        with open(log) as f:
            epochs = [json.loads(line) for line in f if line.strip()]
        if len(epochs) != 2:
            fail(f"{cmd}: {len(epochs)} JSON lines in {log}, expected one per epoch (2)")
        for key in ("epoch", "train_loss", "test_accuracy"):
            if key not in epochs[-1]:
                fail(f"{cmd}: the log's line has no '{key}': {epochs[-1]}")
        acc = epochs[-1]["test_accuracy"]
        if not acc >= 0.95:
            fail(f"{cmd}: test accuracy {acc} on two separable classes (expected >= 0.95)")
        print(f"{opt} lr {lr}: header ok, 2 log lines, test accuracy {acc}")

    run, cmd = train(kiln, os.path.join(work, "no-such-folder"))
    if run.returncode == 0 or "dataset-fashion-mnist" not in run.stderr + run.stdout:
        fail(f"{cmd}: a missing folder should fail naming dataset-fashion-mnist; got exit {run.returncode}, "
             f"{(run.stderr + run.stdout)[-600:]!r}")
    print("missing data: " + re.sub(r"\s+", " ", (run.stderr + run.stdout).strip())[:160])
    print("check_train_cli: ok")


if __name__ == "__main__":
    main()
