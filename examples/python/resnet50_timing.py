"""Timing ResNet-50 inference on the CPU and on the GPU, first wrongly, then rightly, in Python (cf.
examples/resnet50_timing.cpp and the PyTorch walkthrough it follows).

    PYTHONPATH=build/cuda/python python3 examples/python/resnet50_timing.py [BATCH]   (128 with a GPU, 4 without)

The network (kiln.models.resnet50, torchvision's layout, random weights) classifies a batch of 224x224 images
in evaluation mode without gradients. On the GPU the forward returns once its kernels are queued, so:
  1. the first call pays one-time costs (cuDNN's algorithm choice, kernel loading, the allocator's first
     blocks): it is reported apart, and the rest warm up first;
  2. a host clock around the call without synchronizing measures the queueing only (WRONG: this is how a
     walkthrough finds a speed-up that does not exist);
  3. a host clock around the call and synchronize() measures the result's latency (right);
  4. events around the call measure the GPU's time without stalling the host between calls (right).
On the CPU the forward is done when it returns, so the ways agree there.
"""

import statistics
import sys
import time

import kiln


def time_inference(device, batch, repeat, model="resnet50", size=224):
    kiln.random.seed(0)
    net = getattr(kiln.models, model)(device=device)
    net.eval()
    x = kiln.random.normal(size=(batch, 3, size, size), device=device)
    with kiln.no_grad():  # inference: no graph is recorded
        kiln.synchronize()
        t0 = time.perf_counter()
        logits = net(x)
        kiln.synchronize()
        first = time.perf_counter() - t0  # one-time costs included
        for _ in range(2):  # warm-up
            logits = net(x)
        kiln.synchronize()
        no_sync, with_sync, events = [], [], []
        for _ in range(repeat):
            t0 = time.perf_counter()
            logits = net(x)
            no_sync.append(time.perf_counter() - t0)  # WRONG on a GPU: the work is only queued
            kiln.synchronize()  # outside the measurement, so the next sample starts idle
        for _ in range(repeat):
            t0 = time.perf_counter()
            logits = net(x)
            kiln.synchronize()  # right: the clock stops when the logits exist
            with_sync.append(time.perf_counter() - t0)
        if device.type == "cuda":
            start, end = kiln.Event(device), kiln.Event(device)
            for _ in range(repeat):
                start.record()
                logits = net(x)
                end.record()
                end.synchronize()
                events.append(start.elapsed_time(end) / 1e3)
    top = kiln.argmax(logits, axis=1)
    print(f"  {device}: logits {logits.shape}, top-1 class of image 0: {top[0].item()}")
    return {"first": first, "no_sync": statistics.median(no_sync), "with_sync": statistics.median(with_sync),
            "events": statistics.median(events) if events else statistics.median(with_sync),
            "logits": logits.to(kiln.cpu())}


def report(where, t, batch):
    print(f"{where}, batch {batch}:")
    print(f"  first call (one-time costs included)   {t['first'] * 1e3:10.2f} ms")
    print(f"  host clock, no synchronize (WRONG)     {t['no_sync'] * 1e3:10.2f} ms")
    print(f"  host clock + synchronize               {t['with_sync'] * 1e3:10.2f} ms")
    print(f"  events (kiln.Event)                    {t['events'] * 1e3:10.2f} ms"
          + ("" if where.startswith("cuda") else "  (the CPU: the host clock)"))


def main(batch=None, model="resnet50", size=224, cpu_repeat=2, gpu_repeat=10):
    have_gpu = kiln.num_gpus() > 0
    batch = batch or (128 if have_gpu else 4)
    kiln.cudnn.set_benchmark(True)  # time cuDNN's algorithms once per shape (in the first call), keep the fastest
    results = {"cpu": time_inference(kiln.cpu(), batch, cpu_repeat, model, size)}
    report("cpu", results["cpu"], batch)
    if not have_gpu:
        print("no GPU: on the CPU the three ways agree; run on a GPU machine for the wrong one's surprise")
        return results
    results["cuda:0"] = g = time_inference(kiln.cuda(0), batch, gpu_repeat, model, size)
    report("cuda:0", g, batch)
    c = results["cpu"]["with_sync"]
    print(f"speed-up of the GPU over the CPU: {c / g['no_sync']:.0f}x measured wrongly (no synchronize), "
          f"{c / g['with_sync']:.1f}x with synchronize, {c / g['events']:.1f}x with events")
    return results


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else None)
