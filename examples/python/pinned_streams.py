"""Walkthrough 5 in Python (CuPy's pinned memory and streams): overlap transfers and compute with pinned
memory, two streams and events (cf. examples/pinned_streams.cpp).

    PYTHONPATH=build/cuda/python python3 examples/python/pinned_streams.py

Chunks of a host array go to the GPU, are computed on (x = x * 2 + 1, ten times) and come back. One stream
("copies") does the host->device and device->host copies, the other ("work") the arithmetic; events order
them: compute on chunk i waits for its upload, the download of chunk i waits for its compute. The next chunk
uploads while this one computes, so copies hide behind compute. Copies are asynchronous only from and to
pinned (page-locked) host memory. The results are checked against the same float32 arithmetic in NumPy;
without a GPU the same pipeline runs on the CPU, where streams are no-ops and memory is not pinned.
"""

import sys

import numpy as np

import kiln

STEPS = 10


def compute(x):
    for _ in range(STEPS):  # in place, on the current stream
        kiln.multiply(x, 2.0, out=x)
        kiln.add(x, 1.0, out=x)


def pipeline(d, copies, work, h_in, h_out, buffers):
    """Runs the chunks through the streams (the same stream twice gives the serial version); returns the
    milliseconds between its first and last event."""
    chunks = len(buffers)
    uploaded = [kiln.Event(d, timing=False) for _ in range(chunks)]
    computed = [kiln.Event(d, timing=False) for _ in range(chunks)]
    start, end = kiln.Event(d), kiln.Event(d)

    def upload(i):
        with copies:
            buffers[i].copy_(h_in[i], non_blocking=True)  # pinned -> device: returns at once
            uploaded[i].record(copies)

    start.record(copies)
    upload(0)
    for i in range(chunks):
        if i + 1 < chunks:
            upload(i + 1)  # prefetch the next chunk while this one computes
        uploaded[i].wait(work)  # compute waits for this chunk's upload (the host does not)
        with work:
            compute(buffers[i])
            computed[i].record(work)
        computed[i].wait(copies)  # the download waits for the compute
        with copies:
            h_out[i].copy_(buffers[i], non_blocking=True)  # device -> pinned: returns at once
    end.record(copies)  # the last download is the last work of all
    end.synchronize()  # only now may the host read h_out
    return start.elapsed_time(end)


def main(chunks=8, n=1 << 16):
    have_gpu = kiln.num_gpus() > 0
    d = kiln.try_gpu()
    kiln.random.seed(5)
    source = kiln.random.uniform(-1.0, 1.0, size=(chunks, n))
    h_in = source.pin_memory() if have_gpu else source
    h_out = kiln.empty_pinned((chunks, n)) if have_gpu else kiln.empty((chunks, n))
    print(f"host buffers pinned: {'yes' if h_in.is_pinned and h_out.is_pinned else 'no'}, "
          f"{chunks} chunks of {n * 4 / 2**20:.2f} MiB")
    want = source.numpy().copy()
    for _ in range(STEPS):  # the same float32 operations: each step rounds once, as kiln's
        want = want * np.float32(2) + np.float32(1)
    copies, work = kiln.Stream(d, non_blocking=True), kiln.Stream(d, non_blocking=True)
    with work:  # device buffers belong to the compute stream
        buffers = [kiln.empty(n, device=d) for _ in range(chunks)]
    times, wrong = {}, {}
    for name, (c, w) in {"one stream": (work, work), "two streams": (copies, work)}.items():
        h_out.fill(0)
        pipeline(d, c, w, h_in, h_out, buffers)  # warm-up: kernels compiled, memory touched
        h_out.fill(0)
        times[name] = pipeline(d, c, w, h_in, h_out, buffers)
        wrong[name] = int((h_out.numpy() != want).sum())
        print(f"{name:<12} {times[name]:8.3f} ms  ({wrong[name]} of {h_out.size} values wrong)")
    if have_gpu:
        saved = 100.0 * (times["one stream"] - times["two streams"]) / times["one stream"]
        print(f"overlap saved {saved:.0f}% of the serial time")
    return {"times": times, "wrong": wrong, "pinned": h_in.is_pinned and h_out.is_pinned}


if __name__ == "__main__":
    r = main()
    sys.exit(0 if not any(r["wrong"].values()) else 1)
