#!/usr/bin/env python3
"""bench/bench_layers.cpp's table in PyTorch: ResNet-50's layers one at a time, float32 NCHW against
bfloat16 channels-last, so a layer where kiln trails shows up by name beside bench_layers' output.

    python3 bench/peers/torch_layers.py [--cpu] [--batch N] [--filter SUBSTRING] [--network]

cudnn.benchmark on (as bench_layers sets kiln's); float32 convolutions may use TF32 (PyTorch's default for
cuDNN, kiln's too). Each case: 3 untimed calls, then the median of 10 calls, each between two CUDA events
(--cpu: on the CPU, timed by the host clock, as bench_layers --cpu). Without PyTorch or a GPU it prints why
and exits 0. --network (with --cpu): as bench_layers --cpu --network, torchvision's ResNet-50 inference forward
walked module by module (out-of-place ReLU, as kiln's walk), the host time per kind of layer, median of 3 passes.
"""

import argparse
import statistics
import sys
import time


def network(torch, batch):
    import torchvision

    torch.manual_seed(0)
    net = torchvision.models.resnet50().eval()
    x = torch.randn(batch, 3, 224, 224)

    def walk(acc):
        def timed(kind, f):
            t = time.perf_counter()
            y = f()
            acc[kind] = acc.get(kind, 0.0) + time.perf_counter() - t
            return y

        def conv(m, a):
            return timed(f"conv {m.kernel_size[0]}x{m.kernel_size[1]}", lambda: m(a))

        def bn(m, a):
            return timed("batch norm", lambda: m(a))

        relu = torch.relu
        y = bn(net.bn1, conv(net.conv1, x))
        y = timed("relu", lambda: relu(y))
        y = timed("max pool", lambda: net.maxpool(y))
        for stage in (net.layer1, net.layer2, net.layer3, net.layer4):
            for block in stage:
                z = y
                for i in (1, 2, 3):
                    z = bn(getattr(block, f"bn{i}"), conv(getattr(block, f"conv{i}"), z))
                    if i < 3:
                        z = timed("relu", lambda: relu(z))
                r = y
                if block.downsample is not None:
                    r = bn(block.downsample[1], conv(block.downsample[0], y))
                y = timed("add", lambda: z + r)
                y = timed("relu", lambda: relu(y))
        y = timed("avg pool", lambda: net.avgpool(y))
        return timed("linear", lambda: net.fc(torch.flatten(y, 1)))

    with torch.no_grad():
        want = net(x)
        got = walk({})
        if not torch.allclose(want, got, rtol=1e-5, atol=1e-5):
            print("torch_layers: the walk does not reproduce the forward", file=sys.stderr)
            return 1
        passes, totals = {}, []
        for _ in range(3):
            acc = {}
            walk(acc)
            for k, v in acc.items():
                passes.setdefault(k, []).append(v)
            totals.append(sum(acc.values()))
    print(f"torch_layers --network on cpu, batch {batch}: ResNet-50 float32 inference, host time per kind of layer "
          f"(PyTorch {torch.__version__}, {torch.get_num_threads()} threads)")
    print(f"{'layer':<12} {'ms per pass':>12}")
    for k in sorted(passes):
        print(f"{k:<12} {1e3 * statistics.median(passes[k]):>12.1f}")
    print(f"{'total':<12} {1e3 * statistics.median(totals):>12.1f}")
    return 0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cpu", action="store_true", help="run on the CPU (host clock)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--filter", default="")
    p.add_argument("--network", action="store_true", help="per kind of layer over a ResNet-50 forward (with --cpu)")
    args = p.parse_args(argv)
    try:
        import torch
        import torchvision  # noqa: F401  (the bottleneck block)
    except ImportError as e:
        print(f"torch_layers: PyTorch/torchvision is not installed ({e}); nothing measured.")
        return 0
    if not args.cpu and not torch.cuda.is_available():
        print("torch_layers: PyTorch sees no CUDA GPU (--cpu runs on the CPU); nothing measured.")
        return 0
    if args.network:
        if not args.cpu:
            print("torch_layers: --network times the CPU's layers by the host clock; add --cpu", file=sys.stderr)
            return 2
        return network(torch, args.batch)
    torch.backends.cudnn.benchmark = True
    F = torch.nn.functional
    dev = torch.device("cpu" if args.cpu else "cuda:0")
    n = args.batch

    def inp(shape, dtype, cl, grad=False):
        a = torch.randn(shape, device=dev).to(dtype)
        if cl:
            a = a.contiguous(memory_format=torch.channels_last)
        return a.requires_grad_(grad)

    def conv_fwd(dtype, cl):
        x, w = inp((n, 64, 56, 56), dtype, cl), inp((64, 64, 3, 3), dtype, cl)
        return lambda: F.conv2d(x, w, padding=1)

    def conv1x1(dtype, cl):
        x, w = inp((n, 256, 56, 56), dtype, cl), inp((64, 256, 1, 1), dtype, cl)
        return lambda: F.conv2d(x, w)

    def conv_bwd_input(dtype, cl):
        g, w = inp((n, 64, 56, 56), dtype, cl), inp((64, 64, 3, 3), dtype, cl)
        return lambda: torch.nn.grad.conv2d_input((n, 64, 56, 56), w, g, padding=1)

    def conv_bwd_weight(dtype, cl):
        g, x = inp((n, 64, 56, 56), dtype, cl), inp((n, 64, 56, 56), dtype, cl)
        return lambda: torch.nn.grad.conv2d_weight(x, (64, 64, 3, 3), g, padding=1)

    def stem(dtype, cl):
        x, w = inp((n, 3, 224, 224), dtype, cl), inp((64, 3, 7, 7), dtype, cl)
        return lambda: F.conv2d(x, w, stride=2, padding=3)

    def bn(c, hw, mode, relu=False):
        """A batch norm of c channels on hw x hw planes: "train", "eval" or "backward" (its backward alone:
        autograd.grad of a kept forward with retain_graph); relu: followed by a ReLU (PyTorch's two ops)."""
        act = F.relu if relu else (lambda t: t)

        def make(dtype, cl):
            rm, rv = torch.zeros(c, device=dev), torch.ones(c, device=dev)
            if mode != "backward":
                x = inp((n, c, hw, hw), dtype, cl)
                return lambda: act(F.batch_norm(x, rm, rv, training=mode == "train"))
            x = inp((n, c, hw, hw), dtype, cl, grad=True)
            w = torch.ones(c, device=dev, requires_grad=True)
            b = torch.zeros(c, device=dev, requires_grad=True)
            y = act(F.batch_norm(x, rm, rv, w, b, training=True))
            g = inp((n, c, hw, hw), dtype, cl)
            return lambda: torch.autograd.grad(y, (x, w, b), g, retain_graph=True)
        return make

    def add_relu(dtype, cl):
        x, y = inp((n, 256, 56, 56), dtype, cl), inp((n, 256, 56, 56), dtype, cl)
        return lambda: F.relu(x + y)

    def relu(dtype, cl):
        x = inp((n, 256, 56, 56), dtype, cl)
        return lambda: F.relu(x)

    def add(dtype, cl):
        x, y = inp((n, 256, 56, 56), dtype, cl), inp((n, 256, 56, 56), dtype, cl)
        return lambda: x + y

    def max_pool(dtype, cl):
        x = inp((n, 64, 112, 112), dtype, cl)
        return lambda: F.max_pool2d(x, 3, 2, 1)

    def bottleneck(dtype, cl):
        import torchvision
        torch.manual_seed(0)
        net = torchvision.models.resnet50().to(dev)
        if cl:
            net = net.to(memory_format=torch.channels_last)
        block = net.layer1[1]
        x = inp((n, 256, 56, 56), torch.float32, cl)

        def step():
            with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
                y = block(x)
            y.float().sum().backward()
        return step

    cases = [
        ("conv 3x3 64->64 @56 forward", conv_fwd),
        ("conv 1x1 256->64 @56 forward", conv1x1),
        ("conv 3x3 64->64 @56 backward input", conv_bwd_input),
        ("conv 3x3 64->64 @56 backward weight", conv_bwd_weight),
        ("conv 7x7/2 3->64 @224 forward", stem),
        ("batch norm 256 @56 training", bn(256, 56, "train")),
        ("batch norm 256 @56 evaluation", bn(256, 56, "eval")),
        ("batch norm 256 @56 backward", bn(256, 56, "backward")),
        ("batch norm+relu 64 @56 training", bn(64, 56, "train", relu=True)),
        ("batch norm+relu 64 @56 backward", bn(64, 56, "backward", relu=True)),
        ("batch norm 2048 @7 training", bn(2048, 7, "train")),
        ("batch norm 2048 @7 backward", bn(2048, 7, "backward")),
        ("relu 256 @56", relu),
        ("residual add 256 @56", add),
        ("residual add+relu 256 @56", add_relu),
        ("max pool 3x3/2 64 @112", max_pool),
        ("bottleneck 256 @56 forward+backward", bottleneck),
    ]
    name = f"cpu ({torch.get_num_threads()} threads)" if args.cpu else torch.cuda.get_device_name(0)
    print(f"torch_layers on {name}, batch {n}, torch {torch.__version__}: "
          "ResNet-50's layers, float32 NCHW vs bfloat16 channels-last")
    print(f"{'layer':<34} {'fp32 NCHW':>14} {'bf16 NHWC':>14}")
    for name, make in cases:
        if args.filter and args.filter not in name:
            continue
        cells = []
        for dtype, cl in ((torch.float32, False), (torch.bfloat16, True)):
            try:
                fn = make(dtype, cl)
                for _ in range(3):
                    fn()
                times = []
                for _ in range(10):
                    if args.cpu:
                        t0 = time.perf_counter()
                        fn()
                        times.append(time.perf_counter() - t0)
                        continue
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    fn()
                    b.record()
                    b.synchronize()
                    times.append(a.elapsed_time(b) / 1e3)
                s = statistics.median(times)
                cells.append(f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} us")
            except Exception as e:  # a case PyTorch cannot run: say so in its cell
                cells.append(f"error: {e}"[:40])
        print(f"{name:<34} {cells[0]:>14} {cells[1]:>14}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
