"""Chainer's MNIST walkthrough in Python, on Fashion-MNIST: an MLP 784-100-100-10 written as a Module subclass
(as Chainer's `class MLP(Chain)`), SGD, batch 100; each mini-batch copied to the device by the DataLoader,
zero_grad, backward, update; then the test accuracy (cf. examples/mnist_mlp.cpp).

    PYTHONPATH=build/cpu/python python3 examples/python/mnist_mlp.py [EPOCHS [TRAIN_IMAGES]]

Needs Debian's dataset-fashion-mnist (make demo installs it; or $KILN_FASHION_MNIST names a folder with the
files): without it the example says so and exits 0.
"""

import os
import sys
import time

# The DataLoader's worker threads share the cores with OpenMP's: OpenMP threads that spin between parallel
# regions starve them, so they wait passively unless told otherwise.
# It must be set before kiln (and its OpenMP runtime) is loaded.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import kiln  # noqa: E402
from kiln import nn  # noqa: E402


class MLP(nn.Module):
    def __init__(self, n_units=100, n_out=10):
        super().__init__()
        self.l1 = nn.Linear(784, n_units)  # Modules assigned to attributes become children, as in Chainer
        self.l2 = nn.Linear(n_units, n_units)
        self.l3 = nn.Linear(n_units, n_out)

    def forward(self, x):
        h1 = kiln.relu(self.l1(x))
        h2 = kiln.relu(self.l2(h1))
        return self.l3(h2)


def main(epochs=1, train_images=None):
    folder = os.environ.get("KILN_FASHION_MNIST", "/usr/share/datasets/fashion-mnist")
    if not os.path.exists(os.path.join(folder, "t10k-labels-idx1-ubyte.gz")):
        print(f"skipped: no Fashion-MNIST in {folder} (apt-get install dataset-fashion-mnist)")
        return None
    device = kiln.try_gpu()
    kiln.random.seed(0)
    x_train, y_train = kiln.data.fashion_mnist(True, folder)
    x_test, y_test = kiln.data.fashion_mnist(False, folder)
    if train_images:
        x_train, y_train = x_train[:train_images], y_train[:train_images]
    model = MLP()
    model.to(device)
    optimizer = kiln.optim.SGD(model.parameters(), lr=0.1)
    train = kiln.data.DataLoader(x_train, y_train, batch_size=100, shuffle=True, device=device)
    test = kiln.data.DataLoader(x_test, y_test, batch_size=1000, device=device)
    history = []
    for epoch in range(1, epochs + 1):
        start = time.perf_counter()
        total = kiln.zeros((), dtype=kiln.float64, device=device)  # the epoch's loss stays on the device
        model.train()
        for x, t in train:
            loss = nn.cross_entropy(model(x), t)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total = total + loss.detach().astype(kiln.float64)
        train_loss = total.item() / len(train)
        seconds = time.perf_counter() - start
        model.eval()
        correct, seen = 0.0, 0
        with kiln.no_grad():
            for x, t in test:
                correct += nn.accuracy(model(x), t).item() * x.shape[0]
                seen += x.shape[0]
        history.append({"train_loss": train_loss, "test_accuracy": correct / seen, "seconds": seconds})
        print(f"epoch {epoch} on {device}: train loss {train_loss:.4f}, test accuracy {correct / seen:.4f} "
              f"({seconds:.2f} s)")
    return history


if __name__ == "__main__":
    args = [int(v) for v in sys.argv[1:3]]
    h = main(*args)
    sys.exit(0 if h is None or h[-1]["test_accuracy"] > 0.6 else 1)
