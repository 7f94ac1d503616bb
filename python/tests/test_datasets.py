"""kiln.data.DataLoader over Python datasets (python/src/datasets.cpp): map-style (__len__, __getitem__) and
iterable (__iter__) ones, run by the loader's worker threads, which take the GIL to call them."""

import threading

import numpy as np
import pytest

import kiln
from conftest import requires_gpu


class Squares:
    """Sample i is (i, i * i), and records the threads that read it."""

    def __init__(self, n):
        self.n = n
        self.threads = set()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.threads.add(threading.get_ident())
        return np.array([i], np.float32), np.array([i * i], np.int64)


def test_map_dataset_batches_are_stacked_samples_with_two_workers():
    data = Squares(50)
    loader = kiln.data.DataLoader(data, batch_size=8, shuffle=True, seed=5, workers=2)
    assert len(loader) == 7 and loader.num_samples == 50
    for _ in range(2):  # two epochs, each covering every sample once
        seen = []
        for x, y in loader:
            assert x.dtype == kiln.float32 and y.dtype == kiln.int64 and x.shape[1:] == (1,)
            np.testing.assert_array_equal(np.asarray(y), np.asarray(x).astype(np.int64) ** 2)
            seen += np.asarray(x)[:, 0].astype(int).tolist()
        assert sorted(seen) == list(range(50)) and seen != list(range(50))
    assert threading.get_ident() not in data.threads


def test_single_array_samples_give_array_batches_and_three_fields_a_tuple():
    class Single:
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return np.full((2,), float(i))

    batches = list(kiln.data.DataLoader(Single(), batch_size=2))
    assert [b.tolist() for b in batches] == [[[0.0, 0.0], [1.0, 1.0]], [[2.0, 2.0], [3.0, 3.0]], [[4.0, 4.0]]]

    class Three:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return [i, 2.0 * i, np.ones(3) * i]

    a, b, c = next(iter(kiln.data.DataLoader(Three(), batch_size=4)))
    assert a.tolist() == [0, 1, 2, 3] and b.tolist() == [0.0, 2.0, 4.0, 6.0] and c.shape == (4, 3)


def test_iterable_dataset_shards_by_worker_info():
    infos = []

    class Stream:
        def __iter__(self):
            info = kiln.data.get_worker_info()
            infos.append((info.id, info.num_workers))
            for i in range(info.id, 20, info.num_workers):
                yield np.float64(i), np.int64(-i)

    loader = kiln.data.DataLoader(Stream(), batch_size=3, workers=2)
    seen = []
    for x, y in loader:
        np.testing.assert_array_equal(np.asarray(y), -np.asarray(x).astype(np.int64))
        seen += np.asarray(x).astype(int).tolist()
    assert sorted(seen) == list(range(20))
    assert sorted(infos) == [(0, 2), (1, 2)]
    assert kiln.data.get_worker_info() is None
    with pytest.raises(TypeError, match="no len"):
        len(loader)
    with pytest.raises(ValueError):
        kiln.data.DataLoader(Stream(), shuffle=True)


def test_an_unsharded_stream_repeats_in_every_worker_as_pytorchs():
    class Stream:
        def __iter__(self):
            return iter(range(4))

    seen = sorted(v for b in kiln.data.DataLoader(Stream(), batch_size=2, workers=2) for v in b.tolist())
    assert seen == [0, 0, 1, 1, 2, 2, 3, 3]


def test_leaving_an_epoch_early_and_errors_in_the_dataset_do_not_hang():
    data = Squares(400)
    loader = kiln.data.DataLoader(data, batch_size=2, workers=2)
    for _ in range(3):
        for index, (x, _) in enumerate(loader):  # the workers are ahead when the loop leaves
            if index == 1:
                break
    assert len(list(loader)) == 200

    class Broken:
        def __len__(self):
            return 10

        def __getitem__(self, i):
            if i == 7:
                raise KeyError(f"sample {i} is missing")
            return np.float32(i)

    with pytest.raises(KeyError, match="sample 7"):
        list(kiln.data.DataLoader(Broken(), batch_size=2, workers=2))


def test_one_array_gives_batches_of_its_rows_and_set_epoch_resumes():
    loader = kiln.data.DataLoader(np.arange(10.0).reshape(5, 2), batch_size=2)
    assert [b.tolist() for b in loader] == [[[0.0, 1.0], [2.0, 3.0]], [[4.0, 5.0], [6.0, 7.0]], [[8.0, 9.0]]]
    loader.set_epoch(0, 2)  # the epoch's batch 2 is the next one
    assert [b.tolist() for b in loader] == [[[8.0, 9.0]]]
    assert [b.tolist() for b in kiln.data.DataLoader([[1.0], [2.0]], batch_size=2)] == [[[1.0], [2.0]]]
    shuffled = kiln.data.DataLoader(kiln.arange(6), batch_size=6, shuffle=True, seed=1)
    first, second = next(iter(shuffled)).tolist(), next(iter(shuffled)).tolist()
    assert sorted(first) == list(range(6)) and sorted(second) == list(range(6)) and first != second


def test_collate_fn_receives_the_samples_and_makes_the_batch():
    class Ragged:
        """Sequences of length i % 3 + 1, padded by the collate_fn to the batch's longest."""

        def __len__(self):
            return 7

        def __getitem__(self, i):
            return np.arange(i % 3 + 1, dtype=np.float32) + 10 * i, i

    def pad(samples):
        assert isinstance(samples, list) and all(isinstance(s, tuple) and len(s) == 2 for s in samples)
        longest = max(s[0].shape[0] for s in samples)
        x = np.zeros((len(samples), longest), np.float32)
        for row, (seq, _) in enumerate(samples):
            x[row, :seq.shape[0]] = np.asarray(seq)
        return x, [int(label) for _, label in samples], [s[0].shape[0] for s in samples]

    batches = list(kiln.data.DataLoader(Ragged(), batch_size=3, workers=2, collate_fn=pad))
    assert len(batches) == 3
    x, labels, lengths = batches[0]
    assert x.tolist() == [[0, 0, 0], [10, 11, 0], [20, 21, 22]]
    assert labels.tolist() == [0, 1, 2] and lengths.tolist() == [1, 2, 3]
    assert batches[2][0].tolist() == [[60]]
    total = kiln.data.DataLoader(Ragged(), batch_size=7, collate_fn=lambda s: np.float64(len(s)))
    assert [float(b) for b in total] == [7.0]  # one array-like result: the batch is that array
    with pytest.raises(TypeError, match="collate_fn"):
        kiln.data.DataLoader(kiln.ones((4, 2)), kiln.ones(4), collate_fn=pad)


@requires_gpu
def test_a_python_datasets_batches_go_to_the_gpu():
    loader = kiln.data.DataLoader(Squares(20), batch_size=4, shuffle=True, workers=2, device=kiln.cuda(0))
    seen = []
    for x, y in loader:
        assert x.device == kiln.cuda(0) and y.device == kiln.cuda(0)
        np.testing.assert_array_equal(y.numpy(), x.numpy().astype(np.int64) ** 2)
        seen += x.numpy()[:, 0].astype(int).tolist()
    assert sorted(seen) == list(range(20))
