#!/usr/bin/env python3
"""The workloads of `kiln bench` in PyTorch, written as the same JSON (tool "torch").

    python3 bench/peers/torch_bench.py [--quick|--smoke] [--json FILE] [--workloads matmul,fusion] [--dry-run]

Methods follow ../shared/anchors/peers.py (the reference baselines): GPU work is timed
between two CUDA events (median after warm-up), host overheads and transfers by the
host clock around a call that ends in torch.cuda.synchronize(). float32 throughout,
TF32 off. Without PyTorch or a GPU it prints why and exits 0. See bench/README.md.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


def main(argv=None):
    args = common.parse_args("torch", argv)
    if args.dry_run:
        common.print_plan("torch", args)
        return 0
    try:
        import torch
    except ImportError as e:
        print(f"torch_bench: PyTorch is not installed ({e}); nothing measured. "
              "Run this on the GPU machine, where python3 has torch.")
        return 0
    gpu = torch.cuda.is_available() and torch.cuda.device_count() > 0
    if not gpu and not (args.cpu_only and set(args.workloads) <= {"train", "resnet50"}):
        print("torch_bench: PyTorch sees no CUDA GPU (torch.cuda.is_available() is False); nothing measured "
              "(without a GPU only --workloads train,resnet50 --cpu-only runs).")
        return 0
    return TorchBench(torch, args, gpu).run()


class TorchBench:
    def __init__(self, torch, args, gpu=True):
        self.torch = torch
        self.args = args
        self.sizes = args.sizes
        # Without a GPU (the train workload's CPU cases alone, --cpu-only) the device is the CPU and nothing
        # below times GPU work.
        self.dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
        torch.backends.cuda.matmul.allow_tf32 = False  # float32 matmul, as kiln's default
        torch.backends.cudnn.allow_tf32 = False
        torch.set_num_threads(os.cpu_count())
        self.rec = common.Recorder("torch", torch.__version__, torch.cuda.get_device_name(0) if gpu else "cpu",
                                   args.sizes, host_threads=torch.get_num_threads())
        self.timer = common.Timer(torch.cuda.synchronize, lambda: torch.cuda.Event(enable_timing=True),
                                  lambda s, e: s.elapsed_time(e)) if gpu else None
        self.copy_gbps = None  # device copy bandwidth (elementwise/copy), for the fusion floor

    def run(self):
        print(f"torch {self.torch.__version__} on {self.rec.doc['device']}, {self.rec.doc['host_threads']} CPU threads")
        table = {name: (lambda n=name: self.workload(n)) for name in common.WORKLOADS}
        common.run_workloads(self.rec, self.args, table)
        return common.finish(self.rec, self.args)

    def workload(self, name):
        try:
            getattr(self, name)()
        finally:
            if self.dev.type == "cuda":
                self.torch.cuda.synchronize()
                self.torch.cuda.empty_cache()

    # ------------------------------------------------------------------ matmul
    def matmul(self):
        torch = self.torch
        gen = torch.Generator(device=self.dev).manual_seed(0)
        for n in self.sizes.matmul:
            a = torch.randn(n, n, device=self.dev, generator=gen)
            b = torch.randn(n, n, device=self.dev, generator=gen)
            ha, hb = a.cpu(), b.cpu()
            warm, rep = common.cpu_matmul_reps(n)
            cpu_s, hc = common.host_median(lambda: ha @ hb, warm, rep)
            gpu_s = self.timer.events(lambda: a @ b, warm=2, rep=5)
            err = common.relative_error((a @ b).cpu().numpy(), hc.numpy())
            check = common.check_text(err < 1e-4, f"GPU vs CPU relative error {err:.2e}")
            flops = 2.0 * n ** 3
            self.rec.add("matmul", f"cpu_{n}", "seconds", cpu_s, note="torch CPU (MKL/OpenBLAS), all threads")
            self.rec.add("matmul", f"cpu_{n}", "tflops", flops / cpu_s / 1e12)
            self.rec.add("matmul", f"gpu_{n}", "seconds", gpu_s, check=check)
            self.rec.add("matmul", f"gpu_{n}", "tflops", flops / gpu_s / 1e12)
            self.rec.add("matmul", f"speedup_{n}", "x", cpu_s / gpu_s)

    # ------------------------------------------------------------------ timing
    def timing(self):
        torch = self.torch
        n = self.sizes.timing_n
        a = torch.randn(n, n, device=self.dev)
        b = torch.randn(n, n, device=self.dev)
        common.timing(self.rec, self.timer, torch.cuda.synchronize, lambda: a @ b)

    # ------------------------------------------------------------------ transfer
    def transfer(self):
        torch = self.torch
        for mb in self.sizes.transfer_mb:
            n = mb * (1 << 20) // 4
            h = torch.rand(n)
            hp = h.pin_memory()
            d = torch.empty(n, device=self.dev)
            rep = 5 if mb >= 256 else 20
            nbytes = 4.0 * n
            cases = [("h2d_pageable", lambda: d.copy_(h)),
                     ("h2d_pinned", lambda: d.copy_(hp, non_blocking=True)),
                     ("d2h_pageable", lambda: h.copy_(d)),
                     ("d2h_pinned", lambda: hp.copy_(d, non_blocking=True))]
            for name, fn in cases:
                s = self.timer.wall(fn, warm=2, rep=rep)
                self.rec.add("transfer", f"{name}_{mb}", "gbps", nbytes / s / 1e9)

    # ------------------------------------------------------------------ overlap
    def overlap(self):
        torch = self.torch
        chunks, n = self.sizes.overlap_chunks, self.sizes.overlap_chunk_n
        h_in = torch.empty(chunks, n).pin_memory()
        h_in.copy_(torch.rand(chunks, n, device=self.dev))
        h_out = torch.empty(chunks, n).pin_memory()
        bufs = [torch.empty(n, device=self.dev) for _ in range(2)]
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]

        def compute(x):
            for _ in range(10):
                x.mul_(2.0).add_(1.0)

        def pipeline(nstreams, with_compute=True):
            main = torch.cuda.current_stream()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record(main)
            for s in streams[:nstreams]:
                s.wait_event(start)
            for i in range(chunks):
                k = i % nstreams
                with torch.cuda.stream(streams[k]):  # stream k reuses buffer k, in stream order
                    bufs[k].copy_(h_in[i], non_blocking=True)
                    if with_compute:
                        compute(bufs[k])
                    h_out[i].copy_(bufs[k], non_blocking=True)
            for s in streams[:nstreams]:
                main.wait_stream(s)
            end.record(main)
            end.synchronize()
            return start.elapsed_time(end) / 1e3

        median_of = common.Timer.median_of
        copy_only = median_of(lambda: pipeline(1, with_compute=False))
        serial = median_of(lambda: pipeline(1))
        ref = h_in[0].to(self.dev)
        compute(ref)
        ok_serial = torch.equal(h_out[0], ref.cpu())
        h_out.zero_()
        overlapped = median_of(lambda: pipeline(2))
        ok = ok_serial and torch.equal(h_out[0], ref.cpu())
        ref = h_in[chunks - 1].to(self.dev)
        compute(ref)
        ok = ok and torch.equal(h_out[chunks - 1], ref.cpu())
        common.record_overlap(self.rec, serial, overlapped, copy_only, ok)

    # ------------------------------------------------------------------ logging
    def logging(self):
        torch = self.torch
        steps = self.sizes.logging_steps
        # As `kiln bench`: x = tanh(x @ w) on 100x100, w ~ N(0, 0.1), logging ||x||_F every step.
        gen = torch.Generator(device=self.dev).manual_seed(1)
        x0 = torch.randn(100, 100, device=self.dev, generator=gen)
        w = torch.randn(100, 100, device=self.dev, generator=gen) * 0.1

        def copy_every_step():
            norms = []
            x = x0
            for _ in range(steps):
                x = torch.tanh(x @ w)
                norms.append(torch.linalg.norm(x).item())  # synchronises every step
            return norms

        def on_device():
            log = torch.empty(steps, device=self.dev)
            x = x0
            for i in range(steps):
                x = torch.tanh(x @ w)
                log[i] = torch.linalg.norm(x)
            return log.cpu().tolist()  # one copy at the end

        out = {}
        t_every = self.timer.wall(lambda: out.__setitem__("every", copy_every_step()), warm=1, rep=5)
        t_device = self.timer.wall(lambda: out.__setitem__("device", on_device()), warm=1, rep=5)
        err = common.relative_error(out["device"], out["every"])
        check = common.check_text(err <= 1e-5, f"the two logs differ by {err:.2e}")
        self.rec.add("logging", "copy_every_step", "seconds", t_every, check=check)
        self.rec.add("logging", "on_device", "seconds", t_device, check=check)

    # ------------------------------------------------------------------ elementwise, reduction
    def elementwise(self):
        torch = self.torch
        n = self.sizes.elementwise_n
        a = torch.randn(n, device=self.dev)
        c = torch.randn(n, device=self.dev)
        b = torch.empty_like(a)
        t = self.timer.events(lambda: b.copy_(a))
        self.copy_gbps = 2 * 4 * n / t / 1e9
        self.rec.add("elementwise", "copy", "gbps", self.copy_gbps)
        t = self.timer.events(lambda: torch.add(a, c, out=b))
        self.rec.add("elementwise", "add", "gbps", 3 * 4 * n / t / 1e9)
        t = self.timer.events(lambda: torch.add(a, 1.0, out=b))
        self.rec.add("elementwise", "add_scalar", "gbps", 2 * 4 * n / t / 1e9)

    def reduction(self):
        torch = self.torch
        n = self.sizes.elementwise_n
        a = torch.randn(n, device=self.dev)
        t = self.timer.events(lambda: a.sum())
        got, want = a.sum().item(), a.double().sum().item()
        ok = abs(got - want) <= 1e-4 * n ** 0.5
        self.rec.add("reduction", "sum", "gbps", 4 * n / t / 1e9, check=common.check_text(ok, f"sum {got} vs {want}"))

    # ------------------------------------------------------------------ overhead
    def overhead(self):
        torch = self.torch
        calls = self.sizes.overhead_calls
        x = torch.randn(1000, device=self.dev)
        y = torch.randn(1000, device=self.dev)

        def small_add():
            z = x
            for _ in range(calls):
                z = z + y
            return z

        def small_add_out():
            for _ in range(calls):
                torch.add(x, y, out=x)

        self.rec.add("overhead", "small_add", "us_per_op", self.timer.wall(small_add) / calls * 1e6)
        self.rec.add("overhead", "small_add_out", "us_per_op", self.timer.wall(small_add_out) / calls * 1e6)
        # A CUDA graph of 100 adds, replayed 100 times (warm-up on a side stream, as PyTorch requires).
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                torch.add(x, y, out=x)
        torch.cuda.current_stream().wait_stream(s)
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            for _ in range(100):
                torch.add(x, y, out=x)

        def replay():
            for _ in range(calls // 100):
                g.replay()

        self.rec.add("overhead", "graph_replay", "us_per_op", self.timer.wall(replay) / calls * 1e6)
        # PyTorch has no public way to launch a raw kernel; torch.cuda._sleep(0) launches ATen's
        # one-thread spin kernel for 0 cycles, the nearest thing to an empty launch.
        if hasattr(torch.cuda, "_sleep"):
            def empty():
                for _ in range(calls):
                    torch.cuda._sleep(0)
            self.rec.add("overhead", "empty_launch", "us_per_op", self.timer.wall(empty) / calls * 1e6,
                         note="torch.cuda._sleep(0): ATen's spin kernel, 0 cycles")
        else:
            self.rec.skip("overhead", "empty_launch", "us_per_op", "this PyTorch has no torch.cuda._sleep")

    # ------------------------------------------------------------------ fusion
    def fusion(self):
        torch = self.torch
        n = self.sizes.fusion_n
        x = torch.randn(n, device=self.dev)

        def chain(x):
            return torch.tanh(x * 1.5 + 0.3) * x - torch.exp(-x * x) * 0.5

        eager_ms = self.timer.events(lambda: chain(x)) * 1e3
        if self.copy_gbps is None:  # elementwise not run: measure the copy bandwidth here, as there
            m = self.sizes.elementwise_n
            big = torch.randn(m, device=self.dev)
            out = torch.empty_like(big)
            self.copy_gbps = 2 * 4 * m / self.timer.events(lambda: out.copy_(big)) / 1e9
            del big, out

        def fused():
            compiled = torch.compile(chain)
            got = compiled(x)  # compiles here (tens of seconds the first time), outside the timing
            err = common.relative_error(got.cpu().numpy(), chain(x).cpu().numpy())
            return self.timer.events(lambda: compiled(x)), err

        common.record_fusion(self.rec, n, eager_ms, self.copy_gbps, fused, "torch.compile")

    # ------------------------------------------------------------------ alloc
    def alloc(self):
        torch = self.torch
        calls = self.sizes.alloc_calls

        def alloc_free():
            for _ in range(calls):
                torch.empty(1 << 18, device=self.dev)  # 1 MiB, freed at once back to the cache

        self.rec.add("alloc", "alloc_free_1MB", "us", self.timer.wall(alloc_free) / calls * 1e6)

    # ------------------------------------------------------------------ multigpu
    def multigpu(self):
        torch = self.torch
        gpus = torch.cuda.device_count()
        if gpus < 2:
            self.rec.skip_workload("multigpu", f"needs two GPUs, this machine has {gpus}")
            return
        n = self.sizes.multigpu_n
        d0, d1 = torch.device("cuda", 0), torch.device("cuda", 1)
        a0, b0 = torch.randn(n, n, device=d0), torch.randn(n, n, device=d0)
        a1, b1 = a0.to(d1), b0.to(d1)

        def sync_all():
            for i in range(gpus):
                torch.cuda.synchronize(i)

        def one_gpu():
            for _ in range(10):
                a0 @ b0
                a0 @ b0

        def two_gpus():
            for _ in range(10):
                a0 @ b0
                a1 @ b1

        common.multigpu(self.rec, sync_all, one_gpu, two_gpus)

    # ------------------------------------------------------------------ resnet50
    def resnet50(self):
        """kiln bench resnet50's cases (common.RESNET_CASES): torchvision's ResNet-50, batch 128, float32 and
        bfloat16 autocast channels-last, inference (also with torch.fx's conv/bn folding) and an SGD training step;
        CPU inference at batch 16."""
        torch, F = self.torch, self.torch.nn.functional
        import torchvision
        side, gpu_batch, cpu_batch = common.resnet_sizes(self.sizes.mode)
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's default for convolutions (kiln's too)
        try:
            gpu_cases = () if self.args.cpu_only else (False, True)  # --cpu-only: the CPU record alone
            if gpu_cases:
                x = torch.randn(gpu_batch, 3, side, side, device=self.dev)
                y = torch.randint(0, 1000, (gpu_batch,), device=self.dev)
            for amp in gpu_cases:
                suffix = "_bf16_cl" if amp else "_fp32"
                torch.manual_seed(0)
                net = torchvision.models.resnet50().to(self.dev).eval()
                inp = x
                if amp:
                    net = net.to(memory_format=torch.channels_last)
                    inp = x.to(memory_format=torch.channels_last)
                with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=amp):
                    ok = bool(torch.isfinite(net(inp)).all())
                    seconds = self.timer.events(lambda: net(inp), warm=3, rep=10)
                self.rec.add("resnet50", "infer" + suffix, "seconds", seconds,
                             check="ok" if ok else "the logits are not finite")
                # PyTorch's own batch-norm folding for inference (torch.fx's conv/bn fusion), beside kiln's
                from torch.fx.experimental.optimization import fuse as fx_fuse
                folded = fx_fuse(net)
                if amp:
                    folded = folded.to(memory_format=torch.channels_last)
                with torch.no_grad(), torch.autocast("cuda", torch.bfloat16, enabled=amp):
                    ok = bool(torch.isfinite(folded(inp)).all())
                    seconds = self.timer.events(lambda: folded(inp), warm=3, rep=10)
                self.rec.add("resnet50", "infer" + suffix + "_folded", "seconds", seconds,
                             note="torch.fx.experimental.optimization.fuse", check="ok" if ok else "not finite")
                del folded
                net.train()
                opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
                last = []

                def step():
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast("cuda", torch.bfloat16, enabled=amp):
                        loss = F.cross_entropy(net(inp), y)
                    loss.backward()
                    opt.step()
                    last[:] = [loss]
                seconds = self.timer.events(step, warm=3, rep=10)
                ok = bool(torch.isfinite(last[0]))
                self.rec.add("resnet50", "train" + suffix, "seconds", seconds,
                             check="ok" if ok else "the loss is not finite")
                del net, opt, last
            cpu_net = torchvision.models.resnet50().eval()
            xc = torch.randn(cpu_batch, 3, side, side)
            with torch.no_grad():
                seconds, out = common.host_median(lambda: cpu_net(xc), 1, 3)
            self.rec.add("resnet50", "cpu_infer_b16", "seconds", seconds,
                         note=f"batch {cpu_batch}", check="ok" if bool(torch.isfinite(out).all()) else "not finite")
        finally:
            torch.backends.cudnn.allow_tf32 = False
            torch.backends.cudnn.benchmark = False

    # ------------------------------------------------------------------ lstm
    def lstm(self):
        """kiln bench lstm's cases (common.LSTM_CASES): torch.nn.LSTM, 2 layers, forward (no_grad) and
        forward + backward of the output's sum on the GPU (cuDNN), forward + backward on the CPU."""
        torch = self.torch
        lstm_class = torch.nn.LSTM
        # cuDNN may use TF32 for float32 RNNs: PyTorch's default (torch.backends.cudnn.allow_tf32), and kiln's
        # (kiln::cudnn::allow_tf32), so both sides run alike.
        torch.backends.cudnn.allow_tf32 = True
        gpu_shape, cpu_shape = common.lstm_sizes(self.sizes.mode)

        def case(name, shape, dev, backward):
            steps, batch, inp, hidden = shape
            torch.manual_seed(0)
            lstm = lstm_class(inp, hidden, num_layers=2).to(dev)
            x = torch.randn(steps, batch, inp, device=dev, requires_grad=backward)
            out = []

            def step():
                if backward:
                    lstm.zero_grad(set_to_none=True)
                    x.grad = None
                    y, _ = lstm(x)
                    y.sum().backward()
                    out[:] = [x.grad]
                else:
                    with torch.no_grad():
                        out[:] = [lstm(x)[0]]
            if dev.type == "cuda":
                seconds = self.timer.events(step, warm=2, rep=10)
            else:
                seconds, _ = common.host_median(step, 1, 3)
            ok = bool(torch.isfinite(out[0]).all())
            self.rec.add("lstm", name, "seconds", seconds, note=f"T {steps}, batch {batch}, hidden {hidden}",
                         check="ok" if ok else "the result is not finite")

        case("fwd_fp32", gpu_shape, self.dev, False)
        case("fwd_bwd_fp32", gpu_shape, self.dev, True)
        case("small_fwd_bwd_fp32", cpu_shape, self.dev, True)  # the CPU cases' shape on the GPU
        case("cpu_fwd", cpu_shape, torch.device("cpu"), False)
        case("cpu_fwd_bwd", cpu_shape, torch.device("cpu"), True)

    # ------------------------------------------------------------------ generate
    def generate(self):
        """kiln bench generate's cases (common.GENERATE_CASES): GPT-2 written as Hugging Face's GPT2LMHeadModel
        (pre-norm blocks, tanh gelu, tied head, dropout 0) with a KV cache that grows by torch.cat per token as
        transformers' DynamicCache does, eager; greedy (argmax, .item() per token), batch 1, prompt 16."""
        torch = self.torch
        nn, F = torch.nn, torch.nn.functional
        gpu_tokens, cpu_tokens = common.generate_tokens(self.sizes.mode)

        class Block(nn.Module):
            def __init__(self, c, h):
                super().__init__()
                self.h = h
                self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
                self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
                self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

            def forward(self, x, cache):
                b, t, c = x.shape
                q, k, v = (y.view(b, t, self.h, c // self.h).transpose(1, 2)
                           for y in self.c_attn(self.ln_1(x)).split(c, dim=2))
                if cache:
                    k, v = torch.cat([cache[0], k], dim=2), torch.cat([cache[1], v], dim=2)
                cache[:] = [k, v]
                y = F.scaled_dot_product_attention(q, k, v, is_causal=t > 1)
                x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
                return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

        class GPT2(nn.Module):
            def __init__(self, layers, c, vocab=50257, positions=1024):
                super().__init__()
                self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(positions, c)
                self.h = nn.ModuleList([Block(c, c // 64) for _ in range(layers)])
                self.ln_f = nn.LayerNorm(c)

            def forward(self, idx, caches, past):
                pos = torch.arange(past, past + idx.shape[1], device=idx.device)
                x = self.wte(idx) + self.wpe(pos)
                for block, cache in zip(self.h, caches):
                    x = block(x, cache)
                return F.linear(self.ln_f(x[:, -1:]), self.wte.weight)  # the last position's logits

        def case(name, layers, width, dev, new_tokens):
            torch.manual_seed(0)
            model = GPT2(layers, width).to(dev).eval()
            prompt = torch.randint(0, 50257, (1, 16), device=dev)
            out = []

            @torch.no_grad()
            def run():
                caches = [[] for _ in model.h]
                logits = model(prompt, caches, 0)
                tokens = []
                for i in range(new_tokens):
                    token = int(logits[0, -1].argmax().item())
                    tokens.append(token)
                    if i + 1 < new_tokens:
                        logits = model(torch.tensor([[token]], device=dev), caches, 16 + i)
                out[:] = tokens
            if dev.type == "cuda":
                seconds = self.timer.events(run, warm=1, rep=5)
            else:
                seconds, _ = common.host_median(run, 1, 3)
            ok = len(out) == new_tokens and all(0 <= t < 50257 for t in out)
            self.rec.add("generate", name, "seconds", seconds / new_tokens,
                         note=f"{layers} layers of {width}, {new_tokens} new tokens",
                         check="ok" if ok else "a token outside the vocabulary")

        case("gpt2_124m_token", 12, 768, self.dev, gpu_tokens)
        case("cpu_d6_token", 6, 384, torch.device("cpu"), cpu_tokens)

    # ------------------------------------------------------------------ gpt2
    def gpt2(self):
        """kiln bench gpt2's cases (common.GPT2_CASES): GPT-2 as ../shared/anchors/peers_gpt.py builds it (pre-norm
        blocks, F.scaled_dot_product_attention causal, tanh gelu, tied head, c_proj init scaled by layers), the
        vocabulary padded to 50304; AdamW fused with weight decay 0.1 on 2-d weights; clip_grad_norm 1.0; bfloat16
        autocast on the GPU. Steps timed between CUDA events (median) after warm-up; peak memory; first_fast_s from
        building the model to the end of the first step within 10% of the median."""
        import math
        torch = self.torch
        nn, F = torch.nn, torch.nn.functional
        (gb, gt), (cb, ct), timed = common.gpt2_sizes(self.sizes.mode)

        class Block(nn.Module):
            def __init__(self, d, h):
                super().__init__()
                self.h = h
                self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
                self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
                self.c_fc, self.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

            def forward(self, x):
                b, t, c = x.shape
                q, k, v = (y.view(b, t, self.h, c // self.h).transpose(1, 2)
                           for y in self.c_attn(self.ln_1(x)).split(c, dim=2))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).contiguous().view(b, t, c)
                x = x + self.c_proj(y)
                return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))

        class GPT(nn.Module):
            def __init__(self, layers, d, ctx, vocab=50304):
                super().__init__()
                self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(ctx, d)
                self.h = nn.ModuleList([Block(d, d // 64) for _ in range(layers)])
                self.ln_f = nn.LayerNorm(d)
                for name, p in self.named_parameters():
                    if p.dim() == 2:
                        std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                        nn.init.normal_(p, 0.0, std)
                    elif name.endswith("bias"):
                        nn.init.zeros_(p)

            def forward(self, idx, targets):
                x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
                for b in self.h:
                    x = b(x)
                logits = F.linear(self.ln_f(x), self.wte.weight)
                return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))

        def case(name, layers, width, batch, seq, dev, bf16, compiled=False):
            start = time.perf_counter()
            torch.manual_seed(0)
            model = GPT(layers, width, max(seq, 64)).to(dev)
            flops_per_token = 6 * sum(p.numel() for p in model.parameters()) + 12 * layers * width * seq
            run_model = torch.compile(model) if compiled else model
            decay = [p for p in model.parameters() if p.dim() >= 2]
            other = [p for p in model.parameters() if p.dim() < 2]
            opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}],
                                    lr=6e-4, betas=(0.9, 0.95), eps=1e-8, fused=dev.type == "cuda")
            gen = torch.Generator(device=dev).manual_seed(1)
            x = torch.randint(0, 50257, (batch, seq), device=dev, generator=gen)
            y = torch.randint(0, 50257, (batch, seq), device=dev, generator=gen)
            out = {}

            def one():
                opt.zero_grad(set_to_none=True)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                    loss = run_model(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                out["loss"] = loss

            sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
            if dev.type == "cuda":
                torch.cuda.reset_peak_memory_stats()
            ends, times = [], []
            for _ in range(2 if self.sizes.mode == "smoke" else 6):
                t0 = time.perf_counter()
                one()
                sync()
                ends.append(time.perf_counter() - start)
                times.append(time.perf_counter() - t0)
            if dev.type == "cuda":
                seconds = self.timer.events(one, warm=1, rep=timed)
            else:
                seconds, _ = common.host_median(one, 1, timed)
            first_fast = next((e for e, t in zip(ends, times) if t <= 1.1 * seconds), ends[-1])
            loss = float(out["loss"].item())
            check = "ok" if math.isfinite(loss) else "the loss is not finite"
            tokens = batch * seq
            note = f"{layers} layers of {width}, batch {batch} x {seq}" + (", torch.compile" if compiled else "")
            self.rec.add("gpt2", name, "seconds", seconds, note=note, check=check)
            self.rec.add("gpt2", name, "tokens_per_s", tokens / seconds, check=check)
            self.rec.add("gpt2", name, "first_fast_s", first_fast, check=check)
            if dev.type == "cuda":
                self.rec.add("gpt2", name, "peak_gib", torch.cuda.max_memory_allocated() / 2**30, check=check)
            print(f"  {name}: {seconds * 1e3:.1f} ms/step, {tokens / seconds:.0f} tokens/s, first fast step at "
                  f"{first_fast:.1f} s", flush=True)
            del model, run_model, opt
            if dev.type == "cuda":
                torch.cuda.empty_cache()

        case("gpt2_124m_step", 12, 768, gb, gt, self.dev, True)
        if self.args.compile:
            case("gpt2_124m_step_compiled", 12, 768, gb, gt, self.dev, True, compiled=True)
        case("cpu_gpt2_d6_step", 6, 384, cb, ct, torch.device("cpu"), False)

    # ------------------------------------------------------------------ train
    def train(self):
        """kiln bench train's cases, as ../shared/anchors/peers_nn.py trains them (common.TRAIN_CASES)."""
        import numpy as np
        torch, F = self.torch, self.torch.nn.functional
        files = common.fashion_mnist_files(self.args.data)
        if files:
            (n, rows, cols), images = common.read_idx(files[0])
            _, labels = common.read_idx(files[1])
            x = np.frombuffer(images, dtype=np.uint8).reshape(n, rows * cols).astype(np.float32) / 255.0
            y = np.frombuffer(labels, dtype=np.uint8).astype(np.int64)
            note = "Fashion-MNIST"
        else:
            rng = np.random.default_rng(0)
            x = rng.random((60000, 784), dtype=np.float32)
            y = rng.integers(0, 10, 60000).astype(np.int64)
            note = f"random data of Fashion-MNIST's shape (no data set in {self.args.data})"
        if self.sizes.mode != "full":  # kiln bench train --quick trains on the first 12000 images too
            keep = 2000 if self.sizes.mode == "smoke" else 12000
            x, y = x[:keep], y[:keep]
        epochs = 5 if self.sizes.mode == "full" else 2  # as kiln bench train: the median of 4 after the first

        def mlp(units, dropout, dev):
            torch.manual_seed(0)
            layers = [torch.nn.Linear(784, units), torch.nn.ReLU()]
            if dropout:
                layers.append(torch.nn.Dropout(0.5))
            layers += [torch.nn.Linear(units, units), torch.nn.ReLU()]
            if dropout:
                layers.append(torch.nn.Dropout(0.5))
            layers.append(torch.nn.Linear(units, 10))
            return torch.nn.Sequential(*layers).to(dev)

        def sync(dev):
            if dev.type == "cuda":
                torch.cuda.synchronize()

        def epoch_times(model, opt, dev, host_batches):
            n = len(x)
            if not host_batches:
                xd, yd = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
            rng = np.random.default_rng(0)
            times, last = [], None
            for _ in range(epochs):
                sync(dev)
                t0 = time.perf_counter()
                perm = rng.permutation(n)
                if not host_batches:
                    permd = torch.from_numpy(perm).to(dev)
                for i in range(0, n, 100):
                    if host_batches:
                        idx = perm[i:i + 100]
                        xb, yb = torch.from_numpy(x[idx]).to(dev), torch.from_numpy(y[idx]).to(dev)
                    else:
                        idx = permd[i:i + 100]
                        xb, yb = xd[idx], yd[idx]
                    opt.zero_grad(set_to_none=True)
                    loss = F.cross_entropy(model(xb), yb)
                    loss.backward()
                    opt.step()
                    last = loss
                sync(dev)
                times.append(time.perf_counter() - t0)
            print(f"  {dev.type} epochs: " + ", ".join(f"{t:.4g} s" for t in times), flush=True)  # the spread
            return statistics.median(times[1:]), float(last)

        def graphed(model, opt, dev):
            xd, yd = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
            sx, sy = xd[:100].clone(), yd[:100].clone()
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    opt.zero_grad(set_to_none=True)
                    F.cross_entropy(model(sx), sy).backward()
                    opt.step()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            opt.zero_grad(set_to_none=True)
            with torch.cuda.graph(g):
                loss = F.cross_entropy(model(sx), sy)
                loss.backward()
                opt.step()
            times = []
            for _ in range(epochs):
                perm = torch.randperm(len(xd), device=dev)
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for i in range(0, len(xd), 100):
                    idx = perm[i:i + 100]
                    sx.copy_(xd[idx])
                    sy.copy_(yd[idx])
                    g.replay()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            return statistics.median(times[1:]), float(loss)

        def record(case, seconds, loss):
            ok = np.isfinite(loss)
            self.rec.add("train", case, "seconds", seconds, note=f"{note}; seconds per epoch, median after the first",
                         check=common.check_text(ok, f"final loss {loss}"))

        cpu = torch.device("cpu")
        if not self.args.cpu_only:
            self.train_gpu_cases(mlp, epoch_times, graphed, record, self.dev)
        m = mlp(100, True, cpu)
        record("cpu_mlp100_sgd", *epoch_times(m, torch.optim.SGD(m.parameters(), lr=0.01), cpu, True))
        m = mlp(1000, False, cpu)
        record("cpu_mlp1000_adam", *epoch_times(m, torch.optim.Adam(m.parameters()), cpu, True))

    def train_gpu_cases(self, mlp, epoch_times, graphed, record, gpu):
        torch = self.torch
        m = mlp(100, True, gpu)
        record("mlp100_sgd_hostbatches", *epoch_times(m, torch.optim.SGD(m.parameters(), lr=0.01), gpu, True))
        m = mlp(100, True, gpu)
        record("mlp100_sgdm_device",
               *epoch_times(m, torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9), gpu, False))
        m = mlp(1000, False, gpu)
        record("mlp1000_adam_device", *epoch_times(m, torch.optim.Adam(m.parameters()), gpu, False))
        m = mlp(1000, False, gpu)
        record("mlp1000_adam_graph", *graphed(m, torch.optim.Adam(m.parameters(), capturable=True), gpu))


if __name__ == "__main__":
    sys.exit(main())
