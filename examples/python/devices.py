"""Walkthrough 1 in Python (d2l's "GPUs"): which devices exist, their properties, arrays on a device, and
falling back to the CPU (cf. examples/devices.cpp).

    PYTHONPATH=build/cpu/python python3 examples/python/devices.py

The same program runs everywhere: try_gpu() is the CPU when there is no GPU, so code written for cuda:0 still
runs (slowly) on a laptop.
"""

import sys

import kiln


def main():
    n = kiln.num_gpus()
    d = kiln.try_gpu()  # cuda:0, or the CPU
    print(f"num_gpus()     = {n}")
    print(f"try_gpu()      = {d}")
    print(f"try_gpu({n})     = {kiln.try_gpu(n)}   (a GPU that does not exist falls back to the CPU)")
    print(f"try_all_gpus() = {kiln.try_all_gpus()}")
    try:
        kiln.cuda(n)
        error = None
    except kiln.DeviceError as e:  # cuda(i) does not fall back: a missing GPU is an error that says so
        error = str(e)
        print(f"cuda({n}) raises DeviceError: {error}")
    print("device properties:")
    for device in [kiln.cpu()] + [kiln.cuda(i) for i in range(n)]:
        p = kiln.device_properties(device)
        print(f"  {device!s:7} {p['name']}, {p['multiprocessors']} "
              f"{'SMs' if device.type == 'cuda' else 'hardware threads'}")
    # d2l: x = torch.ones(2, 3, device=try_gpu()); y = torch.rand(2, 3, device=try_gpu(1)); z = x.cuda(1) ...
    x = kiln.ones((2, 3), device=d)
    y = kiln.random.uniform(size=(2, 3), device=kiln.try_gpu(1))
    z = x.to(y.device)  # arrays meet on one device: move one of them there first
    total = z + y
    print(f"x on {x.device}, y on {y.device}: (x.to(y.device) + y).device = {total.device}")
    mixed = None
    if d != kiln.cpu():  # kiln never copies behind your back: operands on two devices are an error
        try:
            x + kiln.ones((2, 3), device=kiln.cpu())
        except kiln.DeviceError as e:
            mixed = str(e)
            print(f"x + a CPU array raises DeviceError: {mixed}")
    return {"num_gpus": n, "try_gpu": d, "all": kiln.try_all_gpus(), "cuda_n_error": error, "mixed_error": mixed,
            "sum": total.to(kiln.cpu()).numpy(), "y": y.to(kiln.cpu()).numpy()}


if __name__ == "__main__":
    r = main()
    sys.exit(0 if r["cuda_n_error"] else 1)
