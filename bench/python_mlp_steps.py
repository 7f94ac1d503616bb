#!/usr/bin/env python3
"""A fixed number of training steps of bench/python_mlp.py's model (784-100-100-10, ReLU, dropout 0.5, SGD lr 0.01,
batch 100) from Python, for counting instructions per step rather than timing: bench/mlp_steps.cpp runs the same
steps from C++, so the two counts differ only by what the Python package adds to a step.

Modes: `loop` makes python_mlp.py's calls one by one (zero_grad, the model, cross_entropy, backward, step,
`total += loss.detach()`); `trainstep` makes one kiln.train.TrainStep call a step (`kiln bench train`'s step).
The data are kiln.random's after kiln.random.seed(0) (2000 images of Fashion-MNIST's shape), the batches a fixed
permutation of them (i * 7919 mod 2000), so the C++ driver draws the same numbers and prints the same loss.

Per-step instructions: run WARMUP steps and then STEPS or none under callgrind, on one thread, and divide the
difference of the two totals by STEPS (the start, the data and the warm-up cancel):

    export OMP_NUM_THREADS=1 PYTHONPATH=build/vg/python
    valgrind --tool=callgrind python3 bench/python_mlp_steps.py loop 5 0
    valgrind --tool=callgrind python3 bench/python_mlp_steps.py loop 5 20

Valgrind 3.19 knows no AVX-512: build kiln for it without -march=native (docs/python.md, "A training step
counted"). Prints the mode and the mean loss of all the steps run.

Usage: python_mlp_steps.py {loop,trainstep} WARMUP STEPS
"""

import sys

N, BATCH = 2000, 100


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("loop", "trainstep"):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    mode, steps = sys.argv[1], int(sys.argv[2]) + int(sys.argv[3])

    import kiln

    nn, device = kiln.nn, kiln.cpu()
    kiln.random.seed(0)
    x = kiln.random.uniform(0.0, 1.0, (N, 784), dtype=kiln.float32, device=device)
    y = kiln.random.randint(0, 10, (N,), device=device)
    kiln.random.seed(0)
    model = nn.Sequential(nn.Linear(784, 100, device=device), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(100, 100, device=device), nn.ReLU(), nn.Dropout(0.5),
                          nn.Linear(100, 10, device=device))
    optimizer = kiln.optim.SGD(model.parameters(), lr=0.01)
    model.train()
    perm = kiln.remainder(kiln.arange(N) * 7919, N)
    total = kiln.zeros((), dtype=kiln.float32, device=device)
    step = kiln.train.TrainStep(model, optimizer, accuracy=False) if mode == "trainstep" else None
    for s in range(steps):
        i = s % (N // BATCH) * BATCH
        idx = perm[i:i + BATCH]
        xb, yb = kiln.take(x, idx, axis=0), kiln.take(y, idx, axis=0)
        if step is not None:
            step(xb, yb)
            continue
        optimizer.zero_grad()
        loss = nn.cross_entropy(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.detach()
    mean = step.mean_loss() if step is not None else total.item() / steps
    print(f"{mode} {mean:.6f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
