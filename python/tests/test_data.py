"""kiln.data (python/src/data.cpp): the DataLoader's batches and the Fashion-MNIST reader."""

import os

import numpy as np
import pytest

import kiln


def test_dataloader_batches_cover_the_data_in_order():
    x = kiln.arange(20.0).reshape(10, 2)
    y = kiln.arange(10)
    loader = kiln.data.DataLoader(x, y, batch_size=4)
    assert len(loader) == 3 and loader.num_samples == 10
    batches = list(loader)
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[2][0].tolist() == [[16.0, 17.0], [18.0, 19.0]]
    assert [len(list(loader)) for _ in range(2)] == [3, 3]  # each iteration is a new epoch


def test_dataloader_shuffles_each_epoch_and_keeps_pairs():
    x = kiln.arange(50).reshape(50, 1) * 10
    y = kiln.arange(50)
    loader = kiln.data.DataLoader(x, y, batch_size=8, shuffle=True, seed=3, drop_last=True)
    assert len(loader) == 6
    epochs = []
    for _ in range(2):
        seen = []
        for xb, yb in loader:
            assert xb.shape == (8, 1) and xb.device == kiln.cpu()
            np.testing.assert_array_equal(xb.numpy()[:, 0], yb.numpy() * 10)  # rows stay paired
            seen += yb.tolist()
        assert len(seen) == 48 and len(set(seen)) == 48
        epochs.append(seen)
    assert epochs[0] != epochs[1] and epochs[0] != sorted(epochs[0])
    again = [yb.tolist() for _, yb in kiln.data.DataLoader(x, y, batch_size=8, shuffle=True, seed=3, drop_last=True)]
    assert sum(again, []) == epochs[0]  # the shuffle is a function of (seed, epoch)


def test_dataloader_puts_batches_on_its_device():
    d = kiln.try_gpu()
    xb, yb = next(iter(kiln.data.DataLoader(np.ones((6, 3), np.float32), np.zeros(6, np.int64), batch_size=6,
                                            device=d)))
    assert xb.device == d and yb.device == d and xb.dtype == kiln.float32


def test_dataloader_errors_name_the_fix():
    with pytest.raises(ValueError, match="workers"):
        kiln.data.DataLoader(kiln.ones((2, 1)), kiln.ones(2), workers=0)


@pytest.mark.skipif(not os.path.exists("/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"),
                    reason="no Fashion-MNIST (dataset-fashion-mnist)")
def test_fashion_mnist_test_split():
    images, labels = kiln.data.fashion_mnist(False)
    assert images.shape == (10000, 784) and images.dtype == kiln.float32 and labels.dtype == kiln.int64
    assert 0.0 <= kiln.min(images).item() and kiln.max(images).item() <= 1.0
    assert labels[:5].tolist() == [9, 2, 1, 1, 6]  # the first test labels of Fashion-MNIST
    counts = np.bincount(labels.numpy(), minlength=10)
    assert counts.tolist() == [1000] * 10
